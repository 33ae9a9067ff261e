// Evidence for the default SectionPolicy of manifold leaves (docs/design.md, "Section policy: transported or
// recomputed"). Adam steps three problems whose optimum is known in closed form, from several seeds, under each
// section policy and each retraction, and the program prints markdown tables:
//   1. convergence: steps until the relative error (f - f*) / |f*| first reaches the target (1e-6), the relative
//      error after a fixed budget, the orthonormality defect ||Y^T Y - I||_F at the end, how often the recomputed
//      section's complement frame would jump (see frame_jumped), and time per optimizer step;
//   2. cost: time per step and bytes of optimizer state for Brockett on St(N, 5) as N grows (the transported section
//      is a dense N x N matrix moved at O(N^2 n) per step; the recomputed one is n reflectors, O(N n^2)).
// The problems are those of tests/optimizers/manifold_problems_test.cpp, with the same learning rates and schedules:
//   b  min ||A - W1 W2^T A||_F over W1, W2 in St(20, 3), A 20 x 5 Gaussian: f* = the best rank-3 error (SVD);
//   c  min -tr(Y^T C Y) over Gr(5, 2), C symmetric positive: f* = -(sum of the 2 largest eigenvalues);
//   d  min tr(X^T A X N) over St(20, 5), N = diag(1..5): f* = sum_i N_ii lambda_(6-i), lambda ascending;
//   d' as d with A = (G + G^T) / (2 sqrt 20), G Gaussian: its spectral gaps are not bounded below, so some draws
//      are slow for any first-order method (this is where a difference in how moments are carried would show).
// Only adam.step is timed (not the gradients). Single-threaded, double precision.
//
// Usage: section_policy_evidence [--seeds K] [--per-seed]
//   K seeds per row (default 10; seed s draws the data and the start from s); --per-seed also lists, for each row,
//   every seed's steps to the target and its number of frame jumps.
#include <geomopt/optimizers.hpp>

#include <Eigen/Eigenvalues>
#include <Eigen/SVD>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using Matrix = Eigen::MatrixXd;
using Vector = Eigen::VectorXd;
using geomopt::Retraction;
using geomopt::SectionPolicy;

Matrix gaussian(geomopt::Rng& rng, Eigen::Index rows, Eigen::Index cols) {
  return geomopt::detail::gaussian<double>(rng, rows, cols);
}

// Q diag(lambda) Q^T with Q Haar and lambda on a jittered grid of [lo, hi]: random, but with every spectral gap at
// least (hi - lo) / (2 N), so how fast a draw converges says something about the optimizer, not about the draw.
Matrix gapped_symmetric(geomopt::Rng& rng, Eigen::Index n, double lo, double hi) {
  std::uniform_real_distribution<double> jitter(0.0, 0.5);
  Vector lambda(n);
  for (Eigen::Index k = 0; k < n; ++k)
    lambda[k] = lo + (hi - lo) * (static_cast<double>(k) + jitter(rng)) / static_cast<double>(n);
  const Matrix q = geomopt::Stiefel<double>::random_point(rng, n, n).value();
  return q * lambda.asDiagonal() * q.transpose();
}

struct Factors {
  geomopt::Stiefel<double> W1, W2;
  GEOMOPT_PTREE(W1, W2)
};
struct Subspace {
  geomopt::Grassmann<double> Y;
  GEOMOPT_PTREE(Y)
};
struct Frame {
  geomopt::Stiefel<double> X;
  GEOMOPT_PTREE(X)
};

// b. E = A - W1 W2^T A, f = |E|_F: df = <E, dE> / f with dE = -dW1 (W2^T A) - W1 dW2^T A, so
// grad_W1 = -E A^T W2 / f and grad_W2 = -A E^T W1 / f (the test checks them by finite differences).
struct LowRank {
  using Tree = Factors;
  static constexpr const char* kName = "b: low rank, 2 x St(20, 3)";
  static constexpr double kLr = 0.05, kGamma = 0.995, kTarget = 1e-6;
  static constexpr int kBudget = 1000;
  Matrix a;
  double optimum = 0;
  Tree start;

  explicit LowRank(geomopt::Rng& rng) : a(gaussian(rng, 20, 5)) {
    const Vector s = Eigen::JacobiSVD<Matrix>(a).singularValues();
    optimum = s.tail(2).norm();
    start = {geomopt::Stiefel<double>::random_point(rng, 20, 3), geomopt::Stiefel<double>::random_point(rng, 20, 3)};
  }
  double evaluate(const Tree& p, Tree& g) const {
    const Matrix& w1 = p.W1.value();
    const Matrix& w2 = p.W2.value();
    const Matrix e = a - w1 * (w2.transpose() * a);
    const double f = e.norm();
    g.W1.value().noalias() = -(e * (a.transpose() * w2)) / f;
    g.W2.value().noalias() = -(a * (e.transpose() * w1)) / f;
    return f;
  }
  double defect(const Tree& p) const { return std::max(geomopt::check(p.W1), geomopt::check(p.W2)); }
  static std::vector<const Matrix*> points(const Tree& p) { return {&p.W1.value(), &p.W2.value()}; }
};

// c. Euclidean gradient of -tr(Y^T C Y): -2 C Y.
struct Dominant {
  using Tree = Subspace;
  static constexpr const char* kName = "c: dominant subspace, Gr(5, 2)";
  static constexpr double kLr = 0.1, kGamma = 0.99, kTarget = 1e-6;
  static constexpr int kBudget = 300;
  Matrix c;
  double optimum = 0;
  Tree start;

  explicit Dominant(geomopt::Rng& rng) : c(gapped_symmetric(rng, 5, 0.5, 2.5)) {
    const Vector lambda = Eigen::SelfAdjointEigenSolver<Matrix>(c).eigenvalues();  // ascending
    optimum = -(lambda[4] + lambda[3]);
    start = {geomopt::Grassmann<double>::random_point(rng, 5, 2)};
  }
  double evaluate(const Tree& p, Tree& g) const {
    const Matrix& y = p.Y.value();
    const Matrix cy = c * y;
    g.Y.value() = -2 * cy;
    return -(y.transpose() * cy).trace();
  }
  double defect(const Tree& p) const { return geomopt::check(p.Y); }
  static std::vector<const Matrix*> points(const Tree& p) { return {&p.Y.value()}; }
};

// d. Euclidean gradient of tr(X^T A X N): 2 A X N. The minimum pairs the largest weight with the smallest eigenvalue.
struct Brockett {
  using Tree = Frame;
  static constexpr double kLr = 0.1, kGamma = 0.995, kTarget = 1e-6;
  static constexpr int kBudget = 600;
  Matrix a;
  Vector weights = Vector::LinSpaced(5, 1, 5);
  double optimum = 0;
  Tree start;

  Brockett(geomopt::Rng& rng, Eigen::Index N, bool gapped) {
    if (gapped) {
      a = gapped_symmetric(rng, N, -1, 1);
    } else {
      const Matrix g = gaussian(rng, N, N);
      a = (g + g.transpose()) / (2 * std::sqrt(static_cast<double>(N)));
    }
    const Vector lambda = Eigen::SelfAdjointEigenSolver<Matrix>(a).eigenvalues();
    for (Eigen::Index i = 0; i < 5; ++i) optimum += weights[i] * lambda[4 - i];
    start = {geomopt::Stiefel<double>::random_point(rng, N, 5)};
  }
  double evaluate(const Tree& p, Tree& g) const {
    const Matrix& x = p.X.value();
    const Matrix ax = a * x;
    g.X.value().noalias() = 2 * ax * weights.asDiagonal();
    return (x.transpose() * ax * weights.asDiagonal()).trace();
  }
  double defect(const Tree& p) const { return geomopt::check(p.X); }
  static std::vector<const Matrix*> points(const Tree& p) { return {&p.X.value()}; }
};
struct GappedBrockett : Brockett {
  static constexpr const char* kName = "d: Brockett, St(20, 5)";
  explicit GappedBrockett(geomopt::Rng& rng) : Brockett(rng, 20, true) {}
};
struct GaussianBrockett : Brockett {
  static constexpr const char* kName = "d': Brockett, St(20, 5), Gaussian A";
  explicit GaussianBrockett(geomopt::Rng& rng) : Brockett(rng, 20, false) {}
};

// The points and the complement frames Y_perp of the recomputed section lambda(Y) = [Y, Y_perp] at every point. A
// continuous section moves its frame in proportion to the step; a jump is a change out of proportion to it: the
// frame turns, ||Y_perp'^T Y_perp - I||_F > 0.5, while the point moves ten times less, ||Y' - Y||_F < 0.05. Then the B
// coordinates of Adam's moments are suddenly read in another frame. With Householder's usual reflectors (Eigen's
// and LAPACK's) the frame jumps wherever a pivot changes sign; the section's reflectors (Golub-Van Loan's) are
// continuous there, and turn fast only near a point where a reflector's column is already along +e_k.
struct Frames {
  std::vector<Matrix> points, complements;
};

template <class Problem>
Frames frames_of(const typename Problem::Tree& p) {
  Frames f;
  for (const Matrix* y : Problem::points(p)) {
    f.points.push_back(*y);
    f.complements.push_back(geomopt::GlobalSection<double>(*y).dense().rightCols(y->rows() - y->cols()));
  }
  return f;
}

bool frame_jumped(const Frames& before, const Frames& after) {
  for (std::size_t i = 0; i < before.points.size(); ++i) {
    const Matrix& c = before.complements[i];
    const double turn = (after.complements[i].transpose() * c - Matrix::Identity(c.cols(), c.cols())).norm();
    if (turn > 0.5 && (after.points[i] - before.points[i]).norm() < 0.1 * turn) return true;
  }
  return false;
}

struct Outcome {
  int reached_at = -1;  // first step count at which the relative error was <= the target; -1: never
  double final_error = 0;
  double defect = 0;
  double step_seconds = 0;  // total time in adam.step
  int steps = 0;
  std::size_t state_bytes = 0;
  int frame_jumps = 0;  // steps after which the recomputed section's complement frame jumped (see frame_jumped)
};

template <class Problem>
Outcome run(const Problem& problem, SectionPolicy policy, Retraction retraction, int budget) {
  typename Problem::Tree params = problem.start;
  typename Problem::Tree grads = params;
  geomopt::Adam adam(
      {.lr = Problem::kLr},
      {.schedule = geomopt::schedules::exponential(Problem::kGamma), .retraction = retraction, .section = policy});
  auto state = adam.init(params);
  Outcome out;
  out.state_bytes = state.nbytes();
  Frames frames = frames_of<Problem>(params);
  for (int k = 0;; ++k) {
    const double f = problem.evaluate(params, grads);
    out.final_error = (f - problem.optimum) / std::abs(problem.optimum);
    if (out.reached_at < 0 && out.final_error <= Problem::kTarget) out.reached_at = k;
    if (k == budget) break;
    const auto t0 = std::chrono::steady_clock::now();
    adam.step(params, grads, state);
    out.step_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++out.steps;
    Frames next = frames_of<Problem>(params);
    if (frame_jumped(frames, next)) ++out.frame_jumps;
    frames = std::move(next);
  }
  out.defect = problem.defect(params);
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// The q-quantile of v by the nearest rank.
double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size(), std::max<std::size_t>(rank, 1)) - 1];
}

template <class Problem>
void convergence_rows(int seeds, bool per_seed) {
  // Every configuration starts from the same draws, so the rows of one problem differ only by the geometry.
  std::vector<Problem> draws;
  for (int s = 0; s < seeds; ++s) {
    geomopt::Rng rng(static_cast<std::uint64_t>(s));
    draws.emplace_back(rng);
  }
  for (const SectionPolicy policy : {SectionPolicy::recomputed, SectionPolicy::transported}) {
    for (const Retraction retraction : {Retraction::cayley, Retraction::geodesic}) {
      std::vector<double> reached, finals, per_step, jumps;
      double worst_final = 0, worst_defect = 0;
      int slowest = 0;
      std::string detail;
      for (const Problem& p : draws) {
        const Outcome o = run(p, policy, retraction, Problem::kBudget);
        if (o.reached_at >= 0) {
          reached.push_back(o.reached_at);
          slowest = std::max(slowest, o.reached_at);
        }
        finals.push_back(std::abs(o.final_error));
        worst_final = std::max(worst_final, std::abs(o.final_error));
        worst_defect = std::max(worst_defect, o.defect);
        per_step.push_back(o.step_seconds / o.steps);
        jumps.push_back(o.frame_jumps);
        char entry[48];
        std::snprintf(entry, sizeof entry, " %d(%d)", static_cast<int>(o.reached_at), static_cast<int>(o.frame_jumps));
        detail += entry;
      }
      char steps[64];
      if (reached.empty()) {
        std::snprintf(steps, sizeof steps, "not reached (0/%d)", seeds);
      } else {
        std::snprintf(steps, sizeof steps, "%.0f / %.0f / %d (%zu/%d)", median(reached), percentile(reached, 0.9),
                      slowest, reached.size(), seeds);
      }
      std::printf("| %s (%d, %g, %g^t) | %s | %s | %.0e | %s | %.1e / %.1e | %.1e | %.0f / %.0f | %.2f |\n",
                  Problem::kName, Problem::kBudget, Problem::kLr, Problem::kGamma, section_policy_name(policy),
                  retraction_name(retraction), Problem::kTarget, steps, median(finals), worst_final, worst_defect,
                  median(jumps), *std::max_element(jumps.begin(), jumps.end()), 1e6 * median(per_step));
      if (per_seed) std::printf("  steps to target (frame jumps) by seed:%s\n", detail.c_str());
    }
  }
}

// Time per step and state size for Brockett on St(N, 5) as N grows: 200 steps from one draw, best of 5 runs.
void cost_rows() {
  for (const Eigen::Index N : {20, 100, 400, 1000}) {
    geomopt::Rng rng(1);
    const Brockett problem(rng, N, true);
    double us[2] = {0, 0};
    std::size_t bytes[2] = {0, 0};
    for (const SectionPolicy policy : {SectionPolicy::recomputed, SectionPolicy::transported}) {
      const int i = policy == SectionPolicy::recomputed ? 0 : 1;
      double best = 1e300;
      for (int repeat = 0; repeat < 5; ++repeat) {
        const Outcome o = run(problem, policy, Retraction::cayley, 200);
        best = std::min(best, o.step_seconds / o.steps);
        bytes[i] = o.state_bytes;
      }
      us[i] = 1e6 * best;
    }
    std::printf("| %td | %.1f | %.1f | %.1f | %zu | %zu |\n", N, us[0], us[1], us[1] / us[0], bytes[0], bytes[1]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int seeds = 10;
  bool per_seed = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--seeds") == 0 && i + 1 < argc) {
      seeds = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--per-seed") == 0) {
      per_seed = true;
    } else {
      std::fprintf(stderr, "usage: %s [--seeds K] [--per-seed]\n", argv[0]);
      return 2;
    }
  }
  if (seeds < 1) {
    std::fprintf(stderr, "--seeds must be >= 1\n");
    return 2;
  }

  std::printf(
      "Adam from %d seeds per row; steps to target: median / 90th percentile / slowest (seeds reaching it); "
      "relative error |f - f*| / |f*| after the budget: median / worst; defect: worst ||Y^T Y - I||_F at the end; "
      "frame jumps: steps after which the recomputed section's complement turned out of proportion to the step "
      "(frame_jumped), median / max per run; time: median us per adam.step.\n\n",
      seeds);
  std::printf(
      "| problem (budget, lr, decay) | policy | retraction | target | steps to target | final error | defect "
      "| frame jumps | us/step |\n|---|---|---|---|---|---|---|---|---|\n");
  convergence_rows<LowRank>(seeds, per_seed);
  convergence_rows<Dominant>(seeds, per_seed);
  convergence_rows<GappedBrockett>(seeds, per_seed);
  convergence_rows<GaussianBrockett>(seeds, per_seed);

  std::printf("\nBrockett on St(N, 5), Cayley, 200 steps, best of 5 runs: us per adam.step and bytes of state.\n\n");
  std::printf(
      "| N | recomputed us/step | transported us/step | ratio | recomputed state bytes | transported state bytes "
      "|\n|---|---|---|---|---|---|\n");
  cost_rows();
  return 0;
}
