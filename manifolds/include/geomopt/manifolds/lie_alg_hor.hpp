// Horizontal lifts into the Lie algebra so(N): the global tangent representation of Stiefel and Grassmann points.
//
//   StiefelLieAlgHorMatrix<T>    blocks A (n x n, skew, packed) and B ((N - n) x n); dense form [A, -B^T; B, 0]
//   GrassmannLieAlgHorMatrix<T>  block B ((N - n) x n);                               dense form [0, -B^T; B, 0]
//
// Both are ptree leaves: the storage of the Stiefel lift is the tuple (A's packed vector, B), of the Grassmann lift
// B alone, and rebuild keeps N and n from the prototype. Invariant: dense() is skew-symmetric and vanishes outside
// the first n columns and their transposed rows, so it is determined by (A, B); products with dense matrices use the
// blocks and cost O(N n m) for an N x m argument, never forming the N x N matrix.
#pragma once

#include <Eigen/Core>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "geomopt/manifolds/packed.hpp"
#include "geomopt/ptree.hpp"

namespace geomopt {

template <class T>
class GrassmannLieAlgHorMatrix {
 public:
  using Scalar = T;
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;

  GrassmannLieAlgHorMatrix() = default;
  /// The zero lift for Gr(N, n); requires 0 <= n <= N.
  GrassmannLieAlgHorMatrix(Eigen::Index N, Eigen::Index n) {
    if (n < 0 || n > N)
      throw std::invalid_argument("LieAlgHorMatrix: need 0 <= n <= N, got N = " + std::to_string(N) +
                                  ", n = " + std::to_string(n));
    b_ = Matrix::Zero(N - n, n);
  }
  /// Over the (N - n) x n block b.
  explicit GrassmannLieAlgHorMatrix(Matrix b) : b_(std::move(b)) {}

  Eigen::Index N() const noexcept { return b_.rows() + b_.cols(); }
  Eigen::Index n() const noexcept { return b_.cols(); }
  Matrix& B() noexcept { return b_; }
  const Matrix& B() const noexcept { return b_; }

  /// The N x N matrix [0, -B^T; B, 0].
  Matrix dense() const {
    const Eigen::Index n = this->n(), N = this->N();
    Matrix d = Matrix::Zero(N, N);
    d.bottomLeftCorner(N - n, n) = b_;
    d.topRightCorner(n, N - n) = -b_.transpose();
    return d;
  }

  /// dense() * x for an N x m matrix x, from the block: [-B^T x2; B x1] with x1 the first n rows.
  template <class Derived>
  Matrix operator*(const Eigen::MatrixBase<Derived>& x) const {
    const Eigen::Index n = this->n(), N = this->N();
    if (x.rows() != N)
      throw std::invalid_argument("LieAlgHorMatrix * X: X has " + std::to_string(x.rows()) + " rows, expected " +
                                  std::to_string(N));
    Matrix out(N, x.cols());
    out.topRows(n) = -b_.transpose() * x.bottomRows(N - n).template cast<T>();
    out.bottomRows(N - n) = b_ * x.topRows(n).template cast<T>();
    return out;
  }

 private:
  Matrix b_;
};

// The Stiefel lift is the Grassmann lift plus the skew block A in the top left corner.
template <class T>
class StiefelLieAlgHorMatrix {
 public:
  using Scalar = T;
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;

  StiefelLieAlgHorMatrix() = default;
  /// The zero lift for St(N, n); requires 0 <= n <= N.
  StiefelLieAlgHorMatrix(Eigen::Index N, Eigen::Index n) : hor_(N, n), a_(n) {}
  /// Over the given blocks: a is the n x n skew block, b the (N - n) x n block.
  StiefelLieAlgHorMatrix(SkewSymMatrix<T> a, Matrix b) : hor_(std::move(b)), a_(std::move(a)) {
    if (hor_.n() != a_.n())
      throw std::invalid_argument("StiefelLieAlgHorMatrix: B has " + std::to_string(hor_.n()) +
                                  " columns, A is " + std::to_string(a_.n()) + "x" + std::to_string(a_.n()));
  }

  Eigen::Index N() const noexcept { return hor_.N(); }
  Eigen::Index n() const noexcept { return hor_.n(); }
  SkewSymMatrix<T>& A() noexcept { return a_; }
  const SkewSymMatrix<T>& A() const noexcept { return a_; }
  Matrix& B() noexcept { return hor_.B(); }
  const Matrix& B() const noexcept { return hor_.B(); }

  /// The N x N matrix [A, -B^T; B, 0].
  Matrix dense() const {
    Matrix d = hor_.dense();
    d.topLeftCorner(n(), n()) = a_.dense();
    return d;
  }

  /// dense() * x for an N x m matrix x, from the blocks: [A x1 - B^T x2; B x1] with x1 the first n rows.
  template <class Derived>
  Matrix operator*(const Eigen::MatrixBase<Derived>& x) const {
    Matrix out = hor_ * x;
    out.topRows(n()) += a_ * x.topRows(n()).template cast<T>();
    return out;
  }

 private:
  GrassmannLieAlgHorMatrix<T> hor_;
  SkewSymMatrix<T> a_;
};

// The ptree leaf protocol.
template <class T>
auto free_parameters(StiefelLieAlgHorMatrix<T>& x) {
  return std::tie(x.A().storage(), x.B());
}
template <class T>
auto free_parameters(const StiefelLieAlgHorMatrix<T>& x) {
  return std::tie(x.A().storage(), x.B());
}
template <class T, class U>
StiefelLieAlgHorMatrix<U> rebuild(const StiefelLieAlgHorMatrix<T>& prototype,
                                  std::tuple<Eigen::Matrix<U, Eigen::Dynamic, 1>,
                                             Eigen::Matrix<U, Eigen::Dynamic, Eigen::Dynamic>>&& data) {
  auto a = rebuild(prototype.A(), std::move(std::get<0>(data)));  // keeps n, also for n = 1
  auto& b = std::get<1>(data);
  if (a.n() != prototype.n() || b.rows() != prototype.N() - prototype.n() || b.cols() != prototype.n())
    throw std::invalid_argument("StiefelLieAlgHorMatrix::rebuild: blocks do not fit St(" +
                                std::to_string(prototype.N()) + ", " + std::to_string(prototype.n()) + ")");
  return StiefelLieAlgHorMatrix<U>(std::move(a), std::move(b));
}
template <class T>
std::string ptree_type_name(const StiefelLieAlgHorMatrix<T>&) {
  return "StiefelLieAlgHorMatrix";
}

template <class T>
Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>& free_parameters(GrassmannLieAlgHorMatrix<T>& x) {
  return x.B();
}
template <class T>
const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>& free_parameters(const GrassmannLieAlgHorMatrix<T>& x) {
  return x.B();
}
template <class T, class U>
GrassmannLieAlgHorMatrix<U> rebuild(const GrassmannLieAlgHorMatrix<T>& prototype,
                                    Eigen::Matrix<U, Eigen::Dynamic, Eigen::Dynamic>&& b) {
  if (b.rows() != prototype.B().rows() || b.cols() != prototype.B().cols())
    throw std::invalid_argument("GrassmannLieAlgHorMatrix::rebuild: block does not fit Gr(" +
                                std::to_string(prototype.N()) + ", " + std::to_string(prototype.n()) + ")");
  return GrassmannLieAlgHorMatrix<U>(std::move(b));
}
template <class T>
std::string ptree_type_name(const GrassmannLieAlgHorMatrix<T>&) {
  return "GrassmannLieAlgHorMatrix";
}

}  // namespace geomopt
