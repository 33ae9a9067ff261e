// Sphere<T>: S^(N-1), the unit vectors of R^N, the Stiefel manifold St(N, 1), with the Euclidean metric u . v.
//
// Coordinates: a tangent vector at x is x_perp b, b in R^(N-1), in the section lambda(x) = [x, x_perp]; its N - 1
// coordinates are b, orthonormal, held by a StiefelLieAlgHorMatrix with n = 1 (an empty skew block). Retractions:
// cayley (default, a turn by 2 atan(|u| / 2) along the great circle of u) and geodesic (the great circle, a turn by
// |u|). Points are compact; random_point is uniform (a normalized Gaussian vector).
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
#include "geomopt/manifolds/lie_alg_hor.hpp"
#include "geomopt/manifolds/stiefel/family.hpp"
#include "geomopt/manifolds/stiefel/stiefel.hpp"

namespace geomopt {

/// S^{N-1}: unit vectors of R^N, the Stiefel manifold St(N, 1).
template <class T>
class Sphere : public detail::StiefelFamilyPoint<Sphere<T>, T, Eigen::Matrix<T, Eigen::Dynamic, 1>> {
 public:
  using Matrix = detail::Mat<T>;
  using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  using Tangent = StiefelLieAlgHorMatrix<T>;
  static constexpr const char* kName = "Sphere";
  static constexpr bool kSkewBlock = true;  // of order 1: no entries
  static constexpr bool kRotation = false;

  Sphere() = default;
  explicit Sphere(Vector x) : detail::StiefelFamilyPoint<Sphere, T, Vector>(std::move(x)) {}
  /// The first coordinate vector of R^N (N >= 1).
  explicit Sphere(Eigen::Index N) : Sphere(first_basis_vector(N)) {}

  static Sphere random_point(Rng& rng, Eigen::Index N) {
    if (N < 1) throw std::invalid_argument("Sphere::random_point: need N >= 1, got " + std::to_string(N));
    return Sphere(Sphere::drawn_value(rng, N, 1));
  }

  static Tangent tangent_from(const Sphere& x, const T* c) {
    return Tangent(SkewSymMatrix<T>(1), Matrix(Eigen::Map<const Matrix>(c, x.N() - 1, 1)));
  }
  static void coordinates_of(const Tangent& xi, T* c) { Eigen::Map<Matrix>(c, xi.B().rows(), xi.B().cols()) = xi.B(); }

  /// d = N - 1 for N x 1 points; std::invalid_argument unless cols = 1 and N >= 1.
  static Eigen::Index tangent_size(Eigen::Index rows, Eigen::Index cols) {
    if (cols != 1 || rows < 1)
      throw std::invalid_argument(std::string(kName) + ": expected a vector of length N >= 1 (an Nx1 matrix), got " +
                                  std::to_string(rows) + "x" + std::to_string(cols));
    return rows - 1;
  }
  static std::array<Eigen::Index, 2> shape(Eigen::Index N) { return {N, 1}; }

  // Hooks of api.hpp and of the family's workspace (detail/stiefel_family.hpp).
  /// A normalized standard Gaussian vector (rows x 1).
  static Matrix random_value(Rng& rng, Eigen::Index rows, Eigen::Index cols) {
    tangent_size(rows, cols);
    const Matrix g = detail::gaussian<T>(rng, rows, 1);
    return g / g.norm();
  }
  /// The Euclidean metric u . v of tangent vectors, written as the canonical one of St(N, 1).
  static T metric_of(const Matrix& y, const Matrix& u, const Matrix& v) { return Stiefel<T>::metric_of(y, u, v); }
  static Matrix as_matrix(const Vector& v) { return v; }
  static Tangent make_tangent(const Matrix&, Matrix b) { return Tangent(SkewSymMatrix<T>(1), std::move(b)); }
  static std::pair<Matrix, Matrix> blocks(const Tangent& xi) {
    if (xi.n() != 1)
      throw std::invalid_argument("Sphere: a tangent vector is a lift with n = 1, got n = " + std::to_string(xi.n()));
    return {Matrix::Zero(1, 1), xi.B()};
  }

 private:
  static Vector first_basis_vector(Eigen::Index N) {
    if (N < 1) throw std::invalid_argument("Sphere: need N >= 1, got " + std::to_string(N));
    return Vector::Unit(N, 0);
  }
};

GEOMOPT_DECLARE_COMPILED_WORKSPACE(Sphere)

}  // namespace geomopt
