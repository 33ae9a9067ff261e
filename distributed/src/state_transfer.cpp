#include "geomopt/distributed/detail/state_transfer.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "geomopt/distributed/communicator.hpp"
#include "mpi_call.hpp"
#include "wait.hpp"

namespace geomopt::distributed::detail {

namespace {
// A tag no other geomopt message on a Communicator uses (the engines send on duplicates of their own).
constexpr int kStateTag = 0x5eed;
constexpr std::size_t kMessageBytes = std::size_t{1} << 30;
constexpr std::size_t kErrorBytes = 1000;

Link link_of(const Communicator& comm) { return {native(comm), comm.rank(), comm.timeout(), fault(comm)}; }
}  // namespace

void send_bytes(const Communicator& comm, int to, const void* data, std::size_t bytes, const char* operation,
                const std::string& path) {
  const Link link = link_of(comm);
  const std::vector<std::string> paths{path};
  guarded(link, operation, [&] {
    const auto* p = static_cast<const char*>(data);
    do {
      const std::size_t n = std::min(bytes, kMessageBytes);
      MPI_Request request = MPI_REQUEST_NULL;
      check(MPI_Isend(p, static_cast<int>(n), MPI_BYTE, to, kStateTag, link.comm, &request), "MPI_Isend", link.comm);
      const Peer peer{to, false, 0};
      link.wait(&request, 1, &peer, {operation, "the optimizer state sent", &paths});
      p += n, bytes -= n;
    } while (bytes != 0);
  });
}

void receive_bytes(const Communicator& comm, int from, void* data, std::size_t bytes, const char* operation,
                   const std::string& path) {
  const Link link = link_of(comm);
  const std::vector<std::string> paths{path};
  guarded(link, operation, [&] {
    auto* p = static_cast<char*>(data);
    do {
      const std::size_t n = std::min(bytes, kMessageBytes);
      MPI_Request request = MPI_REQUEST_NULL;
      check(MPI_Irecv(p, static_cast<int>(n), MPI_BYTE, from, kStateTag, link.comm, &request), "MPI_Irecv", link.comm);
      const Peer peer{from, true, 0};
      MPI_Status status;
      link.wait(&request, 1, &peer, {operation, "the optimizer state received", &paths}, &status);
      int got = 0;
      check(MPI_Get_count(&status, MPI_BYTE, &got), "MPI_Get_count", link.comm);
      if (static_cast<std::size_t>(got) != n)
        throw Error(std::string(operation) + ": rank " + std::to_string(link.rank) + " expected " + std::to_string(n) +
                    " bytes of the optimizer state of " + path + " from rank " + std::to_string(from) + ", got " +
                    std::to_string(got));
      p += n, bytes -= n;
    } while (bytes != 0);
  });
}

RankError first_error(const Communicator& comm, const std::string& mine, const char* operation) {
  const Link link = link_of(comm);
  std::vector<char> all(static_cast<std::size_t>(comm.size()) * kErrorBytes);
  guarded(link, operation, [&] {
    char own[kErrorBytes] = {};
    std::memcpy(own, mine.data(), std::min(mine.size(), kErrorBytes - 1));
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Iallgather(own, static_cast<int>(kErrorBytes), MPI_CHAR, all.data(), static_cast<int>(kErrorBytes),
                         MPI_CHAR, link.comm, &request),
          "MPI_Iallgather", link.comm);
    link.wait(&request, 1, nullptr, {operation, "the agreement on every rank's outcome"});
  });
  for (int q = 0; q < comm.size(); ++q) {
    const char* text = all.data() + static_cast<std::size_t>(q) * kErrorBytes;
    if (text[0] != '\0') return {q, std::string(text, strnlen(text, kErrorBytes))};
  }
  return {};
}

}  // namespace geomopt::distributed::detail
