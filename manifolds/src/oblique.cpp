// The compiled workspaces of Oblique<float> and Oblique<double> (any_workspace.hpp).
#include "geomopt/manifolds/oblique/oblique.hpp"
#include "define_workspace.hpp"

GEOMOPT_DEFINE_COMPILED_WORKSPACE(geomopt::Oblique)
