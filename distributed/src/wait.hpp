// Waiting for MPI requests within a Communicator's timeout (communicator.hpp's contract), and the poisoning that
// follows a failure.
//
// A wait polls (MPI_Testall) against a deadline of the monotonic clock (std::chrono::steady_clock): it spins for the
// first kSpin, where a small tree's messages complete, then yields the core for each poll until kYield, longer than a
// bucket of 25 MiB takes on a loaded machine, then sleeps between polls, kSleep at a time, so that a rank waiting for
// a slow or dead peer does not hold a core. Open MPI's shared-memory transport progresses only inside MPI calls, so
// the polls never stop; the sleep bounds the latency it adds to a wait that already lasted kYield. Measured on the
// shared two-core machine (docs/distributed.md, "Faults"): yielding from 50 us on makes the 0.8 MB tree's average
// 25 % slower, and sleeping from 100 ms on slows the 80.6 MB tree's.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "geomopt/distributed/error.hpp"

namespace geomopt::distributed::detail {

inline constexpr std::chrono::microseconds kSpin{1000};
inline constexpr std::chrono::milliseconds kYield{1000};
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
  /// Waits for the n requests (peers: n entries, or nullptr for a collective), throwing TimeoutError or Error;
  /// statuses, when given, receives the n requests' statuses.
  void wait(MPI_Request* requests, int n, const Peer* peers, const WaitFor& what,
            MPI_Status* statuses = MPI_STATUSES_IGNORE) const;
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
