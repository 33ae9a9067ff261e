// Stiefel<T>: St(N, n), the N x n matrices with orthonormal columns (Y^T Y = I), with the canonical metric
// tr(U^T (I - Y Y^T / 2) V).
//
// Coordinates: a tangent vector at Y is Y A + Y_perp B for A n x n skew and B (N - n) x n in the section
// lambda(Y) = [Y, Y_perp] (global_section.hpp); its d = N n - n(n + 1)/2 coordinates are A's strict lower triangle row
// by row (SkewSymMatrix's packing), then B column-major, and are orthonormal: |A|_F^2 / 2 + |B|_F^2 = |c|^2. The
// Tangent, StiefelLieAlgHorMatrix, stores exactly those numbers. Retractions: cayley (default) and geodesic, both
// O(N n^2) through the 2n x 2n core (detail/stiefel_family.hpp). Points are compact. random_point is Haar-distributed.
// Invariants (contract.hpp): R_Y(0) = Y; R_Y(c) = Y + to_ambient(Y, c) + O(|c|^2); check(R_Y(c)) is rounding at any
// finite norm.
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
#include "geomopt/manifolds/packed.hpp"
#include "geomopt/manifolds/stiefel/family.hpp"

namespace geomopt {

/// St(N, n): N x n matrices with orthonormal columns, with the canonical metric.
template <class T>
class Stiefel : public detail::StiefelFamilyPoint<Stiefel<T>, T, detail::Mat<T>> {
 public:
  using Matrix = detail::Mat<T>;
  using Tangent = StiefelLieAlgHorMatrix<T>;
  static constexpr const char* kName = "Stiefel";
  static constexpr bool kSkewBlock = true;
  static constexpr bool kRotation = false;

  Stiefel() = default;
  /// Holds y as it is (check(x) tells how far it is from the manifold).
  explicit Stiefel(Matrix y) : detail::StiefelFamilyPoint<Stiefel, T, detail::Mat<T>>(std::move(y)) {}
  /// The point [I_n; 0].
  Stiefel(Eigen::Index N, Eigen::Index n) : Stiefel(identity(N, n)) {}

  /// A Haar-distributed point.
  static Stiefel random_point(Rng& rng, Eigen::Index N, Eigen::Index n) {
    return Stiefel(Stiefel::drawn_value(rng, N, n));
  }

  /// The tangent at x with coordinates c (packed A, then B column-major).
  static Tangent tangent_from(const Stiefel& x, const T* c) {
    const Eigen::Index n = x.n(), skew = n * (n - 1) / 2;
    SkewSymMatrix<T> a(n);
    a.storage() = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>(c, skew);
    return Tangent(std::move(a), Matrix(Eigen::Map<const Matrix>(c + skew, x.N() - n, n)));
  }
  /// c <- the coordinates of xi.
  static void coordinates_of(const Tangent& xi, T* c) {
    const Eigen::Index skew = xi.A().storage().size();
    Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>(c, skew) = xi.A().storage();
    Eigen::Map<Matrix>(c + skew, xi.B().rows(), xi.B().cols()) = xi.B();
  }

  /// d = N n - n(n + 1)/2 for N x n points; std::invalid_argument unless 0 <= n <= N.
  static Eigen::Index tangent_size(Eigen::Index rows, Eigen::Index cols) {
    detail::require_stiefel_shape(kName, rows, cols);
    return rows * cols - cols * (cols + 1) / 2;
  }
  static std::array<Eigen::Index, 2> shape(Eigen::Index N, Eigen::Index n) { return {N, n}; }

  // Hooks of api.hpp and of the family's workspace (detail/stiefel_family.hpp).
  static Matrix random_value(Rng& rng, Eigen::Index rows, Eigen::Index cols) {
    return detail::haar_stiefel<T>(rng, rows, cols);
  }
  /// The canonical metric tr(U^T (I - Y Y^T / 2) V).
  static T metric_of(const Matrix& y, const Matrix& u, const Matrix& v) {
    return u.cwiseProduct(v).sum() - T(0.5) * (y.transpose() * u).cwiseProduct(y.transpose() * v).sum();
  }
  // The tangent's dense blocks (A n x n skew, B), and the tangent of given blocks: for code that works with blocks.
  static const Matrix& as_matrix(const Matrix& v) { return v; }
  static Tangent make_tangent(const Matrix& a, Matrix b) {
    return Tangent(SkewSymMatrix<T>::from_dense(a), std::move(b));
  }
  static std::pair<Matrix, Matrix> blocks(const Tangent& xi) { return {xi.A().dense(), xi.B()}; }

 protected:
  static Matrix identity(Eigen::Index N, Eigen::Index n) {
    if (n < 0 || n > N)
      throw std::invalid_argument(std::string(kName) + ": need 0 <= n <= N, got N = " + std::to_string(N) +
                                  ", n = " + std::to_string(n));
    return Matrix::Identity(N, n);
  }
};

GEOMOPT_DECLARE_COMPILED_WORKSPACE(Stiefel)

}  // namespace geomopt
