// What the Stiefel family (Stiefel, Grassmann, Sphere, SpecialOrthogonal) adds to the API every manifold has
// (api.hpp): its section, GlobalSection, and the functions that take one, the ambient Riemannian gradient and metric.
//
//   make_section(x, policy)                       the section lambda(Y) at x
//   lift / to_ambient / retract / inverse_retract (x, section, ...)   the API's functions in that section; retract
//                                                 moves it by its policy (SectionPolicy)
//   riemannian_gradient(x, G)                     the ambient Riemannian gradient, to_ambient(x, lift(x, G))
//   metric(x, U, V)                               the metric of ambient tangent vectors (M::metric_of)
//
// Every one of them runs the family's workspace (detail/stiefel_family.hpp): a recomputed section is determined by the
// point, so the workspace rebuilds it at x; a transported section's dense matrix is handed to the workspace and, after
// a retraction, taken back (GlobalSection::swap_dense). Invariants: the section overloads with a recomputed section
// compute what the plain functions compute; retract leaves x and the section unchanged when it throws.
#pragma once

#include <Eigen/Core>
#include <array>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "geomopt/manifolds/any_workspace.hpp"
#include "geomopt/manifolds/api.hpp"
#include "geomopt/manifolds/common.hpp"
#include "geomopt/manifolds/detail/point.hpp"
#include "geomopt/manifolds/detail/stiefel_family.hpp"
#include "geomopt/manifolds/global_section.hpp"
#include "geomopt/manifolds/lie_alg_hor.hpp"
#include "geomopt/manifolds/packed.hpp"

namespace geomopt {
namespace detail {

template <class M>
concept stiefel_family = manifold_point<M> && requires {
  requires std::remove_cvref_t<M>::kStiefelFamily;
};

template <class M>
void check_shape(const M& x, const Mat<typename M::Scalar>& v, const char* what) {
  require_ambient_shape(x, v.rows(), v.cols(), what);
}

template <class M>
void check_section(const M& x, const GlobalSection<typename M::Scalar>& section, const char* what) {
  if (section.N() != x.N() || section.n() != x.n())
    throw std::invalid_argument(std::string(M::kName) + "::" + what + ": the section is for St(" +
                                std::to_string(section.N()) + ", " + std::to_string(section.n()) +
                                "), the point has shape " + std::to_string(x.N()) + "x" + std::to_string(x.n()));
}

// The blocks (A dense n x n, B (N - n) x n) of a tangent of the family, checked against x's shape.
template <class M>
void check_tangent_blocks(const M& x, const Mat<typename M::Scalar>& a, const Mat<typename M::Scalar>& b,
                          const char* what) {
  if (a.rows() != x.n() || b.cols() != x.n() || b.rows() != x.N() - x.n())
    throw std::invalid_argument(std::string(M::kName) + "::" + what + ": the tangent vector has blocks A " +
                                std::to_string(a.rows()) + "x" + std::to_string(a.cols()) + " and B " +
                                std::to_string(b.rows()) + "x" + std::to_string(b.cols()) + ", expected A " +
                                std::to_string(x.n()) + "x" + std::to_string(x.n()) + " and B " +
                                std::to_string(x.N() - x.n()) + "x" + std::to_string(x.n()));
}

// The family's tangent check and coordinate names, the hooks api.hpp uses (each point type forwards to these).
template <class M>
void family_check_tangent(const M& x, const typename M::Tangent& xi, const char* what) {
  const auto [a, b] = M::blocks(xi);
  check_tangent_blocks(x, a, b, what);
}
template <class M>
std::string family_coordinate_name(const M& x, Eigen::Index k) {
  const Eigen::Index n = x.n(), skew = M::kSkewBlock ? n * (n - 1) / 2 : 0;
  if (k >= skew) {
    const Eigen::Index rest = x.N() - n, at = k - skew;
    return "B(" + std::to_string(at % rest) + ", " + std::to_string(at / rest) + ")";
  }
  for (Eigen::Index i = 1; i < n; ++i)
    for (Eigen::Index j = 0; j < i; ++j)
      if (M::skew_slot(i, j, n).first == k) return "A(" + std::to_string(i) + ", " + std::to_string(j) + ")";
  return "storage[" + std::to_string(k) + "]";
}

// The family's rule for a shape: 0 <= cols <= rows.
inline void require_stiefel_shape(const char* name, Eigen::Index rows, Eigen::Index cols) {
  if (cols < 0 || cols > rows)
    throw std::invalid_argument(std::string(name) + ": expected an N x n matrix with 0 <= n <= N, got " +
                                std::to_string(rows) + "x" + std::to_string(cols));
}

// What the family's point types share: the value (a matrix, or a vector for the sphere), the workspace, the traits of
// the family and the hooks that are the family's rather than one member's. A member redeclares a hook to differ
// (SpecialOrthogonal's skew_slot and coordinate_name).
template <class Derived, class T, class Value = Mat<T>>
class StiefelFamilyPoint : public PointBase<T, Value> {
 public:
  using Matrix = Mat<T>;
  using Workspace = StiefelFamilyWorkspace<T, Derived>;
  static constexpr bool kCompact = true;
  static constexpr std::array<Retraction, 2> kRetractions = {Retraction::cayley, Retraction::geodesic};
  static constexpr bool kStiefelFamily = true;

  using PointBase<T, Value>::PointBase;

  Eigen::Index N() const noexcept { return this->v_.rows(); }
  Eigen::Index n() const noexcept { return this->v_.cols(); }

  // Hooks of api.hpp and of the family's workspace (detail/stiefel_family.hpp).
  static void check_tangent(const Derived& x, const auto& xi, const char* what) { family_check_tangent(x, xi, what); }
  static std::string coordinate_name(const Derived& x, Eigen::Index k) { return family_coordinate_name(x, k); }
  static constexpr std::pair<Eigen::Index, int> skew_slot(Eigen::Index i, Eigen::Index j, Eigen::Index) {
    return packed_skew_slot(i, j);
  }

 protected:
  // Derived::random_value(rng, rows, cols), drawn by the workspace: for float and double, the library's
  // (any_workspace.hpp), so random_point compiles none of the factorizations behind it.
  static Value drawn_value(Rng& rng, Eigen::Index rows, Eigen::Index cols) {
    auto ws = open_workspace<Derived>(rows, cols, SectionPolicy::recomputed, nullptr);
    Value v(rows, cols);
    ws.random_point(rng, v.data());
    return v;
  }
};

// f(ws) with a workspace in the section: recomputed, rebuilt at x; transported, holding a copy of its dense matrix.
template <class M, class F>
decltype(auto) in_section(const M& x, const GlobalSection<typename M::Scalar>& section, F&& f) {
  typename M::Workspace ws(x.N(), x.n(), section.policy(), nullptr);
  if (section.policy() == SectionPolicy::transported) ws.transported_section() = section.dense();
  return f(ws);
}

// The value of an M holding the N x n matrix y (a sphere's value is a vector).
template <class M>
typename M::value_type from_matrix(const Mat<typename M::Scalar>& y) {
  if constexpr (std::is_same_v<typename M::value_type, Mat<typename M::Scalar>>) {
    return y;
  } else {
    return y.col(0);
  }
}

// The point's value as a matrix: a reference to it, or (a sphere's vector) an N x 1 copy.
template <class M>
decltype(auto) point_matrix(const M& x) {
  return ambient_matrix<typename M::Scalar>(x.value());
}

}  // namespace detail

/// The section lambda(Y) at x.
template <detail::stiefel_family M>
GlobalSection<typename M::Scalar> make_section(const M& x, SectionPolicy policy = SectionPolicy::recomputed) {
  return GlobalSection<typename M::Scalar>(x.value(), policy);
}

/// The Riemannian gradient, an ambient tangent vector, of the Euclidean gradient G: to_ambient(x, lift(x, G)), which is
/// G - Y G^T Y for the canonical metric (Stiefel, Sphere, SO(n)) and (I - Y Y^T) G for Grassmann.
template <detail::stiefel_family M, class G>
detail::PlainValue<M> riemannian_gradient(const M& x, const G& egrad) {
  using T = typename M::Scalar;
  const detail::Mat<T>& g = detail::ambient_matrix<T>(egrad);
  detail::check_shape(x, g, "riemannian_gradient");
  auto ws = detail::recomputed_workspace(x);
  detail::CoordinateVector<M> c(ws.tangent_size());
  ws.lift(x.value().data(), g.data(), c.data());
  detail::PlainValue<M> u(x.value().rows(), x.value().cols());
  ws.to_ambient(x.value().data(), c.data(), u.data());
  return u;
}

/// The metric on ambient tangent vectors: canonical tr(U^T (I - Y Y^T / 2) V) for Stiefel, Sphere and SO(n), and
/// tr(U^T V) for Grassmann.
template <detail::stiefel_family M, class U, class V>
typename M::Scalar metric(const M& x, const U& u_in, const V& v_in) {
  using T = typename M::Scalar;
  const detail::Mat<T>& u = detail::ambient_matrix<T>(u_in);
  const detail::Mat<T>& v = detail::ambient_matrix<T>(v_in);
  detail::check_shape(x, u, "metric");
  detail::check_shape(x, v, "metric");
  return M::metric_of(detail::point_matrix(x), u, v);
}

/// The lift of the Euclidean gradient in the coordinates of the section.
template <detail::stiefel_family M, class G>
typename M::Tangent lift(const M& x, const GlobalSection<typename M::Scalar>& section, const G& egrad) {
  using T = typename M::Scalar;
  const detail::Mat<T>& g = detail::ambient_matrix<T>(egrad);
  detail::check_shape(x, g, "lift");
  detail::check_section(x, section, "lift");
  return detail::in_section(x, section, [&](auto& ws) {
    detail::CoordinateVector<M> c(ws.tangent_size());
    ws.lift(x.value().data(), g.data(), c.data());
    return M::tangent_from(x, c.data());
  });
}

/// The ambient tangent vector lambda [A; B] = Y A + Y_perp B of xi in the section.
template <detail::stiefel_family M>
detail::PlainValue<M> to_ambient(const M& x, const GlobalSection<typename M::Scalar>& section,
                                 const typename M::Tangent& xi) {
  const detail::CoordinateVector<M> c = detail::coordinates(x, xi, "to_ambient");
  detail::check_section(x, section, "to_ambient");
  return detail::in_section(x, section, [&](auto& ws) {
    detail::PlainValue<M> u(x.value().rows(), x.value().cols());
    ws.to_ambient(x.value().data(), c.data(), u.data());
    return u;
  });
}

/// Moves x to the retraction of xi in the section, which follows x by its policy. Any finite xi, of any norm, gives a
/// point with orthonormal columns to working precision (SO(n): determinant one): cores of 1-norm above
/// detail::kSpectralNorm = 16 are evaluated by their real Schur form (floating-point scalars; a ceres::Jet keeps the
/// polynomial and the solve). A non-finite coordinate throws std::domain_error naming it, and x and the section are
/// left unchanged.
template <detail::stiefel_family M>
void retract(M& x, GlobalSection<typename M::Scalar>& section, const typename M::Tangent& xi,
             Retraction r = Retraction::cayley) {
  using T = typename M::Scalar;
  const detail::CoordinateVector<M> c = detail::coordinates(x, xi, "retract");
  detail::check_section(x, section, "retract");
  detail::require_supported<M>(r, "retract");
  detail::require_finite_coordinates(x, c);
  detail::PlainValue<M> y = x.value();
  detail::in_section(x, section, [&](auto& ws) {
    ws.retract(y.data(), c.data(), r);
    detail::require_finite_point<M>(y);
    if (section.policy() == SectionPolicy::transported) {
      section.swap_dense(ws.transported_section());
    } else {
      section = GlobalSection<T>(y, SectionPolicy::recomputed);
    }
  });
  x.value() = y;
}

/// The tangent xi in the section with retract(x, section, xi, r) == y: closed forms for Cayley and for Grassmann
/// (which acts on the subspace of y, whatever its representative), Zimmermann's iteration for the Stiefel logarithm.
/// Throws std::domain_error when y is out of reach or has a non-finite entry.
///
/// The Cayley inverse is undefined where x^T y + I is singular (y a half turn from x: an eigenvalue -1 of x^T y, e.g.
/// SO(3) from I to diag(1, -1, -1)). It throws when sigma_min(x^T y + I) <= sqrt(eps) max(sigma_max(x^T y + I), 1)
/// (detail::inverse_cayley_threshold); otherwise its relative error is about eps / sigma_min(x^T y + I), at most
/// about sqrt(eps), which is the conditioning of the problem itself.
template <detail::stiefel_family M, class Y>
typename M::Tangent inverse_retract(const M& x, const GlobalSection<typename M::Scalar>& section, const Y& y_in,
                                    Retraction r = Retraction::cayley) {
  using T = typename M::Scalar;
  const detail::Mat<T>& y = detail::ambient_matrix<T>(y_in);
  detail::check_shape(x, y, "inverse_retract");
  detail::check_section(x, section, "inverse_retract");
  return detail::in_section(x, section, [&](auto& ws) {
    detail::CoordinateVector<M> c(ws.tangent_size());
    ws.inverse_retract(x.value().data(), y.data(), c.data(), r);
    return M::tangent_from(x, c.data());
  });
}

}  // namespace geomopt
