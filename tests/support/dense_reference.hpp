// The independent dense references of the manifold property suite (tests/manifolds/manifold_properties.hpp), on
// Eigen::MatrixXd: Eigen's Pade scaling-and-squaring exponential (unsupported/Eigen/MatrixFunctions), dense
// full-pivoting LU solves and symmetric eigendecompositions. Compiled once in the geomopt_test_kernels library
// (dense_reference.cpp) rather than instantiated again in every property-suite test file.
#pragma once

#include <Eigen/Core>

namespace manifold_props::reference {

/// exp(x), Eigen's Pade scaling and squaring.
Eigen::MatrixXd expm(const Eigen::MatrixXd& x);
/// The Cayley transform (I - x/2)^-1 (I + x/2), by a dense full-pivoting LU solve.
Eigen::MatrixXd cayley(const Eigen::MatrixXd& x);
/// a^-1 b, by a dense full-pivoting LU solve.
Eigen::MatrixXd solve(const Eigen::MatrixXd& a, const Eigen::MatrixXd& b);
/// The symmetric square root of a symmetric positive semi-definite m, from its eigendecomposition.
Eigen::MatrixXd sym_sqrt(const Eigen::MatrixXd& m);
/// X^(1/2) exp(sym(X^(-1/2) U X^(-1/2))) X^(1/2), the SPD geodesic from X with ambient velocity U, from the
/// eigendecomposition of X and the dense exponential.
Eigen::MatrixXd spd_geodesic(const Eigen::MatrixXd& X, const Eigen::MatrixXd& U);

}  // namespace manifold_props::reference
