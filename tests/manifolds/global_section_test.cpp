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
