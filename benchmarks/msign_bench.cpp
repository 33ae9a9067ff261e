// The cost and accuracy of geomopt::msign (the orthogonal polar factor U V^T of a matrix) by each of its methods,
// against Eigen's SVD, for float (and double at a few shapes) on square n x n and tall matrices
// (docs/benchmarks.md, "msign"; run by benchmarks/run_msign.py).
//
// Timing mode (the default; Google Benchmark flags apply), one benchmark per type, shape and method,
// msign/<type>/<rows>x<cols>/<method>, each call mapping the same standard normal matrix:
//   newton_schulz  msign_inplace with Muon's defaults (5 quintic steps) and a preallocated MsignWorkspace
//   ns_polish      the same and polish_steps = 5
//   polar_express  msign_inplace with MsignMethod::polar_express, 5 steps of its schedule
//   pe_8           the same, 8 steps (the schedule to its end: the band is 1 within 1e-14)
//   gram           msign_inplace with MsignMethod::gram (the Gram eigendecomposition, in double)
//   svd            msign_inplace with MsignMethod::svd (BDCSVD, singular values below max(rows, cols) eps(T) s_max
//                  cut, as gram cuts them)
//   bdcsvd         Eigen::BDCSVD with thin U and V, then U V^T: the reference of the ratios (MsignMethod::svd is this
//                  and a rank cut), its decomposition object reused between calls
//   jacobi         the same with Eigen::JacobiSVD (column-pivoting QR preconditioner), float at the small shapes only
// The msign rows (all but bdcsvd and jacobi) copy the input into the matrix they map in place in each call (O(rows
// cols), against the O(rows cols^2) of every method).
// And batch/<type>/<batch>x<rows>x<cols>/<method>/<mode>: `batch` standard normal matrices stored one after another,
// mapped by newton_schulz or polar_express (5 steps), each call copying the batch in first:
//   one_by_one     msign_inplace on each matrix in turn, one MsignWorkspace (the reference of the batch's ratios)
//   batched        msign_batched, an MsignBatchWorkspace of one thread
//   batched_2t     msign_batched, an MsignBatchWorkspace of two threads
//
// Accuracy mode (--accuracy): for each type and shape, a standard normal matrix and an ill-conditioned one
// (U diag(s) V^T, U and V Haar-random, s logarithmically spaced over [1e-4, 1]), each method's result against the
// exact polar factor of the same (rounded) input, computed in double: by BDCSVD for float input, by JacobiSVD for
// double input (an algorithm independent of the bdcsvd row it checks; a long double reference would add 40 CPU s to
// this file's compilation). One line per input and method:
//   accuracy <type> <rows>x<cols> <input> <method> <max|s_i - 1|> <|Q - Q_exact|_F / sqrt(k)> <s_min(Q)> <s_max(Q)>
//            <band lo> <band hi> <s_min(M) / |M|_F> <#{s_i < 1/2}> <#{s_i(M) <= max(rows, cols) eps(T) s_max(M)}>
// with k = min(rows, cols), s_i the singular values of the result (BDCSVD in double), for the Newton-Schulz rows
// the band msign_band predicts for the input's s_min(M) / |M|_F (1 1 for the exact methods), then the number of
// directions the result drops and the number msign's rank rule (svd and gram) should drop.
// A non-finite result makes the program exit with status 1.
//
// --quick: tiny shapes (float 64x64 and 128x32, double 64x64, a batch of 4 of 64x64), for the CI smoke run.
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <Eigen/SVD>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "geomopt/optimizers/msign.hpp"

namespace {

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;

constexpr std::uint64_t kSeed = 20261201;
constexpr unsigned kThin = Eigen::ComputeThinU | Eigen::ComputeThinV;

struct Shape {
  Eigen::Index rows, cols;
  std::string name() const { return std::to_string(rows) + "x" + std::to_string(cols); }
  Eigen::Index k() const { return std::min(rows, cols); }
};

enum class Method { newton_schulz, ns_polish, polar_express, pe_8, gram, svd, bdcsvd, jacobi };
constexpr Method kMethods[] = {Method::newton_schulz, Method::ns_polish, Method::polar_express, Method::pe_8,
                               Method::gram,          Method::svd,       Method::bdcsvd,        Method::jacobi};

const char* method_name(Method m) {
  switch (m) {
    case Method::newton_schulz:
      return "newton_schulz";
    case Method::ns_polish:
      return "ns_polish";
    case Method::polar_express:
      return "polar_express";
    case Method::pe_8:
      return "pe_8";
    case Method::gram:
      return "gram";
    case Method::svd:
      return "svd";
    case Method::bdcsvd:
      return "bdcsvd";
    case Method::jacobi:
      return "jacobi";
  }
  return "?";
}

template <class T>
const char* type_name() {
  return std::is_same_v<T, float> ? "float" : "double";
}

// JacobiSVD only in float (it is the reference of the double rows) and where it costs about as much as BDCSVD at
// 256x256 or less: its sweeps grow much faster.
template <class T>
bool runs(Method m, Shape s) {
  return m != Method::jacobi || (std::is_same_v<T, float> && s.rows * s.cols * s.k() <= 256 * 64 * 64);
}

struct Plan {
  std::vector<Shape> floats, doubles;
  Eigen::Index batch;  // of 64 x 64 float matrices
};

Plan plan(bool quick) {
  if (quick) return {{{64, 64}, {128, 32}}, {{64, 64}}, 4};
  return {{{64, 64}, {128, 128}, {256, 256}, {512, 512}, {1024, 1024}, {256, 64}, {512, 128}, {1024, 256}},
          {{256, 256}, {1024, 256}},
          64};
}

bool iterative(Method m) {
  return m == Method::newton_schulz || m == Method::ns_polish || m == Method::polar_express || m == Method::pe_8;
}

geomopt::MsignOptions options(Method m) {
  geomopt::MsignOptions o;
  if (m == Method::ns_polish) o.polish_steps = 5;
  if (m == Method::polar_express) o.method = geomopt::MsignMethod::polar_express;
  if (m == Method::pe_8) o = {.method = geomopt::MsignMethod::polar_express, .steps = 8};
  if (m == Method::gram) o.method = geomopt::MsignMethod::gram;
  if (m == Method::svd) o.method = geomopt::MsignMethod::svd;
  return o;
}

template <class T>
Mat<T> gaussian_input(Shape s, std::uint64_t seed) {
  geomopt::Rng rng(seed);
  return geomopt::detail::gaussian<T>(rng, s.rows, s.cols);
}

// U diag(s) V^T with s from 1 down to 1e-4, logarithmically spaced, formed in double and rounded to T once.
template <class T>
Mat<T> ill_conditioned_input(Shape s, std::uint64_t seed) {
  geomopt::Rng rng(seed);
  const Eigen::Index k = s.k();
  const Eigen::MatrixXd u = geomopt::detail::haar_stiefel<double>(rng, s.rows, k);
  const Eigen::MatrixXd v = geomopt::detail::haar_stiefel<double>(rng, s.cols, k);
  Eigen::VectorXd sv(k);
  for (Eigen::Index i = 0; i < k; ++i) sv(i) = std::pow(10.0, k > 1 ? -4.0 * double(i) / double(k - 1) : 0.0);
  return (u * sv.asDiagonal() * v.transpose()).cast<T>();
}

// One method with the buffers it keeps between calls, as a caller reusing them would.
template <class T>
class Runner {
 public:
  Runner(Method m, Shape s) : method_(m), out_(s.rows, s.cols) {
    if (m == Method::bdcsvd) bdc_ = Eigen::BDCSVD<Mat<T>>(s.rows, s.cols, kThin);
    if (m == Method::jacobi) jacobi_ = Eigen::JacobiSVD<Mat<T>>(s.rows, s.cols, kThin);
    if (iterative(m)) ws_.reserve(s.rows, s.cols);
  }

  const Mat<T>& operator()(const Mat<T>& m) {
    switch (method_) {
      case Method::bdcsvd:
        bdc_.compute(m, kThin);
        out_.noalias() = bdc_.matrixU() * bdc_.matrixV().transpose();
        break;
      case Method::jacobi:
        jacobi_.compute(m, kThin);
        out_.noalias() = jacobi_.matrixU() * jacobi_.matrixV().transpose();
        break;
      default:
        out_ = m;
        geomopt::msign_inplace(out_, options(method_), ws_);
    }
    return out_;
  }

 private:
  Method method_;
  Mat<T> out_;
  geomopt::MsignWorkspace<T> ws_;
  Eigen::BDCSVD<Mat<T>> bdc_;
  Eigen::JacobiSVD<Mat<T>> jacobi_;
};

// ---- timing ----

template <class T>
void BM_msign(benchmark::State& state, Method method, Shape s) {
  const Mat<T> m = gaussian_input<T>(s, kSeed);
  Runner<T> run(method, s);
  for (auto _ : state) {
    const Mat<T>& q = run(m);
    benchmark::DoNotOptimize(q.data());
    benchmark::ClobberMemory();
  }
  if (!run(m).allFinite()) state.SkipWithError("non-finite result");
}

template <class T>
void register_timings(const std::vector<Shape>& shapes) {
  for (Shape s : shapes)
    for (Method m : kMethods)
      if (runs<T>(m, s)) {
        const std::string name = std::string("msign/") + type_name<T>() + "/" + s.name() + "/" + method_name(m);
        benchmark::RegisterBenchmark(name.c_str(), BM_msign<T>, m, s)->Unit(benchmark::kMillisecond);
      }
}

// ---- batches ----

enum class BatchMode { one_by_one, batched, batched_2t };

const char* mode_name(BatchMode m) {
  switch (m) {
    case BatchMode::one_by_one:
      return "one_by_one";
    case BatchMode::batched:
      return "batched";
    case BatchMode::batched_2t:
      return "batched_2t";
  }
  return "?";
}

template <class T>
void BM_batch(benchmark::State& state, Method method, BatchMode mode, Eigen::Index batch, Shape s) {
  const Mat<T> input = gaussian_input<T>({s.rows, batch * s.cols}, kSeed);
  Mat<T> work = input;
  const geomopt::MsignOptions o = options(method);
  geomopt::MsignWorkspace<T> one(s.rows, s.cols);
  geomopt::MsignBatchWorkspace<T> many(s.rows, s.cols, mode == BatchMode::batched_2t ? 2 : 1);
  for (auto _ : state) {
    work = input;
    if (mode == BatchMode::one_by_one) {
      for (Eigen::Index i = 0; i < batch; ++i) geomopt::msign_inplace(work.middleCols(i * s.cols, s.cols), o, one);
    } else {
      geomopt::msign_batched(work.data(), batch, s.rows, s.cols, o, many);
    }
    benchmark::DoNotOptimize(work.data());
    benchmark::ClobberMemory();
  }
  if (!work.allFinite()) state.SkipWithError("non-finite result");
}

void register_batches(Eigen::Index batch) {
  const Shape s{64, 64};
  for (Method m : {Method::newton_schulz, Method::polar_express})
    for (BatchMode mode : {BatchMode::one_by_one, BatchMode::batched, BatchMode::batched_2t}) {
      const std::string name =
          "batch/float/" + std::to_string(batch) + "x" + s.name() + "/" + method_name(m) + "/" + mode_name(mode);
      benchmark::RegisterBenchmark(name.c_str(), BM_batch<float>, m, mode, batch, s)->Unit(benchmark::kMillisecond);
    }
}

// ---- accuracy ----

template <class T>
bool accuracy(Shape s) {
  using W = double;
  bool ok = true;
  for (const char* input : {"gaussian", "ill_conditioned"}) {
    const bool gaussian = std::strcmp(input, "gaussian") == 0;
    const Mat<T> m = gaussian ? gaussian_input<T>(s, kSeed) : ill_conditioned_input<T>(s, kSeed + 1);
    const Mat<W> mw = m.template cast<W>();
    Mat<W> exact;
    Eigen::VectorXd m_values;
    if constexpr (std::is_same_v<T, float>) {
      const Eigen::BDCSVD<Mat<W>> svd(mw, kThin);
      exact = svd.matrixU() * svd.matrixV().transpose();
      m_values = svd.singularValues();
    } else {
      const Eigen::JacobiSVD<Mat<W>> svd(mw, kThin);
      exact = svd.matrixU() * svd.matrixV().transpose();
      m_values = svd.singularValues();
    }
    const W s_rel = m_values.minCoeff() / mw.norm();
    const W cut =
        std::sqrt(static_cast<W>(std::max(s.rows, s.cols))) * std::numeric_limits<T>::epsilon() * m_values.maxCoeff();
    const long below_rule = (m_values.array() <= cut).count();
    for (Method method : kMethods) {
      if (!runs<T>(method, s)) continue;
      Runner<T> run(method, s);
      const Mat<W> q = run(m).template cast<W>();
      if (!q.allFinite()) {
        std::fprintf(stderr, "msign_bench: %s %s %s %s: non-finite result\n", type_name<T>(), s.name().c_str(), input,
                     method_name(method));
        ok = false;
        continue;
      }
      const Eigen::BDCSVD<Mat<W>> values(q);
      const auto& sv = values.singularValues();
      const double dev = static_cast<double>((sv.array() - W(1)).abs().maxCoeff());
      const double err = static_cast<double>((q - exact).norm() / std::sqrt(W(s.k())));
      std::pair<double, double> band{1, 1};
      if (iterative(method)) band = geomopt::msign_band(options(method), static_cast<double>(s_rel));
      const long dropped = (sv.array() < W(0.5)).count();
      std::printf("accuracy %s %s %s %s %.3e %.3e %.6g %.6g %.6g %.6g %.3e %ld %ld\n", type_name<T>(), s.name().c_str(),
                  input, method_name(method), dev, err, static_cast<double>(sv.minCoeff()),
                  static_cast<double>(sv.maxCoeff()), band.first, band.second, static_cast<double>(s_rel), dropped,
                  below_rule);
    }
  }
  return ok;
}

}  // namespace

// Own flags, removed before Google Benchmark reads the rest: --quick (the tiny shapes), --accuracy (the accuracy
// lines instead of the timings).
int main(int argc, char** argv) {
  bool quick = false, accuracy_mode = false;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--accuracy") == 0) {
      accuracy_mode = true;
    } else {
      rest.push_back(argv[i]);
    }
  }
  const Plan p = plan(quick);
  if (accuracy_mode) {
    bool ok = true;
    for (Shape s : p.floats) ok = accuracy<float>(s) && ok;
    for (Shape s : p.doubles) ok = accuracy<double>(s) && ok;
    return ok ? 0 : 1;
  }
  register_timings<float>(p.floats);
  register_timings<double>(p.doubles);
  register_batches(p.batch);
  benchmark::AddCustomContext("shapes", quick ? "quick" : "full");
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
