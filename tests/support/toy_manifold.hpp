// toy::Sphere<T>: the unit sphere S^(N-1) in R^N, a complete manifold written only from the contract
// (<geomopt/manifolds/contract.hpp>): what a user writes to step, solve, save and hand to Ceres a manifold of their
// own. Every optimizer, solver, checkpoint and CeresManifold<toy::Sphere<double>> takes it with no other code.
//
// A point is a unit vector x (N x 1, N >= 1); the dimension is d = N - 1. The section at x is a Householder
// reflector H(x) = I - 2 v v^T / (v^T v), v = x + s e_1 (s the sign of x_1, so v^T v >= 2 on the sphere), which maps
// x to -s e_1: its columns 2..N, E_k = H(x) e_(k+1), are an orthonormal basis of the tangent space {u : x^T u = 0}.
// With the transported policy the section is an orthogonal N x N matrix Q whose first column is +-x, moved by the
// rotation in the plane of x and the new point that carries x onto it (the parallel transport of the geodesic).
//
// Retractions (kRetractions, the default first):
//   geodesic       R_x(u) = cos|u| x + sin|u| u / |u|, the exponential map; its inverse is the logarithm
//                  atan2(|w|, x^T y) w / |w| with w = y - (x^T y) x, which reads y / |y|, so it accepts y off the
//                  sphere; out of reach at the antipode.
//   second_order   R_x(u) = (x + u) / |x + u|, the metric projection; its inverse is y / (x^T y) - x, out of reach
//                  when x^T y <= 0.
// Both inverses, differentiated at y = x, are E^T (I - x x^T) = E^T: the Frobenius left inverse of to_ambient.
#pragma once

#include <Eigen/Core>
#include <array>
#include <cmath>
#include <cstddef>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

#include "geomopt/manifolds/common.hpp"
#include "geomopt/manifolds/contract.hpp"

namespace toy {

template <class T>
class Sphere {
 public:
  using Scalar = T;
  using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  using Tangent = Vector;  // the d coordinates, a ptree leaf as it is
  static constexpr const char* kName = "ToySphere";
  static constexpr bool kCompact = true;
  static constexpr std::array<geomopt::Retraction, 2> kRetractions{geomopt::Retraction::geodesic,
                                                                   geomopt::Retraction::second_order};

  Sphere() = default;
  /// The point e_1 of S^(n-1).
  explicit Sphere(Eigen::Index n) : v_(Vector::Unit(n, 0)) {}
  /// Any value: a tree of Euclidean gradients has the type of the tree of points it differentiates.
  explicit Sphere(Vector v) : v_(std::move(v)) {}

  Vector& value() noexcept { return v_; }
  const Vector& value() const noexcept { return v_; }

  static Tangent tangent_from(const Sphere& x, const T* c) {
    const Eigen::Index d = x.value().size() - 1;
    return d > 0 ? Tangent(Eigen::Map<const Vector>(c, d)) : Tangent(0);
  }
  static void coordinates_of(const Tangent& xi, T* c) { Eigen::Map<Vector>(c, xi.size()) = xi; }
  static Eigen::Index tangent_size(Eigen::Index rows, Eigen::Index cols) {
    if (rows < 1 || cols != 1)
      throw std::invalid_argument(std::string(kName) + ": a point is a vector of length N >= 1, got " +
                                  std::to_string(rows) + "x" + std::to_string(cols));
    return rows - 1;
  }
  /// The shape of Sphere(n)'s points, without building one (CeresManifold<Sphere>(0) must throw, not build e_1 of R^0).
  static std::array<Eigen::Index, 2> shape(Eigen::Index n) { return {n, 1}; }

  class Workspace;

 private:
  Vector v_;
};

template <class T>
class Sphere<T>::Workspace {
 public:
  using Map = Eigen::Map<Vector>;
  using ConstMap = Eigen::Map<const Vector>;
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;

  Workspace(Eigen::Index rows, Eigen::Index cols, geomopt::SectionPolicy policy, const T* y0)
      : n_(Sphere::tangent_size(rows, cols) + 1), u_(n_), v_(n_) {
    if (policy == geomopt::SectionPolicy::transported) {
      if (y0 == nullptr)
        throw std::invalid_argument(std::string(kName) + ": a transported section starts from a point (y0 is null)");
      q_.resize(n_, n_);
      reflector(y0);
      q_ = Matrix::Identity(n_, n_) - (T(2) / v_.squaredNorm()) * v_ * v_.transpose();
    }
  }

  Eigen::Index tangent_size() const noexcept { return n_ - 1; }
  double step_cost() const noexcept {
    const auto n = static_cast<double>(n_);
    return q_.size() > 0 ? 6 * n * n : 12 * n;
  }

  void lift(const T* y, const T* g, T* c) {
    ConstMap gm(g, n_);
    if (transported()) {
      Map(c, n_ - 1).noalias() = q_.rightCols(n_ - 1).transpose() * gm;
      return;
    }
    reflector(y);
    const T w = T(2) * v_.dot(gm) / v_.squaredNorm();
    Map(c, n_ - 1) = gm.tail(n_ - 1) - w * v_.tail(n_ - 1);
  }

  void to_ambient(const T* y, const T* c, T* u) {
    ConstMap cm(c, n_ - 1);
    Map um(u, n_);
    if (transported()) {
      um.noalias() = q_.rightCols(n_ - 1) * cm;
      return;
    }
    reflector(y);
    const T w = T(2) * v_.tail(n_ - 1).dot(cm) / v_.squaredNorm();
    um = -w * v_;
    um.tail(n_ - 1) += cm;
  }

  void retract(T* y, const T* c, geomopt::Retraction r) {
    Map ym(y, n_);
    if (n_ == 1) return;
    to_ambient(y, c, u_.data());
    const T theta = u_.norm();
    if (transported()) v_ = ym;  // the old point, for the transport below
    if (r == geomopt::Retraction::second_order) {
      ym += u_;
      ym /= ym.norm();
    } else if (theta > T(0)) {
      ym = std::cos(theta) * ym + (std::sin(theta) / theta) * u_;
    }
    if (transported()) transport(ym);
  }

  void inverse_retract(const T* x, const T* y, T* c, geomopt::Retraction r) {
    ConstMap xm(x, n_), ym(y, n_);
    const T xy = xm.dot(ym);
    if (!(xy > T(0)) && (r == geomopt::Retraction::second_order || (ym - xy * xm).norm() == T(0)))
      throw std::domain_error(std::string(kName) + ": the point is out of reach of the " +
                              (r == geomopt::Retraction::second_order ? "second_order" : "geodesic") +
                              " retraction (x^T y = " + std::to_string(static_cast<double>(xy)) + ")");
    Vector u;
    if (r == geomopt::Retraction::second_order) {
      u = ym / xy - xm;
    } else {
      const Vector w = ym - xy * xm;
      const T s = w.norm();
      u = s > T(0) ? Vector(std::atan2(s, xy) / s * w) : Vector(Vector::Zero(n_));
    }
    lift(x, u.data(), c);
  }

  void forget_point() noexcept {}  // a recomputed section is rebuilt from the y each call is given

  T check(const T* y) const { return std::abs(ConstMap(y, n_).norm() - T(1)); }

  void project(T* y) {
    Map ym(y, n_);
    const T norm = ym.norm();
    if (norm > T(0) && std::isfinite(norm)) {
      ym /= norm;
    } else {
      ym = Vector::Unit(n_, 0);
    }
  }

  /// The uniform distribution on the sphere: a standard normal vector, normalised.
  void random_point(geomopt::Rng& rng, T* y) {
    std::normal_distribution<double> normal;
    Map ym(y, n_);
    do {
      for (Eigen::Index i = 0; i < n_; ++i) ym[i] = static_cast<T>(normal(rng));
    } while (ym.norm() == T(0));
    ym /= ym.norm();
  }

  const T* section_data() const noexcept { return q_.size() > 0 ? q_.data() : nullptr; }
  T* section_data() noexcept { return q_.size() > 0 ? q_.data() : nullptr; }
  Eigen::Index section_rows() const noexcept { return q_.rows(); }
  Eigen::Index section_cols() const noexcept { return q_.cols(); }
  std::size_t workspace_bytes() const noexcept { return static_cast<std::size_t>(u_.size() + v_.size()) * sizeof(T); }

 private:
  bool transported() const noexcept { return q_.size() > 0; }

  // v_ <- x + s e_1, the reflector of the section at x.
  void reflector(const T* x) {
    v_ = ConstMap(x, n_);
    v_[0] += v_[0] < T(0) ? T(-1) : T(1);
  }

  // Q <- F Q, F the rotation by the angle from v_ (the old point) to y in their plane, the identity elsewhere.
  void transport(const Map& y) {
    const T cos_a = v_.dot(y);
    u_ = y - cos_a * v_;
    const T sin_a = u_.norm();
    if (!(sin_a > T(0))) return;
    u_ /= sin_a;
    for (Eigen::Index j = 0; j < n_; ++j) {
      auto q = q_.col(j);
      const T a = v_.dot(q), b = u_.dot(q);
      q += (cos_a - T(1)) * (a * v_ + b * u_) + sin_a * (a * u_ - b * v_);
    }
  }

  Eigen::Index n_;
  Vector u_, v_;  // the ambient step; the reflector (or, while transporting, the old point)
  Matrix q_;      // the transported section, empty when recomputed
};

// The ptree leaf protocol: the storage is the value; rebuild keeps the shape.
template <class T>
Eigen::Matrix<T, Eigen::Dynamic, 1>& free_parameters(Sphere<T>& x) {
  return x.value();
}
template <class T>
const Eigen::Matrix<T, Eigen::Dynamic, 1>& free_parameters(const Sphere<T>& x) {
  return x.value();
}
template <class T, class U, int R, int C>
Sphere<U> rebuild(const Sphere<T>& prototype, Eigen::Matrix<U, R, C>&& data) {
  if (data.rows() != prototype.value().rows() || data.cols() != 1)
    throw std::invalid_argument(std::string(Sphere<T>::kName) + "::rebuild: value of shape " +
                                std::to_string(data.rows()) + "x" + std::to_string(data.cols()) + ", expected " +
                                std::to_string(prototype.value().rows()) + "x1");
  return Sphere<U>(std::move(data));
}
template <class T>
std::string ptree_type_name(const Sphere<T>&) {
  return Sphere<T>::kName;
}

static_assert(geomopt::Manifold<Sphere<double>> && geomopt::Manifold<Sphere<float>>);

}  // namespace toy
