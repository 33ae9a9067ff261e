// geomopt/manifolds/global_section.hpp: lambda(Y) [I; 0] = Y, lambda orthogonal, deterministic, and the implicit
// products equal products with the dense N x N matrix.
#include <doctest/doctest.h>

#include <Eigen/Dense>
#include <geomopt/manifolds.hpp>
#include <stdexcept>

using geomopt::GlobalSection;

namespace {
// An N x n matrix with orthonormal columns, from the QR factorisation of a seeded random matrix (independent of the
// section's own construction: the thin Q of Eigen's ColPivHouseholderQR).
Eigen::MatrixXd stiefel_point(Eigen::Index N, Eigen::Index n, unsigned seed) {
  if (n == 0) return Eigen::MatrixXd(N, 0);
  std::srand(seed);
  const Eigen::MatrixXd m = Eigen::MatrixXd::Random(N, n);
  Eigen::ColPivHouseholderQR<Eigen::MatrixXd> qr(m);
  const Eigen::MatrixXd q = qr.householderQ() * Eigen::MatrixXd::Identity(N, n);
  return q;
}
}  // namespace

TEST_CASE("lambda(Y) [I; 0] = Y and lambda is orthogonal, for several sizes") {
  // Not structured bindings: CAPTURE refers to them from a lambda, which C++20 allows but clang 14 does not.
  for (const auto& size : {std::pair<Eigen::Index, Eigen::Index>{20, 3}, {5, 5}, {50, 1}, {7, 0}}) {
    const Eigen::Index N = size.first, n = size.second;
    CAPTURE(N);
    CAPTURE(n);
    const Eigen::MatrixXd y = stiefel_point(N, n, static_cast<unsigned>(N * 31 + n));
    const GlobalSection<double> lambda(y);
    const Eigen::MatrixXd l = lambda.dense();
    CHECK((l.leftCols(n) - y).norm() < 1e-12);
    CHECK((lambda.Y() - y).norm() < 1e-12);
    CHECK((l.transpose() * l - Eigen::MatrixXd::Identity(N, N)).norm() < 1e-12);
  }
}

TEST_CASE("the section is deterministic and its implicit products match the dense matrix") {
  const Eigen::MatrixXd y = stiefel_point(30, 4, 7);
  const GlobalSection<double> a(y), b(y);
  CHECK(a.dense() == b.dense());
  const Eigen::MatrixXd x = Eigen::MatrixXd::Random(30, 6);
  CHECK((a.apply(x) - a.dense() * x).norm() < 1e-12);
  CHECK((a.apply_transpose(x) - a.dense().transpose() * x).norm() < 1e-12);
  CHECK((a.apply(a.apply_transpose(x)) - x).norm() < 1e-12);
  CHECK_THROWS_AS(a.apply(Eigen::MatrixXd::Zero(29, 1)), std::invalid_argument);
  CHECK_THROWS_AS(GlobalSection<double>(Eigen::MatrixXd::Zero(2, 3)), std::invalid_argument);
}

TEST_CASE("float sections are orthogonal to float precision") {
  const Eigen::MatrixXf y = stiefel_point(16, 3, 11).cast<float>();
  const GlobalSection<float> lambda(y);
  const Eigen::MatrixXf l = lambda.dense();
  CHECK((l.transpose() * l - Eigen::MatrixXf::Identity(16, 16)).norm() < 1e-5f);
  CHECK((l.leftCols(3) - y).norm() < 1e-5f);
}

// The reflectors map each column onto +|x| e_k, so lambda has no jump where a pivot changes sign (LAPACK's and
// Eigen's choice, -sign(x_1) |x| e_k, flips the complement columns there). Two points 2e-9 apart on either side of
// y(0, 0) = 0 must have sections 1e-8 apart, on the sphere and on St(6, 2), in double and float's own scale.
TEST_CASE("the section is continuous where a pivot changes sign") {
  Eigen::MatrixXd y = stiefel_point(6, 2, 5);
  y(0, 0) = 0.0;
  y.col(0).normalize();
  y.col(1) -= y.col(0) * y.col(0).dot(y.col(1));
  y.col(1).normalize();
  for (Eigen::Index n : {1, 2}) {
    CAPTURE(n);
    Eigen::MatrixXd plus = y.leftCols(n), minus = y.leftCols(n);
    plus(0, 0) = 1e-9;
    minus(0, 0) = -1e-9;
    const Eigen::MatrixXd lp = GlobalSection<double>(plus).dense(), lm = GlobalSection<double>(minus).dense();
    CHECK((lp - lm).norm() < 1e-8);
    CHECK((lp.transpose() * lp - Eigen::MatrixXd::Identity(6, 6)).norm() < 1e-12);
  }
  // Second pivot: the first column is +e_1 exactly, the second column's pivot y(1, 1) crosses zero.
  Eigen::MatrixXd e(5, 2);
  e << 1, 0, 0, 1e-9, 0, 0.6, 0, -0.8, 0, 0;
  Eigen::MatrixXd f = e;
  f(1, 1) = -1e-9;
  CHECK((GlobalSection<double>(e).dense() - GlobalSection<double>(f).dense()).norm() < 1e-8);
}
