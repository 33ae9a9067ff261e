// Zero heap allocations: for_each, map_into, fold, flatten_into, unflatten_into, for_each_storage and fold_storage
// allocate nothing on a nested tree (vectors, maps, optionals, a variant, ties, a buffer) at arities 1 to 6.
//
// Allocations are counted by count_allocations.hpp, at the allocator: operator new's and Eigen's alike.

#include "../support/count_allocations.hpp"

#include "common.hpp"

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

namespace {

using M = Eigen::MatrixXd;
using V = Eigen::VectorXd;

struct Layer {
  M weight;
  V bias;
  GEOMOPT_PTREE(weight, bias)
};

struct Tree {
  std::vector<Layer> layers;
  std::map<std::string, Layer> blocks;
  std::optional<V> scale;
  std::optional<V> none;
  std::variant<Layer, Eigen::Vector3d, double> enc;
  std::shared_ptr<M> tie_a;
  std::shared_ptr<M> tie_b;
  std::array<Eigen::Matrix2d, 2> arr;
  std::tuple<double, V> tup;
  std::pair<Eigen::Array3d, double> pr;
  pt::Buffer<V> stats;
  double gain;
  GEOMOPT_PTREE(layers, blocks, scale, none, enc, tie_a, tie_b, arr, tup, pr, stats, gain)
};

Layer make_layer(Eigen::Index out, Eigen::Index in, double start) {
  return Layer{ptest::seq<M>(out, in, start), ptest::seq<V>(out, start + 100)};
}

Tree make_tree(double k) {
  Tree t;
  t.layers = {make_layer(3, 2, k), make_layer(2, 3, k + 1), make_layer(1, 2, k + 2)};
  t.blocks["encoder"] = make_layer(2, 2, k + 3);
  t.blocks["decoder"] = make_layer(2, 1, k + 4);
  t.scale = ptest::seq<V>(4, k + 5);
  t.none = std::nullopt;
  t.enc = make_layer(2, 2, k + 6);
  t.tie_a = std::make_shared<M>(ptest::seq<M>(3, 3, k + 7));
  t.tie_b = t.tie_a;
  t.arr = {ptest::seq_fixed<Eigen::Matrix2d>(k + 8), ptest::seq_fixed<Eigen::Matrix2d>(k + 9)};
  t.tup = {k + 10, ptest::seq<V>(5, k + 11)};
  t.pr = {ptest::seq_fixed<Eigen::Array3d>(k + 12), k + 13};
  t.stats = pt::Buffer<V>{ptest::seq<V>(3, k + 14)};
  t.gain = k + 15;
  return t;
}

using alloc_count::allocations_of;

// The per-leaf work: no allocation (in-place coefficient-wise Eigen operations and reductions).
struct AddAll {
  template <class X0, class... Xs>
  void operator()(X0& x0, const Xs&... xs) const {
    x0 *= 0.5;
    ((x0 += xs), ...);
  }
};
struct SumAll {
  template <class... Xs>
  double operator()(double acc, const Xs&... xs) const {
    return acc + (ptest::total(xs) + ... + 0.0);
  }
};
struct SumExpr {  // returns an Eigen expression (no temporary) or a double
  template <class... Xs>
  auto operator()(const Xs&... xs) const {
    return (xs + ...) * 0.25;
  }
};

template <std::size_t... I>
void run_arity(std::array<Tree, 7>& trees, std::index_sequence<I...>) {
  constexpr std::size_t n = sizeof...(I);
  CAPTURE(n);
  Tree& t0 = trees[0];
  const std::array<Tree, 7>& ct = trees;
  double sink = 0;

  CHECK_MESSAGE(allocations_of([&] { pt::for_each(AddAll{}, t0, ct[I + 1]...); }) == 0, "for_each");

  CHECK_MESSAGE(allocations_of([&] { pt::for_each(pt::all, AddAll{}, t0, ct[I + 1]...); }) == 0, "for_each(all)");

  CHECK_MESSAGE(allocations_of([&] { sink += pt::fold(SumAll{}, 0.0, t0, ct[I + 1]...); }) == 0, "fold");

  CHECK_MESSAGE(allocations_of([&] { pt::for_each_storage(AddAll{}, t0, ct[I + 1]...); }) == 0, "for_each_storage");

  CHECK_MESSAGE(allocations_of([&] { sink += pt::fold_storage(SumAll{}, 0.0, t0, ct[I + 1]...); }) == 0,
                "fold_storage");

  // map_into: dest plus n - 1 sources here (1..5); 6 sources in their own subcase.
  if constexpr (n > 0) {
    CHECK_MESSAGE(allocations_of([&] { pt::map_into(SumExpr{}, t0, ct[I + 1]...); }) == 0, "map_into");
  }

  CHECK(sink != 0.0);
}

}  // namespace

TEST_CASE("walks allocate nothing at arities 1 to 6") {
  std::array<Tree, 7> trees = {make_tree(0), make_tree(1), make_tree(2), make_tree(3),
                               make_tree(4), make_tree(5), make_tree(6)};
  // Arity 1..6 for for_each/fold/for_each_storage/fold_storage is 0..5 extra trees; map_into gets 1..6 sources.
  SUBCASE("arity 1") { run_arity(trees, std::index_sequence<>{}); }
  SUBCASE("arity 2") { run_arity(trees, std::index_sequence<0>{}); }
  SUBCASE("arity 3") { run_arity(trees, std::index_sequence<0, 1>{}); }
  SUBCASE("arity 4") { run_arity(trees, std::index_sequence<0, 1, 2>{}); }
  SUBCASE("arity 5") { run_arity(trees, std::index_sequence<0, 1, 2, 3>{}); }
  SUBCASE("arity 6") { run_arity(trees, std::index_sequence<0, 1, 2, 3, 4>{}); }
  SUBCASE("map_into with 6 sources") {
    Tree& t0 = trees[0];
    CHECK(allocations_of(
              [&] { pt::map_into(SumExpr{}, t0, trees[1], trees[2], trees[3], trees[4], trees[5], trees[6]); }) == 0);
    // and it did write: gain = (sum of gains 16..21) * 0.25
    CHECK(t0.gain == doctest::Approx((16.0 + 17 + 18 + 19 + 20 + 21) * 0.25));
  }
}

TEST_CASE("the counter works (so a zero above means something)") {
  CHECK(allocations_of([] {
          auto p = std::make_unique<int>(3);
          std::vector<double> v(10);
          v[0] = *p;
          CHECK(v[0] == 3.0);
        }) >= 2);
  CHECK(allocations_of([] {
          Eigen::VectorXd v(100);
          v.setZero();
          CHECK(v.sum() == 0.0);
        }) >= 1);
}

TEST_CASE("flatten_into and unflatten_into allocate nothing") {
  Tree t = make_tree(0);
  const Eigen::Index n = static_cast<Eigen::Index>(pt::count(t));
  Eigen::VectorXd v(n);
  Eigen::VectorXd w = Eigen::VectorXd::LinSpaced(n, 1, static_cast<double>(n));
  CHECK(allocations_of([&] { pt::flatten_into(v, t); }) == 0);
  CHECK(allocations_of([&] { pt::unflatten_into(t, w); }) == 0);
  // and they did their job
  CHECK(t.layers[0].weight(0, 0) == 1.0);
  CHECK(t.gain == static_cast<double>(n));
  pt::flatten_into(v, t);
  CHECK(ptest::same_values(v, w));
}

TEST_CASE("a walk that throws StructureError leaves the trees intact") {
  Tree a = make_tree(0);
  Tree b = make_tree(1);
  b.layers[2].bias.resize(5);
  b.layers[2].bias.setOnes();
  const auto snap_a = pt::flatten(a);
  const auto snap_b = pt::flatten(b);
  CHECK_THROWS_AS(pt::for_each(AddAll{}, a, b), geomopt::StructureError);
  CHECK_THROWS_AS(pt::map_into(SumExpr{}, a, b), geomopt::StructureError);
  CHECK_THROWS_AS(pt::for_each_storage(AddAll{}, a, b), geomopt::StructureError);
  CHECK(ptest::same_values(pt::flatten(a), snap_a));
  CHECK(ptest::same_values(pt::flatten(b), snap_b));

  Tree c = make_tree(1);
  c.tie_b = std::make_shared<M>(*c.tie_a);
  CHECK_THROWS_AS(pt::for_each(AddAll{}, a, c), geomopt::StructureError);
  CHECK(ptest::same_values(pt::flatten(a), snap_a));

  Tree d = make_tree(1);
  d.enc = 3.0;
  CHECK_THROWS_AS(pt::map_into(SumExpr{}, a, d), geomopt::StructureError);
  CHECK(ptest::same_values(pt::flatten(a), snap_a));
}
