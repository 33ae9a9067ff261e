// The cost of a Stiefel retraction on St(N, 16), N = 64 ... 4096, by three routes, and the accuracy of the
// orthonormal factorisation of the lift against the non-orthogonal one (docs/design.md, "The cost of a Stiefel
// retraction").
//
// Timing mode (the default; Google Benchmark flags apply):
//   retract/implicit/<kind>/N:<N>     geomopt::retract(x, section, xi, r) with SectionPolicy::recomputed: the 2n x 2n
//                                     core, the new point through n Householder reflectors, and the section rebuilt
//                                     from it, O(N n^2)
//   retract/transported/<kind>/N:<N>  the same with SectionPolicy::transported: the dense N x N section moved by the
//                                     step, O(N^2 n)
//   retract/dense/<kind>/N:<N>        Omega = lambda X lambda^T from the dense N x N matrices, then
//                                     geodesic: Y <- exp(Omega) Y with Eigen's unsupported MatrixFunctions exp();
//                                     cayley:   Y <- Z, (I - Omega/2) Z = (I + Omega/2) Y by a partial-pivot LU;
//                                     O(N^3). lambda is not moved: the route is charged less than a dense optimiser
//                                     would pay. Registered for N <= --dense_max_N (default 1024).
//   retract/dense_f/<kind>/N:<N>      the same with Omega (and -Omega) formed beforehand: f(Omega) Y alone
//   dense_omega/N:<N>                 the two N x N products forming Omega alone
//   core/<kind>                       the (2n) x (2n) core function alone (detail::core_function), independent of N
//   lift/<policy>/N:<N>               geomopt::lift(x, section, egrad)
// Each retraction alternates xi and -xi (metric norm 0.1), so the point stays on the manifold and near its start; the
// counter `defect` is ||Y^T Y - I||_F at the end of the run.
//
// Accuracy mode (--accuracy): for random lifts on St(64, 16) and St(20, 3) scaled to metric norms 0.1, 1, 10, 60,
// the orthonormality defect ||Y^T Y - I||_F and the relative distance to a long-double dense N x N reference, for
//   W    the library (geomopt::retract: X = W S W^T, W orthonormal, f(S) of the skew core)
//   U,V  X = U V^T with U = [C, E], V = [E, -C], C = [A/2; B], E = [I_n; 0]:
//        exp(X) E = E + U phi(V^T U) V^T E, phi(Z) the top-right block of exp([[Z, I], [0, 0]]) (Eigen's
//        MatrixFunctions);
//        Cayley(X) E = E + U (I - V^T U / 2)^-1 V^T E.
//
// benchmarks/run_manifolds.py runs both modes and prints the tables.
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <Eigen/LU>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unsupported/Eigen/MatrixFunctions>
#include <vector>

#include "geomopt/manifolds.hpp"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace {

using geomopt::Retraction;
using geomopt::SectionPolicy;
using St = geomopt::Stiefel<double>;
using Tangent = St::Tangent;
using Mat = Eigen::MatrixXd;
using MatL = Eigen::Matrix<long double, Eigen::Dynamic, Eigen::Dynamic>;

constexpr Eigen::Index kSmallN = 16;  // n of the timed St(N, n)
constexpr double kStepNorm = 0.1;     // metric norm of the timed steps
constexpr std::uint64_t kSeed = 20261130;

const char* kind_name(Retraction r) { return r == Retraction::geodesic ? "geodesic" : "cayley"; }

// xi scaled to metric norm `norm`.
Tangent scaled(const St& x, const Tangent& xi, double norm) {
  const double s = norm / std::sqrt(geomopt::inner(x, xi, xi));
  return Tangent(geomopt::SkewSymMatrix<double>::from_storage(xi.A().storage() * s), xi.B() * s);
}

Tangent negated(const Tangent& xi) {
  return Tangent(geomopt::SkewSymMatrix<double>::from_storage(-xi.A().storage()), -xi.B());
}

struct Problem {
  St x;
  Tangent xi;
};

Problem make_problem(Eigen::Index N, Eigen::Index n, double norm, std::uint64_t seed) {
  geomopt::Rng rng(seed);
  St x = St::random_point(rng, N, n);
  const Tangent xi = geomopt::random_tangent(x, rng);
  Tangent s = scaled(x, xi, norm);
  return {std::move(x), std::move(s)};
}

// ---- timing ----

void BM_retract_section(benchmark::State& state, SectionPolicy policy, Retraction r) {
  const Eigen::Index N = state.range(0);
  Problem p = make_problem(N, kSmallN, kStepNorm, kSeed);
  auto section = geomopt::make_section(p.x, policy);
  const Tangent steps[2] = {p.xi, negated(p.xi)};
  int k = 0;
  for (auto _ : state) {
    geomopt::retract(p.x, section, steps[k], r);
    k ^= 1;
    benchmark::DoNotOptimize(p.x.value().data());
    benchmark::ClobberMemory();
  }
  state.counters["defect"] = geomopt::check(p.x);  // ||Y^T Y - I||_F after the run
}

// form_omega: Omega = lambda X lambda^T is formed in the timed loop (the route as a whole); otherwise both Omega and
// -Omega are formed beforehand and only f(Omega) Y is timed (what a dense route pays at least, e.g. lambda f(X) E).
void BM_retract_dense(benchmark::State& state, Retraction r, bool form_omega) {
  const Eigen::Index N = state.range(0);
  Problem p = make_problem(N, kSmallN, kStepNorm, kSeed);
  const Mat lambda = geomopt::make_section(p.x).dense();
  const Mat lifts[2] = {p.xi.dense(), -p.xi.dense()};
  Mat omegas[2];
  if (!form_omega)
    for (int k = 0; k < 2; ++k) omegas[k] = lambda * lifts[k] * lambda.transpose();
  const Mat I = Mat::Identity(N, N);
  Mat y = p.x.value(), t(N, N), formed(N, N), f(N, N), next(N, kSmallN);
  int k = 0;
  for (auto _ : state) {
    if (form_omega) {
      t.noalias() = lambda * lifts[k];
      formed.noalias() = t * lambda.transpose();
    }
    const Mat& omega = form_omega ? formed : omegas[k];
    if (r == Retraction::geodesic) {
      f = omega.exp();
      next.noalias() = f * y;
    } else {
      const Eigen::PartialPivLU<Mat> lu(I - 0.5 * omega);
      next.noalias() = y + 0.5 * (omega * y);
      next = lu.solve(next);
    }
    y.swap(next);
    k ^= 1;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["defect"] = geomopt::detail::orthonormality_defect<double>(y);
}

// The part of the dense route that does not depend on the kind: Omega = lambda X lambda^T, two N x N products.
void BM_dense_omega(benchmark::State& state) {
  const Eigen::Index N = state.range(0);
  Problem p = make_problem(N, kSmallN, kStepNorm, kSeed);
  const Mat lambda = geomopt::make_section(p.x).dense();
  const Mat lift = p.xi.dense();
  Mat t(N, N), omega(N, N);
  for (auto _ : state) {
    t.noalias() = lambda * lift;
    omega.noalias() = t * lambda.transpose();
    benchmark::DoNotOptimize(omega.data());
    benchmark::ClobberMemory();
  }
}

void BM_core(benchmark::State& state, Retraction r) {
  Problem p = make_problem(256, kSmallN, kStepNorm, kSeed);
  const auto s = geomopt::detail::lift_core<double>(p.xi.A().dense(), p.xi.B()).second;  // 2n x 2n skew
  for (auto _ : state) {
    Mat f = geomopt::detail::core_function(s, r);
    benchmark::DoNotOptimize(f.data());
    benchmark::ClobberMemory();
  }
}

void BM_lift(benchmark::State& state, SectionPolicy policy) {
  const Eigen::Index N = state.range(0);
  Problem p = make_problem(N, kSmallN, kStepNorm, kSeed);
  geomopt::Rng rng(kSeed + 1);
  const Mat egrad = geomopt::detail::gaussian<double>(rng, N, kSmallN);
  const auto section = geomopt::make_section(p.x, policy);
  for (auto _ : state) {
    Tangent xi = geomopt::lift(p.x, section, egrad);
    benchmark::DoNotOptimize(xi.B().data());
    benchmark::ClobberMemory();
  }
}

void register_timings(long dense_max_N) {
  const std::vector<long> sizes = {64, 256, 1024, 4096};
  for (Retraction r : {Retraction::cayley, Retraction::geodesic}) {
    for (SectionPolicy policy : {SectionPolicy::recomputed, SectionPolicy::transported}) {
      const std::string name =
          std::string("retract/") + (policy == SectionPolicy::recomputed ? "implicit/" : "transported/") + kind_name(r);
      auto* b = benchmark::RegisterBenchmark(name.c_str(), BM_retract_section, policy, r);
      for (long N : sizes) b->Arg(N);
      b->ArgName("N")->Unit(benchmark::kMicrosecond);
    }
    for (bool form_omega : {true, false}) {
      const std::string name = std::string(form_omega ? "retract/dense/" : "retract/dense_f/") + kind_name(r);
      auto* dense = benchmark::RegisterBenchmark(name.c_str(), BM_retract_dense, r, form_omega);
      for (long N : sizes)
        if (N <= dense_max_N) dense->Arg(N);
      dense->ArgName("N")->Unit(benchmark::kMicrosecond);
    }
    benchmark::RegisterBenchmark((std::string("core/") + kind_name(r)).c_str(), BM_core, r)
        ->Unit(benchmark::kMicrosecond);
  }
  auto* omega = benchmark::RegisterBenchmark("dense_omega", BM_dense_omega);
  for (long N : sizes)
    if (N <= dense_max_N) omega->Arg(N);
  omega->ArgName("N")->Unit(benchmark::kMicrosecond);
  for (SectionPolicy policy : {SectionPolicy::recomputed, SectionPolicy::transported}) {
    auto* b =
        benchmark::RegisterBenchmark((std::string("lift/") + section_policy_name(policy)).c_str(), BM_lift, policy);
    for (long N : sizes) b->Arg(N);
    b->ArgName("N")->Unit(benchmark::kMicrosecond);
  }
}

// ---- accuracy ----

// The reference f(X) E in long double, f the exponential (Eigen MatrixFunctions) or the Cayley transform.
MatL reference_local(const Tangent& xi, Retraction r) {
  const MatL X = xi.dense().cast<long double>();
  const Eigen::Index N = X.rows(), n = xi.n();
  const MatL E = MatL::Identity(N, n);
  if (r == Retraction::geodesic) {
    const MatL f = X.exp();
    return f.leftCols(n);
  }
  const MatL I = MatL::Identity(N, N);
  return Eigen::PartialPivLU<MatL>(I - X / 2).solve(E + X.leftCols(n) / 2);
}

// phi(Z) = (e^Z - I) Z^-1 as the top-right block of exp([[Z, I], [0, 0]]).
Mat phi(const Mat& z) {
  const Eigen::Index m = z.rows();
  Mat aug = Mat::Zero(2 * m, 2 * m);
  aug.topLeftCorner(m, m) = z;
  aug.topRightCorner(m, m).setIdentity();
  const Mat e = aug.exp();
  return e.topRightCorner(m, m);
}

struct UvResult {
  Mat local;     // f(X) E, N x n
  double znorm;  // ||V^T U||_F
};

// f(X) E through the non-orthogonal factors U = [C, E], V = [E, -C], C = [A/2; B].
UvResult uv_local(const Tangent& xi, Retraction r) {
  const Eigen::Index n = xi.n(), N = xi.N();
  Mat C(N, n);
  C << 0.5 * xi.A().dense(), xi.B();
  const Mat E = Mat::Identity(N, n);
  Mat U(N, 2 * n), V(N, 2 * n);
  U << C, E;
  V << E, -C;
  const Mat Z = V.transpose() * U;  // 2n x 2n
  const Mat vte = V.transpose() * E;
  Mat middle;
  if (r == Retraction::geodesic) {
    middle = phi(Z);
  } else {
    middle = Eigen::PartialPivLU<Mat>(Mat::Identity(2 * n, 2 * n) - 0.5 * Z).inverse();
  }
  return {E + U * (middle * vte), Z.norm()};
}

double rel_distance(const Mat& y, const MatL& ref) {
  return static_cast<double>((y.cast<long double>() - ref).norm() / ref.norm());
}

int run_accuracy(int draws) {
  struct Shape {
    Eigen::Index N, n;
  };
  const Shape shapes[] = {{64, 16}, {20, 3}};
  const double norms[] = {0.1, 1.0, 10.0, 60.0};
  std::printf("accuracy: max over %d random lifts per row; reference: dense N x N f(X) in long double\n", draws);
  std::printf("%-10s %-9s %6s | %11s %11s | %11s %11s | %11s\n", "shape", "kind", "norm", "W: check", "W: rel.err",
              "UV: check", "UV: rel.err", "|V^T U|_F");
  for (const Shape& sh : shapes) {
    for (Retraction r : {Retraction::cayley, Retraction::geodesic}) {
      for (double norm : norms) {
        double w_check = 0, w_err = 0, uv_check = 0, uv_err = 0, znorm = 0;
        for (int d = 0; d < draws; ++d) {
          const Problem p = make_problem(sh.N, sh.n, norm, kSeed + 1000 * static_cast<std::uint64_t>(d) + 7);
          const auto section = geomopt::make_section(p.x);
          const MatL lam = section.dense().cast<long double>();
          const MatL y_ref = lam * reference_local(p.xi, r);
          // W: the library's route.
          St x = p.x;
          geomopt::retract(x, p.xi, r);
          w_check = std::max(w_check, geomopt::check(x));
          w_err = std::max(w_err, rel_distance(x.value(), y_ref));
          // U, V: the non-orthogonal factors, through the same section.
          const UvResult uv = uv_local(p.xi, r);
          const Mat y_uv = section.apply(uv.local);
          uv_check = std::max(uv_check, geomopt::detail::orthonormality_defect<double>(y_uv));
          uv_err = std::max(uv_err, rel_distance(y_uv, y_ref));
          znorm = std::max(znorm, uv.znorm);
        }
        const std::string shape = "St(" + std::to_string(sh.N) + "," + std::to_string(sh.n) + ")";
        std::printf("%-10s %-9s %6g | %11.2e %11.2e | %11.2e %11.2e | %11.3g\n", shape.c_str(), kind_name(r), norm,
                    w_check, w_err, uv_check, uv_err, znorm);
      }
    }
  }
  return 0;
}

}  // namespace

// Own flags, removed before Google Benchmark reads the rest:
//   --accuracy           run the accuracy experiment instead of the timings
//   --draws=K            random lifts per accuracy row (default 10)
//   --dense_max_N=N      largest N timed by the dense route (default 1024)
//   --pinned_malloc      (glibc) fix malloc's thresholds: blocks up to 32 MiB come from the heap and the heap is never
//                        trimmed. Without it, glibc's defaults (mmap from 128 KiB, trim past 128 KiB of free top, both
//                        raised by the first large free) can hand each N x n temporary of a retraction fresh pages, so
//                        page faults join the timing from N = 1024 (N x n doubles = 128 KiB), and how many depends
//                        on which benchmarks ran before.
int main(int argc, char** argv) {
  bool accuracy = false, pinned_malloc = false;
  int draws = 10;
  long dense_max_N = 1024;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--accuracy") == 0) {
      accuracy = true;
    } else if (std::strncmp(argv[i], "--draws=", 8) == 0) {
      draws = std::atoi(argv[i] + 8);
    } else if (std::strncmp(argv[i], "--dense_max_N=", 14) == 0) {
      dense_max_N = std::atol(argv[i] + 14);
    } else if (std::strcmp(argv[i], "--pinned_malloc") == 0) {
      pinned_malloc = true;
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (pinned_malloc) {
#if defined(__GLIBC__)
    if (mallopt(M_MMAP_THRESHOLD, 32 << 20) != 1 || mallopt(M_TRIM_THRESHOLD, 1 << 30) != 1) {
      std::fprintf(stderr, "manifolds_bench: mallopt failed\n");
      return 1;
    }
#else
    std::fprintf(stderr, "manifolds_bench: --pinned_malloc needs glibc\n");
    return 1;
#endif
  }
  if (accuracy) return run_accuracy(std::max(draws, 1));
  int rest_argc = static_cast<int>(rest.size());
  register_timings(dense_max_N);
  benchmark::AddCustomContext("malloc", pinned_malloc ? "pinned" : "default");
  benchmark::AddCustomContext("dense_max_N", std::to_string(dense_max_N));
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
