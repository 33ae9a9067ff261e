// msign: the orthogonal polar factor of a matrix, msign(M) = U V^T for the thin SVD M = U S V^T, with the singular
// vectors of zero singular values left out (msign(0) = 0, and a rank-r matrix maps to a rank-r partial isometry).
//
//   Eigen::MatrixXf q = geomopt::msign(m);                                   // Newton-Schulz, Muon's defaults
//   geomopt::msign(m, {.method = geomopt::MsignMethod::svd});                 // exact
//   geomopt::MsignWorkspace<float> ws(rows, cols);
//   geomopt::msign_inplace(m, {}, ws);                                        // allocates nothing
//
// Three methods:
//   newton_schulz  X <- M / (|M|_F + eps), then `steps` times X <- a X + b (X X^T) X + c (X X^T)^2 X, in T, on the
//                  smaller Gram side (X^T X for a tall M). It maps each singular value s of X through the odd quintic
//                  p(s) = a s + b s^3 + c s^5 and keeps the singular vectors, so the result is U p^(k)(S / |M|_F) V^T:
//                  with Muon's coefficients (3.4445, -4.7750, 2.0315) the values do not converge to 1 but are pushed
//                  into a band around it (msign_band gives the band for any options). polish_steps cubic steps
//                  X <- 1.5 X - 0.5 (X X^T) X after them converge the band to 1 quadratically.
//   svd            Eigen's BDCSVD in T; singular values below sqrt(max(rows, cols)) eps(T) s_max (the size of
//                  T's rounding in an exactly rank-deficient M: 3.8e-6 s_max for float at 1024 rows) count as zero.
//   gram           the eigendecomposition of the smaller Gram matrix M^T M (or M M^T), formed and solved in
//                  double: msign(M) = M V diag(1 / s) V^T. Exact to about eps(double) cond(M)^2 relative, so for
//                  float input it is as accurate as the SVD up to cond(M) ~ 1e4, and it is the fastest exact method
//                  for a tall matrix (one N n^2 product each way). Singular values below sqrt(4 k eps(double)) s_max
//                  (k = min(rows, cols); 3e-7 s_max for k = 100) count as zero: the Gram matrix cannot resolve them.
// Invariants: the result depends on M's values only (not on the workspace's history); newton_schulz allocates
// nothing when given a workspace sized for M (it tiles its products through detail::dense_product); svd and gram
// allocate Eigen's decomposition buffers.
#pragma once

#include <Eigen/Core>
#include <Eigen/Eigenvalues>
#include <Eigen/SVD>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "geomopt/manifolds/detail/dense_kernels.hpp"

namespace geomopt {

enum class MsignMethod { newton_schulz, svd, gram };

struct MsignOptions {
  MsignMethod method = MsignMethod::newton_schulz;
  /// Newton-Schulz: quintic steps, each s <- a s + b s^3 + c s^5 on the singular values.
  int steps = 5;
  /// Newton-Schulz: (a, b, c), Muon's published coefficients by default.
  std::array<double, 3> coefficients{3.4445, -4.7750, 2.0315};
  /// Newton-Schulz: cubic steps s <- 1.5 s - 0.5 s^3 after the quintic ones (0: none, as Muon does). Each squares
  /// the distance of the band from 1, so 4 to 6 of them bring Muon's band to rounding.
  int polish_steps = 0;
  /// Newton-Schulz: M is scaled by 1 / (|M|_F + eps) first, so every singular value is at most 1.
  double eps = 1e-7;

  void validate() const {
    if (steps < 0 || steps > 100)
      throw std::invalid_argument("MsignOptions: steps must be in [0, 100], got " + std::to_string(steps));
    if (polish_steps < 0 || polish_steps > 100)
      throw std::invalid_argument("MsignOptions: polish_steps must be in [0, 100], got " +
                                  std::to_string(polish_steps));
    if (!(eps >= 0)) throw std::invalid_argument("MsignOptions: eps must be >= 0, got " + std::to_string(eps));
    for (double c : coefficients)
      if (!std::isfinite(c)) throw std::invalid_argument("MsignOptions: the coefficients must be finite");
  }
};

/// The interval [lo, hi] that Newton-Schulz maps every singular value s of M with s >= s_min (|M|_F + eps) into (the
/// quintic and cubic steps of `o` composed on the scalar, sampled on a logarithmic grid of [s_min, 1] fine enough
/// that the polynomials' slopes cannot hide an extremum between samples). Muon's options give about [0.47, 1.20]
/// for s_min = 1e-3 (5 quintic steps lift 1e-3 by 3.4445^5 ~ 490 at most); with polish_steps = 6, 1 to rounding.
inline std::pair<double, double> msign_band(const MsignOptions& o, double s_min) {
  o.validate();
  if (!(s_min > 0 && s_min <= 1))
    throw std::invalid_argument("msign_band: s_min must be in (0, 1], got " + std::to_string(s_min));
  const auto [a, b, c] = o.coefficients;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  constexpr int kSamples = 200000;
  const double log_min = std::log(s_min);
  for (int i = 0; i <= kSamples; ++i) {
    double s = std::exp(log_min * (1.0 - static_cast<double>(i) / kSamples));
    for (int k = 0; k < o.steps; ++k) {
      const double s2 = s * s;
      s = s * (a + s2 * (b + c * s2));
    }
    for (int k = 0; k < o.polish_steps; ++k) s = s * (1.5 - 0.5 * s * s);
    lo = std::min(lo, s);
    hi = std::max(hi, s);
  }
  return {lo, hi};
}

/// The buffers of msign for one shape: msign_inplace with a workspace of M's shape allocates nothing (Newton-Schulz).
template <class T>
class MsignWorkspace {
  static_assert(std::is_floating_point_v<T>, "MsignWorkspace: float or double");

 public:
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;

  MsignWorkspace() = default;
  MsignWorkspace(Eigen::Index rows, Eigen::Index cols) { reserve(rows, cols); }

  /// Sizes the buffers for rows x cols (a no-op when they already fit).
  void reserve(Eigen::Index rows, Eigen::Index cols) {
    if (rows < 0 || cols < 0)
      throw std::invalid_argument("MsignWorkspace: negative shape " + std::to_string(rows) + "x" +
                                  std::to_string(cols));
    const Eigen::Index k = std::min(rows, cols);
    if (x_.rows() != rows || x_.cols() != cols) x_.resize(rows, cols);
    if (a_.rows() != k) {
      a_.resize(k, k);
      b_.resize(k, k);
    }
  }
  Eigen::Index rows() const noexcept { return x_.rows(); }
  Eigen::Index cols() const noexcept { return x_.cols(); }
  std::size_t bytes() const noexcept { return static_cast<std::size_t>(x_.size() + a_.size() + b_.size()) * sizeof(T); }

 private:
  template <class Derived>
  friend void msign_inplace(const Eigen::MatrixBase<Derived>&, const MsignOptions&,
                            MsignWorkspace<typename Derived::Scalar>&);
  Matrix x_, a_, b_;
};

namespace detail {

// m <- m / max|m_ij| for a finite m whose squares overflow double (msign(c M) = msign(M) for c > 0); returns the
// squared Frobenius norm after.
template <class T, class M>
double scale_to_unit_max(M& m) {
  const T top = m.cwiseAbs().maxCoeff();
  m /= top;
  double norm2 = 0;
  for (Eigen::Index j = 0; j < m.cols(); ++j) norm2 += m.col(j).template cast<double>().squaredNorm();
  return norm2;
}

// The Newton-Schulz iteration on m in place, with the workspace sized for it.
template <class T, class M>
void newton_schulz(M& m, const MsignOptions& o, Eigen::Matrix<T, -1, -1>& other, Eigen::Matrix<T, -1, -1>& gram,
                   Eigen::Matrix<T, -1, -1>& poly) {
  const Eigen::Index rows = m.rows(), cols = m.cols();
  if (rows == 0 || cols == 0) return;
  const bool tall = rows > cols;
  double norm2 = 0;
  for (Eigen::Index j = 0; j < cols; ++j) norm2 += m.col(j).template cast<double>().squaredNorm();
  if (norm2 == 0) return;  // msign(0) = 0, with eps = 0 too
  if (!std::isfinite(norm2)) norm2 = scale_to_unit_max<T>(m);
  const T scale = static_cast<T>(1.0 / (std::sqrt(norm2) + o.eps));
  if (!std::isfinite(static_cast<double>(scale)) || !std::isfinite(norm2)) {
    m.setConstant(std::numeric_limits<T>::quiet_NaN());
    return;
  }
  m *= scale;
  // Two buffers of M's shape take turns: `cur` holds X, the step writes into the other.
  DenseDestination<T> bufs[2] = {DenseDestination<T>(m), DenseDestination<T>(other)};
  int cur = 0;
  auto step = [&](T a, T b, T c) {
    auto& x = bufs[cur];
    auto& y = bufs[1 - cur];
    if (tall) {  // X (a I + b A + c A^2), A = X^T X
      dense_product<T>(gram, x, ProductOp::transposed, x, ProductOp::plain, T(1), false);
    } else {  // (a I + b A + c A^2) X, A = X X^T
      dense_product<T>(gram, x, ProductOp::plain, x, ProductOp::transposed, T(1), false);
    }
    if (c != T(0)) {
      dense_product<T>(poly, gram, ProductOp::plain, gram, ProductOp::plain, c, false);
      poly += b * gram;
    } else {
      poly = b * gram;
    }
    poly.diagonal().array() += a;
    if (tall) {
      dense_product<T>(y, x, ProductOp::plain, poly, ProductOp::plain, T(1), false);
    } else {
      dense_product<T>(y, poly, ProductOp::plain, x, ProductOp::plain, T(1), false);
    }
    cur = 1 - cur;
  };
  const auto [a, b, c] = o.coefficients;
  for (int k = 0; k < o.steps; ++k) step(T(a), T(b), T(c));
  for (int k = 0; k < o.polish_steps; ++k) step(T(1.5), T(-0.5), T(0));
  if (cur == 1) m = other;
}

// Exact msign by the thin SVD.
template <class T, class M>
void msign_svd(M& m) {
  using Matrix = Eigen::Matrix<T, -1, -1>;
  if (m.size() == 0) return;
  Eigen::BDCSVD<Matrix> svd(Matrix(m), Eigen::ComputeThinU | Eigen::ComputeThinV);
  const auto& s = svd.singularValues();
  if (!s.allFinite()) {
    m.setConstant(std::numeric_limits<T>::quiet_NaN());
    return;
  }
  const T tol = std::sqrt(static_cast<T>(std::max(m.rows(), m.cols()))) * std::numeric_limits<T>::epsilon() * s(0);
  Eigen::Index r = 0;
  while (r < s.size() && s(r) > tol) ++r;
  m.noalias() = svd.matrixU().leftCols(r) * svd.matrixV().leftCols(r).transpose();
}

// Exact msign through the eigendecomposition of the smaller Gram matrix, in double.
template <class T, class M>
void msign_gram(M& m) {
  if (m.size() == 0) return;
  const bool tall = m.rows() >= m.cols();
  if (!(m.template cast<double>().squaredNorm() < std::numeric_limits<double>::infinity())) scale_to_unit_max<T>(m);
  const Eigen::MatrixXd md = m.template cast<double>();
  const Eigen::MatrixXd gram = tall ? Eigen::MatrixXd(md.transpose() * md) : Eigen::MatrixXd(md * md.transpose());
  if (!gram.allFinite()) {
    m.setConstant(std::numeric_limits<T>::quiet_NaN());
    return;
  }
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(gram);
  const Eigen::VectorXd& lambda = eig.eigenvalues();  // ascending
  const double top = std::max(lambda(lambda.size() - 1), 0.0);
  // s_i > sqrt(max(rows, cols)) eps(T) s_max, the SVD method's rank rule, on s = sqrt(lambda).
  // Or below what the Gram matrix resolves: its eigenvalues carry errors of about k eps(double) lambda_max, so a
  // smaller one says nothing about s_i but that it is below sqrt(k eps(double)) s_max.
  const double rel = std::sqrt(static_cast<double>(std::max(m.rows(), m.cols()))) * std::numeric_limits<T>::epsilon();
  const double floor =
      std::max(rel * rel, 4.0 * static_cast<double>(lambda.size()) * std::numeric_limits<double>::epsilon()) * top;
  Eigen::VectorXd inv(lambda.size());
  for (Eigen::Index i = 0; i < lambda.size(); ++i) inv(i) = lambda(i) > floor && top > 0 ? 1 / std::sqrt(lambda(i)) : 0;
  const Eigen::MatrixXd& v = eig.eigenvectors();
  const Eigen::MatrixXd p = v * inv.asDiagonal() * v.transpose();
  if (tall) {
    m = (md * p).template cast<T>();
  } else {
    m = (p * md).template cast<T>();
  }
}

}  // namespace detail

/// m <- msign(m) in place, with buffers from ws (resized to m's shape when they do not fit it).
template <class Derived>
void msign_inplace(const Eigen::MatrixBase<Derived>& m_, const MsignOptions& o,
                   MsignWorkspace<typename Derived::Scalar>& ws) {
  using T = typename Derived::Scalar;
  static_assert(std::is_floating_point_v<T>, "msign: float or double");
  static_assert(!(Derived::Flags & Eigen::RowMajorBit) || Derived::IsVectorAtCompileTime,
                "msign: the matrix must be column-major");
  o.validate();
  auto& m = const_cast<Eigen::MatrixBase<Derived>&>(m_).derived();
  if (!m.allFinite()) {  // no method's arithmetic is defined on it; the NaNs say so downstream
    m.setConstant(std::numeric_limits<T>::quiet_NaN());
    return;
  }
  switch (o.method) {
    case MsignMethod::newton_schulz:
      ws.reserve(m.rows(), m.cols());
      detail::newton_schulz<T>(m, o, ws.x_, ws.a_, ws.b_);
      return;
    case MsignMethod::svd:
      detail::msign_svd<T>(m);
      return;
    case MsignMethod::gram:
      detail::msign_gram<T>(m);
      return;
  }
}

/// m <- msign(m) in place (allocates its buffers).
template <class Derived>
void msign_inplace(const Eigen::MatrixBase<Derived>& m, const MsignOptions& o = {}) {
  MsignWorkspace<typename Derived::Scalar> ws;
  msign_inplace(m, o, ws);
}

/// msign(m) as a new matrix.
template <class Derived>
Eigen::Matrix<typename Derived::Scalar, Eigen::Dynamic, Eigen::Dynamic> msign(const Eigen::MatrixBase<Derived>& m,
                                                                              const MsignOptions& o = {}) {
  Eigen::Matrix<typename Derived::Scalar, Eigen::Dynamic, Eigen::Dynamic> out = m;
  msign_inplace(out, o);
  return out;
}

}  // namespace geomopt
