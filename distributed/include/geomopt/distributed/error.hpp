// The errors of geomopt::distributed.
//
//   Error          an MPI call failed; what() names the call, the rank and MPI's own message. Poisons the
//                  Communicator and the object it came from (communicator.hpp).
//   TimeoutError   an Error: a wait outlasted the Communicator's timeout; what() names the operation, the ranks
//                  whose messages did not arrive (ranks()), the first path waited for (path()) and the timeout.
//   MismatchError  the ranks' trees differ (or one rank's tree differs from the one its operation was built for);
//                  thrown on every rank with the same message, naming the rank that differs, the first differing
//                  path and what each side holds there. A StructureError, as ptree's own shape errors are.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "geomopt/ptree/error.hpp"

namespace geomopt::distributed {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class TimeoutError : public Error {
 public:
  TimeoutError(const std::string& message, std::vector<int> ranks, std::string path)
      : Error(message), ranks_(std::move(ranks)), path_(std::move(path)) {}

  /// The ranks whose messages this rank was still waiting for, in increasing order (empty when MPI cannot tell, as in
  /// a collective none of whose parts is attributed to a rank).
  const std::vector<int>& ranks() const noexcept { return ranks_; }
  /// The first path of the leaf, bucket or unit waited for ("" when the wait was for no tree's numbers).
  const std::string& path() const noexcept { return path_; }

 private:
  std::vector<int> ranks_;
  std::string path_;
};

class MismatchError : public StructureError {
 public:
  MismatchError(const std::string& message, int rank, std::string path)
      : StructureError(message), rank_(rank), path_(std::move(path)) {}

  /// The lowest rank whose tree differs.
  int rank() const noexcept { return rank_; }
  /// The first path at which it differs ("" when the trees differ in no leaf, only in their option settings).
  const std::string& path() const noexcept { return path_; }

 private:
  int rank_;
  std::string path_;
};

}  // namespace geomopt::distributed
