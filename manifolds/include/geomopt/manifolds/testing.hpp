// The property suite of the manifold contract: one call measures, on any type satisfying geomopt::Manifold
// (contract.hpp), every invariant the contract states, through M::Workspace and M's static functions alone, and
// returns each property with its measured figure and the bound it must not exceed. It needs no test framework:
//
//   const geomopt::testing::Report report = geomopt::testing::check_manifold(x);   // x: a point, its shape and base
//   if (!report.ok()) std::fputs(report.str().c_str(), stderr);                    // one line per failed property
//
// A failed line reads "Stiefel<float> 8x3 first_order (cayley, recomputed): |d(t) - 4 d(t/2)| / (t |u|) = 0.01 >
// 0.0031 at t = 0.0098": the manifold, its scalar and shape, the property, the retraction and section policy, the
// measure, its worst value over the random trials, the bound, and where the worst was met.
//
// The properties (eps is the epsilon of the scalar, of its value part for a ceres::Jet; |.| the Frobenius norm; a
// tolerance named in Options is a factor of the unit given here; each property runs for every retraction and both
// section policies unless said otherwise):
//   zero_retraction       |R_x(0) - x| / max(1, |x|)                          <= exact * eps
//   stays_on_manifold     check(R_x(c)) / max(1, |R_x(c)|), |c| in norms       <= on_manifold * eps
//                         (relative: check() is absolute, and on a cone such as SPD a step of norm 60 reaches
//                         entries near e^60, where rounding alone is that large)
//   first_order           d(t) = R_x(tc) - x - t u with u = to_ambient(x, c), |c| = 1: d(t) - 4 d(t/2) = -t a + O(t^3)
//                         isolates the first-order defect a, so |d(t) - 4 d(t/2)| / (t |u|) <= first_order *
//                         eps^(2/3), at t = 2 eps^(1/3) (where the O(t^2) truncation and the eps / t rounding
//                         balance). A retraction off by a factor 1 + s measures s.
//   tangent_round_trip    coordinates_of(tangent_from(x, c)) = c                <= exact * eps, relative
//   shape_errors          Workspace(rows', cols', ...) for a shape that is not a point of M throws
//                         std::invalid_argument whose message names M::kName (at least one of the shapes tried must
//                         be rejected), and M::tangent_size(rows', cols') agrees: it throws the same way for every
//                         shape the workspace rejects and returns the workspace's tangent_size() for every other
//                         shape, x's own included
//   The properties above need only retract, to_ambient, check and the statics, and run for every scalar,
//   ceres::Jet included; those below run for float, double and long double:
//   random_point          check(y) / max(1, |y|) <= on_manifold * eps; the same seed gives the same point
//   project               project(x) = x and project(project(z)) = project(z), relative, <= on_manifold * eps, and
//                         check(project(z)) <= on_manifold * eps for z a random ambient perturbation of x
//                         (one policy: project does not depend on the section)
//   adjointness           |<G, to_ambient(x, c)> - lift(x, G) . c| / (|G| |to_ambient(x, c)|)
//                         <= exact * eps * sqrt(rows cols): lift is the transpose of to_ambient
//   gradient              for the smooth cost f(Y) = <A, Y> + <B o Y, Y> / 2 with Euclidean gradient G, the central
//                         difference of f(R_x(tc)) at t = eps^(1/3) against lift(x, G) . c, divided by |G| |u|,
//                         <= gradient * eps^(2/3)
//   inverse_round_trip    for y = R_x(c): |inverse_retract(x, y) - c| / max(1, |c|) <= inverse * eps while |c| <=
//                         near_norm (a std::domain_error there fails); beyond, inverse_retract may throw
//                         std::domain_error or return a preimage c' of y that it gives back (or refuses, R_x(c')
//                         being as far): |inverse_retract(x, R_x(c')) - c'| / max(1, |c'|) <= inverse * eps
//                         max(1, |c'|) (coordinates, not points: on a quotient such as Grassmann R_x(c') is another
//                         representative of y)
//   inverse_derivative    D = (inverse_retract(x, x + hG) - inverse_retract(x, x - hG)) / 2h at h = eps^(1/3) for a
//                         random ambient G is the Frobenius left inverse of to_ambient applied to G (it annihilates
//                         directions normal to M): |lift(x, to_ambient(x, D)) - lift(x, G)| / |lift(x, G)|
//                         <= gradient * eps^(2/3)
//   domain_error          every std::domain_error of inverse_retract (for the far points above, -x and a point of
//                         NaNs) leaves its output untouched, a NaN target gives a domain_error or non-finite
//                         coordinates, and no other exception type escapes: the figure counts the violations
//   forget_point          after a lift at another point, forget_point() and retract from x give R_x(c)
//                         (recomputed policy), relative, <= exact * eps
//   section_consistency   a walk of steps of norm 1, the same Euclidean gradients lifted under both policies: the
//                         coordinates have the same norm and the same ambient vector (both sections are orthonormal
//                         for one metric), and the two walks reach the same points, relative, <= on_manifold * eps
//   allocations           lift, to_ambient and retract on a workspace made before allocate nothing (count <= 0),
//                         when a counter is installed (allocation_counter below), else reported as skipped
// The suite calls a workspace as an optimizer does: lift at x (which builds a recomputed section there) before
// to_ambient and retract from x; a transported workspace is made with y0 = x for each trial, since its section moves
// with every retraction.
//
// Counting allocations is the program's business, not this header's: a header cannot replace the global operator
// new without replacing it for every program that includes it, and a program may already replace it. A test program
// that counts sets geomopt::testing::allocation_counter to a function returning the number of allocations so far; the
// suite reads it before and after the calls it measures. Eigen allocates through malloc, not operator new: a program
// that counts at malloc (a replacement of glibc's malloc, or a sanitizer's allocation hook) sees its allocations with
// the rest. One that counts only its operator new can still catch Eigen's: where the including file defines
// EIGEN_RUNTIME_NO_MALLOC, the suite forbids Eigen's heap during those calls, and an eigen_assert that records
// instead of aborting counts them.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "geomopt/manifolds/contract.hpp"

namespace geomopt::testing {

/// The number of allocations the program has made so far, or null (the default) when it does not count them. See
/// the header comment: set by a program that replaces the global operator new.
inline long (*allocation_counter)() = nullptr;

/// What check_manifold measures and how strictly. Tolerances are factors of the units given in the header comment.
/// IsValid keeps Ceres's name, as the solvers' options do.
struct Options {
  std::uint64_t seed = 20;              ///< of the random directions, gradients and costs
  int directions = 3;                   ///< random trials per property, retraction, policy and norm
  std::vector<Retraction> retractions;  ///< the retractions to check; empty: all of M::kRetractions
  std::vector<SectionPolicy> policies = {SectionPolicy::recomputed, SectionPolicy::transported};
  std::vector<double> norms = {0.1, 1.0, 10.0, 60.0};  ///< of the steps checked to stay on the manifold
  double near_norm = 1.0;                              ///< inverse_retract must succeed up to this step norm
  double exact = 64;                                   ///< x eps: the same value computed two ways
  double on_manifold = 4096;                           ///< x eps: check() and points reached two ways
  double first_order = 128;                            ///< x eps^(2/3): the first-order defect of a retraction
  double gradient = 256;          ///< x eps^(2/3): central differences of a cost and of inverse_retract
  double inverse = 16384;         ///< x eps: inverse_retract(x, R_x(c)) - c
  bool check_allocations = true;  ///< measure the allocations property when allocation_counter is set
  int walk_steps = 4;             ///< steps of the section_consistency walk

  bool IsValid(std::string* error) const {
    const auto fail = [error](const char* what) {
      if (error != nullptr) *error = what;
      return false;
    };
    if (directions < 1) return fail("directions must be at least 1");
    if (walk_steps < 0) return fail("walk_steps must not be negative");
    if (policies.empty()) return fail("policies must not be empty");
    for (const double n : norms)
      if (!(n > 0) || !std::isfinite(n)) return fail("norms must be positive and finite");
    if (!(near_norm >= 0)) return fail("near_norm must not be negative");
    for (const double f : {exact, on_manifold, first_order, gradient, inverse})
      if (!(f > 0) || !std::isfinite(f)) return fail("tolerance factors must be positive and finite");
    return true;
  }
};

/// One property under one retraction and policy: its worst measured figure over the trials and the bound.
struct Property {
  std::string name;      ///< "first_order"
  std::string context;   ///< "cayley, recomputed", or "" for a property of the point type alone
  std::string measure;   ///< what the figure is, as a formula; empty when a call threw
  double figure = 0;     ///< the worst value measured (NaN when not finite or when a call threw)
  double bound = 0;      ///< the figure must be at most this
  std::string at;        ///< where the worst figure was met ("at |c| = 60"), or why it failed ("because ...")
  bool skipped = false;  ///< not measured; `at` says why
  bool passed() const { return skipped || figure <= bound; }
};

/// What check_manifold found: every property, measured or skipped, in the order of the header comment.
struct Report {
  std::string manifold;  ///< "Stiefel<float> 8x3"
  std::vector<Property> properties;

  bool ok() const {
    return std::all_of(properties.begin(), properties.end(), [](const Property& p) { return p.passed(); });
  }
  std::vector<Property> failures() const {
    std::vector<Property> out;
    for (const Property& p : properties)
      if (!p.passed()) out.push_back(p);
    return out;
  }
  /// Whether the property of that name failed under any retraction and policy.
  bool failed(std::string_view name) const {
    return std::any_of(properties.begin(), properties.end(),
                       [name](const Property& p) { return p.name == name && !p.passed(); });
  }
  /// One line per property, in the form of the header comment.
  std::string line(const Property& p) const {
    std::string out = manifold + " " + p.name;
    if (!p.context.empty()) out += " (" + p.context + ")";
    if (p.skipped) return out + ": skipped, " + p.at;
    if (p.measure.empty()) return out + ": failed, " + p.at;
    out += ": " + p.measure + " = " + number(p.figure) + (p.passed() ? " <= " : " > ") + number(p.bound);
    if (!p.at.empty()) out += " " + p.at;
    return out;
  }
  /// One line per failed property, each ending in a newline; empty when ok().
  std::string str() const {
    std::string out;
    for (const Property& p : properties)
      if (!p.passed()) out += line(p) + "\n";
    return out;
  }
  /// One line: how many properties hold and the names of those that fail.
  std::string BriefReport() const {
    std::size_t measured = 0, held = 0;
    std::string failed_names;
    for (const Property& p : properties) {
      if (p.skipped) continue;
      ++measured;
      if (p.passed()) {
        ++held;
      } else if (failed_names.find(p.name) == std::string::npos) {
        failed_names += (failed_names.empty() ? "" : ", ") + p.name;
      }
    }
    std::string out = manifold + ": " + std::to_string(held) + " of " + std::to_string(measured) + " properties hold";
    return failed_names.empty() ? out : out + "; failed: " + failed_names;
  }
  /// Every property, one line each, skipped ones included.
  std::string FullReport() const {
    std::string out;
    for (const Property& p : properties) out += line(p) + "\n";
    return out;
  }

  static std::string number(double v) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.3g", v);
    return buffer;
  }
};

namespace detail {

// A ceres::Jet (or any scalar with a value part `a` and derivative part `v`) is measured by its value part; the suite
// does not include ceres.
template <class S>
concept jet_like = requires(const S& s) {
  s.a;
  s.v;
};

template <class S>
struct RealOf {
  using type = S;
};
template <jet_like S>
struct RealOf<S> {
  using type = typename RealOf<std::remove_cvref_t<decltype(std::declval<const S&>().a)>>::type;
};

template <class S>
double to_double(const S& s) {
  if constexpr (jet_like<S>) {
    return to_double(s.a);
  } else {
    return static_cast<double>(s);
  }
}

template <class S>
std::string scalar_name() {
  if constexpr (std::is_same_v<S, float>) {
    return "float";
  } else if constexpr (std::is_same_v<S, double>) {
    return "double";
  } else if constexpr (std::is_same_v<S, long double>) {
    return "long double";
  } else if constexpr (jet_like<S>) {
    using V = std::remove_cvref_t<decltype(std::declval<const S&>().v)>;
    using A = std::remove_cvref_t<decltype(std::declval<const S&>().a)>;
    return "Jet<" + scalar_name<A>() + ", " + std::to_string(V::RowsAtCompileTime) + ">";
  } else {
    return "scalar";
  }
}

using Vec = std::vector<double>;

inline double norm(const Vec& v) {
  double s = 0;
  for (const double e : v) s += e * e;
  return std::sqrt(s);
}
inline double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}
inline double distance(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
  return std::sqrt(s);
}
inline bool all_finite(const Vec& v) {
  return std::all_of(v.begin(), v.end(), [](double e) { return std::isfinite(e); });
}

// Collects properties, keeping the worst figure of each (name, context): NaN is worse than anything, and a figure
// over its bound is ranked by its ratio to the bound.
class Recorder {
 public:
  void record(const std::string& name, const std::string& context, const std::string& measure, double figure,
              double bound, const std::string& at = "") {
    Property* p = find(name, context);
    if (p == nullptr) {
      report_.properties.push_back(Property{name, context, measure, figure, bound, at, false});
      return;
    }
    if (p->skipped) return;
    if (badness(figure, bound) > badness(p->figure, p->bound)) {
      p->measure = measure;
      p->figure = figure;
      p->bound = bound;
      p->at = at;
    }
  }
  void skip(const std::string& name, const std::string& context, const std::string& why) {
    if (find(name, context) == nullptr) report_.properties.push_back(Property{name, context, "", 0, 0, why, true});
  }
  // A call that threw where the contract allows no exception: the property fails with the message.
  void threw(const std::string& name, const std::string& context, const std::string& what) {
    record(name, context, "", std::numeric_limits<double>::quiet_NaN(), 0, "a call threw: " + what);
  }
  Report& report() { return report_; }

 private:
  static double badness(double figure, double bound) {
    if (std::isnan(figure)) return std::numeric_limits<double>::infinity();
    if (bound > 0) return figure / bound;
    return figure > 0 ? std::numeric_limits<double>::max() : -1.0;
  }
  Property* find(const std::string& name, const std::string& context) {
    for (Property& p : report_.properties)
      if (p.name == name && p.context == context) return &p;
    return nullptr;
  }
  Report report_;
};

template <Manifold MM>
class Suite {
  using M = std::remove_cvref_t<MM>;
  using S = typename M::Scalar;
  using Ws = typename M::Workspace;
  using Real = typename RealOf<S>::type;
  using Buf = std::vector<S>;
  static constexpr bool kFull = std::is_floating_point_v<S>;

 public:
  Suite(const M& x, const Options& options)
      : point_(x),
        options_(options),
        rows_(x.value().rows()),
        cols_(x.value().cols()),
        size_(static_cast<std::size_t>(rows_ * cols_)),
        x_(x.value().data(), x.value().data() + size_),
        xd_(doubles(x_)),
        rng_(options.seed) {
    rec_.report().manifold =
        std::string(M::kName) + "<" + scalar_name<S>() + "> " + std::to_string(rows_) + "x" + std::to_string(cols_);
    if (options_.retractions.empty()) {
      retractions_.assign(M::kRetractions.begin(), M::kRetractions.end());
    } else {
      retractions_ = options_.retractions;
    }
    eps_ = static_cast<double>(std::numeric_limits<Real>::epsilon());
    t_ = 2 * std::cbrt(eps_);
    h_ = std::cbrt(eps_);
    eps23_ = std::cbrt(eps_) * std::cbrt(eps_);
  }

  Report run() {
    try {
      d_ = static_cast<std::size_t>(made(options_.policies.front())->tangent_size());
    } catch (const std::exception& e) {
      rec_.threw("workspace", "", std::string("Workspace at x's own shape: ") + e.what());
      return std::move(rec_.report());
    }
    per_trial("zero_retraction", [&](Retraction r, SectionPolicy p) { zero_retraction(r, p); });
    per_trial("stays_on_manifold", [&](Retraction r, SectionPolicy p) { stays_on_manifold(r, p); });
    per_trial("first_order", [&](Retraction r, SectionPolicy p) { first_order(r, p); });
    guard("tangent_round_trip", "", [&] { tangent_round_trip(); });
    guard("shape_errors", "", [&] { shape_errors(); });
    if constexpr (kFull) {
      guard("random_point", "", [&] { random_points(); });
      guard("project", "", [&] { project(); });
      for (const SectionPolicy p : options_.policies)
        guard("adjointness", section_policy_name(p), [&] { adjointness(p); });
      per_trial("gradient", [&](Retraction r, SectionPolicy p) { gradient(r, p); });
      per_trial("inverse_round_trip", [&](Retraction r, SectionPolicy p) { inverse_round_trip(r, p); });
      per_trial("inverse_derivative", [&](Retraction r, SectionPolicy p) { inverse_derivative(r, p); });
      per_trial("domain_error", [&](Retraction r, SectionPolicy p) { domain_errors(r, p); });
      for (const Retraction r : retractions_)
        guard("forget_point", context(r, SectionPolicy::recomputed), [&] { forget_point(r); });
      for (const Retraction r : retractions_)
        guard("section_consistency", retraction_name(r), [&] { section_consistency(r); });
      per_trial("allocations", [&](Retraction r, SectionPolicy p) { allocations(r, p); });
    } else {
      for (const char* name :
           {"random_point", "project", "adjointness", "gradient", "inverse_round_trip", "inverse_derivative",
            "domain_error", "forget_point", "section_consistency", "allocations"})
        rec_.skip(name, "", "the scalar " + scalar_name<S>() + " is checked for retract, to_ambient and check only");
    }
    return std::move(rec_.report());
  }

 private:
  // ---- plumbing ----

  // Runs f, turning an exception into a failure of the property: the contract allows none where the suite calls.
  template <class F>
  void guard(const std::string& name, const std::string& context, F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      rec_.threw(name, context, e.what());
    } catch (...) {
      rec_.threw(name, context, "an exception not derived from std::exception");
    }
  }

  // Runs f for every retraction and policy, each guarded on its own, so that a throw under one hides no other.
  template <class F>
  void per_trial(const char* name, F&& f) {
    for (const Retraction r : retractions_)
      for (const SectionPolicy p : options_.policies) {
        current_ = context(r, p);
        guard(name, current_, [&] { f(r, p); });
      }
    current_.clear();
  }

  static std::string context(Retraction r, SectionPolicy p) {
    return std::string(retraction_name(r)) + ", " + section_policy_name(p);
  }

  static Vec doubles(const Buf& b) {
    Vec out(b.size());
    for (std::size_t i = 0; i < b.size(); ++i) out[i] = to_double(b[i]);
    return out;
  }
  static Buf scalars(const Vec& v) {
    Buf out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = S(v[i]);
    return out;
  }

  Vec gaussian(std::size_t n) {
    std::normal_distribution<double> normal;
    Vec v(n);
    for (double& e : v) e = normal(rng_);
    return v;
  }
  Vec direction(double length) {
    Vec c = gaussian(d_);
    const double n = norm(c);
    for (double& e : c) e *= n > 0 ? length / n : 0.0;
    return c;
  }

  // A workspace made at x: a transported section starts there.
  std::unique_ptr<Ws> made(SectionPolicy p) const {
    return std::make_unique<Ws>(rows_, cols_, p, p == SectionPolicy::transported ? x_.data() : nullptr);
  }
  // A workspace at x as an optimizer holds it: made there, then a lift at x.
  std::unique_ptr<Ws> at_x(SectionPolicy p) {
    auto ws = made(p);
    Buf zero(size_, S(0)), c(d_);
    ws->lift(x_.data(), zero.data(), c.data());
    return ws;
  }
  Vec retracted(const Vec& c, Retraction r, SectionPolicy p) {
    auto ws = at_x(p);
    Buf y = x_, cs = scalars(c);
    ws->retract(y.data(), cs.data(), r);
    return doubles(y);
  }
  Vec ambient(const Vec& c, SectionPolicy p) {
    auto ws = at_x(p);
    Buf cs = scalars(c), u(size_);
    ws->to_ambient(x_.data(), cs.data(), u.data());
    return doubles(u);
  }
  Vec lifted(const Vec& g, SectionPolicy p) {
    auto ws = at_x(p);
    Buf gs = scalars(g), c(d_);
    ws->lift(x_.data(), gs.data(), c.data());
    return doubles(c);
  }
  double check_of(const Ws& ws, const Vec& y) const {
    const Buf ys = scalars(y);
    return to_double(ws.check(ys.data()));
  }
  static double scale(const Vec& y) { return std::max(1.0, norm(y)); }
  double x_scale() const { return scale(xd_); }
  static std::string norm_at(double n) { return "at |c| = " + Report::number(n); }

  void record(const char* name, const std::string& measure, double figure, double bound, const std::string& at = "") {
    rec_.record(name, current_, measure, figure, bound, at);
  }

  // ---- the properties ----

  void zero_retraction(Retraction r, SectionPolicy p) {
    const Vec y = retracted(Vec(d_, 0.0), r, p);
    record("zero_retraction", "|R_x(0) - x| / max(1, |x|)", distance(y, xd_) / x_scale(), options_.exact * eps_);
  }

  void stays_on_manifold(Retraction r, SectionPolicy p) {
    const auto ws = made(p);
    for (const double n : options_.norms)
      for (int k = 0; k < options_.directions; ++k) {
        const Vec y = retracted(direction(n), r, p);
        record("stays_on_manifold", "check(R_x(c)) / max(1, |R_x(c)|)", check_of(*ws, y) / scale(y),
               options_.on_manifold * eps_, norm_at(n));
      }
  }

  void first_order(Retraction r, SectionPolicy p) {
    for (int k = 0; k < options_.directions; ++k) {
      const Vec c = direction(1.0);
      const Vec u = ambient(c, p);
      const auto defect = [&](double t) {
        Vec tc = c;
        for (double& e : tc) e *= t;
        Vec dt = retracted(tc, r, p);
        for (std::size_t i = 0; i < size_; ++i) dt[i] -= xd_[i] + t * u[i];
        return dt;
      };
      const Vec d1 = defect(t_), d2 = defect(t_ / 2);
      Vec a(size_);
      for (std::size_t i = 0; i < size_; ++i) a[i] = d1[i] - 4 * d2[i];
      record("first_order", "|d(t) - 4 d(t/2)| / (t |u|)", norm(a) / (t_ * norm(u)), options_.first_order * eps23_,
             "at t = " + Report::number(t_));
    }
  }

  void tangent_round_trip() {
    const Vec c = direction(1.0);
    const Buf cs = scalars(c);
    const auto xi = M::tangent_from(point_, cs.data());
    Buf back(d_, S(0));
    M::coordinates_of(xi, back.data());
    rec_.record("tangent_round_trip", "", "|coordinates_of(tangent_from(x, c)) - c| / |c|",
                distance(doubles(back), c) / norm(c), options_.exact * eps_);
  }

  void shape_errors() {
    const std::pair<Eigen::Index, Eigen::Index> shapes[] = {
        {rows_, cols_ + 1}, {rows_ + 1, cols_}, {cols_, rows_}, {0, 0}, {rows_, 0}, {0, cols_}};
    int rejected = 0, violations = 0;
    std::string at;
    // M::tangent_size(r, c), or -1 when it throws std::invalid_argument naming M (a violation otherwise).
    auto static_size = [&](Eigen::Index r, Eigen::Index c, const std::string& shape) -> Eigen::Index {
      try {
        return M::tangent_size(r, c);
      } catch (const std::invalid_argument& e) {
        if (std::string(e.what()).find(M::kName) == std::string::npos) {
          ++violations;
          at = "because M::tangent_size's message for " + shape + " does not name " + M::kName;
        }
      } catch (const std::exception& e) {
        ++violations;
        at = "because M::tangent_size(" + shape + ") threw another type than std::invalid_argument: " + e.what();
      }
      return -1;
    };
    if (static_size(rows_, cols_, "x's shape") != static_cast<Eigen::Index>(d_)) {
      ++violations;
      at = "because M::tangent_size at x's shape is not the workspace's tangent_size()";
    }
    for (const auto& [r, c] : shapes) {
      if (r == rows_ && c == cols_) continue;
      const std::string shape = std::to_string(r) + "x" + std::to_string(c);
      const Eigen::Index expected = static_size(r, c, shape);
      try {
        Ws ws(r, c, SectionPolicy::recomputed, nullptr);
        if (ws.tangent_size() != expected) {
          ++violations;
          at = "because for " + shape + " M::tangent_size gives " + std::to_string(expected) + " and the workspace " +
               std::to_string(ws.tangent_size());
        }
      } catch (const std::invalid_argument& e) {
        ++rejected;
        if (std::string(e.what()).find(M::kName) == std::string::npos) {
          ++violations;
          at = "because the message for " + shape + " does not name " + M::kName + ": \"" + e.what() + "\"";
        }
        if (expected != -1) {
          ++violations;
          at = "because the workspace rejects " + shape + " and M::tangent_size accepts it";
        }
      } catch (const std::exception& e) {
        ++violations;
        at = "because " + shape + " threw another type than std::invalid_argument: " + e.what();
      }
    }
    if (rejected == 0) {
      ++violations;
      at = "because no shape tried was rejected";
    }
    rec_.record("shape_errors", "", "violations", violations, 0, at);
  }

  void random_points() {
    Ws ws(rows_, cols_, SectionPolicy::recomputed, nullptr);
    Buf a(size_), b(size_);
    for (int k = 0; k < options_.directions; ++k) {
      Rng ra(options_.seed + 100 + static_cast<std::uint64_t>(k)),
          rb(options_.seed + 100 + static_cast<std::uint64_t>(k));
      ws.random_point(ra, a.data());
      ws.random_point(rb, b.data());
      const Vec y = doubles(a);
      rec_.record("random_point", "", "check(y) / max(1, |y|)", to_double(ws.check(a.data())) / scale(y),
                  options_.on_manifold * eps_);
      rec_.record("random_point", "same seed", "|y(seed) - y(seed)|", distance(y, doubles(b)), 0);
    }
  }

  void project() {
    Ws ws(rows_, cols_, SectionPolicy::recomputed, nullptr);
    const double tol = options_.on_manifold * eps_;
    Buf y = x_;
    ws.project(y.data());
    rec_.record("project", "", "|project(x) - x| / max(1, |x|)", distance(doubles(y), xd_) / x_scale(), tol);
    const double sigma = 0.1 * x_scale() / std::sqrt(static_cast<double>(size_));
    for (int k = 0; k < options_.directions; ++k) {
      Vec z = gaussian(size_);
      for (std::size_t i = 0; i < size_; ++i) z[i] = xd_[i] + sigma * z[i];
      Buf pz = scalars(z);
      ws.project(pz.data());
      const Vec once = doubles(pz);
      rec_.record("project", "perturbed", "check(project(z)) / max(1, |project(z)|)",
                  to_double(ws.check(pz.data())) / scale(once), tol);
      ws.project(pz.data());
      rec_.record("project", "idempotent", "|project(project(z)) - project(z)| / max(1, |project(z)|)",
                  distance(doubles(pz), once) / scale(once), tol);
    }
  }

  void adjointness(SectionPolicy p) {
    current_ = section_policy_name(p);
    for (int k = 0; k < options_.directions; ++k) {
      const Vec g = gaussian(size_), c = direction(1.0);
      const Vec u = ambient(c, p), lg = lifted(g, p);
      record("adjointness", "|<G, to_ambient(c)> - lift(G) . c| / (|G| |to_ambient(c)|)",
             std::abs(dot(g, u) - dot(lg, c)) / (norm(g) * norm(u)),
             options_.exact * eps_ * std::sqrt(static_cast<double>(size_)));
    }
    current_.clear();
  }

  void gradient(Retraction r, SectionPolicy p) {
    for (int k = 0; k < options_.directions; ++k) {
      const Vec a = gaussian(size_), b = gaussian(size_);
      const auto cost = [&](const Vec& y) {
        double f = 0;
        for (std::size_t i = 0; i < size_; ++i) f += a[i] * y[i] + 0.5 * b[i] * y[i] * y[i];
        return f;
      };
      Vec g(size_);
      for (std::size_t i = 0; i < size_; ++i) g[i] = a[i] + b[i] * xd_[i];
      const Vec c = direction(1.0);
      Vec plus = c, minus = c;
      for (std::size_t i = 0; i < d_; ++i) {
        plus[i] *= h_;
        minus[i] *= -h_;
      }
      const double fd = (cost(retracted(plus, r, p)) - cost(retracted(minus, r, p))) / (2 * h_);
      const double analytic = dot(lifted(g, p), c);
      record("gradient", "|d/dt f(R_x(tc)) - lift(G) . c| / (|G| |u|)",
             std::abs(fd - analytic) / (norm(g) * norm(ambient(c, p))), options_.gradient * eps23_,
             "at t = " + Report::number(h_));
    }
  }

  // Calls inverse_retract at x with a sentinel in its output. Returns whether it succeeded; a std::domain_error that
  // touched the output is a violation of domain_error.
  bool inverse(SectionPolicy p, const Vec& y, Retraction r, Vec& c, std::string* message) {
    auto ws = at_x(p);
    const Buf ys = scalars(y);
    Buf cs(d_, S(kSentinel));
    try {
      ws->inverse_retract(x_.data(), ys.data(), cs.data(), r);
    } catch (const std::domain_error& e) {
      if (message != nullptr) *message = e.what();
      const bool untouched = std::all_of(cs.begin(), cs.end(), [](const S& e) { return to_double(e) == kSentinel; });
      if (!untouched) record("domain_error", "violations", 1, 0, "because a domain_error changed its output");
      return false;
    }
    c = doubles(cs);
    return true;
  }

  void inverse_round_trip(Retraction r, SectionPolicy p) {
    for (const double n : options_.norms)
      for (int k = 0; k < options_.directions; ++k) {
        const Vec c = direction(n);
        const Vec y = retracted(c, r, p);
        Vec back;
        std::string message;
        const bool near = n <= options_.near_norm;
        if (!inverse(p, y, r, back, &message)) {
          if (near)
            record("inverse_round_trip", "|inverse_retract(x, R_x(c)) - c| / max(1, |c|)",
                   std::numeric_limits<double>::quiet_NaN(), options_.inverse * eps_,
                   norm_at(n) + ", a domain_error: \"" + message + "\"");
          continue;
        }
        if (near) {
          record("inverse_round_trip", "|inverse_retract(x, R_x(c)) - c| / max(1, |c|)",
                 distance(back, c) / std::max(1.0, n), options_.inverse * eps_, norm_at(n));
        } else {
          // Beyond reach of a unique inverse, c' = inverse_retract(x, y) is one preimage of y; it must be one that
          // inverse_retract gives back. Compared in coordinates, not points: on a quotient (Grassmann) R_x(c') is
          // another representative of y.
          Vec again;
          const char* measure = "|inverse_retract(x, R_x(c')) - c'| / max(1, |c'|)";
          // R_x(c') is as far as y, where inverse_retract may refuse (a point of SPD at norm 60 has condition
          // number e^120: positive definite in exact arithmetic, not in floating point). Rounding in the exponential
          // and the logarithm grows with the norm, so the bound does too.
          if (!inverse(p, retracted(back, r, p), r, again, &message)) continue;
          record("inverse_round_trip", measure, distance(again, back) / std::max(1.0, norm(back)),
                 options_.inverse * eps_ * std::max(1.0, norm(back)), norm_at(n));
        }
      }
  }

  void inverse_derivative(Retraction r, SectionPolicy p) {
    for (int k = 0; k < options_.directions; ++k) {
      Vec g = gaussian(size_);
      const double gn = norm(g);
      for (double& e : g) e *= x_scale() / gn;
      Vec plus = xd_, minus = xd_;
      for (std::size_t i = 0; i < size_; ++i) {
        plus[i] += h_ * g[i];
        minus[i] -= h_ * g[i];
      }
      Vec cp, cm;
      std::string message;
      if (!inverse(p, plus, r, cp, &message) || !inverse(p, minus, r, cm, &message)) {
        record("inverse_derivative", "", std::numeric_limits<double>::quiet_NaN(), 0,
               "inverse_retract near x threw a domain_error: \"" + message + "\"");
        continue;
      }
      Vec dd(d_);
      for (std::size_t i = 0; i < d_; ++i) dd[i] = (cp[i] - cm[i]) / (2 * h_);
      const Vec lg = lifted(g, p), back = lifted(ambient(dd, p), p);
      record("inverse_derivative", "|lift(to_ambient(D)) - lift(G)| / |lift(G)|", distance(back, lg) / norm(lg),
             options_.gradient * eps23_, "at h = " + Report::number(h_));
    }
  }

  void domain_errors(Retraction r, SectionPolicy p) {
    int thrown = 0, violations = 0;
    std::string why;
    std::vector<Vec> targets;
    for (const double n : options_.norms)
      if (n > options_.near_norm) targets.push_back(retracted(direction(n), r, p));
    Vec minus_x = xd_;
    for (double& e : minus_x) e = -e;
    targets.push_back(minus_x);
    for (const Vec& y : targets) {
      Vec c;
      try {
        if (!inverse(p, y, r, c, nullptr)) ++thrown;
      } catch (const std::exception& e) {
        ++violations;
        why = std::string("because inverse_retract threw another type than std::domain_error: ") + e.what();
      }
    }
    const Vec nans(size_, std::numeric_limits<double>::quiet_NaN());
    Vec c;
    try {
      if (!inverse(p, nans, r, c, nullptr)) {
        ++thrown;
      } else if (all_finite(c)) {
        ++violations;
        why = "because a NaN target gave finite coordinates";
      }
    } catch (const std::exception& e) {
      ++violations;
      why = std::string("because a NaN target threw another type than std::domain_error: ") + e.what();
    }
    record("domain_error", "violations", violations, 0,
           why.empty() ? "(" + std::to_string(thrown) + " domain_errors seen)" : why);
  }

  void forget_point(Retraction r) {
    current_ = context(r, SectionPolicy::recomputed);
    for (int k = 0; k < options_.directions; ++k) {
      const Vec c = direction(1.0);
      const Vec want = retracted(c, r, SectionPolicy::recomputed);
      const Vec elsewhere = retracted(direction(1.0), r, SectionPolicy::recomputed);
      Ws ws(rows_, cols_, SectionPolicy::recomputed, nullptr);
      const Buf es = scalars(elsewhere), g = scalars(gaussian(size_));
      Buf cs = scalars(c), y = x_, scratch(d_);
      ws.lift(es.data(), g.data(), scratch.data());
      ws.forget_point();
      ws.retract(y.data(), cs.data(), r);
      record("forget_point", "|R_x(c) after forget_point - R_x(c)| / max(1, |x|)",
             distance(doubles(y), want) / x_scale(), options_.exact * eps_);
    }
    current_.clear();
  }

  void section_consistency(Retraction r) {
    const bool both = std::find(options_.policies.begin(), options_.policies.end(), SectionPolicy::recomputed) !=
                          options_.policies.end() &&
                      std::find(options_.policies.begin(), options_.policies.end(), SectionPolicy::transported) !=
                          options_.policies.end();
    current_ = retraction_name(r);
    if (!both) {
      rec_.skip("section_consistency", current_, "needs both section policies");
      return;
    }
    Ws wr(rows_, cols_, SectionPolicy::recomputed, nullptr), wt(rows_, cols_, SectionPolicy::transported, x_.data());
    Buf yr = x_, yt = x_, cr(d_), ct(d_), ur(size_), ut(size_);
    const double tol = options_.on_manifold * eps_;
    for (int step = 0; step < options_.walk_steps; ++step) {
      const std::string at = "at step " + std::to_string(step);
      const Buf g = scalars(gaussian(size_));
      wr.lift(yr.data(), g.data(), cr.data());
      wt.lift(yt.data(), g.data(), ct.data());
      const double nr = norm(doubles(cr)), nt = norm(doubles(ct));
      record("section_consistency", "||lift_recomputed(G)| - |lift_transported(G)|| / |lift(G)|",
             std::abs(nr - nt) / nr, tol, at);
      wr.to_ambient(yr.data(), cr.data(), ur.data());
      wt.to_ambient(yt.data(), ct.data(), ut.data());
      const Vec ar = doubles(ur), at_ = doubles(ut);
      record("section_consistency", "|to_ambient_recomputed - to_ambient_transported| / |to_ambient|",
             distance(ar, at_) / norm(ar), tol, at);
      for (std::size_t i = 0; i < d_; ++i) {
        cr[i] *= S(1 / nr);
        ct[i] *= S(1 / nr);
      }
      wr.retract(yr.data(), cr.data(), r);
      wt.retract(yt.data(), ct.data(), r);
      const Vec pr = doubles(yr), pt = doubles(yt);
      record("section_consistency", "|y_recomputed - y_transported| / max(1, |y|)", distance(pr, pt) / scale(pr), tol,
             at);
    }
    current_.clear();
  }

  void allocations(Retraction r, SectionPolicy p) {
    if (!options_.check_allocations) {
      rec_.skip("allocations", current_, "Options::check_allocations is off");
      return;
    }
    if (allocation_counter == nullptr) {
      rec_.skip("allocations", current_, "no allocation_counter installed");
      return;
    }
    auto ws = at_x(p);
    const Buf g = scalars(gaussian(size_));
    Buf c(d_), u(size_), y = x_;
    const long before = allocation_counter();
#ifdef EIGEN_RUNTIME_NO_MALLOC
    const bool allowed = Eigen::internal::is_malloc_allowed();
    Eigen::internal::set_is_malloc_allowed(false);
#endif
    ws->lift(y.data(), g.data(), c.data());
    ws->to_ambient(y.data(), c.data(), u.data());
    ws->retract(y.data(), c.data(), r);
#ifdef EIGEN_RUNTIME_NO_MALLOC
    Eigen::internal::set_is_malloc_allowed(allowed);
#endif
    const long count = allocation_counter() - before;
    record("allocations", "allocations in lift, to_ambient and retract", static_cast<double>(count), 0);
  }

  static constexpr double kSentinel = 12345.0;

  const M& point_;
  const Options& options_;
  Eigen::Index rows_, cols_;
  std::size_t size_, d_ = 0;
  Buf x_;
  Vec xd_;
  Rng rng_;
  std::vector<Retraction> retractions_;
  double eps_ = 0, t_ = 0, h_ = 0, eps23_ = 0;
  Recorder rec_;
  std::string current_;
};

}  // namespace detail

/// Measures every property of the header comment on the manifold of x, at x (its shape and base point), and returns
/// them all. Throws std::invalid_argument when the options are not valid or name a retraction M does not implement;
/// never throws for a property that fails (a call that throws where the contract forbids it is a failed property).
template <Manifold M>
Report check_manifold(const M& x, const Options& options = {}) {
  std::string error;
  if (!options.IsValid(&error)) throw std::invalid_argument("geomopt::testing::Options: " + error);
  for (const Retraction r : options.retractions)
    if (!supports<M>(r))
      throw std::invalid_argument(std::string("geomopt::testing::check_manifold: ") + M::kName +
                                  " does not implement " + retraction_name(r));
  return detail::Suite<M>(x, options).run();
}

}  // namespace geomopt::testing
