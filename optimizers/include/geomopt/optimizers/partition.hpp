// Partition: the leaves of one tree split into named groups by rules on each leaf's path, kind and shape, each group
// stepped by its own optimizer, with one state.
//
//   geomopt::Partition opt({.clip_norm = 1.0},
//                          geomopt::group("muon", geomopt::Muon({.lr = 0.02}), attention_matrices),
//                          geomopt::group("frames", geomopt::Adam({.lr = 1e-3}), geomopt::kind_is("Stiefel")),
//                          geomopt::group("rest", geomopt::AdamW({.lr = 3e-4})));   // no rule: every other leaf
//   auto state = opt.init(params);                // or opt.init(params, rule): LeafOptions for every group's leaves
//   opt.step(params, grads, state);
//
// A group's rule is a predicate on LeafInfo; one group may have none and takes the leaves no rule claims. Every leaf
// belongs to exactly one group: a leaf no group takes, or that two rules claim, makes init throw
// std::invalid_argument naming its path and the groups. Each group's optimizer keeps its own state of the whole tree
// with the other groups' leaves excluded (LeafOptions::excluded), its own learning rate, schedule, geometry and
// threads.
//
// Invariants: a step is one step of the step protocol (step_protocol.hpp) over the groups in order: the tree is
// checked by every group before any group writes, the partition's transforms (StepTransforms: clipping by the global
// norm over every group's leaves, the non-finite policy, the moving average, missing gradients) cover all groups
// (the groups' own must be off), and a step that is refused or throws leaves every group's leaves and state
// untouched. Without transforms, each group steps exactly as its optimizer stepping its leaves alone would, bitwise.
// The state is walked by leaf in walk order (PartitionState), so a checkpoint names each array by its leaf's path.
// A Partition is itself a member of the step protocol, so a partition can be a group of another.
#pragma once

#include <Eigen/Core>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "geomopt/optimizers/detail/manifold_leaf.hpp"
#include "geomopt/optimizers/optimizer.hpp"
#include "geomopt/optimizers/options.hpp"
#include "geomopt/optimizers/state.hpp"
#include "geomopt/optimizers/step_protocol.hpp"
#include "geomopt/ptree.hpp"

namespace geomopt {

/// What a group's rule sees of a leaf.
struct LeafInfo {
  const ptree::Path& path;
  /// The manifold's name (M::kName: "Stiefel", "Sphere", ...) for a manifold leaf, "Euclidean" otherwise.
  std::string_view kind;
  /// The shape of a one-block leaf's storage read column-major (a row-major matrix's transpose), or of a manifold
  /// point; 0 x 0 for a leaf of several blocks.
  Eigen::Index rows = 0, cols = 0;
  std::size_t blocks = 1;  ///< storage blocks (1 for a manifold leaf)
  bool contiguous = true;  ///< every block is one dense run of memory
  LeafOptions options{};   ///< what init's LeafRule gives this leaf

  bool manifold() const noexcept { return kind != "Euclidean"; }
  /// A Euclidean leaf stored as one contiguous matrix of at least 2 x 2: what Muon steps.
  bool matrix() const noexcept { return !manifold() && blocks == 1 && contiguous && rows >= 2 && cols >= 2; }
};

/// A group's rule: whether the leaf is the group's.
using GroupRule = std::function<bool(const LeafInfo&)>;

/// Rules by a leaf's kind, and by a piece of its path.
inline GroupRule kind_is(std::string kind) {
  return [kind = std::move(kind)](const LeafInfo& l) { return l.kind == kind; };
}
inline GroupRule path_contains(std::string piece) {
  return [piece = std::move(piece)](const LeafInfo& l) { return l.path.str().find(piece) != std::string::npos; };
}

/// A named group: its optimizer and its rule (empty: the leaves no other group's rule takes).
template <class Opt>
struct Group {
  std::string name;
  Opt optimizer;
  GroupRule rule{};
};

template <class Opt>
Group<std::remove_cvref_t<Opt>> group(std::string name, Opt&& optimizer, GroupRule rule = {}) {
  return {std::move(name), std::forward<Opt>(optimizer), std::move(rule)};
}

namespace detail {

// The state an optimizer of type Opt keeps for Tree.
template <class Opt, class Tree>
using state_of = std::remove_cvref_t<decltype(std::declval<const Opt&>().init(std::declval<const Tree&>(),
                                                                              std::declval<const LeafRule&>()))>;

// f(std::get<index>(t)), index < the tuple's size.
template <std::size_t I = 0, class Tuple, class F>
decltype(auto) with_element(Tuple& t, std::size_t index, F&& f) {
  if constexpr (I + 1 == std::tuple_size_v<std::remove_const_t<Tuple>>) {
    return f(std::get<I>(t));
  } else {
    if (index == I) return f(std::get<I>(t));
    return with_element<I + 1>(t, index, f);
  }
}

}  // namespace detail

template <class... Opts>
class Partition;

/// The state of a Partition for one tree: each group's state (every one over the whole tree, the other groups'
/// leaves excluded), which group owns each leaf, the step count and the moving average. Saved and restored by
/// geomopt::io like an OptimizerState: for_each_slot and for_each_leaf_option visit every leaf in walk order through
/// its group's state; the hyperparameters are each group's as "<group>.<optimizer>.<name>".
template <class Tree, class... States>
class PartitionState {
 public:
  using Scalar = typename detail::StateScalar<Tree>::type;

  PartitionState() = default;
  PartitionState(PartitionState&&) noexcept = default;
  PartitionState& operator=(PartitionState&&) noexcept = default;

  std::int64_t step_count() const noexcept { return step_; }
  /// Sets the step count, for restoring a checkpoint; every group's and every leaf's count becomes t too.
  void set_step_count(std::int64_t t) {
    step_ = t;
    std::apply([t](auto&... s) { (s.set_step_count(t), ...); }, states_);
  }
  /// Leaf i's own step count (its group's state's; see OptimizerState::leaf_step_count).
  std::int64_t leaf_step_count(std::size_t i) const {
    return owner(i, [i](const auto& s) { return s.leaf_step_count(i); });
  }
  void set_leaf_step_count(std::size_t i, std::int64_t t) {
    owner(i, [i, t](auto& s) { s.set_leaf_step_count(i, t); });
  }
  template <class F>
  void for_each_leaf_step(F&& f) const {
    for (std::size_t i = 0; i < owner_.size(); ++i)
      if (!leaf_frozen(i) && leaf_step_count(i) != step_) f(leaf_path(i), leaf_step_count(i));
  }
  /// Changes leaf i's lr_scale or weight decay between steps, by its group's rules.
  void set_leaf_lr_scale(std::size_t i, double lr_scale) {
    owner(i, [i, lr_scale](auto& s) { s.set_leaf_lr_scale(i, lr_scale); });
  }
  void set_leaf_weight_decay(std::size_t i, double weight_decay) {
    owner(i, [i, weight_decay](auto& s) { s.set_leaf_weight_decay(i, weight_decay); });
  }

  std::string_view optimizer() const noexcept { return name_; }
  const Hyperparameters& hyperparameters() const noexcept { return hyperparameters_; }

  /// Bytes of state: every group's, and the moving average.
  std::size_t nbytes() const noexcept {
    std::size_t b = std::apply([](const auto&... s) { return (std::size_t{0} + ... + s.nbytes()); }, states_);
    if (ema_) b += static_cast<std::size_t>(ptree::count(*ema_)) * sizeof(Scalar);
    return b;
  }
  std::size_t workspace_bytes() const noexcept {
    return std::apply([](const auto&... s) { return (std::size_t{0} + ... + s.workspace_bytes()); }, states_);
  }

  std::size_t leaf_count() const noexcept { return owner_.size(); }
  const std::string& leaf_path(std::size_t i) const {
    return owner(i, [i](const auto& s) -> const std::string& { return s.leaf_path(i); });
  }
  bool leaf_frozen(std::size_t i) const {
    return owner(i, [i](const auto& s) { return s.leaf_frozen(i); });
  }
  /// The index of leaf i's group, in the order the partition was given its groups, and the group's name.
  std::size_t group_of_leaf(std::size_t i) const { return owner_.at(i); }
  const std::string& group_name(std::size_t g) const { return names_.at(g); }
  static constexpr std::size_t group_count() noexcept { return sizeof...(States); }
  /// Group G's state.
  template <std::size_t G>
  const auto& group_state() const noexcept {
    return std::get<G>(states_);
  }
  template <std::size_t G>
  auto& group_state() noexcept {
    return std::get<G>(states_);
  }

  template <class F>
  void for_each_leaf_option(F&& f) const {
    for (std::size_t i = 0; i < owner_.size(); ++i) owner(i, [&](const auto& s) { s.for_each_option_of_leaf(i, f); });
  }
  template <class F>
  void for_each_slot(F&& f) {
    for (std::size_t i = 0; i < owner_.size(); ++i) owner(i, [&](auto& s) { s.for_each_slot_of_leaf(i, f); });
  }
  template <class F>
  void for_each_slot(F&& f) const {
    for (std::size_t i = 0; i < owner_.size(); ++i) owner(i, [&](const auto& s) { s.for_each_slot_of_leaf(i, f); });
  }
  /// for_each_slot and for_each_leaf_option of leaf i alone, so that a partition's state can be a group's.
  template <class F>
  void for_each_slot_of_leaf(std::size_t i, F&& f) {
    owner(i, [&](auto& s) { s.for_each_slot_of_leaf(i, f); });
  }
  template <class F>
  void for_each_slot_of_leaf(std::size_t i, F&& f) const {
    owner(i, [&](const auto& s) { s.for_each_slot_of_leaf(i, f); });
  }
  template <class F>
  void for_each_option_of_leaf(std::size_t i, F&& f) const {
    owner(i, [&](const auto& s) { s.for_each_option_of_leaf(i, f); });
  }

  const Tree* ema() const noexcept { return ema_ ? &*ema_ : nullptr; }
  Tree* ema() noexcept { return ema_ ? &*ema_ : nullptr; }

 protected:
  template <class F>
  decltype(auto) owner(std::size_t i, F&& f) {
    return detail::with_element(states_, owner_.at(i), f);
  }
  template <class F>
  decltype(auto) owner(std::size_t i, F&& f) const {
    return detail::with_element(states_, owner_.at(i), f);
  }

  std::string name_ = "Partition";
  Hyperparameters hyperparameters_;

 private:
  template <class... Opts>
  friend class Partition;

  std::tuple<States...> states_;
  std::vector<std::size_t> owner_;  // per leaf in walk order: its group
  std::vector<std::string> names_;  // per group
  std::int64_t step_ = 0;
  std::optional<Tree> ema_;
};

template <class... Opts>
class Partition {
  static_assert(sizeof...(Opts) >= 1, "Partition: at least one group");

 public:
  static constexpr const char* kName = "Partition";
  template <class Tree>
  using State = PartitionState<Tree, detail::state_of<Opts, Tree>...>;

  explicit Partition(Group<Opts>... groups) : Partition(StepTransforms{}, std::move(groups)...) {}
  /// Throws std::invalid_argument for two groups of one name, two groups without a rule, or a group whose optimizer
  /// applies a transform of its own (the partition's apply to every group).
  explicit Partition(StepTransforms transforms, Group<Opts>... groups)
      : transforms_(transforms),
        optimizers_(std::move(groups.optimizer)...),
        names_{std::move(groups.name)...},
        rules_{std::move(groups.rule)...} {
    transforms_.validate();
    std::size_t g = 0;
    std::apply([&](const auto&... opt) { ((check_group(g++, opt.transforms().first_on())), ...); }, optimizers_);
    for (std::size_t a = 0; a < names_.size(); ++a) {
      for (std::size_t b = a + 1; b < names_.size(); ++b) {
        if (names_[a] == names_[b]) throw std::invalid_argument("Partition: two groups are named '" + names_[a] + "'");
        if (!rules_[a] && !rules_[b])
          throw std::invalid_argument("Partition: groups '" + names_[a] + "' and '" + names_[b] +
                                      "' both have no rule (one group at most takes the leaves no rule takes)");
      }
    }
  }

  const StepTransforms& transforms() const noexcept { return transforms_; }
  /// Each group's hyperparameters as "<group>.<optimizer>.<name>", in group order (the state adds the transforms).
  Hyperparameters hyperparameters() const {
    Hyperparameters h;
    std::size_t g = 0;
    std::apply(
        [&](const auto&... opt) {
          (
              [&](const auto& o) {
                const std::string prefix =
                    names_[g++] + "." + std::string(std::remove_cvref_t<decltype(o)>::kName) + ".";
                for (auto& [name, value] : o.hyperparameters()) h.emplace_back(prefix + name, std::move(value));
              }(opt),
              ...);
        },
        optimizers_);
    return h;
  }
  /// Group G's optimizer.
  template <std::size_t G>
  const auto& group_optimizer() const noexcept {
    return std::get<G>(optimizers_);
  }

  /// The state for params: each leaf given to the one group whose rule takes it (LeafInfo, with rule(path) as its
  /// options), each group's optimizer initialized with the other groups' leaves excluded and rule's options for its
  /// own. Throws std::invalid_argument naming the path of a leaf no group takes or two take.
  template <class Tree>
  State<Tree> init(const Tree& params, const LeafRule& rule = {}) const {
    if constexpr (ptree::tree<Tree>) {
      return init_tree(params, rule);
    } else {
      ptree::detail::not_a_tree<Tree>();
      return {};
    }
  }

  /// One step of every group (see Optimizer::step for the report, the gradients' shapes and the non-finite policy;
  /// the report's lr is the first group's).
  template <class Tree>
  StepReport step(Tree& params, const Tree& grads, State<Tree>& st) {
    return detail::step_alone(*this, params, grads, st);
  }

  // The step protocol (step_protocol.hpp), over the groups in order.

  template <class Tree, class... S>
  void begin_step(Tree& params, const Tree& grads, PartitionState<Tree, S...>& st, Tree* ema, MissingGradient missing) {
    if (st.names_ != names_)
      throw std::invalid_argument("Partition::step: the state was made by a partition of other groups");
    detail::for_each_pair(optimizers_, st.states_,
                          [&](auto& m, auto& s) { m.begin_step(params, grads, s, ema, missing); });
  }
  template <class Tree, class... S>
  double gradient_squared_norm(PartitionState<Tree, S...>& st, bool norm) {
    double squared = 0;
    detail::for_each_pair(optimizers_, st.states_,
                          [&](auto& m, auto& s) { squared += m.gradient_squared_norm(s, norm); });
    return squared;
  }
  template <class Tree, class... S>
  std::pair<std::size_t, const char*> first_non_finite(const PartitionState<Tree, S...>& st) const {
    std::pair<std::size_t, const char*> first{kNoLeaf, nullptr};
    detail::for_each_pair(optimizers_, st.states_, [&](const auto& m, const auto& s) {
      const auto found = m.first_non_finite(s);
      if (found.first < first.first) first = found;
    });
    return first;
  }
  template <class Tree, class... S>
  NormOverflow norm_overflow(const PartitionState<Tree, S...>& st) const {
    NormOverflow o;
    detail::for_each_pair(optimizers_, st.states_, [&](const auto& m, const auto& s) { o.merge(m.norm_overflow(s)); });
    return o;
  }
  template <class Tree, class... S>
  std::size_t verify_step(PartitionState<Tree, S...>& st, double gscale) {
    std::size_t first = kNoLeaf;
    detail::for_each_pair(optimizers_, st.states_, [&](auto& m, auto& s) {
      const std::size_t leaf = m.verify_step(s, gscale);
      if (leaf < first) first = leaf;
    });
    return first;
  }
  template <class Tree, class... S>
  void apply_step(PartitionState<Tree, S...>& st, double gscale, double ema_decay, bool verified) {
    detail::for_each_pair(optimizers_, st.states_,
                          [&](auto& m, auto& s) { m.apply_step(s, gscale, ema_decay, verified); });
    ++st.step_;
  }
  template <class Tree, class... S>
  double scheduled_lr(const PartitionState<Tree, S...>& st) const {
    return std::get<0>(optimizers_).scheduled_lr(std::get<0>(st.states_));
  }

 private:
  void check_group(std::size_t g, const char* transform) const {
    if (transform != nullptr)
      throw std::invalid_argument("Partition: group '" + names_[g] + "' sets " + transform +
                                  ": the partition's transforms (StepTransforms) apply to every group, a group's own "
                                  "must be off");
  }

  template <class Tree>
  State<Tree> init_tree(const Tree& params, const LeafRule& rule) const {
    constexpr std::size_t kNone = static_cast<std::size_t>(-1);
    std::size_t rest = kNone;
    for (std::size_t g = 0; g < rules_.size(); ++g)
      if (!rules_[g]) rest = g;
    State<Tree> st;
    std::unordered_map<std::string, std::size_t> owner_of;
    ptree::for_each_with_path(
        [&](const ptree::Path& path, const auto& leaf) {
          using L = std::remove_cvref_t<decltype(leaf)>;
          LeafInfo info{path, "Euclidean"};
          if (rule) info.options = rule(path);
          if constexpr (detail::manifold_leaf<L>) {
            info.kind = L::kName;
            info.rows = leaf.value().rows();
            info.cols = leaf.value().cols();
          } else {
            std::size_t blocks = 0;
            ptree::detail::for_each_block(
                [&](const auto& b) {
                  ++blocks;
                  std::tie(info.rows, info.cols) = detail::storage_shape(b);
                  info.contiguous = info.contiguous && detail::block_contiguous(b);
                },
                leaf);
            info.blocks = blocks;
            if (blocks != 1) info.rows = info.cols = 0;
          }
          std::size_t owner = kNone;
          for (std::size_t g = 0; g < rules_.size(); ++g) {
            if (!rules_[g] || !rules_[g](info)) continue;
            if (owner != kNone)
              throw std::invalid_argument(path.str() + ": the leaf is in two groups of the partition, '" +
                                          names_[owner] + "' and '" + names_[g] + "'; give it to one");
            owner = g;
          }
          if (owner == kNone) owner = rest;
          if (owner == kNone)
            throw std::invalid_argument(path.str() + ": the leaf is in no group of the partition (" + group_list() +
                                        "); give it to one, or give one group no rule to take the rest");
          st.owner_.push_back(owner);
          owner_of.emplace(path.str(), owner);
        },
        params);
    std::size_t g = 0;
    detail::for_each_pair(optimizers_, st.states_, [&](const auto& opt, auto& s) {
      const std::size_t mine = g++;
      const LeafRule group_rule = [&](const ptree::Path& path) {
        const auto found = owner_of.find(path.str());
        if (found == owner_of.end() || found->second != mine) return LeafOptions{.excluded = true};
        return rule ? rule(path) : LeafOptions{};
      };
      s = opt.init(params, group_rule);
    });
    st.hyperparameters_ = hyperparameters();
    transforms_.record(st.hyperparameters_);
    st.names_ = names_;
    if (transforms_.ema_decay > 0) st.ema_.emplace(ptree::cast<ptree::scalar_t<Tree>>(params));
    return st;
  }

  std::string group_list() const {
    std::string out = "groups";
    for (std::size_t g = 0; g < names_.size(); ++g) out += (g ? ", '" : " '") + names_[g] + "'";
    return out;
  }

  StepTransforms transforms_;
  std::tuple<Opts...> optimizers_;
  std::vector<std::string> names_;
  std::vector<GroupRule> rules_;
};

}  // namespace geomopt
