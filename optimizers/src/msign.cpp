// The compiled msign of libgeomopt_optimizers (geomopt/optimizers/msign.hpp): msign_kernel and msign_batch_kernel for
// float and double, which every translation unit that may (compiled_msign<T>) calls instead of instantiating them.
// This file is built with hidden visibility (optimizers/CMakeLists.txt), so that the template instances behind the
// entry points (BDCSVD, the Gram eigensolver, the products) stay the library's own and never replace, nor are
// replaced by, those of a translation unit that instantiates its own.
#include "geomopt/optimizers/msign.hpp"

#include <Eigen/Core>

static_assert(GEOMOPT_USE_COMPILED_KERNELS && GEOMOPT_COMPILED_KERNELS == EIGEN_MAX_ALIGN_BYTES,
              "libgeomopt_optimizers: msign is compiled with the Eigen alignment of libgeomopt_manifolds");

namespace geomopt::detail {

#define GEOMOPT_DEFINE_COMPILED_MSIGN(T)                                                                               \
  void compiled_msign_kernel(MsignRef<T> m, const MsignOptions& o, MsignWorkspace<T>& ws) {                            \
    msign_kernel<T>(m, o, ws);                                                                                         \
  }                                                                                                                    \
  void compiled_msign_batch_kernel(T* data, Eigen::Index ld, Eigen::Index batch, Eigen::Index rows, Eigen::Index cols, \
                                   const MsignOptions& o, MsignBatchWorkspace<T>& ws) {                                \
    msign_batch_kernel<T>(data, ld, batch, rows, cols, o, ws);                                                         \
  }
GEOMOPT_DEFINE_COMPILED_MSIGN(float)
GEOMOPT_DEFINE_COMPILED_MSIGN(double)
#undef GEOMOPT_DEFINE_COMPILED_MSIGN

}  // namespace geomopt::detail
