// The step protocol: the phases every optimizer's step is made of, public so that a step can drive several optimizers
// at once (a Partition's groups, Muon's matrices beside its fallback) with one set of transforms, and so that a new
// optimizer joins a partition by implementing them.
//
// A member M of a step, over a tree Tree with its state S (what M::init returns), provides
//   m.transforms()                                  StepTransforms: the ones M applies when it steps alone
//   m.hyperparameters()                             Hyperparameters: M's options other than its transforms (a
//                                                  state records both: these, then StepTransforms::record)
//   m.begin_step(params, grads, s, ema, missing)    finds every leaf's numbers and checks the tree against the state
//                                                  (StructureError naming the leaf), computes this step's learning
//                                                  rate; ema is the tree of the moving average or nullptr
//   m.gradient_squared_norm(s, norm)               lifts what the step needs (a lift that fails throws naming the
//                                                  leaf) and, with norm, returns the squared norm of its leaves'
//                                                  gradients in double (0 otherwise)
//   m.first_non_finite(s)                          {leaf, reason} of its first leaf, in walk order, with a non-finite
//                                                  gradient or lift; {kNoLeaf, nullptr} when none
//   m.norm_overflow(s)                             where a global norm of finite gradients overflows (NormOverflow)
//   m.verify_step(s, gscale)                       computes its update from gradients scaled by gscale without
//                                                  writing, and returns the first leaf whose update is not finite, or
//                                                  kNoLeaf
//   m.apply_step(s, gscale, ema_decay, verified)   writes its leaves, their state and their moving average, and
//                                                  advances s's step count; throws nothing (with verified, it may
//                                                  reuse what verify_step computed)
//   m.scheduled_lr(s)                              this step's learning rate, as begin_step scheduled it
// and S provides leaf_path(i) and step_count(). Leaves are numbered in walk order across the whole tree: every member
// sees every leaf, and a leaf that is another member's is excluded from its state (LeafOptions::excluded).
//
// Invariants of a driven step (detail::drive_step): every phase that can throw or refuse runs for every member before
// any member writes, so a step either writes every member's leaves or changes nothing; the transforms (one clip
// factor from one global norm, one non-finite decision, one moving-average decay) are the driver's; no phase
// allocates. The driver's decisions rest on four quantities (the squared norm, the first non-finite leaf, where the
// norm overflows, the first leaf whose update is not finite); a Decisions object combines each of them before the
// driver decides: LocalDecisions keeps one process's as they are, and a step whose members run on several processes
// (geomopt::distributed's ZeroRedundancyOptimizer) combines them over the processes, so that each takes the same
// decision.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "geomopt/optimizers/options.hpp"
#include "geomopt/ptree.hpp"

namespace geomopt {

/// "No leaf": what a phase returns when it found nothing to report.
inline constexpr std::size_t kNoLeaf = static_cast<std::size_t>(-1);

/// Where a global norm of finite gradients overflows double, among one member's leaves.
struct NormOverflow {
  std::size_t first = kNoLeaf;    ///< the first leaf whose own squared norm overflows double
  std::size_t largest = kNoLeaf;  ///< otherwise, the leaf with the largest squared norm
  double most = -1;               ///< that norm

  void merge(const NormOverflow& o) noexcept {
    if (o.first < first) first = o.first;
    if (o.most > most) most = o.most, largest = o.largest;
  }
};

/// The decisions of a step taken in one process: each combination is the identity. A Decisions type provides the same
/// four members; each is called at the same point of every process's step, and returns the quantity over all of them.
struct LocalDecisions {
  /// The squared norm of every member's gradients, from this process's sum.
  double squared_norm(double local) { return local; }
  /// The first leaf in walk order with a non-finite gradient or lift and why, from this process's first.
  std::pair<std::size_t, const char*> first_non_finite(std::size_t leaf, const char* why) { return {leaf, why}; }
  /// Where a norm of finite gradients overflows, from this process's members' merged NormOverflow.
  NormOverflow norm_overflow(const NormOverflow& local) { return local; }
  /// The first leaf whose update is not finite, from this process's first (kNoLeaf: none).
  std::size_t first_failed(std::size_t leaf) { return leaf; }
};

namespace detail {

template <class Tuple, class F>
void for_each_pair(Tuple& members, auto& states, F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) { (f(std::get<I>(members), std::get<I>(states)), ...); }
  (std::make_index_sequence<std::tuple_size_v<Tuple>>{});
}

// One step of the members (a tuple of references) on their states (likewise), with transforms x and the moving
// average ema (nullptr: none), its decisions combined by `decide` (LocalDecisions). The report's lr is the first
// member's.
template <class Tree, class Members, class States, class Decisions = LocalDecisions>
StepReport drive_step(Tree& params, const Tree& grads, const StepTransforms& x, Tree* ema, Members members,
                      States states, Decisions decide = {}) {
  for_each_pair(members, states, [&](auto& m, auto& s) { m.begin_step(params, grads, s, ema, x.missing_gradient); });
  const auto& head = std::get<0>(states);
  StepReport report;
  report.lr = std::get<0>(members).scheduled_lr(head);
  report.step = head.step_count();
  auto refuse = [&](std::size_t leaf, const char* why) {
    const std::string& path = head.leaf_path(leaf);
    if (x.non_finite == NonFinitePolicy::raise) throw NonFiniteGradient(path + ": " + why + "; nothing was changed");
    report.non_finite_leaf = &path;
    report.non_finite_reason = why;
    return report;
  };

  // Reads only, up to the write pass.
  const bool check = x.non_finite != NonFinitePolicy::propagate;
  const bool norm = x.clip_norm > 0 || check;
  double squared = 0;
  for_each_pair(members, states, [&](auto& m, auto& s) { squared += m.gradient_squared_norm(s, norm); });
  if (norm) squared = decide.squared_norm(squared);
  double gscale = 1;
  if (norm) {
    if (!std::isfinite(squared) && check) {
      std::size_t leaf = kNoLeaf;
      const char* why = nullptr;
      for_each_pair(members, states, [&](auto& m, auto& s) {
        const auto [l, w] = m.first_non_finite(s);
        if (l < leaf) leaf = l, why = w;
      });
      std::tie(leaf, why) = decide.first_non_finite(leaf, why);
      if (leaf == kNoLeaf) {
        // Every number is finite: their squares overflow double.
        NormOverflow o;
        for_each_pair(members, states, [&](auto& m, auto& s) { o.merge(m.norm_overflow(s)); });
        o = decide.norm_overflow(o);
        why = "the global gradient norm overflows";
        leaf = o.first != kNoLeaf ? o.first : o.largest;
        if (leaf == kNoLeaf) leaf = 0;
      }
      return refuse(leaf, why);
    }
    report.grad_norm = std::sqrt(squared);
    if (x.clip_norm > 0 && report.grad_norm > x.clip_norm) {
      report.clip_scale = x.clip_norm / (report.grad_norm + 1e-6);
      gscale = report.clip_scale;
    }
  }
  if (check) {
    std::size_t leaf = kNoLeaf;
    for_each_pair(members, states, [&](auto& m, auto& s) {
      const std::size_t l = m.verify_step(s, gscale);
      if (l < leaf) leaf = l;
    });
    leaf = decide.first_failed(leaf);
    if (leaf != kNoLeaf) return refuse(leaf, "the update is not finite");
  }

  // The write pass: arithmetic and retractions only, which throw nothing.
  for_each_pair(members, states, [&](auto& m, auto& s) { m.apply_step(s, gscale, x.ema_decay, check); });
  report.step = head.step_count();
  report.applied = true;
  return report;
}

// One step of member m alone on its state s: m's own transforms and s's moving average. A Tree that is no
// ptree::tree stops compilation at ptree's static_assert, which says what to declare.
template <class M, class Tree, class S>
StepReport step_alone(M& m, Tree& params, const Tree& grads, S& s) {
  if constexpr (ptree::tree<Tree>) {
    return drive_step(params, grads, m.transforms(), s.ema(), std::tie(m), std::tie(s));
  } else {
    ptree::detail::not_a_tree<Tree>();
    return {};
  }
}

// The first number of a storage block (a scalar leaf is its own block).
template <class B>
auto* block_data(B& b) {
  if constexpr (std::is_arithmetic_v<std::remove_cv_t<B>>) {
    return &b;
  } else {
    return b.data();
  }
}

// The data of a leaf's moving-average block, or nullptr for a step that keeps none.
template <class... E>
auto ema_data(E&... e) {
  if constexpr (sizeof...(E) == 0) {
    return static_cast<std::nullptr_t>(nullptr);
  } else {
    return block_data(e...);
  }
}

// visit(p, g) or, with a moving average, visit(p, g, e) on each leaf of params, grads (and *ema) in walk order: the
// walk checks the trees' structure above the leaves and leaves their shapes to visit.
template <class Tree, class V>
void visit_leaves(V& visit, Tree& params, const Tree& grads, Tree* ema) {
  if (ema != nullptr) {
    ptree::detail::for_each_own_leaf_shapes(visit, params, grads, *ema);
  } else {
    ptree::detail::for_each_own_leaf_shapes(visit, params, grads);
  }
}

}  // namespace detail
}  // namespace geomopt
