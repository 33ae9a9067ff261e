// CeresManifold<M>: a geomopt manifold as a ceres::Manifold, for Stiefel, Sphere, SpecialOrthogonal, SPD (over
// double) and SymmetricMatrix (a dense n x n block constrained to be symmetric).
//
// The parameter block is the dense point, column-major; the tangent vector is the manifold's orthonormal packed
// coordinates (docs/ceres.md). With lambda the section built deterministically from x and R_x the retraction:
//   Plus(x, delta) = R_x(delta),   Minus(y, x) = R_x^-1(y),
//   Plus(x, 0) = x,   Minus(Plus(x, delta), x) = delta,   Plus(x, Minus(y, x)) = y   (y within reach of R_x),
//   PlusJacobian(x) = D Plus(x, .)(0),   MinusJacobian(x) = D Minus(., x)(x),   MinusJacobian PlusJacobian = I,
// both Jacobians row-major (Ceres's layout). Plus and Minus cost O(N n^2) for the Stiefel family and O(n^3) for SPD;
// RightMultiplyByPlusJacobian is the lift of each row, without forming the Jacobian. Grassmann is left out: its
// blocks are representatives of subspaces and Plus(x, Minus(y, x)) = y cannot hold on them (a static_assert says so).
#pragma once

#include <ceres/manifold.h>

#include "geomopt/ceres/detail/kernels.hpp"

namespace geomopt {

template <class M>
class CeresManifold final : public ceres::Manifold, public detail::CeresKernelHolder<M> {
  using Holder = detail::CeresKernelHolder<M>;

 public:
  // CeresManifold<Stiefel<double>>(N, n, r = cayley), <Sphere<double>>(N, r = cayley),
  // <SpecialOrthogonal<double>>(n, r = cayley), <SPD<double>>(n, r = geodesic), <SymmetricMatrix<double>>(n).
  using Holder::Holder;

  int AmbientSize() const override { return this->kernel_.ambient_size(); }
  int TangentSize() const override { return this->kernel_.tangent_size(); }

  bool Plus(const double* x, const double* delta, double* x_plus_delta) const override {
    return Holder::guarded([&] { this->kernel_.plus(x, delta, x_plus_delta); });
  }
  bool PlusJacobian(const double* x, double* jacobian) const override {
    return Holder::guarded([&] { this->kernel_.plus_jacobian(x, jacobian); });
  }
  bool RightMultiplyByPlusJacobian(const double* x, const int num_rows, const double* ambient_matrix,
                                   double* tangent_matrix) const override {
    return Holder::guarded([&] { this->kernel_.right_multiply(x, num_rows, ambient_matrix, tangent_matrix); });
  }
  bool Minus(const double* y, const double* x, double* y_minus_x) const override {
    return Holder::guarded([&] { this->kernel_.minus(y, x, y_minus_x); });
  }
  bool MinusJacobian(const double* x, double* jacobian) const override {
    return Holder::guarded([&] { this->kernel_.minus_jacobian(x, jacobian); });
  }
};

}  // namespace geomopt
