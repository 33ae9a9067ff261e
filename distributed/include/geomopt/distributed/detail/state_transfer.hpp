// The compiled messages of the operations that move optimizer state between ranks outside a step (gathering a
// sharded state for a checkpoint, agreeing on whether a file operation failed). Point-to-point messages on the
// caller's Communicator, with a tag of their own, and one all-gather; every MPI call stays in libgeomopt_distributed.
//
// Each call keeps the Communicator's contract (communicator.hpp): it throws Error at once on a poisoned Communicator,
// no wait outlasts its timeout (TimeoutError naming `operation`, the peer and `path`), and an Error poisons it.
#pragma once

#include <cstddef>
#include <string>

namespace geomopt::distributed {
class Communicator;
}

namespace geomopt::distributed::detail {

/// Sends `bytes` bytes at `data` to rank `to` (in messages of at most 1 GiB, so any size fits MPI's int counts);
/// `path` is the leaf they belong to.
void send_bytes(const Communicator& comm, int to, const void* data, std::size_t bytes, const char* operation,
                const std::string& path);
/// Receives exactly `bytes` bytes from rank `from` into `data`, as send_bytes sent them: Error when the sender sent
/// another size.
void receive_bytes(const Communicator& comm, int from, void* data, std::size_t bytes, const char* operation,
                   const std::string& path);

/// Collective: every rank passes its error message, empty when it has none. Returns the lowest rank with one, and
/// that message (cut to 1000 bytes), or {-1, ""} when no rank has one.
struct RankError {
  int rank = -1;
  std::string message;
};
RankError first_error(const Communicator& comm, const std::string& mine, const char* operation);

}  // namespace geomopt::distributed::detail
