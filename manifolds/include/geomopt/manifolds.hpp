// geomopt::manifolds: packed structured matrices (and, to come, the manifolds of docs/manifolds.md).
#pragma once

#include "geomopt/manifolds/packed.hpp"
#include "geomopt/manifolds/lie_alg_hor.hpp"
#include "geomopt/manifolds/global_section.hpp"
