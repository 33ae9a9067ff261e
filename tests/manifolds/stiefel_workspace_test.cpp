// The Stiefel family's workspace (geomopt/manifolds/detail/stiefel_family.hpp), the one implementation of Stiefel,
// Grassmann, Sphere and SpecialOrthogonal, against independent dense references:
//   - the four point types satisfy geomopt::Manifold in float, double and ceres::Jet;
//   - retract equals lambda f(X) [I; 0] with X the dense N x N lift and f Eigen's matrix exponential
//     (unsupported/Eigen/MatrixFunctions) or a dense LU Cayley transform, and a transported section moves to
//     lambda f(X); to_ambient is tangent with the canonical norm |c|; lift is the transpose of to_ambient;
//   - SO(3): the coordinates are the rotation vector of the right perturbation, retract(I, w, geodesic) is Rodrigues'
//     formula and R exp([w]_x) at any R, and the allocating API agrees with the workspace;
//   - lift, to_ambient and retract allocate nothing (every allocation counted), for cores and sections wider than a
//     product tile;
//   - shapes that are not points throw std::invalid_argument naming the manifold and the shape;
//   - the Jet workspace's value part equals the double one.
#include "../support/count_allocations.hpp"

#include <ceres/jet.h>
#include <doctest/doctest.h>

#include <Eigen/Dense>
#include <cmath>
#include <random>
#include <string>
#include <type_traits>
#include <unsupported/Eigen/MatrixFunctions>

#include "geomopt/manifolds.hpp"

namespace {

using geomopt::Grassmann;
using geomopt::Retraction;
using geomopt::Rng;
using geomopt::SectionPolicy;
using geomopt::SpecialOrthogonal;
using geomopt::Sphere;
using geomopt::Stiefel;
using MatD = Eigen::MatrixXd;
using VecD = Eigen::VectorXd;
using Jet = ceres::Jet<double, 3>;

static_assert(geomopt::Manifold<Stiefel<double>> && geomopt::Manifold<Stiefel<float>> &&
              geomopt::Manifold<Stiefel<Jet>>);
static_assert(geomopt::Manifold<Grassmann<double>> && geomopt::Manifold<Grassmann<float>> &&
              geomopt::Manifold<Grassmann<Jet>>);
static_assert(geomopt::Manifold<Sphere<double>> && geomopt::Manifold<Sphere<float>> && geomopt::Manifold<Sphere<Jet>>);
static_assert(geomopt::Manifold<SpecialOrthogonal<double>> && geomopt::Manifold<SpecialOrthogonal<float>> &&
              geomopt::Manifold<SpecialOrthogonal<Jet>>);
static_assert(geomopt::default_retraction<Stiefel<double>>() == Retraction::cayley);
static_assert(geomopt::supports<SpecialOrthogonal<float>>(Retraction::geodesic));
static_assert(!geomopt::supports<Sphere<double>>(Retraction::second_order));

const char* name_of(Retraction r) { return r == Retraction::cayley ? "cayley" : "geodesic"; }
const char* name_of(SectionPolicy p) { return p == SectionPolicy::recomputed ? "recomputed" : "transported"; }

// Independent references: the exponential by Eigen's Pade scaling and squaring, the Cayley transform by a dense LU.
MatD dense_function(const MatD& x, Retraction r) {
  if (r == Retraction::geodesic) return x.exp();
  const MatD id = MatD::Identity(x.rows(), x.cols());
  return Eigen::FullPivLU<MatD>(id - 0.5 * x).solve(id + 0.5 * x);
}

VecD normal_vector(Rng& rng, Eigen::Index size, double scale) {
  std::normal_distribution<double> normal;
  VecD v(size);
  for (Eigen::Index i = 0; i < size; ++i) v[i] = scale * normal(rng);
  return v;
}

// The dense skew matrix A of M's coordinates and the dense lift X = [A, -B^T; B, 0], written from the packing rules
// stated in the headers (packed lower triangle row by row; SO(3) the rotation vector), not from the workspace.
template <class M>
MatD dense_a(const VecD& c, Eigen::Index n) {
  MatD a = MatD::Zero(n, n);
  if constexpr (M::kSkewBlock) {
    if (std::is_same_v<M, SpecialOrthogonal<typename M::Scalar>> && n == 3) {
      a << 0, -c[2], c[1], c[2], 0, -c[0], -c[1], c[0], 0;
    } else {
      Eigen::Index k = 0;
      for (Eigen::Index i = 1; i < n; ++i)
        for (Eigen::Index j = 0; j < i; ++j, ++k) {
          a(i, j) = c[k];
          a(j, i) = -c[k];
        }
    }
  }
  return a;
}
template <class M>
MatD dense_lift(const VecD& c, Eigen::Index N, Eigen::Index n) {
  const Eigen::Index skew = M::kSkewBlock ? n * (n - 1) / 2 : 0;
  MatD x = MatD::Zero(N, N);
  x.topLeftCorner(n, n) = dense_a<M>(c, n);
  const MatD b = Eigen::Map<const MatD>(c.data() + skew, N - n, n);
  x.bottomLeftCorner(N - n, n) = b;
  x.topRightCorner(n, N - n) = -b.transpose();
  return x;
}

// The section lambda = [Y, Y_perp] the workspace uses, read through to_ambient of unit coordinates of B.
template <class M>
MatD section_of(typename M::Workspace& ws, const MatD& y) {
  const Eigen::Index N = y.rows(), n = y.cols(), skew = M::kSkewBlock ? n * (n - 1) / 2 : 0;
  MatD lambda(N, N);
  lambda.leftCols(n) = y;
  VecD c = VecD::Zero(ws.tangent_size()), u(N * n);
  for (Eigen::Index i = 0; i < N - n; ++i) {
    c.setZero();
    c[skew + i] = 1;  // B(i, 0) = 1: u = Y_perp e_i e_0^T
    ws.to_ambient(y.data(), c.data(), u.data());
    lambda.col(n + i) = u.head(N);
  }
  return lambda;
}

// The workspace of M on a random point, in double, against the dense references, both policies and retractions.
template <class M>
void check_against_dense(const M& x, Rng& rng) {
  const MatD y0 = MatD(Eigen::Map<const MatD>(x.value().data(), x.value().rows(), x.value().cols()));
  const Eigen::Index N = y0.rows(), n = y0.cols();
  INFO(M::kName, " ", N, "x", n);
  for (const SectionPolicy policy : {SectionPolicy::recomputed, SectionPolicy::transported}) {
    for (const Retraction r : {Retraction::cayley, Retraction::geodesic}) {
      CAPTURE(name_of(policy));
      CAPTURE(name_of(r));
      for (const double norm : {0.3, 2.0, 40.0}) {
        CAPTURE(norm);
        // A fresh workspace per step: a transported section moves with each retraction.
        typename M::Workspace ws(N, n, policy, y0.data());
        const Eigen::Index d = ws.tangent_size();
        CHECK(d == geomopt::dim(x));
        const MatD lambda = section_of<M>(ws, y0);
        CHECK((lambda.transpose() * lambda - MatD::Identity(N, N)).norm() < 1e-13);
        if (policy == SectionPolicy::transported) {
          CHECK((Eigen::Map<const MatD>(ws.section_data(), N, N) - lambda).norm() < 1e-13);
        }
        const VecD c = normal_vector(rng, d, norm / std::sqrt(static_cast<double>(std::max<Eigen::Index>(d, 1))));
        const MatD big = dense_lift<M>(c, N, n);
        // to_ambient is lambda [A; B]; its canonical norm is |c|; lift is its transpose.
        MatD u(N, n);
        ws.to_ambient(y0.data(), c.data(), u.data());
        CHECK((u - lambda * big.leftCols(n)).norm() <= 1e-13 * std::max(1.0, norm));
        const MatD g = Eigen::Map<const MatD>(normal_vector(rng, N * n, 1.0).data(), N, n);
        VecD lifted(d);
        ws.lift(y0.data(), g.data(), lifted.data());
        CHECK(std::abs(lifted.dot(c) - (g.transpose() * u).trace()) <= 1e-12 * std::max(1.0, norm) * g.norm());
        // retract is lambda f(X) [I; 0] (computed with Eigen's exponential of the N x N lift).
        const MatD f = dense_function(big, r);
        MatD y = y0;
        ws.lift(y.data(), g.data(), lifted.data());  // the section retract keeps
        ws.retract(y.data(), c.data(), r);
        CHECK((y - lambda * f.leftCols(n)).norm() <= 1e-12 * std::max(1.0, norm));
        CHECK(static_cast<double>(ws.check(y.data())) <= 1e-12);
        if (policy == SectionPolicy::transported) {
          const Eigen::Map<const MatD> moved(ws.section_data(), N, N);
          CHECK((moved - lambda * f).norm() <= 1e-12 * std::max(1.0, norm));
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("the workspace equals lambda f(X) [I; 0] against Eigen's exponential and a dense LU Cayley transform") {
  Rng rng(1);
  check_against_dense(Stiefel<double>::random_point(rng, 9, 3), rng);
  check_against_dense(Stiefel<double>::random_point(rng, 6, 4), rng);  // N - n < n
  check_against_dense(Grassmann<double>::random_point(rng, 8, 3), rng);
  check_against_dense(Sphere<double>::random_point(rng, 7), rng);
  check_against_dense(SpecialOrthogonal<double>::random_point(rng, 3), rng);
  check_against_dense(SpecialOrthogonal<double>::random_point(rng, 5), rng);
}

TEST_CASE("SO(3): the coordinates are the rotation vector of R exp([w]_x), and retract(I, w) is Rodrigues' formula") {
  Rng rng(2);
  const auto hat = [](const Eigen::Vector3d& w) {
    MatD k(3, 3);
    k << 0, -w(2), w(1), w(2), 0, -w(0), -w(1), w(0), 0;
    return k;
  };
  const auto rodrigues = [&](const Eigen::Vector3d& w) {
    const double t = w.norm();
    const MatD k = hat(w / t);
    return MatD(MatD::Identity(3, 3) + std::sin(t) * k + (1 - std::cos(t)) * k * k);
  };
  for (const double t : {1e-3, 0.5, 2.0, 3.1}) {
    CAPTURE(t);
    const Eigen::Vector3d w = t * Eigen::Vector3d(normal_vector(rng, 3, 1.0)).normalized();
    geomopt::SpecialOrthogonalTangent<double> xi(3);
    xi.storage() = w;
    CHECK((xi.dense() - hat(w)).norm() == 0);
    SpecialOrthogonal<double> identity(3);
    geomopt::retract(identity, xi, Retraction::geodesic);
    CHECK((identity.value() - rodrigues(w)).norm() < 1e-14);
    // At any R: R exp([w]_x), the right (body) perturbation; to_ambient is R [w]_x; inverse_retract returns w.
    const auto r0 = SpecialOrthogonal<double>::random_point(rng, 3);
    auto r1 = r0;
    geomopt::retract(r1, xi, Retraction::geodesic);
    CHECK((r1.value() - r0.value() * rodrigues(w)).norm() < 1e-13);
    CHECK((geomopt::to_ambient(r0, xi) - r0.value() * hat(w)).norm() < 1e-14);
    CHECK((geomopt::inverse_retract(r0, r1.value(), Retraction::geodesic).storage() - w).norm() < 1e-10);
    // The workspace reads the same coordinates.
    SpecialOrthogonal<double>::Workspace ws(3, 3, SectionPolicy::recomputed, nullptr);
    MatD y = r0.value();
    ws.retract(y.data(), w.data(), Retraction::geodesic);
    CHECK((y - r1.value()).norm() < 1e-14);
  }
  // A SkewSymMatrix converts to the same matrix A, whatever the packing.
  const auto a = geomopt::SkewSymMatrix<double>::from_dense(MatD(hat({0.1, -0.2, 0.3})));
  const geomopt::SpecialOrthogonalTangent<double> converted = a;
  CHECK(converted.storage() == Eigen::Vector3d(0.1, -0.2, 0.3));
  CHECK(converted.dense() == a.dense());
  // The Euclidean gradient G = R [v]_x lifts to 2 v (the metric is tr(U^T V) / 2): lift is the transpose of
  // to_ambient.
  const auto r = SpecialOrthogonal<double>::random_point(rng, 3);
  const Eigen::Vector3d v(0.4, -1.0, 2.5);
  CHECK((geomopt::lift(r, MatD(r.value() * hat(v))).storage() - 2 * v).norm() < 1e-14);
}

TEST_CASE_TEMPLATE("lift, to_ambient and retract allocate nothing", T, float, double) {
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  Rng rng(3);
  const auto run = [&](auto x) {
    using M = decltype(x);
    const Mat y0 = Eigen::Map<const Mat>(x.value().data(), x.value().rows(), x.value().cols());
    for (const SectionPolicy policy : {SectionPolicy::recomputed, SectionPolicy::transported}) {
      for (const Retraction r : {Retraction::cayley, Retraction::geodesic}) {
        INFO(M::kName, " ", y0.rows(), "x", y0.cols(), " ", name_of(policy), " ", name_of(r));
        typename M::Workspace ws(y0.rows(), y0.cols(), policy, y0.data());
        Mat y = y0, g = y0, u = y0;
        Vec c(ws.tangent_size());
        long count = 0;
        for (int step = 0; step < 3; ++step) {
          g.setRandom();
          alloc_count::Window window;
          ws.lift(y.data(), g.data(), c.data());
          c *= T(0.05);
          ws.to_ambient(y.data(), c.data(), u.data());
          ws.lift(y.data(), g.data(), c.data());
          c *= T(0.05);
          ws.retract(y.data(), c.data(), r);
          ws.forget_point();
          ws.retract(y.data(), c.data(), r);
          count += window.count();
        }
        CHECK(count == 0);
        CHECK(static_cast<double>(ws.check(y.data())) < (std::is_same_v<T, float> ? 1e-4 : 1e-12));
      }
    }
  };
  run(Stiefel<T>::random_point(rng, 20, 5));
  run(Stiefel<T>::random_point(rng, 150, 70));  // core and section wider than a product tile
  run(Stiefel<T>::random_point(rng, 5, 5));
  run(Grassmann<T>::random_point(rng, 12, 4));
  run(Sphere<T>::random_point(rng, 300));
  run(SpecialOrthogonal<T>::random_point(rng, 3));
  run(SpecialOrthogonal<T>::random_point(rng, 6));
}

TEST_CASE("shapes that are not points throw std::invalid_argument naming the manifold and the shape") {
  const auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  for (const SectionPolicy policy : {SectionPolicy::recomputed, SectionPolicy::transported}) {
    const std::string st = message([&] { (void)Stiefel<double>::Workspace(3, 5, policy, nullptr); });
    CHECK(st.find("Stiefel") != std::string::npos);
    CHECK(st.find("3x5") != std::string::npos);
    const std::string gr = message([&] { (void)Grassmann<float>::Workspace(2, 4, policy, nullptr); });
    CHECK(gr.find("Grassmann") != std::string::npos);
    CHECK(gr.find("2x4") != std::string::npos);
    const std::string sp = message([&] { (void)Sphere<double>::Workspace(5, 2, policy, nullptr); });
    CHECK(sp.find("Sphere") != std::string::npos);
    CHECK(sp.find("5x2") != std::string::npos);
    const std::string so = message([&] { (void)SpecialOrthogonal<double>::Workspace(3, 4, policy, nullptr); });
    CHECK(so.find("SpecialOrthogonal") != std::string::npos);
    CHECK(so.find("3x4") != std::string::npos);
  }
  // The allocating API: a value that is no point is infinitely far; a gradient of the wrong shape changes nothing.
  CHECK(std::isinf(geomopt::check(Stiefel<double>(MatD::Identity(3, 5)))));
  CHECK(std::isinf(geomopt::check(Sphere<double>(VecD(0)))));
  const Stiefel<double> x(6, 2);
  const std::string lift = message([&] { (void)geomopt::lift(x, MatD(MatD::Ones(7, 2))); });
  CHECK(lift.find("Stiefel::lift") != std::string::npos);
  CHECK(lift.find("6x2") != std::string::npos);
}

TEST_CASE("memory and cost: recomputed O(N n) and O(N n^2), transported O(N^2)") {
  const Stiefel<double>::Workspace small(400, 4, SectionPolicy::recomputed, nullptr);
  const Stiefel<double>::Workspace wide(400, 8, SectionPolicy::recomputed, nullptr);
  const Stiefel<double>::Workspace tall(800, 4, SectionPolicy::recomputed, nullptr);
  const Stiefel<double>::Workspace kept(400, 4, SectionPolicy::transported, nullptr);
  CHECK(small.workspace_bytes() < 400 * 400 * sizeof(double) / 10);
  CHECK(kept.workspace_bytes() > small.workspace_bytes());  // lambda itself is state, not scratch
  CHECK(small.section_data() == nullptr);
  CHECK(kept.section_rows() == 400);
  // The flop estimate grows like N n^2 for the recomputed section, and by the N^2 n of the transported one.
  CHECK(wide.step_cost() / small.step_cost() == doctest::Approx(4).epsilon(0.1));
  CHECK(tall.step_cost() / small.step_cost() == doctest::Approx(2).epsilon(0.1));
  CHECK(kept.step_cost() > 10 * small.step_cost());
}

TEST_CASE("Jet: the workspace's value part equals the double workspace, and the derivative reaches the result") {
  Rng rng(4);
  const auto x = Stiefel<double>::random_point(rng, 7, 3);
  Stiefel<double>::Workspace wd(7, 3, SectionPolicy::recomputed, nullptr);
  Stiefel<Jet>::Workspace wj(7, 3, SectionPolicy::recomputed, nullptr);
  const VecD c = normal_vector(rng, wd.tangent_size(), 0.4);
  Eigen::Matrix<Jet, Eigen::Dynamic, 1> cj(c.size());
  for (Eigen::Index k = 0; k < c.size(); ++k) cj[k] = Jet(c[k]);
  cj[0].v[0] = 1;  // d / d c_0
  for (const Retraction r : {Retraction::cayley, Retraction::geodesic}) {
    MatD y = x.value();
    wd.retract(y.data(), c.data(), r);
    Eigen::Matrix<Jet, Eigen::Dynamic, Eigen::Dynamic> yj = x.value().cast<Jet>();
    wj.retract(yj.data(), cj.data(), r);
    double value_error = 0, derivative = 0;
    for (Eigen::Index i = 0; i < y.size(); ++i) {
      value_error = std::max(value_error, std::abs(yj.data()[i].a - y.data()[i]));
      derivative += yj.data()[i].v[0] * yj.data()[i].v[0];
    }
    CHECK(value_error < 1e-14);
    CHECK(derivative > 0);
  }
}
