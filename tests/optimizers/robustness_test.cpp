// The optimizer step's promises under hostile input: empty manifold leaves, a state stepped on a tree of other
// shapes, a step that cannot finish (nothing may be written), non-finite numbers born inside a step under skip and
// raise, one optimizer stepped from several threads, row-major leaves, and solvers whose gradient turns non-finite.
#include <doctest/doctest.h>

#include <Eigen/Core>
#include <cmath>
#include <geomopt/optimizers.hpp>
#include <geomopt/solvers.hpp>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using Mat = Eigen::MatrixXd;
using Vec = Eigen::VectorXd;
using RowMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct Frame {
  Vec a;
  geomopt::Stiefel<double> w;
  GEOMOPT_PTREE(a, w)
};

struct Plain {
  Mat m;
  GEOMOPT_PTREE(m)
};

struct WithSpd {
  Vec a;
  geomopt::SPD<double> s;
  Vec b;
  GEOMOPT_PTREE(a, s, b)
};

struct Only {
  geomopt::Stiefel<double> w;
  GEOMOPT_PTREE(w)
};

struct Single {
  Vec x;
  GEOMOPT_PTREE(x)
};

struct Rows {
  RowMat m;
  Vec b;
  GEOMOPT_PTREE(m, b)
};
struct Cols {
  Mat m;
  Vec b;
  GEOMOPT_PTREE(m, b)
};

Vec ramp(Eigen::Index n, double base) {
  Vec v(n);
  for (Eigen::Index i = 0; i < n; ++i) v(i) = base + 0.1 * static_cast<double>(i);
  return v;
}

Frame frame(geomopt::Rng& rng, Eigen::Index N, Eigen::Index n) {
  return {ramp(3, 0.5), geomopt::Stiefel<double>::random_point(rng, N, n)};
}

Frame frame_grad(Eigen::Index N, Eigen::Index n, double scale) {
  Frame g;
  g.a = ramp(3, -0.2) * scale;
  g.w = geomopt::Stiefel<double>(Mat::Constant(N, n, 0.3 * scale));
  return g;
}

template <class Opt>
void steps_empty_stiefel(Opt opt, Eigen::Index N) {
  geomopt::Rng rng(7);
  Frame x = frame(rng, N, 0);
  auto st = opt.init(x);
  const Frame g = frame_grad(N, 0, 1.0);
  const Vec a0 = x.a;
  for (int k = 0; k < 3; ++k) CHECK(opt.step(x, g, st).applied);
  CHECK(st.step_count() == 3);
  CHECK(x.w.value().rows() == N);
  CHECK(x.w.value().cols() == 0);
  CHECK((x.a - a0).norm() > 0);  // the other leaf moved
}

}  // namespace

TEST_CASE("every optimizer steps St(N, 0) and St(0, 0) leaves, with every retraction") {
  for (const Eigen::Index N : {Eigen::Index(5), Eigen::Index(0)}) {
    CAPTURE(N);
    for (const auto r : {geomopt::Retraction::cayley, geomopt::Retraction::geodesic}) {
      geomopt::CommonOptions c;
      c.retraction = r;
      steps_empty_stiefel(geomopt::SGD({.lr = 0.1}, c), N);
      steps_empty_stiefel(geomopt::Adam({.lr = 0.1}, c), N);
      steps_empty_stiefel(geomopt::AdamW({.lr = 0.1}, c), N);
      steps_empty_stiefel(geomopt::RMSprop({.lr = 0.1}, c), N);
      steps_empty_stiefel(geomopt::Adagrad({.lr = 0.1}, c), N);
    }
    for (const auto r : {geomopt::StiefelMuonRetraction::polar, geomopt::StiefelMuonRetraction::cayley,
                         geomopt::StiefelMuonRetraction::geodesic}) {
      geomopt::MuonOptions<> o;
      o.retraction = r;
      steps_empty_stiefel(geomopt::ManifoldMuon(o), N);
      steps_empty_stiefel(geomopt::Muon(o), N);
    }
  }
}

TEST_CASE("ManifoldMuon's pieces accept the empty problem: the direction, msign and the polar retraction") {
  const Mat w(6, 0), u(6, 0);
  geomopt::StiefelMuonReport rep;
  const Mat a = geomopt::stiefel_muon_direction(w, u, {}, &rep);
  CHECK(a.rows() == 6);
  CHECK(a.cols() == 0);
  CHECK(rep.converged);
  for (const auto m : {geomopt::MsignMethod::newton_schulz, geomopt::MsignMethod::polar_express,
                       geomopt::MsignMethod::svd, geomopt::MsignMethod::gram}) {
    geomopt::MsignOptions o;
    o.method = m;
    CHECK(geomopt::msign(Mat(0, 4), o).size() == 0);
    CHECK(geomopt::msign(Mat(4, 0), o).size() == 0);
  }
}

TEST_CASE("msign of a finite matrix whose squares overflow double is the msign of the scaled matrix") {
  Mat m(3, 2);
  m << 1, 2, -3, 0.5, 2, 1;
  for (const auto method :
       {geomopt::MsignMethod::newton_schulz, geomopt::MsignMethod::polar_express, geomopt::MsignMethod::gram}) {
    geomopt::MsignOptions o;
    o.method = method;
    // The overflowing matrix is scaled by its largest entry, 3e300, before the iteration: msign is scale invariant,
    // and the iterations (which start from M / (|M|_F + eps)) give the same as on M / 3.
    const Mat ref = geomopt::msign(Mat(m / 3.0), o);
    const Mat big = geomopt::msign(Mat(m * 1e300), o);
    REQUIRE(big.allFinite());
    CHECK((big - ref).norm() < 1e-12);
  }
}

TEST_CASE("a state is matched by shape, not size: the StructureError names the path and both shapes") {
  geomopt::Rng rng(11);
  geomopt::Adam adam({.lr = 0.01});
  {
    Frame x = frame(rng, 6, 4);
    auto st = adam.init(x);
    Frame y = frame(rng, 8, 3);
    const Frame y0 = y;
    const Frame g = frame_grad(8, 3, 1.0);
    try {
      adam.step(y, g, st);
      FAIL("stepped an St(8, 3) point with a state made for St(6, 4)");
    } catch (const geomopt::StructureError& e) {
      const std::string what = e.what();
      CHECK(what.find("w") == 0);
      CHECK(what.find("8x3") != std::string::npos);
      CHECK(what.find("6x4") != std::string::npos);
    }
    CHECK(y.w.value() == y0.w.value());
    CHECK(y.a == y0.a);
    CHECK(st.step_count() == 0);
  }
  {
    Plain x{Mat::Constant(30, 40, 0.5)};
    auto st = adam.init(x);
    Plain y{Mat::Constant(40, 30, 0.5)};
    const Plain g{Mat::Constant(40, 30, 1.0)};
    try {
      adam.step(y, g, st);
      FAIL("stepped 40 x 30 parameters with a state made for 30 x 40");
    } catch (const geomopt::StructureError& e) {
      const std::string what = e.what();
      CHECK(what.find("m:") == 0);
      CHECK(what.find("40x30") != std::string::npos);
      CHECK(what.find("30x40") != std::string::npos);
    }
    CHECK((y.m.array() == 0.5).all());
  }
  {
    geomopt::ManifoldMuon muon;
    Frame x = frame(rng, 6, 4);
    auto st = muon.init(x);
    Frame y = frame(rng, 8, 3);
    const Frame y0 = y;
    CHECK_THROWS_AS(muon.step(y, frame_grad(8, 3, 1.0), st), geomopt::StructureError);
    CHECK(y.w.value() == y0.w.value());
  }
}

TEST_CASE("a step that cannot finish writes nothing: an SPD leaf that is not positive definite, under every policy") {
  for (const auto policy :
       {geomopt::NonFinitePolicy::propagate, geomopt::NonFinitePolicy::skip, geomopt::NonFinitePolicy::raise}) {
    for (const int threads : {1, 2}) {
      CAPTURE(static_cast<int>(policy));
      CAPTURE(threads);
      geomopt::Adam adam({.lr = 0.1}, {.non_finite = policy, .threads = threads});
      WithSpd x{ramp(4, 1.0), geomopt::SPD<double>(Mat::Identity(3, 3)), ramp(5, -1.0)};
      auto st = adam.init(x);
      WithSpd g{ramp(4, 0.3), geomopt::SPD<double>(Mat::Identity(3, 3)), ramp(5, 0.2)};
      adam.step(x, g, st);
      x.s.value()(2, 2) = -1;  // no longer positive definite
      const WithSpd x0 = x;
      std::vector<double> slots0;
      st.for_each_slot([&](const std::string&, std::string_view, const auto& m) {
        for (Eigen::Index i = 0; i < m.size(); ++i) slots0.push_back(m.data()[i]);
      });
      try {
        adam.step(x, g, st);
        FAIL("stepped a point that is not positive definite");
      } catch (const std::domain_error& e) {
        CHECK(std::string(e.what()).find("s: ") == 0);
      }
      CHECK(x.a == x0.a);
      CHECK(x.b == x0.b);
      CHECK(x.s.value() == x0.s.value());
      CHECK(st.step_count() == 1);
      std::vector<double> slots1;
      st.for_each_slot([&](const std::string&, std::string_view, const auto& m) {
        for (Eigen::Index i = 0; i < m.size(); ++i) slots1.push_back(m.data()[i]);
      });
      CHECK(slots1 == slots0);
    }
  }
}

TEST_CASE("skip and raise see non-finite numbers born in the step: the lift, the norm, the kernel's outputs") {
  geomopt::Rng rng(3);
  struct Case {
    const char* name;
    double lr;
    double gscale;
    const char* leaf;
    const char* reason;
  };
  // Euclidean gradients of 1e200 have a squared norm that overflows double; gradients of 1e10 at lr 1e300 give an
  // SGD update that overflows.
  const std::vector<Case> cases = {{"norm", 0.1, 1e200, "a", "norm"}, {"update", 1e300, 1e10, "a", "update"}};
  for (const Case& c : cases) {
    for (const auto policy : {geomopt::NonFinitePolicy::skip, geomopt::NonFinitePolicy::raise}) {
      for (const int threads : {1, 2}) {
        CAPTURE(c.name);
        CAPTURE(threads);
        geomopt::SGD sgd({.lr = c.lr}, {.non_finite = policy, .threads = threads});
        Frame x = frame(rng, 5, 2);
        auto st = sgd.init(x);
        const Frame x0 = x;
        const Frame g = frame_grad(5, 2, c.gscale);
        REQUIRE(g.a.allFinite());
        if (policy == geomopt::NonFinitePolicy::skip) {
          const geomopt::StepReport r = sgd.step(x, g, st);
          CHECK_FALSE(r.applied);
          REQUIRE(r.non_finite_leaf != nullptr);
          REQUIRE(r.non_finite_reason != nullptr);
          CHECK(std::string(r.non_finite_reason).find(c.reason) != std::string::npos);
          CHECK(*r.non_finite_leaf == c.leaf);
        } else {
          CHECK_THROWS_AS(sgd.step(x, g, st), geomopt::NonFiniteGradient);
        }
        CHECK(x.a == x0.a);
        CHECK(x.w.value() == x0.w.value());
        CHECK(st.step_count() == 0);
      }
    }
  }
  SUBCASE("a Stiefel leaf whose lift of finite gradients overflows is named with its reason") {
    // W^T G has sqrt(5) * 1e308 in its first row: the lift overflows although G is finite.
    Mat w = Mat::Zero(5, 2);
    w.col(0).setConstant(1 / std::sqrt(5.0));
    w(0, 1) = 1 / std::sqrt(2.0);
    w(1, 1) = -1 / std::sqrt(2.0);
    Only x{geomopt::Stiefel<double>(w)};
    const Only g{geomopt::Stiefel<double>(Mat::Constant(5, 2, 1e308))};
    for (const auto policy : {geomopt::NonFinitePolicy::skip, geomopt::NonFinitePolicy::raise}) {
      geomopt::SGD sgd({.lr = 0.1}, {.non_finite = policy});
      auto st = sgd.init(x);
      if (policy == geomopt::NonFinitePolicy::skip) {
        const geomopt::StepReport r = sgd.step(x, g, st);
        CHECK_FALSE(r.applied);
        REQUIRE(r.non_finite_leaf != nullptr);
        CHECK(*r.non_finite_leaf == "w");
        CHECK(std::string(r.non_finite_reason).find("lift") != std::string::npos);
      } else {
        try {
          sgd.step(x, g, st);
          FAIL("stepped with an overflowing lift");
        } catch (const geomopt::NonFiniteGradient& e) {
          CHECK(std::string(e.what()).find("w: the gradient's lift") == 0);
        }
      }
      CHECK(x.w.value() == w);
      CHECK(st.step_count() == 0);
    }
  }
  SUBCASE("Muon: new parameters that overflow are caught before anything is written") {
    Plain x{Mat::Constant(4, 3, -1.7e308)};
    geomopt::MuonOptions<> o;
    o.lr = 1e308;
    geomopt::Muon muon(o, {.non_finite = geomopt::NonFinitePolicy::skip});
    auto st = muon.init(x);
    REQUIRE(st.muon_leaf(0));
    const Plain g{Mat::Constant(4, 3, 1.0)};
    const geomopt::StepReport r = muon.step(x, g, st);
    CHECK_FALSE(r.applied);
    REQUIRE(r.non_finite_reason != nullptr);
    CHECK(std::string(r.non_finite_reason).find("update") != std::string::npos);
    CHECK((x.m.array() == -1.7e308).all());
    CHECK(st.step_count() == 0);
    double momentum = 0;
    st.for_each_slot([&](const std::string&, std::string_view, const auto& m) { momentum += m.cwiseAbs().sum(); });
    CHECK(momentum == 0);
  }
}

TEST_CASE("propagate keeps stepping where skip would refuse, and a finite step is applied under every policy") {
  geomopt::Rng rng(5);
  Frame x1 = frame(rng, 5, 2);
  Frame x2 = x1, x3 = x1;
  const Frame g = frame_grad(5, 2, 1.0);
  geomopt::Adam a1({.lr = 0.05}), a2({.lr = 0.05}, {.non_finite = geomopt::NonFinitePolicy::skip}),
      a3({.lr = 0.05}, {.non_finite = geomopt::NonFinitePolicy::raise});
  auto s1 = a1.init(x1);
  auto s2 = a2.init(x2);
  auto s3 = a3.init(x3);
  for (int k = 0; k < 5; ++k) {
    CHECK(a1.step(x1, g, s1).applied);
    CHECK(a2.step(x2, g, s2).applied);
    CHECK(a3.step(x3, g, s3).applied);
  }
  // The checks read, they do not change the arithmetic: bitwise equal trajectories.
  CHECK(x1.a == x2.a);
  CHECK(x1.w.value() == x2.w.value());
  CHECK(x1.w.value() == x3.w.value());
}

TEST_CASE("one optimizer with threads = 2 stepped from two threads at once: no deadlock, each result exact") {
  geomopt::Rng rng(9);
  geomopt::Adam shared({.lr = 0.01}, {.threads = 2});
  Frame start[2] = {frame(rng, 12, 3), frame(rng, 12, 3)};
  const Frame g[2] = {frame_grad(12, 3, 1.0), frame_grad(12, 3, -0.5)};
  const int kSteps = 300;
  // The serial reference: the same optimizer settings, one tree at a time.
  Frame expect[2] = {start[0], start[1]};
  {
    geomopt::Adam alone({.lr = 0.01}, {.threads = 2});
    for (int i = 0; i < 2; ++i) {
      auto st = alone.init(expect[i]);
      for (int k = 0; k < kSteps; ++k) alone.step(expect[i], g[i], st);
    }
  }
  Frame got[2] = {start[0], start[1]};
  auto st0 = shared.init(got[0]);
  auto st1 = shared.init(got[1]);
  std::thread t0([&] {
    for (int k = 0; k < kSteps; ++k) shared.step(got[0], g[0], st0);
  });
  std::thread t1([&] {
    for (int k = 0; k < kSteps; ++k) shared.step(got[1], g[1], st1);
  });
  t0.join();
  t1.join();
  for (int i = 0; i < 2; ++i) {
    CHECK(got[i].a == expect[i].a);
    CHECK(got[i].w.value() == expect[i].w.value());
  }
  CHECK(st0.step_count() == kSteps);
  CHECK(st1.step_count() == kSteps);
}

TEST_CASE("a contiguous row-major non-square leaf steps as its column-major equivalent") {
  RowMat rm(3, 5);
  Mat cm(3, 5), gcm(3, 5);
  for (Eigen::Index i = 0; i < 3; ++i)
    for (Eigen::Index j = 0; j < 5; ++j) {
      cm(i, j) = 0.1 * static_cast<double>(i) - 0.07 * static_cast<double>(j) + 0.3;
      gcm(i, j) = std::sin(static_cast<double>(3 * i + j));
    }
  rm = cm;
  const RowMat grm = gcm;
  Rows xr{rm, ramp(2, 0.1)};
  Cols xc{cm, ramp(2, 0.1)};
  const Rows gr{grm, ramp(2, 0.3)};
  const Cols gc{gcm, ramp(2, 0.3)};
  {
    geomopt::Adam adam({.lr = 0.05});
    auto sr = adam.init(xr);
    auto sc = adam.init(xc);
    for (int k = 0; k < 4; ++k) {
      adam.step(xr, gr, sr);
      adam.step(xc, gc, sc);
    }
    CHECK(Mat(xr.m) == xc.m);
    // A slot is shown in the storage order: the row-major leaf's exp_avg is the transpose of the column-major one's.
    Mat avg_r, avg_c;
    sr.for_each_slot([&](const std::string& path, std::string_view name, const auto& m) {
      if (path == "m" && name == "exp_avg") avg_r = m;
    });
    sc.for_each_slot([&](const std::string& path, std::string_view name, const auto& m) {
      if (path == "m" && name == "exp_avg") avg_c = m;
    });
    CHECK(avg_r.rows() == 5);
    CHECK(avg_r == avg_c.transpose());
  }
  {
    geomopt::Muon muon;
    Rows yr{rm, ramp(2, 0.1)};
    Cols yc{cm, ramp(2, 0.1)};
    auto sr = muon.init(yr);
    auto sc = muon.init(yc);
    CHECK(sr.muon_leaf(0));
    for (int k = 0; k < 3; ++k) {
      muon.step(yr, gr, sr);
      muon.step(yc, gc, sc);
    }
    // msign(M^T) = msign(M)^T: the same step to Newton-Schulz's rounding.
    CHECK((Mat(yr.m) - yc.m).norm() < 1e-6 * yc.m.norm());
    CHECK((Mat(yr.m) - cm).norm() > 1e-3);
  }
}

TEST_CASE("a solver whose gradient turns non-finite mid-run says so and names the leaf") {
  using Tree = Single;
  for (const auto method : {geomopt::SolverMethod::gradient_descent, geomopt::SolverMethod::conjugate_gradient,
                            geomopt::SolverMethod::lbfgs, geomopt::SolverMethod::trust_region}) {
    CAPTURE(static_cast<int>(method));
    // f = sum_i w_i (x_i - c_i)^2 / 2, finite everywhere and ill-conditioned enough that no method is done after
    // one step; from the third evaluation on, the gradient's second entry is NaN.
    int evaluations = 0;
    auto cost = [&](const Tree& p, Tree* g) {
      const Vec c = Vec::LinSpaced(3, -1, 1);
      const Vec w = (Vec(3) << 1, 10, 100).finished();
      if (g != nullptr) {
        g->x = w.cwiseProduct(p.x - c);
        if (++evaluations > 2) g->x(1) = std::numeric_limits<double>::quiet_NaN();
      }
      return 0.5 * (p.x - c).cwiseAbs2().dot(w);
    };
    Tree x{Vec::Constant(3, 2.0)};
    geomopt::SolverOptions o;
    o.method = method;
    o.max_iterations = 200;
    const geomopt::SolverSummary s = geomopt::minimize(cost, x, o);
    INFO(s.message);
    CHECK(s.termination_type == geomopt::TerminationType::failure);
    CHECK(s.message.find("x: the gradient is not finite") != std::string::npos);
    CHECK(x.x.allFinite());
  }
}
