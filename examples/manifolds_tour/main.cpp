// A tour of geomopt::manifolds: Riemannian gradient descent on the Stiefel manifold (the Brockett cost, whose minimum
// is known from eigenvalues) with a section that travels with the point, and the Karcher mean of SPD matrices through
// the exponential map and its inverse. docs/manifolds.md shows this file; CTest runs it.
#include <geomopt/manifolds.hpp>

#include <Eigen/Eigenvalues>
#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  geomopt::Rng rng(2026);

  // Brockett: minimise f(Y) = tr(Y^T A Y D) over St(20, 5), A symmetric, D = diag(1..5). The minimum pairs the
  // smallest eigenvalues of A with the largest weights: sum_i d_i lambda_(n + 1 - i).
  const Eigen::Index N = 20, n = 5;
  const Eigen::MatrixXd G = Eigen::MatrixXd::Random(N, N);
  const Eigen::MatrixXd A = (G + G.transpose()) / 2;
  const Eigen::VectorXd d = Eigen::VectorXd::LinSpaced(n, 1, n);
  const Eigen::VectorXd lambda = Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(A).eigenvalues();
  double optimum = 0;
  for (Eigen::Index i = 0; i < n; ++i) optimum += d[i] * lambda[n - 1 - i];

  auto Y = geomopt::Stiefel<double>::random_point(rng, N, n);
  auto section = geomopt::make_section(Y, geomopt::SectionPolicy::transported);
  auto cost = [&](const Eigen::MatrixXd& y) { return (y.transpose() * A * y * d.asDiagonal()).trace(); };
  const double step = 0.5 / (A.norm() * n);
  for (int iteration = 0; iteration < 4000; ++iteration) {
    const Eigen::MatrixXd egrad = 2 * A * Y.value() * d.asDiagonal();  // Euclidean gradient
    auto xi = geomopt::lift(Y, section, egrad);                        // Riemannian gradient, tangent coordinates
    xi.A().storage() *= -step;
    xi.B() *= -step;
    geomopt::retract(Y, section, xi, geomopt::Retraction::cayley);  // O(N n^2); moves the section too
  }
  const double brockett_gap = (cost(Y.value()) - optimum) / std::abs(optimum);
  std::printf("Brockett on St(%td, %td): f = %.12f, optimum %.12f, relative gap %.1e, check %.1e\n", N, n,
              cost(Y.value()), optimum, brockett_gap, geomopt::check(Y));

  // Karcher mean of SPD matrices: X <- Exp_X(mean_i Log_X(P_i)) in the affine-invariant metric.
  std::vector<geomopt::SPD<double>> points;
  for (int i = 0; i < 6; ++i) points.push_back(geomopt::SPD<double>::random_point(rng, 4));
  geomopt::SPD<double> X(4);
  double gradient_norm = 0;
  for (int iteration = 0; iteration < 50; ++iteration) {
    const auto frame = geomopt::make_section(X);
    geomopt::ScaledSymmetricMatrix<double> mean(4);
    for (const auto& p : points)
      mean.storage() += geomopt::inverse_retract(X, frame, p, geomopt::Retraction::geodesic).storage() / 6.0;
    gradient_norm = std::sqrt(geomopt::inner(X, mean, mean));
    geomopt::retract(X, mean, geomopt::Retraction::geodesic);
  }
  std::printf("Karcher mean of 6 SPD(4) matrices: |grad| = %.1e, check %.1e\n", gradient_norm, geomopt::check(X));

  return brockett_gap < 1e-8 && gradient_norm < 1e-10 && geomopt::check(Y) < 1e-12 ? 0 : 1;
}
