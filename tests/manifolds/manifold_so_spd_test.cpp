// The manifold property suite (manifold_properties.hpp) on SO(n) and SPD(n): SO(5) and SPD(5) in double and float,
// SO(4) and SPD(2) in double; what only these two have (reflections, the reach of the inverse retractions, the
// closed-form inverses of SPD at multiples of X); and the scaled symmetric packing that SPD tangents use.
#include "manifold_properties.hpp"

#include <cmath>

using geomopt::Retraction;
using geomopt::Rng;
using geomopt::ScaledSymmetricMatrix;
using geomopt::SPD;
using geomopt::SpecialOrthogonal;
using manifold_props::MatD;
using manifold_props::sizes;

GEOMOPT_MANIFOLD_PROPERTIES(SpecialOrthogonal<double>, sizes(5))
GEOMOPT_MANIFOLD_PROPERTIES(SpecialOrthogonal<float>, sizes(5))
GEOMOPT_MANIFOLD_PROPERTIES(SpecialOrthogonal<double>, sizes(4))
GEOMOPT_MANIFOLD_PROPERTIES(SPD<double>, sizes(5))
GEOMOPT_MANIFOLD_PROPERTIES(SPD<float>, sizes(5))
GEOMOPT_MANIFOLD_PROPERTIES(SPD<double>, sizes(2))

namespace {

// A rotation by pi in the plane of two random orthonormal vectors: I - 2 (q0 q0^T + q1 q1^T).
MatD half_turn(Rng& rng, Eigen::Index n) {
  const MatD q = geomopt::Stiefel<double>::random_point(rng, n, 2).value();
  return MatD::Identity(n, n) - 2 * q * q.transpose();
}

}  // namespace

TEST_CASE("SO(5): a reflection has check 2 and project maps it to the nearest rotation, 2 away") {
  Rng rng(21);
  const SpecialOrthogonal<double> x = SpecialOrthogonal<double>::random_point(rng, 5);
  CHECK(x.value().determinant() == doctest::Approx(1.0).epsilon(1e-12));
  SpecialOrthogonal<double> reflection = x;
  reflection.value().col(2) *= -1;
  CHECK(check(reflection) >= 2.0);
  CHECK(check(reflection) == doctest::Approx(2.0).epsilon(1e-12));
  const MatD before = reflection.value();
  project(reflection);
  CHECK(reflection.value().determinant() == doctest::Approx(1.0).epsilon(1e-12));
  CHECK(check(reflection) < 1e-12);
  // Every singular value of a reflection is 1, so the nearest rotation flips one singular direction: distance 2.
  CHECK((reflection.value() - before).norm() == doctest::Approx(2.0).epsilon(1e-12));
  // A value that is not square is infinitely far from SO(n).
  CHECK(std::isinf(check(SpecialOrthogonal<double>(MatD::Identity(5, 4)))));
}

TEST_CASE("SO(5): inverse_retract (geodesic) throws std::domain_error for a half turn and for a reflection") {
  Rng rng(22);
  const SpecialOrthogonal<double> x = SpecialOrthogonal<double>::random_point(rng, 5);
  // x G with G a rotation by pi has no principal logarithm.
  const MatD g = half_turn(rng, 5);
  CHECK(g.determinant() == doctest::Approx(1.0).epsilon(1e-12));
  CHECK_THROWS_AS((void)inverse_retract(x, MatD(x.value() * g), Retraction::geodesic), std::domain_error);
  MatD coordinate_half_turn = MatD::Identity(5, 5);
  coordinate_half_turn(0, 0) = coordinate_half_turn(1, 1) = -1;
  CHECK_THROWS_AS((void)inverse_retract(x, MatD(x.value() * coordinate_half_turn), Retraction::geodesic),
                  std::domain_error);
  // A reflection lies in the other component of O(n).
  MatD reflection = x.value();
  reflection.col(0) *= -1;
  CHECK_THROWS_AS((void)inverse_retract(x, reflection, Retraction::geodesic), std::domain_error);
  // Just short of a half turn is still in reach: the angle 3 comes back.
  geomopt::SkewSymMatrix<double> a(5);
  a.storage()[0] = 3.0;  // A(1, 0) = 3: a rotation by 3 < pi in the plane (0, 1)
  const SpecialOrthogonal<double> y = manifold_props::retracted(x, a, Retraction::geodesic);
  CHECK((inverse_retract(x, y, Retraction::geodesic).storage() - a.storage()).norm() < 1e-10);
}

TEST_CASE("SO(5) and St(20, 3): inverse_retract (cayley) throws std::domain_error for a target out of its reach") {
  // The Cayley transform of a skew matrix has no eigenvalue -1, so a half turn (SO) and -Y (Stiefel) are out of
  // reach of the Cayley retraction; inverse_retract documents a std::domain_error for targets out of reach.
  Rng rng(23);
  const SpecialOrthogonal<double> x = SpecialOrthogonal<double>::random_point(rng, 5);
  MatD coordinate_half_turn = MatD::Identity(5, 5);
  coordinate_half_turn(0, 0) = coordinate_half_turn(1, 1) = -1;
  CHECK_THROWS_AS((void)inverse_retract(x, MatD(x.value() * coordinate_half_turn), Retraction::cayley),
                  std::domain_error);
  const geomopt::Stiefel<double> s = geomopt::Stiefel<double>::random_point(rng, 20, 3);
  CHECK_THROWS_AS((void)inverse_retract(s, MatD(-s.value()), Retraction::cayley), std::domain_error);
}

TEST_CASE("SPD(5): inverse_retract has closed forms at multiples of X and throws std::domain_error out of reach") {
  Rng rng(24);
  const SPD<double> x = SPD<double>::random_point(rng, 5);
  const MatD id = MatD::Identity(5, 5);
  // y = c X is F (c I) F^T: the geodesic inverse is log(c) I, the second-order one (2c - 1)^(1/2) - 1 times I.
  for (const double c : {0.6, 2.0, 7.0}) {
    CAPTURE(c);
    const auto geo = inverse_retract(x, MatD(c * x.value()), Retraction::geodesic);
    CHECK((geo.dense() - std::log(c) * id).norm() < 1e-12);
    const auto second = inverse_retract(x, MatD(c * x.value()), Retraction::cayley);
    CHECK((second.dense() - (std::sqrt(2 * c - 1) - 1) * id).norm() < 1e-12);
  }
  // The second-order retraction reaches only y with 2 W' - I positive definite, W' = F^-1 y F^-T.
  CHECK_THROWS_AS((void)inverse_retract(x, MatD(0.25 * x.value()), Retraction::cayley), std::domain_error);
  // Nothing reaches a matrix that is not positive definite.
  CHECK_THROWS_AS((void)inverse_retract(x, MatD(-x.value()), Retraction::geodesic), std::domain_error);
  CHECK_THROWS_AS((void)inverse_retract(x, MatD(-x.value()), Retraction::cayley), std::domain_error);
  // The section overloads throw the same.
  const auto section = make_section(x, geomopt::SectionPolicy::transported);
  CHECK_THROWS_AS((void)inverse_retract(x, section, MatD(0.25 * x.value()), Retraction::cayley), std::domain_error);
}

TEST_CASE(
    "SPD(5): project lifts an indefinite matrix to a positive definite one, and sections need a positive "
    "definite point") {
  Rng rng(25);
  SPD<double> x = SPD<double>::random_point(rng, 5);
  const Eigen::SelfAdjointEigenSolver<MatD> eig(x.value());
  x.value() -= (eig.eigenvalues()[0] + 1) * MatD::Identity(5, 5);  // smallest eigenvalue -1
  CHECK(check(x) == doctest::Approx(1.0).epsilon(1e-10));
  CHECK_THROWS_AS((void)make_section(x), std::domain_error);
  project(x);
  CHECK(check(x) < 1e-12);
  CHECK(Eigen::LLT<MatD>(x.value()).info() == Eigen::Success);
  // The positive eigenvalues are kept, the others raised to a floor of the order of n eps lambda_max.
  const Eigen::VectorXd after = Eigen::SelfAdjointEigenSolver<MatD>(x.value()).eigenvalues();
  const Eigen::VectorXd shifted = eig.eigenvalues().array() - (eig.eigenvalues()[0] + 1);
  for (Eigen::Index i = 0; i < 5; ++i) {
    CAPTURE(i);
    if (shifted[i] > 1e-8) {
      CHECK(std::abs(after[i] - shifted[i]) < 1e-12 * std::max(1.0, shifted[i]));
    } else {
      CHECK(after[i] > 0);
      CHECK(after[i] < 1e-12 * std::max(1.0, shifted[4]));
    }
  }
}

TEST_CASE("ScaledSymmetricMatrix: the storage is orthonormal for the Frobenius inner product") {
  // n = 3, storage 1..6: the off-diagonal entries are the stored values over sqrt 2.
  ScaledSymmetricMatrix<double> s(3);
  s.storage() << 1, 2, 3, 4, 5, 6;  // (0,0) (1,0) (1,1) (2,0) (2,1) (2,2)
  const double r = 1 / std::sqrt(2.0);
  Eigen::Matrix3d expected;
  expected << 1, 2 * r, 4 * r,  //
      2 * r, 3, 5 * r,          //
      4 * r, 5 * r, 6;
  CHECK((s.dense() - expected).norm() < 1e-15);
  CHECK(ptree_type_name(s) == "ScaledSymmetricMatrix");

  Rng rng(26);
  std::normal_distribution<double> normal;
  for (int trial = 0; trial < 5; ++trial) {
    ScaledSymmetricMatrix<double> a(4), b(4);
    for (Eigen::Index k = 0; k < 10; ++k) {
      a.storage()[k] = normal(rng);
      b.storage()[k] = normal(rng);
    }
    CHECK(a.storage().dot(b.storage()) == doctest::Approx((a.dense().transpose() * b.dense()).trace()).epsilon(1e-13));
    CHECK(a.dense() == a.dense().transpose());
    // from_dense(dense()) restores the storage; from_dense of any matrix is its symmetric part.
    CHECK((ScaledSymmetricMatrix<double>::from_dense(a.dense()).storage() - a.storage()).norm() < 1e-14);
    const MatD m = MatD::Random(4, 4);
    CHECK((ScaledSymmetricMatrix<double>::from_dense(m).dense() - 0.5 * (m + m.transpose())).norm() < 1e-14);
    // The pullback is the adjoint of storage -> dense: <pullback(G), b> = <G, dense(b)>.
    CHECK(a.pullback(m).dot(b.storage()) == doctest::Approx((m.transpose() * b.dense()).trace()).epsilon(1e-13));
    // The products read the storage.
    CHECK(((a * m) - a.dense() * m).norm() < 1e-13);
    CHECK(((m * a) - m * a.dense()).norm() < 1e-13);
  }
  CHECK_THROWS_AS(ScaledSymmetricMatrix<double>::from_storage(Eigen::VectorXd::Zero(4)), std::invalid_argument);
}

TEST_CASE("ScaledSymmetricMatrix: pullback is the gradient with respect to the storage, by finite differences") {
  // f(s) = sum_ij C_ij sin(dense(s)_ij), whose gradient with respect to the dense matrix is C .* cos(dense(s)).
  Rng rng(27);
  std::normal_distribution<double> normal;
  ScaledSymmetricMatrix<double> s(4);
  for (Eigen::Index k = 0; k < 10; ++k) s.storage()[k] = normal(rng);
  const MatD c = MatD::Random(4, 4);
  const auto f = [&c](const ScaledSymmetricMatrix<double>& t) { return (c.array() * t.dense().array().sin()).sum(); };
  const Eigen::VectorXd grad = s.pullback(MatD(c.array() * s.dense().array().cos()));
  const double h = 1e-6;
  double worst = 0;
  for (Eigen::Index k = 0; k < 10; ++k) {
    ScaledSymmetricMatrix<double> plus = s, minus = s;
    plus.storage()[k] += h;
    minus.storage()[k] -= h;
    const double fd = (f(plus) - f(minus)) / (2 * h);
    worst = std::max(worst, std::abs(fd - grad[k]));
  }
  MPROPS_CHECK_LE("ScaledSymmetricMatrix(4)", "pullback - central finite difference", worst, 1e-8);
}
