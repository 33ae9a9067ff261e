// Utilities: visits, summary, nbytes, count, zeros_like, cast.
#include "common.hpp"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

using ptest::check_lines;
using ptest::seq;
using ptest::seq_fixed;

namespace {

template <class T>
struct VTree {
  using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  std::vector<Dense<T>> layers;
  std::vector<Vec> empty;
  pt::Buffer<Vec> stats;
  std::optional<Vec> scale;
  std::variant<Dense<T>, Eigen::Matrix<T, 3, 1>, T> enc;
  std::map<std::string, T> blocks;
  std::shared_ptr<Eigen::Matrix<T, 2, 2>> t1;
  std::shared_ptr<Eigen::Matrix<T, 2, 2>> t2;
  T gain;
  GEOMOPT_PTREE(layers, empty, stats, scale, enc, blocks, t1, t2, gain)
};

template <class T>
VTree<T> make_vtree(int alternative, bool with_scale) {
  using Vec = typename VTree<T>::Vec;
  VTree<T> t;
  t.layers = {make_dense<T>(4, 3, 0), make_dense<T>(2, 4, 100)};
  t.stats = pt::Buffer<Vec>{seq<Vec>(3, 200)};
  if (with_scale) t.scale = seq<Vec>(5, 300);
  if (alternative == 0) t.enc = make_dense<T>(2, 2, 400);
  if (alternative == 1) t.enc = seq_fixed<Eigen::Matrix<T, 3, 1>>(500);
  if (alternative == 2) t.enc = T(600);
  t.blocks["b"] = T(700);
  t.blocks["a"] = T(701);
  t.t1 = std::make_shared<Eigen::Matrix<T, 2, 2>>(seq_fixed<Eigen::Matrix<T, 2, 2>>(800));
  t.t2 = t.t1;
  t.gain = T(900);
  return t;
}

std::vector<std::string> expected_visits(int alternative, bool with_scale) {
  std::vector<std::string> e = {
      "layers: 2 elements",    "layers.0.weight: leaf 4x3", "layers.0.bias: leaf 4", "layers.1.weight: leaf 2x4",
      "layers.1.bias: leaf 2", "empty: 0 elements",         "stats: buffer 3"};
  if (with_scale) {
    e.push_back("scale: present");
    e.push_back("scale: leaf 5");
  } else {
    e.push_back("scale: absent");
  }
  e.push_back("enc: alternative " + std::to_string(alternative));
  if (alternative == 0) {
    e.push_back("enc.weight: leaf 2x2");
    e.push_back("enc.bias: leaf 2");
  }
  if (alternative == 1) e.push_back("enc: leaf 3");
  if (alternative == 2) e.push_back("enc: leaf scalar");
  for (const char* s : {"blocks: 2 keys", "blocks.a: leaf scalar", "blocks.b: leaf scalar", "t1: leaf 2x2",
                        "t2: tied to t1", "gain: leaf scalar"})
    e.push_back(s);
  return e;
}

long long vtree_count(int alternative, bool with_scale) {
  return 12 + 4 + 8 + 2 + (with_scale ? 5 : 0) + (alternative == 0 ? 6 : alternative == 1 ? 3 : 1) + 2 + 4 + 1;
}

}  // namespace

TEST_CASE(
    "visits: options present/absent, each variant alternative, empty and non-empty vectors, maps, ties, buffers") {
  for (int alt = 0; alt < 3; ++alt) {
    for (bool with_scale : {false, true}) {
      CAPTURE(alt);
      CAPTURE(with_scale);
      const auto t = make_vtree<double>(alt, with_scale);
      check_lines(pt::visits(t), expected_visits(alt, with_scale));
      // the float tree reports the same structure
      check_lines(pt::visits(make_vtree<float>(alt, with_scale)), expected_visits(alt, with_scale));
    }
  }
}

namespace {
struct MV {
  std::map<std::string, std::vector<Eigen::Matrix<double, 1, 2>>> m;
  std::map<std::string, double> none;
  GEOMOPT_PTREE(m, none)
};
}  // namespace

TEST_CASE("visits: a map of vectors, and an empty map") {
  MV t;
  t.m["x"] = {Eigen::Matrix<double, 1, 2>(1, 2), Eigen::Matrix<double, 1, 2>(3, 4)};
  t.m["w"] = {};
  check_lines(pt::visits(t), {"m: 2 keys", "m.w: 0 elements", "m.x: 2 elements", "m.x.0: leaf 1x2", "m.x.1: leaf 1x2",
                              "none: 0 keys"});
}

TEST_CASE("count and nbytes") {
  const auto t = make_vtree<double>(0, true);
  CHECK(ptest::ll(pt::count(t)) == vtree_count(0, true));
  CHECK(ptest::ll(pt::count(pt::params, t)) == vtree_count(0, true));
  CHECK(ptest::ll(pt::count(pt::buffers, t)) == 3);
  CHECK(ptest::ll(pt::count(pt::all, t)) == vtree_count(0, true) + 3);
  CHECK(ptest::ll(pt::nbytes(t)) == vtree_count(0, true) * 8);
  CHECK(ptest::ll(pt::nbytes(pt::all, t)) == (vtree_count(0, true) + 3) * 8);
  CHECK(ptest::ll(pt::nbytes(pt::buffers, t)) == 3 * 8);
  const auto f = make_vtree<float>(2, false);
  CHECK(ptest::ll(pt::count(f)) == vtree_count(2, false));
  CHECK(ptest::ll(pt::nbytes(f)) == vtree_count(2, false) * 4);
}

TEST_CASE("summary contains every path and the totals") {
  const auto t = make_vtree<double>(0, true);
  const std::string s = pt::summary(t);
  CAPTURE(s);
  for (const char* p : {"layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias", "stats", "scale",
                        "enc.weight", "enc.bias", "blocks.a", "blocks.b", "t1", "gain"})
    CHECK(s.find(p) != std::string::npos);
  CHECK(s.find(std::to_string(vtree_count(0, true))) != std::string::npos);
  CHECK(s.find(std::to_string(vtree_count(0, true) * 8)) != std::string::npos);
  CHECK(s.find("4x3") != std::string::npos);
  // The tie is one parameter: its alias does not appear as a separate leaf row with its own count.
  const auto count_of = [&](const std::string& needle) {
    std::size_t n = 0;
    for (std::size_t pos = s.find(needle); pos != std::string::npos; pos = s.find(needle, pos + 1)) ++n;
    return n;
  };
  CHECK(count_of("layers.0.weight") == 1);
  // Another tree gives another total.
  const std::string s2 = pt::summary(make_vtree<float>(1, false));
  CHECK(s2.find(std::to_string(vtree_count(1, false))) != std::string::npos);
  CHECK(s2.find("enc.weight") == std::string::npos);
}

TEST_CASE("zeros_like zeroes every trainable leaf, keeps shapes and buffers") {
  const auto t = make_vtree<double>(0, true);
  const auto z = pt::zeros_like(t);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(z)>, VTree<double>>);
  CHECK(ptest::ll(pt::count(z)) == vtree_count(0, true));
  CHECK(pt::flatten(z).isZero(0));
  CHECK(z.layers[1].weight.rows() == 2);
  CHECK(z.layers[1].weight.cols() == 4);
  CHECK(z.scale->size() == 5);
  CHECK(z.enc.index() == 0);
  CHECK(z.blocks.at("a") == 0.0);
  CHECK(z.gain == 0.0);
  CHECK((*z.stats)[2] == 202.0);
  CHECK(z.t1.get() == z.t2.get());
  CHECK(z.t1.get() != t.t1.get());
  CHECK(pt::layout(z) == pt::layout(t));
  CHECK(t.gain == 900.0);
}

TEST_CASE("cast converts every floating scalar") {
  const auto t = make_vtree<double>(1, true);
  const auto f = pt::cast<float>(t);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(f)>, VTree<float>>);
  CHECK(ptest::same_values(pt::flatten(f), pt::flatten(t)));
  CHECK((*f.stats)[1] == 201.0f);
  CHECK(f.t1.get() == f.t2.get());
  CHECK(pt::layout(f) == pt::layout(t));
  const auto d = pt::cast<double>(t);  // same scalar: a deep copy
  CHECK(d.t1.get() != t.t1.get());
  CHECK(ptest::same_values(pt::flatten(d), pt::flatten(t)));
}

TEST_CASE("Path str") {
  std::map<std::string, std::vector<Dense<double>>> m;
  m["enc"] = {make_dense<double>(1, 1, 0), make_dense<double>(1, 1, 0)};
  std::vector<std::string> paths;
  pt::for_each_with_path(
      [&](const pt::Path& p, const auto&) {
        const std::string s = p.str();
        paths.push_back(s);
      },
      m);
  CHECK(paths == std::vector<std::string>{"enc.0.weight", "enc.0.bias", "enc.1.weight", "enc.1.bias"});
}
