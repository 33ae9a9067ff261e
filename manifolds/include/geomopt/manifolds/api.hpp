// The allocating manifold API, deduced from the contract (contract.hpp) for any point type M with geomopt::Manifold<M>:
//
//   dim(x)                          the number of tangent coordinates
//   check(x)                        how far x is from the manifold (+infinity for a value of a shape M has no point of)
//   project(x)                      x <- the nearest point of the manifold (and a copying overload)
//   lift(x, G)                      the tangent whose coordinates are lift(x, G), for a Euclidean gradient G
//   to_ambient(x, xi)               the ambient tangent vector of xi
//   inner(x, xi, eta)               the metric of two tangents: the dot product of their (orthonormal) coordinates
//   retract(x, xi, r)               x <- R_x(xi), r one of M::kRetractions (default the first)
//   inverse_retract(x, y, r)        the tangent xi with R_x(xi) = y
//   random_tangent(x, rng)          a tangent with independent standard normal coordinates
//   random_point<M>(rng, dims...)   M::random_point(rng, dims...)
//
// Each one makes a workspace with a recomputed section at x (the section is determined by the point), calls it, and
// converts coordinates with M::tangent_from and M::coordinates_of: there is no second implementation of any formula
// here. Contract of every function: arguments of the wrong shape throw std::invalid_argument naming M::kName and the
// expected shape, and change nothing; retract throws std::domain_error for a non-finite coordinate (naming it) and for
// a non-finite result (naming its entry), leaving x unchanged; inverse_retract throws std::domain_error for a target
// out of reach.
//
// Optional hooks M may provide, used when present:
//   M::check_tangent(x, xi, what)         throws std::invalid_argument when xi is not a tangent at x (default: the
//                                         number of coordinates must be dim(x))
//   M::coordinate_name(x, k)              how a message names coordinate k (default "storage[k]")
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "geomopt/manifolds/any_workspace.hpp"
#include "geomopt/manifolds/common.hpp"
#include "geomopt/manifolds/contract.hpp"
#include "geomopt/manifolds/detail/matrix_functions.hpp"
#include "geomopt/manifolds/detail/point.hpp"
#include "geomopt/ptree.hpp"

namespace geomopt {

namespace detail {

template <class M>
using CoordinateVector = Eigen::Matrix<typename M::Scalar, Eigen::Dynamic, 1>;

// The plain (owning) type of a point's value: what to_ambient returns and retract works on.
template <class M>
using PlainValue = typename std::decay_t<decltype(std::declval<const M&>().value())>::PlainObject;

template <Manifold M>
OpenWorkspace<M> recomputed_workspace(const M& x) {
  return open_workspace<M>(x.value().rows(), x.value().cols(), SectionPolicy::recomputed, nullptr);
}

inline std::string ambient_shape_string(Eigen::Index rows, Eigen::Index cols) {
  return std::to_string(rows) + "x" + std::to_string(cols);
}

// Throws std::invalid_argument unless an ambient argument has the point's shape.
template <Manifold M>
void require_ambient_shape(const M& x, Eigen::Index rows, Eigen::Index cols, const char* what) {
  const Eigen::Index r = x.value().rows(), c = x.value().cols();
  if (rows != r || cols != c)
    throw std::invalid_argument(std::string(M::kName) + "::" + what + ": expected a " + ambient_shape_string(r, c) +
                                " matrix, got " + ambient_shape_string(rows, cols));
}

template <Manifold M>
void require_supported(Retraction r, const char* what) {
  if (!supports<M>(r))
    throw std::invalid_argument(std::string(M::kName) + "::" + what + ": " + M::kName +
                                " does not implement this retraction (Retraction value " +
                                std::to_string(static_cast<int>(r)) + ")");
}

template <Manifold M>
Eigen::Index tangent_size_of(const M& x) {
  return M::tangent_size(x.value().rows(), x.value().cols());
}

// The coordinates of the tangent xi at x, after checking that it is one.
template <Manifold M>
CoordinateVector<M> coordinates(const M& x, const typename M::Tangent& xi, const char* what) {
  const Eigen::Index d = tangent_size_of(x);
  if constexpr (requires { M::check_tangent(x, xi, what); }) {
    M::check_tangent(x, xi, what);
  } else {
    const Eigen::Index got = ptree::count(xi);
    if (got != d)
      throw std::invalid_argument(std::string(M::kName) + "::" + what + ": the tangent vector has " +
                                  std::to_string(got) + " coordinates, expected " + std::to_string(d));
  }
  CoordinateVector<M> c(d);
  M::coordinates_of(xi, c.data());
  return c;
}

template <Manifold M>
std::string coordinate_name(const M& x, Eigen::Index k) {
  if constexpr (requires { M::coordinate_name(x, k); }) {
    return M::coordinate_name(x, k);
  } else {
    return "storage[" + std::to_string(k) + "]";
  }
}

// Throws std::domain_error naming the first non-finite coordinate ("B(2, 1) = nan"): a retraction of a NaN or
// infinite tangent has no value, and a NaN point must not pass for one.
template <Manifold M>
void require_finite_coordinates(const M& x, const CoordinateVector<M>& c) {
  if constexpr (std::is_floating_point_v<typename M::Scalar>) {
    if (c.allFinite()) return;  // vectorized; the loop below only locates the entry
  }
  for (Eigen::Index k = 0; k < c.size(); ++k)
    if (!std::isfinite(value_of(c[k])))
      throw std::domain_error(std::string(M::kName) + "::retract: the tangent vector has a non-finite coordinate, " +
                              coordinate_name(x, k) + " = " + short_number(value_of(c[k])));
}

// The retraction's result, checked: a finite tangent gives a finite point; anything else (a Schur iteration that did
// not converge, an overflow) is reported, not returned.
template <Manifold M, class V>
void require_finite_point(const V& y) {
  if constexpr (std::is_floating_point_v<typename M::Scalar>) {
    if (y.allFinite()) return;
  }
  for (Eigen::Index j = 0; j < y.cols(); ++j)
    for (Eigen::Index i = 0; i < y.rows(); ++i)
      if (!std::isfinite(value_of(y(i, j))))
        throw std::domain_error(std::string(M::kName) +
                                "::retract: the retraction of a finite tangent vector gave a non-finite entry at (" +
                                std::to_string(i) + ", " + std::to_string(j) + ")");
}

}  // namespace detail

/// The number of tangent coordinates at x (the manifold's dimension).
template <Manifold M>
Eigen::Index dim(const M& x) {
  return detail::tangent_size_of(x);
}

/// How far x is from the manifold: 0 on it, to rounding; +infinity for a value of a shape M has no point of.
template <Manifold M>
typename M::Scalar check(const M& x) {
  using T = typename M::Scalar;
  try {
    (void)M::tangent_size(x.value().rows(), x.value().cols());  // the contract's shape rule, the workspace's too
  } catch (const std::invalid_argument&) {
    return T(std::numeric_limits<double>::infinity());
  }
  return detail::recomputed_workspace(x).check(x.value().data());
}

/// Replaces x by the nearest point of the manifold and returns it.
template <Manifold M>
M& project(M& x) {
  detail::recomputed_workspace(x).project(x.value().data());
  return x;
}
/// The nearest point of the manifold to x.
template <Manifold M>
M project(const M& x) {
  M copy = x;
  return project(copy);
}

/// The tangent at x whose coordinates are the lift of the Euclidean gradient egrad (a matrix, a vector or a point of
/// a gradient tree): the Riemannian gradient.
template <Manifold M, class G>
typename M::Tangent lift(const M& x, const G& egrad) {
  using T = typename M::Scalar;
  const detail::Mat<T>& g = detail::ambient_matrix<T>(egrad);
  detail::require_ambient_shape(x, g.rows(), g.cols(), "lift");
  auto ws = detail::recomputed_workspace(x);
  detail::CoordinateVector<M> c(ws.tangent_size());
  ws.lift(x.value().data(), g.data(), c.data());
  return M::tangent_from(x, c.data());
}

/// The ambient tangent vector of xi at x.
template <Manifold M>
detail::PlainValue<M> to_ambient(const M& x, const typename M::Tangent& xi) {
  const detail::CoordinateVector<M> c = detail::coordinates(x, xi, "to_ambient");
  detail::PlainValue<M> u(x.value().rows(), x.value().cols());
  detail::recomputed_workspace(x).to_ambient(x.value().data(), c.data(), u.data());
  return u;
}

/// The metric of two tangents at x: the dot product of their coordinates, which are orthonormal.
template <Manifold M>
typename M::Scalar inner(const M& x, const typename M::Tangent& xi, const typename M::Tangent& eta) {
  const detail::CoordinateVector<M> a = detail::coordinates(x, xi, "inner");
  const detail::CoordinateVector<M> b = detail::coordinates(x, eta, "inner");
  return a.dot(b);
}

/// Moves x to R_x(xi). A non-finite coordinate throws std::domain_error naming it, and so does a non-finite result;
/// x is then unchanged.
template <Manifold M>
void retract(M& x, const typename M::Tangent& xi, Retraction r = default_retraction<M>()) {
  detail::require_supported<M>(r, "retract");
  const detail::CoordinateVector<M> c = detail::coordinates(x, xi, "retract");
  detail::require_finite_coordinates(x, c);
  detail::PlainValue<M> y = x.value();
  detail::recomputed_workspace(x).retract(y.data(), c.data(), r);
  detail::require_finite_point<M>(y);
  x.value() = y;
}

/// The tangent xi at x with R_x(xi) = y. Throws std::domain_error when y is out of reach or not finite.
template <Manifold M, class Y>
typename M::Tangent inverse_retract(const M& x, const Y& y_in, Retraction r = default_retraction<M>()) {
  using T = typename M::Scalar;
  const detail::Mat<T>& y = detail::ambient_matrix<T>(y_in);
  detail::require_ambient_shape(x, y.rows(), y.cols(), "inverse_retract");
  detail::require_supported<M>(r, "inverse_retract");
  auto ws = detail::recomputed_workspace(x);
  detail::CoordinateVector<M> c(ws.tangent_size());
  ws.inverse_retract(x.value().data(), y.data(), c.data(), r);
  return M::tangent_from(x, c.data());
}

/// A tangent at x whose coordinates are independent standard normal numbers.
template <Manifold M>
typename M::Tangent random_tangent(const M& x, Rng& rng) {
  using T = typename M::Scalar;
  std::normal_distribution<double> normal;
  detail::CoordinateVector<M> c(dim(x));
  for (Eigen::Index k = 0; k < c.size(); ++k) c[k] = T(normal(rng));
  return M::tangent_from(x, c.data());
}

/// M::random_point(rng, dims...), for generic code.
template <class M, class... Dims>
M random_point(Rng& rng, Dims... dims) {
  return M::random_point(rng, static_cast<Eigen::Index>(dims)...);
}

}  // namespace geomopt
