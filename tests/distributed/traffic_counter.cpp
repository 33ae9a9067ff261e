// The counter of traffic_counter.hpp. Open MPI's MPI_* symbols are weak aliases of its PMPI_* ones, so these
// definitions, linked into the executable, are the ones every caller in the process binds to, the shared library
// libgeomopt_distributed included (the executable exports them: they are referenced by a library it links).
#include "traffic_counter.hpp"

#include <mpi.h>

#include <unordered_map>

namespace {

traffic::Counts counts;
std::unordered_map<MPI_Request, std::int64_t> persistent_sends;  // bytes per persistent send request

std::int64_t bytes_of(int count, MPI_Datatype type) {
  int size = 0;
  PMPI_Type_size(type, &size);
  return static_cast<std::int64_t>(count) * size;
}

void sent(std::int64_t bytes) {
  counts.bytes += bytes;
  ++counts.messages;
}

void started(MPI_Request r) {
  const auto it = persistent_sends.find(r);
  if (it != persistent_sends.end()) sent(it->second);
}

void collective(std::int64_t bytes) {
  ++counts.collective_calls;
  counts.collective_bytes += bytes;
}

}  // namespace

traffic::Counts traffic::now() { return counts; }

extern "C" {

int MPI_Send_init(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* r) {
  const int rc = PMPI_Send_init(buf, count, type, dest, tag, comm, r);
  if (rc == MPI_SUCCESS) persistent_sends[*r] = bytes_of(count, type);
  return rc;
}

int MPI_Request_free(MPI_Request* r) {
  persistent_sends.erase(*r);
  return PMPI_Request_free(r);
}

int MPI_Start(MPI_Request* r) {
  started(*r);
  return PMPI_Start(r);
}

int MPI_Startall(int n, MPI_Request* rs) {
  for (int i = 0; i < n; ++i) started(rs[i]);
  return PMPI_Startall(n, rs);
}

int MPI_Send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  sent(bytes_of(count, type));
  return PMPI_Send(buf, count, type, dest, tag, comm);
}

int MPI_Isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* r) {
  sent(bytes_of(count, type));
  return PMPI_Isend(buf, count, type, dest, tag, comm, r);
}

int MPI_Allgather(const void* send, int send_count, MPI_Datatype send_type, void* recv, int recv_count,
                  MPI_Datatype recv_type, MPI_Comm comm) {
  collective(send == MPI_IN_PLACE ? bytes_of(recv_count, recv_type) : bytes_of(send_count, send_type));
  return PMPI_Allgather(send, send_count, send_type, recv, recv_count, recv_type, comm);
}

int MPI_Bcast(void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  int rank = 0;
  PMPI_Comm_rank(comm, &rank);
  collective(rank == root ? bytes_of(count, type) : 0);
  return PMPI_Bcast(buf, count, type, root, comm);
}

int MPI_Allreduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  collective(bytes_of(count, type));
  return PMPI_Allreduce(send, recv, count, type, op, comm);
}

int MPI_Gather(const void* send, int send_count, MPI_Datatype send_type, void* recv, int recv_count,
               MPI_Datatype recv_type, int root, MPI_Comm comm) {
  collective(send == MPI_IN_PLACE ? 0 : bytes_of(send_count, send_type));
  return PMPI_Gather(send, send_count, send_type, recv, recv_count, recv_type, root, comm);
}

int MPI_Barrier(MPI_Comm comm) {
  collective(0);
  return PMPI_Barrier(comm);
}

}  // extern "C"
