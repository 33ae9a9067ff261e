// The 256-bit AVX2 + FMA registers the hand-written kernels are written with (optimizers/detail/avx2.hpp,
// manifolds/detail/gemm_avx2.hpp): Vec<T> names the register of T (8 floats or 4 doubles) and the few instructions
// the kernels use, each with a masked form for a tail shorter than a register (masked lanes read zeros, are not
// stored, and never touch memory). Functions using them are compiled for that target by attribute (GEOMOPT_AVX2,
// GEOMOPT_AVX2_INLINE), whatever the translation unit's flags, and are called only when kernel_path() is avx2. A
// lambda inside such a function does not inherit the target: it takes GEOMOPT_AVX2_LAMBDA after its parameters.
#pragma once

#include "geomopt/manifolds/kernel_path.hpp"

#if GEOMOPT_HAVE_AVX2_PATH
#include <immintrin.h>

#include <Eigen/Core>

#define GEOMOPT_AVX2 __attribute__((target("avx2,fma")))
#define GEOMOPT_AVX2_LAMBDA __attribute__((target("avx2,fma"), always_inline))
#define GEOMOPT_AVX2_INLINE GEOMOPT_AVX2_LAMBDA inline

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

}  // namespace geomopt::detail::avx2

#endif  // GEOMOPT_HAVE_AVX2_PATH
