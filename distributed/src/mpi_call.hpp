// check(rc, call, comm): turns the return code of an MPI call on a communicator with MPI_ERRORS_RETURN into
// geomopt::distributed::Error, naming the call, this rank and MPI's message.
#pragma once

#include <mpi.h>

#include <string>

#include "geomopt/distributed/error.hpp"

namespace geomopt::distributed::detail {

inline void check(int rc, const char* call, MPI_Comm comm) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) length = 0;
  int rank = -1;
  if (comm != MPI_COMM_NULL) MPI_Comm_rank(comm, &rank);
  throw Error(std::string(call) + " failed on rank " + std::to_string(rank) + ": " + std::string(text, length));
}

}  // namespace geomopt::distributed::detail
