// The AVX2 + FMA products stack_gemm calls where kernel_path() is avx2 (detail/stack_gemm.hpp declares them): the
// float and double instances of detail/gemm_avx2.hpp, behind plain functions so that no header includes
// <immintrin.h>.
#include "geomopt/manifolds/detail/stack_gemm.hpp"

#if GEOMOPT_HAVE_AVX2_PATH
#include "geomopt/manifolds/detail/gemm_avx2.hpp"

namespace geomopt::detail {

#define GEOMOPT_AVX2_PRODUCT(name, kernel, T)                                                                   \
  void name(T* c, Eigen::Index ldc, const T* a, Eigen::Index lda, const T* b, Eigen::Index ldb, Eigen::Index m, \
            Eigen::Index k, Eigen::Index n, T sign) {                                                           \
    avx2::kernel<T>(c, ldc, a, lda, b, ldb, m, k, n, sign);                                                     \
  }
GEOMOPT_AVX2_PRODUCT(avx2_nn, nn, float)
GEOMOPT_AVX2_PRODUCT(avx2_nn, nn, double)
GEOMOPT_AVX2_PRODUCT(avx2_tn, tn, float)
GEOMOPT_AVX2_PRODUCT(avx2_tn, tn, double)
#undef GEOMOPT_AVX2_PRODUCT

}  // namespace geomopt::detail
#endif
