// StiefelFamilyStepper: the ManifoldStepper of Stiefel, Grassmann, Sphere and SpecialOrthogonal leaves, and the
// allocation-free kernels it shares with SPDStepper (spd_stepper.hpp).
//
// Invariants:
//   - lift and retract compute what geomopt::lift(x, section, G) and geomopt::retract(x, section, xi, r) compute
//     (stiefel.hpp, detail/stiefel_kernel.hpp), to rounding: the same Householder conventions (the section's
//     detail::section_reflector for y, in blocks by detail::BlockedHouseholder; Eigen's makeHouseholder for the
//     step's B), hence the same complement Y_perp, the same 2n x 2n core and the same degree-15 Taylor exponential
//     with the same scaling. A Cayley step from a recomputed section takes the n x n Schur complement of that core
//     instead (detail::StiefelCayleySchur: the same point to rounding, at a fraction of the cost) whenever its bound
//     proves the core below detail::kSpectralNorm;
//   - retract follows the manifolds' rules at every norm: a finite step whose core has 1-norm above
//     detail::kSpectralNorm (16) takes detail::skew_function_spectral, the real Schur form, as detail::core_function
//     does, so the point stays orthonormal (SO(n): determinant one) at any finite norm; a B block with entries beyond
//     2^(max_exponent / 4) is factored scaled by a power of two (detail::huge_block_exponent), as detail::lift_core
//     is. Non-finite coordinates never throw (a step must not fail halfway through a tree): they give non-finite
//     entries in y, which is the documented outcome under non_finite = propagate; the optimizer checks the
//     coordinates before retract under skip and raise;
//   - the constructor allocates every buffer; lift and retract allocate nothing (no operator new, no Eigen heap
//     allocation) except on the spectral path above, which only a step of core norm above 16 takes. Every product
//     goes through stepping::product, which tiles it so that Eigen's GEMM packs its panels on the stack
//     (EIGEN_STACK_ALLOCATION_LIMIT, 128 KiB by default; Eigen built without alloca, with a smaller limit, or with
//     OpenMP would allocate there);
//   - recomputed: O(N n) memory, O(N n^2) per call, never an N x N matrix (the section is n reflectors of y,
//     factored by lift and reused by the retract that follows it); transported: the dense N x N section, moved as
//     GlobalSection::transport moves it, lambda <- lambda (I + W (F - I) W^T), O(N^2 n) per call.
#pragma once

#include <Eigen/Core>
#include <Eigen/Householder>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "geomopt/manifolds.hpp"
#include "geomopt/manifolds/detail/householder_blocked.hpp"
#include "geomopt/manifolds/detail/stiefel_cayley.hpp"
#include "geomopt/optimizers/detail/manifold_stepper.hpp"

namespace geomopt::detail {
namespace stepping {

template <class T>
using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
template <class T>
using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;
template <class T>
using MatrixMap = Eigen::Map<Matrix<T>>;
template <class T>
using ConstMatrixMap = Eigen::Map<const Matrix<T>>;

template <class T>
std::size_t bytes_of(const Matrix<T>& m) {
  return static_cast<std::size_t>(m.size()) * sizeof(T);
}
template <class T>
std::size_t bytes_of(const Vector<T>& v) {
  return static_cast<std::size_t>(v.size()) * sizeof(T);
}

// The side of a product tile: Eigen's GEMM packs at most tile x tile entries of each operand, and allocates that
// panel on the heap unless it fits EIGEN_STACK_ALLOCATION_LIMIT. Half the limit per panel leaves room for both.
template <class T>
constexpr Eigen::Index product_tile() {
  Eigen::Index t = 8;
  while (static_cast<std::size_t>((t + 8) * (t + 8)) * sizeof(T) <= EIGEN_STACK_ALLOCATION_LIMIT / 2) t += 8;
  return t;
}

template <class T>
using Destination = Eigen::Ref<Matrix<T>, 0, Eigen::OuterStride<>>;
template <class T>
using Operand = Eigen::Ref<const Matrix<T>, 0, Eigen::OuterStride<>>;

// Whether an operand of product enters transposed.
enum class Op { plain, transposed };

// dst = alpha op(lhs) op(rhs) (accumulate: dst += ...), tiled for the stack (see above), the depth loop innermost so
// a destination tile stays in cache. The operands are column-major blocks bound by Ref without a copy, and enter
// transposed by the flag: a transposed expression would not bind to the Ref without a (heap) copy. Funnelling every
// product through these few instantiations also keeps Eigen's GEMM from being stamped per expression type.
template <class T>
void product(Destination<T> dst, Operand<T> lhs, Op lhs_op, Operand<T> rhs, Op rhs_op, T alpha, bool accumulate) {
  constexpr Eigen::Index t = product_tile<T>();
  const Eigen::Index rows = dst.rows(), cols = dst.cols();
  const Eigen::Index depth = lhs_op == Op::plain ? lhs.cols() : lhs.rows();
  if (!accumulate) dst.setZero();
  for (Eigen::Index j = 0; j < cols; j += t) {
    const Eigen::Index nj = std::min(t, cols - j);
    for (Eigen::Index i = 0; i < rows; i += t) {
      const Eigen::Index mi = std::min(t, rows - i);
      auto d = dst.block(i, j, mi, nj);
      for (Eigen::Index p = 0; p < depth; p += t) {
        const Eigen::Index kp = std::min(t, depth - p);
        if (lhs_op == Op::transposed) {
          d.noalias() += alpha * lhs.block(p, i, kp, mi).transpose() * rhs.block(p, j, kp, nj);
        } else if (rhs_op == Op::transposed) {
          d.noalias() += alpha * lhs.block(i, p, mi, kp) * rhs.block(j, p, nj, kp).transpose();
        } else {
          d.noalias() += alpha * lhs.block(i, p, mi, kp) * rhs.block(p, j, kp, nj);
        }
      }
    }
  }
}
// The common case: dst = lhs rhs.
template <class T>
void product(Destination<T> dst, Operand<T> lhs, Operand<T> rhs) {
  product<T>(dst, lhs, Op::plain, rhs, Op::plain, T(1), false);
}

// x <- (I - tau v v^T) x, v = [1; essential]: Eigen's reflector, applied a column at a time (Eigen's
// applyHouseholderOnTheLeft evaluates tau * essential into a temporary, on the heap for long columns).
template <class X, class E, class T>
void apply_reflector(X&& x, const E& essential, T tau) {
  if (tau == T(0)) return;
  const Eigen::Index m = x.rows() - 1;
  for (Eigen::Index j = 0; j < x.cols(); ++j) {
    auto tail = x.col(j).tail(m);
    const T w = tau * (x(0, j) + essential.dot(tail));
    x(0, j) -= w;
    tail -= w * essential;
  }
}

// Householder QR in place: reflector i below the diagonal of column i with tau[i], R on and above. The reflectors,
// not only R, must be those of the code this mirrors, since they fix bases and so coordinates: Eigen's
// (makeHouseholder, as Eigen::HouseholderQR computes it unblocked; Eigen blocks the trailing update past 48 columns,
// which changes rounding only) for the step's B, and the global section's (detail::section_reflector) for a point.
enum class Reflector { eigen, section };
template <class A, class T>
void householder_qr(A&& a, T* tau, Reflector kind = Reflector::eigen) {
  const Eigen::Index rows = a.rows(), cols = a.cols(), size = std::min(rows, cols);
  for (Eigen::Index i = 0; i < size; ++i) {
    auto column = a.col(i).tail(rows - i);
    if (kind == Reflector::section) {
      tau[i] = geomopt::detail::section_reflector(column);
    } else {
      T beta;
      column.makeHouseholderInPlace(tau[i], beta);
      a(i, i) = beta;
    }
    apply_reflector(a.block(i, i + 1, rows - i, cols - i - 1), a.col(i).tail(rows - i - 1), tau[i]);
  }
}

// x <- Q x (transpose: Q^T x) for Q = H_0 ... H_{count-1}, the reflectors of householder_qr(qr).
template <class X, class A, class T>
void apply_q(X&& x, const A& qr, const T* tau, Eigen::Index count, bool transpose) {
  const Eigen::Index rows = qr.rows();
  for (Eigen::Index s = 0; s < count; ++s) {
    const Eigen::Index i = transpose ? s : count - 1 - s;
    apply_reflector(x.bottomRows(rows - i), qr.col(i).tail(rows - i - 1), tau[i]);
  }
}

// exp(S) and the Cayley transform (I - S/2)^-1 (I + S/2) of an m x m matrix into preallocated buffers. The
// exponential repeats detail::expm operation for operation (scaling by the 1-norm measured in double, Paterson-
// Stockmeyer on four blocks of the degree-15 Taylor polynomial, then squaring), so both give the same result to
// rounding; the Cayley transform is an LU solve with partial pivoting, like detail::cayley's (I - S/2 is
// nonsingular for skew S, its symmetric part being I), ordered for accuracy (see cayley).
template <class T>
class CoreFunctions {
 public:
  explicit CoreFunctions(Eigen::Index m) : x_(m, m), x2_(m, m), x3_(m, m), x4_(m, m), f_(m, m), tmp_(m, m), lu_(m, m) {}

  Eigen::Index size() const noexcept { return x_.rows(); }
  std::size_t bytes() const noexcept { return 7 * bytes_of(x_); }

  void apply(const Matrix<T>& s, Retraction r, Matrix<T>& out) {
    if (geomopt::detail::use_spectral<T>(s)) {  // the rule of detail::core_function
      out = geomopt::detail::skew_function_spectral<T>(s, r == Retraction::geodesic);
      return;
    }
    if (r == Retraction::geodesic) {
      expm(s, out);
    } else {
      cayley(s, out);
    }
  }

  void expm(const Matrix<T>& s, Matrix<T>& out) {
    const Eigen::Index m = s.rows();
    if (m == 0) return;
    double norm = 0;  // detail::norm1_value
    for (Eigen::Index j = 0; j < m; ++j) {
      double sum = 0;
      for (Eigen::Index i = 0; i < m; ++i) sum += std::abs(static_cast<double>(s(i, j)));
      norm = sum > norm ? sum : norm;
    }
    if (!std::isfinite(norm)) {  // no scaling brings it to 1/2; detail::expm would overflow the exponent
      out.setConstant(std::numeric_limits<T>::quiet_NaN());
      return;
    }
    int squarings = 0;
    if (norm > 0.5) squarings = static_cast<int>(std::ceil(std::log2(norm / 0.5)));
    x_ = s * T(std::ldexp(1.0, -squarings));
    product<T>(x2_, x_, x_);
    product<T>(x3_, x2_, x_);
    product<T>(x4_, x2_, x2_);
    double c[16];
    c[0] = 1;
    for (int k = 1; k < 16; ++k) c[k] = c[k - 1] / k;
    const auto identity = Matrix<T>::Identity(m, m);
    auto block = [&](int b) {
      return T(c[4 * b]) * identity + T(c[4 * b + 1]) * x_ + T(c[4 * b + 2]) * x2_ + T(c[4 * b + 3]) * x3_;
    };
    f_ = block(3);
    for (int b = 2; b >= 0; --b) {
      product<T>(tmp_, x4_, f_);
      f_ = tmp_ + block(b);
    }
    for (int k = 0; k < squarings; ++k) {
      product<T>(tmp_, f_, f_);
      f_.swap(tmp_);  // same sizes: exchanges the buffers, allocates nothing
    }
    out = f_;
  }

  // The LU is left-looking (Crout order): each entry of L, U and the solution takes its inner product as one dot
  // product, subtracted once. Right-looking updates would round every partial sum at the magnitude of the identity's
  // entries, which costs float about twice Eigen's (GEMM-accumulated) error on a 32 x 32 core.
  void cayley(const Matrix<T>& s, Matrix<T>& out) {
    const Eigen::Index m = s.rows();
    if (m == 0) return;
    const auto identity = Matrix<T>::Identity(m, m);
    x_ = s * T(0.5);
    lu_ = identity - x_;  // row-major: the rows of L and U the dot products read are contiguous
    out = identity + x_;  // the right-hand side, then the solution
    for (Eigen::Index j = 0; j < m; ++j) {
      for (Eigen::Index i = 1; i < j; ++i) lu_(i, j) -= lu_.row(i).head(i).dot(lu_.col(j).head(i));
      for (Eigen::Index i = std::max<Eigen::Index>(j, 1); i < m; ++i)
        lu_(i, j) -= lu_.row(i).head(j).dot(lu_.col(j).head(j));
      Eigen::Index p;
      lu_.col(j).tail(m - j).cwiseAbs().maxCoeff(&p);
      p += j;
      if (p != j) {
        lu_.row(j).swap(lu_.row(p));
        out.row(j).swap(out.row(p));
      }
      if (j + 1 < m) lu_.col(j).tail(m - j - 1) /= lu_(j, j);
    }
    for (Eigen::Index c = 0; c < m; ++c) {
      auto b = out.col(c);
      for (Eigen::Index i = 1; i < m; ++i) b[i] -= lu_.row(i).head(i).dot(b.head(i));
      for (Eigen::Index i = m - 1; i >= 0; --i)
        b[i] = (b[i] - lu_.row(i).tail(m - i - 1).dot(b.tail(m - i - 1))) / lu_(i, i);
    }
  }

 private:
  Matrix<T> x_, x2_, x3_, x4_, f_, tmp_;
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> lu_;
};

}  // namespace stepping

/// Which member of the Stiefel family a StiefelFamilyStepper steps: they differ in shape rules and in whether the
/// coordinates hold the skew block A (Grassmann's do not; the sphere's A is 1 x 1 and has no entries).
enum class StiefelFamilyKind { stiefel, grassmann, sphere, special_orthogonal };

template <class T>
class StiefelFamilyStepper final : public ManifoldStepper<T> {
  static_assert(std::is_floating_point_v<T>, "StiefelFamilyStepper steps float or double leaves");

 public:
  /// A stepper for the N x n points of `kind` (Sphere: n = 1; SpecialOrthogonal: N = n). y0 is the initial point,
  /// N x n column-major, from which a transported section is built (as GlobalSection(Y, transported) builds it); a
  /// recomputed section does not read it. Throws std::invalid_argument naming the shape when it does not fit.
  StiefelFamilyStepper(StiefelFamilyKind kind, Eigen::Index N, Eigen::Index n, SectionPolicy policy,
                       const T* y0 = nullptr)
      : policy_(policy),
        with_a_(kind != StiefelFamilyKind::grassmann),
        N_(N),
        n_(n),
        rest_(N - n),
        k_(std::min(n, N - n)),
        core_(validate(kind, N, n, policy, y0) + std::min(n, N - n)),
        schur_(n, N - n) {
    const Eigen::Index m = n + k_;
    z_.resize(N, n);
    b_.resize(rest_, n);
    tau_b_.resize(k_);
    s_ = Matrix::Zero(m, m);
    f_.resize(m, m);
    if (policy == SectionPolicy::recomputed) {
      house_y_ = BlockedHouseholder<T>(N, n, n);
    } else {
      lambda_ = GlobalSection<T>(stepping::ConstMatrixMap<T>(y0, N, n), SectionPolicy::transported).dense();
      q_.resize(rest_, k_);
      lw_.resize(N, m);
      h_.resize(N, m);
      fm_.resize(m, m);
    }
  }

  Eigen::Index dim() const override { return (with_a_ ? n_ * (n_ - 1) / 2 : 0) + rest_ * n_; }

  void lift(const T* y, const T* g, T* coords) override {
    if (n_ == 0) return;
    const stepping::ConstMatrixMap<T> gm(g, N_, n_);
    if (policy_ == SectionPolicy::transported) {
      stepping::product<T>(z_, lambda_, stepping::Op::transposed, gm, stepping::Op::plain, T(1), false);
    } else {
      factor_point(y);
      z_ = gm;
      house_y_.apply_transpose(z_);
    }
    // A = Z1 - Z1^T packed (its strict lower triangle row by row, the SkewSymMatrix order), then B = Z2.
    Eigen::Index c = 0;
    if (with_a_)
      for (Eigen::Index i = 1; i < n_; ++i)
        for (Eigen::Index j = 0; j < i; ++j) coords[c++] = z_(i, j) - z_(j, i);
    stepping::MatrixMap<T>(coords + c, rest_, n_) = z_.bottomRows(rest_);
  }

  void forget_point() noexcept override {
    if (policy_ == SectionPolicy::recomputed) factored_ = false;
  }

  void retract(T* y, const T* coords, Retraction r) override {
    if (n_ == 0) return;
    stepping::MatrixMap<T> ym(y, N_, n_);
    if (policy_ == SectionPolicy::recomputed && !factored_) factor_point(y);
    // The core S = [A, -r^T; r, 0] with B = Q_B [r; 0] (detail::lift_core).
    Eigen::Index c = 0;
    if (with_a_) {
      for (Eigen::Index i = 1; i < n_; ++i) {
        for (Eigen::Index j = 0; j < i; ++j, ++c) {
          s_(i, j) = coords[c];
          s_(j, i) = -coords[c];
        }
      }
    }
    // Cayley from a recomputed section: the n x n Schur complement gives the same point without the QR of B and the
    // 2n x 2n core (detail/stiefel_cayley.hpp), whenever its bound proves the core below the spectral threshold.
    if (policy_ == SectionPolicy::recomputed && r == Retraction::cayley &&
        schur_.local_point(s_.topLeftCorner(n_, n_), stepping::ConstMatrixMap<T>(coords + c, rest_, n_), ym)) {
      house_y_.apply(ym);
      factored_ = false;
      return;
    }
    if (k_ > 0) {
      b_ = stepping::ConstMatrixMap<T>(coords + c, rest_, n_);
      // Scaled by a power of two when its squared norms could overflow, as detail::lift_core does (exact).
      const int e = huge_block_exponent<T>(b_);
      if (e != 0) b_ *= T(std::ldexp(1.0, -e));
      stepping::householder_qr(b_, tau_b_.data());
      const T unscale = T(std::ldexp(1.0, e));
      for (Eigen::Index j = 0; j < n_; ++j) {
        for (Eigen::Index i = 0; i < k_; ++i) {
          const T v = i <= j ? T(b_(i, j) * unscale) : T(0);
          s_(n_ + i, j) = v;
          s_(j, n_ + i) = -v;
        }
      }
    }
    core_.apply(s_, r, f_);

    if (policy_ == SectionPolicy::recomputed) {
      // y = lambda [F11; q F21], with q F21 = Q_B [F21; 0] and lambda = Q_Y: O(N n^2) by reflectors.
      ym.topRows(n_) = f_.topLeftCorner(n_, n_);
      if (rest_ > 0) {
        ym.middleRows(n_, k_) = f_.bottomLeftCorner(k_, n_);
        ym.bottomRows(rest_ - k_).setZero();
        stepping::apply_q(ym.bottomRows(rest_), b_, tau_b_.data(), k_, false);
      }
      house_y_.apply(ym);
      factored_ = false;
      return;
    }
    // Transported (GlobalSection::transport): lambda W = [lambda E, lambda_perp q], y = (lambda W) F E and
    // lambda <- lambda + (lambda W)(F - I) W^T.
    if (k_ > 0) {
      q_.setZero();
      q_.topRows(k_).setIdentity();
      stepping::apply_q(q_, b_, tau_b_.data(), k_, false);
    }
    lw_.leftCols(n_) = lambda_.leftCols(n_);
    if (k_ > 0) stepping::product<T>(lw_.rightCols(k_), lambda_.rightCols(rest_), q_);
    stepping::product<T>(ym, lw_, f_.leftCols(n_));
    fm_ = f_;
    fm_.diagonal().array() -= T(1);
    stepping::product<T>(h_, lw_, fm_);
    lambda_.leftCols(n_) += h_.leftCols(n_);
    if (k_ > 0)
      stepping::product<T>(lambda_.rightCols(rest_), h_.rightCols(k_), stepping::Op::plain, q_,
                           stepping::Op::transposed, T(1), true);
  }

  T* section_data() noexcept override { return policy_ == SectionPolicy::transported ? lambda_.data() : nullptr; }
  Eigen::Index section_rows() const noexcept override { return policy_ == SectionPolicy::transported ? N_ : 0; }
  Eigen::Index section_cols() const noexcept override { return policy_ == SectionPolicy::transported ? N_ : 0; }
  double step_cost() const noexcept override { return 16.0 * static_cast<double>(N_ * n_); }
  std::size_t workspace_bytes() const noexcept override {
    using stepping::bytes_of;
    return bytes_of(z_) + bytes_of(b_) + bytes_of(tau_b_) + bytes_of(s_) + bytes_of(f_) + house_y_.bytes() +
           bytes_of(q_) + bytes_of(lw_) + bytes_of(h_) + bytes_of(fm_) + core_.bytes() + schur_.bytes();
  }

 private:
  using Matrix = stepping::Matrix<T>;
  using Vector = stepping::Vector<T>;

  // Checks the shape before any buffer is sized; returns n for the core's initialiser.
  static Eigen::Index validate(StiefelFamilyKind kind, Eigen::Index N, Eigen::Index n, SectionPolicy policy,
                               const T* y0) {
    const char* name = kind == StiefelFamilyKind::stiefel     ? "Stiefel"
                       : kind == StiefelFamilyKind::grassmann ? "Grassmann"
                       : kind == StiefelFamilyKind::sphere    ? "Sphere"
                                                              : "SpecialOrthogonal";
    const std::string shape = std::to_string(N) + "x" + std::to_string(n);
    if (kind == StiefelFamilyKind::sphere && (n != 1 || N < 1))
      throw std::invalid_argument("make_stepper: Sphere needs a vector of length N >= 1, got length " +
                                  std::to_string(N));
    if (n < 0 || n > N)
      throw std::invalid_argument(std::string("make_stepper: ") + name +
                                  " needs an N x n point with 0 <= n <= N, got " + shape);
    if (kind == StiefelFamilyKind::special_orthogonal && N != n)
      throw std::invalid_argument("make_stepper: SpecialOrthogonal needs a square point, got " + shape);
    if (policy == SectionPolicy::transported && y0 == nullptr && N * n > 0)
      throw std::invalid_argument(std::string("make_stepper: a transported section of ") + name + " " + shape +
                                  " needs the initial point");
    return n;
  }

  // The recomputed section at y: the Householder QR of y by the section's reflectors (lambda = Q; R's diagonal is
  // nonnegative, see detail::section_reflector).
  void factor_point(const T* y) {
    house_y_.factor(stepping::ConstMatrixMap<T>(y, N_, n_));
    factored_ = true;
  }

  SectionPolicy policy_;
  bool with_a_;
  bool factored_ = false;
  Eigen::Index N_, n_, rest_, k_;
  stepping::CoreFunctions<T> core_;
  StiefelCayleySchur<T> schur_;  // recomputed cayley: the local point by the n x n Schur complement
  Matrix z_;                     // lambda^T G
  Matrix b_;                     // B, then its Householder QR
  Vector tau_b_;
  Matrix s_, f_;                   // the core and its function
  BlockedHouseholder<T> house_y_;  // recomputed: the section's reflectors of y, blocked
  Matrix lambda_;                  // transported: the dense section
  Matrix q_, lw_, h_, fm_;         // transported: q, lambda W, (lambda W)(F - I), F - I
};

template <class T>
requires(!Manifold<Stiefel<T>>) std::unique_ptr<ManifoldStepper<T>> make_stepper(const Stiefel<T>& x,
                                                                                 SectionPolicy policy) {
  return std::make_unique<StiefelFamilyStepper<T>>(StiefelFamilyKind::stiefel, x.value().rows(), x.value().cols(),
                                                   policy, x.value().data());
}
template <class T>
requires(!Manifold<Grassmann<T>>) std::unique_ptr<ManifoldStepper<T>> make_stepper(const Grassmann<T>& x,
                                                                                   SectionPolicy policy) {
  return std::make_unique<StiefelFamilyStepper<T>>(StiefelFamilyKind::grassmann, x.value().rows(), x.value().cols(),
                                                   policy, x.value().data());
}
template <class T>
requires(!Manifold<Sphere<T>>) std::unique_ptr<ManifoldStepper<T>> make_stepper(const Sphere<T>& x,
                                                                                SectionPolicy policy) {
  return std::make_unique<StiefelFamilyStepper<T>>(StiefelFamilyKind::sphere, x.value().size(), 1, policy,
                                                   x.value().data());
}
template <class T>
requires(!Manifold<SpecialOrthogonal<T>>) std::unique_ptr<ManifoldStepper<T>> make_stepper(
    const SpecialOrthogonal<T>& x, SectionPolicy policy) {
  return std::make_unique<StiefelFamilyStepper<T>>(StiefelFamilyKind::special_orthogonal, x.value().rows(),
                                                   x.value().cols(), policy, x.value().data());
}

}  // namespace geomopt::detail
