// The evidence behind ManifoldMuon's solver defaults (docs/design.md, "Manifold Muon's solver"): for each shape and
// input, the iterations, convergence, time and objective of each way of solving for the direction, and the cost of
// a whole ManifoldMuon step, by the number of warm-started multiplier updates it makes, against the library's
// Riemannian Adam step and a Muon step of the same matrix.
//
//   cmake --build build/bench --target stiefel_muon_evidence && build/bench/benchmarks/stiefel_muon_evidence
//
// "loss" is how far a configuration's tr(U^T A) falls short of the best any configuration found for that problem,
// relative to it (every returned A is feasible: tangent with unit spectral norm, so the larger objective is the
// better direction). Times are medians of 5 runs on this machine, in one process, so their ratios are what counts.
#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
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

  // A whole step on a stream of Gaussian gradients (four, in turn): the Riemannian Adam step of the Stiefel leaf (the
  // reference), ManifoldMuon with k warm-started multiplier updates per step (k = 1 the default) and with every step
  // solved from a cold start to the tolerance (StiefelMuonOptions{}), and Muon's Newton-Schulz step of a Euclidean
  // matrix of the same shape.
  std::printf(
      "\n| St(N, n) | Adam ms | ManifoldMuon, 1 update (default) ms | / Adam | 2 updates ms | / Adam |"
      " 4 updates ms | / Adam | solved cold to 1e-6 ms | / Adam | Muon (Euclidean) ms |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (auto [N, n] : std::vector<std::pair<Eigen::Index, Eigen::Index>>{{784, 128}, {128, 64}, {1024, 256}}) {
    const Leaf start{geomopt::Stiefel<float>::random_point(rng, N, n)};
    std::vector<Leaf> grads;
    std::vector<Plain> plain_grads;
    for (int i = 0; i < 4; ++i) {
      grads.push_back({geomopt::Stiefel<float>(gaussian(rng, N, n))});
      plain_grads.push_back({grads.back().w.value()});
    }
    auto time_step = [&](auto& opt, auto params, const auto& gs, int runs) {
      auto st = opt.init(params);
      std::size_t k = 0;
      for (int warm = 0; warm < 3; ++warm) opt.step(params, gs[k++ % gs.size()], st);
      return median_ms([&] { opt.step(params, gs[k++ % gs.size()], st); }, runs);
    };
    geomopt::Adam adam;
    const double t_adam = time_step(adam, start, grads, 9);
    double t_mm[3];
    const int updates[3] = {1, 2, 4};
    for (int i = 0; i < 3; ++i) {
      geomopt::ManifoldMuon mm({.stiefel = {.max_iterations = updates[i], .warm_start = true}});
      t_mm[i] = time_step(mm, start, grads, 9);
    }
    geomopt::ManifoldMuon exact({.stiefel = {}});
    const double t_exact = time_step(exact, start, grads, 3);
    geomopt::Muon muon;
    const double t_muon = time_step(muon, Plain{start.w.value()}, plain_grads, 9);
    std::printf("| %ldx%ld | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f | %.1f | %.2f |\n",
                static_cast<long>(N), static_cast<long>(n), t_adam, t_mm[0], t_mm[0] / t_adam, t_mm[1],
                t_mm[1] / t_adam, t_mm[2], t_mm[2] / t_adam, t_exact, t_exact / t_adam, t_muon);
  }

  // What the budget costs in the direction: over 40 steps of a stream of momenta (momentum 0.95 of fresh Gaussian
  // gradients, lr 0.02), the median of the tangency residual |W^T A + A^T W|_F relative to |A|_F and of the gap
  // |dual - primal| / dual the step reports (A is the tangent projection of msign(U + W X) at the evaluated
  // multiplier, so its spectral norm is 1 only up to the residual, and the gap can take either sign).
  std::printf("\n| St(N, n) | updates per step | residual / |A|_F | gap |\n|---|---|---|---|\n");
  for (auto [N, n] : std::vector<std::pair<Eigen::Index, Eigen::Index>>{{784, 128}, {128, 64}, {1024, 256}}) {
    for (int k : {1, 2, 4}) {
      Leaf p{geomopt::Stiefel<float>::random_point(rng, N, n)};
      geomopt::ManifoldMuon mm({.stiefel = {.max_iterations = k, .warm_start = true}});
      auto st = mm.init(p);
      std::vector<double> residual, gap;
      for (int step = 0; step < 40; ++step) {
        mm.step(p, Leaf{geomopt::Stiefel<float>(gaussian(rng, N, n))}, st);
        const geomopt::StiefelMuonReport& r = st.direction_report(0);
        if (step < 10) continue;  // past the cold start
        residual.push_back(r.residual / std::sqrt(static_cast<double>(n)));
        gap.push_back(std::abs(r.dual - r.primal) / r.dual);
      }
      auto median = [](std::vector<double> v) {
        std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
        return v[v.size() / 2];
      };
      std::printf("| %ldx%ld | %d | %.1e | %.1e |\n", static_cast<long>(N), static_cast<long>(n), k, median(residual),
                  median(gap));
    }
  }
  return 0;
}
