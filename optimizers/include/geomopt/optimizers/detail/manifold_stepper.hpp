// ManifoldStepper: what an optimizer needs from a manifold leaf, with every buffer allocated once, at init.
//
// Per step the optimizer calls lift(y, g, coords) with the leaf's point y and its Euclidean gradient g (both in the
// leaf's storage layout, column-major), keeps its moments in the coordinates, forms an update u there and calls
// retract(y, u, r) on the same y. Invariants:
//   - lift and retract agree with geomopt::lift(x, section, G) and geomopt::retract(x, section, xi, r) of the
//     manifolds component: coords are the tangent's ptree storage in order (Stiefel family: packed A, then B
//     column-major; Grassmann and Sphere: B; SO(n): packed A; SPD: the svec of the whitened gradient);
//   - a transported section keeps one frame from step to step (moments stay in it); a recomputed one is rebuilt
//     from y by lift;
//   - neither call allocates.
#pragma once

#include <Eigen/Core>
#include <cstddef>
#include <memory>

#include "geomopt/manifolds/common.hpp"

namespace geomopt::detail {

template <class T>
class ManifoldStepper {
 public:
  virtual ~ManifoldStepper() = default;

  /// Coordinates of a tangent vector (the manifold's dimension).
  virtual Eigen::Index dim() const = 0;
  /// coords <- the lift of the Euclidean gradient g at y, in the section's frame. Rebuilds a recomputed section.
  virtual void lift(const T* y, const T* g, T* coords) = 0;
  /// y <- the retraction at y of the tangent vector with coordinates coords; y is the point of the last lift. A
  /// transported section moves with it.
  virtual void retract(T* y, const T* coords, Retraction r) = 0;
  /// Drops what lift remembered of its point, so the next retract starts from the y it is given (a solver's line
  /// search retracts from one point after lifting at others). No effect on a transported section.
  virtual void forget_point() noexcept = 0;

  /// The state a stepper keeps between steps (a transported section), for saving: rows x cols column-major, or
  /// nullptr and 0 x 0 when it keeps none.
  virtual T* section_data() noexcept = 0;
  virtual Eigen::Index section_rows() const noexcept = 0;
  virtual Eigen::Index section_cols() const noexcept = 0;
  /// Bytes of scratch memory held (not state: rebuilt by init).
  virtual std::size_t workspace_bytes() const noexcept = 0;
};

}  // namespace geomopt::detail
