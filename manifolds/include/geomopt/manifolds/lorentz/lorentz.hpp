// Lorentz(n): the hyperboloid model of hyperbolic space H^n (sectional curvature -1), the points
// x = (x_0, x_b) in R^(n+1) with <x, x>_L = -x_0^2 + |x_b|^2 = -1 and x_0 > 0, and the metric <u, v>_L restricted to
// the tangent space {v : <x, v>_L = 0}.
//
// Section: the boost B_x = [x_0, x_b^T; x_b, I + x_b x_b^T / (1 + x_0)], the Lorentz transformation along the geodesic
// from the origin e_0 to x (B_x e_0 = x), applied to e_1 .. e_n: E_k(x) = B_x e_k, Lorentz-orthonormal and smooth on
// all of H^n, so the coordinates c in R^n of a tangent vector never jump from point to point:
//
//   to_ambient(x, c) = (x_b . c,  c + x_b (x_b . c) / (1 + x_0))
//   lift(x, G)_k     = <G, E_k>  (Frobenius)  = G_b + x_b (G_0 + (x_b . G_b) / (1 + x_0))
// lift gives the coordinates of the Riemannian gradient (its pairing with E_k is df(E_k) = <G, E_k>), and is not
// the inverse of to_ambient: E_k are Lorentz-orthonormal, not Frobenius-orthonormal.
//
// Retraction: only the exponential map (Retraction::geodesic), R_x(c) = cosh|c| x + sinh|c| v / |c| with
// v = to_ambient(x, c), |v|_L = |c|. Its spatial part is formed and y_0 = hypot(1, |y_b|) recomputed from it, so the
// point satisfies <y, y>_L = -1 to rounding of y_0 at any distance (in float up to about 88, where cosh overflows).
// The inverse, the logarithm, is c = asinh(|z_b|) z_b / |z_b| with z = B_x^-1 y'. It reads y' = y + t J y, J = diag(-1,
// 1, .., 1), t the first-order step along the Euclidean normal J y onto the hyperboloid (t = 0 on it): so its
// derivative at y = x annihilates J x and is the Frobenius left inverse of to_ambient, what Ceres differentiates.
//
// check(y) = |y_0 - hypot(1, |y_b|)| / hypot(1, |y_b|), a relative defect: at distance 60 from the origin x_0 is 1e26,
// representable in float while x_0^2 is not, and its rounding is a relative eps. That is the model's advantage over
// the Poincare ball p = x_b / (1 + x_0), where |p| rounds to 1 beyond distance about 17 in float (37 in double) and
// the conformal factor 2 / (1 - |p|^2) becomes infinite.
//
// Both section policies use the boost section; no state is kept between steps. Every call is O(n), allocation-free.
#pragma once

#include <Eigen/Core>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

#include "geomopt/manifolds/any_workspace.hpp"
#include "geomopt/manifolds/common.hpp"
#include "geomopt/manifolds/contract.hpp"
#include "geomopt/manifolds/detail/point.hpp"

namespace geomopt {

/// Lorentz(n): the hyperboloid model of H^n in R^(n+1).
template <class T>
class Lorentz : public detail::PointBase<T, Eigen::Matrix<T, Eigen::Dynamic, 1>> {
 public:
  using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  /// The n coordinates in the boost section (see the top of this file).
  using Tangent = Vector;
  static constexpr const char* kName = "Lorentz";
  static constexpr bool kCompact = false;
  static constexpr std::array<Retraction, 1> kRetractions{Retraction::geodesic};
  class Workspace;

  Lorentz() = default;
  explicit Lorentz(Vector x) : detail::PointBase<T, Vector>(std::move(x)) {}
  /// The origin e_0 of H^n (n >= 0).
  explicit Lorentz(Eigen::Index n) : Lorentz(origin(n)) {}

  Eigen::Index n() const noexcept { return this->v_.size() - 1; }

  /// The wrapped normal distribution at the origin: exp_(e_0)(c) with c independent standard normal coordinates
  /// (Nagano et al., 2019), so the distance to the origin has the chi distribution with n degrees of freedom.
  static Lorentz random_point(Rng& rng, Eigen::Index n) {
    Lorentz x(n);
    detail::open_workspace<Lorentz>(n + 1, 1, SectionPolicy::recomputed, nullptr).random_point(rng, x.value().data());
    return x;
  }

  /// The tangent vector at x with coordinates c (n numbers).
  static Tangent tangent_from(const Lorentz& x, const T* c) { return Eigen::Map<const Vector>(c, x.n()); }
  /// c <- the coordinates of xi.
  static void coordinates_of(const Tangent& xi, T* c) { Eigen::Map<Vector>(c, xi.size()) = xi; }

  /// d = n for (n + 1) x 1 points; std::invalid_argument unless rows >= 1 and cols = 1.
  static Eigen::Index tangent_size(Eigen::Index rows, Eigen::Index cols) {
    if (rows < 1 || cols != 1)
      throw std::invalid_argument(std::string(kName) + ": expected an (n + 1) x 1 vector with n >= 0, got " +
                                  std::to_string(rows) + "x" + std::to_string(cols));
    return rows - 1;
  }
  static std::array<Eigen::Index, 2> shape(Eigen::Index n) { return {n + 1, 1}; }

 private:
  static Vector origin(Eigen::Index n) {
    tangent_size(n + 1, 1);
    return Vector::Unit(n + 1, 0);
  }
};

/// The allocation-free geometry of one Lorentz(n) leaf (contract.hpp). It holds nothing but n.
template <class T>
class Lorentz<T>::Workspace {
 public:
  using Scalar = T;

  Workspace(Eigen::Index rows, Eigen::Index cols, SectionPolicy, const T*) : n_(Lorentz::tangent_size(rows, cols)) {}

  Eigen::Index tangent_size() const noexcept { return n_; }
  double step_cost() const noexcept { return 12.0 * static_cast<double>(n_ + 1) + 60; }

  /// c <- G_b + x_b (G_0 + (x_b . G_b) / (1 + x_0)).
  void lift(const T* y, const T* g, T* c) const {
    const auto xb = spatial(y);
    const Eigen::Map<const Vector> gb(g + 1, n_);
    Eigen::Map<Vector>(c, n_) = gb + (g[0] + xb.dot(gb) / (T(1) + y[0])) * xb;
  }

  /// u <- (x_b . c, c + x_b (x_b . c) / (1 + x_0)).
  void to_ambient(const T* y, const T* c, T* u) const {
    const auto xb = spatial(y);
    const Eigen::Map<const Vector> cm(c, n_);
    const T s = xb.dot(cm);
    u[0] = s;
    Eigen::Map<Vector>(u + 1, n_) = cm + (s / (T(1) + y[0])) * xb;
  }

  /// y <- exp_y(c), with y_0 recomputed from the spatial part; r must be geodesic, the only retraction (not checked:
  /// retract never throws).
  void retract(T* y, const T* c, Retraction) const {
    using std::cosh;
    using std::hypot;
    using std::sinh;
    Eigen::Map<Vector> yb(y + 1, n_);
    const Eigen::Map<const Vector> cm(c, n_);
    const T b = cm.stableNorm();
    // sinh(b) / b, 1 at b = 0; and y_b <- cosh(b) x_b + sinc (c + x_b (x_b . c) / (1 + x_0)).
    const T sinc = b > T(0) ? T(sinh(b) / b) : T(1);
    const T k = yb.dot(cm) / (T(1) + y[0]);
    yb = (cosh(b) + sinc * k) * yb + sinc * cm;
    y[0] = hypot(T(1), yb.stableNorm());
  }

  /// c <- log_x(y) (see the top of this file); std::domain_error when y is not finite or y_0 <= |y_b| (outside the
  /// upper sheet's cone), std::invalid_argument for a retraction other than geodesic.
  void inverse_retract(const T* x, const T* y, T* c, Retraction r) const {
    using std::asinh;
    if (r != Retraction::geodesic)
      throw std::invalid_argument(std::string(kName) + "::inverse_retract: the only retraction is geodesic");
    const auto xb = spatial(x);
    const auto yb = spatial(y);
    const T a = y[0], b = yb.stableNorm();
    if (!(a > b) || !(a + b < std::numeric_limits<T>::infinity()))
      throw std::domain_error(std::string(kName) + "::inverse_retract: y is not finite or not inside the light cone");
    // t = -(<y, y>_L + 1) / (2 |y|^2), from ratios to p = a + b so that nothing overflows.
    const T p = a + b, ratio = (b - a) / p, inverse = T(1) / p;
    const T t = -(ratio + inverse * inverse) / (T(1) + ratio * ratio);
    const T y0 = (T(1) - t) * a;
    // z_b = y'_b - x_b (y'_0 - (x_b . y'_b) / (1 + x_0)), the spatial part of B_x^-1 y'.
    const T w = y0 - (T(1) + t) * xb.dot(yb) / (T(1) + x[0]);
    Eigen::Map<Vector> z(c, n_);
    z = (T(1) + t) * yb - w * xb;
    const T norm = z.stableNorm();
    if (norm > T(0)) z *= asinh(norm) / norm;
  }

  void forget_point() noexcept {}

  /// |y_0 - hypot(1, |y_b|)| / hypot(1, |y_b|).
  T check(const T* y) const {
    using std::abs;
    using std::hypot;
    const T h = hypot(T(1), spatial(y).stableNorm());
    return abs(y[0] - h) / h;
  }

  /// y_0 <- hypot(1, |y_b|): the point of the hyperboloid with the same spatial part.
  void project(T* y) const {
    using std::hypot;
    y[0] = hypot(T(1), spatial(y).stableNorm());
  }

  /// y <- a point of the wrapped normal distribution at the origin (Lorentz::random_point).
  void random_point(Rng& rng, T* y) const {
    std::normal_distribution<double> normal;
    Eigen::Map<Vector>(y, n_ + 1).setZero();
    y[0] = T(1);
    for (Eigen::Index i = 1; i <= n_; ++i) y[i] = T(normal(rng));
    // y_b holds c; at the origin exp maps it to (cosh|c|, sinh|c| c / |c|).
    using std::sinh;
    Eigen::Map<Vector> yb(y + 1, n_);
    const T b = yb.stableNorm();
    if (b > T(0)) yb *= sinh(b) / b;
    project(y);
  }

  T* section_data() noexcept { return nullptr; }
  Eigen::Index section_rows() const noexcept { return 0; }
  Eigen::Index section_cols() const noexcept { return 0; }
  std::size_t workspace_bytes() const noexcept { return 0; }

 private:
  Eigen::Map<const Vector> spatial(const T* y) const { return Eigen::Map<const Vector>(y + 1, n_); }

  Eigen::Index n_;
};

GEOMOPT_DECLARE_COMPILED_WORKSPACE(Lorentz)

}  // namespace geomopt
