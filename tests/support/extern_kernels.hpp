// Explicit instantiation declarations for the dense kernels every manifold test reaches, in double and float: the
// Stiefel-family arithmetic of geomopt/manifolds/detail (lifts, retraction cores, inverse retractions, projections,
// random points), the SPD core, and the Eigen decompositions they, msign and the tests' dense references use.
//
// The test build makes this header the precompiled header of every manifolds and optimizers test that does not
// configure Eigen itself, so it precedes their code as a force-included header would (tests/CMakeLists.txt), and
// kernels_double.cpp / kernels_float.cpp (the geomopt_test_kernels library) hold the matching explicit instantiation
// definitions. So each kernel is compiled once per build, with the build's flags, instead of once in every test file
// that uses it: the same source code, run by the same tests, at a third of the compile time of the property suites.
// Only these exact specializations are affected; every other scalar (ceres::Jet) instantiates as usual. And only what
// is not inline stays out of the tests' code: a class's members defined in its body are inline and are instantiated
// wherever they are used, so the list names the heavy free functions the workspaces call.
#pragma once

#include <Eigen/Dense>
#include <geomopt/manifolds.hpp>
#include <utility>

// GEOMOPT_TEST_KERNELS(extern, T) declares, GEOMOPT_TEST_KERNELS(, T) defines (kernels_<T>.cpp).
// clang-format off
#define GEOMOPT_TEST_KERNELS(EXT, T)                                                                                  \
  EXT template class Eigen::JacobiSVD<Eigen::Matrix<T, -1, -1>, Eigen::ColPivHouseholderQRPreconditioner>;            \
  EXT template class Eigen::SelfAdjointEigenSolver<Eigen::Matrix<T, -1, -1>>;                                         \
  EXT template class Eigen::BDCSVD<Eigen::Matrix<T, -1, -1>>;                                                         \
  EXT template class Eigen::HouseholderQR<Eigen::Matrix<T, -1, -1>>;                                                  \
  EXT template class Eigen::PartialPivLU<Eigen::Matrix<T, -1, -1>>;                                                   \
  EXT template class Eigen::LLT<Eigen::Matrix<T, -1, -1>>;                                                            \
  EXT template std::pair<geomopt::detail::Mat<T>, geomopt::detail::Mat<T>> geomopt::detail::lift_core<T>(             \
      const geomopt::detail::Mat<T>&, const geomopt::detail::Mat<T>&);                                                \
  EXT template geomopt::detail::Mat<T> geomopt::detail::core_function<T>(const geomopt::detail::Mat<T>&,              \
                                                                         geomopt::Retraction);                        \
  EXT template class geomopt::detail::StiefelFamilyWorkspace<T, geomopt::Stiefel<T>>;                                 \
  EXT template class geomopt::detail::StiefelFamilyWorkspace<T, geomopt::Grassmann<T>>;                               \
  EXT template class geomopt::detail::StiefelFamilyWorkspace<T, geomopt::Sphere<T>>;                                  \
  EXT template class geomopt::detail::StiefelFamilyWorkspace<T, geomopt::SpecialOrthogonal<T>>;                       \
  EXT template class geomopt::detail::SkewCoreKernels<T>;                                                             \
  EXT template geomopt::detail::Mat<T> geomopt::detail::solve_right_shifted<T>(const geomopt::detail::Mat<T>&,        \
                                                                               const geomopt::detail::Mat<T>&);       \
  EXT template std::pair<geomopt::detail::Mat<T>, geomopt::detail::Mat<T>>                                            \
  geomopt::detail::inverse_cayley_blocks<T>(const geomopt::detail::Mat<T>&, Eigen::Index);                            \
  EXT template std::pair<geomopt::detail::Mat<T>, geomopt::detail::Mat<T>>                                            \
  geomopt::detail::inverse_geodesic_blocks<T>(const geomopt::detail::Mat<T>&, Eigen::Index, const char*);             \
  EXT template geomopt::detail::Mat<T> geomopt::detail::inverse_grassmann_block<T>(const geomopt::detail::Mat<T>&,    \
                                                                                   Eigen::Index, geomopt::Retraction); \
  EXT template geomopt::detail::Mat<T> geomopt::detail::polar_factor<T>(const geomopt::detail::Mat<T>&, bool);        \
  EXT template geomopt::detail::Mat<T> geomopt::detail::haar_stiefel<T>(geomopt::Rng&, Eigen::Index, Eigen::Index);   \
  EXT template geomopt::detail::Mat<T> geomopt::detail::gaussian<T>(geomopt::Rng&, Eigen::Index, Eigen::Index);       \
  EXT template geomopt::detail::Mat<T> geomopt::detail::expm<T>(const geomopt::detail::Mat<T>&);                      \
  EXT template geomopt::detail::Mat<T> geomopt::detail::cayley<T>(const geomopt::detail::Mat<T>&);                    \
  EXT template geomopt::detail::Mat<T> geomopt::detail::log_orthogonal<T>(const geomopt::detail::Mat<T>&);            \
  EXT template T geomopt::detail::orthonormality_defect<T>(const geomopt::detail::Mat<T>&);                           \
  EXT template geomopt::detail::Mat<T> geomopt::detail::skew_function_spectral<T>(const geomopt::detail::Mat<T>&,     \
                                                                                  bool);                              \
  EXT template void geomopt::detail::skew_core_function<T>(geomopt::detail::SkewCoreKernels<T>&,                      \
                                                           const geomopt::detail::Mat<T>&, geomopt::Retraction,       \
                                                           geomopt::detail::Mat<T>&);                                 \
  EXT template void geomopt::detail::stack_gemm<T>(geomopt::detail::StackGemmDst<T>,                                  \
                                                   geomopt::detail::StackGemmSrc<T>, geomopt::detail::GemmOp,         \
                                                   geomopt::detail::StackGemmSrc<T>, geomopt::detail::GemmOp,         \
                                                   geomopt::detail::GemmMode);                                        \
  EXT template void geomopt::detail::stack_gram<T>(geomopt::detail::StackGemmDst<T>,                                  \
                                                   geomopt::detail::StackGemmSrc<T>);                                 \
  EXT template void geomopt::detail::dense_product<T>(geomopt::detail::DenseDestination<T>,                           \
                                                      geomopt::detail::DenseOperand<T>, geomopt::detail::ProductOp,   \
                                                      geomopt::detail::DenseOperand<T>, geomopt::detail::ProductOp,   \
                                                      T, bool);                                                       \
  EXT template std::pair<double, double> geomopt::detail::extreme_singular_values<T>(const geomopt::detail::Mat<T>&,  \
                                                                                     const char*);                    \
  EXT template class Eigen::RealSchur<Eigen::Matrix<T, -1, -1>>;
// clang-format on

GEOMOPT_TEST_KERNELS(extern, double)
GEOMOPT_TEST_KERNELS(extern, float)
