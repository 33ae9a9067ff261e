// Brockett's cost on St(20, 5) and St(200, 10) by every solver: iterations, cost evaluations, final error against the
// eigenvalue optimum, final gradient norm and time (median of --reps solves from the same start). Two stopping
// tests: the gradient norm below 1e-6 of the initial one (the default test of ROPTLIB and pymanopt, for the
// comparison in docs/benchmarks.md) and an absolute 1e-9.
//
//   build/bench/benchmarks/solvers_bench [--reps=R] [--sizes=small|large|all] [--quick]
// --quick (a smoke run for CI, benchmarks/run_all --quick): --reps=1 --sizes=small.
#include <Eigen/Eigenvalues>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <geomopt/solvers.hpp>
#include <random>
#include <string>
#include <vector>

namespace {

struct Brockett {
  Eigen::MatrixXd A;
  Eigen::VectorXd w;  // N = diag(1..p)
  double optimum = 0;

  Brockett(int n, int p, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<double> normal;
    const Eigen::MatrixXd B = Eigen::MatrixXd::NullaryExpr(n, n, [&] { return normal(rng); });
    A = B + B.transpose();
    w = Eigen::VectorXd::LinSpaced(p, 1, p);
    // The minimum pairs the largest weight with the smallest eigenvalue.
    const Eigen::VectorXd lambda = Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(A, Eigen::EigenvaluesOnly).eigenvalues();
    for (int i = 0; i < p; ++i) optimum += w(p - 1 - i) * lambda(i);
  }

  double operator()(const geomopt::Stiefel<double>& x, geomopt::Stiefel<double>* g) const {
    const Eigen::MatrixXd ax = A * x.value();
    if (g != nullptr) g->value() = 2 * ax * w.asDiagonal();
    return (x.value().cwiseProduct(ax) * w).sum();
  }
  // The Euclidean Hessian-vector product, for the trust region's second row.
  void hessian(const geomopt::Stiefel<double>& xi, geomopt::Stiefel<double>* hv) const {
    hv->value().noalias() = 2 * A * xi.value() * w.asDiagonal();
  }
};

geomopt::Stiefel<double> start(int n, int p, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  const Eigen::MatrixXd m = Eigen::MatrixXd::NullaryExpr(n, p, [&] { return normal(rng); });
  Eigen::HouseholderQR<Eigen::MatrixXd> qr(m);
  return geomopt::Stiefel<double>(Eigen::MatrixXd(qr.householderQ() * Eigen::MatrixXd::Identity(n, p)));
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 9;
  std::string sizes = "all";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--reps=", 7) == 0) {
      reps = std::max(1, std::atoi(argv[i] + 7));
    } else if (std::strncmp(argv[i], "--sizes=", 8) == 0) {
      sizes = argv[i] + 8;
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      reps = 1;
      sizes = "small";
    } else {
      std::fprintf(stderr, "usage: %s [--reps=R] [--sizes=small|large|all] [--quick]\n", argv[0]);
      return 2;
    }
  }
  struct Size {
    int n, p;
  };
  std::vector<Size> shapes;
  if (sizes != "large") shapes.push_back({20, 5});
  if (sizes != "small") shapes.push_back({200, 10});
  struct Method {
    geomopt::SolverMethod method;
    const char* name;
    bool hessian;  // the user's Euclidean Hessian-vector product instead of differences of gradients
  };
  const Method methods[] = {{geomopt::SolverMethod::gradient_descent, "gradient descent", false},
                            {geomopt::SolverMethod::conjugate_gradient, "CG (PR+)", false},
                            {geomopt::SolverMethod::lbfgs, "L-BFGS", false},
                            {geomopt::SolverMethod::bfgs, "BFGS", false},
                            {geomopt::SolverMethod::trust_region, "trust region", false},
                            {geomopt::SolverMethod::trust_region, "trust region, user's Hessian", true}};

  for (const Size s : shapes) {
    const Brockett cost(s.n, s.p, 2026);
    for (const bool relative : {true, false}) {
      std::printf("\n### St(%d, %d), stop at %s, median of %d solves\n\n", s.n, s.p,
                  relative ? "gradient norm <= 1e-6 x initial" : "gradient norm <= 1e-9", reps);
      std::printf("| method | iterations | cost evaluations | relative error of f | final gradient norm | time |\n");
      std::printf("|---|---|---|---|---|---|\n");
      for (const auto& [method, name, with_hessian] : methods) {
        geomopt::SolverOptions options;
        options.method = method;
        options.max_iterations = 100000;
        options.gradient_tolerance = relative ? 0 : 1e-9;
        options.relative_gradient_tolerance = relative ? 1e-6 : 0;
        std::vector<double> times;
        geomopt::SolverSummary summary;
        for (int r = 0; r < reps; ++r) {
          geomopt::Stiefel<double> x = start(s.n, s.p, 7);
          const auto t0 = std::chrono::steady_clock::now();
          summary = with_hessian ? geomopt::minimize(
                                       cost,
                                       [&](const geomopt::Stiefel<double>&, const geomopt::Stiefel<double>& xi,
                                           geomopt::Stiefel<double>* hv) { cost.hessian(xi, hv); },
                                       x, options)
                                 : geomopt::minimize(cost, x, options);
          times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        std::nth_element(times.begin(), times.begin() + static_cast<long>(times.size() / 2), times.end());
        const double t = times[times.size() / 2];
        std::printf("| %s | %d | %d | %.2e | %.2e | %.3g ms |%s\n", name, summary.num_iterations(),
                    summary.num_cost_evaluations, std::abs(summary.final_cost - cost.optimum) / std::abs(cost.optimum),
                    summary.final_gradient_norm, t * 1e3,
                    summary.termination_type == geomopt::TerminationType::convergence ? "" : " (did not converge)");
        std::fflush(stdout);
      }
    }
  }
}
