// geomopt::manifolds: packed structured matrices, horizontal lifts and global sections, and the manifolds Stiefel,
// Grassmann, Sphere, SpecialOrthogonal and SPD with one API (docs/manifolds.md).
#pragma once

#include "geomopt/manifolds/common.hpp"
#include "geomopt/manifolds/packed.hpp"
#include "geomopt/manifolds/lie_alg_hor.hpp"
#include "geomopt/manifolds/global_section.hpp"
#include "geomopt/manifolds/stiefel.hpp"
#include "geomopt/manifolds/spd.hpp"
