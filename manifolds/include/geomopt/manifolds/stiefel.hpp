// The Stiefel family: Stiefel, Grassmann, Sphere and SpecialOrthogonal points, and the uniform manifold API over them.
//
//   type                   point                        Tangent (orthonormal packed coordinates)     metric
//   Stiefel<T>             N x n, Y^T Y = I             StiefelLieAlgHorMatrix (A packed, B)         canonical
//   Grassmann<T>           N x n representative         GrassmannLieAlgHorMatrix (B)                 tr(U^T V)
//   Sphere<T>              unit vector in R^N           StiefelLieAlgHorMatrix with n = 1 (B only)   u . v
//   SpecialOrthogonal<T>   n x n, X^T X = I, det X = 1  SkewSymMatrix (A packed)                     tr(U^T V) / 2
//
// A tangent vector is held as a lift [A, -B^T; B, 0] in the global tangent space at lambda(Y) = [Y, Y_perp]: the
// ambient vector is lambda [A; B] = Y A + Y_perp B. The canonical metric tr(U^T (I - Y Y^T / 2) V) of that vector is
// |A|_F^2 / 2 + |B|_F^2 = (sum of the squares of A's packed entries) + |B|_F^2, so the packed coordinates are
// orthonormal with no scaling. SO(n) is St(n, n), whose canonical metric is tr(U^T V) / 2; the Sphere is St(N, 1),
// whose canonical metric is the Euclidean one; Grassmann tangents are horizontal (A = 0).
//
// Every function takes a point and works in the section built from it; the overloads that take a GlobalSection work
// in that section instead, and retract moves it (SectionPolicy). Retractions cost O(N n^2) through the 2n x 2n core
// of detail/stiefel_kernel.hpp.
#pragma once

#include <Eigen/Core>
#include <Eigen/LU>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "geomopt/manifolds/common.hpp"
#include "geomopt/manifolds/detail/point.hpp"
#include "geomopt/manifolds/detail/stiefel_kernel.hpp"
#include "geomopt/manifolds/global_section.hpp"
#include "geomopt/manifolds/lie_alg_hor.hpp"
#include "geomopt/manifolds/packed.hpp"

namespace geomopt {

/// St(N, n): N x n matrices with orthonormal columns, with the canonical metric.
template <class T>
class Stiefel : public detail::PointBase<T, detail::Mat<T>> {
 public:
  using Matrix = detail::Mat<T>;
  using Tangent = StiefelLieAlgHorMatrix<T>;
  static constexpr const char* kName = "Stiefel";
  static constexpr bool kStiefelFamily = true;

  Stiefel() = default;
  /// Holds y as it is (check(x) tells how far it is from the manifold).
  explicit Stiefel(Matrix y) : detail::PointBase<T, Matrix>(std::move(y)) {}
  /// The point [I_n; 0].
  Stiefel(Eigen::Index N, Eigen::Index n) : Stiefel(identity(N, n)) {}

  Eigen::Index N() const noexcept { return this->v_.rows(); }
  Eigen::Index n() const noexcept { return this->v_.cols(); }

  /// A Haar-distributed point.
  static Stiefel random_point(Rng& rng, Eigen::Index N, Eigen::Index n) {
    return Stiefel(detail::haar_stiefel<T>(rng, N, n));
  }

  // Hooks of the family (see the functions below).
  static const Matrix& as_matrix(const Matrix& v) { return v; }
  static Tangent make_tangent(const Matrix& a, Matrix b) {
    return Tangent(SkewSymMatrix<T>::from_dense(a), std::move(b));
  }
  static std::pair<Matrix, Matrix> blocks(const Tangent& xi) { return {xi.A().dense(), xi.B()}; }
  static Eigen::Index dim(Eigen::Index N, Eigen::Index n) { return N * n - n * (n + 1) / 2; }

 protected:
  static Matrix identity(Eigen::Index N, Eigen::Index n) {
    if (n < 0 || n > N)
      throw std::invalid_argument(std::string(kName) + ": need 0 <= n <= N, got N = " + std::to_string(N) +
                                  ", n = " + std::to_string(n));
    return Matrix::Identity(N, n);
  }
};

/// Gr(N, n): n-dimensional subspaces of R^N, held by an N x n representative with orthonormal columns.
template <class T>
class Grassmann : public detail::PointBase<T, detail::Mat<T>> {
 public:
  using Matrix = detail::Mat<T>;
  using Tangent = GrassmannLieAlgHorMatrix<T>;
  static constexpr const char* kName = "Grassmann";
  static constexpr bool kStiefelFamily = true;

  Grassmann() = default;
  explicit Grassmann(Matrix y) : detail::PointBase<T, Matrix>(std::move(y)) {}
  /// The subspace spanned by the first n coordinate vectors.
  Grassmann(Eigen::Index N, Eigen::Index n) : Grassmann(Stiefel<T>(N, n).value()) {}

  Eigen::Index N() const noexcept { return this->v_.rows(); }
  Eigen::Index n() const noexcept { return this->v_.cols(); }

  static Grassmann random_point(Rng& rng, Eigen::Index N, Eigen::Index n) {
    return Grassmann(detail::haar_stiefel<T>(rng, N, n));
  }

  static const Matrix& as_matrix(const Matrix& v) { return v; }
  static Tangent make_tangent(const Matrix&, Matrix b) { return Tangent(std::move(b)); }
  static std::pair<Matrix, Matrix> blocks(const Tangent& xi) { return {Matrix::Zero(xi.n(), xi.n()), xi.B()}; }
  static Eigen::Index dim(Eigen::Index N, Eigen::Index n) { return n * (N - n); }
};

/// S^{N-1}: unit vectors of R^N, the Stiefel manifold St(N, 1).
template <class T>
class Sphere : public detail::PointBase<T, Eigen::Matrix<T, Eigen::Dynamic, 1>> {
 public:
  using Matrix = detail::Mat<T>;
  using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  using Tangent = StiefelLieAlgHorMatrix<T>;
  static constexpr const char* kName = "Sphere";
  static constexpr bool kStiefelFamily = true;

  Sphere() = default;
  explicit Sphere(Vector x) : detail::PointBase<T, Vector>(std::move(x)) {}
  /// The first coordinate vector of R^N (N >= 1).
  explicit Sphere(Eigen::Index N) : Sphere(first_basis_vector(N)) {}

  Eigen::Index N() const noexcept { return this->v_.size(); }
  Eigen::Index n() const noexcept { return 1; }

  static Sphere random_point(Rng& rng, Eigen::Index N) {
    if (N < 1) throw std::invalid_argument("Sphere::random_point: need N >= 1, got " + std::to_string(N));
    const Vector g = detail::gaussian<T>(rng, N, 1).col(0);
    return Sphere(Vector(g / g.norm()));
  }

  static Matrix as_matrix(const Vector& v) { return v; }
  static Tangent make_tangent(const Matrix&, Matrix b) { return Tangent(SkewSymMatrix<T>(1), std::move(b)); }
  static std::pair<Matrix, Matrix> blocks(const Tangent& xi) {
    if (xi.n() != 1)
      throw std::invalid_argument("Sphere: a tangent vector is a lift with n = 1, got n = " + std::to_string(xi.n()));
    return {Matrix::Zero(1, 1), xi.B()};
  }
  static Eigen::Index dim(Eigen::Index N, Eigen::Index) { return N - 1; }

 private:
  static Vector first_basis_vector(Eigen::Index N) {
    if (N < 1) throw std::invalid_argument("Sphere: need N >= 1, got " + std::to_string(N));
    return Vector::Unit(N, 0);
  }
};

/// SO(n): rotations of R^n, the component of St(n, n) with determinant one, with the canonical metric tr(U^T V) / 2.
template <class T>
class SpecialOrthogonal : public detail::PointBase<T, detail::Mat<T>> {
 public:
  using Matrix = detail::Mat<T>;
  using Tangent = SkewSymMatrix<T>;
  static constexpr const char* kName = "SpecialOrthogonal";
  static constexpr bool kStiefelFamily = true;

  SpecialOrthogonal() = default;
  explicit SpecialOrthogonal(Matrix x) : detail::PointBase<T, Matrix>(std::move(x)) {}
  /// The identity rotation of R^n.
  explicit SpecialOrthogonal(Eigen::Index n) : SpecialOrthogonal(Stiefel<T>(n, n).value()) {}

  Eigen::Index N() const noexcept { return this->v_.rows(); }
  Eigen::Index n() const noexcept { return this->v_.cols(); }

  /// A Haar-distributed rotation: a Haar orthogonal matrix with its first column negated when its determinant is -1.
  static SpecialOrthogonal random_point(Rng& rng, Eigen::Index n) {
    Matrix x = detail::haar_stiefel<T>(rng, n, n);
    if (n > 0 && detail::value_of(x.determinant()) < 0) x.col(0) *= T(-1);
    return SpecialOrthogonal(std::move(x));
  }

  static const Matrix& as_matrix(const Matrix& v) { return v; }
  static Tangent make_tangent(const Matrix& a, const Matrix&) { return Tangent::from_dense(a); }
  static std::pair<Matrix, Matrix> blocks(const Tangent& xi) { return {xi.dense(), Matrix(0, xi.n())}; }
  static Eigen::Index dim(Eigen::Index, Eigen::Index n) { return n * (n - 1) / 2; }
};

namespace detail {

template <class M>
concept stiefel_family = manifold_point<M> && requires {
  requires std::remove_cvref_t<M>::kStiefelFamily;
};

template <class M>
void check_shape(const M& x, const Mat<typename M::Scalar>& v, const char* what) {
  const auto& y = x.value();
  if (v.rows() != y.rows() || v.cols() != y.cols())
    throw std::invalid_argument(std::string(M::kName) + "::" + what + ": expected a " + std::to_string(y.rows()) + "x" +
                                std::to_string(y.cols()) + " matrix, got " + std::to_string(v.rows()) + "x" +
                                std::to_string(v.cols()));
}

template <class M>
void check_section(const M& x, const GlobalSection<typename M::Scalar>& section, const char* what) {
  if (section.N() != x.N() || section.n() != x.n())
    throw std::invalid_argument(std::string(M::kName) + "::" + what + ": the section is for St(" +
                                std::to_string(section.N()) + ", " + std::to_string(section.n()) +
                                "), the point has shape " + std::to_string(x.N()) + "x" + std::to_string(x.n()));
}

template <class M>
void check_tangent(const M& x, const Mat<typename M::Scalar>& a, const Mat<typename M::Scalar>& b, const char* what) {
  if (a.rows() != x.n() || b.cols() != x.n() || b.rows() != x.N() - x.n())
    throw std::invalid_argument(std::string(M::kName) + "::" + what + ": the tangent vector has blocks A " +
                                std::to_string(a.rows()) + "x" + std::to_string(a.cols()) + " and B " +
                                std::to_string(b.rows()) + "x" + std::to_string(b.cols()) + ", expected A " +
                                std::to_string(x.n()) + "x" + std::to_string(x.n()) + " and B " +
                                std::to_string(x.N() - x.n()) + "x" + std::to_string(x.n()));
}

// Throws std::domain_error naming the first non-finite entry of a tangent block ("A(1, 0) = nan"): a retraction of
// a NaN or infinite tangent has no value, and a NaN point must not pass for one.
template <class T>
void require_finite(const Mat<T>& m, const char* name, const char* block) {
  if constexpr (std::is_floating_point_v<T>) {
    if (m.allFinite()) return;  // vectorized; the loop below only locates the entry
  }
  for (Eigen::Index j = 0; j < m.cols(); ++j)
    for (Eigen::Index i = 0; i < m.rows(); ++i)
      if (!std::isfinite(value_of(m(i, j))))
        throw std::domain_error(std::string(name) + "::retract: the tangent vector has a non-finite coordinate, " +
                                block + "(" + std::to_string(i) + ", " + std::to_string(j) +
                                ") = " + short_number(value_of(m(i, j))));
}

// The retraction's result, checked: a finite tangent gives a finite point at any norm (the spectral rule of
// detail/matrix_functions.hpp); anything else (a Schur iteration that did not converge) is reported, not returned.
template <class M>
void require_finite_point(const Mat<typename M::Scalar>& y) {
  if constexpr (std::is_floating_point_v<typename M::Scalar>) {
    if (y.allFinite()) return;
  }
  for (Eigen::Index j = 0; j < y.cols(); ++j)
    for (Eigen::Index i = 0; i < y.rows(); ++i)
      if (!std::isfinite(value_of(y(i, j))))
        throw std::domain_error(std::string(M::kName) +
                                "::retract: the retraction of a finite tangent vector gave a "
                                "non-finite entry at (" +
                                std::to_string(i) + ", " + std::to_string(j) + ")");
}

template <class M>
typename M::value_type from_matrix(const Mat<typename M::Scalar>& y) {
  if constexpr (std::is_same_v<typename M::value_type, Mat<typename M::Scalar>>) {
    return y;
  } else {
    return y.col(0);
  }
}

}  // namespace detail

// ---- the uniform API ----

/// The intrinsic dimension.
template <detail::stiefel_family M>
Eigen::Index dim(const M& x) {
  return M::dim(x.N(), x.n());
}

/// The distance from the constraint: ||Y^T Y - I||_F, plus 2 for an SO(n) value with negative determinant (the
/// Frobenius distance from a reflection to the nearest rotation).
template <detail::stiefel_family M>
typename M::Scalar check(const M& x) {
  using T = typename M::Scalar;
  const detail::Mat<T>& y = M::as_matrix(x.value());
  T defect = detail::orthonormality_defect(y);
  if constexpr (std::is_same_v<M, SpecialOrthogonal<T>>) {
    if (y.rows() != y.cols()) return T(std::numeric_limits<double>::infinity());
    if (y.rows() > 0 && detail::value_of(y.determinant()) < 0) defect += T(2);
  }
  return defect;
}

/// Replaces x by the nearest point of the manifold in the Frobenius norm (the orthonormal polar factor; for SO(n) the
/// nearest rotation; for the sphere x / |x|) and returns it.
template <detail::stiefel_family M>
M& project(M& x) {
  using T = typename M::Scalar;
  constexpr bool rotation = std::is_same_v<M, SpecialOrthogonal<T>>;
  x.value() = detail::from_matrix<M>(detail::polar_factor<T>(M::as_matrix(x.value()), rotation));
  return x;
}
/// The nearest point of the manifold to x.
template <detail::stiefel_family M>
M project(const M& x) {
  M copy = x;
  return project(copy);
}

/// The section lambda(Y) at x.
template <detail::stiefel_family M>
GlobalSection<typename M::Scalar> make_section(const M& x, SectionPolicy policy = SectionPolicy::recomputed) {
  return GlobalSection<typename M::Scalar>(M::as_matrix(x.value()), policy);
}

/// The Riemannian gradient, an ambient tangent vector, of the Euclidean gradient g: G - Y G^T Y for the canonical
/// metric (Stiefel, Sphere, SO(n)), (I - Y Y^T) G for Grassmann.
template <detail::stiefel_family M, class G>
typename M::value_type riemannian_gradient(const M& x, const G& egrad) {
  using T = typename M::Scalar;
  const detail::Mat<T>& y = M::as_matrix(x.value());
  const detail::Mat<T>& g = detail::ambient_matrix<T>(egrad);
  detail::check_shape(x, g, "riemannian_gradient");
  if constexpr (std::is_same_v<M, Grassmann<T>>) {
    return g - y * (y.transpose() * g);
  } else {
    return detail::from_matrix<M>(g - y * (g.transpose() * y));
  }
}

/// The Riemannian gradient in the global tangent coordinates of the section: with Z = lambda^T G, A = Z1 - Z1^T and
/// B = Z2 (Z1 the first n rows).
template <detail::stiefel_family M, class G>
typename M::Tangent lift(const M& x, const GlobalSection<typename M::Scalar>& section, const G& egrad) {
  using T = typename M::Scalar;
  const detail::Mat<T>& g = detail::ambient_matrix<T>(egrad);
  detail::check_shape(x, g, "lift");
  detail::check_section(x, section, "lift");
  const detail::Mat<T> z = section.apply_transpose(g);
  const Eigen::Index n = x.n();
  const detail::Mat<T> z1 = z.topRows(n);
  return M::make_tangent(z1 - z1.transpose(), z.bottomRows(x.N() - n));
}
template <detail::stiefel_family M, class G>
typename M::Tangent lift(const M& x, const G& egrad) {
  return lift(x, make_section(x), egrad);
}

/// The ambient tangent vector lambda [A; B] = Y A + Y_perp B of the lift xi.
template <detail::stiefel_family M>
typename M::value_type to_ambient(const M& x, const GlobalSection<typename M::Scalar>& section,
                                  const typename M::Tangent& xi) {
  using T = typename M::Scalar;
  const auto [a, b] = M::blocks(xi);
  detail::check_tangent(x, a, b, "to_ambient");
  detail::check_section(x, section, "to_ambient");
  detail::Mat<T> local(x.N(), x.n());
  local << a, b;
  return detail::from_matrix<M>(section.apply(local));
}
template <detail::stiefel_family M>
typename M::value_type to_ambient(const M& x, const typename M::Tangent& xi) {
  return to_ambient(x, make_section(x), xi);
}

/// The metric on tangent coordinates: their Euclidean inner product (they are orthonormal), |A|^2/2 + <B, B'>
/// written with the dense blocks.
template <detail::stiefel_family M>
typename M::Scalar inner(const M& x, const typename M::Tangent& xi, const typename M::Tangent& eta) {
  const auto [a, b] = M::blocks(xi);
  const auto [c, d] = M::blocks(eta);
  detail::check_tangent(x, a, b, "inner");
  detail::check_tangent(x, c, d, "inner");
  using T = typename M::Scalar;
  return T(0.5) * (a.cwiseProduct(c)).sum() + (b.cwiseProduct(d)).sum();
}

/// The metric on ambient tangent vectors: canonical tr(U^T (I - Y Y^T / 2) V) for Stiefel, Sphere and SO(n), and
/// tr(U^T V) for Grassmann.
template <detail::stiefel_family M, class U, class V>
typename M::Scalar metric(const M& x, const U& u_in, const V& v_in) {
  using T = typename M::Scalar;
  const detail::Mat<T>& y = M::as_matrix(x.value());
  const detail::Mat<T>& u = detail::ambient_matrix<T>(u_in);
  const detail::Mat<T>& v = detail::ambient_matrix<T>(v_in);
  detail::check_shape(x, u, "metric");
  detail::check_shape(x, v, "metric");
  if constexpr (std::is_same_v<M, Grassmann<T>>) {
    return u.cwiseProduct(v).sum();
  } else {
    return u.cwiseProduct(v).sum() - T(0.5) * (y.transpose() * u).cwiseProduct(y.transpose() * v).sum();
  }
}

/// Moves x to the retraction of the tangent vector xi in the section, which follows x by its policy.
///
/// Any finite xi, of any norm, gives a point with orthonormal columns to working precision (SO(n): determinant one):
/// cores of 1-norm above detail::kSpectralNorm = 16 are evaluated by their real Schur form (floating-point scalars;
/// a ceres::Jet keeps the polynomial and the solve). A non-finite coordinate throws std::domain_error naming it, and
/// x and the section are left unchanged.
template <detail::stiefel_family M>
void retract(M& x, GlobalSection<typename M::Scalar>& section, const typename M::Tangent& xi,
             Retraction r = Retraction::cayley) {
  const auto [a, b] = M::blocks(xi);
  detail::check_tangent(x, a, b, "retract");
  detail::check_section(x, section, "retract");
  detail::require_finite(a, M::kName, "A");
  detail::require_finite(b, M::kName, "B");
  auto step = detail::stiefel_step(section, a, b, r);
  detail::require_finite_point<M>(step.y);
  section.transport(step.y, step.q, step.f);
  x.value() = detail::from_matrix<M>(step.y);
}
/// Moves x to the retraction of xi: lambda f(X) [I; 0], f the exponential or the Cayley transform.
template <detail::stiefel_family M>
void retract(M& x, const typename M::Tangent& xi, Retraction r = Retraction::cayley) {
  const auto [a, b] = M::blocks(xi);
  detail::check_tangent(x, a, b, "retract");
  detail::require_finite(a, M::kName, "A");
  detail::require_finite(b, M::kName, "B");
  detail::Mat<typename M::Scalar> y = detail::stiefel_step(make_section(x), a, b, r).y;
  detail::require_finite_point<M>(y);
  x.value() = detail::from_matrix<M>(y);
}

/// The tangent vector xi with retract(x, xi, r) == y, in the coordinates of the section: closed forms for Cayley and
/// for Grassmann (which acts on the subspace of y, whatever its representative), Zimmermann's iteration for the
/// Stiefel logarithm. Throws std::domain_error when y is out of reach or has a non-finite entry.
///
/// The Cayley inverse is undefined where x^T y + I is singular (y a half turn from x: an eigenvalue -1 of x^T y, e.g.
/// SO(3) from I to diag(1, -1, -1)). It throws when sigma_min(x^T y + I) <= sqrt(eps) max(sigma_max(x^T y + I), 1)
/// (detail::inverse_cayley_threshold); otherwise its relative error is about eps / sigma_min(x^T y + I), at most
/// about sqrt(eps), which is the conditioning of the problem itself (for SO(n) the inverse of a rotation by t about
/// an axis is 2 tan(t / 2) times that axis's skew matrix, and 1 / sigma_min = 1 / (2 cos(t / 2))).
template <detail::stiefel_family M, class Y>
typename M::Tangent inverse_retract(const M& x, const GlobalSection<typename M::Scalar>& section, const Y& y_in,
                                    Retraction r = Retraction::cayley) {
  using T = typename M::Scalar;
  const detail::Mat<T>& y = detail::ambient_matrix<T>(y_in);
  detail::check_shape(x, y, "inverse_retract");
  detail::check_section(x, section, "inverse_retract");
  const Eigen::Index n = x.n();
  if (!detail::all_finite_values(y))
    throw std::domain_error(std::string(M::kName) + "::inverse_retract: y has a non-finite entry");
  const detail::Mat<T> z = section.apply_transpose(y);
  if constexpr (std::is_same_v<M, Grassmann<T>>) {
    return M::make_tangent(detail::Mat<T>(), detail::inverse_grassmann_block(z, n, r));
  } else {
    auto [a, b] = r == Retraction::cayley ? detail::inverse_cayley_blocks(z, n)
                                          : detail::inverse_geodesic_blocks(z, n, "inverse_retract (geodesic)");
    return M::make_tangent(a, std::move(b));
  }
}
template <detail::stiefel_family M, class Y>
typename M::Tangent inverse_retract(const M& x, const Y& y, Retraction r = Retraction::cayley) {
  return inverse_retract(x, make_section(x), y, r);
}

/// A tangent vector whose coordinates are independent standard normal numbers.
template <detail::stiefel_family M>
typename M::Tangent random_tangent(const M& x, Rng& rng) {
  using T = typename M::Scalar;
  const detail::Mat<T> g = detail::gaussian<T>(rng, x.n(), x.n());
  // The strict lower triangle of g, mirrored: a skew matrix with standard normal packed entries.
  detail::Mat<T> a = g.template triangularView<Eigen::StrictlyLower>();
  a -= a.transpose().eval();
  return M::make_tangent(a, detail::gaussian<T>(rng, x.N() - x.n(), x.n()));
}

/// M::random_point(rng, dims...), for generic code.
template <class M, class... Dims>
M random_point(Rng& rng, Dims... dims) {
  return M::random_point(rng, static_cast<Eigen::Index>(dims)...);
}

}  // namespace geomopt
