// geomopt/manifolds/packed.hpp: the packed index formulas against dense matrices written out by hand, the
// pullback against finite differences, products against dense products, and the packed types as ptree leaves.
#include <doctest/doctest.h>

#include <ceres/jet.h>

#include <Eigen/Dense>
#include <geomopt/manifolds.hpp>
#include <stdexcept>
#include <type_traits>

namespace pt = geomopt::ptree;
using geomopt::LowerTriangular;
using geomopt::SkewSymMatrix;
using geomopt::SymmetricMatrix;
using geomopt::UpperTriangular;

namespace {

Eigen::VectorXd iota(Eigen::Index size) { return Eigen::VectorXd::LinSpaced(size, 1.0, static_cast<double>(size)); }

template <class A>
A with_storage(Eigen::Index n) {
  A a(n);
  a.storage() = iota(a.storage().size());
  return a;
}

}  // namespace

TEST_CASE("n = 3, storage 1..k: each packed type's dense form, written out by hand") {
  Eigen::Matrix3d sym, skew, lower, upper;
  // SymmetricMatrix: lower triangle with diagonal, row by row: (0,0) (1,0) (1,1) (2,0) (2,1) (2,2).
  sym << 1, 2, 4,  //
      2, 3, 5,     //
      4, 5, 6;
  // SkewSymMatrix: strict lower, row by row: (1,0) (2,0) (2,1); the upper triangle is minus it.
  skew << 0, -1, -2,  //
      1, 0, -3,       //
      2, 3, 0;
  // LowerTriangular: strict lower, row by row.
  lower << 0, 0, 0,  //
      1, 0, 0,       //
      2, 3, 0;
  // UpperTriangular: strict upper, column by column: (0,1) (0,2) (1,2).
  upper << 0, 1, 2,  //
      0, 0, 3,       //
      0, 0, 0;
  CHECK(with_storage<SymmetricMatrix<double>>(3).dense() == sym);
  CHECK(with_storage<SkewSymMatrix<double>>(3).dense() == skew);
  CHECK(with_storage<LowerTriangular<double>>(3).dense() == lower);
  CHECK(with_storage<UpperTriangular<double>>(3).dense() == upper);
  CHECK(SymmetricMatrix<double>(3).storage().size() == 6);
  CHECK(SkewSymMatrix<double>(3).storage().size() == 3);
  CHECK(LowerTriangular<double>(4).storage().size() == 6);
  CHECK(UpperTriangular<double>(1).storage().size() == 0);
}

TEST_CASE("the index formulas of the issue's table, entry by entry, at n = 7") {
  const Eigen::Index n = 7;
  const auto sym = with_storage<SymmetricMatrix<double>>(n);
  const auto skew = with_storage<SkewSymMatrix<double>>(n);
  const auto lower = with_storage<LowerTriangular<double>>(n);
  const auto upper = with_storage<UpperTriangular<double>>(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    for (Eigen::Index j = 0; j < n; ++j) {
      CAPTURE(i);
      CAPTURE(j);
      const double s_lower_diag = 1.0 + static_cast<double>(i >= j ? i * (i + 1) / 2 + j : j * (j + 1) / 2 + i);
      CHECK(sym(i, j) == s_lower_diag);
      const double s_strict = 1.0 + static_cast<double>(i > j ? i * (i - 1) / 2 + j : j * (j - 1) / 2 + i);
      CHECK(skew(i, j) == (i == j ? 0.0 : i > j ? s_strict : -s_strict));
      CHECK(lower(i, j) == (i > j ? s_strict : 0.0));
      CHECK(upper(i, j) == (i < j ? s_strict : 0.0));
      CHECK(sym.dense()(i, j) == sym(i, j));
    }
  }
}

TEST_CASE_TEMPLATE("from_dense takes the nearest packed matrix and inverts dense()", A, SymmetricMatrix<double>,
                   SkewSymMatrix<double>, LowerTriangular<double>, UpperTriangular<double>) {
  const Eigen::MatrixXd m = Eigen::MatrixXd::Random(5, 5);
  Eigen::MatrixXd expected;
  if constexpr (std::is_same_v<A, SymmetricMatrix<double>>) expected = (m + m.transpose()) / 2;
  else if constexpr (std::is_same_v<A, SkewSymMatrix<double>>) expected = (m - m.transpose()) / 2;
  else if constexpr (std::is_same_v<A, LowerTriangular<double>>)
    expected = m.triangularView<Eigen::StrictlyLower>();
  else expected = m.triangularView<Eigen::StrictlyUpper>();
  const A a = A::from_dense(m);
  CHECK((a.dense() - expected).norm() < 1e-15);
  CHECK(A::from_dense(a.dense()) == a);
  CHECK_THROWS_AS(A::from_dense(Eigen::MatrixXd::Zero(3, 4)), std::invalid_argument);
  CHECK_THROWS_AS(A::from_storage(Eigen::VectorXd::Zero(A(5).storage().size() + 1)), std::invalid_argument);
}

TEST_CASE_TEMPLATE("pullback is the adjoint of storage -> dense, checked by finite differences", A,
                   SymmetricMatrix<double>, SkewSymMatrix<double>, LowerTriangular<double>, UpperTriangular<double>) {
  const Eigen::Index n = 6;
  A a(n);
  a.storage().setRandom();
  const Eigen::MatrixXd g = Eigen::MatrixXd::Random(n, n);
  // f(s) = sum_ij g_ij * dense(s)_ij + 0.5 * |dense(s)|^2, whose dense gradient is g + dense(s).
  auto f = [&](const Eigen::VectorXd& s) {
    const Eigen::MatrixXd d = A::from_storage(s).dense();
    return (g.array() * d.array()).sum() + 0.5 * d.squaredNorm();
  };
  const Eigen::VectorXd grad = a.pullback(g + a.dense());
  const double h = 1e-6;
  for (Eigen::Index k = 0; k < a.storage().size(); ++k) {
    Eigen::VectorXd plus = a.storage(), minus = a.storage();
    plus[k] += h;
    minus[k] -= h;
    CHECK(grad[k] == doctest::Approx((f(plus) - f(minus)) / (2 * h)).epsilon(1e-7));
  }
  CHECK_THROWS_AS(a.pullback(Eigen::MatrixXd::Zero(n, n + 1)), std::invalid_argument);
}

TEST_CASE_TEMPLATE("products with dense matrices equal the dense products", A, SymmetricMatrix<double>,
                   SkewSymMatrix<double>, LowerTriangular<double>, UpperTriangular<double>) {
  A a(5);
  a.storage().setRandom();
  const Eigen::MatrixXd b = Eigen::MatrixXd::Random(5, 3);
  const Eigen::MatrixXd c = Eigen::MatrixXd::Random(2, 5);
  CHECK(((a * b) - a.dense() * b).norm() < 1e-13);
  CHECK(((c * a) - c * a.dense()).norm() < 1e-13);
  CHECK_THROWS_AS(a * Eigen::MatrixXd::Zero(4, 2), std::invalid_argument);
}

namespace {
template <class T>
struct SympLayer {
  SymmetricMatrix<T> s;
  SkewSymMatrix<T> k;
  Eigen::Matrix<T, Eigen::Dynamic, 1> b;
  GEOMOPT_PTREE(s, k, b)
};
}  // namespace

TEST_CASE("packed matrices as ptree leaves: flatten order, round trips, rebind, cast and ceres::Jet") {
  SympLayer<double> layer{with_storage<SymmetricMatrix<double>>(3), with_storage<SkewSymMatrix<double>>(3),
                          Eigen::Vector2d(7, 8)};
  static_assert(std::is_same_v<pt::rebind_t<SympLayer<double>, float>, SympLayer<float>>);
  static_assert(std::is_same_v<pt::scalar_t<SympLayer<float>>, float>);

  Eigen::VectorXd expected(6 + 3 + 2);
  expected << 1, 2, 3, 4, 5, 6, 1, 2, 3, 7, 8;
  const Eigen::VectorXd v = pt::flatten(layer);
  CHECK(v == expected);
  CHECK(pt::count(layer) == 11);
  CHECK(pt::visits(layer) == std::vector<std::string>{"s: leaf 6", "k: leaf 3", "b: leaf 2"});
  CHECK(pt::summary(layer).find("SymmetricMatrix") != std::string::npos);

  const SympLayer<double> back = pt::unflatten(layer, Eigen::VectorXd(2 * v));
  CHECK(back.s.n() == 3);
  CHECK(back.s.dense() == 2 * layer.s.dense());
  CHECK(back.k.dense() == 2 * layer.k.dense());

  const SympLayer<float> f = pt::cast<float>(layer);
  CHECK(f.s.dense() == layer.s.dense().cast<float>());

  // A derivative through the packed storage: d/ds of x^T S x, S = dense(s), is the pullback of x x^T.
  using Jet = ceres::Jet<double, 11>;
  Eigen::Matrix<Jet, Eigen::Dynamic, 1> seeded(v.size());
  for (Eigen::Index i = 0; i < v.size(); ++i) seeded[i] = Jet(v[i], static_cast<int>(i));
  const SympLayer<Jet> jl = pt::unflatten(layer, seeded);
  const Eigen::Vector3d x(0.5, -1.0, 2.0);
  const Jet value = (x.cast<Jet>().transpose() * jl.s.dense() * x.cast<Jet>())(0, 0);
  CHECK(value.a == doctest::Approx(x.dot(layer.s.dense() * x)));
  const Eigen::VectorXd expected_grad = layer.s.pullback(x * x.transpose());
  for (Eigen::Index k = 0; k < 6; ++k) CHECK(value.v[k] == doctest::Approx(expected_grad[k]));
  for (Eigen::Index k = 6; k < 11; ++k) CHECK(value.v[k] == 0.0);
}
