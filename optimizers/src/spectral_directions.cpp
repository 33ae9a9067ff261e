// The compiled spectral directions of libgeomopt_optimizers (geomopt/optimizers/spectral_directions.hpp): the solves
// of SphereMuonDirection, SpecialOrthogonalMuonDirection, GrassmannMuonDirection and ObliqueMuonDirection for float
// and double, which every translation unit that may (compiled_spectral_directions<T>) calls instead of instantiating
// them. Built with hidden visibility (optimizers/CMakeLists.txt), so that the template instances behind the entry
// points (the SVD, the eigensolver, the LDLT, the products) stay the library's own.
#include "geomopt/optimizers/spectral_directions.hpp"

static_assert(GEOMOPT_USE_COMPILED_KERNELS && GEOMOPT_COMPILED_KERNELS == EIGEN_MAX_ALIGN_BYTES,
              "libgeomopt_optimizers: the spectral directions are compiled with the Eigen alignment of "
              "libgeomopt_manifolds");

namespace geomopt::detail {

#define GEOMOPT_DEFINE_COMPILED_SPECTRAL_DIRECTIONS(T)                                                          \
  SpectralDirectionReport compiled_spectral_solve(SphereMuonDirection<T>& d, const T* w, const T* g, T* a) {    \
    return SpectralDirectionKernels::kernel(d, w, g, a);                                                        \
  }                                                                                                             \
  SpectralDirectionReport compiled_spectral_solve(SpecialOrthogonalMuonDirection<T>& d, const T* w, const T* g, \
                                                  T* a) {                                                       \
    return SpectralDirectionKernels::kernel(d, w, g, a);                                                        \
  }                                                                                                             \
  SpectralDirectionReport compiled_spectral_solve(GrassmannMuonDirection<T>& d, const T* w, const T* g, T* a) { \
    return SpectralDirectionKernels::kernel(d, w, g, a);                                                        \
  }                                                                                                             \
  SpectralDirectionReport compiled_spectral_solve(ObliqueMuonDirection<T>& d, const T* w, const T* g, T* a,     \
                                                  const ObliqueMuonOptions& o, T* multiplier, bool warm) {      \
    return SpectralDirectionKernels::kernel(d, w, g, a, o, multiplier, warm);                                   \
  }
GEOMOPT_DEFINE_COMPILED_SPECTRAL_DIRECTIONS(float)
GEOMOPT_DEFINE_COMPILED_SPECTRAL_DIRECTIONS(double)
#undef GEOMOPT_DEFINE_COMPILED_SPECTRAL_DIRECTIONS

}  // namespace geomopt::detail
