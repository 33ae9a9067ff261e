// SPD(n), the symmetric positive definite matrices with the affine-invariant metric: spd/spd.hpp.
#pragma once

#include "geomopt/manifolds/spd/spd.hpp"
