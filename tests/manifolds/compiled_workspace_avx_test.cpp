// A file compiled with another Eigen alignment than libgeomopt_manifolds (this one with -mavx: 32-byte alignment,
// the library 16) must not share Eigen matrices with the library (any_workspace.hpp): it instantiates every
// workspace itself, and the optimizers and the allocating API work there as anywhere.
//   - compiled_workspace<M> is false here, for every built-in manifold, and so are compiled_msign<T>,
//     compiled_stiefel_muon<T> and compiled_spectral_directions<T>;
//   - the library's entry point, called by hand with plain arrays (nothing allocated on one side is freed on the
//     other), and this file's own workspace agree to rounding (Eigen's AVX products sum in another order);
//   - an Adam step on a Stiefel leaf keeps the point on the manifold.
// The test build compiles this file alone with -mavx, without the precompiled header and the test kernels (which
// hold the other alignment's instances), and links the library.
#include <doctest/doctest.h>

#include <Eigen/Core>
#include <memory>
#include <random>

#include "../support/every_manifold.hpp"
#include "geomopt/optimizers.hpp"

#if !defined(__AVX__)
#error "compiled_workspace_avx_test.cpp is compiled with -mavx (tests/CMakeLists.txt)"
#endif
static_assert(EIGEN_MAX_ALIGN_BYTES == 32 && GEOMOPT_COMPILED_KERNELS != EIGEN_MAX_ALIGN_BYTES,
              "this file exercises a translation unit whose alignment differs from the library's");
#define GEOMOPT_NOT_COMPILED(Name, ...)                                       \
  static_assert(!geomopt::detail::compiled_workspace<geomopt::Name<double>>); \
  static_assert(!geomopt::detail::compiled_workspace<geomopt::Name<float>>);
GEOMOPT_EVERY_MANIFOLD(GEOMOPT_NOT_COMPILED)
#undef GEOMOPT_NOT_COMPILED
// msign, the Stiefel Muon arithmetic and the spectral directions too: their compiled instances (libgeomopt_optimizers)
// have the library's alignment.
static_assert(!geomopt::detail::compiled_msign<float> && !geomopt::detail::compiled_msign<double>);
static_assert(!geomopt::detail::compiled_stiefel_muon<float> && !geomopt::detail::compiled_stiefel_muon<double>);
static_assert(!geomopt::detail::compiled_spectral_directions<float> &&
              !geomopt::detail::compiled_spectral_directions<double>);

// The library's entry, whose declaration any_workspace.hpp leaves out of this file.
namespace geomopt::detail {
std::unique_ptr<AnyWorkspace<double>> compiled_workspace_of(WorkspaceOf<Stiefel<double>>, Eigen::Index, Eigen::Index,
                                                            SectionPolicy, const double*);
}

namespace {

struct Model {
  geomopt::Stiefel<double> frame;
  Eigen::MatrixXd head;
  GEOMOPT_PTREE(frame, head)
};

}  // namespace

TEST_CASE("a file of another alignment steps with its own workspace, which agrees with the library's") {
  if (!__builtin_cpu_supports("avx")) {
    MESSAGE("skipped: this CPU has no AVX");
    return;
  }
  geomopt::Rng rng(4);
  const auto x = geomopt::Stiefel<double>::random_point(rng, 40, 6);
  CHECK(geomopt::check(x) < 1e-13);
  std::normal_distribution<double> normal;
  Eigen::MatrixXd g(40, 6);
  for (Eigen::Index k = 0; k < g.size(); ++k) g.data()[k] = normal(rng);

  auto lib = geomopt::detail::compiled_workspace_of(geomopt::detail::WorkspaceOf<geomopt::Stiefel<double>>{}, 40, 6,
                                                    geomopt::SectionPolicy::recomputed, nullptr);
  auto here =
      geomopt::detail::any_workspace<geomopt::Stiefel<double>>(40, 6, geomopt::SectionPolicy::recomputed, nullptr);
  const Eigen::Index d = here->tangent_size();
  REQUIRE(lib->tangent_size() == d);
  Eigen::VectorXd c_lib(d), c_here(d);
  lib->lift(x.value().data(), g.data(), c_lib.data());
  here->lift(x.value().data(), g.data(), c_here.data());
  CHECK((c_lib - c_here).norm() <= 1e-13 * c_here.norm());
  Eigen::MatrixXd y_lib = x.value(), y_here = x.value();
  c_here *= 0.3;
  lib->retract(y_lib.data(), c_here.data(), geomopt::Retraction::cayley);
  here->retract(y_here.data(), c_here.data(), geomopt::Retraction::cayley);
  CHECK((y_lib - y_here).norm() <= 1e-13);

  Model params{x, Eigen::MatrixXd::Ones(6, 2)};
  Model grads{geomopt::Stiefel<double>(g), Eigen::MatrixXd::Ones(6, 2)};
  geomopt::Adam adam({.lr = 0.1});
  auto state = adam.init(params);
  for (int step = 0; step < 5; ++step) adam.step(params, grads, state);
  CHECK(geomopt::check(params.frame) < 1e-12);
  CHECK((params.frame.value() - x.value()).norm() > 0.1);
}
