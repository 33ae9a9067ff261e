// SPD(n): symmetric positive definite n x n matrices with the affine-invariant metric tr(X^-1 U X^-1 V).
//
// The section at X is a factor F with X = F F^T (the Cholesky factor when recomputed). A tangent vector U is held
// whitened, W = F^-1 U F^-T, a symmetric matrix; the metric becomes tr(W W'). Its coordinates are the svec of W (the
// storage of ScaledSymmetricMatrix: the lower triangle row by row, off-diagonal entries times sqrt(2)), orthonormal:
//
//   to_ambient(X, c) = F W F^T          lift(X, G) = svec(F^T sym(G) F)   (the whitened Riemannian gradient
//                                                                          F^-1 (X sym(G) X) F^-T)
//   second_order  R_X(c) = X + U + U X^-1 U / 2 = F (I + W + W^2 / 2) F^T, positive definite for every W, since
//                 I + W + W^2 / 2 = ((I + W)^2 + I) / 2; the default of this file's free retract and
//                 inverse_retract. Retraction::cayley is accepted for it, a deprecated name kept for existing code.
//   geodesic      the exponential map R_X(c) = F exp(W) F^T; SPD's default_retraction (kRetractions[0]), which the
//                 optimizers, the solvers and CeresManifold take when none is set.
// Both are O(n^3) per step: two products for lift, three for to_ambient and retract, plus the core M of the step.
//
// A transported section moves as F <- F M^(1/2) (F exp(W / 2) for the exponential map, the parallel transport of
// the affine-invariant metric along the geodesic); a recomputed one is the Cholesky factor of the point.
//
// The core M, for float and double: the Jacobi eigendecomposition W = V diag(l) V^T (detail/symmetric_kernels.hpp),
// M = V diag(f(l)) V^T with f = exp or ((1 + l)^2 + 1) / 2 and M^(1/2) from the same decomposition, except that a
// recomputed second-order step of 1-norm at most detail::kSpectralNorm = 16 forms I + W + W^2 / 2 by one product.
// So the point is symmetric with positive eigenvalues at every finite W whose image is representable (an eigenvalue
// whose image overflows gives non-finite entries, which the allocating retract reports as std::domain_error). A
// ceres::Jet scalar takes the polynomials (scaling and squaring for exp), whose derivatives it carries.
//
// The workspace allocates nothing in lift, to_ambient and retract for float and double (products through Eigen's
// GEMM, whose panels fit the stack for n up to about 120 in double); inverse_retract and check may allocate.
#pragma once

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <Eigen/Eigenvalues>
#include <Eigen/LU>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "geomopt/manifolds/any_workspace.hpp"
#include "geomopt/manifolds/common.hpp"
#include "geomopt/manifolds/contract.hpp"
#include "geomopt/manifolds/detail/dense_kernels.hpp"
#include "geomopt/manifolds/detail/matrix_functions.hpp"
#include "geomopt/manifolds/detail/point.hpp"
#include "geomopt/manifolds/detail/stiefel_kernel.hpp"
#include "geomopt/manifolds/detail/symmetric_kernels.hpp"
#include "geomopt/manifolds/packed.hpp"

namespace geomopt {

/// SPD(n), with the affine-invariant metric.
template <class T>
class SPD : public detail::PointBase<T, detail::Mat<T>> {
 public:
  using Matrix = detail::Mat<T>;
  using Tangent = ScaledSymmetricMatrix<T>;
  static constexpr const char* kName = "SPD";
  static constexpr bool kCompact = false;
  /// The exponential map first: its inverse, the logarithm, reaches every point (the second-order retraction's
  /// reaches only y > x / 2 in the Loewner order), which solvers and Ceres's Minus rely on. `cayley` is the
  /// deprecated name of second_order, listed so that code asking for it keeps working.
  static constexpr std::array<Retraction, 3> kRetractions{Retraction::geodesic, Retraction::second_order,
                                                          Retraction::cayley};
  class Workspace;

  SPD() = default;
  explicit SPD(Matrix x) : detail::PointBase<T, Matrix>(std::move(x)) {}
  /// The identity of order n.
  explicit SPD(Eigen::Index n) : SPD(identity(n)) {}

  Eigen::Index n() const noexcept { return this->v_.rows(); }

  /// d = n(n + 1)/2 for n x n points; std::invalid_argument unless square.
  static Eigen::Index tangent_size(Eigen::Index rows, Eigen::Index cols);
  static std::array<Eigen::Index, 2> shape(Eigen::Index n) { return {n, n}; }

  /// Q diag(exp(z)) Q^T with Q Haar-distributed and z independent standard normal numbers.
  static SPD random_point(Rng& rng, Eigen::Index n) {
    SPD x(n);
    detail::open_workspace<SPD>(n, n, SectionPolicy::recomputed, nullptr).random_point(rng, x.value().data());
    return x;
  }

  /// The tangent vector at x whose svec is c (n (n + 1) / 2 numbers).
  static Tangent tangent_from(const SPD& x, const T* c) {
    return Tangent::from_storage(Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>(c, tangent_size(x.n(), x.n())));
  }
  /// c <- the svec of xi.
  static void coordinates_of(const Tangent& xi, T* c) {
    Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>(c, xi.storage().size()) = xi.storage();
  }

 private:
  static Matrix identity(Eigen::Index n) {
    if (n < 0) throw std::invalid_argument("SPD: negative order " + std::to_string(n));
    return Matrix::Identity(n, n);
  }
};

namespace detail {

// The off-diagonal weight of the svec, in double as packed.hpp has it.
inline constexpr double kSvecWeight = 0.70710678118654752440;

// c <- svec(w), w symmetric (its two triangles averaged), as ScaledSymmetricMatrix::from_dense writes it.
template <class W, class T>
void svec_of(const W& w, T* c) {
  const Eigen::Index n = w.rows();
  Eigen::Index k = 0;
  for (Eigen::Index i = 0; i < n; ++i) {
    for (Eigen::Index j = 0; j < i; ++j) c[k++] = T(T(w(i, j) + w(j, i)) * T(0.5 / kSvecWeight));
    c[k++] = w(i, i);
  }
}

// w <- the symmetric matrix whose svec is c.
template <class T, class W>
void smat_of(const T* c, W&& w) {
  const Eigen::Index n = w.rows();
  Eigen::Index k = 0;
  for (Eigen::Index i = 0; i < n; ++i) {
    for (Eigen::Index j = 0; j < i; ++j, ++k) w(i, j) = w(j, i) = T(c[k] * kSvecWeight);
    w(i, i) = c[k++];
  }
}

template <class T>
Mat<T> sym(const Mat<T>& m) {
  return (m + m.transpose()) * T(0.5);
}

inline std::invalid_argument spd_shape_error(const char* what, Eigen::Index rows, Eigen::Index cols) {
  return std::invalid_argument(std::string("SPD") + what + ": expected a square n x n matrix, got " +
                               std::to_string(rows) + "x" + std::to_string(cols));
}

inline std::domain_error spd_not_positive_definite() {
  return std::domain_error("SPD: the point is not positive definite (Cholesky failed)");
}

}  // namespace detail

template <class T>
Eigen::Index SPD<T>::tangent_size(Eigen::Index rows, Eigen::Index cols) {
  if (rows != cols || rows < 0) throw detail::spd_shape_error("", rows, cols);
  return rows * (rows + 1) / 2;
}

/// The allocation-free geometry of one SPD(n) leaf (contract.hpp, and the top of this file).
template <class T>
class SPD<T>::Workspace {
 public:
  using Scalar = T;

  /// Allocates every buffer. A transported section starts from the Cholesky factor of y0 (std::domain_error when it
  /// is not positive definite), which it needs; a recomputed one does not read it.
  Workspace(Eigen::Index rows, Eigen::Index cols, SectionPolicy policy, const T* y0)
      : policy_(policy), n_(validate(rows, cols, policy, y0)), eig_(n_) {
    allocate();
    if (policy_ == SectionPolicy::transported && n_ > 0 &&
        !detail::cholesky_lower(Eigen::Map<const Matrix>(y0, n_, n_), f_))
      throw detail::spd_not_positive_definite();
  }
  /// A workspace in a given section X = F F^T: lift and to_ambient work in F until the first retract, which moves it
  /// by `policy` (the allocating functions' section overloads).
  Workspace(const Matrix& factor, SectionPolicy policy) : policy_(policy), n_(factor.rows()), eig_(n_) {
    if (factor.cols() != n_) throw detail::spd_shape_error(" section", factor.rows(), factor.cols());
    allocate();
    f_ = factor;
    given_ = true;
  }

  Eigen::Index tangent_size() const { return SPD::tangent_size(n_, n_); }
  double step_cost() const noexcept {
    const double n = static_cast<double>(n_);
    return (policy_ == SectionPolicy::transported ? 30 : 12) * n * n * n + 10 * n * n;
  }

  /// c <- svec(F^T sym(g) F); a recomputed section is the Cholesky factor of y (std::domain_error when y is not
  /// positive definite).
  void lift(const T* y, const T* g, T* c) {
    if (n_ == 0) return;
    prepare(y, true);
    const Eigen::Map<const Matrix> gm(g, n_, n_);
    sym_ = (gm + gm.transpose()) * T(0.5);
    detail::dense_product<T>(tmp_, f_, detail::ProductOp::transposed, sym_, detail::ProductOp::plain, T(1), false);
    detail::dense_product<T>(w_, tmp_, f_);
    detail::svec_of(w_, c);
  }

  /// u <- F W F^T with svec(W) = c.
  void to_ambient(const T* y, const T* c, T* u) {
    if (n_ == 0) return;
    prepare(y, true);
    detail::smat_of(c, w_);
    detail::dense_product<T>(tmp_, f_, w_);
    Eigen::Map<Matrix> um(u, n_, n_);
    detail::dense_product<T>(um, tmp_, detail::ProductOp::plain, f_, detail::ProductOp::transposed, T(1), false);
  }

  /// y <- sym(F M F^T), M the core of the step (top of this file); never throws: a y that is not positive definite
  /// (recomputed, no lift before), non-finite c or an overflowing step give non-finite entries (the section is kept
  /// for the first two).
  void retract(T* y, const T* c, Retraction r) {
    if (n_ == 0) return;
    Eigen::Map<Matrix> ym(y, n_, n_);
    if (!prepare(y, false)) {
      ym.setConstant(std::numeric_limits<T>::quiet_NaN());
      return;
    }
    const bool geodesic = r == Retraction::geodesic;
    const bool transported = policy_ == SectionPolicy::transported;
    detail::smat_of(c, w_);
    if (!detail::all_finite_values(w_)) {
      ym.setConstant(std::numeric_limits<T>::quiet_NaN());
      return;
    }
    if constexpr (std::is_floating_point_v<T>) {
      if (transported || geodesic || detail::use_spectral<T>(w_)) {
        eig_.compute(w_);
        if (geodesic) {
          eig_.function([](T v) { return std::exp(v); }, m_);
          if (transported) eig_.function([](T v) { return std::exp(v / 2); }, root_);
        } else {
          const auto core = [](T v) { return (T(1) + v) * (T(1) + v) * T(0.5) + T(0.5); };
          eig_.function(core, m_);
          if (transported) eig_.function([&](T v) { return std::sqrt(core(v)); }, root_);
        }
      } else {
        detail::dense_product<T>(m_, w_, w_);
        m_ = m_ * T(0.5) + w_;
        m_.diagonal().array() += T(1);
      }
    } else {
      // Dual numbers: the polynomials, whose derivatives they carry.
      if (geodesic) {
        m_ = detail::expm<T>(w_);
        if (transported) root_ = detail::expm<T>(Matrix(w_ * T(0.5)));
      } else {
        m_ = Matrix::Identity(n_, n_) + w_ + T(0.5) * (w_ * w_);
        if (transported) {
          eig_.compute(m_);
          using std::sqrt;
          eig_.function([](const T& v) { return sqrt(v); }, root_);
        }
      }
    }
    detail::dense_product<T>(tmp_, f_, m_);
    detail::dense_product<T>(sym_, tmp_, detail::ProductOp::plain, f_, detail::ProductOp::transposed, T(1), false);
    ym = (sym_ + sym_.transpose()) * T(0.5);
    if (transported) {
      detail::dense_product<T>(tmp_, f_, root_);
      f_ = tmp_;  // copied, not swapped: section_data() keeps pointing at f_
    } else {
      factored_ = false;
      given_ = false;
    }
  }

  /// c <- R_x^-1(y): with W' = sym(F^-1 Y F^-T), svec(log(W')) for the exponential map, svec((2 W' - I)^(1/2) - I)
  /// for the second-order retraction (exact when the eigenvalues of W exceed -1). Allocates. std::domain_error, c
  /// untouched, when y is not finite or there is no inverse.
  void inverse_retract(const T* x, const T* y, T* c, Retraction r) {
    static_assert(std::is_floating_point_v<T>, "inverse_retract needs a floating-point scalar");
    if (n_ == 0) return;
    const Eigen::Map<const Matrix> ym(y, n_, n_);
    if (!ym.allFinite()) throw std::domain_error("SPD::inverse_retract: y has a non-finite entry");
    Matrix f = f_;
    const bool triangular = policy_ == SectionPolicy::recomputed;
    if (triangular && !given_ && !detail::cholesky_lower(Eigen::Map<const Matrix>(x, n_, n_), f))
      throw detail::spd_not_positive_definite();
    Matrix whitened;
    if (triangular) {
      const auto l = f.template triangularView<Eigen::Lower>();
      const Matrix left = l.solve(ym);
      whitened = l.solve(left.transpose()).transpose();
    } else {
      Eigen::PartialPivLU<Matrix> lu(f);
      const Matrix left = lu.solve(ym);
      whitened = lu.solve(left.transpose()).transpose();
    }
    Matrix target = detail::sym<T>(whitened);
    const bool geodesic = r == Retraction::geodesic;
    if (!geodesic) {
      target *= T(2);
      target.diagonal().array() -= T(1);
    }
    eig_.compute(target);
    for (Eigen::Index i = 0; i < n_; ++i)
      if (!(eig_.values()[i] > T(0)))
        throw std::domain_error(geodesic
                                    ? "SPD::inverse_retract: y is not positive definite"
                                    : "SPD::inverse_retract: y is beyond the reach of the second-order retraction");
    if (geodesic) {
      eig_.function([](T v) { return std::log(v); }, w_);
    } else {
      eig_.function([](T v) { return std::sqrt(v) - T(1); }, w_);
    }
    detail::svec_of(w_, c);
  }

  /// Drops the factor lift built, so the next retract factors its own y (no effect when transported).
  void forget_point() noexcept {
    if (policy_ == SectionPolicy::recomputed) factored_ = given_ = false;
  }

  /// ||Y - Y^T||_F plus how far the smallest eigenvalue of the symmetric part is below zero. Allocates.
  T check(const T* y) const {
    const Eigen::Map<const Matrix> v(y, n_, n_);
    Eigen::MatrixXd s(n_, n_);
    for (Eigen::Index j = 0; j < n_; ++j)
      for (Eigen::Index i = 0; i < n_; ++i) s(i, j) = detail::value_of(v(i, j));
    double below = 0;
    if (n_ > 0) {
      const double lowest =
          Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>((s + s.transpose()) / 2, Eigen::EigenvaluesOnly)
              .eigenvalues()[0];
      below = lowest < 0 ? -lowest : 0;
    }
    return detail::frobenius<T>(Matrix(v - v.transpose())) + T(below);
  }

  /// y <- its symmetric part with the eigenvalues below n eps max(lambda_max, 1) raised to that floor (the set is
  /// open, so the nearest point is approached, not attained).
  void project(T* y) {
    static_assert(std::is_floating_point_v<T>, "project needs a floating-point scalar");
    if (n_ == 0) return;
    Eigen::Map<Matrix> ym(y, n_, n_);
    sym_ = (ym + ym.transpose()) * T(0.5);
    eig_.compute(sym_);
    const T top = eig_.values().maxCoeff();
    const T floor = T(n_) * std::numeric_limits<T>::epsilon() * std::max(top, T(1));
    eig_.function([floor](T v) { return v < floor ? floor : v; }, ym);
  }

  /// y <- Q diag(exp(z)) Q^T, Q Haar-distributed, z independent standard normal numbers. Allocates.
  void random_point(Rng& rng, T* y) const {
    const Matrix q = detail::haar_stiefel<T>(rng, n_, n_);
    const Matrix z = detail::gaussian<T>(rng, n_, 1);
    Eigen::Matrix<T, Eigen::Dynamic, 1> d(n_);
    using std::exp;
    for (Eigen::Index i = 0; i < n_; ++i) d[i] = exp(z(i, 0));
    const Matrix x = q * d.asDiagonal() * q.transpose();
    Eigen::Map<Matrix>(y, n_, n_) = (x + x.transpose()) * T(0.5);
  }

  /// F, the transported section's factor (null when recomputed).
  T* section_data() noexcept { return policy_ == SectionPolicy::transported ? f_.data() : nullptr; }
  Eigen::Index section_rows() const noexcept { return policy_ == SectionPolicy::transported ? n_ : 0; }
  Eigen::Index section_cols() const noexcept { return policy_ == SectionPolicy::transported ? n_ : 0; }
  std::size_t workspace_bytes() const noexcept {
    const std::size_t matrix = static_cast<std::size_t>(n_ * n_) * sizeof(T);
    return (policy_ == SectionPolicy::recomputed ? 6 : 5) * matrix + eig_.bytes();
  }

  /// The section's factor F as it stands (the last lift's point when recomputed, the moved one when transported).
  const Matrix& factor() const noexcept { return f_; }

 private:
  static Eigen::Index validate(Eigen::Index rows, Eigen::Index cols, SectionPolicy policy, const T* y0) {
    SPD::tangent_size(rows, cols);
    if (policy == SectionPolicy::transported && y0 == nullptr && rows > 0)
      throw std::invalid_argument("SPD: a transported section of SPD(" + std::to_string(rows) +
                                  ") needs the initial point");
    return rows;
  }

  void allocate() {
    f_.resize(n_, n_);
    sym_.resize(n_, n_);
    w_.resize(n_, n_);
    m_.resize(n_, n_);
    root_.resize(n_, n_);
    tmp_.resize(n_, n_);
  }

  // Makes F the section at y: a recomputed section is refactored by lift and to_ambient (`rebuild`), and by retract
  // unless a lift left it; throws std::domain_error from lift and to_ambient when y is not positive definite, and
  // returns false from retract.
  bool prepare(const T* y, bool rebuild) {
    if (policy_ == SectionPolicy::transported || given_) return true;
    if (!rebuild && factored_) return true;
    factored_ = detail::cholesky_lower(Eigen::Map<const Matrix>(y, n_, n_), f_);
    if (!factored_ && rebuild) throw detail::spd_not_positive_definite();
    return factored_;
  }

  SectionPolicy policy_;
  Eigen::Index n_;
  bool factored_ = false;  // recomputed: f_ is the Cholesky factor of the last lift's point
  bool given_ = false;     // f_ was given by a section and holds until the first retract
  detail::SymmetricEigen<T> eig_;
  Matrix f_;  // the section's factor: state when transported, rebuilt by lift when recomputed
  Matrix sym_, w_, m_, root_, tmp_;
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

  /// Follows a retraction computed by `ws`, a workspace made from this section, to x_new: recomputed, the Cholesky
  /// factor of x_new; transported, the factor ws moved.
  void follow(const typename SPD<T>::Workspace& ws, const Matrix& x_new) {
    if (policy_ == SectionPolicy::recomputed) {
      factor(x_new);
    } else {
      f_ = ws.factor();
    }
  }

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
      detail::SymmetricEigen<T> eig(m.rows());
      eig.compute(m);
      Matrix r(m.rows(), m.cols());
      eig.function([](T v) { return std::sqrt(v); }, r);
      f_ = (f_ * r).eval();
    } else {
      throw std::invalid_argument(
          "SPDSection: a transported section with the second-order retraction needs a floating-point scalar");
    }
  }

 private:
  void factor(const Matrix& x) {
    if (x.rows() != x.cols()) throw detail::spd_shape_error("", x.rows(), x.cols());
    if (policy_ == SectionPolicy::recomputed || f_.size() == 0) {
      f_.resize(x.rows(), x.rows());
      if (!detail::cholesky_lower(x, f_)) throw detail::spd_not_positive_definite();
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
void check_tangent(const SPD<T>& x, const ScaledSymmetricMatrix<T>& xi, const char* what) {
  if (xi.n() != x.n())
    throw std::invalid_argument(std::string("SPD::") + what + ": tangent of order " + std::to_string(xi.n()) +
                                ", expected " + std::to_string(x.n()));
}

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

template <class T>
Eigen::Index dim(const SPD<T>& x) {
  return x.n() * (x.n() + 1) / 2;
}

/// ||X - X^T||_F plus how far the smallest eigenvalue of the symmetric part is below zero (infinity for a matrix that
/// is not square).
template <class T>
T check(const SPD<T>& x) {
  const detail::Mat<T>& v = x.value();
  if (v.rows() != v.cols()) return T(std::numeric_limits<double>::infinity());
  return detail::open_workspace<SPD<T>>(v.rows(), v.rows(), SectionPolicy::recomputed, nullptr).check(v.data());
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
  detail::open_workspace<SPD<T>>(n, n, SectionPolicy::recomputed, nullptr).project(x.value().data());
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
  ScaledSymmetricMatrix<T> xi(x.n());
  typename SPD<T>::Workspace(section.factor(), section.policy()).lift(x.value().data(), g.data(), xi.storage().data());
  return xi;
}
template <class T, class G>
ScaledSymmetricMatrix<T> lift(const SPD<T>& x, const G& egrad) {
  const detail::Mat<T>& g = detail::ambient_matrix<T>(egrad);
  detail::check_square(x, g, "lift");
  if (x.value().cols() != x.n()) throw detail::spd_shape_error("::lift", x.n(), x.value().cols());
  ScaledSymmetricMatrix<T> xi(x.n());
  detail::open_workspace<SPD<T>>(x.n(), x.n(), SectionPolicy::recomputed, nullptr)
      .lift(x.value().data(), g.data(), xi.storage().data());
  return xi;
}

/// F W F^T.
template <class T>
detail::Mat<T> to_ambient(const SPD<T>& x, const SPDSection<T>& section, const ScaledSymmetricMatrix<T>& xi) {
  detail::check_section(x, section, "to_ambient");
  detail::check_tangent(x, xi, "to_ambient");
  detail::Mat<T> u(x.n(), x.n());
  typename SPD<T>::Workspace(section.factor(), section.policy())
      .to_ambient(x.value().data(), xi.storage().data(), u.data());
  return u;
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

/// Moves x to the retraction of xi (Retraction::cayley is a deprecated name of second_order). Any finite xi whose
/// image is representable gives a symmetric point whose eigenvalues are positive, to rounding of its largest one.
/// Throws std::domain_error, leaving x and the section unchanged, for a non-finite coordinate (named) and for a step
/// whose image overflows.
template <class T>
void retract(SPD<T>& x, SPDSection<T>& section, const ScaledSymmetricMatrix<T>& xi,
             Retraction r = Retraction::second_order) {
  detail::check_section(x, section, "retract");
  detail::check_tangent(x, xi, "retract");
  detail::require_finite(xi);
  if constexpr (!std::is_floating_point_v<T>) {
    if (section.policy() == SectionPolicy::transported && r != Retraction::geodesic)
      throw std::invalid_argument(
          "SPDSection: a transported section with the second-order retraction needs a floating-point scalar");
  }
  typename SPD<T>::Workspace ws(section.factor(), section.policy());
  detail::Mat<T> y = x.value();
  ws.retract(y.data(), xi.storage().data(), r);
  detail::require_representable(y);
  section.follow(ws, y);
  x.value() = std::move(y);
}
template <class T>
void retract(SPD<T>& x, const ScaledSymmetricMatrix<T>& xi, Retraction r = Retraction::second_order) {
  const SPDSection<T> section = make_section(x);
  detail::check_tangent(x, xi, "retract");
  detail::require_finite(xi);
  typename SPD<T>::Workspace ws(section.factor(), SectionPolicy::recomputed);
  detail::Mat<T> y = x.value();
  ws.retract(y.data(), xi.storage().data(), r);
  detail::require_representable(y);
  x.value() = std::move(y);
}

/// The exact inverse: with W' = F^-1 Y F^-T, log(W') for the exponential map, (2 W' - I)^(1/2) - I for the
/// second-order retraction (exact when the eigenvalues of W exceed -1). Throws std::domain_error when there is none.
template <class T, class Y>
ScaledSymmetricMatrix<T> inverse_retract(const SPD<T>& x, const SPDSection<T>& section, const Y& y_in,
                                         Retraction r = Retraction::second_order) {
  static_assert(std::is_floating_point_v<T>, "inverse_retract needs a floating-point scalar");
  const detail::Mat<T>& y = detail::ambient_matrix<T>(y_in);
  detail::check_square(x, y, "inverse_retract");
  detail::check_section(x, section, "inverse_retract");
  ScaledSymmetricMatrix<T> xi(x.n());
  typename SPD<T>::Workspace(section.factor(), section.policy())
      .inverse_retract(x.value().data(), y.data(), xi.storage().data(), r);
  return xi;
}
template <class T, class Y>
ScaledSymmetricMatrix<T> inverse_retract(const SPD<T>& x, const Y& y, Retraction r = Retraction::second_order) {
  return inverse_retract(x, make_section(x), y, r);
}

/// A tangent vector whose scaled coordinates are independent standard normal numbers.
template <class T>
ScaledSymmetricMatrix<T> random_tangent(const SPD<T>& x, Rng& rng) {
  const Eigen::Index n = x.n();
  return ScaledSymmetricMatrix<T>::from_storage(detail::gaussian<T>(rng, n * (n + 1) / 2, 1).col(0));
}

GEOMOPT_DECLARE_COMPILED_WORKSPACE(SPD)

}  // namespace geomopt
