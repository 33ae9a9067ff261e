// geomopt::ptree: user structs of Eigen arrays as parameter trees.
//
// Declare a struct's children once with GEOMOPT_PTREE; then walk several trees of one shape together, flatten a
// tree to one vector and rebuild it, and report its structure. See docs/ptree.md.
#pragma once

#include "geomopt/ptree/buffer.hpp"
#include "geomopt/ptree/declare.hpp"
#include "geomopt/ptree/error.hpp"
#include "geomopt/ptree/path.hpp"
#include "geomopt/ptree/selection.hpp"
#include "geomopt/ptree/traits.hpp"
#include "geomopt/ptree/walk.hpp"
#include "geomopt/ptree/build.hpp"
#include "geomopt/ptree/count.hpp"
#include "geomopt/ptree/flatten.hpp"
#include "geomopt/ptree/report.hpp"
