// The program of the fault test (kill_rank_test.cmake): a data-parallel fit at P >= 3 in which rank 1 kills itself
// (SIGKILL) while the others are inside a step, after rank 0 has saved a checkpoint.
//
//   kill_rank average|zero OUT TIMEOUT_SECONDS   under mpirun: two healthy steps; rank 0 saves OUT/checkpoint.h5
//                                                (average only) and the raw bytes of the same parameters and state to
//                                                OUT/expected.bin; then rank 1 raises SIGKILL and the others step.
//                                                A survivor that catches geomopt::distributed::Error writes what()
//                                                and the seconds it waited to OUT/rank<r>.txt and to stderr, and
//                                                ends the job with MPI_Abort (status 3) a second later
//   kill_rank verify OUT                         one process: OUT/checkpoint.h5 loads, and equals OUT/expected.bin
//
// The survivors' errors go to files as well as stderr because the first MPI_Abort may end the other survivors before
// their stderr reaches mpirun.
#include <mpi.h>

#include <Eigen/Core>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <geomopt/distributed.hpp>
#include <geomopt/distributed/zero_redundancy_optimizer.hpp>
#include <geomopt/io/checkpoint.hpp>
#include <geomopt/optimizers.hpp>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace gd = geomopt::distributed;

namespace {

struct Linear {
  Eigen::MatrixXd weight;
  Eigen::VectorXd bias;
  GEOMOPT_PTREE(weight, bias)
};

Linear zeros() { return {Eigen::MatrixXd::Zero(40, 30), Eigen::VectorXd::Zero(30)}; }

// Rank q's gradient at step k.
Linear gradient(int q, int k) {
  Linear g = zeros();
  for (Eigen::Index i = 0; i < g.weight.size(); ++i)
    g.weight.data()[i] = std::sin(0.01 * static_cast<double>(i) + q + 0.1 * k);
  for (Eigen::Index i = 0; i < g.bias.size(); ++i) g.bias[i] = std::cos(0.1 * static_cast<double>(i) - q + k);
  return g;
}

// The parameters, the Adam moments and the step count as raw bytes.
std::string bytes_of(const Linear& params, const geomopt::OptimizerState<Linear>& state) {
  std::string out(reinterpret_cast<const char*>(params.weight.data()), params.weight.size() * sizeof(double));
  out.append(reinterpret_cast<const char*>(params.bias.data()), params.bias.size() * sizeof(double));
  const auto steps = static_cast<std::int64_t>(state.step_count());
  out.append(reinterpret_cast<const char*>(&steps), sizeof steps);
  return out;
}

int verify(const std::string& out) {
  Linear params = zeros();
  geomopt::Adam adam({.lr = 0.01});
  auto state = adam.init(params);
  geomopt::io::load_checkpoint(out + "/checkpoint.h5", params, state);
  std::ifstream in(out + "/expected.bin", std::ios::binary);
  const std::string expected((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (expected.empty() || expected != bytes_of(params, state)) {
    std::fprintf(stderr, "kill_rank verify: %s/checkpoint.h5 differs from expected.bin\n", out.c_str());
    return 1;
  }
  std::printf("kill_rank verify: the checkpoint loads and equals what was saved (step %lld)\n",
              static_cast<long long>(state.step_count()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "verify") == 0) return verify(argv[2]);
  if (argc != 4) {
    std::fprintf(stderr, "usage: kill_rank average|zero OUT TIMEOUT_SECONDS | kill_rank verify OUT\n");
    return 2;
  }
  const std::string mode = argv[1], out = argv[2];
  const auto timeout = std::chrono::milliseconds(static_cast<long long>(std::atof(argv[3]) * 1000));
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  {
    const gd::Communicator comm(MPI_COMM_WORLD, {.timeout = timeout});
    Linear params = zeros(), grads = zeros();
    geomopt::Adam adam({.lr = 0.01});
    auto state = adam.init(params);
    // Buckets of 2 KiB: the killed rank's absence is met in the first of several.
    gd::GradientAverager averager(comm, grads, {.bucket_bytes = 2048});
    gd::ZeroRedundancyOptimizer zero(comm, geomopt::Adam({.lr = 0.01}), params);
    auto step = [&](int k) {
      grads = gradient(rank, k);
      if (mode == "zero") {
        zero.step(params, grads);
      } else {
        averager.average(grads);
        adam.step(params, grads, state);
      }
    };
    step(0);
    step(1);
    if (rank == 0 && mode == "average") {
      geomopt::io::save_checkpoint(out + "/checkpoint.h5", params, state);
      std::ofstream(out + "/expected.bin", std::ios::binary) << bytes_of(params, state);
    }
    MPI_Barrier(MPI_COMM_WORLD);  // the checkpoint is complete before the fault
    if (rank == 1) std::raise(SIGKILL);
    const auto start = std::chrono::steady_clock::now();
    try {
      step(2);
      std::fprintf(stderr, "rank %d: the step returned without rank 1\n", rank);
    } catch (const gd::Error& e) {
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const std::string report = std::string(dynamic_cast<const gd::TimeoutError*>(&e) ? "TimeoutError" : "Error") +
                                 " after " + std::to_string(waited) + " s: " + e.what() + "\n";
      std::ofstream(out + "/rank" + std::to_string(rank) + ".txt") << report;
      std::fprintf(stderr, "rank %d: %s", rank, report.c_str());
      std::fflush(stderr);
      // A rank that lost a peer cannot finalize (MPI_Finalize waits for every rank): end the job, a second later so
      // that the other survivors, whose deadlines fall within it, have written their reports.
      std::this_thread::sleep_for(std::chrono::seconds(1));
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
  }
  MPI_Finalize();
  return 1;  // the step cannot succeed without rank 1
}
