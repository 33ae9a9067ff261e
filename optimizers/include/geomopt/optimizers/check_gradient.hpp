// check_gradient and check_hessian: whether hand-written derivatives are right, told the way Manopt's checkgradient
// and checkhessian tell it, over a whole parameter tree, with the leaf to blame named (docs/solvers.md, "Checking
// derivatives").
//
//   double cost(const Tree& x, Tree* egrad);                 // minimize's cost, or
//   double loss(const Tree& params, Tree& grads);            // a stochastic optimizer's loss (always writes grads)
//   void hessian(const Tree& x, const Tree& xi, Tree* hv);   // minimize's Euclidean Hessian-vector product
//   geomopt::DerivativeCheck c = geomopt::check_gradient(cost, x);   // or check_gradient(loss, params)
//   geomopt::DerivativeCheck h = geomopt::check_hessian(cost, hessian, x);
//   if (!c.passed) std::cerr << c.FullReport();
//
// Along a random unit tangent vector v at x (DerivativeCheckOptions::seed), with c(t) = R_x(t v) the retraction curve
// and phi = f o c, the Taylor remainder
//   order 1 (gradient):  E(t) = |phi(t) - phi(0) - t <grad f(x), v>|
//   order 2 (Hessian):   E(t) = |phi(t) - phi(0) - t <grad f(x), v> - t^2/2 phi''(0)|,
//                        phi''(0) = <ehess[xi], xi> + <egrad, c''(0)>, xi = c'(0)   (Euclidean products)
// is O(t^(p+1)) when the derivatives are right and O(t^p) when they are not: on a log-log plot against t its slope
// is 2 for a right gradient and 3 for a right Hessian, one less for wrong ones. phi''(0) is the user's product applied
// to the curve's velocity plus the gradient against the curve's acceleration, so the test holds at any x and for any
// retraction (Manopt's holds at critical points or for second-order retractions only); xi and c''(0) are central
// differences of the retraction, which evaluate nothing of the user's, exact on Euclidean and packed leaves. The
// slope is fitted over the run of log-spaced t that a line fits best (Manopt's identify_linear_piece) among the t
// where E is above the cost's rounding and below a tenth of the change the model's last term describes: the roundoff
// floor and the large-t regime are left out; it is judged when that run is a line. Then leaf by leaf, along a
// direction on that leaf alone, the model's derivative (<grad f, v_i>, or phi_i''(0)) is compared with central
// differences of f along the curve, so that a failure names the leaf.
//
// Invariants: x is not modified; cost sees x (egrad non-null, once) and points R_x(t v) of x's shape (egrad null);
// for one seed the check is deterministic; a leaf of egrad (or of hv) that the user's code leaves unwritten fails the
// check, named, before anything is measured (every entry is filled first with a NaN no arithmetic makes, as minimize
// does).
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "geomopt/optimizers/detail/report_rows.hpp"
#include "geomopt/optimizers/detail/tree_geometry.hpp"

namespace geomopt {

struct DerivativeCheckOptions {
  std::uint64_t seed = 1;  ///< the random tangent directions (geomopt::Rng)
  /// The steps t of the Taylor remainder: num_steps log-spaced in [min_step, max_step] (Manopt's 1e-8, 1 and 51), for
  /// unit tangent vectors. Leaf by leaf, the central differences take the steps max_step 10^(-j/2) down to min_step.
  double min_step = 1e-8;
  double max_step = 1;
  int num_steps = 51;
  /// The Taylor test passes when the fitted slope is at least 2 - slope_tolerance (3 - slope_tolerance for the
  /// Hessian); a higher slope passes (a direction along which the next term vanishes). A slope is judged only where
  /// its run is a line (DerivativeCheck::slope_judged).
  double slope_tolerance = 0.2;
  /// false: the verdict rests on the leaves alone, the slope being fitted and reported but not judged. For a cost that
  /// is not twice differentiable at the steps its scalar's rounding leaves, such as a ReLU network in float, whose
  /// Taylor remainder crosses the units' kinks from about t = 1e-3 on, where float's rounding floor also lies.
  bool judge_slope = true;
  /// A leaf passes when its model and its central difference agree to tolerance times the larger of the two, plus
  /// three times the difference's estimated error (which covers the difference's own truncation and rounding).
  /// 0: 10 sqrt(epsilon) of the tree's scalar for the gradient (1.5e-7 in double, 3.5e-3 in float), for the rounding
  /// of the gradient itself; 100 sqrt(epsilon) for the Hessian (1.5e-6, 3.5e-2), whose model also carries the
  /// geometry's central differences.
  double tolerance = 0;
  /// The retraction of manifold leaves, as SolverOptions::retraction (unset: each manifold's default).
  std::optional<Retraction> retraction{};

  /// True when every option is in range; otherwise false with a message naming the option and the value.
  bool IsValid(std::string* error) const {
    auto fail = [&](const std::string& what) {
      if (error != nullptr) *error = what;
      return false;
    };
    auto num = [](double v) {
      char b[32];
      std::snprintf(b, sizeof b, "%g", v);
      return std::string(b);
    };
    if (!(min_step > 0)) return fail("min_step must be > 0, got " + num(min_step));
    if (!(max_step >= 10 * min_step) || !std::isfinite(max_step))
      return fail("max_step must be finite and at least 10 min_step, got " + num(max_step));
    if (num_steps < 10) return fail("num_steps must be >= 10, got " + std::to_string(num_steps));
    if (!(slope_tolerance > 0 && slope_tolerance < 1))
      return fail("slope_tolerance must be in (0, 1), got " + num(slope_tolerance));
    if (!(tolerance >= 0 && tolerance < 1)) return fail("tolerance must be in [0, 1), got " + num(tolerance));
    return true;
  }
};

/// One leaf's check, along a unit direction v_i on that leaf alone.
struct LeafDerivativeCheck {
  std::string path;
  Eigen::Index dimension = 0;                                 ///< the leaf's tangent dimension
  double model = std::numeric_limits<double>::quiet_NaN();    ///< <grad f, v_i>, or phi_i''(0) from the Hessian
  double numeric = std::numeric_limits<double>::quiet_NaN();  ///< the same by central differences of f along c_i
  double noise = std::numeric_limits<double>::quiet_NaN();    ///< the estimated error of numeric
  double step = std::numeric_limits<double>::quiet_NaN();     ///< the t numeric was taken at
  /// |numeric - model| / max(|numeric|, |model|): NaN when numeric could not be formed.
  double relative_error = std::numeric_limits<double>::quiet_NaN();
  /// Order 2: <grad f, v_i> agrees with the central first difference of the same evaluations (a wrong gradient
  /// fails the Hessian's check too, and this names its leaf). Always true for order 1, where it is the check itself.
  bool gradient_passed = true;
  bool passed = false;
};

/// One step of the Taylor table.
struct TaylorPoint {
  double step = 0;                                              ///< t
  double cost = std::numeric_limits<double>::quiet_NaN();       ///< f(R_x(t v))
  double remainder = std::numeric_limits<double>::quiet_NaN();  ///< E(t)
  double floor = 0;     ///< what rounding alone can make of E at this t (E is fitted only above it)
  bool fitted = false;  ///< in the run the slope was fitted over
};

/// What check_gradient or check_hessian found. BriefReport and FullReport are named and laid out after Ceres's
/// summaries, as SolverSummary's are.
struct DerivativeCheck {
  int order = 1;  ///< 1: check_gradient, 2: check_hessian
  bool passed = false;
  std::string message = "no check was run";                         ///< why it failed, or what the pass rests on
  Eigen::Index num_parameters = 0;                                  ///< the tree's stored numbers
  Eigen::Index num_effective_parameters = 0;                        ///< the dimension of the tangent space
  double cost = std::numeric_limits<double>::quiet_NaN();           ///< f(x)
  double gradient_norm = std::numeric_limits<double>::quiet_NaN();  ///< |grad f(x)|
  double directional_derivative = std::numeric_limits<double>::quiet_NaN();  ///< <grad f(x), v>
  double second_derivative = std::numeric_limits<double>::quiet_NaN();       ///< order 2: phi''(0) from the Hessian
  /// The fitted slope of log E against log t (NaN when no run of steps could be fitted), and the run.
  double slope = std::numeric_limits<double>::quiet_NaN();
  double expected_slope = 2;
  double fit_min_step = std::numeric_limits<double>::quiet_NaN();
  double fit_max_step = std::numeric_limits<double>::quiet_NaN();
  double fit_residual = std::numeric_limits<double>::quiet_NaN();  ///< RMS residual of the fit, in decades
  /// Whether the verdict took the slope in: judge_slope, and a run was fitted that is a line (RMS residual at most
  /// 0.01 decades; in float, along a direction of small curvature, the remainder may rise from the rounding only
  /// where the next term already bends it, and then no run is).
  bool slope_judged = true;
  /// E is at the rounding floor at every step: the model is exact along v (a linear cost for the gradient, a
  /// quadratic one for the Hessian, on Euclidean leaves).
  bool exact = false;
  /// The leaf to look at first: the failing leaf with the largest relative error, else the leaf with the largest.
  std::string worst_leaf;
  double worst_relative_error = std::numeric_limits<double>::quiet_NaN();
  std::vector<LeafDerivativeCheck> leaves;  ///< in walk order
  std::vector<TaylorPoint> taylor;          ///< t ascending
  std::uint64_t seed = 0;
  int num_cost_evaluations = 0;
  int num_gradient_evaluations = 0;  ///< calls of cost with egrad (one, at x)
  int num_hessian_evaluations = 0;   ///< calls of the Hessian-vector product
  double total_time_in_seconds = 0;

  std::string BriefReport() const {
    char b[512];
    std::snprintf(b, sizeof b,
                  "geomopt %s check: %s, slope %.3f (expected %.0f%s)%s, worst leaf '%s' relative error %.2e, cost "
                  "evaluations %d, time %.4g s",
                  order == 1 ? "gradient" : "Hessian", passed ? "PASSED" : "FAILED", slope, expected_slope,
                  slope_judged || std::isnan(slope) ? "" : ", not judged", exact ? " exact" : "", worst_leaf.c_str(),
                  worst_relative_error, num_cost_evaluations, total_time_in_seconds);
    return b;
  }

  std::string FullReport() const {
    const char* what = order == 1 ? "Gradient" : "Hessian";
    std::string out = "\n" + std::string(what) + " check (geomopt)\n\n";
    char b[512];
    const detail::ReportRows line{out};
    const auto g = detail::report_number;
    line("Parameters (stored)", std::to_string(num_parameters));
    line("Parameters (tangent dimension)", std::to_string(num_effective_parameters));
    line("Seed", std::to_string(seed));
    out += "\n";
    line("Cost at x", g(cost));
    line("Gradient norm", g(gradient_norm));
    line("<grad f, v>", g(directional_derivative));
    if (order == 2) line("phi''(0) from the Hessian", g(second_derivative));
    std::snprintf(b, sizeof b, "%.4f (expected %.0f%s)%s", slope, expected_slope,
                  slope_judged || std::isnan(slope) ? "" : ", not judged", exact ? ", the model is exact" : "");
    line("Slope of the Taylor remainder", b);
    if (!std::isnan(slope)) {
      std::snprintf(b, sizeof b, "[%.2e, %.2e], RMS residual %.2e", fit_min_step, fit_max_step, fit_residual);
      line("Fitted over t in", b);
    }
    out += "\n";
    std::size_t width = 4;
    for (const LeafDerivativeCheck& l : leaves) width = std::max(width, l.path.size());
    const int w = static_cast<int>(width);
    std::snprintf(b, sizeof b, "%-*s %8s %14s %14s %9s %9s  %s\n", w, "leaf", "dim",
                  order == 1 ? "<grad, v_i>" : "phi_i''(0)", "central diff.", "noise", "rel. err", "verdict");
    out += b;
    for (const LeafDerivativeCheck& l : leaves) {
      std::snprintf(b, sizeof b, "%-*s %8td % 14.6e % 14.6e %9.2e %9.2e  %s\n", w, l.path.c_str(), l.dimension, l.model,
                    l.numeric, l.noise, l.relative_error,
                    l.passed ? "ok" : (l.gradient_passed ? "FAILED" : "FAILED (its gradient)"));
      out += b;
    }
    out += "\n";
    std::snprintf(b, sizeof b, "%10s %16s %12s %12s %s\n", "t", "f(R_x(t v))", "remainder", "floor", "fit");
    out += b;
    for (const TaylorPoint& p : taylor) {
      std::snprintf(b, sizeof b, "%10.3e % 16.9e %12.4e %12.4e %s\n", p.step, p.cost, p.remainder, p.floor,
                    p.fitted ? "*" : "");
      out += b;
    }
    out += "\n";
    line("Cost evaluations", std::to_string(num_cost_evaluations));
    line("Gradient evaluations", std::to_string(num_gradient_evaluations));
    line("Hessian-vector products", std::to_string(num_hessian_evaluations));
    line("Total time (s)", g(total_time_in_seconds));
    out += "\n";
    line("Verdict", std::string(passed ? "PASSED" : "FAILED") + " (" + message + ")");
    return out;
  }
};

namespace detail {

// The check's fixed choices (docs/solvers.md, "Checking derivatives").
inline constexpr double kRoundingFloor = 4;      // E below this many epsilons of the terms' sizes is rounding ...
inline constexpr double kNoiseFloor = 10;        // ... and so is E below this many times its median over the first
                                                 // decade of steps
inline constexpr double kModelFraction = 0.1;    // the model holds while E is at most this part of its last term
inline constexpr double kWindowDecades = 1;      // the fitted run (Manopt's is 1.6): float has about two between its
                                                 // rounding and the large-t regime
inline constexpr std::size_t kMinFitPoints = 5;  // the shortest run fitted where no full one fits
inline constexpr double kLineResidual = 0.01;    // a run whose RMS residual exceeds this many decades is no line:
                                                 // its slope is reported, not judged
inline constexpr double kNoiseAllowance = 3;     // a leaf may differ by this many estimated errors of its difference

/// A line fitted by least squares to (x_i, y_i), i in [first, last]: its slope and RMS residual.
struct LineFit {
  double slope = 0, residual = 0;
  std::size_t first = 0, last = 0;
};

inline LineFit fit_line(const std::vector<double>& x, const std::vector<double>& y, std::size_t first,
                        std::size_t last) {
  const double n = static_cast<double>(last - first + 1);
  double mx = 0, my = 0;
  for (std::size_t i = first; i <= last; ++i) mx += x[i], my += y[i];
  mx /= n;
  my /= n;
  double sxx = 0, sxy = 0;
  for (std::size_t i = first; i <= last; ++i) sxx += (x[i] - mx) * (x[i] - mx), sxy += (x[i] - mx) * (y[i] - my);
  const double slope = sxy / sxx;
  double ss = 0;
  for (std::size_t i = first; i <= last; ++i) ss += std::pow(y[i] - my - slope * (x[i] - mx), 2);
  return {slope, std::sqrt(ss / n), first, last};
}

/// Manopt's identify_linear_piece over admissible points: of the runs of `points` consecutive indices that are all
/// admissible, the one a line fits best (least RMS residual); nothing when there is no such run.
inline std::optional<LineFit> best_linear_piece(const std::vector<double>& x, const std::vector<double>& y,
                                                const std::vector<char>& admissible, std::size_t points) {
  std::optional<LineFit> best;
  std::size_t run = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    run = admissible[i] ? run + 1 : 0;
    if (run < points) continue;
    const LineFit fit = fit_line(x, y, i + 1 - points, i);
    if (!best || fit.residual < best->residual) best = fit;
  }
  return best;
}

/// A derivative from its differences d_j at steps falling by a constant ratio, each with a bound rounding_j on what
/// the rounding of f makes of it: the d_j whose neighbours differ least from it, where the truncation error (falling
/// with the step) meets the rounding (growing as it falls), with the larger of those two differences and its
/// rounding bound as its error. The bound keeps out steps too small to move f at all, where neighbouring differences
/// agree because they are all 0.
struct PlateauEstimate {
  double value = std::numeric_limits<double>::quiet_NaN();
  double noise = std::numeric_limits<double>::infinity();
  double step = std::numeric_limits<double>::quiet_NaN();
};

inline PlateauEstimate plateau(const std::vector<double>& steps, const std::vector<double>& d,
                               const std::vector<double>& rounding) {
  PlateauEstimate best;
  for (std::size_t j = 1; j + 1 < d.size(); ++j) {
    if (!std::isfinite(d[j - 1]) || !std::isfinite(d[j]) || !std::isfinite(d[j + 1])) continue;
    const double spread = std::max({std::abs(d[j] - d[j - 1]), std::abs(d[j + 1] - d[j]), rounding[j]});
    if (spread < best.noise) best = {d[j], spread, steps[j]};
  }
  return best;
}

inline std::string format_number(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.6e", v);
  return b;
}

/// A stochastic optimizer's loss, double loss(const Tree&, Tree& grads), as a solver's cost: asked for no gradient,
/// it writes one into a scratch tree.
template <class Tree, class Loss>
class LossAsCost {
 public:
  LossAsCost(Loss& loss, const Tree& x) : loss_(loss), scratch_(x) {}
  double operator()(const Tree& x, Tree* egrad) { return static_cast<double>(loss_(x, egrad ? *egrad : scratch_)); }

 private:
  Loss& loss_;
  Tree scratch_;
};

/// f(cost) with cost seen as a solver's cost, double(const Tree&, Tree*), whichever of the two forms it has.
template <class Tree, class Cost, class F>
DerivativeCheck with_solver_cost(Cost& cost, const Tree& x, F&& f) {
  if constexpr (std::invocable<Cost&, const Tree&, Tree*>) {
    return f(cost);
  } else {
    static_assert(std::invocable<Cost&, const Tree&, Tree&>,
                  "check_gradient: the cost must be callable as double(const Tree& x, Tree* egrad) (minimize's cost) "
                  "or as double(const Tree& params, Tree& grads) (a loss that writes the gradient)");
    LossAsCost<Tree, Cost> as_cost(cost, x);
    return f(as_cost);
  }
}

/// check_gradient (Hessian = std::nullptr_t) and check_hessian: the file's first comment says what is measured.
template <class Tree, class Cost, class Hessian>
DerivativeCheck check_derivatives(Cost& cost, Hessian& hessian, const Tree& x, const DerivativeCheckOptions& options) {
  constexpr int kOrder = std::is_same_v<Hessian, std::nullptr_t> ? 1 : 2;
  using T = ptree::scalar_t<Tree>;
  using Vector = Eigen::VectorXd;
  const auto start = std::chrono::steady_clock::now();
  std::string error;
  if (!options.IsValid(&error)) throw std::invalid_argument("DerivativeCheckOptions: " + error);
  const double eps = static_cast<double>(std::numeric_limits<T>::epsilon());
  const double tolerance = options.tolerance > 0 ? options.tolerance : (kOrder == 1 ? 10 : 100) * std::sqrt(eps);

  DerivativeCheck r;
  r.order = kOrder;
  r.expected_slope = kOrder + 1;
  r.seed = options.seed;
  auto finish = [&](bool passed, std::string message) {
    r.passed = passed;
    r.message = std::move(message);
    r.total_time_in_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
  };

  TreeGeometry<Tree> geo(x, options.retraction);
  const Eigen::Index n = geo.dim();
  r.num_parameters = geo.stored();
  r.num_effective_parameters = n;
  const auto spans = geo.leaves();

  Tree egrad = x;
  geo.mark_unwritten(egrad);
  const double f0 = static_cast<double>(cost(x, &egrad));
  ++r.num_cost_evaluations;
  ++r.num_gradient_evaluations;
  r.cost = f0;
  if (const std::string* leaf = geo.first_unwritten(egrad)) {
    r.worst_leaf = *leaf;
    return finish(false, "the cost did not write the gradient of leaf '" + *leaf + "'");
  }
  Vector g;
  try {
    geo.gradient(x, egrad, g);
  } catch (const std::domain_error& e) {
    return finish(false, std::string("x is outside its manifold's domain: ") + e.what());
  }
  if (!std::isfinite(f0) || !g.allFinite()) {
    for (const auto& span : spans)
      if (!g.segment(span.offset, span.size).allFinite()) {
        r.worst_leaf = span.path;
        break;
      }
    return finish(false, "not finite at x: " +
                             (std::isfinite(f0) ? geo.first_non_finite(egrad, g) : "the cost is " + format_number(f0)));
  }
  r.gradient_norm = g.norm();
  if (n == 0) return finish(true, "the tree has no tangent directions: nothing to check");

  // The directions: a standard normal draw in the global coordinates (orthonormal, so uniform on the unit sphere of
  // the tangent space once normalised), restricted to a leaf for that leaf's check. For the gradient each is tilted
  // halfway towards the gradient's part on the same coordinates, so that a wrong scale shows in full, where along a
  // random direction alone it shows as the cosine between the two, about 1 / sqrt(dimension).
  Rng rng(options.seed);
  std::normal_distribution<double> normal;
  Vector u(n);
  for (Eigen::Index i = 0; i < n; ++i) u[i] = normal(rng);
  auto direction = [&](Eigen::Index offset, Eigen::Index size) {
    Vector v = Vector::Zero(n);
    auto part = v.segment(offset, size);
    part = u.segment(offset, size).normalized();
    if constexpr (kOrder == 1) {
      const double gn = g.segment(offset, size).norm();
      if (gn > 0) {
        const Vector tilted = part + g.segment(offset, size) / gn;
        if (tilted.norm() > 0.5) part = tilted.normalized();
      }
    }
    return v;
  };

  Tree y = x;
  auto f_along = [&](const Vector& v, double t) {
    y = x;
    geo.retract(y, t * v);
    ++r.num_cost_evaluations;
    return static_cast<double>(cost(std::as_const(y), static_cast<Tree*>(nullptr)));
  };

  // Order 2: phi''(0) along v from the user's product, with the geometry's central differences at the step that
  // balances their truncation O(h^2) against their rounding O(epsilon / h^2).
  const double h = std::pow(eps, 0.25);
  std::vector<Tree> scratch(kOrder == 2 ? 4 : 0, x);  // xi, hv, R_x(h v), R_x(-h v)
  const std::string* unwritten = nullptr;
  auto second_derivative = [&](const Vector& v) {
    if constexpr (kOrder == 2) {
      Tree &xi = scratch[0], &hv = scratch[1], &plus = scratch[2], &minus = scratch[3];
      geo.tangent(x, v, h, xi, plus, minus);
      geo.mark_unwritten(hv);
      hessian(x, std::as_const(xi), &hv);
      ++r.num_hessian_evaluations;
      if ((unwritten = geo.first_unwritten(hv)) != nullptr) return std::numeric_limits<double>::quiet_NaN();
      return geo.ambient_dot(hv, xi) + geo.acceleration_dot(x, egrad, plus, minus, h);
    } else {
      (void)v, (void)hessian;
      return 0.0;
    }
  };
  auto unwritten_hv = [&] {
    r.worst_leaf = *unwritten;
    return finish(false, "the Hessian-vector product did not write leaf '" + *unwritten + "'");
  };

  // The Taylor remainder along v.
  const Vector v = direction(0, n);
  const double s1 = g.dot(v);
  r.directional_derivative = s1;
  const double q = second_derivative(v);
  if (unwritten != nullptr) return unwritten_hv();
  if (kOrder == 2) r.second_derivative = q;
  const double lo = std::log10(options.min_step), hi = std::log10(options.max_step);
  const auto steps = static_cast<std::size_t>(options.num_steps);
  for (std::size_t k = 0; k < steps; ++k) {
    TaylorPoint p;
    p.step = std::pow(10.0, lo + (hi - lo) * static_cast<double>(k) / static_cast<double>(steps - 1));
    p.cost = f_along(v, p.step);
    p.remainder = std::abs(p.cost - f0 - p.step * s1 - p.step * p.step * q / 2);
    r.taylor.push_back(p);
  }
  // What rounding alone makes of E: kRoundingFloor epsilons of the terms E is formed from, or kNoiseFloor times the
  // median of E over the first decade of steps, which is rounding unless the model is wrong (and then the floor hides
  // only that decade of the wrong slope). The median also holds what the rounding of the point x + t v does to f:
  // the steps that vanish in it altogether (E = t |<grad f, v>| exactly) are those below about epsilon |x_i| / |v_i|,
  // within that decade or just past it, and the factor covers them; the bound epsilon |x| |grad f| on it would raise a
  // float floor twentyfold and push the fit into the large-t regime.
  const auto first_decade = std::min<std::size_t>(
      steps, static_cast<std::size_t>(std::lround(static_cast<double>(steps - 1) / (hi - lo))) + 1);
  std::vector<double> early;
  for (std::size_t k = 0; k < first_decade; ++k)
    if (std::isfinite(r.taylor[k].remainder)) early.push_back(r.taylor[k].remainder);
  std::nth_element(early.begin(), early.begin() + static_cast<std::ptrdiff_t>(early.size() / 2), early.end());
  const double noise = early.empty() ? 0 : kNoiseFloor * early[early.size() / 2];
  std::vector<double> log_t, log_e;
  std::vector<char> valid, usable;
  for (TaylorPoint& p : r.taylor) {
    const double first = p.step * s1, second = p.step * p.step * q / 2;
    p.floor =
        std::max(noise, kRoundingFloor * eps * (std::abs(f0) + std::abs(p.cost) + std::abs(first) + std::abs(second)));
    const double described = std::abs(kOrder == 1 ? p.cost - f0 : p.cost - f0 - first);
    usable.push_back(std::isfinite(p.remainder) && p.remainder > p.floor);
    valid.push_back(usable.back() && p.remainder <= kModelFraction * described);
    log_t.push_back(std::log10(p.step));
    log_e.push_back(usable.back() ? std::log10(p.remainder) : 0.0);
  }
  // The best-fitting run among the steps where the model holds; where none is long enough, a shorter one; where
  // the model holds nowhere (a grossly wrong derivative), among the steps above the rounding.
  const auto window =
      static_cast<std::size_t>(std::clamp(std::lround(kWindowDecades * static_cast<double>(steps - 1) / (hi - lo)) + 1,
                                          static_cast<long>(kMinFitPoints), static_cast<long>(steps)));
  std::optional<LineFit> fit;
  for (const std::vector<char>* admissible : {&valid, &usable}) {
    for (std::size_t w = window; !fit && w >= kMinFitPoints; --w) fit = best_linear_piece(log_t, log_e, *admissible, w);
    if (fit) break;
  }
  r.exact = std::none_of(usable.begin(), usable.end(), [](char c) { return c != 0; }) &&
            std::any_of(r.taylor.begin(), r.taylor.end(), [](const TaylorPoint& p) { return std::isfinite(p.cost); });
  if (fit) {
    r.slope = fit->slope;
    r.fit_residual = fit->residual;
    r.fit_min_step = r.taylor[fit->first].step;
    r.fit_max_step = r.taylor[fit->last].step;
    for (std::size_t k = fit->first; k <= fit->last; ++k) r.taylor[k].fitted = true;
  }

  // Leaf by leaf: the model's derivative against central differences of f along the leaf's own direction.
  const double position_rounding = std::sqrt(geo.ambient_dot(x, x)) * r.gradient_norm;
  std::vector<double> cd_steps;
  for (int j = 0; options.max_step * std::pow(10.0, -0.5 * j) >= options.min_step * (1 - 1e-9); ++j)
    cd_steps.push_back(options.max_step * std::pow(10.0, -0.5 * j));
  // Whether model and estimate agree: to tolerance relative, plus the estimate's error kNoiseAllowance times.
  auto agree = [&](double model, const PlateauEstimate& e) {
    const double difference = std::abs(e.value - model), scale = std::max(std::abs(e.value), std::abs(model));
    return std::isfinite(e.value) && difference <= tolerance * scale + kNoiseAllowance * e.noise;
  };
  std::vector<double> d1(cd_steps.size()), d2(cd_steps.size()), rounding1(cd_steps.size()), rounding2(cd_steps.size());
  for (const auto& span : spans) {
    if (span.size == 0) continue;
    LeafDerivativeCheck leaf;
    leaf.path = span.path;
    leaf.dimension = span.size;
    const Vector vi = direction(span.offset, span.size);
    leaf.model = kOrder == 1 ? g.dot(vi) : second_derivative(vi);
    if (unwritten != nullptr) return unwritten_hv();
    for (std::size_t j = 0; j < cd_steps.size(); ++j) {
      const double t = cd_steps[j], fp = f_along(vi, t), fm = f_along(vi, -t);
      d1[j] = (fp - fm) / (2 * t);
      d2[j] = (fp - 2 * f0 + fm) / (t * t);
      // Each of the three values of f is known to kRoundingFloor epsilons of its size and of what the rounding of
      // x + t v_i can do to it, epsilon |x| |grad f| (coherent where the step vanishes in some entries): a bound
      // that keeps out steps too small to move f, and widens the allowance only where rounding could be that large.
      const double known =
          kRoundingFloor * eps * (std::max({std::abs(fp), std::abs(fm), std::abs(f0)}) + position_rounding);
      rounding1[j] = known / t;
      rounding2[j] = 4 * known / (t * t);
    }
    const PlateauEstimate e = kOrder == 1 ? plateau(cd_steps, d1, rounding1) : plateau(cd_steps, d2, rounding2);
    leaf.numeric = e.value;
    leaf.noise = e.noise;
    leaf.step = e.step;
    const double difference = std::abs(leaf.numeric - leaf.model);
    leaf.relative_error = difference == 0 ? 0 : difference / std::max(std::abs(leaf.numeric), std::abs(leaf.model));
    if (kOrder == 2) leaf.gradient_passed = agree(g.dot(vi), plateau(cd_steps, d1, rounding1));
    leaf.passed = agree(leaf.model, e) && leaf.gradient_passed;
    r.leaves.push_back(std::move(leaf));
  }

  // The verdict.
  auto rank = [](const LeafDerivativeCheck& l) {
    return std::pair(!l.passed,
                     std::isnan(l.relative_error) ? std::numeric_limits<double>::infinity() : l.relative_error);
  };
  const LeafDerivativeCheck* worst = nullptr;
  int failing = 0;
  for (const LeafDerivativeCheck& l : r.leaves) {
    failing += l.passed ? 0 : 1;
    if (worst == nullptr || rank(l) > rank(*worst)) worst = &l;
  }
  if (worst != nullptr) {
    r.worst_leaf = worst->path;
    r.worst_relative_error = worst->relative_error;
  }
  const char* model_name = kOrder == 1 ? "<grad f, v>" : "phi''(0) from the Hessian";
  std::string slope_text;
  if (r.exact) {
    slope_text = "the Taylor remainder is at the cost's rounding at every step: the model is exact along v";
  } else if (!fit) {
    slope_text = "the slope was not measured: too few steps with the Taylor remainder above the cost's rounding";
  } else {
    char b[160];
    std::snprintf(b, sizeof b, "the Taylor remainder's slope is %.3f over t in [%.2e, %.2e], expected %d", r.slope,
                  r.fit_min_step, r.fit_max_step, kOrder + 1);
    slope_text = b;
  }
  r.slope_judged = options.judge_slope && fit && !r.exact && fit->residual <= kLineResidual;
  const bool slope_passed = !r.slope_judged || r.slope >= r.expected_slope - options.slope_tolerance;
  if (!options.judge_slope) {
    slope_text += " (not judged: judge_slope is false)";
  } else if (fit && !r.exact && !r.slope_judged) {
    char b[120];
    std::snprintf(b, sizeof b, " (not judged: that run is no line, its RMS residual %.3f decades)", r.fit_residual);
    slope_text += b;
  }
  std::string message;
  if (failing > 0) {
    char b[320];
    if (worst->gradient_passed) {
      std::snprintf(b, sizeof b, "leaf '%s': %s = %.6e, central differences %.6e (relative error %.2e, noise %.2e)",
                    worst->path.c_str(), model_name, worst->model, worst->numeric, worst->relative_error, worst->noise);
    } else {
      std::snprintf(b, sizeof b, "leaf '%s': its gradient disagrees with central differences (check_gradient)",
                    worst->path.c_str());
    }
    message = b;
    if (failing > 1) message += "; " + std::to_string(failing - 1) + " other leaves fail too";
    message += "; " + slope_text;
  } else if (!slope_passed) {
    message = slope_text + "; no leaf fails alone, so the error is in how the leaves couple or below the leaves' noise";
  } else {
    message = slope_text + "; every leaf agrees with central differences";
  }
  return finish(failing == 0 && slope_passed, std::move(message));
}

}  // namespace detail

/// Checks the gradient a cost writes at x (the file's first comment says how). cost is minimize's,
/// double(const Tree& x, Tree* egrad), or a stochastic optimizer's loss, double(const Tree& params, Tree& grads), which
/// writes the gradient at every call (the check then pays for one at every trial point). Throws
/// std::invalid_argument when options.IsValid fails, or when options.retraction is one a manifold leaf lacks; an
/// exception from cost propagates.
template <class Tree, class Cost>
DerivativeCheck check_gradient(Cost&& cost, const Tree& x, const DerivativeCheckOptions& options = {}) {
  std::nullptr_t none = nullptr;
  return detail::with_solver_cost(cost, x, [&](auto& c) { return detail::check_derivatives(c, none, x, options); });
}

/// Checks the Euclidean Hessian-vector product minimize's trust region takes,
/// void hessian(const Tree& x, const Tree& xi, Tree* hv), at x against the cost's values (the file's first comment
/// says how). The cost's gradient enters the Taylor model: check it first (check_gradient), since a wrong gradient
/// fails this check too. Throws as check_gradient does.
template <class Tree, class Cost, class Hessian>
requires std::invocable<Hessian&, const Tree&, const Tree&, Tree*> DerivativeCheck
check_hessian(Cost&& cost, Hessian&& hessian, const Tree& x, const DerivativeCheckOptions& options = {}) {
  return detail::with_solver_cost(cost, x, [&](auto& c) { return detail::check_derivatives(c, hessian, x, options); });
}

}  // namespace geomopt
