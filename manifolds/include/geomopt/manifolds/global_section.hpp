// GlobalSection: lambda(Y) = [Y, Y_perp], an N x N orthogonal matrix whose first n columns are the Stiefel point Y.
//
// Built deterministically from Y by a Householder QR factorisation, Y = Q R (no random numbers): with D the diagonal
// of signs of R (ones past n), lambda = Q D, so lambda [I; 0] = Q_n D_n = Y exactly when Y has orthonormal columns (then
// R = D_n), and lambda is orthogonal whatever Y is. lambda is held implicitly as n Householder reflectors: applying it
// or its transpose to an N x m matrix costs O(N n m) time and the section O(N n) memory; dense() forms the N x N matrix
// and is meant for tests.
#pragma once

#include <Eigen/Core>
#include <Eigen/QR>
#include <stdexcept>
#include <string>

namespace geomopt {

template <class T>
class GlobalSection {
 public:
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;

  GlobalSection() = default;

  /// The section at Y, an N x n matrix with n <= N (orthonormal columns for lambda [I; 0] = Y).
  template <class Derived>
  explicit GlobalSection(const Eigen::MatrixBase<Derived>& y) {
    if (y.cols() > y.rows())
      throw std::invalid_argument("GlobalSection: Y must have at least as many rows as columns, got " +
                                  std::to_string(y.rows()) + "x" + std::to_string(y.cols()));
    rows_ = y.rows();
    signs_.resize(y.cols());
    if (y.cols() == 0) return;  // lambda = I, with no reflector
    qr_.compute(y.template cast<T>());
    for (Eigen::Index i = 0; i < y.cols(); ++i) signs_[i] = qr_.matrixQR()(i, i) < T(0) ? T(-1) : T(1);
  }

  Eigen::Index N() const noexcept { return rows_; }
  Eigen::Index n() const noexcept { return signs_.size(); }

  /// lambda * x for an N x m matrix x.
  template <class Derived>
  Matrix apply(const Eigen::MatrixBase<Derived>& x) const {
    check_rows(x.rows(), "apply");
    Matrix out = x.template cast<T>();
    if (n() == 0) return out;
    out.topRows(n()).array().colwise() *= signs_.array();
    out.applyOnTheLeft(qr_.householderQ());
    return out;
  }

  /// lambda^T * x for an N x m matrix x.
  template <class Derived>
  Matrix apply_transpose(const Eigen::MatrixBase<Derived>& x) const {
    check_rows(x.rows(), "apply_transpose");
    Matrix out = x.template cast<T>();
    if (n() == 0) return out;
    out.applyOnTheLeft(qr_.householderQ().transpose());
    out.topRows(n()).array().colwise() *= signs_.array();
    return out;
  }

  /// The first n columns of lambda: Y itself when Y has orthonormal columns.
  Matrix Y() const { return apply(Matrix::Identity(N(), n())); }

  /// The N x N orthogonal matrix lambda.
  Matrix dense() const { return apply(Matrix::Identity(N(), N())); }

 private:
  void check_rows(Eigen::Index rows, const char* what) const {
    if (rows != N())
      throw std::invalid_argument(std::string("GlobalSection::") + what + ": the argument has " +
                                  std::to_string(rows) + " rows, expected " + std::to_string(N()));
  }

  Eigen::Index rows_ = 0;
  Eigen::HouseholderQR<Matrix> qr_;
  Vector signs_;
};

}  // namespace geomopt
