// 256-bit AVX2 + FMA versions of the hot kernels, compiled for that target by function attribute (the rest of the
// program keeps its own flags) and called only when kernel_path() is avx2. A leaf's tail shorter than one register
// goes through the same arithmetic with masked loads and stores, so every entry is computed alike, whatever the
// cut into chunks.
#pragma once

#include "geomopt/optimizers/kernel_path.hpp"

#if GEOMOPT_HAVE_AVX2_PATH
#include <immintrin.h>

#include <Eigen/Core>
#include <array>
#include <cstddef>
#include <utility>

#define GEOMOPT_AVX2 __attribute__((target("avx2,fma")))
#define GEOMOPT_AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) inline

namespace geomopt::detail::avx2 {

template <class T>
struct Vec;

template <>
struct Vec<float> {
  using R = __m256;
  static constexpr Eigen::Index kLanes = 8;
  GEOMOPT_AVX2_INLINE static R set1(float x) { return _mm256_set1_ps(x); }
  GEOMOPT_AVX2_INLINE static R load(const float* p) { return _mm256_loadu_ps(p); }
  GEOMOPT_AVX2_INLINE static void store(float* p, R x) { _mm256_storeu_ps(p, x); }
  GEOMOPT_AVX2_INLINE static __m256i mask(Eigen::Index n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  GEOMOPT_AVX2_INLINE static R load(const float* p, __m256i m) { return _mm256_maskload_ps(p, m); }
  GEOMOPT_AVX2_INLINE static void store(float* p, __m256i m, R x) { _mm256_maskstore_ps(p, m, x); }
  GEOMOPT_AVX2_INLINE static R mul(R a, R b) { return _mm256_mul_ps(a, b); }
  GEOMOPT_AVX2_INLINE static R div(R a, R b) { return _mm256_div_ps(a, b); }
  GEOMOPT_AVX2_INLINE static R sqrt(R a) { return _mm256_sqrt_ps(a); }
  GEOMOPT_AVX2_INLINE static R max(R a, R b) { return _mm256_max_ps(a, b); }
  GEOMOPT_AVX2_INLINE static R fmadd(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }    // a b + c
  GEOMOPT_AVX2_INLINE static R fnmadd(R a, R b, R c) { return _mm256_fnmadd_ps(a, b, c); }  // c - a b
};

template <>
struct Vec<double> {
  using R = __m256d;
  static constexpr Eigen::Index kLanes = 4;
  GEOMOPT_AVX2_INLINE static R set1(double x) { return _mm256_set1_pd(x); }
  GEOMOPT_AVX2_INLINE static R load(const double* p) { return _mm256_loadu_pd(p); }
  GEOMOPT_AVX2_INLINE static void store(double* p, R x) { _mm256_storeu_pd(p, x); }
  GEOMOPT_AVX2_INLINE static __m256i mask(Eigen::Index n) {
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(static_cast<long long>(n)), _mm256_setr_epi64x(0, 1, 2, 3));
  }
  GEOMOPT_AVX2_INLINE static R load(const double* p, __m256i m) { return _mm256_maskload_pd(p, m); }
  GEOMOPT_AVX2_INLINE static void store(double* p, __m256i m, R x) { _mm256_maskstore_pd(p, m, x); }
  GEOMOPT_AVX2_INLINE static R mul(R a, R b) { return _mm256_mul_pd(a, b); }
  GEOMOPT_AVX2_INLINE static R div(R a, R b) { return _mm256_div_pd(a, b); }
  GEOMOPT_AVX2_INLINE static R sqrt(R a) { return _mm256_sqrt_pd(a); }
  GEOMOPT_AVX2_INLINE static R max(R a, R b) { return _mm256_max_pd(a, b); }
  GEOMOPT_AVX2_INLINE static R fmadd(R a, R b, R c) { return _mm256_fmadd_pd(a, b, c); }
  GEOMOPT_AVX2_INLINE static R fnmadd(R a, R b, R c) { return _mm256_fnmadd_pd(a, b, c); }
};

// One register of entries: the L2 term joins the gradient, the moments move, and p <- shrink p - step m / denom.
// vmax is null unless AMSGrad. C is AdamKernelBase's Coeffs<T> (kernels.hpp). Masked (tail) lanes read zeros and are not stored.
template <class T, bool kL2, bool kShrink, bool kAmsgrad, class C, class... Mask>
GEOMOPT_AVX2_INLINE void adam_lanes(const C& c, T* p, const T* g, T* m, T* v, T* vmax,
                                    Mask... mask) {
  using V = Vec<T>;
  using R = typename V::R;
  R x = V::load(p, mask...);
  R grad = V::load(g, mask...);
  if constexpr (kL2) grad = V::fmadd(V::set1(c.l2), x, grad);
  const R mt = V::fmadd(V::set1(c.b1), V::load(m, mask...), V::mul(V::set1(c.one_minus_b1), grad));
  R vt = V::fmadd(V::set1(c.b2), V::load(v, mask...), V::mul(V::set1(c.one_minus_b2), V::mul(grad, grad)));
  V::store(m, mask..., mt);
  V::store(v, mask..., vt);
  if constexpr (kAmsgrad) {
    vt = V::max(V::load(vmax, mask...), vt);
    V::store(vmax, mask..., vt);
  }
  const R denom = V::fmadd(V::sqrt(vt), V::set1(c.inv_bc2_sqrt), V::set1(c.eps));
  if constexpr (kShrink) x = V::mul(x, V::set1(c.shrink));
  V::store(p, mask..., V::fnmadd(V::set1(c.step_size), V::div(mt, denom), x));
}

template <class T, bool kL2, bool kShrink, bool kAmsgrad, class C>
GEOMOPT_AVX2 void adam_span(const C& c, T* p, const T* g, T* m, T* v, T* vmax, Eigen::Index n) {
  using V = Vec<T>;
  constexpr Eigen::Index kLanes = V::kLanes;
  Eigen::Index i = 0;
  for (; i + kLanes <= n; i += kLanes)
    adam_lanes<T, kL2, kShrink, kAmsgrad>(c, p + i, g + i, m + i, v + i, kAmsgrad ? vmax + i : nullptr);
  if (i < n)
    adam_lanes<T, kL2, kShrink, kAmsgrad>(c, p + i, g + i, m + i, v + i, kAmsgrad ? vmax + i : nullptr,
                                          V::mask(n - i));
}

template <class T, class C, std::size_t... I>
constexpr auto adam_spans(std::index_sequence<I...>) {
  return std::array{&adam_span<T, (I & 4) != 0, (I & 2) != 0, (I & 1) != 0, C>...};
}

/// p, m, v (and vmax for AMSGrad) updated in place over n entries: the instantiation for this step's L2 term,
/// AdamW decay and AMSGrad, picked from a table.
template <class T, class C>
void adam(const C& c, T* p, const T* g, T* m, T* v, T* vmax, Eigen::Index n) {
  static constexpr auto kSpans = adam_spans<T, C>(std::make_index_sequence<8>{});
  const std::size_t which = (c.l2 != T(0) ? 4u : 0u) | (c.shrink != T(1) ? 2u : 0u) | (c.amsgrad ? 1u : 0u);
  kSpans[which](c, p, g, m, v, vmax, n);
}

}  // namespace geomopt::detail::avx2

#undef GEOMOPT_AVX2_INLINE
#undef GEOMOPT_AVX2

#endif  // GEOMOPT_HAVE_AVX2_PATH
