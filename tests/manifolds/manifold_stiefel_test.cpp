// The manifold property suite (manifold_properties.hpp) on the Stiefel manifold: St(20, 3) in double and float, and
// St(6, 4) in double, where N - n < n and the core of the retraction is smaller than 2n.
#include "manifold_properties.hpp"

using geomopt::Stiefel;
using manifold_props::sizes;

GEOMOPT_MANIFOLD_PROPERTIES(Stiefel<double>, sizes(20, 3))
GEOMOPT_MANIFOLD_PROPERTIES(Stiefel<float>, sizes(20, 3))
GEOMOPT_MANIFOLD_PROPERTIES(Stiefel<double>, sizes(6, 4))
