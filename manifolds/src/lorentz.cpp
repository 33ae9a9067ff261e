// The compiled workspaces of Lorentz<float> and Lorentz<double> (any_workspace.hpp).
#include "geomopt/manifolds/lorentz/lorentz.hpp"
#include "define_workspace.hpp"

GEOMOPT_DEFINE_COMPILED_WORKSPACE(geomopt::Lorentz)
