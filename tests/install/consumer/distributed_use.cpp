// The installed distributed component in use: every rank's gradient holds its rank, and the averaged tree must hold
// the mean rank (P - 1) / 2 on every rank. Run by run_consumer.cmake under mpiexec at two ranks, or alone (P = 1).
#include <mpi.h>

#include <Eigen/Core>
#include <cstdio>
#include <geomopt/distributed.hpp>
#include <geomopt/ptree.hpp>

namespace {

struct Grads {
  Eigen::MatrixXf weight = Eigen::MatrixXf::Zero(3, 2);
  Eigen::VectorXd bias = Eigen::VectorXd::Zero(4);
  GEOMOPT_PTREE(weight, bias)
};

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
    } else if (comm.rank() == 0) {
      std::printf("consumer_distributed: averaged a tree over %d ranks\n", comm.size());
    }
  }
  MPI_Finalize();
  return status;
}
