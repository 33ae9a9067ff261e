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
//     geomopt::distributed::Error naming the call; a peer that dies is fatal to the job under Open MPI's launcher
//     regardless (docs/distributed.md, "Faults").
//   - Every operation taking a Communicator is collective: every rank calls it, in the same order. One operation at a
//     time per Communicator (MPI is initialised by the caller, at any thread level).
// A moved-from Communicator may only be assigned to or destroyed.
#pragma once

#include <mpi.h>

namespace geomopt::distributed {

class Communicator;

namespace detail {
/// The duplicate itself, for the compiled library's own calls.
MPI_Comm native(const Communicator& comm) noexcept;
}  // namespace detail

class Communicator {
 public:
  /// Duplicates `comm`; collective over it. Throws std::logic_error when MPI is not initialised or already finalised,
  /// std::invalid_argument for MPI_COMM_NULL, Error when the duplication fails.
  explicit Communicator(MPI_Comm comm);
  ~Communicator();
  Communicator(Communicator&& other) noexcept;
  Communicator& operator=(Communicator&& other) noexcept;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  /// Returns once every rank has called it.
  void barrier() const;

 private:
  friend MPI_Comm detail::native(const Communicator& comm) noexcept;
  void release() noexcept;

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 0;
};

}  // namespace geomopt::distributed
