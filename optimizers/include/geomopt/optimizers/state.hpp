// OptimizerState: everything an optimizer keeps for one parameter tree between steps.
//
// Layout: the coordinates of every non-frozen leaf are numbered in walk order (a Euclidean or packed leaf has one
// coordinate per stored number, a manifold leaf one per tangent dimension), and each of the kernel's state arrays
// ("exp_avg", "exp_avg_sq", ...) is one contiguous vector over all of them, so a slot of a tree of Euclidean leaves
// is laid out like flatten(params). Frozen leaves have no coordinates. Beside the slots the state holds the step
// count, the hyperparameters, a transported section per manifold leaf when that policy is chosen, and, with EMA on,
// a deep copy of the parameter tree holding the average.
//
// Invariants: nbytes() is the exact size of all of that state; the per-step scratch (pointers, the lifted gradients
// of manifold leaves, the steppers' workspaces) is allocated at init and not counted; stepping never allocates.
#pragma once

#include <Eigen/Core>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "geomopt/manifolds/common.hpp"
#include "geomopt/optimizers/detail/manifold_stepper.hpp"
#include "geomopt/optimizers/kernels.hpp"
#include "geomopt/ptree.hpp"

namespace geomopt {

template <class Kernel>
class Optimizer;

namespace detail {

// A leaf of the tree, frozen or not, in walk order.
struct LeafRecord {
  std::string path;
  bool frozen = false;
  // Frozen here because another optimizer steps it (LeafOptions::excluded), which checks its gradient.
  bool external = false;
  // The rule's options, as for_each_leaf_option reports them: lr_scale, the weight decay the rule set (unset: the
  // optimizer's), and for a manifold leaf that is not frozen the name of the retraction its steps use.
  double lr_scale = 1;
  std::optional<double> weight_decay{};
  const char* retraction = nullptr;
  bool manifold = false;
  std::int64_t skipped = 0;    // steps of the state this leaf sat out (MissingGradient::skip): its own count is the
                               // state's minus this
  bool missing = false;        // the current step's gradient of this leaf is empty and the leaf sits the step out
  const char* kind = nullptr;  // manifold: the manifold's name (L::kName), checked with the unit's shape each step
  Eigen::Index offset = 0;     // first coordinate
  Eigen::Index size = 0;       // coordinates
  Eigen::Index rows = 0, cols = 0;  // the shape a slot is shown in: the storage order's column-major shape for
                                    // one-block Euclidean leaves (a row-major leaf's transpose)
  std::size_t first_unit = 0, units = 0;
};

// A stretch of coordinates stepped as one: a storage block of a Euclidean leaf, or a whole manifold leaf.
struct Unit {
  std::size_t leaf = 0;
  Eigen::Index offset = 0;          // first coordinate
  Eigen::Index size = 0;            // coordinates
  Eigen::Index param_size = 0;      // numbers of storage (the EMA's length): size, except for manifold leaves
  Eigen::Index rows = 0, cols = 0;  // the stored shape at init (block, or the manifold point), checked each step
  double lr_scale = 1;
  double weight_decay = 0;
  Retraction retraction = Retraction::cayley;  // manifold: resolved at init (detail::leaf_retraction)
  double cost = 0;                             // manifold: its stepper's step_cost(), for the threads' plan
  int stepper = -1;                            // index of its ManifoldStepper, or -1 for a Euclidean block
  Eigen::Index scratch = 0;  // manifold: first entry of its lifted gradient and update in the scratch vector
};

// The scalar of a state: the tree's; double for a type that is no tree, where the entry point's static_assert says
// why, so that naming the state's type fails on nothing else.
template <class Tree, bool = ptree::tree<Tree>>
struct StateScalar {
  using type = ptree::scalar_t<Tree>;
};
template <class Tree>
struct StateScalar<Tree, false> {
  using type = double;
};

// Where a unit's numbers are at the current step.
template <class T>
struct UnitPointers {
  T* p = nullptr;
  const T* g = nullptr;
  T* ema = nullptr;
};

// A piece of work for one thread: entries [begin, end) of a unit (the whole of it for a manifold leaf).
struct WorkItem {
  std::size_t unit = 0;
  Eigen::Index begin = 0, end = 0;
};

}  // namespace detail

template <class Tree>
class OptimizerState {
 public:
  using Scalar = typename detail::StateScalar<Tree>::type;
  using Vector = Eigen::Matrix<Scalar, Eigen::Dynamic, 1>;
  using MatrixMap = Eigen::Map<Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic>>;
  using ConstMatrixMap = Eigen::Map<const Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic>>;

  OptimizerState() = default;
  OptimizerState(OptimizerState&&) noexcept = default;
  OptimizerState& operator=(OptimizerState&&) noexcept = default;

  /// Steps taken (skipped steps are not counted).
  std::int64_t step_count() const noexcept { return step_; }
  /// Sets the step count, for restoring a checkpoint; every leaf's own count becomes t too.
  void set_step_count(std::int64_t t) {
    step_ = t;
    for (auto& leaf : leaves_) leaf.skipped = 0;
  }
  /// The steps leaf i (walk order) has taken: the state's count less the steps it sat out for want of a gradient
  /// (CommonOptions::missing_gradient); 0 for a frozen leaf. Its kernel sees this count as t.
  std::int64_t leaf_step_count(std::size_t i) const {
    const auto& leaf = leaves_.at(i);
    return leaf.frozen ? 0 : step_ - leaf.skipped;
  }
  /// Sets leaf i's own step count, for restoring a checkpoint: std::invalid_argument unless the leaf is not frozen
  /// and 0 <= t <= step_count().
  void set_leaf_step_count(std::size_t i, std::int64_t t) {
    auto& leaf = leaves_.at(i);
    if (leaf.frozen || t < 0 || t > step_)
      throw std::invalid_argument(leaf.path + ": a leaf's step count must be from 0 to the state's " +
                                  std::to_string(step_) + (leaf.frozen ? " and the leaf not frozen" : "") + ", got " +
                                  std::to_string(t));
    leaf.skipped = step_ - t;
  }
  /// Changes leaf i's lr_scale between steps (a per-group learning rate that a schedule moves, as torch's
  /// param_groups do), by LeafOptions' rules: std::invalid_argument naming the leaf for a frozen leaf or a value that
  /// is not >= 0, and nothing changes then. A checkpoint records the value in force.
  void set_leaf_lr_scale(std::size_t i, double lr_scale) {
    auto& leaf = changeable_leaf(i, "lr_scale", lr_scale);
    leaf.lr_scale = lr_scale;
    for (std::size_t u = leaf.first_unit; u < leaf.first_unit + leaf.units; ++u) units_[u].lr_scale = lr_scale;
  }
  /// Changes leaf i's weight decay between steps, likewise; a manifold leaf's must stay 0.
  void set_leaf_weight_decay(std::size_t i, double weight_decay) {
    auto& leaf = changeable_leaf(i, "weight_decay", weight_decay);
    if (leaf.manifold && weight_decay != 0)
      throw std::invalid_argument(leaf.path + ": weight decay does not apply to manifold leaves (" + leaf.kind + ")");
    leaf.weight_decay = weight_decay;
    for (std::size_t u = leaf.first_unit; u < leaf.first_unit + leaf.units; ++u) units_[u].weight_decay = weight_decay;
  }
  /// f(const std::string& path, std::int64_t count) for each leaf whose own step count differs from the state's, in
  /// walk order: what a checkpoint records beside the step count.
  template <class F>
  void for_each_leaf_step(F&& f) const {
    for (const auto& leaf : leaves_)
      if (!leaf.frozen && leaf.skipped != 0) f(leaf.path, step_ - leaf.skipped);
  }
  /// The kernel that made this state ("Adam", ...).
  std::string_view optimizer() const noexcept { return optimizer_; }
  const Hyperparameters& hyperparameters() const noexcept { return hyperparameters_; }
  /// The names of the per-coordinate state arrays, in order.
  std::span<const char* const> slot_names() const noexcept { return slot_names_; }

  /// Bytes of state: the slot arrays, the transported sections and the EMA copy.
  std::size_t nbytes() const noexcept {
    std::size_t bytes = static_cast<std::size_t>(slots_.size()) * sizeof(Scalar);
    for (const auto& s : steppers_)
      bytes += static_cast<std::size_t>(s->section_rows() * s->section_cols()) * sizeof(Scalar);
    if (ema_) bytes += static_cast<std::size_t>(ptree::count(*ema_)) * sizeof(Scalar);
    return bytes;
  }
  /// Bytes of per-step scratch held (lifted gradients and the steppers' workspaces): not state.
  std::size_t workspace_bytes() const noexcept {
    std::size_t bytes = static_cast<std::size_t>(scratch_.size()) * sizeof(Scalar);
    for (const auto& s : steppers_) bytes += s->workspace_bytes();
    return bytes;
  }

  /// Every leaf's path, in walk order, frozen ones included.
  std::size_t leaf_count() const noexcept { return leaves_.size(); }
  const std::string& leaf_path(std::size_t i) const { return leaves_.at(i).path; }
  bool leaf_frozen(std::size_t i) const { return leaves_.at(i).frozen; }
  /// Coordinates in all (the length of each slot array).
  Eigen::Index coordinates() const noexcept { return coordinates_; }

  /// f(const std::string& path, std::string_view name, MatrixMap data) for every array of state, by leaf path in
  /// walk order: each slot of each non-frozen leaf (shaped like the leaf for a one-block Euclidean leaf, a column of
  /// tangent coordinates for a manifold leaf), then "section" for a transported section (N x N). Frozen leaves have
  /// none. Writing through the maps restores a checkpoint.
  template <class F>
  void for_each_slot(F&& f) {
    visit_slots(*this, f);
  }
  template <class F>
  void for_each_slot(F&& f) const {
    visit_slots(*this, f);
  }

  /// f(const std::string& path, std::string_view name, value) for each per-leaf option that changes a trajectory, by
  /// leaf in walk order, as a checkpoint records and checks them: "frozen" (a bool) for every leaf; for a leaf that
  /// is not frozen "lr_scale" (a double), "weight_decay" (a double) when the rule set one (otherwise the optimizer's
  /// weight_decay, a hyperparameter, applies), and for a manifold leaf "retraction" (a const char*: the retraction
  /// its steps use, the rule's or CommonOptions' or the manifold's default). A frozen leaf's other options change
  /// nothing, so they are not reported.
  template <class F>
  void for_each_leaf_option(F&& f) const {
    for (const auto& leaf : leaves_) visit_leaf_options(leaf, f);
  }
  /// The same for leaf i alone (for a Partition, whose state visits each leaf through its group's).
  template <class F>
  void for_each_option_of_leaf(std::size_t i, F&& f) const {
    visit_leaf_options(leaves_.at(i), f);
  }
  /// for_each_slot's arrays of leaf i alone.
  template <class F>
  void for_each_slot_of_leaf(std::size_t i, F&& f) {
    visit_leaf_slots(*this, leaves_.at(i), f);
  }
  template <class F>
  void for_each_slot_of_leaf(std::size_t i, F&& f) const {
    visit_leaf_slots(*this, leaves_.at(i), f);
  }

  /// The moving average of the parameters (raw: a manifold leaf holds the average of its points, off the
  /// manifold); nullptr when EMA is off. ema_params() gives it with manifold leaves projected.
  const Tree* ema() const noexcept { return ema_ ? &*ema_ : nullptr; }
  Tree* ema() noexcept { return ema_ ? &*ema_ : nullptr; }

 private:
  template <class Kernel>
  friend class Optimizer;

  detail::LeafRecord& changeable_leaf(std::size_t i, const char* what, double value) {
    auto& leaf = leaves_.at(i);
    if (leaf.frozen || !(value >= 0))
      throw std::invalid_argument(leaf.path + ": " + what + (leaf.frozen ? " of a frozen leaf cannot be set" : "") +
                                  (value >= 0 ? "" : " must be >= 0, got " + std::to_string(value)));
    return leaf;
  }

  template <class F>
  static void visit_leaf_options(const detail::LeafRecord& leaf, F& f) {
    f(leaf.path, std::string_view("frozen"), leaf.frozen);
    if (leaf.frozen) return;
    f(leaf.path, std::string_view("lr_scale"), leaf.lr_scale);
    if (leaf.weight_decay) f(leaf.path, std::string_view("weight_decay"), *leaf.weight_decay);
    if (leaf.retraction != nullptr) f(leaf.path, std::string_view("retraction"), leaf.retraction);
  }

  template <class Self, class F>
  static void visit_slots(Self& self, F& f) {
    for (const auto& leaf : self.leaves_) visit_leaf_slots(self, leaf, f);
  }

  // The arrays of one leaf (none when frozen): each slot, then a transported section.
  template <class Self, class F>
  static void visit_leaf_slots(Self& self, const detail::LeafRecord& leaf, F& f) {
    using Map = std::conditional_t<std::is_const_v<Self>, ConstMatrixMap, MatrixMap>;
    if (leaf.frozen) return;
    for (std::size_t s = 0; s < self.slot_names_.size(); ++s) {
      auto* data = self.slots_.data() + static_cast<Eigen::Index>(s) * self.coordinates_ + leaf.offset;
      f(leaf.path, std::string_view(self.slot_names_[s]), Map(data, leaf.rows, leaf.cols));
    }
    if (leaf.manifold) {
      auto& stepper = *self.steppers_[static_cast<std::size_t>(self.units_[leaf.first_unit].stepper)];
      if (stepper.section_data() != nullptr)
        f(leaf.path, std::string_view("section"),
          Map(stepper.section_data(), stepper.section_rows(), stepper.section_cols()));
    }
  }

  std::string optimizer_;
  Hyperparameters hyperparameters_;
  std::span<const char* const> slot_names_;
  std::int64_t step_ = 0;
  double step_lr_ = 0;  // the learning rate of the step under way, scheduled by begin_step
  Eigen::Index coordinates_ = 0;
  int threads_ = 1;

  std::vector<detail::LeafRecord> leaves_;
  std::vector<detail::Unit> units_;
  std::vector<detail::UnitPointers<Scalar>> pointers_;
  std::vector<std::unique_ptr<detail::ManifoldStepper<Scalar>>> steppers_;
  std::vector<std::size_t> failed_;                  // per thread: the first unit a pass refused, or -1
  std::vector<std::exception_ptr> errors_;           // per thread: what a lift threw
  std::vector<std::vector<detail::WorkItem>> plan_;  // per thread
  std::vector<double> partial_;                      // per thread, 8 apart (no false sharing)
  Vector slots_;
  Vector scratch_;
  std::optional<Tree> ema_;
};

}  // namespace geomopt
