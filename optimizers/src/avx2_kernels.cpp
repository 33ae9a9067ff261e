// The AVX2 + FMA Adam step the optimizers call where kernel_path() is avx2 (kernels.hpp declares it): the float and
// double instances of detail/avx2.hpp, behind plain functions so that no header includes <immintrin.h>.
#include "geomopt/optimizers/kernels.hpp"

#if GEOMOPT_HAVE_AVX2_PATH
#include "geomopt/optimizers/detail/avx2.hpp"

namespace geomopt::detail {

void avx2_adam(const AdamCoeffs<float>& c, float* p, const float* g, float* m, float* v, float* vmax, Eigen::Index n) {
  avx2::adam<float>(c, p, g, m, v, vmax, n);
}
void avx2_adam(const AdamCoeffs<double>& c, double* p, const double* g, double* m, double* v, double* vmax,
               Eigen::Index n) {
  avx2::adam<double>(c, p, g, m, v, vmax, n);
}

}  // namespace geomopt::detail
#endif
