// Checkpoints: a parameter tree, its optimizer's state and metadata in one file, saved atomically.
//
//   geomopt::io::save_checkpoint("ckpt.h5", params, state, {.attributes = {{"epoch", std::int64_t{3}}}});
//   auto state = adam.init(params);                       // a fresh state of the same optimizer and tree shape
//   geomopt::io::LoadReport r = geomopt::io::load_checkpoint("ckpt.h5", params, state);
//
// The file holds /params (the tree; a frozen leaf marked trainable = false, frozen = true), /optimizer (one group per
// leaf path with a dataset per state array, and as attributes the optimizer's kind, step count and hyperparameters
// and each leaf's options, "<path>:lr_scale", ...), /ema (the moving average, when the state keeps one) and
// /metadata (step and user attributes). A leaf whose own step count differs from the state's (it sat steps out for
// want of a gradient, CommonOptions::missing_gradient) has it as "<path>:step", read back like the step count and
// not compared. Invariant: stepping after load_checkpoint continues exactly as if the run had
// never stopped: parameters and state equal bit for bit. The optimizer's kind must match; a strict load also requires
// equal hyperparameters and per-leaf options, and its Error says how to load anyway: a lenient load
// (LoadOptions::strict = false) lists the changes in LoadReport::differences, and the steps use the state's own
// settings, not the file's (nothing of the file's settings but the step count enters the state).
// `State` is geomopt::OptimizerState<Tree> or anything with its step_count, set_step_count, optimizer,
// hyperparameters, for_each_slot and ema members; for_each_leaf_option and for_each_leaf_step members with
// leaf_count, leaf_path and set_leaf_step_count (OptimizerState's) are optional.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include "geomopt/io/detail/describe.hpp"
#include "geomopt/io/detail/view.hpp"
#include "geomopt/io/error.hpp"
#include "geomopt/io/tree.hpp"

namespace geomopt::io {
namespace detail {

/// A hyperparameter's value as an attribute: a number, a name (an enumerated option), or a std::variant of those.
template <class V>
Attribute hyperparameter_attribute(const V& value) {
  if constexpr (requires { std::variant_size<V>::value; })
    return std::visit([](const auto& x) { return Attribute(x); }, value);
  else
    return Attribute(value);
}

/// The checkpoint's attributes of /optimizer (each leaf's options among them), the slots' views (shaped like their
/// leaves) and the EMA tree; marks the frozen leaves of `params` and of the EMA tree.
template <class Tree, class State>
void describe_state(GroupView& params, const State& state, std::vector<GroupView>& groups) {
  GroupView g;
  g.group = "optimizer";
  g.state = true;
  g.attributes.emplace_back("optimizer", std::string(state.optimizer()));
  g.attributes.emplace_back("step", static_cast<std::int64_t>(state.step_count()));
  for (const auto& [name, value] : state.hyperparameters())
    g.attributes.emplace_back(name, hyperparameter_attribute(value));
  g.required = {"optimizer"};
  // The bias corrections take the step count as a double: beyond 2^53 it no longer counts one by one.
  g.counters = {{"step", std::int64_t{1} << 53}};
  // Each leaf's options, one attribute each, compared on load by the hyperparameters' rule. A bool is written as the
  // integer 0 or 1: an Attribute has no bool, and the documented attributes checksum reads h5py's bools as reals.
  std::unordered_set<std::string> frozen;
  if constexpr (requires { state.for_each_leaf_option([](const std::string&, std::string_view, bool) {}); }) {
    state.for_each_leaf_option([&](const std::string& path, std::string_view name, auto value) {
      using V = decltype(value);
      if constexpr (std::is_same_v<V, bool>) {
        g.attributes.emplace_back(leaf_attribute(path, name), std::int64_t{value ? 1 : 0});
        if (name == "frozen" && value) frozen.insert(path);
      } else if constexpr (std::is_floating_point_v<V>) {
        g.attributes.emplace_back(leaf_attribute(path, name), static_cast<double>(value));
      } else {
        g.attributes.emplace_back(leaf_attribute(path, name), std::string(value));
      }
    });
  }
  if constexpr (requires { state.for_each_leaf_step([](const std::string&, std::int64_t) {}); }) {
    state.for_each_leaf_step([&](const std::string& path, std::int64_t steps) {
      g.attributes.emplace_back(leaf_attribute(path, kLeafStep), steps);
    });
  }
  for (auto& leaf : params.leaves) leaf.frozen = frozen.count(leaf.path) != 0;
  std::unordered_map<std::string_view, const LeafView*> by_path;
  for (const auto& leaf : params.leaves) by_path.emplace(leaf.path, &leaf);
  // for_each_slot hands writable maps only on a non-const state; saving reads through them.
  const_cast<State&>(state).for_each_slot([&](const std::string& path, std::string_view name, auto data) {
    using S = std::remove_cv_t<typename decltype(data)::Scalar>;
    const auto found = by_path.find(path);
    if (found == by_path.end())
      throw Error("checkpoint", {{ProblemKind::type, path,
                                  "the optimizer state has a leaf the tree lacks: was it made for another tree?"}});
    const LeafView* leaf = found->second;
    LeafView v;
    v.path = path + "." + std::string(name);
    v.segments = leaf->segments;
    v.segments.emplace_back(name);
    // The kernels' second moments (Adam's exp_avg_sq and max_exp_avg_sq, RMSprop's square_avg, Adagrad's sum):
    // averages of squares, which a load refuses negative.
    v.nonnegative = name == "exp_avg_sq" || name == "max_exp_avg_sq" || name == "square_avg" || name == "sum";
    BlockView b;
    b.data = const_cast<S*>(data.data());
    b.dtype = dtype_of<S>();
    b.rows = data.rows();
    b.cols = data.cols();
    // Shaped like the parameter when it has the parameter's size: a scalar leaf's slot is a scalar, a vector's a
    // vector, a matrix's a matrix of its shape (a slot is in its leaf's storage order: a row-major leaf's slot is
    // row-major); a manifold leaf's tangent coordinates are a vector.
    const BlockView* p = !leaf->structured && leaf->blocks.size() == 1 ? &leaf->blocks[0] : nullptr;
    if (p != nullptr && b.rows * b.cols == p->rows * p->cols) {
      b.rank = p->rank;
      b.rows = p->rows;
      b.cols = p->cols;
      b.row_major = p->row_major;
    } else {
      b.rank = b.cols == 1 ? 1 : 2;
    }
    v.blocks.push_back(b);
    g.leaves.push_back(std::move(v));
  });
  groups.push_back(std::move(g));
  if (const Tree* ema = state.ema()) {
    groups.push_back(describe(*ema, "ema"));
    for (auto& leaf : groups.back().leaves) leaf.frozen = frozen.count(leaf.path) != 0;
  }
}

}  // namespace detail

template <class Tree, class State>
void save_checkpoint(const std::string& filename, const Tree& params, const State& optimizer_state,
                     const Metadata& metadata = {}, const SaveOptions& options = {}) {
  std::vector<detail::GroupView> groups;
  groups.push_back(detail::describe(params, options.group));
  detail::describe_state<Tree>(groups[0], optimizer_state, groups);
  detail::GroupView meta;
  meta.group = "metadata";
  meta.has_tree = false;
  meta.attributes.emplace_back("step", metadata.step.value_or(static_cast<std::int64_t>(optimizer_state.step_count())));
  for (const auto& [name, value] : metadata.attributes) meta.attributes.emplace_back(name, value);
  groups.push_back(std::move(meta));
  detail::write_file(filename, groups, options, "save_checkpoint");
}

template <class Tree, class State>
LoadReport load_checkpoint(const std::string& filename, Tree& params, State& optimizer_state,
                           const LoadOptions& options = {}) {
  std::vector<detail::GroupView> groups;
  groups.push_back(detail::describe(params, options.group));
  detail::describe_state<Tree>(groups[0], optimizer_state, groups);
  for (auto& g : groups) g.check_values = true;  // parameters, state and moving average of a training run
  groups[0].check_points = true;
  // The step counts are read, not compared.
  auto& attrs = groups[1].attributes;
  std::erase_if(attrs, [](const auto& a) { return a.first == "step" || detail::is_leaf_step(a.first); });
  detail::GroupView meta;
  meta.group = "metadata";
  meta.has_tree = false;
  groups.push_back(std::move(meta));
  detail::GroupAttributes read;
  LoadReport report = detail::read_file(filename, groups, options, &read, "load_checkpoint");
  // read_file checked the step (an integer in range; absent only in a lenient load, which reports it).
  for (const auto& [name, value] : read[1])
    if (name == "step" && std::holds_alternative<std::int64_t>(value))
      optimizer_state.set_step_count(std::get<std::int64_t>(value));
  // read_file checked each leaf's count (an integer from 0 to the step count, of a leaf of the tree).
  if constexpr (requires { optimizer_state.set_leaf_step_count(std::size_t{}, std::int64_t{}); }) {
    std::unordered_map<std::string, std::int64_t> steps;
    for (const auto& [name, value] : read[1])
      if (detail::is_leaf_step(name) && std::holds_alternative<std::int64_t>(value))
        steps.emplace(name.substr(0, name.rfind(':')), std::get<std::int64_t>(value));
    for (std::size_t i = 0; i < optimizer_state.leaf_count() && !steps.empty(); ++i)
      if (const auto it = steps.find(optimizer_state.leaf_path(i));
          it != steps.end() && !optimizer_state.leaf_frozen(i))
        optimizer_state.set_leaf_step_count(i, it->second);
  }
  for (const auto& [name, value] : read.back()) {
    if (name == "step" && std::holds_alternative<std::int64_t>(value))
      report.metadata.step = std::get<std::int64_t>(value);
    else
      report.metadata.attributes[name] = value;
  }
  return report;
}

}  // namespace geomopt::io
