// The compiled workspaces of SPD<float> and SPD<double> (any_workspace.hpp).
#include "geomopt/manifolds/spd.hpp"
#include "define_workspace.hpp"

GEOMOPT_DEFINE_COMPILED_WORKSPACE(geomopt::SPD)
