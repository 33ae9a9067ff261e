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
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "geomopt/manifolds/common.hpp"
#include "geomopt/manifolds/detail/dense_kernels.hpp"

namespace geomopt {

namespace detail {

// The move of a dense section along a step whose N x N orthogonal factor is G = I + W (F - I) W^T, W = [E, [0; q]]
// (E = [I_n; 0], q an (N - n) x k basis in complement coordinates, F the (n + k) x (n + k) core function of the step):
// y <- lambda W F E, the new point, and lambda <- lambda G = lambda + (lambda W)(F - I) W^T, in O(N^2 n). lw, h
// (N x (n + k)) and fm ((n + k) x (n + k)) are scratch buffers of those sizes; nothing is allocated.
template <class T>
void transport_dense_section(Mat<T>& lambda, DenseOperand<T> q, const Mat<T>& f, DenseDestination<T> y, Mat<T>& lw,
                             Mat<T>& h, Mat<T>& fm) {
  const Eigen::Index N = lambda.rows(), n = y.cols(), k = q.cols(), rest = N - n;
  lw.leftCols(n) = lambda.leftCols(n);
  if (k > 0) dense_product<T>(lw.rightCols(k), lambda.rightCols(rest), q);
  dense_product<T>(y, lw, f.leftCols(n));
  fm = f;
  fm.diagonal().array() -= T(1);
  dense_product<T>(h, lw, fm);
  lambda.leftCols(n) += h.leftCols(n);
  if (k > 0)
    dense_product<T>(lambda.rightCols(rest), h.rightCols(k), ProductOp::plain, q, ProductOp::transposed, T(1), true);
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
    detail::apply_householder_q(out, qr_, tau_.data(), n(), true);
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
    Matrix y(N(), n), lw(N(), n + k), h(N(), n + k), fm(n + k, n + k);
    detail::transport_dense_section<T>(dense_, q, f, y, lw, h, fm);
  }

  /// Exchanges the dense N x N matrix of a transported section with m (O(1), nothing copied): how an allocation-free
  /// workspace (detail/stiefel_family.hpp) takes the section back after moving it. m must be N x N.
  void swap_dense(Matrix& m) {
    if (policy_ != SectionPolicy::transported || m.rows() != N() || m.cols() != N())
      throw std::invalid_argument("GlobalSection::swap_dense: needs a transported section and an " +
                                  std::to_string(N()) + "x" + std::to_string(N()) + " matrix");
    dense_.swap(m);
  }

 private:
  // Householder QR of y in Eigen's compact storage (R on and above the diagonal, each reflector's essential part
  // below it, H_k = I - tau_k v_k v_k^T with v_k = [1; essential]), by the reflectors described at the top.
  void factor(const Matrix& y) {
    rows_ = y.rows();
    cols_ = y.cols();
    qr_ = y;
    tau_.resize(cols_);
    detail::householder_qr_in_place(qr_, tau_.data(), detail::ReflectorConvention::section);
  }

  Matrix householder_apply(Matrix out) const {
    detail::apply_householder_q(out, qr_, tau_.data(), n(), false);
    return out;
  }

  void check_rows(Eigen::Index rows, const char* what) const {
    if (rows != N())
      throw std::invalid_argument(std::string("GlobalSection::") + what + ": the argument has " + std::to_string(rows) +
                                  " rows, expected " + std::to_string(N()));
  }

  SectionPolicy policy_ = SectionPolicy::recomputed;
  Eigen::Index rows_ = 0, cols_ = 0;
  Matrix qr_;   // recomputed: R and the reflectors' essential parts
  Vector tau_;  // recomputed: the reflectors' coefficients
  Matrix dense_;
};

}  // namespace geomopt
