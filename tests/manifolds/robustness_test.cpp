// What the manifolds promise at the edges of their domain, in float and double: the Cayley inverse retraction at and
// near half turns (std::domain_error exactly where I + x^T y is singular to working precision, accurate against the
// closed form 2 tan(t / 2) elsewhere), retractions of finite tangents of any norm (on the manifold, SO(n) with
// determinant one, SPD positive definite or std::domain_error when not representable), non-finite tangents
// (std::domain_error naming the coordinate, nothing changed), and the optimizers' allocation-free steppers following
// the same rules without throwing.
#include <doctest/doctest.h>

#include <Eigen/Dense>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "../support/exception_message.hpp"
#include "dense_reference.hpp"
#include "geomopt/manifolds.hpp"
#include "geomopt/optimizers/detail/manifold_stepper.hpp"

using geomopt::Grassmann;
using geomopt::Retraction;
using geomopt::Rng;
using geomopt::SectionPolicy;
using geomopt::SPD;
using geomopt::SpecialOrthogonal;
using geomopt::Sphere;
using geomopt::Stiefel;

namespace {

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
using MatD = Eigen::MatrixXd;

constexpr Retraction kRetractions[] = {Retraction::cayley, Retraction::geodesic};
const char* name(Retraction r) { return r == Retraction::cayley ? "cayley" : "geodesic"; }

// The skew matrix of a unit axis u of R^3 and the rotation by t about it (Rodrigues).
MatD skew3(const Eigen::Vector3d& u) {
  MatD k(3, 3);
  k << 0, -u(2), u(1), u(2), 0, -u(0), -u(1), u(0), 0;
  return k;
}
MatD rotation3(const Eigen::Vector3d& u, double t) {
  const MatD k = skew3(u);
  return MatD::Identity(3, 3) + std::sin(t) * k + (1 - std::cos(t)) * k * k;
}

// A random rotation of R^n in double.
MatD random_rotation(Rng& rng, Eigen::Index n) { return SpecialOrthogonal<double>::random_point(rng, n).value(); }

// The message of the std::domain_error f throws, or "" when it throws nothing.
template <class T>
std::string domain_message(auto&& f) {
  return test_support::message_of<std::domain_error>(f).value_or("");
}

// The largest coordinate magnitudes each scalar is tested at: up to 1e300 in double, 1e37 in float.
template <class T>
std::vector<double> huge_norms() {
  std::vector<double> norms = {1, 20, 1e2, 1e4, 1e8, 1e12, 1e20, 1e30};
  if constexpr (std::is_same_v<T, double>) {
    norms.push_back(1e100);
    norms.push_back(1e300);
  } else {
    norms.push_back(1e37);
  }
  return norms;
}

// The orthonormality defect a point of St(N, n) may have at working precision.
template <class T>
double on_manifold_tolerance(Eigen::Index N) {
  return 50.0 * static_cast<double>(N) * static_cast<double>(std::numeric_limits<T>::epsilon());
}

}  // namespace

TEST_CASE_TEMPLATE("inverse_retract (cayley): the axis-aligned half turns throw std::domain_error", T, float, double) {
  using M = Mat<T>;
  // SO(3) from I to diag(1, -1, -1), St(3, 3) the same, SO(4) to diag(1, 1, -1, -1), St(5, 2) from [I; 0] to
  // [e1, -e2]: x^T y + I is exactly singular, and an LU condition estimate called it well conditioned (NaN result).
  M d3 = M::Identity(3, 3);
  d3(1, 1) = d3(2, 2) = T(-1);
  M d4 = M::Identity(4, 4);
  d4(2, 2) = d4(3, 3) = T(-1);
  M st52 = M::Identity(5, 2);
  st52(1, 1) = T(-1);
  const std::string so3 = domain_message<T>([&] { (void)inverse_retract(SpecialOrthogonal<T>(3), d3); });
  const std::string st33 = domain_message<T>([&] { (void)inverse_retract(Stiefel<T>(3, 3), d3); });
  const std::string so4 = domain_message<T>([&] { (void)inverse_retract(SpecialOrthogonal<T>(4), d4); });
  const std::string st5 = domain_message<T>([&] { (void)inverse_retract(Stiefel<T>(5, 2), st52); });
  for (const std::string& message : {so3, st33, so4, st5}) {
    CAPTURE(message);
    CHECK(message.find("half turn") != std::string::npos);
  }
  // The same turns seen from a rotated frame, and an explicit section: the same verdict.
  Rng rng(7);
  const MatD q3 = random_rotation(rng, 3), q4 = random_rotation(rng, 4);
  const SpecialOrthogonal<T> x3(M(q3.cast<T>())), x4(M(q4.cast<T>()));
  const MatD d3d = d3.template cast<double>(), d4d = d4.template cast<double>();
  CHECK_THROWS_AS((void)inverse_retract(x3, M((q3 * d3d).template cast<T>())), std::domain_error);
  CHECK_THROWS_AS((void)inverse_retract(x4, make_section(x4), M((q4 * d4d).template cast<T>())), std::domain_error);
  // Grassmann: a direction of y orthogonal to x (x^T y = diag(1, 0)) is out of reach of both inverses.
  M g = M::Zero(4, 2);
  g(0, 0) = g(2, 1) = T(1);
  for (Retraction r : kRetractions) CHECK_THROWS_AS((void)inverse_retract(Grassmann<T>(4, 2), g, r), std::domain_error);
}

TEST_CASE_TEMPLATE("inverse_retract (cayley) near a half turn: the closed form 2 tan(t/2), or std::domain_error", T,
                   float, double) {
  using M = Mat<T>;
  constexpr double eps = std::numeric_limits<T>::epsilon();
  const double threshold = std::sqrt(eps);  // sigma_min(x^T y + I) / sigma_max below which it throws
  Rng rng(11);
  const std::vector<double> gaps = {1.0, 1e-2, 1e-4, 1e-6, 1e-9};
  for (double gap : gaps) {
    const double t = M_PI - gap;
    Eigen::Vector3d u = Eigen::Vector3d::Random().normalized();
    const MatD x = random_rotation(rng, 3);
    const MatD y = x * rotation3(u, t);
    const MatD expected = 2 * std::tan(t / 2) * skew3(u);  // the lift at x, in x's frame (the section of SO(n) is x)
    // sigma_min(I + R_t) / sigma_max = 2 cos(t / 2) / 2.
    const double ratio = std::cos(t / 2);
    CAPTURE(gap);
    const SpecialOrthogonal<T> xt(M(x.cast<T>()));
    const M yt = y.cast<T>();
    if (ratio < threshold / 4) {
      CHECK_THROWS_AS((void)inverse_retract(xt, yt), std::domain_error);
    } else if (ratio > 4 * threshold) {
      const MatD got = inverse_retract(xt, yt).dense().template cast<double>();
      // The problem's own relative condition number is about 1 / ratio: a target rounded to working precision.
      CHECK((got - expected).norm() <= 64 * eps / ratio * expected.norm());
      // And the retraction maps it back onto y.
      SpecialOrthogonal<T> back = xt;
      retract(back, geomopt::SkewSymMatrix<T>::from_dense(M(got.cast<T>())));
      CHECK((back.value().template cast<double>() - y).norm() <= 64 * eps / ratio);
    }
  }
  // Each case above is decided one way or the other in both precisions: pi - 1e-9 throws, pi - 1e-2 is answered.
  CHECK_THROWS_AS((void)inverse_retract(SpecialOrthogonal<T>(3), M(rotation3({0, 0, 1}, M_PI - 1e-9).cast<T>())),
                  std::domain_error);
}

TEST_CASE_TEMPLATE("retract: a finite tangent of any norm stays on the manifold (SO(n): determinant one)", T, float,
                   double) {
  Rng rng(5);
  for (double norm : huge_norms<T>()) {
    for (Retraction r : kRetractions) {
      CAPTURE(norm);
      CAPTURE(name(r));
      // SO(5) and SO(4) (odd and even order: a skew core of odd order has a kernel, which a Cayley solve at huge norm
      // loses), with and without a kept section.
      for (Eigen::Index n : {4, 5}) {
        const auto x = SpecialOrthogonal<T>::random_point(rng, n);
        auto xi = random_tangent(x, rng);
        xi.storage() *= T(norm / static_cast<double>(xi.storage().norm()));
        auto y = x;
        retract(y, xi, r);
        CHECK(check(y) <= on_manifold_tolerance<T>(n));
        CHECK(static_cast<double>(y.value().determinant()) > 0);
        for (SectionPolicy policy : {SectionPolicy::recomputed, SectionPolicy::transported}) {
          auto z = x;
          auto section = make_section(z, policy);
          retract(z, section, xi, r);
          retract(z, section, xi, r);
          CHECK(check(z) <= on_manifold_tolerance<T>(n));
          CHECK((section.dense().transpose() * section.dense() - Mat<T>::Identity(n, n)).norm() <=
                on_manifold_tolerance<T>(n));
        }
      }
      {
        const auto x = Stiefel<T>::random_point(rng, 9, 3);
        auto xi = random_tangent(x, rng);
        const T scale = T(norm / std::sqrt(static_cast<double>(xi.A().storage().squaredNorm() + xi.B().squaredNorm())));
        xi.A().storage() *= scale;
        xi.B() *= scale;
        auto y = x;
        retract(y, xi, r);
        CHECK(check(y) <= on_manifold_tolerance<T>(9));
      }
      {
        const auto x = Grassmann<T>::random_point(rng, 7, 3);
        auto xi = random_tangent(x, rng);
        xi.B() *= T(norm / static_cast<double>(xi.B().norm()));
        auto y = x;
        retract(y, xi, r);
        CHECK(check(y) <= on_manifold_tolerance<T>(7));
      }
      {
        const auto x = Sphere<T>::random_point(rng, 6);
        auto xi = random_tangent(x, rng);
        xi.B() *= T(norm / static_cast<double>(xi.B().norm()));
        auto y = x;
        retract(y, xi, r);
        CHECK(check(y) <= on_manifold_tolerance<T>(6));
      }
    }
  }
}

TEST_CASE("retract above the spectral threshold agrees with the dense exponential and Cayley transform") {
  // SO(n) from the identity: retract(I, A) = f(A). Eigen's Pade exponential and a full-pivoting Cayley solve, at
  // 1-norms from just below the threshold (polynomial path) to well above it (Schur path); both are accurate to about
  // eps |A| there, so they agree to that.
  Rng rng(9);
  for (double norm1 : {15.0, 17.0, 40.0, 300.0}) {
    const MatD g = geomopt::detail::gaussian<double>(rng, 6, 6);
    MatD a = g - g.transpose();
    a *= norm1 / a.cwiseAbs().colwise().sum().maxCoeff();
    for (Retraction r : kRetractions) {
      CAPTURE(norm1);
      CAPTURE(name(r));
      SpecialOrthogonal<double> y(6);
      retract(y, geomopt::SkewSymMatrix<double>::from_dense(a), r);
      const MatD expected =
          r == Retraction::geodesic ? manifold_props::reference::expm(a) : manifold_props::reference::cayley(a);
      CHECK((y.value() - expected).norm() <= 1e-14 * norm1 * 6);
    }
  }
}

TEST_CASE_TEMPLATE("SPD retract at any norm: positive definite, or std::domain_error when not representable", T, float,
                   double) {
  using M = Mat<T>;
  Rng rng(13);
  const double eps = std::numeric_limits<T>::epsilon();
  const double log_max = std::log(static_cast<double>(std::numeric_limits<T>::max()));
  for (double norm : huge_norms<T>()) {
    const auto x = SPD<T>::random_point(rng, 4);
    auto xi = random_tangent(x, rng);
    xi.storage() *= T(norm / static_cast<double>(xi.storage().norm()));
    const Eigen::VectorXd lambda =
        Eigen::SelfAdjointEigenSolver<MatD>(xi.dense().template cast<double>()).eigenvalues();
    for (Retraction r : kRetractions) {
      CAPTURE(norm);
      CAPTURE(name(r));
      // The largest eigenvalue of the new point is about |X| times the core's largest eigenvalue.
      const double top = r == Retraction::geodesic ? lambda.maxCoeff()
                                                   : 2 * std::log(1 + std::max(-lambda.minCoeff(), lambda.maxCoeff()));
      auto y = x;
      if (top + std::log(static_cast<double>(x.value().norm())) + 4 < log_max) {
        retract(y, xi, r);
        const MatD v = y.value().template cast<double>();
        CHECK(v.allFinite());
        CHECK((v - v.transpose()).norm() == 0);
        // Positive definite to rounding of the largest eigenvalue.
        const Eigen::VectorXd mu = Eigen::SelfAdjointEigenSolver<MatD>(v).eigenvalues();
        CHECK(mu.minCoeff() >= -64 * eps * mu.maxCoeff());
        if (norm <= 1) CHECK(mu.minCoeff() > 0);
      } else if (top > log_max + 4) {
        const std::string message = domain_message<T>([&] { retract(y, xi, r); });
        CHECK(message.find("overflows") != std::string::npos);
        CHECK(y.value() == x.value());
      }
    }
  }
  // Eigenvalues 1e4 and -1e4 in the whitened step: exp(1e4) is not representable: an error, not NaN.
  SPD<T> x(2);
  M w(2, 2);
  w << T(0), T(1e4), T(1e4), T(0);
  auto xi = geomopt::ScaledSymmetricMatrix<T>::from_dense(w);
  CHECK_THROWS_AS(retract(x, xi, Retraction::geodesic), std::domain_error);
  CHECK(x.value() == M::Identity(2, 2));
}

TEST_CASE_TEMPLATE("retract of a non-finite tangent throws std::domain_error naming the coordinate, x unchanged", T,
                   float, double) {
  const T bad[] = {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity(),
                   -std::numeric_limits<T>::infinity()};
  Rng rng(17);
  for (T value : bad) {
    for (Retraction r : kRetractions) {
      {
        const auto x = Stiefel<T>::random_point(rng, 6, 3);
        auto xi = random_tangent(x, rng);
        xi.B()(2, 1) = value;
        auto y = x;
        auto section = make_section(y, SectionPolicy::transported);
        const Mat<T> before = section.dense();
        const std::string message = domain_message<T>([&] { retract(y, section, xi, r); });
        CAPTURE(message);
        CHECK(message.find("Stiefel::retract") != std::string::npos);
        CHECK(message.find("B(2, 1)") != std::string::npos);
        CHECK(y.value() == x.value());
        CHECK(section.dense() == before);
      }
      {
        const auto x = SpecialOrthogonal<T>::random_point(rng, 4);
        auto xi = random_tangent(x, rng);
        xi.storage()[3] = value;  // packed (3) is A(3, 0)
        auto y = x;
        const std::string message = domain_message<T>([&] { retract(y, xi, r); });
        CAPTURE(message);
        CHECK(message.find("A(3, 0)") != std::string::npos);
        CHECK(y.value() == x.value());
      }
      for (auto make : {0, 1}) {
        if (make == 0) {
          const auto x = Sphere<T>::random_point(rng, 5);
          auto xi = random_tangent(x, rng);
          xi.B()(0, 0) = value;
          auto y = x;
          CHECK_THROWS_AS(retract(y, xi, r), std::domain_error);
          CHECK(y.value() == x.value());
        } else {
          const auto x = Grassmann<T>::random_point(rng, 5, 2);
          auto xi = random_tangent(x, rng);
          xi.B()(1, 1) = value;
          auto y = x;
          CHECK_THROWS_AS(retract(y, xi, r), std::domain_error);
          CHECK(y.value() == x.value());
        }
      }
      {
        const auto x = SPD<T>::random_point(rng, 3);
        auto xi = random_tangent(x, rng);
        xi.storage()[4] = value;
        auto y = x;
        auto section = make_section(y, SectionPolicy::transported);
        const std::string message = domain_message<T>([&] { retract(y, section, xi, r); });
        CAPTURE(message);
        CHECK(message.find("storage[4]") != std::string::npos);
        CHECK(y.value() == x.value());
      }
    }
  }
  // inverse_retract of a non-finite target throws too.
  Mat<T> y = Mat<T>::Identity(3, 3);
  y(0, 1) = std::numeric_limits<T>::quiet_NaN();
  for (Retraction r : kRetractions)
    CHECK_THROWS_AS((void)inverse_retract(SpecialOrthogonal<T>(3), y, r), std::domain_error);
}

TEST_CASE_TEMPLATE("the optimizers' steppers follow retract at huge norms and never throw on non-finite ones", T, float,
                   double) {
  using M = Mat<T>;
  Rng rng(19);
  for (double norm : huge_norms<T>()) {
    for (Retraction r : kRetractions) {
      for (SectionPolicy policy : {SectionPolicy::recomputed, SectionPolicy::transported}) {
        CAPTURE(norm);
        CAPTURE(name(r));
        {
          // Stiefel St(7, 3): coordinates are A's packed entries, then B column-major.
          const auto x = Stiefel<T>::random_point(rng, 7, 3);
          auto xi = random_tangent(x, rng);
          const T scale =
              T(norm / std::sqrt(static_cast<double>(xi.A().storage().squaredNorm() + xi.B().squaredNorm())));
          xi.A().storage() *= scale;
          xi.B() *= scale;
          Eigen::Matrix<T, Eigen::Dynamic, 1> coords(xi.A().storage().size() + xi.B().size());
          coords << xi.A().storage(), xi.B().reshaped();
          auto stepper = geomopt::detail::make_stepper(x, policy);
          M y = x.value();
          stepper->retract(y.data(), coords.data(), r);
          auto expected = x;
          auto section = make_section(expected, policy);
          retract(expected, section, xi, r);
          CHECK(check(Stiefel<T>(y)) <= on_manifold_tolerance<T>(7));
          // The same arithmetic up to rounding of the products' tiling, which a step of norm s amplifies about s
          // times (its angles are known to eps s).
          if (norm <= 1e4)
            CHECK((y - expected.value()).norm() <= 100 * std::numeric_limits<T>::epsilon() * std::max(1.0, norm));
        }
        {
          const auto x = SpecialOrthogonal<T>::random_point(rng, 5);
          auto xi = random_tangent(x, rng);
          xi.storage() *= T(norm / static_cast<double>(xi.storage().norm()));
          auto stepper = geomopt::detail::make_stepper(x, policy);
          M y = x.value();
          stepper->retract(y.data(), xi.storage().data(), r);
          CHECK(check(SpecialOrthogonal<T>(y)) <= on_manifold_tolerance<T>(5));
        }
        {
          const auto x = SPD<T>::random_point(rng, 3);
          auto xi = random_tangent(x, rng);
          xi.storage() *= T(std::min(norm, 30.0) / static_cast<double>(xi.storage().norm()));
          auto stepper = geomopt::detail::make_stepper(x, policy);
          M y = x.value();
          stepper->retract(y.data(), xi.storage().data(), r);
          auto expected = x;
          retract(expected, xi, r);
          const MatD v = y.template cast<double>(), e = expected.value().template cast<double>();
          CHECK(v.allFinite());
          CHECK((v - e).norm() <= 1e3 * std::numeric_limits<T>::epsilon() * e.norm());
        }
      }
    }
  }
  // Non-finite coordinates: a non-finite point, no exception.
  for (Retraction r : kRetractions) {
    const auto x = Stiefel<T>::random_point(rng, 6, 2);
    auto stepper = geomopt::detail::make_stepper(x, SectionPolicy::recomputed);
    Eigen::Matrix<T, Eigen::Dynamic, 1> coords = Eigen::Matrix<T, Eigen::Dynamic, 1>::Zero(stepper->tangent_size());
    coords[2] = std::numeric_limits<T>::quiet_NaN();
    M y = x.value();
    CHECK_NOTHROW(stepper->retract(y.data(), coords.data(), r));
    CHECK(!y.allFinite());
    const auto p = SPD<T>::random_point(rng, 3);
    auto spd_stepper = geomopt::detail::make_stepper(p, SectionPolicy::recomputed);
    Eigen::Matrix<T, Eigen::Dynamic, 1> w = Eigen::Matrix<T, Eigen::Dynamic, 1>::Zero(spd_stepper->tangent_size());
    w[0] = std::numeric_limits<T>::infinity();
    M q = p.value();
    CHECK_NOTHROW(spd_stepper->retract(q.data(), w.data(), r));
    CHECK(!q.allFinite());
  }
}
