// Tests of optimizers/include/geomopt/optimizers/spectral_directions.hpp: for each manifold, in double and float, the
// direction is tangent with unit spectral norm, attains the dual bound of an independent dense reference (Eigen's
// JacobiSVD; for Oblique the nuclear norm at the returned multiplier, checked against a brute-force descent on the dual
// written here), beats the normalized projected gradient and random feasible directions, keeps a retracted float
// iterate on the manifold over 10^4 steps, and allocates nothing once constructed.
// count_allocations.hpp replaces the allocator: included in this file alone of this executable.
#include "../support/count_allocations.hpp"

#include <doctest/doctest.h>

#include <Eigen/Core>
#include <Eigen/QR>
#include <Eigen/SVD>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <geomopt/optimizers/spectral_directions.hpp>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Eigen::Index;
using Eigen::MatrixXd;
using Rng = std::mt19937_64;
template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;

struct Shape {
  Index rows, cols;
};

MatrixXd gaussian(Rng& rng, Index rows, Index cols) {
  std::normal_distribution<double> nd;
  MatrixXd m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = nd(rng);
  return m;
}

MatrixXd orthonormal(Rng& rng, Index rows, Index cols) {
  if (cols == 0) return MatrixXd(rows, 0);
  Eigen::HouseholderQR<MatrixXd> qr(gaussian(rng, rows, cols));
  return qr.householderQ() * MatrixXd::Identity(rows, cols);
}

MatrixXd unit_columns(MatrixXd m) {
  for (Index j = 0; j < m.cols(); ++j) m.col(j).normalize();
  return m;
}

double spectral_norm(const MatrixXd& m) {
  if (m.size() == 0) return 0;
  return Eigen::JacobiSVD<MatrixXd>(m).singularValues()(0);
}

double nuclear_norm(const MatrixXd& m) {
  if (m.size() == 0) return 0;
  return Eigen::JacobiSVD<MatrixXd>(m).singularValues().sum();
}

MatrixXd skew(const MatrixXd& x) { return 0.5 * (x - x.transpose()); }

// The polar factor U V^T of the thin SVD (rank-revealing at a relative 1e-12), the reference msign.
MatrixXd polar_reference(const MatrixXd& m) {
  Eigen::JacobiSVD<MatrixXd> svd(m, Eigen::ComputeThinU | Eigen::ComputeThinV);
  const auto& s = svd.singularValues();
  Index r = 0;
  while (r < s.size() && s(r) > 1e-12 * s(0)) ++r;
  return svd.matrixU().leftCols(r) * svd.matrixV().leftCols(r).transpose();
}

// Each manifold's point, tangent projection, tangency residual, retraction and defect, written densely here
// independently of the header.
struct SphereCase {
  template <class T>
  using Direction = geomopt::SphereMuonDirection<T>;
  static constexpr const char* kName = "Sphere";
  static std::vector<Shape> shapes() { return {{8, 1}, {3, 1}, {1, 1}, {0, 1}}; }
  static Index dimension(Shape s) { return std::max<Index>(s.rows - 1, 0); }
  static MatrixXd point(Rng& rng, Shape s) { return unit_columns(gaussian(rng, s.rows, s.cols)); }
  static MatrixXd project(const MatrixXd& w, const MatrixXd& x) { return x - w * (w.transpose() * x); }
  static MatrixXd normal(Rng& rng, const MatrixXd& w) { return w * gaussian(rng, 1, 1); }
  static double residual(const MatrixXd& w, const MatrixXd& a) { return (w.transpose() * a).norm(); }
  static Mat<float> retract(const Mat<float>& y) { return y / y.norm(); }
  static double defect(const Mat<float>& w) { return std::abs(w.cast<double>().norm() - 1); }
};

struct SpecialOrthogonalCase {
  template <class T>
  using Direction = geomopt::SpecialOrthogonalMuonDirection<T>;
  static constexpr const char* kName = "SpecialOrthogonal";
  static std::vector<Shape> shapes() { return {{8, 8}, {3, 3}, {5, 5}, {1, 1}, {0, 0}}; }
  static Index dimension(Shape s) { return s.rows * (s.rows - 1) / 2; }
  static MatrixXd point(Rng& rng, Shape s) {
    MatrixXd w = orthonormal(rng, s.rows, s.cols);
    if (s.rows > 0 && w.determinant() < 0) w.col(0) *= -1;
    return w;
  }
  static MatrixXd project(const MatrixXd& w, const MatrixXd& x) { return w * skew(w.transpose() * x); }
  static MatrixXd normal(Rng& rng, const MatrixXd& w) {
    const MatrixXd s = gaussian(rng, w.cols(), w.cols());
    return w * (s + s.transpose());
  }
  static double residual(const MatrixXd& w, const MatrixXd& a) {
    const MatrixXd k = w.transpose() * a;
    return (k + k.transpose()).norm();
  }
  static Mat<float> retract(const Mat<float>& y) {
    Eigen::JacobiSVD<Mat<float>> svd(y, Eigen::ComputeThinU | Eigen::ComputeThinV);
    return svd.matrixU() * svd.matrixV().transpose();
  }
  static double defect(const Mat<float>& w) {
    const MatrixXd wd = w.cast<double>();
    const double orth = (wd.transpose() * wd - MatrixXd::Identity(w.cols(), w.cols())).cwiseAbs().maxCoeff();
    return wd.determinant() > 0 ? orth : 2.0;
  }
};

struct GrassmannCase {
  template <class T>
  using Direction = geomopt::GrassmannMuonDirection<T>;
  static constexpr const char* kName = "Grassmann";
  static std::vector<Shape> shapes() { return {{8, 4}, {12, 4}, {8, 7}, {6, 1}, {5, 5}, {6, 0}}; }
  static Index dimension(Shape s) { return s.cols * (s.rows - s.cols); }
  static MatrixXd point(Rng& rng, Shape s) { return orthonormal(rng, s.rows, s.cols); }
  static MatrixXd project(const MatrixXd& w, const MatrixXd& x) { return x - w * (w.transpose() * x); }
  static MatrixXd normal(Rng& rng, const MatrixXd& w) { return w * gaussian(rng, w.cols(), w.cols()); }
  static double residual(const MatrixXd& w, const MatrixXd& a) { return (w.transpose() * a).norm(); }
  static Mat<float> retract(const Mat<float>& y) { return SpecialOrthogonalCase::retract(y); }
  static double defect(const Mat<float>& w) {
    const MatrixXd wd = w.cast<double>();
    return (wd.transpose() * wd - MatrixXd::Identity(w.cols(), w.cols())).cwiseAbs().maxCoeff();
  }
};

struct ObliqueCase {
  template <class T>
  using Direction = geomopt::ObliqueMuonDirection<T>;
  static constexpr const char* kName = "Oblique";
  static std::vector<Shape> shapes() { return {{8, 8}, {12, 4}, {3, 7}, {6, 6}, {1, 3}, {5, 0}, {0, 0}}; }
  static Index dimension(Shape s) { return s.cols * std::max<Index>(s.rows - 1, 0); }
  static MatrixXd point(Rng& rng, Shape s) { return unit_columns(gaussian(rng, s.rows, s.cols)); }
  static MatrixXd project(const MatrixXd& w, const MatrixXd& x) {
    MatrixXd p = x;
    for (Index j = 0; j < x.cols(); ++j) p.col(j) -= w.col(j).dot(x.col(j)) * w.col(j);
    return p;
  }
  static MatrixXd normal(Rng& rng, const MatrixXd& w) { return w * gaussian(rng, w.cols(), 1).col(0).asDiagonal(); }
  static double residual(const MatrixXd& w, const MatrixXd& a) { return (w.transpose() * a).diagonal().norm(); }
  static Mat<float> retract(Mat<float> y) {
    for (Index j = 0; j < y.cols(); ++j) y.col(j).normalize();
    return y;
  }
  static double defect(const Mat<float>& w) {
    double d = 0;
    for (Index j = 0; j < w.cols(); ++j) d = std::max(d, std::abs(w.col(j).cast<double>().norm() - 1));
    return d;
  }
};

// Tolerances: absolute on tangency and |A|_2, relative to |G| on the objective. Float: A is rounded to float once.
template <class T>
constexpr double kTol = std::is_same_v<T, double> ? 1e-7 : 3e-5;

// One solve of the direction for W and G in T; the multiplier (Oblique) into d.
template <class Case, class T>
Mat<T> solve(const Mat<T>& w, const Mat<T>& g, geomopt::SpectralDirectionReport& rep, Mat<T>* d = nullptr) {
  typename Case::template Direction<T> dir(w.rows(), w.cols());
  Mat<T> a(w.rows(), w.cols());
  if constexpr (std::is_same_v<Case, ObliqueCase>) {
    Mat<T> mult(w.cols(), 1);
    // The tolerance bounds the relative duality gap; at the square and near-square shapes the optimal Z is
    // rank-deficient, where double's smoothed certificate reaches about sqrt(eps) and no further.
    rep = dir.solve(w.data(), g.data(), a.data(), {.tolerance = std::is_same_v<T, double> ? 1e-8 : 1e-6}, mult.data());
    CHECK(rep.iterations <= 30);
    if (d != nullptr) *d = mult;
  } else {
    rep = dir.solve(w.data(), g.data(), a.data());
  }
  return a;
}

// The brute-force dual of Oblique: gradient descent with Armijo backtracking and Barzilai-Borwein steps on
// f(d) = |G - W diag(d)|_*, whose gradient is -diag(W^T msign(G - W diag(d))), from the tangent projection.
double oblique_dual_reference(const MatrixXd& w, const MatrixXd& g) {
  const Index n = w.cols();
  auto f = [&](const Eigen::VectorXd& d) { return nuclear_norm(g - w * d.asDiagonal()); };
  auto grad = [&](const Eigen::VectorXd& d) {
    const MatrixXd q = polar_reference(g - w * d.asDiagonal());
    return Eigen::VectorXd(-(w.transpose() * q).diagonal());
  };
  Eigen::VectorXd d = (w.transpose() * g).diagonal();
  double fd = f(d);
  Eigen::VectorXd gd = grad(d);
  double step = 0.1;
  for (int it = 0; it < 3000 && gd.norm() > 1e-12; ++it) {
    double t = step;
    Eigen::VectorXd next;
    double fn = 0;
    for (int h = 0; h < 60; ++h) {
      next = d - t * gd;
      fn = f(next);
      if (fn <= fd - 1e-4 * t * gd.squaredNorm()) break;
      t *= 0.5;
    }
    if (!(fn < fd)) break;
    const Eigen::VectorXd gn = grad(next);
    const Eigen::VectorXd s = next - d, y = gn - gd;
    step = s.dot(y) > 0 ? s.squaredNorm() / s.dot(y) : 2 * t;
    d = next;
    fd = fn;
    gd = gn;
  }
  (void)n;
  return fd;
}

template <class Case, class T>
void check_direction(Shape shape, std::uint64_t seed) {
  CAPTURE(Case::kName);
  CAPTURE(shape.rows);
  CAPTURE(shape.cols);
  CAPTURE(sizeof(T));
  Rng rng(seed);
  const Mat<T> w = Case::point(rng, shape).template cast<T>();
  const Mat<T> g = gaussian(rng, shape.rows, shape.cols).template cast<T>();
  const MatrixXd wd = w.template cast<double>(), gd = g.template cast<double>();
  geomopt::SpectralDirectionReport rep;
  Mat<T> mult;
  const Mat<T> a = solve<Case, T>(w, g, rep, &mult);
  REQUIRE(a.rows() == shape.rows);
  REQUIRE(a.cols() == shape.cols);
  const MatrixXd ad = a.template cast<double>();
  CHECK(rep.converged);
  if (Case::dimension(shape) == 0 || a.size() == 0) {
    CHECK(ad.cwiseAbs().sum() == 0);
    return;
  }
  const double gnorm = gd.norm();
  // 1. Tangent, unit spectral norm, and the report says so.
  CHECK(Case::residual(wd, ad) <= kTol<T>);
  CHECK(std::abs(rep.residual - Case::residual(wd, ad)) <= kTol<T>);
  CHECK(std::abs(spectral_norm(ad) - 1) <= kTol<T>);
  // 2. Strong duality against the dense reference.
  const double primal = gd.cwiseProduct(ad).sum();
  CHECK(std::abs(rep.primal - primal) <= kTol<T> * gnorm);
  double dual = 0;
  if constexpr (std::is_same_v<Case, ObliqueCase>) {
    // At the returned multiplier. With 1. this is the certificate: a feasible A whose <G, A> meets a dual value is
    // optimal, by weak duality, whatever found it.
    dual = nuclear_norm(gd - wd * mult.template cast<double>().col(0).asDiagonal());
    const double brute = oblique_dual_reference(wd, gd);
    CAPTURE(brute);
    CHECK(primal <= brute + kTol<T> * gnorm);  // weak duality: no feasible A beats a dual value
    CHECK(dual <= brute + kTol<T> * gnorm);    // the multiplier is no worse than the brute force's
    // Matrices of rank min(N, n) - 1 have codimension |N - n| + 1, so where that is at most n (the n multipliers)
    // the optimal Z is rank-deficient for a set of G of positive measure: the dual is not differentiable at its
    // minimizer there, and the descent stops short of it by up to 1e-2 |G| (at 8 x 8, 6 x 6, 3 x 7). Elsewhere it is
    // a reference from below too.
    const bool degenerate = std::abs(shape.rows - shape.cols) + 1 <= shape.cols;
    CAPTURE(degenerate);
    if (!degenerate) CHECK(primal >= brute - kTol<T> * gnorm);
  } else {
    dual = nuclear_norm(Case::project(wd, gd));
  }
  CAPTURE(primal);
  CAPTURE(dual);
  CHECK(std::abs(primal - dual) <= kTol<T> * gnorm);
  CHECK(std::abs(rep.dual - dual) <= kTol<T> * gnorm);
  // 3. At least as aligned as the normalized projected gradient, and as random feasible directions.
  const MatrixXd p = Case::project(wd, gd);
  CHECK(primal >= gd.cwiseProduct(p / spectral_norm(p)).sum() - kTol<T> * gnorm);
  for (int k = 0; k < 50; ++k) {
    const MatrixXd b0 = Case::project(wd, gaussian(rng, shape.rows, shape.cols));
    const MatrixXd b = b0 / spectral_norm(b0);
    CHECK(primal >= gd.cwiseProduct(b).sum() - kTol<T> * gnorm);
  }
}

template <class Case, class T>
void check_all_shapes() {
  std::uint64_t seed = 7;
  for (const Shape s : Case::shapes())
    for (int rep = 0; rep < 3; ++rep) check_direction<Case, T>(s, ++seed);
}

// G = 0 and G in the normal space give A = 0; a NaN gives NaN, without a throw.
template <class Case, class T>
void check_degenerate_inputs() {
  Rng rng(11);
  for (const Shape s : Case::shapes()) {
    if (s.rows * s.cols == 0) continue;
    CAPTURE(s.rows);
    CAPTURE(s.cols);
    const MatrixXd wd = Case::point(rng, s);
    const Mat<T> w = wd.cast<T>();
    geomopt::SpectralDirectionReport rep;
    CHECK(solve<Case, T>(w, Mat<T>::Zero(s.rows, s.cols), rep).cwiseAbs().sum() == 0);
    CHECK(solve<Case, T>(w, Case::normal(rng, wd).template cast<T>(), rep).cwiseAbs().sum() == 0);
    Mat<T> g = gaussian(rng, s.rows, s.cols).cast<T>();
    g(0, 0) = std::numeric_limits<T>::quiet_NaN();
    Mat<T> a;
    CHECK_NOTHROW(a = solve<Case, T>(w, g, rep));
    CHECK(a.array().isNaN().all());
    CHECK_FALSE(rep.converged);
  }
}

// 10^4 steps W <- R(W - lr A) in float with fresh Gaussian G each step: W stays on the manifold and A tangent.
template <class Case>
void check_stays_on_manifold(Shape s) {
  CAPTURE(Case::kName);
  Rng rng(5);
  Mat<float> w = Case::point(rng, s).template cast<float>();
  typename Case::template Direction<float> dir(s.rows, s.cols);
  Mat<float> a(s.rows, s.cols), d(s.cols, 1);
  double worst_residual = 0, worst_norm = 0;
  for (int step = 0; step < 10000; ++step) {
    const Mat<float> g = gaussian(rng, s.rows, s.cols).template cast<float>();
    geomopt::SpectralDirectionReport rep;
    if constexpr (std::is_same_v<Case, ObliqueCase>) {
      rep = dir.solve(w.data(), g.data(), a.data(), {.max_iterations = 20}, d.data(), step > 0);
    } else {
      rep = dir.solve(w.data(), g.data(), a.data());
    }
    worst_residual = std::max(worst_residual, rep.residual);
    if (step % 1000 == 0) worst_norm = std::max(worst_norm, std::abs(spectral_norm(a.cast<double>()) - 1));
    w = Case::retract(w - 0.05f * a);
  }
  CHECK(Case::defect(w) < 1e-5);
  CHECK(worst_residual < 1e-4);
  CHECK(worst_norm < 1e-4);
}

template <class Case, class T>
void check_no_allocation() {
  Rng rng(3);
  for (const Shape s : Case::shapes()) {
    CAPTURE(s.rows);
    CAPTURE(s.cols);
    const Mat<T> w = Case::point(rng, s).template cast<T>();
    const Mat<T> g = gaussian(rng, s.rows, s.cols).template cast<T>();
    Mat<T> a(s.rows, s.cols), d(s.cols, 1);
    typename Case::template Direction<T> dir(s.rows, s.cols);
    auto run = [&](bool warm) {
      if constexpr (std::is_same_v<Case, ObliqueCase>) {
        dir.solve(w.data(), g.data(), a.data(), {}, d.data(), warm);
      } else {
        (void)warm;
        dir.solve(w.data(), g.data(), a.data());
      }
    };
    run(false);
    CHECK(alloc_count::allocations_of([&] { run(false); }) == 0);
    CHECK(alloc_count::allocations_of([&] { run(true); }) == 0);
  }
}

}  // namespace

TEST_CASE_TEMPLATE("sphere: tangent, unit norm, optimal against the dense dual", T, double, float) {
  check_all_shapes<SphereCase, T>();
}
TEST_CASE_TEMPLATE("special orthogonal: tangent, unit norm, optimal against the dense dual", T, double, float) {
  check_all_shapes<SpecialOrthogonalCase, T>();
}
TEST_CASE_TEMPLATE("grassmann: tangent, unit norm, optimal against the dense dual", T, double, float) {
  check_all_shapes<GrassmannCase, T>();
}
TEST_CASE_TEMPLATE("oblique: tangent, unit norm, optimal against the dense dual and brute force", T, double, float) {
  check_all_shapes<ObliqueCase, T>();
}

TEST_CASE_TEMPLATE("zero, normal and non-finite gradients", T, double, float) {
  check_degenerate_inputs<SphereCase, T>();
  check_degenerate_inputs<SpecialOrthogonalCase, T>();
  check_degenerate_inputs<GrassmannCase, T>();
  check_degenerate_inputs<ObliqueCase, T>();
}

TEST_CASE("10^4 float steps stay on the manifold") {
  check_stays_on_manifold<SphereCase>({8, 1});
  check_stays_on_manifold<SpecialOrthogonalCase>({4, 4});
  check_stays_on_manifold<GrassmannCase>({6, 3});
  check_stays_on_manifold<ObliqueCase>({6, 3});
}

TEST_CASE_TEMPLATE("a constructed direction allocates nothing", T, double, float) {
  check_no_allocation<SphereCase, T>();
  check_no_allocation<SpecialOrthogonalCase, T>();
  check_no_allocation<GrassmannCase, T>();
  check_no_allocation<ObliqueCase, T>();
}

TEST_CASE("bad shapes throw, naming the manifold and the expected shape") {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(message([] { geomopt::SphereMuonDirection<double>(4, 2); }).find("N x 1") != std::string::npos);
  CHECK(message([] { geomopt::SpecialOrthogonalMuonDirection<float>(4, 3); }).find("SO(n)") != std::string::npos);
  CHECK(message([] { geomopt::GrassmannMuonDirection<double>(3, 4); }).find("0 <= n <= N") != std::string::npos);
  CHECK(message([] { geomopt::ObliqueMuonDirection<double>(0, 3); }).find("N >= 1") != std::string::npos);
  const MatrixXd w = MatrixXd::Identity(4, 2), g(3, 2);
  CHECK(message([&] { geomopt::grassmann_muon_direction(w, g); }).find("4x2") != std::string::npos);
  CHECK(message([&] { geomopt::oblique_muon_direction(w, g); }).find("oblique") != std::string::npos);
  CHECK_THROWS_AS(geomopt::oblique_muon_direction(w, w, {.tolerance = 0}), std::invalid_argument);
}

TEST_CASE("the allocating functions give the workspace's bits") {
  Rng rng(17);
  const MatrixXd w = ObliqueCase::point(rng, {12, 4}), g = gaussian(rng, 12, 4);
  geomopt::ObliqueMuonDirection<double> dir(12, 4);
  MatrixXd a(12, 4);
  dir.solve(w.data(), g.data(), a.data());
  CHECK(geomopt::oblique_muon_direction(w, g) == a);
  const MatrixXd y = GrassmannCase::point(rng, {12, 4});
  geomopt::GrassmannMuonDirection<double> gdir(12, 4);
  gdir.solve(y.data(), g.data(), a.data());
  CHECK(geomopt::grassmann_muon_direction(y, g) == a);
  const Eigen::VectorXd v = SphereCase::point(rng, {12, 1}).col(0), h = g.col(0);
  CHECK(std::abs(geomopt::sphere_muon_direction(v, h).norm() - 1) < 1e-12);
}
