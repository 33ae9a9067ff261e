// ManifoldMuon's Oblique budget (MuonOptions::oblique.max_iterations): the direction's relative duality gap, how often
// it converges, its Newton steps and the time of the whole step, by budget, on per-column Rayleigh problems
// -sum_j x_j^T S_j x_j (300 float steps, lr 0.02 decayed linearly to 0), and the loss each budget ends at: the evidence
// for the default in docs/design.md ("The family on Sphere, SO(n), Grassmann and Oblique").
//
//   cmake --build build/dev --target oblique_muon_budget && build/dev/benchmarks/oblique_muon_budget
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <geomopt/optimizers.hpp>
#include <random>
#include <utility>
#include <vector>

namespace {
struct Tree {
  geomopt::Oblique<float> x;
  GEOMOPT_PTREE(x)
};
}  // namespace

int main() {
  for (auto [N, n] : {std::pair<long, long>{64, 16}, {16, 16}, {8, 32}, {256, 64}}) {
    geomopt::Rng rng(1);
    std::normal_distribution<double> normal;
    std::vector<Eigen::MatrixXd> s;
    for (long j = 0; j < n; ++j) {
      Eigen::MatrixXd a = Eigen::MatrixXd::NullaryExpr(N, N, [&] { return normal(rng); });
      s.push_back(0.5 * (a + a.transpose()));
    }
    const auto start = geomopt::Oblique<float>::random_point(rng, N, n);
    for (int budget : {1, 2, 3, 5, 100}) {
      const int steps = 300;
      geomopt::ManifoldMuon muon({.lr = 0.02, .oblique = {.max_iterations = budget}},
                                 {.schedule = [](std::int64_t t) { return 1.0 - t / 300.0; }});
      Tree p{start};
      auto st = muon.init(p);
      double gap = 0, worst = 0, iters = 0, conv = 0, secs = 0;
      for (int k = 0; k < steps; ++k) {
        Tree g = p;
        const Eigen::MatrixXd x = p.x.value().cast<double>();
        for (long j = 0; j < n; ++j) g.x.value().col(j) = (-2 * s[j] * x.col(j)).cast<float>();
        const auto t0 = std::chrono::steady_clock::now();
        muon.step(p, g, st);
        secs += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const auto& r = st.direction_report(0);
        const double rel = r.dual > 0 ? (r.dual - r.primal) / r.dual : 0;
        gap += rel;
        worst = std::max(worst, rel);
        iters += r.iterations;
        conv += r.converged;
      }
      double loss = 0;
      const Eigen::MatrixXd x = p.x.value().cast<double>();
      for (long j = 0; j < n; ++j) loss -= x.col(j).dot(s[j] * x.col(j));
      std::printf(
          "%4ldx%-3ld budget %3d: mean gap %.2e worst %.2e, converged %5.1f %%, Newton steps %.2f, %.3f ms/step, loss "
          "%.6f\n",
          N, n, budget, gap / steps, worst, 100 * conv / steps, iters / steps, 1e3 * secs / steps, loss);
    }
  }
}
