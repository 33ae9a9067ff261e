// CeresManifold<M>: a geomopt manifold as a ceres::Manifold, one template for every type M satisfying
// geomopt::Manifold over double (contract.hpp), and for SymmetricMatrix (a dense n x n block constrained to be
// symmetric: a Euclidean structured block, not a manifold, with a kernel of its own).
//
// The parameter block is the dense point, column-major; the tangent vector is the d coordinates of M's section at x
// (orthonormal for M's metric). With R_x the chosen retraction (M's default unless given):
//   Plus(x, delta) = R_x(delta),   Minus(y, x) = R_x^-1(y),
//   Plus(x, 0) = x,   Minus(Plus(x, delta), x) = delta,   Plus(x, Minus(y, x)) = y   (y within reach of R_x),
//   PlusJacobian(x) = J = D Plus(x, .)(0) (to_ambient of the unit coordinate vectors),
//   MinusJacobian(x) = D Minus(., x)(x) = (J^T J)^-1 J^T,   MinusJacobian PlusJacobian = I,
// both Jacobians row-major (Ceres's layout). RightMultiplyByPlusJacobian is the lift of each row, without forming
// the Jacobian. Every failure (a point off the manifold's domain, a target out of reach, a non-finite delta)
// returns false: no exception crosses Ceres's frames. A manifold whose parameter block does not identify its point
// is refused at compile time (ceres_block_is_point: Grassmann, whose blocks are representatives of subspaces, so
// Plus(x, Minus(y, x)) = y cannot hold for every representative y).
#pragma once

#include <ceres/manifold.h>

#include <concepts>
#include <type_traits>

#include "geomopt/ceres/detail/contract_kernel.hpp"
#include "geomopt/ceres/detail/symmetric_kernel.hpp"
#include "geomopt/manifolds/contract.hpp"

namespace geomopt {

/// Whether a parameter block of M's values identifies one point of M, so that Ceres's Plus and Minus invariants can
/// hold on it; CeresManifold<M> refuses M otherwise.
template <class M>
inline constexpr bool ceres_block_is_point = true;
template <class T>
inline constexpr bool ceres_block_is_point<Grassmann<T>> = false;

namespace detail {

// The constructors and kernel of CeresManifold<M> for a contract manifold.
template <class M>
class ContractCeresHolder {
  static_assert(ceres_block_is_point<M>,
                "geomopt::CeresManifold: this manifold's parameter block is a representative, not a point (Grassmann: "
                "a subspace), and Plus(x, Minus(y, x)) = y cannot hold for every representative y (docs/ceres.md): "
                "use Stiefel<double> with a cost invariant under Y -> Y Q");

 public:
  using Kernel = ContractCeresKernel<M>;

  /// The manifold of M(a): Sphere(N), SO(n), SPD(n), ...
  explicit ContractCeresHolder(Eigen::Index a,
                               Retraction r = default_retraction<M>()) requires std::constructible_from<M, Eigen::Index>
      : ContractCeresHolder(shape_of_dims(a), r) {}
  /// The manifold of M(a, b): St(N, n), ...
  ContractCeresHolder(Eigen::Index a, Eigen::Index b, Retraction r = default_retraction<M>()) requires
      std::constructible_from<M, Eigen::Index, Eigen::Index> : ContractCeresHolder(shape_of_dims(a, b), r) {}
  /// The manifold of points of x's shape.
  explicit ContractCeresHolder(const M& x, Retraction r = default_retraction<M>())
      : ContractCeresHolder(shape_of(x), r) {}
  /// The manifold of rows x cols points.
  ContractCeresHolder(CeresShape shape, Retraction r) : kernel_(shape.rows, shape.cols, r) {}

  const Kernel& kernel() const noexcept { return kernel_; }

 protected:
  Kernel kernel_;

 private:
  static CeresShape shape_of(const M& x) { return {x.value().rows(), x.value().cols()}; }
  // M::shape(dims...) when M has it (nothing allocated: a block of 2^31 entries is sized, not built), else the shape
  // of M(dims...).
  template <class... D>
  static CeresShape shape_of_dims(D... dims) {
    if constexpr (requires { M::shape(dims...); }) {
      const auto s = M::shape(dims...);
      return {s[0], s[1]};
    } else {
      return shape_of(M(dims...));
    }
  }
};

// The holder of M: the contract's for a Manifold, the symmetric block's for SymmetricMatrix.
template <class M>
struct CeresHolderOf {
  static_assert(std::is_same_v<M, SymmetricMatrix<double>>,
                "geomopt::CeresManifold: expected a type satisfying geomopt::Manifold over double (contract.hpp) or "
                "SymmetricMatrix<double>");
  using type = SymmetricCeresHolder;
};
template <Manifold M>
struct CeresHolderOf<M> {
  static_assert(std::is_same_v<typename M::Scalar, double>,
                "geomopt::CeresManifold: Ceres works in double; use the manifold over double, e.g. Stiefel<double>");
  using type = ContractCeresHolder<M>;
};
template <class M>
using CeresHolder = typename CeresHolderOf<M>::type;

}  // namespace detail

template <class M>
class CeresManifold final : public ceres::Manifold, public detail::CeresHolder<M> {
  using Holder = detail::CeresHolder<M>;

 public:
  // A contract manifold M: CeresManifold<M>(dims..., r = default_retraction<M>()) for M(dims...), or (x, r) for the
  // points of x's shape. SymmetricMatrix: CeresManifold<SymmetricMatrix<double>>(n).
  using Holder::Holder;

  int AmbientSize() const override { return this->kernel_.ambient_size(); }
  int TangentSize() const override { return this->kernel_.tangent_size(); }

  bool Plus(const double* x, const double* delta, double* x_plus_delta) const override {
    return detail::ceres_guarded([&] { this->kernel_.plus(x, delta, x_plus_delta); });
  }
  bool PlusJacobian(const double* x, double* jacobian) const override {
    return detail::ceres_guarded([&] { this->kernel_.plus_jacobian(x, jacobian); });
  }
  bool RightMultiplyByPlusJacobian(const double* x, const int num_rows, const double* ambient_matrix,
                                   double* tangent_matrix) const override {
    return detail::ceres_guarded([&] { this->kernel_.right_multiply(x, num_rows, ambient_matrix, tangent_matrix); });
  }
  bool Minus(const double* y, const double* x, double* y_minus_x) const override {
    return detail::ceres_guarded([&] { this->kernel_.minus(y, x, y_minus_x); });
  }
  bool MinusJacobian(const double* x, double* jacobian) const override {
    return detail::ceres_guarded([&] { this->kernel_.minus_jacobian(x, jacobian); });
  }
};

}  // namespace geomopt
