// ManifoldStepper: what an optimizer needs from a manifold leaf, with every buffer allocated once, at init: the leaf's
// workspace behind the virtual interface of any_workspace.hpp (for the built-in manifolds over float and double, the
// one compiled in libgeomopt_manifolds).
//
// Per step the optimizer calls lift(y, g, coords) with the leaf's point y and its Euclidean gradient g (both in the
// leaf's storage layout, column-major), keeps its moments in the coordinates, forms an update u there and calls
// retract(y, u, r) on the same y. Invariants:
//   - lift and retract are the manifold's lift(y, G) and R_y(c) in the coordinates of its section (contract.hpp);
//   - a transported section keeps one frame from step to step (moments stay in it); a recomputed one is rebuilt
//     from y by lift;
//   - neither call allocates (the contract requires it of lift and retract);
//   - forget_point() drops what lift remembered of its point, so the next retract starts from the y it is given (a
//     solver's line search retracts from one point after lifting at others);
//   - section_data() is the state kept between steps, which checkpoints save and restore; step_cost() is the estimate
//     of one lift and retract in flops that threads are balanced by.
#pragma once

#include <memory>
#include <type_traits>

#include "geomopt/manifolds/any_workspace.hpp"
#include "geomopt/manifolds/common.hpp"
#include "geomopt/manifolds/contract.hpp"

namespace geomopt::detail {

template <class T>
using ManifoldStepper = AnyWorkspace<T>;

/// The stepper of a manifold leaf x, its section started at x when transported. Throws std::invalid_argument (from
/// the workspace, naming M and the shape) when x's shape is not a point of M.
template <Manifold M>
std::unique_ptr<ManifoldStepper<typename std::remove_cvref_t<M>::Scalar>> make_stepper(const M& x,
                                                                                       SectionPolicy policy) {
  return any_workspace<M>(x.value().rows(), x.value().cols(), policy, x.value().data());
}

}  // namespace geomopt::detail
