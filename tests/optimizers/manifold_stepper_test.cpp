// The optimizers' stepper of manifold leaves (each manifold's workspace behind detail::AnyWorkspace,
// optimizers/detail/manifold_stepper.hpp) against the manifolds API:
//   - over five successive steps with random gradients and updates, lift gives the ptree storage of
//     geomopt::lift(x, section, G) and retract the point of geomopt::retract(x, section, xi, r) (1e-12 relative in
//     double, 1e-5 in float), for Stiefel, Grassmann, Sphere, SO(n) and SPD, both section policies and both
//     retractions; a transported section equals the API's (the dense lambda, SPD's factor); points stay on the
//     manifold;
//   - lift and retract allocate nothing (count_allocations.hpp counts at the allocator); the counter sees operator
//     new, Eigen's allocations, and those made inside the precompiled test kernels library;
//   - edge shapes (n = 0, n = 1, N = n, N - n < n, cores and sections larger than a product tile), rejected shapes,
//     the section accessors, and O(N n) memory for a recomputed section.

#include "../support/count_allocations.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>
#include <type_traits>

#include "geomopt/manifolds.hpp"
#include "geomopt/manifolds/detail/dense_kernels.hpp"
#include "geomopt/optimizers/detail/manifold_stepper.hpp"

namespace {

using geomopt::Grassmann;
using geomopt::Retraction;
using geomopt::SectionPolicy;
using geomopt::SPD;
using geomopt::SpecialOrthogonal;
using geomopt::Sphere;
using geomopt::Stiefel;

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
template <class T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;

template <class T>
double tolerance() {
  return std::is_same_v<T, float> ? 1e-5 : 1e-12;
}

// |a - b| / max(|b|, 1).
template <class A, class B>
double relative(const A& a, const B& b) {
  const double scale = std::max(1.0, static_cast<double>(b.norm()));
  return static_cast<double>((a - b).norm()) / scale;
}

template <class X>
void fill_normal(X& x, geomopt::Rng& rng, double scale) {
  std::normal_distribution<double> normal;
  for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = static_cast<typename X::Scalar>(scale * normal(rng));
}

// Five lift/retract steps of the stepper next to the same steps of the manifolds API from the same start.
template <class M>
void check_chain(const M& start, SectionPolicy policy, Retraction r, geomopt::Rng& rng) {
  using T = typename M::Scalar;
  constexpr bool spd = std::is_same_v<M, SPD<T>>;
  const double tol = tolerance<T>();
  INFO(M::kName, " ", start.value().rows(), "x", start.value().cols(), " ",
       (std::is_same_v<T, float> ? "float" : "double"), " ", section_policy_name(policy), " ", retraction_name(r));

  M x = start;
  auto section = geomopt::make_section(x, policy);  // kept by the transported chain only
  auto stepper = geomopt::detail::make_stepper(x, policy);
  REQUIRE(stepper->tangent_size() == geomopt::dim(x));
  typename M::value_type y = x.value();
  Vec<T> coords(stepper->tangent_size()), u(stepper->tangent_size());
  long allocations = 0;

  for (int step = 0; step < 5; ++step) {
    typename M::value_type g = x.value();
    fill_normal(g, rng, 1.0);
    const auto xi = policy == SectionPolicy::transported ? geomopt::lift(x, section, g) : geomopt::lift(x, g);
    const Vec<T> expected = Vec<T>(geomopt::ptree::flatten(xi));
    {
      alloc_count::Window window;
      stepper->lift(y.data(), g.data(), coords.data());
      allocations += window.count();
    }
    CHECK(relative(coords, expected) <= tol);

    // Updates of norm 0.5 to 2.5: the exponential scales and squares, the Cayley transform is far from I.
    fill_normal(u, rng, (0.5 + 0.5 * step) / std::sqrt(std::max<double>(1.0, static_cast<double>(u.size()))));
    auto eta = xi;
    geomopt::ptree::unflatten_into(eta, u);
    if (policy == SectionPolicy::transported) {
      geomopt::retract(x, section, eta, r);
    } else {
      geomopt::retract(x, eta, r);
    }
    {
      alloc_count::Window window;
      stepper->retract(y.data(), u.data(), r);
      allocations += window.count();
    }
    CHECK(relative(y, x.value()) <= tol);

    if (policy == SectionPolicy::transported) {
      Mat<T> reference;
      if constexpr (spd) {
        reference = section.factor();
      } else {
        reference = section.dense();
      }
      REQUIRE(stepper->section_rows() == reference.rows());
      REQUIRE(stepper->section_cols() == reference.cols());
      const Eigen::Map<const Mat<T>> held(stepper->section_data(), reference.rows(), reference.cols());
      CHECK(relative(held, reference) <= tol);
    }
  }
  CHECK(allocations == 0);
  const double scale = spd ? std::max(1.0, static_cast<double>(y.norm())) : 1.0;
  CHECK(static_cast<double>(geomopt::check(M(y))) <= 10 * tol * scale);
}

template <class M>
void check_all(const M& start, std::uint64_t seed) {
  geomopt::Rng rng(seed);
  for (SectionPolicy policy : {SectionPolicy::recomputed, SectionPolicy::transported})
    for (Retraction r : {Retraction::cayley, Retraction::geodesic}) check_chain(start, policy, r, rng);
}

}  // namespace

TEST_CASE("the allocation counter sees operator new, Eigen's allocations, the kernels library's, and a large GEMM") {
  Eigen::MatrixXd a = Eigen::MatrixXd::Random(400, 400), b = a, c(400, 400);
  // skew_function_spectral runs in the kernels library (extern_kernels.hpp declares it extern) and returns a matrix
  // it allocated there.
  const Eigen::MatrixXd w = Eigen::MatrixXd::Random(6, 6), core = 4.0 * (w - w.transpose());
  long news = 0, eigen = 0, library = 0, gemm = 0, none = 0;
  {
    alloc_count::Window window;
    ::operator delete(::operator new(16));  // a call, which the compiler may not elide as it may a new-expression
    news = window.count();
  }
  {
    alloc_count::Window window;
    { const Eigen::VectorXd v(3); }
    eigen = window.count();
  }
  {
    alloc_count::Window window;
    { const Eigen::MatrixXd f = geomopt::detail::skew_function_spectral<double>(core, true); }
    library = window.count();
  }
  {
    alloc_count::Window window;
    c.noalias() = a * b;  // Eigen packs 400 x 400 operands in panels beyond EIGEN_STACK_ALLOCATION_LIMIT
    gemm = window.count();
  }
  {
    alloc_count::Window window;
    geomopt::detail::dense_product<double>(c, a, b);  // the same product, tiled for the stack
    none = window.count();
  }
  CHECK(news == 1);
  CHECK(eigen == 1);
  CHECK(library >= 1);
  CHECK(gemm > 0);
  CHECK(none == 0);
  CHECK(c.isApprox(a * b, 1e-12));
}

TEST_CASE_TEMPLATE("Stiefel stepper: lift and retract match the manifolds API and allocate nothing", T, float, double) {
  geomopt::Rng rng(11);
  // Square, a single column, N - n < n, and section and core wider than a product tile.
  const std::pair<Eigen::Index, Eigen::Index> shapes[] = {{6, 3}, {20, 5}, {64, 16}, {4, 4},
                                                          {9, 1}, {6, 4},  {200, 6}, {150, 70}};
  for (const auto& [N, n] : shapes) check_all(Stiefel<T>::random_point(rng, N, n), 100 + N * 7 + n);
}

TEST_CASE_TEMPLATE("Grassmann stepper: lift and retract match the manifolds API and allocate nothing", T, float,
                   double) {
  geomopt::Rng rng(12);
  const std::pair<Eigen::Index, Eigen::Index> shapes[] = {{5, 2}, {7, 5}, {20, 3}, {3, 3}};
  for (const auto& [N, n] : shapes) check_all(Grassmann<T>::random_point(rng, N, n), 200 + N * 7 + n);
}

TEST_CASE_TEMPLATE("Sphere stepper: lift and retract match the manifolds API and allocate nothing", T, float, double) {
  geomopt::Rng rng(13);
  for (Eigen::Index N : {7, 2, 1, 300}) check_all(Sphere<T>::random_point(rng, N), 300 + N);
}

TEST_CASE_TEMPLATE("SpecialOrthogonal stepper: lift and retract match the manifolds API and allocate nothing", T, float,
                   double) {
  geomopt::Rng rng(14);
  for (Eigen::Index n : {3, 5, 1, 2}) check_all(SpecialOrthogonal<T>::random_point(rng, n), 400 + n);
}

TEST_CASE_TEMPLATE("SPD stepper: lift and retract match the manifolds API and allocate nothing", T, float, double) {
  geomopt::Rng rng(15);
  for (Eigen::Index n : {4, 1, 2, 10}) check_all(SPD<T>::random_point(rng, n), 500 + n);
}

TEST_CASE("empty shapes: dimension 0, and lift and retract leave everything as it is") {
  for (SectionPolicy policy : {SectionPolicy::recomputed, SectionPolicy::transported}) {
    for (Retraction r : {Retraction::cayley, Retraction::geodesic}) {
      std::unique_ptr<geomopt::detail::ManifoldStepper<double>> steppers[] = {
          geomopt::detail::make_stepper(Stiefel<double>(5, 0), policy),
          geomopt::detail::make_stepper(Stiefel<double>(0, 0), policy),
          geomopt::detail::make_stepper(Grassmann<double>(4, 0), policy),
          geomopt::detail::make_stepper(SpecialOrthogonal<double>(0), policy),
          geomopt::detail::make_stepper(SPD<double>(0), policy)};
      for (auto& stepper : steppers) {
        CHECK(stepper->tangent_size() == 0);
        double y = 7, g = 3, coords = 5;
        alloc_count::Window window;
        stepper->lift(&y, &g, &coords);
        stepper->retract(&y, &coords, r);
        CHECK(window.count() == 0);
        CHECK(y == 7);
        CHECK(coords == 5);
      }
    }
  }
  // Stiefel(5, 0)'s transported section is the identity, as GlobalSection has it.
  auto stepper = geomopt::detail::make_stepper(Stiefel<double>(5, 0), SectionPolicy::transported);
  REQUIRE(stepper->section_rows() == 5);
  CHECK(Eigen::Map<const Eigen::MatrixXd>(stepper->section_data(), 5, 5) == Eigen::MatrixXd::Identity(5, 5));
}

TEST_CASE("shapes off the manifold's rules are rejected with std::invalid_argument naming the shape") {
  using geomopt::detail::make_stepper;
  for (SectionPolicy policy : {SectionPolicy::recomputed, SectionPolicy::transported}) {
    CHECK_THROWS_WITH_AS(make_stepper(Stiefel<double>(Eigen::MatrixXd::Zero(3, 5)), policy), doctest::Contains("3x5"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(make_stepper(Grassmann<float>(Eigen::MatrixXf::Zero(2, 4)), policy), doctest::Contains("2x4"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(make_stepper(Sphere<double>(Eigen::VectorXd(0)), policy), doctest::Contains("got 0x1"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(make_stepper(SpecialOrthogonal<double>(Eigen::MatrixXd::Identity(3, 4)), policy),
                         doctest::Contains("3x4"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(make_stepper(SPD<double>(Eigen::MatrixXd::Identity(2, 3)), policy), doctest::Contains("2x3"),
                         std::invalid_argument);
  }
  // A transported SPD section starts from the Cholesky factor, which needs a positive definite point.
  CHECK_THROWS_AS(geomopt::detail::make_stepper(SPD<double>(Eigen::MatrixXd(-Eigen::MatrixXd::Identity(2, 2))),
                                                SectionPolicy::transported),
                  std::domain_error);
}

TEST_CASE("section accessors: a transported section starts as the API's, a recomputed one holds O(N n) memory") {
  geomopt::Rng rng(16);
  const auto x = Stiefel<double>::random_point(rng, 400, 4);
  const auto recomputed = geomopt::detail::make_stepper(x, SectionPolicy::recomputed);
  CHECK(recomputed->section_data() == nullptr);
  CHECK(recomputed->section_rows() == 0);
  CHECK(recomputed->section_cols() == 0);
  CHECK(recomputed->workspace_bytes() > 0);
  CHECK(recomputed->workspace_bytes() < 400 * 400 * sizeof(double) / 10);

  const auto transported = geomopt::detail::make_stepper(x, SectionPolicy::transported);
  REQUIRE(transported->section_rows() == 400);
  REQUIRE(transported->section_cols() == 400);
  CHECK(Eigen::Map<const Eigen::MatrixXd>(transported->section_data(), 400, 400) ==
        geomopt::make_section(x, SectionPolicy::transported).dense());

  const auto p = SPD<float>::random_point(rng, 3);
  const auto spd = geomopt::detail::make_stepper(p, SectionPolicy::transported);
  REQUIRE(spd->section_rows() == 3);
  CHECK(Eigen::Map<const Eigen::MatrixXf>(spd->section_data(), 3, 3) ==
        geomopt::make_section(p, SectionPolicy::transported).factor());
  CHECK(geomopt::detail::make_stepper(p, SectionPolicy::recomputed)->section_data() == nullptr);
}
