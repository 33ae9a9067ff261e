// The arithmetic behind CeresManifold and CeresLocalParameterization: one kernel per kind of parameter block, over
// raw double pointers laid out as Ceres lays them out (points column-major, Jacobians row-major).
//
// Every kernel K satisfies, for x on its manifold, delta a tangent coordinate vector and y in reach of x:
//   K.plus(x, 0) = x,   K.minus(K.plus(x, delta), x) = delta,   K.plus(x, K.minus(y, x)) = y,
//   plus_jacobian(x) = d plus(x, delta) / d delta at 0,   minus_jacobian(x) = d minus(y, x) / d y at y = x,
//   minus_jacobian(x) plus_jacobian(x) = I,   right_multiply(x, G) = G plus_jacobian(x).
// The Jacobians are the same for both retractions: they agree to first order, and so do their inverses.
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <exception>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "geomopt/manifolds.hpp"

namespace geomopt::detail {

using CeresRowMajor = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using CeresVector = Eigen::Matrix<double, Eigen::Dynamic, 1>;

inline constexpr double kInvSqrt2 = 0.70710678118654752440;

// Ceres sizes its blocks with int: an n x n block needs n <= floor(sqrt(INT_MAX)) = 46340. Throws
// std::invalid_argument naming the manifold and the order otherwise.
inline void require_square_block_fits(const char* who, Eigen::Index n) {
  if (n > 46340)
    throw std::invalid_argument(std::string(who) + ": an " + std::to_string(n) + "x" + std::to_string(n) +
                                " block has more entries than a Ceres parameter block can hold (" +
                                std::to_string(std::numeric_limits<int>::max()) + "); need n <= 46340");
}

// legacy: begin (manifolds that do not satisfy geomopt::Manifold yet; CeresManifold takes contract manifolds through
// contract_kernel.hpp)
// Stiefel, Sphere and SpecialOrthogonal: the parameter block is the N x n point, column-major; the tangent
// coordinates are (the packed strictly lower triangle of the skew block A, then B column-major), the packed
// coordinates of the lift [A, -B^T; B, 0] at the section lambda(x) = [Y, Y_perp] built from x. They are orthonormal for
// the canonical metric. Sphere has no A (n = 1), SO(n) no B (N = n), so one layout serves all three:
//   plus(x, delta)   = lambda f(X) [I; 0]                        f the Cayley transform or the exponential
//   plus_jacobian    : delta -> lambda [A; B] = Y A + Y_perp B
//   minus_jacobian   : dy -> (packed skew(Y^T dy), Y_perp^T dy)   (a normal direction Y S, S symmetric, maps to 0)
template <class M>
class StiefelFamilyKernel {
 public:
  StiefelFamilyKernel(Eigen::Index N, Eigen::Index n, Retraction r) : N_(N), n_(n), r_(r) {
    if (std::is_same_v<M, Sphere<double>> && N < 1)
      throw std::invalid_argument("CeresManifold<Sphere>: need N >= 1, got N = " + std::to_string(N));
    if (n < 1 || n > N)
      throw std::invalid_argument(std::string("CeresManifold<") + M::kName +
                                  ">: need 1 <= n <= N, got N = " + std::to_string(N) + ", n = " + std::to_string(n));
    // n <= N and N n <= INT_MAX bound every size below; N n is checked by division, it could overflow Eigen::Index.
    if (N > std::numeric_limits<int>::max() / n)
      throw std::invalid_argument(std::string("CeresManifold<") + M::kName + ">: St(" + std::to_string(N) + ", " +
                                  std::to_string(n) + ") has more entries than a Ceres parameter block can hold (" +
                                  std::to_string(std::numeric_limits<int>::max()) + ")");
  }

  Eigen::Index N() const noexcept { return N_; }
  Eigen::Index n() const noexcept { return n_; }
  Retraction retraction() const noexcept { return r_; }
  int ambient_size() const noexcept { return static_cast<int>(N_ * n_); }
  int tangent_size() const noexcept { return static_cast<int>(skew_size() + (N_ - n_) * n_); }

  void plus(const double* x, const double* delta, double* out) const {
    for (int k = 0; k < tangent_size(); ++k)
      if (!std::isfinite(delta[k]))
        throw std::domain_error(std::string("CeresManifold<") + M::kName + ">::Plus: delta[" + std::to_string(k) +
                                "] is not finite");
    if constexpr (kSphere) {
      sphere_plus(x, delta, out);
      return;
    }
    M p = point(x);
    retract(p, tangent(delta), r_);
    Eigen::Map<CeresVector>(out, ambient_size()) = Eigen::Map<const CeresVector>(p.value().data(), ambient_size());
  }

  void minus(const double* y, const double* x, double* out) const {
    const M p = point(x);
    Mat<double> target = Eigen::Map<const Mat<double>>(y, N_, n_);
    // The logarithms (Zimmermann's iteration, the orthogonal logarithm) assume y on the manifold; off it (Ceres
    // differentiates Minus in every ambient direction) y is first projected, which moves nothing tangent at y = x, so
    // the derivative stays minus_jacobian. The Cayley inverse is a rational function, smooth off the manifold as it is.
    if (r_ == Retraction::geodesic) target = polar_factor<double>(target, std::is_same_v<M, SpecialOrthogonal<double>>);
    write_coordinates(inverse_retract(p, target, r_), out);
  }

  void plus_jacobian(const double* x, double* jacobian) const {
    const Mat<double> lambda = make_section(point(x)).dense();  // [Y, Y_perp], the frame plus moves in
    Eigen::Map<CeresRowMajor> J(jacobian, ambient_size(), tangent_size());
    J.setZero();
    for_each_coordinate([&](Eigen::Index k, Eigen::Index i, Eigen::Index j, bool in_a) {
      if (in_a) {  // A(i, j) = 1 = -A(j, i): Y_i e_j^T - Y_j e_i^T
        J.col(k).segment(j * N_, N_) = lambda.col(i);
        J.col(k).segment(i * N_, N_) = -lambda.col(j);
      } else {  // B(i, j) = 1: Y_perp_i e_j^T
        J.col(k).segment(j * N_, N_) = lambda.col(n_ + i);
      }
    });
  }

  void minus_jacobian(const double* x, double* jacobian) const {
    const Mat<double> lambda = make_section(point(x)).dense();
    Eigen::Map<CeresRowMajor> J(jacobian, tangent_size(), ambient_size());
    J.setZero();
    for_each_coordinate([&](Eigen::Index k, Eigen::Index i, Eigen::Index j, bool in_a) {
      if (in_a) {  // (Y^T dy)(i, j) - (Y^T dy)(j, i), halved: the skew part
        J.row(k).segment(j * N_, N_) = 0.5 * lambda.col(i).transpose();
        J.row(k).segment(i * N_, N_) = -0.5 * lambda.col(j).transpose();
      } else {
        J.row(k).segment(j * N_, N_) = lambda.col(n_ + i).transpose();
      }
    });
  }

  // Each row g of the row-major rows x (N n) matrix is a column-major N x n matrix G, and g J = lift(x, G): the
  // coordinates of Z = lambda^T G. The rows side by side are one N x (n rows) matrix, so one pass of the n reflectors
  // serves all of them: O(N n^2 rows), against O(N^2 n^2 rows) through the Jacobian.
  void right_multiply(const double* x, int rows, const double* ambient, double* tangent) const {
    if (rows == 0) return;
    if constexpr (kSphere) {
      sphere_right_multiply(x, rows, ambient, tangent);
      return;
    }
    const Mat<double> z = make_section(point(x)).apply_transpose(Eigen::Map<const Mat<double>>(ambient, N_, n_ * rows));
    Eigen::Map<CeresRowMajor> out(tangent, rows, tangent_size());
    for (int row = 0; row < rows; ++row) {
      const auto zr = z.middleCols(row * n_, n_);
      Eigen::Index k = 0;
      for (Eigen::Index i = 1; i < n_; ++i)
        for (Eigen::Index j = 0; j < i; ++j) out(row, k++) = zr(i, j) - zr(j, i);
      for (Eigen::Index j = 0; j < n_; ++j)
        for (Eigen::Index i = n_; i < N_; ++i) out(row, k++) = zr(i, j);
    }
  }

  M point(const double* x) const { return M(from_matrix<M>(Eigen::Map<const Mat<double>>(x, N_, n_))); }

 private:
  static constexpr bool kSphere = std::is_same_v<M, Sphere<double>>;

  Eigen::Index skew_size() const noexcept { return n_ * (n_ - 1) / 2; }

  // The sphere's section is one reflector H = I - tau w w^T, w = [1; essential], with H x = |x| e_1, so lambda = H
  // and the general step (a QR of B, a 2 x 2 core, the reflector applied to N x 2 blocks, all allocated) reduces to
  // O(N) arithmetic on vectors: the same numbers to rounding (tests/ceres/manifold_test.cpp compares the two).
  struct SphereFrame {
    CeresVector w;  // w(0) = |x| (unused as such), w.tail = the essential part
    double tau;
  };
  SphereFrame sphere_frame(const double* x) const {
    SphereFrame f{Eigen::Map<const CeresVector>(x, N_), 0.0};
    f.tau = section_reflector(f.w);
    return f;
  }
  // plus(x, delta) = lambda f([0, -delta^T; delta, 0]) e_1 = c0 x / |x| + s1 u with u = lambda [0; delta / a] =
  // H [0; delta / a], a = |delta|: Cayley c0 = (4 - a^2) / (4 + a^2), s1 = 4 a / (4 + a^2); geodesic c0 = cos a,
  // s1 = sin a. The unit direction and the coefficients in terms of 2 / a past a = 2 keep every finite delta finite
  // (a^2 overflows at a = 1e154, and 1 / a^2 times delta underflows).
  void sphere_plus(const double* x, const double* delta, double* out) const {
    const SphereFrame f = sphere_frame(x);
    const Eigen::Index rest = N_ - 1;
    const Eigen::Map<const CeresVector> d(delta, rest);
    const double norm_x = f.w(0), a = d.size() == 0 ? 0.0 : d.stableNorm();
    if (!(norm_x > 0) || !std::isfinite(norm_x))
      throw std::domain_error("CeresManifold<Sphere>::Plus: x has norm " + std::to_string(norm_x));
    double c0 = 1, s1 = 0;
    if (r_ == Retraction::cayley) {
      if (a <= 2) {
        const double t = a * a / 4;
        c0 = (1 - t) / (1 + t);
        s1 = a / (1 + t);
      } else {
        const double u = 2 / a, u2 = u * u;
        c0 = (u2 - 1) / (u2 + 1);
        s1 = 2 * u / (u2 + 1);
      }
    } else {
      c0 = std::cos(a);
      s1 = std::sin(a);
    }
    Eigen::Map<CeresVector> y(out, N_);
    y = (c0 / norm_x) * Eigen::Map<const CeresVector>(x, N_);
    if (a > 0) {
      const CeresVector unit = d / a;
      const double coefficient = f.tau * f.w.tail(rest).dot(unit);  // H [0; e] = [0; e] - tau w (w . [0; e])
      y(0) -= s1 * coefficient;
      y.tail(rest) += s1 * (unit - coefficient * f.w.tail(rest));
    }
  }
  // Row r of the output is (H g_r)(1:) = g_r(1:) - tau (w . g_r) essential.
  void sphere_right_multiply(const double* x, int rows, const double* ambient, double* tangent) const {
    const SphereFrame f = sphere_frame(x);
    const Eigen::Index rest = N_ - 1;
    for (int row = 0; row < rows; ++row) {
      const Eigen::Map<const CeresVector> g(ambient + row * N_, N_);
      const double coefficient = f.tau * (g(0) + f.w.tail(rest).dot(g.tail(rest)));
      Eigen::Map<CeresVector>(tangent + row * rest, rest) = g.tail(rest) - coefficient * f.w.tail(rest);
    }
  }

  // f(k, i, j, in_a) for every coordinate k: A(i, j) (i > j, packed order) or B(i, j) (column-major).
  template <class F>
  void for_each_coordinate(F&& f) const {
    Eigen::Index k = 0;
    for (Eigen::Index i = 1; i < n_; ++i)
      for (Eigen::Index j = 0; j < i; ++j) f(k++, i, j, true);
    for (Eigen::Index j = 0; j < n_; ++j)
      for (Eigen::Index i = 0; i < N_ - n_; ++i) f(k++, i, j, false);
  }

  typename M::Tangent tangent(const double* delta) const {
    Mat<double> a = Mat<double>::Zero(n_, n_);
    Eigen::Index k = 0;
    for (Eigen::Index i = 1; i < n_; ++i)
      for (Eigen::Index j = 0; j < i; ++j, ++k) {
        a(i, j) = delta[k];
        a(j, i) = -delta[k];
      }
    return M::make_tangent(a, Eigen::Map<const Mat<double>>(delta + skew_size(), N_ - n_, n_));
  }

  void write_coordinates(const typename M::Tangent& xi, double* out) const {
    const auto [a, b] = M::blocks(xi);
    Eigen::Index k = 0;
    for (Eigen::Index i = 1; i < n_; ++i)
      for (Eigen::Index j = 0; j < i; ++j) out[k++] = a(i, j);
    Eigen::Map<Mat<double>>(out + k, N_ - n_, n_) = b;
  }

  Eigen::Index N_, n_;
  Retraction r_;
};

// legacy: end

// The scaled symmetric ("svec") coordinates shared by SPD and SymmetricMatrix: coordinate k = i(i+1)/2 + j (i >= j)
// is W(i, i) on the diagonal and sqrt(2) W(i, j) off it, so that delta . delta' = tr(W W').
// f(k, i, j, weight) with weight the dense entry per unit coordinate: 1 on the diagonal, 1/sqrt(2) off it.
template <class F>
void for_each_svec_coordinate(Eigen::Index n, F&& f) {
  Eigen::Index k = 0;
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j <= i; ++j) f(k++, i, j, i == j ? 1.0 : kInvSqrt2);
}

// The row-major (n^2) x n(n+1)/2 Jacobian of W -> F W F^T in svec coordinates (F = I for SymmetricMatrix): column k
// is vec(f_i f_j^T + f_j f_i^T) times its weight (halved on the diagonal, where the two terms coincide).
inline void svec_congruence_jacobian(const Mat<double>& f, double* jacobian) {
  const Eigen::Index n = f.rows();
  Eigen::Map<CeresRowMajor> J(jacobian, n * n, n * (n + 1) / 2);
  for_each_svec_coordinate(n, [&](Eigen::Index k, Eigen::Index i, Eigen::Index j, double w) {
    const double scale = i == j ? 0.5 : w;
    for (Eigen::Index c = 0; c < n; ++c)
      for (Eigen::Index r = 0; r < n; ++r) J(c * n + r, k) = scale * (f(r, i) * f(c, j) + f(r, j) * f(c, i));
  });
}

// legacy: begin (manifolds that do not satisfy geomopt::Manifold yet; CeresManifold takes contract manifolds through
// contract_kernel.hpp)
// SPD(n): the parameter block is the dense n x n matrix, column-major; the tangent coordinates are the svec of the
// whitened tangent W = F^-1 U F^-T at the Cholesky factor F of x (orthonormal for the affine-invariant metric):
//   plus(x, delta)   = F exp(W) F^T (geodesic) or F (I + W + W^2/2) F^T (the second-order retraction)
//   plus_jacobian    : delta -> F W F^T
//   minus_jacobian   : dy -> svec(sym(F^-1 dy F^-T))   (the antisymmetric part of dy maps to 0)
class SPDKernel {
 public:
  SPDKernel(Eigen::Index n, Retraction r) : n_(n), r_(r) {
    if (n < 1) throw std::invalid_argument("CeresManifold<SPD>: need n >= 1, got n = " + std::to_string(n));
    require_square_block_fits("CeresManifold<SPD>", n);
  }

  Eigen::Index n() const noexcept { return n_; }
  Retraction retraction() const noexcept { return r_; }
  int ambient_size() const noexcept { return static_cast<int>(n_ * n_); }
  int tangent_size() const noexcept { return static_cast<int>(n_ * (n_ + 1) / 2); }

  void plus(const double* x, const double* delta, double* out) const {
    SPD<double> p = point(x);
    retract(p, tangent(delta), r_);
    Eigen::Map<Mat<double>>(out, n_, n_) = p.value();
  }
  void minus(const double* y, const double* x, double* out) const {
    const ScaledSymmetricMatrix<double> w =
        inverse_retract(point(x), Mat<double>(Eigen::Map<const Mat<double>>(y, n_, n_)), r_);
    Eigen::Map<CeresVector>(out, tangent_size()) = w.storage();
  }
  void plus_jacobian(const double* x, double* jacobian) const {
    svec_congruence_jacobian(make_section(point(x)).factor(), jacobian);
  }
  // Row k holds the weights of dy in svec(sym(F^-1 dy F^-T))_k: with G = F^-1, G(i, r) G(j, c) symmetrised, times
  // sqrt(2) off the diagonal; that is the transpose of the congruence Jacobian of G^T, with weights 1 and sqrt(2)
  // where the Plus Jacobian has 1 and 1/sqrt(2).
  void minus_jacobian(const double* x, double* jacobian) const {
    const Mat<double> f = make_section(point(x)).factor();
    const Mat<double> g = f.triangularView<Eigen::Lower>().solve(Mat<double>::Identity(n_, n_));
    Eigen::Map<CeresRowMajor> J(jacobian, tangent_size(), ambient_size());
    for_each_svec_coordinate(n_, [&](Eigen::Index k, Eigen::Index i, Eigen::Index j, double) {
      const double scale = i == j ? 0.5 : kInvSqrt2;  // (1/2)(sym) times sqrt(2) = 1/sqrt(2)
      for (Eigen::Index c = 0; c < n_; ++c)
        for (Eigen::Index r = 0; r < n_; ++r) J(k, c * n_ + r) = scale * (g(i, r) * g(j, c) + g(j, r) * g(i, c));
    });
  }
  // g J = svec(F^T sym(G) F) = lift(x, G): O(n^3) per row, against O(n^4) through the Jacobian.
  void right_multiply(const double* x, int rows, const double* ambient, double* tangent) const {
    if (rows == 0) return;
    const SPD<double> p = point(x);
    const SPDSection<double> section = make_section(p);
    Eigen::Map<CeresRowMajor> out(tangent, rows, tangent_size());
    for (int row = 0; row < rows; ++row)
      out.row(row) =
          lift(p, section, Mat<double>(Eigen::Map<const Mat<double>>(ambient + row * ambient_size(), n_, n_)))
              .storage()
              .transpose();
  }

  SPD<double> point(const double* x) const { return SPD<double>(Eigen::Map<const Mat<double>>(x, n_, n_)); }

 private:
  ScaledSymmetricMatrix<double> tangent(const double* delta) const {
    return ScaledSymmetricMatrix<double>::from_storage(Eigen::Map<const CeresVector>(delta, tangent_size()));
  }

  Eigen::Index n_;
  Retraction r_;
};

// legacy: end

// A dense n x n block constrained to be symmetric: a linear subspace, with svec coordinates (orthonormal for the
// Frobenius inner product), so Plus is exact addition and Minus exact subtraction:
//   plus(x, delta)  = sym(x) + W(delta)      minus(y, x) = svec(sym(y - x))      minus_jacobian = plus_jacobian^T
// sym(x) rather than x keeps a block that arrived slightly asymmetric from carrying its asymmetry along.
class SymmetricKernel {
 public:
  explicit SymmetricKernel(Eigen::Index n) : n_(n) {
    if (n < 1) throw std::invalid_argument("CeresManifold<SymmetricMatrix>: need n >= 1, got n = " + std::to_string(n));
    require_square_block_fits("CeresManifold<SymmetricMatrix>", n);
  }

  Eigen::Index n() const noexcept { return n_; }
  int ambient_size() const noexcept { return static_cast<int>(n_ * n_); }
  int tangent_size() const noexcept { return static_cast<int>(n_ * (n_ + 1) / 2); }

  void plus(const double* x, const double* delta, double* out) const {
    const Eigen::Map<const Mat<double>> xm(x, n_, n_);
    const auto w = ScaledSymmetricMatrix<double>::from_storage(Eigen::Map<const CeresVector>(delta, tangent_size()));
    Eigen::Map<Mat<double>>(out, n_, n_) = 0.5 * (xm + xm.transpose()) + w.dense();
  }
  void minus(const double* y, const double* x, double* out) const {
    const Mat<double> d = Eigen::Map<const Mat<double>>(y, n_, n_) - Eigen::Map<const Mat<double>>(x, n_, n_);
    Eigen::Map<CeresVector>(out, tangent_size()) = ScaledSymmetricMatrix<double>::from_dense(d).storage();
  }
  void plus_jacobian(const double*, double* jacobian) const {
    svec_congruence_jacobian(Mat<double>::Identity(n_, n_), jacobian);
  }
  void minus_jacobian(const double*, double* jacobian) const {
    Eigen::Map<CeresRowMajor> J(jacobian, tangent_size(), ambient_size());
    J.setZero();
    for_each_svec_coordinate(n_, [&](Eigen::Index k, Eigen::Index i, Eigen::Index j, double w) {
      J(k, j * n_ + i) += i == j ? 1.0 : w;
      if (i != j) J(k, i * n_ + j) += w;
    });
  }
  void right_multiply(const double*, int rows, const double* ambient, double* tangent) const {
    Eigen::Map<CeresRowMajor> out(tangent, rows, tangent_size());
    for (int row = 0; row < rows; ++row)
      out.row(row) = ScaledSymmetricMatrix<double>::from_dense(
                         Eigen::Map<const Mat<double>>(ambient + row * ambient_size(), n_, n_))
                         .storage()
                         .transpose();
  }

 private:
  Eigen::Index n_;
};

// The kernel of each supported parameter type.
template <class M>
struct CeresKernelOf {
  static_assert(!std::is_same_v<M, Grassmann<typename M::Scalar>>,
                "geomopt::CeresManifold: Grassmann has no Ceres adapter. A Grassmann point is a subspace, its "
                "parameter block one representative of it, and Plus(x, Minus(y, x)) = y cannot hold for every "
                "representative y (docs/ceres.md): use Stiefel<double> with a cost invariant under Y -> Y Q");
  static_assert(std::is_same_v<typename M::Scalar, double>,
                "geomopt::CeresManifold: Ceres works in double; use the manifold over double, e.g. Stiefel<double>");
  static_assert(sizeof(M) == 0,
                "geomopt::CeresManifold: expected Stiefel, Sphere, SpecialOrthogonal, SPD or SymmetricMatrix "
                "over double");
};
// legacy: begin (manifolds that do not satisfy geomopt::Manifold yet; CeresManifold takes contract manifolds through
// contract_kernel.hpp)
template <>
struct CeresKernelOf<Stiefel<double>> {
  using type = StiefelFamilyKernel<Stiefel<double>>;
};
template <>
struct CeresKernelOf<Sphere<double>> {
  using type = StiefelFamilyKernel<Sphere<double>>;
};
template <>
struct CeresKernelOf<SpecialOrthogonal<double>> {
  using type = StiefelFamilyKernel<SpecialOrthogonal<double>>;
};
template <>
struct CeresKernelOf<SPD<double>> {
  using type = SPDKernel;
};
// legacy: end
template <>
struct CeresKernelOf<SymmetricMatrix<double>> {
  using type = SymmetricKernel;
};

// The kernel with the constructors each parameter type takes; CeresManifold and CeresLocalParameterization inherit
// them.
template <class M>
class CeresKernelHolder {
 public:
  using Kernel = typename CeresKernelOf<M>::type;

  // legacy: begin (manifolds that do not satisfy geomopt::Manifold yet; CeresManifold takes contract manifolds through
  // contract_kernel.hpp)
  /// St(N, n).
  CeresKernelHolder(Eigen::Index N, Eigen::Index n,
                    Retraction r = Retraction::cayley) requires std::is_same_v<M, Stiefel<double>> : kernel_(N, n, r) {}
  /// Sphere(N): unit vectors of R^N.
  explicit CeresKernelHolder(Eigen::Index N,
                             Retraction r = Retraction::cayley) requires std::is_same_v<M, Sphere<double>>
      : kernel_(N, 1, r) {}
  /// SO(n).
  explicit CeresKernelHolder(Eigen::Index n,
                             Retraction r = Retraction::cayley) requires std::is_same_v<M, SpecialOrthogonal<double>>
      : kernel_(n, n, r) {}
  /// SPD(n). The default is the exponential map: its inverse, the logarithm, reaches every SPD y; the second-order
  /// retraction's only reaches y > x / 2 (Loewner order), and Ceres calls Minus on whatever points it is given.
  explicit CeresKernelHolder(Eigen::Index n,
                             Retraction r = Retraction::geodesic) requires std::is_same_v<M, SPD<double>>
      : kernel_(n, r) {}
  // legacy: end
  /// A symmetric n x n block.
  explicit CeresKernelHolder(Eigen::Index n) requires std::is_same_v<M, SymmetricMatrix<double>> : kernel_(n) {}

  const Kernel& kernel() const noexcept { return kernel_; }

 protected:
  // Ceres's interfaces return false on failure; geomopt's functions throw (a point that is not positive definite, a
  // target out of the retraction's reach). The exception must not cross Ceres's frames.
  template <class F>
  static bool guarded(F&& f) noexcept {
    try {
      f();
      return true;
    } catch (const std::exception&) {
      return false;
    }
  }

  Kernel kernel_;
};

}  // namespace geomopt::detail
