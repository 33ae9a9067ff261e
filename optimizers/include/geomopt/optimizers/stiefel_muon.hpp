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
// multiplier is a function of the inputs and the starting multiplier only.
#pragma once

#include <Eigen/Core>
#include <Eigen/Eigenvalues>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "geomopt/manifolds/detail/dense_kernels.hpp"

namespace geomopt {
/// How stiefel_muon_direction finds the multiplier.
enum class StiefelMuonMethod {
  fixed_point,  ///< X <- the solution of the Lyapunov equation that makes W^T msign(U + W X) skew at the current
                ///< Gram matrix (Su's fixed point, solved in the Gram eigenbasis)
  dual_ascent,  ///< gradient steps on the dual |U + W X|_* with a backtracking line search (Bernstein's dual)
};

struct StiefelMuonOptions {
  StiefelMuonMethod method = StiefelMuonMethod::fixed_point;
  /// Stop when |W^T A + A^T W|_F <= tolerance.
  double tolerance = 1e-6;
  int max_iterations = 100;
  /// Smoothing mu of the dual, relative to the spectral norm of U's tangent projection (0: none): the singular values
  /// s of Z enter as sqrt(s^2 + mu^2).
  /// It costs a regular problem a relative 1e-7 of tr(U^T A) and lets a degenerate one (a rank-deficient optimal Z,
  /// e.g. a low-rank U) converge, which without it it does not.
  double smoothing = 1e-4;
  /// fixed_point: Anderson acceleration over this many past iterates (0: the plain iteration), at most 16.
  int acceleration = 8;

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
namespace detail {

// The n x n arithmetic of the direction: the Gram matrix of Z = U + W X, its eigendecomposition, and the multiplier
// update, all in double whatever the leaf's scalar T. A template over T all the same: a class template's members are
// compiled where they are used, a plain class's inline members in every file that includes this header (as a plain
// class, this one would add 7 s of g++ -O2 time to every file that includes <geomopt/optimizers.hpp>).
template <class T>
class StiefelMuonCore {
  // double whatever T is, named through T so that the Eigen expressions below are type-checked where the class is
  // used; written as double, they would be checked (and their Eigen classes instantiated) in every file.
  using Real = std::conditional_t<std::is_floating_point_v<T>, double, double>;
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
        d_(n),
        inv_(n),
        eig_(n) {}

  // K = W^T U and S0 = U^T U given; X <- the solution's multiplier; p() = (Z^T Z)^{-1/2}, xp() = X p().
  // warm: start from x() as the caller left it, rather than from -sym(K).
  StiefelMuonReport solve(const StiefelMuonOptions& o, std::vector<double>* duals, bool warm) {
    StiefelMuonReport rep;
    const Eigen::Index n = k_.rows();
    if (n == 0) {
      rep.converged = true;
      return rep;
    }
    if (!warm) x_ = -0.5 * (k_ + k_.transpose());  // Z = U - W sym(W^T U): the tangent projection of U
    mu2_ = 0;
    if (o.smoothing > 0) {
      // mu is relative to the spectral norm of U's tangent projection U - W sym(W^T U), the Z of X = -sym(K): near
      // a stationary point U is mostly normal to the manifold, and a mu relative to |U|_2 would swamp the part
      // that decides the direction.
      try_ = -0.5 * (k_ + k_.transpose());
      decompose(try_, false);
      const double top = d_.maxCoeff();
      mu2_ = o.smoothing * o.smoothing * top * top;
    }
    double alpha = -1;
    history_ = 0;
    best_ = std::numeric_limits<double>::infinity();
    for (int it = 0;; ++it) {
      rep.dual = decompose(x_, true);
      if (duals != nullptr) duals->push_back(rep.dual);
      r_.noalias() = (k_ + x_) * p_;  // W^T A
      rep.residual = (r_ + r_.transpose()).norm();
      rep.iterations = it;
      if (!std::isfinite(rep.residual)) return rep;
      if (rep.residual <= o.tolerance) {
        rep.converged = true;
        break;
      }
      if (it == o.max_iterations) break;
      if (o.method == StiefelMuonMethod::fixed_point) {
        // S X_s + X_s S = K_sk S - S K_sk with S = Q diag(d) Q^T: in the eigenbasis X_s'_ij = K_sk'_ij (d_j - d_i) /
        // (d_i + d_j). Then X = X_s - sym(K).
        h_.noalias() = 0.5 * (k_ - k_.transpose()) * eig_.eigenvectors();
        m_.noalias() = eig_.eigenvectors().transpose() * h_;
        for (Eigen::Index j = 0; j < n; ++j)
          for (Eigen::Index i = 0; i < n; ++i) {
            const double den = d_(i) + d_(j);
            m_(i, j) = den > 0 ? m_(i, j) * (d_(j) - d_(i)) / den : 0.0;
          }
        h_.noalias() = eig_.eigenvectors() * m_;
        try_.noalias() = h_ * eig_.eigenvectors().transpose();
        try_ -= 0.5 * (k_ + k_.transpose());
        m_ = 0.5 * (try_ + try_.transpose());  // g(X), the map's value
        if (o.acceleration > 0) {
          anderson(o.acceleration, rep.residual);
        } else {
          x_ = m_;
        }
      } else {
        // The dual's gradient in X is sym(W^T msign(Z)); Armijo backtracking keeps every step a decrease.
        h_ = 0.5 * (r_ + r_.transpose());
        const double g2 = h_.squaredNorm();
        if (alpha < 0) alpha = rep.dual / static_cast<double>(n);  // the mean singular value of Z
        bool moved = false;
        for (int halving = 0; halving < 60; ++halving) {
          try_ = x_ - alpha * h_;
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
    normal.diagonal().array() += 1e-12 * normal.trace() + 1e-300;
    const Eigen::Matrix<Real, Eigen::Dynamic, 1, 0, 16, 1> gamma = normal.ldlt().solve(rhs);
    Eigen::Map<VectorR>(x_.data(), nn) = g - dg_.leftCols(used) * gamma;
    x_ = 0.5 * (x_ + x_.transpose()).eval();
  }

  MatrixR& k() noexcept { return k_; }
  MatrixR& s0() noexcept { return s0_; }
  MatrixR& x() noexcept { return x_; }
  const MatrixR& p() const noexcept { return p_; }
  /// The largest singular value of Z's smoothed Gram root, sqrt(s_max^2 + mu^2), and mu^2.
  double top() const noexcept { return d_.size() > 0 ? d_.maxCoeff() : 0.0; }
  double mu2() const noexcept { return mu2_; }
  Eigen::SelfAdjointEigenSolver<MatrixR>& eigensolver() noexcept { return eig_; }
  std::size_t bytes() const noexcept { return static_cast<std::size_t>(11 * k_.size()) * sizeof(double); }

 private:
  // The Gram matrix of U + W X and its eigendecomposition; returns the nuclear norm sum(d). With `full`, also p_.
  double decompose(const MatrixR& x, bool full) {
    const Eigen::Index n = x.rows();
    m_.noalias() = x * k_;
    gram_ = s0_ + m_ + m_.transpose();
    gram_.noalias() += x * x;
    eig_.compute(gram_, full ? Eigen::ComputeEigenvectors : Eigen::EigenvaluesOnly);
    const auto& lambda = eig_.eigenvalues();
    const double top = std::max(lambda(n - 1), 0.0) + mu2_;
    // Eigenvalues within the Gram matrix's rounding (n eps lambda_max) of zero are zero: Z's singular values below
    // sqrt(4 n eps) s_max (3e-7 s_max at n = 100) count as zero.
    const double floor = 4.0 * static_cast<double>(n) * std::numeric_limits<double>::epsilon() * top;
    double nuclear = 0;
    for (Eigen::Index i = 0; i < n; ++i) {
      d_(i) = lambda(i) + mu2_ > floor && top > 0 ? std::sqrt(lambda(i) + mu2_) : 0.0;
      inv_(i) = d_(i) > 0 ? 1 / d_(i) : 0.0;
      nuclear += d_(i);
    }
    if (full) {
      h_.noalias() = eig_.eigenvectors() * inv_.asDiagonal();
      p_.noalias() = h_ * eig_.eigenvectors().transpose();
    }
    return nuclear;
  }

  double mu2_ = 0;
  int history_ = 0;
  double best_ = 0;
  MatrixR df_, dg_, dfdf_, best_x_;
  VectorR prev_f_, prev_g_;
  MatrixR k_, s0_, x_, m_, gram_, p_, r_, h_, try_;
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
  /// holds (a step's multiplier as the next one's start measured no faster than the cold start, docs/design.md, so
  /// ManifoldMuon starts cold and keeps no multiplier in its state). Every product runs in double, so a float
  /// direction is the exact one rounded once: Z = U + W X has
  /// singular values down to mu (the smoothing), and forming Z P in float would amplify Z's rounding by 1 / that.
  StiefelMuonReport solve(const T* w, const T* u, T* a, const StiefelMuonOptions& o = {},
                          std::vector<double>* duals = nullptr, T* multiplier = nullptr, bool warm = false) {
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
    StiefelMuonReport rep = core_.solve(o, duals, warm);
    if (multiplier != nullptr) Eigen::Map<detail::Mat<T>>(multiplier, n_, n_) = core_.x().template cast<T>();
    // A = Z P with Z = U + W X, into ud_.
    zd_ = ud_;
    detail::dense_product<double>(zd_, wd_, detail::ProductOp::plain, core_.x(), detail::ProductOp::plain, 1.0, true);
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

 private:
  static Eigen::Index checked(Eigen::Index N, Eigen::Index n) {
    if (n < 0 || n > N)
      throw std::invalid_argument("StiefelMuonDirection: need 0 <= n <= N, got " + std::to_string(N) + "x" +
                                  std::to_string(n));
    return N;
  }

  Eigen::Index N_, n_;
  detail::StiefelMuonCore<T> core_;
  Eigen::MatrixXd wd_, ud_, zd_, r_, sym_;
};

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
