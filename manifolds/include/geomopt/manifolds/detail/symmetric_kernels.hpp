// Allocation-free kernels for symmetric matrices, on buffers made once: the cyclic Jacobi eigendecomposition
// M = V diag(d) V^T and the functions V diag(f(d)) V^T it gives (exponential, square root, any f), and the Cholesky
// factorization X = L L^T.
//
// Contract: SymmetricEigen<T>(n) allocates its buffers; compute and function allocate nothing for float and double
// (function's one product goes through Eigen's GEMM, which packs its panels on the stack for n up to about 120 in
// double, 170 in float, EIGEN_STACK_ALLOCATION_LIMIT = 128 KiB). cholesky_lower allocates nothing.
//
// Invariants: V is orthogonal to rounding and V diag(d) V^T = M to rounding of |M| (Jacobi's rotations, in
// Rutishauser's form: each rotated pair is zeroed exactly, the diagonal collects its moves apart as in Numerical
// Recipes' jacobi), so d is as accurate as SelfAdjointEigenSolver's eigenvalues, which allocate when they form the
// vectors. f applied to d gives f(M) whose eigenvalues are exactly f(d_i) to rounding: exp of any finite symmetric
// matrix is symmetric positive definite, or has non-finite entries when an eigenvalue overflows, never NaN from a
// cancellation (scaling and squaring of a symmetric matrix of norm 1e4 computes inf - inf).
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <cstddef>
#include <type_traits>

#include "geomopt/manifolds/detail/dense_kernels.hpp"

namespace geomopt::detail {

/// The Jacobi eigendecomposition of a symmetric n x n matrix, on buffers made once.
template <class T>
class SymmetricEigen {
 public:
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;

  explicit SymmetricEigen(Eigen::Index n) : a_(n, n), v_(n, n), tmp_(n, n), d_(n), start_(n), moved_(n) {}

  std::size_t bytes() const noexcept { return static_cast<std::size_t>(3 * a_.size() + 3 * d_.size()) * sizeof(T); }

  /// The eigenvalues of the last compute, in no particular order.
  const Vector& values() const noexcept { return d_; }
  /// The eigenvectors of the last compute, as columns in the order of values().
  const Matrix& vectors() const noexcept { return v_; }

  /// Decomposes m (read from its upper triangle; m may alias nothing of this object).
  template <class Derived>
  void compute(const Eigen::MatrixBase<Derived>& m) {
    using std::abs;
    using std::sqrt;
    const Eigen::Index n = a_.rows();
    a_ = m;
    v_.setIdentity();
    d_ = a_.diagonal();
    start_ = d_;
    moved_.setZero();
    T s(0), tau(0);
    // Rotates the pair (g, h) of entries by the current rotation.
    auto rotate = [&](T& g, T& h) {
      const T g0 = g, h0 = h;
      g = g0 - s * (h0 + g0 * tau);
      h = h0 + s * (g0 - h0 * tau);
    };
    for (int sweep = 0; sweep < 50; ++sweep) {
      T off(0);
      for (Eigen::Index q = 1; q < n; ++q) off += a_.col(q).head(q).cwiseAbs().sum();
      if (!(off > T(0))) break;
      // Early sweeps skip small entries; later ones zero those below rounding of both diagonal entries.
      const T threshold = sweep < 3 ? T(T(0.2) * off / T(double(n * n))) : T(0);
      for (Eigen::Index p = 0; p + 1 < n; ++p) {
        for (Eigen::Index q = p + 1; q < n; ++q) {
          const T apq = a_(p, q), g = T(100) * abs(apq);
          if (sweep > 3 && abs(d_[p]) + g == abs(d_[p]) && abs(d_[q]) + g == abs(d_[q])) {
            a_(p, q) = T(0);
            continue;
          }
          if (!(abs(apq) > threshold)) continue;
          const T h = d_[q] - d_[p];
          T t;
          if (abs(h) + g == abs(h)) {
            t = apq / h;
          } else {
            const T theta = T(0.5) * h / apq;
            t = T(1) / (abs(theta) + sqrt(T(1) + theta * theta));
            if (theta < T(0)) t = -t;
          }
          const T c = T(1) / sqrt(T(1) + t * t);
          s = t * c;
          tau = s / (T(1) + c);
          const T shift = t * apq;
          moved_[p] -= shift;
          moved_[q] += shift;
          d_[p] -= shift;
          d_[q] += shift;
          a_(p, q) = T(0);
          for (Eigen::Index j = 0; j < p; ++j) rotate(a_(j, p), a_(j, q));
          for (Eigen::Index j = p + 1; j < q; ++j) rotate(a_(p, j), a_(j, q));
          for (Eigen::Index j = q + 1; j < n; ++j) rotate(a_(p, j), a_(q, j));
          for (Eigen::Index j = 0; j < n; ++j) rotate(v_(j, p), v_(j, q));
        }
      }
      start_ += moved_;
      d_ = start_;
      moved_.setZero();
    }
  }

  /// out <- V diag(f(d)) V^T for the last compute (out must not be vectors()).
  template <class F, class Out>
  void function(F&& f, Out&& out) {
    const Eigen::Index n = a_.rows();
    for (Eigen::Index j = 0; j < n; ++j) tmp_.col(j) = v_.col(j) * T(f(d_[j]));
    dense_product<T>(out, tmp_, ProductOp::plain, v_, ProductOp::transposed, T(1), false);
  }

 private:
  Matrix a_, v_, tmp_;        // a_: the upper triangle is rotated, the lower one keeps m
  Vector d_, start_, moved_;  // the diagonal, as at the sweep's start, and its moves in the sweep
};

/// f <- the lower Cholesky factor L of x (X = L L^T, read from the lower triangle; f's upper triangle set to zero);
/// false, with f unspecified, when x is not positive definite (a pivot not above zero, or NaN).
template <class X, class F>
bool cholesky_lower(const X& x, F&& f) {
  using T = typename std::decay_t<F>::Scalar;
  using std::sqrt;
  const Eigen::Index n = x.rows();
  f.setZero();
  for (Eigen::Index j = 0; j < n; ++j) {
    const T d = x(j, j) - f.row(j).head(j).squaredNorm();
    if (!(d > T(0))) return false;
    const T pivot = sqrt(d);
    f(j, j) = pivot;
    for (Eigen::Index i = j + 1; i < n; ++i) f(i, j) = (x(i, j) - f.row(i).head(j).dot(f.row(j).head(j))) / pivot;
  }
  return true;
}

}  // namespace geomopt::detail
