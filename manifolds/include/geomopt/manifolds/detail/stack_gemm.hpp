// stack_gemm and stack_gram: dense products that never touch the heap, the building block of the allocation-free
// kernels (householder_blocked.hpp, stiefel_cayley.hpp).
//
// Contract:
//   stack_gemm(dst, lhs, lop, rhs, rop, mode):  dst = op(lhs) op(rhs), dst += ..., or dst -= ... by mode
//   stack_gram(dst, b):                                        dst = b^T b, symmetric to the last bit
// Operands and destination are column-major blocks bound by Eigen::Ref without a copy (a transposed operand enters by
// its flag: a transposed expression would not bind without a heap copy). dst must not alias an operand.
//
// Why tiles: Eigen's GEMM packs its operand panels into a buffer it puts on the stack when the panel fits
// EIGEN_STACK_ALLOCATION_LIMIT (128 KiB unless the user sets it) and on the heap otherwise. Tiling every product into
// products of at most stack_tile() rows and columns (120 in float), and a depth that keeps each packed panel below half
// the limit, means no call allocates (Eigen built without alloca, with a smaller limit, or with OpenMP would). The
// depth loop is innermost, so a destination tile stays in cache while it accumulates; a tile of 120 floats keeps the
// packing a small fraction of the arithmetic (one load per 120 multiply-adds).
//
// Where kernel_path() is avx2, float and double products op(lhs) rhs (rhs not transposed: every product of the
// manifold kernels) go to gemm_avx2.hpp instead (compiled into libgeomopt_manifolds, src/avx2_products.cpp, so that
// <immintrin.h> stays out of the headers: it alone would double the time to include them), which needs no buffer at all
// and, at the shapes of a Stiefel step, runs 2.6 to 3.1 times as fast as Eigen in a build without -march (Eigen's
// packets are 128-bit there; docs/design.md, "Kernel paths").
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "geomopt/manifolds/any_workspace.hpp"
#include "geomopt/manifolds/kernel_path.hpp"

namespace geomopt::detail {

#if GEOMOPT_HAVE_AVX2_PATH
// gemm_avx2.hpp's nn (c += sign a b) and tn (c += sign a^T b), a m x k, b k x n, for float and double.
#define GEOMOPT_AVX2_PRODUCT(name, T)                                                                                  \
  GEOMOPT_KERNELS_EXPORT void name(T* c, Eigen::Index ldc, const T* a, Eigen::Index lda, const T* b, Eigen::Index ldb, \
                                   Eigen::Index m, Eigen::Index k, Eigen::Index n, T sign);
GEOMOPT_AVX2_PRODUCT(avx2_nn, float)
GEOMOPT_AVX2_PRODUCT(avx2_nn, double)
GEOMOPT_AVX2_PRODUCT(avx2_tn, float)
GEOMOPT_AVX2_PRODUCT(avx2_tn, double)
#undef GEOMOPT_AVX2_PRODUCT
#endif

template <class T>
using StackGemmDst = Eigen::Ref<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>, 0, Eigen::OuterStride<>>;
template <class T>
using StackGemmSrc = Eigen::Ref<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>, 0, Eigen::OuterStride<>>;

// Whether an operand of stack_gemm enters transposed.
enum class GemmOp { plain, transposed };
// What stack_gemm does with dst. A sign, not a scale factor: Eigen evaluates a scaled operand of a product with one
// row or one column (a matrix-vector product) into a heap temporary.
enum class GemmMode { assign, add, subtract };

// The side of a tile: the largest multiple of 8 whose square panel fits half the stack allocation limit.
template <class T>
constexpr Eigen::Index stack_tile() {
  Eigen::Index t = 8;
  while (static_cast<std::size_t>((t + 8) * (t + 8)) * sizeof(T) <= EIGEN_STACK_ALLOCATION_LIMIT / 2) t += 8;
  return t;
}

// The depth of a tile whose panels are at most `side` wide: as long as keeps a panel within half the limit, so that a
// tall-skinny product (V^T X with 16 columns and 4096 rows) is a few long products, not many short ones.
template <class T>
constexpr Eigen::Index depth_tile(Eigen::Index side) {
  const auto fit =
      static_cast<Eigen::Index>(EIGEN_STACK_ALLOCATION_LIMIT / 2 / sizeof(T)) / std::max<Eigen::Index>(side, 1);
  return std::max(stack_tile<T>(), fit / 8 * 8);
}

namespace stack_gemm_detail {
template <class D, class L, class R>
void product(D&& d, const L& l, const R& r, bool minus) {
  if (minus) {
    d.noalias() -= l * r;
  } else {
    d.noalias() += l * r;
  }
}
}  // namespace stack_gemm_detail

template <class T>
void stack_gemm(StackGemmDst<T> dst, StackGemmSrc<T> lhs, GemmOp lop, StackGemmSrc<T> rhs, GemmOp rop, GemmMode mode) {
  constexpr Eigen::Index t = stack_tile<T>();
  const Eigen::Index rows = dst.rows(), cols = dst.cols();
  const Eigen::Index depth = lop == GemmOp::plain ? lhs.cols() : lhs.rows();
  if (mode == GemmMode::assign) dst.setZero();
  const bool minus = mode == GemmMode::subtract;
#if GEOMOPT_HAVE_AVX2_PATH
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (rop == GemmOp::plain && kernel_path() == KernelPath::avx2) {
      const T sign = minus ? T(-1) : T(1);
      if (lop == GemmOp::plain) {
        avx2_nn(dst.data(), dst.outerStride(), lhs.data(), lhs.outerStride(), rhs.data(), rhs.outerStride(), rows,
                depth, cols, sign);
      } else {
        avx2_tn(dst.data(), dst.outerStride(), lhs.data(), lhs.outerStride(), rhs.data(), rhs.outerStride(), rows,
                depth, cols, sign);
      }
      return;
    }
  }
#endif
  for (Eigen::Index j = 0; j < cols; j += t) {
    const Eigen::Index nj = std::min(t, cols - j);
    for (Eigen::Index i = 0; i < rows; i += t) {
      const Eigen::Index mi = std::min(t, rows - i);
      auto d = dst.block(i, j, mi, nj);
      const Eigen::Index kt = depth_tile<T>(std::max(mi, nj));
      for (Eigen::Index p = 0; p < depth; p += kt) {
        const Eigen::Index kp = std::min(kt, depth - p);
        if (lop == GemmOp::transposed && rop == GemmOp::transposed) {
          stack_gemm_detail::product(d, lhs.block(p, i, kp, mi).transpose(), rhs.block(j, p, nj, kp).transpose(),
                                     minus);
        } else if (lop == GemmOp::transposed) {
          stack_gemm_detail::product(d, lhs.block(p, i, kp, mi).transpose(), rhs.block(p, j, kp, nj), minus);
        } else if (rop == GemmOp::transposed) {
          stack_gemm_detail::product(d, lhs.block(i, p, mi, kp), rhs.block(j, p, nj, kp).transpose(), minus);
        } else {
          stack_gemm_detail::product(d, lhs.block(i, p, mi, kp), rhs.block(p, j, kp, nj), minus);
        }
      }
    }
  }
}

// dst = b^T b: the columns on and above the diagonal by panels of 32 columns, each one stack_gemm, and the rest
// mirrored. The panels cover n (n + 32) / 2 of the n^2 entries, close to the half a symmetric product needs (square
// tiles of stack_tile() would compute most of the matrix for n up to a few tiles), and dst is exactly symmetric.
template <class T>
void stack_gram(StackGemmDst<T> dst, StackGemmSrc<T> b) {
  constexpr Eigen::Index panel = 32;
  const Eigen::Index n = b.cols();
  for (Eigen::Index j = 0; j < n; j += panel) {
    const Eigen::Index nj = std::min(panel, n - j);
    stack_gemm<T>(dst.block(0, j, j + nj, nj), b.leftCols(j + nj), GemmOp::transposed, b.middleCols(j, nj),
                  GemmOp::plain, GemmMode::assign);
  }
  for (Eigen::Index j = 0; j < n; ++j)
    for (Eigen::Index i = j + 1; i < n; ++i) dst(i, j) = dst(j, i);
}

}  // namespace geomopt::detail
