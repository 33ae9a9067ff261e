// Lorentz(n) (manifolds/lorentz/lorentz.hpp) through its workspace, against closed forms of the hyperboloid computed
// in long double:
//   - the section is Lorentz-orthonormal and tangent; the exponential map is cosh|c| x + sinh|c| v / |c| and moves
//     by the geodesic distance |c| = 2 asinh(sqrt(<x - y, x - y>_L) / 2) (= acosh(-<x, y>_L), without cancellation);
//   - exp / log round trip; the logarithm's derivative at y = x is the Frobenius left inverse of to_ambient;
//   - lift is a finite difference of a cost;
//   - float stays finite and on the hyperboloid at distances 20 and 60 from the origin, where the Poincare ball's
//     point rounds to the boundary (|p| = 1, conformal factor infinite);
//   - random_point's squared distance to the origin has the chi-square mean n;
//   - lift, to_ambient, retract and inverse_retract allocate nothing; bad shapes and unreachable points throw.
#include <doctest/doctest.h>
#include "../support/count_allocations.hpp"

#include <Eigen/Dense>
#include <cmath>
#include <limits>
#include <string>

#include "geomopt/manifolds/lorentz/lorentz.hpp"

using geomopt::Lorentz;
using geomopt::Retraction;
using geomopt::Rng;
using geomopt::SectionPolicy;
using MatD = Eigen::MatrixXd;
using VecD = Eigen::VectorXd;
using VecL = Eigen::Matrix<long double, Eigen::Dynamic, 1>;

static_assert(geomopt::Manifold<Lorentz<float>>);
static_assert(geomopt::Manifold<Lorentz<double>>);
static_assert(!Lorentz<double>::kCompact);
static_assert(geomopt::default_retraction<Lorentz<float>>() == Retraction::geodesic);
static_assert(!geomopt::supports<Lorentz<double>>(Retraction::cayley));

namespace {

template <class T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;

long double minkowski(const VecL& u, const VecL& v) {
  return -u(0) * v(0) + u.tail(u.size() - 1).dot(v.tail(v.size() - 1));
}

// The geodesic distance, 2 asinh(|x - y|_L / 2).
template <class A, class B>
long double distance(const A& x, const B& y) {
  const VecL d = x.template cast<long double>() - y.template cast<long double>();
  const long double chord = minkowski(d, d);
  return 2 * std::asinh(std::sqrt(std::max(chord, 0.0L)) / 2);
}

VecD gaussian(Rng& rng, Eigen::Index n) {
  std::normal_distribution<double> normal;
  VecD v(n);
  for (Eigen::Index i = 0; i < n; ++i) v(i) = normal(rng);
  return v;
}

// exp from the origin along `direction` by `d`, in T.
template <class T>
Vec<T> at_distance(Eigen::Index n, const VecD& direction, double d) {
  typename Lorentz<T>::Workspace ws(n + 1, 1, SectionPolicy::recomputed, nullptr);
  Vec<T> x = Lorentz<T>(n).value();
  const Vec<T> c = (direction.normalized() * d).cast<T>();
  ws.retract(x.data(), c.data(), Retraction::geodesic);
  return x;
}

}  // namespace

TEST_CASE("Lorentz(4): the boost section is Lorentz-orthonormal and tangent, and exp is the closed form") {
  Rng rng(1);
  Lorentz<double>::Workspace ws(5, 1, SectionPolicy::recomputed, nullptr);
  for (const double from : {0.0, 0.7, 3.0}) {
    const VecD x = at_distance<double>(4, gaussian(rng, 4), from);
    CHECK(distance(VecD(VecD::Unit(5, 0)), x) == doctest::Approx(from).epsilon(1e-12));
    MatD e(5, 4);
    for (Eigen::Index k = 0; k < 4; ++k) {
      const VecD unit = VecD::Unit(4, k);
      VecD u(5);
      ws.to_ambient(x.data(), unit.data(), u.data());
      e.col(k) = u;
    }
    const MatD j = VecD((VecD(5) << -1, 1, 1, 1, 1).finished()).asDiagonal();
    const double scale = std::cosh(from) * std::cosh(from);
    CHECK((e.transpose() * j * e - MatD::Identity(4, 4)).norm() <= 1e-14 * scale);
    CHECK((x.transpose() * j * e).norm() <= 1e-14 * scale);
    for (const double norm : {1e-3, 0.5, 3.0, 10.0}) {
      CAPTURE(from);
      CAPTURE(norm);
      const VecD c = gaussian(rng, 4).normalized() * norm;
      VecD v(5), y = x;
      ws.to_ambient(x.data(), c.data(), v.data());
      ws.retract(y.data(), c.data(), Retraction::geodesic);
      const VecL expected = std::cosh(static_cast<long double>(norm)) * x.cast<long double>() +
                            (std::sinh(static_cast<long double>(norm)) / norm) * v.cast<long double>();
      // Absolute error against the size of the terms, which may cancel.
      const double terms = std::cosh(norm) * (x.norm() + v.norm() / norm);
      CHECK(static_cast<double>((y.cast<long double>() - expected).norm()) <= 4e-15 * terms);
      CHECK(static_cast<double>(distance(x, y)) == doctest::Approx(norm).epsilon(1e-8));
      CHECK(ws.check(y.data()) <= 1e-15);
    }
  }
}

TEST_CASE_TEMPLATE("Lorentz(6): exp and log round trip", T, float, double) {
  Rng rng(2);
  const double tol = std::is_same_v<T, float> ? 1e-4 : 1e-11;
  typename Lorentz<T>::Workspace ws(7, 1, SectionPolicy::recomputed, nullptr);
  for (int trial = 0; trial < 5; ++trial) {
    const Vec<T> x = Lorentz<T>::random_point(rng, 6).value();
    for (const double norm : {1e-3, 0.3, 2.0, 5.0}) {
      CAPTURE(norm);
      const Vec<T> c = (gaussian(rng, 6).normalized() * norm).cast<T>();
      Vec<T> y = x, back(6);
      ws.retract(y.data(), c.data(), Retraction::geodesic);
      ws.inverse_retract(x.data(), y.data(), back.data(), Retraction::geodesic);
      CHECK(static_cast<double>((back - c).norm()) <=
            tol * std::max(1.0, norm) * static_cast<double>(x(0)) * std::cosh(norm));
      CHECK(static_cast<double>(back.norm()) == doctest::Approx(static_cast<double>(distance(x, y))).epsilon(tol * 10));
    }
    Vec<T> zero(6);
    ws.inverse_retract(x.data(), x.data(), zero.data(), Retraction::geodesic);
    CHECK(static_cast<double>(zero.norm()) <= tol);
  }
}

TEST_CASE("Lorentz(3): the logarithm's derivative at y = x is the Frobenius left inverse of to_ambient") {
  Rng rng(3);
  Lorentz<double>::Workspace ws(4, 1, SectionPolicy::recomputed, nullptr);
  const VecD x = at_distance<double>(3, gaussian(rng, 3), 1.5);
  MatD a(4, 3);
  for (Eigen::Index k = 0; k < 3; ++k) {
    const VecD unit = VecD::Unit(3, k);
    VecD u(4);
    ws.to_ambient(x.data(), unit.data(), u.data());
    a.col(k) = u;
  }
  const MatD left_inverse = (a.transpose() * a).ldlt().solve(a.transpose());
  for (int trial = 0; trial < 4; ++trial) {
    // trial 0 is the Euclidean normal J x, which the derivative annihilates.
    VecD delta = trial == 0 ? VecD((VecD(4) << -x(0), x(1), x(2), x(3)).finished()) : gaussian(rng, 4);
    const double h = 1e-6;
    const VecD plus = x + h * delta, minus = x - h * delta;
    VecD cp(3), cm(3);
    ws.inverse_retract(x.data(), plus.data(), cp.data(), Retraction::geodesic);
    ws.inverse_retract(x.data(), minus.data(), cm.data(), Retraction::geodesic);
    const VecD derivative = (cp - cm) / (2 * h);
    CHECK((derivative - left_inverse * delta).norm() <= 1e-7 * delta.norm() * x.norm());
    if (trial == 0) CHECK(derivative.norm() <= 1e-7 * delta.norm());
  }
}

TEST_CASE("Lorentz(5): lift equals a finite difference of a cost along each coordinate") {
  Rng rng(4);
  Lorentz<double>::Workspace ws(6, 1, SectionPolicy::recomputed, nullptr);
  const VecD a = gaussian(rng, 6);
  // f(y) = a . y + |y|^4 / 4, with Euclidean gradient a + |y|^2 y.
  const auto cost = [&](const VecD& y) { return a.dot(y) + y.squaredNorm() * y.squaredNorm() / 4; };
  for (const double from : {0.0, 1.0, 2.5}) {
    const VecD x = at_distance<double>(5, gaussian(rng, 5), from);
    const VecD g = a + x.squaredNorm() * x;
    VecD c(5);
    ws.lift(x.data(), g.data(), c.data());
    for (Eigen::Index k = 0; k < 5; ++k) {
      const double h = 1e-6;
      VecD e = VecD::Zero(5);
      VecD plus = x, minus = x;
      e(k) = h;
      ws.retract(plus.data(), e.data(), Retraction::geodesic);
      e(k) = -h;
      ws.retract(minus.data(), e.data(), Retraction::geodesic);
      CHECK((cost(plus) - cost(minus)) / (2 * h) == doctest::Approx(c(k)).epsilon(1e-6));
    }
  }
}

TEST_CASE("Lorentz<float>: finite and on the hyperboloid at distances 20 and 60, where the Poincare ball is not") {
  Rng rng(5);
  Lorentz<float>::Workspace ws(4, 1, SectionPolicy::recomputed, nullptr);
  for (const double d : {20.0, 60.0}) {
    CAPTURE(d);
    const VecD direction = gaussian(rng, 3);
    Vec<float> x = at_distance<float>(3, direction, d);
    REQUIRE(x.allFinite());
    CHECK(ws.check(x.data()) <= 1e-6f);
    // acosh(x_0) is the distance to the origin.
    CHECK(std::acosh(static_cast<double>(x(0))) == doctest::Approx(d).epsilon(1e-6));
    // The spatial direction is kept.
    CHECK((x.tail(3).cast<double>().normalized() - direction.normalized()).norm() <= 1e-6);
    // The Poincare ball's point p = x_b / (1 + x_0), formed in float, is on the boundary.
    const Vec<float> p = x.tail(3) / (1.0f + x(0));
    const float boundary = 1.0f - p.squaredNorm();
    CHECK(boundary <= 0.0f);
    CHECK(!std::isfinite(2.0f / std::max(boundary, 0.0f)));
    // Steps from there stay on the hyperboloid; a step back towards the origin lowers x_0 by the closed form.
    Vec<float> c = (gaussian(rng, 3).normalized() * 1.0).cast<float>();
    Vec<float> y = x;
    ws.retract(y.data(), c.data(), Retraction::geodesic);
    REQUIRE(y.allFinite());
    CHECK(ws.check(y.data()) <= 1e-6f);
    const Vec<float> back = (-direction.normalized() * 1.0).cast<float>();
    // The coordinates of the radial direction at x are those of the direction at the origin (B_x (0, u) is the
    // geodesic's velocity): the step by -u goes back towards the origin.
    y = x;
    ws.retract(y.data(), back.data(), Retraction::geodesic);
    CHECK(std::acosh(static_cast<double>(y(0))) == doctest::Approx(d - 1).epsilon(1e-5));
  }
}

TEST_CASE("Lorentz(3): random_point is the wrapped normal at the origin, squared distance of mean 3") {
  Rng rng(6);
  double sum = 0;
  const int samples = 4000;
  Lorentz<double>::Workspace ws(4, 1, SectionPolicy::recomputed, nullptr);
  for (int i = 0; i < samples; ++i) {
    const auto x = Lorentz<double>::random_point(rng, 3);
    CHECK(ws.check(x.value().data()) <= 1e-15);
    const double d = std::acosh(x.value()(0));
    sum += d * d;
  }
  // Chi-square with 3 degrees of freedom: mean 3, standard deviation of the mean sqrt(6 / 4000) = 0.039.
  CHECK(sum / samples == doctest::Approx(3).epsilon(0.06));
}

TEST_CASE_TEMPLATE("Lorentz: lift, to_ambient, retract and inverse_retract allocate nothing", T, float, double) {
  Rng rng(7);
  const auto x = Lorentz<T>::random_point(rng, 16);
  typename Lorentz<T>::Workspace ws(17, 1, SectionPolicy::transported, x.value().data());
  Vec<T> y = x.value(), u(17), g = Vec<T>::Random(17), c(16), back(16);
  const auto allocations = [](auto&& call) {
    alloc_count::Window window;
    call();
    return window.count();
  };
  CHECK(allocations([&] { ws.lift(y.data(), g.data(), c.data()); }) == 0);
  CHECK(allocations([&] { ws.to_ambient(y.data(), c.data(), u.data()); }) == 0);
  c *= T(0.5) / c.norm();
  CHECK(allocations([&] { ws.retract(y.data(), c.data(), Retraction::geodesic); }) == 0);
  CHECK(allocations([&] { ws.inverse_retract(x.value().data(), y.data(), back.data(), Retraction::geodesic); }) == 0);
  CHECK((back - c).norm() <= T(1e-3));
  CHECK(allocations([&] { (void)ws.check(y.data()); }) == 0);
  CHECK(allocations([&] { ws.project(y.data()); }) == 0);
}

TEST_CASE("Lorentz: bad shapes and unreachable points throw, naming the manifold") {
  CHECK_THROWS_WITH_AS(Lorentz<double>(-1), doctest::Contains("Lorentz"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(Lorentz<double>::Workspace(3, 2, SectionPolicy::recomputed, nullptr), doctest::Contains("3x2"),
                       std::invalid_argument);
  Lorentz<double>::Workspace ws(3, 1, SectionPolicy::recomputed, nullptr);
  const VecD x = Lorentz<double>(2).value();
  VecD c = VecD::Constant(2, 7.0);
  const VecD outside = (VecD(3) << 1, 2, 0).finished();
  CHECK_THROWS_AS(ws.inverse_retract(x.data(), outside.data(), c.data(), Retraction::geodesic), std::domain_error);
  const VecD lower = (VecD(3) << -2, 0, 0).finished();
  CHECK_THROWS_AS(ws.inverse_retract(x.data(), lower.data(), c.data(), Retraction::geodesic), std::domain_error);
  CHECK_THROWS_WITH_AS(ws.inverse_retract(x.data(), x.data(), c.data(), Retraction::cayley),
                       doctest::Contains("Lorentz"), std::invalid_argument);
  CHECK(c == VecD::Constant(2, 7.0));
  CHECK(geomopt::ptree_type_name(Lorentz<float>(3)) == "Lorentz");
}
