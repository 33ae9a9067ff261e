// ptree walks on the 369-leaf tree, each against a reference measured in the same run.
//
//   BM_memcpy/BM_flatten_into/BM_unflatten_into   the 20,153,696-float tree against one std::memcpy of its bytes
//   BM_eigen_copy                                 the same bytes copied by Eigen (a second reference)
//   BM_for_each_2x2 / BM_loop_2x2                 369 leaves of 2x2 against a loop over std::vector<MatrixXf>
//
// benchmarks/run_ptree.py prints the ratios; docs/design.md records them.
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "tree369.hpp"

namespace gp = geomopt::ptree;

namespace {

// Leaves shaped by the shapes file (or all 2x2 when `tiny`), filled with distinct values.
Tree369 make_tree(bool tiny) {
  Tree369 t;
  std::size_t i = 0;
  gp::for_each(
      [&](auto& leaf) {
        const auto [rows, cols] = kTree369Shapes[i++];
        if constexpr (std::decay_t<decltype(leaf)>::ColsAtCompileTime == 1) {
          leaf.resize(tiny ? 4 : rows);
        } else {
          leaf.resize(tiny ? 2 : rows, tiny ? 2 : cols);
        }
        leaf.setConstant(static_cast<float>(i));
      },
      t);
  return t;
}

void set_bytes(benchmark::State& state, std::size_t bytes) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes));
}

void BM_memcpy(benchmark::State& state) {
  const Tree369 t = make_tree(false);
  const Eigen::VectorXf src = gp::flatten(t);
  Eigen::VectorXf dst = Eigen::VectorXf::Zero(src.size());  // touched, like the vector flatten_into fills
  const std::size_t bytes = sizeof(float) * static_cast<std::size_t>(src.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, bytes);
}

// A second copy reference: the same bytes through Eigen's vectorised assignment, for context when the C library's
// memcpy takes a slow path on this processor.
void BM_eigen_copy(benchmark::State& state) {
  const Tree369 t = make_tree(false);
  const Eigen::VectorXf src = gp::flatten(t);
  Eigen::VectorXf dst = Eigen::VectorXf::Zero(src.size());
  for (auto _ : state) {
    dst = src;
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, sizeof(float) * static_cast<std::size_t>(src.size()));
}

void BM_flatten_into(benchmark::State& state) {
  const Tree369 t = make_tree(false);
  Eigen::VectorXf v = Eigen::VectorXf::Zero(gp::count(t));
  for (auto _ : state) {
    gp::flatten_into(v, t);
    benchmark::DoNotOptimize(v.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, sizeof(float) * static_cast<std::size_t>(v.size()));
}

void BM_unflatten_into(benchmark::State& state) {
  Tree369 t = make_tree(false);
  const Eigen::VectorXf v = gp::flatten(t);
  for (auto _ : state) {
    gp::unflatten_into(t, v);
    benchmark::DoNotOptimize(&t);
    benchmark::ClobberMemory();
  }
  set_bytes(state, sizeof(float) * static_cast<std::size_t>(v.size()));
}

void BM_for_each_2x2(benchmark::State& state) {
  Tree369 t = make_tree(true);
  for (auto _ : state) {
    gp::for_each([](auto& leaf) { leaf.array() += 1.0f; }, t);
    benchmark::ClobberMemory();
  }
  state.counters["ns_per_leaf"] = benchmark::Counter(
      static_cast<double>(kTree369Shapes.size()) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_loop_2x2(benchmark::State& state) {
  std::vector<Eigen::MatrixXf> leaves(kTree369Shapes.size(), Eigen::MatrixXf::Zero(2, 2));
  for (auto _ : state) {
    for (auto& leaf : leaves) leaf.array() += 1.0f;
    benchmark::ClobberMemory();
  }
  state.counters["ns_per_leaf"] = benchmark::Counter(
      static_cast<double>(kTree369Shapes.size()) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

}  // namespace

BENCHMARK(BM_memcpy)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_eigen_copy)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_flatten_into)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_unflatten_into)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_for_each_2x2);
BENCHMARK(BM_loop_2x2);

BENCHMARK_MAIN();
