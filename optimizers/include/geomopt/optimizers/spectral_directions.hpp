// Spectral-norm steepest tangent directions ("manifold Muon directions") on the sphere, SO(n), the Grassmannian and
// the oblique manifold: for a point W and a matrix G of W's shape (a gradient or its momentum),
//
//   A = argmax <G, A> = tr(G^T A)   subject to   |A|_2 <= 1,   A tangent at W.
//
// StiefelMuonDirection (stiefel_muon.hpp) is the Stiefel member of this family. Each problem's dual is the nuclear norm
// of G minus a multiple of the normal space, and A = msign(Z) = U V^T of the dual's optimal Z = U S V^T:
//
//   Sphere       w in R^N, |w| = 1, tangent w^T a = 0   Z = P g, P = I - w w^T            A = Z / |Z|
//   SO(n)        W^T W = I, tangent A = W Omega, Omega skew   Z = skew(W^T G)            A = W msign(Z)
//   Grassmann    N x n, W^T W = I, tangent W^T A = 0    Z = (I - W W^T) G                 A = msign(Z)
//   Oblique      N x n, unit columns, diag(W^T A) = 0   Z = G - W diag(d*), d* = argmin_d |G - W diag(d)|_*
//
// The first three are closed forms: <G, A> = <Z, A> for every tangent A and msign(Z) is tangent, so A attains the
// dual bound |Z|_*. The oblique one has no closed form. Its multiplier d (one per column) minimizes the smoothed dual
//   f(d) = sum_i (s_i^2 + mu^2)^(1/2),   s_i the singular values of Z = G - W diag(d) = U S V^T,
// whose gradient is -diag(W^T U g(S) V^T), g(s) = s / (s^2 + mu^2)^(1/2): it vanishes exactly where the smoothed polar
// factor U g(S) V^T is tangent. The minimizer is found by Newton's method with continuation in mu:
//   - the n x n Hessian is formed in Z's singular basis from the Daleckii-Krein divided differences of g,
//     (g_i - g_l) / (s_i - s_l) on the symmetric part of U^T dZ V and (g_i + g_l) / (s_i + s_l) on its skew part, and
//     g(s) / s on the complement of Z's range (N > n) or row space (N < n); it is positive definite, and each step is
//     backtracked on f;
//   - mu starts at ObliqueMuonOptions::smoothing |Z|_2 and is divided by 10 each time the tangency residual is below
//     mu / |Z|_2; each stage starts from the secant through the last two stages' multipliers, since near mu = 0 the
//     minimizers move along a line (the singular values that vanish at mu = 0 are proportional to mu).
// Why Newton: matrices of rank min(N, n) - 1 have codimension |N - n| + 1, so wherever that is at most n (square, near-
// square and wide W) the optimal Z is rank-deficient for a set of G of positive measure, and the dual is not
// differentiable at its minimizer. The smoothed minimizer has those singular values at about mu, f's curvature across
// them is about 1 / mu, and a first-order or fixed-point iteration slows in proportion; Newton with the exact Hessian
// converges quadratically at every mu, and the continuation starts each stage inside its basin: 1 to 3 steps a stage,
// 8 to 17 in all to a relative gap of 1e-8 at 8 x 8, 6 x 6, 3 x 7, 3 at 12 x 4 and 64 x 16, 14 at 128 x 128.
// The returned A is the smoothed polar factor, projected on the tangent space and scaled to |A|_2 = 1: U V^T on Z's
// nonvanishing singular subspace and, on the vanishing one, the completion g(S) < 1 that makes it tangent. Its duality
// gap |Z|_* - <G, A> is about 0.3 mu per vanishing singular value (mu^2 / 2s for the others), the stopping test.
// The SVD is Eigen's Jacobi SVD, not an eigendecomposition of the Gram matrix, because the vanishing singular values
// must be resolved at mu = 1e-8 |Z|_2, below the Gram matrix's resolution sqrt(eps) |Z|_2. mu stops there: the rounding
// of Z moves g of the vanishing singular values, hence the residual, by about eps |Z|_2 / mu, so at a rank-deficient
// optimum double reaches a relative gap of about 1e-8 and no further. A step costs one SVD of Z per backtracking trial
// and O(n^2 min(N, n)^2) for the Hessian: a solve took 1 ms at 64 x 16 and 1.0 s at 128 x 128 (double, cold, relative
// gap 1e-8; g++ 12.2 -O2, one core of a shared two-core machine).
//
// Contract, for W on the manifold and finite G (every product in double, whatever T; A rounded to T once):
//   - A is tangent: the report's residual (|w^T a|, |W^T A + A^T W|_F, |W^T A|_F, |diag(W^T A)|_2) is rounding;
//   - |A|_2 = 1 to rounding, unless the tangent space is {0} (Sphere N = 1, SO(1), Grassmann n = N, Oblique N = 1)
//     or G's tangent projection Z is zero to G's rounding in T (|Z|_F <= 4 (rows + cols) eps(T) |G|_F): then A = 0;
//   - optimality: the report's dual is |Z|_* at the returned multiplier, an upper bound on max <G, A>, and primal =
//     <G, A>; the two agree to rounding for the closed forms, and for Oblique once converged dual - primal <=
//     tolerance dual (reachable down to about 1e-8 where the optimal Z is rank-deficient). An Oblique solve that runs
//     out of iterations, or of precision, returns the same feasible A, report.projected, with its gap dual - primal;
//   - a zero-size shape returns at once; a non-finite W or G gives an all-NaN A (and multiplier), never a throw or a
//     hang; a shape that is not the manifold's throws std::invalid_argument from the constructor or the allocating
//     function, naming the manifold and the shape it expects;
//   - solve with a constructed object allocates nothing, and its result depends on the inputs (and the starting
//     multiplier) only.
// For float and double, solve runs the arithmetic libgeomopt_optimizers compiled once
// (compiled_spectral_directions<T>): the same code, compiled once; other scalars instantiate it here.
//
//   geomopt::ObliqueMuonDirection<float> dir(N, n);
//   std::vector<float> d(n);
//   geomopt::SpectralDirectionReport r = dir.solve(w, g, a, {}, d.data(), /*warm=*/true);  // w, g, a: N x n
//   Eigen::MatrixXd a = geomopt::grassmann_muon_direction(w, g);                           // allocating
#pragma once

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <Eigen/Eigenvalues>
#include <Eigen/Householder>
#include <Eigen/SVD>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "geomopt/manifolds/any_workspace.hpp"
#include "geomopt/manifolds/detail/stack_gemm.hpp"

namespace geomopt {

/// What a spectral direction's solve did. The closed forms report iterations = 0 and converged = true.
struct SpectralDirectionReport {
  int iterations = 0;  ///< multiplier updates (Oblique)
  bool converged = false;
  double residual = 0;     ///< the tangency residual of the returned A (see the top of this file)
  double dual = 0;         ///< |Z|_* at the returned multiplier: an upper bound on max <G, A>
  double primal = 0;       ///< <G, A> of the returned A: a lower bound; dual - primal is the duality gap
  bool projected = false;  ///< not converged: A was projected on the tangent space and scaled to |A|_2 = 1
};

/// The settings of ObliqueMuonDirection's Newton continuation (StiefelMuonOptions' names where they mean the same).
struct ObliqueMuonOptions {
  /// Stop when the returned A's duality gap |Z|_* - <G, A> is at most tolerance |Z|_* (and at least 4 k eps(double)
  /// |Z|_*, k = min(N, n), where the arithmetic cannot go).
  double tolerance = 1e-6;
  /// Newton steps over all stages.
  int max_iterations = 100;
  /// The first stage's mu relative to |Z|_2 at the starting multiplier: the singular values s of Z enter f as
  /// sqrt(s^2 + mu^2). Each stage divides it by 10, down to 1e-8.
  double smoothing = 1e-1;

  void validate() const {
    if (!(tolerance > 0))
      throw std::invalid_argument("ObliqueMuonOptions: tolerance must be > 0, got " + std::to_string(tolerance));
    if (!(smoothing > 0 && smoothing <= 1))
      throw std::invalid_argument("ObliqueMuonOptions: smoothing must be in (0, 1], got " + std::to_string(smoothing));
    if (max_iterations < 0 || max_iterations > 100000)
      throw std::invalid_argument("ObliqueMuonOptions: max_iterations must be in [0, 100000], got " +
                                  std::to_string(max_iterations));
  }
};

namespace detail {

// The polar factor of a rows x cols matrix Z held in z(), through the eigendecomposition of its smaller Gram matrix,
// in double, with every buffer sized once: msign.hpp's exact methods (svd, gram) allocate their decompositions, and a
// solve must not. P = (Gram + mu^2 I)^(-1/2), and msign(Z) = Z P (rows >= cols) or P Z (rows < cols).
class SpectralPolar {
 public:
  using Mat = Eigen::MatrixXd;

  void reserve(Eigen::Index rows, Eigen::Index cols) {
    const Eigen::Index k = std::min(rows, cols);
    z_.resize(rows, cols);
    out_.resize(rows, cols);
    gram_.resize(k, k);
    p_.resize(k, k);
    h_.resize(k, k);
    inv_.resize(k);
    tri_.resize(k, k);
    q_.resize(k, k);
    vecs_.resize(k, k);
    diag_.resize(k);
    subdiag_.resize(std::max<Eigen::Index>(k - 1, 0));
    hcoeffs_.resize(std::max<Eigen::Index>(k - 1, 0));
    work_.resize(k);
    eig_ = Eigen::SelfAdjointEigenSolver<Mat>(k);
  }

  Mat& z() noexcept { return z_; }
  Mat& out() noexcept { return out_; }
  const Mat& p() const noexcept { return p_; }
  bool tall() const noexcept { return z_.rows() >= z_.cols(); }
  /// sqrt(s_max^2 + mu^2) at the last decompose.
  double top() const noexcept { return top_; }

  // Decomposes the Gram matrix of z() and forms p() with the smoothing mu2 (absolute; < 0: mu2 = -mu2 |Z|_2^2 from
  // this decomposition, returned through mu2). Returns |Z|_*, singular values within the Gram matrix's rounding
  // (below sqrt(4 k eps) s_max) counted as zero; with mu2 = 0 those get no inverse either, so msign of a
  // rank-deficient Z is a partial isometry of Z's rank.
  double decompose(double& mu2) {
    const Eigen::Index k = gram_.rows();
    if (tall()) {
      stack_gram<double>(gram_, z_);
    } else {
      stack_gemm<double>(gram_, z_, GemmOp::plain, z_, GemmOp::transposed, GemmMode::assign);
    }
    eigendecompose();
    const auto& lambda = eig_.eigenvalues();
    const double lmax = std::max(lambda(k - 1), 0.0);
    if (mu2 < 0) mu2 = -mu2 * lmax;
    const double floor = 4.0 * static_cast<double>(k) * std::numeric_limits<double>::epsilon() * lmax;
    top_ = std::sqrt(lmax + mu2);
    double nuclear = 0;
    for (Eigen::Index i = 0; i < k; ++i) {
      const double l = lambda(i) > floor ? lambda(i) : 0.0;
      nuclear += std::sqrt(l);
      inv_(i) = l + mu2 > 0 && lmax > 0 ? 1 / std::sqrt(l + mu2) : 0.0;
    }
    const Mat& v = vecs_;
    h_ = inv_.asDiagonal() * v.transpose();
    stack_gemm<double>(p_, v, GemmOp::plain, h_, GemmOp::plain, GemmMode::assign);
    return nuclear;
  }

  // out() <- Z P or P Z, the smoothed polar factor, whose largest singular value is s_max / top().
  void apply() {
    if (tall()) {
      stack_gemm<double>(out_, z_, GemmOp::plain, p_, GemmOp::plain, GemmMode::assign);
    } else {
      stack_gemm<double>(out_, p_, GemmOp::plain, z_, GemmOp::plain, GemmMode::assign);
    }
  }

  // The largest singular value of out(), by the eigenvalues of its smaller Gram matrix (overwrites gram_).
  double out_norm2() {
    if (tall()) {
      stack_gram<double>(gram_, out_);
    } else {
      stack_gemm<double>(gram_, out_, GemmOp::plain, out_, GemmOp::transposed, GemmMode::assign);
    }
    eig_.compute(gram_, Eigen::EigenvaluesOnly);
    return std::sqrt(std::max(eig_.eigenvalues()(gram_.rows() - 1), 0.0));
  }

  std::size_t bytes() const noexcept {
    return static_cast<std::size_t>(2 * z_.size() + 8 * gram_.size() + 8 * inv_.size()) * sizeof(double);
  }

 private:
  // vecs_ and eig_.eigenvalues() <- the eigendecomposition of gram_. Eigen's compute forms the tridiagonalization's Q
  // with a workspace vector it allocates; here Q is formed with work_, then the tridiagonal problem solved and Q
  // applied to its eigenvectors: the same arithmetic without the allocation.
  void eigendecompose() {
    const Eigen::Index k = gram_.rows();
    if (k < 2) {
      eig_.compute(gram_);
      vecs_ = eig_.eigenvectors();
      return;
    }
    tri_ = gram_;
    Eigen::internal::tridiagonalization_inplace(tri_, diag_, subdiag_, hcoeffs_, false);
    eig_.computeFromTridiagonal(diag_, subdiag_, Eigen::ComputeEigenvectors);
    Eigen::HouseholderSequence<Mat, Eigen::VectorXd>(tri_, hcoeffs_).setLength(k - 1).setShift(1).evalTo(q_, work_);
    stack_gemm<double>(vecs_, q_, GemmOp::plain, eig_.eigenvectors(), GemmOp::plain, GemmMode::assign);
  }

  Mat z_, out_, gram_, p_, h_, tri_, q_, vecs_;
  Eigen::VectorXd inv_, diag_, subdiag_, hcoeffs_, work_;
  Eigen::SelfAdjointEigenSolver<Mat> eig_;
  double top_ = 0;
};

inline std::string spectral_shape(Eigen::Index rows, Eigen::Index cols) {
  return std::to_string(rows) + "x" + std::to_string(cols);
}

// The common part of the four directions: W and G in double, the polar factor, the output.
template <class T>
class SpectralDirectionBase {
  static_assert(std::is_floating_point_v<T>, "spectral directions: float or double");

 public:
  Eigen::Index rows() const noexcept { return wd_.rows(); }
  Eigen::Index cols() const noexcept { return wd_.cols(); }
  std::size_t bytes() const noexcept {
    return polar_.bytes() + static_cast<std::size_t>(wd_.size() + gd_.size()) * sizeof(double);
  }

 protected:
  using MatT = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;

  SpectralDirectionBase(Eigen::Index rows, Eigen::Index cols, Eigen::Index polar_rows, Eigen::Index polar_cols)
      : wd_(rows, cols), gd_(rows, cols) {
    polar_.reserve(polar_rows, polar_cols);
  }

  // Reads W and G into double; false (and A all NaN) when either has a non-finite entry.
  bool load(const T* w, const T* g, T* a) {
    wd_ = Eigen::Map<const MatT>(w, rows(), cols()).template cast<double>();
    gd_ = Eigen::Map<const MatT>(g, rows(), cols()).template cast<double>();
    if (wd_.allFinite() && gd_.allFinite()) return true;
    Eigen::Map<MatT>(a, rows(), cols()).setConstant(std::numeric_limits<T>::quiet_NaN());
    return false;
  }

  static SpectralDirectionReport non_finite() {
    SpectralDirectionReport r;
    r.residual = r.dual = r.primal = std::numeric_limits<double>::quiet_NaN();
    return r;
  }

  // a <- scale ad (rows x cols, double), and <G, A> of the rounded A.
  double store(const Eigen::MatrixXd& ad, double scale, T* a) {
    Eigen::Map<MatT> am(a, rows(), cols());
    am = (scale * ad).template cast<T>();
    return gd_.cwiseProduct(am.template cast<double>()).sum();
  }

  // Whether the tangent projection z of G is zero to the rounding of G in T: below that, z is the rounding of G's
  // normal part (and of W's distance from the manifold), whose msign would be a unit direction of no meaning and, for
  // a z inside W's range, not tangent.
  bool negligible(const Eigen::MatrixXd& z) const {
    const double tol = 4.0 * static_cast<double>(rows() + cols()) * std::numeric_limits<T>::epsilon();
    return z.norm() <= tol * gd_.norm();
  }

  // The zero direction (a trivial tangent space, or a zero projected gradient).
  SpectralDirectionReport zero(T* a) {
    Eigen::Map<MatT>(a, rows(), cols()).setZero();
    SpectralDirectionReport r;
    r.converged = true;
    return r;
  }

  Eigen::MatrixXd wd_, gd_;
  SpectralPolar polar_;
};

}  // namespace detail

template <class T>
class SphereMuonDirection;
template <class T>
class SpecialOrthogonalMuonDirection;
template <class T>
class GrassmannMuonDirection;
template <class T>
class ObliqueMuonDirection;

namespace detail {

/// Whether this translation unit calls libgeomopt_optimizers' compiled directions for scalar T: the four solves for
/// float and double are compiled there once (optimizers/src/spectral_directions.cpp), as msign and the Stiefel Muon
/// arithmetic are, so that a file stepping ManifoldMuon does not instantiate the SVD, the eigensolver and the Newton
/// iteration behind them.
template <class T>
inline constexpr bool compiled_spectral_directions = false;

#if GEOMOPT_USE_COMPILED_KERNELS
#define GEOMOPT_DECLARE_COMPILED_SPECTRAL_DIRECTIONS(T)                                                            \
  GEOMOPT_KERNELS_EXPORT SpectralDirectionReport compiled_spectral_solve(SphereMuonDirection<T>& d, const T* w,    \
                                                                         const T* g, T* a);                        \
  GEOMOPT_KERNELS_EXPORT SpectralDirectionReport compiled_spectral_solve(SpecialOrthogonalMuonDirection<T>& d,     \
                                                                         const T* w, const T* g, T* a);            \
  GEOMOPT_KERNELS_EXPORT SpectralDirectionReport compiled_spectral_solve(GrassmannMuonDirection<T>& d, const T* w, \
                                                                         const T* g, T* a);                        \
  GEOMOPT_KERNELS_EXPORT SpectralDirectionReport compiled_spectral_solve(                                          \
      ObliqueMuonDirection<T>& d, const T* w, const T* g, T* a, const ObliqueMuonOptions& o, T* multiplier,        \
      bool warm);                                                                                                  \
  template <>                                                                                                      \
  inline constexpr bool compiled_spectral_directions<T> = true;
GEOMOPT_DECLARE_COMPILED_SPECTRAL_DIRECTIONS(float)
GEOMOPT_DECLARE_COMPILED_SPECTRAL_DIRECTIONS(double)
#undef GEOMOPT_DECLARE_COMPILED_SPECTRAL_DIRECTIONS
#endif

// Every direction's solve: solve runs the library's compiled solve where compiled_spectral_directions<T> (the
// unqualified call finds compiled_spectral_solve there only), the direction's own implementation otherwise; kernel
// runs the implementation (its private solve_kernel), which is what the library's entry points compile.
struct SpectralDirectionKernels {
  template <template <class> class D, class T, class... Args>
  static SpectralDirectionReport solve(D<T>& d, Args&&... args) {
    if constexpr (compiled_spectral_directions<T>)
      return compiled_spectral_solve(d, std::forward<Args>(args)...);
    else
      return d.solve_kernel(std::forward<Args>(args)...);
  }
  template <class D, class... Args>
  static SpectralDirectionReport kernel(D& d, Args&&... args) {
    return d.solve_kernel(std::forward<Args>(args)...);
  }
};

}  // namespace detail

/// The direction on the sphere S^(N-1) at w (N x 1): A = P g / |P g|, P = I - w w^T / (w^T w).
template <class T>
class SphereMuonDirection : public detail::SpectralDirectionBase<T> {
  using Base = detail::SpectralDirectionBase<T>;

 public:
  /// rows x cols must be N x 1 (N >= 0).
  SphereMuonDirection(Eigen::Index rows, Eigen::Index cols) : Base(checked(rows, cols), cols, rows, cols) {}

  /// a <- the direction for w and g (N entries each).
  SpectralDirectionReport solve(const T* w, const T* g, T* a) {
    return detail::SpectralDirectionKernels::solve(*this, w, g, a);
  }

 private:
  friend struct detail::SpectralDirectionKernels;

  SpectralDirectionReport solve_kernel(const T* w, const T* g, T* a) {
    const Eigen::Index N = this->rows();
    if (N == 0) return this->zero(a);
    if (!this->load(w, g, a)) return this->non_finite();
    if (N == 1) return this->zero(a);
    auto& z = this->polar_.z();
    const auto wv = this->wd_.col(0);
    const double ww = wv.squaredNorm();
    // Projected twice: once leaves w^T z at eps |g|, which a z much shorter than g (g nearly normal) would turn into
    // an A far from tangent; twice leaves eps |z|.
    z = this->gd_;
    for (int pass = 0; pass < 2; ++pass) z.col(0) -= (wv.dot(z.col(0)) / ww) * wv;
    if (this->negligible(z)) return this->zero(a);
    SpectralDirectionReport r;
    r.converged = true;
    double mu2 = 0;
    r.dual = this->polar_.decompose(mu2);
    this->polar_.apply();
    r.primal = this->store(this->polar_.out(), 1.0, a);
    r.residual = std::abs(wv.dot(Eigen::Map<const typename Base::MatT>(a, N, 1).col(0).template cast<double>()));
    return r;
  }

  static Eigen::Index checked(Eigen::Index rows, Eigen::Index cols) {
    if (cols != 1 || rows < 0)
      throw std::invalid_argument("SphereMuonDirection: Sphere points are N x 1 vectors, got " +
                                  detail::spectral_shape(rows, cols));
    return rows;
  }
};

/// The direction on SO(n) at W (n x n): A = W msign(skew(W^T G)), skew(X) = (X - X^T) / 2.
template <class T>
class SpecialOrthogonalMuonDirection : public detail::SpectralDirectionBase<T> {
  using Base = detail::SpectralDirectionBase<T>;

 public:
  /// rows x cols must be n x n.
  SpecialOrthogonalMuonDirection(Eigen::Index rows, Eigen::Index cols)
      : Base(checked(rows, cols), cols, rows, cols), k_(rows, cols), ad_(rows, cols) {}

  SpectralDirectionReport solve(const T* w, const T* g, T* a) {
    return detail::SpectralDirectionKernels::solve(*this, w, g, a);
  }

 private:
  friend struct detail::SpectralDirectionKernels;

  SpectralDirectionReport solve_kernel(const T* w, const T* g, T* a) {
    const Eigen::Index n = this->rows();
    if (n == 0) return this->zero(a);
    if (!this->load(w, g, a)) return this->non_finite();
    if (n == 1) return this->zero(a);
    detail::stack_gemm<double>(k_, this->wd_, detail::GemmOp::transposed, this->gd_, detail::GemmOp::plain,
                               detail::GemmMode::assign);
    auto& z = this->polar_.z();
    z = 0.5 * (k_ - k_.transpose());
    if (this->negligible(z)) return this->zero(a);
    SpectralDirectionReport r;
    r.converged = true;
    double mu2 = 0;
    r.dual = this->polar_.decompose(mu2);
    // msign of a skew Z is skew (P is a function of Z^T Z = -Z^2, so it commutes with Z); made so to the last bit.
    this->polar_.apply();
    k_ = 0.5 * (this->polar_.out() - this->polar_.out().transpose());
    detail::stack_gemm<double>(ad_, this->wd_, detail::GemmOp::plain, k_, detail::GemmOp::plain,
                               detail::GemmMode::assign);
    r.primal = this->store(ad_, 1.0, a);
    ad_ = Eigen::Map<const typename Base::MatT>(a, n, n).template cast<double>();
    detail::stack_gemm<double>(k_, this->wd_, detail::GemmOp::transposed, ad_, detail::GemmOp::plain,
                               detail::GemmMode::assign);
    r.residual = (k_ + k_.transpose()).norm();
    return r;
  }

 public:
  std::size_t bytes() const noexcept {
    return Base::bytes() + 2 * sizeof(double) * static_cast<std::size_t>(k_.size());
  }

 private:
  static Eigen::Index checked(Eigen::Index rows, Eigen::Index cols) {
    if (rows != cols || rows < 0)
      throw std::invalid_argument("SpecialOrthogonalMuonDirection: SO(n) points are square n x n matrices, got " +
                                  detail::spectral_shape(rows, cols));
    return rows;
  }
  Eigen::MatrixXd k_, ad_;
};

/// The direction on the Grassmannian Gr(N, n) at a representative W (N x n, orthonormal columns), for horizontal
/// tangent vectors (W^T A = 0): A = msign((I - W W^T) G).
template <class T>
class GrassmannMuonDirection : public detail::SpectralDirectionBase<T> {
  using Base = detail::SpectralDirectionBase<T>;

 public:
  /// rows x cols must be N x n with 0 <= n <= N.
  GrassmannMuonDirection(Eigen::Index rows, Eigen::Index cols)
      : Base(checked(rows, cols), cols, rows, cols), k_(cols, cols) {}

  SpectralDirectionReport solve(const T* w, const T* g, T* a) {
    return detail::SpectralDirectionKernels::solve(*this, w, g, a);
  }

 private:
  friend struct detail::SpectralDirectionKernels;

  SpectralDirectionReport solve_kernel(const T* w, const T* g, T* a) {
    const Eigen::Index N = this->rows(), n = this->cols();
    if (n == 0) return this->zero(a);
    if (!this->load(w, g, a)) return this->non_finite();
    if (n == N) return this->zero(a);
    auto& z = this->polar_.z();
    z = this->gd_;
    // Projected twice (Gram-Schmidt twice): once leaves W^T Z at |W^T W - I| |G| (1e-7 for a float W), which msign
    // would amplify by 1 / s_min(Z); twice leaves the square of that.
    for (int pass = 0; pass < 2; ++pass) {
      detail::stack_gemm<double>(k_, this->wd_, detail::GemmOp::transposed, z, detail::GemmOp::plain,
                                 detail::GemmMode::assign);
      detail::stack_gemm<double>(z, this->wd_, detail::GemmOp::plain, k_, detail::GemmOp::plain,
                                 detail::GemmMode::subtract);
    }
    if (this->negligible(z)) return this->zero(a);
    SpectralDirectionReport r;
    r.converged = true;
    double mu2 = 0;
    r.dual = this->polar_.decompose(mu2);
    this->polar_.apply();
    r.primal = this->store(this->polar_.out(), 1.0, a);
    z = Eigen::Map<const typename Base::MatT>(a, N, n).template cast<double>();
    detail::stack_gemm<double>(k_, this->wd_, detail::GemmOp::transposed, z, detail::GemmOp::plain,
                               detail::GemmMode::assign);
    r.residual = k_.norm();
    return r;
  }

 public:
  std::size_t bytes() const noexcept { return Base::bytes() + sizeof(double) * static_cast<std::size_t>(k_.size()); }

 private:
  static Eigen::Index checked(Eigen::Index rows, Eigen::Index cols) {
    if (cols < 0 || cols > rows)
      throw std::invalid_argument("GrassmannMuonDirection: Gr(N, n) representatives are N x n with 0 <= n <= N, got " +
                                  detail::spectral_shape(rows, cols));
    return rows;
  }
  Eigen::MatrixXd k_;
};

/// The direction on the oblique manifold Oblique(N, n) at W (N x n, unit columns): A = msign(G - W diag(d)) for the
/// multiplier d (n entries) that minimizes |G - W diag(d)|_*, found by the Newton continuation at the top of this file.
template <class T>
class ObliqueMuonDirection : public detail::SpectralDirectionBase<T> {
  using Base = detail::SpectralDirectionBase<T>;

 public:
  /// rows x cols must be N x n with N >= 1 and n >= 0 (or empty).
  ObliqueMuonDirection(Eigen::Index rows, Eigen::Index cols)
      : Base(checked(rows, cols), cols, rows, cols),
        svd_(rows, cols, Eigen::ComputeThinU | Eigen::ComputeThinV),
        gt_(rows, cols),
        au_(std::min(rows, cols), cols),
        vt_(std::min(rows, cols), cols),
        tmp_(std::min(rows, cols), cols),
        y_(2 * std::min(rows, cols), cols),
        h_(cols, cols),
        h2_(cols, cols),
        c_(cols, cols),
        m_(cols, cols),
        sigma_(std::min(rows, cols)),
        s_(std::min(rows, cols)),
        gs_(std::min(rows, cols)),
        shift_(cols),
        d_(cols),
        r_(cols),
        step_(cols),
        ww_(cols),
        tmp_d_(cols),
        stage_d_(cols),
        ldlt_(cols) {}

  /// a <- the direction for w and g (N x n column-major each). multiplier, when given, receives d (n entries, the
  /// multiplier of G itself: A = msign(G - W diag(d)) at convergence), and with warm the iteration starts from the d
  /// it holds (a previous step's, say); otherwise from the tangent projection of G.
  SpectralDirectionReport solve(const T* w, const T* g, T* a, const ObliqueMuonOptions& o = {}, T* multiplier = nullptr,
                                bool warm = false) {
    o.validate();
    return detail::SpectralDirectionKernels::solve(*this, w, g, a, o, multiplier, warm);
  }

 private:
  friend struct detail::SpectralDirectionKernels;

  SpectralDirectionReport solve_kernel(const T* w, const T* g, T* a, const ObliqueMuonOptions& o, T* multiplier,
                                       bool warm) {
    const Eigen::Index N = this->rows(), n = this->cols();
    if (N == 0 || n == 0) return this->zero(a);
    if (!this->load(w, g, a)) {
      if (multiplier != nullptr) Eigen::Map<VecT>(multiplier, n).setConstant(std::numeric_limits<T>::quiet_NaN());
      return this->non_finite();
    }
    const auto& wd = this->wd_;
    // G is replaced by its tangent projection G_t = G - W diag(shift) (projected twice, as the sphere's), which has
    // the same maximizer; the iteration runs on d' = d - shift, so that Z = G_t - W diag(d') never cancels the normal
    // part of G, which near a stationary point is most of it.
    gt_ = this->gd_;
    shift_.setZero();
    for (Eigen::Index j = 0; j < n; ++j) {
      ww_(j) = wd.col(j).squaredNorm();
      if (!(ww_(j) > 0)) continue;  // a zero column constrains nothing: its multiplier stays 0
      for (int pass = 0; pass < 2; ++pass) {
        const double s = wd.col(j).dot(gt_.col(j)) / ww_(j);
        gt_.col(j) -= s * wd.col(j);
        shift_(j) += s;
      }
    }
    if (N == 1 || this->negligible(gt_)) {  // the tangent space is {0}, or G's projection on it is
      if (multiplier != nullptr) Eigen::Map<VecT>(multiplier, n) = shift_.template cast<T>();
      return this->zero(a);
    }
    if (N > n) detail::stack_gram<double>(c_, wd);
    if (warm && multiplier != nullptr) {
      d_ = Eigen::Map<const VecT>(multiplier, n).template cast<double>() - shift_;
      if (!d_.allFinite()) d_.setZero();
    } else {
      d_.setZero();
    }
    const double tolerance =
        std::max(o.tolerance, 4.0 * static_cast<double>(std::min(N, n)) * std::numeric_limits<double>::epsilon());
    SpectralDirectionReport r;
    bool finite = factor(d_);
    const double top = finite ? sigma_(0) : 0.0;
    double mu = o.smoothing * top;
    const double floor = std::min(mu, kSmallestSmoothing * top);
    const double wnorm = std::sqrt(ww_.sum());  // >= |W|_2
    double floor_best = std::numeric_limits<double>::infinity();
    int stalled = 0;
    stages_ = 0;
    while (finite) {
      const double f = weigh(mu), gmax = gs_(0);
      const double residual = r_.norm() / gmax, dual = sigma_.sum();
      // The smoothed iterate A = U diag(g(s) / g(s_max)) V^T has <Z, A> = sum s g(s) / g(s_max); projecting it on the
      // tangent space keeps <G, A> (G_t is tangent) and grows |A|_2 by at most residual |W|_2, so this bounds the gap
      // of the returned A.
      const double gap = dual - sigma_.dot(gs_) / gmax;
      if (gap + residual * wnorm * dual <= tolerance * dual) {
        r.converged = true;
        break;
      }
      if (mu > floor && residual <= mu / top && gap > tolerance * dual / 2) {
        const double next = std::max(mu / kShrink, floor);
        finite = predict(mu, next);
        mu = next;
        continue;
      }
      if (mu <= floor) {  // the last stage ends when its residual stops halving: rounding, not smoothing, is left
        if (residual < floor_best / 2) {
          floor_best = residual;
          stalled = 0;
        } else if (++stalled == kStall) {
          break;
        }
      }
      if (r.iterations == o.max_iterations) break;
      ++r.iterations;
      newton_step(wd, mu);
      // Backtracking on the smoothed dual; the slack of a few roundings of f lets the last steps, whose decrease is
      // below f's rounding, through.
      const double slope = r_.dot(step_);
      const double slack = 8 * std::numeric_limits<double>::epsilon() * f;
      bool accepted = false;
      double t = 1;
      for (int h = 0; h < kMaxHalvings && std::isfinite(slope); ++h, t *= 0.5) {
        tmp_d_ = d_ + t * step_;
        if (!factor(tmp_d_)) break;
        double ft = 0;
        for (Eigen::Index i = 0; i < sigma_.size(); ++i) ft += std::hypot(sigma_(i), mu);
        if (ft <= f - 1e-4 * t * slope + slack) {
          accepted = true;
          break;
        }
      }
      if (!accepted) {  // no decrease left in double: stop where the iterate was
        finite = factor(d_);
        if (finite) weigh(mu);
        break;
      }
      d_ = tmp_d_;
    }
    if (multiplier != nullptr) Eigen::Map<VecT>(multiplier, n) = (d_ + shift_).template cast<T>();
    if (!finite) {  // a non-finite Z (an overflow in G - W diag(d))
      Eigen::Map<typename Base::MatT>(a, N, n).setConstant(std::numeric_limits<T>::quiet_NaN());
      return Base::non_finite();
    }
    r.dual = sigma_.sum();
    r.projected = !r.converged;
    // A = U diag(g(s)) V^T, each column projected on w_j's complement, then scaled to |A|_2 = 1.
    auto& ad = this->polar_.out();
    tmp_ = gs_.asDiagonal() * vt_;
    detail::stack_gemm<double>(ad, svd_.matrixU(), detail::GemmOp::plain, tmp_, detail::GemmOp::plain,
                               detail::GemmMode::assign);
    for (Eigen::Index j = 0; j < n; ++j)
      if (ww_(j) > 0) ad.col(j) -= (wd.col(j).dot(ad.col(j)) / ww_(j)) * wd.col(j);
    const double norm = this->polar_.out_norm2();
    r.primal = this->store(ad, norm > 0 ? 1 / norm : 1.0, a);
    const Eigen::Map<const typename Base::MatT> am(a, N, n);
    for (Eigen::Index j = 0; j < n; ++j) r_(j) = wd.col(j).dot(am.col(j).template cast<double>());
    r.residual = r_.norm();
    return r;
  }

 public:
  std::size_t bytes() const noexcept {
    const auto k = static_cast<std::size_t>(sigma_.size()), N = static_cast<std::size_t>(this->rows()),
               n = static_cast<std::size_t>(this->cols());
    // The SVD's U, V, work matrix and QR preconditioner are counted as four N x n matrices, the LDLT as one n x n.
    return Base::bytes() + sizeof(double) * (5 * N * n + 5 * k * n + 5 * n * n + 3 * k + 7 * n);
  }

 private:
  using VecT = Eigen::Matrix<T, Eigen::Dynamic, 1>;

  static Eigen::Index checked(Eigen::Index rows, Eigen::Index cols) {
    if (rows < 0 || cols < 0 || (rows == 0 && cols > 0))
      throw std::invalid_argument("ObliqueMuonDirection: Oblique(N, n) points are N x n with N >= 1, got " +
                                  detail::spectral_shape(rows, cols));
    return rows;
  }

  // The SVD of Z = G_t - W diag(d), with au_ = U^T W and vt_ = V^T; false for a non-finite Z.
  bool factor(const Eigen::VectorXd& d) {
    auto& z = this->polar_.z();
    z = gt_;
    for (Eigen::Index j = 0; j < z.cols(); ++j) z.col(j) -= d(j) * this->wd_.col(j);
    if (!z.allFinite()) return false;
    svd_.compute(z, Eigen::ComputeThinU | Eigen::ComputeThinV);
    sigma_ = svd_.singularValues();
    detail::stack_gemm<double>(au_, svd_.matrixU(), detail::GemmOp::transposed, this->wd_, detail::GemmOp::plain,
                               detail::GemmMode::assign);
    vt_ = svd_.matrixV().transpose();
    return sigma_.allFinite();
  }

  // Moves d_ from the end of the stage at mu towards the minimizer at next. The minimizers d(mu) lie on a path that is
  // close to a line near mu = 0 (the singular values that vanish at mu = 0 shrink in proportion to mu), so the secant
  // through the last two stages' ends predicts the next; the prediction is kept only where it lowers the residual at
  // next. Returns false for a non-finite Z.
  bool predict(double mu, double next) {
    const bool secant = stages_ > 0;
    ++stages_;
    if (!secant) {
      stage_d_ = d_;
      stage_mu_ = mu;
      return true;
    }
    weigh(next);
    const double here = r_.norm() / gs_(0);
    tmp_d_ = d_ + ((next - mu) / (mu - stage_mu_)) * (d_ - stage_d_);
    stage_d_ = d_;
    stage_mu_ = mu;
    if (factor(tmp_d_)) {
      weigh(next);
      if (r_.norm() / gs_(0) < here) {
        d_ = tmp_d_;
        return true;
      }
    }
    return factor(d_);
  }

  // For the smoothing mu: s_i = sqrt(sigma_i^2 + mu^2), g_i = sigma_i / s_i (the smoothed polar factor's singular
  // values) and r_j = (W^T U diag(g) V^T)_jj, the negative gradient of f; returns f = sum s_i.
  double weigh(double mu) {
    double f = 0;
    for (Eigen::Index i = 0; i < sigma_.size(); ++i) {
      s_(i) = std::hypot(sigma_(i), mu);
      gs_(i) = s_(i) > 0 ? sigma_(i) / s_(i) : 0.0;
      f += s_(i);
    }
    for (Eigen::Index j = 0; j < r_.size(); ++j) r_(j) = (au_.col(j).array() * gs_.array() * vt_.col(j).array()).sum();
    return f;
  }

  // step_ <- H^-1 r, H the Hessian of f at the last factor() with the last weigh()'s mu.
  void newton_step(const Eigen::MatrixXd& wd, double mu) {
    const Eigen::Index k = sigma_.size(), n = d_.size(), N = wd.rows();
    h_.setZero();
    Eigen::Index rows = 0;
    auto flush = [&] {
      if (rows == 0) return;
      detail::stack_gemm<double>(h_, y_.topRows(rows), detail::GemmOp::transposed, y_.topRows(rows),
                                 detail::GemmOp::plain, detail::GemmMode::add);
      rows = 0;
    };
    for (Eigen::Index i = 0; i < k; ++i) {
      for (Eigen::Index l = i; l < k; ++l) {
        if (rows + 2 > y_.rows()) flush();
        const double si = s_(i), sl = s_(l), xi = sigma_(i), xl = sigma_(l);
        double sym = 0, skew = 0;
        if (xi + xl > 0) {
          sym = mu * mu * (xi + xl) / (si * sl * (xi * sl + xl * si));
          skew = (xi * sl + xl * si) / (si * sl * (xi + xl));
        } else {
          sym = skew = si > 0 ? 1 / si : 0.0;
        }
        if (l == i) {
          const double c = std::sqrt(sym);
          y_.row(rows++) = c * au_.row(i).cwiseProduct(vt_.row(i));
          continue;
        }
        // 2 Psi (E_il +- E_li)^2 / 4 for the pair, E^j = a_j b_j^T.
        const double cs = std::sqrt(sym / 2), ck = std::sqrt(skew / 2);
        y_.row(rows++) = cs * (au_.row(i).cwiseProduct(vt_.row(l)) + au_.row(l).cwiseProduct(vt_.row(i)));
        y_.row(rows++) = ck * (au_.row(i).cwiseProduct(vt_.row(l)) - au_.row(l).cwiseProduct(vt_.row(i)));
      }
    }
    flush();
    // The complement of Z's range (N > n) or of its row space (N < n), where DF acts as E -> E V S^-1 V^T or
    // U S^-1 U^T E.
    if (N > n) {
      tmp_ = s_.cwiseInverse().asDiagonal() * vt_;
      detail::stack_gemm<double>(h2_, vt_, detail::GemmOp::transposed, tmp_, detail::GemmOp::plain,
                                 detail::GemmMode::assign);
      detail::stack_gram<double>(m_, au_);
      h_ += (c_ - m_).cwiseProduct(h2_);
    } else if (N < n) {
      tmp_ = s_.cwiseInverse().asDiagonal() * au_;
      detail::stack_gemm<double>(h2_, au_, detail::GemmOp::transposed, tmp_, detail::GemmOp::plain,
                                 detail::GemmMode::assign);
      detail::stack_gram<double>(m_, vt_);
      h_ += h2_.cwiseProduct(Eigen::MatrixXd::Identity(n, n) - m_);
    }
    for (Eigen::Index j = 0; j < n; ++j)
      if (!(ww_(j) > 0)) h_(j, j) = 1;
    ldlt_.compute(h_);
    step_ = ldlt_.solve(r_);
  }

  static constexpr double kShrink = 10;
  static constexpr double kSmallestSmoothing = 1e-8;
  static constexpr int kStall = 3;
  static constexpr int kMaxHalvings = 40;
  Eigen::JacobiSVD<Eigen::MatrixXd> svd_;
  Eigen::MatrixXd gt_, au_, vt_, tmp_, y_, h_, h2_, c_, m_;
  Eigen::VectorXd sigma_, s_, gs_, shift_, d_, r_, step_, ww_, tmp_d_, stage_d_;
  int stages_ = 0;
  double stage_mu_ = 0;
  Eigen::LDLT<Eigen::MatrixXd> ldlt_;
};

namespace detail {

// The allocating face: checks that G has W's shape, sizes a Direction for it and solves.
template <class Direction, class DW, class DG, class... Args>
Eigen::Matrix<typename DW::Scalar, Eigen::Dynamic, Eigen::Dynamic> spectral_direction_of(
    const char* name, const Eigen::MatrixBase<DW>& w, const Eigen::MatrixBase<DG>& g, SpectralDirectionReport* report,
    Args&&... args) {
  using T = typename DW::Scalar;
  static_assert(std::is_same_v<T, typename DG::Scalar>, "spectral directions: W and G of one scalar type");
  using MatT = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  if (g.rows() != w.rows() || g.cols() != w.cols())
    throw std::invalid_argument(std::string(name) + ": G is " + spectral_shape(g.rows(), g.cols()) +
                                ", expected W's shape " + spectral_shape(w.rows(), w.cols()));
  const MatT wm = w, gm = g;
  Direction dir(wm.rows(), wm.cols());
  MatT a(wm.rows(), wm.cols());
  const SpectralDirectionReport r = dir.solve(wm.data(), gm.data(), a.data(), std::forward<Args>(args)...);
  if (report != nullptr) *report = r;
  return a;
}

}  // namespace detail

/// The sphere's direction as a new matrix (see SphereMuonDirection).
template <class DW, class DG>
auto sphere_muon_direction(const Eigen::MatrixBase<DW>& w, const Eigen::MatrixBase<DG>& g,
                           SpectralDirectionReport* report = nullptr) {
  return detail::spectral_direction_of<SphereMuonDirection<typename DW::Scalar>>("sphere_muon_direction", w, g, report);
}

/// SO(n)'s direction as a new matrix (see SpecialOrthogonalMuonDirection).
template <class DW, class DG>
auto special_orthogonal_muon_direction(const Eigen::MatrixBase<DW>& w, const Eigen::MatrixBase<DG>& g,
                                       SpectralDirectionReport* report = nullptr) {
  return detail::spectral_direction_of<SpecialOrthogonalMuonDirection<typename DW::Scalar>>(
      "special_orthogonal_muon_direction", w, g, report);
}

/// The Grassmannian's direction as a new matrix (see GrassmannMuonDirection).
template <class DW, class DG>
auto grassmann_muon_direction(const Eigen::MatrixBase<DW>& w, const Eigen::MatrixBase<DG>& g,
                              SpectralDirectionReport* report = nullptr) {
  return detail::spectral_direction_of<GrassmannMuonDirection<typename DW::Scalar>>("grassmann_muon_direction", w, g,
                                                                                    report);
}

/// The oblique manifold's direction as a new matrix (see ObliqueMuonDirection), from the cold start.
template <class DW, class DG>
auto oblique_muon_direction(const Eigen::MatrixBase<DW>& w, const Eigen::MatrixBase<DG>& g,
                            const ObliqueMuonOptions& o = {}, SpectralDirectionReport* report = nullptr) {
  return detail::spectral_direction_of<ObliqueMuonDirection<typename DW::Scalar>>(
      "oblique_muon_direction", w, g, report, o, static_cast<typename DW::Scalar*>(nullptr), false);
}

}  // namespace geomopt
