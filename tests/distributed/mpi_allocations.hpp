// Allocations inside MPI calls counted apart: the MPI functions libgeomopt_distributed calls in an operation
// (GradientAverager::average, ZeroRedundancyOptimizer::step), defined here to hold an alloc_count::Pause around
// MPI's own (PMPI_*) implementation. Open MPI's MPI_* are weak aliases, so the executable's definitions are the ones
// the library binds to, as in traffic_counter.cpp.
//
// Why: Open MPI allocates inside these calls now and then, at no fixed step, and more often on a loaded machine (traced
// with glibc's backtrace on this machine: its shared-memory transport growing its pool of send fragments,
// opal_free_list_grow_st under mca_btl_vader_send in MPI_Startall, and its matching engine buffering a message that
// arrived before its receive was started, mca_allocator_bucket_alloc under mca_pml_ob1_recv_frag_callback_match in
// MPI_Testall). A test of geomopt's promise, no allocation after the first call, counts geomopt's code (Window::count)
// and reports MPI's (Window::paused_count).
//
// Include it in exactly one file of a test executable, after count_allocations.hpp.
#pragma once

#include <mpi.h>

#include "count_allocations.hpp"

extern "C" {
int MPI_Startall(int n, MPI_Request* requests) {
  const alloc_count::Pause pause;
  return PMPI_Startall(n, requests);
}
int MPI_Testall(int n, MPI_Request* requests, int* done, MPI_Status* statuses) {
  const alloc_count::Pause pause;
  return PMPI_Testall(n, requests, done, statuses);
}
int MPI_Request_get_status(MPI_Request request, int* done, MPI_Status* status) {
  const alloc_count::Pause pause;
  return PMPI_Request_get_status(request, done, status);
}
int MPI_Isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* r) {
  const alloc_count::Pause pause;
  return PMPI_Isend(buf, count, type, dest, tag, comm, r);
}
int MPI_Irecv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Request* r) {
  const alloc_count::Pause pause;
  return PMPI_Irecv(buf, count, type, source, tag, comm, r);
}
}
