// The manifold property suite (manifold_properties.hpp) on the Grassmann manifold and the sphere: Gr(20, 3) and
// Sphere(20) in double and float, Gr(7, 5) and Sphere(3) in double; and closed forms only these two have: the sphere's
// great circle (the Cayley step turns by 2 atan(|u|/2)), the Grassmann geodesic of Edelman, Arias and Smith from the
// SVD of the velocity, and the Grassmann inverse retraction acting on the subspace whatever its representative.
#include "manifold_properties.hpp"

using geomopt::Grassmann;
using geomopt::Retraction;
using geomopt::Rng;
using geomopt::Sphere;
using manifold_props::dbl;
using manifold_props::MatD;
using manifold_props::sizes;

GEOMOPT_MANIFOLD_PROPERTIES(Grassmann<double>, sizes(20, 3))
GEOMOPT_MANIFOLD_PROPERTIES(Grassmann<float>, sizes(20, 3))
GEOMOPT_MANIFOLD_PROPERTIES(Grassmann<double>, sizes(7, 5))
GEOMOPT_MANIFOLD_PROPERTIES(Sphere<double>, sizes(20))
GEOMOPT_MANIFOLD_PROPERTIES(Sphere<float>, sizes(20))
GEOMOPT_MANIFOLD_PROPERTIES(Sphere<double>, sizes(3))

TEST_CASE("Sphere(20): the retractions follow the great circle of the ambient velocity u") {
  // With theta = |u|: geodesic y = cos(theta) x + sin(theta) u / theta; Cayley turns by phi = 2 atan(theta / 2), the
  // angle of (1 + i theta/2) / (1 - i theta/2).
  Rng rng(11);
  const Sphere<double> x = Sphere<double>::random_point(rng, 20);
  double worst = 0;
  for (const double norm : {1e-3, 0.1, 1.0, 3.0, 10.0, 60.0}) {
    CAPTURE(norm);
    const auto xi = manifold_props::tangent_of_norm(x, rng, norm);
    const Eigen::VectorXd u = to_ambient(x, xi);
    const double theta = u.norm();
    CHECK(theta == doctest::Approx(norm).epsilon(1e-12));
    for (const Retraction r : manifold_props::kRetractions) {
      CAPTURE(manifold_props::name_of(r));
      const double phi = r == Retraction::geodesic ? theta : 2 * std::atan(theta / 2);
      const Eigen::VectorXd expected = std::cos(phi) * x.value() + std::sin(phi) * u / theta;
      const double err = (manifold_props::retracted(x, xi, r).value() - expected).norm();
      worst = std::max(worst, err);
      MPROPS_CHECK_LE("Sphere(20)", std::string("great circle ") + manifold_props::name_of(r), err, 1e-12);
    }
  }
}

TEST_CASE("Gr(20, 3): the geodesic is Y Q cos(S) Q^T + P sin(S) Q^T for the thin SVD H = P S Q^T of the velocity") {
  Rng rng(12);
  const Grassmann<double> x = Grassmann<double>::random_point(rng, 20, 3);
  for (const double norm : {0.1, 1.0, 2.0, 10.0}) {
    CAPTURE(norm);
    const auto xi = manifold_props::tangent_of_norm(x, rng, norm);
    const MatD h = to_ambient(x, xi);
    const Eigen::JacobiSVD<MatD> svd(h, Eigen::ComputeThinU | Eigen::ComputeThinV);
    const Eigen::ArrayXd s = svd.singularValues().array();
    const MatD q = svd.matrixV();
    const MatD expected = x.value() * q * s.cos().matrix().asDiagonal() * q.transpose() +
                          svd.matrixU() * s.sin().matrix().asDiagonal() * q.transpose();
    MPROPS_CHECK_LE("Gr(20, 3)", "Edelman geodesic",
                    manifold_props::rel(manifold_props::retracted(x, xi, Retraction::geodesic).value(), expected),
                    1e-12);
  }
}

TEST_CASE("Gr(20, 3): inverse_retract acts on the subspace of y, whatever its representative") {
  Rng rng(13);
  const Grassmann<double> x = Grassmann<double>::random_point(rng, 20, 3);
  for (const Retraction r : manifold_props::kRetractions) {
    CAPTURE(manifold_props::name_of(r));
    for (const double norm : {1e-3, 0.5, 1.0}) {
      CAPTURE(norm);
      const auto xi = manifold_props::tangent_of_norm(x, rng, norm);
      const MatD y = manifold_props::retracted(x, xi, r).value();
      // Another basis of the same subspace: y times an invertible (not orthogonal) 3 x 3 matrix.
      MatD mix = MatD::Random(3, 3) + 3 * MatD::Identity(3, 3);
      const auto eta = inverse_retract(x, MatD(y * mix), r);
      MPROPS_CHECK_LE("Gr(20, 3)", std::string("inverse_retract(y M) - xi ") + manifold_props::name_of(r),
                      (eta.B() - xi.B()).norm(), 1e-10);
    }
    // The representative x itself, rotated, is distance zero away.
    const MatD rotated = x.value() * Eigen::HouseholderQR<MatD>(MatD::Random(3, 3)).householderQ();
    CHECK(inverse_retract(x, rotated, r).B().norm() < 1e-12);
  }
}

TEST_CASE("Gr(20, 3): lift and the Riemannian gradient ignore the vertical part Y S of the Euclidean gradient") {
  Rng rng(14);
  const Grassmann<double> x = Grassmann<double>::random_point(rng, 20, 3);
  const MatD g = MatD::Random(20, 3), vertical = x.value() * MatD::Random(3, 3);
  CHECK((lift(x, MatD(g + vertical)).B() - lift(x, g).B()).norm() < 1e-12);
  CHECK((riemannian_gradient(x, MatD(g + vertical)) - riemannian_gradient(x, g)).norm() < 1e-12);
  // The closed form (I - Y Y^T) G.
  const MatD y = x.value();
  CHECK((riemannian_gradient(x, g) - (g - y * (y.transpose() * g))).norm() < 1e-12);
}
