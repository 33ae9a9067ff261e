// BlockedHouseholder: the recomputed global section of a Stiefel point (global_section.hpp), factored and applied in
// blocks (compact WY, LAPACK's geqrt/larft/larfb), allocation-free.
//
// For an N x n matrix y (n <= N), factor(y) computes the Householder QR y = Q R with the section's reflectors
// (detail::section_reflector: each column mapped onto +|x| e_k), Q = H_0 H_1 ... H_{n-1}, H_k = I - tau_k v_k v_k^T,
// v_k = [0; 1; essential]. The reflectors are the section's to rounding, so Q is GlobalSection(y).dense() and the
// coordinates built on it mean the same thing; only the order of the trailing updates differs.
//
// Columns are taken in blocks of kBlock: within a block the reflectors are made one at a time (the panel), then
// gathered as H_j ... H_{j+b-1} = I - V T V^T (V the block's unit lower trapezoidal reflectors, T b x b upper
// triangular), and every other use of them (the trailing columns of the factorization, apply, apply_transpose) is
// three products by stack_gemm: W = V^T X, W <- T W (or T^T W), X -= V W. So nearly all the O(N n m) work runs at
// matrix-product speed instead of one reflector and one column at a time.
//
// Invariants:
//   - apply(x) = Q x and apply_transpose(x) = Q^T x for N x m x, m <= max_cols (the constructor's), in place;
//     Q is orthogonal to rounding whatever y is (non-finite entries of y give non-finite entries, never a throw);
//   - the constructor allocates every buffer (V: N x n, T: kBlock x n, two kBlock x max_cols products); factor,
//     apply and apply_transpose allocate nothing;
//   - R is not kept: the section needs Q only.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cstddef>

#include "geomopt/manifolds/detail/stack_gemm.hpp"
#include "geomopt/manifolds/global_section.hpp"

namespace geomopt::detail {

template <class T>
class BlockedHouseholder {
 public:
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  static constexpr Eigen::Index kBlock = 32;

  BlockedHouseholder() = default;
  /// Buffers for N x n points, applied to N x m matrices with m <= max_cols.
  BlockedHouseholder(Eigen::Index rows, Eigen::Index cols, Eigen::Index max_cols)
      : v_(rows, cols),
        tau_(cols),
        t_(Matrix::Zero(std::min(kBlock, cols), cols)),
        w_(std::min(kBlock, cols), std::max(max_cols, kBlock)),
        w2_(std::min(kBlock, cols), max_cols),
        row_(kBlock) {}

  Eigen::Index rows() const noexcept { return v_.rows(); }
  Eigen::Index cols() const noexcept { return v_.cols(); }
  std::size_t bytes() const noexcept {
    return static_cast<std::size_t>(v_.size() + tau_.size() + t_.size() + w_.size() + w2_.size() + row_.size()) *
           sizeof(T);
  }

  /// The reflectors, one per column: unit diagonal, zeros above it, the essential parts below (N x n).
  const Matrix& reflectors() const noexcept { return v_; }
  /// Their coefficients tau_k.
  const Vector& tau() const noexcept { return tau_; }

  /// Factors y (N x n, the shape of the constructor).
  void factor(StackGemmSrc<T> y) {
    const Eigen::Index N = v_.rows(), n = v_.cols();
    v_ = y;
    for (Eigen::Index j0 = 0; j0 < n; j0 += kBlock) {
      const Eigen::Index jb = std::min(kBlock, n - j0), j1 = j0 + jb;
      for (Eigen::Index i = j0; i < j1; ++i) {
        auto column = v_.col(i).tail(N - i);
        tau_[i] = section_reflector(column);
        reflect(v_.block(i, i + 1, N - i, j1 - i - 1), i);
      }
      // The block's V explicit (R's entries in it are not needed), then its T (LAPACK's larft, forward):
      // T(0:i, i) = -tau_i T(0:i, 0:i) V(:, 0:i)^T v_i, T(i, i) = tau_i, with V^T V as one product.
      for (Eigen::Index i = j0; i < j1; ++i) {
        v_(i, i) = T(1);
        v_.col(i).segment(j0, i - j0).setZero();
      }
      auto gram = w_.topLeftCorner(jb, jb);
      const auto v = v_.block(j0, j0, N - j0, jb);
      stack_gemm<T>(gram, v, GemmOp::transposed, v, GemmOp::plain, GemmMode::assign);
      for (Eigen::Index i = 0; i < jb; ++i) {
        const Eigen::Index c = j0 + i;
        for (Eigen::Index r = 0; r < i; ++r) t_(r, c) = -tau_[c] * gram(r, i);
        for (Eigen::Index r = 0; r < i; ++r)  // T(0:i, 0:i) times that column, in place (rows ascending)
          t_(r, c) = t_.row(r).segment(j0 + r, i - r).dot(t_.col(c).segment(r, i - r));
        t_(i, c) = tau_[c];
      }
      if (j1 < n) apply_block(j0, jb, v_.block(0, j1, N, n - j1), true);
    }
  }

  /// x <- Q x, for x N x m.
  void apply(StackGemmDst<T> x) {
    const Eigen::Index n = v_.cols();
    if (n == 0) return;
    for (Eigen::Index j0 = (n - 1) / kBlock * kBlock; j0 >= 0; j0 -= kBlock)
      apply_block(j0, std::min(kBlock, n - j0), x, false);
  }

  /// x <- Q^T x, for x N x m.
  void apply_transpose(StackGemmDst<T> x) {
    const Eigen::Index n = v_.cols();
    for (Eigen::Index j0 = 0; j0 < n; j0 += kBlock) apply_block(j0, std::min(kBlock, n - j0), x, true);
  }

 private:
  // x <- H_i x for the rows i.. of the columns x (unblocked: within the panel only), as a matrix-vector product
  // w = tau x^T v and a rank-one update x -= v w^T, which read x twice for all its columns together.
  template <class X>
  void reflect(X&& x, Eigen::Index i) {
    const T tau = tau_[i];
    const Eigen::Index m = x.rows() - 1, cols = x.cols();
    if (tau == T(0) || cols == 0) return;
    auto w = row_.head(cols);
    if (m > 0) {
      const auto essential = v_.col(i).tail(m);
      w.noalias() = x.bottomRows(m).transpose() * essential;
      w += x.row(0).transpose();
      w *= tau;
      x.bottomRows(m).noalias() -= essential * w.transpose();
    } else {
      w = tau * x.row(0).transpose();
    }
    x.row(0) -= w.transpose();
  }

  // x <- (I - V T V^T) x (transpose: (I - V T^T V^T) x) for the block of columns j0 .. j0 + jb of V.
  void apply_block(Eigen::Index j0, Eigen::Index jb, StackGemmDst<T> x, bool transpose) {
    const Eigen::Index N = v_.rows(), m = x.cols();
    if (m == 0) return;
    const auto v = v_.block(j0, j0, N - j0, jb);
    auto xb = x.bottomRows(N - j0);
    auto w = w_.topLeftCorner(jb, m);
    auto w2 = w2_.topLeftCorner(jb, m);
    stack_gemm<T>(w, v, GemmOp::transposed, xb, GemmOp::plain, GemmMode::assign);
    stack_gemm<T>(w2, t_.block(0, j0, jb, jb), transpose ? GemmOp::transposed : GemmOp::plain, w, GemmOp::plain,
                  GemmMode::assign);
    stack_gemm<T>(xb, v, GemmOp::plain, w2, GemmOp::plain, GemmMode::subtract);
  }

  Matrix v_;
  Vector tau_;
  Matrix t_;
  Matrix w_, w2_;  // V^T x and T V^T x (w_ also holds a block's V^T V)
  Vector row_;     // a reflector's w = tau x^T v in the panel
};

}  // namespace geomopt::detail
