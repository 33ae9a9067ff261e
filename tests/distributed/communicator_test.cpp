// Communicator: rank and size are MPI_COMM_WORLD's, the duplicate is congruent but distinct and freed with the
// Communicator (the caller's communicator stays usable), a barrier returns on every rank, and bad input throws.
#include "geomopt/distributed/communicator.hpp"

#include <doctest/doctest.h>
#include <mpi.h>

#include <chrono>
#include <stdexcept>
#include <thread>
#include <utility>

#include "world.hpp"

namespace gd = geomopt::distributed;

using dtest::world_rank;
using dtest::world_size;

namespace {

// Seconds on CLOCK_MONOTONIC (std::chrono::steady_clock on Linux), one clock for every process of the machine.
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

TEST_CASE("rank and size are the given communicator's; the duplicate is congruent, not the same") {
  const gd::Communicator comm(MPI_COMM_WORLD);
  CHECK(comm.rank() == world_rank());
  CHECK(comm.size() == world_size());
  int relation = MPI_UNEQUAL;
  MPI_Comm_compare(gd::detail::native(comm), MPI_COMM_WORLD, &relation);
  CHECK(relation == MPI_CONGRUENT);
}

TEST_CASE("a split communicator gives its own ranks") {
  MPI_Comm half = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() % 2, world_rank(), &half);
  {
    const gd::Communicator comm(half);
    CHECK(comm.rank() == world_rank() / 2);
    CHECK(comm.size() == (world_size() + 1 - world_rank() % 2) / 2);
    comm.barrier();
  }
  // Destroying the Communicator freed its duplicate only: the caller's communicator still works.
  int sum = 0, one = 1;
  CHECK(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, half) == MPI_SUCCESS);
  CHECK(sum == (world_size() + 1 - world_rank() % 2) / 2);
  MPI_Comm_free(&half);
}

TEST_CASE("a moved Communicator keeps the duplicate; the barrier holds every rank") {
  gd::Communicator a(MPI_COMM_WORLD);
  gd::Communicator b(std::move(a));
  CHECK(b.size() == world_size());
  gd::Communicator c(MPI_COMM_WORLD);
  c = std::move(b);
  CHECK(c.rank() == world_rank());
  // Rank 0 reaches the barrier 200 ms after the others: no rank may leave it before rank 0 arrived. The check compares
  // instants of the one monotonic clock every process of this machine shares, so it holds however the ranks are
  // scheduled (a margin on elapsed times would not: an oversubscribed rank can leave the first barrier late).
  c.barrier();
  if (world_rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double arrived = now_seconds();
  c.barrier();
  const double left = now_seconds();
  double rank0_arrived = arrived;
  MPI_Bcast(&rank0_arrived, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  CHECK(left >= rank0_arrived);
}

TEST_CASE("MPI_COMM_NULL is refused") { CHECK_THROWS_AS(gd::Communicator(MPI_COMM_NULL), std::invalid_argument); }
