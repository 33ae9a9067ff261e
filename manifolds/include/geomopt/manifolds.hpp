// geomopt::manifolds: the manifold contract (contract.hpp) and everything deduced from it (api.hpp, borrowed.hpp),
// packed structured matrices, horizontal lifts and global sections, and the manifolds, one folder each
// (docs/manifolds.md), and the kernel path their dense products share with the optimizers (kernel_path.hpp). A
// manifold joins by one include line below.
#pragma once

#include "geomopt/manifolds/api.hpp"
#include "geomopt/manifolds/borrowed.hpp"
#include "geomopt/manifolds/common.hpp"
#include "geomopt/manifolds/contract.hpp"
#include "geomopt/manifolds/global_section.hpp"
#include "geomopt/manifolds/kernel_path.hpp"
#include "geomopt/manifolds/lie_alg_hor.hpp"
#include "geomopt/manifolds/lorentz/lorentz.hpp"
#include "geomopt/manifolds/oblique/oblique.hpp"
#include "geomopt/manifolds/packed.hpp"
#include "geomopt/manifolds/spd.hpp"
#include "geomopt/manifolds/stiefel.hpp"
