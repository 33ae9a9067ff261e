// GradientAverager::average of a tree of float32 leaves against one MPI_Allreduce (MPI_SUM, in place) of a flat buffer
// of the same bytes, on MPI_COMM_WORLD, median of the repetitions, each timed from a barrier to the slowest rank's
// finish. Prints both times and the ratio allreduce / average (above 1: the averager is faster).
//
//   mpiexec -n 2 distributed_average_bench SHAPES [REPS=20] [BUCKET_BYTES=26214400]
// SHAPES: one leaf per line, "rows [cols]" (benchmarks/tree_small.shapes, ../shared/bench/*.shapes).
#include <mpi.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <geomopt/distributed.hpp>
#include <geomopt/ptree.hpp>
#include <vector>

#include "shapes_file.hpp"

namespace {

// The slowest rank's time of f, from a barrier.
template <class F>
double timed(F&& f) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  f();
  double mine = MPI_Wtime() - start, slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: distributed_average_bench SHAPES [REPS] [BUCKET_BYTES]\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int reps = argc > 2 ? std::atoi(argv[2]) : 20;
  geomopt::distributed::AverageOptions options;
  if (argc > 3) options.bucket_bytes = std::strtoull(argv[3], nullptr, 10);
  {
    const geomopt::distributed::Communicator comm(MPI_COMM_WORLD);
    std::vector<Eigen::MatrixXf> grads = bench::read_shapes(argv[1]);
    const Eigen::Index n = geomopt::ptree::count(grads);
    geomopt::distributed::GradientAverager averager(comm, grads, options);
    std::vector<float> flat(static_cast<std::size_t>(n), 1.0f);
    averager.average(grads);
    MPI_Allreduce(MPI_IN_PLACE, flat.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    std::vector<double> average_times, allreduce_times;
    for (int r = 0; r < reps; ++r) {
      average_times.push_back(timed([&] { averager.average(grads); }));
      allreduce_times.push_back(timed(
          [&] { MPI_Allreduce(MPI_IN_PLACE, flat.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); }));
    }
    if (comm.rank() == 0) {
      const double a = median(average_times), b = median(allreduce_times);
      std::printf("ranks %d, %zu leaves, %.1f MB float32, %zu buckets of %zu bytes, %d reps\n", comm.size(),
                  grads.size(), 4e-6 * static_cast<double>(n), averager.bucket_count(), options.bucket_bytes, reps);
      std::printf("GradientAverager::average  %9.3f ms  (sends %.1f MB per rank)\n", 1e3 * a,
                  1e-6 * static_cast<double>(averager.bytes_sent_per_call()));
      std::printf("MPI_Allreduce, same bytes  %9.3f ms\n", 1e3 * b);
      std::printf("speed ratio (allreduce / average): %.2f\n", b / a);
    }
  }
  MPI_Finalize();
  return 0;
}
