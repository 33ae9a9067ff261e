// Ceres's own invariant checks (EXPECT_THAT_MANIFOLD_INVARIANTS_HOLD, <ceres/manifold_test_utils.h>) on every
// adapter, at several random points, tangent vectors and targets, small and large, both retractions; also inside
// ceres::ProductManifold. Plus(x, 0) = x, Minus(x, x) = 0, Minus(Plus(x, delta), x) = delta,
// Plus(x, Minus(y, x)) = y, both Jacobians against Ridders' numerical derivatives, MinusJacobian PlusJacobian = I and
// RightMultiplyByPlusJacobian against the Jacobian. The only test file on GoogleTest: the checks are GoogleMock
// matchers.
#include <geomopt/ceres.hpp>

#include <ceres/manifold_test_utils.h>
#include <ceres/product_manifold.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <stdexcept>
#include <string>

#include "every_manifold.hpp"
#include "sanitized.hpp"
#include "toy_manifold.hpp"

namespace {

using ceres::Vector;
using geomopt::Retraction;

constexpr double kTolerance = 1e-9;
constexpr int kDraws = 3;

// Under AddressSanitizer at -O0 the numerical Jacobians of Minus (Ridders, every ambient direction) run about 100
// times slower; there the large sizes take one draw and the Cayley retraction only. The Release build runs them all.
constexpr bool kSanitized = test_support::sanitized;
int draws(bool large) { return large && kSanitized ? 1 : kDraws; }
bool skipped(bool large, geomopt::Retraction r) { return large && kSanitized && r == geomopt::Retraction::geodesic; }

Vector as_vector(const Eigen::MatrixXd& m) { return Eigen::Map<const Vector>(m.data(), m.size()); }

// The points handed to the checks: x random on the manifold, delta random with norm 0.2 to 0.8, and y random on the
// manifold, or, when `near` (the geodesic Stiefel family, the second-order SPD retraction), a step of norm 0.8 from
// x: those inverses are exact within a reach, not at any distance.
// One function, not a template: Ceres's matchers are instantiated once for the whole file.
void check_invariants(const ceres::Manifold& manifold, bool near, const std::function<Vector(geomopt::Rng&)>& draw,
                      geomopt::Rng& rng, const std::string& what, int count = kDraws) {
  using namespace ceres;  // the matchers of EXPECT_THAT_MANIFOLD_INVARIANTS_HOLD are unqualified
  std::normal_distribution<double> normal;
  auto random_tangent = [&](double norm) {
    Vector v(manifold.TangentSize());
    for (Eigen::Index k = 0; k < v.size(); ++k) v[k] = normal(rng);
    return Vector(v * (norm / v.norm()));
  };
  for (int i = 0; i < count; ++i) {
    SCOPED_TRACE(what + ", draw " + std::to_string(i));
    const Vector x = draw(rng);
    const Vector delta = random_tangent(0.2 + 0.3 * i);
    Vector y = draw(rng);
    if (near) {
      const Vector step = random_tangent(0.8);
      ASSERT_TRUE(manifold.Plus(x.data(), step.data(), y.data()));
    }
    EXPECT_THAT_MANIFOLD_INVARIANTS_HOLD(manifold, x, delta, y, kTolerance);
  }
}

// The same for a drawer of points of M.
template <class M, class Draw>
void check_invariants(const ceres::Manifold& manifold, bool near, Draw draw, geomopt::Rng& rng, const std::string& what,
                      int count = kDraws) {
  check_invariants(
      manifold, near, [&](geomopt::Rng& g) { return as_vector(draw(g).value()); }, rng, what, count);
}

constexpr Retraction kBoth[] = {Retraction::cayley, Retraction::geodesic};

std::string name(Retraction r) { return r == Retraction::cayley ? "cayley" : "geodesic"; }

// Every manifold of the list (tests/support/every_manifold.hpp) whose block is a point, by every retraction it has,
// through CeresManifold<M>(dims..., r): a manifold added to the list gets Ceres's invariants with no test of its own.
// The targets are near x (a step of norm 0.8), where every retraction of the contract has its exact inverse.
template <class M, class... D>
void check_listed(const char* name, geomopt::Rng& rng, D... dims) {
  if constexpr (geomopt::ceres_block_is_point<M>) {
    for (Retraction r : M::kRetractions)
      check_invariants<M>(
          geomopt::CeresManifold<M>(dims..., r), true, [&](geomopt::Rng& g) { return M::random_point(g, dims...); },
          rng, std::string(name) + " " + geomopt::retraction_name(r));
  }
}

TEST(CeresManifold, EveryListedManifold) {
  geomopt::Rng rng(10);
#define GEOMOPT_CHECK_LISTED(Name, ...) check_listed<geomopt::Name<double>>(#Name, rng, __VA_ARGS__);
  GEOMOPT_EVERY_MANIFOLD(GEOMOPT_CHECK_LISTED)
#undef GEOMOPT_CHECK_LISTED
}

TEST(CeresManifold, Stiefel) {
  geomopt::Rng rng(11);
  using M = geomopt::Stiefel<double>;
  // N - n > n, N - n < n, a tall frame and a large one.
  for (auto [rows, cols] : {std::pair{5, 2}, std::pair{4, 3}, std::pair{12, 1}, std::pair{40, 6}})
    for (Retraction r : kBoth) {
      const int N = rows, n = cols;  // clang 14 cannot capture structured bindings in a lambda
      const bool large = N == 40;
      if (skipped(large, r)) continue;
      check_invariants<M>(
          geomopt::CeresManifold<M>(N, n, r), r == Retraction::geodesic,
          [&](geomopt::Rng& g) { return M::random_point(g, N, n); }, rng,
          "St(" + std::to_string(N) + ", " + std::to_string(n) + ") " + name(r), draws(large));
    }
}

TEST(CeresManifold, Sphere) {
  geomopt::Rng rng(12);
  using M = geomopt::Sphere<double>;
  for (int N : {2, 3, 50})
    for (Retraction r : kBoth)
      check_invariants<M>(
          geomopt::CeresManifold<M>(N, r), r == Retraction::geodesic,
          [&](geomopt::Rng& g) { return M::random_point(g, N); }, rng, "Sphere(" + std::to_string(N) + ") " + name(r));
}

// The Sphere adapter's Plus and RightMultiplyByPlusJacobian are O(N) closed forms of the one-reflector section; they
// must give the general Stiefel-family step (geomopt::retract, the section's lambda^T) to rounding.
TEST(CeresManifold, SphereClosedFormsMatchTheGeneralStep) {
  geomopt::Rng rng(16);
  using M = geomopt::Sphere<double>;
  std::normal_distribution<double> normal;
  for (int N : {1, 2, 3, 50})
    for (Retraction r : kBoth)
      for (int i = 0; i < kDraws; ++i) {
        SCOPED_TRACE("Sphere(" + std::to_string(N) + ") " + name(r) + ", draw " + std::to_string(i));
        const geomopt::CeresManifold<M> manifold(N, r);
        M x = M::random_point(rng, N);
        if (i == 2) x.value() = -Eigen::VectorXd::Unit(N, 0);  // the reflector's special case
        Vector delta(N - 1), g(2 * N);
        for (Eigen::Index k = 0; k < delta.size(); ++k) delta[k] = (0.3 + i) * normal(rng);
        for (Eigen::Index k = 0; k < g.size(); ++k) g[k] = normal(rng);

        Vector fast(N);
        ASSERT_TRUE(manifold.Plus(x.value().data(), delta.data(), fast.data()));
        M general = x;
        geomopt::retract(general, M::make_tangent(Eigen::MatrixXd(), Eigen::MatrixXd(delta)), r);
        EXPECT_LE((fast - general.value()).norm(), 1e-14 * (1 + delta.norm()));

        Vector rows(2 * (N - 1));
        ASSERT_TRUE(manifold.RightMultiplyByPlusJacobian(x.value().data(), 2, g.data(), rows.data()));
        const Eigen::MatrixXd z =
            geomopt::make_section(x).apply_transpose(Eigen::Map<const Eigen::MatrixXd>(g.data(), N, 2));
        for (int row = 0; row < 2; ++row)
          EXPECT_LE((rows.segment(row * (N - 1), N - 1) - z.col(row).tail(N - 1)).norm(), 1e-14 * g.norm());
      }
}

TEST(CeresManifold, SpecialOrthogonal) {
  geomopt::Rng rng(13);
  using M = geomopt::SpecialOrthogonal<double>;
  for (int n : {2, 3, 12})
    for (Retraction r : kBoth) {
      const bool large = n == 12;
      if (skipped(large, r)) continue;
      check_invariants<M>(
          geomopt::CeresManifold<M>(n, r), r == Retraction::geodesic,
          [&](geomopt::Rng& g) { return M::random_point(g, n); }, rng, "SO(" + std::to_string(n) + ") " + name(r),
          draws(large));
    }
}

TEST(CeresManifold, SPD) {
  geomopt::Rng rng(14);
  using M = geomopt::SPD<double>;
  for (int n : {1, 3, 10})
    for (Retraction r : kBoth)
      check_invariants<M>(
          geomopt::CeresManifold<M>(n, r), r == Retraction::cayley,
          [&](geomopt::Rng& g) { return M::random_point(g, n); }, rng, "SPD(" + std::to_string(n) + ") " + name(r),
          draws(n == 10));
}

TEST(CeresManifold, SymmetricMatrix) {
  geomopt::Rng rng(15);
  for (int n : {1, 4, 12}) {
    const geomopt::CeresManifold<geomopt::SymmetricMatrix<double>> manifold(n);
    for (int i = 0; i < kDraws; ++i) {
      using namespace ceres;
      SCOPED_TRACE("symmetric " + std::to_string(n) + ", draw " + std::to_string(i));
      const Eigen::MatrixXd a = Eigen::MatrixXd::Random(n, n), b = Eigen::MatrixXd::Random(n, n);
      const Vector x = as_vector(a + a.transpose());
      const Vector y = as_vector(b + b.transpose());
      const Vector delta = Vector::Random(manifold.TangentSize());
      EXPECT_THAT_MANIFOLD_INVARIANTS_HOLD(manifold, x, delta, y, kTolerance);
    }
  }
}

// A manifold written only from the contract (tests/support/toy_manifold.hpp) through the one generic adapter: the
// Jacobians come from its to_ambient and lift, Minus from its inverse_retract.
TEST(CeresManifold, ContractManifold) {
  geomopt::Rng rng(17);
  using M = toy::Sphere<double>;
  for (int N : {2, 3, 30})
    for (Retraction r : {Retraction::geodesic, Retraction::second_order}) {
      auto draw = [N](geomopt::Rng& g) {
        M x(N);
        M::Workspace(N, 1, geomopt::SectionPolicy::recomputed, nullptr).random_point(g, x.value().data());
        return x;
      };
      // The projection's inverse reaches only x^T y > 0: its targets are steps from x.
      check_invariants<M>(geomopt::CeresManifold<M>(N, r), r == Retraction::second_order, draw, rng,
                          "ToySphere(" + std::to_string(N) + ") " + std::to_string(static_cast<int>(r)));
    }
}

TEST(CeresManifold, ContractManifoldConstructorsAndFailures) {
  using M = toy::Sphere<double>;
  const geomopt::CeresManifold<M> by_dims(4), by_point(M(4), Retraction::second_order);
  EXPECT_EQ(by_dims.AmbientSize(), 4);
  EXPECT_EQ(by_dims.TangentSize(), 3);
  EXPECT_EQ(by_dims.kernel().retraction(), Retraction::geodesic);  // the manifold's default
  EXPECT_EQ(by_point.kernel().retraction(), Retraction::second_order);
  try {
    geomopt::CeresManifold<M> cayley(4, Retraction::cayley);
    ADD_FAILURE() << "a retraction the manifold lacks was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("ToySphere has no cayley retraction; it supports geodesic, second_order"));
  }
  EXPECT_THROW(geomopt::CeresManifold<M>(0), std::invalid_argument);
  // Ceres sizes blocks with int: refused before anything is allocated for the shape.
  try {
    geomopt::CeresManifold<M> huge(geomopt::detail::CeresShape{3000000000, 1}, Retraction::geodesic);
    ADD_FAILURE() << "a block larger than int was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("CeresManifold<ToySphere>: a 3000000000x1 point"));
  }
  // A failed Plus or Minus returns false and writes nothing.
  const Vector x = Vector::Unit(4, 0), y = -x;
  Vector delta = Vector::Zero(3), out = Vector::Constant(4, 7.0), minus = Vector::Constant(3, 7.0);
  delta[1] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(by_dims.Plus(x.data(), delta.data(), out.data()));
  EXPECT_EQ(out, Vector::Constant(4, 7.0));
  EXPECT_FALSE(by_dims.Minus(y.data(), x.data(), minus.data()));
  EXPECT_EQ(minus, Vector::Constant(3, 7.0));
}

#if defined(GEOMOPT_HAS_CERES_LOCAL_PARAMETERIZATION)
// The older interface is the same adapter: its Plus and Jacobians are CeresManifold's, bit for bit.
TEST(CeresLocalParameterization, ContractManifold) {
  using M = toy::Sphere<double>;
  geomopt::Rng rng(18);
  const geomopt::CeresManifold<M> manifold(5);
  const geomopt::CeresLocalParameterization<M> local(5);
  ASSERT_EQ(local.GlobalSize(), 5);
  ASSERT_EQ(local.LocalSize(), 4);
  M x(5);
  M::Workspace(5, 1, geomopt::SectionPolicy::recomputed, nullptr).random_point(rng, x.value().data());
  const Vector delta = 0.3 * Vector::Random(4), g = Vector::Random(10);
  Vector a(5), b(5), ja(20), jb(20), ra(8), rb(8);
  ASSERT_TRUE(manifold.Plus(x.value().data(), delta.data(), a.data()));
  ASSERT_TRUE(local.Plus(x.value().data(), delta.data(), b.data()));
  EXPECT_EQ(a, b);
  ASSERT_TRUE(manifold.PlusJacobian(x.value().data(), ja.data()));
  ASSERT_TRUE(local.ComputeJacobian(x.value().data(), jb.data()));
  EXPECT_EQ(ja, jb);
  ASSERT_TRUE(manifold.RightMultiplyByPlusJacobian(x.value().data(), 2, g.data(), ra.data()));
  ASSERT_TRUE(local.MultiplyByJacobian(x.value().data(), 2, g.data(), rb.data()));
  EXPECT_EQ(ra, rb);
}
#endif

// The adapters are copyable values, as ProductManifold needs: SO(3) x Sphere(4) x R^2, one parameter block.
TEST(CeresManifold, InsideProductManifold) {
  using namespace ceres;
  geomopt::Rng rng(16);
  ProductManifold<geomopt::CeresManifold<geomopt::SpecialOrthogonal<double>>,
                  geomopt::CeresManifold<geomopt::Sphere<double>>, EuclideanManifold<2>>
      manifold(geomopt::CeresManifold<geomopt::SpecialOrthogonal<double>>(3),
               geomopt::CeresManifold<geomopt::Sphere<double>>(4), EuclideanManifold<2>());
  ASSERT_EQ(manifold.AmbientSize(), 9 + 4 + 2);
  ASSERT_EQ(manifold.TangentSize(), 3 + 3 + 2);
  for (int i = 0; i < kDraws; ++i) {
    SCOPED_TRACE("draw " + std::to_string(i));
    auto point = [&] {
      Vector v(15);
      v << as_vector(geomopt::SpecialOrthogonal<double>::random_point(rng, 3).value()),
          geomopt::Sphere<double>::random_point(rng, 4).value(), Vector::Random(2);
      return v;
    };
    const Vector x = point(), y = point();
    const Vector delta = 0.5 * Vector::Random(8);
    EXPECT_THAT_MANIFOLD_INVARIANTS_HOLD(manifold, x, delta, y, kTolerance);
  }
}

}  // namespace
