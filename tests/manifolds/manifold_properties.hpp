// The property suite every manifold of geomopt/manifolds must pass, written once and stamped per manifold and scalar:
//
//   GEOMOPT_MANIFOLD_PROPERTIES(geomopt::Stiefel<double>, manifold_props::sizes(20, 3))
//
// adds ten test cases named "<type> <factory>: <property>". The factory gives a random point of the chosen size:
// sizes(dims...) calls M::random_point(rng, dims...), and any callable F with F(rng) -> M works too.
//
// The ten properties (one test case each): dim and random_point; project and check; retraction stays on the manifold
// (norms 0.1 to 60, both retractions); retraction equals its dense formula; retraction is first order; retract at zero
// and inverse_retract; section overloads agree with the plain ones; sections and their transport; gradient, lift,
// inner and metric; bad input throws std::invalid_argument naming the manifold and the expected shape and changes
// nothing. Two measures are relative for SPD, a cone whose points after a step of norm 60 have entries near e^60:
// check() (absolute by definition; rounding alone puts the smallest eigenvalue of such a point at -1e4) is divided by
// max(1, |y|_F), and the first-order error by max(1, |x|_F).
//
// Every formula is checked against an independent reference: Eigen's dense matrix exponential
// (unsupported/Eigen/MatrixFunctions), dense LU solves and eigendecompositions (tests/support/dense_reference.cpp,
// compiled once for every test file), and closed forms written here of the metrics,
// tangent spaces and dimensions. Tolerances are in Tol<T> below (float looser). Set GEOMOPT_PROPS_REPORT=1 in the
// environment to print every measured error with its tolerance to stderr.
#pragma once

#include <doctest/doctest.h>

#include <Eigen/Dense>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <geomopt/manifolds.hpp>
#include <limits>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "../support/exception_message.hpp"
#include "dense_reference.hpp"

namespace manifold_props {

namespace pt = geomopt::ptree;
using geomopt::Retraction;
using geomopt::Rng;
using geomopt::SectionPolicy;
using MatD = Eigen::MatrixXd;

inline constexpr std::array<Retraction, 2> kRetractions = {Retraction::cayley, Retraction::geodesic};
inline constexpr std::array<SectionPolicy, 2> kPolicies = {SectionPolicy::recomputed, SectionPolicy::transported};

inline std::string name_of(Retraction r) { return r == Retraction::cayley ? "cayley" : "geodesic"; }
inline std::string name_of(SectionPolicy p) { return p == SectionPolicy::recomputed ? "recomputed" : "transported"; }

// ---- tolerances ----

template <class T>
struct Tol;
template <>
struct Tol<double> {
  static constexpr double on_manifold = 1e-12;  // check() of a point the library made (relative for SPD)
  static constexpr double exact = 1e-12;        // two computations equal up to rounding (relative)
  static constexpr double reference = 1e-10;    // against an independent dense reference (relative)
  static constexpr double identity = 1e-14;     // retract(x, 0) - x (relative)
  static constexpr double inverse = 1e-10;      // inverse_retract(x, retract(x, xi)) - xi (absolute, coordinates)
  static constexpr double first_order_t = 1e-7;
  static constexpr double first_order = 1e-6;
  static constexpr double perturbation = 1e-3;
};
template <>
struct Tol<float> {
  static constexpr double on_manifold = 1e-4;
  static constexpr double exact = 1e-5;
  static constexpr double reference = 1e-4;
  static constexpr double identity = 1e-6;
  static constexpr double inverse = 1e-3;
  static constexpr double first_order_t = 1e-3;
  static constexpr double first_order = 5e-3;
  static constexpr double perturbation = 1e-2;
};

// ---- measuring ----

inline bool reporting() {
  static const bool on = std::getenv("GEOMOPT_PROPS_REPORT") != nullptr;
  return on;
}

inline void record(const std::string& label, const std::string& what, double err, double tol) {
  if (reporting()) std::fprintf(stderr, "[props] %s | %s | %.3e | tol %.1e\n", label.c_str(), what.c_str(), err, tol);
}

// CHECKs err <= tol (NaN fails) and records the error. One function, not a macro, so that the many checks of every
// stamped manifold do not each expand doctest's machinery: a failure names the check and its line in its message.
[[gnu::noinline]] inline void check_le(const std::string& label, const std::string& what, double err, double tol,
                                       const char* file, int line) {
  record(label, what, err, tol);
  const std::string where = what + " (" + file + ":" + std::to_string(line) + ")";
  CHECK_MESSAGE(err <= tol, where << ": error " << err << " above tolerance " << tol);
}
#define MPROPS_CHECK_LE(label, what, err, tol) \
  ::manifold_props::check_le(label, what, static_cast<double>(err), static_cast<double>(tol), __FILE__, __LINE__)

template <class V>
MatD dbl(const V& v) {
  return MatD(v.template cast<double>());
}

// ||got - want|| / max(||want||, floor).
inline double rel(const MatD& got, const MatD& want, double floor = 1e-300) {
  if (got.rows() != want.rows() || got.cols() != want.cols()) return std::numeric_limits<double>::infinity();
  return (got - want).norm() / std::max(want.norm(), floor);
}

inline std::string shape_text(Eigen::Index rows, Eigen::Index cols) {
  return std::to_string(rows) + "x" + std::to_string(cols);
}

// The message of the std::invalid_argument f throws, or "" (and a failed CHECK) when it throws nothing or another type.
template <class F>
std::string invalid_argument_message(F&& f) {
  std::optional<std::string> message;
  try {
    message = test_support::message_of<std::invalid_argument>(std::forward<F>(f));
  } catch (...) {
    FAIL_CHECK("threw something other than std::invalid_argument");
    return "";
  }
  if (!message) FAIL_CHECK("threw nothing, expected std::invalid_argument");
  return message.value_or("");
}

// ---- independent dense references ----

// exp(X) (Eigen's Pade scaling and squaring) or the Cayley transform (I - X/2)^-1 (I + X/2) by a dense LU solve.
// (tests/support/dense_reference.cpp, compiled once.)
inline MatD dense_step(const MatD& x, Retraction r) {
  return r == Retraction::geodesic ? reference::expm(x) : reference::cayley(x);
}

inline MatD sym_sqrt(const MatD& m) { return reference::sym_sqrt(m); }

// ---- the factory ----

template <std::size_t K>
struct Sizes {
  std::array<Eigen::Index, K> dims;
  template <class M>
  M make(Rng& rng) const {
    return std::apply([&rng](auto... d) { return M::random_point(rng, d...); }, dims);
  }
};
template <class... I>
Sizes<sizeof...(I)> sizes(I... dims) {
  return Sizes<sizeof...(I)>{{static_cast<Eigen::Index>(dims)...}};
}

template <class M, class F>
M make_point(const F& factory, Rng& rng) {
  if constexpr (std::is_invocable_r_v<M, const F&, Rng&>) {
    return factory(rng);
  } else {
    return factory.template make<M>(rng);
  }
}

// ---- what differs between manifolds, in closed form ----

template <class M>
struct Traits;

template <class T>
struct Traits<geomopt::Stiefel<T>> {
  static constexpr bool spd = false;
  static Eigen::Index closed_dim(Eigen::Index N, Eigen::Index n) { return N * n - n * (n + 1) / 2; }
  // The canonical metric tr(U^T (I - Y Y^T / 2) V).
  static double closed_metric(const MatD& y, const MatD& u, const MatD& v) {
    const MatD proj = MatD::Identity(y.rows(), y.rows()) - 0.5 * y * y.transpose();
    return (u.transpose() * proj * v).trace();
  }
  // T_Y St = {U : Y^T U + U^T Y = 0}.
  static double tangent_defect(const MatD& y, const MatD& u) { return (y.transpose() * u + u.transpose() * y).norm(); }
  static geomopt::Stiefel<T> other_size(const geomopt::Stiefel<T>& x) { return geomopt::Stiefel<T>(x.N() + 1, x.n()); }
  static MatD frame(const geomopt::Stiefel<T>& x) { return dbl(make_section(x).dense()); }
};

template <class T>
struct Traits<geomopt::Grassmann<T>> {
  static constexpr bool spd = false;
  static Eigen::Index closed_dim(Eigen::Index N, Eigen::Index n) { return n * (N - n); }
  static double closed_metric(const MatD&, const MatD& u, const MatD& v) { return (u.transpose() * v).trace(); }
  // Horizontal vectors: Y^T U = 0.
  static double tangent_defect(const MatD& y, const MatD& u) { return (y.transpose() * u).norm(); }
  static geomopt::Grassmann<T> other_size(const geomopt::Grassmann<T>& x) {
    return geomopt::Grassmann<T>(x.N() + 1, x.n());
  }
  static MatD frame(const geomopt::Grassmann<T>& x) { return dbl(make_section(x).dense()); }
};

template <class T>
struct Traits<geomopt::Sphere<T>> {
  static constexpr bool spd = false;
  static Eigen::Index closed_dim(Eigen::Index N, Eigen::Index) { return N - 1; }
  static double closed_metric(const MatD&, const MatD& u, const MatD& v) { return u.col(0).dot(v.col(0)); }
  static double tangent_defect(const MatD& y, const MatD& u) { return std::abs(y.col(0).dot(u.col(0))); }
  static geomopt::Sphere<T> other_size(const geomopt::Sphere<T>& x) { return geomopt::Sphere<T>(x.N() + 1); }
  static MatD frame(const geomopt::Sphere<T>& x) { return dbl(make_section(x).dense()); }
};

template <class T>
struct Traits<geomopt::SpecialOrthogonal<T>> {
  static constexpr bool spd = false;
  static Eigen::Index closed_dim(Eigen::Index, Eigen::Index n) { return n * (n - 1) / 2; }
  static double closed_metric(const MatD&, const MatD& u, const MatD& v) { return 0.5 * (u.transpose() * v).trace(); }
  static double tangent_defect(const MatD& y, const MatD& u) { return (y.transpose() * u + u.transpose() * y).norm(); }
  static geomopt::SpecialOrthogonal<T> other_size(const geomopt::SpecialOrthogonal<T>& x) {
    return geomopt::SpecialOrthogonal<T>(x.n() + 1);
  }
  // The reference for SO(n) is X exp(A): the rotation itself, not the section built from it.
  static MatD frame(const geomopt::SpecialOrthogonal<T>& x) { return dbl(x.value()); }
};

template <class T>
struct Traits<geomopt::SPD<T>> {
  static constexpr bool spd = true;
  static Eigen::Index closed_dim(Eigen::Index, Eigen::Index n) { return n * (n + 1) / 2; }
  // The affine-invariant metric tr(X^-1 U X^-1 V), by dense LU solves.
  static double closed_metric(const MatD& x, const MatD& u, const MatD& v) {
    return (reference::solve(x, u) * reference::solve(x, v)).trace();
  }
  static double tangent_defect(const MatD&, const MatD& u) { return (u - u.transpose()).norm(); }
  static geomopt::SPD<T> other_size(const geomopt::SPD<T>& x) { return geomopt::SPD<T>(x.n() + 1); }
};

template <class M>
MatD value_d(const M& x) {
  return dbl(x.value());
}

// "RxC" of the point's value as a matrix (a sphere point is N x 1).
template <class M>
std::string point_shape(const M& x) {
  const MatD v = value_d(x);
  return shape_text(v.rows(), v.cols());
}

// What the error message of a tangent of the wrong size must say is expected.
template <class M>
std::string tangent_expectation(const M& x) {
  const MatD v = value_d(x);
  if constexpr (Traits<M>::spd) {
    return "expected " + std::to_string(v.rows());
  } else {
    const Eigen::Index N = v.rows(), n = v.cols();
    return "expected A " + shape_text(n, n) + " and B " + shape_text(N - n, n);
  }
}

// check() is absolute; SPD is a cone whose points after a long step have entries of size e^60, so its check is taken
// relative to the size of the point.
template <class M>
double check_scale(const M& y) {
  if constexpr (Traits<M>::spd) {
    return std::max(1.0, value_d(y).norm());
  } else {
    return 1.0;
  }
}

template <class M>
Eigen::Index closed_dim(const M& x) {
  const MatD v = value_d(x);
  return Traits<M>::closed_dim(v.rows(), v.cols());
}

// ---- tangent helpers, through the ptree storage of the tangent ----

template <class L>
Eigen::VectorXd coords(const L& xi) {
  return pt::flatten(xi).template cast<double>();
}

// s xi, scaling the storage blocks in place (not through unflatten or map, which rebuild the leaf: their round trip is
// tested on its own in manifold_jet_test.cpp).
template <class L>
L scaled(L xi, double s) {
  pt::for_each_storage(
      [s](auto& block) {
        using S = typename std::remove_cvref_t<decltype(block)>::Scalar;
        block *= S(s);
      },
      xi);
  return xi;
}

template <class M>
typename M::Tangent tangent_of_norm(const M& x, Rng& rng, double norm) {
  const auto xi = random_tangent(x, rng);
  return scaled(xi, norm / std::sqrt(static_cast<double>(inner(x, xi, xi))));
}

template <class M>
typename M::value_type random_ambient(const M& x, Rng& rng) {
  std::normal_distribution<double> normal;
  typename M::value_type g = x.value();
  for (Eigen::Index i = 0; i < g.size(); ++i) g.data()[i] = typename M::Scalar(normal(rng));
  return g;
}

template <class M>
M retracted(M x, const typename M::Tangent& xi, Retraction r) {
  retract(x, xi, r);
  return x;
}

// SPD: X^(1/2) exp(X^(-1/2) U X^(-1/2)) X^(1/2) (eigendecompositions and Eigen's exponential), or the second-order
// X + U + U X^-1 U / 2 (a dense LU solve), for the ambient tangent U.
inline MatD spd_reference(const MatD& X, const MatD& U, Retraction r) {
  if (r == Retraction::geodesic) return reference::spd_geodesic(X, U);
  return X + U + 0.5 * U * reference::solve(X, U);
}

// The retraction computed densely from the tangent coordinates, independently of the library's kernels.
template <class M>
MatD reference_retraction(const M& x, const typename M::Tangent& xi, Retraction r) {
  if constexpr (Traits<M>::spd) {
    return spd_reference(value_d(x), dbl(to_ambient(x, xi)), r);
  } else {
    const MatD frame = Traits<M>::frame(x);
    const MatD X = dbl(xi.dense());
    const Eigen::Index N = frame.rows(), n = value_d(x).cols();
    return frame * dense_step(X, r) * MatD::Identity(N, n);
  }
}

// ---- the properties ----

// dim(x) is the number of tangent coordinates and the closed form; random_point is deterministic and on the manifold.
template <class M, class F>
void dims_and_random_points(const F& factory, const std::string& label) {
  using T = typename M::Scalar;
  Rng rng(101);
  const M x = make_point<M>(factory, rng);
  CHECK(dim(x) == closed_dim(x));
  const auto xi = random_tangent(x, rng);
  CHECK(pt::flatten(xi).size() == dim(x));
  CHECK(pt::count(xi) == dim(x));

  Rng a(7), b(7), c(8);
  const M p = make_point<M>(factory, a), q = make_point<M>(factory, b), other = make_point<M>(factory, c);
  CHECK(p.value() == q.value());
  CHECK(p.value() != other.value());
  MPROPS_CHECK_LE(label, "check(random_point)", check(p), Tol<T>::on_manifold);
  MPROPS_CHECK_LE(label, "check(random_point), other seed", check(other), Tol<T>::on_manifold);
  // random_tangent is deterministic too, and dim() coordinates long.
  Rng d(9), e(9);
  CHECK(coords(random_tangent(p, d)) == coords(random_tangent(p, e)));
}

// project() repairs a perturbed point to the nearest point, leaves a point on the manifold in place, and check()
// sees a perturbation and measures a scaled point exactly.
template <class M, class F>
void project_and_check(const F& factory, const std::string& label) {
  using T = typename M::Scalar;
  Rng rng(202);
  const M x = make_point<M>(factory, rng);
  const MatD x0 = value_d(x);

  // On the manifold: project changes nothing beyond rounding; the const overload returns a copy.
  const M& cx = x;
  const M px = project(cx);
  CHECK(value_d(x) == x0);
  MPROPS_CHECK_LE(label, "project(on-manifold point) - point", rel(value_d(px), x0), Tol<T>::exact);

  // Perturbed: check sees it, project repairs it, in place, and the result is at least as near as x is.
  M p = x;
  const auto noise = random_ambient(x, rng);
  p.value() += T(Tol<T>::perturbation) * noise;
  const MatD perturbed = value_d(p);
  const double before = static_cast<double>(check(p));
  CHECK_MESSAGE(before > 0.1 * Tol<T>::perturbation, "check missed a perturbation: " << before);
  M& same = project(p);
  CHECK(&same == &p);
  MPROPS_CHECK_LE(label, "check(project(perturbed))", check(p) / check_scale(p), Tol<T>::on_manifold);
  const double dist_projected = (value_d(p) - perturbed).norm(), dist_original = (x0 - perturbed).norm();
  CHECK_MESSAGE(dist_projected <= dist_original * (1 + 1e-6),
                "project is not the nearest point: " << dist_projected << " > " << dist_original);

  // check() of 2x: ||4 I - I||_F = 3 sqrt(n) for the Stiefel family; 2X is still positive definite.
  M twice = x;
  twice.value() *= T(2);
  const double expected = Traits<M>::spd ? 0.0 : 3.0 * std::sqrt(static_cast<double>(x0.cols()));
  MPROPS_CHECK_LE(label, "check(2 x) - closed form", std::abs(static_cast<double>(check(twice)) - expected),
                  Tol<T>::exact * std::max(1.0, expected) * 10);
  if constexpr (Traits<M>::spd) {
    // A negative eigenvalue -1: check is the distance of the smallest eigenvalue below zero, 1.
    M indefinite = x;
    const double lowest = Eigen::SelfAdjointEigenSolver<MatD>(x0).eigenvalues()[0];
    indefinite.value().diagonal().array() -= T(lowest + 1);
    MPROPS_CHECK_LE(label, "check(SPD with eigenvalue -1) - 1", std::abs(static_cast<double>(check(indefinite)) - 1),
                    Tol<T>::exact * 10 * std::max(1.0, x0.norm()));
  }
}

// One case of for_retractions: the retraction, the tangent's norm, and both named for the messages.
struct RetractionCase {
  Retraction r;
  double norm;
  std::string where;
};

// f(x, xi, y, case) at a point x made from `seed`, for both retractions, each norm of 0.1, 1, 10 and 60, and `trials`
// random tangents xi of that norm, with y = retract(x, xi).
template <class M, class F, class G>
void for_retractions(const F& factory, std::uint64_t seed, int trials, const G& f) {
  Rng rng(seed);
  const M x = make_point<M>(factory, rng);
  for (const Retraction r : kRetractions) {
    for (const double norm : {0.1, 1.0, 10.0, 60.0}) {
      for (int trial = 0; trial < trials; ++trial) {
        CAPTURE(name_of(r));
        CAPTURE(norm);
        const auto xi = tangent_of_norm(x, rng, norm);
        const M y = retracted(x, xi, r);
        f(x, xi, y, RetractionCase{r, norm, std::string(name_of(r)) + " norm " + std::to_string(norm)});
      }
    }
  }
}

// check(retract(x, xi)) is zero to rounding for lifts of norm 0.1, 1, 10 and 60, both retractions.
template <class M, class F>
void retraction_stays_on_manifold(const F& factory, const std::string& label) {
  using T = typename M::Scalar;
  for_retractions<M>(factory, 303, 3, [&](const M& x, const auto& xi, const M& y, const RetractionCase& c) {
    MPROPS_CHECK_LE(label, "inner(xi, xi) - norm^2", std::abs(static_cast<double>(inner(x, xi, xi)) - c.norm * c.norm),
                    Tol<T>::exact * 10 * c.norm * c.norm);
    MPROPS_CHECK_LE(label, "check(retract) " + c.where, check(y) / check_scale(y), Tol<T>::on_manifold);
  });
}

// The retraction equals its dense formula: Stiefel family lambda f(X) [I; 0] (X exp(A) for SO(n)), f the dense
// exponential or the Cayley transform; SPD X^(1/2) exp(X^(-1/2) U X^(-1/2)) X^(1/2) and X + U + U X^-1 U / 2.
template <class M, class F>
void retraction_matches_reference(const F& factory, const std::string& label) {
  for_retractions<M>(factory, 404, 2, [&](const M& x, const auto& xi, const M& y, const RetractionCase& c) {
    MPROPS_CHECK_LE(label, "retract vs dense reference " + c.where, rel(value_d(y), reference_retraction(x, xi, c.r)),
                    Tol<typename M::Scalar>::reference);
  });
}

// (retract(x, t xi) - x) / t = to_ambient(x, xi) + O(t), for a unit xi (SPD: relative to the size of x).
template <class M, class F>
void retraction_first_order(const F& factory, const std::string& label) {
  using T = typename M::Scalar;
  Rng rng(505);
  const M x = make_point<M>(factory, rng);
  const double t = Tol<T>::first_order_t;
  for (const Retraction r : kRetractions) {
    for (int trial = 0; trial < 3; ++trial) {
      CAPTURE(name_of(r));
      const auto xi = tangent_of_norm(x, rng, 1.0);
      const M y = retracted(x, scaled(xi, t), r);
      const MatD difference = (value_d(y) - value_d(x)) / t;
      const double err = (difference - dbl(to_ambient(x, xi))).norm() / check_scale(x);
      MPROPS_CHECK_LE(label, std::string("first order ") + name_of(r), err, Tol<T>::first_order);
    }
  }
}

// retract(x, 0) = x, and inverse_retract undoes retract for ||xi|| in {1e-3, 0.1, 0.5, 1}.
template <class M, class F>
void retraction_identity_and_inverse(const F& factory, const std::string& label) {
  using T = typename M::Scalar;
  Rng rng(606);
  const M x = make_point<M>(factory, rng);
  const auto zero = scaled(random_tangent(x, rng), 0.0);
  for (const Retraction r : kRetractions) {
    CAPTURE(name_of(r));
    MPROPS_CHECK_LE(label, std::string("retract(x, 0) - x ") + name_of(r),
                    rel(value_d(retracted(x, zero, r)), value_d(x)), Tol<T>::identity);
    CHECK(coords(inverse_retract(x, x.value(), r)).norm() <= Tol<T>::inverse);
    for (const double norm : {1e-3, 0.1, 0.5, 1.0}) {
      for (int trial = 0; trial < 3; ++trial) {
        CAPTURE(norm);
        const auto xi = tangent_of_norm(x, rng, norm);
        const M y = retracted(x, xi, r);
        const double err = (coords(inverse_retract(x, y.value(), r)) - coords(xi)).norm();
        MPROPS_CHECK_LE(
            label, std::string("inverse_retract(retract(xi)) - xi ") + name_of(r) + " norm " + std::to_string(norm),
            err, Tol<T>::inverse);
        // The target may be given as a point, as a tree of points would hand it.
        CHECK(coords(inverse_retract(x, y, r)) == coords(inverse_retract(x, y.value(), r)));
      }
    }
  }
}

// Every overload taking a section made at x agrees with the one that makes its own, for both policies.
template <class M, class F>
void section_overloads_agree(const F& factory, const std::string& label) {
  using T = typename M::Scalar;
  Rng rng(707);
  const M x = make_point<M>(factory, rng);
  const auto g = random_ambient(x, rng);
  for (const SectionPolicy policy : kPolicies) {
    CAPTURE(name_of(policy));
    const auto section = make_section(x, policy);
    CHECK(section.policy() == policy);
    MPROPS_CHECK_LE(label, "lift(x, section, g) - lift(x, g)", rel(coords(lift(x, section, g)), coords(lift(x, g))),
                    Tol<T>::exact);
    const auto xi = tangent_of_norm(x, rng, 0.7);
    MPROPS_CHECK_LE(label, "to_ambient(x, section, xi) - to_ambient(x, xi)",
                    rel(dbl(to_ambient(x, section, xi)), dbl(to_ambient(x, xi))), Tol<T>::exact);
    for (const Retraction r : kRetractions) {
      CAPTURE(name_of(r));
      M y = x;
      auto moved = section;
      retract(y, moved, xi, r);
      const M plain = retracted(x, xi, r);
      MPROPS_CHECK_LE(label, "retract(x, section, xi) - retract(x, xi)", rel(value_d(y), value_d(plain)),
                      Tol<T>::exact);
      MPROPS_CHECK_LE(
          label, "inverse_retract(x, section, y) - inverse_retract(x, y)",
          rel(coords(inverse_retract(x, section, plain.value(), r)), coords(inverse_retract(x, plain.value(), r))),
          Tol<T>::exact);
    }
  }
}

// After a walk with a transported section, the coordinates still mean what they say: the section's tangent vectors
// are isometric, lift inverts to_ambient on gradients, and inverse_retract in the section undoes retract in it.
template <class M>
void coordinates_consistent_in_section(const M& x, const auto& section, Rng& rng, const std::string& label) {
  using T = typename M::Scalar;
  const auto xi = tangent_of_norm(x, rng, 0.6), eta = tangent_of_norm(x, rng, 0.8);
  const double in = static_cast<double>(inner(x, xi, eta));
  const double met = static_cast<double>(metric(x, to_ambient(x, section, xi), to_ambient(x, section, eta)));
  MPROPS_CHECK_LE(label, "walked section: metric(to_ambient xi, to_ambient eta) - inner", std::abs(met - in),
                  Tol<T>::exact * 10);
  const auto g = random_ambient(x, rng);
  MPROPS_CHECK_LE(label, "walked section: to_ambient(lift(g)) - riemannian_gradient(g)",
                  rel(dbl(to_ambient(x, section, lift(x, section, g))), dbl(riemannian_gradient(x, g))),
                  Tol<T>::exact * 10);
  for (const Retraction r : kRetractions) {
    M y = x;
    auto moved = section;
    retract(y, moved, xi, r);
    MPROPS_CHECK_LE(label, std::string("walked section: inverse_retract(retract(xi)) - xi ") + name_of(r),
                    (coords(inverse_retract(x, section, y.value(), r)) - coords(xi)).norm(), Tol<T>::inverse);
  }
}

// The walk both kinds of section are checked on. For each policy, a fresh section of x0, checked by fresh(section);
// then for each policy, six steps from x0 alternating the retractions, each checked by the callable that
// before_step(x, section, xi, r) returns (it records what the step must give), called after the step as
// check(x, section, policy); last, the walked section's coordinates.
template <class M>
void walk_sections(const M& x0, Rng& rng, const std::string& label, const auto& fresh, const auto& before_step) {
  for (const SectionPolicy policy : kPolicies) {
    CAPTURE(name_of(policy));
    const auto section = make_section(x0, policy);
    fresh(section);
  }
  for (const SectionPolicy policy : kPolicies) {
    CAPTURE(name_of(policy));
    M x = x0;
    auto section = make_section(x, policy);
    for (int step = 0; step < 6; ++step) {
      const Retraction r = kRetractions[static_cast<std::size_t>(step % 2)];
      CAPTURE(step);
      CAPTURE(name_of(r));
      const auto xi = tangent_of_norm(x, rng, 1.0);
      const auto check = before_step(x, section, xi, r);
      retract(x, section, xi, r);
      check(x, section, policy);
    }
    coordinates_consistent_in_section(x, section, rng, label);
  }
}

// Sections: lambda(Y) [I; 0] = Y and lambda orthogonal (SPD: F F^T = X) for both policies; a transported section
// moves by the dense step factor, lambda_new = lambda_old f(X) (SPD: F_new = F_old exp(W/2), or F_old M^(1/2));
// a recomputed section equals the section made at the new point.
template <class M, class F>
void sections_and_transport(const F& factory, const std::string& label) {
  using T = typename M::Scalar;
  Rng rng(808);
  const M x0 = make_point<M>(factory, rng);
  const double exact = Tol<T>::exact;

  if constexpr (Traits<M>::spd) {
    const auto fresh = [&](const auto& section) {
      const MatD f = dbl(section.factor());
      MPROPS_CHECK_LE(label, "F F^T - X", rel(f * f.transpose(), value_d(x0)), exact);
    };
    const auto before_step = [&](const M& x, const auto& section, const auto& xi, Retraction r) {
      const MatD f_old = dbl(section.factor());
      const MatD expected_point = spd_reference(value_d(x), dbl(to_ambient(x, section, xi)), r);
      const MatD w = dbl(xi.dense());
      return [&, r, f_old, expected_point, w](const M& x_new, const auto& section_new, SectionPolicy policy) {
        const MatD f = dbl(section_new.factor());
        MPROPS_CHECK_LE(label, std::string("section step: x - dense reference ") + name_of(policy),
                        rel(value_d(x_new), expected_point), Tol<T>::reference);
        MPROPS_CHECK_LE(label, std::string("section step: F F^T - X ") + name_of(policy),
                        rel(f * f.transpose(), value_d(x_new)), exact * 10);
        if (policy == SectionPolicy::transported) {
          const MatD id = MatD::Identity(w.rows(), w.cols());
          const MatD factor = r == Retraction::geodesic ? reference::expm(0.5 * w) : sym_sqrt(id + w + 0.5 * w * w);
          MPROPS_CHECK_LE(label, std::string("transported F_new - F_old f(W)^(1/2) ") + name_of(r),
                          rel(f, f_old * factor), Tol<T>::reference);
        } else {
          MPROPS_CHECK_LE(label, "recomputed F - cholesky(X_new)",
                          rel(f, MatD(Eigen::LLT<MatD>(value_d(x_new)).matrixL())), exact * 10);
        }
      };
    };
    walk_sections(x0, rng, label, fresh, before_step);
  } else {
    const Eigen::Index N = value_d(x0).rows(), n = value_d(x0).cols();
    const MatD idN = MatD::Identity(N, N);
    const auto fresh = [&](const auto& section) {
      const MatD lambda = dbl(section.dense());
      MPROPS_CHECK_LE(label, "lambda [I; 0] - Y", (lambda.leftCols(n) - value_d(x0)).norm(), exact);
      MPROPS_CHECK_LE(label, "section.Y() - Y", (dbl(section.Y()) - value_d(x0)).norm(), exact);
      MPROPS_CHECK_LE(label, "lambda^T lambda - I", (lambda.transpose() * lambda - idN).norm(), exact);
    };
    const auto before_step = [&](const M&, const auto& section, const auto& xi, Retraction r) {
      const MatD lambda_old = dbl(section.dense());
      const MatD step_factor = dense_step(dbl(xi.dense()), r);
      return [&, r, lambda_old, step_factor](const M& x, const auto& section_new, SectionPolicy policy) {
        const MatD lambda = dbl(section_new.dense());
        MPROPS_CHECK_LE(label, std::string("section step: section.Y() - x ") + name_of(policy),
                        (dbl(section_new.Y()) - value_d(x)).norm(), exact);
        MPROPS_CHECK_LE(label, std::string("section step: lambda^T lambda - I ") + name_of(policy),
                        (lambda.transpose() * lambda - idN).norm(), exact);
        MPROPS_CHECK_LE(label, std::string("section step: x - lambda_old f(X) [I; 0] ") + name_of(policy),
                        rel(value_d(x), lambda_old * step_factor * MatD::Identity(N, n)), Tol<T>::reference);
        if (policy == SectionPolicy::transported) {
          MPROPS_CHECK_LE(label, std::string("transported lambda_new - lambda_old f(X) ") + name_of(r),
                          rel(lambda, lambda_old * step_factor), Tol<T>::reference);
        } else {
          MPROPS_CHECK_LE(label, "recomputed lambda - GlobalSection(new point)",
                          rel(lambda, dbl(geomopt::GlobalSection<T>(value_d(x).template cast<T>()).dense())), exact);
        }
      };
    };
    walk_sections(x0, rng, label, fresh, before_step);
  }
}

// lift, riemannian_gradient, inner and metric: the gradient is tangent and represents the Euclidean gradient in the
// metric (the defining property), lift is its coordinate form, inner is the metric of the ambient vectors and the
// dot product of the coordinates, and metric is its closed form.
template <class M, class F>
void gradient_inner_metric(const F& factory, const std::string& label) {
  using T = typename M::Scalar;
  Rng rng(909);
  const M x = make_point<M>(factory, rng);
  const MatD y = value_d(x);
  const double exact = Tol<T>::exact;
  for (int trial = 0; trial < 3; ++trial) {
    const auto g = random_ambient(x, rng);
    const MatD gd = dbl(g);
    const auto grad = riemannian_gradient(x, g);
    const MatD gradd = dbl(grad);
    MPROPS_CHECK_LE(label, "to_ambient(lift(g)) - riemannian_gradient(g)", rel(dbl(to_ambient(x, lift(x, g))), gradd),
                    exact);
    // A gradient given as a point (a tree of gradients has the type of the tree of points) means the same.
    CHECK(dbl(riemannian_gradient(x, M(g))) == gradd);
    MPROPS_CHECK_LE(label, "riemannian_gradient is tangent", Traits<M>::tangent_defect(y, gradd) / gradd.norm(), exact);

    const auto lifted = lift(x, g);
    for (int k = 0; k < 3; ++k) {
      const auto eta = tangent_of_norm(x, rng, 1.0);
      const MatD v = dbl(to_ambient(x, eta));
      MPROPS_CHECK_LE(label, "to_ambient(random tangent) is tangent", Traits<M>::tangent_defect(y, v) / v.norm(),
                      exact);
      const double euclid = (gd.transpose() * v).trace();
      const double scale = gd.norm() * v.norm();
      MPROPS_CHECK_LE(label, "metric(grad, V) - <g, V>_F",
                      std::abs(static_cast<double>(metric(x, grad, to_ambient(x, eta))) - euclid) / scale, exact * 10);
      MPROPS_CHECK_LE(label, "inner(lift(g), eta) - <g, to_ambient(eta)>_F",
                      std::abs(static_cast<double>(inner(x, lifted, eta)) - euclid) / scale, exact * 10);
    }
  }
  for (int trial = 0; trial < 3; ++trial) {
    const auto xi = tangent_of_norm(x, rng, 1.3), eta = tangent_of_norm(x, rng, 0.4);
    const auto u = to_ambient(x, xi), v = to_ambient(x, eta);
    const double in = static_cast<double>(inner(x, xi, eta));
    const double scale = 1.3 * 0.4;
    MPROPS_CHECK_LE(label, "inner - metric(to_ambient, to_ambient)",
                    std::abs(static_cast<double>(metric(x, u, v)) - in) / scale, exact);
    MPROPS_CHECK_LE(label, "inner - dot of flattened coordinates", std::abs(coords(xi).dot(coords(eta)) - in) / scale,
                    exact);
    MPROPS_CHECK_LE(
        label, "metric - closed form",
        std::abs(static_cast<double>(metric(x, u, v)) - Traits<M>::closed_metric(y, dbl(u), dbl(v))) / scale, exact);
    MPROPS_CHECK_LE(label, "inner(xi, xi) - squared norm of coords",
                    std::abs(static_cast<double>(inner(x, xi, xi)) - coords(xi).squaredNorm()) / (1.3 * 1.3), exact);
  }
}

// Shape mismatches throw std::invalid_argument naming the manifold and the expected shape, and leave x (and the
// section) unchanged.
template <class M, class F>
void bad_input(const F& factory, const std::string& /*label*/) {
  Rng rng(1010);
  M x = make_point<M>(factory, rng);
  const MatD saved = value_d(x);
  const std::string name = M::kName, shape = point_shape(x), expectation = tangent_expectation(x);
  const auto check_message = [&](const std::string& message, const std::string& expected) {
    CAPTURE(message);
    CHECK(message.find(name) != std::string::npos);
    CHECK(message.find(expected) != std::string::npos);
  };

  // Ambient arguments of the wrong shape.
  const typename M::Matrix wrong = M::Matrix::Ones(saved.rows() + 1, saved.cols());
  check_message(invalid_argument_message([&] { (void)riemannian_gradient(x, wrong); }), shape);
  check_message(invalid_argument_message([&] { (void)lift(x, wrong); }), shape);
  check_message(invalid_argument_message([&] { (void)metric(x, wrong, wrong); }), shape);
  check_message(invalid_argument_message([&] { (void)inverse_retract(x, wrong, Retraction::cayley); }), shape);
  check_message(invalid_argument_message([&] { (void)inverse_retract(x, wrong, Retraction::geodesic); }), shape);

  // A tangent vector and a section of a point of another size.
  const M other = Traits<M>::other_size(x);
  const auto wrong_tangent = scaled(random_tangent(other, rng), 0.0);
  for (const Retraction r : kRetractions) {
    check_message(invalid_argument_message([&] { retract(x, wrong_tangent, r); }), expectation);
    CHECK(value_d(x) == saved);
  }
  check_message(invalid_argument_message([&] { (void)to_ambient(x, wrong_tangent); }), expectation);
  check_message(invalid_argument_message([&] { (void)inner(x, wrong_tangent, wrong_tangent); }), expectation);

  const auto xi = tangent_of_norm(x, rng, 0.5);
  const auto g = random_ambient(x, rng);
  for (const SectionPolicy policy : kPolicies) {
    auto wrong_section = make_section(other, policy);
    const auto section_before = wrong_section;
    for (const Retraction r : kRetractions) {
      check_message(invalid_argument_message([&] { retract(x, wrong_section, xi, r); }), shape);
      CHECK(value_d(x) == saved);
      if constexpr (Traits<M>::spd) {
        CHECK(wrong_section.factor() == section_before.factor());
      } else {
        CHECK(wrong_section.dense() == section_before.dense());
      }
      check_message(invalid_argument_message([&] { (void)inverse_retract(x, wrong_section, x.value(), r); }), shape);
    }
    check_message(invalid_argument_message([&] { (void)lift(x, wrong_section, g); }), shape);
    check_message(invalid_argument_message([&] { (void)to_ambient(x, wrong_section, xi); }), shape);
    // A right section with a wrong tangent: nothing moves either.
    auto right_section = make_section(x, policy);
    const auto right_before = right_section;
    check_message(invalid_argument_message([&] { retract(x, right_section, wrong_tangent, Retraction::geodesic); }),
                  expectation);
    CHECK(value_d(x) == saved);
    if constexpr (Traits<M>::spd) {
      CHECK(right_section.factor() == right_before.factor());
    } else {
      CHECK(right_section.dense() == right_before.dense());
    }
  }
}

}  // namespace manifold_props

#define GEOMOPT_MP_CAT2(a, b) a##b
#define GEOMOPT_MP_CAT(a, b) GEOMOPT_MP_CAT2(a, b)

// GEOMOPT_MANIFOLD_PROPERTIES(M, factory): the whole suite for the manifold point type M, on points the factory makes.
// The test names are "<M> <factory>: <property>" (so the factory's text must not contain ';').
#define GEOMOPT_MANIFOLD_PROPERTIES(M, ...) \
  GEOMOPT_MP_STAMP(M, GEOMOPT_MP_CAT(geomopt_mp_factory_, __LINE__), #M " " #__VA_ARGS__, __VA_ARGS__)

#define GEOMOPT_MP_STAMP(M, F, LABEL, ...)                                                                        \
  namespace {                                                                                                     \
  const auto F = (__VA_ARGS__);                                                                                   \
  }                                                                                                               \
  TEST_CASE(LABEL ": dim, random_point and check") { ::manifold_props::dims_and_random_points<M>(F, LABEL); }     \
  TEST_CASE(LABEL ": project and check off the manifold") { ::manifold_props::project_and_check<M>(F, LABEL); }   \
  TEST_CASE(LABEL ": retraction stays on the manifold") {                                                         \
    ::manifold_props::retraction_stays_on_manifold<M>(F, LABEL);                                                  \
  }                                                                                                               \
  TEST_CASE(LABEL ": retraction equals the dense reference") {                                                    \
    ::manifold_props::retraction_matches_reference<M>(F, LABEL);                                                  \
  }                                                                                                               \
  TEST_CASE(LABEL ": retraction is first order") { ::manifold_props::retraction_first_order<M>(F, LABEL); }       \
  TEST_CASE(LABEL ": retract at zero and inverse_retract") {                                                      \
    ::manifold_props::retraction_identity_and_inverse<M>(F, LABEL);                                               \
  }                                                                                                               \
  TEST_CASE(LABEL ": section overloads agree with the plain ones") {                                              \
    ::manifold_props::section_overloads_agree<M>(F, LABEL);                                                       \
  }                                                                                                               \
  TEST_CASE(LABEL ": sections and their transport") { ::manifold_props::sections_and_transport<M>(F, LABEL); }    \
  TEST_CASE(LABEL ": gradient, lift, inner and metric") { ::manifold_props::gradient_inner_metric<M>(F, LABEL); } \
  TEST_CASE(LABEL ": bad input throws and changes nothing") { ::manifold_props::bad_input<M>(F, LABEL); }
