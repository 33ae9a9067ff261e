// SPD(n): symmetric positive definite n x n matrices with the affine-invariant metric tr(X^-1 U X^-1 V).
//
// The section at X is a factor F with X = F F^T (the Cholesky factor when recomputed). A tangent vector U is held
// whitened, W = F^-1 U F^-T, a symmetric matrix; the metric becomes tr(W W') and the Tangent type,
// ScaledSymmetricMatrix, stores W with its off-diagonal entries times sqrt(2), so its coordinates are orthonormal.
//
//   geodesic  the exponential map  X -> F exp(W) F^T
//   cayley    the second-order retraction X + U + U X^-1 U / 2 = F (I + W + W^2 / 2) F^T (positive definite for
//             every W, since I + W + W^2/2 = ((I + W)^2 + I) / 2)
//
// A transported section moves as F <- F M^(1/2), M the core above (F exp(W / 2) for the exponential map), which is
// the parallel transport of the affine-invariant metric along the geodesic. Everything costs O(n^3).
#pragma once

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <Eigen/Eigenvalues>
#include <Eigen/LU>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "geomopt/manifolds/common.hpp"
#include "geomopt/manifolds/detail/matrix_functions.hpp"
#include "geomopt/manifolds/detail/point.hpp"
#include "geomopt/manifolds/detail/stiefel_kernel.hpp"
#include "geomopt/manifolds/packed.hpp"

namespace geomopt {

/// SPD(n), with the affine-invariant metric.
template <class T>
class SPD : public detail::PointBase<T, detail::Mat<T>> {
 public:
  using Matrix = detail::Mat<T>;
  using Tangent = ScaledSymmetricMatrix<T>;
  static constexpr const char* kName = "SPD";

  SPD() = default;
  explicit SPD(Matrix x) : detail::PointBase<T, Matrix>(std::move(x)) {}
  /// The identity of order n.
  explicit SPD(Eigen::Index n) : SPD(identity(n)) {}

  Eigen::Index n() const noexcept { return this->v_.rows(); }

  /// Q diag(exp(z)) Q^T with Q Haar-distributed and z independent standard normal numbers.
  static SPD random_point(Rng& rng, Eigen::Index n) {
    const Matrix q = detail::haar_stiefel<T>(rng, n, n);
    const Matrix z = detail::gaussian<T>(rng, n, 1);
    Eigen::Matrix<T, Eigen::Dynamic, 1> d(n);
    using std::exp;
    for (Eigen::Index i = 0; i < n; ++i) d[i] = exp(z(i, 0));
    Matrix x = q * d.asDiagonal() * q.transpose();
    return SPD(Matrix((x + x.transpose()) * T(0.5)));
  }

 private:
  static Matrix identity(Eigen::Index n) {
    if (n < 0) throw std::invalid_argument("SPD: negative order " + std::to_string(n));
    return Matrix::Identity(n, n);
  }
};

/// The section of SPD(n) at X: a factor F with X = F F^T.
template <class T>
class SPDSection {
 public:
  using Matrix = detail::Mat<T>;

  SPDSection() = default;
  template <class Derived>
  explicit SPDSection(const Eigen::MatrixBase<Derived>& x, SectionPolicy policy = SectionPolicy::recomputed)
      : policy_(policy) {
    factor(x.template cast<T>());
  }

  SectionPolicy policy() const noexcept { return policy_; }
  Eigen::Index n() const noexcept { return f_.rows(); }
  /// F, with X = F F^T.
  const Matrix& factor() const noexcept { return f_; }

  /// F^-1 u F^-T.
  Matrix whiten(const Matrix& u) const {
    if (policy_ == SectionPolicy::recomputed) {
      const auto l = f_.template triangularView<Eigen::Lower>();
      Matrix left = l.solve(u);
      return l.solve(left.transpose()).transpose();
    }
    Eigen::PartialPivLU<Matrix> lu(f_);
    const Matrix left = lu.solve(u);
    return lu.solve(left.transpose()).transpose();
  }
  /// F w F^T.
  Matrix color(const Matrix& w) const { return f_ * w * f_.transpose(); }

  /// Follows the point X_new = F m F^T: recomputed, the Cholesky factor of X_new; transported, F m^(1/2), with
  /// root = m^(1/2) when the caller has it.
  void transport(const Matrix& x_new, const Matrix& m, const Matrix* root) {
    if (policy_ == SectionPolicy::recomputed) {
      factor(x_new);
      return;
    }
    if (root != nullptr) {
      f_ = (f_ * *root).eval();
      return;
    }
    if constexpr (std::is_floating_point_v<T>) {
      f_ = (f_ * detail::symmetric_function<T>(m, [](T v) { return std::sqrt(v); })).eval();
    } else {
      throw std::invalid_argument(
          "SPDSection: a transported section with the second-order retraction needs a floating-point scalar");
    }
  }

 private:
  void factor(const Matrix& x) {
    if (x.rows() != x.cols())
      throw std::invalid_argument("SPD: expected a square matrix, got " + std::to_string(x.rows()) + "x" +
                                  std::to_string(x.cols()));
    if (policy_ == SectionPolicy::recomputed || f_.size() == 0) {
      Eigen::LLT<Matrix> llt(x);
      if (llt.info() != Eigen::Success)
        throw std::domain_error("SPD: the point is not positive definite (Cholesky failed)");
      f_ = llt.matrixL();
    }
  }

  SectionPolicy policy_ = SectionPolicy::recomputed;
  Matrix f_;
};

namespace detail {

template <class T>
void check_square(const SPD<T>& x, const Mat<T>& m, const char* what) {
  if (m.rows() != x.n() || m.cols() != x.n())
    throw std::invalid_argument(std::string("SPD::") + what + ": expected a " + std::to_string(x.n()) + "x" +
                                std::to_string(x.n()) + " matrix, got " + std::to_string(m.rows()) + "x" +
                                std::to_string(m.cols()));
}
template <class T>
void check_section(const SPD<T>& x, const SPDSection<T>& section, const char* what) {
  if (section.n() != x.n())
    throw std::invalid_argument(std::string("SPD::") + what + ": the section is for SPD(" +
                                std::to_string(section.n()) + "), the point is " + std::to_string(x.n()) + "x" +
                                std::to_string(x.n()));
}
template <class T>
Mat<T> sym(const Mat<T>& m) {
  return (m + m.transpose()) * T(0.5);
}
// The core of a step from the whitened tangent w: exp(w), or I + w + w^2/2. Above detail::kSpectralNorm (floating-point
// scalars) through the eigendecomposition w = Q diag(l) Q^T: Q diag(exp(l)) Q^T, or Q diag(((1 + l)^2 + 1) / 2) Q^T,
// whose eigenvalues are positive by construction; scaling and squaring a symmetric w of norm 1e4 computes
// inf - inf and returns NaN. An eigenvalue whose image overflows gives non-finite entries, never an exception (the
// optimizers' stepper calls this and must not throw halfway through a step; retract reports it).
template <class T>
Mat<T> spd_core(const Mat<T>& w, Retraction r) {
  if constexpr (std::is_floating_point_v<T>) {
    if (use_spectral<T>(w)) {
      if (r == Retraction::geodesic) return symmetric_function<T>(w, [](T v) { return std::exp(v); });
      return symmetric_function<T>(w, [](T v) { return (T(1) + v) * (T(1) + v) * T(0.5) + T(0.5); });
    }
  }
  if (r == Retraction::geodesic) return expm(w);
  return Mat<T>::Identity(w.rows(), w.cols()) + w + T(0.5) * (w * w);
}

}  // namespace detail

template <class T>
Eigen::Index dim(const SPD<T>& x) {
  return x.n() * (x.n() + 1) / 2;
}

/// ||X - X^T||_F plus how far the smallest eigenvalue of the symmetric part is below zero.
template <class T>
T check(const SPD<T>& x) {
  const detail::Mat<T>& v = x.value();
  if (v.rows() != v.cols()) return T(std::numeric_limits<double>::infinity());
  Eigen::MatrixXd s(v.rows(), v.cols());
  for (Eigen::Index j = 0; j < v.cols(); ++j)
    for (Eigen::Index i = 0; i < v.rows(); ++i) s(i, j) = detail::value_of(v(i, j));
  double below = 0;
  if (s.rows() > 0) {
    const double lowest =
        Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>((s + s.transpose()) / 2, Eigen::EigenvaluesOnly)
            .eigenvalues()[0];
    below = lowest < 0 ? -lowest : 0;
  }
  return detail::frobenius<T>(v - v.transpose()) + T(below);
}

/// Replaces X by its symmetric part with the eigenvalues below n eps max(lambda_max, 1) raised to that floor (the set
/// is open, so the nearest point is approached, not attained), and returns it.
template <class T>
SPD<T>& project(SPD<T>& x) {
  static_assert(std::is_floating_point_v<T>, "project needs a floating-point scalar");
  const Eigen::Index n = x.n();
  if (x.value().cols() != n)
    throw std::invalid_argument("SPD::project: expected a square matrix, got " + std::to_string(n) + "x" +
                                std::to_string(x.value().cols()));
  if (n == 0) return x;
  const detail::Mat<T> s = detail::sym<T>(x.value());
  const T top = Eigen::SelfAdjointEigenSolver<detail::Mat<T>>(s, Eigen::EigenvaluesOnly).eigenvalues()[n - 1];
  const T floor = T(n) * std::numeric_limits<T>::epsilon() * std::max(top, T(1));
  x.value() = detail::symmetric_function<T>(s, [floor](T v) { return v < floor ? floor : v; });
  return x;
}
template <class T>
SPD<T> project(const SPD<T>& x) {
  SPD<T> copy = x;
  return project(copy);
}

template <class T>
SPDSection<T> make_section(const SPD<T>& x, SectionPolicy policy = SectionPolicy::recomputed) {
  return SPDSection<T>(x.value(), policy);
}

/// X sym(G) X.
template <class T, class G>
detail::Mat<T> riemannian_gradient(const SPD<T>& x, const G& egrad) {
  const detail::Mat<T>& g = detail::ambient_matrix<T>(egrad);
  detail::check_square(x, g, "riemannian_gradient");
  return x.value() * detail::sym<T>(g) * x.value();
}

/// The whitened Riemannian gradient F^-1 (X sym(G) X) F^-T = F^T sym(G) F.
template <class T, class G>
ScaledSymmetricMatrix<T> lift(const SPD<T>& x, const SPDSection<T>& section, const G& egrad) {
  const detail::Mat<T>& g = detail::ambient_matrix<T>(egrad);
  detail::check_square(x, g, "lift");
  detail::check_section(x, section, "lift");
  return ScaledSymmetricMatrix<T>::from_dense(section.factor().transpose() * detail::sym<T>(g) * section.factor());
}
template <class T, class G>
ScaledSymmetricMatrix<T> lift(const SPD<T>& x, const G& egrad) {
  return lift(x, make_section(x), egrad);
}

/// F W F^T.
template <class T>
detail::Mat<T> to_ambient(const SPD<T>& x, const SPDSection<T>& section, const ScaledSymmetricMatrix<T>& xi) {
  detail::check_section(x, section, "to_ambient");
  if (xi.n() != x.n())
    throw std::invalid_argument("SPD::to_ambient: tangent of order " + std::to_string(xi.n()) + ", expected " +
                                std::to_string(x.n()));
  return section.color(xi.dense());
}
template <class T>
detail::Mat<T> to_ambient(const SPD<T>& x, const ScaledSymmetricMatrix<T>& xi) {
  return to_ambient(x, make_section(x), xi);
}

/// tr(W W'): the Euclidean inner product of the scaled coordinates.
template <class T>
T inner(const SPD<T>& x, const ScaledSymmetricMatrix<T>& xi, const ScaledSymmetricMatrix<T>& eta) {
  if (xi.n() != x.n() || eta.n() != x.n())
    throw std::invalid_argument("SPD::inner: tangent vectors of order " + std::to_string(xi.n()) + " and " +
                                std::to_string(eta.n()) + ", expected " + std::to_string(x.n()));
  return xi.storage().dot(eta.storage());
}

/// tr(X^-1 U X^-1 V).
template <class T, class U, class V>
T metric(const SPD<T>& x, const U& u_in, const V& v_in) {
  const detail::Mat<T>& u = detail::ambient_matrix<T>(u_in);
  const detail::Mat<T>& v = detail::ambient_matrix<T>(v_in);
  detail::check_square(x, u, "metric");
  detail::check_square(x, v, "metric");
  Eigen::PartialPivLU<detail::Mat<T>> lu(x.value());
  return (lu.solve(u) * lu.solve(v)).trace();
}

namespace detail {

// Throws std::domain_error naming the first non-finite coordinate of an SPD tangent vector.
template <class T>
void require_finite(const ScaledSymmetricMatrix<T>& xi) {
  const auto& v = xi.storage();
  for (Eigen::Index k = 0; k < v.size(); ++k)
    if (!std::isfinite(value_of(v[k])))
      throw std::domain_error("SPD::retract: the tangent vector has a non-finite coordinate, storage[" +
                              std::to_string(k) + "] = " + short_number(value_of(v[k])));
}

// The new point F m F^T, which is not representable when an eigenvalue of the step overflows (exp(l) for l above
// about 709 in double, 88 in float): std::domain_error then, not a point with inf or NaN entries.
template <class T>
void require_representable(const Mat<T>& x_new) {
  if (!all_finite_values(x_new))
    throw std::domain_error(
        "SPD::retract: the step overflows: the new point has an eigenvalue beyond the largest representable number "
        "(the tangent vector is finite, but its retraction is not representable)");
}

}  // namespace detail

/// Moves x to the retraction of xi. Any finite xi whose image is representable gives a symmetric point whose
/// eigenvalues are positive, to rounding of its largest one (cores of 1-norm above detail::kSpectralNorm = 16 are
/// evaluated by their eigendecomposition, floating-point scalars). Throws std::domain_error, leaving x and the section
/// unchanged, for a non-finite coordinate (named) and for a step whose image overflows.
template <class T>
void retract(SPD<T>& x, SPDSection<T>& section, const ScaledSymmetricMatrix<T>& xi, Retraction r = Retraction::cayley) {
  detail::check_section(x, section, "retract");
  if (xi.n() != x.n())
    throw std::invalid_argument("SPD::retract: tangent of order " + std::to_string(xi.n()) + ", expected " +
                                std::to_string(x.n()));
  detail::require_finite(xi);
  const detail::Mat<T> w = xi.dense();
  const detail::Mat<T> m = detail::spd_core(w, r);
  detail::Mat<T> x_new = detail::sym<T>(section.color(m));
  detail::require_representable(x_new);
  if (section.policy() == SectionPolicy::transported && r == Retraction::geodesic) {
    const detail::Mat<T> root = detail::spd_core<T>(w * T(0.5), Retraction::geodesic);
    section.transport(x_new, m, &root);
  } else {
    section.transport(x_new, m, nullptr);
  }
  x.value() = std::move(x_new);
}
template <class T>
void retract(SPD<T>& x, const ScaledSymmetricMatrix<T>& xi, Retraction r = Retraction::cayley) {
  SPDSection<T> section = make_section(x);
  if (xi.n() != x.n())
    throw std::invalid_argument("SPD::retract: tangent of order " + std::to_string(xi.n()) + ", expected " +
                                std::to_string(x.n()));
  detail::require_finite(xi);
  detail::Mat<T> x_new = detail::sym<T>(section.color(detail::spd_core(xi.dense(), r)));
  detail::require_representable(x_new);
  x.value() = std::move(x_new);
}

/// The exact inverse: with W' = F^-1 Y F^-T, log(W') for the exponential map, (2 W' - I)^(1/2) - I for the
/// second-order retraction (exact when the eigenvalues of W exceed -1). Throws std::domain_error when there is none.
template <class T, class Y>
ScaledSymmetricMatrix<T> inverse_retract(const SPD<T>& x, const SPDSection<T>& section, const Y& y_in,
                                         Retraction r = Retraction::cayley) {
  static_assert(std::is_floating_point_v<T>, "inverse_retract needs a floating-point scalar");
  const detail::Mat<T>& y = detail::ambient_matrix<T>(y_in);
  detail::check_square(x, y, "inverse_retract");
  detail::check_section(x, section, "inverse_retract");
  const detail::Mat<T> w_target = detail::sym<T>(section.whiten(y));
  const Eigen::Index n = x.n();
  detail::Mat<T> w;
  if (r == Retraction::geodesic) {
    w = detail::symmetric_function<T>(w_target, [](T v) {
      if (!(v > T(0))) throw std::domain_error("SPD::inverse_retract: y is not positive definite");
      return std::log(v);
    });
  } else {
    const detail::Mat<T> shifted = T(2) * w_target - detail::Mat<T>::Identity(n, n);
    w = detail::symmetric_function<T>(shifted, [](T v) {
      if (!(v > T(0)))
        throw std::domain_error("SPD::inverse_retract: y is beyond the reach of the second-order retraction");
      return std::sqrt(v) - T(1);
    });
  }
  return ScaledSymmetricMatrix<T>::from_dense(w);
}
template <class T, class Y>
ScaledSymmetricMatrix<T> inverse_retract(const SPD<T>& x, const Y& y, Retraction r = Retraction::cayley) {
  return inverse_retract(x, make_section(x), y, r);
}

/// A tangent vector whose scaled coordinates are independent standard normal numbers.
template <class T>
ScaledSymmetricMatrix<T> random_tangent(const SPD<T>& x, Rng& rng) {
  const Eigen::Index n = x.n();
  return ScaledSymmetricMatrix<T>::from_storage(detail::gaussian<T>(rng, n * (n + 1) / 2, 1).col(0));
}

}  // namespace geomopt
