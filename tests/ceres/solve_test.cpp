// The adapters inside Ceres's solvers, each against an independent reference: orthogonal Procrustes on St(10, 3) and
// SO(3) by ceres::Problem against the SVD solution (also through CeresLocalParameterization where Ceres still has
// it); Brockett on St(20, 5) by ceres::GradientProblem against the optimum from the eigenvalues; the Rayleigh quotient
// on Sphere(50) by the Sphere adapter and by Ceres's own SphereManifold<DYNAMIC>, against the smallest eigenvalue and
// each other. Also: the adapter's coordinates are geomopt's (lift, retract), failures come back as false, and sizes
// are checked.
#include "ceres_doctest.hpp"

#include <Eigen/Dense>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>

namespace {

using Eigen::MatrixXd;
using Eigen::VectorXd;
using RowMajor = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Residuals vec(Y A - B) for Y N x n, A n x m, B N x m: Y A - B is linear in Y, so the Jacobian is A^T (x) I.
// On St(N, n), |Y A - B|^2 = |A|^2 - 2 tr(Y^T B A^T) + |B|^2, minimised by the polar factor of B A^T.
class FrameFit final : public ceres::CostFunction {
 public:
  FrameFit(MatrixXd a, MatrixXd b) : a_(std::move(a)), b_(std::move(b)) {
    set_num_residuals(static_cast<int>(b_.size()));
    mutable_parameter_block_sizes()->push_back(static_cast<int>(b_.rows() * a_.rows()));
  }
  bool Evaluate(double const* const* parameters, double* residuals, double** jacobians) const override {
    const Eigen::Index N = b_.rows(), n = a_.rows(), m = a_.cols();
    const Eigen::Map<const MatrixXd> y(parameters[0], N, n);
    Eigen::Map<MatrixXd>(residuals, N, m) = y * a_ - b_;
    if (jacobians != nullptr && jacobians[0] != nullptr) {
      Eigen::Map<RowMajor> j(jacobians[0], N * m, N * n);
      j.setZero();
      for (Eigen::Index c = 0; c < m; ++c)
        for (Eigen::Index k = 0; k < n; ++k)
          for (Eigen::Index i = 0; i < N; ++i) j(c * N + i, k * N + i) = a_(k, c);
    }
    return true;
  }

 private:
  MatrixXd a_, b_;
};

struct ProcrustesData {
  MatrixXd a, b, solution;
  double cost(const MatrixXd& y) const { return (y * a - b).squaredNorm(); }
};

// At the minimum the cost changes by |dY|^2, below its rounding once |dY| is near sqrt(eps |f| / |A|^2) ~ 1e-8,
// where Ceres's trust region stops. So the frame is compared to 1e-7 (a wrong critical point is O(1) away) and the
// cost, which the SVD solution minimises, to 1e-13 relative.
void check_fit(const ProcrustesData& d, const MatrixXd& y) {
  CHECK((y - d.solution).norm() < 1e-7);
  CHECK(std::abs(d.cost(y) - d.cost(d.solution)) <= 1e-13 * d.cost(d.solution));
}

// m noisy correspondences b_k = Y_true a_k + noise; the solution is U V^T from the SVD B A^T = U S V^T, with the last
// column of U negated for SO(n) when det(U V^T) = -1 (Kabsch).
ProcrustesData procrustes(geomopt::Rng& rng, Eigen::Index N, Eigen::Index n, bool rotation) {
  const Eigen::Index m = 4 * n + 8;
  ProcrustesData d;
  d.a = geomopt::detail::gaussian<double>(rng, n, m);
  const MatrixXd truth = rotation ? geomopt::SpecialOrthogonal<double>::random_point(rng, n).value()
                                  : geomopt::Stiefel<double>::random_point(rng, N, n).value();
  d.b = truth * d.a + 0.2 * geomopt::detail::gaussian<double>(rng, N, m);
  Eigen::JacobiSVD<MatrixXd> svd(d.b * d.a.transpose(), Eigen::ComputeThinU | Eigen::ComputeThinV);
  MatrixXd u = svd.matrixU();
  if (rotation && (u * svd.matrixV().transpose()).determinant() < 0) u.col(n - 1) *= -1;
  d.solution = u * svd.matrixV().transpose();
  return d;
}

ceres::Solver::Options tight_options() {
  ceres::Solver::Options options;
  options.max_num_iterations = 200;
  options.function_tolerance = 0;
  options.parameter_tolerance = 0;
  options.gradient_tolerance = 1e-12;
  options.linear_solver_type = ceres::DENSE_QR;
  // At the rounding floor the model's decrease is exactly zero and Ceres counts the step invalid; whether five such
  // steps in a row come before a step whose cost change is exactly zero (function_tolerance 0) depends on the last bits
  // of the arithmetic (the kernel path, for one), and the first ends the solve as a FAILURE that keeps the start. As
  // many invalid steps as iterations make either end usable; check_fit judges the point.
  options.max_num_consecutive_invalid_steps = options.max_num_iterations;
  return options;
}

// Solves the Procrustes problem from a random start with the manifold `set` installs; returns the fitted frame.
template <class Point, class Set>
MatrixXd solve_procrustes(const ProcrustesData& d, Point start, Set set) {
  MatrixXd y = start.value();
  ceres::Problem problem;
  problem.AddResidualBlock(new FrameFit(d.a, d.b), nullptr, y.data());
  set(problem, y.data());
  ceres::Solver::Summary summary;
  ceres::Solve(tight_options(), &problem, &summary);
  INFO(summary.BriefReport());
  CHECK(summary.IsSolutionUsable());
  return y;
}

}  // namespace

TEST_CASE("ceres::Problem fits an orthonormal frame: Procrustes on St(10, 3) and SO(3) against the SVD") {
  geomopt::Rng rng(2026);
  for (int trial = 0; trial < 3; ++trial) {
    CAPTURE(trial);
    const ProcrustesData st = procrustes(rng, 10, 3, false);
    const MatrixXd y = solve_procrustes(st, geomopt::Stiefel<double>::random_point(rng, 10, 3), [](auto& p, double* x) {
      p.SetManifold(x, new geomopt::CeresManifold<geomopt::Stiefel<double>>(10, 3));
    });
    check_fit(st, y);
    CHECK(geomopt::check(geomopt::Stiefel<double>(y)) < 1e-12);

    const ProcrustesData so = procrustes(rng, 3, 3, true);
    for (auto r : {geomopt::Retraction::cayley, geomopt::Retraction::geodesic}) {
      const MatrixXd x =
          solve_procrustes(so, geomopt::SpecialOrthogonal<double>::random_point(rng, 3), [r](auto& p, double* v) {
            p.SetManifold(v, new geomopt::CeresManifold<geomopt::SpecialOrthogonal<double>>(3, r));
          });
      check_fit(so, x);
      CHECK(geomopt::check(geomopt::SpecialOrthogonal<double>(x)) < 1e-12);  // a rotation, det = +1
    }
  }
}

#ifdef GEOMOPT_HAS_CERES_LOCAL_PARAMETERIZATION
TEST_CASE("Procrustes through CeresLocalParameterization (Ceres < 2.2) reaches the SVD solution too") {
  geomopt::Rng rng(7);
  // SetParameterization is deprecated in Ceres 2.1; calling it is what this test is for.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  const ProcrustesData st = procrustes(rng, 10, 3, false);
  const MatrixXd y = solve_procrustes(st, geomopt::Stiefel<double>::random_point(rng, 10, 3), [](auto& p, double* x) {
    p.SetParameterization(x, new geomopt::CeresLocalParameterization<geomopt::Stiefel<double>>(10, 3));
  });
  check_fit(st, y);
  const ProcrustesData so = procrustes(rng, 3, 3, true);
  const MatrixXd x =
      solve_procrustes(so, geomopt::SpecialOrthogonal<double>::random_point(rng, 3), [](auto& p, double* v) {
        p.SetParameterization(v, new geomopt::CeresLocalParameterization<geomopt::SpecialOrthogonal<double>>(3));
      });
  check_fit(so, x);

  // The same numbers as the Manifold interface: Jacobian, and the product with it.
  const geomopt::CeresLocalParameterization<geomopt::Stiefel<double>> local(10, 3);
  const geomopt::CeresManifold<geomopt::Stiefel<double>> manifold(10, 3);
#pragma GCC diagnostic pop
  CHECK(local.GlobalSize() == 30);
  CHECK(local.LocalSize() == 24);
  RowMajor j1(30, 24), j2(30, 24);
  REQUIRE(local.ComputeJacobian(y.data(), j1.data()));
  REQUIRE(manifold.PlusJacobian(y.data(), j2.data()));
  CHECK((j1 - j2).norm() == 0.0);
  const RowMajor g = RowMajor::Random(2, 30);
  RowMajor out(2, 24);
  REQUIRE(local.MultiplyByJacobian(y.data(), 2, g.data(), out.data()));
  CHECK((out - g * j1).norm() < 1e-12 * g.norm());
}
#endif

namespace {

// f(Y) = tr(Y^T A Y D), D = diag(1..p); Euclidean gradient 2 A Y D.
class Brockett final : public ceres::FirstOrderFunction {
 public:
  Brockett(MatrixXd a, Eigen::Index p) : a_(std::move(a)), d_(VectorXd::LinSpaced(p, 1, double(p))) {}
  bool Evaluate(const double* parameters, double* cost, double* gradient) const override {
    const Eigen::Map<const MatrixXd> y(parameters, a_.rows(), d_.size());
    const MatrixXd ay = a_ * y;
    cost[0] = (y.transpose() * ay * d_.asDiagonal()).trace();
    if (gradient != nullptr) Eigen::Map<MatrixXd>(gradient, a_.rows(), d_.size()) = 2 * ay * d_.asDiagonal();
    return true;
  }
  int NumParameters() const override { return static_cast<int>(a_.rows() * d_.size()); }

 private:
  MatrixXd a_;
  VectorXd d_;
};

// f(x) = x^T A x; Euclidean gradient 2 A x.
class Rayleigh final : public ceres::FirstOrderFunction {
 public:
  explicit Rayleigh(MatrixXd a) : a_(std::move(a)) {}
  bool Evaluate(const double* parameters, double* cost, double* gradient) const override {
    const Eigen::Map<const VectorXd> x(parameters, a_.rows());
    const VectorXd ax = a_ * x;
    cost[0] = x.dot(ax);
    if (gradient != nullptr) Eigen::Map<VectorXd>(gradient, a_.rows()) = 2 * ax;
    return true;
  }
  int NumParameters() const override { return static_cast<int>(a_.rows()); }

 private:
  MatrixXd a_;
};

ceres::GradientProblemSolver::Options gradient_options() {
  ceres::GradientProblemSolver::Options options;
  options.max_num_iterations = 5000;
  options.function_tolerance = 1e-16;
  options.gradient_tolerance = 1e-11;
  options.parameter_tolerance = 1e-16;
  return options;
}

MatrixXd random_symmetric(geomopt::Rng& rng, Eigen::Index n) {
  const MatrixXd g = geomopt::detail::gaussian<double>(rng, n, n);
  return (g + g.transpose()) / 2;
}

}  // namespace

TEST_CASE("ceres::GradientProblem with the Stiefel adapter solves Brockett on St(20, 5) to the eigenvalue optimum") {
  geomopt::Rng rng(5);
  const Eigen::Index N = 20, p = 5;
  for (auto r : {geomopt::Retraction::cayley, geomopt::Retraction::geodesic}) {
    CAPTURE(int(r));
    const MatrixXd a = random_symmetric(rng, N);
    const VectorXd lambda = Eigen::SelfAdjointEigenSolver<MatrixXd>(a).eigenvalues();  // ascending
    double optimum = 0;
    for (Eigen::Index i = 0; i < p; ++i) optimum += double(i + 1) * lambda[p - 1 - i];

    MatrixXd y = geomopt::Stiefel<double>::random_point(rng, N, p).value();
    const ceres::GradientProblem problem(new Brockett(a, p),
                                         new geomopt::CeresManifold<geomopt::Stiefel<double>>(N, p, r));
    ceres::GradientProblemSolver::Summary summary;
    ceres::Solve(gradient_options(), problem, y.data(), &summary);
    INFO(summary.BriefReport());
    CHECK(summary.IsSolutionUsable());
    const double f = (y.transpose() * a * y * VectorXd::LinSpaced(p, 1, double(p)).asDiagonal()).trace();
    CHECK(std::abs(f - optimum) < 1e-10 * std::abs(optimum));
    CHECK(geomopt::check(geomopt::Stiefel<double>(y)) < 1e-12);
    // The columns are the eigenvectors: column i (weight i + 1) spans the eigenvector of lambda_(p - 1 - i).
    const MatrixXd v = Eigen::SelfAdjointEigenSolver<MatrixXd>(a).eigenvectors();
    for (Eigen::Index i = 0; i < p; ++i) CHECK(std::abs(std::abs(v.col(p - 1 - i).dot(y.col(i))) - 1) < 1e-6);
  }
}

TEST_CASE("The Sphere adapter and Ceres's SphereManifold<DYNAMIC> solve the Rayleigh quotient on Sphere(50) alike") {
  geomopt::Rng rng(50);
  const Eigen::Index N = 50;
  for (int trial = 0; trial < 3; ++trial) {
    CAPTURE(trial);
    const MatrixXd a = random_symmetric(rng, N);
    Eigen::SelfAdjointEigenSolver<MatrixXd> eig(a);
    const VectorXd x0 = geomopt::Sphere<double>::random_point(rng, N).value();

    auto solve = [&](ceres::Manifold* manifold) {
      VectorXd x = x0;
      const ceres::GradientProblem problem(new Rayleigh(a), manifold);
      ceres::GradientProblemSolver::Summary summary;
      ceres::Solve(gradient_options(), problem, x.data(), &summary);
      INFO(summary.BriefReport());
      CHECK(summary.IsSolutionUsable());
      return x;
    };
    const VectorXd ours = solve(new geomopt::CeresManifold<geomopt::Sphere<double>>(N));
    const VectorXd theirs = solve(new ceres::SphereManifold<ceres::DYNAMIC>(static_cast<int>(N)));

    const double lambda_min = eig.eigenvalues()[0];
    CHECK(std::abs(ours.dot(a * ours) - lambda_min) < 1e-10 * std::abs(lambda_min));
    CHECK(std::abs(theirs.dot(a * theirs) - lambda_min) < 1e-10 * std::abs(lambda_min));
    CHECK(std::abs(ours.norm() - 1) < 1e-13);
    // The same eigenvector, up to sign, from both, and the reference's.
    CHECK(std::abs(std::abs(ours.dot(theirs)) - 1) < 1e-8);
    CHECK(std::abs(std::abs(ours.dot(eig.eigenvectors().col(0))) - 1) < 1e-8);
  }
}

TEST_CASE("The adapter's tangent coordinates are geomopt's: Plus is retract, the gradient row is lift") {
  geomopt::Rng rng(3);
  const auto x = geomopt::Stiefel<double>::random_point(rng, 9, 4);
  const auto xi = geomopt::random_tangent(x, rng);
  const geomopt::CeresManifold<geomopt::Stiefel<double>> manifold(9, 4, geomopt::Retraction::geodesic);
  REQUIRE(manifold.TangentSize() == geomopt::dim(x));
  VectorXd delta(manifold.TangentSize());
  delta << xi.A().storage(), Eigen::Map<const VectorXd>(xi.B().data(), xi.B().size());
  MatrixXd plus(9, 4);
  REQUIRE(manifold.Plus(x.value().data(), delta.data(), plus.data()));
  auto moved = x;
  geomopt::retract(moved, xi, geomopt::Retraction::geodesic);
  CHECK((plus - moved.value()).norm() < 1e-14);

  const MatrixXd g = geomopt::detail::gaussian<double>(rng, 9, 4);
  VectorXd row(manifold.TangentSize());
  REQUIRE(manifold.RightMultiplyByPlusJacobian(x.value().data(), 1, g.data(), row.data()));
  const auto lifted = geomopt::lift(x, g);
  CHECK((row.head(6) - lifted.A().storage()).norm() < 1e-13);
  CHECK((row.tail(20) - Eigen::Map<const VectorXd>(lifted.B().data(), 20)).norm() < 1e-13);
  // ... and the metric: |delta|^2 is the canonical norm of the ambient tangent vector.
  const MatrixXd u = geomopt::to_ambient(x, xi);
  CHECK(std::abs(delta.squaredNorm() - geomopt::metric(x, u, u)) < 1e-12 * delta.squaredNorm());

  // SPD: svec of the whitened tangent, orthonormal for the affine-invariant metric.
  const auto s = geomopt::SPD<double>::random_point(rng, 4);
  const auto w = geomopt::random_tangent(s, rng);
  const geomopt::CeresManifold<geomopt::SPD<double>> spd(4);
  RowMajor jac(16, 10);
  REQUIRE(spd.PlusJacobian(s.value().data(), jac.data()));
  const VectorXd du = jac * w.storage();
  const MatrixXd u_spd = Eigen::Map<const MatrixXd>(du.data(), 4, 4);
  CHECK((u_spd - geomopt::to_ambient(s, w)).norm() < 1e-12 * u_spd.norm());
  CHECK(std::abs(w.storage().squaredNorm() - geomopt::metric(s, u_spd, u_spd)) < 1e-10 * w.storage().squaredNorm());
}

TEST_CASE("Failures come back as false, bad sizes throw naming what was expected") {
  // A half turn is out of the Cayley retraction's reach: Minus fails rather than returning a wrong vector.
  const MatrixXd identity = MatrixXd::Identity(3, 3);
  const MatrixXd half_turn = Eigen::Vector3d(-1, -1, 1).asDiagonal();
  const geomopt::CeresManifold<geomopt::SpecialOrthogonal<double>> so3(3);
  VectorXd out(3);
  CHECK_FALSE(so3.Minus(half_turn.data(), identity.data(), out.data()));

  // SPD Plus from a point that is not positive definite (its Cholesky factor does not exist).
  const MatrixXd indefinite = Eigen::Vector2d(1, -1).asDiagonal();
  const geomopt::CeresManifold<geomopt::SPD<double>> spd(2);
  VectorXd delta = VectorXd::Zero(3);
  MatrixXd moved(2, 2);
  CHECK_FALSE(spd.Plus(indefinite.data(), delta.data(), moved.data()));

  auto message = [](auto make) {
    try {
      make();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  CHECK(message([] { geomopt::CeresManifold<geomopt::Stiefel<double>>(3, 4); }) ==
        "CeresManifold<Stiefel>: Stiefel: expected an N x n matrix with 0 <= n <= N, got 3x4");
  CHECK(message([] { geomopt::CeresManifold<geomopt::SPD<double>>(0); }) ==
        "CeresManifold<SPD>: a Ceres parameter block needs at least one entry, got a 0x0 point");
  CHECK(message([] { geomopt::CeresManifold<geomopt::Sphere<double>>(0); }) ==
        "CeresManifold<Sphere>: Sphere: expected a vector of length N >= 1 (an Nx1 matrix), got 0x1");
}
