#include "geomopt/distributed/communicator.hpp"

#include <stdexcept>
#include <utility>

#include "mpi_call.hpp"

namespace geomopt::distributed {

namespace detail {
MPI_Comm native(const Communicator& comm) noexcept { return comm.comm_; }
}  // namespace detail

Communicator::Communicator(MPI_Comm comm) : comm_(MPI_COMM_NULL) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized)
    throw std::logic_error(
        "geomopt::distributed::Communicator: MPI is not initialised (call MPI_Init first) or is "
        "already finalised");
  if (comm == MPI_COMM_NULL) throw std::invalid_argument("geomopt::distributed::Communicator: MPI_COMM_NULL");
  detail::check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup", comm);
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
    : comm_(std::exchange(other.comm_, MPI_COMM_NULL)), rank_(other.rank_), size_(other.size_) {}

Communicator& Communicator::operator=(Communicator&& other) noexcept {
  if (this != &other) {
    release();
    comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
    rank_ = other.rank_;
    size_ = other.size_;
  }
  return *this;
}

void Communicator::release() noexcept {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
  comm_ = MPI_COMM_NULL;
}

void Communicator::barrier() const { detail::check(MPI_Barrier(comm_), "MPI_Barrier", comm_); }

}  // namespace geomopt::distributed
