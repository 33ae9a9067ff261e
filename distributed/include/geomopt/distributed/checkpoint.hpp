// Checkpoints of a sharded optimizer: the parameter tree and a ZeroRedundancyOptimizer's state in the library's
// HDF5 checkpoint layout (geomopt/io/checkpoint.hpp), the file one process would write for the same run.
//
//   gd::save_checkpoint(comm, "ckpt.h5", params, zero);          // collective; rank 0 writes
//   gd::load_checkpoint(comm, "ckpt.h5", params, zero);          // collective; every rank reads
//
// Because the file is the unsharded layout, it does not record the number of ranks: a checkpoint written at P ranks
// loads at any other number, and in one process by geomopt::io::load_checkpoint into optimizer.init(params, rule);
// a one-process checkpoint loads into a sharded optimizer likewise.
//
// Contract:
//   - save_checkpoint gathers the state on rank 0 (ZeroRedundancyOptimizer::gather_state: rank 0 holds the whole
//     state for the time of the save) and rank 0 writes the file as io::save_checkpoint does: to a temporary beside
//     the target, renamed over it, so the target always holds a complete checkpoint, the last one or the new one.
//   - load_checkpoint has every rank read the file (it must be the same file on every rank: a shared file system)
//     into a copy of its tree and a whole state, with io::load_checkpoint's checks (strict by default); each rank
//     keeps its units' state (ZeroRedundancyOptimizer::set_state). Stepping afterwards continues exactly as the run
//     that saved would have, at any number of ranks (bitwise wherever the sharded step is bitwise: no clipping).
//   - Both are collective and end alike on every rank: when any rank fails, every rank throws, and nothing of the
//     caller's changes (params, the optimizer's state, the file on disk). The failing rank rethrows its own exception
//     (io::Error, std::invalid_argument, ...); the others throw geomopt::distributed::Error naming that rank and its
//     message. When several fail, the lowest rank's is named.
// Requirements: links geomopt::io, geomopt::optimizers and geomopt::distributed.
#pragma once

#include <exception>
#include <optional>
#include <string>

#include "geomopt/distributed/communicator.hpp"
#include "geomopt/distributed/detail/state_transfer.hpp"
#include "geomopt/distributed/error.hpp"
#include "geomopt/distributed/zero_redundancy_optimizer.hpp"
#include "geomopt/io/checkpoint.hpp"
#include "geomopt/ptree.hpp"

namespace geomopt::distributed {

namespace detail {

// Collective: throws on every rank when any rank's `failure` is set, the failing rank its own exception.
inline void throw_if_any_failed(const Communicator& comm, const std::exception_ptr& failure, const char* operation) {
  std::string message;
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
      message = "an exception that is not a std::exception";
    }
    if (message.empty()) message = "(an exception without a message)";
  }
  const std::string name = std::string("geomopt::distributed::") + operation;
  const RankError first = first_error(comm, message, name.c_str());
  if (failure) std::rethrow_exception(failure);
  if (first.rank >= 0) throw Error(name + " failed on rank " + std::to_string(first.rank) + ": " + first.message);
}

}  // namespace detail

/// Collective: writes params and the sharded optimizer's state to `filename` (on rank 0) as one process's
/// io::save_checkpoint would. params is the same on every rank between steps; rank 0's is written.
template <class Optimizer, class Tree>
void save_checkpoint(const Communicator& comm, const std::string& filename, const Tree& params,
                     const ZeroRedundancyOptimizer<Optimizer, Tree>& zero, const io::Metadata& metadata = {},
                     const io::SaveOptions& options = {}) {
  std::exception_ptr failure;
  auto full = zero.gather_state(comm, params, 0);
  try {
    if (comm.rank() == 0) io::save_checkpoint(filename, params, *full, metadata, options);
  } catch (...) {
    failure = std::current_exception();
  }
  detail::throw_if_any_failed(comm, failure, "save_checkpoint");
}

/// Collective: reads params and the optimizer's state from `filename`, written by save_checkpoint at any number of
/// ranks or by one process's io::save_checkpoint; each rank keeps its units' state. Returns io::load_checkpoint's
/// report, the same on every rank.
template <class Optimizer, class Tree>
io::LoadReport load_checkpoint(const Communicator& comm, const std::string& filename, Tree& params,
                               ZeroRedundancyOptimizer<Optimizer, Tree>& zero, const io::LoadOptions& options = {}) {
  std::exception_ptr failure;
  io::LoadReport report;
  std::optional<Tree> loaded;
  std::optional<typename ZeroRedundancyOptimizer<Optimizer, Tree>::WholeState> full;
  try {
    loaded.emplace(params);
    full.emplace(zero.optimizer().init(params, zero.rule()));
    report = io::load_checkpoint(filename, *loaded, *full, options);
  } catch (...) {
    failure = std::current_exception();
  }
  detail::throw_if_any_failed(comm, failure, "load_checkpoint");
  // Checked on every rank before anything changes: a state that does not fit throws here alike everywhere, since
  // every rank read the same file.
  try {
    zero.set_state(*full);
  } catch (...) {
    failure = std::current_exception();
  }
  detail::throw_if_any_failed(comm, failure, "load_checkpoint");
  ptree::for_each_storage([](auto& to, const auto& from) { to = from; }, params, *loaded);
  return report;
}

}  // namespace geomopt::distributed
