// SPDStepper: the ManifoldStepper of SPD leaves, the affine-invariant geometry of spd.hpp with the section F (X = F
// F^T) held in preallocated buffers.
//
// Invariants:
//   - lift gives the svec (ScaledSymmetricMatrix storage) of W = F^T sym(G) F, and retract moves y to
//     sym(F M F^T) with M = exp(W) (geodesic) or I + W + W^2/2 (cayley), as geomopt::lift / geomopt::retract with
//     the section do, to rounding;
//   - both policies of spd.hpp: recomputed, F is the Cholesky factor of the current point (lift factors y, the
//     retract that follows reuses it; lift throws std::domain_error, as SPDSection does, when y is not positive
//     definite); transported, F starts as the Cholesky factor of the initial point and moves as SPDSection::transport
//     moves it, F <- F exp(W/2) (geodesic) or F (I + W + W^2/2)^(1/2) (cayley). That square root comes from a cyclic
//     Jacobi eigensolver on preallocated buffers (Eigen's SelfAdjointEigenSolver allocates when it forms the
//     eigenvectors); the square root of a positive definite matrix is unique, so it matches spd.hpp's to rounding;
//   - retract follows spd.hpp's rules at every norm: a finite whitened step of 1-norm above detail::kSpectralNorm (16)
//     takes the eigendecomposition of detail::spd_core (so the point stays positive definite where scaling and
//     squaring would give NaN), and so does the transported section's exp(W/2). It never throws: a step whose image
//     overflows, or non-finite coordinates, give non-finite entries in y (the documented outcome under
//     non_finite = propagate; geomopt::retract throws std::domain_error for both);
//   - the constructor allocates every buffer; lift and retract allocate nothing except on the spectral path above,
//     which only a step of whitened norm above 16 takes. Everything is O(n^3).
#pragma once

#include <Eigen/Core>
#include <Eigen/Jacobi>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "geomopt/manifolds.hpp"
#include "geomopt/optimizers/detail/manifold_stepper.hpp"
#include "geomopt/optimizers/detail/stiefel_stepper.hpp"  // the allocation-free kernels of namespace stepping

namespace geomopt::detail {
namespace stepping {

// The principal square root of a symmetric positive definite matrix, V D^(1/2) V^T from cyclic Jacobi rotations
// M = V D V^T in Rutishauser's form (the rotated pair is zeroed exactly, the diagonal moves by t a_pq and collects
// those moves apart, as in Numerical Recipes' jacobi): as accurate as SelfAdjointEigenSolver, which allocates.
template <class T>
class SymmetricSqrt {
 public:
  explicit SymmetricSqrt(Eigen::Index n) : a_(n, n), v_(n, n), tmp_(n, n), d_(n), start_(n), moved_(n) {}

  std::size_t bytes() const noexcept { return 3 * bytes_of(a_) + 3 * bytes_of(d_); }

  void compute(const Matrix<T>& m, Matrix<T>& out) {
    using std::abs;
    using std::sqrt;
    const Eigen::Index n = m.rows();
    if (n == 0) return;
    a_ = m;
    v_.setIdentity();
    d_ = a_.diagonal();
    start_ = d_;
    moved_.setZero();
    // Rotates the pair (g, h) of entries by the current rotation.
    T s = 0, tau = 0;
    auto rotate = [&](T& g, T& h) {
      const T g0 = g, h0 = h;
      g = g0 - s * (h0 + g0 * tau);
      h = h0 + s * (g0 - h0 * tau);
    };
    for (int sweep = 0; sweep < 50; ++sweep) {
      T off = 0;
      for (Eigen::Index q = 1; q < n; ++q) off += a_.col(q).head(q).cwiseAbs().sum();
      if (off == T(0)) break;
      // Early sweeps skip small entries; later ones zero those below rounding of both diagonal entries.
      const T threshold = sweep < 3 ? T(0.2) * off / T(n * n) : T(0);
      for (Eigen::Index p = 0; p + 1 < n; ++p) {
        for (Eigen::Index q = p + 1; q < n; ++q) {
          const T apq = a_(p, q), g = T(100) * abs(apq);
          if (sweep > 3 && abs(d_[p]) + g == abs(d_[p]) && abs(d_[q]) + g == abs(d_[q])) {
            a_(p, q) = 0;
            continue;
          }
          if (!(abs(apq) > threshold)) continue;
          const T h = d_[q] - d_[p];
          T t;
          if (abs(h) + g == abs(h)) {
            t = apq / h;
          } else {
            const T theta = T(0.5) * h / apq;
            t = T(1) / (abs(theta) + sqrt(T(1) + theta * theta));
            if (theta < T(0)) t = -t;
          }
          const T c = T(1) / sqrt(T(1) + t * t);
          s = t * c;
          tau = s / (T(1) + c);
          const T shift = t * apq;
          moved_[p] -= shift;
          moved_[q] += shift;
          d_[p] -= shift;
          d_[q] += shift;
          a_(p, q) = 0;
          for (Eigen::Index j = 0; j < p; ++j) rotate(a_(j, p), a_(j, q));
          for (Eigen::Index j = p + 1; j < q; ++j) rotate(a_(p, j), a_(j, q));
          for (Eigen::Index j = q + 1; j < n; ++j) rotate(a_(p, j), a_(q, j));
          for (Eigen::Index j = 0; j < n; ++j) rotate(v_(j, p), v_(j, q));
        }
      }
      start_ += moved_;
      d_ = start_;
      moved_.setZero();
    }
    for (Eigen::Index j = 0; j < n; ++j) tmp_.col(j) = v_.col(j) * sqrt(d_[j]);
    product<T>(out, tmp_, Op::plain, v_, Op::transposed, T(1), false);
  }

 private:
  Matrix<T> a_, v_, tmp_;        // a_: the upper triangle is rotated, the lower one keeps M
  Vector<T> d_, start_, moved_;  // the diagonal, as at the sweep's start, and its moves in the sweep
};

}  // namespace stepping

template <class T>
class SPDStepper final : public ManifoldStepper<T> {
  static_assert(std::is_floating_point_v<T>, "SPDStepper steps float or double leaves");

 public:
  /// A stepper for SPD(n). x0 is the initial point, n x n column-major, whose Cholesky factor starts a transported
  /// section (std::domain_error when it is not positive definite); a recomputed section does not read it.
  SPDStepper(Eigen::Index n, SectionPolicy policy, const T* x0 = nullptr)
      : policy_(policy), n_(validate(n, policy, x0)), core_(n), sqrt_(n) {
    f_.resize(n, n);
    sym_.resize(n, n);
    w_.resize(n, n);
    m_.resize(n, n);
    root_.resize(n, n);
    tmp_.resize(n, n);
    tmp2_.resize(n, n);
    if (policy == SectionPolicy::transported)
      f_ = SPDSection<T>(stepping::ConstMatrixMap<T>(x0, n, n), SectionPolicy::transported).factor();
  }

  Eigen::Index dim() const override { return n_ * (n_ + 1) / 2; }

  void lift(const T* y, const T* g, T* coords) override {
    if (n_ == 0) return;
    if (policy_ == SectionPolicy::recomputed) factor_point(y);
    const stepping::ConstMatrixMap<T> gm(g, n_, n_);
    sym_ = (gm + gm.transpose()) * T(0.5);
    stepping::product<T>(tmp_, f_, stepping::Op::transposed, sym_, stepping::Op::plain, T(1), false);
    stepping::product<T>(w_, tmp_, f_);
    // svec, ScaledSymmetricMatrix::from_dense: row by row over the lower triangle, off-diagonal entries times
    // sqrt(2) written as ScaledSymmetricMatrix writes them.
    Eigen::Index c = 0;
    for (Eigen::Index i = 0; i < n_; ++i) {
      for (Eigen::Index j = 0; j < i; ++j) coords[c++] = T(T(w_(i, j) + w_(j, i)) * T(0.5 / kWeight));
      coords[c++] = w_(i, i);
    }
  }

  void forget_point() noexcept override {
    if (policy_ == SectionPolicy::recomputed) factored_ = false;
  }

  void retract(T* y, const T* coords, Retraction r) override {
    if (n_ == 0) return;
    if (policy_ == SectionPolicy::recomputed && !factored_) factor_point(y);
    Eigen::Index c = 0;
    for (Eigen::Index i = 0; i < n_; ++i) {
      for (Eigen::Index j = 0; j < i; ++j, ++c) w_(i, j) = w_(j, i) = T(coords[c] * kWeight);
      w_(i, i) = coords[c++];
    }
    if (use_spectral<T>(w_)) {
      m_ = spd_core<T>(w_, r);
    } else if (r == Retraction::geodesic) {
      core_.expm(w_, m_);
    } else {
      stepping::product<T>(tmp_, w_, w_);
      m_ = Matrix::Identity(n_, n_) + w_ + T(0.5) * tmp_;
    }
    stepping::product<T>(tmp_, f_, m_);
    stepping::product<T>(tmp2_, tmp_, stepping::Op::plain, f_, stepping::Op::transposed, T(1), false);
    stepping::MatrixMap<T>(y, n_, n_) = (tmp2_ + tmp2_.transpose()) * T(0.5);
    if (policy_ == SectionPolicy::recomputed) {
      factored_ = false;
      return;
    }
    if (r == Retraction::geodesic) {
      tmp_ = w_ * T(0.5);
      if (use_spectral<T>(tmp_)) {
        root_ = spd_core<T>(tmp_, Retraction::geodesic);
      } else {
        core_.expm(tmp_, root_);
      }
    } else {
      sqrt_.compute(m_, root_);
    }
    stepping::product<T>(tmp_, f_, root_);
    f_ = tmp_;  // copied, not swapped: section_data() keeps pointing at f_
  }

  T* section_data() noexcept override { return policy_ == SectionPolicy::transported ? f_.data() : nullptr; }
  Eigen::Index section_rows() const noexcept override { return policy_ == SectionPolicy::transported ? n_ : 0; }
  Eigen::Index section_cols() const noexcept override { return policy_ == SectionPolicy::transported ? n_ : 0; }
  double step_cost() const noexcept override { return 16.0 * static_cast<double>(n_ * n_); }
  std::size_t workspace_bytes() const noexcept override {
    using stepping::bytes_of;
    const std::size_t recomputed_factor = policy_ == SectionPolicy::recomputed ? bytes_of(f_) : 0;
    return recomputed_factor + bytes_of(sym_) + bytes_of(w_) + bytes_of(m_) + bytes_of(root_) + bytes_of(tmp_) +
           bytes_of(tmp2_) + core_.bytes() + sqrt_.bytes();
  }

 private:
  using Matrix = stepping::Matrix<T>;
  // packed_weight of the scaled symmetric packing off the diagonal, in double as packed.hpp has it.
  static constexpr double kWeight = 0.70710678118654752440;

  static Eigen::Index validate(Eigen::Index n, SectionPolicy policy, const T* x0) {
    if (n < 0) throw std::invalid_argument("make_stepper: SPD of negative order " + std::to_string(n));
    if (policy == SectionPolicy::transported && x0 == nullptr && n > 0)
      throw std::invalid_argument("make_stepper: a transported section of SPD(" + std::to_string(n) +
                                  ") needs the initial point");
    return n;
  }

  // The recomputed section at y: its Cholesky factor from the lower triangle, as Eigen::LLT reads it.
  void factor_point(const T* y) {
    const stepping::ConstMatrixMap<T> x(y, n_, n_);
    f_.setZero();
    for (Eigen::Index j = 0; j < n_; ++j) {
      const T d = x(j, j) - f_.row(j).head(j).squaredNorm();
      if (!(d > T(0))) throw std::domain_error("SPD: the point is not positive definite (Cholesky failed)");
      using std::sqrt;
      const T pivot = sqrt(d);
      f_(j, j) = pivot;
      for (Eigen::Index i = j + 1; i < n_; ++i) f_(i, j) = (x(i, j) - f_.row(i).head(j).dot(f_.row(j).head(j))) / pivot;
    }
    factored_ = true;
  }

  SectionPolicy policy_;
  bool factored_ = false;
  Eigen::Index n_;
  stepping::CoreFunctions<T> core_;
  stepping::SymmetricSqrt<T> sqrt_;
  Matrix f_;  // the section's factor: state when transported, rebuilt by lift when recomputed
  Matrix sym_, w_, m_, root_, tmp_, tmp2_;
};

template <class T>
requires(!Manifold<SPD<T>>) std::unique_ptr<ManifoldStepper<T>> make_stepper(const SPD<T>& x, SectionPolicy policy) {
  if (x.value().rows() != x.value().cols())
    throw std::invalid_argument("make_stepper: SPD needs a square point, got " + std::to_string(x.value().rows()) +
                                "x" + std::to_string(x.value().cols()));
  return std::make_unique<SPDStepper<T>>(x.value().rows(), policy, x.value().data());
}

}  // namespace geomopt::detail
