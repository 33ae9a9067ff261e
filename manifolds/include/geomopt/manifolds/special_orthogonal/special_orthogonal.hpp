// SpecialOrthogonal<T>: SO(n), the rotations of R^n (X^T X = I, det X = 1), the component of St(n, n) with determinant
// one, with the canonical metric tr(U^T V) / 2.
//
// Coordinates: a tangent vector at X is X A for A n x n skew (the section of SO(n) at X is X itself), a right (body)
// perturbation: the geodesic retraction is X exp(A), the Cayley one X (I - A/2)^-1 (I + A/2). The n(n - 1)/2
// coordinates are A's free entries, orthonormal for the metric (|X A|_F^2 / 2 = sum of their squares):
//   n = 3   the rotation vector w = (x, y, z) of A = [w]_x = [[0, -z, y], [z, 0, -x], [-y, x, 0]], so that
//           retract(X, w, geodesic) = X exp([w]_x), X times the rotation by |w| about w / |w| (Rodrigues' formula);
//   n != 3  A's strict lower triangle row by row (SkewSymMatrix's packing).
// The Tangent, SpecialOrthogonalTangent, stores exactly those coordinates, and converts from a SkewSymMatrix (the same
// matrix A). Retractions: cayley (default) and geodesic. Points are compact; random_point is Haar-distributed.
// check adds 2 for a value of negative determinant (the distance from a reflection to the nearest rotation).
#pragma once

#include <Eigen/Core>
#include <array>
#include <stdexcept>
#include <string>
#include <utility>

#include "geomopt/manifolds/any_workspace.hpp"
#include "geomopt/manifolds/common.hpp"
#include "geomopt/manifolds/detail/point.hpp"
#include "geomopt/manifolds/detail/stiefel_family.hpp"
#include "geomopt/manifolds/packed.hpp"
#include "geomopt/manifolds/stiefel/family.hpp"
#include "geomopt/manifolds/stiefel/stiefel.hpp"
#include "geomopt/ptree.hpp"

namespace geomopt {
namespace detail {

// Where the coordinates of SO(n) hold A(i, j), i > j, and with which sign: the rotation vector for n = 3 (A(2, 1) = x,
// A(0, 2) = y, A(1, 0) = z), the packed strict lower triangle otherwise.
inline constexpr std::pair<Eigen::Index, int> rotation_slot(Eigen::Index i, Eigen::Index j, Eigen::Index n) {
  if (n == 3) {
    if (i == 2 && j == 1) return {0, 1};
    if (i == 2 && j == 0) return {1, -1};
    return {2, 1};  // (1, 0)
  }
  return packed_skew_slot(i, j);
}

}  // namespace detail

/// A tangent vector of SO(n): the skew n x n matrix A of the perturbation X A, stored as its n(n - 1)/2 coordinates
/// (the rotation vector for n = 3, see the top of this file). A ptree leaf whose storage is that vector.
template <class T>
class SpecialOrthogonalTangent {
 public:
  using Scalar = T;
  using Storage = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  using Dense = detail::Mat<T>;

  SpecialOrthogonalTangent() = default;
  /// The zero tangent of SO(n).
  explicit SpecialOrthogonalTangent(Eigen::Index n) : n_(checked_order(n)), s_(Storage::Zero(n * (n - 1) / 2)) {}
  /// The tangent whose matrix is a (implicit: a SkewSymMatrix and this type denote the same A).
  SpecialOrthogonalTangent(const SkewSymMatrix<T>& a) : SpecialOrthogonalTangent(a.n()) {
    for (Eigen::Index i = 1; i < n_; ++i)
      for (Eigen::Index j = 0; j < i; ++j) set(i, j, a(i, j));
  }
  /// Over the coordinates s of SO(n); s must have n(n - 1)/2 entries.
  static SpecialOrthogonalTangent from_storage(Eigen::Index n, Storage s) {
    SpecialOrthogonalTangent xi(n);
    if (s.size() != xi.s_.size())
      throw std::invalid_argument("SpecialOrthogonalTangent: " + std::to_string(s.size()) + " coordinates, expected " +
                                  std::to_string(xi.s_.size()) + " for SO(" + std::to_string(n) + ")");
    xi.s_ = std::move(s);
    return xi;
  }
  /// The tangent whose matrix is the skew part of the square matrix m.
  template <class Derived>
  static SpecialOrthogonalTangent from_dense(const Eigen::MatrixBase<Derived>& m) {
    return SpecialOrthogonalTangent(SkewSymMatrix<T>::from_dense(m));
  }

  Eigen::Index n() const noexcept { return n_; }
  Storage& storage() noexcept { return s_; }
  const Storage& storage() const noexcept { return s_; }

  /// Entry (i, j) of A.
  T operator()(Eigen::Index i, Eigen::Index j) const {
    if (i == j) return T(0);
    if (i < j) return T(-(*this)(j, i));
    const auto [k, sign] = detail::rotation_slot(i, j, n_);
    return sign > 0 ? s_[k] : T(-s_[k]);
  }
  /// The n x n skew matrix A.
  Dense dense() const {
    Dense d(n_, n_);
    for (Eigen::Index j = 0; j < n_; ++j)
      for (Eigen::Index i = 0; i < n_; ++i) d(i, j) = (*this)(i, j);
    return d;
  }
  /// A as a SkewSymMatrix.
  SkewSymMatrix<T> skew() const { return SkewSymMatrix<T>::from_dense(dense()); }

  friend bool operator==(const SpecialOrthogonalTangent& a, const SpecialOrthogonalTangent& b) {
    return a.n_ == b.n_ && a.s_ == b.s_;
  }

 private:
  static Eigen::Index checked_order(Eigen::Index n) {
    if (n < 0) throw std::invalid_argument("SpecialOrthogonalTangent: negative order " + std::to_string(n));
    return n;
  }
  void set(Eigen::Index i, Eigen::Index j, const T& v) {
    const auto [k, sign] = detail::rotation_slot(i, j, n_);
    s_[k] = sign > 0 ? v : T(-v);
  }

  Eigen::Index n_ = 0;
  Storage s_;
};

// The ptree leaf protocol: the storage is the coordinate vector; rebuild keeps n from the prototype.
template <class T>
typename SpecialOrthogonalTangent<T>::Storage& free_parameters(SpecialOrthogonalTangent<T>& x) {
  return x.storage();
}
template <class T>
const typename SpecialOrthogonalTangent<T>::Storage& free_parameters(const SpecialOrthogonalTangent<T>& x) {
  return x.storage();
}
template <class T, class U>
SpecialOrthogonalTangent<U> rebuild(const SpecialOrthogonalTangent<T>& prototype,
                                    Eigen::Matrix<U, Eigen::Dynamic, 1>&& data) {
  if (data.size() != prototype.storage().size())
    throw std::invalid_argument("SpecialOrthogonalTangent::rebuild: storage of length " + std::to_string(data.size()) +
                                ", expected " + std::to_string(prototype.storage().size()));
  return SpecialOrthogonalTangent<U>::from_storage(prototype.n(), std::move(data));
}
template <class T>
std::string ptree_type_name(const SpecialOrthogonalTangent<T>&) {
  return "SpecialOrthogonalTangent";
}

/// SO(n): rotations of R^n, the component of St(n, n) with determinant one, with the canonical metric tr(U^T V) / 2.
template <class T>
class SpecialOrthogonal : public detail::StiefelFamilyPoint<SpecialOrthogonal<T>, T, detail::Mat<T>> {
 public:
  using Matrix = detail::Mat<T>;
  using Tangent = SpecialOrthogonalTangent<T>;
  static constexpr const char* kName = "SpecialOrthogonal";
  static constexpr bool kSkewBlock = true;
  static constexpr bool kRotation = true;

  SpecialOrthogonal() = default;
  explicit SpecialOrthogonal(Matrix x)
      : detail::StiefelFamilyPoint<SpecialOrthogonal, T, detail::Mat<T>>(std::move(x)) {}
  /// The identity rotation of R^n.
  explicit SpecialOrthogonal(Eigen::Index n) : SpecialOrthogonal(Stiefel<T>(n, n).value()) {}

  /// A Haar-distributed rotation: a Haar orthogonal matrix with its first column negated when its determinant is -1.
  static SpecialOrthogonal random_point(Rng& rng, Eigen::Index n) {
    return SpecialOrthogonal(SpecialOrthogonal::drawn_value(rng, n, n));
  }

  static Tangent tangent_from(const SpecialOrthogonal& x, const T* c) {
    const Eigen::Index n = x.n();
    return Tangent::from_storage(n, Eigen::Map<const typename Tangent::Storage>(c, n * (n - 1) / 2));
  }
  static void coordinates_of(const Tangent& xi, T* c) {
    Eigen::Map<typename Tangent::Storage>(c, xi.storage().size()) = xi.storage();
  }

  /// d = n(n - 1)/2 for n x n points; std::invalid_argument unless square.
  static Eigen::Index tangent_size(Eigen::Index rows, Eigen::Index cols) {
    if (rows != cols || cols < 0)
      throw std::invalid_argument(std::string(kName) + ": expected a square n x n matrix, got " + std::to_string(rows) +
                                  "x" + std::to_string(cols));
    return cols * (cols - 1) / 2;
  }
  static std::array<Eigen::Index, 2> shape(Eigen::Index n) { return {n, n}; }

  // Hooks of api.hpp and of the family's workspace (detail/stiefel_family.hpp).
  static std::string coordinate_name(const SpecialOrthogonal& x, Eigen::Index k) {
    if (x.n() == 3) return std::string("w(") + std::to_string(k) + ") (rotation vector)";
    return detail::family_coordinate_name(x, k);
  }
  static constexpr std::pair<Eigen::Index, int> skew_slot(Eigen::Index i, Eigen::Index j, Eigen::Index n) {
    return detail::rotation_slot(i, j, n);
  }
  static Matrix random_value(Rng& rng, Eigen::Index rows, Eigen::Index cols) {
    tangent_size(rows, cols);
    Matrix x = detail::haar_stiefel<T>(rng, rows, cols);
    if (cols > 0 && detail::value_of(x.determinant()) < 0) x.col(0) *= T(-1);
    return x;
  }
  /// The canonical metric of St(n, n), tr(U^T V) / 2 on tangent vectors.
  static T metric_of(const Matrix& y, const Matrix& u, const Matrix& v) { return Stiefel<T>::metric_of(y, u, v); }
  static const Matrix& as_matrix(const Matrix& v) { return v; }
  static Tangent make_tangent(const Matrix& a, const Matrix&) { return Tangent::from_dense(a); }
  static std::pair<Matrix, Matrix> blocks(const Tangent& xi) { return {xi.dense(), Matrix(0, xi.n())}; }
};

GEOMOPT_DECLARE_COMPILED_WORKSPACE(SpecialOrthogonal)

}  // namespace geomopt
