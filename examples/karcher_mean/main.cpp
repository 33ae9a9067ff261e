// The Riemannian (Karcher) mean of symmetric positive definite matrices: the minimiser of
// f(X) = 1/(2K) sum_i d(X, A_i)^2 over SPD(n), d the affine-invariant distance |log(X^-1/2 A_i X^-1/2)|_F, solved by
// geomopt::minimize on geomopt::SPD. Three cases, each checked against something the solver never sees:
//   commuting   A_i = Q diag(a_i) Q^T: the mean is Q diag(exp(mean_i log a_i)) Q^T;
//   two         A, B: the geodesic midpoint A # B = A^1/2 (A^-1/2 B A^-1/2)^1/2 A^1/2;
//   general     K random matrices: the first-order condition sum_i log(X^-1/2 A_i X^-1/2) = 0 (through the
//               symmetric square root, where the cost goes through a Cholesky factor), det X = (prod_i det A_i)^(1/K),
//               and the harmonic-arithmetic sandwich (sum_i A_i^-1 / K)^-1 <= X <= sum_i A_i / K (Loewner order).
// Each case also prints the distances from the Karcher mean to the arithmetic and log-Euclidean means, and their
// costs, which the Karcher mean must not exceed; before solving, geomopt::check_gradient checks the hand-written
// gradient at the start. Exits 1 when a check fails, 2 on bad arguments. docs/examples.md shows a run; CTest runs it
// with --quick.
//
//   karcher_mean [--n N] [--k K] [--method lbfgs|trust_region|cg|gd|bfgs] [--seed S] [--quick]
#include <Eigen/Dense>
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

using Matrix = Eigen::MatrixXd;

struct Arguments {
  Eigen::Index n = 10, k = 20;
  geomopt::SolverMethod method = geomopt::SolverMethod::lbfgs;
  unsigned long seed = 7;
};

Arguments parse(int argc, char** argv) {
  Arguments a;
  // --quick first, so that explicit sizes override it wherever they stand.
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--quick") {
      a.n = 4;
      a.k = 5;
    }
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--quick") continue;
    if (flag != "--n" && flag != "--k" && flag != "--method" && flag != "--seed")
      throw std::invalid_argument("unknown argument '" + flag + "'");
    if (i + 1 == argc) throw std::invalid_argument(flag + " needs a value");
    const char* value = argv[++i];
    if (flag == "--n") a.n = geomopt::examples::parse_integer(flag, value, 1);
    if (flag == "--k") a.k = geomopt::examples::parse_integer(flag, value, 2);
    if (flag == "--seed") a.seed = static_cast<unsigned long>(geomopt::examples::parse_integer(flag, value, 0));
    if (flag == "--method") a.method = geomopt::examples::solver_method(flag, value);
  }
  return a;
}

// f(M) for a symmetric M, through its eigendecomposition.
template <class F>
Matrix symmetric_function(const Matrix& m, F f) {
  const Eigen::SelfAdjointEigenSolver<Matrix> eig(m);
  return eig.eigenvectors() * eig.eigenvalues().unaryExpr(f).asDiagonal() * eig.eigenvectors().transpose();
}

Matrix mean_of(const std::vector<Matrix>& ms) {
  Matrix sum = Matrix::Zero(ms[0].rows(), ms[0].cols());
  for (const Matrix& m : ms) sum += m;
  return sum / static_cast<double>(ms.size());
}

// The affine-invariant distance from the generalized eigenvalues of (Y, X), the eigenvalues of X^-1 Y: a route
// that shares nothing with the cost below.
double distance(const Matrix& x, const Matrix& y) {
  const Eigen::GeneralizedSelfAdjointEigenSolver<Matrix> eig(y, x);
  return std::sqrt(eig.eigenvalues().array().log().square().sum());
}

// f(X) = 1/(2K) sum_i |log(L^-1 A_i L^-T)|_F^2 with X = L L^T (L^-1 A_i L^-T is congruent to X^-1/2 A_i X^-1/2
// by an orthogonal matrix, so its logarithm has the same norm). The Euclidean gradient is
// -1/K sum_i L^-T log(L^-1 A_i L^-T) L^-1, whose Riemannian gradient X G X is minus the mean of the logarithms
// Log_X(A_i) = L log(L^-1 A_i L^-T) L^T.
double karcher_cost(const std::vector<Matrix>& points, const Matrix& x, Matrix* egrad) {
  const Eigen::LLT<Matrix> llt(x);
  if (llt.info() != Eigen::Success) throw std::domain_error("karcher_cost: X is not positive definite");
  const auto L = llt.matrixL();
  const double k = static_cast<double>(points.size());
  double f = 0;
  if (egrad != nullptr) egrad->setZero(x.rows(), x.cols());
  for (const Matrix& a : points) {
    Matrix c = L.solve(a);
    c = L.solve(c.transpose().eval());  // L^-1 A L^-T, symmetric
    const Eigen::SelfAdjointEigenSolver<Matrix> eig(c);
    const Eigen::VectorXd log_mu = eig.eigenvalues().array().log();
    f += log_mu.squaredNorm() / (2 * k);
    if (egrad != nullptr) {
      const Matrix log_c = eig.eigenvectors() * log_mu.asDiagonal() * eig.eigenvectors().transpose();
      Matrix g = L.transpose().solve(log_c);  // L^-T log(C)
      g = L.transpose().solve(g.transpose().eval());
      *egrad -= g / k;
    }
  }
  return f;
}

struct Case {
  std::string name;
  std::vector<Matrix> points;
  Matrix reference;  // empty when there is no closed form
};

// Solves one case, prints its report, and returns whether every check passed.
bool run(const Case& c, geomopt::SolverMethod method) {
  const Eigen::Index n = c.points[0].rows();
  const double k = static_cast<double>(c.points.size());
  const Matrix arithmetic = mean_of(c.points);
  std::vector<Matrix> logs, inverses;
  for (const Matrix& a : c.points) {
    logs.push_back(symmetric_function(a, [](double v) { return std::log(v); }));
    inverses.push_back(a.inverse());
  }
  const Matrix log_euclidean = symmetric_function(mean_of(logs), [](double v) { return std::exp(v); });
  const Matrix harmonic = mean_of(inverses).inverse();

  auto cost = [&](const geomopt::SPD<double>& x, geomopt::SPD<double>* egrad) {
    return karcher_cost(c.points, x.value(), egrad != nullptr ? &egrad->value() : nullptr);
  };
  geomopt::SPD<double> X(arithmetic);  // the natural first guess
  const geomopt::DerivativeCheck check = geomopt::check_gradient(cost, X);
  if (!check.passed) {
    std::printf("%s: the gradient fails its check\n%s\n", c.name.c_str(), check.FullReport().c_str());
    return false;
  }
  geomopt::SolverOptions options;
  options.method = method;
  options.gradient_tolerance = 1e-12;
  options.max_iterations = 5000;
  const geomopt::SolverSummary summary = geomopt::minimize(cost, X, options);
  const Matrix& x = X.value();
  std::printf("%s: K = %td SPD(%td) matrices\n%s\n%s\n", c.name.c_str(), static_cast<Eigen::Index>(c.points.size()), n,
              check.BriefReport().c_str(), summary.BriefReport().c_str());

  bool passed = summary.IsSolutionUsable() && geomopt::check(X) < 1e-12;
  if (c.reference.size() > 0) {
    const double error = (x - c.reference).norm() / c.reference.norm();
    std::printf("  |X - closed form|_F / |closed form|_F      %.2e\n", error);
    passed = passed && error < 1e-10;
  }
  // The first-order condition, through X^-1/2 rather than the Cholesky factor the cost uses.
  const Matrix inverse_root = symmetric_function(x, [](double v) { return 1 / std::sqrt(v); });
  Matrix stationarity = Matrix::Zero(n, n);
  for (const Matrix& a : c.points)
    stationarity += symmetric_function(inverse_root * a * inverse_root, [](double v) { return std::log(v); });
  const double first_order = stationarity.norm() / k;
  double log_det_mean = 0;
  for (const Matrix& a : c.points) log_det_mean += std::log(a.determinant()) / k;
  const double det_error = std::abs(std::log(x.determinant()) - log_det_mean);
  // Loewner order: the smallest eigenvalues of (arithmetic - X) and (X - harmonic), relative to |X|.
  const double below_arithmetic = Eigen::SelfAdjointEigenSolver<Matrix>(arithmetic - x).eigenvalues()(0) / x.norm();
  const double above_harmonic = Eigen::SelfAdjointEigenSolver<Matrix>(x - harmonic).eigenvalues()(0) / x.norm();
  std::printf("  |1/K sum_i log(X^-1/2 A_i X^-1/2)|_F       %.2e\n", first_order);
  std::printf("  |log det X - mean_i log det A_i|           %.2e\n", det_error);
  std::printf("  lambda_min(arithmetic - X) / |X|_F         %+.2e   (>= 0: X <= arithmetic mean)\n", below_arithmetic);
  std::printf("  lambda_min(X - harmonic) / |X|_F           %+.2e   (>= 0: X >= harmonic mean)\n", above_harmonic);
  const double f_karcher = karcher_cost(c.points, x, nullptr);
  const double f_arithmetic = karcher_cost(c.points, arithmetic, nullptr);
  const double f_log_euclidean = karcher_cost(c.points, log_euclidean, nullptr);
  std::printf("  d(X, arithmetic mean)    %.6f   cost %.10f (Karcher mean: %.10f)\n", distance(x, arithmetic),
              f_arithmetic, f_karcher);
  std::printf("  d(X, log-Euclidean mean) %.6f   cost %.10f\n\n", distance(x, log_euclidean), f_log_euclidean);
  passed = passed && first_order < 1e-10 && det_error < 1e-10 && below_arithmetic > -1e-12 && above_harmonic > -1e-12 &&
           f_karcher <= f_arithmetic && f_karcher <= f_log_euclidean * (1 + 1e-14);
  if (!passed) std::printf("  FAILED: %s\n\n", summary.message.c_str());
  return passed;
}

}  // namespace

int main(int argc, char** argv) {
  Arguments args;
  try {
    args = parse(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr,
                 "karcher_mean: %s\nusage: karcher_mean [--n N] [--k K] "
                 "[--method lbfgs|trust_region|cg|gd|bfgs] [--seed S] [--quick]\n",
                 e.what());
    return 2;
  }
  const Eigen::Index n = args.n, K = args.k;
  geomopt::Rng rng(args.seed);
  std::normal_distribution<double> normal;

  // Commuting matrices: one orthogonal Q, eigenvalues exp(z), z standard normal.
  Case commuting{"commuting", {}, Matrix()};
  const Matrix Q = geomopt::Stiefel<double>::random_point(rng, n, n).value();
  Eigen::ArrayXd log_sum = Eigen::ArrayXd::Zero(n);
  for (Eigen::Index i = 0; i < K; ++i) {
    Eigen::ArrayXd z(n);
    for (Eigen::Index j = 0; j < n; ++j) z[j] = normal(rng);
    commuting.points.push_back(Q * z.exp().matrix().asDiagonal() * Q.transpose());
    log_sum += z;
  }
  commuting.reference = Q * (log_sum / static_cast<double>(K)).exp().matrix().asDiagonal() * Q.transpose();

  Case two{"two matrices, against A # B", {}, Matrix()};
  for (int i = 0; i < 2; ++i) two.points.push_back(geomopt::SPD<double>::random_point(rng, n).value());
  auto root = [](const Matrix& m) { return symmetric_function(m, [](double v) { return std::sqrt(v); }); };
  const Matrix a_root = root(two.points[0]), a_inverse_root = a_root.inverse();
  two.reference = a_root * root(a_inverse_root * two.points[1] * a_inverse_root) * a_root;

  Case general{"general", {}, Matrix()};
  for (Eigen::Index i = 0; i < K; ++i) general.points.push_back(geomopt::SPD<double>::random_point(rng, n).value());

  std::printf("Karcher means on SPD(%td) by geomopt::minimize (%s), seed %lu\n\n", n, geomopt::to_string(args.method),
              args.seed);
  bool all_passed = true;
  for (const Case* c : {&commuting, &two, &general}) all_passed = run(*c, args.method) && all_passed;
  std::printf("%s\n", all_passed ? "all checks passed" : "some checks FAILED");
  return all_passed ? 0 : 1;
}
