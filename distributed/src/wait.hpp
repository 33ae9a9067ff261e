// Waiting for MPI requests within a Communicator's timeout (communicator.hpp's contract), and the poisoning that
// follows a failure.
//
// A wait polls (MPI_Testall) against a deadline of the monotonic clock (std::chrono::steady_clock): it spins for the
// first kSpin, where a step's messages normally complete, then yields the core for each poll until kYield, then sleeps
// between polls, kSleep at a time, so that a rank waiting for a slow or dead peer does not hold a core. Open MPI's
// shared-memory transport progresses only inside MPI calls, so the polls never stop; the sleep bounds the latency it
// adds to a wait that already lasted kYield. On expiry it throws TimeoutError naming the operation, the ranks of the
// requests still pending (MPI_Request_get_status, which leaves them as they are) and the first path waited for; an
// MPI error becomes Error naming the same. Either first poisons the Link's fault, which every Link of the same
// Communicator shares, so that later operations throw at once (ensure_healthy) instead of mixing two steps' messages.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "geomopt/distributed/error.hpp"

namespace geomopt::distributed::detail {

inline constexpr std::chrono::microseconds kSpin{50};
inline constexpr std::chrono::milliseconds kYield{100};
inline constexpr std::chrono::microseconds kSleep{500};

/// The other end of one request: its rank, whether this rank receives, and the leaf of the first path it carries
/// (-1: none).
struct Peer {
  int rank = -1;
  bool receive = true;
  std::int64_t leaf = -1;
};

inline constexpr std::size_t kNoIndex = static_cast<std::size_t>(-1);

/// What a wait is for, for the messages of its errors: the operation, the part of it ("the reduce-scatter of bucket",
/// with index 3), and the leaf paths Peer::leaf indexes.
struct WaitFor {
  const char* operation;
  const char* part;
  const std::vector<std::string>* paths = nullptr;
  std::int64_t leaf = -1;   ///< the first path's leaf when the requests have no Peer (a collective)
  std::int64_t index = -1;  ///< appended to part when >= 0
};

/// A communicator with its timeout and the fault it shares with its Communicator.
struct Link {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  std::chrono::milliseconds timeout{0};
  std::shared_ptr<std::string> fault;

  /// Throws Error when the communicator is poisoned.
  void ensure_healthy(const char* operation) const;
  /// Records `message` as the fault, unless one is recorded already.
  void poison(const std::string& message) const noexcept;
  /// Waits for the n requests (peers: n entries, or nullptr for a collective), throwing TimeoutError or Error.
  void wait(MPI_Request* requests, int n, const Peer* peers, const WaitFor& what) const;
};

/// Runs body(); an Error it throws (TimeoutError included) poisons the link first. MismatchError does not.
template <class F>
void guarded(const Link& link, const char* operation, F&& body) {
  link.ensure_healthy(operation);
  try {
    body();
  } catch (const Error& e) {
    link.poison(e.what());
    throw;
  }
}

}  // namespace geomopt::distributed::detail
