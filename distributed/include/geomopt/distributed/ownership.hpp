// OwnershipPlan: which rank steps which part of a parameter tree when the optimizer state is sharded (ZeRO stage 1).
//
//   std::vector<LeafCost> leaves = ...;                  // per trainable leaf, in walk order: path, entries, cost
//   OwnershipPlan plan(leaves, ranks);                    // the same plan on every rank, from the same leaves
//   plan.units();                                          // {leaf, path, begin, end, cost, owner}, in walk order
//   plan.loads(); plan.imbalance();                        // per-rank cost, max / mean
//
// The units of a tree are its leaves, except that a splittable leaf (a Euclidean leaf stepped entry by entry) of more
// than OwnershipOptions::max_piece_entries entries is cut into pieces of about equal size, each starting at a multiple
// of 64 entries. Manifold leaves and Muon matrices are never split: their step couples all their entries. A piece's
// cost is its share of the leaf's cost, in proportion to its entries.
//
// Units go to ranks by longest processing time first (Graham 1969): in order of decreasing cost (equal costs in walk
// order), each to the rank with the least load so far (equal loads: the lowest rank). The result is within 4/3 - 1 /
// (3 P) of the optimal maximum load, and it depends only on the leaves and P: every rank computes the same plan from
// the same leaves, with no message.
//
// Invariants: the units of a leaf cover [0, entries) in order, without overlap; a unit of a splittable leaf starts at
// a multiple of 64 (so an entry-wise kernel vectorised over 4, 8 or 16 lanes splits a piece where it would split the
// whole leaf, and its bits are the same); every unit has exactly one owner in [0, P); loads()[r] is the sum of the
// costs of rank r's units, added in walk order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace geomopt::distributed {

/// The cost of one entry of a leaf stepped entry by entry (SGD, Adam, AdamW, Muon's fallback), in the flops that a
/// manifold's step_cost() and msign_flops count: such a kernel does a few flops per entry and is bound by memory, and
/// the optimizers' own plan of threads (detail::make_plan in optimizer.hpp) counts it as one, so that ranks and
/// threads are balanced by the same scale.
inline constexpr double kEntryCost = 1;

/// One trainable leaf as the plan sees it.
struct LeafCost {
  std::string path;
  std::int64_t entries = 0;  ///< its numbers (the leaf's parameters, not its tangent coordinates)
  double cost = 0;           ///< estimated flops of one step of the whole leaf (ZeroRedundancyOptimizer: leaf_cost)
  bool splittable = false;   ///< stepped entry by entry (a Euclidean leaf not under Muon): may be cut into pieces
};

struct OwnershipOptions {
  /// A splittable leaf of more entries is cut into pieces of at most this many; a positive multiple of 64. The
  /// default, 64 Ki entries (256 KiB of float), keeps a piece's messages far above MPI's per-message latency and still
  /// cuts the largest leaves of a transformer (an embedding of 50 k x 1024) into hundreds of pieces.
  std::int64_t max_piece_entries = 65536;

  /// Ceres's name, as every options struct of geomopt: false and a reason in *error when a field is out of range.
  bool IsValid(std::string* error) const {
    if (max_piece_entries <= 0 || max_piece_entries % 64 != 0) {
      if (error)
        *error = "max_piece_entries must be a positive multiple of 64, got " + std::to_string(max_piece_entries);
      return false;
    }
    return true;
  }
};

/// A part of one leaf with its owner: entries [begin, end) of leaf `leaf` (index among the plan's leaves, walk order).
struct OwnedUnit {
  std::size_t leaf = 0;
  std::int64_t begin = 0;
  std::int64_t end = 0;
  double cost = 0;
  int owner = 0;
  bool whole = true;  ///< the unit is its whole leaf
};

class OwnershipPlan {
 public:
  OwnershipPlan() = default;

  /// The plan of `leaves` over `ranks` ranks. Throws std::invalid_argument naming the leaf for a negative entry
  /// count or a cost that is negative or not finite, and for ranks < 1 or invalid options.
  OwnershipPlan(std::vector<LeafCost> leaves, int ranks, const OwnershipOptions& options = {})
      : leaves_(std::move(leaves)), loads_(ranks > 0 ? static_cast<std::size_t>(ranks) : 0, 0.0) {
    std::string error;
    if (!options.IsValid(&error)) throw std::invalid_argument("OwnershipPlan: " + error);
    if (ranks < 1) throw std::invalid_argument("OwnershipPlan: ranks must be >= 1, got " + std::to_string(ranks));
    for (std::size_t l = 0; l < leaves_.size(); ++l) {
      const LeafCost& leaf = leaves_[l];
      if (leaf.entries < 0 || !(leaf.cost >= 0) || leaf.cost > 1e300)
        throw std::invalid_argument("OwnershipPlan: leaf " + leaf.path + " has " + std::to_string(leaf.entries) +
                                    " entries and cost " + std::to_string(leaf.cost) +
                                    "; expected entries >= 0 and a finite cost >= 0");
      const std::int64_t n = leaf.entries;
      if (!leaf.splittable || n <= options.max_piece_entries) {
        units_.push_back({l, 0, n, leaf.cost, 0, true});
        continue;
      }
      // k pieces of equal size rounded up to 64 entries; the last takes the rest.
      const std::int64_t k = (n + options.max_piece_entries - 1) / options.max_piece_entries;
      const std::int64_t piece = ((n + k - 1) / k + 63) / 64 * 64;
      for (std::int64_t b = 0; b < n; b += piece) {
        const std::int64_t e = std::min(n, b + piece);
        units_.push_back({l, b, e, leaf.cost * static_cast<double>(e - b) / static_cast<double>(n), 0, false});
      }
    }

    std::vector<std::size_t> order(units_.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return units_[a].cost > units_[b].cost; });
    std::vector<double> greedy(loads_.size(), 0.0);
    for (std::size_t u : order) {
      const auto r = static_cast<std::size_t>(std::min_element(greedy.begin(), greedy.end()) - greedy.begin());
      units_[u].owner = static_cast<int>(r);
      greedy[r] += units_[u].cost;
    }
    for (const OwnedUnit& u : units_) loads_[static_cast<std::size_t>(u.owner)] += u.cost;
  }

  int ranks() const noexcept { return static_cast<int>(loads_.size()); }
  const std::vector<LeafCost>& leaves() const noexcept { return leaves_; }
  /// Every unit, in walk order (by leaf, then by begin).
  const std::vector<OwnedUnit>& units() const noexcept { return units_; }
  const std::string& path(const OwnedUnit& u) const noexcept { return leaves_[u.leaf].path; }
  /// Per rank, the sum of its units' costs.
  const std::vector<double>& loads() const noexcept { return loads_; }
  double max_load() const noexcept { return loads_.empty() ? 0 : *std::max_element(loads_.begin(), loads_.end()); }
  double mean_load() const noexcept {
    return loads_.empty() ? 0 : std::accumulate(loads_.begin(), loads_.end(), 0.0) / static_cast<double>(ranks());
  }
  /// max / mean load: 1 is a perfect balance (and the value for a plan without cost).
  double imbalance() const noexcept { return mean_load() > 0 ? max_load() / mean_load() : 1.0; }

  /// One line: "OwnershipPlan: 369 leaves, 512 units over 4 ranks, load max/mean 1.002".
  std::string BriefReport() const {
    char b[160];
    std::snprintf(b, sizeof b, "OwnershipPlan: %zu leaves, %zu units over %d ranks, load max/mean %.4f", leaves_.size(),
                  units_.size(), ranks(), imbalance());
    return b;
  }

 private:
  std::vector<LeafCost> leaves_;
  std::vector<OwnedUnit> units_;
  std::vector<double> loads_;
};

}  // namespace geomopt::distributed
