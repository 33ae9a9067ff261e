// Small dense matrix functions the retractions need, written for any scalar an Eigen matrix can hold (float, double,
// ceres::Jet): the exponential and the Cayley transform (allocating faces of the kernels of detail/dense_kernels.hpp),
// the spectral forms of skew cores, and the exponential, logarithm and square root of symmetric matrices through their
// eigendecomposition.
//
// The spectral rule: a retraction's core of 1-norm above kSpectralNorm (or with entries whose norm overflows) is
// evaluated through its eigendecomposition (the real Schur form of a skew core, the symmetric eigendecomposition of
// an SPD step), never by the polynomial or the solve. Scaling and squaring loses orthogonality like eps |S| (s
// squarings double the defect s times) and the Cayley solve's error grows like eps cond(I - S/2) = eps |S| / 2, which
// at |S| = 1e30 leaves nothing of the kernel of S (a reflection); the spectral forms are orthogonal with determinant
// one to working precision at every finite norm. Below the threshold, the polynomial and the solve are faster and as
// accurate (measured defect of the Cayley transform at most 16 eps, of the exponential at most 130 eps, up to order
// 32): the common, moderate step keeps the fast path.
#pragma once

#include <Eigen/Core>
#include <Eigen/Eigenvalues>
#include <Eigen/LU>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "geomopt/manifolds/common.hpp"
#include "geomopt/manifolds/detail/dense_kernels.hpp"

namespace geomopt::detail {

// A number for a message, with three significant digits ("1.5e-08", not std::to_string's "0.000000").
inline std::string short_number(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.3g", v);
  return buffer;
}

// Whether every real part is finite.
template <class T>
bool all_finite_values(const Mat<T>& m) {
  if constexpr (std::is_floating_point_v<T>) return m.allFinite();
  for (Eigen::Index j = 0; j < m.cols(); ++j)
    for (Eigen::Index i = 0; i < m.rows(); ++i)
      if (!std::isfinite(value_of(m(i, j)))) return false;
  return true;
}

// The 1-norm (largest absolute column sum) of the real parts.
template <class T>
double norm1_value(const Mat<T>& m) {
  double best = 0;
  for (Eigen::Index j = 0; j < m.cols(); ++j) {
    double sum = 0;
    for (Eigen::Index i = 0; i < m.rows(); ++i) sum += std::abs(value_of(m(i, j)));
    best = sum > best ? sum : best;
  }
  return best;
}

// The 1-norm of a retraction's core above which its function is spectral (see the top of this file).
inline constexpr double kSpectralNorm = 16;

// Whether the core s takes the spectral path: every entry finite, and a 1-norm above kSpectralNorm or too large to
// represent. A floating-point scalar only: a dual number keeps the polynomial and the solve, whose derivatives it
// carries.
template <class T>
bool use_spectral(const Mat<T>& s) {
  if constexpr (!std::is_floating_point_v<T>) {
    return false;
  } else {
    if (!s.allFinite()) return false;
    const double norm = norm1_value(s);
    return !(norm <= kSpectralNorm);
  }
}

// The power of two 2^e nearest above the largest |entry| of m (e = 0 for a zero matrix): dividing by it is exact and
// brings every entry into [-1, 1], so the squared norms the Householder reflectors form cannot overflow.
template <class T>
int scale_exponent(const Mat<T>& m) {
  const T top = m.size() == 0 ? T(0) : m.cwiseAbs().maxCoeff();
  return top > T(0) ? std::ilogb(top) + 1 : 0;
}

// exp(S) (geodesic) or the Cayley transform (I - S/2)^-1 (I + S/2) of a skew S with finite entries, by its real Schur
// form S = U D U^T: D is block diagonal (S is normal) with 2 x 2 blocks theta [0, -1; 1, 0], and f(S) = U R U^T with
// R the rotations by theta (exp) or 2 atan(theta / 2) (Cayley). U is orthogonal to working precision and each block a
// rotation, so the result is orthogonal with determinant one at any norm; the off-diagonal entries of D are rounding
// (of size eps |S|) and dropping them is a backward error of that size. S is scaled by a power of two first (exact),
// so that no squared norm overflows. A Schur iteration that does not converge gives NaN entries, which the callers
// report.
template <class T>
Mat<T> skew_function_spectral(const Mat<T>& S, bool geodesic) {
  static_assert(std::is_floating_point_v<T>, "the spectral path needs a floating-point scalar");
  const Eigen::Index m = S.rows();
  if (m == 0) return S;
  const int e = scale_exponent<T>(S);
  const Mat<T> scaled = S * T(std::ldexp(1.0, -e));
  Eigen::RealSchur<Mat<T>> schur(scaled);
  if (schur.info() != Eigen::Success) return Mat<T>::Constant(m, m, std::numeric_limits<T>::quiet_NaN());
  const Mat<T>& d = schur.matrixT();
  Mat<T> r = Mat<T>::Identity(m, m);
  for (Eigen::Index i = 0; i < m;) {
    if (i + 1 < m && d(i + 1, i) != T(0)) {
      // theta in long double: 2^e theta' can exceed the largest float, and atan / cos / sin take any finite angle.
      const long double theta = std::ldexp(static_cast<long double>((d(i + 1, i) - d(i, i + 1)) / 2), e);
      const long double angle = geodesic ? theta : 2 * std::atan(theta / 2);
      const T c = static_cast<T>(std::cos(angle)), s = static_cast<T>(std::sin(angle));
      r(i, i) = c;
      r(i + 1, i + 1) = c;
      r(i + 1, i) = s;
      r(i, i + 1) = -s;
      i += 2;
    } else {
      i += 1;  // a real eigenvalue of a skew matrix is zero to rounding: f(0) = 1
    }
  }
  const Mat<T>& u = schur.matrixU();
  return u * r * u.transpose();
}

// exp(S) for a square matrix S, by the kernel of detail/dense_kernels.hpp (scaling and squaring of the degree-15
// Taylor polynomial) with temporary buffers. A non-finite S gives NaN entries.
template <class T>
Mat<T> expm(const Mat<T>& S) {
  Mat<T> out(S.rows(), S.cols());
  SkewCoreKernels<T>(S.rows()).exponential(S, out);
  return out;
}

// The Cayley transform (I - S/2)^-1 (I + S/2), by the kernel of detail/dense_kernels.hpp with temporary buffers.
template <class T>
Mat<T> cayley(const Mat<T>& S) {
  Mat<T> out(S.rows(), S.cols());
  SkewCoreKernels<T>(S.rows()).cayley(S, out);
  return out;
}

// out <- f(S) for a skew core S, f the exponential (geodesic) or the Cayley transform: the spectral form above
// kSpectralNorm (floating-point scalars; it allocates), the kernels' polynomial or solve below it (allocation-free).
// A non-finite core gives non-finite entries, never an exception: an optimizer's step must not fail halfway.
template <class T>
void skew_core_function(SkewCoreKernels<T>& kernels, const Mat<T>& s, Retraction r, Mat<T>& out) {
  if constexpr (std::is_floating_point_v<T>) {
    if (use_spectral<T>(s)) {
      out = skew_function_spectral<T>(s, r == Retraction::geodesic);
      return;
    }
  }
  if (r == Retraction::geodesic) {
    kernels.exponential(s, out);
  } else {
    kernels.cayley(s, out);
  }
}

// f(W) = Q f(Lambda) Q^T for a symmetric W (floating-point scalars only): f is applied to each eigenvalue.
template <class T, class F>
Mat<T> symmetric_function(const Mat<T>& W, F&& f) {
  static_assert(std::is_floating_point_v<T>, "symmetric matrix functions need a floating-point scalar");
  Eigen::SelfAdjointEigenSolver<Mat<T>> eig(W);
  Eigen::Matrix<T, Eigen::Dynamic, 1> values = eig.eigenvalues();
  for (Eigen::Index i = 0; i < values.size(); ++i) values[i] = f(values[i]);
  return eig.eigenvectors() * values.asDiagonal() * eig.eigenvectors().transpose();
}

// The principal logarithm of an orthogonal matrix V with determinant one and no eigenvalue -1, a skew matrix.
// V is normal, so its real Schur form V = U D U^T is block diagonal (to rounding) with 2 x 2 rotations
// [c, -s; s, c] and 1 x 1 blocks +1: the logarithm is U blockdiag(theta [0, -1; 1, 0], 0) U^T, theta = atan2(s, c).
// Floating-point scalars only; throws std::domain_error for an eigenvalue at -1 (the logarithm is not real).
template <class T>
Mat<T> log_orthogonal(const Mat<T>& v) {
  static_assert(std::is_floating_point_v<T>, "log_orthogonal needs a floating-point scalar");
  const Eigen::Index m = v.rows();
  if (m == 0) return v;
  Eigen::RealSchur<Mat<T>> schur(v);
  const Mat<T>& d = schur.matrixT();
  Mat<T> l = Mat<T>::Zero(m, m);
  for (Eigen::Index i = 0; i < m;) {
    if (i + 1 < m && d(i + 1, i) != T(0)) {
      const T c = (d(i, i) + d(i + 1, i + 1)) / 2, s = (d(i + 1, i) - d(i, i + 1)) / 2;
      const T theta = std::atan2(s, c);
      l(i + 1, i) = theta;
      l(i, i + 1) = -theta;
      i += 2;
    } else {
      if (d(i, i) < T(0))
        throw std::domain_error("log_orthogonal: eigenvalue -1, the rotation angle pi has no principal logarithm");
      i += 1;
    }
  }
  const Mat<T>& u = schur.matrixU();
  Mat<T> out = u * l * u.transpose();
  return (out - out.transpose()) * T(0.5);
}

}  // namespace geomopt::detail
