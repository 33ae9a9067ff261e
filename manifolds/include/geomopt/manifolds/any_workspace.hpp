// AnyWorkspace<T>: a manifold's Workspace (contract.hpp) behind a virtual interface, and the one way every consumer
// (the allocating API, the optimizers' steppers, the solvers, CeresManifold) opens a workspace: open_workspace<M> by
// value, any_workspace<M> behind the interface.
//
// Why: a workspace holds all of a manifold's arithmetic (its lift, retractions, projections: QR, Schur, eigen and LU
// factorizations), and instantiating it in a translation unit costs tens of seconds of compilation. For the built-in
// manifolds over float and double, the library libgeomopt_manifolds holds that code, compiled once; a translation unit
// that includes the headers and links geomopt::manifolds calls into it through this interface and compiles none of it.
// Every other point type (a user's manifold, a ceres::Jet scalar) instantiates its workspace where it is used, as a
// header-only library does.
//
// Invariants:
//   - any_workspace<M>(...) and open_workspace<M>(...) behave as M::Workspace(rows, cols, policy, y0) would: the same
//     results bitwise (the same code, compiled with the library's flags), the same exceptions;
//   - a translation unit uses the compiled code only when compiled_workspace<M> holds for M, or for the owned type of
//     a Borrowed<M> (workspace_point_t): it is one of the built-in manifolds over float or double (each declares
//     itself with GEOMOPT_DECLARE_COMPILED_WORKSPACE), the consumer links the library (which defines
//     GEOMOPT_COMPILED_KERNELS to the Eigen alignment it was built with), that alignment is the translation unit's own
//     EIGEN_MAX_ALIGN_BYTES (so matrices allocated on one side and freed on the other agree on how; a file compiled
//     with -mavx or -march=native differs and instantiates its own copy);
//   - the library's code is private to it (built with hidden visibility): its template instances never replace, or
//     are replaced by, those of a translation unit that instantiates its own.
#pragma once

#include <Eigen/Core>
#include <cstddef>
#include <memory>
#include <type_traits>

#include "geomopt/manifolds/common.hpp"
#include "geomopt/manifolds/contract.hpp"

namespace geomopt::detail {

/// A manifold's workspace behind a virtual interface: one member per member of the contract's Workspace.
template <class T>
class AnyWorkspace {
 public:
  virtual ~AnyWorkspace() = default;

  virtual Eigen::Index tangent_size() const = 0;
  virtual double step_cost() const noexcept = 0;
  virtual void lift(const T* y, const T* g, T* c) = 0;
  virtual void to_ambient(const T* y, const T* c, T* u) = 0;
  virtual void retract(T* y, const T* c, Retraction r) = 0;
  virtual void inverse_retract(const T* x, const T* y, T* c, Retraction r) = 0;
  virtual void forget_point() noexcept = 0;
  virtual T check(const T* y) const = 0;
  virtual void project(T* y) = 0;
  virtual void random_point(Rng& rng, T* y) = 0;
  /// The section kept between steps, rows x cols column-major, or null and 0 x 0. Restoring a checkpoint writes it.
  virtual T* section_data() noexcept = 0;
  virtual Eigen::Index section_rows() const noexcept = 0;
  virtual Eigen::Index section_cols() const noexcept = 0;
  virtual std::size_t workspace_bytes() const noexcept = 0;
};

/// AnyWorkspace of M::Workspace: forwards every call.
template <Manifold M>
class WorkspaceModel final : public AnyWorkspace<typename std::remove_cvref_t<M>::Scalar> {
  using Point = std::remove_cvref_t<M>;
  using T = typename Point::Scalar;

 public:
  WorkspaceModel(Eigen::Index rows, Eigen::Index cols, SectionPolicy policy, const T* y0)
      : ws_(rows, cols, policy, y0) {}

  Eigen::Index tangent_size() const override { return ws_.tangent_size(); }
  double step_cost() const noexcept override { return ws_.step_cost(); }
  void lift(const T* y, const T* g, T* c) override { ws_.lift(y, g, c); }
  void to_ambient(const T* y, const T* c, T* u) override { ws_.to_ambient(y, c, u); }
  void retract(T* y, const T* c, Retraction r) override { ws_.retract(y, c, r); }
  void inverse_retract(const T* x, const T* y, T* c, Retraction r) override { ws_.inverse_retract(x, y, c, r); }
  void forget_point() noexcept override { ws_.forget_point(); }
  T check(const T* y) const override { return ws_.check(y); }
  void project(T* y) override { ws_.project(y); }
  void random_point(Rng& rng, T* y) override { ws_.random_point(rng, y); }
  T* section_data() noexcept override {
    // The workspace owns its section as mutable memory even where it hands it out read-only.
    return const_cast<T*>(static_cast<const T*>(ws_.section_data()));
  }
  Eigen::Index section_rows() const noexcept override { return ws_.section_rows(); }
  Eigen::Index section_cols() const noexcept override { return ws_.section_cols(); }
  std::size_t workspace_bytes() const noexcept override { return ws_.workspace_bytes(); }

 private:
  typename Point::Workspace ws_;
};

/// Whether this translation unit calls the library's compiled workspace of M (see the invariants above).
template <class M>
inline constexpr bool compiled_workspace = false;

/// The point type whose workspace serves M: M itself, or, for a point over borrowed memory (Borrowed<M>, whose
/// Workspace is its Owned type's), the owned type, so that borrowed leaves of a built-in manifold use the library's
/// compiled workspace too.
template <class M>
struct workspace_point {
  using type = M;
};
template <class M>
requires std::is_same_v<typename M::Workspace, typename M::Owned::Workspace>
struct workspace_point<M> {
  using type = typename M::Owned;
};
template <class M>
using workspace_point_t = typename workspace_point<std::remove_cvref_t<M>>::type;

/// Names a point type in a call to the library's compiled_workspace_of overloads (found by argument-dependent lookup,
/// since they are declared after the templates below).
template <class M>
struct WorkspaceOf {};

/// An AnyWorkspace held by value, with the contract's member functions: what open_workspace returns for a compiled M.
template <class T>
class WorkspaceHandle {
 public:
  explicit WorkspaceHandle(std::unique_ptr<AnyWorkspace<T>> ws) noexcept : ws_(std::move(ws)) {}

  Eigen::Index tangent_size() const { return ws_->tangent_size(); }
  double step_cost() const noexcept { return ws_->step_cost(); }
  void lift(const T* y, const T* g, T* c) { ws_->lift(y, g, c); }
  void to_ambient(const T* y, const T* c, T* u) { ws_->to_ambient(y, c, u); }
  void retract(T* y, const T* c, Retraction r) { ws_->retract(y, c, r); }
  void inverse_retract(const T* x, const T* y, T* c, Retraction r) { ws_->inverse_retract(x, y, c, r); }
  void forget_point() noexcept { ws_->forget_point(); }
  T check(const T* y) const { return ws_->check(y); }
  void project(T* y) { ws_->project(y); }
  void random_point(Rng& rng, T* y) { ws_->random_point(rng, y); }
  T* section_data() noexcept { return ws_->section_data(); }
  Eigen::Index section_rows() const noexcept { return ws_->section_rows(); }
  Eigen::Index section_cols() const noexcept { return ws_->section_cols(); }
  std::size_t workspace_bytes() const noexcept { return ws_->workspace_bytes(); }

 private:
  std::unique_ptr<AnyWorkspace<T>> ws_;
};

/// The workspace of rows x cols points of M behind the virtual interface: the library's when compiled_workspace<M>,
/// else M::Workspace instantiated here. Throws what M::Workspace's constructor throws.
template <Manifold M>
std::unique_ptr<AnyWorkspace<typename std::remove_cvref_t<M>::Scalar>> any_workspace(
    Eigen::Index rows, Eigen::Index cols, SectionPolicy policy, const typename std::remove_cvref_t<M>::Scalar* y0) {
  using Point = workspace_point_t<M>;
  if constexpr (compiled_workspace<Point>)
    return compiled_workspace_of(WorkspaceOf<Point>{}, rows, cols, policy, y0);
  else
    return std::make_unique<WorkspaceModel<Point>>(rows, cols, policy, y0);
}

/// The workspace of rows x cols points of M by value, with the contract's member functions: a WorkspaceHandle of the
/// library's when compiled_workspace<M>, else M::Workspace itself.
template <Manifold M>
auto open_workspace(Eigen::Index rows, Eigen::Index cols, SectionPolicy policy,
                    const typename std::remove_cvref_t<M>::Scalar* y0) {
  using Point = workspace_point_t<M>;
  if constexpr (compiled_workspace<Point>)
    return WorkspaceHandle<typename Point::Scalar>(any_workspace<Point>(rows, cols, policy, y0));
  else
    return typename Point::Workspace(rows, cols, policy, y0);
}

/// The type open_workspace<M> returns.
template <Manifold M>
using OpenWorkspace = decltype(open_workspace<M>(0, 0, SectionPolicy::recomputed, nullptr));

}  // namespace geomopt::detail

// Whether this translation unit may call libgeomopt_manifolds (the invariants above).
#if defined(GEOMOPT_COMPILED_KERNELS) && \
    (defined(GEOMOPT_BUILDING_KERNELS) || GEOMOPT_COMPILED_KERNELS == EIGEN_MAX_ALIGN_BYTES)
#define GEOMOPT_USE_COMPILED_KERNELS 1
#else
#define GEOMOPT_USE_COMPILED_KERNELS 0
#endif

#if defined(GEOMOPT_BUILDING_KERNELS)
#define GEOMOPT_KERNELS_EXPORT __attribute__((visibility("default")))
#else
#define GEOMOPT_KERNELS_EXPORT
#endif

// GEOMOPT_DECLARE_COMPILED_WORKSPACE(Point): at namespace geomopt scope after Point's definition, declares the
// library's workspaces of Point<float> and Point<double> and makes this translation unit use them (when it may). One
// line per built-in manifold; manifolds/src/workspaces.cpp defines them.
#if GEOMOPT_USE_COMPILED_KERNELS
#define GEOMOPT_DECLARE_COMPILED_WORKSPACE_OF(Point, T)                                                              \
  namespace detail {                                                                                                 \
  GEOMOPT_KERNELS_EXPORT std::unique_ptr<AnyWorkspace<T>> compiled_workspace_of(WorkspaceOf<Point<T>>, Eigen::Index, \
                                                                                Eigen::Index, SectionPolicy,         \
                                                                                const T*);                           \
  template <>                                                                                                        \
  inline constexpr bool compiled_workspace<Point<T>> = true;                                                         \
  }
#define GEOMOPT_DECLARE_COMPILED_WORKSPACE(Point) \
  GEOMOPT_DECLARE_COMPILED_WORKSPACE_OF(Point, float) GEOMOPT_DECLARE_COMPILED_WORKSPACE_OF(Point, double)
#else
#define GEOMOPT_DECLARE_COMPILED_WORKSPACE(Point)
#endif
