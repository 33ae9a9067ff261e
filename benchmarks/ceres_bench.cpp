// The Ceres adapter against references measured in the same run (docs/ceres.md, docs/benchmarks.md):
//   1. the Rayleigh quotient x^T A x on Sphere(50) by ceres::GradientProblem (LBFGS), with Ceres's own
//      SphereManifold<DYNAMIC> and with geomopt's Sphere adapter: iterations, time, and the time ratio;
//   2. the Stiefel adapter on St(N, 8) against N: Plus and RightMultiplyByPlusJacobian (one row), both O(N n^2), and
//      PlusJacobian, whose output alone has N n x (N n - n(n+1)/2) entries, so it is quadratic in N;
//   3. Brockett on St(20, 5): Ceres's LBFGS through the adapter against geomopt::minimize (SolverMethod::lbfgs).
// Every time is the median of --reps repetitions. Run it on a quiet machine (docs/ceres.md gives the command).
// --quick (a smoke run for CI, benchmarks/run_all --quick): 1 repetition, 2 draws, St(N, 8) at N = 32 and 64.
#include <ceres/ceres.h>
#include <ceres/sphere_manifold.h>

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <geomopt/ceres.hpp>
#include <geomopt/solvers.hpp>
#include <memory>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

int g_draws = 5;                                     // random problems per table
std::vector<int> g_sizes = {32, 64, 128, 256, 512, 1024};  // N of the Stiefel scaling table

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// Median over reps of the time of one call of f, each repetition timing a batch of `batch` calls.
double time_call(int reps, int batch, const std::function<void()>& f) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < batch; ++i) f();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / batch);
  }
  return median(t);
}

std::string loadavg() {
  std::ifstream in("/proc/loadavg");
  std::string s;
  std::getline(in, s);
  return s;
}

Eigen::MatrixXd random_symmetric(geomopt::Rng& rng, Eigen::Index n) {
  const Eigen::MatrixXd g = geomopt::detail::gaussian<double>(rng, n, n);
  return (g + g.transpose()) / 2;
}

class Rayleigh final : public ceres::FirstOrderFunction {
 public:
  explicit Rayleigh(const Eigen::MatrixXd& a) : a_(a) {}
  bool Evaluate(const double* parameters, double* cost, double* gradient) const override {
    const Eigen::Map<const Eigen::VectorXd> x(parameters, a_.rows());
    const Eigen::VectorXd ax = a_ * x;
    cost[0] = x.dot(ax);
    if (gradient != nullptr) Eigen::Map<Eigen::VectorXd>(gradient, a_.rows()) = 2 * ax;
    return true;
  }
  int NumParameters() const override { return static_cast<int>(a_.rows()); }

 private:
  const Eigen::MatrixXd& a_;
};

class Brockett final : public ceres::FirstOrderFunction {
 public:
  Brockett(const Eigen::MatrixXd& a, const Eigen::VectorXd& w) : a_(a), w_(w) {}
  bool Evaluate(const double* parameters, double* cost, double* gradient) const override {
    const Eigen::Map<const Eigen::MatrixXd> y(parameters, a_.rows(), w_.size());
    const Eigen::MatrixXd ay = a_ * y;
    cost[0] = (y.cwiseProduct(ay) * w_).sum();
    if (gradient != nullptr) Eigen::Map<Eigen::MatrixXd>(gradient, a_.rows(), w_.size()) = 2 * ay * w_.asDiagonal();
    return true;
  }
  int NumParameters() const override { return static_cast<int>(a_.rows() * w_.size()); }

 private:
  const Eigen::MatrixXd& a_;
  const Eigen::VectorXd& w_;
};

ceres::GradientProblemSolver::Options gradient_options(bool scaled = false) {
  ceres::GradientProblemSolver::Options options;
  options.max_num_iterations = 10000;
  options.function_tolerance = 0;
  options.parameter_tolerance = 0;
  options.gradient_tolerance = 1e-9;
  options.use_approximate_eigenvalue_bfgs_scaling = scaled;
  return options;
}

// A diagnostic, not a product: another manifold's tangent coordinates halved (delta' = 2 delta), so that its Plus
// Jacobian is half of the inner one's, as with Ceres's SphereManifold (Plus turns by |delta| / 2). Ceres's LBFGS
// starts from the inverse Hessian I in whatever coordinates the manifold has; halving them makes that I a quarter
// of the step in the ambient space.
class HalvedCoordinates final : public ceres::Manifold {
 public:
  explicit HalvedCoordinates(ceres::Manifold* inner) : inner_(inner) {}
  int AmbientSize() const override { return inner_->AmbientSize(); }
  int TangentSize() const override { return inner_->TangentSize(); }
  bool Plus(const double* x, const double* delta, double* x_plus_delta) const override {
    const Eigen::VectorXd half = 0.5 * Eigen::Map<const Eigen::VectorXd>(delta, TangentSize());
    return inner_->Plus(x, half.data(), x_plus_delta);
  }
  bool PlusJacobian(const double* x, double* jacobian) const override {
    if (!inner_->PlusJacobian(x, jacobian)) return false;
    Eigen::Map<Eigen::VectorXd>(jacobian, AmbientSize() * TangentSize()) *= 0.5;
    return true;
  }
  bool RightMultiplyByPlusJacobian(const double* x, const int num_rows, const double* ambient_matrix,
                                   double* tangent_matrix) const override {
    if (!inner_->RightMultiplyByPlusJacobian(x, num_rows, ambient_matrix, tangent_matrix)) return false;
    Eigen::Map<Eigen::VectorXd>(tangent_matrix, num_rows * TangentSize()) *= 0.5;
    return true;
  }
  bool Minus(const double* y, const double* x, double* y_minus_x) const override {
    if (!inner_->Minus(y, x, y_minus_x)) return false;
    Eigen::Map<Eigen::VectorXd>(y_minus_x, TangentSize()) *= 2;
    return true;
  }
  bool MinusJacobian(const double* x, double* jacobian) const override {
    if (!inner_->MinusJacobian(x, jacobian)) return false;
    Eigen::Map<Eigen::VectorXd>(jacobian, AmbientSize() * TangentSize()) *= 2;
    return true;
  }

 private:
  std::unique_ptr<ceres::Manifold> inner_;
};

void rayleigh(int reps) {
  std::printf("## Rayleigh quotient on Sphere(50), ceres::GradientProblem, LBFGS, gradient_tolerance 1e-9\n\n");
  std::printf(
      "Iterations and median time of ceres::SphereManifold<DYNAMIC>; for the others, iterations and time / "
      "Ceres's.\n\n");
  std::printf(
      "| LBFGS initial inverse Hessian | draw | Ceres SphereManifold | geomopt cayley | geomopt geodesic | geomopt "
      "geodesic, coordinates halved (diagnostic) |\n");
  std::printf("|---|---|---|---|---|---|\n");
  geomopt::Rng rng(50);
  constexpr int kManifolds = 4;
  struct Ratios {
    std::vector<double> time[kManifolds], per_iteration[kManifolds];
  } ratios[2];
  double worst_error = 0;
  std::vector<Eigen::MatrixXd> as;
  std::vector<Eigen::VectorXd> starts;
  for (int draw = 0; draw < g_draws; ++draw) {
    as.push_back(random_symmetric(rng, 50));
    starts.push_back(geomopt::Sphere<double>::random_point(rng, 50).value());
  }
  for (int scaled = 0; scaled < 2; ++scaled) {
    for (int draw = 0; draw < g_draws; ++draw) {
      const Eigen::MatrixXd& a = as[static_cast<std::size_t>(draw)];
      const double lambda_min =
          Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(a, Eigen::EigenvaluesOnly).eigenvalues()[0];
      std::printf("| %s | %d |", scaled ? "scaled (use_approximate_eigenvalue_bfgs_scaling)" : "I (Ceres's default)",
                  draw);
      double reference = 0, reference_per_iteration = 0;
      for (int which = 0; which < kManifolds; ++which) {
        std::vector<double> t;
        ceres::GradientProblemSolver::Summary summary;
        Eigen::VectorXd x;
        for (int r = 0; r < reps; ++r) {
          x = starts[static_cast<std::size_t>(draw)];
          using Adapter = geomopt::CeresManifold<geomopt::Sphere<double>>;
          ceres::Manifold* m = nullptr;
          switch (which) {
            case 0: m = new ceres::SphereManifold<ceres::DYNAMIC>(50); break;
            case 1: m = new Adapter(50, geomopt::Retraction::cayley); break;
            case 2: m = new Adapter(50, geomopt::Retraction::geodesic); break;
            default: m = new HalvedCoordinates(new Adapter(50, geomopt::Retraction::geodesic)); break;
          }
          const ceres::GradientProblem problem(new Rayleigh(a), m);
          const auto t0 = Clock::now();
          ceres::Solve(gradient_options(scaled != 0), problem, x.data(), &summary);
          t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
        }
        const double med = median(t);
        const int iterations = static_cast<int>(summary.iterations.size()) - 1;
        const double each = med / std::max(1, iterations);
        worst_error = std::max(worst_error, std::abs(x.dot(a * x) - lambda_min) / std::abs(lambda_min));
        if (which == 0) {
          reference = med;
          reference_per_iteration = each;
          std::printf(" %d, %.0f us |", iterations, med * 1e6);
        } else {
          ratios[scaled].time[which].push_back(med / reference);
          ratios[scaled].per_iteration[which].push_back(each / reference_per_iteration);
          std::printf(" %d, %.2fx |", iterations, med / reference);
        }
      }
      std::printf("\n");
    }
  }
  std::printf("\nMedian over the draws, time / Ceres's (time per iteration / Ceres's):\n\n");
  std::printf("| LBFGS initial inverse Hessian | geomopt cayley | geomopt geodesic | halved (diagnostic) |\n");
  std::printf("|---|---|---|---|\n");
  for (int scaled = 0; scaled < 2; ++scaled) {
    std::printf("| %s |", scaled ? "scaled" : "I (Ceres's default)");
    for (int which = 1; which < kManifolds; ++which)
      std::printf(" %.2fx (%.2fx) |", median(ratios[scaled].time[which]), median(ratios[scaled].per_iteration[which]));
    std::printf("\n");
  }
  std::printf("\nworst |f - lambda_min| / |lambda_min| over every run: %.1e\n\n", worst_error);
}

void stiefel_scaling(int reps) {
  std::printf("## The Stiefel adapter on St(N, 8) against N (time per call, median)\n\n");
  std::printf(
      "| N | Plus | Plus / N | RightMultiplyByPlusJacobian (1 row) | RMul / N | PlusJacobian | PlusJacobian / N^2 |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  geomopt::Rng rng(8);
  const int n = 8;
  for (int N : g_sizes) {
    const geomopt::CeresManifold<geomopt::Stiefel<double>> manifold(N, n);
    const Eigen::MatrixXd x = geomopt::Stiefel<double>::random_point(rng, N, n).value();
    const Eigen::VectorXd delta = 0.1 * geomopt::detail::gaussian<double>(rng, manifold.TangentSize(), 1).col(0);
    const Eigen::VectorXd g = geomopt::detail::gaussian<double>(rng, N * n, 1).col(0);
    Eigen::MatrixXd out(N, n);
    Eigen::VectorXd row(manifold.TangentSize());
    const int batch = std::max(1, 20000 / N);
    const double plus = time_call(reps, batch, [&] { manifold.Plus(x.data(), delta.data(), out.data()); });
    const double rmul =
        time_call(reps, batch, [&] { manifold.RightMultiplyByPlusJacobian(x.data(), 1, g.data(), row.data()); });
    double jac = 0;
    if (N <= 256) {
      std::vector<double> j(static_cast<std::size_t>(N) * n * manifold.TangentSize());
      jac = time_call(reps, std::max(1, 2000 / N), [&] { manifold.PlusJacobian(x.data(), j.data()); });
    }
    std::printf("| %d | %.2f us | %.1f ns | %.2f us | %.1f ns |", N, plus * 1e6, plus * 1e9 / N, rmul * 1e6,
                rmul * 1e9 / N);
    if (jac > 0) {
      std::printf(" %.1f us | %.3f ns |\n", jac * 1e6, jac * 1e9 / (double(N) * N));
    } else {
      std::printf(" (not run: %.0f MB) | |\n", double(N) * n * manifold.TangentSize() * 8 / 1e6);
    }
  }
  std::printf("\n");
}

void brockett(int reps) {
  std::printf("## Brockett on St(20, 5): Ceres LBFGS through the adapter against geomopt::minimize (lbfgs)\n\n");
  std::printf(
      "| draw | solver | iterations | median time | time / geomopt's | relative gap |\n|---|---|---|---|---|---|\n");
  geomopt::Rng rng(20);
  const Eigen::Index N = 20, p = 5;
  const Eigen::VectorXd w = Eigen::VectorXd::LinSpaced(p, 1, double(p));
  std::vector<double> ratios;
  for (int draw = 0; draw < g_draws; ++draw) {
    const Eigen::MatrixXd a = random_symmetric(rng, N);
    const Eigen::VectorXd lambda =
        Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(a, Eigen::EigenvaluesOnly).eigenvalues();
    double optimum = 0;
    for (Eigen::Index i = 0; i < p; ++i) optimum += w[i] * lambda[p - 1 - i];
    const geomopt::Stiefel<double> y0 = geomopt::Stiefel<double>::random_point(rng, N, p);
    auto f = [&](const Eigen::MatrixXd& y) { return (y.cwiseProduct(a * y) * w).sum(); };

    // geomopt's own L-BFGS, the reference.
    std::vector<double> t;
    geomopt::SolverSummary own;
    geomopt::Stiefel<double> y = y0;
    auto cost = [&](const geomopt::Stiefel<double>& x, geomopt::Stiefel<double>* g) {
      const Eigen::MatrixXd ax = a * x.value();
      if (g != nullptr) g->value() = 2 * ax * w.asDiagonal();
      return (x.value().cwiseProduct(ax) * w).sum();
    };
    for (int r = 0; r < reps; ++r) {
      y = y0;
      geomopt::SolverOptions options;
      options.method = geomopt::SolverMethod::lbfgs;
      options.max_iterations = 10000;
      options.gradient_tolerance = 1e-9;
      const auto t0 = Clock::now();
      own = geomopt::minimize(cost, y, options);
      t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    const double reference = median(t);
    std::printf("| %d | geomopt::minimize lbfgs | %d | %.1f us | 1.00 | %.1e |\n", draw, own.num_iterations(),
                reference * 1e6, std::abs(f(y.value()) - optimum) / std::abs(optimum));

    t.clear();
    ceres::GradientProblemSolver::Summary summary;
    Eigen::MatrixXd yc;
    for (int r = 0; r < reps; ++r) {
      yc = y0.value();
      const ceres::GradientProblem problem(new Brockett(a, w),
                                           new geomopt::CeresManifold<geomopt::Stiefel<double>>(N, p));
      const auto t0 = Clock::now();
      ceres::Solve(gradient_options(), problem, yc.data(), &summary);
      t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    const double med = median(t);
    ratios.push_back(med / reference);
    std::printf("| %d | ceres LBFGS + CeresManifold<Stiefel> | %d | %.1f us | %.2f | %.1e |\n", draw,
                static_cast<int>(summary.iterations.size()) - 1, med * 1e6, med / reference,
                std::abs(f(yc) - optimum) / std::abs(optimum));
  }
  std::printf("\nmedian time ratio (Ceres through the adapter / geomopt's L-BFGS) over the draws: %.2f\n\n",
              median(ratios));
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 9;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--reps=", 7) == 0) {
      reps = std::max(1, std::atoi(argv[i] + 7));
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      reps = 1;
      g_draws = 2;
      g_sizes = {32, 64};
    } else {
      std::fprintf(stderr, "usage: %s [--reps=R] [--quick]\n", argv[0]);
      return 2;
    }
  }
  std::printf("load average at start: %s\n\n", loadavg().c_str());
  rayleigh(reps);
  stiefel_scaling(reps);
  brockett(reps);
  std::printf("load average at end: %s\n", loadavg().c_str());
  return 0;
}
