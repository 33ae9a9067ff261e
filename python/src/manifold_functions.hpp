// geomopt._core's manifold functions: the manifold API (<geomopt/manifolds/api.hpp>) on arrays in the layout geomopt
// sees, for geomopt.manifolds. A point arrives as a C-ordered NumPy array of shape (cols, rows), float32 or float64,
// which in memory is the column-major rows x cols value of the manifold's point (geomopt/manifolds.py lays tensors out
// so); a tangent vector is its dim(x) orthonormal coordinates. Every function copies its inputs into a point of its
// own and returns new arrays: nothing the caller passed is written. Errors are the library's: std::invalid_argument
// (ValueError) for a shape the manifold has no point of or an unknown retraction, std::domain_error (ValueError) for a
// non-finite coordinate or a target out of reach.
#pragma once

#include <pybind11/pybind11.h>

namespace geomopt::python {

/// Adds manifold_check, manifold_project, manifold_dim, manifold_lift, manifold_retract,
/// manifold_inverse_retract and manifold_random_point to the module.
void bind_manifold_functions(pybind11::module_& m);

}  // namespace geomopt::python
