// The property suite <geomopt/manifolds/testing.hpp> stamped on every manifold, scalar and shape by one line,
//
//   GEOMOPT_CHECK_MANIFOLD(geomopt::Stiefel<float>, 8, 3)
//
// which adds the test case "geomopt::Stiefel<float> 8, 3" failing once per failed property with the suite's line for
// it. The point is M::random_point(rng, dims...) (for a ceres::Jet scalar, the double manifold's point cast to it); a
// type that does not satisfy geomopt::Manifold does not compile. The library's manifolds are stamped from their list,
// tests/support/every_manifold.hpp, in float, double and Jet.
//
// Then the suite itself, on ToySphere (testing_toy.hpp), a manifold written from the contract alone: it passes in
// float, double and Jet, and each deliberately broken variant fails the property it breaks, by name.
//
// The allocations property counts through count_allocations.hpp (it counts every allocation of this executable): the
// suite reads geomopt::testing::allocation_counter, set below.
#include "../support/count_allocations.hpp"

#include <ceres/jet.h>
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <type_traits>
#include <utility>

#include "every_manifold.hpp"
#include "geomopt/manifolds.hpp"
#include "geomopt/manifolds/testing.hpp"
#include "testing_toy.hpp"

namespace {

using JetD = ceres::Jet<double, 2>;
using geomopt_test::ToyDefect;
using geomopt_test::ToySphere;

long allocations_so_far() { return alloc_count::allocations.load(); }

// The counter is installed for the whole executable: every stamp measures allocations.
const bool counter_installed = [] {
  geomopt::testing::allocation_counter = &allocations_so_far;
  return true;
}();

// M over another scalar: M::rebind<U> where M says it (ToySphere, whose second parameter clang does not bind to a
// template template parameter of one), P<U> for M = P<S>.
template <class M>
struct PointTemplate {
  template <class U>
  using rebind = typename M::template rebind<U>;
};
template <template <class> class P, class S>
requires(!requires { typename P<S>::template rebind<double>; }) struct PointTemplate<P<S>> {
  template <class U>
  using rebind = P<U>;
};

// A random point of M with the given dimensions: M::random_point, or for a ceres::Jet scalar the double manifold's
// point with its value cast.
template <class M, class... D>
M make_point(geomopt::Rng& rng, D... dims) {
  using S = typename M::Scalar;
  if constexpr (std::is_floating_point_v<S>) {
    return M::random_point(rng, static_cast<Eigen::Index>(dims)...);
  } else {
    using MD = typename PointTemplate<M>::template rebind<double>;
    const MD xd = MD::random_point(rng, static_cast<Eigen::Index>(dims)...);
    return M(xd.value().template cast<S>().eval());
  }
}

template <class M, class... D>
void check_stamped(const char*, D... dims) {
  static_assert(geomopt::Manifold<M>, "GEOMOPT_CHECK_MANIFOLD: the type does not satisfy geomopt::Manifold");
  {
    REQUIRE(counter_installed);
    geomopt::Rng rng(2026);
    const M x = make_point<M>(rng, dims...);
    const geomopt::testing::Report report = geomopt::testing::check_manifold(x);
    for (const geomopt::testing::Property& p : report.failures()) FAIL_CHECK(report.line(p));
    // GEOMOPT_CHECK_MANIFOLD_REPORT=1 in the environment prints every measured figure with its bound.
    if (std::getenv("GEOMOPT_CHECK_MANIFOLD_REPORT") != nullptr) {
      MESSAGE(report.FullReport());
    } else {
      MESSAGE(report.BriefReport());
    }
  }
}

}  // namespace

#define GEOMOPT_CHECK_MANIFOLD(M, ...) \
  TEST_CASE(#M " " #__VA_ARGS__) { check_stamped<M>(#M, __VA_ARGS__); }

// ---- the library's manifolds: every line of every_manifold.hpp in float, double and Jet ----

#define GEOMOPT_CHECK_EVERY_SCALAR(Name, ...)                \
  GEOMOPT_CHECK_MANIFOLD(geomopt::Name<float>, __VA_ARGS__)  \
  GEOMOPT_CHECK_MANIFOLD(geomopt::Name<double>, __VA_ARGS__) \
  GEOMOPT_CHECK_MANIFOLD(geomopt::Name<JetD>, __VA_ARGS__)
GEOMOPT_EVERY_MANIFOLD(GEOMOPT_CHECK_EVERY_SCALAR)
// SO(n) has closed forms at n = 3 (Rodrigues) that the general case at n = 4 does not take.
GEOMOPT_CHECK_MANIFOLD(geomopt::SpecialOrthogonal<float>, 4)
GEOMOPT_CHECK_MANIFOLD(geomopt::SpecialOrthogonal<double>, 4)

// ---- the suite itself, on a manifold written from the contract alone ----

// snippet-begin: stamp
GEOMOPT_CHECK_MANIFOLD(ToySphere<float>, 6)
GEOMOPT_CHECK_MANIFOLD(ToySphere<double>, 6)
GEOMOPT_CHECK_MANIFOLD(ToySphere<JetD>, 6)
// snippet-end: stamp

namespace {

template <class M>
geomopt::testing::Report report_of(const geomopt::testing::Options& options = {}) {
  geomopt::Rng rng(7);
  return geomopt::testing::check_manifold(M::random_point(rng, 6), options);
}

// The report of a broken toy fails the properties named (and, when `only`, no other), each with a line naming the
// manifold and the property.
void require_failures(const geomopt::testing::Report& report, std::initializer_list<const char*> broken,
                      const std::string& manifold, bool only = true) {
  MESSAGE(report.str());
  CHECK_FALSE(report.ok());
  for (const char* name : broken) {
    CAPTURE(name);
    CHECK(report.failed(name));
    CHECK(report.str().find(manifold + " " + name) != std::string::npos);
  }
  for (const geomopt::testing::Property& p : report.failures()) {
    if (!only) break;
    CAPTURE(report.line(p));
    CHECK(std::find_if(broken.begin(), broken.end(), [&](const char* n) { return p.name == n; }) != broken.end());
  }
}

}  // namespace

// What a user's test of a manifold of their own looks like in any framework: one call, then each failed property
// reported with its line.
TEST_CASE("the suite: a user's manifold in one call") {
  // snippet-begin: direct
  geomopt::Rng rng(1);
  const geomopt::testing::Report report = geomopt::testing::check_manifold(ToySphere<float>::random_point(rng, 6));
  for (const geomopt::testing::Property& p : report.failures()) FAIL_CHECK(report.line(p));
  // snippet-end: direct
  CHECK(report.ok());
}

TEST_CASE("the suite: a retraction off by a factor 1.01 fails first_order") {
  // The step is 1.01 times too long, so the points it reaches stay on the manifold but are the wrong ones: the
  // cost's difference quotient and the inverse round trip see it too.
  require_failures(report_of<ToySphere<double, ToyDefect::retraction_factor>>(),
                   {"first_order", "gradient", "inverse_round_trip"}, "ToySphere<double> 6x1");
  // In float the cost's difference quotient resolves a 1% error only near its bound: not required there.
  require_failures(report_of<ToySphere<float, ToyDefect::retraction_factor>>(), {"first_order", "inverse_round_trip"},
                   "ToySphere<float> 6x1", false);
  const auto report = report_of<ToySphere<double, ToyDefect::retraction_factor>>();
  // The first-order defect of a factor 1 + s is s.
  for (const auto& p : report.failures())
    if (p.name == "first_order") CHECK(p.figure == doctest::Approx(0.01).epsilon(1e-3));
}

TEST_CASE("the suite: a lift off by a sign fails adjointness and gradient") {
  // inverse_derivative compares lift with lift, so the sign cancels there.
  require_failures(report_of<ToySphere<double, ToyDefect::lift_sign>>(), {"adjointness", "gradient"},
                   "ToySphere<double> 6x1");
  require_failures(report_of<ToySphere<float, ToyDefect::lift_sign>>(), {"adjointness", "gradient"},
                   "ToySphere<float> 6x1");
}

TEST_CASE("the suite: a workspace that allocates in retract fails allocations") {
  REQUIRE(counter_installed);
  require_failures(report_of<ToySphere<double, ToyDefect::allocating_retract>>(), {"allocations"},
                   "ToySphere<double> 6x1");
  // Without a counter the property is skipped, and the same workspace passes.
  auto* const counter = geomopt::testing::allocation_counter;
  geomopt::testing::allocation_counter = nullptr;
  const auto report = report_of<ToySphere<double, ToyDefect::allocating_retract>>();
  geomopt::testing::allocation_counter = counter;
  CHECK(report.ok());
  CHECK(report.FullReport().find("allocations (geodesic, recomputed): skipped, no allocation_counter installed") !=
        std::string::npos);
}

TEST_CASE("the suite: each property can fail") {
  using D = ToyDefect;
  const std::string name = "ToySphere<double> 6x1";
  require_failures(report_of<ToySphere<double, D::shape_message>>(), {"shape_errors"}, name);
  require_failures(report_of<ToySphere<double, D::domain_writes>>(), {"domain_error"}, name);
  require_failures(report_of<ToySphere<double, D::frozen_transport>>(), {"section_consistency"}, name);
  require_failures(report_of<ToySphere<double, D::stale_section>>(), {"forget_point"}, name);
  require_failures(report_of<ToySphere<double, D::off_manifold>>(), {"stays_on_manifold"}, name, false);
}

TEST_CASE("the suite: a report lists every property with its figure and bound") {
  const auto report = report_of<ToySphere<double>>();
  CHECK(report.ok());
  CHECK(report.str().empty());
  CHECK(report.manifold == "ToySphere<double> 6x1");
  for (const char* name :
       {"zero_retraction", "stays_on_manifold", "first_order", "tangent_round_trip", "shape_errors", "random_point",
        "project", "adjointness", "gradient", "inverse_round_trip", "inverse_derivative", "domain_error",
        "forget_point", "section_consistency", "allocations"}) {
    CAPTURE(name);
    CHECK(std::any_of(report.properties.begin(), report.properties.end(),
                      [&](const geomopt::testing::Property& p) { return p.name == name && !p.skipped; }));
  }
  CHECK(report.BriefReport().find("ToySphere<double> 6x1: ") == 0);
  MESSAGE(report.FullReport());
}

TEST_CASE("the suite: a Jet scalar runs the properties of retract, to_ambient and check") {
  geomopt::Rng rng(7);
  const auto report = geomopt::testing::check_manifold(ToySphere<JetD>::random_point(rng, 6));
  CHECK(report.ok());
  CHECK(report.manifold == "ToySphere<Jet<double, 2>> 6x1");
  for (const auto& p : report.properties) {
    CAPTURE(report.line(p));
    const bool jet_property = p.name == "zero_retraction" || p.name == "stays_on_manifold" || p.name == "first_order" ||
                              p.name == "tangent_round_trip" || p.name == "shape_errors";
    CHECK(p.skipped != jet_property);
  }
}

TEST_CASE("the suite: options are validated") {
  geomopt::testing::Options options;
  std::string error;
  CHECK(options.IsValid(&error));
  options.directions = 0;
  CHECK_FALSE(options.IsValid(&error));
  CHECK(error.find("directions") != std::string::npos);
  CHECK_THROWS_AS(report_of<ToySphere<double>>(options), std::invalid_argument);
  options = {};
  options.retractions = {geomopt::Retraction::cayley};
  CHECK_THROWS_WITH_AS(report_of<ToySphere<double>>(options), doctest::Contains("ToySphere does not implement cayley"),
                       std::invalid_argument);
  options.retractions = {geomopt::Retraction::second_order};
  options.policies = {geomopt::SectionPolicy::recomputed};
  const auto report = report_of<ToySphere<double>>(options);
  CHECK(report.ok());
  for (const auto& p : report.properties) CHECK(p.context.find("geodesic") == std::string::npos);
}
