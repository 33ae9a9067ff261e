// geomopt/manifolds/lie_alg_hor.hpp: the dense forms written out by hand, block products against dense products,
// and the lifts as ptree leaves (two storage blocks for Stiefel, one for Grassmann).
#include <doctest/doctest.h>

#include <ceres/jet.h>

#include <Eigen/Dense>
#include <geomopt/manifolds.hpp>
#include <limits>
#include <stdexcept>

namespace pt = geomopt::ptree;
using geomopt::GrassmannLieAlgHorMatrix;
using geomopt::SkewSymMatrix;
using geomopt::StiefelLieAlgHorMatrix;

TEST_CASE("StiefelLieAlgHorMatrix for St(4, 2): [A, -B^T; B, 0] written out by hand") {
  SkewSymMatrix<double> a(2);
  a.storage() << 5;  // A(1, 0) = 5, A(0, 1) = -5
  Eigen::MatrixXd b(2, 2);
  b << 1, 2,  //
      3, 4;
  const StiefelLieAlgHorMatrix<double> x(a, b);
  Eigen::Matrix4d expected;
  expected << 0, -5, -1, -3,  //
      5, 0, -2, -4,           //
      1, 2, 0, 0,             //
      3, 4, 0, 0;
  CHECK(x.dense() == expected);
  CHECK(x.N() == 4);
  CHECK(x.n() == 2);
  CHECK((x.dense() + x.dense().transpose()).norm() == 0.0);
  CHECK_THROWS_AS(StiefelLieAlgHorMatrix<double>(a, Eigen::MatrixXd::Zero(2, 3)), std::invalid_argument);
  CHECK_THROWS_AS(StiefelLieAlgHorMatrix<double>(3, 4), std::invalid_argument);
}

TEST_CASE("GrassmannLieAlgHorMatrix for Gr(3, 1): [0, -B^T; B, 0] written out by hand") {
  Eigen::MatrixXd b(2, 1);
  b << 7, 8;
  const GrassmannLieAlgHorMatrix<double> x(b);
  Eigen::Matrix3d expected;
  expected << 0, -7, -8,  //
      7, 0, 0,            //
      8, 0, 0;
  CHECK(x.dense() == expected);
  CHECK(x.N() == 3);
  CHECK(x.n() == 1);
}

TEST_CASE("block products equal products with the dense N x N matrix") {
  const Eigen::Index N = 9, n = 3;
  StiefelLieAlgHorMatrix<double> s(N, n);
  s.A().storage().setRandom();
  s.B().setRandom();
  GrassmannLieAlgHorMatrix<double> g(N, n);
  g.B().setRandom();
  const Eigen::MatrixXd x = Eigen::MatrixXd::Random(N, 4);
  CHECK(((s * x) - s.dense() * x).norm() < 1e-13);
  CHECK(((g * x) - g.dense() * x).norm() < 1e-13);
  CHECK_THROWS_AS(s * Eigen::MatrixXd::Zero(N - 1, 2), std::invalid_argument);
}

namespace {
template <class T>
struct Moments {
  StiefelLieAlgHorMatrix<T> st;
  GrassmannLieAlgHorMatrix<T> gr;
  GEOMOPT_PTREE(st, gr)
};
}  // namespace

TEST_CASE("lifts as ptree leaves: storage blocks in order, round trips, cast and ceres::Jet") {
  Moments<double> m{StiefelLieAlgHorMatrix<double>(5, 2), GrassmannLieAlgHorMatrix<double>(4, 1)};
  m.st.A().storage() << 1;
  m.st.B() << 2, 5, 3, 6, 4, 7;  // column-major: 2 3 4 | 5 6 7
  m.gr.B() << 8, 9, 10;
  static_assert(std::is_same_v<pt::rebind_t<Moments<double>, float>, Moments<float>>);

  Eigen::VectorXd expected(1 + 6 + 3);
  expected << 1, 2, 3, 4, 5, 6, 7, 8, 9, 10;
  CHECK(pt::flatten(m) == expected);
  const auto l = pt::layout(m);
  REQUIRE(l.leaves.size() == 2);
  CHECK(l.leaves[0].path == "st");
  CHECK(l.leaves[0].size == 7);
  CHECK(l.leaves[1].dims == std::vector<Eigen::Index>{3, 1});

  const Moments<double> back = pt::unflatten(m, Eigen::VectorXd(-expected));
  CHECK(back.st.dense() == -m.st.dense());
  CHECK(back.gr.dense() == -m.gr.dense());

  const Moments<float> f = pt::cast<float>(m);
  CHECK(f.st.dense() == m.st.dense().cast<float>());

  using Jet = ceres::Jet<double, 10>;
  Eigen::Matrix<Jet, Eigen::Dynamic, 1> seeded(10);
  for (int i = 0; i < 10; ++i) seeded[i] = Jet(expected[i], i);
  const Moments<Jet> mj = pt::unflatten(m, seeded);
  // d/dB(0,0) of the (2, 0) entry of the dense Stiefel lift is 1: B(0,0) is flat entry 1.
  CHECK(mj.st.dense()(2, 0).v[1] == 1.0);
  CHECK(mj.st.dense()(0, 2).v[1] == -1.0);
  CHECK(mj.st.dense()(1, 0).v[0] == 1.0);  // A(1, 0) is flat entry 0

  Moments<double> bad = m;
  bad.st.B().resize(2, 2);
  CHECK_THROWS_AS(pt::for_each([](auto&, auto&) {}, m, bad), geomopt::StructureError);
}

TEST_CASE("a geodesic step by a non-finite lift throws and changes nothing; the exponential gives NaN") {
  geomopt::Stiefel<double> x(6, 3);
  const Eigen::MatrixXd before = x.value();
  geomopt::StiefelLieAlgHorMatrix<double> xi(geomopt::SkewSymMatrix<double>(3), Eigen::MatrixXd::Zero(3, 3));
  xi.B()(1, 2) = std::numeric_limits<double>::infinity();
  CHECK_THROWS_AS(geomopt::retract(x, xi, geomopt::Retraction::geodesic), std::domain_error);
  CHECK((x.value().array() == before.array()).all());
  // The optimizers' steppers propagate instead of throwing: detail::expm counts its squarings from the norm, and an
  // infinite norm must not reach the conversion to int.
  Eigen::MatrixXd s = Eigen::MatrixXd::Zero(3, 3);
  s(1, 2) = std::numeric_limits<double>::infinity();
  s(2, 1) = -s(1, 2);
  CHECK(geomopt::detail::expm<double>(s).array().isNaN().any());
}
