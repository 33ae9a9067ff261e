// The allocation-free dense kernels every manifold's workspace is built from: tiled products, Householder QR with the
// two reflector conventions the library uses, and the matrix exponential and Cayley transform of a small square core.
//
// Contract: every function works on memory its caller owns (Eigen::Ref blocks, raw column-major buffers, the buffers
// of a SkewCoreKernels made once) and allocates nothing for float and double: products are tiled so that Eigen's GEMM
// packs its panels on the stack (EIGEN_STACK_ALLOCATION_LIMIT, 128 KiB by default; an Eigen built without alloca,
// with a smaller limit, or with OpenMP would allocate there), and reflectors are applied a column at a time. Every
// kernel is written for any scalar an Eigen matrix holds (float, double, ceres::Jet): the allocating matrix functions
// of detail/matrix_functions.hpp call these same kernels with temporary buffers, so each piece of arithmetic exists
// once.
//
// Invariants: householder_qr_in_place(a, tau, c) followed by apply_householder_q(x, a, tau, k, transpose) applies
// Q = H_0 ... H_{k-1} (or Q^T) with H_i = I - tau_i v_i v_i^T, v_i = [1; a(i+1:, i)]; with the section convention R's
// diagonal is nonnegative (section_reflector), so Q [I; 0] = A exactly when A has orthonormal columns.
#pragma once

#include <Eigen/Core>
#include <Eigen/Householder>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>

namespace geomopt::detail {

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;

// The real part of a scalar: the value itself, or the value of a dual number's real part.
template <class T>
double value_of(const T& x) {
  if constexpr (std::is_arithmetic_v<T>) {
    return static_cast<double>(x);
  } else {
    return value_of(x.a);
  }
}

template <class T>
std::size_t bytes_of(const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>& m) {
  return static_cast<std::size_t>(m.size()) * sizeof(T);
}
template <class T>
std::size_t bytes_of(const Eigen::Matrix<T, Eigen::Dynamic, 1>& v) {
  return static_cast<std::size_t>(v.size()) * sizeof(T);
}

// ---- products ----

// The side of a product tile: Eigen's GEMM packs at most tile x tile entries of each operand, and allocates that
// panel on the heap unless it fits EIGEN_STACK_ALLOCATION_LIMIT. Half the limit per panel leaves room for both.
template <class T>
constexpr Eigen::Index dense_product_tile() {
  Eigen::Index t = 8;
  while (static_cast<std::size_t>((t + 8) * (t + 8)) * sizeof(T) <= EIGEN_STACK_ALLOCATION_LIMIT / 2) t += 8;
  return t;
}

template <class T>
using DenseDestination = Eigen::Ref<Mat<T>, 0, Eigen::OuterStride<>>;
template <class T>
using DenseOperand = Eigen::Ref<const Mat<T>, 0, Eigen::OuterStride<>>;

// Whether an operand of dense_product enters transposed.
enum class ProductOp { plain, transposed };

// dst = alpha op(lhs) op(rhs) (accumulate: dst += ...), tiled for the stack, the depth loop innermost so a
// destination tile stays in cache. The operands are column-major blocks bound by Ref without a copy, and enter
// transposed by the flag: a transposed expression would not bind to the Ref without a (heap) copy. At most one operand
// is transposed. Funnelling every product through these few instantiations also keeps Eigen's GEMM from being stamped
// per expression type.
template <class T>
void dense_product(DenseDestination<T> dst, DenseOperand<T> lhs, ProductOp lhs_op, DenseOperand<T> rhs,
                   ProductOp rhs_op, T alpha, bool accumulate) {
  constexpr Eigen::Index t = dense_product_tile<T>();
  const Eigen::Index rows = dst.rows(), cols = dst.cols();
  const Eigen::Index depth = lhs_op == ProductOp::plain ? lhs.cols() : lhs.rows();
  if (!accumulate) dst.setZero();
  for (Eigen::Index j = 0; j < cols; j += t) {
    const Eigen::Index nj = std::min(t, cols - j);
    for (Eigen::Index i = 0; i < rows; i += t) {
      const Eigen::Index mi = std::min(t, rows - i);
      auto d = dst.block(i, j, mi, nj);
      for (Eigen::Index p = 0; p < depth; p += t) {
        const Eigen::Index kp = std::min(t, depth - p);
        if (lhs_op == ProductOp::transposed) {
          d.noalias() += alpha * lhs.block(p, i, kp, mi).transpose() * rhs.block(p, j, kp, nj);
        } else if (rhs_op == ProductOp::transposed) {
          d.noalias() += alpha * lhs.block(i, p, mi, kp) * rhs.block(j, p, nj, kp).transpose();
        } else {
          d.noalias() += alpha * lhs.block(i, p, mi, kp) * rhs.block(p, j, kp, nj);
        }
      }
    }
  }
}
// The common case: dst = lhs rhs.
template <class T>
void dense_product(DenseDestination<T> dst, DenseOperand<T> lhs, DenseOperand<T> rhs) {
  dense_product<T>(dst, lhs, ProductOp::plain, rhs, ProductOp::plain, T(1), false);
}

// ---- Householder reflectors ----

// The section's reflector of a column x, in place: x(0) becomes |x| and the rest the essential part v_2.. of
// v = [1; essential] with (I - tau v v^T) x = |x| e_1; returns tau. This is Golub and Van Loan's choice (Algorithm
// 5.1.1, with the cancellation-free form of v_1 for x_1 > 0), not LAPACK's and Eigen's -sign(x_1) |x| e_1: with it
// the section depends continuously on its point except where a column is exactly +e_k (global_section.hpp).
template <class Column>
typename std::decay_t<Column>::Scalar section_reflector(Column&& x) {
  using T = typename std::decay_t<Column>::Scalar;
  using std::sqrt;  // and sqrt of ceres::Jet by argument-dependent lookup
  const Eigen::Index rest = x.size();
  const T x1 = x(0);
  const T tail = rest > 1 ? T(x.tail(rest - 1).squaredNorm()) : T(0);
  if (!(tail > (std::numeric_limits<T>::min)())) {
    // x = x1 e_1 already: the identity when x1 >= 0, else the reflection of e_1.
    x(0) = x1 < T(0) ? T(-x1) : x1;
    if (rest > 1) x.tail(rest - 1).setZero();
    return x1 < T(0) ? T(2) : T(0);
  }
  const T mu = sqrt(x1 * x1 + tail);
  const T v1 = x1 <= T(0) ? T(x1 - mu) : T(-tail / (x1 + mu));  // x1 - mu without cancellation
  x.tail(rest - 1) /= v1;
  x(0) = mu;
  return T(2) * v1 * v1 / (tail + v1 * v1);
}

// x <- (I - tau v v^T) x, v = [1; essential], a column at a time (Eigen's applyHouseholderOnTheLeft evaluates
// tau * essential into a temporary, on the heap for long columns).
template <class X, class E, class T>
void apply_reflector(X&& x, const E& essential, T tau) {
  if (tau == T(0)) return;
  const Eigen::Index m = x.rows() - 1;
  for (Eigen::Index j = 0; j < x.cols(); ++j) {
    auto tail = x.col(j).tail(m);
    const T w = tau * (x(0, j) + essential.dot(tail));
    x(0, j) -= w;
    tail -= w * essential;
  }
}

// Which reflector a Householder QR uses: Eigen's (makeHouseholder, as Eigen::HouseholderQR computes it unblocked), for
// the complement basis of a step, or the section's (section_reflector above), for the section at a point.
enum class ReflectorConvention { eigen, section };

// Householder QR in place: reflector i below the diagonal of column i with tau[i], R on and above.
template <class A, class T>
void householder_qr_in_place(A&& a, T* tau, ReflectorConvention convention) {
  const Eigen::Index rows = a.rows(), cols = a.cols(), size = std::min(rows, cols);
  for (Eigen::Index i = 0; i < size; ++i) {
    auto column = a.col(i).tail(rows - i);
    if (convention == ReflectorConvention::section) {
      tau[i] = section_reflector(column);
    } else {
      T beta;
      column.makeHouseholderInPlace(tau[i], beta);
      a(i, i) = beta;
    }
    apply_reflector(a.block(i, i + 1, rows - i, cols - i - 1), a.col(i).tail(rows - i - 1), tau[i]);
  }
}

// x <- Q x (transpose: Q^T x) for Q = H_0 ... H_{count-1}, the reflectors of householder_qr_in_place(qr).
template <class X, class A, class T>
void apply_householder_q(X&& x, const A& qr, const T* tau, Eigen::Index count, bool transpose) {
  const Eigen::Index rows = qr.rows();
  for (Eigen::Index s = 0; s < count; ++s) {
    const Eigen::Index i = transpose ? s : count - 1 - s;
    apply_reflector(x.bottomRows(rows - i), qr.col(i).tail(rows - i - 1), tau[i]);
  }
}

// ---- the exponential and the Cayley transform of a core ----

// exp(S) and the Cayley transform (I - S/2)^-1 (I + S/2) of an m x m matrix into preallocated buffers.
//   exponential: S is scaled by 2^-s so that ||S 2^-s||_1 <= 1/2 (the 1-norm of the real parts, in double), the
//     Taylor polynomial of degree 15 is evaluated by the Paterson-Stockmeyer scheme on four blocks (six products),
//     and the result is squared s times. The truncation error at norm 1/2 is below 2^-16 / 16! < 1e-18, under double
//     rounding. A non-finite S gives NaN entries (no scaling brings it to 1/2).
//   cayley: an LU solve with partial pivoting (I - S/2 is nonsingular for skew S, its symmetric part being I). The LU
//     is left-looking (Crout order): each entry of L, U and the solution takes its inner product as one dot product,
//     subtracted once; right-looking updates would round every partial sum at the magnitude of the identity's
//     entries, which costs float about twice Eigen's (GEMM-accumulated) error on a 32 x 32 core.
// Neither throws. These two functions are the hot path of every Stiefel-family retraction below kSpectralNorm.
template <class T>
class SkewCoreKernels {
 public:
  SkewCoreKernels() = default;
  explicit SkewCoreKernels(Eigen::Index m)
      : x_(m, m), x2_(m, m), x3_(m, m), x4_(m, m), f_(m, m), tmp_(m, m), lu_(m, m) {}

  Eigen::Index size() const noexcept { return x_.rows(); }
  std::size_t bytes() const noexcept { return 7 * bytes_of(x_); }

  // out <- exp(s); s and out are size() x size() and may not alias.
  void exponential(const Mat<T>& s, Mat<T>& out) {
    const Eigen::Index m = s.rows();
    if (m == 0) return;
    double norm = 0;
    for (Eigen::Index j = 0; j < m; ++j) {
      double sum = 0;
      for (Eigen::Index i = 0; i < m; ++i) sum += std::abs(value_of(s(i, j)));
      norm = sum > norm ? sum : norm;
    }
    if (!std::isfinite(norm)) {
      out.setConstant(T(std::numeric_limits<double>::quiet_NaN()));
      return;
    }
    int squarings = 0;
    if (norm > 0.5) squarings = static_cast<int>(std::ceil(std::log2(norm / 0.5)));
    x_ = s * T(std::ldexp(1.0, -squarings));
    dense_product<T>(x2_, x_, x_);
    dense_product<T>(x3_, x2_, x_);
    dense_product<T>(x4_, x2_, x2_);
    double c[16];
    c[0] = 1;
    for (int k = 1; k < 16; ++k) c[k] = c[k - 1] / k;
    const auto identity = Mat<T>::Identity(m, m);
    auto block = [&](int b) {
      return T(c[4 * b]) * identity + T(c[4 * b + 1]) * x_ + T(c[4 * b + 2]) * x2_ + T(c[4 * b + 3]) * x3_;
    };
    f_ = block(3);
    for (int b = 2; b >= 0; --b) {
      dense_product<T>(tmp_, x4_, f_);
      f_ = tmp_ + block(b);
    }
    for (int k = 0; k < squarings; ++k) {
      dense_product<T>(tmp_, f_, f_);
      f_.swap(tmp_);  // same sizes: exchanges the buffers, allocates nothing
    }
    out = f_;
  }

  // out <- (I - s/2)^-1 (I + s/2); s and out are size() x size() and may not alias.
  void cayley(const Mat<T>& s, Mat<T>& out) {
    const Eigen::Index m = s.rows();
    if (m == 0) return;
    const auto identity = Mat<T>::Identity(m, m);
    x_ = s * T(0.5);
    lu_ = identity - x_;  // row-major: the rows of L and U the dot products read are contiguous
    out = identity + x_;  // the right-hand side, then the solution
    for (Eigen::Index j = 0; j < m; ++j) {
      for (Eigen::Index i = 1; i < j; ++i) lu_(i, j) -= lu_.row(i).head(i).dot(lu_.col(j).head(i));
      for (Eigen::Index i = std::max<Eigen::Index>(j, 1); i < m; ++i)
        lu_(i, j) -= lu_.row(i).head(j).dot(lu_.col(j).head(j));
      Eigen::Index p = j;
      double best = -1;
      for (Eigen::Index i = j; i < m; ++i) {
        const double v = std::abs(value_of(lu_(i, j)));
        if (v > best || (std::isnan(v) && best < 0)) {
          best = v;
          p = i;
        }
      }
      if (p != j) {
        lu_.row(j).swap(lu_.row(p));
        out.row(j).swap(out.row(p));
      }
      if (j + 1 < m) lu_.col(j).tail(m - j - 1) /= lu_(j, j);
    }
    for (Eigen::Index c = 0; c < m; ++c) {
      auto b = out.col(c);
      for (Eigen::Index i = 1; i < m; ++i) b[i] -= lu_.row(i).head(i).dot(b.head(i));
      for (Eigen::Index i = m - 1; i >= 0; --i)
        b[i] = (b[i] - lu_.row(i).tail(m - i - 1).dot(b.tail(m - i - 1))) / lu_(i, i);
    }
  }

 private:
  Mat<T> x_, x2_, x3_, x4_, f_, tmp_;
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> lu_;
};

}  // namespace geomopt::detail
