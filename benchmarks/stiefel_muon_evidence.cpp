// The evidence behind ManifoldMuon's solver defaults (docs/design.md, "Manifold Muon's solver"): for each shape and
// input, the iterations, convergence, time and objective of each way of solving for the direction, and the cost of
// a whole ManifoldMuon step against the library's Riemannian AdamW step and a Muon step of the same matrix.
//
//   cmake --build build/bench --target stiefel_muon_evidence && build/bench/benchmarks/stiefel_muon_evidence
//
// "loss" is how far a configuration's tr(U^T A) falls short of the best any configuration found for that problem,
// relative to it (every returned A is feasible: tangent with unit spectral norm, so the larger objective is the
// better direction). Times are medians of 5 runs on this machine, in one process, so their ratios are what counts.
#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <geomopt/optimizers.hpp>
#include <random>
#include <string>
#include <vector>

namespace {

using MatF = Eigen::MatrixXf;

MatF gaussian(geomopt::Rng& rng, Eigen::Index rows, Eigen::Index cols) {
  std::normal_distribution<float> normal;
  MatF m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
  return m;
}

template <class F>
double median_ms(F&& f, int runs = 5) {
  std::vector<double> t;
  for (int r = 0; r < runs; ++r) {
    const auto start = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(t.begin(), t.begin() + runs / 2, t.end());
  return t[static_cast<std::size_t>(runs / 2)];
}

struct Config {
  const char* name;
  geomopt::StiefelMuonOptions options;
};

struct Leaf {
  geomopt::Stiefel<float> w;
  GEOMOPT_PTREE(w)
};
struct Plain {
  MatF w;
  GEOMOPT_PTREE(w)
};

}  // namespace

int main() {
  using geomopt::StiefelMuonMethod;
  const std::vector<Config> configs = {
      {"fixed point + Anderson(8), mu 1e-4 (default)", {}},
      {"fixed point + Anderson(8), mu 0", {.smoothing = 0}},
      {"fixed point, plain, mu 1e-4", {.acceleration = 0}},
      {"dual ascent (Armijo), mu 1e-4", {.method = StiefelMuonMethod::dual_ascent}},
      {"dual ascent (Armijo), mu 0", {.method = StiefelMuonMethod::dual_ascent, .smoothing = 0}},
  };
  const std::vector<std::pair<Eigen::Index, Eigen::Index>> shapes = {{784, 128}, {256, 32}, {128, 64}, {64, 32}};
  std::printf("| St(N, n) | U | solver | iterations | converged | loss | ms |\n|---|---|---|---|---|---|---|\n");
  geomopt::Rng rng(7);
  for (auto [N, n] : shapes) {
    const MatF w = geomopt::Stiefel<float>::random_point(rng, N, n).value();
    const MatF full = gaussian(rng, N, n);
    const MatF low = gaussian(rng, N, 4) * gaussian(rng, 4, n);
    for (const MatF* u : {&full, &low}) {
      std::vector<geomopt::StiefelMuonReport> reports;
      std::vector<double> times;
      for (const Config& c : configs) {
        geomopt::StiefelMuonDirection<float> direction(N, n);
        MatF a(N, n);
        geomopt::StiefelMuonReport r;
        times.push_back(median_ms([&] { r = direction.solve(w.data(), u->data(), a.data(), c.options); }));
        reports.push_back(r);
      }
      double best = 0;
      for (const auto& r : reports) best = std::max(best, r.primal);
      for (std::size_t i = 0; i < configs.size(); ++i)
        std::printf("| %ldx%ld | %s | %s | %d | %s | %.1e | %.1f |\n", static_cast<long>(N), static_cast<long>(n),
                    u == &full ? "Gaussian" : "rank 4", configs[i].name, reports[i].iterations,
                    reports[i].converged ? "yes" : "no (projected)", (best - reports[i].primal) / best, times[i]);
    }
  }

  // A whole step: ManifoldMuon (direction + polar retraction), the Riemannian AdamW step of the same Stiefel leaf,
  // and Muon's Newton-Schulz step of a Euclidean matrix of the same shape; a stream of Gaussian gradients.
  std::printf("\n| shape | ManifoldMuon step ms | AdamW on Stiefel ms | Muon (Euclidean) ms | ManifoldMuon / AdamW |\n"
              "|---|---|---|---|---|\n");
  for (auto [N, n] : std::vector<std::pair<Eigen::Index, Eigen::Index>>{{784, 128}, {128, 64}, {64, 32}}) {
    Leaf p{geomopt::Stiefel<float>::random_point(rng, N, n)}, g{geomopt::Stiefel<float>(gaussian(rng, N, n))};
    Leaf q = p;
    Plain e{p.w.value()}, eg{g.w.value()};
    geomopt::ManifoldMuon mm;
    geomopt::AdamW adamw;
    geomopt::Muon muon;
    auto sm = mm.init(p);
    auto sa = adamw.init(q);
    auto se = muon.init(e);
    for (int warm = 0; warm < 3; ++warm) {
      mm.step(p, g, sm);
      adamw.step(q, g, sa);
      muon.step(e, eg, se);
    }
    const double t_mm = median_ms([&] { mm.step(p, g, sm); }, 9);
    const double t_aw = median_ms([&] { adamw.step(q, g, sa); }, 9);
    const double t_mu = median_ms([&] { muon.step(e, eg, se); }, 9);
    std::printf("| %ldx%ld | %.1f | %.1f | %.1f | %.2f |\n", static_cast<long>(N), static_cast<long>(n), t_mm, t_aw,
                t_mu, t_mm / t_aw);
  }
  return 0;
}
