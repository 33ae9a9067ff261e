// The leaf protocol: structured leaves defined only here, found by argument-dependent lookup.
// Nothing in geomopt knows these types.
#include "common.hpp"

#include <ceres/jet.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

using ptest::check_layout;
using ptest::check_vec_eq;
using ptest::seq;

namespace shapes {

// A two-block leaf: a symmetric n x n matrix stored packed (its lower triangle, column by column) and a small dense
// mixing block. n and tag are metadata, not parameters.
template <class T>
struct PackedSym {
  int n = 0;
  std::string tag;
  Eigen::Matrix<T, Eigen::Dynamic, 1> packed;
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> mix;

  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> full() const {
    Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> m(n, n);
    Eigen::Index k = 0;
    for (int c = 0; c < n; ++c)
      for (int r = c; r < n; ++r) m(r, c) = m(c, r) = packed[k++];
    return m;
  }
};

inline int rebuild_calls = 0;

template <class T>
auto free_parameters(PackedSym<T>& x) {
  return std::tie(x.packed, x.mix);
}
template <class T>
auto free_parameters(const PackedSym<T>& x) {
  return std::tie(x.packed, x.mix);
}
template <class T, class U>
PackedSym<U> rebuild(
    const PackedSym<T>& prototype,
    std::tuple<Eigen::Matrix<U, Eigen::Dynamic, 1>, Eigen::Matrix<U, Eigen::Dynamic, Eigen::Dynamic>>&& data) {
  ++rebuild_calls;
  PackedSym<U> r;
  r.n = prototype.n;
  r.tag = prototype.tag;
  r.packed = std::move(std::get<0>(data));
  r.mix = std::move(std::get<1>(data));
  return r;
}

template <class T>
PackedSym<T> make_sym(int n, Eigen::Index mix_rows, Eigen::Index mix_cols, double start, std::string tag) {
  PackedSym<T> s;
  s.n = n;
  s.tag = std::move(tag);
  s.packed = seq<Eigen::Matrix<T, Eigen::Dynamic, 1>>(n * (n + 1) / 2, start);
  s.mix = seq<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>>(mix_rows, mix_cols, start + n * (n + 1) / 2);
  return s;
}

// A one-block leaf whose storage is a scalar lvalue.
template <class T>
struct LogScale {
  T log_value{};
  T value() const {
    using std::exp;
    return exp(log_value);
  }
};
template <class T>
T& free_parameters(LogScale<T>& x) {
  return x.log_value;
}
template <class T>
const T& free_parameters(const LogScale<T>& x) {
  return x.log_value;
}
template <class T, class U>
LogScale<std::remove_cvref_t<U>> rebuild(const LogScale<T>&, U&& data) {
  return LogScale<std::remove_cvref_t<U>>{std::forward<U>(data)};
}

// A one-block leaf over a fixed-size matrix.
template <class T>
struct Rot2 {
  Eigen::Matrix<T, 2, 2> m;
};
template <class T>
Eigen::Matrix<T, 2, 2>& free_parameters(Rot2<T>& x) {
  return x.m;
}
template <class T>
const Eigen::Matrix<T, 2, 2>& free_parameters(const Rot2<T>& x) {
  return x.m;
}
template <class T, class U>
Rot2<U> rebuild(const Rot2<T>&, Eigen::Matrix<U, 2, 2>&& data) {
  return Rot2<U>{std::move(data)};
}

}  // namespace shapes

namespace {
template <class T>
struct Model {
  Eigen::Matrix<T, Eigen::Dynamic, 1> before;
  shapes::PackedSym<T> sym;
  shapes::LogScale<T> ls;
  shapes::Rot2<T> rot;
  T after;
  GEOMOPT_PTREE(before, sym, ls, rot, after)
};

template <class T>
Model<T> make_model() {
  Model<T> m;
  m.before = seq<Eigen::Matrix<T, Eigen::Dynamic, 1>>(2, 0);  // 0 1
  m.sym = shapes::make_sym<T>(3, 2, 3, 2, "cov");             // packed 2..7, mix 8..13
  m.ls.log_value = T(14);
  m.rot.m = ptest::seq_fixed<Eigen::Matrix<T, 2, 2>>(15);  // 15..18
  m.after = T(19);
  return m;
}

Eigen::VectorXd iota(int n, double start = 0) {
  Eigen::VectorXd v(n);
  for (int i = 0; i < n; ++i) v[i] = start + i;
  return v;
}
}  // namespace

static_assert(std::is_same_v<pt::scalar_t<shapes::PackedSym<float>>, float>);
static_assert(std::is_same_v<pt::scalar_t<Model<float>>, float>);
static_assert(std::is_same_v<pt::rebind_t<shapes::PackedSym<float>, double>, shapes::PackedSym<double>>);
static_assert(std::is_same_v<pt::rebind_t<Model<float>, double>, Model<double>>);
static_assert(std::is_same_v<pt::rebind_t<Model<double>, ceres::Jet<double, 2>>, Model<ceres::Jet<double, 2>>>);
static_assert(std::is_same_v<pt::scalar_t<std::tuple<shapes::LogScale<float>, shapes::Rot2<double>>>, double>);

TEST_CASE("structured leaves: flatten order is storage blocks in free_parameters order") {
  const auto m = make_model<double>();
  check_vec_eq(pt::flatten(m), iota(20));
  CHECK(ptest::ll(pt::count(m)) == 20);
  check_layout(
      pt::layout(m),
      {{"before", 0, 2, {2}}, {"sym", 2, 12, {12}}, {"ls", 14, 1, {}}, {"rot", 15, 4, {2, 2}}, {"after", 19, 1, {}}},
      20);
  CHECK(ptest::ll(pt::nbytes(m)) == 20 * 8);
}

TEST_CASE("for_each hands the structured leaf itself - for_each_storage visits its blocks in order") {
  auto m = make_model<double>();
  int syms = 0;
  pt::for_each(
      [&](auto& leaf) {
        if constexpr (std::is_same_v<std::remove_cvref_t<decltype(leaf)>, shapes::PackedSym<double>>) {
          ++syms;
          CHECK(&leaf == &m.sym);
        }
      },
      m);
  CHECK(syms == 1);

  std::vector<const void*> blocks;
  std::vector<long long> sizes;
  pt::for_each_storage(
      [&](auto& block) {
        blocks.push_back(static_cast<const void*>(&block));
        sizes.push_back(ptest::numel(block));
      },
      m);
  CHECK(sizes == std::vector<long long>{2, 6, 6, 1, 4, 1});
  REQUIRE(blocks.size() == 6);
  CHECK(blocks[1] == static_cast<const void*>(&m.sym.packed));
  CHECK(blocks[2] == static_cast<const void*>(&m.sym.mix));
  CHECK(blocks[3] == static_cast<const void*>(&m.ls.log_value));
  CHECK(blocks[4] == static_cast<const void*>(&m.rot.m));

  pt::for_each_storage([](auto& block) { ptest::poke(block); }, m);
  CHECK(m.sym.packed[0] == 3.0);
  CHECK(m.sym.mix(1, 2) == 14.0);
  CHECK(m.ls.log_value == 15.0);

  const double sum = pt::fold_storage([](double acc, const auto& b) { return acc + ptest::total(b); }, 0.0, m);
  CHECK(sum == doctest::Approx(iota(20, 1).sum()));

  // Two trees, block by block.
  const auto other = make_model<float>();
  std::vector<double> diffs;
  pt::for_each_storage([&](const auto& a, const auto& b) { diffs.push_back(ptest::total(a) - ptest::total(b)); }, m,
                       other);
  CHECK(diffs == std::vector<double>{2, 6, 6, 1, 4, 1});
}

TEST_CASE("structured leaves round trip - metadata comes from the prototype") {
  const auto m = make_model<double>();
  const auto u = pt::unflatten(m, (iota(20) * -1).eval());
  CHECK(u.sym.n == 3);
  CHECK(u.sym.tag == "cov");
  check_vec_eq(u.sym.packed, ptest::vec({-2, -3, -4, -5, -6, -7}));
  CHECK(u.sym.mix.rows() == 2);
  CHECK(u.sym.mix.cols() == 3);
  CHECK(u.sym.mix(0, 1) == -10.0);
  CHECK(u.ls.log_value == -14.0);
  CHECK(u.rot.m(0, 1) == -17.0);
  CHECK(u.sym.full()(2, 1) == -6.0);

  auto target = make_model<double>();
  pt::unflatten_into(target, (iota(20) * 2).eval());
  CHECK(target.sym.mix(1, 2) == 26.0);
  CHECK(target.sym.tag == "cov");
  Eigen::VectorXd into(20);
  pt::flatten_into(into, target);
  check_vec_eq(into, (iota(20) * 2).eval());
}

TEST_CASE("unflatten into double from a float prototype, and cast, go through rebuild") {
  const auto mf = make_model<float>();
  static_assert(std::is_same_v<decltype(pt::flatten(mf)), Eigen::VectorXf>);
  const int before = shapes::rebuild_calls;
  const auto md = pt::unflatten(mf, iota(20, 100));
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(md)>, Model<double>>);
  static_assert(std::is_same_v<decltype(md.sym.packed), Eigen::VectorXd>);
  CHECK(shapes::rebuild_calls > before);
  CHECK(md.sym.n == 3);
  CHECK(md.sym.tag == "cov");
  CHECK(md.sym.packed[5] == 107.0);
  CHECK(md.sym.mix(1, 0) == 109.0);
  CHECK(md.rot.m(1, 1) == 118.0);

  const auto c = pt::cast<double>(mf);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(c)>, Model<double>>);
  CHECK(c.sym.tag == "cov");
  check_vec_eq(pt::flatten(c), iota(20));

  const auto z = pt::zeros_like(mf);
  CHECK(z.sym.tag == "cov");
  CHECK(z.sym.n == 3);
  CHECK(z.sym.mix.rows() == 2);
  CHECK(pt::flatten(z).isZero(0));
}

TEST_CASE("unflatten into a Jet through the structured leaf: seeds land where flatten put them") {
  using J = ceres::Jet<double, 20>;
  const auto m = make_model<double>();
  Eigen::Matrix<J, Eigen::Dynamic, 1> v(20);
  for (int i = 0; i < 20; ++i) v[i] = J(static_cast<double>(i) * 0.5, i);
  const auto mj = pt::unflatten(m, v);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(mj)>, Model<J>>);
  CHECK(mj.sym.tag == "cov");
  CHECK(mj.sym.mix(1, 2).a == 6.5);
  CHECK(mj.sym.mix(1, 2).v[13] == 1.0);
  CHECK(mj.sym.mix(1, 2).v.sum() == 1.0);
  CHECK(mj.ls.log_value.v[14] == 1.0);
  CHECK(mj.rot.m(0, 1).v[17] == 1.0);
  // The value through the leaf's own function carries the derivative.
  const J e = mj.ls.value();
  CHECK(e.v[14] == doctest::Approx(std::exp(7.0)));
}

TEST_CASE("storage block mismatch names the block - nothing touched") {
  auto a = make_model<double>();
  auto snap = pt::flatten(a);
  const auto expect_error = [&](auto& b, const std::string& expected) {
    const auto snap_b = pt::flatten(b);
    CHECK(ptest::error_of([&] {
            pt::for_each_storage(
                [](auto& x, auto& y) {
                  ptest::poke(x);
                  ptest::poke(y);
                },
                a, b);
          }) == expected);
    CHECK(ptest::error_of([&] {
            pt::for_each(
                [](auto& x, auto&) {
                  if constexpr (ptest::is_eigen_v<decltype(x)> ||
                                std::is_arithmetic_v<std::remove_cvref_t<decltype(x)>>)
                    ptest::poke(x);
                },
                a, b);
          }) == expected);
    CHECK_THROWS_AS(pt::for_each([](auto&, auto&) {}, a, b), std::invalid_argument);
    CHECK(ptest::same_values(pt::flatten(a), snap));
    CHECK(ptest::same_values(pt::flatten(b), snap_b));
  };

  auto b1 = make_model<double>();
  b1.sym.mix = seq<Eigen::MatrixXd>(3, 3, 0);
  expect_error(b1, "sym (block 1): 2 rows in tree 0, 3 in tree 1");

  auto b0 = make_model<float>();
  b0.sym = shapes::make_sym<float>(2, 2, 3, 0, "cov");
  expect_error(b0, "sym (block 0): 6 rows in tree 0, 3 in tree 1");

  auto bc = make_model<double>();
  bc.sym.mix = seq<Eigen::MatrixXd>(2, 5, 0);
  const std::string msg = ptest::error_of([&] { pt::for_each([](auto&, auto&) {}, a, bc); });
  CAPTURE(msg);
  CHECK(msg.rfind("sym (block 1): 3 col", 0) == 0);
  CHECK(msg.find("in tree 0, 5 in tree 1") != std::string::npos);
}
