// geomopt::ceres: geomopt's manifolds as Ceres parameter-block manifolds, and parameter trees as Ceres parameter
// blocks (docs/ceres.md).
#pragma once

#include "geomopt/ceres/local_parameterization.hpp"
#include "geomopt/ceres/manifold.hpp"
#include "geomopt/ceres/tree_blocks.hpp"
