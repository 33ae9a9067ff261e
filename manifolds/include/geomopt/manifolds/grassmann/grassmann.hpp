// Grassmann<T>: Gr(N, n), the n-dimensional subspaces of R^N, held by an N x n representative Y with orthonormal
// columns, with the metric tr(U^T V) of horizontal vectors (Y^T U = 0).
//
// Coordinates: a tangent vector at Y is Y_perp B, B (N - n) x n, in the section lambda(Y) = [Y, Y_perp]; its
// d = n (N - n) coordinates are B column-major, orthonormal for the metric, and the Tangent, GrassmannLieAlgHorMatrix,
// stores them. Retractions: cayley (default) and geodesic, the Stiefel ones restricted to horizontal lifts (A = 0), so
// the representative moves by a rotation of R^N. inverse_retract acts on the subspace of its target, whatever the
// representative (closed forms from the SVD of z2 z1^-1). Points are compact; random_point is Haar-distributed.
#pragma once

#include <Eigen/Core>
#include <array>
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

/// Gr(N, n): n-dimensional subspaces of R^N, held by an N x n representative with orthonormal columns.
template <class T>
class Grassmann : public detail::StiefelFamilyPoint<Grassmann<T>, T, detail::Mat<T>> {
 public:
  using Matrix = detail::Mat<T>;
  using Tangent = GrassmannLieAlgHorMatrix<T>;
  static constexpr const char* kName = "Grassmann";
  static constexpr bool kSkewBlock = false;
  static constexpr bool kRotation = false;

  Grassmann() = default;
  explicit Grassmann(Matrix y) : detail::StiefelFamilyPoint<Grassmann, T, detail::Mat<T>>(std::move(y)) {}
  /// The subspace spanned by the first n coordinate vectors.
  Grassmann(Eigen::Index N, Eigen::Index n) : Grassmann(Stiefel<T>(N, n).value()) {}

  /// A Haar-distributed representative.
  static Grassmann random_point(Rng& rng, Eigen::Index N, Eigen::Index n) {
    return Grassmann(Grassmann::drawn_value(rng, N, n));
  }

  static Tangent tangent_from(const Grassmann& x, const T* c) {
    return Tangent(Matrix(Eigen::Map<const Matrix>(c, x.N() - x.n(), x.n())));
  }
  static void coordinates_of(const Tangent& xi, T* c) { Eigen::Map<Matrix>(c, xi.B().rows(), xi.B().cols()) = xi.B(); }

  /// d = n (N - n) for N x n representatives; std::invalid_argument unless 0 <= n <= N.
  static Eigen::Index tangent_size(Eigen::Index rows, Eigen::Index cols) {
    detail::require_stiefel_shape(kName, rows, cols);
    return cols * (rows - cols);
  }
  static std::array<Eigen::Index, 2> shape(Eigen::Index N, Eigen::Index n) { return {N, n}; }

  // Hooks of api.hpp and of the family's workspace (detail/stiefel_family.hpp).
  static Matrix random_value(Rng& rng, Eigen::Index rows, Eigen::Index cols) {
    return detail::haar_stiefel<T>(rng, rows, cols);
  }
  /// The metric tr(U^T V) of horizontal vectors.
  static T metric_of(const Matrix&, const Matrix& u, const Matrix& v) { return u.cwiseProduct(v).sum(); }
  static const Matrix& as_matrix(const Matrix& v) { return v; }
  static Tangent make_tangent(const Matrix&, Matrix b) { return Tangent(std::move(b)); }
  static std::pair<Matrix, Matrix> blocks(const Tangent& xi) { return {Matrix::Zero(xi.n(), xi.n()), xi.B()}; }
};

GEOMOPT_DECLARE_COMPILED_WORKSPACE(Grassmann)

}  // namespace geomopt
