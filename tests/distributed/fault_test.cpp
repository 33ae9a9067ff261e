// Faults: the Communicator's timeout (options, environment, default), and a rank that never enters a call. Its
// GradientAverager::average and ZeroRedundancyOptimizer::step end on every other rank, and the gather of a sharded
// state (a checkpoint's) on the root, with TimeoutError naming that rank, the first path waited for and the timeout,
// within the timeout and a generous slack; the averager, the optimizer and the communicator are then poisoned (a
// later call throws Error at once). At P = 1 only the options are checked. The poisoned objects are kept until exit
// (after MPI_Finalize, when they free nothing), so that no later communicator reuses their context id while the skipped
// rank's unmatched messages may still arrive on it.
#include <doctest/doctest.h>
#include <mpi.h>

#include <Eigen/Core>
#include <chrono>
#include <cstdlib>
#include <geomopt/distributed.hpp>
#include <geomopt/distributed/zero_redundancy_optimizer.hpp>
#include <geomopt/optimizers.hpp>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "world.hpp"

namespace gd = geomopt::distributed;
using dtest::world_rank;
using dtest::world_size;
using namespace std::chrono_literals;

namespace {

struct Linear {
  Eigen::MatrixXd weight;
  Eigen::VectorXd bias;
  GEOMOPT_PTREE(weight, bias)
};

struct Long {
  Eigen::VectorXd v;
  GEOMOPT_PTREE(v)
};

Linear make_linear() { return {Eigen::MatrixXd::Constant(4, 3, 0.5), Eigen::VectorXd::Constant(3, 0.25)}; }

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The poisoned objects, destroyed after MPI_Finalize (see the file's first comment).
std::vector<std::shared_ptr<void>>& kept() {
  static std::vector<std::shared_ptr<void>> objects;
  return objects;
}

constexpr auto kTimeout = 1000ms;

// Checks a TimeoutError of a wait for the last rank, thrown within the timeout and a slack of a loaded machine.
void check_timeout(const gd::TimeoutError& e, double elapsed, const char* operation) {
  const int last = world_size() - 1;
  const std::string what = e.what();
  INFO(what);
  CHECK(what.find(operation) != std::string::npos);
  CHECK(what.find("rank " + std::to_string(last)) != std::string::npos);
  CHECK(what.find("1 s") != std::string::npos);
  CHECK(std::find(e.ranks().begin(), e.ranks().end(), last) != e.ranks().end());
  CHECK(!e.path().empty());
  CHECK(what.find(e.path()) != std::string::npos);
  CHECK(elapsed >= 0.9);
  CHECK(elapsed < 20.0);
}

}  // namespace

TEST_CASE("the timeout: the options', else $GEOMOPT_DISTRIBUTED_TIMEOUT seconds, else 10 minutes") {
  ::unsetenv(gd::kTimeoutVariable);
  CHECK(gd::Communicator(MPI_COMM_WORLD).timeout() == gd::kDefaultTimeout);
  CHECK(gd::kDefaultTimeout == std::chrono::minutes(10));
  CHECK(gd::Communicator(MPI_COMM_WORLD, {.timeout = 1500ms}).timeout() == 1500ms);
  ::setenv(gd::kTimeoutVariable, "2.5", 1);
  CHECK(gd::Communicator(MPI_COMM_WORLD).timeout() == 2500ms);
  CHECK(gd::Communicator(MPI_COMM_WORLD, {.timeout = 3s}).timeout() == 3s);
  ::setenv(gd::kTimeoutVariable, "soon", 1);
  CHECK_THROWS_AS(gd::Communicator(MPI_COMM_WORLD), std::invalid_argument);
  ::setenv(gd::kTimeoutVariable, "-1", 1);
  CHECK_THROWS_AS(gd::Communicator(MPI_COMM_WORLD), std::invalid_argument);
  ::unsetenv(gd::kTimeoutVariable);
  CHECK_THROWS_AS(gd::Communicator(MPI_COMM_WORLD, {.timeout = 0ms}), std::invalid_argument);
  // A healthy barrier and average within the timeout.
  const gd::Communicator comm(MPI_COMM_WORLD, {.timeout = kTimeout});
  comm.barrier();
  Linear g = make_linear();
  gd::average(comm, g);
  CHECK(g.weight(0, 0) == 0.5);
  CHECK(!comm.poisoned());
}

TEST_CASE("a rank that never enters average: TimeoutError naming it and the path on the others, then poisoned") {
  if (world_size() < 2) return;
  const int last = world_size() - 1;
  auto comm = std::make_shared<gd::Communicator>(MPI_COMM_WORLD, gd::CommunicatorOptions{.timeout = kTimeout});
  Linear g = make_linear();
  // Buckets of 40 bytes: several per call, so that the first wait is for the first bucket.
  auto averager = std::make_shared<gd::GradientAverager<Linear>>(*comm, g, gd::AverageOptions{.bucket_bytes = 40});
  kept().push_back(comm);
  kept().push_back(averager);
  averager->average(g);  // a healthy call first
  if (world_rank() != last) {
    const auto start = std::chrono::steady_clock::now();
    bool timed_out = false;
    try {
      averager->average(g);
    } catch (const gd::TimeoutError& e) {
      timed_out = true;
      check_timeout(e, seconds_since(start), "GradientAverager::average");
      CHECK(e.path() == "weight");
    }
    CHECK(timed_out);
    CHECK(comm->poisoned());
    // Poisoned: a later call, and the communicator's barrier, throw at once without a message.
    const auto again = std::chrono::steady_clock::now();
    CHECK_THROWS_AS(averager->average(g), gd::Error);
    CHECK_THROWS_AS(comm->barrier(), gd::Error);
    CHECK_THROWS_WITH_AS(gd::GradientAverager<Linear>(*comm, g), doctest::Contains("failed before"), gd::Error);
    CHECK(seconds_since(again) < 0.5);
  } else {
    std::this_thread::sleep_for(kTimeout);  // away, without a message, while the others wait
    CHECK(!comm->poisoned());
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("a rank that never enters a ZeroRedundancyOptimizer step: TimeoutError naming it and a unit's path") {
  if (world_size() < 2) return;
  const int last = world_size() - 1;
  auto comm = std::make_shared<gd::Communicator>(MPI_COMM_WORLD, gd::CommunicatorOptions{.timeout = kTimeout});
  Linear params = make_linear(), grads = make_linear();
  auto zero =
      std::make_shared<gd::ZeroRedundancyOptimizer<geomopt::Adam, Linear>>(*comm, geomopt::Adam({.lr = 0.1}), params);
  kept().push_back(comm);
  kept().push_back(zero);
  zero->step(params, grads);
  if (world_rank() != last) {
    const auto start = std::chrono::steady_clock::now();
    bool timed_out = false;
    try {
      zero->step(params, grads);
    } catch (const gd::TimeoutError& e) {
      timed_out = true;
      check_timeout(e, seconds_since(start), "ZeroRedundancyOptimizer::step");
    }
    CHECK(timed_out);
    CHECK_THROWS_WITH_AS(zero->step(params, grads), doctest::Contains("failed before"), gd::Error);
  } else {
    std::this_thread::sleep_for(kTimeout);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("a rank that never enters gather_state (a sharded checkpoint's): TimeoutError naming it on the root") {
  if (world_size() < 2) return;
  const int last = world_size() - 1;
  // One leaf in eight pieces of 64 entries, so that every rank owns some and the root waits for the last rank's.
  auto comm = std::make_shared<gd::Communicator>(MPI_COMM_WORLD, gd::CommunicatorOptions{.timeout = kTimeout});
  Long params{Eigen::VectorXd::LinSpaced(512, -1, 1)}, grads = params;
  auto zero = std::make_shared<gd::ZeroRedundancyOptimizer<geomopt::Adam, Long>>(
      *comm, geomopt::Adam({.lr = 0.1}), params, geomopt::LeafRule{}, gd::OwnershipOptions{.max_piece_entries = 64});
  kept().push_back(comm);
  kept().push_back(zero);
  zero->step(params, grads);
  if (world_rank() == 0) {
    const auto start = std::chrono::steady_clock::now();
    bool timed_out = false;
    try {
      (void)zero->gather_state(*comm, params, 0);
    } catch (const gd::TimeoutError& e) {
      timed_out = true;
      check_timeout(e, seconds_since(start), "ZeroRedundancyOptimizer::gather_state");
      CHECK(e.path() == "v");
    }
    CHECK(timed_out);
    CHECK(comm->poisoned());
  } else if (world_rank() != last) {
    CHECK(!zero->gather_state(*comm, params, 0).has_value());  // sends its pieces to the root and returns
  } else {
    std::this_thread::sleep_for(kTimeout);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}
