// Oblique(N, n) (manifolds/oblique/oblique.hpp) through its workspace, against independent references:
//   - Oblique(N, 1) agrees with the allocating Sphere(N) API (lift, to_ambient, both retractions) to rounding;
//   - the retractions against dense matrix functions of W = u x^T - x u^T per column (exp(W) x, the Cayley transform
//     (I - W/2)^-1 (I + W/2) x, Eigen's MatrixFunctions and LU), for norms 1e-3 to 60;
//   - to_ambient(lift(G)) is the Euclidean projection G_j - x_j x_j^T G_j, lift is a finite difference of a cost,
//     coordinates are orthonormal;
//   - unit columns after steps of norm 0.1 to 1e30 in float; inverse retractions round trip, annihilate the normal
//     direction x and reject an antipodal column;
//   - the transported frames stay orthogonal with first column the point, and move the point as the reflectors do;
//   - lift, to_ambient, retract and inverse_retract allocate nothing; bad shapes throw naming the manifold.
#include <doctest/doctest.h>
#include "../support/count_allocations.hpp"

#include <Eigen/Dense>
#include <cmath>
#include <string>
#include <unsupported/Eigen/MatrixFunctions>

#include "geomopt/manifolds/oblique/oblique.hpp"
#include "geomopt/manifolds/stiefel.hpp"

using geomopt::Oblique;
using geomopt::Retraction;
using geomopt::Rng;
using geomopt::SectionPolicy;
using MatD = Eigen::MatrixXd;
using VecD = Eigen::VectorXd;

static_assert(geomopt::Manifold<Oblique<float>>);
static_assert(geomopt::Manifold<Oblique<double>>);
static_assert(Oblique<double>::kCompact);
static_assert(geomopt::default_retraction<Oblique<double>>() == Retraction::cayley);
static_assert(geomopt::supports<Oblique<float>>(Retraction::geodesic));
static_assert(!geomopt::supports<Oblique<float>>(Retraction::second_order));

namespace {

template <class T>
double tol() {
  return std::is_same_v<T, float> ? 2e-5 : 1e-12;
}

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
template <class T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;

VecD gaussian(Rng& rng, Eigen::Index n) { return geomopt::detail::gaussian<double>(rng, n, 1).col(0); }

// The reference retraction of one column x along the ambient tangent u (x^T u = 0), by dense matrix functions.
VecD reference_step(const VecD& x, const VecD& u, Retraction r) {
  const Eigen::Index N = x.size();
  const MatD w = u * x.transpose() - x * u.transpose();
  if (r == Retraction::geodesic) return w.exp() * x;
  const MatD i = MatD::Identity(N, N);
  return (i - w / 2).partialPivLu().solve((i + w / 2) * x);
}

}  // namespace

TEST_CASE_TEMPLATE("Oblique(N, 1) agrees with the allocating Sphere(N) API", T, float, double) {
  Rng rng(1);
  for (const Eigen::Index N : {1, 2, 5, 17}) {
    CAPTURE(N);
    const auto s = geomopt::Sphere<T>::random_point(rng, N);
    Oblique<T> x{Mat<T>(s.value())};
    typename Oblique<T>::Workspace ws(N, 1, SectionPolicy::recomputed, nullptr);
    REQUIRE(ws.tangent_size() == N - 1);
    const Mat<T> g = gaussian(rng, N).cast<T>();
    Vec<T> c(N - 1);
    ws.lift(x.value().data(), g.data(), c.data());
    const auto xi = geomopt::lift(s, g);
    CHECK((c - Eigen::Map<const Vec<T>>(xi.B().data(), N - 1)).norm() <= tol<T>());
    Mat<T> u(N, 1);
    ws.to_ambient(x.value().data(), c.data(), u.data());
    CHECK((u - geomopt::to_ambient(s, xi)).norm() <= tol<T>());
    for (const Retraction r : {Retraction::cayley, Retraction::geodesic}) {
      for (const double norm : {0.3, 2.0, 7.0}) {
        const Vec<T> step = (gaussian(rng, N - 1).normalized() * norm).cast<T>();
        if (N == 1) continue;
        auto sphere = s;
        geomopt::retract(sphere, typename geomopt::Sphere<T>::Tangent(geomopt::SkewSymMatrix<T>(1), Mat<T>(step)), r);
        Oblique<T> y = x;
        ws.forget_point();
        ws.retract(y.value().data(), step.data(), r);
        CHECK((y.value().col(0) - sphere.value()).norm() <= 4 * tol<T>());
      }
    }
  }
}

TEST_CASE("Oblique(6, 4): retractions equal exp(W) x and the Cayley transform per column, W = u x^T - x u^T") {
  Rng rng(2);
  const auto x = Oblique<double>::random_point(rng, 6, 4);
  CHECK((x.value().colwise().norm().array() - 1).abs().maxCoeff() < 1e-15);
  Oblique<double>::Workspace ws(6, 4, SectionPolicy::recomputed, nullptr);
  for (const double norm : {1e-3, 0.1, 1.0, 3.0, 10.0, 60.0}) {
    for (const Retraction r : {Retraction::cayley, Retraction::geodesic}) {
      CAPTURE(norm);
      CAPTURE(static_cast<int>(r));
      const VecD c = gaussian(rng, ws.tangent_size()).normalized() * norm;
      MatD u(6, 4);
      ws.to_ambient(x.value().data(), c.data(), u.data());
      MatD y = x.value();
      ws.forget_point();
      ws.retract(y.data(), c.data(), r);
      for (Eigen::Index j = 0; j < 4; ++j)
        CHECK((y.col(j) - reference_step(x.value().col(j), u.col(j), r)).norm() <= 1e-12 * std::max(1.0, norm));
    }
  }
}

TEST_CASE(
    "Oblique(5, 3): lift is the projection of G, its coordinates orthonormal, and a finite difference of a cost") {
  Rng rng(3);
  const auto x = Oblique<double>::random_point(rng, 5, 3);
  Oblique<double>::Workspace ws(5, 3, SectionPolicy::recomputed, nullptr);
  const MatD a = MatD::Random(5, 3);
  // f(X) = sum_ij a_ij X_ij^3 / 3 + tr(A^T X), with Euclidean gradient a .* X.^2 + A.
  const auto cost = [&](const MatD& y) {
    return (a.array() * y.array().cube()).sum() / 3 + (a.array() * y.array()).sum();
  };
  const MatD g = (a.array() * x.value().array().square()).matrix() + a;
  VecD c(ws.tangent_size());
  ws.lift(x.value().data(), g.data(), c.data());
  MatD u(5, 3);
  ws.to_ambient(x.value().data(), c.data(), u.data());
  MatD projected = g;
  for (Eigen::Index j = 0; j < 3; ++j) projected.col(j) -= x.value().col(j) * x.value().col(j).dot(g.col(j));
  CHECK((u - projected).norm() <= 1e-13);
  CHECK(c.norm() == doctest::Approx(projected.norm()).epsilon(1e-13));
  for (Eigen::Index k = 0; k < ws.tangent_size(); ++k) {
    VecD e = VecD::Zero(ws.tangent_size());
    const double h = 1e-5;
    e(k) = h;
    MatD plus = x.value(), minus = x.value();
    ws.retract(plus.data(), e.data(), Retraction::geodesic);
    e(k) = -h;
    ws.retract(minus.data(), e.data(), Retraction::geodesic);
    CHECK((cost(plus) - cost(minus)) / (2 * h) == doctest::Approx(c(k)).epsilon(1e-8));
    // Orthonormal coordinates: the ambient image of a unit coordinate vector is a unit tangent vector.
    e(k) = 1;
    MatD ek(5, 3);
    ws.to_ambient(x.value().data(), e.data(), ek.data());
    CHECK(ek.norm() == doctest::Approx(1).epsilon(1e-14));
    CHECK(std::abs((ek.transpose() * x.value()).diagonal().sum()) < 1e-14);
  }
}

TEST_CASE_TEMPLATE("Oblique(20, 3): unit columns after steps of any finite norm, both policies", T, float, double) {
  Rng rng(4);
  const auto x = Oblique<T>::random_point(rng, 20, 3);
  for (const SectionPolicy policy : {SectionPolicy::recomputed, SectionPolicy::transported}) {
    typename Oblique<T>::Workspace ws(20, 3, policy, x.value().data());
    Mat<T> y = x.value();
    for (const double norm : {0.1, 1.0, 10.0, 60.0, 1e6, 1e30}) {
      for (const Retraction r : {Retraction::cayley, Retraction::geodesic}) {
        CAPTURE(norm);
        const Vec<T> c = (gaussian(rng, ws.tangent_size()).normalized() * norm).template cast<T>();
        ws.retract(y.data(), c.data(), r);
        REQUIRE(y.allFinite());
        CHECK(ws.check(y.data()) <= T(4 * tol<T>()));
      }
    }
  }
}

TEST_CASE_TEMPLATE("Oblique(7, 4): inverse retractions round trip and annihilate the normal direction", T, float,
                   double) {
  Rng rng(5);
  const auto x = Oblique<T>::random_point(rng, 7, 4);
  for (const SectionPolicy policy : {SectionPolicy::recomputed, SectionPolicy::transported}) {
    typename Oblique<T>::Workspace ws(7, 4, policy, x.value().data());
    for (const Retraction r : {Retraction::cayley, Retraction::geodesic}) {
      // Geodesic: within the injectivity radius pi per column (each column's norm is at most the total).
      for (const double norm : {1e-4, 0.5, 2.0, 3.0}) {
        CAPTURE(norm);
        const Vec<T> c = (gaussian(rng, ws.tangent_size()).normalized() * norm).template cast<T>();
        Mat<T> y = x.value();
        ws.retract(y.data(), c.data(), r);
        Vec<T> back(ws.tangent_size());
        // The transported section has moved with y: invert from there, towards x.
        const Mat<T>& from = policy == SectionPolicy::transported ? y : x.value();
        const Mat<T>& to = policy == SectionPolicy::transported ? x.value() : y;
        ws.inverse_retract(from.data(), to.data(), back.data(), r);
        if (policy == SectionPolicy::recomputed) {
          CHECK((back - c).norm() <= 10 * tol<T>() * std::max(1.0, norm));
        } else {
          Mat<T> z = y;
          ws.retract(z.data(), back.data(), r);
          CHECK((z - x.value()).norm() <= 10 * tol<T>() * std::max(1.0, norm));
        }
      }
    }
    if (policy == SectionPolicy::transported) continue;
    // y = x + t x (normal) and y = x + t u (tangent): c = 0 and c = t c_u to first order.
    const Vec<T> cu = gaussian(rng, ws.tangent_size()).template cast<T>();
    Mat<T> u(7, 4);
    ws.to_ambient(x.value().data(), cu.data(), u.data());
    for (const Retraction r : {Retraction::cayley, Retraction::geodesic}) {
      const T t = T(1e-3);
      Vec<T> c(ws.tangent_size());
      const Mat<T> normal = x.value() * (1 + t);
      ws.inverse_retract(x.value().data(), normal.data(), c.data(), r);
      CHECK(c.norm() <= tol<T>());
      const Mat<T> tangent = x.value() + t * u;
      ws.inverse_retract(x.value().data(), tangent.data(), c.data(), r);
      CHECK((c / t - cu).norm() <= 1e-2 * cu.norm());
    }
    Mat<T> antipodal = x.value();
    antipodal.col(2) *= T(-1);
    Vec<T> c = Vec<T>::Zero(ws.tangent_size());
    CHECK_THROWS_AS(ws.inverse_retract(x.value().data(), antipodal.data(), c.data(), Retraction::cayley),
                    std::domain_error);
  }
}

TEST_CASE("Oblique(9, 3): the transported frames stay orthogonal, start at the reflectors, and carry the point") {
  Rng rng(6);
  const auto x = Oblique<double>::random_point(rng, 9, 3);
  Oblique<double>::Workspace moved(9, 3, SectionPolicy::transported, x.value().data());
  Oblique<double>::Workspace rebuilt(9, 3, SectionPolicy::recomputed, nullptr);
  REQUIRE(moved.section_rows() == 9);
  REQUIRE(moved.section_cols() == 27);
  CHECK(rebuilt.section_data() == nullptr);
  MatD y = x.value(), z = x.value();
  // At the start the frames are the reflectors: the same coordinates as the recomputed section.
  const MatD g = MatD::Random(9, 3);
  VecD c1(moved.tangent_size()), c2(moved.tangent_size());
  moved.lift(y.data(), g.data(), c1.data());
  rebuilt.lift(z.data(), g.data(), c2.data());
  CHECK((c1 - c2).norm() < 1e-14);
  for (int step = 0; step < 20; ++step) {
    const VecD c = gaussian(rng, moved.tangent_size()) * 0.7;
    // The same ambient step from both sections: the points agree.
    MatD u(9, 3);
    moved.to_ambient(y.data(), c.data(), u.data());
    VecD c_rebuilt(moved.tangent_size());
    rebuilt.lift(z.data(), u.data(), c_rebuilt.data());
    moved.retract(y.data(), c.data(), Retraction::geodesic);
    rebuilt.retract(z.data(), c_rebuilt.data(), Retraction::geodesic);
    CHECK((y - z).norm() < 1e-12);
    const Eigen::Map<const MatD> frames(moved.section_data(), 9, 27);
    for (Eigen::Index j = 0; j < 3; ++j) {
      const MatD l = frames.middleCols(j * 9, 9);
      CHECK((l.transpose() * l - MatD::Identity(9, 9)).norm() < 1e-12);
      CHECK((l.col(0) - y.col(j)).norm() < 1e-14);
    }
  }
}

TEST_CASE_TEMPLATE("Oblique: lift, to_ambient, retract and inverse_retract allocate nothing", T, float, double) {
  Rng rng(7);
  const auto x = Oblique<T>::random_point(rng, 30, 8);
  for (const SectionPolicy policy : {SectionPolicy::recomputed, SectionPolicy::transported}) {
    typename Oblique<T>::Workspace ws(30, 8, policy, x.value().data());
    CHECK(ws.workspace_bytes() > 0);
    Mat<T> y = x.value(), u(30, 8), g = Mat<T>::Random(30, 8);
    Vec<T> c(ws.tangent_size()), back(ws.tangent_size());
    const auto allocations = [](auto&& call) {
      alloc_count::Window window;
      call();
      return window.count();
    };
    CAPTURE(static_cast<int>(policy));
    CHECK(allocations([&] { ws.lift(y.data(), g.data(), c.data()); }) == 0);
    CHECK(allocations([&] { ws.to_ambient(y.data(), c.data(), u.data()); }) == 0);
    CHECK(allocations([&] { ws.retract(y.data(), c.data(), Retraction::cayley); }) == 0);
    CHECK(allocations([&] { ws.retract(y.data(), c.data(), Retraction::geodesic); }) == 0);
    CHECK(allocations([&] { ws.inverse_retract(y.data(), y.data(), back.data(), Retraction::geodesic); }) == 0);
    CHECK(allocations([&] { (void)ws.check(y.data()); }) == 0);
  }
}

TEST_CASE("Oblique: bad shapes throw std::invalid_argument naming the manifold and the shape") {
  CHECK_THROWS_WITH_AS(Oblique<double>(0, 3), doctest::Contains("Oblique"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(Oblique<double>::Workspace(0, 2, SectionPolicy::recomputed, nullptr), doctest::Contains("0x2"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(Oblique<double>::Workspace(3, -1, SectionPolicy::recomputed, nullptr),
                       doctest::Contains("Oblique"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(Oblique<double>::Workspace(3, 2, SectionPolicy::transported, nullptr),
                       doctest::Contains("Oblique(3, 2)"), std::invalid_argument);
  const Oblique<float> x(4, 2);
  CHECK(x.value() == (Eigen::MatrixXf(4, 2) << 1, 1, 0, 0, 0, 0, 0, 0).finished());
  CHECK(geomopt::ptree_type_name(x) == "Oblique");
}
