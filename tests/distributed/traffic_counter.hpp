// What this process has sent through MPI since it started, counted by traffic_counter.cpp at MPI's profiling
// interface: a program that links traffic_counter.cpp has its MPI_* calls (the ones geomopt's engines make, in
// libgeomopt_distributed too) counted, then forwarded to PMPI_*.
//
// Point-to-point: a message and its bytes at each MPI_Send and MPI_Isend, and at each MPI_Start or MPI_Startall of a
// persistent send request (its bytes remembered at MPI_Send_init, forgotten at MPI_Request_free). Collectives: a call
// and the bytes this rank contributes (MPI_Allgather's send buffer, MPI_Bcast's buffer at the root), since the
// messages of a collective are Open MPI's to choose. Receives are not counted. Not thread-safe: one thread calls MPI.
#pragma once

#include <cstdint>

namespace traffic {

struct Counts {
  std::int64_t bytes = 0;             ///< point-to-point payload sent
  std::int64_t messages = 0;          ///< point-to-point messages sent
  std::int64_t collective_calls = 0;  ///< MPI_Allgather, MPI_Bcast, MPI_Barrier, MPI_Allreduce, MPI_Gather calls
  std::int64_t collective_bytes = 0;  ///< the bytes this rank contributed to them

  Counts operator-(const Counts& o) const {
    return {bytes - o.bytes, messages - o.messages, collective_calls - o.collective_calls,
            collective_bytes - o.collective_bytes};
  }
};

/// The counts since the process started.
Counts now();

}  // namespace traffic
