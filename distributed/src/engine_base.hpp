// What the compiled engines (averaging_engine.cpp, shard_exchange.cpp) share: their own duplicate of a
// Communicator's MPI communicator, so that no two operations ever match each other's messages; the flat scalar's size
// and MPI type; and the persistent requests they make on it. An engine's State derives from it and lists its request
// vectors in `requests` and frees them in its destructor (free_requests); the base then frees the duplicate (neither
// once MPI is finalized).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <vector>

#include "geomopt/distributed/communicator.hpp"
#include "geomopt/distributed/detail/averaging_engine.hpp"
#include "mpi_call.hpp"

namespace geomopt::distributed::detail {

struct EngineBase {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int P = 1;
  FlatScalar scalar = FlatScalar::float64;
  std::size_t elem = 8;
  MPI_Datatype type = MPI_DOUBLE;
  std::vector<std::vector<MPI_Request>*> requests;

  EngineBase() = default;
  EngineBase(const EngineBase&) = delete;
  EngineBase& operator=(const EngineBase&) = delete;

  /// Collective over comm: duplicates it and learns the rank, the size and the flat scalar's type.
  void open(const Communicator& parent_comm, FlatScalar flat_scalar) {
    const MPI_Comm parent = native(parent_comm);
    check(MPI_Comm_dup(parent, &comm), "MPI_Comm_dup", parent);
    check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank", comm);
    check(MPI_Comm_size(comm, &P), "MPI_Comm_size", comm);
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
