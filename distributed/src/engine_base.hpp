// What the compiled engines (averaging_engine.cpp, shard_exchange.cpp) share: their own duplicate of a
// Communicator's MPI communicator, so that no two operations ever match each other's messages; the flat scalar's size
// and MPI type; and the persistent requests they make on it. An engine's State derives from it and lists its request
// vectors in `requests` and frees them in its destructor (free_requests); the base then frees the duplicate (neither
// once MPI is finalized). `link` carries the duplicate with the Communicator's timeout and shared fault (wait.hpp).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <vector>

#include "geomopt/distributed/communicator.hpp"
#include "geomopt/distributed/detail/averaging_engine.hpp"
#include "mpi_call.hpp"
#include "wait.hpp"

namespace geomopt::distributed::detail {

struct EngineBase {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int P = 1;
  FlatScalar scalar = FlatScalar::float64;
  std::size_t elem = 8;
  MPI_Datatype type = MPI_DOUBLE;
  std::vector<std::vector<MPI_Request>*> requests;
  Link link;

  EngineBase() = default;
  EngineBase(const EngineBase&) = delete;
  EngineBase& operator=(const EngineBase&) = delete;

  /// Collective over comm: duplicates it (within its timeout; an error poisons it) and learns the rank, the size and
  /// the flat scalar's type. The duplicate inherits the parent's MPI_ERRORS_RETURN.
  void open(const Communicator& parent_comm, FlatScalar flat_scalar, const char* operation) {
    const MPI_Comm parent = native(parent_comm);
    const Link parent_link{parent, parent_comm.rank(), parent_comm.timeout(), fault(parent_comm)};
    guarded(parent_link, operation, [&] {
      MPI_Request request = MPI_REQUEST_NULL;
      check(MPI_Comm_idup(parent, &comm, &request), "MPI_Comm_idup", parent);
      try {
        parent_link.wait(&request, 1, nullptr, {operation, "duplicating the communicator"});
      } catch (...) {
        comm = MPI_COMM_NULL;  // not ours until the duplication completes
        throw;
      }
    });
    check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank", comm);
    check(MPI_Comm_size(comm, &P), "MPI_Comm_size", comm);
    link = {comm, rank, parent_comm.timeout(), parent_link.fault};
    scalar = flat_scalar;
    elem = scalar == FlatScalar::float32 ? sizeof(float) : sizeof(double);
    type = scalar == FlatScalar::float32 ? MPI_FLOAT : MPI_DOUBLE;
  }

  /// Frees the requests; an engine's State calls it in its destructor, while its request vectors still exist.
  void free_requests() noexcept {
    if (finalized()) return;
    for (std::vector<MPI_Request>* list : requests)
      for (MPI_Request& r : *list)
        if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  }

  ~EngineBase() {
    if (!finalized() && comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }

 private:
  static bool finalized() noexcept {
    int done = 0;
    MPI_Finalized(&done);
    return done != 0;
  }
};

}  // namespace geomopt::distributed::detail
