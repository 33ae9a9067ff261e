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
// dual bound |Z|_*. The oblique one has no closed form; its multiplier d (one per column) is found by iteratively
// reweighted least squares on the smoothed dual f(d) = tr((Z^T Z + mu^2 I)^(1/2)), Z = G - W diag(d): with the
// variational form tr(M^(1/2)) = min_{P > 0} (tr(M P) + tr(P^-1)) / 2 (attained at P = M^(-1/2)) it alternates
//   P <- (Z^T Z + mu^2 I)^(-1/2)          and   d <- the minimizer of tr(Z P Z^T), the n x n system
//   ((W^T W) o P) d = diag(W^T G P)        (o: the entrywise product, positive definite by Schur's product theorem),
// or, for a wide W (N < n), the same with the left Gram matrix, where the system is diagonal:
//   Q <- (Z Z^T + mu^2 I)^(-1/2),  d_j <- w_j^T Q g_j / w_j^T Q w_j.
// It is chosen because every step is a majorize-minimize step, so f never increases (no line search, no step size),
// each step costs one eigendecomposition of the smaller Gram matrix (as Stiefel's fixed point does), and a fixed point
// is exactly a stationary point of f, where diag(W^T A) = 0 for A = Z P: the stopping test is the tangency itself.
// By default the iterates are Anderson-mixed (ObliqueMuonOptions::acceleration), which gives up the monotonicity for
// speed and restarts from the best multiplier when the residual grows. Where N is close to n the optimal Z is nearly
// rank-deficient and the iteration can need hundreds of steps or run out (the report says so; A is then projected).
// The smoothing mu (relative to |Z|_2 at the start) keeps P finite where the optimal Z is rank-deficient, as Stiefel's
// does; it costs the objective about mu^2 / s of each singular value s (1e-8 relative at the default 1e-4).
//
// Contract, for W on the manifold and finite G (every product in double, whatever T; A rounded to T once):
//   - A is tangent: the report's residual (|w^T a|, |W^T A + A^T W|_F, |W^T A|_F, |diag(W^T A)|_2) is rounding for
//     the closed forms and at most the tolerance for Oblique once converged;
//   - |A|_2 = 1 to rounding, unless the tangent space is {0} (Sphere N = 1, SO(1), Grassmann n = N, Oblique N = 1)
//     or G's tangent projection Z is zero to G's rounding in T (|Z|_F <= 4 (rows + cols) eps(T) |G|_F): then A = 0;
//   - optimality: the report's dual is |Z|_* at the returned multiplier, an upper bound on max <G, A>, and primal =
//     <G, A>; the two agree to rounding for the closed forms and within the smoothing's cost for Oblique once
//     converged. An Oblique solve that runs out of iterations returns a feasible A (projected on the tangent space and
//     scaled to unit spectral norm, report.projected) with the gap dual - primal;
//   - a zero-size shape returns at once; a non-finite W or G gives an all-NaN A (and multiplier), never a throw or a
//     hang; a shape that is not the manifold's throws std::invalid_argument from the constructor or the allocating
//     function, naming the manifold and the shape it expects;
//   - solve with a constructed object allocates nothing, and its result depends on the inputs (and the starting
//     multiplier) only.
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
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

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

/// The settings of ObliqueMuonDirection's multiplier iteration (StiefelMuonOptions' names and meanings).
struct ObliqueMuonOptions {
  /// Stop when |diag(W^T A)|_2 <= tolerance, or below 2 k eps(double) where the arithmetic cannot go.
  double tolerance = 1e-6;
  int max_iterations = 200;
  /// mu relative to |Z|_2 at the starting multiplier (0: none): the singular values s of Z enter as sqrt(s^2 + mu^2).
  double smoothing = 1e-4;
  /// Anderson mixing over this many past multipliers (0: the plain iteration), at most 16.
  int acceleration = 8;

  void validate() const {
    if (acceleration < 0 || acceleration > 16)
      throw std::invalid_argument("ObliqueMuonOptions: acceleration must be in [0, 16], got " +
                                  std::to_string(acceleration));
    if (!(tolerance > 0))
      throw std::invalid_argument("ObliqueMuonOptions: tolerance must be > 0, got " + std::to_string(tolerance));
    if (!(smoothing >= 0 && smoothing < 1))
      throw std::invalid_argument("ObliqueMuonOptions: smoothing must be in [0, 1), got " + std::to_string(smoothing));
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

/// The direction on the sphere S^(N-1) at w (N x 1): A = P g / |P g|, P = I - w w^T / (w^T w).
template <class T>
class SphereMuonDirection : public detail::SpectralDirectionBase<T> {
  using Base = detail::SpectralDirectionBase<T>;

 public:
  /// rows x cols must be N x 1 (N >= 0).
  SphereMuonDirection(Eigen::Index rows, Eigen::Index cols) : Base(checked(rows, cols), cols, rows, cols) {}

  /// a <- the direction for w and g (N entries each).
  SpectralDirectionReport solve(const T* w, const T* g, T* a) {
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

 private:
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
/// multiplier d (n entries) that minimizes |G - W diag(d)|_*, found by the iteration at the top of this file.
template <class T>
class ObliqueMuonDirection : public detail::SpectralDirectionBase<T> {
  using Base = detail::SpectralDirectionBase<T>;

 public:
  /// rows x cols must be N x n with N >= 1 and n >= 0 (or empty).
  ObliqueMuonDirection(Eigen::Index rows, Eigen::Index cols)
      : Base(checked(rows, cols), cols, rows, cols),
        gt_(rows, cols),
        wz_(std::min(rows, cols), cols),
        kt_(cols, cols),
        c_(cols, cols),
        m_(cols, cols),
        pw_(rows, cols),
        shift_(cols),
        d_(cols),
        rhs_(cols),
        ww_(cols),
        next_(cols),
        best_d_(cols),
        prev_f_(cols),
        prev_g_(cols),
        ldlt_(cols) {
    df_.resize(cols, kMaxAcceleration);
    dg_.resize(cols, kMaxAcceleration);
  }

  /// a <- the direction for w and g (N x n column-major each). multiplier, when given, receives d (n entries, the
  /// multiplier of G itself: A = msign(G - W diag(d)) at convergence), and with warm the iteration starts from the d
  /// it holds (a previous step's, say); otherwise from the tangent projection of G.
  SpectralDirectionReport solve(const T* w, const T* g, T* a, const ObliqueMuonOptions& o = {}, T* multiplier = nullptr,
                                bool warm = false) {
    o.validate();
    const Eigen::Index N = this->rows(), n = this->cols();
    if (N == 0 || n == 0) return this->zero(a);
    if (!this->load(w, g, a)) {
      if (multiplier != nullptr) Eigen::Map<VecT>(multiplier, n).setConstant(std::numeric_limits<T>::quiet_NaN());
      return this->non_finite();
    }
    const auto& wd = this->wd_;
    auto& polar = this->polar_;
    auto& z = polar.z();
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
    const bool tall = polar.tall();
    if (tall) {
      detail::stack_gemm<double>(kt_, wd, detail::GemmOp::transposed, gt_, detail::GemmOp::plain,
                                 detail::GemmMode::assign);
      detail::stack_gram<double>(c_, wd);
    }
    if (warm && multiplier != nullptr) {
      d_ = Eigen::Map<const VecT>(multiplier, n).template cast<double>() - shift_;
      if (!d_.allFinite()) d_.setZero();
    } else {
      d_.setZero();
    }
    const double tolerance =
        std::max(o.tolerance, 2.0 * static_cast<double>(std::min(N, n)) * std::numeric_limits<double>::epsilon());
    double mu2 = -o.smoothing * o.smoothing;
    history_ = 0;
    best_ = std::numeric_limits<double>::infinity();
    SpectralDirectionReport r;
    double scale = 1;
    for (int it = 0;; ++it) {
      z = gt_;
      for (Eigen::Index j = 0; j < n; ++j) z.col(j) -= d_(j) * wd.col(j);
      r.dual = polar.decompose(mu2);
      r.iterations = it;
      // Smoothing leaves the largest singular value of Z P at s_max / top: A = scale Z P has |A|_2 = 1.
      const double top = polar.top();
      scale = mu2 > 0 && top * top > mu2 ? top / std::sqrt(top * top - mu2) : 1.0;
      const auto& p = polar.p();
      if (tall) {
        // r_j = (W^T Z P)_jj, in n x n arithmetic.
        detail::stack_gemm<double>(wz_, wd, detail::GemmOp::transposed, z, detail::GemmOp::plain,
                                   detail::GemmMode::assign);
        for (Eigen::Index j = 0; j < n; ++j) rhs_(j) = wz_.row(j).dot(p.col(j));
      } else {
        polar.apply();
        for (Eigen::Index j = 0; j < n; ++j) rhs_(j) = wd.col(j).dot(polar.out().col(j));
      }
      r.residual = scale * rhs_.norm();
      if (!std::isfinite(r.residual)) break;
      if (r.residual <= tolerance) {
        r.converged = true;
        break;
      }
      if (it == o.max_iterations) break;
      if (tall) {
        // ((W^T W) o P) d = diag(W^T G_t P): positive definite for P > 0 and W^T W with a positive diagonal (Schur).
        m_ = c_.cwiseProduct(p);
        for (Eigen::Index j = 0; j < n; ++j) {
          rhs_(j) = kt_.row(j).dot(p.col(j));
          if (!(ww_(j) > 0)) {
            m_.row(j).setZero();
            m_.col(j).setZero();
            m_(j, j) = 1;
            rhs_(j) = 0;
          }
        }
        ldlt_.compute(m_);
        next_ = ldlt_.solve(rhs_);
      } else {
        // d_j = w_j^T Q g_j / w_j^T Q w_j, Q = p() (N x N).
        detail::stack_gemm<double>(pw_, p, detail::GemmOp::plain, wd, detail::GemmOp::plain, detail::GemmMode::assign);
        for (Eigen::Index j = 0; j < n; ++j) {
          const double den = wd.col(j).dot(pw_.col(j));
          next_(j) = den > 0 ? pw_.col(j).dot(gt_.col(j)) / den : 0.0;
        }
      }
      if (o.acceleration > 0) {
        anderson(o.acceleration, r.residual);
      } else {
        d_ = next_;
      }
    }
    if (multiplier != nullptr) Eigen::Map<VecT>(multiplier, n) = (d_ + shift_).template cast<T>();
    if (!std::isfinite(r.residual)) {  // a NaN the decomposition produced (an overflow in G's Gram matrix)
      Eigen::Map<typename Base::MatT>(a, N, n).setConstant(std::numeric_limits<T>::quiet_NaN());
      return Base::non_finite();
    }
    polar.apply();
    auto& ad = polar.out();
    if (!r.converged) {
      // Made feasible: each column projected on w_j's complement, then |A|_2 brought to 1.
      for (Eigen::Index j = 0; j < n; ++j)
        if (ww_(j) > 0) ad.col(j) -= (wd.col(j).dot(ad.col(j)) / ww_(j)) * wd.col(j);
      const double norm = polar.out_norm2();
      scale = norm > 0 ? 1 / norm : 1.0;
      r.projected = true;
    }
    r.primal = this->store(ad, scale, a);
    const Eigen::Map<const typename Base::MatT> am(a, N, n);
    for (Eigen::Index j = 0; j < n; ++j) rhs_(j) = wd.col(j).dot(am.col(j).template cast<double>());
    r.residual = rhs_.norm();
    return r;
  }

  std::size_t bytes() const noexcept {
    return Base::bytes() + sizeof(double) * static_cast<std::size_t>(gt_.size() + wz_.size() + 3 * kt_.size() +
                                                                     pw_.size() + 4 * d_.size() + 3 * kt_.size());
  }

 private:
  using VecT = Eigen::Matrix<T, Eigen::Dynamic, 1>;

  static Eigen::Index checked(Eigen::Index rows, Eigen::Index cols) {
    if (rows < 0 || cols < 0 || (rows == 0 && cols > 0))
      throw std::invalid_argument("ObliqueMuonDirection: Oblique(N, n) points are N x n with N >= 1, got " +
                                  detail::spectral_shape(rows, cols));
    return rows;
  }

  // Anderson mixing of the map d -> next_ (the iteration's update): d <- next - dG gamma, gamma the least-squares fit
  // of the residual f = next - d by the last `depth` residual differences dF. The plain iteration is a
  // majorize-minimize step and never increases the dual, but it converges linearly, slowly where N is close to n
  // (200 steps short of 1e-6 at 8 x 8); the mixing gives up the monotonicity, so the history restarts from the best d
  // seen when the tangency residual grows tenfold past the best.
  void anderson(int depth, double residual) {
    const Eigen::Index n = d_.size();
    if (residual < best_) {
      best_ = residual;
      best_d_ = d_;
    } else if (residual > 10 * best_) {
      d_ = best_d_;
      history_ = 0;
      return;
    }
    const int used = std::min(history_, depth);
    if (history_ > 0) {
      // The new difference replaces the oldest; dF^T dF is kept up to date by its one new row and column.
      const int slot = (history_ - 1) % depth;
      df_.col(slot) = (next_ - d_) - prev_f_;
      dg_.col(slot) = next_ - prev_g_;
      for (int c = 0; c < std::min(history_, depth); ++c)
        dfdf_(slot, c) = dfdf_(c, slot) = df_.col(slot).dot(df_.col(c));
    }
    prev_f_ = next_ - d_;
    prev_g_ = next_;
    ++history_;
    if (used == 0) {
      d_ = next_;
      return;
    }
    Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, 0, kMaxAcceleration, kMaxAcceleration> normal =
        dfdf_.topLeftCorner(used, used);
    Eigen::Matrix<double, Eigen::Dynamic, 1, 0, kMaxAcceleration, 1> rhs(used);
    for (int c = 0; c < used; ++c) rhs(c) = df_.col(c).dot(prev_f_);
    normal.diagonal().array() += 1e-12 * normal.trace() + std::numeric_limits<double>::min();
    const Eigen::Matrix<double, Eigen::Dynamic, 1, 0, kMaxAcceleration, 1> gamma = normal.ldlt().solve(rhs);
    d_ = next_;
    for (int c = 0; c < used; ++c) d_ -= gamma(c) * dg_.col(c);
    (void)n;
  }

  static constexpr int kMaxAcceleration = 16;
  Eigen::MatrixXd gt_, wz_, kt_, c_, m_, pw_, df_, dg_;
  Eigen::Matrix<double, kMaxAcceleration, kMaxAcceleration> dfdf_;
  Eigen::VectorXd shift_, d_, rhs_, ww_, next_, best_d_, prev_f_, prev_g_;
  int history_ = 0;
  double best_ = 0;
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
