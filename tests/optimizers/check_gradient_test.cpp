// Tests of check_gradient and check_hessian (geomopt/optimizers/check_gradient.hpp), on costs whose derivatives are
// written out here, each a closed form:
//   - a tree of two layers (a Stiefel weight and a bias each), a packed symmetric matrix, an SPD matrix and a scalar,
//     with terms coupling the leaves: right derivatives pass with the expected slopes; each leaf's gradient or
//     Hessian scaled by 1.01, or left unwritten, fails naming that leaf; the stochastic optimizers' loss form too;
//   - the Brockett cost on St(20, 5) and Procrustes on SO(3) and St(10, 3) with their Euclidean Hessians;
//   - Brockett in float; linear and quadratic costs on a Euclidean leaf, where the model is exact;
// then the options' validation, determinism in the seed and the reports. The solvers' own problems are checked in
// solvers_test.cpp, where they are defined.
#include <doctest/doctest.h>

#include <Eigen/Dense>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "geomopt/solvers.hpp"

namespace {

using Matrix = Eigen::MatrixXd;
using Vector = Eigen::VectorXd;
using geomopt::DerivativeCheck;
using geomopt::DerivativeCheckOptions;

constexpr std::uint64_t kSeed = 20261230;

Matrix gaussian(geomopt::Rng& rng, Eigen::Index rows, Eigen::Index cols) {
  return geomopt::detail::gaussian<double>(rng, rows, cols);
}
Matrix symmetric(geomopt::Rng& rng, Eigen::Index n) {
  const Matrix b = gaussian(rng, n, n);
  return (b + b.transpose()) / 2;
}

// ---------------------------------------------------------------------------------------------------------------
// The layered tree. With D = diag(1..p), C SPD and the data A_l (symmetric), c_l, z_l, S0:
//   f = sum_l [tr(W_l^T A_l W_l D) + |b_l - c_l|^2 + b_l^T W_l^T z_l] + |dense(S) - S0|_F^2 + tr(P C) - log det P
//       + e^s 1^T b_0 + s^2
// egrad:  W_l: 2 A_l W_l D + z_l b_l^T       b_l: 2 (b_l - c_l) + W_l^T z_l (+ e^s 1 for l = 0)
//         S: pullback(2 (dense(S) - S0))    P: C - P^-1                      s: e^s 1^T b_0 + 2 s
// ehess[xi]:  W_l: 2 A_l xi_W D + z_l xi_b^T    b_l: 2 xi_b + xi_W^T z_l (+ e^s xi_s 1 for l = 0)
//             S: pullback(2 dense(xi_S))        P: P^-1 xi_P P^-1           s: e^s (xi_s 1^T b_0 + 1^T xi_b0) + 2 xi_s

struct Layer {
  geomopt::Stiefel<double> W;
  Vector b;
  GEOMOPT_PTREE(W, b)
};

struct Net {
  std::vector<Layer> layers;
  geomopt::SymmetricMatrix<double> S;
  geomopt::SPD<double> P;
  double s = 0;
  GEOMOPT_PTREE(layers, S, P, s)
};

const std::vector<std::string> kNetLeaves{"layers.0.W", "layers.0.b", "layers.1.W", "layers.1.b", "S", "P", "s"};

struct NetProblem {
  std::vector<Matrix> a;
  std::vector<Vector> c, z;
  Vector d;
  Matrix s0, spd_c;
  Net start;

  explicit NetProblem(geomopt::Rng& rng) : d(Vector::LinSpaced(3, 1, 3)) {
    for (const Eigen::Index n : {8, 6}) {
      a.push_back(symmetric(rng, n));
      c.push_back(gaussian(rng, 3, 1).col(0));
      z.push_back(gaussian(rng, n, 1).col(0));
      start.layers.push_back({geomopt::Stiefel<double>::random_point(rng, n, 3), gaussian(rng, 3, 1).col(0)});
    }
    start.layers[0].b += Vector::Constant(3, 0.5);  // 1^T b_0 away from 0, so that s has a gradient to scale
    s0 = symmetric(rng, 4);
    spd_c = geomopt::SPD<double>::random_point(rng, 4).value();
    start.S = geomopt::SymmetricMatrix<double>::from_dense(symmetric(rng, 4));
    start.P = geomopt::SPD<double>::random_point(rng, 4);
    start.s = 0.3;
  }

  // f, and egrad when asked, with the gradient of leaf `scaled` (a path, or "") multiplied by `factor` and leaf
  // `skipped` left unwritten.
  double evaluate(const Net& x, Net* g, const std::string& scaled = "", double factor = 1,
                  const std::string& skipped = "") const {
    const Matrix& p = x.P.value();
    const Eigen::LLT<Matrix> llt(p);
    const Matrix ds = x.S.dense() - s0;
    const double log_det = 2 * llt.matrixLLT().diagonal().array().log().sum();
    double f = ds.squaredNorm() + (p * spd_c).trace() - log_det + std::exp(x.s) * x.layers[0].b.sum() + x.s * x.s;
    auto factor_of = [&](const std::string& path) { return path == scaled ? factor : 1.0; };
    for (std::size_t l = 0; l < x.layers.size(); ++l) {
      const Matrix& w = x.layers[l].W.value();
      const Vector& b = x.layers[l].b;
      const Matrix aw = a[l] * w;
      f += (w.transpose() * aw).diagonal().dot(d) + (b - c[l]).squaredNorm() + b.dot(w.transpose() * z[l]);
      if (g == nullptr) continue;
      const std::string prefix = "layers." + std::to_string(l) + ".";
      if (skipped != prefix + "W")
        g->layers[l].W.value() = factor_of(prefix + "W") * (2 * aw * d.asDiagonal() + z[l] * b.transpose());
      Vector gb = 2 * (b - c[l]) + w.transpose() * z[l];
      if (l == 0) gb += Vector::Constant(3, std::exp(x.s));
      if (skipped != prefix + "b") g->layers[l].b = factor_of(prefix + "b") * gb;
    }
    if (g != nullptr) {
      if (skipped != "S") g->S = geomopt::SymmetricMatrix<double>::from_storage(factor_of("S") * x.S.pullback(2 * ds));
      if (skipped != "P") g->P.value() = factor_of("P") * (spd_c - llt.solve(Matrix::Identity(4, 4)));
      if (skipped != "s") g->s = factor_of("s") * (std::exp(x.s) * x.layers[0].b.sum() + 2 * x.s);
    }
    return f;
  }

  // ehess[xi], with the product of leaf `scaled` multiplied by `factor`, leaf `skipped` left unwritten, and with
  // `coupled` false the term z_l xi_b^T, through which a layer's bias moves its weight's gradient, left out.
  void hessian(const Net& x, const Net& xi, Net* hv, const std::string& scaled = "", double factor = 1,
               const std::string& skipped = "", bool coupled = true) const {
    auto factor_of = [&](const std::string& path) { return path == scaled ? factor : 1.0; };
    for (std::size_t l = 0; l < x.layers.size(); ++l) {
      const Matrix& xw = xi.layers[l].W.value();
      const Vector& xb = xi.layers[l].b;
      const std::string prefix = "layers." + std::to_string(l) + ".";
      const Matrix coupling = coupled ? Matrix(z[l] * xb.transpose()) : Matrix::Zero(xw.rows(), xw.cols());
      if (skipped != prefix + "W")
        hv->layers[l].W.value() = factor_of(prefix + "W") * (2 * a[l] * xw * d.asDiagonal() + coupling);
      Vector hb = 2 * xb + xw.transpose() * z[l];
      if (l == 0) hb += Vector::Constant(3, std::exp(x.s) * xi.s);
      if (skipped != prefix + "b") hv->layers[l].b = factor_of(prefix + "b") * hb;
    }
    if (skipped != "S")
      hv->S = geomopt::SymmetricMatrix<double>::from_storage(factor_of("S") * xi.S.pullback(2 * xi.S.dense()));
    const Matrix p_inv = x.P.value().llt().solve(Matrix::Identity(4, 4));
    if (skipped != "P") hv->P.value() = factor_of("P") * (p_inv * xi.P.value() * p_inv);
    if (skipped != "s")
      hv->s = factor_of("s") * (std::exp(x.s) * (xi.s * x.layers[0].b.sum() + xi.layers[0].b.sum()) + 2 * xi.s);
  }
};

// The check's figures, for the test's log.
std::string figures(const DerivativeCheck& c) { return c.BriefReport() + "\n  " + c.message; }

TEST_CASE("check_gradient passes the layered tree's gradient with slope 2, every leaf within its noise") {
  geomopt::Rng rng(kSeed);
  const NetProblem problem(rng);
  auto cost = [&](const Net& x, Net* g) { return problem.evaluate(x, g); };
  const DerivativeCheck c = geomopt::check_gradient(cost, problem.start);
  INFO(c.FullReport());
  MESSAGE(figures(c));
  CHECK(c.passed);
  CHECK(c.order == 1);
  CHECK(c.expected_slope == 2);
  CHECK(c.slope == doctest::Approx(2).epsilon(0.05));
  CHECK(c.fit_residual < 0.01);
  CHECK_FALSE(c.exact);
  CHECK(c.num_gradient_evaluations == 1);
  CHECK(c.num_hessian_evaluations == 0);
  CHECK(c.cost == problem.evaluate(problem.start, nullptr));
  REQUIRE(c.leaves.size() == kNetLeaves.size());
  for (std::size_t i = 0; i < c.leaves.size(); ++i) {
    INFO(c.leaves[i].path);
    CHECK(c.leaves[i].path == kNetLeaves[i]);
    CHECK(c.leaves[i].passed);
    CHECK(c.leaves[i].relative_error < 1e-7);
    CHECK(std::abs(c.leaves[i].model) > 0);
  }
  // Tangent dimensions: St(8, 3) 18, St(6, 3) 12, biases 3, the packed 4 x 4 symmetric 10, SPD(4) 10, the scalar 1.
  CHECK(c.num_effective_parameters == 18 + 3 + 12 + 3 + 10 + 10 + 1);
  CHECK(c.leaves[0].dimension == 18);
  CHECK(c.leaves[4].dimension == 10);
  // The Taylor table: every step, ascending, a contiguous fitted run inside the recorded range.
  const DerivativeCheckOptions defaults;
  REQUIRE(c.taylor.size() == static_cast<std::size_t>(defaults.num_steps));
  CHECK(c.taylor.front().step == doctest::Approx(defaults.min_step));
  CHECK(c.taylor.back().step == doctest::Approx(defaults.max_step));
  int runs = 0;
  for (std::size_t k = 0; k < c.taylor.size(); ++k) {
    if (k > 0) CHECK(c.taylor[k].step > c.taylor[k - 1].step);
    if (c.taylor[k].fitted && (k == 0 || !c.taylor[k - 1].fitted)) ++runs;
    if (c.taylor[k].fitted) {
      CHECK(c.taylor[k].step >= c.fit_min_step);
      CHECK(c.taylor[k].step <= c.fit_max_step);
      CHECK(c.taylor[k].remainder > c.taylor[k].floor);
    }
  }
  CHECK(runs == 1);
}

TEST_CASE("check_gradient fails on each leaf's gradient scaled by 1.01, naming the leaf") {
  geomopt::Rng rng(kSeed);
  const NetProblem problem(rng);
  for (const std::string& leaf : kNetLeaves) {
    INFO("scaled leaf " << leaf);
    auto cost = [&](const Net& x, Net* g) { return problem.evaluate(x, g, leaf, 1.01); };
    const DerivativeCheck c = geomopt::check_gradient(cost, problem.start);
    INFO(c.FullReport());
    MESSAGE("1.01 on " << leaf << ": " << figures(c));
    CHECK_FALSE(c.passed);
    CHECK(c.worst_leaf == leaf);
    CHECK(c.worst_relative_error == doctest::Approx(0.01 / 1.01).epsilon(0.05));
    CHECK(c.message.find("leaf '" + leaf + "'") != std::string::npos);
    int failing = 0;
    for (const auto& l : c.leaves) failing += l.passed ? 0 : 1;
    CHECK(failing == 1);
  }
}

TEST_CASE("check_gradient fails on a gradient leaf left unwritten, naming the leaf, before measuring anything") {
  geomopt::Rng rng(kSeed);
  const NetProblem problem(rng);
  for (const std::string& leaf : kNetLeaves) {
    INFO("unwritten leaf " << leaf);
    auto cost = [&](const Net& x, Net* g) { return problem.evaluate(x, g, "", 1, leaf); };
    const DerivativeCheck c = geomopt::check_gradient(cost, problem.start);
    INFO(c.message);
    CHECK_FALSE(c.passed);
    CHECK(c.worst_leaf == leaf);
    CHECK(c.message == "the cost did not write the gradient of leaf '" + leaf + "'");
    CHECK(c.num_cost_evaluations == 1);
    CHECK(c.taylor.empty());
    CHECK(c.BriefReport().find("FAILED") != std::string::npos);
  }
  // Accumulating into the tree without clearing it is not writing it either.
  auto accumulate = [&](const Net& x, Net* g) {
    const double f = problem.evaluate(x, g);
    if (g != nullptr) {
      Net mine = x;
      problem.evaluate(x, &mine);
      g->layers[1].b += 0 * mine.layers[1].b;
    }
    return f;
  };
  CHECK(geomopt::check_gradient(accumulate, problem.start).passed);
  auto accumulate_unwritten = [&](const Net& x, Net* g) {
    const double f = problem.evaluate(x, g, "", 1, "layers.1.b");
    if (g != nullptr) g->layers[1].b += Vector::Ones(3);
    return f;
  };
  CHECK(geomopt::check_gradient(accumulate_unwritten, problem.start).worst_leaf == "layers.1.b");
}

TEST_CASE("check_gradient takes a stochastic optimizer's loss, double(const Tree&, Tree& grads), alike") {
  geomopt::Rng rng(kSeed);
  const NetProblem problem(rng);
  int calls = 0;
  auto loss = [&](const Net& x, Net& grads) {
    ++calls;
    return problem.evaluate(x, &grads);
  };
  const DerivativeCheck c = geomopt::check_gradient(loss, problem.start);
  MESSAGE(figures(c));
  CHECK(c.passed);
  CHECK(c.slope == doctest::Approx(2).epsilon(0.05));
  CHECK(calls == c.num_cost_evaluations);
  // The same numbers as the solver's form, evaluation for evaluation.
  auto cost = [&](const Net& x, Net* g) { return problem.evaluate(x, g); };
  const DerivativeCheck d = geomopt::check_gradient(cost, problem.start);
  CHECK(d.slope == c.slope);
  REQUIRE(d.leaves.size() == c.leaves.size());
  for (std::size_t i = 0; i < c.leaves.size(); ++i) CHECK(d.leaves[i].numeric == c.leaves[i].numeric);

  auto wrong = [&](const Net& x, Net& grads) { return problem.evaluate(x, &grads, "layers.1.W", 1.01); };
  const DerivativeCheck w = geomopt::check_gradient(wrong, problem.start);
  CHECK_FALSE(w.passed);
  CHECK(w.worst_leaf == "layers.1.W");
  auto unwritten = [&](const Net& x, Net& grads) { return problem.evaluate(x, &grads, "", 1, "P"); };
  CHECK(geomopt::check_gradient(unwritten, problem.start).worst_leaf == "P");
}

// ---------------------------------------------------------------------------------------------------------------
// Hessians.

TEST_CASE("check_hessian passes the layered tree's Hessian with slope 3, and fails naming a leaf scaled by 1.01") {
  geomopt::Rng rng(kSeed);
  const NetProblem problem(rng);
  auto cost = [&](const Net& x, Net* g) { return problem.evaluate(x, g); };
  {
    auto hessian = [&](const Net& x, const Net& xi, Net* hv) { problem.hessian(x, xi, hv); };
    const DerivativeCheck c = geomopt::check_hessian(cost, hessian, problem.start);
    INFO(c.FullReport());
    MESSAGE(figures(c));
    CHECK(c.passed);
    CHECK(c.order == 2);
    CHECK(c.expected_slope == 3);
    CHECK(c.slope == doctest::Approx(3).epsilon(0.05));
    CHECK(c.num_hessian_evaluations == 1 + static_cast<int>(kNetLeaves.size()));
    for (const auto& l : c.leaves) {
      INFO(l.path);
      CHECK(l.passed);
      CHECK(l.relative_error < 1e-6);
    }
  }
  for (const std::string& leaf : kNetLeaves) {
    INFO("scaled leaf " << leaf);
    auto hessian = [&](const Net& x, const Net& xi, Net* hv) { problem.hessian(x, xi, hv, leaf, 1.01); };
    const DerivativeCheck c = geomopt::check_hessian(cost, hessian, problem.start);
    INFO(c.FullReport());
    MESSAGE("1.01 on " << leaf << ": " << figures(c));
    CHECK_FALSE(c.passed);
    CHECK(c.worst_leaf == leaf);
    CHECK(c.worst_relative_error > 1e-4);
  }
}

TEST_CASE("check_hessian fails on a Hessian leaf left unwritten, and names the leaf of a wrong gradient") {
  geomopt::Rng rng(kSeed);
  const NetProblem problem(rng);
  auto cost = [&](const Net& x, Net* g) { return problem.evaluate(x, g); };
  for (const std::string& leaf : kNetLeaves) {
    INFO("unwritten leaf " << leaf);
    auto hessian = [&](const Net& x, const Net& xi, Net* hv) { problem.hessian(x, xi, hv, "", 1, leaf); };
    const DerivativeCheck c = geomopt::check_hessian(cost, hessian, problem.start);
    CHECK_FALSE(c.passed);
    CHECK(c.worst_leaf == leaf);
    CHECK(c.message == "the Hessian-vector product did not write leaf '" + leaf + "'");
  }
  auto hessian = [&](const Net& x, const Net& xi, Net* hv) { problem.hessian(x, xi, hv); };
  auto wrong_gradient = [&](const Net& x, Net* g) { return problem.evaluate(x, g, "S", 1.01); };
  const DerivativeCheck c = geomopt::check_hessian(wrong_gradient, hessian, problem.start);
  INFO(c.FullReport());
  CHECK_FALSE(c.passed);
  CHECK(c.worst_leaf == "S");
  CHECK(c.message.find("its gradient disagrees") != std::string::npos);
}

// A term coupling two leaves is invisible leaf by leaf (along one leaf's direction the other's xi is zero); the
// slope shows it. With judge_slope false the verdict rests on the leaves, and the same check passes.
TEST_CASE("check_hessian fails by the slope alone on a missing term coupling two leaves; judge_slope false passes it") {
  geomopt::Rng rng(kSeed);
  const NetProblem problem(rng);
  auto cost = [&](const Net& x, Net* g) { return problem.evaluate(x, g); };
  auto uncoupled = [&](const Net& x, const Net& xi, Net* hv) { problem.hessian(x, xi, hv, "", 1, "", false); };
  const DerivativeCheck c = geomopt::check_hessian(cost, uncoupled, problem.start);
  INFO(c.FullReport());
  MESSAGE("uncoupled: " << figures(c));
  CHECK_FALSE(c.passed);
  CHECK(c.slope_judged);
  CHECK(c.slope == doctest::Approx(2).epsilon(0.05));
  for (const auto& l : c.leaves) CHECK(l.passed);
  CHECK(c.message.find("no leaf fails alone") != std::string::npos);
  DerivativeCheckOptions options;
  options.judge_slope = false;
  const DerivativeCheck d = geomopt::check_hessian(cost, uncoupled, problem.start, options);
  CHECK(d.passed);
  CHECK_FALSE(d.slope_judged);
  CHECK(d.slope == c.slope);
  CHECK(d.BriefReport().find("not judged") != std::string::npos);
  CHECK(d.message.find("not judged") != std::string::npos);
  // A leaf's error still fails it.
  auto scaled = [&](const Net& x, const Net& xi, Net* hv) { problem.hessian(x, xi, hv, "P", 1.01); };
  const DerivativeCheck e = geomopt::check_hessian(cost, scaled, problem.start, options);
  CHECK_FALSE(e.passed);
  CHECK(e.worst_leaf == "P");
}

// Brockett, f(X) = tr(X^T A X D) on St(20, 5): egrad 2 A X D, ehess[xi] 2 A xi D.
TEST_CASE("check_hessian passes Brockett's Hessian on St(20, 5), and fails on it scaled by 1.01") {
  geomopt::Rng rng(kSeed);
  const Matrix a = symmetric(rng, 20);
  const Vector d = Vector::LinSpaced(5, 1, 5);
  using Point = geomopt::Stiefel<double>;
  auto cost = [&](const Point& x, Point* g) {
    const Matrix ax = a * x.value();
    if (g != nullptr) g->value() = 2 * ax * d.asDiagonal();
    return (x.value().transpose() * ax).diagonal().dot(d);
  };
  const Point x = Point::random_point(rng, 20, 5);
  for (const double factor : {1.0, 1.01}) {
    INFO("factor " << factor);
    auto hessian = [&](const Point&, const Point& xi, Point* hv) {
      hv->value() = factor * 2 * a * xi.value() * d.asDiagonal();
    };
    for (const geomopt::Retraction retraction : {geomopt::Retraction::cayley, geomopt::Retraction::geodesic}) {
      DerivativeCheckOptions options;
      options.retraction = retraction;
      const DerivativeCheck c = geomopt::check_hessian(cost, hessian, x, options);
      INFO(c.FullReport());
      MESSAGE("Brockett, factor " << factor << ", retraction " << static_cast<int>(retraction) << ": " << figures(c));
      CHECK(c.passed == (factor == 1.0));
      CHECK(c.worst_leaf == "(root)");
      if (factor == 1.0) {
        CHECK(c.slope == doctest::Approx(3).epsilon(0.05));
        CHECK(geomopt::check_gradient(cost, x, options).passed);
      } else {
        CHECK(c.slope < 2.5);
      }
    }
  }
}

// Procrustes, f(R) = |R A - B|_F^2: egrad 2 (R A - B) A^T, ehess[xi] 2 xi A A^T, on SO(3) and on St(10, 3).
template <class Point>
void check_procrustes(geomopt::Rng& rng, const Point& x) {
  const Eigen::Index n = x.value().rows(), k = x.value().cols();
  const Matrix a = gaussian(rng, k, 12), b = gaussian(rng, n, 12);
  auto cost = [&](const Point& r, Point* g) {
    const Matrix residual = r.value() * a - b;
    if (g != nullptr) g->value() = 2 * residual * a.transpose();
    return residual.squaredNorm();
  };
  const DerivativeCheck gradient = geomopt::check_gradient(cost, x);
  MESSAGE(figures(gradient));
  CHECK(gradient.passed);
  for (const double factor : {1.0, 1.01}) {
    INFO("factor " << factor);
    auto hessian = [&](const Point&, const Point& xi, Point* hv) {
      hv->value() = factor * 2 * xi.value() * a * a.transpose();
    };
    const DerivativeCheck c = geomopt::check_hessian(cost, hessian, x);
    INFO(c.FullReport());
    MESSAGE("Procrustes " << n << " x " << k << ", factor " << factor << ": " << figures(c));
    CHECK(c.passed == (factor == 1.0));
    if (factor == 1.0) CHECK(c.slope == doctest::Approx(3).epsilon(0.05));
  }
}

TEST_CASE("check_hessian passes the Procrustes Hessian on SO(3) and St(10, 3), and fails on it scaled by 1.01") {
  geomopt::Rng rng(kSeed);
  check_procrustes(rng, geomopt::SpecialOrthogonal<double>::random_point(rng, 3));
  check_procrustes(rng, geomopt::Stiefel<double>::random_point(rng, 10, 3));
}

// ---------------------------------------------------------------------------------------------------------------
// Float, exact models, non-finite costs.

TEST_CASE("check_gradient passes Brockett in float, where the rounding floor is 1e-6 of the cost") {
  geomopt::Rng rng(kSeed);
  const Eigen::MatrixXf a = symmetric(rng, 20).cast<float>();
  const Eigen::VectorXf d = Eigen::VectorXf::LinSpaced(5, 1, 5);
  using Point = geomopt::Stiefel<float>;
  for (const float factor : {1.0f, 1.01f}) {
    auto cost = [&](const Point& x, Point* g) {
      const Eigen::MatrixXf ax = a * x.value();
      if (g != nullptr) g->value() = factor * 2 * ax * d.asDiagonal();
      return static_cast<double>((x.value().transpose() * ax).diagonal().dot(d));
    };
    const DerivativeCheck c = geomopt::check_gradient(cost, Point::random_point(rng, 20, 5));
    INFO(c.FullReport());
    MESSAGE("float, factor " << factor << ": " << figures(c));
    CHECK(c.passed == (factor == 1.0f));
    if (factor == 1.0f) CHECK(c.slope == doctest::Approx(2).epsilon(0.1));
  }
}

struct Flat {
  Vector x;
  GEOMOPT_PTREE(x)
};

TEST_CASE("A model exact along every direction passes as exact; the same cost with a wrong gradient fails") {
  geomopt::Rng rng(kSeed);
  const Vector c = gaussian(rng, 7, 1).col(0);
  const Matrix q = symmetric(rng, 7);
  const Flat x{gaussian(rng, 7, 1).col(0)};
  for (const double factor : {1.0, 1.01}) {
    INFO("factor " << factor);
    auto linear = [&](const Flat& p, Flat* g) {
      if (g != nullptr) g->x = factor * c;
      return c.dot(p.x);
    };
    const DerivativeCheck l = geomopt::check_gradient(linear, x);
    INFO(l.FullReport());
    MESSAGE("linear, factor " << factor << ": " << figures(l));
    CHECK(l.passed == (factor == 1.0));
    CHECK(l.exact == (factor == 1.0));
    if (factor != 1.0) CHECK(l.slope == doctest::Approx(1).epsilon(0.05));

    auto quadratic = [&](const Flat& p, Flat* g) {
      if (g != nullptr) g->x = q * p.x + c;
      return p.x.dot(q * p.x) / 2 + c.dot(p.x);
    };
    auto hessian = [&](const Flat&, const Flat& xi, Flat* hv) { hv->x = factor * q * xi.x; };
    const DerivativeCheck h = geomopt::check_hessian(quadratic, hessian, x);
    INFO(h.FullReport());
    MESSAGE("quadratic, factor " << factor << ": " << figures(h));
    CHECK(h.passed == (factor == 1.0));
    CHECK(h.exact == (factor == 1.0));
    if (factor != 1.0) CHECK(h.slope == doctest::Approx(2).epsilon(0.05));
  }
}

TEST_CASE("A cost or gradient that is not finite at x fails the check with the leaf") {
  const Flat x{Vector::Ones(3)};
  auto nan_cost = [](const Flat& p, Flat* g) {
    if (g != nullptr) g->x = p.x;
    return std::numeric_limits<double>::quiet_NaN();
  };
  const DerivativeCheck c = geomopt::check_gradient(nan_cost, x);
  CHECK_FALSE(c.passed);
  CHECK(c.message.find("the cost is") != std::string::npos);
  auto nan_gradient = [](const Flat& p, Flat* g) {
    if (g != nullptr) g->x = p.x / 0.0 * 0.0;
    return p.x.sum();
  };
  const DerivativeCheck d = geomopt::check_gradient(nan_gradient, x);
  CHECK_FALSE(d.passed);
  CHECK(d.worst_leaf == "x");
  CHECK(d.message.find("x: the gradient is not finite") != std::string::npos);
}

// ---------------------------------------------------------------------------------------------------------------
// Options, determinism and reports.

TEST_CASE("DerivativeCheckOptions::IsValid refuses each nonsense option by name, and the checks throw") {
  DerivativeCheckOptions defaults;
  std::string error = "untouched";
  CHECK(defaults.IsValid(&error));
  CHECK(error == "untouched");
  struct Case {
    const char* name;
    std::function<void(DerivativeCheckOptions&)> spoil;
  };
  const std::vector<Case> cases{
      {"min_step", [](DerivativeCheckOptions& o) { o.min_step = 0; }},
      {"max_step", [](DerivativeCheckOptions& o) { o.max_step = 5 * o.min_step; }},
      {"max_step", [](DerivativeCheckOptions& o) { o.max_step = std::numeric_limits<double>::infinity(); }},
      {"num_steps", [](DerivativeCheckOptions& o) { o.num_steps = 9; }},
      {"slope_tolerance", [](DerivativeCheckOptions& o) { o.slope_tolerance = 0; }},
      {"slope_tolerance", [](DerivativeCheckOptions& o) { o.slope_tolerance = 1; }},
      {"tolerance", [](DerivativeCheckOptions& o) { o.tolerance = -1e-6; }},
      {"tolerance", [](DerivativeCheckOptions& o) { o.tolerance = std::numeric_limits<double>::quiet_NaN(); }},
  };
  const Flat x{Vector::Ones(3)};
  int calls = 0;
  auto cost = [&](const Flat& p, Flat* g) {
    ++calls;
    if (g != nullptr) g->x = 2 * p.x;
    return p.x.squaredNorm();
  };
  for (const Case& c : cases) {
    INFO("option " << c.name);
    DerivativeCheckOptions options;
    c.spoil(options);
    std::string message;
    CHECK_FALSE(options.IsValid(&message));
    CHECK_FALSE(options.IsValid(nullptr));
    INFO("IsValid: " << message);
    CHECK(message.find(c.name) != std::string::npos);
    calls = 0;
    CHECK_THROWS_WITH_AS(geomopt::check_gradient(cost, x, options), doctest::Contains(message.c_str()),
                         std::invalid_argument);
    CHECK(calls == 0);
  }
}

TEST_CASE("The check is a function of the seed; another seed draws other directions and passes alike") {
  geomopt::Rng rng(kSeed);
  const NetProblem problem(rng);
  auto cost = [&](const Net& x, Net* g) { return problem.evaluate(x, g); };
  DerivativeCheckOptions options;
  const DerivativeCheck a = geomopt::check_gradient(cost, problem.start, options);
  const DerivativeCheck b = geomopt::check_gradient(cost, problem.start, options);
  options.seed = 2;
  const DerivativeCheck c = geomopt::check_gradient(cost, problem.start, options);
  CHECK(a.directional_derivative == b.directional_derivative);
  REQUIRE(a.taylor.size() == b.taylor.size());
  for (std::size_t k = 0; k < a.taylor.size(); ++k) CHECK(a.taylor[k].cost == b.taylor[k].cost);
  CHECK(a.slope == b.slope);
  CHECK(c.directional_derivative != a.directional_derivative);
  CHECK(c.seed == 2);
  CHECK(c.passed);
}

TEST_CASE("BriefReport and FullReport name the verdict, the slope, the worst leaf, every leaf and every step") {
  geomopt::Rng rng(kSeed);
  const NetProblem problem(rng);
  auto cost = [&](const Net& x, Net* g) { return problem.evaluate(x, g, "layers.0.b", 1.01); };
  const DerivativeCheck c = geomopt::check_gradient(cost, problem.start);
  const std::string brief = c.BriefReport(), full = c.FullReport();
  INFO(full);
  CHECK(brief.find("gradient check: FAILED") != std::string::npos);
  CHECK(brief.find("worst leaf 'layers.0.b'") != std::string::npos);
  char slope[32];
  std::snprintf(slope, sizeof slope, "slope %.3f", c.slope);
  CHECK(brief.find(slope) != std::string::npos);
  CHECK(brief.find('\n') == std::string::npos);
  CHECK(full.find("Gradient check (geomopt)") != std::string::npos);
  CHECK(full.find("FAILED (leaf 'layers.0.b'") != std::string::npos);
  for (const std::string& leaf : kNetLeaves) CHECK(full.find("\n" + leaf + " ") != std::string::npos);
  int starred = 0;
  for (const auto& p : c.taylor) starred += p.fitted ? 1 : 0;
  CHECK(starred > 0);
  std::size_t stars = 0;
  for (std::size_t at = full.find(" *\n"); at != std::string::npos; at = full.find(" *\n", at + 1)) ++stars;
  CHECK(stars == static_cast<std::size_t>(starred));
  CHECK(full.find(std::to_string(c.num_cost_evaluations)) != std::string::npos);

  auto hessian = [&](const Net& x, const Net& xi, Net* hv) { problem.hessian(x, xi, hv); };
  auto right = [&](const Net& x, Net* g) { return problem.evaluate(x, g); };
  const DerivativeCheck h = geomopt::check_hessian(right, hessian, problem.start);
  CHECK(h.BriefReport().find("Hessian check: PASSED") != std::string::npos);
  CHECK(h.FullReport().find("phi''(0) from the Hessian") != std::string::npos);
}

}  // namespace
