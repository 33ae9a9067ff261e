// Oblique(N, n): N x n matrices whose columns have unit norm, the product of n spheres S^(N-1), with the Euclidean
// (Frobenius) metric <U, V> = tr(U^T V). Dimension d = n (N - 1).
//
// Section: for each column x_j the reflector H_j = I - tau_j v_j v_j^T of detail::section_reflector, with
// H_j x_j = |x_j| e_1 (so H_j e_1 = x_j / |x_j|), and E_(j, k) = H_j e_(k+1), k = 1 .. N - 1. The coordinates of a
// tangent vector are, column after column, those of its column j in the frame H_j [0; I]: c = (c_1; ..; c_n), each
// c_j in R^(N-1). For n = 1 these are the Sphere's coordinates (stiefel.hpp, the section of St(N, 1)) to rounding.
//
//   to_ambient(x, c)_j = H_j [0; c_j]            lift(x, G)_j = rows 2..N of H_j G_j        (H_j = H_j^T)
//   geodesic  R_x(c)_j = H_j [cos b; sin b c_j / b]                          b = |c_j|, the sphere's exponential
//   cayley    R_x(c)_j = H_j [(1 - b^2/4) / (1 + b^2/4); c_j / (1 + b^2/4)]  the Cayley transform of St(N, 1)
//
// Invariants: every retraction of a finite c is a point with unit columns to rounding, at any norm (cos and sin take
// any finite angle; the Cayley factors are formed from 2 / b when b > 2, so b^2 never overflows). With z = H_j y_j =
// (z_1; z_t), the inverses are
//   geodesic  c_j = atan2(|z_t|, z_1) z_t / |z_t|       cayley  c_j = 2 z_t / (|z| + z_1)
// Both read y_j through its direction only, so their derivative at y = x annihilates the normal direction x_j, as the
// contract asks; y_j = -x_j is out of reach of both. The Riemannian gradient is G_j - x_j (x_j . G_j) per column.
//
// Sections, by SectionPolicy: recomputed, the n reflectors (O(N n) memory), rebuilt from the point; transported, the n
// dense N x N frames L_j (O(N^2 n) memory), each moved by its column's step: L_j <- L_j G_j with G_j the rotation by
// the step's angle in the plane of e_1 and [0; c_j / b], the parallel transport along the column's great circle.
// Costs per lift and retract: O(N n) recomputed, O(N^2 n) transported.
#pragma once

#include <Eigen/Core>
#include <array>
#include <cmath>
#include <cstddef>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

#include "geomopt/manifolds/any_workspace.hpp"
#include "geomopt/manifolds/common.hpp"
#include "geomopt/manifolds/contract.hpp"
#include "geomopt/manifolds/detail/point.hpp"
#include "geomopt/manifolds/global_section.hpp"

namespace geomopt {

/// Oblique(N, n): N x n matrices with unit-norm columns, with the Euclidean metric.
template <class T>
class Oblique : public detail::PointBase<T, Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>> {
 public:
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  /// The n (N - 1) coordinates, column after column (see the top of this file).
  using Tangent = Vector;
  static constexpr const char* kName = "Oblique";
  static constexpr bool kCompact = true;
  static constexpr std::array<Retraction, 2> kRetractions{Retraction::cayley, Retraction::geodesic};
  class Workspace;

  Oblique() = default;
  explicit Oblique(Matrix x) : detail::PointBase<T, Matrix>(std::move(x)) {}
  /// The point whose every column is e_1 (N >= 1, n >= 0).
  Oblique(Eigen::Index N, Eigen::Index n) : Oblique(first_basis_vectors(N, n)) {}

  Eigen::Index N() const noexcept { return this->v_.rows(); }
  Eigen::Index n() const noexcept { return this->v_.cols(); }

  /// Independent columns, each uniform on S^(N-1) (a standard normal vector over its norm).
  static Oblique random_point(Rng& rng, Eigen::Index N, Eigen::Index n) {
    Oblique x(N, n);
    detail::open_workspace<Oblique>(N, n, SectionPolicy::recomputed, nullptr).random_point(rng, x.value().data());
    return x;
  }

  /// The tangent vector at x with coordinates c (n (N - 1) numbers).
  static Tangent tangent_from(const Oblique& x, const T* c) {
    return Eigen::Map<const Vector>(c, x.n() * (x.N() > 0 ? x.N() - 1 : 0));
  }
  /// c <- the coordinates of xi.
  static void coordinates_of(const Tangent& xi, T* c) { Eigen::Map<Vector>(c, xi.size()) = xi; }

 private:
  static Matrix first_basis_vectors(Eigen::Index N, Eigen::Index n) {
    tangent_size(N, n);
    Matrix x = Matrix::Zero(N, n);
    x.row(0).setOnes();
    return x;
  }

 public:
  /// d = n (N - 1) for N x n points; std::invalid_argument unless N >= 1 and n >= 0.
  static Eigen::Index tangent_size(Eigen::Index N, Eigen::Index n) {
    if (N < 1 || n < 0)
      throw std::invalid_argument(std::string(kName) + ": expected an N x n matrix with N >= 1 and n >= 0, got " +
                                  std::to_string(N) + "x" + std::to_string(n));
    return n * (N - 1);
  }
  static std::array<Eigen::Index, 2> shape(Eigen::Index N, Eigen::Index n) { return {N, n}; }
};

/// The allocation-free geometry of one Oblique(N, n) leaf (contract.hpp).
template <class T>
class Oblique<T>::Workspace {
 public:
  using Scalar = T;

  /// Allocates every buffer. A transported section starts from y0 (N x n, column-major), which it needs.
  Workspace(Eigen::Index rows, Eigen::Index cols, SectionPolicy policy, const T* y0)
      : N_(rows), n_(cols), policy_(policy) {
    Oblique::tangent_size(rows, cols);
    if (policy_ == SectionPolicy::transported && y0 == nullptr && n_ > 0)
      throw std::invalid_argument(std::string(kName) + ": a transported section of Oblique(" + std::to_string(N_) +
                                  ", " + std::to_string(n_) + ") needs the initial point");
    column_.resize(N_);
    direction_.resize(N_);
    if (policy_ == SectionPolicy::recomputed) {
      essential_.resize(N_, n_);
      tau_.resize(n_);
      return;
    }
    frames_.resize(N_, N_ * n_);
    for (Eigen::Index j = 0; j < n_; ++j) {
      column_ = Eigen::Map<const Vector>(y0 + j * N_, N_);
      const T tau = detail::section_reflector(column_);
      auto frame = frames_.middleCols(j * N_, N_);
      frame.setIdentity();
      // H = I - tau v v^T, v = [1; essential].
      column_(0) = T(1);
      frame.noalias() -= (tau * column_) * column_.transpose();
    }
  }

  Eigen::Index tangent_size() const { return Oblique::tangent_size(N_, n_); }
  double step_cost() const noexcept {
    const double N = static_cast<double>(N_), n = static_cast<double>(n_);
    return policy_ == SectionPolicy::recomputed ? 16 * N * n : 6 * N * N * n;
  }

  /// c <- lift(y, g): per column, rows 2..N of H_j g_j.
  void lift(const T* y, const T* g, T* c) {
    for (Eigen::Index j = 0; j < n_; ++j) {
      const Eigen::Map<const Vector> gj(g + j * N_, N_);
      Eigen::Map<Vector> cj(c + j * (N_ - 1), N_ - 1);
      if (policy_ == SectionPolicy::transported) {
        cj.noalias() = frame(j).rightCols(N_ - 1).transpose() * gj;
        continue;
      }
      build_reflector(y, j);
      const auto v = essential_.col(j).tail(N_ - 1);
      const T s = tau_(j) * (gj(0) + v.dot(gj.tail(N_ - 1)));
      cj = gj.tail(N_ - 1) - s * v;
    }
    kept_ = true;
  }

  /// u <- to_ambient(y, c): per column, H_j [0; c_j].
  void to_ambient(const T* y, const T* c, T* u) {
    for (Eigen::Index j = 0; j < n_; ++j) {
      const Eigen::Map<const Vector> cj(c + j * (N_ - 1), N_ - 1);
      Eigen::Map<Vector> uj(u + j * N_, N_);
      if (policy_ == SectionPolicy::transported) {
        uj.noalias() = frame(j).rightCols(N_ - 1) * cj;
        continue;
      }
      build_reflector(y, j);
      const auto v = essential_.col(j).tail(N_ - 1);
      const T s = tau_(j) * v.dot(cj);
      uj(0) = -s;
      uj.tail(N_ - 1) = cj - s * v;
    }
    kept_ = true;
  }

  /// y <- R_y(c), column by column in closed form; never throws.
  void retract(T* y, const T* c, Retraction r) {
    for (Eigen::Index j = 0; j < n_; ++j) {
      const Eigen::Map<const Vector> cj(c + j * (N_ - 1), N_ - 1);
      Eigen::Map<Vector> yj(y + j * N_, N_);
      const T b = cj.stableNorm();
      const auto [cosine, sine, cosine_m1] = rotation(b, r);
      // The step's unit direction is c_j / b; "along" multiplies c_j itself (b = 0: no step).
      const T along = b > T(0) ? T(sine / b) : T(0);
      if (policy_ == SectionPolicy::transported) {
        auto l = frame(j);
        direction_.noalias() = l.rightCols(N_ - 1) * cj;  // b times the unit direction u
        column_ = l.col(0);                               // x_j
        // L <- L + [x, u] (F - I) [e_1^T; [0, c_j^T / b]], F the rotation by the step's angle.
        if (b > T(0)) {
          const T inv_b = T(1) / b;
          l.col(0) += cosine_m1 * column_ + (sine * inv_b) * direction_;
          direction_ = (-sine * inv_b) * column_ + (cosine_m1 * inv_b * inv_b) * direction_;
          l.rightCols(N_ - 1).noalias() += direction_ * cj.transpose();
        }
        yj = l.col(0);
        continue;
      }
      if (!kept_) build_reflector(y, j);
      // y_j <- H_j [cos; along c_j].
      const auto v = essential_.col(j).tail(N_ - 1);
      const T s = tau_(j) * (cosine + along * v.dot(cj));
      yj(0) = cosine - s;
      yj.tail(N_ - 1) = along * cj - s * v;
    }
    if (policy_ == SectionPolicy::recomputed) kept_ = false;
  }

  /// c <- R_x^-1(y), column by column; std::domain_error when a column of y is antipodal to x's or not finite.
  void inverse_retract(const T* x, const T* y, T* c, Retraction r) {
    using std::atan2;
    for (Eigen::Index j = 0; j < n_; ++j) {
      const Eigen::Map<const Vector> yj(y + j * N_, N_);
      Eigen::Map<Vector> cj(c + j * (N_ - 1), N_ - 1);
      if (!yj.allFinite()) throw std::domain_error(std::string(kName) + "::inverse_retract: y has a non-finite entry");
      // z = lambda_j^T y_j, the column in the section at x.
      if (policy_ == SectionPolicy::transported) {
        column_.noalias() = frame(j).transpose() * yj;
      } else {
        direction_ = Eigen::Map<const Vector>(x + j * N_, N_);
        const T tau = detail::section_reflector(direction_);
        const auto v = direction_.tail(N_ - 1);
        const T s = tau * (yj(0) + v.dot(yj.tail(N_ - 1)));
        column_(0) = yj(0) - s;
        column_.tail(N_ - 1) = yj.tail(N_ - 1) - s * v;
      }
      const T z1 = column_(0);
      const T zt = column_.tail(N_ - 1).stableNorm();
      const T z = column_.stableNorm();
      if (!(z + z1 > T(0)))
        throw std::domain_error(std::string(kName) + "::inverse_retract: column " + std::to_string(j) +
                                " of y is antipodal to x's (or zero), out of reach");
      if (r != Retraction::geodesic) {
        cj = (T(2) / (z + z1)) * column_.tail(N_ - 1);
      } else if (zt > T(0)) {
        cj = (atan2(zt, z1) / zt) * column_.tail(N_ - 1);
      } else {
        cj.setZero();
      }
    }
  }

  /// Drops the reflectors lift built, so the next retract starts from its own y (no effect when transported).
  void forget_point() noexcept {
    if (policy_ == SectionPolicy::recomputed) kept_ = false;
  }

  /// The Frobenius distance to the nearest point, sqrt(sum_j (|y_j| - 1)^2).
  T check(const T* y) const {
    T sum(0);
    for (Eigen::Index j = 0; j < n_; ++j) {
      const T d = Eigen::Map<const Vector>(y + j * N_, N_).stableNorm() - T(1);
      sum += d * d;
    }
    using std::sqrt;
    return sqrt(sum);
  }

  /// y_j <- y_j / |y_j| (e_1 for a zero column), the nearest point.
  void project(T* y) const {
    for (Eigen::Index j = 0; j < n_; ++j) {
      Eigen::Map<Vector> yj(y + j * N_, N_);
      const T norm = yj.stableNorm();
      if (norm > T(0)) {
        yj /= norm;
      } else {
        yj.setZero();
        yj(0) = T(1);
      }
    }
  }

  /// y <- independent columns, each uniform on the sphere.
  void random_point(Rng& rng, T* y) const {
    std::normal_distribution<double> normal;
    for (Eigen::Index j = 0; j < n_; ++j) {
      Eigen::Map<Vector> yj(y + j * N_, N_);
      do {
        for (Eigen::Index i = 0; i < N_; ++i) yj(i) = T(normal(rng));
      } while (!(yj.stableNorm() > T(0)));
      yj /= yj.stableNorm();
    }
  }

  /// The transported frames [L_1, .., L_n], N x (N n); null when recomputed.
  T* section_data() noexcept { return policy_ == SectionPolicy::transported ? frames_.data() : nullptr; }
  Eigen::Index section_rows() const noexcept { return policy_ == SectionPolicy::transported ? N_ : 0; }
  Eigen::Index section_cols() const noexcept { return policy_ == SectionPolicy::transported ? N_ * n_ : 0; }
  std::size_t workspace_bytes() const noexcept {
    const auto bytes = [](const auto& m) { return static_cast<std::size_t>(m.size()) * sizeof(T); };
    const std::size_t state = policy_ == SectionPolicy::transported ? bytes(frames_) : 0;
    return bytes(column_) + bytes(direction_) + bytes(essential_) + bytes(tau_) + bytes(frames_) - state;
  }

 private:
  auto frame(Eigen::Index j) { return frames_.middleCols(j * N_, N_); }

  // Column j's reflector at y, into essential_ and tau_.
  void build_reflector(const T* y, Eigen::Index j) {
    auto column = essential_.col(j);
    column = Eigen::Map<const Vector>(y + j * N_, N_);
    tau_(j) = detail::section_reflector(column);
  }

  // (cos, sin, cos - 1) of the rotation a step of norm b makes: by b (geodesic), by 2 atan(b / 2) (cayley), the
  // latter from t = 2 / b when b > 2 so that nothing overflows; cos - 1 without cancellation.
  static std::array<T, 3> rotation(T b, Retraction r) {
    using std::cos;
    using std::sin;
    if (r == Retraction::geodesic) {
      const T half = sin(b / T(2));
      return {cos(b), sin(b), T(-2) * half * half};
    }
    if (b > T(2)) {
      const T t = T(2) / b, den = T(1) + t * t;
      return {(t * t - T(1)) / den, T(2) * t / den, T(-2) / den};
    }
    const T q = b * b / T(4), den = T(1) + q;
    return {(T(1) - q) / den, b / den, T(-2) * q / den};
  }

  Eigen::Index N_, n_;
  SectionPolicy policy_;
  bool kept_ = false;  // recomputed: essential_ and tau_ are the section at the point of the last lift
  Vector column_, direction_;
  Matrix essential_;  // recomputed: column j holds |x_j| and the essential part of its reflector
  Vector tau_;
  Matrix frames_;  // transported: [L_1, .., L_n]
};

GEOMOPT_DECLARE_COMPILED_WORKSPACE(Oblique)

}  // namespace geomopt
