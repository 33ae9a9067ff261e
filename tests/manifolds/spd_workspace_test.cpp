// SPD<T>::Workspace (manifolds/spd/spd.hpp) against dense references that do not use its section: Eigen's LLT,
// and the matrix functions of unsupported/Eigen/MatrixFunctions:
//   - lift is svec(L^T sym(G) L) for the LLT factor L, and to_ambient(lift(G)) is the Riemannian gradient X sym(G) X;
//   - the exponential map is X^(1/2) exp(X^(-1/2) U X^(-1/2)) X^(1/2) and the second-order retraction
//     X + U + U X^-1 U / 2 for U = to_ambient(c), at norms 1e-3 to 40; Retraction::cayley is second_order;
//   - a transported section stays a factor of the point, F exp(W / 2) after a geodesic step;
//   - inverse_retract round trips; non-finite steps give non-finite points, never exceptions;
//   - lift, to_ambient and retract allocate nothing, both policies and retractions, at small and large norms;
//   - bad shapes throw std::invalid_argument naming SPD and the shape; points that are not positive definite throw
//     std::domain_error from lift.
#include <doctest/doctest.h>
#include "../support/count_allocations.hpp"

#include <Eigen/Dense>
#include <cmath>
#include <string>
#include <unsupported/Eigen/MatrixFunctions>

#include "geomopt/manifolds/spd.hpp"

using geomopt::Retraction;
using geomopt::Rng;
using geomopt::SectionPolicy;
using geomopt::SPD;
using MatD = Eigen::MatrixXd;
using VecD = Eigen::VectorXd;

static_assert(geomopt::Manifold<SPD<double>>);
static_assert(geomopt::Manifold<SPD<float>>);
static_assert(!SPD<double>::kCompact);
static_assert(geomopt::default_retraction<SPD<double>>() == Retraction::geodesic);
static_assert(geomopt::supports<SPD<float>>(Retraction::geodesic));

namespace {

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
template <class T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;

VecD gaussian(Rng& rng, Eigen::Index n) { return geomopt::detail::gaussian<double>(rng, n, 1).col(0); }

double rel(const MatD& a, const MatD& b) { return (a - b).norm() / std::max(1.0, b.norm()); }

// The retraction of X along U by dense matrix functions.
MatD reference_step(const MatD& x, const MatD& u, Retraction r) {
  if (r == Retraction::geodesic) {
    const MatD root = x.sqrt();
    const MatD inv_root = root.inverse();
    const MatD inner = inv_root * u * inv_root;
    return root * MatD((inner + inner.transpose()) / 2).exp() * root;
  }
  return x + u + u * x.partialPivLu().solve(u) / 2;
}

// Symmetric with eigenvalues positive to rounding of the largest one (exp(W) at |W| = 30 spans e^-30 to e^30).
template <class T>
bool positive_to_rounding(const Mat<T>& y) {
  const VecD mu = Eigen::SelfAdjointEigenSolver<MatD>(y.template cast<double>()).eigenvalues();
  return mu.allFinite() && mu.minCoeff() >= -64 * std::numeric_limits<T>::epsilon() * mu.maxCoeff();
}

}  // namespace

TEST_CASE("SPD(5) workspace: lift and to_ambient against the LLT factor and the Riemannian gradient") {
  Rng rng(1);
  const auto x = SPD<double>::random_point(rng, 5);
  SPD<double>::Workspace ws(5, 5, SectionPolicy::recomputed, nullptr);
  REQUIRE(ws.tangent_size() == 15);
  const MatD g = MatD::Random(5, 5);
  VecD c(15);
  ws.lift(x.value().data(), g.data(), c.data());
  const MatD l = Eigen::LLT<MatD>(x.value()).matrixL();
  const MatD sym = (g + g.transpose()) / 2;
  const auto expected = geomopt::ScaledSymmetricMatrix<double>::from_dense(MatD(l.transpose() * sym * l));
  CHECK((c - expected.storage()).norm() <= 1e-13 * c.norm());
  MatD u(5, 5);
  ws.to_ambient(x.value().data(), c.data(), u.data());
  CHECK(rel(u, x.value() * sym * x.value()) <= 1e-13);
  // The allocating API is the same computation.
  CHECK((geomopt::lift(x, g).storage() - c).norm() == 0);
  // tangent_from / coordinates_of are the svec.
  const auto xi = SPD<double>::tangent_from(x, c.data());
  CHECK(xi == expected);
  VecD back(15);
  SPD<double>::coordinates_of(xi, back.data());
  CHECK(back == c);
}

TEST_CASE("SPD(4) workspace: the retractions equal dense matrix functions of X and U") {
  Rng rng(2);
  const auto x = SPD<double>::random_point(rng, 4);
  for (const SectionPolicy policy : {SectionPolicy::recomputed, SectionPolicy::transported}) {
    for (const Retraction r : {Retraction::second_order, Retraction::geodesic}) {
      for (const double norm : {1e-3, 0.5, 3.0, 20.0, 40.0}) {
        CAPTURE(static_cast<int>(policy));
        CAPTURE(static_cast<int>(r));
        CAPTURE(norm);
        SPD<double>::Workspace step(4, 4, policy, x.value().data());
        const VecD c = gaussian(rng, 10).normalized() * norm;
        MatD u(4, 4), y = x.value();
        step.to_ambient(y.data(), c.data(), u.data());
        step.retract(y.data(), c.data(), r);
        const MatD expected = reference_step(x.value(), u, r);
        const double scale = r == Retraction::geodesic ? std::exp(norm) : 1 + norm * norm;
        CHECK(rel(y, expected) <= 1e-13 * scale);
        CHECK(y == y.transpose());
        if (policy == SectionPolicy::transported) {
          const Eigen::Map<const MatD> f(step.section_data(), 4, 4);
          CHECK(rel(f * f.transpose(), y) <= 1e-13 * scale);
        }
        if (r == Retraction::second_order) {
          // The deprecated name is the same retraction, to the bit.
          SPD<double>::Workspace alias(4, 4, policy, x.value().data());
          MatD z = x.value();
          alias.retract(z.data(), c.data(), Retraction::cayley);
          CHECK(z == y);
        }
      }
    }
  }
}

TEST_CASE("SPD(3) workspace: a transported section moves as F exp(W / 2) along the geodesic") {
  Rng rng(3);
  const auto x = SPD<double>::random_point(rng, 3);
  SPD<double>::Workspace ws(3, 3, SectionPolicy::transported, x.value().data());
  REQUIRE(ws.section_rows() == 3);
  const MatD f0 = Eigen::Map<const MatD>(ws.section_data(), 3, 3);
  CHECK(rel(f0, Eigen::LLT<MatD>(x.value()).matrixL()) <= 1e-15);
  const VecD c = gaussian(rng, 6);
  geomopt::ScaledSymmetricMatrix<double> w = geomopt::ScaledSymmetricMatrix<double>::from_storage(c);
  MatD y = x.value();
  ws.retract(y.data(), c.data(), Retraction::geodesic);
  const MatD f1 = Eigen::Map<const MatD>(ws.section_data(), 3, 3);
  CHECK(rel(f1, f0 * MatD(w.dense() / 2).exp()) <= 1e-13);
}

TEST_CASE_TEMPLATE("SPD workspace: inverse_retract round trips, both policies and retractions", T, float, double) {
  Rng rng(4);
  const double tol = std::is_same_v<T, float> ? 2e-4 : 1e-11;
  const auto x = SPD<T>::random_point(rng, 5);
  for (const SectionPolicy policy : {SectionPolicy::recomputed, SectionPolicy::transported}) {
    for (const Retraction r : {Retraction::second_order, Retraction::geodesic}) {
      // The second-order inverse is exact where W's eigenvalues exceed -1: |W|_F < 1.
      for (const double norm : {1e-2, 0.5, r == Retraction::geodesic ? 2.0 : 0.9}) {
        typename SPD<T>::Workspace ws(5, 5, policy, x.value().data());
        const Vec<T> c = (gaussian(rng, 15).normalized() * norm).template cast<T>();
        Mat<T> y = x.value();
        Vec<T> back(15);
        ws.inverse_retract(x.value().data(), x.value().data(), back.data(), r);
        CHECK(static_cast<double>(back.norm()) <= tol);
        typename SPD<T>::Workspace fresh(5, 5, policy, x.value().data());
        fresh.retract(y.data(), c.data(), r);
        ws.inverse_retract(x.value().data(), y.data(), back.data(), r);
        CHECK(static_cast<double>((back - c).norm()) <= tol * std::max(1.0, norm));
      }
    }
  }
}

TEST_CASE_TEMPLATE("SPD workspace: positive definite at any finite norm, non-finite steps give non-finite points", T,
                   float, double) {
  Rng rng(5);
  const auto x = SPD<T>::random_point(rng, 4);
  typename SPD<T>::Workspace ws(4, 4, SectionPolicy::recomputed, nullptr);
  for (const double norm : {30.0, 1e3, 1e4}) {
    CAPTURE(norm);
    const Vec<T> c = (gaussian(rng, 10).normalized() * norm).template cast<T>();
    Mat<T> y = x.value();
    ws.retract(y.data(), c.data(), Retraction::second_order);
    REQUIRE(y.allFinite());
    CHECK(y == y.transpose());
    CHECK(positive_to_rounding(y));
    Mat<T> z = x.value();
    ws.retract(z.data(), c.data(), Retraction::geodesic);
    if (norm < 50) {
      CHECK(positive_to_rounding(z));
    } else {
      // exp of an eigenvalue near 1e3 or beyond overflows: reported as non-finite entries.
      CHECK(!z.allFinite());
    }
  }
  Vec<T> c = Vec<T>::Zero(10);
  c(3) = std::numeric_limits<T>::quiet_NaN();
  Mat<T> y = x.value();
  CHECK_NOTHROW(ws.retract(y.data(), c.data(), Retraction::second_order));
  CHECK(!y.allFinite());
}

TEST_CASE_TEMPLATE("SPD workspace: lift, to_ambient and retract allocate nothing", T, float, double) {
  Rng rng(6);
  for (const Eigen::Index n : {1, 4, 12, 40}) {
    const auto x = SPD<T>::random_point(rng, n);
    for (const SectionPolicy policy : {SectionPolicy::recomputed, SectionPolicy::transported}) {
      typename SPD<T>::Workspace ws(n, n, policy, x.value().data());
      CHECK(ws.workspace_bytes() > 0);
      const Mat<T> g = Mat<T>::Random(n, n);
      Mat<T> y = x.value(), u(n, n);
      Vec<T> c(ws.tangent_size());
      const auto allocations = [](auto&& call) {
        alloc_count::Window window;
        call();
        return window.count();
      };
      CAPTURE(n);
      CAPTURE(static_cast<int>(policy));
      CHECK(allocations([&] { ws.lift(y.data(), g.data(), c.data()); }) == 0);
      CHECK(allocations([&] { ws.to_ambient(y.data(), c.data(), u.data()); }) == 0);
      for (const Retraction r : {Retraction::second_order, Retraction::geodesic}) {
        for (const double norm : {0.1, 30.0}) {
          CAPTURE(norm);
          c = (gaussian(rng, ws.tangent_size()).normalized() * norm).template cast<T>();
          CHECK(allocations([&] { ws.lift(y.data(), g.data(), c.data()); }) == 0);
          c = (gaussian(rng, ws.tangent_size()).normalized() * norm).template cast<T>();
          CHECK(allocations([&] { ws.retract(y.data(), c.data(), r); }) == 0);
          y = x.value();
        }
      }
    }
  }
}

TEST_CASE("SPD workspace: bad shapes throw std::invalid_argument, points that are not positive definite domain_error") {
  CHECK_THROWS_WITH_AS(SPD<double>::Workspace(3, 4, SectionPolicy::recomputed, nullptr), doctest::Contains("3x4"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(SPD<double>::Workspace(3, 4, SectionPolicy::recomputed, nullptr), doctest::Contains("SPD"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(SPD<double>::Workspace(2, 2, SectionPolicy::transported, nullptr), doctest::Contains("SPD(2)"),
                       std::invalid_argument);
  const MatD negative = -MatD::Identity(2, 2);
  CHECK_THROWS_AS(SPD<double>::Workspace(2, 2, SectionPolicy::transported, negative.data()), std::domain_error);
  SPD<double>::Workspace ws(2, 2, SectionPolicy::recomputed, nullptr);
  const MatD g = MatD::Ones(2, 2);
  VecD c = VecD::Constant(3, 5.0);
  CHECK_THROWS_AS(ws.lift(negative.data(), g.data(), c.data()), std::domain_error);
  CHECK(c == VecD::Constant(3, 5.0));
  CHECK_THROWS_AS(
      ws.inverse_retract(MatD::Identity(2, 2).eval().data(), negative.data(), c.data(), Retraction::geodesic),
      std::domain_error);
  CHECK(c == VecD::Constant(3, 5.0));
  // The allocating API names the manifold too.
  CHECK_THROWS_WITH_AS(geomopt::lift(SPD<double>(2), MatD::Ones(3, 3)), doctest::Contains("SPD::lift"),
                       std::invalid_argument);
}
