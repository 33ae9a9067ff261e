// The compiled workspaces of the Stiefel family (Stiefel, Grassmann, Sphere, SpecialOrthogonal) over float and double
// (any_workspace.hpp).
#include "define_workspace.hpp"
#include "geomopt/manifolds/stiefel.hpp"

GEOMOPT_DEFINE_COMPILED_WORKSPACE(geomopt::Stiefel)
GEOMOPT_DEFINE_COMPILED_WORKSPACE(geomopt::Grassmann)
GEOMOPT_DEFINE_COMPILED_WORKSPACE(geomopt::Sphere)
GEOMOPT_DEFINE_COMPILED_WORKSPACE(geomopt::SpecialOrthogonal)
