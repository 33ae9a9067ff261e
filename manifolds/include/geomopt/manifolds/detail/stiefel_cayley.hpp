// StiefelCayleySchur: the Cayley retraction of a Stiefel step in section coordinates, by the n x n Schur complement of
// the 2n x 2n core, allocation-free.
//
// A step with section coordinates (A, B), A n x n skew and B (N - n) x n, is the N x N skew W = [A, -B^T; B, 0]; the
// Cayley retraction moves the point to lambda [u; v], the first block column of (I - W/2)^-1 (I + W/2). Solving
// (I - W/2) [u; v] = [I + A/2; B/2] by eliminating v = B (I + u) / 2 leaves the n x n system
//     M u = 2I - M,   M = I - A/2 + R/4,   R = B^T B,
// so  u = 2 M^-1 - I  and  v = B M^-1, computed as u = I + 2D, v = B + B D from the small D = M^-1 - I = -M^-1 K,
// K = M - I.
// This is the point detail::stiefel_step computes through the QR of B = Q_B [r; 0] and the 2n x 2n core
// S = [A, -r^T; r, 0] (the Cayley transform acts as the identity off the span of [I; 0] and [0; Q_B]), without that QR
// and without the 2n x 2n solve: O(N n^2) in products and 8/3 n^3 in the LU and the solve.
//
// Invariants and contract:
//   - [u; v] has orthonormal columns to rounding: with X = I + D = M^-1 and the residual E = M X - I,
//     [u; v]^T [u; v] - I = 2 (X^T E + E^T X), and |X|_2 <= 1 because the symmetric part of M is I + R/4 >= I;
//     so the defect is at most 4 |E|, and E = K + M D is the residual of the solve M D = -K, of the order of
//     eps |M| |D| by an LU with partial pivoting: eps (1 + |S|) |S| at most, and small for a small step;
//   - the spectral rule of detail::core_function is kept: the core's 1-norm is bounded from A and the column norms
//     of B (|r_j|_1 <= sqrt(j + 1) |B_j|_2, and a row of r has 2-norm at most |B|_2 <= |R|_1^(1/2)); local_point
//     returns false, computing nothing, unless that bound proves |S|_1 <= kSpectralNorm. The caller then takes the
//     dense path, which decides the rule exactly (and handles non-finite coordinates, which fail the bound);
//   - the constructor allocates every buffer; local_point allocates nothing (products by stack_gemm).
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "geomopt/manifolds/detail/matrix_functions.hpp"
#include "geomopt/manifolds/detail/stack_gemm.hpp"

namespace geomopt::detail {

// In-place LU with partial pivoting, P M = L U (L unit lower, U upper, both in m), then a solve, blocked so
// that nearly all the work is stack_gemm. For the n x n matrices of StiefelCayleySchur; the pivot rows are swapped
// across the whole row at once (LAPACK's getrf order), and a zero pivot is left unscaled (its inverse is then not
// finite, as a singular matrix's must be).
template <class T>
class BlockedLuSolve {
 public:
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  static constexpr Eigen::Index kPanel = 32;

  explicit BlockedLuSolve(Eigen::Index n) : pivots_(n) {}

  std::size_t bytes() const noexcept { return static_cast<std::size_t>(pivots_.size()) * sizeof(Eigen::Index); }

  // x <- m^-1 x for n x n m and n x c x (distinct), m overwritten by its factors.
  void solve(StackGemmDst<T> m, StackGemmDst<T> x) {
    factor(m);
    const Eigen::Index n = m.rows(), cols = x.cols();
    for (Eigen::Index j = 0; j < n; ++j)
      if (pivots_[j] != j) x.row(j).swap(x.row(pivots_[j]));
    // x <- L^-1 x by row blocks, then x <- U^-1 x from the last block up.
    for (Eigen::Index b = 0; b < n; b += kPanel) {
      const Eigen::Index nb = std::min(kPanel, n - b);
      if (b > 0)
        stack_gemm<T>(x.middleRows(b, nb), m.block(b, 0, nb, b), GemmOp::plain, x.topRows(b), GemmOp::plain,
                      GemmMode::subtract);
      for (Eigen::Index c = 0; c < cols; ++c)
        for (Eigen::Index k = b; k + 1 < b + nb; ++k)
          x.col(c).segment(k + 1, b + nb - k - 1) -= x(k, c) * m.col(k).segment(k + 1, b + nb - k - 1);
    }
    const Eigen::Index last = (n - 1) / kPanel * kPanel;
    for (Eigen::Index b = last; b >= 0 && n > 0; b -= kPanel) {
      const Eigen::Index nb = std::min(kPanel, n - b), after = n - b - nb;
      if (after > 0)
        stack_gemm<T>(x.middleRows(b, nb), m.block(b, b + nb, nb, after), GemmOp::plain, x.bottomRows(after),
                      GemmOp::plain, GemmMode::subtract);
      for (Eigen::Index c = 0; c < cols; ++c) {
        for (Eigen::Index k = b + nb - 1; k >= b; --k) {
          x(k, c) /= m(k, k);
          if (k > b) x.col(c).segment(b, k - b) -= x(k, c) * m.col(k).segment(b, k - b);
        }
      }
    }
  }

 private:
  void factor(StackGemmDst<T> m) {
    const Eigen::Index n = m.rows();
    for (Eigen::Index j0 = 0; j0 < n; j0 += kPanel) {
      const Eigen::Index j1 = std::min(n, j0 + kPanel);
      for (Eigen::Index j = j0; j < j1; ++j) {  // the panel, unblocked
        Eigen::Index p;
        m.col(j).tail(n - j).cwiseAbs().maxCoeff(&p);
        p += j;
        pivots_[j] = p;
        if (p != j) m.row(j).swap(m.row(p));
        const T pivot = m(j, j);
        if (pivot != T(0)) m.col(j).tail(n - j - 1) /= pivot;
        for (Eigen::Index c = j + 1; c < j1; ++c) m.col(c).tail(n - j - 1) -= m(j, c) * m.col(j).tail(n - j - 1);
      }
      if (j1 == n) break;
      // U12 <- L11^-1 A12, then A22 -= L21 U12.
      for (Eigen::Index c = j1; c < n; ++c)
        for (Eigen::Index k = j0; k + 1 < j1; ++k)
          m.col(c).segment(k + 1, j1 - k - 1) -= m(k, c) * m.col(k).segment(k + 1, j1 - k - 1);
      stack_gemm<T>(m.bottomRightCorner(n - j1, n - j1), m.block(j1, j0, n - j1, j1 - j0), GemmOp::plain,
                    m.block(j0, j1, j1 - j0, n - j1), GemmOp::plain, GemmMode::subtract);
    }
  }

  Eigen::Matrix<Eigen::Index, Eigen::Dynamic, 1> pivots_;
};

template <class T>
class StiefelCayleySchur {
 public:
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;

  /// Buffers for the steps of St(n + rest, n).
  StiefelCayleySchur(Eigen::Index n, Eigen::Index rest) : rest_(rest), m_(n, n), x_(n, n), lu_(n) {}

  std::size_t bytes() const noexcept { return 2 * static_cast<std::size_t>(m_.size()) * sizeof(T) + lu_.bytes(); }

  /// local <- [u; v] (N x n) for the skew a (n x n) and b (rest x n); false, with local untouched, when the bound
  /// above cannot prove that the core's 1-norm is at most kSpectralNorm (or an entry is not finite).
  bool local_point(StackGemmSrc<T> a, StackGemmSrc<T> b, StackGemmDst<T> local) {
    const Eigen::Index n = m_.rows();
    if (n == 0) return true;
    if (rest_ > 0) {
      stack_gram<T>(m_, b);
    } else {
      m_.setZero();
    }
    // The bound on |S|_1, in double like detail::norm1_value. A NaN would slip through the maxima below, so
    // non-finite entries are refused first (R is finite exactly when B is and B^T B does not overflow).
    if (!a.allFinite() || !m_.allFinite()) return false;
    double r_norm1 = 0;  // |R|_1 >= |B|_2^2
    for (Eigen::Index j = 0; j < n; ++j) {
      double sum = 0;
      for (Eigen::Index i = 0; i < n; ++i) sum += std::abs(static_cast<double>(m_(i, j)));
      r_norm1 = std::max(r_norm1, sum);
    }
    const Eigen::Index k = std::min(n, rest_);
    double bound = k > 0 ? std::sqrt(static_cast<double>(n) * r_norm1) : 0.0;  // the columns [-r^T; 0]
    for (Eigen::Index j = 0; j < n; ++j) {
      double sum = 0;
      for (Eigen::Index i = 0; i < n; ++i) sum += std::abs(static_cast<double>(a(i, j)));
      const double rows = static_cast<double>(std::min(j + 1, k));
      bound = std::max(bound, sum + std::sqrt(rows * std::abs(static_cast<double>(m_(j, j)))));
    }
    if (!(bound <= kSpectralNorm)) return false;

    // K = R/4 - A/2, M = I + K and D = M^-1 - I = -M^-1 K, so that u = I + 2D and v = B + B D. Solving for the
    // small D rather than for M^-1 keeps its rounding relative to |D|, not to the identity's entries: the point of a
    // small step is as orthonormal as the section's reflectors make it.
    m_ *= T(0.25);
    m_ -= T(0.5) * a;
    x_ = -m_;
    m_.diagonal().array() += T(1);
    lu_.solve(m_, x_);
    local.topRows(n) = T(2) * x_;
    local.topRows(n).diagonal().array() += T(1);
    if (rest_ > 0) {
      local.bottomRows(rest_) = b;
      stack_gemm<T>(local.bottomRows(rest_), b, GemmOp::plain, x_, GemmOp::plain, GemmMode::add);
    }
    return true;
  }

 private:
  Eigen::Index rest_;
  Matrix m_, x_;
  BlockedLuSolve<T> lu_;
};

}  // namespace geomopt::detail
