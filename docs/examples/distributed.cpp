// The code of docs/distributed.md: a data-parallel least-squares fit, each rank computing the gradient of its share of
// the batch, GradientAverager making it the gradient of the whole batch, and Adam stepping every rank's copy of the
// parameters; then the same fit with Adam's state sharded (ZeroRedundancyOptimizer), which must end with the same
// parameters, bit for bit, and resumes from its checkpoint bit for bit. Its own program (it calls MPI_Init), run by
// CTest under mpiexec at two ranks (docs_example_distributed): every rank must end with the same parameters, bit for
// bit, and the loss must fall; a tree of another shape on one rank must throw MismatchError on every rank.
#include <mpi.h>
#include <unistd.h>

#include <Eigen/Core>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <geomopt/distributed.hpp>
#include <geomopt/distributed/checkpoint.hpp>
#include <geomopt/distributed/zero_redundancy_optimizer.hpp>
#include <geomopt/optimizers.hpp>
#include <string>
#include <vector>

#include "expect.hpp"

namespace {

template <class T>
struct Linear {
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> weight;
  Eigen::Matrix<T, Eigen::Dynamic, 1> bias;
  GEOMOPT_PTREE(weight, bias)
};

// The batch every rank knows: 64 samples of 6 inputs, targets of 3 outputs from a fixed linear map.
struct Batch {
  Eigen::MatrixXd x = Eigen::MatrixXd::NullaryExpr(6, 64, [](Eigen::Index i, Eigen::Index j) {
    return std::sin(0.7 * static_cast<double>(i) + 1.3 * static_cast<double>(j));
  });
  Eigen::MatrixXd y =
      Eigen::MatrixXd::NullaryExpr(
          3, 6, [](Eigen::Index i, Eigen::Index j) { return std::cos(static_cast<double>(i + 2 * j)); }) *
      x;
};

// The gradient of this rank's share (columns rank, rank + P, ...) of the mean squared error, and the loss of the whole
// batch.
void share_gradient(const Linear<double>& p, const Batch& batch, int rank, int P, Linear<double>& g) {
  g.weight.setZero(p.weight.rows(), p.weight.cols());
  g.bias.setZero(p.bias.size());
  int count = 0;
  for (Eigen::Index j = rank; j < batch.x.cols(); j += P, ++count) {
    const Eigen::VectorXd r = p.weight * batch.x.col(j) + p.bias - batch.y.col(j);
    g.weight += r * batch.x.col(j).transpose();
    g.bias += r;
  }
  g.weight /= count;
  g.bias /= count;
}
double loss(const Linear<double>& p, const Batch& batch) {
  return ((p.weight * batch.x).colwise() + p.bias - batch.y).squaredNorm() / static_cast<double>(batch.x.cols());
}

bool same_on_every_rank(const Eigen::VectorXd& v) {
  int P = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  std::vector<double> all(static_cast<std::size_t>(v.size() * P));
  MPI_Allgather(v.data(), static_cast<int>(v.size()), MPI_DOUBLE, all.data(), static_cast<int>(v.size()), MPI_DOUBLE,
                MPI_COMM_WORLD);
  for (int q = 1; q < P; ++q)
    if (std::memcmp(all.data(), all.data() + q * v.size(), sizeof(double) * static_cast<std::size_t>(v.size())) != 0)
      return false;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  geomopt_docs::Expect expect{"distributed"};
  const Batch batch;
  // snippet-begin: using
  MPI_Init(&argc, &argv);
  {
    const geomopt::distributed::Communicator comm(MPI_COMM_WORLD);  // a duplicate: its messages never meet yours
    Linear<double> params{Eigen::MatrixXd::Zero(3, 6), Eigen::VectorXd::Zero(3)};  // the same on every rank
    Linear<double> grads = params;
    geomopt::distributed::GradientAverager averager(comm, grads);  // collective: every rank's tree must match
    geomopt::Adam adam({.lr = 0.05});
    auto state = adam.init(params);
    for (int step = 0; step < 200; ++step) {
      share_gradient(params, batch, comm.rank(), comm.size(), grads);  // this rank's share of the batch
      averager.average(grads);          // the whole batch's gradient, the same bits on every rank
      adam.step(params, grads, state);  // so every rank takes the same step
    }
    // snippet-end: using
    expect(same_on_every_rank(geomopt::ptree::flatten(params)),
           "every rank ends with the same parameters, bit for bit");
    expect(loss(params, batch) < 1e-3 * loss({Eigen::MatrixXd::Zero(3, 6), Eigen::VectorXd::Zero(3)}, batch),
           "the loss falls a thousandfold");
    if (comm.rank() == 0) std::printf("loss after 200 steps on %d ranks: %.3g\n", comm.size(), loss(params, batch));

    {
      // snippet-begin: options
      geomopt::distributed::GradientAverager small(comm, grads, {.bucket_bytes = 64, .buckets_in_flight = 4});
      // snippet-end: options
      Linear<double> g = grads;
      small.average(g);
      expect(geomopt::ptree::flatten(g) == geomopt::ptree::flatten(grads), "the mean of equal gradients is each");
    }

    {
      // snippet-begin: zero
      Linear<double> zparams{Eigen::MatrixXd::Zero(3, 6), Eigen::VectorXd::Zero(3)};  // the same on every rank
      Linear<double> zgrads = zparams;
      // Collective: plans which rank owns which leaf (or piece of a leaf), and makes this rank's share of the state.
      geomopt::distributed::ZeroRedundancyOptimizer zero(comm, geomopt::Adam({.lr = 0.05}), zparams);
      for (int step = 0; step < 200; ++step) {
        share_gradient(zparams, batch, comm.rank(), comm.size(), zgrads);
        zero.step(zparams, zgrads);  // mean to each owner, owners step, owners send: the same bits on every rank
      }
      // snippet-end: zero
      expect(geomopt::ptree::flatten(zparams) == geomopt::ptree::flatten(params),
             "the sharded Adam takes the averaged Adam's steps, bit for bit");
      long mine = static_cast<long>(zero.state_bytes()), total = 0;
      MPI_Allreduce(&mine, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
      expect(total == static_cast<long>(geomopt::Adam().init(zparams).nbytes()),
             "the ranks' states add up to the unsharded state");

      long pid = static_cast<long>(::getpid());  // rank 0's process names the file
      MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
      const std::string path =
          (std::filesystem::temp_directory_path() / ("geomopt_docs_distributed_" + std::to_string(pid) + ".h5"))
              .string();
      // snippet-begin: checkpoint
      geomopt::distributed::save_checkpoint(comm, path, zparams, zero);  // collective: rank 0 writes the whole state

      // Later, at any number of ranks (or in one process, by geomopt::io::load_checkpoint into adam.init(params)):
      Linear<double> resumed{Eigen::MatrixXd::Zero(3, 6), Eigen::VectorXd::Zero(3)};
      geomopt::distributed::ZeroRedundancyOptimizer again(comm, geomopt::Adam({.lr = 0.05}), resumed);
      geomopt::distributed::load_checkpoint(comm, path, resumed, again);  // each rank keeps its units' state
      // snippet-end: checkpoint
      Linear<double> rgrads = zgrads;
      share_gradient(zparams, batch, comm.rank(), comm.size(), zgrads);
      share_gradient(resumed, batch, comm.rank(), comm.size(), rgrads);
      zero.step(zparams, zgrads);
      again.step(resumed, rgrads);
      expect(geomopt::ptree::flatten(resumed) == geomopt::ptree::flatten(zparams),
             "a run resumed from the checkpoint takes the same step, bit for bit");
      comm.barrier();
      if (comm.rank() == 0) std::filesystem::remove(path);
    }

    {
      // snippet-begin: faults
      const geomopt::distributed::Communicator timed(MPI_COMM_WORLD, {.timeout = std::chrono::seconds(30)});
      geomopt::distributed::GradientAverager guarded(timed, grads);
      try {
        guarded.average(grads);
      } catch (const geomopt::distributed::Error& e) {  // TimeoutError too: a rank died or hung, or MPI failed
        std::fprintf(stderr, "rank %d: %s\n", timed.rank(), e.what());  // the operation, the ranks, the path
        MPI_Abort(MPI_COMM_WORLD, 3);  // MPI_Finalize would wait for the lost rank: end every rank now
      }
      // snippet-end: faults
      expect(timed.timeout() == std::chrono::seconds(30) && !timed.poisoned(), "a healthy call within the timeout");
    }

    Linear<double> other = grads;
    if (comm.rank() == comm.size() - 1) other.bias.resize(4);
    bool thrown = false;
    // snippet-begin: mismatch
    try {
      geomopt::distributed::GradientAverager checked(comm, other);  // on the last rank, a bias of 4 entries, not 3
    } catch (const geomopt::distributed::MismatchError& e) {        // thrown on every rank, with the same message
      std::printf("%s\n", e.what());  // "GradientAverager: rank 1's tree differs from rank 0's at bias: rank 0 has
                                      // double 3, rank 1 has double 4 (...)"; e.rank() == 1, e.path() == "bias"
      // snippet-end: mismatch
      thrown = e.path() == "bias" && e.rank() == comm.size() - 1;
    }
    expect(thrown || comm.size() == 1, "a bias of another size on one rank throws MismatchError on every rank");
  }
  int failures = expect.failures, worst = 0;
  MPI_Allreduce(&failures, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  std::printf("== distributed: %s\n", worst == 0 ? "ok" : "FAILED");
  return worst == 0 ? 0 : 1;
}
