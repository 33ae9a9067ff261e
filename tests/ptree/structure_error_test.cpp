// Every mismatch kind throws geomopt::StructureError naming the first differing path, before any leaf is touched.
#include "common.hpp"

#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

using ptest::error_of;
using ptest::seq;
using ptest::seq_fixed;

static_assert(std::is_base_of_v<std::invalid_argument, geomopt::StructureError>);

namespace {

template <class T>
struct Tree {
  using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> first;  // walked first: a naive walk would change it
  std::vector<Dense<T>> layers;
  std::optional<Vec> scale;
  std::map<std::string, Dense<T>> blocks;
  std::variant<Dense<T>, Eigen::Matrix<T, 3, 1>> enc;
  std::shared_ptr<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>> tie_a;
  std::shared_ptr<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>> tie_b;
  T last;
  GEOMOPT_PTREE(first, layers, scale, blocks, enc, tie_a, tie_b, last)
};

template <class T>
Tree<T> make_tree() {
  using M = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  Tree<T> t;
  t.first = seq<M>(2, 2, 1);
  t.layers = {make_dense<T>(3, 2, 10), make_dense<T>(2, 3, 20), make_dense<T>(4, 2, 30)};
  t.scale = seq<typename Tree<T>::Vec>(2, 50);
  t.blocks["a"] = make_dense<T>(1, 1, 60);
  t.blocks["enc"] = make_dense<T>(2, 2, 70);
  t.enc = make_dense<T>(2, 2, 80);
  t.tie_a = std::make_shared<M>(seq<M>(2, 2, 90));
  t.tie_b = t.tie_a;
  t.last = T(99);
  return t;
}

// Runs every walk that can mutate (and the others) on (a, b), each expected to throw `expected`, and checks that
// neither tree changed. b may be of another scalar.
template <class A, class B>
void check_mismatch(A& a, B& b, const std::string& expected) {
  const auto snap_a = pt::flatten(a);
  const auto snap_b = pt::flatten(b);
  auto unchanged = [&] {
    CHECK(ptest::same_values(pt::flatten(a), snap_a));
    CHECK(ptest::same_values(pt::flatten(b), snap_b));
  };

  SUBCASE("for_each mutating both trees") {
    CHECK(error_of([&] {
            pt::for_each(
                [](auto& x, auto& y) {
                  ptest::poke(x);
                  ptest::poke(y);
                },
                a, b);
          }) == expected);
    unchanged();
  }
  SUBCASE("for_each with a const second tree") {
    const B& cb = b;
    CHECK(error_of([&] { pt::for_each([](auto& x, const auto&) { ptest::poke(x); }, a, cb); }) == expected);
    unchanged();
  }
  SUBCASE("map_into") {
    CHECK(error_of([&] {
            pt::map_into(
                [](const auto& y) {
                  if constexpr (ptest::is_eigen_v<decltype(y)>) {
                    return (y.template cast<double>().array() + 1.0).matrix().eval();
                  } else {
                    return static_cast<double>(y) + 1.0;
                  }
                },
                a, b);
          }) == expected);
    unchanged();
  }
  SUBCASE("for_each_with_path") {
    CHECK(error_of([&] { pt::for_each_with_path([](const pt::Path&, auto& x, auto&) { ptest::poke(x); }, a, b); }) ==
          expected);
    unchanged();
  }
  SUBCASE("for_each_storage") {
    CHECK(error_of([&] { pt::for_each_storage([](auto& x, auto&) { ptest::poke(x); }, a, b); }) == expected);
    unchanged();
  }
  SUBCASE("fold and fold_storage") {
    int calls = 0;
    const auto counting = [&](int acc, const auto&, const auto&) {
      ++calls;
      return acc + 1;
    };
    CHECK(error_of([&] { (void)pt::fold(counting, 0, a, b); }) == expected);
    CHECK(error_of([&] { (void)pt::fold_storage(counting, 0, a, b); }) == expected);
    CHECK(calls == 0);
    unchanged();
  }
  SUBCASE("map") {
    CHECK(error_of([&] { (void)pt::map([](const auto& x, const auto&) { return ptest::bumped(x); }, a, b); }) ==
          expected);
    unchanged();
  }
  SUBCASE("catchable as std::invalid_argument") {
    CHECK_THROWS_AS(pt::for_each([](auto& x, auto&) { ptest::poke(x); }, a, b), std::invalid_argument);
    unchanged();
  }
}

// Two trees of make_tree<double> and make_tree<B>, made different by alter(a, b), through check_mismatch: against the
// message `expected`, or, where the documentation leaves part of the wording open, against the message for_each
// throws, which the callable `expected` checks first.
template <class B = double, class Expected>
void check_altered(const auto& alter, const Expected& expected) {
  auto a = make_tree<double>();
  auto b = make_tree<B>();
  alter(a, b);
  if constexpr (std::is_convertible_v<const Expected&, std::string>) {
    check_mismatch(a, b, expected);
  } else {
    const std::string msg = error_of([&] { pt::for_each([](auto& x, auto&) { ptest::poke(x); }, a, b); });
    CAPTURE(msg);
    expected(msg);
    check_mismatch(a, b, msg);  // same message from every walk, nothing touched
  }
}

}  // namespace

TEST_CASE("matching trees do not throw") {
  auto a = make_tree<double>();
  auto b = make_tree<float>();
  int calls = 0;
  CHECK_NOTHROW(pt::for_each([&](auto&, auto&) { ++calls; }, a, b));
  CHECK(calls == 1 + 6 + 1 + 4 + 2 + 1 + 1);  // tie_a once
}

TEST_CASE("vector length") {
  check_altered([](auto&, auto& b) { b.layers.pop_back(); }, "layers: 3 elements in tree 0, 2 in tree 1");
}

TEST_CASE("leaf rows (mixed scalars)") {
  check_altered<float>(
      [](auto&, auto& b) {
        b.layers[2].bias.resize(3);
        b.layers[2].bias.setConstant(1);
      },
      "layers.2.bias: 4 rows in tree 0, 3 in tree 1");
}

TEST_CASE("leaf cols") {
  check_altered([](auto&, auto& b) { b.layers[1].weight = seq<Eigen::MatrixXd>(2, 4, 0); },
                [](const std::string& msg) {
                  CHECK(msg.rfind("layers.1.weight: 3 col", 0) == 0);
                  CHECK(msg.find("in tree 0, 4 in tree 1") != std::string::npos);
                });
}

TEST_CASE("optional presence") {
  check_altered([](auto&, auto& b) { b.scale.reset(); }, "scale: present in tree 0, absent in tree 1");
}

TEST_CASE("optional presence, the other way round") {
  check_altered([](auto& a, auto&) { a.scale.reset(); }, "scale: absent in tree 0, present in tree 1");
}

TEST_CASE("map keys differ") {
  check_altered(
      [](auto&, auto& b) {
        auto node = b.blocks.extract("enc");
        node.key() = "dec";
        b.blocks.insert(std::move(node));
      },
      "blocks: key \"enc\" in tree 0, key \"dec\" in tree 1");
}

TEST_CASE("map key count differs") {
  // The keys they share agree: only the count differs.
  check_altered([](auto&, auto& b) { b.blocks.erase("enc"); }, "blocks: 2 keys in tree 0, 1 in tree 1");
}

TEST_CASE("map key count and first key differ: one of the two documented forms") {
  check_altered([](auto&, auto& b) { b.blocks.erase("a"); },
                [](const std::string& msg) {
                  CHECK((msg == "blocks: 2 keys in tree 0, 1 in tree 1" ||
                         msg == "blocks: key \"a\" in tree 0, key \"enc\" in tree 1"));
                });
}

TEST_CASE("variant alternative") {
  check_altered([](auto&, auto& b) { b.enc = seq_fixed<Eigen::Vector3d>(0); },
                "enc: alternative 0 in tree 0, alternative 1 in tree 1");
}

TEST_CASE("leaf inside a variant alternative") {
  check_altered(
      [](auto&, auto& b) {
        std::get<0>(b.enc).bias = ptest::vec({1, 2, 3});
      },
      "enc.bias: 2 rows in tree 0, 3 in tree 1");
}

TEST_CASE("tie pattern") {
  check_altered([](auto&, auto& b) { b.tie_b = std::make_shared<Eigen::MatrixXd>(*b.tie_a); },
                "tie_b: tied to tie_a in tree 0, not tied in tree 1");
}

TEST_CASE("tie pattern, the other way round: tied only in tree 1") {
  check_altered([](auto& a, auto&) { a.tie_b = std::make_shared<Eigen::MatrixXd>(*a.tie_a); },
                [](const std::string& msg) {
                  CHECK(msg.rfind("tie_b: ", 0) == 0);
                  CHECK(msg.find("tie_a") != std::string::npos);
                  CHECK(msg.find("in tree 0") != std::string::npos);
                  CHECK(msg.find("in tree 1") != std::string::npos);
                });
}

TEST_CASE("the last leaf differs: still nothing touched before") {
  auto a = std::vector<Eigen::VectorXd>{ptest::vec({1, 2}), ptest::vec({3, 4}), ptest::vec({5, 6, 7})};
  auto b = std::vector<Eigen::VectorXd>{ptest::vec({1, 2}), ptest::vec({3, 4}), ptest::vec({5, 6})};
  check_mismatch(a, b, "2: 3 rows in tree 0, 2 in tree 1");
}

TEST_CASE("root path prints as (root)") {
  std::vector<Eigen::VectorXd> a(3, Eigen::VectorXd::Ones(2));
  std::vector<Eigen::VectorXd> b(2, Eigen::VectorXd::Ones(2));
  check_mismatch(a, b, "(root): 3 elements in tree 0, 2 in tree 1");

  Eigen::VectorXd x = Eigen::VectorXd::Ones(3);
  Eigen::VectorXd y = Eigen::VectorXd::Ones(2);
  check_mismatch(x, y, "(root): 3 rows in tree 0, 2 in tree 1");
}

TEST_CASE("the first differing path is reported, and the tree index is the differing tree's") {
  auto a = make_tree<double>();
  auto a2 = make_tree<double>();
  auto b = make_tree<double>();
  b.layers[0].bias = ptest::vec({1, 2});  // layers.0.bias: 3 vs 2
  b.scale.reset();                        // later
  b.last = 5;                             // not a structural difference
  const auto snap = pt::flatten(a);
  CHECK(error_of([&] { pt::for_each([](auto& x, auto&, auto&) { ptest::poke(x); }, a, a2, b); }) ==
        "layers.0.bias: 3 rows in tree 0, 2 in tree 2");
  CHECK(ptest::same_values(pt::flatten(a), snap));
  CHECK(ptest::same_values(pt::flatten(a2), snap));
}

TEST_CASE("flatten_into / unflatten_into with a wrong length throw and leave data untouched") {
  auto t = make_tree<double>();
  const auto snap = pt::flatten(t);
  const auto n = snap.size();
  for (Eigen::Index len : {n - 1, n + 1, Eigen::Index(0)}) {
    CAPTURE(len);
    Eigen::VectorXd v = Eigen::VectorXd::Constant(len, -3.0);
    CHECK_THROWS_AS(pt::flatten_into(v, t), geomopt::StructureError);
    CHECK(v.size() == len);
    CHECK((v.array() == -3.0).all());

    CHECK_THROWS_AS(pt::unflatten_into(t, v), geomopt::StructureError);
    CHECK(ptest::same_values(pt::flatten(t), snap));
    CHECK_THROWS_AS(pt::unflatten_into(t, v), std::invalid_argument);
  }
  Eigen::VectorXf vf = Eigen::VectorXf::Constant(n + 2, 1.0f);
  CHECK_THROWS_AS(pt::unflatten_into(t, vf), geomopt::StructureError);
  CHECK(ptest::same_values(pt::flatten(t), snap));
}

namespace {

template <class T>
struct WithBuffer {
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> w;
  std::vector<Eigen::Matrix<T, Eigen::Dynamic, 1>> v;
  pt::Buffer<Eigen::VectorXi> counts;
  GEOMOPT_PTREE(w, v, counts)
};

}  // namespace

TEST_CASE("a walk that leaves the leaves' shapes to its visitor (the optimizers'): everything else is still checked") {
  using M = Eigen::MatrixXd;
  using V = Eigen::VectorXd;
  WithBuffer<double> a{seq<M>(2, 3, 1), {seq<V>(2, 10), seq<V>(3, 20)}, pt::Buffer<Eigen::VectorXi>{}};
  a.counts.value() = Eigen::VectorXi::Zero(2);
  // Other rows and columns of trainable leaves reach the visitor, which sees both shapes.
  WithBuffer<double> b = a;
  b.w.resize(0, 0);
  b.v[1].resize(5);
  std::vector<std::string> seen;
  pt::detail::for_each_own_leaf_shapes(
      [&](const auto& x, const auto& y) {
        seen.push_back(std::to_string(x.rows()) + "x" + std::to_string(x.cols()) + "/" + std::to_string(y.rows()) +
                       "x" + std::to_string(y.cols()));
      },
      a, b);
  CHECK(seen == std::vector<std::string>{"2x3/0x0", "2x1/2x1", "3x1/5x1"});
  // The structure above the leaves, and the buffers, are checked as by every walk, before the visitor runs.
  auto refused = [&](const WithBuffer<double>& c) {
    int calls = 0;
    const std::string e = error_of([&] { pt::detail::for_each_own_leaf_shapes([&](auto&, auto&) { ++calls; }, a, c); });
    CHECK(calls == 0);
    return e;
  };
  WithBuffer<double> shorter = a;
  shorter.v.pop_back();
  CHECK(refused(shorter) == "v: 2 elements in tree 0, 1 in tree 1");
  WithBuffer<double> buffer = a;
  buffer.counts.value() = Eigen::VectorXi::Zero(3);
  CHECK(refused(buffer) == "counts: 2 rows in tree 0, 3 in tree 1");
  // The same trees through an ordinary walk: the leaf's shape is refused there.
  CHECK(error_of([&] { pt::for_each([](auto&, auto&) {}, a, b); }) == "w: 2 rows in tree 0, 0 in tree 1");
}
