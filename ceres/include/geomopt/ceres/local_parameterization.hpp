// CeresLocalParameterization<M>: the same adapter as CeresManifold<M> through Ceres's older interface, which Ceres
// 2.2 removed; it exists only when the Ceres in use is older than 2.2.
//
//   Plus(x, delta) = CeresManifold::Plus(x, delta),   ComputeJacobian(x) = PlusJacobian(x) (row-major),
//   MultiplyByJacobian(x, G) = G ComputeJacobian(x) = RightMultiplyByPlusJacobian(x, G),
//   GlobalSize = AmbientSize, LocalSize = TangentSize, Plus(x, 0) = x.
// Ceres 2.1 marks LocalParameterization deprecated; deriving from it is the point of this class, so the warning is
// silenced here, and only here (code calling Problem::SetParameterization gets Ceres's own deprecation warning).
#pragma once

#include <ceres/version.h>

#if !(CERES_VERSION_MAJOR > 2 || (CERES_VERSION_MAJOR == 2 && CERES_VERSION_MINOR >= 2))

#include <ceres/local_parameterization.h>

#include "geomopt/ceres/manifold.hpp"  // detail::CeresHolder, the one adapter both interfaces share

#define GEOMOPT_HAS_CERES_LOCAL_PARAMETERIZATION 1

namespace geomopt {

#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif

template <class M>
class CeresLocalParameterization final : public ceres::LocalParameterization, public detail::CeresHolder<M> {
  using Holder = detail::CeresHolder<M>;

 public:
  // The constructors of CeresManifold<M>.
  using Holder::Holder;

  int GlobalSize() const override { return this->kernel_.ambient_size(); }
  int LocalSize() const override { return this->kernel_.tangent_size(); }

  bool Plus(const double* x, const double* delta, double* x_plus_delta) const override {
    return detail::ceres_guarded([&] { this->kernel_.plus(x, delta, x_plus_delta); });
  }
  bool ComputeJacobian(const double* x, double* jacobian) const override {
    return detail::ceres_guarded([&] { this->kernel_.plus_jacobian(x, jacobian); });
  }
  bool MultiplyByJacobian(const double* x, const int num_rows, const double* global_matrix,
                          double* local_matrix) const override {
    return detail::ceres_guarded([&] { this->kernel_.right_multiply(x, num_rows, global_matrix, local_matrix); });
  }
};

#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

}  // namespace geomopt

#endif
