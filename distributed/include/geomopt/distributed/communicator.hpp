// geomopt::distributed::Communicator: the group of processes geomopt's distributed operations run over, built from
// an MPI communicator.
//
// This is the one header of geomopt that includes <mpi.h>, because the constructor takes an MPI_Comm and MPI_Comm has
// no portable forward declaration (a pointer to an opaque struct in Open MPI, an int in MPICH); no other MPI type
// appears in geomopt's API, and every MPI call is compiled in libgeomopt_distributed.
//
// Contract:
//   - Communicator(comm) duplicates comm (MPI_Comm_dup, collective over comm), so geomopt's messages never match a
//     receive of the caller's, whatever tags either side uses; the caller keeps comm and frees it when it likes.
//     The destructor frees the duplicate and only it (MPI_Comm_free; nothing when MPI is already finalized).
//   - rank() is in [0, size()) and both are those of comm; they never change.
//   - Errors of MPI calls on the duplicate are returned, not fatal (MPI_ERRORS_RETURN), and geomopt turns them into
//     geomopt::distributed::Error naming the call and the ranks waited for; a peer that dies is fatal to the job
//     under Open MPI's default launcher regardless (docs/distributed.md, "Faults").
//   - No wait of an operation built on this Communicator (its barrier, the construction and calls of
//     GradientAverager and ZeroRedundancyOptimizer) lasts longer than timeout(): each polls its messages against a
//     deadline of the monotonic clock and throws TimeoutError, naming the operation, the ranks whose messages did not
//     arrive, the first path waited for and the timeout.
//   - After an Error (TimeoutError included) of any operation on it, the Communicator is poisoned: every later
//     operation on it, or on an object built from it, throws Error at once, naming the first failure, instead of
//     mixing the messages of two steps. MismatchError does not poison.
//   - Every operation taking a Communicator is collective: every rank calls it, in the same order. One operation at a
//     time per Communicator (MPI is initialised by the caller, at any thread level).
// A moved-from Communicator may only be assigned to or destroyed.
#pragma once

#include <mpi.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace geomopt::distributed {

class Communicator;

namespace detail {
/// The duplicate itself, for the compiled library's own calls.
MPI_Comm native(const Communicator& comm) noexcept;
/// The first failure of any operation on the Communicator (empty while there is none), shared with the objects
/// built from it.
std::shared_ptr<std::string> fault(const Communicator& comm) noexcept;
}  // namespace detail

/// 10 minutes, NCCL's watchdog: longer than any one step or checkpoint write of a rank that the others wait for at
/// their next collective (the 369-leaf tree averages in under a second), short enough that a job with a hung or dead
/// rank gives its machines back within minutes. PyTorch's process groups wait 30 minutes, sized for slow data loading
/// on one rank; a program that needs that sets it.
inline constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::minutes(10);

/// The environment variable that, when set to a positive number of seconds, replaces kDefaultTimeout for every
/// Communicator built without an explicit timeout (read at construction).
inline constexpr const char* kTimeoutVariable = "GEOMOPT_DISTRIBUTED_TIMEOUT";

struct CommunicatorOptions {
  /// The longest any one wait of an operation may last; unset: $GEOMOPT_DISTRIBUTED_TIMEOUT seconds, else
  /// kDefaultTimeout. Every rank should pass the same (not checked: a rank's own waits end at its own deadline).
  std::optional<std::chrono::milliseconds> timeout;

  /// True when the timeout is unset or positive; otherwise false with a message.
  bool IsValid(std::string* error) const {
    if (!timeout || timeout->count() > 0) return true;
    if (error != nullptr) *error = "timeout must be positive, got " + std::to_string(timeout->count()) + " ms";
    return false;
  }
};

class Communicator {
 public:
  /// Duplicates `comm`; collective over it. Throws std::logic_error when MPI is not initialised or already finalised,
  /// std::invalid_argument for MPI_COMM_NULL, invalid options or an unreadable $GEOMOPT_DISTRIBUTED_TIMEOUT, Error
  /// when the duplication fails, TimeoutError when it does not end within the timeout.
  explicit Communicator(MPI_Comm comm, CommunicatorOptions options = {});
  ~Communicator();
  Communicator(Communicator&& other) noexcept;
  Communicator& operator=(Communicator&& other) noexcept;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  /// The longest any one wait lasts (the options', the environment's or the default).
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  /// Whether an operation on it failed (Error or TimeoutError); then every later operation throws at once.
  bool poisoned() const noexcept { return fault_ && !fault_->empty(); }
  /// Returns once every rank has called it; throws TimeoutError when not every rank did within the timeout.
  void barrier() const;

 private:
  friend MPI_Comm detail::native(const Communicator& comm) noexcept;
  friend std::shared_ptr<std::string> detail::fault(const Communicator& comm) noexcept;
  void release() noexcept;

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 0;
  std::chrono::milliseconds timeout_ = kDefaultTimeout;
  std::shared_ptr<std::string> fault_;
};

}  // namespace geomopt::distributed
