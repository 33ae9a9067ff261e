// The Ceres adapter at the edges: Minus at a half turn returns false (never true with NaN), Plus of a non-finite
// delta or from a point outside the domain returns false, of a huge finite one stays on the manifold (or, where the
// result overflows, is returned as computed), constructors refuse sizes Ceres's int cannot
// hold, and CeresTreeBlocks::write_to matches leaves by shape, naming the path and both shapes, writing nothing.
#include "ceres_doctest.hpp"

#include <Eigen/Dense>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

using Eigen::MatrixXd;
using Eigen::VectorXd;
using geomopt::CeresManifold;
using geomopt::Retraction;
using geomopt::SPD;
using geomopt::SpecialOrthogonal;
using geomopt::Sphere;
using geomopt::Stiefel;

namespace {

MatrixXd rotation3(const Eigen::Vector3d& u, double t) {
  MatrixXd k(3, 3);
  k << 0, -u(2), u(1), u(2), 0, -u(0), -u(1), u(0), 0;
  return MatrixXd::Identity(3, 3) + std::sin(t) * k + (1 - std::cos(t)) * k * k;
}

template <class M>
void check_minus_refuses(const M& manifold, const MatrixXd& x, const MatrixXd& y) {
  VectorXd out = VectorXd::Constant(manifold.TangentSize(), 7.0);
  CHECK_FALSE(manifold.Minus(y.data(), x.data(), out.data()));
}

struct Leaves {
  Eigen::MatrixXd weight;  // 5 x 2 in the blocks' prototype
  Stiefel<double> frame;   // 4 x 2
  GEOMOPT_PTREE(weight, frame)
};

}  // namespace

TEST_CASE("CeresManifold::Minus at a half turn returns false, near one the closed form") {
  MatrixXd d3 = MatrixXd::Identity(3, 3);
  d3(1, 1) = d3(2, 2) = -1;
  MatrixXd d4 = MatrixXd::Identity(4, 4);
  d4(2, 2) = d4(3, 3) = -1;
  check_minus_refuses(CeresManifold<SpecialOrthogonal<double>>(3), MatrixXd::Identity(3, 3), d3);
  check_minus_refuses(CeresManifold<Stiefel<double>>(3, 3), MatrixXd::Identity(3, 3), d3);
  check_minus_refuses(CeresManifold<SpecialOrthogonal<double>>(4), MatrixXd::Identity(4, 4), d4);
  // A rotated half turn, and one within sqrt(eps) of a half turn.
  geomopt::Rng rng(3);
  const MatrixXd q = SpecialOrthogonal<double>::random_point(rng, 3).value();
  check_minus_refuses(CeresManifold<SpecialOrthogonal<double>>(3), q, MatrixXd(q * d3));
  const Eigen::Vector3d axis = Eigen::Vector3d(1, -2, 0.5).normalized();
  check_minus_refuses(CeresManifold<SpecialOrthogonal<double>>(3), MatrixXd::Identity(3, 3),
                      rotation3(axis, M_PI - 1e-9));
  // pi - 1e-6 is answered: SO(3)'s coordinates are the rotation vector (x, y, z), here 2 tan(t / 2) times the axis.
  const double t = M_PI - 1e-6;
  const CeresManifold<SpecialOrthogonal<double>> so3(3);
  VectorXd out(3);
  const MatrixXd y = rotation3(axis, t), x = MatrixXd::Identity(3, 3);
  REQUIRE(so3.Minus(y.data(), x.data(), out.data()));
  const double scale = 2 * std::tan(t / 2);
  const VectorXd expected = axis * scale;
  CHECK((out - expected).norm() <= 1e-8 * expected.norm());
}

TEST_CASE("CeresManifold::Plus: a non-finite delta returns false, a huge finite one stays on the manifold") {
  const MatrixXd x3 = MatrixXd::Identity(3, 3);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (Retraction r : {Retraction::cayley, Retraction::geodesic}) {
    const CeresManifold<SpecialOrthogonal<double>> so3(3, r);
    MatrixXd out(3, 3);
    for (double bad : {nan, inf}) {
      const Eigen::Vector3d delta(0.1, bad, 0.2);
      CHECK_FALSE(so3.Plus(x3.data(), delta.data(), out.data()));
    }
    const CeresManifold<Sphere<double>> sphere(4, r);
    const VectorXd x = VectorXd::Unit(4, 0);
    VectorXd y(4);
    CHECK_FALSE(sphere.Plus(x.data(), Eigen::Vector3d(nan, 0, 0).data(), y.data()));
    for (double norm : {1.0, 1e8, 1e160, 1e300}) {
      CAPTURE(norm);
      const Eigen::Vector3d delta = Eigen::Vector3d(0.3, -1, 2).normalized() * norm;
      REQUIRE(so3.Plus(x3.data(), delta.data(), out.data()));
      CHECK((out.transpose() * out - MatrixXd::Identity(3, 3)).norm() < 1e-13);
      CHECK(out.determinant() > 0);
      REQUIRE(sphere.Plus(x.data(), delta.data(), y.data()));
      CHECK(std::abs(y.norm() - 1) < 1e-14);
    }
  }
  // A step whose result overflows is returned as computed (Ceres's trust region rejects it by its cost, and a steep
  // start's Plus(x, -gradient) must not end the solve); a point outside the domain is refused.
  const CeresManifold<SPD<double>> spd(2);
  const MatrixXd identity2 = MatrixXd::Identity(2, 2), indefinite = Eigen::Vector2d(1, -1).asDiagonal();
  MatrixXd far(2, 2);
  CHECK(spd.Plus(identity2.data(), Eigen::Vector3d(1e4, 0, 0).data(), far.data()));
  CHECK_FALSE(far.allFinite());
  CHECK_FALSE(spd.Plus(indefinite.data(), Eigen::Vector3d(1e4, 0, 0).data(), far.data()));
  // The sphere's closed form against the general Stiefel path St(4, 1), at moderate and large norms.
  const CeresManifold<Sphere<double>> sphere(4);
  const CeresManifold<Stiefel<double>> column(4, 1);
  const VectorXd x = VectorXd(Eigen::Vector4d(0.5, -0.5, 0.5, 0.5));
  for (double norm : {0.5, 3.0, 1e6}) {
    const Eigen::Vector3d delta = Eigen::Vector3d(1, 2, -2) / 3 * norm;
    VectorXd a(4), b(4);
    REQUIRE(sphere.Plus(x.data(), delta.data(), a.data()));
    REQUIRE(column.Plus(x.data(), delta.data(), b.data()));
    CHECK((a - b).norm() < 1e-13);
  }
}

TEST_CASE("CeresManifold and CeresLocalParameterization refuse sizes Ceres's int cannot hold") {
  auto message = [](auto&& make) -> std::string {
    try {
      make();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  const std::string stiefel = message([] { CeresManifold<Stiefel<double>> m(3000000000, 1); });
  CAPTURE(stiefel);
  CHECK(stiefel.find("CeresManifold<Stiefel>") != std::string::npos);
  CHECK(stiefel.find("3000000000") != std::string::npos);
  CHECK_THROWS_AS(CeresManifold<Stiefel<double>>(70000, 70000), std::invalid_argument);
  CHECK_THROWS_AS(CeresManifold<Stiefel<double>>(5, 0), std::invalid_argument);
  CHECK_THROWS_AS(CeresManifold<Stiefel<double>>(-5, -1), std::invalid_argument);
  CHECK_THROWS_AS(CeresManifold<Sphere<double>>(3000000000), std::invalid_argument);
  CHECK_THROWS_AS(CeresManifold<Sphere<double>>(0), std::invalid_argument);
  CHECK_THROWS_AS(CeresManifold<SpecialOrthogonal<double>>(46341), std::invalid_argument);
  CHECK_THROWS_AS(CeresManifold<SPD<double>>(46341), std::invalid_argument);
  CHECK_THROWS_AS(CeresManifold<SPD<double>>(3000000000), std::invalid_argument);
  CHECK_THROWS_AS(CeresManifold<geomopt::SymmetricMatrix<double>>(46341), std::invalid_argument);
  // The largest that fit construct with sizes that are positive and consistent.
  const CeresManifold<Sphere<double>> big_sphere(std::numeric_limits<int>::max());
  CHECK(big_sphere.AmbientSize() == std::numeric_limits<int>::max());
  CHECK(big_sphere.TangentSize() == std::numeric_limits<int>::max() - 1);
  const CeresManifold<SPD<double>> big_spd(46340);
  CHECK(big_spd.AmbientSize() == 46340 * 46340);
#ifdef GEOMOPT_HAS_CERES_LOCAL_PARAMETERIZATION
  CHECK_THROWS_AS(geomopt::CeresLocalParameterization<Stiefel<double>>(3000000000, 1), std::invalid_argument);
  CHECK_THROWS_AS(geomopt::CeresLocalParameterization<SPD<double>>(46341), std::invalid_argument);
#endif
}

TEST_CASE("CeresTreeBlocks::write_to matches leaves by shape, names the path and both shapes, writes nothing") {
  geomopt::Rng rng(23);
  Leaves prototype{MatrixXd::Constant(5, 2, 1.5), Stiefel<double>::random_point(rng, 4, 2)};
  const geomopt::CeresTreeBlocks<Leaves> blocks(prototype);

  // Same total size, transposed leaf: refused.
  Leaves transposed{MatrixXd::Constant(2, 5, -3.0), Stiefel<double>::random_point(rng, 4, 2)};
  const Leaves before = transposed;
  std::string message;
  try {
    blocks.write_to(transposed);
  } catch (const geomopt::StructureError& e) {
    message = e.what();
  }
  CAPTURE(message);
  CHECK(message.find("\"weight\"") != std::string::npos);
  CHECK(message.find("2x5") != std::string::npos);
  CHECK(message.find("5x2") != std::string::npos);
  CHECK(transposed.weight == before.weight);
  CHECK(transposed.frame.value() == before.frame.value());

  // A leaf of another size elsewhere: refused too, the earlier leaves untouched.
  Leaves wide{MatrixXd::Constant(5, 2, 4.0), Stiefel<double>(8, 1)};
  CHECK_THROWS_AS(blocks.write_to(wide), geomopt::StructureError);
  CHECK(wide.weight == MatrixXd::Constant(5, 2, 4.0));

  // The matching shape is written.
  Leaves same{MatrixXd::Zero(5, 2), Stiefel<double>(4, 2)};
  blocks.write_to(same);
  CHECK(same.weight == prototype.weight);
  CHECK(same.frame.value() == prototype.frame.value());
}
