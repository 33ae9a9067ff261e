#include "geomopt/distributed/detail/state_transfer.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "geomopt/distributed/communicator.hpp"
#include "mpi_call.hpp"

namespace geomopt::distributed::detail {

namespace {
// A tag no other geomopt message on a Communicator uses (the engines send on duplicates of their own).
constexpr int kStateTag = 0x5eed;
constexpr std::size_t kMessageBytes = std::size_t{1} << 30;
constexpr std::size_t kErrorBytes = 1000;
}  // namespace

void send_bytes(const Communicator& comm, int to, const void* data, std::size_t bytes) {
  const MPI_Comm c = native(comm);
  const auto* p = static_cast<const char*>(data);
  do {
    const std::size_t n = std::min(bytes, kMessageBytes);
    check(MPI_Send(p, static_cast<int>(n), MPI_BYTE, to, kStateTag, c), "MPI_Send", c);
    p += n, bytes -= n;
  } while (bytes != 0);
}

void receive_bytes(const Communicator& comm, int from, void* data, std::size_t bytes) {
  const MPI_Comm c = native(comm);
  auto* p = static_cast<char*>(data);
  do {
    const std::size_t n = std::min(bytes, kMessageBytes);
    MPI_Status status;
    check(MPI_Recv(p, static_cast<int>(n), MPI_BYTE, from, kStateTag, c, &status), "MPI_Recv", c);
    int got = 0;
    check(MPI_Get_count(&status, MPI_BYTE, &got), "MPI_Get_count", c);
    if (static_cast<std::size_t>(got) != n)
      throw Error("geomopt::distributed: rank " + std::to_string(comm.rank()) + " expected " + std::to_string(n) +
                  " bytes of optimizer state from rank " + std::to_string(from) + ", got " + std::to_string(got));
    p += n, bytes -= n;
  } while (bytes != 0);
}

RankError first_error(const Communicator& comm, const std::string& mine) {
  const MPI_Comm c = native(comm);
  std::vector<char> all(static_cast<std::size_t>(comm.size()) * kErrorBytes);
  char own[kErrorBytes] = {};
  std::memcpy(own, mine.data(), std::min(mine.size(), kErrorBytes - 1));
  check(MPI_Allgather(own, static_cast<int>(kErrorBytes), MPI_CHAR, all.data(), static_cast<int>(kErrorBytes), MPI_CHAR,
                      c),
        "MPI_Allgather", c);
  for (int q = 0; q < comm.size(); ++q) {
    const char* text = all.data() + static_cast<std::size_t>(q) * kErrorBytes;
    if (text[0] != '\0') return {q, std::string(text, strnlen(text, kErrorBytes))};
  }
  return {};
}

}  // namespace geomopt::distributed::detail
