// A manifold written from the contract alone (geomopt/manifolds/contract.hpp), to test the property suite
// <geomopt/manifolds/testing.hpp> without any of the library's manifolds: ToySphere<T> is the unit sphere S^(N-1) of
// R^N (N x 1 values, N >= 2) with the round metric, whose section at y is an orthonormal basis E_1 .. E_(N-1) of the
// tangent space y^perp. Its retractions are the exponential map (geodesic) and the metric projection
// (y + u) / |y + u| (second_order). The recomputed section is the Householder reflector H with H e_1 = +-y (E_k =
// H e_(k+1), O(N) memory); the transported one an N x N orthogonal Q with Q e_1 = y (E_k = Q e_(k+1)), moved by the
// rotation of each step in the plane of y and u, so Q keeps Q e_1 = y.
//
// Invariants: those of the contract. A defect (ToyDefect) breaks one of them, so that a test of the suite can require
// the suite to name that property (and no other, but for off_manifold, whose off-sphere points also unsettle the
// sections that follow them).
#pragma once

#include <Eigen/Core>
#include <array>
#include <cmath>
#include <cstddef>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "geomopt/manifolds/contract.hpp"

namespace geomopt_test {

enum class ToyDefect {
  none,
  retraction_factor,   // the step is 1.01 times too long
  lift_sign,           // lift returns -c
  allocating_retract,  // retract allocates a buffer
  shape_message,       // the shape error does not name the manifold
  domain_writes,       // inverse_retract writes its output before a domain_error
  frozen_transport,    // a transported section does not move with its point
  stale_section,       // forget_point forgets nothing
  off_manifold,        // retract lands at (1 + |c|^2 / 2) R_x(c), off the sphere by a second-order term
};

template <class T, ToyDefect kDefect = ToyDefect::none>
class ToySphere {
 public:
  using Scalar = T;
  using Value = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  static constexpr const char* kName = "ToySphere";
  static constexpr bool kCompact = true;
  static constexpr std::array<geomopt::Retraction, 2> kRetractions = {geomopt::Retraction::geodesic,
                                                                      geomopt::Retraction::second_order};

  /// The N - 1 coordinates of a tangent vector.
  struct Tangent {
    Value coordinates;
  };

  explicit ToySphere(Value v) : v_(std::move(v)) {}
  /// The same defect over another scalar.
  template <class U>
  using rebind = ToySphere<U, kDefect>;

  Value& value() { return v_; }
  const Value& value() const { return v_; }

  static ToySphere random_point(geomopt::Rng& rng, Eigen::Index N) {
    Workspace ws(N, 1, geomopt::SectionPolicy::recomputed, nullptr);
    Value v(N);
    ws.random_point(rng, v.data());
    return ToySphere(std::move(v));
  }

  static Tangent tangent_from(const ToySphere& x, const T* c) {
    return Tangent{Eigen::Map<const Value>(c, x.value().size() - 1)};
  }
  static void coordinates_of(const Tangent& xi, T* c) {
    for (Eigen::Index k = 0; k < xi.coordinates.size(); ++k) c[k] = xi.coordinates[k];
  }

  static Eigen::Index tangent_size(Eigen::Index rows, Eigen::Index cols) {
    if (rows < 2 || cols != 1)
      throw std::invalid_argument(std::string(kDefect == ToyDefect::shape_message ? "" : kName) +
                                  ": a point is N x 1 with N >= 2, got " + std::to_string(rows) + "x" +
                                  std::to_string(cols));
    return rows - 1;
  }

  class Workspace {
   public:
    Workspace(Eigen::Index rows, Eigen::Index cols, geomopt::SectionPolicy policy, const T* y0)
        : n_(ToySphere::tangent_size(rows, cols) + 1), policy_(policy) {
      const auto n = static_cast<std::size_t>(n_);
      v_.assign(n, T(0));
      u_.assign(n, T(0));
      w_.assign(n, T(0));
      if (policy_ == geomopt::SectionPolicy::transported) {
        q_.assign(n * n, T(0));
        for (Eigen::Index i = 0; i < n_; ++i) q(i, i) = T(1);
        if (y0 != nullptr) householder_into_q(y0);
      }
    }

    Eigen::Index tangent_size() const { return n_ - 1; }
    double step_cost() const {
      const double n = static_cast<double>(n_);
      return policy_ == geomopt::SectionPolicy::transported ? 8 * n * n : 12 * n;
    }

    void lift(const T* y, const T* g, T* c) {
      if (policy_ == geomopt::SectionPolicy::recomputed) build(y);
      for (Eigen::Index k = 0; k + 1 < n_; ++k) {
        T s(0);
        for (Eigen::Index i = 0; i < n_; ++i) s += basis(i, k + 1) * g[i];
        c[k] = kDefect == ToyDefect::lift_sign ? -s : s;
      }
    }

    void to_ambient(const T* y, const T* c, T* u) {
      if (policy_ == geomopt::SectionPolicy::recomputed && !have_section_) build(y);
      for (Eigen::Index i = 0; i < n_; ++i) {
        T s(0);
        for (Eigen::Index k = 0; k + 1 < n_; ++k) s += basis(i, k + 1) * c[k];
        u[i] = s;
      }
    }

    void retract(T* y, const T* c, geomopt::Retraction r) {
      using std::atan;
      using std::cos;
      using std::sin;
      using std::sqrt;
      if constexpr (kDefect == ToyDefect::allocating_retract) heap_ = std::vector<T>(static_cast<std::size_t>(n_));
      if (policy_ == geomopt::SectionPolicy::recomputed && !have_section_) build(y);
      const T factor(kDefect == ToyDefect::retraction_factor ? 1.01 : 1.0);
      T length(0);
      for (Eigen::Index k = 0; k + 1 < n_; ++k) length += c[k] * c[k];
      length = sqrt(length) * factor;
      to_ambient(y, c, u_.data());
      const T angle = r == geomopt::Retraction::geodesic ? length : atan(length);
      if (length > T(0)) {
        const T cs = cos(angle), sn = sin(angle);
        const std::size_t n = static_cast<std::size_t>(n_);
        for (std::size_t i = 0; i < n; ++i) {
          w_[i] = y[i];                     // the old point
          u_[i] = u_[i] * factor / length;  // the unit direction
          y[i] = cs * w_[i] + sn * u_[i];
        }
        if (policy_ == geomopt::SectionPolicy::transported && kDefect != ToyDefect::frozen_transport) {
          // Q <- F Q with F the rotation by the angle in the plane (w, u): y^T Q = e_1^T and u^T Q = (0, c / |c|).
          for (Eigen::Index j = 0; j < n_; ++j) {
            const T a = j == 0 ? T(1) : T(0), b = j == 0 ? T(0) : c[j - 1] * factor / length;
            for (Eigen::Index i = 0; i < n_; ++i)
              q(i, j) += (cs - T(1)) * (w_[static_cast<std::size_t>(i)] * a + u_[static_cast<std::size_t>(i)] * b) +
                         sn * (u_[static_cast<std::size_t>(i)] * a - w_[static_cast<std::size_t>(i)] * b);
          }
        }
      }
      if constexpr (kDefect == ToyDefect::off_manifold) {
        const T stretch = T(1) + length * length / T(2);
        for (Eigen::Index i = 0; i < n_; ++i) y[i] *= stretch;
      }
      if (policy_ == geomopt::SectionPolicy::recomputed) build(y);
    }

    void inverse_retract(const T* x, const T* y, T* c, geomopt::Retraction r) {
      using std::atan2;
      using std::isfinite;
      using std::sqrt;
      if (policy_ == geomopt::SectionPolicy::recomputed) build(x);
      T a(0), yy(0);
      for (Eigen::Index i = 0; i < n_; ++i) {
        if (!isfinite(y[i])) throw std::domain_error(std::string(kName) + "::inverse_retract: y is not finite");
        a += x[i] * y[i];
        yy += y[i] * y[i];
      }
      T s(0);
      for (Eigen::Index i = 0; i < n_; ++i) {
        w_[static_cast<std::size_t>(i)] = y[i] - a * x[i];
        s += w_[static_cast<std::size_t>(i)] * w_[static_cast<std::size_t>(i)];
      }
      s = sqrt(s);
      const T tiny = sqrt(T(Eigen::NumTraits<T>::epsilon())) * sqrt(yy);
      T scale(1);
      if (kDefect == ToyDefect::domain_writes && a <= T(0))
        for (Eigen::Index k = 0; k + 1 < n_; ++k) c[k] = T(0);
      if (r == geomopt::Retraction::geodesic) {
        if (a <= T(0) && s <= tiny)
          throw std::domain_error(std::string(kName) + "::inverse_retract: y is antipodal to x");
        scale = s > T(0) ? atan2(s, a) / s : T(1) / a;
      } else {
        if (a <= T(0)) throw std::domain_error(std::string(kName) + "::inverse_retract: y is not in x's hemisphere");
        scale = T(1) / a;
      }
      for (Eigen::Index k = 0; k + 1 < n_; ++k) {
        T v(0);
        for (Eigen::Index i = 0; i < n_; ++i) v += basis(i, k + 1) * w_[static_cast<std::size_t>(i)];
        c[k] = v * scale;
      }
    }

    void forget_point() {
      if constexpr (kDefect != ToyDefect::stale_section) have_section_ = false;
    }

    T check(const T* y) const {
      using std::abs;
      using std::sqrt;
      T s(0);
      for (Eigen::Index i = 0; i < n_; ++i) s += y[i] * y[i];
      return abs(sqrt(s) - T(1));
    }

    void project(T* y) {
      using std::sqrt;
      T s(0);
      for (Eigen::Index i = 0; i < n_; ++i) s += y[i] * y[i];
      s = sqrt(s);
      for (Eigen::Index i = 0; i < n_; ++i) y[i] = s > T(0) ? y[i] / s : T(i == 0 ? 1 : 0);
    }

    /// Uniform on the sphere: a normalized standard normal vector.
    void random_point(geomopt::Rng& rng, T* y) {
      std::normal_distribution<double> normal;
      for (Eigen::Index i = 0; i < n_; ++i) y[i] = T(normal(rng));
      project(y);
    }

    const T* section_data() const { return policy_ == geomopt::SectionPolicy::transported ? q_.data() : nullptr; }
    Eigen::Index section_rows() const { return policy_ == geomopt::SectionPolicy::transported ? n_ : 0; }
    Eigen::Index section_cols() const { return policy_ == geomopt::SectionPolicy::transported ? n_ : 0; }
    std::size_t workspace_bytes() const { return sizeof(T) * (v_.size() + u_.size() + w_.size() + q_.size()); }

   private:
    T& q(Eigen::Index i, Eigen::Index j) { return q_[static_cast<std::size_t>(i + j * n_)]; }

    // The Householder vector v with H = I - 2 v v^T / |v|^2 and H e_1 = -+y: v = e_1 +- y, the sign that keeps |v|^2
    // = 2 (1 +- y_1) >= 2.
    void build(const T* y) {
      const T sign = y[0] > T(0) ? T(1) : T(-1);
      vv_ = T(0);
      for (Eigen::Index i = 0; i < n_; ++i) {
        v_[static_cast<std::size_t>(i)] = (i == 0 ? T(1) : T(0)) + sign * y[i];
        vv_ += v_[static_cast<std::size_t>(i)] * v_[static_cast<std::size_t>(i)];
      }
      have_section_ = true;
    }
    void householder_into_q(const T* y) {
      build(y);
      for (Eigen::Index j = 0; j < n_; ++j)
        for (Eigen::Index i = 0; i < n_; ++i)
          q(i, j) =
              (i == j ? T(1) : T(0)) - T(2) * v_[static_cast<std::size_t>(i)] * v_[static_cast<std::size_t>(j)] / vv_;
      // H e_1 = -sign y: flip the first column so that Q e_1 = y (the others still span y^perp).
      const T sign = y[0] > T(0) ? T(1) : T(-1);
      for (Eigen::Index i = 0; i < n_; ++i) q(i, 0) = -sign * q(i, 0);
    }
    // Entry (i, k) of the section's N x N frame, whose columns 1 .. N-1 are E_1 .. E_(N-1).
    T basis(Eigen::Index i, Eigen::Index k) const {
      if (policy_ == geomopt::SectionPolicy::transported) return q_[static_cast<std::size_t>(i + k * n_)];
      return (i == k ? T(1) : T(0)) - T(2) * v_[static_cast<std::size_t>(i)] * v_[static_cast<std::size_t>(k)] / vv_;
    }

    Eigen::Index n_;
    geomopt::SectionPolicy policy_;
    std::vector<T> v_, u_, w_, q_, heap_;
    T vv_ = T(1);
    bool have_section_ = false;
  };

 private:
  Value v_;
};

}  // namespace geomopt_test
