// StiefelFamilyWorkspace: the one implementation of the geometry of Stiefel, Grassmann, Sphere and SpecialOrthogonal
// points, on raw column-major memory, as the manifold contract (contract.hpp) asks of M::Workspace.
//
// Coordinates. At a point Y (N x n, orthonormal columns) the section lambda(Y) = [Y, Y_perp] (global_section.hpp) maps
// a lift [A, -B^T; B, 0] (A n x n skew, B (N - n) x n) to the ambient tangent vector lambda [A; B] = Y A + Y_perp B.
// The coordinates c are A's free entries (M::skew_slot says where each A(i, j), i > j, goes and with which sign;
// Grassmann has none, its tangents being horizontal), then B column-major. For the canonical metric they are
// orthonormal: |A|_F^2 / 2 + |B|_F^2 = |c|^2.
//   lift(y, g, c)        c = coordinates of lambda^T G: A = Z1 - Z1^T, B = Z2 for Z = lambda^T G (Z1 its top n rows)
//   to_ambient(y, c, u)  u = lambda [A; B]
//   retract(y, c, r)     y <- lambda f(X) [I; 0], f = exp (geodesic) or the Cayley transform, through the skew core
//                        S = [A, -R^T; R, 0] of B = Q_B [R; 0] (detail/stiefel_kernel.hpp explains why that is exact):
//                        y = lambda [F11; Q_B [F21; 0]] with F = f(S), O(N n^2)
// Invariants:
//   - the constructor allocates every buffer; lift, to_ambient and retract allocate nothing for float and double
//     except on the spectral path, which only a core of 1-norm above kSpectralNorm (16) takes
//     (detail/matrix_functions.hpp): it is orthogonal with determinant one at any finite norm;
//   - a B block with entries beyond 2^(max_exponent / 4) is factored scaled by a power of two (huge_block_exponent);
//   - non-finite coordinates never throw: they give non-finite entries in y (the allocating API checks first);
//   - recomputed: O(N n) memory, O(N n^2) per call, never an N x N matrix; the section is the n reflectors of y, built
//     by lift (and to_ambient, inverse_retract) at their y and reused by the retract that follows; transported: the
//     dense N x N section, moved by retract as lambda <- lambda (I + W (F - I) W^T), O(N^2 n) per call;
//   - every scalar an Eigen matrix holds works (float, double, ceres::Jet); the spectral path and the inverse
//     retraction need a floating-point scalar.
// The hot path is factor_point (the section's Householder QR), factor_step (the core from the coordinates) and
// skew_core_function (the core's function): faster kernels replace those three.
//
// Hooks the point type M provides (all static):
//   kName                                   the manifold's name in messages
//   kSkewBlock                              whether coordinates hold A (false for Grassmann)
//   kRotation                               whether points have determinant one (SpecialOrthogonal)
//   tangent_size(rows, cols)                the contract's: d, std::invalid_argument naming kName and the shape
//   skew_slot(i, j, n)                      {index, sign} with c[index] = sign A(i, j), for i > j
//   random_value(rng, rows, cols)           a random point's value (M's natural distribution), as an N x n matrix
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "geomopt/manifolds/common.hpp"
#include "geomopt/manifolds/detail/dense_kernels.hpp"
#include "geomopt/manifolds/detail/householder_blocked.hpp"
#include "geomopt/manifolds/detail/matrix_functions.hpp"
#include "geomopt/manifolds/detail/stiefel_cayley.hpp"
#include "geomopt/manifolds/detail/stiefel_kernel.hpp"
#include "geomopt/manifolds/global_section.hpp"

namespace geomopt::detail {

// The standard packing of A's free entries: the strict lower triangle row by row (SkewSymMatrix's order).
inline constexpr std::pair<Eigen::Index, int> packed_skew_slot(Eigen::Index i, Eigen::Index j) {
  return {i * (i - 1) / 2 + j, 1};
}

template <class T, class M>
class StiefelFamilyWorkspace {
 public:
  using Scalar = T;
  using Matrix = Mat<T>;
  using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  using MatrixMap = Eigen::Map<Matrix>;
  using ConstMatrixMap = Eigen::Map<const Matrix>;

  /// A workspace for the rows x cols points of M (Sphere: cols = 1; SpecialOrthogonal: rows = cols). y0, the initial
  /// point (rows x cols, column-major), starts a transported section as GlobalSection(Y, transported) does; a null y0
  /// starts it at lambda = I (the section of [I; 0]); a recomputed section does not read it. Throws
  /// std::invalid_argument naming M and the expected shape when rows x cols is not a point of M.
  StiefelFamilyWorkspace(Eigen::Index rows, Eigen::Index cols, SectionPolicy policy, const T* y0)
      : policy_(policy),
        N_(rows),
        n_(validated(rows, cols)),
        rest_(rows - cols),
        k_(std::min(cols, rows - cols)),
        core_(cols + std::min(cols, rows - cols)) {
    const Eigen::Index m = n_ + k_;
    z_.resize(N_, n_);
    b_.resize(rest_, n_);
    tau_b_.resize(k_);
    s_ = Matrix::Zero(m, m);
    f_.resize(m, m);
    // A recomputed section of a floating-point scalar lives in the blocked factorization; everything else in the
    // unblocked QR of y.
    bool blocked = false;
    if constexpr (kBlocked) {
      if (policy == SectionPolicy::recomputed) {
        fast_.house = BlockedHouseholder<T>(N_, n_, n_);
        fast_.schur = StiefelCayleySchur<T>(n_, rest_);
        blocked = true;
      }
    }
    if (!blocked) {
      qr_y_.resize(N_, n_);
      tau_y_.resize(n_);
    }
    if (policy == SectionPolicy::transported) {
      lambda_ = Matrix::Identity(N_, N_);
      if (y0 != nullptr && n_ > 0) {
        factor_point(y0);
        apply_householder_q(lambda_, qr_y_, tau_y_.data(), n_, false);
        factored_ = false;
      }
      q_.resize(rest_, k_);
      lw_.resize(N_, m);
      h_.resize(N_, m);
      fm_.resize(m, m);
    }
  }

  Eigen::Index rows() const noexcept { return N_; }
  Eigen::Index cols() const noexcept { return n_; }
  SectionPolicy policy() const noexcept { return policy_; }

  /// The number of coordinates, by M's shape rule (M::tangent_size).
  Eigen::Index tangent_size() const { return M::tangent_size(N_, n_); }

  /// Flops of one lift and one retract: recomputed, two Householder QRs and four applications of n reflectors to
  /// N x n blocks (about 14 N n^2) and the core function (about 20 (2n)^3 for the polynomial); transported adds the
  /// dense products with lambda (about 2 N^2 n + 4 N^2 k + 4 N (n + k)^2).
  double step_cost() const noexcept {
    const double N = static_cast<double>(N_), n = static_cast<double>(n_), m = static_cast<double>(n_ + k_);
    const double k = static_cast<double>(k_);
    double cost = 14 * N * n * n + 20 * m * m * m + 4 * N * n;
    if (policy_ == SectionPolicy::transported) cost += 2 * N * N * n + 4 * N * N * k + 4 * N * m * m;
    return cost;
  }

  /// c <- the coordinates of the lift of the Euclidean gradient g at y. Rebuilds a recomputed section at y.
  void lift(const T* y, const T* g, T* c) {
    if (n_ == 0) return;
    const ConstMatrixMap gm(g, N_, n_);
    if (policy_ == SectionPolicy::transported) {
      dense_product<T>(z_, lambda_, ProductOp::transposed, gm, ProductOp::plain, T(1), false);
    } else {
      factor_point(y);
      z_ = gm;
      apply_section_transpose(z_);
    }
    if constexpr (M::kSkewBlock) {
      for (Eigen::Index i = 1; i < n_; ++i) {
        for (Eigen::Index j = 0; j < i; ++j) {
          const auto [index, sign] = M::skew_slot(i, j, n_);
          const T a = z_(i, j) - z_(j, i);
          c[index] = sign > 0 ? a : T(-a);
        }
      }
    }
    MatrixMap(c + skew_size(), rest_, n_) = z_.bottomRows(rest_);
  }

  /// u <- lambda [A; B], the ambient tangent vector with coordinates c at y. Rebuilds a recomputed section at y.
  void to_ambient(const T* y, const T* c, T* u) {
    MatrixMap um(u, N_, n_);
    if (n_ == 0) return;
    MatrixMap local = policy_ == SectionPolicy::transported ? MatrixMap(z_.data(), N_, n_) : um;
    unpack_skew(c, local.topRows(n_));
    local.bottomRows(rest_) = ConstMatrixMap(c + skew_size(), rest_, n_);
    if (policy_ == SectionPolicy::transported) {
      dense_product<T>(um, lambda_, z_);
    } else {
      factor_point(y);
      apply_section(um);
    }
  }

  /// Drops the section lift built, so the next retract starts from its own y. No effect on a transported section.
  void forget_point() noexcept {
    if (policy_ == SectionPolicy::recomputed) factored_ = false;
  }

  /// y <- R_y(c) in place (see the top of this file); y is the point of the last lift when the section is kept from
  /// it. A transported section moves with the point. Never throws.
  void retract(T* y, const T* c, Retraction r) {
    if (n_ == 0) return;
    MatrixMap ym(y, N_, n_);
    if (policy_ == SectionPolicy::recomputed && !factored_) factor_point(y);
    if constexpr (kBlocked) {
      // Cayley from a recomputed section: the n x n Schur complement of the core gives the local point without the
      // QR of B and the 2n x 2n solve (detail/stiefel_cayley.hpp), whenever its bound proves the core below the
      // spectral threshold; otherwise the core below decides the rule exactly.
      if (policy_ == SectionPolicy::recomputed && r == Retraction::cayley) {
        unpack_skew(c, s_.topLeftCorner(n_, n_));
        if (fast_.schur.local_point(s_.topLeftCorner(n_, n_), ConstMatrixMap(c + skew_size(), rest_, n_), ym)) {
          apply_section(ym);
          factored_ = false;
          return;
        }
      }
    }
    factor_step(c);
    skew_core_function<T>(core_, s_, r, f_);
    if (policy_ == SectionPolicy::recomputed) {
      // y = lambda [F11; Q_B [F21; 0]], by reflectors: O(N n^2).
      ym.topRows(n_) = f_.topLeftCorner(n_, n_);
      if (rest_ > 0) {
        ym.middleRows(n_, k_) = f_.bottomLeftCorner(k_, n_);
        ym.bottomRows(rest_ - k_).setZero();
        apply_householder_q(ym.bottomRows(rest_), b_, tau_b_.data(), k_, false);
      }
      apply_section(ym);
      factored_ = false;
      return;
    }
    if (k_ > 0) {
      q_.setZero();
      q_.topRows(k_).setIdentity();
      apply_householder_q(q_, b_, tau_b_.data(), k_, false);
    }
    transport_dense_section<T>(lambda_, q_, f_, ym, lw_, h_, fm_);
  }

  /// c <- R_x^-1(y) in the section at x (a transported section: the one kept, which must be x's): closed forms for
  /// Cayley and for Grassmann, Zimmermann's iteration for the geodesic (detail/stiefel_kernel.hpp). Allocates.
  /// Throws std::domain_error when y is out of reach or has a non-finite entry, std::invalid_argument for a scalar
  /// that is not floating-point.
  void inverse_retract(const T* x, const T* y, T* c, Retraction r) {
    if constexpr (!std::is_floating_point_v<T>) {
      (void)x, (void)y, (void)c, (void)r;
      throw std::invalid_argument(std::string(M::kName) + "::inverse_retract: needs a floating-point scalar");
    } else {
      const ConstMatrixMap ym(y, N_, n_);
      if (!ym.allFinite())
        throw std::domain_error(std::string(M::kName) + "::inverse_retract: y has a non-finite entry");
      if (n_ == 0) return;
      Matrix z(N_, n_);
      if (policy_ == SectionPolicy::transported) {
        z.noalias() = lambda_.transpose() * ym;
      } else {
        factor_point(x);
        z = ym;
        apply_section_transpose(z);
      }
      if constexpr (!M::kSkewBlock) {
        MatrixMap(c, rest_, n_) = inverse_grassmann_block(z, n_, r);
      } else {
        // The logarithm assumes y on the manifold: a y off it (Ceres differentiates Minus in every ambient direction)
        // is first replaced by its orthonormal polar factor, which moves nothing tangent at y = x, so the derivative
        // there is the left inverse of to_ambient the contract asks for. The factor keeps the sign of the
        // determinant, so a reflection stays out of SO(n)'s reach; a y on the manifold to rounding is left exact,
        // so that a half turn keeps its eigenvalue -1 and is refused. The Cayley inverse is rational and has that
        // derivative as it is.
        if (r == Retraction::geodesic &&
            orthonormality_defect<T>(z) > T(64) * std::numeric_limits<T>::epsilon() * T(std::sqrt(double(n_))))
          z = polar_factor<T>(z, false);
        auto [a, b] = r == Retraction::geodesic ? inverse_geodesic_blocks(z, n_, "inverse_retract (geodesic)")
                                                : inverse_cayley_blocks(z, n_);
        for (Eigen::Index i = 1; i < n_; ++i) {
          for (Eigen::Index j = 0; j < i; ++j) {
            const auto [index, sign] = M::skew_slot(i, j, n_);
            c[index] = sign > 0 ? a(i, j) : T(-a(i, j));
          }
        }
        MatrixMap(c + skew_size(), rest_, n_) = b;
      }
    }
  }

  /// ||Y^T Y - I||_F, plus 2 for a point of negative determinant where M's points are rotations (the Frobenius
  /// distance from a reflection to the nearest rotation).
  T check(const T* y) const {
    const Matrix v = ConstMatrixMap(y, N_, n_);
    T defect = orthonormality_defect<T>(v);
    if constexpr (M::kRotation) {
      if (n_ > 0 && value_of(v.determinant()) < 0) defect += T(2);
    }
    return defect;
  }

  /// y <- the nearest point in the Frobenius norm: the orthonormal polar factor (a rotation where M's points are).
  void project(T* y) {
    MatrixMap ym(y, N_, n_);
    ym = polar_factor<T>(Matrix(ym), M::kRotation);
  }

  /// y <- a random point of M (M::random_value).
  void random_point(Rng& rng, T* y) { MatrixMap(y, N_, n_) = M::random_value(rng, N_, n_); }

  /// The transported section (N x N), or null and 0 x 0 when recomputed.
  T* section_data() noexcept { return policy_ == SectionPolicy::transported ? lambda_.data() : nullptr; }
  const T* section_data() const noexcept { return policy_ == SectionPolicy::transported ? lambda_.data() : nullptr; }
  Eigen::Index section_rows() const noexcept { return policy_ == SectionPolicy::transported ? N_ : 0; }
  Eigen::Index section_cols() const noexcept { return policy_ == SectionPolicy::transported ? N_ : 0; }

  /// The dense matrix of a transported section, which a GlobalSection hands in (by assignment) and takes back (by
  /// GlobalSection::swap_dense). It must stay N x N.
  Matrix& transported_section() noexcept { return lambda_; }

  std::size_t workspace_bytes() const noexcept {
    return bytes_of(z_) + bytes_of(b_) + bytes_of(tau_b_) + bytes_of(s_) + bytes_of(f_) + bytes_of(qr_y_) +
           bytes_of(tau_y_) + bytes_of(q_) + bytes_of(lw_) + bytes_of(h_) + bytes_of(fm_) + core_.bytes() +
           fast_bytes();
  }

 private:
  static Eigen::Index validated(Eigen::Index rows, Eigen::Index cols) {
    M::tangent_size(rows, cols);
    return cols;
  }

  Eigen::Index skew_size() const noexcept { return M::kSkewBlock ? n_ * (n_ - 1) / 2 : 0; }

  // out (n x n) <- the skew matrix A of the coordinates c (zero for Grassmann).
  template <class Out>
  void unpack_skew(const T* c, Out&& out) const {
    out.setZero();
    if constexpr (M::kSkewBlock) {
      for (Eigen::Index i = 1; i < n_; ++i) {
        for (Eigen::Index j = 0; j < i; ++j) {
          const auto [index, sign] = M::skew_slot(i, j, n_);
          const T a = sign > 0 ? c[index] : T(-c[index]);
          out(i, j) = a;
          out(j, i) = -a;
        }
      }
    }
  }

  // The recomputed section at y: the Householder QR of y by the section's reflectors (lambda = Q; R's diagonal is
  // nonnegative, see section_reflector).
  // Floating-point scalars factor a recomputed section in blocks (BlockedHouseholder: the same reflectors, compact
  // WY); a transported section's start and dual numbers take the unblocked QR.
  void factor_point(const T* y) {
    if constexpr (kBlocked) {
      if (policy_ == SectionPolicy::recomputed) {
        fast_.house.factor(ConstMatrixMap(y, N_, n_));
        factored_ = true;
        return;
      }
    }
    qr_y_ = ConstMatrixMap(y, N_, n_);
    householder_qr_in_place(qr_y_, tau_y_.data(), ReflectorConvention::section);
    factored_ = true;
  }

  // x <- lambda x and x <- lambda^T x for the recomputed section factored by factor_point.
  template <class X>
  void apply_section(X&& x) {
    if constexpr (kBlocked) {
      if (policy_ == SectionPolicy::recomputed) return fast_.house.apply(x);
    }
    apply_householder_q(x, qr_y_, tau_y_.data(), n_, false);
  }
  template <class X>
  void apply_section_transpose(X&& x) {
    if constexpr (kBlocked) {
      if (policy_ == SectionPolicy::recomputed) return fast_.house.apply_transpose(x);
    }
    apply_householder_q(x, qr_y_, tau_y_.data(), n_, true);
  }

  std::size_t fast_bytes() const noexcept {
    if constexpr (kBlocked) {
      return fast_.house.bytes() + fast_.schur.bytes();
    } else {
      return 0;
    }
  }

  // The core S = [A, -R^T; R, 0] of the coordinates c, with B = Q_B [R; 0] (Q_B's reflectors left in b_, tau_b_).
  void factor_step(const T* c) {
    unpack_skew(c, s_.topLeftCorner(n_, n_));
    if (k_ == 0) return;
    b_ = ConstMatrixMap(c + skew_size(), rest_, n_);
    int e = 0;
    if constexpr (std::is_floating_point_v<T>) e = huge_block_exponent<T>(b_);
    if (e != 0) b_ *= T(std::ldexp(1.0, -e));
    householder_qr_in_place(b_, tau_b_.data(), ReflectorConvention::eigen);
    const T unscale = T(std::ldexp(1.0, e));
    for (Eigen::Index j = 0; j < n_; ++j) {
      for (Eigen::Index i = 0; i < k_; ++i) {
        const T v = i <= j ? T(b_(i, j) * unscale) : T(0);
        s_(n_ + i, j) = v;
        s_(j, n_ + i) = -v;
      }
    }
  }

  // The blocked kernels of the recomputed section (float and double; a ceres::Jet keeps the unblocked ones).
  static constexpr bool kBlocked = std::is_floating_point_v<T>;
  struct FastKernels {
    BlockedHouseholder<T> house;
    StiefelCayleySchur<T> schur{0, 0};
  };
  struct NoFastKernels {};

  SectionPolicy policy_;
  bool factored_ = false;
  Eigen::Index N_, n_, rest_, k_;
  SkewCoreKernels<T> core_;
  Matrix z_;  // lambda^T G; scratch of to_ambient
  Matrix b_;  // B, then its Householder QR
  Vector tau_b_;
  Matrix s_, f_;  // the core and its function
  Matrix qr_y_;   // the Householder QR of y (recomputed; also the transported section's start)
  Vector tau_y_;
  Matrix lambda_;           // transported: the dense section
  Matrix q_, lw_, h_, fm_;  // transported: Q_B [I; 0], lambda W, (lambda W)(F - I), F - I
  std::conditional_t<kBlocked, FastKernels, NoFastKernels> fast_;
};

}  // namespace geomopt::detail
