// manifold_leaf<L>: how every consumer (the optimizers, Muon, the solvers, the checkpoint layout) recognises a
// manifold leaf of a parameter tree and asks it for a stepper, a retraction, compactness and a projection. A
// manifold leaf is a type satisfying geomopt::Manifold (contract.hpp); everything below is deduced from the contract.
//
// Invariants: a leaf's retraction is the one asked for (LeafOptions, else the optimizer's option) when the manifold
// implements it, its default_retraction<M>() when none is asked for; asking for one it lacks throws
// std::invalid_argument naming the leaf, the manifold and what it supports, at init, before any step.
//
// The legacy block (between the two "legacy" markers) serves the manifold point types that do not satisfy the
// contract yet, through their hand-written steppers (stiefel_stepper.hpp, spd_stepper.hpp). Once every manifold
// satisfies it, delete that block, the `|| legacy_manifold_leaf<L>` of manifold_leaf and the `else` branch of each
// function here, and the two stepper headers.
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

// legacy: begin
#include "geomopt/manifolds.hpp"
#include "geomopt/optimizers/detail/spd_stepper.hpp"
#include "geomopt/optimizers/detail/stiefel_stepper.hpp"

namespace geomopt::detail {
template <class L>
concept legacy_manifold_leaf = manifold_point<L> && !Manifold<L>;
}  // namespace geomopt::detail
// legacy: end

namespace geomopt::detail {

template <class L>
concept manifold_leaf = Manifold<L> || legacy_manifold_leaf<L>;

inline const char* retraction_name(Retraction r) {
  switch (r) {
    case Retraction::cayley:
      return "cayley";
    case Retraction::geodesic:
      return "geodesic";
    case Retraction::second_order:
      return "second_order";
  }
  return "unknown";
}

/// The retraction a manifold leaf at `path` steps with: `asked` when set (std::invalid_argument when the manifold
/// lacks it), else the manifold's default.
template <manifold_leaf L>
Retraction leaf_retraction(const std::string& path, std::optional<Retraction> asked) {
  if constexpr (Manifold<L>) {
    if (!asked.has_value()) return default_retraction<L>();
    if (!supports<L>(*asked)) {
      std::string list;
      for (Retraction s : L::kRetractions) list += std::string(list.empty() ? "" : ", ") + retraction_name(s);
      throw std::invalid_argument(path + ": " + L::kName + " has no " + retraction_name(*asked) +
                                  " retraction; it supports " + list);
    }
    return *asked;
  } else {
    return asked.value_or(Retraction::cayley);
  }
}

/// The stepper of a manifold leaf, its section started at the leaf's point when transported.
template <manifold_leaf L>
std::unique_ptr<ManifoldStepper<typename L::Scalar>> make_leaf_stepper(const L& leaf, SectionPolicy policy) {
  return make_stepper(leaf, policy);  // ContractStepper for a Manifold; the legacy overloads otherwise
}

/// Manifold leaves of finite diameter: a line search on them gets a step ceiling.
template <manifold_leaf L>
constexpr bool compact_leaf() {
  if constexpr (Manifold<L>) {
    return L::kCompact;
  } else {
    return !std::is_same_v<L, SPD<typename L::Scalar>>;
  }
}

/// leaf <- the nearest point of its manifold.
template <manifold_leaf L>
void project_leaf(L& leaf) {
  if constexpr (Manifold<L>) {
    typename L::Workspace ws(leaf.value().rows(), leaf.value().cols(), SectionPolicy::recomputed, nullptr);
    ws.project(leaf.value().data());
  } else {
    project(leaf);
  }
}

}  // namespace geomopt::detail
