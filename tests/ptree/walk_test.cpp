// Walks: for_each, for_each_with_path, map, map_into, fold, for_each_storage, fold_storage; selection tags;
// arity 1 to 6 with mixed constness and mixed scalars.
#include "common.hpp"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

using ptest::check_vec_eq;
using ptest::seq;
using ptest::seq_fixed;

namespace {

template <class T>
struct Model {
  using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  std::vector<Dense<T>> layers;
  std::map<std::string, Dense<T>> blocks;
  std::optional<Vec> scale;
  std::variant<Dense<T>, Eigen::Matrix<T, 3, 1>> enc;
  pt::Buffer<Vec> stats;
  T gain;
  GEOMOPT_PTREE(layers, blocks, scale, enc, stats, gain)
};

// Leaves in walk order: layers.0.weight(2x3) layers.0.bias(2) layers.1.weight(1x2) layers.1.bias(1)
// blocks.a.weight(1x1) blocks.a.bias(1) blocks.b.weight(2x1) blocks.b.bias(2) scale(2) enc(3) gain; buffer stats(2).
template <class T>
Model<T> make_model(double start = 0) {
  Model<T> m;
  m.layers = {make_dense<T>(2, 3, start + 0), make_dense<T>(1, 2, start + 10)};
  m.blocks["b"] = make_dense<T>(2, 1, start + 20);
  m.blocks["a"] = make_dense<T>(1, 1, start + 30);
  m.scale = seq<typename Model<T>::Vec>(2, start + 40);
  m.enc = seq_fixed<Eigen::Matrix<T, 3, 1>>(start + 50);
  m.stats = pt::Buffer<typename Model<T>::Vec>{seq<typename Model<T>::Vec>(2, start + 60)};
  m.gain = static_cast<T>(start + 70);
  return m;
}

const std::vector<std::string> model_paths = {"layers.0.weight",
                                              "layers.0.bias",
                                              "layers.1.weight",
                                              "layers.1.bias",
                                              "blocks.a.weight",
                                              "blocks.a.bias",
                                              "blocks.b.weight",
                                              "blocks.b.bias",
                                              "scale",
                                              "enc",
                                              "gain"};
const std::vector<long long> model_sizes = {6, 2, 2, 1, 1, 1, 2, 2, 2, 3, 1};
// Sum of each leaf of make_model(0), by hand: seq values.
const std::vector<double> model_sums = {0 + 1 + 2 + 3 + 4 + 5, 6 + 7, 10 + 11, 12, 30, 31, 20 + 21, 22 + 23, 40 + 41,
                                        50 + 51 + 52,          70};

}  // namespace

TEST_CASE("for_each visits trainable leaves in walk order, handing the leaves themselves") {
  auto m = make_model<double>();
  std::vector<long long> sizes;
  std::vector<const void*> addresses;
  pt::for_each(
      [&](auto& leaf) {
        sizes.push_back(ptest::numel(leaf));
        addresses.push_back(static_cast<const void*>(&leaf));
      },
      m);
  CHECK(sizes == model_sizes);
  REQUIRE(addresses.size() == 11);
  CHECK(addresses[0] == static_cast<const void*>(&m.layers[0].weight));
  CHECK(addresses[4] == static_cast<const void*>(&m.blocks.at("a").weight));
  CHECK(addresses[8] == static_cast<const void*>(&*m.scale));
  CHECK(addresses[9] == static_cast<const void*>(&std::get<1>(m.enc)));
  CHECK(addresses[10] == static_cast<const void*>(&m.gain));

  // Mutation through for_each reaches the tree.
  pt::for_each([](auto& leaf) { ptest::poke(leaf); }, m);
  CHECK(m.layers[1].bias[0] == 13.0);
  CHECK(m.gain == 71.0);
  CHECK((*m.stats)[0] == 60.0);  // buffers are not params
}

TEST_CASE("for_each_with_path gives dotted paths, map keys as segments") {
  const auto m = make_model<double>();
  std::vector<std::string> paths;
  pt::for_each_with_path([&](const pt::Path& p, const auto&) { paths.push_back(std::string(p.str())); }, m);
  CHECK(paths == model_paths);

  std::vector<std::string> buffer_paths;
  pt::for_each_with_path(
      pt::buffers, [&](const pt::Path& p, const auto&) { buffer_paths.push_back(std::string(p.str())); }, m);
  CHECK(buffer_paths == std::vector<std::string>{"stats"});

  std::vector<std::string> all_paths;
  pt::for_each_with_path(
      pt::all, [&](const pt::Path& p, const auto&) { all_paths.push_back(std::string(p.str())); }, m);
  std::vector<std::string> expected_all = model_paths;
  expected_all.insert(expected_all.end() - 1, "stats");
  CHECK(all_paths == expected_all);

  // Two trees walked together with their paths.
  const auto m2 = make_model<float>(100);
  int calls = 0;
  pt::for_each_with_path(
      [&](const pt::Path& p, const auto& a, const auto& b) {
        CHECK(ptest::total(b) == doctest::Approx(ptest::total(a) + 100.0 * static_cast<double>(ptest::numel(a))));
        CHECK(std::string(p.str()) == model_paths[static_cast<std::size_t>(calls)]);
        ++calls;
      },
      m, m2);
  CHECK(calls == 11);

  // The root is "".
  Eigen::VectorXd root(2);
  std::string root_path = "unset";
  pt::for_each_with_path([&](const pt::Path& p, const auto&) { root_path = std::string(p.str()); }, root);
  CHECK(root_path == "");
}

TEST_CASE("fold accumulates in walk order - fold_storage over blocks") {
  const auto m = make_model<double>();
  const double sum = pt::fold([](double acc, const auto& leaf) { return acc + ptest::total(leaf); }, 0.0, m);
  double expected = 0;
  for (double s : model_sums) expected += s;
  CHECK(sum == doctest::Approx(expected));

  const auto order = pt::fold(
      [](std::vector<double> acc, const auto& leaf) {
        acc.push_back(ptest::total(leaf));
        return acc;
      },
      std::vector<double>{}, m);
  CHECK(order == model_sums);

  const double sum_storage =
      pt::fold_storage([](double acc, const auto& block) { return acc + ptest::total(block); }, 0.0, m);
  CHECK(sum_storage == doctest::Approx(expected));

  const double with_buffers = pt::fold(
      pt::all, [](double acc, const auto& leaf) { return acc + ptest::total(leaf); }, 0.0, m);
  CHECK(with_buffers == doctest::Approx(expected + 60 + 61));
  const double only_buffers = pt::fold(
      pt::buffers, [](double acc, const auto& leaf) { return acc + ptest::total(leaf); }, 0.0, m);
  CHECK(only_buffers == doctest::Approx(60 + 61));
  const double storage_buffers = pt::fold_storage(
      pt::buffers, [](double acc, const auto& b) { return acc + ptest::total(b); }, 0.0, m);
  CHECK(storage_buffers == doctest::Approx(60 + 61));

  // fold over two trees: a dot product.
  const auto m2 = make_model<double>(1);
  const double dot = pt::fold(
      [](double acc, const auto& a, const auto& b) {
        if constexpr (ptest::is_eigen_v<decltype(a)>) {
          return acc + a.cwiseProduct(b).sum();
        } else {
          return acc + a * b;
        }
      },
      0.0, m, m2);
  const Eigen::VectorXd fa =
      ptest::vec({0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 30, 31, 20, 21, 22, 23, 40, 41, 50, 51, 52, 70});
  CHECK(dot == doctest::Approx(fa.dot((fa.array() + 1).matrix())));
}

TEST_CASE("for_each_storage visits each leaf's storage once in walk order") {
  auto m = make_model<double>();
  std::vector<long long> sizes;
  pt::for_each_storage([&](auto& block) { sizes.push_back(ptest::numel(block)); }, m);
  CHECK(sizes == model_sizes);
  pt::for_each_storage([](auto& block) { ptest::poke(block); }, m);
  CHECK(m.layers[0].weight(1, 2) == 6.0);
  std::vector<long long> buffer_sizes;
  pt::for_each_storage(
      pt::buffers, [&](auto& block) { buffer_sizes.push_back(ptest::numel(block)); }, m);
  CHECK(buffer_sizes == std::vector<long long>{2});
}

TEST_CASE("map builds a new tree of the first tree's type - buffers copied") {
  const auto a = make_model<double>();
  const auto b = make_model<double>(1000);
  const auto c = pt::map(
      [](const auto& x, const auto& y) {
        if constexpr (ptest::is_eigen_v<decltype(x)>) {
          return (x + 2 * y).eval();
        } else {
          return x + 2 * y;
        }
      },
      a, b);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(c)>, Model<double>>);
  CHECK(c.layers[0].weight(1, 2) == doctest::Approx(5 + 2 * 1005));
  CHECK(c.blocks.at("b").bias[1] == doctest::Approx(23 + 2 * 1023));
  CHECK((*c.scale)[0] == doctest::Approx(40 + 2 * 1040));
  CHECK(std::get<1>(c.enc)[2] == doctest::Approx(52 + 2 * 1052));
  CHECK(c.gain == doctest::Approx(70 + 2 * 1070));
  CHECK((*c.stats)[1] == 61.0);  // copied from the first tree, not mapped
  CHECK(a.gain == 70.0);         // sources untouched

  // map with all: buffers mapped too.
  const auto d = pt::map(
      pt::all, [](const auto& x) { return ptest::bumped(x); }, a);
  CHECK((*d.stats)[1] == 62.0);
  CHECK(d.gain == 71.0);
  // map with buffers: only buffers mapped.
  const auto e = pt::map(
      pt::buffers, [](const auto& x) { return ptest::bumped(x); }, a);
  CHECK((*e.stats)[0] == 61.0);
  CHECK(e.gain == 70.0);
  CHECK(e.layers[0].weight(0, 0) == 0.0);
}

TEST_CASE("map_into writes into dest in place from the sources") {
  auto dest = make_model<double>(5);
  const auto a = make_model<double>();
  const auto b = make_model<float>(1);
  const double* dest_w = dest.layers[0].weight.data();
  pt::map_into(
      [](const auto& x, const auto& y) {
        if constexpr (ptest::is_eigen_v<decltype(x)>) {
          return x - y.template cast<double>();  // an expression: evaluated straight into dest's storage
        } else {
          return x - static_cast<double>(y);
        }
      },
      dest, a, pt::map([](const auto& y) { return ptest::bumped(y); }, b));
  CHECK(dest.layers[0].weight.data() == dest_w);  // in place
  // a - (b + 1) = x - (x + 1 + 1) = -2 everywhere, gain too (but gain is a scalar: cast needs care)
  CHECK(dest.layers[0].weight(1, 1) == -2.0);
  CHECK((*dest.scale)[1] == -2.0);
  CHECK(std::get<1>(dest.enc)[0] == -2.0);
  CHECK(dest.gain == -2.0);
  CHECK((*dest.stats)[0] == 65.0);  // buffer of dest untouched by a params walk

  // map_into with buffers: only the buffer is written.
  pt::map_into(
      pt::buffers, [](const auto& x) { return ptest::bumped(x); }, dest, a);
  CHECK((*dest.stats)[0] == 61.0);
  CHECK(dest.gain == -2.0);
}

TEST_CASE("arity 1 to 6 with mixed constness and mixed scalars") {
  auto t0 = make_model<double>(0);
  const auto t1 = make_model<float>(1);
  auto t2 = make_model<double>(2);
  const auto t3 = make_model<double>(3);
  auto t4 = make_model<float>(4);
  const auto t5 = make_model<double>(5);

  // for_each at each arity: leaf of t0 += sum of the others' leaves.
  auto add_all = [](auto& x0, const auto&... xs) {
    if constexpr (ptest::is_eigen_v<decltype(x0)>) {
      ((x0 += xs.template cast<double>()), ...);
    } else {
      ((x0 += static_cast<double>(xs)), ...);
    }
  };
  pt::for_each(add_all, t0);
  CHECK(t0.gain == 70.0);
  pt::for_each(add_all, t0, t1);
  CHECK(t0.gain == 70.0 + 71);
  pt::for_each(add_all, t0, t1, t2);
  CHECK(t0.gain == 141.0 + 71 + 72);
  pt::for_each(add_all, t0, t1, t2, t3);
  CHECK(t0.gain == 284.0 + 71 + 72 + 73);
  pt::for_each(add_all, t0, t1, t2, t3, t4);
  CHECK(t0.gain == 500.0 + 71 + 72 + 73 + 74);
  pt::for_each(add_all, t0, t1, t2, t3, t4, t5);
  CHECK(t0.gain == 790.0 + 71 + 72 + 73 + 74 + 75);
  CHECK(t0.layers[0].weight(0, 0) == 0.0 + 1 + (1 + 2) + (1 + 2 + 3) + (1 + 2 + 3 + 4) + (1 + 2 + 3 + 4 + 5));

  // fold over 6 trees: sum over leaves and trees of the totals.
  const double s6 =
      pt::fold([](double acc, const auto&... xs) { return acc + (ptest::total(xs) + ...); }, 0.0, make_model<double>(0),
               t1, make_model<double>(2), t3, static_cast<const Model<float>&>(t4), t5);
  double base = 0;
  for (double v : model_sums) base += v;
  // each tree k adds k per entry: 23 entries
  CHECK(s6 == doctest::Approx(6 * base + 23.0 * (0 + 1 + 2 + 3 + 4 + 5)));

  // fold_storage over 6.
  const double st6 = pt::fold_storage([](double acc, const auto&... xs) { return acc + (ptest::total(xs) + ...); }, 0.0,
                                      make_model<double>(0), t1, make_model<double>(2), t3, t4, t5);
  CHECK(st6 == doctest::Approx(s6));

  // map_into with 5 sources (6 trees).
  auto dest = make_model<double>(0);
  pt::map_into(
      [](const auto&... xs) {
        if constexpr ((ptest::is_eigen_v<decltype(xs)> && ...)) {
          return ((xs.template cast<double>()) + ...).eval();
        } else {
          return (static_cast<double>(xs) + ...);
        }
      },
      dest, t1, make_model<double>(2), t3, t4, t5);
  CHECK(dest.gain == 71.0 + 72 + 73 + 74 + 75);
  CHECK(dest.layers[1].bias[0] == 12.0 * 5 + 1 + 2 + 3 + 4 + 5);

  // map over 6 trees (result has the first tree's type).
  const auto m6 = pt::map(
      [](const auto& x0, const auto&... xs) {
        using X = std::remove_cvref_t<decltype(x0)>;
        if constexpr (ptest::is_eigen_v<X>) {
          return X(((xs.template cast<typename X::Scalar>()) + ...));
        } else {
          return static_cast<X>((static_cast<double>(xs) + ...));
        }
      },
      t1, make_model<double>(0), t2, t3, t4, t5);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(m6)>, Model<float>>);
  CHECK(m6.layers[0].bias[1] == doctest::Approx(7.0 * 5 + 0 + 2 + 3 + 4 + 5 + (t2.layers[0].bias[1] - 9)));

  // for_each_storage over 6, the first mutable.
  auto u0 = make_model<double>(0);
  pt::for_each_storage(add_all, u0, t1, t2, t3, t4, t5);
  CHECK(u0.gain == 70.0 + 71 + t2.gain + 73 + 74 + 75);
}
