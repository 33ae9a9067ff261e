// Every manifold of the library (tests/support/every_manifold.hpp) through every consumer, with no code of its own:
// one tree holding a leaf of each manifold is trained by SGD, Adam, AdamW, RMSprop and Adagrad (both section
// policies, one and two threads), by Muon's fallback, minimised by every solver, checkpointed and resumed bit for bit;
// and each manifold whose Ceres block is a point is fitted in a ceres::Problem through CeresManifold<M>(dims...).
//
// The cost is the squared distance to a random target point of each manifold, f(x) = |x - t|^2 / 2 in the ambient
// space (for Grassmann, whose points are subspaces, |x x^T - t t^T|^2 / 2): zero exactly at the target, so the
// expected optimum is known in closed form for every manifold, however it is parametrised.
#include "../ceres/ceres_doctest.hpp"  // first: Ceres's headers before doctest (glog's CHECK)

#include <geomopt/io.hpp>
#include <geomopt/manifolds.hpp>
#include <geomopt/optimizers.hpp>
#include <geomopt/solvers.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "../io/common.hpp"
#include "every_manifold.hpp"

namespace {

// The tree: one leaf of each listed manifold, in list order (paths "0", "1", ...), over the scalar T.
#define GEOMOPT_LEAF_TUPLE(Name, ...) std::declval<std::tuple<geomopt::Name<T>>>(),
template <class T>
using Zoo = decltype(std::tuple_cat(GEOMOPT_EVERY_MANIFOLD(GEOMOPT_LEAF_TUPLE) std::tuple<>()));
#undef GEOMOPT_LEAF_TUPLE

#define GEOMOPT_LEAF_NAME(Name, ...) #Name,
constexpr const char* kNames[] = {GEOMOPT_EVERY_MANIFOLD(GEOMOPT_LEAF_NAME)};
#undef GEOMOPT_LEAF_NAME
constexpr std::size_t kLeaves = std::size(kNames);
static_assert(std::tuple_size_v<Zoo<double>> == kLeaves);

// A random point of every manifold, drawn in list order (a braced list is evaluated left to right).
template <class T>
Zoo<T> random_zoo(geomopt::Rng& rng) {
#define GEOMOPT_RANDOM_LEAF(Name, ...) geomopt::Name<T>::random_point(rng, __VA_ARGS__),
  return Zoo<T>{GEOMOPT_EVERY_MANIFOLD(GEOMOPT_RANDOM_LEAF)};
#undef GEOMOPT_RANDOM_LEAF
}

template <class M>
constexpr bool kSubspace = std::is_same_v<M, geomopt::Grassmann<typename M::Scalar>>;

// The leaf's cost and, where grad is given, its Euclidean gradient; zero exactly at the target.
template <class M>
double leaf_cost(const M& x, const M& target, M* grad) {
  using T = typename M::Scalar;
  const auto& y = x.value();
  const auto& t = target.value();
  if constexpr (kSubspace<M>) {
    const auto tty = (t.transpose() * y).eval();  // f = n - |t^T y|^2 for orthonormal y and t
    if (grad != nullptr) grad->value() = T(-2) * t * tty;
    return static_cast<double>(T(y.cols()) - tty.squaredNorm());
  } else {
    if (grad != nullptr) grad->value() = y - t;
    return 0.5 * static_cast<double>((y - t).squaredNorm());
  }
}

// The leaf's distance to the target: Frobenius, or between the projectors for a subspace.
template <class M>
double leaf_distance(const M& x, const M& target) {
  const auto& y = x.value();
  const auto& t = target.value();
  if constexpr (kSubspace<M>) {
    return static_cast<double>((y * y.transpose() - t * t.transpose()).norm());
  } else {
    return static_cast<double>((y - t).norm());
  }
}

template <class F>
void for_each_leaf(F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) { (f(std::integral_constant<std::size_t, I>{}), ...); }
  (std::make_index_sequence<kLeaves>{});
}

template <class Z>
std::array<double, kLeaves> distances(const Z& x, const Z& target) {
  std::array<double, kLeaves> d{};
  for_each_leaf([&](auto i) { d[i] = leaf_distance(std::get<i>(x), std::get<i>(target)); });
  return d;
}

// The largest check() of the tree's leaves, relative to the leaf's norm (the SPD cone and the hyperboloid are
// unbounded).
template <class Z>
double worst_check(const Z& x) {
  double worst = 0;
  for_each_leaf([&](auto i) {
    const auto& leaf = std::get<i>(x);
    const double scale = std::max(1.0, static_cast<double>(leaf.value().norm()));
    worst = std::max(worst, static_cast<double>(geomopt::check(leaf)) / scale);
  });
  return worst;
}

template <class T>
struct Problem {
  Zoo<T> target;
  double operator()(const Zoo<T>& x, Zoo<T>* grad) const {
    double f = 0;
    for_each_leaf([&](auto i) {
      f += leaf_cost(std::get<i>(x), std::get<i>(target), grad != nullptr ? &std::get<i>(*grad) : nullptr);
    });
    return f;
  }
};

template <class T>
double tolerance_on_manifold() {
  return std::is_same_v<T, float> ? 1e-4 : 1e-11;
}

// Trains from a random start toward a random target by `steps` steps of opt, and checks that every leaf ends on its
// manifold, nearer its target than `reach` times its starting distance (a constant learning rate leaves the adaptive
// optimizers circling the target at a distance of the order of lr, in the metric).
template <class T, class Opt>
void train(Opt& opt, const char* what, int steps, double reach) {
  INFO(std::string(what));
  geomopt::Rng rng(31);
  const Problem<T> problem{random_zoo<T>(rng)};
  Zoo<T> x = random_zoo<T>(rng), grad = x;
  const auto start = distances(x, problem.target);
  auto state = opt.init(x);
  for (int k = 0; k < steps; ++k) {
    problem(x, &grad);
    opt.step(x, grad, state);
  }
  const auto end = distances(x, problem.target);
  for (std::size_t i = 0; i < kLeaves; ++i) {
    INFO(std::string(kNames[i]));
    CAPTURE(start[i]);
    CHECK(end[i] < reach * start[i]);
  }
  CHECK(worst_check(x) < tolerance_on_manifold<T>());
}

}  // namespace

TEST_CASE("every optimizer trains every manifold to its target and keeps it on the manifold") {
  using geomopt::SectionPolicy;
  // Each section policy once, and each thread count once: the threads share out leaves, not arithmetic.
  struct Setting {
    SectionPolicy policy;
    int threads;
  };
  for (const Setting setting : {Setting{SectionPolicy::recomputed, 1}, Setting{SectionPolicy::transported, 2}}) {
    const geomopt::CommonOptions common{.section = setting.policy, .threads = setting.threads};
    INFO("section policy ", static_cast<int>(setting.policy), ", threads ", setting.threads);
    geomopt::Adam adam_f({.lr = 0.02}, common);
    train<float>(adam_f, "Adam, float", 600, 0.05);
    geomopt::Adam adam({.lr = 0.02}, common);
    train<double>(adam, "Adam", 600, 0.05);
    geomopt::AdamW adamw({.lr = 0.02, .weight_decay = 1e-3}, common);
    train<double>(adamw, "AdamW", 600, 0.05);
    geomopt::SGD sgd({.lr = 0.02, .momentum = 0.9}, common);
    train<double>(sgd, "SGD with momentum", 1000, 0.05);
    geomopt::RMSprop rmsprop({.lr = 0.01}, common);
    train<double>(rmsprop, "RMSprop", 600, 0.05);
    geomopt::Adagrad adagrad({.lr = 0.3}, common);
    train<double>(adagrad, "Adagrad", 600, 0.05);
    geomopt::Muon::Options muon_options;  // no plain matrix in the tree: every leaf takes the fallback, AdamW
    muon_options.fallback.lr = 0.02;
    muon_options.fallback.weight_decay = 1e-3;
    geomopt::Muon muon(muon_options, common);
    train<double>(muon, "Muon's fallback", 600, 0.05);
  }
}

TEST_CASE("every solver reaches every manifold's target") {
  for (auto method : {geomopt::SolverMethod::gradient_descent, geomopt::SolverMethod::conjugate_gradient,
                      geomopt::SolverMethod::lbfgs, geomopt::SolverMethod::bfgs, geomopt::SolverMethod::trust_region}) {
    CAPTURE(static_cast<int>(method));
    geomopt::Rng rng(32);
    const Problem<double> problem{random_zoo<double>(rng)};
    Zoo<double> x = random_zoo<double>(rng);
    geomopt::SolverOptions options;
    options.method = method;
    // |x - t| is of the order of the gradient's norm; below about 1e-8 the cost, of order |x - t|^2, is rounding.
    options.gradient_tolerance = 1e-7;
    options.max_iterations = 5000;
    const geomopt::SolverSummary summary = geomopt::minimize(problem, x, options);
    INFO(summary.BriefReport());
    CHECK(summary.IsSolutionUsable());
    const auto end = distances(x, problem.target);
    for (std::size_t i = 0; i < kLeaves; ++i) {
      INFO(std::string(kNames[i]));
      CHECK(end[i] < 1e-5);
    }
    CHECK(worst_check(x) < tolerance_on_manifold<double>());
  }
}

TEST_CASE("every manifold's leaf, section and moments resume bit for bit from a checkpoint") {
  iotest::ScratchDir dir("every_manifold");
  geomopt::Adam adam({.lr = 0.02}, {.ema_decay = 0.9, .section = geomopt::SectionPolicy::transported});
  geomopt::Rng rng(33);
  const Problem<double> problem{random_zoo<double>(rng)};
  const Zoo<double> x0 = random_zoo<double>(rng);
  auto run = [&](Zoo<double>& x, auto& state, int steps) {
    Zoo<double> grad = x;
    for (int k = 0; k < steps; ++k) {
      problem(x, &grad);
      adam.step(x, grad, state);
    }
  };
  Zoo<double> a = x0;
  auto sa = adam.init(a);
  run(a, sa, 8);

  Zoo<double> b = x0;
  auto sb = adam.init(b);
  run(b, sb, 4);
  geomopt::io::save_checkpoint(dir.file("ckpt.h5"), b, sb);
  const std::string listing = geomopt::io::describe(dir.file("ckpt.h5"));
  for (std::size_t i = 0; i < kLeaves; ++i) {  // each leaf as its manifold, with its moments
    INFO(std::string(kNames[i]));
    CHECK(listing.find(std::string(kNames[i]) + "(") != std::string::npos);
    CHECK(listing.find("  " + std::to_string(i) + ".exp_avg_sq ") != std::string::npos);
  }

  Zoo<double> c = random_zoo<double>(rng);
  auto sc = adam.init(c);
  REQUIRE(iotest::snapshot(c) != iotest::snapshot(b));
  CHECK(geomopt::io::load_checkpoint(dir.file("ckpt.h5"), c, sc).complete());
  CHECK(iotest::snapshot(c) == iotest::snapshot(b));
  run(c, sc, 4);
  CHECK(iotest::snapshot(c) == iotest::snapshot(a));
  REQUIRE(sc.ema() != nullptr);
  CHECK(iotest::snapshot(*sc.ema()) == iotest::snapshot(*sa.ema()));
}

namespace {

// r = y - t on one block of `size` entries, with the identity as its Jacobian.
class Difference final : public ceres::CostFunction {
 public:
  explicit Difference(Eigen::VectorXd target) : target_(std::move(target)) {
    set_num_residuals(static_cast<int>(target_.size()));
    mutable_parameter_block_sizes()->push_back(static_cast<int>(target_.size()));
  }
  bool Evaluate(double const* const* parameters, double* residuals, double** jacobians) const override {
    const Eigen::Index n = target_.size();
    Eigen::Map<Eigen::VectorXd>(residuals, n) = Eigen::Map<const Eigen::VectorXd>(parameters[0], n) - target_;
    if (jacobians != nullptr && jacobians[0] != nullptr)
      Eigen::Map<Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(jacobians[0], n, n)
          .setIdentity();
    return true;
  }

 private:
  Eigen::VectorXd target_;
};

// Fits a random point of M to a random target in a ceres::Problem whose block has CeresManifold<M>(dims...).
template <class M, class... D>
void fit_in_ceres(const char* name, D... dims) {
  INFO(std::string(name));
  if constexpr (geomopt::ceres_block_is_point<M>) {
    geomopt::Rng rng(34);
    const M target = M::random_point(rng, dims...);
    M x = M::random_point(rng, dims...);
    const Eigen::Index size = x.value().size();
    const Eigen::VectorXd t = Eigen::Map<const Eigen::VectorXd>(target.value().data(), size);
    ceres::Problem problem;
    problem.AddResidualBlock(new Difference(t), nullptr, x.value().data());
    problem.SetManifold(x.value().data(), new geomopt::CeresManifold<M>(dims...));
    ceres::Solver::Options options;
    options.function_tolerance = 0;
    options.parameter_tolerance = 0;
    options.gradient_tolerance = 1e-14;
    options.max_num_iterations = 200;
    ceres::Solver::Summary summary;
    ceres::Solve(options, &problem, &summary);
    INFO(summary.BriefReport());
    CHECK(summary.IsSolutionUsable());
    CHECK(leaf_distance(x, target) < 1e-8);
    CHECK(geomopt::check(x) < 1e-12 * std::max(1.0, x.value().norm()));
  } else {
    MESSAGE(std::string(name)
            << ": a Ceres block is a representative, not a point; CeresManifold refuses it at compile time");
  }
}

}  // namespace

TEST_CASE("every manifold whose block is a point is fitted in a ceres::Problem by CeresManifold<M>(dims...)") {
#define GEOMOPT_FIT_IN_CERES(Name, ...) fit_in_ceres<geomopt::Name<double>>(#Name, __VA_ARGS__);
  GEOMOPT_EVERY_MANIFOLD(GEOMOPT_FIT_IN_CERES)
#undef GEOMOPT_FIT_IN_CERES
}
