// ZeroRedundancyOptimizer<Optimizer, Tree>: any geomopt optimizer with its state sharded over the ranks (ZeRO stage 1;
// the name is PyTorch's torch.distributed.optim.ZeroRedundancyOptimizer, which does the same for torch.optim, so that
// a reader who knows one finds the other).
//
//   ZeroRedundancyOptimizer zero(comm, geomopt::Adam({.lr = 1e-3}), params);   // collective; the same on every rank
//   zero.step(params, grads);   // collective: grads is this rank's gradient; params end the same on every rank
//
// Each leaf of the tree, or each piece of a large Euclidean leaf, is a unit with one owner (OwnershipPlan, built from
// the leaves' costs: a manifold leaf's workspace step_cost(), a Muon matrix's msign_flops, kEntryCost per entry of the
// others; Muon matrices and manifold leaves whole). Only the owner holds a unit's optimizer state. A step
//   (a) brings each unit's gradient to its owner as the mean over ranks, sum in rank order 0..P-1 then one division
//       (the bits GradientAverager gives it), written into the owner's `grads`;
//   (b) steps each rank's units with the wrapped optimizer, unmodified, in the unit's own geometry: whole leaves in
//       the caller's tree (the others LeafOptions::excluded), pieces as a tree of ptree::BorrowedArray views over
//       the caller's memory; each with the options the rule gives its leaf's path;
//   (c) sends each unit's new numbers from its owner to every other rank.
// The transforms are decided once for all ranks: the squared gradient norm is the sum, in rank order, of each rank's
// sum over its units; the first non-finite leaf and the first leaf whose update is not finite are the lowest over the
// ranks; so clipping and NonFinitePolicy::skip and raise act on every rank alike (raise throws on every rank).
//
// Contract:
//   - after step, params is the same on every rank, bit for bit;
//   - with clip_norm = 0 (and any non-finite policy, which only refuses or not), params, and each unit's state on its
//     owner, are bit for bit those of the wrapped optimizer stepped in one process on GradientAverager's mean, since
//     the gradient has its bits, a whole leaf (a Muon matrix's msign too) is stepped as in one process, and an
//     entry-wise kernel steps a piece starting at a multiple of 64 entries as it steps those entries of the whole
//     leaf; with clipping, the norm is summed in another order (per rank, then over
//     ranks, and a piece's squares apart from the rest of its leaf), so the clip factor, and the step, may differ from
//     the unsharded ones in the last bits;
//   - each rank holds the state of its units only: the ranks' state_bytes() add up to the unsharded state's nbytes();
//     the plan balances cost, not bytes, which on a tree of many similar leaves gives each rank about 1/P of them;
//   - the tree must be the same on every rank (construction throws MismatchError on every rank, naming the lowest
//     differing rank and the first differing path), and at each step the same as at construction (step throws
//     MismatchError on every rank, every tree untouched);
//   - an error that only an owner's step can meet (a point off its manifold: std::domain_error) is thrown on that rank
//     alone; the others wait in the step's messages until the Communicator's timeout and throw TimeoutError naming
//     that rank (docs/distributed.md, "Errors");
//   - every wait of construction and step ends within the Communicator's timeout (TimeoutError naming the ranks whose
//     messages did not arrive and a unit's path); after an Error or TimeoutError the optimizer and its Communicator
//     are poisoned (communicator.hpp); a rank's params then hold the new numbers of the units it stepped, the old
//     ones of the units it did not receive.
// Invariants: at P = 1, step allocates nothing after the first call when the optimizer's own step does not and the
// transforms need no norm (the decisions' all-gathers are MPI collectives, whose buffers are MPI's); at P > 1 a few
// allocations in 20 steps remain, not traced yet (docs/distributed.md, "Memory").
// Not supported (std::invalid_argument at construction): ema_decay (the average would be sharded too, with no way yet
// to gather it) and MissingGradient::skip (a missing gradient has no entries to reduce).
// Requirements: the tree's leaves have one scalar, float or double, in contiguous blocks (what every geomopt optimizer
// needs); a program that includes this header links geomopt::optimizers beside geomopt::distributed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "geomopt/distributed/average.hpp"
#include "geomopt/distributed/communicator.hpp"
#include "geomopt/distributed/detail/shard_exchange.hpp"
#include "geomopt/distributed/detail/state_transfer.hpp"
#include "geomopt/distributed/ownership.hpp"
#include "geomopt/manifolds/contract.hpp"
#include "geomopt/optimizers/msign.hpp"
#include "geomopt/optimizers/muon.hpp"
#include "geomopt/optimizers/options.hpp"
#include "geomopt/optimizers/step_protocol.hpp"
#include "geomopt/ptree.hpp"
#include "geomopt/ptree/borrowed_array.hpp"

namespace geomopt::distributed {

namespace detail {

// Which leaves the optimizer steps by an orthogonalized direction, computed from the whole matrix: Muon's Euclidean
// matrices, and ManifoldMuon's manifold leaves too; those stay whole and cost msign_flops.
template <class O>
struct orthogonalizes {
  static constexpr bool matrices = false, manifolds = false;
};
template <class K, bool M>
struct orthogonalizes<BasicMuon<K, M>> {
  static constexpr bool matrices = true, manifolds = M;
};

// The plan's view of one leaf under optimizer O with options lo.
template <class O, class L>
LeafCost leaf_cost(const std::string& path, const L& leaf, const LeafOptions& lo) {
  LeafCost c{path, 0, 0, false};
  std::int64_t blocks = 0, rows = 0, cols = 0;
  ptree::detail::for_each_block(
      [&](const auto& b) {
        rows = ptree::detail::block_rows(b), cols = ptree::detail::block_cols(b);
        c.entries += rows * cols;
        ++blocks;
      },
      leaf);
  if (lo.frozen || lo.excluded) {
    // Never stepped: a unit of no cost, whole.
  } else if constexpr (Manifold<L>) {
    if (orthogonalizes<O>::manifolds && lo.muon.value_or(true)) {
      c.cost = msign_flops(leaf.value().rows(), leaf.value().cols());
    } else {
      const typename L::Workspace ws(leaf.value().rows(), leaf.value().cols(), SectionPolicy::recomputed,
                                     leaf.value().data());
      c.cost = ws.step_cost();
    }
  } else {
    const bool matrix = blocks == 1 && rows >= 2 && cols >= 2;
    if (orthogonalizes<O>::matrices && lo.muon.value_or(matrix)) {
      const std::int64_t m = lo.muon_matrices;
      c.cost = static_cast<double>(m) * msign_flops(rows, cols / m);
    } else {
      c.cost = kEntryCost * static_cast<double>(c.entries);
      c.splittable = blocks == 1;
    }
  }
  return c;
}

// Combines a step's decisions over the ranks (step_protocol.hpp's Decisions): each is all-gathered and reduced in
// rank order, so every rank decides alike. Leaves are numbered in the caller's tree on every rank.
class RankDecisions {
 public:
  RankDecisions(ShardExchange& exchange, std::vector<std::byte>& scratch, std::string& reason)
      : exchange_(&exchange), scratch_(&scratch), reason_(&reason) {}

  double squared_norm(double local) {
    const auto* all = gather(&local, sizeof local);
    double total = 0;
    for (int q = 0; q < exchange_->size(); ++q) total += load<double>(all, q, sizeof local);
    return total;
  }

  std::pair<std::size_t, const char*> first_non_finite(std::size_t leaf, const char* why) {
    struct Entry {
      std::uint64_t leaf;
      char why[120];
    } mine{leaf, {}};
    if (why != nullptr) std::strncpy(mine.why, why, sizeof mine.why - 1);
    const auto* all = gather(&mine, sizeof mine);
    Entry best{kNoLeaf, {}};
    for (int q = 0; q < exchange_->size(); ++q) {
      const Entry e = load<Entry>(all, q, sizeof mine);
      if (e.leaf < best.leaf) best = e;
    }
    if (best.leaf == kNoLeaf) return {kNoLeaf, nullptr};
    if (why != nullptr && std::strncmp(best.why, why, sizeof best.why) == 0) return {best.leaf, why};
    reason_->assign(best.why);  // another rank's reason: kept until the next step
    return {best.leaf, reason_->c_str()};
  }

  NormOverflow norm_overflow(const NormOverflow& local) {
    const auto* all = gather(&local, sizeof local);
    NormOverflow o;
    for (int q = 0; q < exchange_->size(); ++q) o.merge(load<NormOverflow>(all, q, sizeof local));
    return o;
  }

  std::size_t first_failed(std::size_t leaf) {
    const auto* all = gather(&leaf, sizeof leaf);
    std::size_t first = kNoLeaf;
    for (int q = 0; q < exchange_->size(); ++q) first = std::min(first, load<std::size_t>(all, q, sizeof leaf));
    return first;
  }

 private:
  const std::byte* gather(const void* mine, std::size_t bytes) {
    exchange_->all_gather(mine, bytes, scratch_->data());
    return scratch_->data();
  }
  template <class T>
  static T load(const std::byte* all, int q, std::size_t bytes) {
    T t;
    std::memcpy(&t, all + static_cast<std::size_t>(q) * bytes, sizeof t);
    return t;
  }

  ShardExchange* exchange_;
  std::vector<std::byte>* scratch_;
  std::string* reason_;
};

}  // namespace detail

template <class Optimizer, class Tree>
class ZeroRedundancyOptimizer {
 public:
  using Scalar = detail::flat_scalar_t<Tree>;
  static_assert(std::is_same_v<Scalar, float> || std::is_same_v<Scalar, double>,
                "ZeroRedundancyOptimizer: the tree's scalar must be float or double");
  /// The pieces of large Euclidean leaves this rank owns, as a tree of views over the caller's memory.
  using Pieces = std::vector<ptree::BorrowedArray<Scalar, 1>>;
  using WholeState = std::remove_cvref_t<decltype(std::declval<const Optimizer&>().init(std::declval<const Tree&>()))>;
  using PieceState =
      std::remove_cvref_t<decltype(std::declval<const Optimizer&>().init(std::declval<const Pieces&>()))>;

  /// Collective over comm: plans the units from params (every rank the same plan), checks that every rank's tree is
  /// the same, and makes this rank's state. `rule` gives each leaf its options by its path, as the optimizer's init.
  /// Throws std::invalid_argument (every rank) for invalid options and for the transforms not supported.
  ZeroRedundancyOptimizer(const Communicator& comm, Optimizer optimizer, const Tree& params, LeafRule rule = {},
                          OwnershipOptions options = {})
      : optimizer_(std::move(optimizer)), rule_(std::move(rule)), pieces_member_{this} {
    const StepTransforms x = optimizer_.transforms();
    if (x.ema_decay != 0)
      throw std::invalid_argument("ZeroRedundancyOptimizer: ema_decay is not supported (the optimizer has " +
                                  std::to_string(x.ema_decay) + "; pass 0)");
    if (x.missing_gradient != MissingGradient::error)
      throw std::invalid_argument(
          "ZeroRedundancyOptimizer: MissingGradient::skip is not supported (every gradient is reduced)");
    std::string invalid;
    const bool valid = options.IsValid(&invalid);

    // Every leaf's options and cost, by its path.
    std::vector<LeafCost> leaves;
    ptree::for_each_with_path(
        [&](const ptree::Path& path, const auto& leaf) {
          const LeafOptions lo = rule_ ? rule_(path) : LeafOptions{};
          leaf_index_.emplace(path.str(), leaves.size());
          leaf_options_.push_back(lo);
          leaves.push_back(detail::leaf_cost<Optimizer>(path.str(), leaf, lo));
        },
        params);
    plan_ = OwnershipPlan(std::move(leaves), comm.size(), valid ? options : OwnershipOptions{});
    std::vector<detail::ExchangeUnit> units;
    owned_whole_.assign(plan_.leaves().size(), false);
    for (const OwnedUnit& u : plan_.units()) {
      units.push_back({static_cast<std::int64_t>(u.leaf), u.begin, u.end, u.owner});
      if (u.owner != comm.rank()) continue;
      if (u.whole && !plan_.leaves()[u.leaf].splittable) {
        owned_whole_[u.leaf] = true;
      } else {
        pieces_.push_back({u.leaf, 0, u.begin, u.end});
      }
    }
    exchange_ = std::make_unique<detail::ShardExchange>(
        comm, std::is_same_v<Scalar, float> ? detail::FlatScalar::float32 : detail::FlatScalar::float64,
        detail::tree_shape(params), std::move(units), static_cast<std::uint64_t>(options.max_piece_entries), valid,
        invalid);
    decisions_scratch_.resize(static_cast<std::size_t>(comm.size()) * 128);

    // The whole leaves this rank owns step in the caller's tree; every other leaf is excluded.
    whole_state_ = std::make_unique<WholeState>(optimizer_.init(params, [this](const ptree::Path& path) {
      const std::size_t leaf = leaf_index_.at(path.str());
      LeafOptions lo = leaf_options_[leaf];
      lo.excluded = lo.excluded || !owned_whole_[leaf];
      return lo;
    }));
    // The pieces: copies of their numbers for init (step points them at the step's params and grads). A split
    // leaf has one block (leaf_cost), the one numbered first_block.
    blocks_.resize(exchange_->shape().blocks.size());
    grad_blocks_.resize(blocks_.size());
    std::vector<const Scalar*> data(blocks_.size(), nullptr);
    std::size_t next = 0;
    ptree::for_each_storage([&](const auto& b) { data[next++] = geomopt::detail::block_data(b); }, params);
    for (Piece& p : pieces_) {
      p.block = first_block(p.leaf);
      using Value = typename ptree::BorrowedArray<Scalar, 1>::Value;
      const Value v = Eigen::Map<const Value>(data[p.block] + p.begin, p.end - p.begin);
      piece_params_.emplace_back(v);
      piece_grads_.emplace_back(v);
    }
    piece_state_ = std::make_unique<PieceState>(optimizer_.init(
        piece_params_, [this](const ptree::Path& path) { return leaf_options_[pieces_[path[0].index].leaf]; }));
  }

  /// Collective: one step of every unit on the mean of every rank's grads. grads is this rank's gradient; on return
  /// the units this rank owns hold the mean over ranks, the others are as they were. Returns the same report on every
  /// rank (a skipped step: applied false on every rank, nothing written anywhere).
  StepReport step(Tree& params, Tree& grads) {
    detail::LocalMismatch mismatch = collect(params, blocks_);
    if (mismatch.leaf < 0) mismatch = collect(grads, grad_blocks_);
    exchange_->reduce(grad_blocks_.data(), mismatch);
    for (std::size_t k = 0; k < pieces_.size(); ++k) {
      const Piece& p = pieces_[k];
      piece_params_[k].lend(static_cast<Scalar*>(blocks_[p.block]) + p.begin, p.end - p.begin, 1);
      piece_grads_[k].lend(static_cast<Scalar*>(grad_blocks_[p.block]) + p.begin, p.end - p.begin, 1);
    }
    const StepReport report = geomopt::detail::drive_step(
        params, grads, optimizer_.transforms(), static_cast<Tree*>(nullptr), std::tie(optimizer_, pieces_member_),
        std::tie(*whole_state_, *piece_state_), detail::RankDecisions(*exchange_, decisions_scratch_, reason_));
    if (report.applied) exchange_->gather(blocks_.data());
    return report;
  }

  /// Collective: the unsharded state on rank `root`, as optimizer().init(params, rule()) makes it, with every unit's
  /// slots from its owner and the step count: what one process stepping the same gradients holds (bit for bit where
  /// the step is, see the contract). std::nullopt on the other ranks. Costs root the memory of the whole state
  /// (PyTorch's consolidate_state_dict does the same); the other ranks send their slots one array at a time.
  std::optional<WholeState> gather_state(const Communicator& comm, const Tree& params, int root = 0) const {
    check_communicator(comm, root, "gather_state");
    static constexpr const char* kGatherState = "ZeroRedundancyOptimizer::gather_state";
    std::optional<WholeState> full;
    if (comm.rank() == root) {
      full.emplace(optimizer_.init(params, rule_));
      full->set_step_count(whole_state_->step_count());
    }
    for (int q = 0; q < comm.size(); ++q) {
      if (comm.rank() != root && comm.rank() != q) continue;
      for_each_unit_of(q, [&](const OwnedUnit& u, std::size_t piece) {
        const auto mine = comm.rank() != q            ? decltype(slots_of(*whole_state_, 0)){}
                          : piece == geomopt::kNoLeaf ? slots_of(*whole_state_, u.leaf)
                                                      : slots_of(*piece_state_, piece);
        if (comm.rank() != root) {
          for (const auto& m : mine)
            detail::send_bytes(comm, root, m.data, m.size * sizeof(Scalar), kGatherState, plan_.leaves()[u.leaf].path);
          return;
        }
        const std::size_t offset = piece == geomopt::kNoLeaf ? 0 : static_cast<std::size_t>(u.begin);
        const auto into = slots_of(*full, u.leaf);
        for (std::size_t i = 0; i < into.size(); ++i) {
          const std::size_t count =
              piece == geomopt::kNoLeaf ? into[i].size : static_cast<std::size_t>(u.end - u.begin);
          if (q == root)
            std::memcpy(into[i].data + offset, mine.at(i).data, count * sizeof(Scalar));
          else
            detail::receive_bytes(comm, q, into[i].data + offset, count * sizeof(Scalar), kGatherState,
                                  plan_.leaves()[u.leaf].path);
        }
      });
    }
    return full;
  }

  /// This rank's units take their slots, and its states the step count, from `full`: an unsharded state of the same
  /// optimizer, rule and tree on every rank (gather_state's, a one-process state, a checkpoint's). Not collective;
  /// the per-leaf options are not compared (io's strict load compares a file's with those of init's state). Throws
  /// std::invalid_argument naming the leaf when full does not fit this optimizer's tree or a leaf has a step count of
  /// its own (MissingGradient::skip, which this wrapper does not support); nothing changes then.
  void set_state(const WholeState& full) {
    if (full.leaf_count() != plan_.leaves().size())
      throw std::invalid_argument("ZeroRedundancyOptimizer::set_state: the state has " +
                                  std::to_string(full.leaf_count()) + " leaves, the tree " +
                                  std::to_string(plan_.leaves().size()));
    full.for_each_leaf_step([](const std::string& path, std::int64_t count) {
      throw std::invalid_argument("ZeroRedundancyOptimizer::set_state: leaf " + path +
                                  " has a step count of its own (" + std::to_string(count) +
                                  "; MissingGradient::skip is not supported)");
    });
    for (int pass = 0; pass < 2; ++pass) {  // check every unit, then copy
      for_each_unit_of(exchange_->rank(), [&](const OwnedUnit& u, std::size_t piece) {
        const bool whole = piece == geomopt::kNoLeaf;
        const auto from = slots_of(full, u.leaf);
        const auto into = whole ? slots_of(*whole_state_, u.leaf) : slots_of(*piece_state_, piece);
        const std::size_t begin = whole ? 0 : static_cast<std::size_t>(u.begin);
        if (pass == 1) {
          for (std::size_t i = 0; i < into.size(); ++i)
            std::memcpy(into[i].data, from[i].data + begin, into[i].size * sizeof(Scalar));
          return;
        }
        bool fits = full.leaf_path(u.leaf) == plan_.leaves()[u.leaf].path && from.size() == into.size();
        for (std::size_t i = 0; fits && i < into.size(); ++i)
          fits = from[i].name == into[i].name && begin + into[i].size <= from[i].size &&
                 (!whole || into[i].size == from[i].size);
        if (!fits)
          throw std::invalid_argument("ZeroRedundancyOptimizer::set_state: leaf " + plan_.leaves()[u.leaf].path +
                                      " of the state does not fit this tree (its path, slot names or sizes differ)");
      });
    }
    whole_state_->set_step_count(full.step_count());
    piece_state_->set_step_count(full.step_count());
  }

  const OwnershipPlan& plan() const noexcept { return plan_; }
  const Optimizer& optimizer() const noexcept { return optimizer_; }
  /// The rule given at construction: each leaf's options by its path.
  const LeafRule& rule() const noexcept { return rule_; }
  /// The state of the whole leaves this rank owns and of its pieces of split leaves.
  const WholeState& whole_state() const noexcept { return *whole_state_; }
  const PieceState& piece_state() const noexcept { return *piece_state_; }
  /// Bytes of this rank's optimizer state (the states' nbytes()).
  std::size_t state_bytes() const noexcept { return whole_state_->nbytes() + piece_state_->nbytes(); }
  /// Payload bytes this rank sends per step (reduce and gather; the decisions' few bytes aside).
  std::size_t bytes_sent_per_step() const noexcept { return exchange_->bytes_sent_per_step(); }

  // The pieces' member points back at this object: neither copied nor moved.
  ZeroRedundancyOptimizer(const ZeroRedundancyOptimizer&) = delete;
  ZeroRedundancyOptimizer& operator=(const ZeroRedundancyOptimizer&) = delete;

 private:
  struct Piece {
    std::size_t leaf;
    std::size_t block;  // the leaf's one block, in the exchange's numbering
    std::int64_t begin, end;
  };

  // The step protocol over the pieces: the optimizer on the tree of piece views, its leaves numbered as the leaves
  // they are pieces of, so that the driver compares them with the whole leaves' numbers.
  struct PiecesMember {
    ZeroRedundancyOptimizer* self;
    std::size_t leaf_of(std::size_t piece) const { return piece == kNoLeaf ? kNoLeaf : self->pieces_[piece].leaf; }
    void begin_step(Tree&, const Tree&, PieceState& s, Tree*, MissingGradient missing) {
      self->optimizer_.begin_step(self->piece_params_, self->piece_grads_, s, static_cast<Pieces*>(nullptr), missing);
    }
    double gradient_squared_norm(PieceState& s, bool norm) { return self->optimizer_.gradient_squared_norm(s, norm); }
    std::pair<std::size_t, const char*> first_non_finite(const PieceState& s) const {
      const auto [piece, why] = self->optimizer_.first_non_finite(s);
      return {leaf_of(piece), why};
    }
    NormOverflow norm_overflow(const PieceState& s) const {
      NormOverflow o = self->optimizer_.norm_overflow(s);
      o.first = leaf_of(o.first), o.largest = leaf_of(o.largest);
      return o;
    }
    std::size_t verify_step(PieceState& s, double gscale) { return leaf_of(self->optimizer_.verify_step(s, gscale)); }
    void apply_step(PieceState& s, double gscale, double ema_decay, bool verified) {
      self->optimizer_.apply_step(s, gscale, ema_decay, verified);
    }
    double scheduled_lr(const PieceState& s) const { return self->optimizer_.scheduled_lr(s); }
  };

  // One state array of a leaf: its slot name, numbers and count.
  template <class Pointer>
  struct SlotArray {
    std::string name;
    Pointer data;
    std::size_t size;
  };
  // The state arrays of leaf `leaf` of a state, in its for_each_slot order.
  template <class State>
  static auto slots_of(State& state, std::size_t leaf) {
    std::vector<SlotArray<std::conditional_t<std::is_const_v<State>, const Scalar*, Scalar*>>> out;
    state.for_each_slot_of_leaf(leaf, [&](const std::string&, std::string_view name, auto map) {
      out.push_back({std::string(name), map.data(), static_cast<std::size_t>(map.size())});
    });
    return out;
  }

  // f(unit, piece) for each unit rank q owns, in plan order: piece is kNoLeaf for a leaf stepped whole in the
  // whole-leaf state, otherwise the unit's number among q's pieces (its leaf in the piece state).
  template <class F>
  void for_each_unit_of(int q, F&& f) const {
    std::size_t piece = 0;
    for (const OwnedUnit& u : plan_.units()) {
      if (u.owner != q) continue;
      if (u.whole && !plan_.leaves()[u.leaf].splittable)
        f(u, geomopt::kNoLeaf);
      else
        f(u, piece++);
    }
  }

  void check_communicator(const Communicator& comm, int root, const char* operation) const {
    if (comm.size() != exchange_->size() || comm.rank() != exchange_->rank() || root < 0 || root >= comm.size())
      throw std::invalid_argument(std::string("ZeroRedundancyOptimizer::") + operation + ": the communicator (rank " +
                                  std::to_string(comm.rank()) + " of " + std::to_string(comm.size()) +
                                  ") is not the one of construction (rank " + std::to_string(exchange_->rank()) +
                                  " of " + std::to_string(exchange_->size()) + ") or root " + std::to_string(root) +
                                  " is not one of its ranks");
  }

  // The first block of a leaf in the exchange's numbering (construction only).
  std::size_t first_block(std::size_t leaf) const {
    const auto& blocks = exchange_->shape().blocks;
    std::size_t j = 0;
    while (j < blocks.size() && blocks[j].leaf != static_cast<std::int64_t>(leaf)) ++j;
    return j;
  }

  // The first number of every block of tree into out, checking the shapes against the construction's.
  detail::LocalMismatch collect(Tree& tree, std::vector<void*>& out) {
    return detail::match_blocks(tree, exchange_->shape().blocks, [&](std::size_t j, auto& b) {
      out[j] = static_cast<void*>(geomopt::detail::block_data(b));
    });
  }

  Optimizer optimizer_;
  LeafRule rule_;
  OwnershipPlan plan_;
  std::unordered_map<std::string, std::size_t> leaf_index_;
  std::vector<LeafOptions> leaf_options_;
  std::vector<bool> owned_whole_;
  std::vector<Piece> pieces_;
  Pieces piece_params_, piece_grads_;
  std::unique_ptr<detail::ShardExchange> exchange_;
  std::unique_ptr<WholeState> whole_state_;
  std::unique_ptr<PieceState> piece_state_;
  std::vector<void*> blocks_, grad_blocks_;
  std::vector<std::byte> decisions_scratch_;
  std::string reason_;
  PiecesMember pieces_member_;
};

}  // namespace geomopt::distributed
