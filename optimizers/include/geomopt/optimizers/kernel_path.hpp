// The kernel path (which instructions the built-in kernels run on) is shared by the manifold and optimizer kernels
// and declared with the manifolds, in geomopt/manifolds/kernel_path.hpp; this header includes that one.
#pragma once

#include "geomopt/manifolds/kernel_path.hpp"
