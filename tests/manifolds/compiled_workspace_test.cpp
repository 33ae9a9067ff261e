// The compiled workspaces of libgeomopt_manifolds (geomopt/manifolds/any_workspace.hpp) against the headers:
//   - every built-in manifold, in float and double, is taken from the library by a file that links it with the
//     library's Eigen alignment (GEOMOPT_EVERY_MANIFOLD lists them);
//   - the library's workspace and one instantiated in this file from the same headers (WorkspaceModel<M>) give the
//     same results bit for bit: tangent size, cost and bytes, lift, to_ambient, every retraction (and the transported
//     section it moves), inverse_retract, check, project and random_point, under both section policies;
//   - a shape that is no point of M throws std::invalid_argument with the same message from both, and
//     random_point, check and project of the allocating API go through the library with the same results;
//   - a Borrowed<M> over a built-in manifold opens the library's workspace too.
// compiled_workspace_avx_test.cpp checks the other side: a file with another alignment instantiates its own.
#include <doctest/doctest.h>

#include <Eigen/Core>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "../support/every_manifold.hpp"
#include "geomopt/manifolds.hpp"

namespace {

using geomopt::Retraction;
using geomopt::Rng;
using geomopt::SectionPolicy;
using geomopt::detail::any_workspace;
using geomopt::detail::AnyWorkspace;
using geomopt::detail::WorkspaceModel;

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;

template <class A, class B>
bool bitwise_equal(const A& a, const B& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() && (a.array() == b.array()).all();
}

template <class T>
Mat<T> gaussian(Rng& rng, Eigen::Index rows, Eigen::Index cols) {
  std::normal_distribution<double> normal;
  Mat<T> m(rows, cols);
  for (Eigen::Index k = 0; k < m.size(); ++k) m.data()[k] = T(normal(rng));
  return m;
}

template <class M>
std::string shape_error(std::unique_ptr<AnyWorkspace<typename M::Scalar>> (*make)(Eigen::Index, Eigen::Index)) {
  try {
    make(0, 7);  // no built-in manifold has a point of 0 x 7
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no exception";
}

template <class M>
void same_as_headers(const char* name, const M& x) {
  using T = typename M::Scalar;
  const std::string which = std::string(name) + (std::is_same_v<T, float> ? "<float>" : "<double>");
  INFO(which);
  static_assert(geomopt::detail::compiled_workspace<M>, "the test build links libgeomopt_manifolds");
  const Eigen::Index rows = x.value().rows(), cols = x.value().cols();
  const Mat<T> y0 = x.value();
  for (const SectionPolicy policy : {SectionPolicy::recomputed, SectionPolicy::transported}) {
    INFO(static_cast<int>(policy));
    auto lib = any_workspace<M>(rows, cols, policy, y0.data());
    WorkspaceModel<M> here(rows, cols, policy, y0.data());
    const Eigen::Index d = here.tangent_size();
    REQUIRE(lib->tangent_size() == d);
    CHECK(lib->step_cost() == here.step_cost());
    CHECK(lib->workspace_bytes() == here.workspace_bytes());
    CHECK(lib->section_rows() == here.section_rows());
    CHECK(lib->section_cols() == here.section_cols());

    Rng rng(11);
    const Mat<T> g = gaussian<T>(rng, rows, cols);
    Mat<T> c_lib(d, 1), c_here(d, 1);
    lib->lift(y0.data(), g.data(), c_lib.data());
    here.lift(y0.data(), g.data(), c_here.data());
    CHECK(bitwise_equal(c_lib, c_here));

    Mat<T> u_lib(rows, cols), u_here(rows, cols);
    lib->to_ambient(y0.data(), c_lib.data(), u_lib.data());
    here.to_ambient(y0.data(), c_here.data(), u_here.data());
    CHECK(bitwise_equal(u_lib, u_here));

    const Mat<T> step = T(0.1) * gaussian<T>(rng, d, 1);
    for (const Retraction r : M::kRetractions) {
      const std::string retraction = geomopt::retraction_name(r);
      INFO(retraction);
      lib->lift(y0.data(), g.data(), c_lib.data());
      here.lift(y0.data(), g.data(), c_here.data());
      Mat<T> z_lib = y0, z_here = y0;
      lib->retract(z_lib.data(), step.data(), r);
      here.retract(z_here.data(), step.data(), r);
      CHECK(bitwise_equal(z_lib, z_here));
      if (here.section_rows() > 0) {
        const Eigen::Map<const Mat<T>> s_lib(lib->section_data(), lib->section_rows(), lib->section_cols());
        const Eigen::Map<const Mat<T>> s_here(here.section_data(), here.section_rows(), here.section_cols());
        CHECK(bitwise_equal(s_lib, s_here));
      }
      lib->forget_point();
      here.forget_point();
      Mat<T> back_lib(d, 1), back_here(d, 1);
      lib->inverse_retract(y0.data(), z_lib.data(), back_lib.data(), r);
      here.inverse_retract(y0.data(), z_here.data(), back_here.data(), r);
      CHECK(bitwise_equal(back_lib, back_here));
    }

    Mat<T> off = y0 + T(0.01) * gaussian<T>(rng, rows, cols);
    CHECK(lib->check(off.data()) == here.check(off.data()));
    Mat<T> p_lib = off, p_here = off;
    lib->project(p_lib.data());
    here.project(p_here.data());
    CHECK(bitwise_equal(p_lib, p_here));

    Rng a(5), b(5);
    Mat<T> r_lib(rows, cols), r_here(rows, cols);
    lib->random_point(a, r_lib.data());
    here.random_point(b, r_here.data());
    CHECK(bitwise_equal(r_lib, r_here));
  }

  const auto from_library = [](Eigen::Index r, Eigen::Index c) {
    return any_workspace<M>(r, c, SectionPolicy::recomputed, nullptr);
  };
  const auto from_headers = [](Eigen::Index r, Eigen::Index c) -> std::unique_ptr<AnyWorkspace<T>> {
    return std::make_unique<WorkspaceModel<M>>(r, c, SectionPolicy::recomputed, nullptr);
  };
  const std::string expected = shape_error<M>(+from_headers);
  CHECK_MESSAGE(expected.find(M::kName) != std::string::npos, expected);
  CHECK(shape_error<M>(+from_library) == expected);

  // The allocating API's project takes the library's workspace: the point the headers' workspace gives.
  Rng rng(3);
  M moved = x;
  moved.value() += T(0.01) * gaussian<T>(rng, rows, cols);
  Mat<T> projected = moved.value();
  WorkspaceModel<M>(rows, cols, SectionPolicy::recomputed, nullptr).project(projected.data());
  CHECK(bitwise_equal(geomopt::project(moved).value(), projected));
}

template <template <class> class M, class... Dims>
void both_scalars(const char* name, Dims... dims) {
  Rng rng(1);
  same_as_headers(name, M<float>::random_point(rng, dims...));
  same_as_headers(name, M<double>::random_point(rng, dims...));
}

}  // namespace

TEST_CASE("every built-in manifold's compiled workspace computes what the headers compute, bit for bit") {
#define GEOMOPT_SAME(Name, ...) both_scalars<geomopt::Name>(#Name, __VA_ARGS__);
  GEOMOPT_EVERY_MANIFOLD(GEOMOPT_SAME)
#undef GEOMOPT_SAME
}

TEST_CASE("random_point draws through the compiled workspace: the same point as the headers' workspace draws") {
  Rng a(9), b(9);
  const geomopt::Stiefel<double> x = geomopt::Stiefel<double>::random_point(a, 7, 3);
  Mat<double> y(7, 3);
  WorkspaceModel<geomopt::Stiefel<double>>(7, 3, SectionPolicy::recomputed, nullptr).random_point(b, y.data());
  CHECK(bitwise_equal(x.value(), y));
  CHECK_THROWS_AS(geomopt::Stiefel<double>::random_point(a, 2, 3), std::invalid_argument);
  CHECK(geomopt::check(geomopt::Stiefel<double>(Mat<double>(2, 3))) == std::numeric_limits<double>::infinity());
}

TEST_CASE("a Borrowed leaf of every built-in manifold opens the library's workspace, with the owned leaf's results") {
  // Borrowed<M> shares M's Workspace: a tree of borrowed leaves (the Python engines', libtorch's) takes the compiled
  // code too, rather than instantiating every manifold's arithmetic where it is stepped.
#define GEOMOPT_BORROWED_OPENS_LIBRARY(Name, ...)                                                \
  CHECK(std::is_same_v<geomopt::detail::OpenWorkspace<geomopt::Borrowed<geomopt::Name<float>>>,  \
                       geomopt::detail::WorkspaceHandle<float>>);                                \
  CHECK(std::is_same_v<geomopt::detail::OpenWorkspace<geomopt::Borrowed<geomopt::Name<double>>>, \
                       geomopt::detail::WorkspaceHandle<double>>);
  GEOMOPT_EVERY_MANIFOLD(GEOMOPT_BORROWED_OPENS_LIBRARY)
#undef GEOMOPT_BORROWED_OPENS_LIBRARY

  Rng rng(4);
  geomopt::Stiefel<double> x = geomopt::Stiefel<double>::random_point(rng, 9, 4);
  const Mat<double> g = gaussian<double>(rng, 9, 4);
  const geomopt::Borrowed<geomopt::Stiefel<double>> view(x);
  auto owned = geomopt::detail::open_workspace<geomopt::Stiefel<double>>(9, 4, SectionPolicy::recomputed, nullptr);
  auto borrowed = geomopt::detail::open_workspace<decltype(view)>(9, 4, SectionPolicy::recomputed, nullptr);
  Mat<double> c_owned(owned.tangent_size(), 1), c_borrowed(borrowed.tangent_size(), 1);
  owned.lift(x.value().data(), g.data(), c_owned.data());
  borrowed.lift(view.value().data(), g.data(), c_borrowed.data());
  CHECK(bitwise_equal(c_owned, c_borrowed));
}
