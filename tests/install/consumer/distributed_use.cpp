// The installed distributed component in use: every rank's gradient holds its rank, and the averaged tree must hold
// the mean rank (P - 1) / 2 on every rank; a sharded Adam step must equal the unsharded step on that mean bit for bit,
// and its checkpoint must load into one process's state. Run by run_consumer.cmake under mpiexec at two ranks, or
// alone (P = 1).
#include <mpi.h>

#include <Eigen/Core>
#include <cstdio>
#include <filesystem>
#include <geomopt/distributed.hpp>
#include <geomopt/distributed/checkpoint.hpp>
#include <geomopt/distributed/zero_redundancy_optimizer.hpp>
#include <geomopt/io.hpp>
#include <geomopt/optimizers.hpp>
#include <geomopt/ptree.hpp>
#include <string>

namespace {

struct Grads {
  Eigen::MatrixXf weight = Eigen::MatrixXf::Zero(3, 2);
  Eigen::VectorXd bias = Eigen::VectorXd::Zero(4);
  GEOMOPT_PTREE(weight, bias)
};

struct Linear {
  Eigen::MatrixXd weight = Eigen::MatrixXd::Constant(3, 2, 1.0);
  Eigen::VectorXd bias = Eigen::VectorXd::Constant(4, -1.0);
  GEOMOPT_PTREE(weight, bias)
};

bool same(const Linear& a, const Linear& b) {
  return (a.weight.array() == b.weight.array()).all() && (a.bias.array() == b.bias.array()).all();
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 0;
  {
    const geomopt::distributed::Communicator comm(MPI_COMM_WORLD);
    Grads grads;
    grads.weight.setConstant(static_cast<float>(comm.rank()));
    grads.bias.setConstant(comm.rank());
    geomopt::distributed::GradientAverager averager(comm, grads);
    averager.average(grads);
    const double mean = (comm.size() - 1) / 2.0;
    if (!(grads.weight.array() == static_cast<float>(mean)).all() || !(grads.bias.array() == mean).all()) {
      std::fprintf(stderr, "consumer_distributed: rank %d did not get the mean rank %g\n", comm.rank(), mean);
      status = 1;
    }

    // Adam on a double tree: one unsharded on the mean gradient, one sharded on each rank's own.
    Linear params, sharded, own_grads, mean_grads;
    own_grads.weight.setConstant(comm.rank());
    own_grads.bias.setConstant(comm.rank());
    mean_grads.weight.setConstant(mean);
    mean_grads.bias.setConstant(mean);
    geomopt::Adam adam({.lr = 0.1});
    auto state = adam.init(params);
    adam.step(params, mean_grads, state);
    geomopt::distributed::ZeroRedundancyOptimizer zero(comm, geomopt::Adam({.lr = 0.1}), sharded);
    zero.step(sharded, own_grads);
    if (!same(params, sharded)) {
      std::fprintf(stderr, "consumer_distributed: rank %d's sharded step differs from the unsharded one\n",
                   comm.rank());
      status = 1;
    }
    // Beside the program, in the consumer's build directory.
    const std::string file = (std::filesystem::path(argv[0]).parent_path() / "consumer_distributed.h5").string();
    geomopt::distributed::save_checkpoint(comm, file, sharded, zero);
    if (comm.rank() == 0) {
      Linear loaded{Eigen::MatrixXd::Zero(3, 2), Eigen::VectorXd::Zero(4)};
      auto whole = adam.init(loaded);
      geomopt::io::load_checkpoint(file, loaded, whole);
      if (!same(loaded, params) || whole.step_count() != 1) {
        std::fprintf(stderr, "consumer_distributed: the sharded checkpoint does not load in one process\n");
        status = 1;
      }
    }
    if (status == 0 && comm.rank() == 0)
      std::printf("consumer_distributed: averaged, stepped sharded and saved a tree over %d ranks\n", comm.size());
  }
  MPI_Finalize();
  return status;
}
