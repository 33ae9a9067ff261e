// The Stiefel family: Stiefel, Grassmann, Sphere and SpecialOrthogonal points, each in its own folder, with the API
// every manifold has (api.hpp) and the family's section overloads (stiefel/family.hpp).
//
//   type                   point                        Tangent (orthonormal coordinates)             metric
//   Stiefel<T>             N x n, Y^T Y = I             StiefelLieAlgHorMatrix (A packed, B)          canonical
//   Grassmann<T>           N x n representative         GrassmannLieAlgHorMatrix (B)                  tr(U^T V)
//   Sphere<T>              unit vector in R^N           StiefelLieAlgHorMatrix with n = 1 (B only)    u . v
//   SpecialOrthogonal<T>   n x n, X^T X = I, det X = 1  SpecialOrthogonalTangent (A; SO(3): the       tr(U^T V) / 2
//                                                       rotation vector)
//
// A tangent vector is a lift [A, -B^T; B, 0] in the global tangent space at lambda(Y) = [Y, Y_perp]: the ambient
// vector is lambda [A; B] = Y A + Y_perp B, and its coordinates are orthonormal for the metric. The geometry is written
// once, in the family's workspace (detail/stiefel_family.hpp); every function here calls it.
#pragma once

#include "geomopt/manifolds/api.hpp"
#include "geomopt/manifolds/global_section.hpp"
#include "geomopt/manifolds/grassmann/grassmann.hpp"
#include "geomopt/manifolds/lie_alg_hor.hpp"
#include "geomopt/manifolds/packed.hpp"
#include "geomopt/manifolds/special_orthogonal/special_orthogonal.hpp"
#include "geomopt/manifolds/sphere/sphere.hpp"
#include "geomopt/manifolds/stiefel/family.hpp"
#include "geomopt/manifolds/stiefel/stiefel.hpp"
