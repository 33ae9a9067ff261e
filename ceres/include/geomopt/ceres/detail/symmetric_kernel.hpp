// SymmetricKernel: the arithmetic of CeresManifold<SymmetricMatrix<double>>, a dense n x n block constrained to be
// symmetric. It is a linear subspace, not a manifold of the contract: Plus is addition in svec coordinates
// (orthonormal for the Frobenius inner product), so
//   plus(x, 0) = sym(x),   minus(plus(x, delta), x) = delta,   minus_jacobian(x) plus_jacobian(x) = I,
//   right_multiply(x, G) = G plus_jacobian(x),
// over raw double pointers laid out as Ceres lays them out (the block column-major, Jacobians row-major).
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <exception>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "geomopt/ceres/detail/contract_kernel.hpp"
#include "geomopt/manifolds.hpp"

namespace geomopt::detail {

using CeresRowMajor = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using CeresVector = Eigen::Matrix<double, Eigen::Dynamic, 1>;

inline constexpr double kInvSqrt2 = 0.70710678118654752440;

// Ceres sizes its blocks with int: an n x n block needs n <= floor(sqrt(INT_MAX)) = 46340. Throws
// std::invalid_argument naming the manifold and the order otherwise.
inline void require_square_block_fits(const char* who, Eigen::Index n) {
  if (n > 46340)
    throw std::invalid_argument(std::string(who) + ": an " + std::to_string(n) + "x" + std::to_string(n) +
                                " block has more entries than a Ceres parameter block can hold (" +
                                std::to_string(std::numeric_limits<int>::max()) + "); need n <= 46340");
}

// The scaled symmetric ("svec") coordinates shared by SPD and SymmetricMatrix: coordinate k = i(i+1)/2 + j (i >= j)
// is W(i, i) on the diagonal and sqrt(2) W(i, j) off it, so that delta . delta' = tr(W W').
// f(k, i, j, weight) with weight the dense entry per unit coordinate: 1 on the diagonal, 1/sqrt(2) off it.
template <class F>
void for_each_svec_coordinate(Eigen::Index n, F&& f) {
  Eigen::Index k = 0;
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j <= i; ++j) f(k++, i, j, i == j ? 1.0 : kInvSqrt2);
}

// The row-major (n^2) x n(n+1)/2 Jacobian of W -> F W F^T in svec coordinates (F = I for SymmetricMatrix): column k
// is vec(f_i f_j^T + f_j f_i^T) times its weight (halved on the diagonal, where the two terms coincide).
inline void svec_congruence_jacobian(const Mat<double>& f, double* jacobian) {
  const Eigen::Index n = f.rows();
  Eigen::Map<CeresRowMajor> J(jacobian, n * n, n * (n + 1) / 2);
  for_each_svec_coordinate(n, [&](Eigen::Index k, Eigen::Index i, Eigen::Index j, double w) {
    const double scale = i == j ? 0.5 : w;
    for (Eigen::Index c = 0; c < n; ++c)
      for (Eigen::Index r = 0; r < n; ++r) J(c * n + r, k) = scale * (f(r, i) * f(c, j) + f(r, j) * f(c, i));
  });
}

// A dense n x n block constrained to be symmetric: a linear subspace, with svec coordinates (orthonormal for the
// Frobenius inner product), so Plus is exact addition and Minus exact subtraction:
//   plus(x, delta)  = sym(x) + W(delta)      minus(y, x) = svec(sym(y - x))      minus_jacobian = plus_jacobian^T
// sym(x) rather than x keeps a block that arrived slightly asymmetric from carrying its asymmetry along.
class SymmetricKernel {
 public:
  explicit SymmetricKernel(Eigen::Index n) : n_(n) {
    if (n < 1) throw std::invalid_argument("CeresManifold<SymmetricMatrix>: need n >= 1, got n = " + std::to_string(n));
    require_square_block_fits("CeresManifold<SymmetricMatrix>", n);
  }

  Eigen::Index n() const noexcept { return n_; }
  int ambient_size() const noexcept { return static_cast<int>(n_ * n_); }
  int tangent_size() const noexcept { return static_cast<int>(n_ * (n_ + 1) / 2); }

  void plus(const double* x, const double* delta, double* out) const {
    const Eigen::Map<const Mat<double>> xm(x, n_, n_);
    const auto w = ScaledSymmetricMatrix<double>::from_storage(Eigen::Map<const CeresVector>(delta, tangent_size()));
    Eigen::Map<Mat<double>>(out, n_, n_) = 0.5 * (xm + xm.transpose()) + w.dense();
  }
  void minus(const double* y, const double* x, double* out) const {
    const Mat<double> d = Eigen::Map<const Mat<double>>(y, n_, n_) - Eigen::Map<const Mat<double>>(x, n_, n_);
    Eigen::Map<CeresVector>(out, tangent_size()) = ScaledSymmetricMatrix<double>::from_dense(d).storage();
  }
  void plus_jacobian(const double*, double* jacobian) const {
    svec_congruence_jacobian(Mat<double>::Identity(n_, n_), jacobian);
  }
  void minus_jacobian(const double*, double* jacobian) const {
    Eigen::Map<CeresRowMajor> J(jacobian, tangent_size(), ambient_size());
    J.setZero();
    for_each_svec_coordinate(n_, [&](Eigen::Index k, Eigen::Index i, Eigen::Index j, double w) {
      J(k, j * n_ + i) += i == j ? 1.0 : w;
      if (i != j) J(k, i * n_ + j) += w;
    });
  }
  void right_multiply(const double*, int rows, const double* ambient, double* tangent) const {
    Eigen::Map<CeresRowMajor> out(tangent, rows, tangent_size());
    for (int row = 0; row < rows; ++row)
      out.row(row) = ScaledSymmetricMatrix<double>::from_dense(
                         Eigen::Map<const Mat<double>>(ambient + row * ambient_size(), n_, n_))
                         .storage()
                         .transpose();
  }

 private:
  Eigen::Index n_;
};

// The constructor and kernel of CeresManifold<SymmetricMatrix<double>> (and of its LocalParameterization).
class SymmetricCeresHolder {
 public:
  using Kernel = SymmetricKernel;

  /// A symmetric n x n block.
  explicit SymmetricCeresHolder(Eigen::Index n) : kernel_(n) {}

  const Kernel& kernel() const noexcept { return kernel_; }

 protected:
  Kernel kernel_;
};

}  // namespace geomopt::detail
