// A tour of geomopt's Riemannian solvers: the Brockett cost tr(X^T A X N) on St(20, 5), whose minimum is known from
// the eigenvalues of A, solved by every method from the same start after check_gradient has passed the gradient
// there. Prints the check's and each method's BriefReport and L-BFGS's FullReport; CTest runs it, and it exits
// non-zero if the check fails or a method misses the minimum by more than 1e-8 relative.
#include <Eigen/Eigenvalues>
#include <cmath>
#include <cstdio>
#include <geomopt/solvers.hpp>
#include <random>

int main() {
  geomopt::Rng rng(2026);

  // A = B + B^T with B standard normal, N = diag(1..5). The minimum pairs the smallest eigenvalues of A with the
  // largest weights: sum_i N_ii lambda_(6 - i), lambda ascending.
  const Eigen::Index N = 20, p = 5;
  std::normal_distribution<double> normal;
  Eigen::MatrixXd B(N, N);
  for (Eigen::Index i = 0; i < B.size(); ++i) B(i) = normal(rng);
  const Eigen::MatrixXd A = B + B.transpose();
  const Eigen::VectorXd weights = Eigen::VectorXd::LinSpaced(p, 1, static_cast<double>(p));
  const Eigen::VectorXd lambda = Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(A).eigenvalues();
  double optimum = 0;
  for (Eigen::Index i = 0; i < p; ++i) optimum += weights[i] * lambda[p - 1 - i];

  // The cost and, when asked, its Euclidean gradient 2 A X N with respect to the point's dense value.
  auto cost = [&](const geomopt::Stiefel<double>& x, geomopt::Stiefel<double>* egrad) {
    const Eigen::MatrixXd ax = A * x.value();
    if (egrad != nullptr) egrad->value() = 2 * ax * weights.asDiagonal();
    return (x.value().transpose() * ax).diagonal().dot(weights);
  };

  const auto start = geomopt::Stiefel<double>::random_point(rng, N, p);
  const geomopt::DerivativeCheck check = geomopt::check_gradient(cost, start);
  std::printf("%s\n", check.BriefReport().c_str());
  if (!check.passed) {
    std::printf("%s\n", check.FullReport().c_str());
    return 1;
  }
  bool all_reached = true;
  for (const geomopt::SolverMethod method :
       {geomopt::SolverMethod::gradient_descent, geomopt::SolverMethod::conjugate_gradient,
        geomopt::SolverMethod::lbfgs, geomopt::SolverMethod::bfgs, geomopt::SolverMethod::trust_region}) {
    geomopt::SolverOptions options;
    options.method = method;
    options.gradient_tolerance = 1e-9;
    options.max_iterations = 20000;
    std::string error;
    if (!options.IsValid(&error)) {
      std::printf("invalid options: %s\n", error.c_str());
      return 1;
    }
    geomopt::Stiefel<double> x = start;
    const geomopt::SolverSummary summary = geomopt::minimize(cost, x, options);
    const double gap = std::abs(summary.final_cost - optimum) / std::abs(optimum);
    std::printf("%s\n  relative gap to the minimum %.1e, |X^T X - I| %.1e\n", summary.BriefReport().c_str(), gap,
                geomopt::check(x));
    all_reached = all_reached && gap < 1e-8 && summary.IsSolutionUsable();
    if (method == geomopt::SolverMethod::lbfgs) std::printf("%s\n", summary.FullReport().c_str());
  }
  std::printf("Brockett minimum on St(%td, %td): %.12f\n", N, p, optimum);
  return all_reached ? 0 : 1;
}
