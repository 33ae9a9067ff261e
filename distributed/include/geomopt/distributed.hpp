// geomopt::distributed: parameter trees over MPI processes (docs/distributed.md).
//
//   Communicator        the ranks, from an MPI_Comm (duplicated); rank(), size(), barrier()
//   GradientAverager    the mean of a gradient tree over the ranks, bucketed, the same bits on every rank
//   AverageOptions      bucket size and buckets in flight
//   Error, MismatchError  a failed MPI call; trees that differ between ranks
//   OwnershipPlan       which rank steps which leaf or piece of a leaf (for sharded optimizer state)
// ZeroRedundancyOptimizer (geomopt/distributed/zero_redundancy_optimizer.hpp) and its checkpoints
// (geomopt/distributed/checkpoint.hpp) are not included here: they include the optimizers' (and io's) headers, and
// their programs link geomopt::optimizers (and geomopt::io).
// Every MPI call is in the compiled library libgeomopt_distributed; <mpi.h> is included by communicator.hpp only.
#pragma once

#include "geomopt/distributed/average.hpp"
#include "geomopt/distributed/communicator.hpp"
#include "geomopt/distributed/error.hpp"
#include "geomopt/distributed/options.hpp"
#include "geomopt/distributed/ownership.hpp"
