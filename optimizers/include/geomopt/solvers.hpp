// geomopt solvers: deterministic Riemannian minimisation of a full-batch cost over a whole parameter tree (Euclidean,
// packed and manifold leaves together), with Ceres-style options and summaries (docs/solvers.md).
//
//   double cost(const Tree& x, Tree* egrad);   // f(x); fills *egrad with the Euclidean gradient when egrad != nullptr
//   geomopt::SolverOptions options;            // method, tolerances, line search, memory, retraction, callbacks
//   geomopt::SolverSummary summary = geomopt::minimize(cost, x, options);   // x updated in place
//   geomopt::DerivativeCheck check = geomopt::check_gradient(cost, x);      // first: is egrad right?
//
// Every method works in the tree's global tangent coordinates (detail/tree_geometry.hpp): the Riemannian gradient's
// coordinates in the orthonormal frame of each leaf's global section, so inner products are dot products, and a
// vector kept from one iterate is read at the next in that iterate's frame (the section's vector transport).
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstdio>
#include <deque>
#include <limits>
#include <numbers>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "geomopt/optimizers/check_gradient.hpp"
#include "geomopt/optimizers/detail/tree_geometry.hpp"
#include "geomopt/optimizers/solver_types.hpp"

namespace geomopt {
namespace detail {

// The tree side of a solve, behind virtual calls so that the methods below are compiled once, not once per tree
// type: a few numbered points (copies of the tree) and what the methods ask of them, in global coordinates.
class SolverProblem {
 public:
  static constexpr int kPoints = 5;
  virtual ~SolverProblem() = default;
  virtual Eigen::Index dim() const = 0;
  virtual Eigen::Index stored() const = 0;
  virtual bool has_compact() const = 0;
  virtual double compact_norm(const Eigen::VectorXd& v) const = 0;
  /// The relative cost change below which rounding hides a decrease.
  virtual double roundoff() const = 0;
  /// f at point `slot`, and the coordinates of its Riemannian gradient. A point where the cost, the Euclidean
  /// gradient or its lift is not finite (or where the lift throws std::domain_error, a point outside its manifold's
  /// domain) gives a NaN cost and non_finite() names the leaf; otherwise non_finite() is empty.
  virtual double evaluate(int slot, Eigen::VectorXd& g) = 0;
  /// What the last evaluate found not finite, naming the leaf ("" when everything was finite).
  virtual const std::string& non_finite() const = 0;
  /// point `to` <- R_{point from}(delta).
  virtual void step(int from, const Eigen::VectorXd& delta, int to) = 0;
  virtual void copy(int from, int to) = 0;
  /// Whether the user gave a Euclidean Hessian-vector product.
  virtual bool has_hessian() const = 0;
  /// hv <- the Riemannian Hessian at point `slot` (last evaluated there) applied to v, from the user's Euclidean
  /// Hessian; h is the step of the geometry's central differences.
  virtual void hessian_vector(int slot, const Eigen::VectorXd& v, double h, Eigen::VectorXd& hv) = 0;
};

/// minimize without a Hessian.
struct NoHessian {};

template <class Tree, class Cost, class Hessian = NoHessian>
class TreeProblem final : public SolverProblem {
  static constexpr bool kHessian = !std::is_same_v<Hessian, NoHessian>;

 public:
  TreeProblem(Cost& cost, Hessian& hessian, const Tree& x, std::optional<Retraction> r)
      : cost_(cost),
        hessian_(hessian),
        geo_(x, r),
        egrad_(x),
        points_(kPoints, x),
        egrads_(kHessian ? kPoints : 0, x),
        scratch_(kHessian ? 4 : 0, x) {}
  Eigen::Index dim() const override { return geo_.dim(); }
  Eigen::Index stored() const override { return geo_.stored(); }
  bool has_compact() const override { return geo_.has_compact(); }
  double compact_norm(const Eigen::VectorXd& v) const override { return geo_.compact_norm(v); }
  double roundoff() const override {
    // 1e-10 in double, 1000 epsilons in float.
    return std::max(1e-10, 1e3 * static_cast<double>(std::numeric_limits<ptree::scalar_t<Tree>>::epsilon()));
  }
  double evaluate(int slot, Eigen::VectorXd& g) override {
    const Tree& x = points_[static_cast<std::size_t>(slot)];
    Tree& egrad = kHessian ? egrads_[static_cast<std::size_t>(slot)] : egrad_;
    // A leaf the cost leaves unwritten would otherwise pass for a gradient with whatever the tree last held. An
    // unwritten entry the lift reads makes a coordinate NaN, so the entries are scanned for the mark only where the
    // coordinates are not finite (the lift's finiteness is checked anyway); one the lift never reads cannot matter.
    geo_.mark_unwritten(egrad);
    const double f = static_cast<double>(cost_(x, &egrad));
    non_finite_.clear();
    try {
      geo_.gradient(x, egrad, g);
    } catch (const std::domain_error& e) {
      throw_if_unwritten(egrad);
      non_finite_ = e.what();
      g.setConstant(std::numeric_limits<double>::quiet_NaN());
      return std::numeric_limits<double>::quiet_NaN();
    }
    const bool finite = g.allFinite();
    if (!finite) throw_if_unwritten(egrad);
    if (!std::isfinite(f)) {
      non_finite_ = "the cost is " + std::to_string(f);
    } else if (!finite) {
      non_finite_ = geo_.first_non_finite(egrad, g);
      return std::numeric_limits<double>::quiet_NaN();
    }
    return f;
  }
  const std::string& non_finite() const override { return non_finite_; }
  bool has_hessian() const override { return kHessian; }

  // Along c(t) = R_x(t v) the gradient's coordinates are G(c(t), egrad(c(t))), G the lift of a Euclidean gradient
  // at a point. Their derivative at 0, the Hessian in the section's frame (the frame in which the solvers read
  // every vector), is G(x, ehess[c'(0)]) + d/dt G(c(t), egrad(x)): the user's Euclidean Hessian applied to the
  // tangent vector, plus the change of the lift along the curve with the gradient held fixed. Neither evaluates
  // the cost: the tangent vector and the second term are central differences of the retraction and the lift
  // (error O(h^2)); on storage leaves both are exact (the lift is the identity).
  void hessian_vector(int slot, const Eigen::VectorXd& v, double h, Eigen::VectorXd& hv) override {
    if constexpr (kHessian) {
      const Tree& x = points_[static_cast<std::size_t>(slot)];
      const Tree& egrad = egrads_[static_cast<std::size_t>(slot)];
      Tree &xi = scratch_[0], &hxi = scratch_[1], &plus = scratch_[2], &minus = scratch_[3];
      geo_.tangent(x, v, h, xi, plus, minus);
      geo_.mark_unwritten(hxi);  // as in evaluate
      hessian_(x, xi, &hxi);
      geo_.gradient(plus, egrad, lift_plus_);
      geo_.gradient(minus, egrad, lift_minus_);
      geo_.gradient(x, hxi, hv);
      if (!hv.allFinite())
        if (const std::string* leaf = geo_.first_unwritten(hxi))
          throw std::invalid_argument("minimize: the Hessian-vector product did not write leaf '" + *leaf + "'");
      hv += (lift_plus_ - lift_minus_) / (2 * h);
    } else {
      (void)slot, (void)v, (void)h, (void)hv;
    }
  }
  void step(int from, const Eigen::VectorXd& delta, int to) override {
    if (from != to) copy(from, to);
    geo_.retract(points_[static_cast<std::size_t>(to)], delta);
  }
  void copy(int from, int to) override {
    points_[static_cast<std::size_t>(to)] = points_[static_cast<std::size_t>(from)];
    if constexpr (kHessian) egrads_[static_cast<std::size_t>(to)] = egrads_[static_cast<std::size_t>(from)];
  }
  const Tree& point(int slot) const { return points_[static_cast<std::size_t>(slot)]; }

 private:
  void throw_if_unwritten(const Tree& egrad) const {
    if (const std::string* leaf = geo_.first_unwritten(egrad))
      throw std::invalid_argument("minimize: the cost did not write the gradient of leaf '" + *leaf + "'");
  }

  Cost& cost_;
  Hessian& hessian_;
  std::string non_finite_;
  TreeGeometry<Tree> geo_;
  Tree egrad_;
  std::vector<Tree> points_;
  std::vector<Tree> egrads_;   // with a Hessian: each point's Euclidean gradient
  std::vector<Tree> scratch_;  // with a Hessian: xi, ehess[xi], R_x(h v), R_x(-h v)
  Eigen::VectorXd lift_plus_, lift_minus_;
};

class Solver {
 public:
  using Vector = Eigen::VectorXd;

  Solver(SolverProblem& problem, const SolverOptions& options, double epsilon)
      : problem_(problem),
        options_(options),
        start_(Clock::now()),
        roundoff_(problem.roundoff()),
        cbrt_epsilon_(std::cbrt(epsilon)) {
    const bool compact = problem_.has_compact();
    ceiling_ = compact ? (options.max_step_norm_on_compact > 0 ? options.max_step_norm_on_compact : std::numbers::pi)
                       : std::numeric_limits<double>::infinity();
    curvature_ = options.curvature.value_or(options.method == SolverMethod::conjugate_gradient ? 0.1 : 0.9);
    line_search_ = options.line_search.value_or(
        options.method == SolverMethod::gradient_descent ? LineSearchType::armijo : LineSearchType::strong_wolfe);
  }

  // Solves from point 0; returns the point holding the result (-1: keep the start).
  int run() {
    SolverSummary& s = summary_;
    s.method = options_.method;
    s.num_parameters = problem_.stored();
    s.num_effective_parameters = problem_.dim();
    if (options_.method == SolverMethod::bfgs && problem_.dim() > options_.max_bfgs_dimension)
      throw std::invalid_argument("minimize: bfgs keeps a dim x dim matrix; the tangent dimension " +
                                  std::to_string(problem_.dim()) + " exceeds max_bfgs_dimension " +
                                  std::to_string(options_.max_bfgs_dimension) + " (use lbfgs)");
    Point cur{0, 0, {}};
    cur.f = evaluate(cur);
    s.initial_cost = cur.f;
    s.initial_gradient_norm = cur.g.norm();
    IterationSummary it0;
    it0.cost = cur.f;
    it0.gradient_norm = s.initial_gradient_norm;
    if (!std::isfinite(cur.f) || !cur.g.allFinite()) {
      finish(cur, TerminationType::failure,
             "the cost or its gradient is not finite at the starting point" +
                 (non_finite_.empty() ? std::string() : ": " + non_finite_));
    } else if (!record(it0) && !converged_gradient(cur)) {
      switch (options_.method) {
        case SolverMethod::gradient_descent:
        case SolverMethod::conjugate_gradient:
        case SolverMethod::lbfgs:
        case SolverMethod::bfgs:
          line_search_method(cur);
          break;
        case SolverMethod::trust_region:
          trust_region(cur);
          break;
      }
    }
    s.final_cost = cur.f;
    s.final_gradient_norm = cur.g.norm();
    s.total_time_in_seconds = seconds();
    return accepted_any_ ? cur.slot : -1;
  }

  const SolverSummary& summary() const { return summary_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Point {
    int slot;  // which of the problem's points
    double f;
    Vector g;
  };

  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  double evaluate(Point& p) {
    ++summary_.num_cost_evaluations;
    ++summary_.num_gradient_evaluations;
    p.f = problem_.evaluate(p.slot, p.g);
    if (!problem_.non_finite().empty() && non_finite_.empty()) non_finite_ = problem_.non_finite();
    return p.f;
  }

  // A failure's message, led by the first non-finite evaluation since the last accepted point when there was one:
  // that, not the search that gave up on it, is what the user must fix.
  std::string failure(const std::string& what) const {
    if (non_finite_.empty()) return what;
    return "the cost or its gradient is not finite at a trial point: " + non_finite_ + " (then " + what + ")";
  }

  // Records an iteration, prints it, runs the callbacks; true when the solve must stop (termination set).
  bool record(IterationSummary it) {
    it.cumulative_time_in_seconds = seconds();
    it.iteration_time_in_seconds = it.cumulative_time_in_seconds - last_time_;
    last_time_ = it.cumulative_time_in_seconds;
    it.iteration = static_cast<int>(summary_.iterations.size());
    summary_.iterations.push_back(it);
    if (options_.minimizer_progress_to_stdout) {
      if (it.iteration == 0)
        std::printf("iter      cost      cost_change  |gradient|   |step|    step   evals  time\n");
      std::printf("%4d % 14.6e % 10.3e % 10.3e % 9.3e % 9.3e %4d % 8.2e\n", it.iteration, it.cost, it.cost_change,
                  it.gradient_norm, it.step_norm, it.step_size, it.line_search_evaluations,
                  it.cumulative_time_in_seconds);
    }
    for (const IterationCallback& cb : options_.callbacks) {
      const CallbackReturnType r = cb(it);
      if (r == CallbackReturnType::terminate_successfully) {
        summary_.termination_type = TerminationType::user_success;
        summary_.message = "a callback asked to stop";
        return true;
      }
      if (r == CallbackReturnType::abort) {
        summary_.termination_type = TerminationType::user_failure;
        summary_.message = "a callback aborted the solve";
        return true;
      }
    }
    return false;
  }

  bool converged_gradient(const Point& p) {
    const double gn = p.g.norm();
    if (gn <= options_.gradient_tolerance) {
      finish(p, TerminationType::convergence,
             "gradient norm " + num(gn) + " <= gradient_tolerance " + num(options_.gradient_tolerance));
      return true;
    }
    if (options_.relative_gradient_tolerance > 0 &&
        gn <= options_.relative_gradient_tolerance * summary_.initial_gradient_norm) {
      finish(p, TerminationType::convergence,
             "gradient norm " + num(gn) + " <= relative_gradient_tolerance times the initial " +
                 num(summary_.initial_gradient_norm));
      return true;
    }
    return false;
  }

  // After an accepted step from cost f_old to p: converged, out of budget, or stopped by a callback.
  bool done(const Point& p, double f_old, IterationSummary& it) {
    if (record(it)) return true;
    if (converged_gradient(p)) return true;
    if (options_.function_tolerance > 0 &&
        std::abs(f_old - p.f) <= options_.function_tolerance * std::max(std::abs(p.f), 1e-300)) {
      finish(p, TerminationType::convergence,
             "relative cost change " + num(std::abs(f_old - p.f) / std::abs(p.f)) + " <= function_tolerance");
      return true;
    }
    if (summary_.num_iterations() >= options_.max_iterations) {
      finish(p, TerminationType::no_convergence,
             "max_iterations " + std::to_string(options_.max_iterations) + " reached");
      return true;
    }
    if (seconds() >= options_.max_solver_time_in_seconds) {
      finish(p, TerminationType::no_convergence, "max_solver_time_in_seconds reached");
      return true;
    }
    return false;
  }

  void finish(const Point&, TerminationType t, std::string message) {
    summary_.termination_type = t;
    summary_.message = std::move(message);
  }

  static std::string num(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3e", v);
    return b;
  }

  // ---- line search ----------------------------------------------------------------------------------------------

  // The trial point R_x(t d) with its cost and gradient.
  double trial(const Point& from, const Vector& d, double t, Point& out) {
    step_ = t * d;
    problem_.step(from.slot, step_, out.slot);
    return evaluate(out);
  }

  // The longest step along d that the ceiling on compact leaves allows.
  double max_step(const Vector& d) const {
    const double n = problem_.compact_norm(d);
    return n > 0 ? ceiling_ / n : std::numeric_limits<double>::infinity();
  }

  // Finds t along the descent direction d (slope0 = <g, d> < 0) and moves `cur` there. Returns false when no
  // acceptable step was found within the budget (cur unchanged).
  bool line_search(Point& cur, const Vector& d, double slope0, double t0, double& t_out, int& evals) {
    const double tmax = max_step(d);
    t0 = std::min(t0, tmax);
    const int start = summary_.num_cost_evaluations;
    bool ok = line_search_ == LineSearchType::armijo ? armijo(cur, d, slope0, t0, t_out)
                                                     : strong_wolfe(cur, d, slope0, t0, tmax, t_out);
    evals = summary_.num_cost_evaluations - start;
    return ok;
  }

  // Sufficient decrease at the trial point next_ (cost f, slope st = <grad, d>). Once the change is below what the
  // cost's rounding can show (|f - f0| <= roundoff_ |f0|), the test moves to the derivative, the approximate Armijo
  // condition of Hager and Zhang with their delta = 0.1: st <= (2 delta - 1) slope0. For a quadratic it accepts the
  // steps up to 1.8 times the exact minimiser, so every step still contracts; it stays exact where cost differences
  // are noise, and without it no method gets the gradient much below sqrt(eps) times its scale.
  bool sufficient(double f0, double slope0, double t, double f, double st) const {
    const double c1 = options_.sufficient_decrease;
    if (!std::isfinite(f)) return false;
    if (f <= f0 + c1 * t * slope0 && !roundoff(f0, f)) return true;
    return roundoff(f0, f) && st <= (2 * kApproximateDelta - 1) * slope0;
  }
  bool roundoff(double f0, double f) const { return std::abs(f - f0) <= roundoff_ * std::abs(f0); }
  static constexpr double kApproximateDelta = 0.1;

  bool armijo(Point& cur, const Vector& d, double slope0, double t, double& t_out) {
    for (int k = 0; k < options_.max_line_search_evaluations; ++k) {
      trial(cur, d, t, next_);
      if (sufficient(cur.f, slope0, t, next_.f, next_.g.dot(d))) {
        std::swap(cur, next_);
        t_out = t;
        return true;
      }
      t *= options_.backtracking_factor;
    }
    return false;
  }

  // Nocedal and Wright, Algorithms 3.5 and 3.6, with the derivative along the transported direction,
  // phi'(t) = <grad f(R_x(t d)), d> in the new iterate's coordinates.
  bool strong_wolfe(Point& cur, const Vector& d, double slope0, double t, double tmax, double& t_out) {
    const double c2 = curvature_, f0 = cur.f;
    double t_prev = 0, f_prev = f0, s_prev = slope0;
    double best_t = 0, best_f = f0;
    auto keep_best = [&](double tt) {
      if (next_.f < best_f && sufficient(f0, slope0, tt, next_.f, next_.g.dot(d))) {
        best_f = next_.f;
        best_t = tt;
        problem_.copy(next_.slot, best_.slot);
        best_.f = next_.f;
        best_.g = next_.g;
      }
    };
    int evals = 0;
    for (;; ++evals) {
      if (evals >= options_.max_line_search_evaluations) break;
      trial(cur, d, t, next_);
      keep_best(t);
      const double st = next_.g.dot(d);
      if (!sufficient(f0, slope0, t, next_.f, st) || (evals > 0 && next_.f >= f_prev && !roundoff(f0, next_.f))) {
        if (zoom(cur, d, slope0, t_prev, f_prev, s_prev, t, next_.f, st, evals, best_f, best_t, keep_best, t_out))
          return true;
        break;
      }
      if (std::abs(st) <= -c2 * slope0) return accept(cur, t, t_out);
      if (st >= 0) {
        if (zoom(cur, d, slope0, t, next_.f, st, t_prev, f_prev, s_prev, evals, best_f, best_t, keep_best, t_out))
          return true;
        break;
      }
      if (t >= tmax) return accept(cur, t, t_out);  // the ceiling: sufficient decrease holds, take it
      t_prev = t;
      f_prev = next_.f;
      s_prev = st;
      t = std::min(t * options_.expansion_factor, tmax);
    }
    // Out of budget: the best point with sufficient decrease, if any.
    if (best_t > 0) {
      std::swap(cur, best_);
      t_out = best_t;
      return true;
    }
    return false;
  }

  bool accept(Point& cur, double t, double& t_out) {
    std::swap(cur, next_);
    t_out = t;
    return true;
  }

  template <class KeepBest>
  bool zoom(Point& cur, const Vector& d, double slope0, double lo, double f_lo, double s_lo, double hi, double f_hi,
            double s_hi, int& evals, double&, double&, KeepBest& keep_best, double& t_out) {
    const double c2 = curvature_, f0 = cur.f;
    for (++evals; evals < options_.max_line_search_evaluations; ++evals) {
      double t = cubic_minimizer(lo, f_lo, s_lo, hi, f_hi, s_hi);
      const double a = std::min(lo, hi), b = std::max(lo, hi), w = b - a;
      if (!(t > a + 0.1 * w && t < b - 0.1 * w)) t = 0.5 * (lo + hi);
      if (w <= 1e-16 * b) break;
      trial(cur, d, t, next_);
      keep_best(t);
      const double st = next_.g.dot(d);
      if (!sufficient(f0, slope0, t, next_.f, st) || (next_.f >= f_lo && !roundoff(f0, next_.f))) {
        hi = t;
        f_hi = next_.f;
        s_hi = st;
      } else {
        if (std::abs(st) <= -c2 * slope0) return accept(cur, t, t_out);
        if (st * (hi - lo) >= 0) {
          hi = lo;
          f_hi = f_lo;
          s_hi = s_lo;
        }
        lo = t;
        f_lo = next_.f;
        s_lo = st;
      }
    }
    return false;
  }

  // The minimiser of the cubic through (a, fa, sa) and (b, fb, sb); NaN when it has none.
  static double cubic_minimizer(double a, double fa, double sa, double b, double fb, double sb) {
    if (!std::isfinite(fb) || !std::isfinite(sb)) return std::numeric_limits<double>::quiet_NaN();
    const double d1 = sa + sb - 3 * (fa - fb) / (a - b);
    const double disc = d1 * d1 - sa * sb;
    if (disc < 0) return std::numeric_limits<double>::quiet_NaN();
    const double d2 = std::copysign(std::sqrt(disc), b - a);
    return b - (b - a) * (sb + d2 - d1) / (sb - sa + 2 * d2);
  }

  // ---- gradient descent, CG, L-BFGS, BFGS -------------------------------------------------------------------------

  void line_search_method(Point& cur) {
    const SolverMethod method = options_.method;
    const Eigen::Index n = problem_.dim();
    Vector d, g_old, s_vec, y_vec;
    std::deque<std::pair<Vector, Vector>> pairs;  // L-BFGS (s, y)
    std::deque<double> rhos;
    Eigen::MatrixXd H;  // BFGS: the inverse Hessian approximation
    bool h_scaled = false;
    double t_prev = 0, slope_prev = 0;
    int since_restart = 0;
    const int restart = options_.conjugate_gradient_restart > 0 ? options_.conjugate_gradient_restart
                                                                : static_cast<int>(std::max<Eigen::Index>(n, 1));
    if (method == SolverMethod::bfgs) H = Eigen::MatrixXd::Identity(n, n);
    // Restarts and the recovery after a failed line search drop what the quasi-Newton methods learnt.
    auto forget_memory = [&] {
      pairs.clear();
      rhos.clear();
      if (method == SolverMethod::bfgs) {
        H.setIdentity();
        h_scaled = false;
      }
    };
    bool steepest = true;  // the direction is -g (first iteration, restarts, recovery)
    bool recovered = false;

    for (;;) {
      // The direction.
      if (steepest || method == SolverMethod::gradient_descent) {
        d = -cur.g;
      } else if (method == SolverMethod::conjugate_gradient) {
        d = -cur.g + cg_beta(cur.g, g_old, d) * d;
      } else if (method == SolverMethod::lbfgs) {
        d = -two_loop(cur.g, pairs, rhos);
      } else {
        d.noalias() = -(H.selfadjointView<Eigen::Lower>() * cur.g);
      }
      double slope = cur.g.dot(d);
      if (!(slope < 0)) {  // not a descent direction: restart from the gradient
        d = -cur.g;
        slope = -cur.g.squaredNorm();
        forget_memory();
        since_restart = 0;
      }

      // The first trial step.
      double t0 = 1;
      if (steepest && t_prev == 0) {
        t0 = 1 / std::max(cur.g.norm(), 1e-300);  // a unit step
      } else if (method == SolverMethod::gradient_descent) {
        t0 = t_prev * options_.expansion_factor;  // grow from the last accepted step
      } else if (method == SolverMethod::conjugate_gradient) {
        t0 = t_prev * slope_prev / slope;  // the same first-order decrease as last time
      }
      if (!(t0 > 0) || !std::isfinite(t0)) t0 = 1 / std::max(cur.g.norm(), 1e-300);

      g_old = cur.g;
      const double f_old = cur.f;
      double t = 0;
      int evals = 0;
      if (!line_search(cur, d, slope, t0, t, evals)) {
        if (!steepest && !recovered) {  // one retry along the gradient with a fresh memory
          steepest = recovered = true;
          forget_memory();
          t_prev = 0;
          continue;
        }
        finish(cur, TerminationType::failure,
               failure("the line search found no step with sufficient decrease in " +
                       std::to_string(options_.max_line_search_evaluations) + " evaluations"));
        return;
      }
      accepted_any_ = true;
      non_finite_.clear();
      recovered = false;
      steepest = false;
      t_prev = t;
      slope_prev = slope;
      ++since_restart;

      IterationSummary it;
      it.cost = cur.f;
      it.cost_change = f_old - cur.f;
      it.gradient_norm = cur.g.norm();
      it.step_size = t;
      it.step_norm = t * d.norm();
      it.line_search_evaluations = evals;
      if (done(cur, f_old, it)) return;

      // The curvature pair, in the new iterate's coordinates.
      if (method == SolverMethod::lbfgs || method == SolverMethod::bfgs) {
        s_vec = t * d;
        y_vec = cur.g - g_old;
        const double sy = s_vec.dot(y_vec);
        if (sy > 1e-12 * s_vec.norm() * y_vec.norm()) {
          if (method == SolverMethod::lbfgs) {
            if (static_cast<int>(pairs.size()) == options_.lbfgs_memory) {
              pairs.pop_front();
              rhos.pop_front();
            }
            pairs.emplace_back(s_vec, y_vec);
            rhos.push_back(1 / sy);
          } else {
            if (!h_scaled) {
              H *= sy / y_vec.squaredNorm();
              h_scaled = true;
            }
            const double rho = 1 / sy;
            hy_.noalias() = H.selfadjointView<Eigen::Lower>() * y_vec;
            const double yhy = y_vec.dot(hy_);
            // H <- (I - rho s y^T) H (I - rho y s^T) + rho s s^T
            //    = H + (1 + rho y'Hy) rho s s^T - rho (Hy s^T + s y'H), on the lower triangle only
            H.selfadjointView<Eigen::Lower>().rankUpdate(s_vec, (1 + rho * yhy) * rho);
            H.selfadjointView<Eigen::Lower>().rankUpdate(hy_, s_vec, -rho);
          }
        }
      }
      if (method == SolverMethod::conjugate_gradient && since_restart >= restart) {
        steepest = true;
        since_restart = 0;
      }
    }
  }

  double cg_beta(const Vector& g, const Vector& g_old, const Vector& d_old) const {
    const Vector y = g - g_old;
    switch (options_.conjugate_gradient) {
      case NonlinearConjugateGradient::fletcher_reeves:
        return g.squaredNorm() / g_old.squaredNorm();
      case NonlinearConjugateGradient::polak_ribiere_plus:
        return std::max(0.0, g.dot(y) / g_old.squaredNorm());
      case NonlinearConjugateGradient::hestenes_stiefel: {
        const double den = d_old.dot(y);
        return den != 0 ? std::max(0.0, g.dot(y) / den) : 0.0;
      }
    }
    return 0;
  }

  static Vector two_loop(const Vector& g, const std::deque<std::pair<Vector, Vector>>& pairs,
                         const std::deque<double>& rhos) {
    Vector q = g;
    std::vector<double> alpha(pairs.size());
    for (std::size_t i = pairs.size(); i-- > 0;) {
      alpha[i] = rhos[i] * pairs[i].first.dot(q);
      q -= alpha[i] * pairs[i].second;
    }
    if (!pairs.empty()) {
      const auto& [s, y] = pairs.back();
      q *= s.dot(y) / y.squaredNorm();
    }
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      const double beta = rhos[i] * pairs[i].second.dot(q);
      q += (alpha[i] - beta) * pairs[i].first;
    }
    return q;
  }

  // ---- trust region ----------------------------------------------------------------------------------------------

  // H v in the global coordinates: from the user's Hessian, else by a finite difference of gradients along v.
  Vector hessian_vector(const Point& at, const Vector& v) {
    const double vn = v.norm();
    if (vn == 0) return Vector::Zero(v.size());
    if (problem_.has_hessian()) {
      ++summary_.num_hessian_evaluations;
      Vector hv;
      problem_.hessian_vector(at.slot, v, std::max(options_.hessian_finite_difference_step, cbrt_epsilon_) / vn, hv);
      return hv;
    }
    const double h = options_.hessian_finite_difference_step;
    step_ = (h / vn) * v;
    problem_.step(at.slot, step_, probe_.slot);
    evaluate(probe_);
    return (probe_.g - at.g) * (vn / h);
  }

  void trust_region(Point& cur) {
    const Eigen::Index n = problem_.dim();
    const double max_radius =
        options_.max_trust_region_radius > 0
            ? options_.max_trust_region_radius
            : (problem_.has_compact() ? std::numbers::pi * std::sqrt(static_cast<double>(n)) : 1e6);
    double radius = options_.initial_trust_region_radius > 0 ? options_.initial_trust_region_radius : max_radius / 8;
    const int max_inner =
        options_.max_truncated_cg_iterations > 0 ? options_.max_truncated_cg_iterations : static_cast<int>(n);
    Vector eta, r, delta, Hd, Heta;
    for (;;) {
      const int evals_start = summary_.num_cost_evaluations;
      // Steihaug-Toint truncated CG on m(eta) = f + <g, eta> + 1/2 <eta, H eta>, ||eta|| <= radius.
      eta = Vector::Zero(n);
      Heta = Vector::Zero(n);
      r = cur.g;
      delta = -r;
      const double r0 = r.norm();
      const double target = r0 * std::min(options_.truncated_cg_kappa, std::pow(r0, options_.truncated_cg_theta));
      int inner = 0;
      bool boundary = false;
      for (; inner < max_inner; ++inner) {
        Hd = hessian_vector(cur, delta);
        const double dHd = delta.dot(Hd);
        const double rr = r.squaredNorm();
        const double alpha = rr / dHd;
        const Vector next_eta = eta + alpha * delta;
        if (dHd <= 0 || next_eta.norm() >= radius) {
          // To the boundary along delta: tau >= 0 with ||eta + tau delta|| = radius.
          const double a = delta.squaredNorm(), b = 2 * eta.dot(delta), c = eta.squaredNorm() - radius * radius;
          const double tau = (-b + std::sqrt(std::max(0.0, b * b - 4 * a * c))) / (2 * a);
          eta += tau * delta;
          Heta += tau * Hd;
          boundary = true;
          ++inner;
          break;
        }
        eta = next_eta;
        Heta += alpha * Hd;
        r += alpha * Hd;
        if (r.norm() <= target) {
          ++inner;
          break;
        }
        delta = -r + (r.squaredNorm() / rr) * delta;
      }
      const double model_decrease = -(cur.g.dot(eta) + 0.5 * eta.dot(Heta));
      problem_.step(cur.slot, eta, trial_tr_.slot);
      evaluate(trial_tr_);
      const double actual = cur.f - trial_tr_.f;
      // Ratio with a guard against rounding when both decreases are at the level of the cost's rounding.
      const double guard = std::max(1.0, std::abs(cur.f)) * 1e-14;
      const double rho = (actual + guard) / (model_decrease + guard);
      if (!(rho >= 0.25) || !std::isfinite(trial_tr_.f)) {
        radius *= 0.25;
      } else if (rho > 0.75 && boundary) {
        radius = std::min(2 * radius, max_radius);
      }
      const bool accept = std::isfinite(trial_tr_.f) && model_decrease > 0 && rho > options_.trust_region_acceptance;
      const double f_old = cur.f;
      IterationSummary it;
      it.step_is_successful = accept;
      it.trust_region_radius = radius;
      it.linear_solver_iterations = inner;
      it.step_size = 1;
      it.line_search_evaluations = summary_.num_cost_evaluations - evals_start;
      if (accept) {
        std::swap(cur, trial_tr_);
        accepted_any_ = true;
        non_finite_.clear();
        it.step_norm = eta.norm();
      }
      it.cost = cur.f;
      it.cost_change = f_old - cur.f;
      it.gradient_norm = cur.g.norm();
      if (done(cur, accept ? f_old : std::numeric_limits<double>::infinity(), it)) return;
      if (radius < 1e-14 * max_radius) {
        finish(cur, TerminationType::failure, failure("the trust region radius collapsed to " + num(radius)));
        return;
      }
    }
  }

  SolverProblem& problem_;
  const SolverOptions& options_;
  std::string non_finite_;  // the first non-finite evaluation since the last accepted point
  Clock::time_point start_;
  double last_time_ = 0;
  double ceiling_ = 0;
  double curvature_ = 0.9;
  double roundoff_;      // the relative cost change below which rounding hides the decrease
  double cbrt_epsilon_;  // the smallest step of a central difference worth taking in the tree's scalar
  LineSearchType line_search_ = LineSearchType::strong_wolfe;
  bool accepted_any_ = false;
  SolverSummary summary_;
  Point next_{1, 0, {}}, best_{2, 0, {}}, probe_{3, 0, {}}, trial_tr_{4, 0, {}};
  Vector step_, hy_;
};

template <class Tree, class Cost, class Hessian>
SolverSummary minimize_impl(Cost& cost, Hessian& hessian, Tree& x, const SolverOptions& options) {
  std::string error;
  if (!options.IsValid(&error)) throw std::invalid_argument("SolverOptions: " + error);
  TreeProblem<Tree, Cost, Hessian> problem(cost, hessian, x, options.retraction);
  Solver solver(problem, options, static_cast<double>(std::numeric_limits<ptree::scalar_t<Tree>>::epsilon()));
  const int result = solver.run();
  if (result >= 0) x = problem.point(result);
  return solver.summary();
}

}  // namespace detail

/// Minimises cost over x, every leaf in its own geometry, and leaves x at the last accepted iterate (at the start
/// point when no step was accepted). Throws std::invalid_argument when options.IsValid fails, before any
/// evaluation, and when the cost leaves a leaf of *egrad unwritten, naming the leaf; an exception from cost
/// propagates with x unchanged.
template <class Tree, class Cost>
SolverSummary minimize(Cost&& cost, Tree& x, const SolverOptions& options = {}) {
  detail::NoHessian none;
  return detail::minimize_impl(cost, none, x, options);
}

/// minimize with the Euclidean Hessian-vector product, for the trust region (the other methods never call it):
///
///   void hessian(const Tree& x, const Tree& xi, Tree* hv);   // *hv <- D(egrad)(x)[xi], in the gradient's layout
///
/// xi is a tangent vector at x in the representation of a gradient (storage directions for Euclidean and packed
/// leaves, an ambient tangent matrix for manifold leaves), and *hv the derivative of the Euclidean gradient along
/// it. The solver adds the geometry's part itself (solvers.hpp, TreeProblem::hessian_vector; docs/solvers.md),
/// so a product costs one call of hessian and no evaluation of the cost. hessian must overwrite every leaf of *hv:
/// one it leaves unwritten throws std::invalid_argument naming the leaf.
template <class Tree, class Cost, class Hessian>
requires std::invocable<Hessian&, const Tree&, const Tree&, Tree*> SolverSummary
minimize(Cost&& cost, Hessian&& hessian, Tree& x, const SolverOptions& options) {
  return detail::minimize_impl(cost, hessian, x, options);
}

}  // namespace geomopt
