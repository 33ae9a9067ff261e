// manifold_leaf<L>: how every consumer (the optimizers, Muon, the solvers, the checkpoint layout) recognises a
// manifold leaf of a parameter tree and asks it for a stepper, a retraction, compactness and a projection. A
// manifold leaf is a type satisfying geomopt::Manifold (contract.hpp); everything below is deduced from the contract.
//
// Invariants: a leaf's retraction is the one asked for (LeafOptions, else the optimizer's option) when the manifold
// implements it, its default_retraction<M>() when none is asked for; asking for one it lacks throws
// std::invalid_argument naming the leaf, the manifold and what it supports, at init, before any step.
#pragma once

#include <Eigen/Core>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "geomopt/manifolds/common.hpp"
#include "geomopt/manifolds/contract.hpp"
#include "geomopt/optimizers/detail/manifold_stepper.hpp"

namespace geomopt::detail {

template <class L>
concept manifold_leaf = Manifold<L>;

/// The retraction a manifold leaf at `path` steps with: `asked` when set (std::invalid_argument when the manifold
/// lacks it), else the manifold's default.
template <manifold_leaf L>
Retraction leaf_retraction(const std::string& path, std::optional<Retraction> asked) {
  if (!asked.has_value()) return default_retraction<L>();
  if (!supports<L>(*asked)) throw std::invalid_argument(path + ": " + missing_retraction<L>(*asked));
  return *asked;
}

/// The stepper of a manifold leaf, its section started at the leaf's point when transported.
template <manifold_leaf L>
std::unique_ptr<ManifoldStepper<typename L::Scalar>> make_leaf_stepper(const L& leaf, SectionPolicy policy) {
  return make_stepper(leaf, policy);
}

/// Manifold leaves of finite diameter: a line search on them gets a step ceiling.
template <manifold_leaf L>
constexpr bool compact_leaf() {
  return L::kCompact;
}

/// leaf <- the nearest point of its manifold.
template <manifold_leaf L>
void project_leaf(L& leaf) {
  open_workspace<L>(leaf.value().rows(), leaf.value().cols(), SectionPolicy::recomputed, nullptr)
      .project(leaf.value().data());
}

}  // namespace geomopt::detail
