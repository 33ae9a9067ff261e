// The manifold contract: what a point type provides so that every optimizer, solver, checkpoint and Ceres problem
// can use it, and nothing more.
//
// A manifold M of dimension d sits in the space of its points' values, R^(rows x cols) with the Frobenius product
// <U, V> = sum U_ij V_ij (values are column-major). At each point x a *section* fixes an orthonormal basis
// E_1(x) .. E_d(x) of the tangent space for the manifold's metric g_x, so a tangent vector is a coordinate vector
// c in R^d with g_x(sum c_k E_k, sum c'_k E_k) = c . c'. Everything a client needs is written in those coordinates:
//
//   to_ambient(x, c)        = sum_k c_k E_k(x)                      the ambient tangent vector, rows x cols
//   lift(x, G)_k            = <G, E_k(x)>                           the transpose of to_ambient: for a cost f with
//                                                                   Euclidean gradient G, the coordinates of the
//                                                                   Riemannian gradient grad f(x)
//   retract(x, c, r)        = R_x(c)                                a point, for each retraction r the manifold has
//   inverse_retract(x, y, r) = c with R_x(c) = y                    for y within reach of x
//
// Invariants (<geomopt/manifolds/testing.hpp> measures every one of them on any type satisfying the concept):
//   R_x(0) = x;   R_x(c) = x + to_ambient(x, c) + O(|c|^2);   check(R_x(c)) stays at rounding for |c| up to 60;
//   inverse_retract(x, R_x(c)) = c for c within reach;   lift(x, to_ambient(x, c)) = (to_ambient^T to_ambient) c,
//   the identity where E_k are Frobenius-orthonormal;   inverse_retract accepts y off the manifold near x, and its
//   derivative at y = x is the Frobenius left inverse of to_ambient (it annihilates directions normal to the
//   manifold): what Ceres differentiates numerically for Minus;   lift, to_ambient and retract allocate nothing.
//
// Required of a point type M (the "minimum API"; everything in api.hpp, the optimizers' stepper, the solvers, io and
// CeresManifold is deduced from it):
//   M::Scalar                     float, double or a ceres::Jet (optimizers step float and double)
//   M::kName                      the manifold's name in messages and checkpoints ("Stiefel")
//   M::kCompact                   whether every point is bounded: a line search on a compact leaf gets a step ceiling
//   M::kRetractions               the retractions it implements (a std::array<Retraction, K>), its default first
//   M::tangent_size(rows, cols)   d for rows x cols points; std::invalid_argument naming kName and the shape when
//                                 rows x cols is not a point of M. Allocates nothing: Ceres sizes a block by it
//   M::Tangent                    the allocating API's tangent vector, a ptree leaf holding the d coordinates:
//     M::tangent_from(x, c)          the tangent at x with coordinates c (d numbers)
//     M::coordinates_of(xi, c)       c <- the d coordinates of xi (std::invalid_argument when xi has another shape)
//   x.value()                     the point's numbers, an Eigen column-major matrix or vector, owned or mapped
//   M::Workspace                  everything one leaf needs between calls, made once per leaf:
//     Workspace(rows, cols, policy, y0)   allocates every buffer; throws std::invalid_argument naming kName and the
//                                        shape when rows x cols is not a point of M; y0 (rows x cols, column-major)
//                                        starts a transported section and may be null for a recomputed one
//     tangent_size()                    d
//     step_cost()                       an estimate of one lift and retract in flops, used to balance threads
//     lift(y, g, c)                     c <- lift(y, g); rebuilds a recomputed section at y
//     to_ambient(y, c, u)               u <- to_ambient(y, c)
//     retract(y, c, r)                  y <- R_y(c), in place; y is the point of the last lift when the section is
//                                        kept from it; a transported section moves with the point. Never throws: a
//                                        non-finite c gives non-finite entries in y (the optimizers check first)
//     inverse_retract(x, y, c, r)       c <- R_x^-1(y); may allocate; std::domain_error when y is out of reach
//     forget_point()                    drops the section lift built, so the next retract starts from its own y
//     check(y)                          how far y is from the manifold (0 on it, to rounding)
//     project(y)                        y <- the nearest point of the manifold
//     random_point(rng, y)              y <- a random point (the manifold's natural distribution, documented there)
//     section_data(), section_rows(), section_cols()   the section kept between steps, for checkpoints (null, 0, 0
//                                        when recomputed)
//     workspace_bytes()                 scratch memory held
// Optional: M(dims...), M::random_point(rng, dims...) and M::shape(dims...) (the std::array {rows, cols} of M(dims...),
// computed without building the point: CeresManifold<M>(dims...) builds M(dims...) when it is absent) for the
// manifold's natural dimensions; section overloads of the allocating functions; a tangent type with structure (packed
// skew blocks, scaled symmetric matrices).
#pragma once

#include <Eigen/Core>
#include <array>
#include <concepts>
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

#include "geomopt/manifolds/common.hpp"

namespace geomopt {

template <class M>
concept Manifold = requires {
  typename std::remove_cvref_t<M>::Scalar;
  typename std::remove_cvref_t<M>::Workspace;
  typename std::remove_cvref_t<M>::Tangent;
  { std::remove_cvref_t<M>::kName } -> std::convertible_to<const char*>;
  { std::remove_cvref_t<M>::kCompact } -> std::convertible_to<bool>;
  { std::remove_cvref_t<M>::kRetractions[0] } -> std::convertible_to<Retraction>;
  { std::remove_cvref_t<M>::kRetractions.size() } -> std::convertible_to<std::size_t>;
}
&&std::constructible_from<
    typename std::remove_cvref_t<M>::Workspace, Eigen::Index, Eigen::Index, SectionPolicy,
    const typename std::remove_cvref_t<M>::Scalar*>&& requires(const std::remove_cvref_t<M>& x,
                                                               typename std::remove_cvref_t<M>::Workspace& ws,
                                                               const typename std::remove_cvref_t<M>::Workspace& cws,
                                                               const typename std::remove_cvref_t<M>::Scalar* in,
                                                               typename std::remove_cvref_t<M>::Scalar* out, Rng& rng,
                                                               Retraction r) {
  {x.value().data()};
  { std::remove_cvref_t<M>::tangent_size(Eigen::Index{}, Eigen::Index{}) } -> std::convertible_to<Eigen::Index>;
  { std::remove_cvref_t<M>::tangent_from(x, in) } -> std::convertible_to<typename std::remove_cvref_t<M>::Tangent>;
  std::remove_cvref_t<M>::coordinates_of(std::declval<const typename std::remove_cvref_t<M>::Tangent&>(), out);
  { x.value().rows() } -> std::convertible_to<Eigen::Index>;
  { x.value().cols() } -> std::convertible_to<Eigen::Index>;
  { cws.tangent_size() } -> std::convertible_to<Eigen::Index>;
  { cws.step_cost() } -> std::convertible_to<double>;
  ws.lift(in, in, out);
  ws.to_ambient(in, in, out);
  ws.retract(out, in, r);
  ws.inverse_retract(in, in, out, r);
  ws.forget_point();
  { cws.check(in) } -> std::convertible_to<typename std::remove_cvref_t<M>::Scalar>;
  ws.project(out);
  ws.random_point(rng, out);
  { ws.section_data() } -> std::convertible_to<const typename std::remove_cvref_t<M>::Scalar*>;
  { cws.section_rows() } -> std::convertible_to<Eigen::Index>;
  { cws.section_cols() } -> std::convertible_to<Eigen::Index>;
  { cws.workspace_bytes() } -> std::convertible_to<std::size_t>;
};

/// Whether M implements the retraction r.
template <Manifold M>
constexpr bool supports(Retraction r) {
  for (Retraction s : std::remove_cvref_t<M>::kRetractions)
    if (s == r) return true;
  return false;
}

/// M's default retraction, the first it lists.
template <Manifold M>
constexpr Retraction default_retraction() {
  return std::remove_cvref_t<M>::kRetractions[0];
}

/// "<kName> has no <r> retraction; it supports <its list>": the reason of an error that asks M for a retraction it
/// lacks.
template <Manifold M>
std::string missing_retraction(Retraction r) {
  std::string out = std::remove_cvref_t<M>::kName;
  out.append(" has no ").append(retraction_name(r)).append(" retraction; it supports ");
  const char* separator = "";
  for (Retraction s : std::remove_cvref_t<M>::kRetractions) {
    out.append(separator).append(retraction_name(s));
    separator = ", ";
  }
  return out;
}

}  // namespace geomopt
