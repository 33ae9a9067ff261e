// ManifoldMuon on the Sphere, SpecialOrthogonal, Grassmann and Oblique leaves (muon.hpp): each steps by the
// spectral-norm steepest tangent direction of its momentum blend (spectral_directions.hpp) and the manifold's own
// retraction. Checked against independent compositions (the momentum by hand, the allocating direction functions,
// the manifolds API's lift, to_ambient and retract), known optima (eigenvectors, the orthogonal Procrustes SVD),
// bitwise resumption from a copied state, refused steps that change nothing, trivial tangent spaces, and the
// fallback's leaves.
#include <doctest/doctest.h>

#include <Eigen/Core>
#include <Eigen/Eigenvalues>
#include <Eigen/SVD>
#include <cmath>
#include <cstdint>
#include <functional>
#include <geomopt/optimizers.hpp>
#include <geomopt/optimizers/spectral_directions.hpp>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../support/count_allocations.hpp"

// Every float and double direction of this file runs the solves libgeomopt_optimizers compiled once.
static_assert(geomopt::detail::compiled_spectral_directions<float> &&
              geomopt::detail::compiled_spectral_directions<double>);

namespace {

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
using MatD = Eigen::MatrixXd;

template <class T>
struct Family {
  geomopt::Sphere<T> sphere;
  geomopt::SpecialOrthogonal<T> rot;
  geomopt::Grassmann<T> plane;
  geomopt::Oblique<T> cols;
  GEOMOPT_PTREE(sphere, rot, plane, cols)
};

MatD gaussian(geomopt::Rng& rng, Eigen::Index rows, Eigen::Index cols) {
  std::normal_distribution<double> normal;
  return MatD::NullaryExpr(rows, cols, [&] { return normal(rng); });
}

template <class T>
Family<T> random_family(geomopt::Rng& rng) {
  return {geomopt::Sphere<T>::random_point(rng, 8), geomopt::SpecialOrthogonal<T>::random_point(rng, 4),
          geomopt::Grassmann<T>::random_point(rng, 8, 3), geomopt::Oblique<T>::random_point(rng, 6, 3)};
}

template <class T>
Family<T> random_gradient(geomopt::Rng& rng) {
  return {geomopt::Sphere<T>(Eigen::Matrix<T, Eigen::Dynamic, 1>(gaussian(rng, 8, 1).cast<T>())),
          geomopt::SpecialOrthogonal<T>(gaussian(rng, 4, 4).cast<T>()),
          geomopt::Grassmann<T>(gaussian(rng, 8, 3).cast<T>()), geomopt::Oblique<T>(gaussian(rng, 6, 3).cast<T>())};
}

// Every number of the state, in walk order.
template <class State>
std::vector<double> slots(const State& st) {
  std::vector<double> v;
  st.for_each_slot([&](const std::string&, std::string_view, const auto& d) {
    for (Eigen::Index i = 0; i < d.size(); ++i) v.push_back(static_cast<double>(d.data()[i]));
  });
  return v;
}

template <class T>
bool same(const Family<T>& a, const Family<T>& b) {
  return a.sphere.value() == b.sphere.value() && a.rot.value() == b.rot.value() && a.plane.value() == b.plane.value() &&
         a.cols.value() == b.cols.value();
}

template <class T>
double tolerance() {
  return std::is_same_v<T, float> ? 2e-5 : 1e-12;
}

// The independent step of one leaf: x <- R_x(-lr A) by the manifolds API, A the allocating direction function's for
// (x, U). `half` is 1/2 for SO(n), whose metric tr(U^T V) / 2 makes lift(x, A / 2) the tangent A; to_ambient checks
// that the tangent retracted is -lr A.
template <class M>
void composed_step(M& x, const MatD& a, double lr, double half, geomopt::Retraction r) {
  using T = typename M::Scalar;
  const Mat<T> e = (-lr * half * a).cast<T>();
  const auto xi = geomopt::lift(x, e);
  const MatD ambient = geomopt::to_ambient(x, xi).template cast<double>();
  REQUIRE((ambient + lr * a).norm() <= 100 * tolerance<T>() * (1 + lr * a.norm()));
  geomopt::retract(x, xi, r);
}

TEST_CASE_TEMPLATE("ManifoldMuon: two steps of each manifold leaf are the momentum, the direction and the retraction",
                   T, float, double) {
  geomopt::Rng rng(3);
  Family<T> p = random_family<T>(rng);
  Family<T> ref = p;
  const double lr = 0.07, beta = 0.9;
  const geomopt::ObliqueMuonOptions solved{.tolerance = 1e-10, .max_iterations = 200};
  geomopt::ManifoldMuon muon({.lr = lr, .momentum = beta, .oblique = solved});
  // The sphere retracts by its geodesic, the plane steps at half the rate.
  auto rule = [](const geomopt::ptree::Path& path) {
    geomopt::LeafOptions o;
    if (path.str() == "sphere") o.retraction = geomopt::Retraction::geodesic;
    if (path.str() == "plane") o.lr_scale = 0.5;
    return o;
  };
  auto st = muon.init(p, rule);
  for (std::size_t i = 0; i < 4; ++i) CHECK(st.muon_leaf(i));
  std::vector<MatD> buf(4);
  for (int k = 0; k < 2; ++k) {
    const Family<T> g = random_gradient<T>(rng);
    const auto report = muon.step(p, g, st);
    CHECK(report.applied);
    const std::vector<MatD> gs = {g.sphere.value().template cast<double>(), g.rot.value().template cast<double>(),
                                  g.plane.value().template cast<double>(), g.cols.value().template cast<double>()};
    std::vector<MatD> u(4);
    for (std::size_t i = 0; i < 4; ++i) {
      if (k == 0) buf[i] = MatD::Zero(gs[i].rows(), gs[i].cols());
      buf[i] = beta * buf[i] + (1 - beta) * gs[i];
      u[i] = (1 - beta) * gs[i] + beta * buf[i];  // Nesterov
    }
    auto cast = [](const MatD& m) { return m.cast<T>().eval(); };
    const Mat<T> ws = ref.sphere.value(), wr = ref.rot.value(), wp = ref.plane.value(), wc = ref.cols.value();
    const MatD as = geomopt::sphere_muon_direction(ws, cast(u[0])).template cast<double>();
    const MatD ar = geomopt::special_orthogonal_muon_direction(wr, cast(u[1])).template cast<double>();
    const MatD ap = geomopt::grassmann_muon_direction(wp, cast(u[2])).template cast<double>();
    const MatD ac = geomopt::oblique_muon_direction(wc, cast(u[3]), solved).template cast<double>();
    CHECK(as.norm() == doctest::Approx(1).epsilon(1e-4));
    composed_step(ref.sphere, as, lr, 1.0, geomopt::Retraction::geodesic);
    composed_step(ref.rot, ar, lr, 0.5, geomopt::Retraction::cayley);
    composed_step(ref.plane, ap, 0.5 * lr, 1.0, geomopt::Retraction::cayley);
    composed_step(ref.cols, ac, lr, 1.0, geomopt::Retraction::cayley);
    const double tol = 10 * tolerance<T>();
    CHECK((p.sphere.value() - ref.sphere.value()).template cast<double>().norm() < tol);
    CHECK((p.rot.value() - ref.rot.value()).template cast<double>().norm() < tol);
    CHECK((p.plane.value() - ref.plane.value()).template cast<double>().norm() < tol);
    // The oblique direction is iterative: the warm start of the second step converges to the same direction within
    // the solve's tolerance, not bitwise.
    CHECK((p.cols.value() - ref.cols.value()).template cast<double>().norm() < (k == 0 ? tol : 1e-4));
    // The state's momentum is the hand-made one.
    std::size_t leaf = 0;
    st.for_each_slot([&](const std::string&, std::string_view name, const auto& d) {
      if (name != "momentum_buffer") return;
      CHECK((d.template cast<double>() - buf[leaf]).norm() <= tolerance<T>() * (1 + buf[leaf].norm()));
      ++leaf;
    });
    CHECK(leaf == 4);
    for (std::size_t i = 0; i < 4; ++i) CHECK(st.direction_report(i).converged);
  }
  CHECK(st.direction_report(0).iterations == 0);
  CHECK(st.direction_report(3).dual >= st.direction_report(3).primal - 1e-6);
}

// Problems of known optimum, one per leaf: the leading eigenvector on the sphere (-x^T S x), the leading subspace on
// the Grassmannian (-tr(W^T S W)), orthogonal Procrustes on SO(n) (|W - M|^2), each column's own leading eigenvector on
// the oblique manifold (-sum_j x_j^T S_j x_j).
struct Problem {
  MatD s, m;
  std::vector<MatD> sj;

  explicit Problem(geomopt::Rng& rng) {
    auto sym = [&](Eigen::Index n) {
      const MatD a = gaussian(rng, n, n);
      return MatD(0.5 * (a + a.transpose()));
    };
    s = sym(8);
    m = gaussian(rng, 4, 4);
    for (int j = 0; j < 3; ++j) sj.push_back(sym(6));
  }

  template <class T>
  std::vector<double> losses(const Family<T>& p) const {
    const MatD x = p.sphere.value().template cast<double>(), w = p.plane.value().template cast<double>(),
               r = p.rot.value().template cast<double>(), c = p.cols.value().template cast<double>();
    double oblique = 0;
    for (int j = 0; j < 3; ++j) oblique -= c.col(j).dot(sj[static_cast<std::size_t>(j)] * c.col(j));
    return {-(x.transpose() * s * x)(0, 0), (r - m).squaredNorm(), -(w.transpose() * s * w).trace(), oblique};
  }

  template <class T>
  Family<T> gradient(const Family<T>& p) const {
    Family<T> g = p;
    g.sphere.value() = (-2 * s * p.sphere.value().template cast<double>()).template cast<T>();
    g.rot.value() = (2 * (p.rot.value().template cast<double>() - m)).template cast<T>();
    g.plane.value() = (-2 * s * p.plane.value().template cast<double>()).template cast<T>();
    const MatD c = p.cols.value().template cast<double>();
    for (int j = 0; j < 3; ++j)
      g.cols.value().col(j) = (-2 * sj[static_cast<std::size_t>(j)] * c.col(j)).template cast<T>();
    return g;
  }

  std::vector<double> optima() const {
    Eigen::SelfAdjointEigenSolver<MatD> es(s);  // ascending eigenvalues
    const auto& l = es.eigenvalues();
    Eigen::JacobiSVD<MatD> svd(m, Eigen::ComputeFullU | Eigen::ComputeFullV);
    Eigen::VectorXd d = Eigen::VectorXd::Ones(4);
    d(3) = (svd.matrixU() * svd.matrixV().transpose()).determinant() < 0 ? -1 : 1;
    const MatD best = svd.matrixU() * d.asDiagonal() * svd.matrixV().transpose();
    double oblique = 0;
    for (const auto& a : sj) oblique -= Eigen::SelfAdjointEigenSolver<MatD>(a).eigenvalues()(5);
    return {-l(7), (best - m).squaredNorm(), -(l(7) + l(6) + l(5)), oblique};
  }
};

TEST_CASE_TEMPLATE("ManifoldMuon: each manifold leaf reaches its known optimum and stays on its manifold", T, float,
                   double) {
  geomopt::Rng rng(11);
  const Problem problem(rng);
  Family<T> p = random_family<T>(rng);
  constexpr int kSteps = 2000;
  geomopt::ManifoldMuon muon({.lr = 0.05},
                             {.schedule = [](std::int64_t t) { return 1.0 - static_cast<double>(t) / kSteps; }});
  auto st = muon.init(p);
  for (int k = 0; k < kSteps; ++k) muon.step(p, problem.gradient(p), st);
  const double on = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  CHECK(geomopt::check(p.sphere) < on);
  CHECK(geomopt::check(p.rot) < on);
  CHECK(geomopt::check(p.plane) < on);
  CHECK(geomopt::check(p.cols) < on);
  const auto got = problem.losses(p), best = problem.optima();
  for (std::size_t i = 0; i < 4; ++i) {
    INFO("leaf " << i << ": " << got[i] << " against the optimum " << best[i]);
    // The optimum is a lower bound, up to the rounding of W to T (a point off its manifold by `on`).
    CHECK(got[i] >= best[i] - 10 * on * (1 + std::abs(best[i])));
    CHECK(got[i] - best[i] < 1e-3 * (1 + std::abs(best[i])));
  }
}

TEST_CASE_TEMPLATE(
    "ManifoldMuon: a state copied slot by slot resumes bitwise; an Oblique leaf keeps an n x 1 multiplier", T, float,
    double) {
  geomopt::Rng rng(17);
  const Problem problem(rng);
  const Family<T> start = random_family<T>(rng);
  geomopt::ManifoldMuon muon({.lr = 0.03});
  Family<T> a = start;
  auto sa = muon.init(a);
  for (int k = 0; k < 6; ++k) muon.step(a, problem.gradient(a), sa);
  std::vector<std::string> names;
  sa.for_each_slot([&](const std::string& path, std::string_view name, const auto& d) {
    names.push_back(path + "." + std::string(name));
    if (name == "multiplier") {
      CHECK(path == "cols");
      CHECK(d.rows() == 3);
      CHECK(d.cols() == 1);
      CHECK(d.norm() > 0);  // the warm start's multiplier is kept
    }
  });
  CHECK(names == std::vector<std::string>{"sphere.momentum_buffer", "rot.momentum_buffer", "plane.momentum_buffer",
                                          "cols.momentum_buffer", "cols.multiplier"});
  bool found = false;
  for (const auto& [name, value] : muon.hyperparameters())
    if (name == "oblique_max_iterations")
      found = std::get<double>(value) == static_cast<double>(muon.options().oblique.max_iterations);
  CHECK(found);
  // A second state, made fresh, receives the first one's numbers and step count.
  Family<T> b = a;
  auto sb = muon.init(b);
  const std::vector<double> numbers = slots(sa);
  std::size_t at = 0;
  sb.for_each_slot([&](const std::string&, std::string_view, auto d) {
    for (Eigen::Index i = 0; i < d.size(); ++i) d.data()[i] = static_cast<T>(numbers[at++]);
  });
  sb.set_step_count(sa.step_count());
  CHECK(slots(sb) == numbers);
  for (int k = 0; k < 6; ++k) {
    muon.step(a, problem.gradient(a), sa);
    muon.step(b, problem.gradient(b), sb);
  }
  CHECK(same(a, b));
  CHECK(slots(sa) == slots(sb));
  // A fresh state without the copy would not: the test can fail.
  Family<T> c = start;
  auto sc = muon.init(c);
  for (int k = 0; k < 6; ++k) muon.step(c, problem.gradient(c), sc);
  auto sd = muon.init(c);
  sd.set_step_count(6);
  for (int k = 0; k < 6; ++k) muon.step(c, problem.gradient(c), sd);
  CHECK_FALSE(same(a, c));
}

TEST_CASE_TEMPLATE("ManifoldMuon: a refused step leaves every manifold leaf and the state untouched", T, float,
                   double) {
  geomopt::Rng rng(23);
  const Problem problem(rng);
  for (auto policy : {geomopt::NonFinitePolicy::raise, geomopt::NonFinitePolicy::skip}) {
    for (int poisoned = 0; poisoned < 4; ++poisoned) {
      CAPTURE(poisoned);
      geomopt::ManifoldMuon muon({.lr = 0.03}, {.clip_norm = 10.0, .non_finite = policy});
      Family<T> p = random_family<T>(rng);
      auto st = muon.init(p);
      for (int k = 0; k < 3; ++k) muon.step(p, problem.gradient(p), st);
      const Family<T> before = p;
      const std::vector<double> state = slots(st);
      Family<T> g = problem.gradient(p);
      const T nan = std::numeric_limits<T>::quiet_NaN();
      if (poisoned == 0) g.sphere.value()(2) = nan;
      if (poisoned == 1) g.rot.value()(1, 2) = std::numeric_limits<T>::infinity();
      if (poisoned == 2) g.plane.value()(4, 1) = nan;
      if (poisoned == 3) g.cols.value()(0, 2) = nan;
      if (policy == geomopt::NonFinitePolicy::raise) {
        CHECK_THROWS_AS(muon.step(p, g, st), geomopt::NonFiniteGradient);
      } else {
        const auto report = muon.step(p, g, st);
        CHECK_FALSE(report.applied);
        REQUIRE(report.non_finite_leaf != nullptr);
        const char* names[] = {"sphere", "rot", "plane", "cols"};
        CHECK(*report.non_finite_leaf == names[poisoned]);
      }
      CHECK(same(p, before));
      CHECK(slots(st) == state);
      CHECK(st.step_count() == 3);
      // The next step is as if the refused one had not been asked for.
      Family<T> q = p;
      auto sq = muon.init(q);
      std::size_t at = 0;
      sq.for_each_slot([&](const std::string&, std::string_view, auto d) {
        for (Eigen::Index i = 0; i < d.size(); ++i) d.data()[i] = static_cast<T>(state[at++]);
      });
      sq.set_step_count(3);
      muon.step(p, problem.gradient(p), st);
      muon.step(q, problem.gradient(q), sq);
      CHECK(same(p, q));
    }
  }
}

TEST_CASE_TEMPLATE("ManifoldMuon: leaves of a trivial tangent space stay put", T, float, double) {
  // S^0 (N = 1), SO(1), Gr(3, 3), Oblique(1, 3): the direction is 0.
  Family<T> p{geomopt::Sphere<T>(1), geomopt::SpecialOrthogonal<T>(1), geomopt::Grassmann<T>(3, 3),
              geomopt::Oblique<T>(1, 3)};
  p.cols.value()(0, 1) = T(-1);
  const Family<T> start = p;
  geomopt::Rng rng(29);
  geomopt::ManifoldMuon muon({.lr = 0.1}, {.clip_norm = 1.0});
  auto st = muon.init(p);
  for (int k = 0; k < 5; ++k) {
    Family<T> g{geomopt::Sphere<T>(Eigen::Matrix<T, Eigen::Dynamic, 1>(gaussian(rng, 1, 1).cast<T>())),
                geomopt::SpecialOrthogonal<T>(gaussian(rng, 1, 1).cast<T>()),
                geomopt::Grassmann<T>(gaussian(rng, 3, 3).cast<T>()),
                geomopt::Oblique<T>(gaussian(rng, 1, 3).cast<T>())};
    const auto report = muon.step(p, g, st);
    CHECK(report.applied);
    CHECK(report.grad_norm == doctest::Approx(0));  // every gradient is normal to its manifold
  }
  CHECK(same(p, start));
  for (double v : slots(st)) CHECK(std::isfinite(v));
  for (std::size_t i = 0; i < 4; ++i) CHECK(st.direction_report(i).primal == 0);
}

TEST_CASE_TEMPLATE("ManifoldMuon: a leaf without a gradient sits the step out; empty leaves step", T, float, double) {
  geomopt::Rng rng(43);
  const Problem problem(rng);
  geomopt::ManifoldMuon muon({.lr = 0.03}, {.missing_gradient = geomopt::MissingGradient::skip});
  Family<T> p = random_family<T>(rng);
  auto st = muon.init(p);
  muon.step(p, problem.gradient(p), st);
  auto leaf_slots = [&](std::size_t i) {
    std::vector<double> v;
    st.for_each_slot_of_leaf(i, [&](const std::string&, std::string_view, const auto& d) {
      for (Eigen::Index k = 0; k < d.size(); ++k) v.push_back(static_cast<double>(d.data()[k]));
    });
    return v;
  };
  const Family<T> before = p;
  const std::vector<double> oblique = leaf_slots(3), sphere = leaf_slots(0);
  Family<T> g = problem.gradient(p);
  g.cols = geomopt::Oblique<T>();
  muon.step(p, g, st);
  CHECK(p.cols.value() == before.cols.value());
  CHECK(leaf_slots(3) == oblique);
  CHECK(p.sphere.value() != before.sphere.value());
  CHECK(leaf_slots(0) != sphere);
  CHECK(st.leaf_step_count(3) == 1);
  CHECK(st.leaf_step_count(0) == 2);
  // Zero-size leaves: Gr(4, 0) and Oblique(4, 0) have one point each; the step leaves them and moves the others.
  Family<T> e{geomopt::Sphere<T>::random_point(rng, 3), geomopt::SpecialOrthogonal<T>::random_point(rng, 2),
              geomopt::Grassmann<T>(4, 0), geomopt::Oblique<T>(4, 0)};
  const Family<T> e0 = e;
  geomopt::ManifoldMuon plain({.lr = 0.03}, {.clip_norm = 1.0});
  auto se = plain.init(e);
  Family<T> ge = e;
  ge.sphere.value().setOnes();
  ge.rot.value() << T(0), T(1), T(-1), T(0.5);
  for (int k = 0; k < 3; ++k) plain.step(e, ge, se);
  CHECK(e.plane.value().size() == 0);
  CHECK(e.cols.value().size() == 0);
  CHECK(e.sphere.value() != e0.sphere.value());
  CHECK(e.rot.value() != e0.rot.value());
  CHECK(geomopt::check(e.rot) < 1e-5);
  for (double v : slots(se)) CHECK(std::isfinite(v));
}

TEST_CASE_TEMPLATE("ManifoldMuon: LeafOptions::muon = false gives a manifold leaf to the fallback", T, float, double) {
  geomopt::Rng rng(31);
  const Problem problem(rng);
  Family<T> p = random_family<T>(rng);
  Family<T> q = p;
  const geomopt::AdamWKernel::Options fallback{.lr = 0.01};
  geomopt::ManifoldMuon muon({.lr = 0.05, .fallback = fallback});
  auto off = [](const geomopt::ptree::Path&) { return geomopt::LeafOptions{.muon = false}; };
  auto st = muon.init(p, off);
  for (std::size_t i = 0; i < 4; ++i) CHECK_FALSE(st.muon_leaf(i));
  geomopt::AdamW adamw(fallback);
  auto sa = adamw.init(q);
  for (int k = 0; k < 5; ++k) {
    muon.step(p, problem.gradient(p), st);
    adamw.step(q, problem.gradient(q), sa);
  }
  CHECK(same(p, q));
  CHECK(geomopt::check(p.cols) < 1e-5);
  CHECK_THROWS_WITH_AS(st.direction_report(0), doctest::Contains("is not a Stiefel leaf"), std::invalid_argument);
  // By default the same leaves are Muon's, and take other steps.
  Family<T> r = q;
  auto sm = muon.init(r);
  for (std::size_t i = 0; i < 4; ++i) CHECK(sm.muon_leaf(i));
}

TEST_CASE_TEMPLATE("ManifoldMuon: a step of the manifold leaves allocates nothing, with threads and every transform", T,
                   float, double) {
  geomopt::Rng rng(41);
  const Problem problem(rng);
  for (int threads : {1, 2}) {
    for (auto r : {geomopt::Retraction::cayley, geomopt::Retraction::geodesic}) {
      CAPTURE(threads);
      Family<T> p = random_family<T>(rng);
      const Family<T> g = problem.gradient(p);
      geomopt::ManifoldMuon muon({.lr = 0.01}, {.clip_norm = 0.5,
                                                .ema_decay = 0.9,
                                                .non_finite = geomopt::NonFinitePolicy::raise,
                                                .retraction = r,
                                                .threads = threads});
      auto st = muon.init(p);
      muon.step(p, g, st);  // warm: first-touch of anything lazily made
      long allocations = 0;
      {
        alloc_count::Window counter;
        for (int k = 0; k < 3; ++k) muon.step(p, g, st);
        allocations = counter.count();
      }
      CHECK(allocations == 0);
      CHECK(geomopt::check(p.cols) < 1e-5);
    }
  }
}

struct OtherManifold {
  geomopt::SPD<double> spd;
  GEOMOPT_PTREE(spd)
};

TEST_CASE("ManifoldMuon: what it cannot step is refused at init, naming the leaf") {
  geomopt::Rng rng(37);
  Family<double> p = random_family<double>(rng);
  geomopt::ManifoldMuon muon;
  auto decay = [](const geomopt::ptree::Path& path) {
    geomopt::LeafOptions o;
    if (path.str() == "cols") o.weight_decay = 0.1;
    return o;
  };
  CHECK_THROWS_WITH_AS(muon.init(p, decay), "cols: weight decay does not apply to Oblique leaves",
                       std::invalid_argument);
  auto st = muon.init(p);
  CHECK_THROWS_WITH_AS(st.set_leaf_weight_decay(0, 0.1), "sphere: weight decay does not apply to Sphere leaves",
                       std::invalid_argument);
  // Muon (not manifold) hands the manifold leaves to AdamW, and refuses to step them when asked.
  geomopt::Muon plain;
  auto sp = plain.init(p);
  for (std::size_t i = 0; i < 4; ++i) CHECK_FALSE(sp.muon_leaf(i));
  auto force = [](const geomopt::ptree::Path&) { return geomopt::LeafOptions{.muon = true}; };
  CHECK_THROWS_WITH_AS(plain.init(p, force),
                       doctest::Contains("sphere: Muon steps matrices of at least 2 x 2, this is a Sphere leaf "
                                         "(ManifoldMuon steps those)"),
                       std::invalid_argument);
  // A manifold ManifoldMuon has no direction for.
  OtherManifold o{geomopt::SPD<double>(3)};
  CHECK_THROWS_WITH_AS(muon.init(o, force),
                       doctest::Contains("spd: ManifoldMuon steps matrices of at least 2 x 2 and Stiefel, Sphere, "
                                         "SpecialOrthogonal, Grassmann and Oblique leaves, this is a SPD leaf"),
                       std::invalid_argument);
  CHECK(muon.init(o).muon_leaf(0) == false);
  // A retraction the manifold lacks.
  auto qr = [](const geomopt::ptree::Path&) {
    return geomopt::LeafOptions{.retraction = geomopt::Retraction::second_order};
  };
  CHECK_THROWS_WITH_AS(muon.init(p, qr), doctest::Contains("sphere: "), std::invalid_argument);
}

}  // namespace
