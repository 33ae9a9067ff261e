// The Stiefel family's arithmetic that its workspace (detail/stiefel_family.hpp) does not keep on its allocation-free
// path: the inverse retractions, the orthonormality defect, the polar factor, random points, and the allocating faces
// lift_core and core_function of the retraction's core (for benchmarks and tests of the core alone).
//
// The core. A lift X = [A, -B^T; B, 0] (A n x n skew, B (N - n) x n) has rank at most 2n. With B = q r a thin QR
// factorisation (q (N - n) x k orthonormal, k = min(n, N - n)), X = W S W^T for W = [E, [0; q]], an N x (n + k) matrix
// with orthonormal columns (E = [I_n; 0]), and the (n + k) x (n + k) skew core S = [A, -r^T; r, 0]. Any function with
// f(0) = I then satisfies f(X) = I + W (f(S) - I) W^T: the exponential (a scaled-and-squared Taylor polynomial of S)
// and the Cayley transform (the Woodbury identity with orthonormal W: (I - X/2)^-1 = I + W ((I - S/2)^-1 - I) W^T).
// So lambda f(X) [I; 0] = lambda [F11; q F21] with F = f(S): O(N n^2) time and O(N n) memory, never an N x N matrix.
//
// The core is skew-symmetric, hence normal, and its function is orthogonal to rounding up to a defect that grows
// slowly with the norm (8e-14 at |X|_F = 60 on St(64, 16)). The non-orthogonal pair U = [B~ + EA/2, E],
// V = [E, -(B~ + EA/2)] with exp(X) = I + U phi(V^T U) V^T measured as accurately for Cayley at every norm up to 60
// and for the exponential up to norm 10, and 3x to 100x less accurately for the exponential at norm 60, where V^T U
// (not normal) has a norm in the thousands (docs/design.md). The orthonormal route is also the one that gives W for
// transporting a section.
#pragma once

#include <Eigen/Core>
#include <Eigen/LU>
#include <Eigen/QR>
#include <Eigen/SVD>
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "geomopt/manifolds/common.hpp"
#include "geomopt/manifolds/detail/dense_kernels.hpp"
#include "geomopt/manifolds/detail/matrix_functions.hpp"

namespace geomopt::detail {

// The scaling exponent of a tangent block whose squared norm could overflow (largest |entry| at or above
// 2^(max_exponent / 4), 2^256 in double, 2^32 in float), 0 otherwise: a block with entries beyond the square root of
// the largest number is factored scaled by a power of two (exact, and the same basis), since the reflectors square
// the column norms.
template <class T>
int huge_block_exponent(const Mat<T>& b) {
  static_assert(std::is_floating_point_v<T>);
  const T top = b.size() == 0 ? T(0) : b.cwiseAbs().maxCoeff();
  return top >= std::ldexp(T(1), std::numeric_limits<T>::max_exponent / 4) ? scale_exponent<T>(b) : 0;
}

// The factors of the lift [a, -b^T; b, 0]: the complement basis q ((N - n) x k, from b = q r) and the skew core
// S = [a, -r^T; r, 0], by the kernels the workspace uses (detail/stiefel_family.hpp), with temporary buffers.
template <class T>
std::pair<Mat<T>, Mat<T>> lift_core(const Mat<T>& a, const Mat<T>& b) {
  const Eigen::Index n = b.cols(), rest = b.rows(), k = std::min(n, rest);
  Mat<T> q = Mat<T>::Identity(rest, k), s = Mat<T>::Zero(n + k, n + k);
  s.topLeftCorner(n, n) = a;
  if (k > 0) {
    int e = 0;
    if constexpr (std::is_floating_point_v<T>) e = huge_block_exponent<T>(b);
    Mat<T> qr = e == 0 ? b : Mat<T>(b * T(std::ldexp(1.0, -e)));
    Eigen::Matrix<T, Eigen::Dynamic, 1> tau(k);
    householder_qr_in_place(qr, tau.data(), ReflectorConvention::eigen);
    apply_householder_q(q, qr, tau.data(), k, false);
    Mat<T> r = qr.topRows(k).template triangularView<Eigen::Upper>();
    if (e != 0) r *= T(std::ldexp(1.0, e));
    s.bottomLeftCorner(k, n) = r;
    s.topRightCorner(n, k) = -r.transpose();
  }
  return {std::move(q), std::move(s)};
}

// f(S) for the skew core (skew_core_function), allocating its buffers.
template <class T>
Mat<T> core_function(const Mat<T>& s, Retraction r) {
  SkewCoreKernels<T> kernels(s.rows());
  Mat<T> out(s.rows(), s.cols());
  skew_core_function<T>(kernels, s, r, out);
  return out;
}

// The smallest and largest singular values of the real parts of a nonempty square m, from an SVD in double (O(n^3)).
// A condition estimate from an LU is not safe for this: Eigen's estimator reports 1 for diag(2, 0, 0), since the
// exactly singular pivot turns its inner solves into NaN. Throws std::domain_error for a non-finite entry.
template <class T>
std::pair<double, double> extreme_singular_values(const Mat<T>& m, const char* who) {
  Eigen::MatrixXd values(m.rows(), m.cols());
  for (Eigen::Index j = 0; j < m.cols(); ++j)
    for (Eigen::Index i = 0; i < m.rows(); ++i) values(i, j) = value_of(m(i, j));
  if (!values.allFinite()) throw std::domain_error(std::string(who) + ": y has a non-finite entry");
  const Eigen::VectorXd sigma = Eigen::BDCSVD<Eigen::MatrixXd>(values).singularValues();
  return {sigma[sigma.size() - 1], sigma[0]};
}

// The smallest singular value of z1 + I, below which the inverse Cayley retraction refuses, relative to the largest
// or to 1 (so that y = -x, where z1 + I is zero to rounding, is refused too): sqrt(eps) (1.5e-8 in double, 3.5e-4 in
// float). The inverse is undefined where z1 + I is singular (an eigenvalue -1
// of the rotation, a half turn), and near there its relative condition number is about 1 / sigma_min(z1 + I): a
// target rounded to working precision determines the answer only to about eps / sigma_min, so past the threshold
// that error would exceed sqrt(eps) and the answer, of norm about 4 / sigma_min, says only "nearly a half turn".
template <class T>
double inverse_cayley_threshold() {
  return std::sqrt(static_cast<double>(std::numeric_limits<T>::epsilon()));
}

// x (m + I)^-1 for square m. Throws std::domain_error when sigma_min(m + I) <= inverse_cayley_threshold<T>()
// max(sigma_max(m + I), 1).
template <class T>
Mat<T> solve_right_shifted(const Mat<T>& x, const Mat<T>& m) {
  const Eigen::Index order = m.rows();
  const Mat<T> shifted = m + Mat<T>::Identity(order, m.cols());
  if (order == 0) return Mat<T>(x.rows(), 0);
  const auto [smallest, largest] = extreme_singular_values<T>(shifted, "inverse_retract (cayley)");
  if (!(smallest > inverse_cayley_threshold<T>() * std::max(largest, 1.0)))
    throw std::domain_error(
        "inverse_retract (cayley): y is out of reach: x^T y + I is singular to working precision "
        "(smallest singular value " +
        short_number(smallest) + " against " + short_number(largest) +
        "), y is a half turn from x or within sqrt(eps) of one");
  if (x.rows() == 0) return Mat<T>(0, order);  // SO(n): no complement block (Eigen's solve binds a null pointer)
  const Eigen::PartialPivLU<Mat<T>> lu(shifted.transpose());
  return lu.solve(x.transpose()).transpose();
}

// The exact inverse of the Cayley retraction in local coordinates z = lambda^T y: the blocks (a, b) with
// (I - X/2)^-1 (I + X/2) E = z. From (I - X/2) z = (I + X/2) E: b = 2 z2 (z1 + I)^-1 and
// a = (2 (z1 - I) + b^T z2) (z1 + I)^-1 (skew when z is in the image; its skew part is returned).
template <class T>
std::pair<Mat<T>, Mat<T>> inverse_cayley_blocks(const Mat<T>& z, Eigen::Index n) {
  const Eigen::Index rest = z.rows() - n;
  const Mat<T> z1 = z.topRows(n), z2 = z.bottomRows(rest);
  const Mat<T> b = solve_right_shifted<T>(T(2) * z2, z1);
  const Mat<T> lhs = T(2) * (z1 - Mat<T>::Identity(n, n)) + b.transpose() * z2;
  const Mat<T> a = solve_right_shifted<T>(lhs, z1);
  return {(a - a.transpose()) * T(0.5), b};
}

// The exact inverse of the geodesic retraction in local coordinates z = lambda^T y: the Riemannian logarithm of the
// canonical metric, by the fixed-point iteration of Zimmermann (SIAM J. Matrix Anal. Appl. 38, 2017) carried out in
// the (n + k)-dimensional space spanned by E and the complement part of z. Floating-point scalars only.
template <class T>
std::pair<Mat<T>, Mat<T>> inverse_geodesic_blocks(const Mat<T>& z, Eigen::Index n, const char* who) {
  static_assert(std::is_floating_point_v<T>, "the inverse geodesic retraction needs a floating-point scalar");
  const Eigen::Index rest = z.rows() - n, k = std::min(n, rest);
  const Mat<T> m = z.topRows(n);
  Mat<T> q(rest, k), r(k, n);
  if (k > 0) {
    Eigen::HouseholderQR<Mat<T>> qr(z.bottomRows(rest));
    q = qr.householderQ() * Mat<T>::Identity(rest, k);
    r = qr.matrixQR().topRows(k).template triangularView<Eigen::Upper>();
  }
  // V = [[m, x0], [r, y0]]: the columns [m; r] completed to an orthogonal matrix with determinant one.
  Mat<T> c(n + k, n);
  c << m, r;
  Eigen::HouseholderQR<Mat<T>> cqr(c);
  Mat<T> v = cqr.householderQ() * Mat<T>::Identity(n + k, n + k);
  v.leftCols(n) = c;
  if (v.determinant() < T(0)) {
    if (k == 0)
      throw std::domain_error(std::string(who) + ": the two points lie in different components (det x^T y < 0)");
    v.col(n + k - 1) *= T(-1);
  }
  const T tol = T(16) * std::numeric_limits<T>::epsilon() * std::sqrt(T(n + k));
  Mat<T> log_v;
  for (int iteration = 0;; ++iteration) {
    log_v = log_orthogonal<T>(v);
    if (k == 0) break;
    const Mat<T> lc = log_v.bottomRightCorner(k, k);
    if (lc.norm() <= tol) break;
    if (iteration == 200)
      throw std::domain_error(std::string(who) + ": the logarithm did not converge in 200 iterations (||C|| = " +
                              std::to_string(static_cast<double>(lc.norm())) + "); y is too far from x");
    const Mat<T> minus_lc = -T(0.5) * (lc - lc.transpose());
    v.rightCols(k) = (v.rightCols(k) * expm(minus_lc)).eval();
  }
  const Mat<T> a = log_v.topLeftCorner(n, n);
  const Mat<T> lb = (log_v.bottomLeftCorner(k, n) - log_v.topRightCorner(n, k).transpose()) * T(0.5);
  return {(a - a.transpose()) * T(0.5), q * lb};
}

// The Grassmann inverses act on the subspace, so any representative y of the target gives the same b. With
// z2 z1^-1 = U diag(t) V^T: the geodesic lift has singular values atan(t), the Cayley lift 2t / (1 + sqrt(1 + t^2)).
template <class T>
Mat<T> inverse_grassmann_block(const Mat<T>& z, Eigen::Index n, Retraction retraction) {
  static_assert(std::is_floating_point_v<T>, "the Grassmann inverse retraction needs a floating-point scalar");
  const Eigen::Index rest = z.rows() - n;
  const Mat<T> z1 = z.topRows(n);
  if (n > 0) {
    const auto [smallest, largest] = extreme_singular_values<T>(z1, "inverse_retract (Grassmann)");
    (void)largest;  // an orthonormal y has sigma_max(x^T y) <= 1: the measure is absolute
    if (!(smallest > static_cast<double>(n) * std::numeric_limits<T>::epsilon()))
      throw std::domain_error(
          "inverse_retract (Grassmann): y contains a direction orthogonal to x, out of reach "
          "(smallest singular value of x^T y " +
          short_number(smallest) + ")");
  }
  const Eigen::PartialPivLU<Mat<T>> lu(z1.transpose());
  const Mat<T> t = lu.solve(z.bottomRows(rest).transpose()).transpose();
  Eigen::JacobiSVD<Mat<T>> svd(t, Eigen::ComputeThinU | Eigen::ComputeThinV);
  Eigen::Matrix<T, Eigen::Dynamic, 1> sigma = svd.singularValues();
  for (Eigen::Index i = 0; i < sigma.size(); ++i)
    sigma[i] = retraction == Retraction::geodesic ? std::atan(sigma[i])
                                                  : T(2) * sigma[i] / (T(1) + std::sqrt(T(1) + sigma[i] * sigma[i]));
  return svd.matrixU() * sigma.asDiagonal() * svd.matrixV().transpose();
}

// The Frobenius norm, zero without a derivative at zero (a dual number's sqrt would give NaN there).
template <class T>
T frobenius(const Mat<T>& m) {
  const T squared = m.squaredNorm();
  using std::sqrt;
  return value_of(squared) == 0 ? T(0) : T(sqrt(squared));
}

// ||Y^T Y - I||_F.
template <class T>
T orthonormality_defect(const Mat<T>& y) {
  return frobenius<T>(y.transpose() * y - Mat<T>::Identity(y.cols(), y.cols()));
}

// The orthonormal polar factor U V^T of y (the nearest matrix with orthonormal columns in the Frobenius norm), with
// the last column of U negated when `det_one` asks for a square result of determinant one.
template <class T>
Mat<T> polar_factor(const Mat<T>& y, bool det_one) {
  static_assert(std::is_floating_point_v<T>, "project needs a floating-point scalar");
  Eigen::JacobiSVD<Mat<T>> svd(y, Eigen::ComputeThinU | Eigen::ComputeThinV);
  Mat<T> u = svd.matrixU();
  if (det_one && y.cols() > 0 && (u * svd.matrixV().transpose()).determinant() < T(0)) u.col(y.cols() - 1) *= T(-1);
  return u * svd.matrixV().transpose();
}

// A Haar-distributed N x n matrix with orthonormal columns: the Q of a Gaussian matrix with R's diagonal made positive.
template <class T>
Mat<T> haar_stiefel(Rng& rng, Eigen::Index N, Eigen::Index n) {
  if (n < 0 || n > N)
    throw std::invalid_argument("random_point: need 0 <= n <= N, got N = " + std::to_string(N) +
                                ", n = " + std::to_string(n));
  std::normal_distribution<double> normal;
  Eigen::MatrixXd g(N, n);
  for (Eigen::Index j = 0; j < n; ++j)
    for (Eigen::Index i = 0; i < N; ++i) g(i, j) = normal(rng);
  Eigen::MatrixXd q = Eigen::MatrixXd::Identity(N, n);
  if (n > 0) {
    Eigen::HouseholderQR<Eigen::MatrixXd> qr(g);
    q = qr.householderQ() * Eigen::MatrixXd::Identity(N, n);
    for (Eigen::Index j = 0; j < n; ++j)
      if (qr.matrixQR()(j, j) < 0) q.col(j) *= -1;
  }
  return q.cast<T>();
}

template <class T>
Mat<T> gaussian(Rng& rng, Eigen::Index rows, Eigen::Index cols) {
  std::normal_distribution<double> normal;
  Mat<T> g(rows, cols);
  for (Eigen::Index j = 0; j < cols; ++j)
    for (Eigen::Index i = 0; i < rows; ++i) g(i, j) = T(normal(rng));
  return g;
}

}  // namespace geomopt::detail
