// ZeroRedundancyOptimizer on a tree of float32 leaves, under Adam and under Muon: per rank, the bytes of its state
// against 1/P of the unsharded state, the plan's max/mean load and the bytes it sends per step; and the time of one
// sharded step against the data-parallel reference measured in the same run, GradientAverager::average followed by
// the unsharded step (median of the repetitions, each from a barrier to the slowest rank's finish).
//
//   mpiexec -n 2 distributed_zero_bench SHAPES [REPS=5]
// SHAPES: one leaf per line, "rows [cols]" (benchmarks/tree_small.shapes, ../shared/bench/*.shapes).
#include <mpi.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <geomopt/distributed.hpp>
#include <geomopt/distributed/zero_redundancy_optimizer.hpp>
#include <geomopt/optimizers.hpp>
#include <vector>

#include "shapes_file.hpp"

namespace {

using Tree = std::vector<Eigen::MatrixXf>;

// The slowest rank's time of f, from a barrier; the median of reps.
template <class F>
double median_time(int reps, F&& f) {
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    f();
    double mine = MPI_Wtime() - t0, slowest = 0;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    times.push_back(slowest);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

template <class Make>
void run(const char* name, Make make, const Tree& shape, int reps) {
  const geomopt::distributed::Communicator comm(MPI_COMM_WORLD);
  const int rank = comm.rank(), P = comm.size();
  Tree params = shape, grads = shape;
  for (Eigen::MatrixXf& g : grads) g.setConstant(1e-3f * static_cast<float>(rank + 1));
  geomopt::distributed::ZeroRedundancyOptimizer zero(comm, make(), params);
  const double sharded = median_time(reps, [&] { zero.step(params, grads); });

  Tree ddp_params = shape, ddp_grads = grads;
  auto optimizer = make();
  auto state = optimizer.init(ddp_params);
  geomopt::distributed::GradientAverager averager(comm, ddp_grads);
  const double reference = median_time(reps, [&] {
    averager.average(ddp_grads);
    optimizer.step(ddp_params, ddp_grads, state);
  });

  const long whole = static_cast<long>(state.nbytes());
  std::vector<long> bytes(static_cast<std::size_t>(P));
  const long mine = static_cast<long>(zero.state_bytes());
  MPI_Gather(&mine, 1, MPI_LONG, bytes.data(), 1, MPI_LONG, 0, MPI_COMM_WORLD);
  if (rank != 0) return;
  std::printf("%s, P = %d: %s\n", name, P, zero.plan().BriefReport().c_str());
  std::printf("  state bytes: whole %ld, whole / P %ld; per rank", whole, whole / P);
  long most = 0;
  for (long b : bytes) std::printf(" %ld", b), most = std::max(most, b);
  std::printf("; max / (whole / P) %.3f\n", static_cast<double>(most) * P / static_cast<double>(whole));
  std::printf("  sent per step by rank 0: %.1f MB; step %.1f ms, average + step %.1f ms, ratio %.2f\n",
              static_cast<double>(zero.bytes_sent_per_step()) / 1e6, 1e3 * sharded, 1e3 * reference,
              reference / sharded);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: distributed_zero_bench SHAPES [REPS=5]\n");
    MPI_Finalize();
    return 2;
  }
  Tree shape = bench::read_shapes(argv[1]);
  for (Eigen::MatrixXf& leaf : shape) leaf *= 0.02f;  // a network's scale of weights
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  run(
      "Adam", [] { return geomopt::Adam({.lr = 1e-3}); }, shape, reps);
  run(
      "Muon", [] { return geomopt::Muon(); }, shape, reps);
  MPI_Finalize();
  return 0;
}
