// GlobalSection: lambda(Y) = [Y, Y_perp], an N x N orthogonal matrix whose first n columns are the Stiefel point Y.
//
// Built deterministically from Y by a Householder QR factorisation, Y = Q R (no random numbers), lambda = Q. The
// reflectors below leave R's diagonal nonnegative, so lambda [I; 0] = Q_n = Y exactly when Y has orthonormal columns
// (then R = I), and lambda is orthogonal whatever Y is.
//
// Each reflector maps its column onto +|x| e_k (Golub and Van Loan, Algorithm 5.1.1, with the cancellation-free form
// of v_1 for x_1 > 0), not onto -sign(x_1) |x| e_k as LAPACK's and Eigen's do. With the usual choice the complement
// columns Y_perp flip between two frames wherever a pivot x_1 crosses zero, a hypersurface an optimizer crosses all
// the time; with this one lambda depends continuously on Y except where a column is exactly +e_k. Coordinates of
// tangent vectors at nearby points are then nearly comparable, which is what an optimizer that keeps them from one
// point to the next without transporting them (Ceres's L-BFGS through the adapter) relies on.
//
// Two representations, chosen by SectionPolicy:
//   recomputed   n Householder reflectors: applying lambda or its transpose to an N x m matrix costs O(N n m) time,
//                the section O(N n) memory. A retraction rebuilds it from the new point.
//   transported  the dense N x N matrix: applying costs O(N^2 m), the section O(N^2) memory, and a retraction moves
//                it by the step's orthogonal factor, lambda <- lambda (I + W (F - I) W^T), in O(N^2 n).
#pragma once

#include <Eigen/Core>
#include <Eigen/Householder>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "geomopt/manifolds/common.hpp"

namespace geomopt {

namespace detail {

/// The section's reflector of a column x, in place: x(0) becomes |x| and the rest the essential part v_2.. of
/// v = [1; essential] with (I - tau v v^T) x = |x| e_1; returns tau. Golub and Van Loan's choice (see the top of
/// this file); shared with the optimizers' allocation-free stepper, which must build the same section.
template <class Column>
typename std::decay_t<Column>::Scalar section_reflector(Column&& x) {
  using T = typename std::decay_t<Column>::Scalar;
  using std::sqrt;  // and sqrt of ceres::Jet by argument-dependent lookup
  const Eigen::Index rest = x.size();
  const T x1 = x(0);
  const T tail = rest > 1 ? x.tail(rest - 1).squaredNorm() : T(0);
  if (!(tail > (std::numeric_limits<T>::min)())) {
    // x = x1 e_1 already: the identity when x1 >= 0, else the reflection of e_1.
    x(0) = x1 < T(0) ? -x1 : x1;
    if (rest > 1) x.tail(rest - 1).setZero();
    return x1 < T(0) ? T(2) : T(0);
  }
  const T mu = sqrt(x1 * x1 + tail);
  const T v1 = x1 <= T(0) ? x1 - mu : -tail / (x1 + mu);  // x1 - mu without cancellation
  x.tail(rest - 1) /= v1;
  x(0) = mu;
  return T(2) * v1 * v1 / (tail + v1 * v1);
}

}  // namespace detail

template <class T>
class GlobalSection {
 public:
  using Scalar = T;
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;

  GlobalSection() = default;

  /// The section at Y, an N x n matrix with n <= N (orthonormal columns for lambda [I; 0] = Y).
  template <class Derived>
  explicit GlobalSection(const Eigen::MatrixBase<Derived>& y, SectionPolicy policy = SectionPolicy::recomputed)
      : policy_(policy) {
    if (y.cols() > y.rows())
      throw std::invalid_argument("GlobalSection: Y must have at least as many rows as columns, got " +
                                  std::to_string(y.rows()) + "x" + std::to_string(y.cols()));
    factor(y.template cast<T>());
    if (policy_ == SectionPolicy::transported) {
      dense_ = householder_apply(Matrix::Identity(rows_, rows_));
      qr_ = Matrix();
      tau_ = Vector();
    }
  }

  SectionPolicy policy() const noexcept { return policy_; }
  Eigen::Index N() const noexcept { return rows_; }
  Eigen::Index n() const noexcept { return cols_; }

  /// lambda * x for an N x m matrix x.
  template <class Derived>
  Matrix apply(const Eigen::MatrixBase<Derived>& x) const {
    check_rows(x.rows(), "apply");
    if (policy_ == SectionPolicy::transported) return dense_ * x.template cast<T>();
    return householder_apply(x.template cast<T>());
  }

  /// lambda^T * x for an N x m matrix x.
  template <class Derived>
  Matrix apply_transpose(const Eigen::MatrixBase<Derived>& x) const {
    check_rows(x.rows(), "apply_transpose");
    if (policy_ == SectionPolicy::transported) return dense_.transpose() * x.template cast<T>();
    Matrix out = x.template cast<T>();
    if (n() == 0) return out;
    out.applyOnTheLeft(reflectors().transpose());
    return out;
  }

  /// The first n columns of lambda: Y itself when Y has orthonormal columns.
  Matrix Y() const {
    if (policy_ == SectionPolicy::transported) return dense_.leftCols(n());
    return apply(Matrix::Identity(N(), n()));
  }

  /// The N x N orthogonal matrix lambda.
  Matrix dense() const {
    if (policy_ == SectionPolicy::transported) return dense_;
    return apply(Matrix::Identity(N(), N()));
  }

  /// Moves the section along a step whose N x N orthogonal factor is G = I + W (F - I) W^T, where W = [E, [0; q]]
  /// has orthonormal columns (E = [I_n; 0], q an (N - n) x k basis in complement coordinates) and F is the
  /// (n + k) x (n + k) core of the step; y_new = lambda G E is the new point. recomputed: the section is rebuilt from
  /// y_new, O(N n^2). transported: lambda <- lambda G, O(N^2 n).
  void transport(const Matrix& y_new, const Matrix& q, const Matrix& f) {
    const Eigen::Index n = this->n(), k = q.cols();
    if (y_new.rows() != N() || y_new.cols() != n || q.rows() != N() - n || f.rows() != n + k || f.cols() != n + k)
      throw std::invalid_argument("GlobalSection::transport: the step does not fit a section of St(" +
                                  std::to_string(N()) + ", " + std::to_string(n) + ")");
    if (policy_ == SectionPolicy::recomputed) {
      factor(y_new);
      return;
    }
    // lambda W = [lambda E, lambda [0; q]] and lambda G = lambda + (lambda W)(F - I) W^T.
    Matrix lw(N(), n + k);
    lw.leftCols(n) = dense_.leftCols(n);
    lw.rightCols(k).noalias() = dense_.rightCols(N() - n) * q;
    Matrix g = f;
    g.diagonal().array() -= T(1);
    const Matrix h = lw * g;
    dense_.leftCols(n) += h.leftCols(n);
    dense_.rightCols(N() - n).noalias() += h.rightCols(k) * q.transpose();
  }

 private:
  using Reflectors = Eigen::HouseholderSequence<Matrix, Vector>;

  // Householder QR of y in Eigen's compact storage (R on and above the diagonal, each reflector's essential part
  // below it, H_k = I - tau_k v_k v_k^T with v_k = [1; essential]), by the reflectors described at the top.
  void factor(const Matrix& y) {
    rows_ = y.rows();
    const Eigen::Index n = y.cols();
    cols_ = n;
    if (n == 0) return;  // lambda = I, with no reflector
    qr_ = y;
    tau_.resize(n);
    Vector workspace(n);
    for (Eigen::Index k = 0; k < n; ++k) {
      const Eigen::Index rest = rows_ - k;
      auto column = qr_.col(k).tail(rest);
      tau_(k) = detail::section_reflector(column);
      if (k + 1 < n)
        qr_.bottomRightCorner(rest, n - k - 1)
            .applyHouseholderOnTheLeft(qr_.col(k).tail(rest - 1), tau_(k), workspace.data());
    }
  }

  Reflectors reflectors() const { return Reflectors(qr_, tau_); }

  Matrix householder_apply(Matrix out) const {
    if (n() == 0) return out;
    out.applyOnTheLeft(reflectors());
    return out;
  }

  void check_rows(Eigen::Index rows, const char* what) const {
    if (rows != N())
      throw std::invalid_argument(std::string("GlobalSection::") + what + ": the argument has " +
                                  std::to_string(rows) + " rows, expected " + std::to_string(N()));
  }

  SectionPolicy policy_ = SectionPolicy::recomputed;
  Eigen::Index rows_ = 0, cols_ = 0;
  Matrix qr_;   // recomputed: R and the reflectors' essential parts
  Vector tau_;  // recomputed: the reflectors' coefficients
  Matrix dense_;
};

}  // namespace geomopt
