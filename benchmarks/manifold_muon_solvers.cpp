// ManifoldMuon's direction solver against the two published alternatives, at the shapes of issue 23's acceptance:
// the cost of one direction and how close it comes to the optimum, on the stream of problems a training run poses.
//
//   cmake --build build/dev --target manifold_muon_solvers && build/dev/benchmarks/manifold_muon_solvers
//
// The problem at W in St(N, n) and momentum U: max tr(U^T A) over tangent A with |A|_2 <= 1 (stiefel_muon.hpp).
//   - fixed point (the library's default): StiefelMuonDirection with k multiplier updates per step, warm-started from
//     the previous step's multiplier;
//   - dual ascent as published (Bernstein, "Modular manifolds", 2025): Lambda <- Lambda - alpha (1 - i / k) H with
//     A = msign(U + 2 W Lambda) by Newton-Schulz and H = W^T A + A^T W, Lambda from -(W^T U + U^T W) / 4, alpha 0.01,
//     k steps (100 and a tolerance of 1e-6 published); also warm-started from the previous step's Lambda, and with
//     an exact msign (msign's gram method) in place of Newton-Schulz, to tell the step size's loss from the band's;
//   - ADMM on the split A = B, A tangent, |B|_2 <= 1: A <- P(B - Y + U / rho) (P the tangent projection),
//     B <- the singular values of A + Y clipped at 1 (from the Gram eigendecomposition, in double), Y <- Y + A - B;
//     rho the RMS singular value of U's tangent projection, k iterations per step, warm-started from the previous
//     step's B and Y.
// Every method's A is made feasible the same way, A <- P(A) / max(1, |P(A)|_2), and scored by its loss
// 1 - tr(U^T A) / d, d the dual bound of the direction solved cold to 1e-9 in double (the reference, whose polar
// retraction also moves W, so every method sees the same problems). Momentum 0.95 of fresh Gaussian gradients, lr
// 0.02, 30 steps of which the first 10 warm up; medians of the last 20. float32, one thread.
#include <Eigen/Core>
#include <Eigen/Eigenvalues>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <geomopt/optimizers.hpp>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

using MatF = Eigen::MatrixXf;
using MatD = Eigen::MatrixXd;

MatF gaussian(geomopt::Rng& rng, Eigen::Index rows, Eigen::Index cols) {
  std::normal_distribution<float> normal;
  MatF m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
  return m;
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// Tangent projection at W of the canonical embedding: X - W sym(W^T X).
MatF tangent(const MatF& w, const MatF& x) {
  const MatF k = w.transpose() * x;
  return x - w * (0.5f * (k + k.transpose()));
}

// |X|_2 from the Gram matrix in double.
double spectral_norm(const MatF& x) {
  const MatD g = (x.transpose() * x).cast<double>();
  return std::sqrt(
      std::max(0.0, Eigen::SelfAdjointEigenSolver<MatD>(g, Eigen::EigenvaluesOnly).eigenvalues().maxCoeff()));
}

// The score of a method's A: the loss of its feasible version against the dual bound.
double loss(const MatF& w, const MatF& u, const MatF& a, double dual) {
  MatF f = tangent(w, a);
  f /= static_cast<float>(std::max(1.0, spectral_norm(f)));
  return 1.0 - static_cast<double>((u.cwiseProduct(f)).sum()) / dual;
}

// One method's state across the steps of a run.
struct Method {
  std::string name;
  virtual ~Method() = default;
  virtual void solve(const MatF& w, const MatF& u, MatF& a) = 0;
};

struct FixedPoint : Method {
  geomopt::StiefelMuonDirection<float> direction;
  MatF multiplier;
  int k;
  bool started = false;
  FixedPoint(Eigen::Index N, Eigen::Index n, int k) : direction(N, n), multiplier(MatF::Zero(n, n)), k(k) {
    name = "fixed point, " + std::to_string(k) + (k == 1 ? " update (default)" : " updates");
  }
  void solve(const MatF& w, const MatF& u, MatF& a) override {
    direction.solve(w.data(), u.data(), a.data(), {.max_iterations = k, .warm_start = true}, nullptr, multiplier.data(),
                    started);
    started = true;
  }
};

struct DualAscent : Method {
  MatF lambda, z;
  geomopt::MsignWorkspace<float> ws;
  geomopt::MsignOptions msign;
  int k;
  bool warm, started = false;
  DualAscent(Eigen::Index N, Eigen::Index n, int k, bool warm,
             geomopt::MsignMethod m = geomopt::MsignMethod::newton_schulz)
      : lambda(n, n), z(N, n), ws(N, n), msign{.method = m}, k(k), warm(warm) {
    name = "dual ascent, " + std::to_string(k) + " steps" + (warm ? ", warm" : " (published)") +
           (m == geomopt::MsignMethod::newton_schulz ? "" : ", exact msign");
  }
  void solve(const MatF& w, const MatF& u, MatF& a) override {
    if (!warm || !started) {
      const MatF k0 = w.transpose() * u;
      lambda = -0.25f * (k0 + k0.transpose());
    }
    started = true;
    for (int i = 0; i < k; ++i) {
      a = u + 2.0f * w * lambda;
      geomopt::msign_inplace(a, msign, ws);
      const MatF wa = w.transpose() * a;
      const MatF h = wa + wa.transpose();
      if (!warm && h.norm() / static_cast<float>(h.rows()) < 1e-6f) break;  // the published stopping rule
      lambda -= (0.01f * (1.0f - static_cast<float>(i) / static_cast<float>(k))) * h;
    }
    a = u + 2.0f * w * lambda;
    geomopt::msign_inplace(a, msign, ws);
  }
};

struct Admm : Method {
  MatF b, y;
  int k;
  bool started = false;
  Admm(Eigen::Index N, Eigen::Index n, int k) : b(MatF::Zero(N, n)), y(MatF::Zero(N, n)), k(k) {
    name = "ADMM, " + std::to_string(k) + (k == 1 ? " iteration" : " iterations");
  }
  void solve(const MatF& w, const MatF& u, MatF& a) override {
    const MatF z = tangent(w, u);
    const float rho = z.norm() / std::sqrt(static_cast<float>(z.cols()));
    if (!started) b = z / static_cast<float>(spectral_norm(z));
    started = true;
    for (int i = 0; i < k; ++i) {
      a = tangent(w, b - y + u / rho);
      const MatF x = a + y;
      Eigen::SelfAdjointEigenSolver<MatD> eig((x.transpose() * x).cast<double>());
      const Eigen::VectorXd s = eig.eigenvalues().cwiseMax(0).cwiseSqrt();
      const Eigen::VectorXd clip = s.unaryExpr([](double v) { return v > 1 ? 1 / v : 1.0; });
      b = x * (eig.eigenvectors() * clip.asDiagonal() * eig.eigenvectors().transpose()).cast<float>();
      y += a - b;
    }
  }
};

}  // namespace

int main() {
  std::printf(
      "| St(N, n) | method | ms per direction | / fixed point (default) | median loss | worst loss |\n"
      "|---|---|---|---|---|---|\n");
  geomopt::Rng rng(23);
  for (auto [N, n] : std::vector<std::pair<Eigen::Index, Eigen::Index>>{{784, 128}, {128, 64}, {1024, 256}}) {
    std::vector<std::unique_ptr<Method>> methods;
    for (int k : {1, 2, 4}) methods.push_back(std::make_unique<FixedPoint>(N, n, k));
    for (int k : {1, 4, 16}) methods.push_back(std::make_unique<DualAscent>(N, n, k, true));
    methods.push_back(std::make_unique<DualAscent>(N, n, 100, false));
    methods.push_back(std::make_unique<DualAscent>(N, n, 100, false, geomopt::MsignMethod::gram));
    for (int k : {1, 4, 16}) methods.push_back(std::make_unique<Admm>(N, n, k));
    std::vector<std::vector<double>> times(methods.size()), losses(methods.size());
    geomopt::StiefelMuonDirection<double> reference(N, n);
    MatF w = geomopt::Stiefel<float>::random_point(rng, N, n).value();
    MatF u = MatF::Zero(N, n), a(N, n);
    for (int step = 0; step < 30; ++step) {
      u = 0.95f * u + 0.05f * gaussian(rng, N, n);
      const MatD wd = w.cast<double>(), ud = u.cast<double>();
      MatD ad(N, n);
      const geomopt::StiefelMuonReport best =
          reference.solve(wd.data(), ud.data(), ad.data(), {.tolerance = 1e-9, .max_iterations = 5000});
      for (std::size_t m = 0; m < methods.size(); ++m) {
        const auto start = std::chrono::steady_clock::now();
        methods[m]->solve(w, u, a);
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        if (step < 10) continue;
        times[m].push_back(ms);
        losses[m].push_back(loss(w, u, a, best.dual));
      }
      // The polar retraction of the exact step.
      w = geomopt::msign((wd - 0.02 * ad).eval(), {.method = geomopt::MsignMethod::svd}).cast<float>();
    }
    const double base = median(times[0]);
    for (std::size_t m = 0; m < methods.size(); ++m)
      std::printf("| %ldx%ld | %s | %.2f | %.2f | %.1e | %.1e |\n", static_cast<long>(N), static_cast<long>(n),
                  methods[m]->name.c_str(), median(times[m]), median(times[m]) / base, median(losses[m]),
                  *std::max_element(losses[m].begin(), losses[m].end()));
  }
  return 0;
}
