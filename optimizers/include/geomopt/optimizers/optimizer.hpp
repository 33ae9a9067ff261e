// Optimizer<Kernel>: steps every leaf of a parameter tree in place, each in its own geometry, in one fused pass.
//
//   geomopt::Adam adam({.lr = 1e-3}, {.clip_norm = 1.0, .threads = 2});
//   auto state = adam.init(params);                 // or adam.init(params, rule), rule(path) -> LeafOptions
//   adam.step(params, grads, state);                // grads: a tree of params' type holding Euclidean gradients
//
// Euclidean leaves and the storage of packed leaves are stepped entry by entry by the kernel. A manifold leaf's
// Euclidean gradient is lifted to the tangent coordinates of its global section, the kernel runs on those
// coordinates (its moments live there) starting from a zero update, and the update is retracted. A step:
//   1. walks params, grads (and the EMA tree) once to find every unit's numbers; a tree that does not match the
//      state throws before anything is written;
//   2. if clipping or a finiteness check is on, reads every gradient once (lifting manifold gradients) and folds
//      their squared norm; a non-finite gradient is handled by the policy before anything is written;
//   3. runs each thread's share of the units: chunk by chunk through the kernel, with the clip factor applied to
//      the gradient chunk and the EMA updated in the same chunk.
// Nothing in a step allocates. These are the phases of the step protocol (step_protocol.hpp), public so that a
// Partition steps several optimizers as one.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "geomopt/manifolds.hpp"
#include "geomopt/optimizers/detail/manifold_leaf.hpp"
#include "geomopt/optimizers/detail/thread_pool.hpp"
#include "geomopt/optimizers/kernels.hpp"
#include "geomopt/optimizers/options.hpp"
#include "geomopt/optimizers/state.hpp"
#include "geomopt/optimizers/step_protocol.hpp"
#include "geomopt/ptree.hpp"

namespace geomopt {
namespace detail {

// Entries per chunk: 2 KiB of each array, so a kernel's arrays (at most 2 + kMaxSlots + EMA) stay in L1 between
// the statements of its update.
template <class T>
inline constexpr Eigen::Index kChunkEntries = 2048 / sizeof(T);

// Whether a block's entries are one dense run of memory (either storage order): the kernels step the entries in
// storage order, which needs nothing else.
template <class B>
bool block_contiguous(const B& b) {
  if constexpr (std::is_arithmetic_v<B>) {
    return true;
  } else {
    const Eigen::Index inner = B::IsRowMajor ? b.cols() : b.rows();
    return b.size() <= 1 || (b.innerStride() == 1 && (b.cols() == 1 || b.rows() == 1 || b.outerStride() == inner));
  }
}

// The shape of a contiguous block's storage order read column-major: its own for a column-major block or a vector,
// the transpose for a row-major matrix. A slot shown in that shape has entry (i, j) where the block's storage has it.
template <class B>
std::pair<Eigen::Index, Eigen::Index> storage_shape(const B& b) {
  if constexpr (std::is_arithmetic_v<B>) {
    return {1, 1};
  } else {
    if (B::IsRowMajor && b.rows() != 1 && b.cols() != 1) return {b.cols(), b.rows()};
    return {b.rows(), b.cols()};
  }
}

inline std::string shape_string(Eigen::Index rows, Eigen::Index cols) {
  return std::to_string(rows) + "x" + std::to_string(cols);
}

// Throws StructureError unless block b of the gradient (or moving average) of the leaf at `path` has the leaf's
// shape, rows x cols.
template <class B>
void check_like_leaf(const std::string& path, const char* what, std::size_t block, bool several, const B& b,
                     Eigen::Index rows, Eigen::Index cols) {
  const Eigen::Index r = ptree::detail::block_rows(b), c = ptree::detail::block_cols(b);
  if (r == rows && c == cols) return;
  const std::string which = several ? " block " + std::to_string(block) : "";
  throw StructureError(path + ": the " + what + which + " is " + shape_string(r, c) + ", the leaf" + which + " " +
                       shape_string(rows, cols) + ": it must have the leaf's shape" +
                       (std::string_view(what) == "gradient"
                            ? " (only a frozen leaf's gradient may be empty, or any leaf's with MissingGradient::skip)"
                            : ""));
}

// Whether every storage block of x holds no number: the gradient of a leaf nobody differentiated.
template <class L>
bool holds_no_number(const L& x) {
  bool empty = true;
  ptree::detail::for_each_block(
      [&](const auto& b) {
        if (ptree::detail::block_rows(b) * ptree::detail::block_cols(b) != 0) empty = false;
      },
      x);
  return empty;
}

// A frozen leaf's gradient is never read, so it may be empty (every storage block holds no number: a 0 x 0 matrix, a
// default-constructed manifold point), as a gradient that was never computed is; one of the leaf's own shape is
// accepted too. Anything else is a mistake, and throws StructureError naming the leaf.
template <class L>
void check_frozen_gradient(const std::string& path, const L& p, const L& g) {
  bool empty = true, same = true;
  std::size_t blocks = 0, bad = 0;
  Eigen::Index pr = 0, pc = 0, gr = 0, gc = 0;
  ptree::detail::for_each_block(
      [&](const auto& bp, const auto& bg) {
        const Eigen::Index r = ptree::detail::block_rows(bg), c = ptree::detail::block_cols(bg);
        if (r * c != 0) empty = false;
        if (same && (r != ptree::detail::block_rows(bp) || c != ptree::detail::block_cols(bp))) {
          same = false;
          bad = blocks;
          pr = ptree::detail::block_rows(bp), pc = ptree::detail::block_cols(bp), gr = r, gc = c;
        }
        ++blocks;
      },
      p, g);
  if (empty || same) return;
  const std::string which = blocks > 1 ? " block " + std::to_string(bad) : "";
  throw StructureError(path + ": the gradient" + which + " of this frozen leaf is " + shape_string(gr, gc) +
                       ", the leaf" + which + " " + shape_string(pr, pc) +
                       ": a frozen leaf takes an empty gradient (0x0) or one of the leaf's shape");
}

template <class K>
double slot_initial_value(const typename K::Options& o, std::size_t slot) {
  if constexpr (requires { K::slot_init(o, slot); }) {
    return K::slot_init(o, slot);
  } else {
    return 0;
  }
}

// Splits the units among `threads` members: manifold leaves whole, by their stepper's step_cost(), to the least
// loaded member; then the Euclidean entries in walk order, cut at multiples of 64 entries, so every member gets
// about the same share of the total. An entry of the entry-wise kernels counts as one flop: a few per entry is what
// they take, and the manifolds' estimates count flops.
inline std::vector<std::vector<WorkItem>> make_plan(const std::vector<Unit>& units, int threads) {
  const auto members = static_cast<std::size_t>(threads);
  std::vector<std::vector<WorkItem>> plan(members);
  std::vector<double> load(members, 0.0);
  double euclidean = 0, total = 0;
  for (std::size_t u = 0; u < units.size(); ++u) {
    if (units[u].stepper >= 0) {
      const double cost = units[u].cost;
      const auto m = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
      plan[m].push_back({u, 0, units[u].size});
      load[m] += cost;
      total += cost;
    } else {
      euclidean += static_cast<double>(units[u].size);
    }
  }
  total += euclidean;
  const double target = total / static_cast<double>(members);
  std::size_t m = 0;
  for (std::size_t u = 0; u < units.size(); ++u) {
    if (units[u].stepper >= 0) continue;
    Eigen::Index begin = 0;
    const Eigen::Index size = units[u].size;
    while (begin < size) {
      while (m + 1 < members && load[m] >= target) ++m;
      Eigen::Index take = size - begin;
      if (m + 1 < members) {
        const auto room = static_cast<Eigen::Index>(std::ceil((target - load[m]) / 64.0)) * 64;
        take = std::min(take, std::max<Eigen::Index>(room, 64));
      }
      plan[m].push_back({u, begin, begin + take});
      load[m] += static_cast<double>(take);
      begin += take;
    }
    if (size == 0) plan[m].push_back({u, 0, 0});
  }
  return plan;
}

inline constexpr std::size_t kNoUnit = static_cast<std::size_t>(-1);

}  // namespace detail

template <class Kernel>
class Optimizer {
 public:
  using Options = typename Kernel::Options;
  /// The name its states and checkpoints carry: the kernel's.
  static constexpr const char* kName = Kernel::kName;

  explicit Optimizer(Options options = {}, CommonOptions common = {})
      : options_(std::move(options)), common_(std::move(common)) {
    options_.validate();
    common_.validate();
    if (common_.threads > 1) pool_ = std::make_unique<detail::ThreadPool>(common_.threads);
  }

  const Options& options() const noexcept { return options_; }
  const CommonOptions& common() const noexcept { return common_; }

  /// The state for params: every leaf's options from rule(path) (default LeafOptions when rule is empty), slots
  /// at their initial values, steppers and sections for manifold leaves, the EMA copy, and the threads' plan.
  /// Tree must be a ptree::tree; another type stops compilation at ptree's static_assert, which says what to declare.
  template <class Tree>
  OptimizerState<Tree> init(const Tree& params, const LeafRule& rule = {}) const {
    if constexpr (ptree::tree<Tree>) {
      return init_tree(params, rule);
    } else {
      ptree::detail::not_a_tree<Tree>();
      return {};
    }
  }

  /// One step: params <- the kernel's update of params by grads, leaf by leaf in its geometry. Returns what it
  /// did. Either every leaf is stepped and the step count advances, or nothing changes (parameters, state and EMA
  /// bitwise): every check that can fail (the tree against the state, each manifold point's section, the non-finite
  /// policy) runs before the first write. grads has params' structure; each leaf's gradient has the leaf's shape,
  /// except that a frozen leaf's may be empty (it is not read: a 0 x 0 matrix, a default-constructed manifold point),
  /// and so may any leaf's with CommonOptions::missing_gradient = skip (the leaf sits the step out, keeping its own
  /// step count); any other shape throws StructureError naming the leaf and what was expected. With
  /// NonFinitePolicy::skip a non-finite value anywhere in the step (a gradient, its lift, the global norm, the kernel's
  /// new parameters or slots) leaves everything untouched and the report names the leaf and the reason (report.applied
  /// is false); with raise the same throws NonFiniteGradient. A manifold point outside its manifold's domain (an SPD
  /// leaf that is not positive definite) throws std::domain_error naming the leaf under every policy, also before
  /// anything is written.
  template <class Tree>
  StepReport step(Tree& params, const Tree& grads, OptimizerState<Tree>& st) {
    return detail::step_alone(*this, params, grads, st);
  }

  /// The transforms step applies (CommonOptions').
  StepTransforms transforms() const noexcept { return StepTransforms::of(common_); }

  /// The kernel's options, then the section policy of manifold leaves ("section": "recomputed" or "transported");
  /// the state records them followed by the transforms. Not recorded: the schedule (code; the step count is), the
  /// threads (they change no number), the retractions (recorded per leaf).
  Hyperparameters hyperparameters() const {
    Hyperparameters h = Kernel::hyperparameters(options_);
    h.emplace_back("section", section_policy_name(common_.section));
    return h;
  }

  // The step protocol (step_protocol.hpp): step() runs these phases in order; a Partition runs them over its groups.

  /// Checks the state's kind and threads, finds every unit's numbers in params, grads and ema (nullptr: none),
  /// checking the tree against the state, and schedules this step's learning rate. Throws before anything is written.
  template <class Tree>
  void begin_step(Tree& params, const Tree& grads, OptimizerState<Tree>& st, Tree* ema, MissingGradient missing) {
    if (st.optimizer_ != Kernel::kName)
      throw std::invalid_argument(std::string(Kernel::kName) + "::step: the state was made by " + st.optimizer_ +
                                  "::init");
    if (st.threads_ != common_.threads)
      throw std::invalid_argument(std::string(Kernel::kName) + "::step: the state was made for " +
                                  std::to_string(st.threads_) + " threads, this optimizer has " +
                                  std::to_string(common_.threads));
    collect(params, grads, st, ema, missing == MissingGradient::skip);
    st.step_lr_ = options_.lr * (common_.schedule ? common_.schedule(st.step_) : 1.0);
  }

  /// Lifts every manifold gradient (every check of a point happens here) and, with `norm`, returns the squared norm
  /// of the gradients (a manifold leaf's lifted one); 0 without.
  template <class Tree>
  double gradient_squared_norm(OptimizerState<Tree>& st, bool norm) {
    return norm || !st.steppers_.empty() ? prepass(st, norm) : 0.0;
  }

  /// The first leaf, in walk order, whose gradient (or a manifold leaf's lift) holds a non-finite number, and which
  /// of the two; {kNoLeaf, nullptr} when none does.
  template <class Tree>
  std::pair<std::size_t, const char*> first_non_finite(const OptimizerState<Tree>& st) const {
    using T = ptree::scalar_t<Tree>;
    using ConstArray = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
    for (std::size_t k = 0; k < st.units_.size(); ++k) {
      const detail::Unit& u = st.units_[k];
      if (st.leaves_[u.leaf].missing) continue;
      if (!ConstArray(st.pointers_[k].g, u.param_size).allFinite()) return {u.leaf, "the gradient is not finite"};
      if (u.stepper >= 0 && !ConstArray(st.scratch_.data() + u.scratch, u.size).allFinite())
        return {u.leaf, "the gradient's lift to the tangent space is not finite"};
    }
    return {kNoLeaf, nullptr};
  }

  /// The first leaf whose own squared gradient norm overflows double, and the one with the largest.
  template <class Tree>
  NormOverflow norm_overflow(const OptimizerState<Tree>& st) const {
    using T = ptree::scalar_t<Tree>;
    using ConstArray = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
    NormOverflow o;
    for (std::size_t k = 0; k < st.units_.size(); ++k) {
      const detail::Unit& u = st.units_[k];
      if (st.leaves_[u.leaf].missing) continue;
      const T* g = u.stepper >= 0 ? st.scratch_.data() + u.scratch : st.pointers_[k].g;
      const double sq = ConstArray(g, u.size).template cast<double>().square().sum();
      if (!std::isfinite(sq)) {
        o.first = std::min(o.first, u.leaf);
      } else if (sq > o.most) {
        o.most = sq, o.largest = u.leaf;
      }
    }
    return o;
  }

  /// Runs the kernel on copies with the gradients scaled by gscale, writing nothing; the first leaf whose new
  /// parameters, update coordinates or slots are not finite, or kNoLeaf.
  template <class Tree>
  std::size_t verify_step(OptimizerState<Tree>& st, double gscale) {
    using T = ptree::scalar_t<Tree>;
    const std::int64_t t = st.step_ + 1;
    auto member_verify = [&](int member) {
      std::size_t first = detail::kNoUnit;
      for (const detail::WorkItem& w : st.plan_[static_cast<std::size_t>(member)])
        if (!step_item<true>(st, w, t, st.step_lr_, static_cast<T>(gscale), T(0)))
          first = std::min(first, st.units_[w.unit].leaf);
      st.failed_[static_cast<std::size_t>(member)] = first;
    };
    run(member_verify);
    return *std::min_element(st.failed_.begin(), st.failed_.end());
  }

  /// The write pass: every unit stepped with the gradients scaled by gscale and its moving average updated (when
  /// the units have one), then the step count advanced. Arithmetic and retractions only: throws nothing.
  template <class Tree>
  void apply_step(OptimizerState<Tree>& st, double gscale, double ema_decay, bool /*verified*/) {
    using T = ptree::scalar_t<Tree>;
    const std::int64_t t = st.step_ + 1;
    const T decay = static_cast<T>(ema_decay);
    auto member_step = [&](int member) {
      for (const detail::WorkItem& w : st.plan_[static_cast<std::size_t>(member)])
        step_item<false>(st, w, t, st.step_lr_, static_cast<T>(gscale), decay);
    };
    run(member_step);
    st.step_ = t;
    for (auto& leaf : st.leaves_) leaf.skipped += leaf.missing ? 1 : 0;
  }

  /// This step's learning rate, before per-leaf scales (begin_step scheduled it).
  template <class Tree>
  double scheduled_lr(const OptimizerState<Tree>& st) const noexcept {
    return st.step_lr_;
  }

 private:
  template <class Tree>
  OptimizerState<Tree> init_tree(const Tree& params, const LeafRule& rule) const {
    using T = ptree::scalar_t<Tree>;
    static_assert(std::is_floating_point_v<T>, "Optimizer::init: the tree's trainable scalar must be float or double");
    OptimizerState<Tree> st;
    st.optimizer_ = Kernel::kName;
    st.hyperparameters_ = hyperparameters();
    transforms().record(st.hyperparameters_);
    st.slot_names_ = Kernel::slots(options_);
    st.threads_ = common_.threads;

    Eigen::Index coordinates = 0, scratch = 0;
    ptree::for_each_with_path(
        [&](const ptree::Path& path, const auto& leaf) {
          using L = std::remove_cvref_t<decltype(leaf)>;
          const LeafOptions lo = rule ? rule(path) : LeafOptions{};
          detail::LeafRecord rec;
          rec.path = path.str();
          rec.frozen = lo.frozen || lo.excluded;
          rec.external = lo.excluded;
          rec.lr_scale = lo.lr_scale;
          rec.weight_decay = lo.weight_decay;
          rec.first_unit = st.units_.size();
          if (!(lo.lr_scale >= 0))
            throw std::invalid_argument(rec.path + ": lr_scale must be >= 0, got " + std::to_string(lo.lr_scale));
          const double leaf_decay = lo.weight_decay.value_or(default_weight_decay());
          if (!(leaf_decay >= 0))
            throw std::invalid_argument(rec.path + ": weight_decay must be >= 0, got " + std::to_string(leaf_decay));
          if (!rec.frozen) {
            detail::Unit unit;
            unit.leaf = st.leaves_.size();
            unit.lr_scale = lo.lr_scale;
            unit.weight_decay = leaf_decay;
            rec.offset = coordinates;
            if constexpr (detail::manifold_leaf<L>) {
              static_assert(std::is_same_v<typename L::Scalar, T>, "a manifold leaf's scalar must be the tree's");
              rec.manifold = true;
              rec.kind = L::kName;
              if (lo.weight_decay.has_value() && leaf_decay != 0)
                throw std::invalid_argument(rec.path + ": weight decay does not apply to manifold leaves (" +
                                            std::string(L::kName) + "); see docs/optimizers.md");
              unit.weight_decay = 0;
              unit.retraction =
                  detail::leaf_retraction<L>(rec.path, lo.retraction ? lo.retraction : common_.retraction);
              rec.retraction = retraction_name(unit.retraction);
              std::unique_ptr<detail::ManifoldStepper<T>> stepper = detail::make_leaf_stepper(leaf, common_.section);
              unit.stepper = static_cast<int>(st.steppers_.size());
              unit.offset = coordinates;
              unit.size = stepper->tangent_size();
              unit.cost = stepper->step_cost();
              unit.param_size = leaf.value().size();
              unit.rows = leaf.value().rows();
              unit.cols = leaf.value().cols();
              unit.scratch = scratch;
              scratch += 2 * unit.size;
              st.steppers_.push_back(std::move(stepper));
              st.units_.push_back(unit);
              coordinates += unit.size;
              rec.rows = unit.size;
              rec.cols = 1;
            } else {
              std::size_t blocks = 0;
              ptree::detail::for_each_block(
                  [&](const auto& b) {
                    static_assert(std::is_same_v<ptree::detail::block_scalar_t<decltype(b)>, T>,
                                  "Optimizer: every trainable leaf must have the tree's scalar (step a tree of "
                                  "mixed precision as one tree per precision)");
                    if (!detail::block_contiguous(b))
                      throw std::invalid_argument(rec.path + ": a storage block must be contiguous to be stepped");
                    detail::Unit u = unit;
                    u.offset = coordinates;
                    u.size = ptree::detail::block_size(b);
                    u.param_size = u.size;
                    u.rows = ptree::detail::block_rows(b);
                    u.cols = ptree::detail::block_cols(b);
                    st.units_.push_back(u);
                    coordinates += u.size;
                    std::tie(rec.rows, rec.cols) = detail::storage_shape(b);
                    ++blocks;
                  },
                  leaf);
              if (blocks != 1) {
                rec.rows = coordinates - rec.offset;
                rec.cols = 1;
              }
            }
            rec.size = coordinates - rec.offset;
          }
          rec.units = st.units_.size() - rec.first_unit;
          st.leaves_.push_back(std::move(rec));
        },
        params);

    st.coordinates_ = coordinates;
    st.slots_.resize(static_cast<Eigen::Index>(st.slot_names_.size()) * coordinates);
    for (std::size_t s = 0; s < st.slot_names_.size(); ++s)
      st.slots_.segment(static_cast<Eigen::Index>(s) * coordinates, coordinates)
          .setConstant(static_cast<T>(detail::slot_initial_value<Kernel>(options_, s)));
    st.scratch_ = OptimizerState<Tree>::Vector::Zero(scratch);
    st.pointers_.resize(st.units_.size());
    st.failed_.assign(static_cast<std::size_t>(common_.threads), detail::kNoUnit);
    st.errors_.assign(static_cast<std::size_t>(common_.threads), nullptr);
    st.plan_ = detail::make_plan(st.units_, common_.threads);
    st.partial_.assign(static_cast<std::size_t>(common_.threads) * 8, 0.0);
    if (common_.ema_decay > 0) st.ema_.emplace(ptree::cast<T>(params));
    return st;
  }

  double default_weight_decay() const {
    if constexpr (requires { options_.weight_decay; }) {
      return options_.weight_decay;
    } else {
      return 0;
    }
  }

  template <class F>
  void run(F& f) {
    if (pool_) {
      pool_->run(f);
    } else {
      f(0);
    }
  }

  // Finds every unit's numbers in params, grads and the EMA tree, checking each leaf's kind and stored shape
  // against the state's record, and each gradient (and EMA) leaf against its parameter: the walk checks the trees'
  // structure above the leaves and leaves their shapes to this visit, so that a frozen leaf's gradient may be empty.
  // With skip_missing, a leaf whose gradient is empty (and whose parameter is not) is marked to sit the step out.
  // O(leaves), no allocation unless it throws.
  template <class Tree>
  static void collect(Tree& params, const Tree& grads, OptimizerState<Tree>& st, Tree* ema, bool skip_missing) {
    std::size_t leaf = 0;
    auto visit = [&](auto& p, const auto& g, auto&... e) {
      using L = std::remove_cvref_t<decltype(p)>;
      if (leaf >= st.leaves_.size())
        throw StructureError("Optimizer::step: the tree has more leaves than the state (" +
                             std::to_string(st.leaves_.size()) + ")");
      detail::LeafRecord& rec = st.leaves_[leaf++];
      rec.missing = false;
      if (rec.frozen) {
        // Another optimizer's leaf (LeafOptions::excluded) is checked by that optimizer.
        if (!rec.external) detail::check_frozen_gradient(rec.path, p, g);
        return;
      }
      if (skip_missing && detail::holds_no_number(g) && !detail::holds_no_number(p)) {
        rec.missing = true;
        return;
      }
      if constexpr (detail::manifold_leaf<L>) {
        detail::Unit& u = st.units_[rec.first_unit];
        const Eigen::Index rows = p.value().rows(), cols = p.value().cols();
        if (!rec.manifold || std::string_view(rec.kind) != L::kName || rows != u.rows || cols != u.cols)
          throw StructureError(rec.path + ": the leaf is a " + detail::shape_string(rows, cols) + " " + L::kName +
                               " point, the state was made for " +
                               (rec.manifold ? "a " + detail::shape_string(u.rows, u.cols) + " " + rec.kind + " point"
                                             : "a Euclidean leaf"));
        detail::check_like_leaf(rec.path, "gradient", 0, false, g.value(), rows, cols);
        (detail::check_like_leaf(rec.path, "moving average", 0, false, e.value(), rows, cols), ...);
        st.pointers_[rec.first_unit] = {p.value().data(), g.value().data(), detail::ema_data(e.value()...)};
      } else {
        if (rec.manifold)
          throw StructureError(rec.path + ": the leaf is Euclidean, the state was made for a " +
                               detail::shape_string(st.units_[rec.first_unit].rows, st.units_[rec.first_unit].cols) +
                               " " + rec.kind + " point");
        std::size_t unit = rec.first_unit;
        ptree::detail::for_each_block(
            [&](auto& bp, const auto& bg, auto&... be) {
              const Eigen::Index rows = ptree::detail::block_rows(bp), cols = ptree::detail::block_cols(bp);
              if (unit >= rec.first_unit + rec.units)
                throw StructureError(rec.path + ": the leaf has more storage blocks than the state's " +
                                     std::to_string(rec.units));
              const detail::Unit& u = st.units_[unit];
              const std::size_t block = unit - rec.first_unit;
              if (rows != u.rows || cols != u.cols)
                throw StructureError(rec.path + ": the leaf's storage" +
                                     (rec.units > 1 ? " block " + std::to_string(block) : "") + " is " +
                                     detail::shape_string(rows, cols) + ", the state was made for " +
                                     detail::shape_string(u.rows, u.cols));
              detail::check_like_leaf(rec.path, "gradient", block, rec.units > 1, bg, rows, cols);
              (detail::check_like_leaf(rec.path, "moving average", block, rec.units > 1, be, rows, cols), ...);
              st.pointers_[unit++] = {detail::block_data(bp), detail::block_data(bg), detail::ema_data(be...)};
            },
            p, g, e...);
        if (unit != rec.first_unit + rec.units)
          throw StructureError(rec.path + ": the leaf has " + std::to_string(unit - rec.first_unit) +
                               " storage blocks, the state " + std::to_string(rec.units));
      }
    };
    detail::visit_leaves(visit, params, grads, ema);
    if (leaf != st.leaves_.size())
      throw StructureError("Optimizer::step: the tree has " + std::to_string(leaf) + " leaves, the state " +
                           std::to_string(st.leaves_.size()));
  }

  // Lifts every manifold gradient into its unit's scratch (every check of the point, such as SPD's factorization,
  // happens here, before any write) and, with `norm`, returns the squared global norm of the gradients (a manifold
  // leaf's lifted one), in double. A lift that throws is rethrown after the pass naming its leaf, as
  // std::domain_error when it was one.
  template <class Tree>
  double prepass(OptimizerState<Tree>& st, bool norm) {
    using T = ptree::scalar_t<Tree>;
    using ConstArray = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
    auto member_pass = [&](int member) {
      const auto m = static_cast<std::size_t>(member);
      double acc = 0;
      st.failed_[m] = detail::kNoUnit;
      for (const detail::WorkItem& w : st.plan_[m]) {
        const detail::Unit& u = st.units_[w.unit];
        const auto& ptr = st.pointers_[w.unit];
        if (st.leaves_[u.leaf].missing) continue;
        if (u.stepper >= 0) {
          T* gc = st.scratch_.data() + u.scratch;
          try {
            st.steppers_[static_cast<std::size_t>(u.stepper)]->lift(ptr.p, ptr.g, gc);
          } catch (...) {
            if (st.failed_[m] == detail::kNoUnit || w.unit < st.failed_[m]) {
              st.failed_[m] = w.unit;
              st.errors_[m] = std::current_exception();
            }
            continue;
          }
          if (norm) acc += ConstArray(gc, u.size).template cast<double>().square().sum();
        } else if (norm) {
          acc += ConstArray(ptr.g + w.begin, w.end - w.begin).template cast<double>().square().sum();
        }
      }
      st.partial_[m * 8] = acc;
    };
    run(member_pass);
    std::size_t failed = detail::kNoUnit, by = 0;
    for (std::size_t m = 0; m < st.failed_.size(); ++m)
      if (st.failed_[m] < failed) failed = st.failed_[m], by = m;
    if (failed != detail::kNoUnit) {
      std::exception_ptr error = st.errors_[by];
      std::fill(st.errors_.begin(), st.errors_.end(), nullptr);
      std::fill(st.failed_.begin(), st.failed_.end(), detail::kNoUnit);
      const std::string& path = st.leaves_[st.units_[failed].leaf].path;
      try {
        std::rethrow_exception(error);
      } catch (const std::domain_error& e) {
        throw std::domain_error(path + ": " + e.what() + "; nothing was changed");
      } catch (const std::exception& e) {
        throw std::runtime_error(path + ": " + e.what() + "; nothing was changed");
      }
    }
    double total = 0;
    for (int m = 0; m < common_.threads; ++m) total += st.partial_[static_cast<std::size_t>(m) * 8];
    return total;
  }

  // One work item, at the state's step t (its leaf's own count is t less the steps it sat out). kVerify: runs the
  // kernel on copies and returns whether every number it would write (the new parameters or manifold update
  // coordinates, the new slots) is finite, writing nothing. Otherwise steps the item from the gradient (a manifold
  // leaf's lift, which the prepass left in its scratch) and returns true. A leaf sitting the step out is not touched.
  template <bool kVerify, class Tree, class T>
  bool step_item(OptimizerState<Tree>& st, const detail::WorkItem& w, std::int64_t t, double lr, T gscale, T decay) {
    using Array = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
    using ConstArray = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
    const detail::Unit& u = st.units_[w.unit];
    const detail::LeafRecord& leaf = st.leaves_[u.leaf];
    if (leaf.missing) return true;
    const auto& ptr = st.pointers_[w.unit];
    const auto coeffs =
        Kernel::template coefficients<T>(options_, LeafStep{t - leaf.skipped, lr * u.lr_scale, u.weight_decay});
    const std::size_t nslots = st.slot_names_.size();
    std::array<T*, kMaxSlots> slots{};
    for (std::size_t s = 0; s < nslots; ++s)
      slots[s] = st.slots_.data() + static_cast<Eigen::Index>(s) * st.coordinates_ + u.offset + w.begin;

    if (u.stepper < 0)
      return run_chunks<kVerify>(coeffs, ptr.p + w.begin, ptr.g + w.begin, slots, nslots, w.end - w.begin, gscale,
                                 ptr.ema != nullptr ? ptr.ema + w.begin : static_cast<T*>(nullptr), decay, false);
    T* gc = st.scratch_.data() + u.scratch;
    T* delta = gc + u.size;
    if constexpr (kVerify) {
      return run_chunks<true>(coeffs, delta, static_cast<const T*>(gc), slots, nslots, u.size, gscale,
                              static_cast<T*>(nullptr), decay, true);
    } else {
      auto& stepper = *st.steppers_[static_cast<std::size_t>(u.stepper)];
      Array(delta, u.size).setZero();
      run_chunks<false>(coeffs, delta, static_cast<const T*>(gc), slots, nslots, u.size, gscale,
                        static_cast<T*>(nullptr), decay, false);
      stepper.retract(ptr.p, delta, u.retraction);
      if (ptr.ema != nullptr) {
        Array e(ptr.ema, u.param_size);
        e = decay * e + (T(1) - decay) * ConstArray(ptr.p, u.param_size);
      }
      return true;
    }
  }

  // The kernel over n entries, chunk by chunk; the gradient chunk is scaled into a stack buffer when clipping.
  // kVerify: p and the slots are copied chunk by chunk to stack buffers (p as zeros with zero_p: a manifold
  // update starts from zero), the kernel runs on the copies, and the result is whether all it wrote is finite.
  template <bool kVerify, class C, class T>
  static bool run_chunks(const C& coeffs, T* p, const T* g, std::array<T*, kMaxSlots> slots, std::size_t nslots,
                         Eigen::Index n, T gscale, T* ema, T decay, bool zero_p) {
    using Array = typename Chunk<T>::Array;
    using ConstArray = typename Chunk<T>::ConstArray;
    constexpr Eigen::Index kLen = detail::kChunkEntries<T>;
    constexpr bool kHasAvx2 = requires(const C& c, Chunk<T>& x) {
      { Kernel::update_avx2(c, x) } -> std::same_as<bool>;
    };
    const bool avx2 = kHasAvx2 && kernel_path() == KernelPath::avx2;
    alignas(64) T scaled[kLen];
    [[maybe_unused]] alignas(64) T copies[kVerify ? 1 + kMaxSlots : 1][kVerify ? kLen : 1];
    for (Eigen::Index i = 0; i < n; i += kLen) {
      const Eigen::Index len = std::min(kLen, n - i);
      const T* gi = g + i;
      if (gscale != T(1)) {
        Array(scaled, len) = gscale * ConstArray(gi, len);
        gi = scaled;
      }
      T* pi = p + i;
      std::array<T*, kMaxSlots> si{};
      for (std::size_t s = 0; s < nslots; ++s) si[s] = slots[s] + i;
      if constexpr (kVerify) {
        if (zero_p) {
          Array(copies[0], len).setZero();
        } else {
          Array(copies[0], len) = ConstArray(pi, len);
        }
        pi = copies[0];
        for (std::size_t s = 0; s < nslots; ++s) {
          Array(copies[1 + s], len) = ConstArray(si[s], len);
          si[s] = copies[1 + s];
        }
      }
      Chunk<T> x{Array(pi, len),
                 ConstArray(gi, len),
                 {Array(nslots > 0 ? si[0] : nullptr, nslots > 0 ? len : 0),
                  Array(nslots > 1 ? si[1] : nullptr, nslots > 1 ? len : 0),
                  Array(nslots > 2 ? si[2] : nullptr, nslots > 2 ? len : 0),
                  Array(nslots > 3 ? si[3] : nullptr, nslots > 3 ? len : 0)}};
      bool done = false;
      if constexpr (kHasAvx2) done = avx2 && Kernel::update_avx2(coeffs, x);
      if (!done) Kernel::update(coeffs, x);
      if constexpr (kVerify) {
        // x * 0 is 0 for a finite x and NaN otherwise: a vectorized sum, where allFinite tests entry by entry.
        T probe = (x.p * T(0)).sum();
        for (std::size_t s = 0; s < nslots; ++s) probe += (x.s[s] * T(0)).sum();
        if (probe != T(0)) return false;
      } else if (ema != nullptr) {
        Array e(ema + i, len);
        e = decay * e + (T(1) - decay) * x.p;
      }
    }
    return true;
  }

  Options options_;
  CommonOptions common_;
  std::unique_ptr<detail::ThreadPool> pool_;
};

using SGD = Optimizer<SGDKernel>;
using Adam = Optimizer<AdamKernel>;
using AdamW = Optimizer<AdamWKernel>;
using RMSprop = Optimizer<RMSpropKernel>;
using Adagrad = Optimizer<AdagradKernel>;

/// The moving average of the parameters as a tree, with manifold leaves projected onto their manifold (the
/// extrinsic mean), from the state of any optimizer that keeps one (OptimizerState, MuonState, PartitionState). Throws
/// std::logic_error when the state keeps no average (ema_decay was 0).
template <class State>
auto ema_params(const State& state) {
  using Tree = std::remove_cvref_t<decltype(*state.ema())>;
  const Tree* ema = state.ema();
  if (ema == nullptr) throw std::logic_error("ema_params: the optimizer was made without ema_decay");
  Tree out = ptree::cast<ptree::scalar_t<Tree>>(*ema);
  ptree::for_each(
      [](auto& leaf) {
        if constexpr (detail::manifold_leaf<std::remove_cvref_t<decltype(leaf)>>) detail::project_leaf(leaf);
      },
      out);
  return out;
}

}  // namespace geomopt
