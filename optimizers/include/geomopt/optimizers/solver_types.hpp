// Options and summaries of the deterministic Riemannian solvers (solvers.hpp), named after Ceres's so that a Ceres
// user reads them without a manual: SolverOptions with IsValid, per-iteration summaries seen by callbacks, and a
// SolverSummary with BriefReport and FullReport.
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "geomopt/manifolds/common.hpp"
#include "geomopt/optimizers/detail/report_rows.hpp"

namespace geomopt {

enum class SolverMethod {
  gradient_descent,    ///< steepest descent with an Armijo backtracking line search and an expanding first step
  conjugate_gradient,  ///< nonlinear CG (see NonlinearConjugateGradient), restarted when it stops descending
  lbfgs,               ///< limited-memory BFGS, two-loop recursion in the global tangent coordinates
  bfgs,                ///< dense BFGS on the inverse Hessian, for small dimensions
  trust_region,        ///< Riemannian trust region with truncated CG (Steihaug-Toint)
};

enum class LineSearchType {
  armijo,        ///< backtracking until sufficient decrease
  strong_wolfe,  ///< bracketing and zoom until sufficient decrease and the strong curvature condition
};

enum class NonlinearConjugateGradient { fletcher_reeves, polak_ribiere_plus, hestenes_stiefel };

enum class TerminationType {
  convergence,     ///< the gradient or function tolerance was met
  no_convergence,  ///< max_iterations or max_solver_time_in_seconds reached first
  user_success,    ///< a callback returned CallbackReturnType::terminate_successfully
  user_failure,    ///< a callback returned CallbackReturnType::abort
  failure,         ///< the solver could not go on (no descent step found, a non-finite cost)
};

enum class CallbackReturnType { proceed, terminate_successfully, abort };

/// What one iteration did; iteration 0 is the starting point.
struct IterationSummary {
  int iteration = 0;
  double cost = 0;
  double cost_change = 0;            ///< previous cost - this cost
  double gradient_norm = 0;          ///< Riemannian gradient norm at the new point
  double step_norm = 0;              ///< norm of the tangent step taken
  double step_size = 0;              ///< line-search step length along the direction (1 for trust region)
  int line_search_evaluations = 0;   ///< cost evaluations this iteration
  double trust_region_radius = 0;    ///< trust region: the radius after this iteration
  int linear_solver_iterations = 0;  ///< trust region: truncated-CG iterations
  bool step_is_successful = true;    ///< trust region: the step was accepted
  double iteration_time_in_seconds = 0;
  double cumulative_time_in_seconds = 0;
};

using IterationCallback = std::function<CallbackReturnType(const IterationSummary&)>;

struct SolverOptions {
  SolverMethod method = SolverMethod::lbfgs;
  int max_iterations = 1000;
  double max_solver_time_in_seconds = 1e9;

  /// Converged when the Riemannian gradient norm is at most gradient_tolerance, or at most
  /// relative_gradient_tolerance times the initial one (0 turns either off).
  double gradient_tolerance = 1e-8;
  double relative_gradient_tolerance = 0;
  /// Converged when an accepted step changes the cost by at most function_tolerance * |cost| (0: off).
  double function_tolerance = 0;

  /// Line search for gradient descent, CG, L-BFGS and BFGS. Unset: Armijo for gradient descent, strong Wolfe for
  /// the others (their directions need the curvature condition).
  std::optional<LineSearchType> line_search;
  double sufficient_decrease = 1e-4;  ///< Armijo's c1
  /// Wolfe's c2. Unset: 0.1 for conjugate gradient (its directions need a nearly exact line search), 0.9 for the
  /// others.
  std::optional<double> curvature;
  double backtracking_factor = 0.5;  ///< Armijo: step multiplier after a failed trial, in (0, 1)
  double expansion_factor = 2;       ///< first trial of a step: the last accepted step times this, > 1
  int max_line_search_evaluations = 30;
  /// The longest tangent step on the compact manifold leaves (Stiefel, Grassmann, sphere, SO(n)): a line search
  /// cannot run around the manifold. 0: pi. Euclidean and SPD leaves have no ceiling.
  double max_step_norm_on_compact = 0;

  int lbfgs_memory = 20;  ///< stored (s, y) pairs
  NonlinearConjugateGradient conjugate_gradient = NonlinearConjugateGradient::polak_ribiere_plus;
  int conjugate_gradient_restart = 0;  ///< restart every this many iterations (0: the dimension)
  int max_bfgs_dimension = 2000;       ///< bfgs refuses larger problems (its matrix is dim x dim)

  double initial_trust_region_radius = 0;  ///< 0: an eighth of max_trust_region_radius
  double max_trust_region_radius = 0;      ///< 0: pi * sqrt(dim) when compact leaves exist, else 1e6
  double trust_region_acceptance = 0.1;    ///< accept when actual / predicted decrease exceeds this, in [0, 0.25)
  int max_truncated_cg_iterations = 0;     ///< 0: the dimension
  double truncated_cg_kappa = 0.1,
         truncated_cg_theta = 1;  ///< residual target ||r|| <= ||r0|| min(kappa, ||r0||^theta)
  /// Trust region without a Hessian: H v ~ (grad f(R_x(h v / ||v||)) - grad f(x)) ||v|| / h in the global
  /// coordinates, with this h. With a user's Hessian (minimize's four-argument form) the same h, raised to the
  /// cube root of the scalar's epsilon when smaller, is the step of the central differences of the geometry.
  double hessian_finite_difference_step = 1e-6;

  /// The retraction of manifold leaves. Unset: each leaf's manifold default (default_retraction<M>()); set to one a
  /// leaf's manifold lacks, minimize throws std::invalid_argument naming the leaf, the manifold and what it supports.
  std::optional<Retraction> retraction{};
  std::vector<IterationCallback> callbacks;
  bool minimizer_progress_to_stdout = false;

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
    if (max_iterations < 0) return fail("max_iterations must be >= 0, got " + std::to_string(max_iterations));
    if (!(max_solver_time_in_seconds > 0))
      return fail("max_solver_time_in_seconds must be > 0, got " + num(max_solver_time_in_seconds));
    if (!(gradient_tolerance >= 0)) return fail("gradient_tolerance must be >= 0, got " + num(gradient_tolerance));
    if (!(relative_gradient_tolerance >= 0))
      return fail("relative_gradient_tolerance must be >= 0, got " + num(relative_gradient_tolerance));
    if (!(function_tolerance >= 0)) return fail("function_tolerance must be >= 0, got " + num(function_tolerance));
    if (!(sufficient_decrease > 0 && sufficient_decrease < 0.5))
      return fail("sufficient_decrease must be in (0, 0.5), got " + num(sufficient_decrease));
    if (curvature && !(*curvature > sufficient_decrease && *curvature < 1))
      return fail("curvature must be in (sufficient_decrease, 1), got " + num(*curvature));
    if (!(backtracking_factor > 0 && backtracking_factor < 1))
      return fail("backtracking_factor must be in (0, 1), got " + num(backtracking_factor));
    if (!(expansion_factor > 1)) return fail("expansion_factor must be > 1, got " + num(expansion_factor));
    if (max_line_search_evaluations < 1)
      return fail("max_line_search_evaluations must be >= 1, got " + std::to_string(max_line_search_evaluations));
    if (!(max_step_norm_on_compact >= 0))
      return fail("max_step_norm_on_compact must be >= 0, got " + num(max_step_norm_on_compact));
    if (lbfgs_memory < 1) return fail("lbfgs_memory must be >= 1, got " + std::to_string(lbfgs_memory));
    if (conjugate_gradient_restart < 0)
      return fail("conjugate_gradient_restart must be >= 0, got " + std::to_string(conjugate_gradient_restart));
    if (max_bfgs_dimension < 1)
      return fail("max_bfgs_dimension must be >= 1, got " + std::to_string(max_bfgs_dimension));
    if (!(initial_trust_region_radius >= 0))
      return fail("initial_trust_region_radius must be >= 0, got " + num(initial_trust_region_radius));
    if (!(max_trust_region_radius >= 0))
      return fail("max_trust_region_radius must be >= 0, got " + num(max_trust_region_radius));
    if (max_trust_region_radius > 0 && initial_trust_region_radius > max_trust_region_radius)
      return fail("initial_trust_region_radius " + num(initial_trust_region_radius) +
                  " exceeds max_trust_region_radius " + num(max_trust_region_radius));
    if (!(trust_region_acceptance >= 0 && trust_region_acceptance < 0.25))
      return fail("trust_region_acceptance must be in [0, 0.25), got " + num(trust_region_acceptance));
    if (max_truncated_cg_iterations < 0)
      return fail("max_truncated_cg_iterations must be >= 0, got " + std::to_string(max_truncated_cg_iterations));
    if (!(truncated_cg_kappa > 0 && truncated_cg_kappa < 1))
      return fail("truncated_cg_kappa must be in (0, 1), got " + num(truncated_cg_kappa));
    if (!(truncated_cg_theta > 0)) return fail("truncated_cg_theta must be > 0, got " + num(truncated_cg_theta));
    if (!(hessian_finite_difference_step > 0))
      return fail("hessian_finite_difference_step must be > 0, got " + num(hessian_finite_difference_step));
    for (std::size_t i = 0; i < callbacks.size(); ++i)
      if (!callbacks[i]) return fail("callbacks[" + std::to_string(i) + "] is empty");
    return true;
  }
};

inline const char* to_string(SolverMethod m) {
  switch (m) {
    case SolverMethod::gradient_descent:
      return "gradient descent";
    case SolverMethod::conjugate_gradient:
      return "conjugate gradient";
    case SolverMethod::lbfgs:
      return "L-BFGS";
    case SolverMethod::bfgs:
      return "BFGS";
    case SolverMethod::trust_region:
      return "trust region";
  }
  return "?";
}

inline const char* to_string(TerminationType t) {
  switch (t) {
    case TerminationType::convergence:
      return "CONVERGENCE";
    case TerminationType::no_convergence:
      return "NO_CONVERGENCE";
    case TerminationType::user_success:
      return "USER_SUCCESS";
    case TerminationType::user_failure:
      return "USER_FAILURE";
    case TerminationType::failure:
      return "FAILURE";
  }
  return "?";
}

struct SolverSummary {
  SolverMethod method = SolverMethod::lbfgs;
  TerminationType termination_type = TerminationType::failure;
  std::string message = "minimize was not called";  ///< why it stopped
  Eigen::Index num_parameters = 0;                  ///< the tree's stored numbers
  Eigen::Index num_effective_parameters = 0;        ///< the dimension of the tangent space
  double initial_cost = std::numeric_limits<double>::quiet_NaN();
  double final_cost = std::numeric_limits<double>::quiet_NaN();
  double initial_gradient_norm = std::numeric_limits<double>::quiet_NaN();
  double final_gradient_norm = std::numeric_limits<double>::quiet_NaN();
  int num_cost_evaluations = 0;      ///< calls of cost, with or without gradient
  int num_gradient_evaluations = 0;  ///< calls of cost that asked for the gradient
  int num_hessian_evaluations = 0;   ///< calls of the user's Hessian-vector product
  double total_time_in_seconds = 0;
  std::vector<IterationSummary> iterations;  ///< iteration 0 is the start

  /// Iterations taken (not counting the start).
  int num_iterations() const { return iterations.empty() ? 0 : static_cast<int>(iterations.size()) - 1; }
  bool IsSolutionUsable() const {
    return termination_type == TerminationType::convergence || termination_type == TerminationType::no_convergence ||
           termination_type == TerminationType::user_success;
  }

  std::string BriefReport() const {
    char b[320];
    std::snprintf(b, sizeof b,
                  "geomopt %s: %s, iterations %d, cost evaluations %d, initial cost %.6e, final cost %.6e, "
                  "gradient norm %.3e, time %.4g s",
                  to_string(method), to_string(termination_type), num_iterations(), num_cost_evaluations, initial_cost,
                  final_cost, final_gradient_norm, total_time_in_seconds);
    return b;
  }

  std::string FullReport() const {
    std::string out = "\nSolver summary (geomopt " + std::string(to_string(method)) + ")\n\n";
    const detail::ReportRows line{out};
    const auto g = detail::report_number;
    line("Parameters (stored)", std::to_string(num_parameters));
    line("Parameters (tangent dimension)", std::to_string(num_effective_parameters));
    out += "\n";
    line("Initial cost", g(initial_cost));
    line("Final cost", g(final_cost));
    line("Change", g(initial_cost - final_cost));
    line("Initial gradient norm", g(initial_gradient_norm));
    line("Final gradient norm", g(final_gradient_norm));
    out += "\n";
    line("Iterations", std::to_string(num_iterations()));
    line("Cost evaluations", std::to_string(num_cost_evaluations));
    line("Gradient evaluations", std::to_string(num_gradient_evaluations));
    line("Hessian-vector products", std::to_string(num_hessian_evaluations));
    line("Total time (s)", g(total_time_in_seconds));
    out += "\n";
    line("Termination", std::string(to_string(termination_type)) + " (" + message + ")");
    return out;
  }
};

}  // namespace geomopt
