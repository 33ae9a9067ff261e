// The compiled Stiefel Muon arithmetic of libgeomopt_optimizers (geomopt/optimizers/stiefel_muon.hpp):
// StiefelMuonDirection<T>::solve and StiefelMuonPolarStep<T>::prepare and apply for float and double, which every
// translation unit that may (compiled_stiefel_muon<T>) calls instead of instantiating them. This file is built with
// hidden visibility (optimizers/CMakeLists.txt), so that the template instances behind the entry points
// (StiefelMuonCore, the eigensolver, the LDLT, the products) stay the library's own and never replace, nor are
// replaced by, those of a translation unit that instantiates its own.
#include "geomopt/optimizers/stiefel_muon.hpp"

#include <Eigen/Core>
#include <vector>

static_assert(GEOMOPT_USE_COMPILED_KERNELS && GEOMOPT_COMPILED_KERNELS == EIGEN_MAX_ALIGN_BYTES,
              "libgeomopt_optimizers: the Stiefel Muon arithmetic is compiled with the Eigen alignment of "
              "libgeomopt_manifolds");

namespace geomopt::detail {

#define GEOMOPT_DEFINE_COMPILED_STIEFEL_MUON(T)                                                                  \
  StiefelMuonReport compiled_stiefel_muon_solve(StiefelMuonDirection<T>& d, const T* w, const T* u, T* a,        \
                                                const StiefelMuonOptions& o, std::vector<double>* duals,         \
                                                T* multiplier, bool warm) {                                      \
    return StiefelMuonKernels::solve(d, w, u, a, o, duals, multiplier, warm);                                    \
  }                                                                                                              \
  StiefelMuonReport compiled_stiefel_muon_prepare(StiefelMuonPolarStep<T>& s, const T* w, const T* u, double lr, \
                                                  const StiefelMuonOptions& o, const T* multiplier) {            \
    return StiefelMuonKernels::prepare(s, w, u, lr, o, multiplier);                                              \
  }                                                                                                              \
  void compiled_stiefel_muon_apply(StiefelMuonPolarStep<T>& s, T* w, const T* u) { StiefelMuonKernels::apply(s, w, u); }
GEOMOPT_DEFINE_COMPILED_STIEFEL_MUON(float)
GEOMOPT_DEFINE_COMPILED_STIEFEL_MUON(double)
#undef GEOMOPT_DEFINE_COMPILED_STIEFEL_MUON

}  // namespace geomopt::detail
