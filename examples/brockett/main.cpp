// Eigenvectors by optimization: the p eigenvectors of the smallest eigenvalues of a symmetric N x N matrix A as the
// minimiser of Brockett's cost f(Y) = tr(Y^T A Y D), D = diag(p, ..., 1), over the Stiefel manifold St(N, p). With
// distinct weights the minimiser is not just a basis of the invariant subspace but the eigenvectors themselves, in
// order, up to sign: column i pairs weight p + 1 - i with the i-th smallest eigenvalue. geomopt::minimize solves it
// (L-BFGS, and the trust region with the Euclidean Hessian-vector product 2 A V D), after geomopt::check_gradient and
// check_hessian have passed the hand-written derivatives at the start, and the result is checked against Eigen's
// SelfAdjointEigenSolver: Ritz values, eigenvector angles, the subspace angle, |Y^T Y - I|. Exits 1 when a check
// fails, 2 on bad arguments. docs/examples.md shows a run; CTest runs it with --quick.
//
//   brockett [--n N] [--p P] [--method lbfgs|trust_region|cg|gd|bfgs|all] [--seed S] [--quick]
#include <Eigen/Eigenvalues>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <geomopt/solvers.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "../common/cli.hpp"
#include "../common/solver_method.hpp"

namespace {

struct Arguments {
  Eigen::Index n = 500, p = 10;
  std::string method = "all";  // L-BFGS and the trust region
  unsigned long seed = 2026;
};

Arguments parse(int argc, char** argv) {
  Arguments a;
  // --quick first, so that explicit sizes override it wherever they stand.
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--quick") {
      a.n = 40;
      a.p = 3;
    }
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--quick") continue;
    if (flag != "--n" && flag != "--p" && flag != "--method" && flag != "--seed")
      throw std::invalid_argument("unknown argument '" + flag + "'");
    if (i + 1 == argc) throw std::invalid_argument(flag + " needs a value");
    const char* value = argv[++i];
    if (flag == "--n") a.n = geomopt::examples::parse_integer(flag, value, 2);
    if (flag == "--p") a.p = geomopt::examples::parse_integer(flag, value, 1);
    if (flag == "--seed") a.seed = static_cast<unsigned long>(geomopt::examples::parse_integer(flag, value, 0));
    if (flag == "--method") a.method = value;
  }
  if (a.p >= a.n)
    throw std::invalid_argument("--p must be below --n (St(N, p) with p < N), got p = " + std::to_string(a.p) +
                                ", N = " + std::to_string(a.n));
  return a;
}

std::vector<geomopt::SolverMethod> methods_of(const std::string& name) {
  using M = geomopt::SolverMethod;
  if (name == "all") return {M::lbfgs, M::trust_region};
  return {geomopt::examples::solver_method("--method", name, "all")};
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  Arguments args;
  std::vector<geomopt::SolverMethod> methods;
  try {
    args = parse(argc, argv);
    methods = methods_of(args.method);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr,
                 "brockett: %s\nusage: brockett [--n N] [--p P] [--method lbfgs|trust_region|cg|gd|bfgs|all] "
                 "[--seed S] [--quick]\n",
                 e.what());
    return 2;
  }
  const Eigen::Index N = args.n, p = args.p;
  geomopt::Rng rng(args.seed);

  // A Wigner matrix scaled so that its spectrum fills [-2, 2]: its smallest eigenvalues are separated by gaps of
  // order N^(-2/3), which is what makes the problem ill-conditioned for a first-order method.
  std::normal_distribution<double> normal;
  Eigen::MatrixXd B(N, N);
  for (Eigen::Index i = 0; i < B.size(); ++i) B(i) = normal(rng);
  const Eigen::MatrixXd A = (B + B.transpose()) / std::sqrt(2.0 * static_cast<double>(N));
  const Eigen::VectorXd weights = Eigen::VectorXd::LinSpaced(p, static_cast<double>(p), 1);

  const auto eigen_start = std::chrono::steady_clock::now();
  const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> reference(A);
  const double eigen_seconds = seconds_since(eigen_start);
  const Eigen::VectorXd lambda = reference.eigenvalues();          // ascending
  const Eigen::MatrixXd V = reference.eigenvectors().leftCols(p);  // the p smallest, in order
  const double scale = lambda.cwiseAbs().maxCoeff();               // |A|_2
  double optimum = 0;
  for (Eigen::Index i = 0; i < p; ++i) optimum += weights[i] * lambda[i];
  std::printf("Brockett cost on St(%td, %td), A a %td x %td Wigner matrix (seed %lu), |A|_2 = %.4f\n", N, p, N, N,
              args.seed, scale);
  std::printf(
      "SelfAdjointEigenSolver: %.3f s; lambda_1..%td = %.6f ... %.6f, smallest gap %.2e among the %td + 1 "
      "lowest\n\n",
      eigen_seconds, p, lambda[0], lambda[p - 1], (lambda.segment(1, p) - lambda.head(p)).minCoeff(), p);

  // f(Y) = sum_i w_i y_i^T A y_i; its Euclidean gradient 2 A Y D and Hessian-vector product 2 A Xi D.
  auto cost = [&](const geomopt::Stiefel<double>& y, geomopt::Stiefel<double>* egrad) {
    const Eigen::MatrixXd ay = A * y.value();
    if (egrad != nullptr) egrad->value() = 2 * ay * weights.asDiagonal();
    return (y.value().transpose() * ay).diagonal().dot(weights);
  };
  auto hessian = [&](const geomopt::Stiefel<double>&, const geomopt::Stiefel<double>& xi,
                     geomopt::Stiefel<double>* hv) { hv->value() = 2 * A * xi.value() * weights.asDiagonal(); };

  const auto start = geomopt::Stiefel<double>::random_point(rng, N, p);
  // The derivatives against the cost's own values, before any solver relies on them.
  const geomopt::DerivativeCheck gradient_check = geomopt::check_gradient(cost, start);
  const geomopt::DerivativeCheck hessian_check = geomopt::check_hessian(cost, hessian, start);
  std::printf("%s\n%s\n\n", gradient_check.BriefReport().c_str(), hessian_check.BriefReport().c_str());
  if (!gradient_check.passed || !hessian_check.passed) {
    std::printf("%s%s\nsome checks FAILED\n", gradient_check.FullReport().c_str(), hessian_check.FullReport().c_str());
    return 1;
  }
  bool all_passed = true;
  for (const geomopt::SolverMethod method : methods) {
    geomopt::SolverOptions options;
    options.method = method;
    options.gradient_tolerance = 1e-10 * scale;
    options.max_iterations = 20000;
    geomopt::Stiefel<double> Y = start;
    const geomopt::SolverSummary summary = method == geomopt::SolverMethod::trust_region
                                               ? geomopt::minimize(cost, hessian, Y, options)
                                               : geomopt::minimize(cost, Y, options);
    std::printf("%s\n", summary.BriefReport().c_str());
    if (summary.num_hessian_evaluations > 0)
      std::printf("  Hessian-vector products           %d\n", summary.num_hessian_evaluations);

    // Per column: the Ritz value against lambda_i, the residual |A y_i - rho_i y_i|, and the angle to v_i (as the
    // chord |y_i -+ v_i|, which keeps its accuracy at small angles where 1 - |y_i . v_i| does not).
    const Eigen::MatrixXd y = Y.value();
    double value_error = 0, residual = 0, angle = 0, min_cosine = 1;
    for (Eigen::Index i = 0; i < p; ++i) {
      const double rho = y.col(i).dot(A * y.col(i));
      value_error = std::max(value_error, std::abs(rho - lambda[i]) / scale);
      residual = std::max(residual, (A * y.col(i) - rho * y.col(i)).norm() / scale);
      const double cosine = y.col(i).dot(V.col(i));
      min_cosine = std::min(min_cosine, std::abs(cosine));
      angle = std::max(angle, (y.col(i) - std::copysign(1.0, cosine) * V.col(i)).norm());
    }
    // The sine of the largest principal angle between span(Y) and span(V): |(I - V V^T) Y|_2.
    const Eigen::MatrixXd outside = y - V * (V.transpose() * y);
    const double subspace = Eigen::JacobiSVD<Eigen::MatrixXd>(outside).singularValues()(0);
    const double cost_gap = (summary.final_cost - optimum) / (std::abs(optimum) + 1);
    const double defect = geomopt::check(Y);
    std::printf("  max |rho_i - lambda_i| / |A|_2    %.2e   (Ritz values y_i^T A y_i)\n", value_error);
    std::printf("  max |A y_i - rho_i y_i| / |A|_2   %.2e\n", residual);
    std::printf("  min |y_i . v_i|                   %.15f\n", min_cosine);
    std::printf("  max angle(y_i, +-v_i)             %.2e\n", angle);
    std::printf("  sin angle(span Y, span V)         %.2e\n", subspace);
    std::printf("  (f - f*) / (|f*| + 1)             %.2e\n", cost_gap);
    std::printf("  |Y^T Y - I|_F                     %.2e\n\n", defect);
    // An eigenvector is determined to |residual| / gap (Davis-Kahan): the angle bounds leave room for gaps down to
    // 1e-3 |A|_2 at the gradient tolerance.
    const bool passed = summary.IsSolutionUsable() && value_error < 1e-10 && residual < 1e-9 && angle < 1e-7 &&
                        subspace < 1e-7 && std::abs(cost_gap) < 1e-10 && defect < 1e-12;
    if (!passed) std::printf("  FAILED: %s\n\n", summary.message.c_str());
    all_passed = all_passed && passed;
  }
  std::printf("%s\n", all_passed ? "all checks passed" : "some checks FAILED");
  return all_passed ? 0 : 1;
}
