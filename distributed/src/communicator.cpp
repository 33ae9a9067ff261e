#include "geomopt/distributed/communicator.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <utility>

#include "mpi_call.hpp"
#include "wait.hpp"

namespace geomopt::distributed {

namespace detail {
MPI_Comm native(const Communicator& comm) noexcept { return comm.comm_; }
std::shared_ptr<std::string> fault(const Communicator& comm) noexcept { return comm.fault_; }
}  // namespace detail

namespace {

// The options' timeout, else the environment's, else the default.
std::chrono::milliseconds resolve_timeout(const CommunicatorOptions& options) {
  std::string invalid;
  if (!options.IsValid(&invalid)) throw std::invalid_argument("geomopt::distributed::Communicator: " + invalid);
  if (options.timeout) return *options.timeout;
  const char* text = std::getenv(kTimeoutVariable);
  if (text == nullptr || *text == '\0') return kDefaultTimeout;
  char* end = nullptr;
  errno = 0;
  const double s = std::strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !std::isfinite(s) || s <= 0 || s > 1e12)
    throw std::invalid_argument(std::string("geomopt::distributed::Communicator: ") + kTimeoutVariable + "=\"" + text +
                                "\" is not a positive number of seconds");
  return std::chrono::milliseconds(std::max<long long>(1, std::llround(s * 1000)));
}

}  // namespace

Communicator::Communicator(MPI_Comm comm, CommunicatorOptions options) : comm_(MPI_COMM_NULL) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized)
    throw std::logic_error(
        "geomopt::distributed::Communicator: MPI is not initialised (call MPI_Init first) or is "
        "already finalised");
  if (comm == MPI_COMM_NULL) throw std::invalid_argument("geomopt::distributed::Communicator: MPI_COMM_NULL");
  timeout_ = resolve_timeout(options);
  fault_ = std::make_shared<std::string>();
  // The caller's communicator keeps its own error handler: a failure of the duplication is fatal there unless the
  // caller chose otherwise; a duplication that never completes ends at the timeout.
  MPI_Request request = MPI_REQUEST_NULL;
  detail::check(MPI_Comm_idup(comm, &comm_, &request), "MPI_Comm_idup", comm);
  int rank = -1;
  MPI_Comm_rank(comm, &rank);
  const detail::Link link{comm, rank, timeout_, nullptr};
  link.wait(&request, 1, nullptr, {"geomopt::distributed::Communicator", "duplicating the communicator"});
  // From here on the duplicate is ours to free, also when what follows throws.
  try {
    detail::check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", comm_);
    detail::check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank", comm_);
    detail::check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size", comm_);
  } catch (...) {
    release();
    throw;
  }
}

Communicator::~Communicator() { release(); }

Communicator::Communicator(Communicator&& other) noexcept
    : comm_(std::exchange(other.comm_, MPI_COMM_NULL)),
      rank_(other.rank_),
      size_(other.size_),
      timeout_(other.timeout_),
      fault_(std::move(other.fault_)) {}

Communicator& Communicator::operator=(Communicator&& other) noexcept {
  if (this != &other) {
    release();
    comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
    rank_ = other.rank_;
    size_ = other.size_;
    timeout_ = other.timeout_;
    fault_ = std::move(other.fault_);
  }
  return *this;
}

void Communicator::release() noexcept {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
  comm_ = MPI_COMM_NULL;
}

void Communicator::barrier() const {
  const detail::Link link{comm_, rank_, timeout_, fault_};
  detail::guarded(link, "Communicator::barrier", [&] {
    MPI_Request request = MPI_REQUEST_NULL;
    detail::check(MPI_Ibarrier(comm_, &request), "MPI_Ibarrier", comm_);
    link.wait(&request, 1, nullptr, {"Communicator::barrier", "the barrier"});
  });
}

}  // namespace geomopt::distributed
