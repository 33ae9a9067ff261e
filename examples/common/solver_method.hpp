// A geomopt::SolverMethod by its command-line name (lbfgs, trust_region, cg, gd, bfgs).
#pragma once

#include <geomopt/solvers.hpp>
#include <stdexcept>
#include <string>

namespace geomopt::examples {

// `also` names further values the caller accepts itself (for the error message).
inline SolverMethod solver_method(const std::string& flag, const std::string& name, const std::string& also = "") {
  if (name == "lbfgs") return SolverMethod::lbfgs;
  if (name == "trust_region") return SolverMethod::trust_region;
  if (name == "cg") return SolverMethod::conjugate_gradient;
  if (name == "gd") return SolverMethod::gradient_descent;
  if (name == "bfgs") return SolverMethod::bfgs;
  throw std::invalid_argument(flag + " expects lbfgs, trust_region, cg, gd, bfgs" + (also.empty() ? "" : ", " + also) +
                              ", got '" + name + "'");
}

}  // namespace geomopt::examples
