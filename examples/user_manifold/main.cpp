// A manifold written outside the library, against the contract of <geomopt/manifolds/contract.hpp> alone, then
// trained by Adam, solved by L-BFGS, saved and restored by io and used in a ceres::Problem with no other code.
// docs/manifolds.md ("Your own manifold") shows this file; CTest runs it, and it exits non-zero if a check fails.
//
// The manifold: vectors with positive entries, R^n_{>0}, with the scale-invariant metric g_x(u, v) = sum u_i v_i /
// x_i^2 (the Fisher-Rao metric of scale parameters: a variance that doubles moves as far as one that halves). Its
// section is E_i(x) = x_i e_i, so a coordinate c_i is a relative change and the geodesic is x_i exp(c_i), defined for
// every c: no constraint is ever violated and no clamping is needed.
#include <ceres/ceres.h>

#include <Eigen/Core>
#include <array>
#include <cmath>
#include <cstdio>
#include <geomopt/ceres.hpp>
#include <geomopt/io.hpp>
#include <geomopt/optimizers.hpp>
#include <geomopt/solvers.hpp>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

namespace mylib {

template <class T>
class Positive {
 public:
  using Scalar = T;
  using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  using Tangent = Vector;  // the coordinates c, a plain Eigen vector (a ptree leaf as it is)
  static constexpr const char* kName = "Positive";
  static constexpr bool kCompact = false;
  static constexpr std::array kRetractions = {geomopt::Retraction::geodesic};

  Positive() = default;
  explicit Positive(Vector x) : x_(std::move(x)) {}
  explicit Positive(Eigen::Index n) : x_(Vector::Ones(n)) {}

  Vector& value() noexcept { return x_; }
  const Vector& value() const noexcept { return x_; }

  static Tangent tangent_from(const Positive& x, const T* c) { return Eigen::Map<const Vector>(c, x.x_.size()); }
  static void coordinates_of(const Tangent& xi, T* c) { Eigen::Map<Vector>(c, xi.size()) = xi; }
  // One coordinate per entry; the shape rule lives here and the workspace calls it.
  static Eigen::Index tangent_size(Eigen::Index rows, Eigen::Index cols) {
    if (rows < 0 || cols != 1)
      throw std::invalid_argument(std::string(kName) + ": expected a vector (n x 1), got " + std::to_string(rows) +
                                  "x" + std::to_string(cols));
    return rows;
  }

  // Every operation is entry-wise: no section to keep, no buffer to hold.
  class Workspace {
   public:
    Workspace(Eigen::Index rows, Eigen::Index cols, geomopt::SectionPolicy, const T*)
        : n_(Positive::tangent_size(rows, cols)) {}
    Eigen::Index tangent_size() const noexcept { return n_; }
    double step_cost() const noexcept { return 30.0 * static_cast<double>(n_); }  // an exp per entry

    // lift_i = <G, E_i> = G_i x_i, the Riemannian gradient x_i^2 G_i in coordinates.
    void lift(const T* y, const T* g, T* c) {
      for (Eigen::Index i = 0; i < n_; ++i) c[i] = g[i] * y[i];
    }
    void to_ambient(const T* y, const T* c, T* u) {
      for (Eigen::Index i = 0; i < n_; ++i) u[i] = y[i] * c[i];
    }
    void retract(T* y, const T* c, geomopt::Retraction) {
      for (Eigen::Index i = 0; i < n_; ++i) y[i] *= std::exp(c[i]);
    }
    // log(y_i / x_i); its derivative at y = x, dy_i / x_i, is the left inverse of to_ambient, as the contract asks.
    void inverse_retract(const T* x, const T* y, T* c, geomopt::Retraction) {
      for (Eigen::Index i = 0; i < n_; ++i)
        if (!(y[i] > 0 && std::isfinite(y[i])))
          throw std::domain_error(std::string(kName) + "::inverse_retract: y(" + std::to_string(i) +
                                  ") is not a positive number");
      for (Eigen::Index i = 0; i < n_; ++i) c[i] = std::log(y[i] / x[i]);
    }
    void forget_point() noexcept {}

    // How far below the open orthant y is: 0 inside, the sum of 1 - y_i over the entries that are not positive.
    T check(const T* y) const {
      T outside = 0;
      for (Eigen::Index i = 0; i < n_; ++i)
        if (!(y[i] > 0)) outside += T(1) - y[i];
      return outside;
    }
    // The orthant is open: entries below the smallest normal number are raised to it.
    void project(T* y) {
      for (Eigen::Index i = 0; i < n_; ++i) y[i] = std::max(y[i], std::numeric_limits<T>::min());
    }
    // Log-normal entries.
    void random_point(geomopt::Rng& rng, T* y) {
      std::normal_distribution<double> normal;
      for (Eigen::Index i = 0; i < n_; ++i) y[i] = static_cast<T>(std::exp(normal(rng)));
    }

    T* section_data() noexcept { return nullptr; }
    Eigen::Index section_rows() const noexcept { return 0; }
    Eigen::Index section_cols() const noexcept { return 0; }
    std::size_t workspace_bytes() const noexcept { return 0; }

   private:
    Eigen::Index n_;
  };

 private:
  Vector x_;
};

// The ptree leaf protocol (docs/ptree.md): the storage is the value; rebuild keeps the shape.
template <class T>
auto& free_parameters(Positive<T>& x) {
  return x.value();
}
template <class T>
const auto& free_parameters(const Positive<T>& x) {
  return x.value();
}
template <class T, class S>
Positive<S> rebuild(const Positive<T>&, Eigen::Matrix<S, Eigen::Dynamic, 1>&& data) {
  return Positive<S>(std::move(data));
}

}  // namespace mylib

static_assert(geomopt::Manifold<mylib::Positive<double>>);

namespace {

// A diagonal Gaussian: the mean is Euclidean, the variances live on the manifold.
struct Gaussian {
  Eigen::VectorXd mean;
  mylib::Positive<double> variance;
  GEOMOPT_PTREE(mean, variance)
};

// The negative log-likelihood per sample, 1/2 sum_i (log v_i + mean_k (x_ik - m_i)^2 / v_i), and its gradient.
struct Likelihood {
  Eigen::MatrixXd samples;  // n x count
  double operator()(const Gaussian& g, Gaussian* grad) const {
    const Eigen::MatrixXd centred = samples.colwise() - g.mean;
    const Eigen::VectorXd second = centred.rowwise().squaredNorm() / static_cast<double>(samples.cols());
    const Eigen::VectorXd& v = g.variance.value();
    if (grad != nullptr) {
      grad->mean = -(centred.rowwise().sum() / static_cast<double>(samples.cols())).cwiseQuotient(v);
      grad->variance.value() = 0.5 * (v.cwiseInverse() - second.cwiseQuotient(v.cwiseProduct(v)));
    }
    return 0.5 * (v.array().log() + second.array() / v.array()).sum();
  }
};

// Ceres: the variances v minimising sum_i (v_i - target_i)^2, the block constrained to the orthant by the adapter.
struct Residuals {
  Eigen::VectorXd target;
  template <class T>
  bool operator()(const T* v, T* r) const {
    for (Eigen::Index i = 0; i < target.size(); ++i) r[i] = v[i] - target[i];
    return true;
  }
};

}  // namespace

int main() {
  constexpr Eigen::Index n = 4, count = 2000;
  geomopt::Rng rng(11);
  std::normal_distribution<double> normal;
  const Eigen::Vector4d true_mean(1, -2, 0.5, 3), true_sd(0.5, 1, 3, 20);
  Likelihood cost{Eigen::MatrixXd(n, count)};
  for (Eigen::Index k = 0; k < count; ++k)
    for (Eigen::Index i = 0; i < n; ++i) cost.samples(i, k) = true_mean[i] + true_sd[i] * normal(rng);
  const Eigen::VectorXd sample_mean = cost.samples.rowwise().mean();
  const Eigen::VectorXd sample_var =
      (cost.samples.colwise() - sample_mean).rowwise().squaredNorm() / static_cast<double>(count);
  int failures = 0;
  auto expect = [&](bool ok, const char* what) {
    std::printf("%s: %s\n", ok ? "ok" : "FAILED", what);
    failures += ok ? 0 : 1;
  };

  // 1. Adam: the variances span three orders of magnitude, and a relative step treats them alike. A stochastic method
  // at a fixed learning rate ends near the optimum, within its step; L-BFGS below reaches it.
  Gaussian model{Eigen::VectorXd::Zero(n), mylib::Positive<double>(n)};
  Gaussian grad = model;
  geomopt::Adam adam({.lr = 0.05});
  auto state = adam.init(model);
  for (int t = 0; t < 3000; ++t) {
    cost(model, &grad);
    adam.step(model, grad, state);
  }
  const double adam_error = (model.variance.value() - sample_var).cwiseQuotient(sample_var).cwiseAbs().maxCoeff();
  std::printf("Adam: the variances' largest relative error %.1e\n", adam_error);
  expect(adam_error < 5e-3, "Adam fits the variances to 5e-3 relative");

  // 2. L-BFGS from the same start, once check_gradient has passed the hand-written gradient there.
  Gaussian solved{Eigen::VectorXd::Zero(n), mylib::Positive<double>(n)};
  const geomopt::DerivativeCheck check = geomopt::check_gradient(cost, solved);
  std::printf("%s\n", check.BriefReport().c_str());
  expect(check.passed, "check_gradient passes the likelihood's gradient, the variances on the user's manifold");
  geomopt::SolverOptions options;
  options.method = geomopt::SolverMethod::lbfgs;
  options.gradient_tolerance = 1e-10;
  const geomopt::SolverSummary summary = geomopt::minimize(cost, solved, options);
  std::printf("%s\n", summary.BriefReport().c_str());
  const double lbfgs_error = (solved.variance.value() - sample_var).cwiseQuotient(sample_var).cwiseAbs().maxCoeff();
  expect(summary.IsSolutionUsable() && lbfgs_error < 1e-8, "L-BFGS reaches the maximum likelihood to 1e-8");

  // 3. io: the checkpoint names the leaf by its path ("variance") and restores it, with Adam's moments, bitwise.
  geomopt::io::save_checkpoint("user_manifold.h5", model, state);
  Gaussian restored{Eigen::VectorXd::Zero(n), mylib::Positive<double>(n)};
  auto restored_state = adam.init(restored);
  geomopt::io::load_checkpoint("user_manifold.h5", restored, restored_state);
  expect(restored.variance.value() == model.variance.value() && restored.mean == model.mean,
         "load_checkpoint restores the point bitwise");
  cost(model, &grad);
  Gaussian grad_restored = grad;
  adam.step(model, grad, state);
  adam.step(restored, grad_restored, restored_state);
  expect(restored.variance.value() == model.variance.value(), "the resumed step equals the uninterrupted one");

  // 4. Ceres: the same manifold as a ceres::Manifold, through the one adapter every manifold uses.
  Eigen::VectorXd v = Eigen::VectorXd::Ones(n);
  ceres::Problem problem;
  problem.AddResidualBlock(new ceres::AutoDiffCostFunction<Residuals, n, n>(new Residuals{sample_var}), nullptr,
                           v.data());
  problem.SetManifold(v.data(), new geomopt::CeresManifold<mylib::Positive<double>>(n));
  ceres::Solver::Options ceres_options;
  ceres_options.function_tolerance = 0;
  ceres_options.parameter_tolerance = 0;
  ceres_options.gradient_tolerance = 1e-14;
  ceres::Solver::Summary ceres_summary;
  ceres::Solve(ceres_options, &problem, &ceres_summary);
  std::printf("%s\n", ceres_summary.BriefReport().c_str());
  expect((v - sample_var).cwiseQuotient(sample_var).cwiseAbs().maxCoeff() < 1e-8, "Ceres fits the orthant point");

  return failures == 0 ? 0 : 1;
}
