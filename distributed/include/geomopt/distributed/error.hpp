// The errors of geomopt::distributed.
//
//   Error          an MPI call failed; what() names the call, the rank and MPI's own message.
//   MismatchError  the ranks' trees differ (or one rank's tree differs from the one its operation was built for);
//                  thrown on every rank with the same message, naming the rank that differs, the first differing
//                  path and what each side holds there. A StructureError, as ptree's own shape errors are.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include "geomopt/ptree/error.hpp"

namespace geomopt::distributed {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
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
