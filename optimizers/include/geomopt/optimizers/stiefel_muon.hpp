// The spectral-norm steepest direction on the Stiefel manifold St(N, n) = {W : W^T W = I}, ManifoldMuon's direction:
//
//   A = argmax tr(U^T A)  subject to  |A|_2 <= 1,  W^T A + A^T W = 0
//
// for a point W and a matrix U (the momentum of the gradient). The solution is A = msign(U + W X) for the symmetric
// multiplier X that makes W^T A skew; the solvers here find X in n x n arithmetic only (the Gram matrix of U + W X is
// U^T U + K^T X + X K + X^2 with K = W^T U), by the fixed-point iteration (default) or by dual descent on
// |U + W X|_* (docs/optimizers.md has the derivation, docs/design.md the measurements that chose the default).
//
//   geomopt::StiefelMuonDirection<float> d(N, n);
//   geomopt::StiefelMuonReport r = d.solve(w, u, a);          // w, u, a: N x n column-major
//   Eigen::MatrixXd a = geomopt::stiefel_muon_direction(w, u);  // the same, allocating
//
// Invariants: the returned A is feasible (tangent, unit spectral norm) whether or not the solve converged; the
// multiplier is a function of the inputs and the starting multiplier only. For float and double, a translation unit
// that links libgeomopt_optimizers (with its Eigen alignment; see geomopt/manifolds/any_workspace.hpp) calls the
// library's compiled StiefelMuonDirection::solve and the polar step's prepare and apply instead of instantiating them
// (compiled_stiefel_muon<T>): the same code, compiled once; other scalars instantiate them here.
#pragma once

#include <Eigen/Core>
#include <Eigen/Eigenvalues>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "geomopt/manifolds/any_workspace.hpp"
#include "geomopt/manifolds/detail/dense_kernels.hpp"
#include "geomopt/manifolds/detail/stack_gemm.hpp"

namespace geomopt {
/// How stiefel_muon_direction finds the multiplier.
enum class StiefelMuonMethod {
  fixed_point,  ///< X <- the solution of the Lyapunov equation that makes W^T msign(U + W X) skew at the current
                ///< Gram matrix (Su's fixed point, solved in the Gram eigenbasis)
  dual_ascent,  ///< gradient steps on the dual |U + W X|_* with a backtracking line search (Bernstein's dual)
};

/// The method's name in code: "fixed_point", "dual_ascent".
inline const char* stiefel_muon_method_name(StiefelMuonMethod m) noexcept {
  return m == StiefelMuonMethod::dual_ascent ? "dual_ascent" : "fixed_point";
}

struct StiefelMuonOptions {
  StiefelMuonMethod method = StiefelMuonMethod::fixed_point;
  /// Stop when |W^T A + A^T W|_F <= tolerance, or below 2 n eps where the arithmetic cannot go (ManifoldMuon's step
  /// of float leaves solves in float: 3e-5 at n = 128).
  double tolerance = 1e-6;
  int max_iterations = 100;
  /// Smoothing mu of the dual, relative to the spectral norm of Z at the starting multiplier (0: none; from the cold
  /// start, Z is U's tangent projection): the singular values s of Z enter as sqrt(s^2 + mu^2).
  /// It costs a regular problem a relative 1e-7 of tr(U^T A) and lets a degenerate one (a rank-deficient optimal Z,
  /// e.g. a low-rank U) converge, which without it it does not.
  double smoothing = 1e-4;
  /// fixed_point: Anderson acceleration over this many past iterates (0: the plain iteration), at most 16.
  int acceleration = 8;
  /// ManifoldMuon: start each step's solve from the multiplier the leaf's previous step left (kept in the optimizer
  /// state as "multiplier"), and end it with one more multiplier update for the next step. With a small
  /// max_iterations the solve then follows the moving optimum across steps instead of solving each step anew.
  bool warm_start = false;

  void validate() const {
    if (!(tolerance > 0))
      throw std::invalid_argument("StiefelMuonOptions: tolerance must be > 0, got " + std::to_string(tolerance));
    if (acceleration < 0 || acceleration > 16)
      throw std::invalid_argument("StiefelMuonOptions: acceleration must be in [0, 16], got " +
                                  std::to_string(acceleration));
    if (!(smoothing >= 0 && smoothing < 1))
      throw std::invalid_argument("StiefelMuonOptions: smoothing must be in [0, 1), got " + std::to_string(smoothing));
    if (max_iterations < 1 || max_iterations > 100000)
      throw std::invalid_argument("StiefelMuonOptions: max_iterations must be in [1, 100000], got " +
                                  std::to_string(max_iterations));
  }
};

/// What stiefel_muon_direction did.
struct StiefelMuonReport {
  int iterations = 0;  ///< multiplier updates
  bool converged = false;
  double residual = 0;  ///< |W^T A + A^T W|_F at the end
  double dual = 0;      ///< |U + W X|_* at the final multiplier: an upper bound on max tr(U^T A)
  double primal = 0;    ///< tr(U^T A) of the returned A: a lower bound; dual - primal is the duality gap
  /// Not converged: the last iterate was projected on the tangent space and scaled to unit spectral norm, which
  /// makes it feasible (tangent, |A|_2 = 1) but leaves the gap dual - primal.
  bool projected = false;
};

template <class T>
class StiefelMuonDirection;

namespace detail {

template <class T>
class StiefelMuonPolarStep;

/// Whether this translation unit calls libgeomopt_optimizers' compiled Stiefel Muon arithmetic for scalar T (the
/// header's invariants).
template <class T>
inline constexpr bool compiled_stiefel_muon = false;

#if GEOMOPT_USE_COMPILED_KERNELS
// StiefelMuonDirection<T>::solve and StiefelMuonPolarStep<T>::prepare and apply for float and double, with the
// StiefelMuonCore<float> and StiefelMuonCore<double> behind them (optimizers/src/stiefel_muon.cpp). Free functions of
// their own names, so that the template instances behind them stay the library's own, as msign's do.
#define GEOMOPT_DECLARE_COMPILED_STIEFEL_MUON(T)                                                         \
  GEOMOPT_KERNELS_EXPORT StiefelMuonReport compiled_stiefel_muon_solve(                                  \
      StiefelMuonDirection<T>& d, const T* w, const T* u, T* a, const StiefelMuonOptions& o,             \
      std::vector<double>* duals, T* multiplier, bool warm);                                             \
  GEOMOPT_KERNELS_EXPORT StiefelMuonReport compiled_stiefel_muon_prepare(                                \
      StiefelMuonPolarStep<T>& s, const T* w, const T* u, double lr, const StiefelMuonOptions& o,        \
      const T* multiplier);                                                                              \
  GEOMOPT_KERNELS_EXPORT void compiled_stiefel_muon_apply(StiefelMuonPolarStep<T>& s, T* w, const T* u); \
  template <>                                                                                            \
  inline constexpr bool compiled_stiefel_muon<T> = true;
GEOMOPT_DECLARE_COMPILED_STIEFEL_MUON(float)
GEOMOPT_DECLARE_COMPILED_STIEFEL_MUON(double)
#undef GEOMOPT_DECLARE_COMPILED_STIEFEL_MUON
#endif

// The classes' implementations (their private *_kernel members), which the library's entry points run, and the
// library's solve for StiefelMuonDirection: a call from namespace geomopt would not find compiled_stiefel_muon_solve,
// and the unqualified call here finds its declaration where compiled_stiefel_muon<T> only.
struct StiefelMuonKernels {
  template <class T>
  static StiefelMuonReport compiled_solve(StiefelMuonDirection<T>& d, const T* w, const T* u, T* a,
                                          const StiefelMuonOptions& o, std::vector<double>* duals, T* multiplier,
                                          bool warm) {
    return compiled_stiefel_muon_solve(d, w, u, a, o, duals, multiplier, warm);
  }
  template <class T>
  static StiefelMuonReport solve(StiefelMuonDirection<T>& d, const T* w, const T* u, T* a, const StiefelMuonOptions& o,
                                 std::vector<double>* duals, T* multiplier, bool warm) {
    return d.solve_kernel(w, u, a, o, duals, multiplier, warm);
  }
  template <class T>
  static StiefelMuonReport prepare(StiefelMuonPolarStep<T>& s, const T* w, const T* u, double lr,
                                   const StiefelMuonOptions& o, const T* multiplier) {
    return s.prepare_kernel(w, u, lr, o, multiplier);
  }
  template <class T>
  static void apply(StiefelMuonPolarStep<T>& s, T* w, const T* u) {
    s.apply_kernel(w, u);
  }
};

// The n x n arithmetic of the direction: the Gram matrix of Z = U + W X, its eigendecomposition, and the multiplier
// update, in the real type R (double for StiefelMuonDirection whatever the leaf's scalar; the leaf's own scalar in
// ManifoldMuon's fused polar step). A class template: its members are compiled where they are used (for float and
// double, in libgeomopt_optimizers only: compiled_stiefel_muon), a plain class's inline members in every file that
// includes this header (7 s of g++ -O2 time in each, measured).
template <class R>
class StiefelMuonCore {
  using Real = R;
  using MatrixR = Eigen::Matrix<Real, Eigen::Dynamic, Eigen::Dynamic>;
  using VectorR = Eigen::Matrix<Real, Eigen::Dynamic, 1>;

 public:
  explicit StiefelMuonCore(Eigen::Index n)
      : k_(n, n),
        s0_(n, n),
        x_(n, n),
        m_(n, n),
        gram_(n, n),
        p_(n, n),
        r_(n, n),
        h_(n, n),
        try_(n, n),
        qt_(n, n),
        d_(n),
        inv_(n),
        eig_(n) {}

  // K = W^T U and S0 = U^T U given; X <- the solution's multiplier; p() = (Z^T Z + mu^2 I)^{-1/2} and r() = W^T A =
  // (K + X) p() at the last evaluated multiplier, evaluated_x(). warm: start from x() as the caller left it, rather
  // than from -sym(K). advance: at most max_iterations evaluations, the last followed (unless converged) by one more
  // update whose result x() holds for the next solve while p(), r() and evaluated_x() stay those of the evaluation.
  StiefelMuonReport solve(const StiefelMuonOptions& o, std::vector<double>* duals, bool warm, bool advance = false) {
    StiefelMuonReport rep;
    const Eigen::Index n = k_.rows();
    if (n == 0) {
      rep.converged = true;
      return rep;
    }
    if (!warm) x_ = Real(-0.5) * (k_ + k_.transpose());  // Z = U - W sym(W^T U): the tangent projection of U
    // mu is relative to the spectral norm of Z at the starting multiplier, set by the first decomposition: cold, that
    // is U's tangent projection U - W sym(W^T U) (near a stationary point U is mostly normal to the manifold, and a
    // mu relative to |U|_2 would swamp the part that decides the direction); warm, the previous step's Z.
    smoothing2_ = o.smoothing * o.smoothing;
    mu2_ = -1;
    if (!advance) x_eval_.resize(0, 0);
    const int evaluations = advance ? o.max_iterations : o.max_iterations + 1;
    // No finer than the rounding of W^T A in R (2e-5 at n = 128 in float, measured 2.2e-5 to 2.6e-5 there).
    const double tolerance =
        std::max(o.tolerance, 2.0 * static_cast<double>(n) * static_cast<double>(std::numeric_limits<Real>::epsilon()));
    double alpha = -1;
    history_ = 0;
    best_ = std::numeric_limits<double>::infinity();
    for (int it = 0;; ++it) {
      rep.dual = decompose(x_, true);
      if (duals != nullptr) duals->push_back(rep.dual);
      try_ = k_ + x_;
      mul(r_, try_, GemmOp::plain, p_);  // W^T A
      rep.residual = (r_ + r_.transpose()).norm();
      rep.iterations = it;
      if (advance) x_eval_ = x_;
      if (!std::isfinite(rep.residual)) return rep;
      if (rep.residual <= tolerance) {
        rep.converged = true;
        break;
      }
      const bool last = it + 1 == evaluations;
      if (last && !advance) break;
      if (last) rep.iterations = it + 1;
      if (o.method == StiefelMuonMethod::fixed_point) {
        // S X_s + X_s S = K_sk S - S K_sk with S = Q diag(d) Q^T: in the eigenbasis X_s'_ij = K_sk'_ij (d_j - d_i) /
        // (d_i + d_j). Then X = X_s - sym(K).
        const MatrixR& q = eig_.eigenvectors();
        try_ = Real(0.5) * (k_ - k_.transpose());
        mul(h_, try_, GemmOp::plain, q);
        mul(m_, q, GemmOp::transposed, h_);
        for (Eigen::Index j = 0; j < n; ++j)
          for (Eigen::Index i = 0; i < n; ++i) {
            const double den = d_(i) + d_(j);
            m_(i, j) = den > 0 ? m_(i, j) * (d_(j) - d_(i)) / den : Real(0);
          }
        mul(h_, q, GemmOp::plain, m_);
        mul(try_, h_, GemmOp::plain, qt_);
        try_ -= Real(0.5) * (k_ + k_.transpose());
        m_ = Real(0.5) * (try_ + try_.transpose());  // g(X), the map's value
        if (o.acceleration > 0) {
          anderson(o.acceleration, rep.residual);
        } else {
          x_ = m_;
        }
      } else {
        // The dual's gradient in X is sym(W^T msign(Z)); Armijo backtracking keeps every step a decrease.
        h_ = Real(0.5) * (r_ + r_.transpose());
        const double g2 = h_.squaredNorm();
        if (alpha < 0) alpha = rep.dual / static_cast<double>(n);  // the mean singular value of Z
        bool moved = false;
        for (int halving = 0; halving < 60; ++halving) {
          try_ = x_ - static_cast<Real>(alpha) * h_;
          const double trial = decompose(try_, false);
          if (trial <= rep.dual - 1e-4 * alpha * g2) {
            x_ = try_;
            alpha *= 1.5;
            moved = true;
            break;
          }
          alpha *= 0.5;
        }
        if (!moved) break;  // no decrease at any step: the dual is at its minimum to rounding
      }
      if (last) break;
    }
    return rep;
  }

  // Anderson mixing of the fixed-point map X -> g(X) (g in m_): X <- g - dG gamma with gamma the least-squares
  // fit of the residual f = g - X by the last `depth` residual differences dF. The history restarts when the
  // tangency residual grows tenfold past the best one seen, from the best X.
  void anderson(int depth, double residual) {
    const Eigen::Index nn = x_.size();
    if (df_.cols() != depth || df_.rows() != nn) {
      df_.resize(nn, depth);
      dg_.resize(nn, depth);
      prev_f_.resize(nn);
      prev_g_.resize(nn);
      dfdf_.resize(depth, depth);
    }
    if (residual < best_) {
      best_ = residual;
      best_x_ = x_;
    } else if (residual > 10 * best_) {
      x_ = best_x_;
      history_ = 0;
      return;
    }
    const Eigen::Map<const VectorR> g(m_.data(), nn), x(x_.data(), nn);
    const int used = std::min(history_, depth);
    if (history_ > 0) {
      // The new difference replaces the oldest; dF^T dF is kept up to date by its one new row and column.
      const int slot = (history_ - 1) % depth;
      df_.col(slot) = (g - x) - prev_f_;
      dg_.col(slot) = g - prev_g_;
      for (int c = 0; c < used; ++c) dfdf_(slot, c) = dfdf_(c, slot) = df_.col(slot).dot(df_.col(c));
    }
    prev_f_ = g - x;
    prev_g_ = g;
    ++history_;
    if (used == 0) {
      x_ = m_;
      return;
    }
    Eigen::Matrix<Real, Eigen::Dynamic, Eigen::Dynamic, 0, 16, 16> normal = dfdf_.topLeftCorner(used, used);
    Eigen::Matrix<Real, Eigen::Dynamic, 1, 0, 16, 1> rhs(used);
    for (int c = 0; c < used; ++c) rhs(c) = df_.col(c).dot(prev_f_);
    normal.diagonal().array() += Real(1e-12) * normal.trace() + std::numeric_limits<Real>::min();
    const Eigen::Matrix<Real, Eigen::Dynamic, 1, 0, 16, 1> gamma = normal.ldlt().solve(rhs);
    Eigen::Map<VectorR>(x_.data(), nn) = g - dg_.leftCols(used) * gamma;
    x_ = Real(0.5) * (x_ + x_.transpose()).eval();
  }

  MatrixR& k() noexcept { return k_; }
  MatrixR& s0() noexcept { return s0_; }
  MatrixR& x() noexcept { return x_; }
  const MatrixR& x() const noexcept { return x_; }
  const MatrixR& evaluated_x() const noexcept { return x_eval_.size() == x_.size() ? x_eval_ : x_; }
  const MatrixR& p() const noexcept { return p_; }
  const MatrixR& r() const noexcept { return r_; }
  /// The largest singular value of Z's smoothed Gram root, sqrt(s_max^2 + mu^2), and mu^2.
  double top() const noexcept { return top_; }
  double mu2() const noexcept { return std::max(mu2_, 0.0); }
  Eigen::SelfAdjointEigenSolver<MatrixR>& eigensolver() noexcept { return eig_; }
  std::size_t bytes() const noexcept { return static_cast<std::size_t>(14 * k_.size()) * sizeof(Real); }

 private:
  // The Gram matrix of U + W X and its eigendecomposition; returns the nuclear norm sum(d). With `full`, also p_.
  double decompose(const MatrixR& x, bool full) {
    const Eigen::Index n = x.rows();
    mul(m_, x, GemmOp::plain, k_);
    gram_ = s0_ + m_ + m_.transpose();
    mul(gram_, x, GemmOp::plain, x, GemmMode::add);
    eig_.compute(gram_, full ? Eigen::ComputeEigenvectors : Eigen::EigenvaluesOnly);
    const auto& lambda = eig_.eigenvalues();
    if (mu2_ < 0) mu2_ = smoothing2_ * std::max(static_cast<double>(lambda(n - 1)), 0.0);
    const double top = std::max(static_cast<double>(lambda(n - 1)), 0.0) + mu2_;
    // Eigenvalues within the Gram matrix's rounding (n eps lambda_max) of zero are zero: Z's singular values below
    // sqrt(4 n eps) s_max (3e-7 s_max at n = 100 in double) count as zero.
    const double floor = 4.0 * static_cast<double>(n) * std::numeric_limits<Real>::epsilon() * top;
    if (full) top_ = std::sqrt(top);
    double nuclear = 0;
    for (Eigen::Index i = 0; i < n; ++i) {
      const double l = static_cast<double>(lambda(i)) + mu2_;
      d_(i) = static_cast<Real>(l > floor && top > 0 ? std::sqrt(l) : 0.0);
      inv_(i) = d_(i) > 0 ? Real(1) / d_(i) : Real(0);
      nuclear += d_(i);
    }
    if (full) {
      qt_ = eig_.eigenvectors().transpose();
      h_ = inv_.asDiagonal() * qt_;
      mul(p_, eig_.eigenvectors(), GemmOp::plain, h_);
    }
    return nuclear;
  }

  // dst = op(a) b (or dst += ... by mode) through the library's product kernel (AVX2 where the machine has it).
  static void mul(MatrixR& dst, const MatrixR& a, GemmOp op, const MatrixR& b, GemmMode mode = GemmMode::assign) {
    stack_gemm<Real>(dst, a, op, b, GemmOp::plain, mode);
  }

  double mu2_ = 0, smoothing2_ = 0, top_ = 0;
  int history_ = 0;
  double best_ = 0;
  MatrixR df_, dg_, dfdf_, best_x_;
  VectorR prev_f_, prev_g_;
  MatrixR k_, s0_, x_, x_eval_, m_, gram_, p_, r_, h_, try_, qt_;
  VectorR d_, inv_;
  Eigen::SelfAdjointEigenSolver<MatrixR> eig_;
};

}  // namespace detail

/// The ManifoldMuon direction at a point W of St(N, n) for the matrix U (N x n), with every buffer held: solve
/// writes A = argmax tr(U^T A) subject to |A|_2 <= 1, W^T A + A^T W = 0. Products are O(N n^2) in T, the
/// multiplier's iterations O(n^3) each in double.
template <class T>
class StiefelMuonDirection {
  static_assert(std::is_floating_point_v<T>, "StiefelMuonDirection: float or double");

 public:
  StiefelMuonDirection(Eigen::Index N, Eigen::Index n)
      : N_(checked(N, n)), n_(n), core_(n), wd_(N, n), ud_(N, n), zd_(N, n), r_(n, n), sym_(n, n) {}

  Eigen::Index N() const noexcept { return N_; }
  Eigen::Index n() const noexcept { return n_; }
  std::size_t bytes() const noexcept {
    return core_.bytes() + static_cast<std::size_t>(3 * wd_.size() + 2 * r_.size()) * sizeof(double);
  }

  /// a <- the direction for w and u (N x n column-major each). duals, when given, receives |U + W X|_* at every
  /// iterate. multiplier, when given, receives the final X (n x n), and with warm the iteration starts from the X it
  /// holds; with o.warm_start the final X is one update past the one A was formed at (the next solve's start, see
  /// StiefelMuonOptions::warm_start). Every product runs in double, so a float direction is the exact one rounded
  /// once: Z = U + W X has singular values down to mu (the smoothing), and forming Z P in float would amplify Z's
  /// rounding by 1 / that.
  StiefelMuonReport solve(const T* w, const T* u, T* a, const StiefelMuonOptions& o = {},
                          std::vector<double>* duals = nullptr, T* multiplier = nullptr, bool warm = false) {
    if constexpr (detail::compiled_stiefel_muon<T>)
      return detail::StiefelMuonKernels::compiled_solve(*this, w, u, a, o, duals, multiplier, warm);
    else
      return solve_kernel(w, u, a, o, duals, multiplier, warm);
  }

 private:
  friend struct detail::StiefelMuonKernels;

  // solve's implementation, which a translation unit with compiled_stiefel_muon<T> never instantiates.
  StiefelMuonReport solve_kernel(const T* w, const T* u, T* a, const StiefelMuonOptions& o, std::vector<double>* duals,
                                 T* multiplier, bool warm) {
    o.validate();
    if (n_ == 0) {  // St(N, 0) is one point: its tangent space, and so A, is empty
      StiefelMuonReport rep;
      rep.converged = true;
      return rep;
    }
    const Eigen::Map<const detail::Mat<T>> um(u, N_, n_);
    wd_ = Eigen::Map<const detail::Mat<T>>(w, N_, n_).template cast<double>();
    ud_ = um.template cast<double>();
    // U is replaced by its tangent projection U - W sym(W^T U), which has the same maximizer (tr(U^T A) does not see
    // W sym(.) for a tangent A). Near a stationary point U is almost all normal to the manifold, and the Gram matrix
    // of U + W X formed from U itself would cancel O(|U|^2) terms down to O(|tangent part|^2), losing all accuracy
    // once the tangent part is 1e-6 of U (measured on Brockett's cost: 100 iterations without convergence).
    detail::dense_product<double>(core_.k(), wd_, detail::ProductOp::transposed, ud_, detail::ProductOp::plain, 1.0,
                                  false);
    sym_ = 0.5 * (core_.k() + core_.k().transpose());
    detail::dense_product<double>(ud_, wd_, detail::ProductOp::plain, sym_, detail::ProductOp::plain, -1.0, true);
    detail::dense_product<double>(core_.k(), wd_, detail::ProductOp::transposed, ud_, detail::ProductOp::plain, 1.0,
                                  false);
    detail::dense_product<double>(core_.s0(), ud_, detail::ProductOp::transposed, ud_, detail::ProductOp::plain, 1.0,
                                  false);
    warm = warm && multiplier != nullptr;
    if (warm) core_.x() = Eigen::Map<const detail::Mat<T>>(multiplier, n_, n_).template cast<double>();
    StiefelMuonReport rep = core_.solve(o, duals, warm, o.warm_start);
    if (multiplier != nullptr) Eigen::Map<detail::Mat<T>>(multiplier, n_, n_) = core_.x().template cast<T>();
    // A = Z P with Z = U + W X, into ud_.
    zd_ = ud_;
    detail::dense_product<double>(zd_, wd_, detail::ProductOp::plain, core_.evaluated_x(), detail::ProductOp::plain,
                                  1.0, true);
    detail::dense_product<double>(ud_, zd_, core_.p());
    double scale = 1;
    if (rep.converged) {
      // Smoothing leaves A's largest singular value at s_max / sqrt(s_max^2 + mu^2): back to 1.
      const double top = core_.top();
      if (core_.mu2() > 0 && top * top > core_.mu2()) scale = top / std::sqrt(top * top - core_.mu2());
    } else if (std::isfinite(rep.residual)) {
      // Not converged (the iterations ran out, or the dual line search stalled): A is made feasible, projected on
      // the tangent space, A - W sym(W^T A), and scaled to unit spectral norm.
      detail::dense_product<double>(r_, wd_, detail::ProductOp::transposed, ud_, detail::ProductOp::plain, 1.0, false);
      sym_ = 0.5 * (r_ + r_.transpose());
      detail::dense_product<double>(ud_, wd_, detail::ProductOp::plain, sym_, detail::ProductOp::plain, -1.0, true);
      detail::dense_product<double>(r_, ud_, detail::ProductOp::transposed, ud_, detail::ProductOp::plain, 1.0, false);
      auto& eig = core_.eigensolver();
      eig.compute(r_, Eigen::EigenvaluesOnly);
      const double top = eig.eigenvalues()(n_ - 1);
      if (top > 0) scale = 1 / std::sqrt(top);
      detail::dense_product<double>(r_, wd_, detail::ProductOp::transposed, ud_, detail::ProductOp::plain, scale,
                                    false);
      rep.residual = (r_ + r_.transpose()).norm();
      rep.projected = true;
    }
    Eigen::Map<detail::Mat<T>> am(a, N_, n_);
    am = (scale * ud_).template cast<T>();
    double primal = 0;
    for (Eigen::Index j = 0; j < n_; ++j) primal += um.col(j).template cast<double>().dot(scale * ud_.col(j));
    rep.primal = primal;
    return rep;
  }

  static Eigen::Index checked(Eigen::Index N, Eigen::Index n) {
    if (n < 0 || n > N)
      throw std::invalid_argument("StiefelMuonDirection: need 0 <= n <= N, got " + std::to_string(N) + "x" +
                                  std::to_string(n));
    return N;
  }

  Eigen::Index N_, n_;
  detail::StiefelMuonCore<double> core_;
  Eigen::MatrixXd wd_, ud_, zd_, r_, sym_;
};

namespace detail {

// ManifoldMuon's step of one Stiefel leaf under the polar retraction, with the direction and the retraction fused
// into one update W <- W C1 + U C2 by n x n coefficients. With K = W^T U, sym and skew its parts, and S the
// multiplier (symmetric; S = 0 gives U's tangent projection):
//   Z = U_t + W S, U_t = U - W sym(K)       the core's problem: W^T U_t = skew(K), U_t^T U_t from K and U^T U
//   A = Z P, P = (Z^T Z + mu^2 I)^{-1/2}     R = W^T A = (skew(K) + S) P, the tangency residual sym(R)
//   A_t = A - W sym(R) = U P + W (skew(R) - K P)          A projected on the tangent space
//   Y = W - a A_t = W L1 + U L2, L1 = I - a (skew(R) - K P), L2 = -a P
//   Y^T Y = L1^T (W^T W) L1 + L1^T K L2 + (K L2)^T L1 + L2^T (U^T U) L2,  W <- Y (Y^T Y)^{-1/2}
// with a = lr times the smoothing's correction of |A|_2 (StiefelMuonDirection's). The N x n work is five products
// (W^T U, U^T U, W^T W and the two of the update) whatever the number of multiplier iterations, and none forms A.
// W^T W is measured rather than taken as I, so the polar factor corrects a float W's rounding at every step instead
// of letting it accumulate. All arithmetic is in T: an optimizer step of float leaves in float.
//
// prepare reads W, U and the multiplier and writes only the object's buffers (the step checks every leaf's update
// before it writes any); apply writes W.
template <class T>
class StiefelMuonPolarStep {
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;

 public:
  StiefelMuonPolarStep(Eigen::Index N, Eigen::Index n)
      : N_(N),
        n_(n),
        core_(n),
        k_(n, n),
        s0_(n, n),
        ww_(n, n),
        sym_(n, n),
        kp_(n, n),
        l1_(n, n),
        l2_(n, n),
        yty_(n, n),
        e_(n, n),
        acc_(n, n),
        c_(n, n),
        c1_(n, n),
        c2_(n, n),
        out_(N, n) {}

  std::size_t bytes() const noexcept {
    return core_.bytes() + static_cast<std::size_t>(14 * k_.size() + out_.size()) * sizeof(T);
  }

  /// The step's coefficients for W, U (N x n column-major) and step length lr. multiplier: the n x n multiplier to
  /// start from (o.warm_start), or null for the cold start; next_multiplier() is the one the step leaves.
  StiefelMuonReport prepare(const T* w, const T* u, double lr, const StiefelMuonOptions& o, const T* multiplier) {
    if constexpr (compiled_stiefel_muon<T>)
      return compiled_stiefel_muon_prepare(*this, w, u, lr, o, multiplier);
    else
      return prepare_kernel(w, u, lr, o, multiplier);
  }

  /// Whether prepare's coefficients are finite (and so W's update, for finite W and U).
  bool finite() const noexcept { return finite_; }
  /// The multiplier the next step starts from.
  const Mat& next_multiplier() const noexcept { return core_.x(); }

  /// W <- W C1 + U C2, the retracted step prepare computed (u as given to it).
  void apply(T* w, const T* u) {
    if constexpr (compiled_stiefel_muon<T>)
      compiled_stiefel_muon_apply(*this, w, u);
    else
      apply_kernel(w, u);
  }

 private:
  friend struct StiefelMuonKernels;

  // prepare's and apply's implementations, which a translation unit with compiled_stiefel_muon<T> never instantiates.
  StiefelMuonReport prepare_kernel(const T* w, const T* u, double lr, const StiefelMuonOptions& o,
                                   const T* multiplier) {
    StiefelMuonReport rep;
    finite_ = true;
    if (n_ == 0) {
      rep.converged = true;
      return rep;
    }
    const Eigen::Map<const Mat> wm(w, N_, n_), um(u, N_, n_);
    stack_gemm<T>(k_, wm, GemmOp::transposed, um, GemmOp::plain, GemmMode::assign);
    stack_gram<T>(s0_, um);
    stack_gram<T>(ww_, wm);
    sym_ = T(0.5) * (k_ + k_.transpose());
    core_.k() = T(0.5) * (k_ - k_.transpose());
    mul(e_, sym_, GemmOp::plain, k_);
    core_.s0() = s0_ - e_ - e_.transpose();
    mul(core_.s0(), sym_, GemmOp::plain, sym_, GemmMode::add);
    const bool warm = o.warm_start && multiplier != nullptr;
    if (warm) core_.x() = Eigen::Map<const Mat>(multiplier, n_, n_);
    rep = core_.solve(o, nullptr, warm, warm);
    if (!std::isfinite(rep.residual)) {
      finite_ = false;
      return rep;
    }
    const Mat& p = core_.p();
    const Mat& r = core_.r();
    double scale = 1;  // smoothing leaves |A|_2 at s_max / sqrt(s_max^2 + mu^2): back to 1
    const double top = core_.top(), mu2 = core_.mu2();
    if (mu2 > 0 && top * top > mu2) scale = top / std::sqrt(top * top - mu2);
    const T a = static_cast<T>(lr * scale);
    mul(kp_, k_, GemmOp::plain, p);
    l1_ = a * kp_ - (a / 2) * (r - r.transpose());
    l1_.diagonal().array() += T(1);
    l2_ = -a * p;
    mul(e_, ww_, GemmOp::plain, l1_);
    mul(yty_, l1_, GemmOp::transposed, e_);
    acc_ = -a * kp_;  // K L2
    mul(yty_, l1_, GemmOp::transposed, acc_, GemmMode::add);
    mul(yty_, acc_, GemmOp::transposed, l1_, GemmMode::add);
    mul(e_, s0_, GemmOp::plain, l2_);
    mul(yty_, l2_, GemmOp::transposed, e_, GemmMode::add);
    inverse_sqrt();
    mul(c1_, l1_, GemmOp::plain, c_);
    mul(c2_, l2_, GemmOp::plain, c_);
    finite_ = c1_.allFinite() && c2_.allFinite();
    // tr(U^T A_t) for the unit-norm A_t: the report's primal, from n x n quantities.
    kp_ = T(0.5) * (r - r.transpose()) - kp_;
    rep.primal =
        scale * (static_cast<double>(s0_.cwiseProduct(p).sum()) + static_cast<double>(k_.cwiseProduct(kp_).sum()));
    rep.projected = !rep.converged;
    return rep;
  }

  void apply_kernel(T* w, const T* u) {
    if (n_ == 0) return;
    Eigen::Map<Mat> wm(w, N_, n_);
    const Eigen::Map<const Mat> um(u, N_, n_);
    stack_gemm<T>(out_, wm, GemmOp::plain, c1_, GemmOp::plain, GemmMode::assign);
    stack_gemm<T>(out_, um, GemmOp::plain, c2_, GemmOp::plain, GemmMode::add);
    wm = out_;
  }

  // c_ <- (Y^T Y)^{-1/2}. Y^T Y = I + E with |E|_2 of order lr^2: the binomial series of (I + E)^{-1/2}, cut where
  // its tail is below T's rounding (3 terms in float at lr = 0.02), else the eigendecomposition.
  void inverse_sqrt() {
    e_ = yty_;
    e_.diagonal().array() -= T(1);
    double bound = 0;  // |E|_inf >= |E|_2 for a symmetric E
    for (Eigen::Index i = 0; i < n_; ++i) bound = std::max(bound, static_cast<double>(e_.row(i).cwiseAbs().sum()));
    if (bound < 0.5) {
      // |binom(-1/2, j)| <= 1: the tail after term k is at most bound^(k+1) / (1 - bound).
      constexpr double kEps = std::numeric_limits<T>::epsilon() / 4;
      int terms = 0;
      double tail = bound;
      while (tail / (1 - bound) > kEps && terms < 64) {
        tail *= bound;
        ++terms;
      }
      std::array<double, 65> coef{};
      coef[0] = 1;
      for (int j = 1; j <= terms; ++j) coef[j] = coef[j - 1] * -(2.0 * j - 1) / (2.0 * j);
      c_.setZero();
      c_.diagonal().setConstant(static_cast<T>(coef[terms]));
      for (int j = terms - 1; j >= 0; --j) {
        mul(acc_, c_, GemmOp::plain, e_);
        c_ = acc_;
        c_.diagonal().array() += static_cast<T>(coef[j]);
      }
      return;
    }
    auto& eig = core_.eigensolver();
    eig.compute(yty_);
    const auto& lambda = eig.eigenvalues();
    acc_ = eig.eigenvectors();
    for (Eigen::Index j = 0; j < n_; ++j) acc_.col(j) /= std::sqrt(std::max(lambda(j), std::numeric_limits<T>::min()));
    stack_gemm<T>(c_, acc_, GemmOp::plain, eig.eigenvectors(), GemmOp::transposed, GemmMode::assign);
  }

  static void mul(Mat& dst, const Mat& a, GemmOp op, const Mat& b, GemmMode mode = GemmMode::assign) {
    stack_gemm<T>(dst, a, op, b, GemmOp::plain, mode);
  }

  Eigen::Index N_, n_;
  StiefelMuonCore<T> core_;
  Mat k_, s0_, ww_, sym_, kp_, l1_, l2_, yty_, e_, acc_, c_, c1_, c2_, out_;
  bool finite_ = true;
};

}  // namespace detail

/// The ManifoldMuon direction as a new matrix (see StiefelMuonDirection).
template <class T>
Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> stiefel_muon_direction(
    const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>& w,
    const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>& u, const StiefelMuonOptions& o = {},
    StiefelMuonReport* report = nullptr, std::vector<double>* duals = nullptr) {
  if (u.rows() != w.rows() || u.cols() != w.cols())
    throw std::invalid_argument("stiefel_muon_direction: U is " + std::to_string(u.rows()) + "x" +
                                std::to_string(u.cols()) + ", W is " + std::to_string(w.rows()) + "x" +
                                std::to_string(w.cols()));
  StiefelMuonDirection<T> solver(w.rows(), w.cols());
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> a(w.rows(), w.cols());
  const StiefelMuonReport r = solver.solve(w.data(), u.data(), a.data(), o, duals);
  if (report != nullptr) *report = r;
  return a;
}

}  // namespace geomopt
