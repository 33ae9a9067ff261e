// Partition (optimizers/partition.hpp): a tree's leaves split into groups by rules, each stepped by its own optimizer.
// A partition without transforms steps exactly as its groups' optimizers stepped alone (the other groups' leaves
// frozen) would, bitwise, with threads too; its transforms (one global clip norm, one non-finite decision, one moving
// average) cover every group; a leaf no group takes, or two take, is an error naming its path; so is a group that
// applies a transform of its own.
#include <doctest/doctest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <geomopt/optimizers.hpp>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../support/sanitized.hpp"

namespace {

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
template <class T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;

template <class T>
struct Block {
  Mat<T> q, k;                // attention matrices: Muon's
  geomopt::Stiefel<T> frame;  // manifold Adam's
  Vec<T> bias;                // AdamW's
  GEOMOPT_PTREE(q, k, frame, bias)
};

template <class T>
struct Net {
  std::vector<Block<T>> layers;
  Mat<T> head;  // a matrix outside the attention blocks: AdamW's
  T scale = 0;
  GEOMOPT_PTREE(layers, head, scale)
};

template <class T>
Net<T> make_net(unsigned seed) {
  geomopt::Rng rng(seed);
  std::normal_distribution<double> normal;
  auto draw = [&] { return static_cast<T>(normal(rng)); };
  Net<T> n;
  for (int l = 0; l < 2; ++l) {
    Block<T> b;
    b.q = Mat<T>::NullaryExpr(12, 8, [&] { return draw() / T(4); });
    b.k = Mat<T>::NullaryExpr(8, 12, [&] { return draw() / T(4); });
    b.frame = geomopt::Stiefel<T>::random_point(rng, 10, 3);
    b.bias = Vec<T>::NullaryExpr(8, [&] { return draw(); });
    n.layers.push_back(b);
  }
  n.head = Mat<T>::NullaryExpr(4, 8, [&] { return draw(); });
  n.scale = T(0.5);
  return n;
}

// The gradient of sum(0.5 (x - 0.3)^2 + 0.05 x^4) over every entry: nonlinear, so any difference in a step shows.
template <class T>
Net<T> gradient(const Net<T>& n) {
  Net<T> g = n;
  auto grad = [](const auto& x) { return ((x.array() - T(0.3)) + T(0.2) * x.array().cube()).matrix().eval(); };
  for (std::size_t l = 0; l < n.layers.size(); ++l) {
    g.layers[l].q = grad(n.layers[l].q);
    g.layers[l].k = grad(n.layers[l].k);
    g.layers[l].frame.value() = grad(n.layers[l].frame.value());
    g.layers[l].bias = grad(n.layers[l].bias);
  }
  g.head = grad(n.head);
  g.scale = (n.scale - T(0.3)) + T(0.2) * n.scale * n.scale * n.scale;
  return g;
}

bool attention(const geomopt::LeafInfo& l) { return l.matrix() && l.path.str().starts_with("layers."); }

template <class T>
bool same_bits(const Net<T>& a, const Net<T>& b) {
  const Vec<T> fa = geomopt::ptree::flatten(a), fb = geomopt::ptree::flatten(b);
  return fa.size() == fb.size() &&
         std::memcmp(fa.data(), fb.data(), sizeof(T) * static_cast<std::size_t>(fa.size())) == 0;
}

// Every state array as (path.name, bytes), in the order the state walks them.
template <class State>
std::vector<std::pair<std::string, std::string>> arrays(const State& s) {
  std::vector<std::pair<std::string, std::string>> out;
  s.for_each_slot([&](const std::string& path, std::string_view name, const auto& data) {
    const auto* p = reinterpret_cast<const char*>(data.data());
    out.emplace_back(path + "." + std::string(name), std::string(p, p + data.size() * sizeof(*data.data())));
  });
  return out;
}

// The three optimizers of the test's partition, each made with `threads`.
struct Three {
  geomopt::Muon muon;
  geomopt::Adam adam;
  geomopt::AdamW adamw;
  explicit Three(int threads)
      : muon({.lr = 0.02, .weight_decay = 0.01}, {.threads = threads}),
        adam({.lr = 0.01, .amsgrad = true}, {.threads = threads}),
        adamw({.lr = 0.005, .weight_decay = 0.1}, {.threads = threads}) {}
};

auto make_partition(int threads, geomopt::StepTransforms transforms = {}) {
  Three o(threads);
  return geomopt::Partition(transforms, geomopt::group("attention", std::move(o.muon), attention),
                            geomopt::group("frames", std::move(o.adam), geomopt::kind_is("Stiefel")),
                            geomopt::group("rest", std::move(o.adamw)));
}

}  // namespace

TEST_CASE("a partition steps as its groups' optimizers stepped alone would, bitwise") {
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    Net<float> a = make_net<float>(3), b = a;
    auto partition = make_partition(threads);
    auto sa = partition.init(a);
    CHECK(sa.group_count() == 3);
    CHECK(sa.group_name(sa.group_of_leaf(0)) == "attention");  // layers.0.q
    CHECK(sa.group_name(sa.group_of_leaf(2)) == "frames");     // layers.0.frame
    CHECK(sa.group_name(sa.group_of_leaf(3)) == "rest");       // layers.0.bias
    CHECK(sa.group_name(sa.group_of_leaf(8)) == "rest");       // head

    // Alone: each optimizer over the whole tree with the other groups' leaves frozen.
    Three alone(threads);
    auto only = [&](auto pick) {
      return [&, pick](const geomopt::ptree::Path& path) {
        geomopt::LeafOptions lo;
        lo.frozen = !pick(path.str());
        return lo;
      };
    };
    const Net<float> probe = make_net<float>(3);
    std::vector<std::string> group_of;
    geomopt::ptree::for_each_with_path([&](const geomopt::ptree::Path& p, const auto&) { group_of.push_back(p.str()); },
                                       probe);
    auto owner = [&](const std::string& path) {
      for (std::size_t i = 0; i < group_of.size(); ++i)
        if (group_of[i] == path) return sa.group_name(sa.group_of_leaf(i));
      return std::string();
    };
    auto s_muon = alone.muon.init(b, only([&](const std::string& p) { return owner(p) == "attention"; }));
    auto s_adam = alone.adam.init(b, only([&](const std::string& p) { return owner(p) == "frames"; }));
    auto s_adamw = alone.adamw.init(b, only([&](const std::string& p) { return owner(p) == "rest"; }));
    CHECK(s_muon.muon_leaf_count() == 4);

    for (int t = 0; t < 6; ++t) {
      const Net<float> ga = gradient(a), gb = gradient(b);
      const auto report = partition.step(a, ga, sa);
      CHECK(report.applied);
      CHECK(report.lr == doctest::Approx(0.02));  // the first group's
      alone.muon.step(b, gb, s_muon);
      alone.adam.step(b, gb, s_adam);
      alone.adamw.step(b, gb, s_adamw);
    }
    CHECK(same_bits(a, b));
    CHECK(sa.step_count() == 6);
    // The partition's arrays are the groups' own, leaf by leaf.
    auto expected = arrays(s_muon);
    for (const auto& x : arrays(s_adam)) expected.push_back(x);
    for (const auto& x : arrays(s_adamw)) expected.push_back(x);
    auto got = arrays(sa);
    std::sort(expected.begin(), expected.end());
    std::sort(got.begin(), got.end());
    CHECK(got == expected);
    CHECK(sa.nbytes() == s_muon.nbytes() + s_adam.nbytes() + s_adamw.nbytes());
    // And the steps did something: the tree moved from where it started.
    CHECK(!same_bits(a, make_net<float>(3)));
  }
}

TEST_CASE("a leaf no group takes, or two take, is an error naming the path and the groups") {
  const Net<double> n = make_net<double>(5);
  {
    geomopt::Partition p(geomopt::group("attention", geomopt::Muon(), attention),
                         geomopt::group("frames", geomopt::Adam(), geomopt::kind_is("Stiefel")));
    try {
      (void)p.init(n);
      FAIL("init took a tree with leaves in no group");
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      CHECK(what.find("layers.0.bias") == 0);
      CHECK(what.find("no group") != std::string::npos);
      CHECK(what.find("'frames'") != std::string::npos);
    }
  }
  {
    geomopt::Partition p(geomopt::group("attention", geomopt::Muon(), attention),
                         geomopt::group("queries", geomopt::Adam(), geomopt::path_contains(".q")),
                         geomopt::group("rest", geomopt::AdamW()));
    try {
      (void)p.init(n);
      FAIL("init took a tree with a leaf in two groups");
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      CHECK(what.find("layers.0.q") == 0);
      CHECK(what.find("two groups") != std::string::npos);
      CHECK(what.find("'attention' and 'queries'") != std::string::npos);
    }
  }
  // Groups are checked when the partition is made: names, rules, and the groups' own transforms.
  CHECK_THROWS_WITH_AS(
      geomopt::Partition(geomopt::group("a", geomopt::Adam()), geomopt::group("a", geomopt::SGD(), attention)),
      doctest::Contains("two groups are named 'a'"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(geomopt::Partition(geomopt::group("a", geomopt::Adam()), geomopt::group("b", geomopt::SGD())),
                       doctest::Contains("both have no rule"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(geomopt::Partition(geomopt::group("a", geomopt::Adam({}, {.clip_norm = 1}))),
                       doctest::Contains("group 'a' sets clip_norm"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(geomopt::Partition(geomopt::group("m", geomopt::Muon({}, {.ema_decay = 0.9}))),
                       doctest::Contains("group 'm' sets ema_decay"), std::invalid_argument);
}

TEST_CASE("the partition's clipping takes one norm over every group, and a refused step changes no group") {
  Net<double> a = make_net<double>(7);
  auto clipped = make_partition(1, {.clip_norm = 0.5, .non_finite = geomopt::NonFinitePolicy::skip});
  auto sa = clipped.init(a);
  Net<double> g = gradient(a);
  // The global norm, by hand: Euclidean over every leaf but the frames, whose Riemannian gradient counts
  // (canonical metric: |G|^2 - |Z|^2 + |Z - Z^T|^2 / 2 with Z = W^T G).
  double squared = 0;
  for (const auto& l : g.layers) {
    squared += l.q.squaredNorm() + l.k.squaredNorm() + l.bias.squaredNorm();
  }
  for (std::size_t l = 0; l < a.layers.size(); ++l) {
    const Mat<double>& w = a.layers[l].frame.value();
    const Mat<double>& gw = g.layers[l].frame.value();
    const Mat<double> z = w.transpose() * gw;
    squared += gw.squaredNorm() - z.squaredNorm() + 0.5 * (z - z.transpose()).squaredNorm();
  }
  squared += g.head.squaredNorm() + g.scale * g.scale;
  const auto report = clipped.step(a, g, sa);
  REQUIRE(report.applied);
  CHECK(report.grad_norm == doctest::Approx(std::sqrt(squared)).epsilon(1e-12));
  CHECK(report.clip_scale == doctest::Approx(0.5 / (std::sqrt(squared) + 1e-6)).epsilon(1e-12));

  // A NaN in one group's gradient: under skip no group moves, under raise the same throws naming the leaf.
  const Net<double> before = a;
  const auto arrays_before = arrays(sa);
  Net<double> bad = gradient(a);
  bad.head(1, 2) = std::numeric_limits<double>::quiet_NaN();
  const auto refused = clipped.step(a, bad, sa);
  CHECK(!refused.applied);
  REQUIRE(refused.non_finite_leaf != nullptr);
  CHECK(*refused.non_finite_leaf == "head");
  CHECK(same_bits(a, before));
  CHECK(arrays(sa) == arrays_before);
  CHECK(sa.step_count() == 1);

  auto raising = make_partition(1, {.non_finite = geomopt::NonFinitePolicy::raise});
  auto sr = raising.init(a);
  bad = gradient(a);
  bad.layers[1].k(0, 0) = std::numeric_limits<double>::infinity();
  const auto arrays_raise = arrays(sr);
  CHECK_THROWS_WITH_AS(raising.step(a, bad, sr), doctest::Contains("layers.1.k: the gradient is not finite"),
                       geomopt::NonFiniteGradient);
  CHECK(same_bits(a, before));
  CHECK(arrays(sr) == arrays_raise);

  // A tree that does not match the state: the error names the leaf, and nothing moves.
  Net<double> wrong = gradient(a);
  wrong.layers[0].bias.resize(3);
  CHECK_THROWS_WITH_AS(clipped.step(a, wrong, sa), doctest::Contains("layers.0.bias"), geomopt::StructureError);
  CHECK(same_bits(a, before));
}

TEST_CASE("the partition's moving average covers every group") {
  Net<double> a = make_net<double>(9);
  auto p = make_partition(1, {.ema_decay = 0.5});
  auto st = p.init(a);
  REQUIRE(st.ema() != nullptr);
  const Vec<double> start = geomopt::ptree::flatten(a);
  p.step(a, gradient(a), st);
  const Vec<double> one = geomopt::ptree::flatten(a);
  const Vec<double> ema = geomopt::ptree::flatten(*st.ema());
  CHECK((ema - (0.5 * start + 0.5 * one)).cwiseAbs().maxCoeff() < 1e-15);
  CHECK(st.nbytes() > 0);
}
