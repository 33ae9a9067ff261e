// ManifoldStepper: what an optimizer needs from a manifold leaf, with every buffer allocated once, at init; and
// ContractStepper<M>, the one implementation for every type satisfying geomopt::Manifold (contract.hpp), which
// forwards each call to M::Workspace.
//
// Per step the optimizer calls lift(y, g, coords) with the leaf's point y and its Euclidean gradient g (both in the
// leaf's storage layout, column-major), keeps its moments in the coordinates, forms an update u there and calls
// retract(y, u, r) on the same y. Invariants:
//   - lift and retract are the manifold's lift(y, G) and R_y(c) in the coordinates of its section (contract.hpp);
//   - a transported section keeps one frame from step to step (moments stay in it); a recomputed one is rebuilt
//     from y by lift;
//   - neither call allocates (the contract requires it of lift and retract).
#pragma once

#include <Eigen/Core>
#include <cstddef>
#include <memory>

#include "geomopt/manifolds/common.hpp"
#include "geomopt/manifolds/contract.hpp"

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

  /// The state a stepper keeps between steps (a transported section), for saving and restoring: rows x cols
  /// column-major, or nullptr and 0 x 0 when it keeps none.
  virtual T* section_data() noexcept = 0;
  virtual Eigen::Index section_rows() const noexcept = 0;
  virtual Eigen::Index section_cols() const noexcept = 0;
  /// Bytes of scratch memory held (not state: rebuilt by init).
  virtual std::size_t workspace_bytes() const noexcept = 0;
  /// An estimate of one lift and retract in flops, which the optimizers balance threads by.
  virtual double step_cost() const noexcept = 0;
};

/// The stepper of any manifold M: M::Workspace does the mathematics, this class only forwards to it.
template <Manifold M>
class ContractStepper final : public ManifoldStepper<typename std::remove_cvref_t<M>::Scalar> {
  using Point = std::remove_cvref_t<M>;
  using T = typename Point::Scalar;

 public:
  /// Throws std::invalid_argument (from the workspace, naming M and the shape) when rows x cols is not a point of M.
  ContractStepper(Eigen::Index rows, Eigen::Index cols, SectionPolicy policy, const T* y0)
      : ws_(rows, cols, policy, y0) {}

  Eigen::Index dim() const override { return ws_.tangent_size(); }
  void lift(const T* y, const T* g, T* coords) override { ws_.lift(y, g, coords); }
  void retract(T* y, const T* coords, Retraction r) override { ws_.retract(y, coords, r); }
  void forget_point() noexcept override { ws_.forget_point(); }
  T* section_data() noexcept override {
    // Restoring a checkpoint writes the section: the workspace owns it as mutable memory even where it hands it out
    // read-only, so writing through this pointer is defined.
    return const_cast<T*>(static_cast<const T*>(ws_.section_data()));
  }
  Eigen::Index section_rows() const noexcept override { return ws_.section_rows(); }
  Eigen::Index section_cols() const noexcept override { return ws_.section_cols(); }
  std::size_t workspace_bytes() const noexcept override { return ws_.workspace_bytes(); }
  double step_cost() const noexcept override { return ws_.step_cost(); }

  typename Point::Workspace& workspace() noexcept { return ws_; }

 private:
  typename Point::Workspace ws_;
};

/// The stepper of a manifold leaf x, its section started at x when transported.
template <Manifold M>
std::unique_ptr<ManifoldStepper<typename std::remove_cvref_t<M>::Scalar>> make_stepper(const M& x,
                                                                                       SectionPolicy policy) {
  return std::make_unique<ContractStepper<M>>(x.value().rows(), x.value().cols(), policy, x.value().data());
}

}  // namespace geomopt::detail
