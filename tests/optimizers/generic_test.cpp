// The consumers of a manifold, generic over the contract: a manifold written only from contract.hpp
// (tests/support/toy_manifold.hpp) is stepped by SGD, Adam and Muon's fallback, minimised by every solver, has its
// retraction chosen per leaf and refused by name, and keeps a transported section in the state. Expected values are
// closed forms on the sphere, not a second run of the code.
#include <doctest/doctest.h>

#include <cmath>
#include <geomopt/manifolds/borrowed.hpp>
#include <geomopt/optimizers.hpp>
#include <geomopt/solvers.hpp>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "toy_manifold.hpp"

namespace {

using geomopt::Retraction;
using geomopt::SectionPolicy;
using Vec = Eigen::VectorXd;

template <class T>
struct Model {
  toy::Sphere<T> x;
  Eigen::Matrix<T, Eigen::Dynamic, 1> b;
  GEOMOPT_PTREE(x, b)
};

Vec vec(std::initializer_list<double> entries) {
  Vec v(static_cast<Eigen::Index>(entries.size()));
  Eigen::Index i = 0;
  for (double e : entries) v[i++] = e;
  return v;
}

Model<double> make_model() {
  Model<double> m;
  m.x = toy::Sphere<double>(vec({0.5, -0.5, 0.5, 0.5}));
  m.b = Vec::Constant(3, 1.0);
  return m;
}

struct Net {
  Eigen::MatrixXd w;
  toy::Sphere<double> x;
  GEOMOPT_PTREE(w, x)
};

// The Riemannian gradient step on the sphere by the exponential map: x <- Exp_x(-lr (g - (x^T g) x)).
Vec exp_step(const Vec& x, const Vec& g, double lr) {
  const Vec u = -lr * (g - x.dot(g) * x);
  const double t = u.norm();
  return std::cos(t) * x + std::sin(t) / t * u;
}

}  // namespace

TEST_CASE("SGD steps a contract manifold by its default retraction, the exponential map") {
  Model<double> p = make_model(), g = make_model();
  g.x.value() = vec({1.0, 2.0, -1.0, 0.5});
  g.b = Vec::Constant(3, 0.5);
  const Vec x0 = p.x.value();
  geomopt::SGD sgd({.lr = 0.1});
  auto st = sgd.init(p);
  CHECK(st.coordinates() == 3 + 3);
  sgd.step(p, g, st);
  CHECK((p.x.value() - exp_step(x0, g.x.value(), 0.1)).norm() < 1e-14);
  CHECK((p.b - Vec::Constant(3, 0.95)).norm() < 1e-15);
}

TEST_CASE("a leaf's retraction: asked per leaf, refused by name when the manifold lacks it") {
  Model<double> p = make_model(), g = make_model();
  g.x.value() = vec({1.0, 2.0, -1.0, 0.5});
  const Vec x0 = p.x.value();
  SUBCASE("second_order per leaf: the metric projection (x + u) / |x + u|") {
    geomopt::SGD sgd({.lr = 0.1});
    auto st = sgd.init(
        p, [](const geomopt::ptree::Path&) { return geomopt::LeafOptions{.retraction = Retraction::second_order}; });
    sgd.step(p, g, st);
    const Vec u = -0.1 * (g.x.value() - x0.dot(g.x.value()) * x0);
    CHECK((p.x.value() - (x0 + u).normalized()).norm() < 1e-14);
  }
  SUBCASE("cayley for the whole tree: init throws naming the leaf, the manifold and what it supports") {
    geomopt::SGD sgd({.lr = 0.1}, {.retraction = Retraction::cayley});
    CHECK_THROWS_WITH_AS(sgd.init(p),
                         doctest::Contains("x: ToySphere has no cayley retraction; it supports "
                                           "geodesic, second_order"),
                         std::invalid_argument);
  }
  SUBCASE("the solvers check the same") {
    geomopt::SolverOptions o;
    o.retraction = Retraction::cayley;
    auto cost = [](const Model<double>&, Model<double>* grad) {
      if (grad != nullptr) grad->x.value().setZero(), grad->b.setZero();
      return 0.0;
    };
    CHECK_THROWS_WITH_AS(geomopt::minimize(cost, p, o), doctest::Contains("x: ToySphere has no cayley"),
                         std::invalid_argument);
    CHECK(p.x.value() == x0);
  }
}

TEST_CASE("Adam on a contract manifold: the leaf converges to the maximiser of a linear cost and stays on it") {
  for (SectionPolicy policy : {SectionPolicy::recomputed, SectionPolicy::transported}) {
    CAPTURE(static_cast<int>(policy));
    for (int threads : {1, 2}) {
      Model<float> p;
      p.x = toy::Sphere<float>(Eigen::VectorXf::Unit(5, 1));
      p.b = Eigen::VectorXf::Zero(2);
      Model<float> g = p;
      const Eigen::VectorXf a = vec({1, -2, 0.5, 2, 1}).cast<float>();
      geomopt::Adam adam({.lr = 0.05f}, {.section = policy, .threads = threads});
      auto st = adam.init(p);
      for (int t = 0; t < 400; ++t) {
        g.x.value() = -a;  // the gradient of -a^T x
        g.b = p.b;
        adam.step(p, g, st);
      }
      CHECK((p.x.value() - a.normalized()).norm() < 1e-2f);
      CHECK(std::abs(p.x.value().norm() - 1) < 1e-5f);
      int sections = 0;
      st.for_each_slot([&](const std::string& path, std::string_view name, auto data) {
        if (name == "section") {
          ++sections;
          CHECK(path == "x");
          CHECK(data.rows() == 5);
          CHECK(data.cols() == 5);
          // The section's first column follows the point (up to sign): the frame was transported with it.
          CHECK(std::abs(std::abs(data.col(0).dot(p.x.value())) - 1) < 1e-4f);
        }
      });
      CHECK(sections == (policy == SectionPolicy::transported ? 1 : 0));
    }
  }
}

TEST_CASE("Muon steps a contract manifold leaf through its fallback, and EMA projects it") {
  Net p{Eigen::MatrixXd::Identity(3, 3), toy::Sphere<double>(3)};
  Net g{Eigen::MatrixXd::Constant(3, 3, 0.1), toy::Sphere<double>(vec({0.0, 1.0, 0.0}))};
  geomopt::Muon muon({}, {.ema_decay = 0.5});
  auto st = muon.init(p);
  const Vec x0 = p.x.value();
  muon.step(p, g, st);
  CHECK((p.x.value() - x0).norm() > 1e-4);
  CHECK(std::abs(p.x.value().norm() - 1) < 1e-14);
  const Net avg = geomopt::ema_params(st);
  CHECK(std::abs(avg.x.value().norm() - 1) < 1e-14);
  CHECK((avg.x.value() - (x0 + p.x.value()).normalized()).norm() < 1e-14);
}

TEST_CASE("every solver minimises the Rayleigh quotient on a contract manifold") {
  const Eigen::Index n = 6;
  Eigen::MatrixXd a = Eigen::MatrixXd::Zero(n, n);
  for (Eigen::Index i = 0; i < n; ++i) a(i, i) = 1.0 + static_cast<double>(i);
  a(0, 1) = a(1, 0) = 0.3;
  const double lambda = Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(a).eigenvalues()(0);
  auto cost = [&](const toy::Sphere<double>& x, toy::Sphere<double>* grad) {
    if (grad != nullptr) grad->value() = 2 * a * x.value();
    return x.value().dot(a * x.value());
  };
  for (auto method : {geomopt::SolverMethod::gradient_descent, geomopt::SolverMethod::conjugate_gradient,
                      geomopt::SolverMethod::lbfgs, geomopt::SolverMethod::bfgs, geomopt::SolverMethod::trust_region}) {
    CAPTURE(static_cast<int>(method));
    toy::Sphere<double> x(Vec::Constant(n, 1 / std::sqrt(static_cast<double>(n))));
    geomopt::SolverOptions o;
    o.method = method;
    o.gradient_tolerance = 1e-9;
    o.max_iterations = 5000;
    const auto summary = geomopt::minimize(cost, x, o);
    INFO(summary.BriefReport());
    CHECK(summary.IsSolutionUsable());
    CHECK(std::abs(x.value().dot(a * x.value()) - lambda) < 1e-12);
    CHECK(std::abs(x.value().norm() - 1) < 1e-13);
  }
}

TEST_CASE("make_stepper on a contract manifold: the workspace's shape check, the section, the cost") {
  using geomopt::detail::make_stepper;
  CHECK_THROWS_WITH_AS(make_stepper(toy::Sphere<double>(Eigen::VectorXd(0)), SectionPolicy::recomputed),
                       doctest::Contains("ToySphere: a point is a vector of length N >= 1, got 0x1"),
                       std::invalid_argument);
  const auto recomputed = make_stepper(toy::Sphere<double>(7), SectionPolicy::recomputed);
  const auto transported = make_stepper(toy::Sphere<double>(7), SectionPolicy::transported);
  CHECK(recomputed->tangent_size() == 6);
  CHECK(recomputed->section_data() == nullptr);
  CHECK(transported->section_rows() == 7);
  CHECK(transported->step_cost() > recomputed->step_cost());
}

namespace {

struct Owned {
  toy::Sphere<float> x;
  Eigen::VectorXf b;
  GEOMOPT_PTREE(x, b)
};
struct Lent {
  geomopt::Borrowed<toy::Sphere<float>> x;
  Eigen::VectorXf b;
  GEOMOPT_PTREE(x, b)
};

}  // namespace

TEST_CASE("Borrowed leaves over a caller's buffer are stepped in place, bitwise as the owned tree") {
  static_assert(geomopt::Manifold<geomopt::Borrowed<toy::Sphere<float>>>);
  const Eigen::VectorXf x0 = vec({0.6, 0.0, -0.8, 0.0, 0.0}).cast<float>();
  std::vector<float> buffer(x0.data(), x0.data() + 5);
  Owned owned{toy::Sphere<float>(x0), Eigen::VectorXf::Ones(2)};
  Lent lent{geomopt::Borrowed<toy::Sphere<float>>(buffer.data(), 5, 1), Eigen::VectorXf::Ones(2)};
  CHECK(lent.x.borrows());
  for (SectionPolicy policy : {SectionPolicy::recomputed, SectionPolicy::transported}) {
    geomopt::Adam adam({.lr = 0.1f}, {.section = policy});
    auto owned_state = adam.init(owned);
    auto lent_state = adam.init(lent);
    for (int t = 0; t < 5; ++t) {
      Eigen::VectorXf g(5);
      for (Eigen::Index i = 0; i < 5; ++i) g[i] = std::sin(static_cast<float>(3 * t + i));
      Owned og{toy::Sphere<float>(g), Eigen::VectorXf::Constant(2, 0.5f)};
      Lent lg{geomopt::Borrowed<toy::Sphere<float>>(g), Eigen::VectorXf::Constant(2, 0.5f)};
      CHECK_FALSE(lg.x.borrows());
      adam.step(owned, og, owned_state);
      adam.step(lent, lg, lent_state);
    }
    CHECK(lent.x.value().data() == buffer.data());  // still the caller's memory
    const Eigen::Map<const Eigen::VectorXf> result(buffer.data(), 5);
    CHECK(result == owned.x.value());  // bitwise
    CHECK(lent.b == owned.b);
    CHECK((result - x0).norm() > 1e-2f);  // the buffer is what changed
  }
  // A copy owns its numbers: stepping it leaves the buffer alone.
  const std::vector<float> before = buffer;
  Lent copy = lent;
  CHECK_FALSE(copy.x.borrows());
  copy.x.value()[0] = 42.0f;
  CHECK(buffer == before);
  // Assigning to a borrowing leaf writes into the buffer; a wrong shape throws and writes nothing.
  lent = copy;
  CHECK(buffer[0] == 42.0f);
  CHECK(lent.x.value().data() == buffer.data());
  geomopt::Borrowed<toy::Sphere<float>> wrong(Eigen::VectorXf::Zero(3));
  CHECK_THROWS_WITH_AS(lent.x = wrong, doctest::Contains("cannot write a 3x1 value into borrowed memory of shape 5x1"),
                       std::invalid_argument);
  CHECK(buffer[0] == 42.0f);
  // lend points the leaf at other memory (a tensor whose storage moved), writing nothing.
  std::vector<float> moved(5, 0.5f);
  lent.x.lend(moved.data(), 5, 1);
  CHECK(lent.x.borrows());
  CHECK(lent.x.value().data() == moved.data());
  CHECK(buffer[0] == 42.0f);
  CHECK(moved == std::vector<float>(5, 0.5f));
}
