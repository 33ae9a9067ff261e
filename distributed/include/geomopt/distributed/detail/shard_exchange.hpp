// The compiled half of ZeroRedundancyOptimizer: the messages that bring each unit's gradient to its owner as the mean
// over ranks, and each unit's stepped numbers from its owner to every other rank. Like the averaging engine it sees a
// tree only as storage blocks (their shapes at construction, their first numbers at each call), so that every MPI call
// stays in libgeomopt_distributed.
//
// The flat vector is ordered by owner: rank 0's units in walk order, then rank 1's, and so on, so that a rank's units
// are one contiguous region, sent in one message to (reduce) or from (gather) each other rank. Blocks are read and
// written in storage order, which is the order an optimizer steps a contiguous block in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "geomopt/distributed/detail/averaging_engine.hpp"

namespace geomopt::distributed {
class Communicator;
}

namespace geomopt::distributed::detail {

/// Entries [begin, end) of leaf `leaf` (its blocks one after another, each in storage order), owned by `owner`.
struct ExchangeUnit {
  std::int64_t leaf = 0;
  std::int64_t begin = 0;
  std::int64_t end = 0;
  int owner = 0;
};

class ShardExchange {
 public:
  /// Collective: duplicates the communicator, checks that every rank has the same tree and max_piece_entries (throws
  /// MismatchError, std::invalid_argument on every rank), allocates the flat vector, the staging area and the
  /// persistent requests. Every rank passes the same units (the same OwnershipPlan).
  ShardExchange(const Communicator& comm, FlatScalar scalar, TreeShape shape, std::vector<ExchangeUnit> units,
                std::uint64_t max_piece_entries, bool options_valid, const std::string& invalid);
  ~ShardExchange();
  ShardExchange(ShardExchange&&) noexcept;
  ShardExchange& operator=(ShardExchange&&) noexcept;

  /// Collective: the units this rank owns in `blocks` (the first number of each block of the gradient tree) become
  /// the mean over ranks, in rank order (rank_order_mean.hpp); other units are not written. When a rank's mismatch
  /// has leaf >= 0, the messages still flow, nothing is written, and every rank throws MismatchError.
  void reduce(void* const* blocks, const LocalMismatch& mismatch);
  /// Collective: the units other ranks own in `blocks` (the parameter tree) receive their owners' numbers.
  void gather(void* const* blocks);
  /// Collective: every rank's `bytes` bytes at `mine`, in rank order, into `all` (P * bytes). For the step's
  /// decisions; allocates nothing.
  void all_gather(const void* mine, std::size_t bytes, void* all);

  const TreeShape& shape() const noexcept;
  /// Payload bytes this rank sends per step: its contributions to the others' units, and its own units to each.
  std::size_t bytes_sent_per_step() const noexcept;
  int rank() const noexcept;
  int size() const noexcept;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace geomopt::distributed::detail
