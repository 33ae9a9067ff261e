// Every manifold of the library, one line each: its class template in namespace geomopt and the dimensions of the
// point its tests draw (M::random_point(rng, dims...)). A manifold added to the library adds its line here and no
// other test line: the property suite (tests/manifolds/contract_properties_test.cpp) is stamped on each line in float,
// double and ceres::Jet, Ceres's own invariants run on its CeresManifold (tests/ceres/manifold_test.cpp), and the
// consumer suite (tests/integration/every_manifold_test.cpp) trains it with every optimizer, solves on it with every
// solver, checkpoints it and fits it in a ceres::Problem.
//
//   #define STAMP(Name, ...) check<geomopt::Name<double>>(#Name, __VA_ARGS__);
//   GEOMOPT_EVERY_MANIFOLD(STAMP)
#pragma once

#define GEOMOPT_EVERY_MANIFOLD(X) \
  X(Stiefel, 8, 3)                \
  X(Grassmann, 8, 3)              \
  X(Sphere, 6)                    \
  X(SpecialOrthogonal, 3)         \
  X(SPD, 4)                       \
  X(Oblique, 6, 3)                \
  X(Lorentz, 4)                   \
  /* the end of the list: every line above ends alike, so adding one changes no other */
