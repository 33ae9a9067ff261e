// The AVX2 + FMA products behind stack_gemm (stack_gemm.hpp), taken when kernel_path() is avx2, for float and double:
//   nn(c, a, b):  c += sign a b      a m x k, b k x n
//   tn(c, a, b):  c += sign a^T b    a k x m, b k x n
// every matrix column-major with its own leading dimension, c aliasing neither operand (an empty product leaves c
// as it is). These are the two shapes of the manifold kernels (a block of Householder reflectors applied as V^T X then
// X - V W, a Gram matrix B^T B, the blocked LU), so the remaining combinations stay with Eigen.
//
// Why no packing: every operand is read in place, so the products need no buffer at all (the stack_gemm contract
// forbids the heap, and a packed panel would take stack space from the caller's threads). nn keeps a column strip of
// a (two registers of rows, at most kDepth deep) in L1 while it sweeps the columns of b, six at a time, a 12-register
// accumulator tile fed by broadcasts; tn reads a and b along their contiguous depth, a 3 x 4 tile of dot products
// whose lanes are summed once per depth block. Either is bound by the multiply-adds, not the loads (8 loads for 12
// multiply-adds in nn, 7 for 12 in tn).
//
// Results are deterministic and independent of the threads: the summation order depends on the shapes only. They
// differ from the portable path's by rounding (fused multiply-adds, another order).
#pragma once

#include "geomopt/manifolds/detail/avx2_vec.hpp"

#if GEOMOPT_HAVE_AVX2_PATH
#include <algorithm>
#include <utility>

namespace geomopt::detail::avx2 {

// Depth of one block of the products: a strip of a that stays in L1 (nn), lanes summed once per block (tn).
inline constexpr Eigen::Index kDepth = 256;

GEOMOPT_AVX2_INLINE float lane_sum(__m256 x) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

GEOMOPT_AVX2_INLINE double lane_sum(__m256d x) {
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(x), _mm256_extractf128_pd(x, 1));
  s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
  return _mm_cvtsd_f64(s);
}

// tile(x, y, std::integral_constant<int, r>{}) for the runtime r in 1..sizeof...(R), R being 0, 1, ...: each r its
// compile-time constant (nothing for r = 0).
template <class Tile, class X, class Y, int... R>
GEOMOPT_AVX2_INLINE void remainder_tile(Eigen::Index r, const Tile& tile, X* x, Y* y,
                                        std::integer_sequence<int, R...>) {
  (void)((r == R + 1 && (tile(x, y, std::integral_constant<int, R + 1>{}), true)) || ...);
}

// The tiles of an output dimension of n, each by a call tile(x + i dx, y + i dy, std::integral_constant<int, size>{})
// at its first index i (x and y the two operands the dimension runs along, dx and dy their strides along it): the full
// tiles of W, then the remainder (1 to W - 1, if any). Every tile's size is a compile-time constant, so that its
// accumulators live in registers; tile is a lambda with the attributes GEOMOPT_AVX2_LAMBDA. The tile takes its
// operands' pointers rather than i so that the remainder's are computed once, before the dispatch on its size.
template <int W, class Tile, class X, class Y>
GEOMOPT_AVX2_INLINE void for_tiles(Eigen::Index n, const Tile& tile, X* x, Eigen::Index dx, Y* y, Eigen::Index dy) {
  Eigen::Index i = 0;
  for (; i + W <= n; i += W) tile(x + i * dx, y + i * dy, std::integral_constant<int, W>{});
  remainder_tile(n - i, tile, x + i * dx, y + i * dy, std::make_integer_sequence<int, W - 1>{});
}

// A register of rows at p: all of its lanes, or (kMasked) the lanes m selects, the others read as zeros.
template <bool kMasked, class T>
GEOMOPT_AVX2_INLINE typename Vec<T>::R load_rows(const T* p, __m256i m) {
  if constexpr (kMasked) {
    return Vec<T>::load(p, m);
  } else {
    return Vec<T>::load(p);
  }
}

// p += s acc on a register of rows: all of its lanes, or (kMasked) the lanes m selects, the others left untouched.
template <bool kMasked, class T>
GEOMOPT_AVX2_INLINE void add_rows(T* p, __m256i m, typename Vec<T>::R acc, typename Vec<T>::R s) {
  const typename Vec<T>::R sum = Vec<T>::fmadd(acc, s, load_rows<kMasked>(p, m));
  if constexpr (kMasked) {
    Vec<T>::store(p, m, sum);
  } else {
    Vec<T>::store(p, sum);
  }
}

// c(0:rows, 0:NR) += sign a(0:rows, 0:k) b(0:k, 0:NR), rows <= 2 lanes; kMasked when rows < 2 lanes (m0, m1 select
// the rows of the two registers; masked lanes read zeros and are not stored).
template <class T, int NR, bool kMasked, std::size_t... C>
GEOMOPT_AVX2_INLINE void nn_tile(const T* a, Eigen::Index lda, const T* b, Eigen::Index ldb, T* c, Eigen::Index ldc,
                                 Eigen::Index k, T sign, __m256i m0, __m256i m1, std::index_sequence<C...>) {
  using V = Vec<T>;
  using R = typename V::R;
  constexpr Eigen::Index L = V::kLanes;
  R acc0[NR], acc1[NR];
  ((acc0[C] = V::set1(T(0)), acc1[C] = V::set1(T(0))), ...);
  for (Eigen::Index p = 0; p < k; ++p) {
    const T* ap = a + p * lda;
    const R a0 = load_rows<kMasked>(ap, m0);
    const R a1 = load_rows<kMasked>(ap + L, m1);
    const T* bp = b + p;
    ((acc0[C] = V::fmadd(a0, V::set1(bp[static_cast<Eigen::Index>(C) * ldb]), acc0[C]),
      acc1[C] = V::fmadd(a1, V::set1(bp[static_cast<Eigen::Index>(C) * ldb]), acc1[C])),
     ...);
  }
  const R s = V::set1(sign);
  ((add_rows<kMasked>(c + static_cast<Eigen::Index>(C) * ldc, m0, acc0[C], s),
    add_rows<kMasked>(c + static_cast<Eigen::Index>(C) * ldc + L, m1, acc1[C], s)),
   ...);
}

// One strip of rows (at most two registers) against all n columns of b, six at a time.
template <class T, bool kMasked>
GEOMOPT_AVX2_INLINE void nn_strip(const T* a, Eigen::Index lda, const T* b, Eigen::Index ldb, T* c, Eigen::Index ldc,
                                  Eigen::Index k, Eigen::Index n, T sign, __m256i m0, __m256i m1) {
  const auto tile = [&](const T* bj, T* cj, auto nr) GEOMOPT_AVX2_LAMBDA {
    nn_tile<T, nr, kMasked>(a, lda, bj, ldb, cj, ldc, k, sign, m0, m1, std::make_index_sequence<nr>{});
  };
  for_tiles<6>(n, tile, b, ldb, c, ldc);
}

template <class T>
GEOMOPT_AVX2 void nn(T* c, Eigen::Index ldc, const T* a, Eigen::Index lda, const T* b, Eigen::Index ldb, Eigen::Index m,
                     Eigen::Index k, Eigen::Index n, T sign) {
  using V = Vec<T>;
  constexpr Eigen::Index L = V::kLanes;
  if (m == 0 || k == 0 || n == 0) return;  // an empty operand's data may be null: no offset from it
  const __m256i all = V::mask(L);
  for (Eigen::Index p = 0; p < k; p += kDepth) {
    const Eigen::Index kp = std::min(kDepth, k - p);
    Eigen::Index i = 0;
    for (; i + 2 * L <= m; i += 2 * L)
      nn_strip<T, false>(a + i + p * lda, lda, b + p, ldb, c + i, ldc, kp, n, sign, all, all);
    if (i < m)
      nn_strip<T, true>(a + i + p * lda, lda, b + p, ldb, c + i, ldc, kp, n, sign, V::mask(m - i), V::mask(m - i - L));
  }
}

// One register of depth (or its masked tail) into the tile of dot products acc[r][s] += a_r . b_s. Every index is a
// constant (index sequences, not loops), so that the tile lives in registers.
template <class T, std::size_t S, int NR, std::size_t... Rs, class... Mask>
GEOMOPT_AVX2_INLINE void tn_column(typename Vec<T>::R (&acc)[sizeof...(Rs)][NR], const typename Vec<T>::R* ar,
                                   const T* bs, std::index_sequence<Rs...>, Mask... mask) {
  const typename Vec<T>::R bv = Vec<T>::load(bs, mask...);
  ((acc[Rs][S] = Vec<T>::fmadd(ar[Rs], bv, acc[Rs][S])), ...);
}

template <class T, int NR, std::size_t... Rs, std::size_t... Ss, class... Mask>
GEOMOPT_AVX2_INLINE void tn_step(typename Vec<T>::R (&acc)[sizeof...(Rs)][NR], const T* a, Eigen::Index lda, const T* b,
                                 Eigen::Index ldb, std::index_sequence<Rs...> rs, std::index_sequence<Ss...>,
                                 Mask... mask) {
  const typename Vec<T>::R ar[] = {Vec<T>::load(a + static_cast<Eigen::Index>(Rs) * lda, mask...)...};
  (tn_column<T, Ss, NR>(acc, ar, b + static_cast<Eigen::Index>(Ss) * ldb, rs, mask...), ...);
}

// c(0:MR, 0:NR) += sign a(0:k, 0:MR)^T b(0:k, 0:NR): MR x NR dot products along the contiguous depth, the last
// partial register by masked loads (zeros).
template <class T, int MR, int NR>
GEOMOPT_AVX2_INLINE void tn_tile(const T* a, Eigen::Index lda, const T* b, Eigen::Index ldb, T* c, Eigen::Index ldc,
                                 Eigen::Index k, T sign) {
  using V = Vec<T>;
  constexpr Eigen::Index L = V::kLanes;
  constexpr auto rs = std::make_index_sequence<MR>{};
  constexpr auto ss = std::make_index_sequence<NR>{};
  typename V::R acc[MR][NR];
  for (auto& row : acc)
    for (auto& x : row) x = V::set1(T(0));
  Eigen::Index p = 0;
  for (; p + L <= k; p += L) tn_step<T, NR>(acc, a + p, lda, b + p, ldb, rs, ss);
  if (p < k) tn_step<T, NR>(acc, a + p, lda, b + p, ldb, rs, ss, V::mask(k - p));
  for (int s = 0; s < NR; ++s)
    for (int r = 0; r < MR; ++r) c[r + s * ldc] += sign * lane_sum(acc[r][s]);
}

template <class T, int MR>
GEOMOPT_AVX2_INLINE void tn_row(const T* a, Eigen::Index lda, const T* b, Eigen::Index ldb, T* c, Eigen::Index ldc,
                                Eigen::Index k, Eigen::Index n, T sign) {
  const auto tile = [&](const T* bj, T* cj, auto nr)
                        GEOMOPT_AVX2_LAMBDA { tn_tile<T, MR, nr>(a, lda, bj, ldb, cj, ldc, k, sign); };
  for_tiles<4>(n, tile, b, ldb, c, ldc);
}

template <class T>
GEOMOPT_AVX2 void tn(T* c, Eigen::Index ldc, const T* a, Eigen::Index lda, const T* b, Eigen::Index ldb, Eigen::Index m,
                     Eigen::Index k, Eigen::Index n, T sign) {
  if (m == 0 || k == 0 || n == 0) return;  // as in nn
  for (Eigen::Index p = 0; p < k; p += kDepth) {
    const Eigen::Index kp = std::min(kDepth, k - p);
    const auto row = [&](const T* ai, T* ci, auto mr)
                         GEOMOPT_AVX2_LAMBDA { tn_row<T, mr>(ai, lda, b + p, ldb, ci, ldc, kp, n, sign); };
    for_tiles<3>(m, row, a + p, lda, c, 1);
  }
}

}  // namespace geomopt::detail::avx2

#endif  // GEOMOPT_HAVE_AVX2_PATH
