// The optimizer driver: per-leaf options, frozen leaves, state layout and size, the transforms (clipping, schedules,
// EMA, non-finite policy), threads, custom kernels, error handling and allocation-free steps (Muon's and msign's
// too). Each expected value is a hand computation from the formula, not a second run of the code.
#include "../support/count_allocations.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <geomopt/optimizers.hpp>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

using geomopt::ptree::Path;

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
template <class T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;

template <class T>
struct Net {
  Mat<T> w;
  Vec<T> b;
  geomopt::SymmetricMatrix<T> s;
  T scale = 0;
  GEOMOPT_PTREE(w, b, s, scale)
};

template <class T>
Net<T> make_net(T base) {
  Net<T> n;
  n.w.resize(3, 4);
  for (Eigen::Index i = 0; i < n.w.size(); ++i) n.w(i) = base + T(0.1) * T(i);
  n.b.resize(5);
  for (Eigen::Index i = 0; i < n.b.size(); ++i) n.b(i) = base - T(0.2) * T(i);
  n.s = geomopt::SymmetricMatrix<T>(3);
  for (Eigen::Index i = 0; i < 6; ++i) n.s.storage()(i) = base + T(0.3) * T(i);
  n.scale = base * T(2);
  return n;
}

template <class T>
Vec<T> flat(const Net<T>& n) {
  return geomopt::ptree::flatten(n);
}

struct Wide {
  std::vector<Mat<float>> layers;
  GEOMOPT_PTREE(layers)
};

struct Tied {
  std::shared_ptr<Vec<double>> enc, dec;
  GEOMOPT_PTREE(enc, dec)
};

// One leaf of every geometry.
template <class T>
struct Mixed {
  geomopt::Stiefel<T> frame;
  geomopt::Grassmann<T> plane;
  geomopt::Sphere<T> direction;
  geomopt::SpecialOrthogonal<T> rotation;
  geomopt::SPD<T> metric;
  geomopt::SkewSymMatrix<T> generator;
  Mat<T> weight;
  GEOMOPT_PTREE(frame, plane, direction, rotation, metric, generator, weight)
};

template <class T>
Mixed<T> make_mixed(geomopt::Rng& rng) {
  Mixed<T> m{geomopt::Stiefel<T>::random_point(rng, 20, 5),
             geomopt::Grassmann<T>::random_point(rng, 8, 3),
             geomopt::Sphere<T>::random_point(rng, 7),
             geomopt::SpecialOrthogonal<T>::random_point(rng, 4),
             geomopt::SPD<T>::random_point(rng, 4),
             geomopt::SkewSymMatrix<T>(4),
             Mat<T>::Random(3, 5)};
  m.generator.storage().setRandom();
  return m;
}

// A gradient tree: every leaf's storage random.
template <class T>
Mixed<T> random_gradient(const Mixed<T>& like, unsigned seed) {
  Mixed<T> g = like;
  std::srand(seed);
  geomopt::ptree::for_each_storage([](auto& b) { b.setRandom(); }, g);
  return g;
}

bool bitwise_equal(const Vec<double>& a, const Vec<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(double) * std::size_t(a.size())) == 0;
}

}  // namespace

TEST_CASE_TEMPLATE("the first Adam step on f(x) = c . x is -lr sign(c)", T, float, double) {
  Net<T> x = make_net<T>(T(0.5));
  Net<T> c = make_net<T>(T(-0.73));  // the gradient of c . x is c: entries of both signs and several sizes
  c.w(0, 0) = T(0.05);
  c.b(1) = T(250);
  const Vec<T> x0 = flat(x), cf = flat(c);
  REQUIRE((cf.array().abs() >= T(0.01)).all());  // eps = 1e-8 moves the step by eps / |c| relative
  const double lr = 1e-3;
  geomopt::Adam adam({.lr = lr});
  auto state = adam.init(x);
  adam.step(x, c, state);
  const Vec<T> moved = flat(x) - x0;
  for (Eigen::Index i = 0; i < moved.size(); ++i) {
    CAPTURE(i);
    const double expected = -lr * (cf(i) > 0 ? 1.0 : -1.0);
    // 1e-6 relative to the step: float's own rounding of x + step is about 6e-8 |x| / lr = 3e-5 of the step, so
    // compare the update recomputed in double from the float values only where the rounding allows.
    const double tolerance = std::is_same_v<T, float> ? 1e-6 * lr + 1e-7 * std::abs(double(x0(i))) : 1e-6 * lr;
    CHECK(std::abs(static_cast<double>(moved(i)) - expected) <= tolerance);
  }
}

TEST_CASE("state size is exact and laid out like the flattened tree") {
  Net<float> x = make_net<float>(1.0f);
  const auto n = static_cast<std::size_t>(geomopt::ptree::count(x));
  REQUIRE(n == 12 + 5 + 6 + 1);

  geomopt::Adam adam({.lr = 1e-3});
  auto adam_state = adam.init(x);
  CHECK(adam_state.nbytes() == 2 * n * sizeof(float));
  CHECK(adam_state.coordinates() == Eigen::Index(n));

  geomopt::Adam ams({.lr = 1e-3, .amsgrad = true});
  CHECK(ams.init(x).nbytes() == 3 * n * sizeof(float));

  geomopt::SGD plain({.lr = 0.1});
  CHECK(plain.init(x).nbytes() == 0);
  geomopt::SGD momentum({.lr = 0.1, .momentum = 0.9});
  CHECK(momentum.init(x).nbytes() == n * sizeof(float));

  geomopt::RMSprop centered({.lr = 0.1, .momentum = 0.5, .centered = true});
  auto rms = centered.init(x);
  CHECK(rms.nbytes() == 3 * n * sizeof(float));
  CHECK(std::vector<std::string>(rms.slot_names().begin(), rms.slot_names().end()) ==
        std::vector<std::string>{"square_avg", "momentum_buffer", "grad_avg"});

  geomopt::Adam ema({.lr = 1e-3}, {.ema_decay = 0.9});
  CHECK(ema.init(x).nbytes() == 3 * n * sizeof(float));

  // Slots by path, shaped like their leaves; the packed leaf shows its storage.
  std::map<std::string, std::pair<Eigen::Index, Eigen::Index>> shapes;
  std::vector<std::string> names;
  adam_state.for_each_slot([&](const std::string& path, std::string_view name, auto data) {
    shapes[path] = {data.rows(), data.cols()};
    names.push_back(path + "/" + std::string(name));
  });
  CHECK(names == std::vector<std::string>{"w/exp_avg", "w/exp_avg_sq", "b/exp_avg", "b/exp_avg_sq", "s/exp_avg",
                                          "s/exp_avg_sq", "scale/exp_avg", "scale/exp_avg_sq"});
  CHECK(shapes["w"] == std::pair<Eigen::Index, Eigen::Index>{3, 4});
  CHECK(shapes["b"] == std::pair<Eigen::Index, Eigen::Index>{5, 1});
  CHECK(shapes["s"] == std::pair<Eigen::Index, Eigen::Index>{6, 1});
  CHECK(shapes["scale"] == std::pair<Eigen::Index, Eigen::Index>{1, 1});
}

TEST_CASE("frozen leaves have no state and are never written") {
  Net<double> x = make_net<double>(0.3);
  const Net<double> g = make_net<double>(-1.1);
  const Net<double> before = x;
  geomopt::Adam adam({.lr = 0.1}, {.ema_decay = 0.5});
  auto rule = [](const Path& p) { return geomopt::LeafOptions{.frozen = p.str() == "w" || p.str() == "scale"}; };
  auto state = adam.init(x, rule);
  // Adam's two moments for b (5) and s (6) only; the EMA is a whole tree (24 numbers).
  CHECK(state.nbytes() == (2 * 11 + 24) * sizeof(double));
  std::vector<std::string> paths;
  state.for_each_slot([&](const std::string& path, std::string_view, auto) { paths.push_back(path); });
  CHECK(paths == std::vector<std::string>{"b", "b", "s", "s"});
  for (int k = 0; k < 3; ++k) adam.step(x, g, state);
  CHECK(std::memcmp(x.w.data(), before.w.data(), sizeof(double) * 12) == 0);
  CHECK(std::memcmp(&x.scale, &before.scale, sizeof(double)) == 0);
  CHECK((x.b - before.b).norm() > 0.1);
  CHECK(state.leaf_frozen(0));
  CHECK_FALSE(state.leaf_frozen(1));
}

namespace {

// Leaves of each kind, three of them frozen: a Euclidean matrix (which Muon would take), a manifold point and a packed
// leaf; the others take Muon's step (w), ManifoldMuon's (frame; Muon hands it to AdamW) and the fallback's (b).
template <class T>
struct PartlyFrozen {
  Mat<T> embed;
  geomopt::Stiefel<T> frame;
  geomopt::Grassmann<T> plane;
  geomopt::SymmetricMatrix<T> sym;
  Mat<T> w;
  Vec<T> b;
  GEOMOPT_PTREE(embed, frame, plane, sym, w, b)
};

bool frozen_path(const std::string& p) { return p == "embed" || p == "plane" || p == "sym"; }

PartlyFrozen<double> make_partly_frozen() {
  geomopt::Rng rng(11);
  PartlyFrozen<double> x{Mat<double>::Random(16, 16),
                         geomopt::Stiefel<double>::random_point(rng, 7, 3),
                         geomopt::Grassmann<double>::random_point(rng, 6, 2),
                         geomopt::SymmetricMatrix<double>(3),
                         Mat<double>::Random(4, 3),
                         Vec<double>::Random(5)};
  x.sym.storage().setRandom();
  return x;
}

// Gradients of x's shape; the frozen leaves' are either empty or poisoned: NaN in embed, 1e150 in plane and sym, so
// that clipping, the non-finite check or a kernel that read them would change the step. The other leaves' gradients
// depend on the seed only.
PartlyFrozen<double> frozen_test_gradient(const PartlyFrozen<double>& x, unsigned seed, bool empty) {
  PartlyFrozen<double> g = x;
  std::srand(seed);
  geomopt::ptree::for_each_storage([](auto& b) { b.setRandom(); }, g);
  if (empty) {
    g.embed.resize(0, 0);
    g.plane = {};
    g.sym = {};
  } else {
    g.embed.setConstant(std::numeric_limits<double>::quiet_NaN());
    g.plane.value().setConstant(1e150);
    g.sym.storage().setConstant(1e150);
  }
  return g;
}

template <class Tree>
std::vector<unsigned char> tree_bytes(const Tree& t) {
  std::vector<unsigned char> out;
  geomopt::ptree::for_each_storage(
      [&](const auto& b) {
        const auto* p = reinterpret_cast<const unsigned char*>(b.data());
        out.insert(out.end(), p, p + sizeof(double) * static_cast<std::size_t>(b.size()));
      },
      t);
  return out;
}

template <class State>
std::vector<unsigned char> state_bytes(const State& s) {
  std::vector<unsigned char> out;
  s.for_each_slot([&](const std::string&, std::string_view, const auto& data) {
    const auto* p = reinterpret_cast<const unsigned char*>(data.data());
    out.insert(out.end(), p, p + sizeof(double) * static_cast<std::size_t>(data.size()));
  });
  return out;
}

// A frozen leaf keeps no state and takes an empty gradient; the other leaves step bitwise as with full gradients.
template <class Opt>
void check_frozen_leaves(Opt opt, const char* name) {
  CAPTURE(name);
  const PartlyFrozen<double> start = make_partly_frozen();
  const auto rule = [](const Path& p) { return geomopt::LeafOptions{.frozen = frozen_path(p.str())}; };
  PartlyFrozen<double> a = start, b = start;
  auto sa = opt.init(a, rule);
  auto sb = opt.init(b, rule);

  // No state: no array names a frozen leaf, and the state is smaller by exactly their arrays in an unfrozen one.
  std::size_t frozen_bytes = 0;
  opt.init(start).for_each_slot([&](const std::string& path, std::string_view, const auto& data) {
    if (frozen_path(path)) frozen_bytes += sizeof(double) * static_cast<std::size_t>(data.size());
  });
  CHECK(frozen_bytes > 0);
  sa.for_each_slot([](const std::string& path, std::string_view, const auto&) { CHECK_FALSE(frozen_path(path)); });
  CHECK(sa.nbytes() == opt.init(start).nbytes() - frozen_bytes);
  for (std::size_t i = 0; i < sa.leaf_count(); ++i) CHECK(sa.leaf_frozen(i) == frozen_path(sa.leaf_path(i)));

  for (unsigned k = 0; k < 3; ++k) {
    const geomopt::StepReport ra = opt.step(a, frozen_test_gradient(a, 20 + k, false), sa);
    const geomopt::StepReport rb = opt.step(b, frozen_test_gradient(b, 20 + k, true), sb);
    CHECK(ra.applied);
    CHECK(rb.applied);
    CHECK(ra.grad_norm == rb.grad_norm);
    CHECK(ra.clip_scale < 1);  // clipping is on, and ran
  }
  CHECK(tree_bytes(a) == tree_bytes(b));
  CHECK(state_bytes(sa) == state_bytes(sb));
  REQUIRE(sa.ema() != nullptr);
  CHECK(tree_bytes(*sa.ema()) == tree_bytes(*sb.ema()));
  CHECK(std::memcmp(a.embed.data(), start.embed.data(), sizeof(double) * 256) == 0);
  CHECK(a.plane.value() == start.plane.value());
  CHECK(a.sym.storage() == start.sym.storage());
  CHECK(a.w != start.w);
  CHECK(a.frame.value() != start.frame.value());
  CHECK(a.b != start.b);

  // A frozen leaf's gradient of another non-empty shape, or an empty gradient of a leaf that is not frozen, is a
  // mistake: refused naming the leaf and what was expected, before anything is written.
  const auto before = tree_bytes(b);
  PartlyFrozen<double> g = frozen_test_gradient(b, 1, true);
  g.embed.resize(2, 16);
  CHECK_THROWS_WITH_AS(opt.step(b, g, sb),
                       "embed: the gradient of this frozen leaf is 2x16, the leaf 16x16: a frozen leaf takes an "
                       "empty gradient (0x0) or one of the leaf's shape",
                       geomopt::StructureError);
  g = frozen_test_gradient(b, 1, true);
  g.sym = geomopt::SymmetricMatrix<double>(2);
  CHECK_THROWS_WITH_AS(opt.step(b, g, sb),
                       doctest::Contains("sym: the gradient of this frozen leaf is 3x1, the leaf 6x1"),
                       geomopt::StructureError);
  for (const char* leaf : {"w", "frame", "b"}) {
    CAPTURE(leaf);
    g = frozen_test_gradient(b, 1, true);
    const std::string p = leaf;
    if (p == "w") g.w.resize(0, 0);
    if (p == "frame") g.frame = {};
    if (p == "b") g.b.resize(0);
    const std::string shape = p == "w" ? "0x0, the leaf 4x3" : p == "frame" ? "0x0, the leaf 7x3" : "0x1, the leaf 5x1";
    CHECK_THROWS_WITH_AS(opt.step(b, g, sb),
                         (p + ": the gradient is " + shape +
                          ": it must have the leaf's shape (only a frozen leaf's gradient may be empty, or any leaf's "
                          "with MissingGradient::skip)")
                             .c_str(),
                         geomopt::StructureError);
  }
  CHECK(tree_bytes(b) == before);
  CHECK(sb.step_count() == 3);
}

}  // namespace

TEST_CASE("a frozen leaf takes an empty gradient and keeps no state, in every optimizer") {
  // Clipping, the EMA, two threads and the non-finite check on: none of them may read a frozen leaf's gradient.
  const geomopt::CommonOptions common{
      .clip_norm = 0.5, .ema_decay = 0.9, .non_finite = geomopt::NonFinitePolicy::raise, .threads = 2};
  check_frozen_leaves(geomopt::SGD({.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01}, common), "SGD");
  check_frozen_leaves(geomopt::Adam({.lr = 0.01, .amsgrad = true}, common), "Adam");
  check_frozen_leaves(geomopt::AdamW({.lr = 0.01, .weight_decay = 0.1}, common), "AdamW");
  check_frozen_leaves(geomopt::RMSprop({.lr = 0.01, .momentum = 0.5, .centered = true}, common), "RMSprop");
  check_frozen_leaves(geomopt::Adagrad({.lr = 0.1}, common), "Adagrad");
  check_frozen_leaves(geomopt::Muon({.lr = 0.02, .weight_decay = 0.01}, common), "Muon");
  check_frozen_leaves(geomopt::ManifoldMuon({.lr = 0.02}, common), "ManifoldMuon");
}

// MissingGradient::skip: a leaf whose gradient is empty sits the step out with its own step count, as torch.optim
// skips a parameter whose .grad is None. The reference steps each leaf as a tree of its own, only at the steps where
// it has a gradient: the two must agree bit for bit (parameters, slots, moving average).
template <class Opt>
void check_missing_gradients(Opt opt, const char* name) {
  CAPTURE(name);
  using Tree = PartlyFrozen<double>;
  const Tree start = make_partly_frozen();
  Tree x = start;
  auto st = opt.init(x);
  // Which leaves lack a gradient at each step: none, then w and frame, then b, then embed and sym.
  const std::vector<std::vector<std::string>> missing = {{}, {"w", "frame"}, {"b"}, {"embed", "sym"}, {}};
  auto lacks = [&](std::size_t k, const char* leaf) {
    return std::find(missing[k].begin(), missing[k].end(), leaf) != missing[k].end();
  };
  std::vector<Tree> grads;
  for (std::size_t k = 0; k < missing.size(); ++k) {
    Tree g = frozen_test_gradient(x, 40 + static_cast<unsigned>(k), false);
    std::srand(90 + static_cast<unsigned>(k));
    g.embed.setRandom();
    g.plane.value().setRandom();
    g.sym.storage().setRandom();
    if (lacks(k, "w")) g.w.resize(0, 0);
    if (lacks(k, "frame")) g.frame = {};
    if (lacks(k, "b")) g.b.resize(0);
    if (lacks(k, "embed")) g.embed.resize(0, 0);
    if (lacks(k, "sym")) g.sym = {};
    grads.push_back(g);
    CHECK(opt.step(x, g, st).applied);
  }
  CHECK(st.step_count() == 5);
  std::map<std::string, std::int64_t> own;
  for (std::size_t i = 0; i < st.leaf_count(); ++i) own[st.leaf_path(i)] = st.leaf_step_count(i);
  CHECK(own ==
        std::map<std::string, std::int64_t>{{"embed", 4}, {"frame", 4}, {"plane", 5}, {"sym", 4}, {"w", 4}, {"b", 4}});
  std::map<std::string, std::int64_t> reported;
  st.for_each_leaf_step([&](const std::string& path, std::int64_t n) { reported[path] = n; });
  CHECK(reported.size() == 5);  // every leaf but plane

  // Each leaf as its own tree, stepped only when it has a gradient.
  auto reference = [&](auto member, const char* leaf) {
    CAPTURE(leaf);
    using L = std::remove_cvref_t<decltype(start.*member)>;
    std::tuple<L> y{start.*member};
    auto sy = opt.init(y);
    for (std::size_t k = 0; k < missing.size(); ++k)
      if (!lacks(k, leaf)) opt.step(y, std::tuple<L>{grads[k].*member}, sy);
    CHECK(tree_bytes(y) == tree_bytes(std::tuple<L>{x.*member}));
    std::vector<unsigned char> mine, theirs;
    st.for_each_slot([&](const std::string& path, std::string_view, const auto& d) {
      if (path != leaf) return;
      const auto* p = reinterpret_cast<const unsigned char*>(d.data());
      mine.insert(mine.end(), p, p + sizeof(double) * static_cast<std::size_t>(d.size()));
    });
    CHECK(mine == state_bytes(sy));
    REQUIRE(st.ema() != nullptr);
    CHECK(tree_bytes(*sy.ema()) == tree_bytes(std::tuple<L>{st.ema()->*member}));
  };
  reference(&Tree::embed, "embed");
  reference(&Tree::frame, "frame");
  reference(&Tree::plane, "plane");
  reference(&Tree::sym, "sym");
  reference(&Tree::w, "w");
  reference(&Tree::b, "b");

  // A leaf's own count restores from a checkpoint, and stays between 0 and the state's.
  auto fresh = opt.init(start);
  fresh.set_step_count(5);
  for (std::size_t i = 0; i < st.leaf_count(); ++i) fresh.set_leaf_step_count(i, st.leaf_step_count(i));
  CHECK(fresh.leaf_step_count(0) == 4);
  CHECK_THROWS_WITH_AS(fresh.set_leaf_step_count(0, 6),
                       "embed: a leaf's step count must be from 0 to the state's 5, got 6", std::invalid_argument);
  fresh.set_step_count(7);
  CHECK(fresh.leaf_step_count(0) == 7);
}

TEST_CASE("MissingGradient::skip: a leaf without a gradient sits the step out and keeps its own step count") {
  geomopt::CommonOptions common{.ema_decay = 0.9, .missing_gradient = geomopt::MissingGradient::skip};
  check_missing_gradients(geomopt::Adam({.lr = 1e-2}, common), "Adam");
  check_missing_gradients(geomopt::SGD({.lr = 1e-2, .momentum = 0.9, .nesterov = true}, common), "SGD");
  check_missing_gradients(geomopt::Adagrad({.lr = 1e-2, .lr_decay = 0.1}, common), "Adagrad");
  common.threads = 2;
  check_missing_gradients(geomopt::AdamW({.lr = 1e-2, .amsgrad = true}, common), "AdamW, 2 threads");
}

namespace {
struct OneSpd {
  geomopt::SPD<double> s;
  GEOMOPT_PTREE(s)
};
}  // namespace

TEST_CASE("SPD: a step takes the manifold's default retraction, geodesic; the free retract defaults to second_order") {
  geomopt::Rng rng(5);
  const OneSpd start{geomopt::SPD<double>::random_point(rng, 4)};
  OneSpd g{geomopt::SPD<double>(Mat<double>::Random(4, 4))};
  g.s.value() = (g.s.value() + g.s.value().transpose()).eval();
  CHECK(geomopt::default_retraction<geomopt::SPD<double>>() == geomopt::Retraction::geodesic);
  auto step = [&](geomopt::CommonOptions common) {
    OneSpd x = start;
    geomopt::SGD sgd({.lr = 0.1}, common);
    auto st = sgd.init(x);
    std::string recorded;
    st.for_each_leaf_option([&](const std::string&, std::string_view name, auto value) {
      if constexpr (std::is_same_v<decltype(value), const char*>)
        if (name == "retraction") recorded = value;
    });
    sgd.step(x, g, st);
    return std::pair{x.s.value(), recorded};
  };
  const auto by_default = step({});
  const auto by_geodesic = step({.retraction = geomopt::Retraction::geodesic});
  const auto by_second = step({.retraction = geomopt::Retraction::second_order});
  CHECK(by_default.second == "geodesic");
  CHECK(by_geodesic.second == "geodesic");
  CHECK(by_second.second == "second_order");
  const Mat<double>& geodesic = by_geodesic.first;
  const Mat<double>& second = by_second.first;
  CHECK(by_default.first == geodesic);
  CHECK((by_default.first - second).norm() > 1e-6);
  // The same step by the free functions: geodesic only when asked.
  const auto xi = geomopt::lift(start.s, g.s.value());
  geomopt::ScaledSymmetricMatrix<double> minus = xi;
  minus.storage() *= -0.1;
  geomopt::SPD<double> free_default = start.s, free_geodesic = start.s;
  geomopt::retract(free_default, minus);
  geomopt::retract(free_geodesic, minus, geomopt::Retraction::geodesic);
  CHECK((free_geodesic.value() - geodesic).norm() <= 1e-12 * geodesic.norm());
  CHECK((free_default.value() - second).norm() <= 1e-12 * second.norm());
}

TEST_CASE("per-leaf learning-rate scale and weight decay") {
  Net<double> x = make_net<double>(0.5);
  const Net<double> g = make_net<double>(0.25);
  const Net<double> x0 = x;
  geomopt::SGD sgd({.lr = 0.1, .weight_decay = 0.01});
  auto state = sgd.init(x, [](const Path& p) {
    if (p.str() == "w") return geomopt::LeafOptions{.lr_scale = 0.5};
    if (p.str() == "b") return geomopt::LeafOptions{.weight_decay = 0.0};
    return geomopt::LeafOptions{};
  });
  sgd.step(x, g, state);
  // p <- p - lr_leaf (g + wd_leaf p)
  CHECK((x.w - (x0.w - 0.05 * (g.w + 0.01 * x0.w))).norm() < 1e-15);
  CHECK((x.b - (x0.b - 0.1 * g.b)).norm() < 1e-15);
  CHECK(x.scale == doctest::Approx(x0.scale - 0.1 * (g.scale + 0.01 * x0.scale)).epsilon(1e-15));
}

TEST_CASE("clipping by global norm matches clip_grad_norm_") {
  Net<double> x = make_net<double>(0.0);
  Net<double> g = make_net<double>(0.0);
  geomopt::ptree::for_each_storage([](auto& b) { b = decltype(b)(b) * 0; }, g);
  g.w(0, 0) = 3;
  g.b(4) = -4;  // global norm 5
  const Net<double> x0 = x;
  SUBCASE("above the threshold: scaled by clip / (norm + 1e-6)") {
    geomopt::SGD sgd({.lr = 1}, {.clip_norm = 1});
    auto state = sgd.init(x);
    const geomopt::StepReport r = sgd.step(x, g, state);
    CHECK(r.grad_norm == doctest::Approx(5.0).epsilon(1e-15));
    const double scale = 1 / (5 + 1e-6);
    CHECK(r.clip_scale == doctest::Approx(scale).epsilon(1e-15));
    CHECK(x.w(0, 0) == doctest::Approx(x0.w(0, 0) - 3 * scale).epsilon(1e-15));
    CHECK(x.b(4) == doctest::Approx(x0.b(4) + 4 * scale).epsilon(1e-15));
    CHECK((flat(x) - flat(x0)).norm() == doctest::Approx(5 * scale).epsilon(1e-14));
  }
  SUBCASE("below the threshold: unchanged gradients") {
    geomopt::SGD sgd({.lr = 1}, {.clip_norm = 10});
    auto state = sgd.init(x);
    const geomopt::StepReport r = sgd.step(x, g, state);
    CHECK(r.clip_scale == 1);
    CHECK(x.w(0, 0) == x0.w(0, 0) - 3);
  }
}

TEST_CASE("schedules by hand") {
  using namespace geomopt::schedules;
  CHECK(constant()(17) == 1);
  const auto s = step_decay(3, 0.5);
  CHECK(s(0) == 1);
  CHECK(s(2) == 1);
  CHECK(s(3) == 0.5);
  CHECK(s(7) == 0.25);
  CHECK(exponential(0.9)(2) == doctest::Approx(0.81));
  const auto c = cosine(10, 2, 0.1);
  CHECK(c(0) == doctest::Approx(1.0 / 3));
  CHECK(c(1) == doctest::Approx(2.0 / 3));
  CHECK(c(2) == doctest::Approx(1.0));
  CHECK(c(6) == doctest::Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.5))));
  CHECK(c(10) == doctest::Approx(0.1));
  CHECK(c(100) == doctest::Approx(0.1));
  CHECK_THROWS_AS(cosine(5, 5), std::invalid_argument);

  // The optimizer applies factor(t) at its (t + 1)-th step: SGD with unit gradients moves by lr * factor.
  Net<double> x = make_net<double>(0.0);
  Net<double> g = make_net<double>(0.0);
  geomopt::ptree::for_each_storage([](auto& b) { b = decltype(b)(b) * 0 + decltype(b)(b) * 0; }, g);
  g.scale = 1;
  geomopt::SGD sgd({.lr = 0.1}, {.schedule = [](std::int64_t t) { return t == 0 ? 1.0 : 1.0 / double(t + 1); }});
  auto state = sgd.init(x);
  double expected = x.scale;
  for (int t = 0; t < 4; ++t) {
    const auto r = sgd.step(x, g, state);
    const double lr = 0.1 * (t == 0 ? 1.0 : 1.0 / (t + 1));
    CHECK(r.lr == doctest::Approx(lr));
    expected -= lr;
    CHECK(x.scale == doctest::Approx(expected).epsilon(1e-15));
  }
  CHECK(state.step_count() == 4);
}

TEST_CASE("EMA of the parameters by hand") {
  Net<double> x = make_net<double>(1.0);
  Net<double> g = make_net<double>(0.5);
  geomopt::SGD sgd({.lr = 0.1}, {.ema_decay = 0.75});
  auto state = sgd.init(x);
  Vec<double> ema = flat(x);  // starts at the parameters
  for (int t = 0; t < 3; ++t) {
    sgd.step(x, g, state);
    ema = 0.75 * ema + 0.25 * flat(x);
  }
  REQUIRE(state.ema() != nullptr);
  CHECK((flat(*state.ema()) - ema).norm() < 1e-14);
  CHECK((flat(geomopt::ema_params(state)) - ema).norm() < 1e-14);
  geomopt::SGD no_ema({.lr = 0.1});
  auto plain = no_ema.init(x);
  CHECK(plain.ema() == nullptr);
  CHECK_THROWS_AS(geomopt::ema_params(plain), std::logic_error);
}

TEST_CASE("a non-finite gradient: skip, raise or propagate") {
  Net<double> x = make_net<double>(0.5);
  Net<double> g = make_net<double>(0.1);
  g.s = geomopt::SymmetricMatrix<double>(3);
  g.s.storage()(4) = std::numeric_limits<double>::quiet_NaN();

  SUBCASE("skip leaves parameters, moments and step count untouched") {
    geomopt::Adam adam({.lr = 0.1}, {.ema_decay = 0.5, .non_finite = geomopt::NonFinitePolicy::skip});
    auto state = adam.init(x);
    Net<double> good = make_net<double>(0.2);
    adam.step(x, good, state);  // non-zero moments
    const Vec<double> before = flat(x);
    std::vector<double> moments;
    state.for_each_slot([&](const std::string&, std::string_view, auto m) {
      for (Eigen::Index i = 0; i < m.size(); ++i) moments.push_back(m.data()[i]);
    });
    const geomopt::StepReport r = adam.step(x, g, state);
    CHECK_FALSE(r.applied);
    REQUIRE(r.non_finite_leaf != nullptr);
    CHECK(*r.non_finite_leaf == "s");
    CHECK(state.step_count() == 1);
    CHECK(bitwise_equal(flat(x), before));
    std::vector<double> after;
    state.for_each_slot([&](const std::string&, std::string_view, auto m) {
      for (Eigen::Index i = 0; i < m.size(); ++i) after.push_back(m.data()[i]);
    });
    CHECK(std::memcmp(after.data(), moments.data(), sizeof(double) * moments.size()) == 0);
  }
  SUBCASE("raise throws naming the leaf, before any write") {
    geomopt::SGD sgd({.lr = 0.1, .momentum = 0.9}, {.non_finite = geomopt::NonFinitePolicy::raise});
    auto state = sgd.init(x);
    const Vec<double> before = flat(x);
    try {
      sgd.step(x, g, state);
      FAIL("no exception");
    } catch (const geomopt::NonFiniteGradient& e) {
      CHECK(std::string(e.what()).find("s:") == 0);
    }
    CHECK(bitwise_equal(flat(x), before));
    CHECK(state.step_count() == 0);
  }
  SUBCASE("an infinity is caught as well") {
    g = make_net<double>(0.1);
    g.b(2) = -std::numeric_limits<double>::infinity();
    geomopt::SGD sgd({.lr = 0.1}, {.non_finite = geomopt::NonFinitePolicy::skip});
    auto state = sgd.init(x);
    const auto r = sgd.step(x, g, state);
    REQUIRE(r.non_finite_leaf != nullptr);
    CHECK(*r.non_finite_leaf == "b");
  }
  SUBCASE("propagate does not look") {
    geomopt::SGD sgd({.lr = 0.1});
    auto state = sgd.init(x);
    CHECK(sgd.step(x, g, state).applied);
    CHECK(std::isnan(x.s.storage()(4)));
  }
}

TEST_CASE("threads change nothing but the speed") {
  Wide a, g;
  for (int i = 0; i < 7; ++i) {
    a.layers.push_back(Mat<float>::Random(37 + 50 * i, 11 + i));
    g.layers.push_back(Mat<float>::Random(37 + 50 * i, 11 + i));
  }
  Wide b = a;
  geomopt::Adam one({.lr = 1e-2, .weight_decay = 0.1}, {.clip_norm = 0.5, .ema_decay = 0.9, .threads = 1});
  geomopt::Adam two({.lr = 1e-2, .weight_decay = 0.1}, {.clip_norm = 0.5, .ema_decay = 0.9, .threads = 2});
  auto sa = one.init(a);
  auto sb = two.init(b);
  for (int t = 0; t < 5; ++t) {
    const auto ra = one.step(a, g, sa);
    const auto rb = two.step(b, g, sb);
    CHECK(ra.grad_norm == doctest::Approx(rb.grad_norm).epsilon(1e-12));
  }
  const Vec<float> fa = geomopt::ptree::flatten(a), fb = geomopt::ptree::flatten(b);
  // The global norm is summed in a different order, so the clip factor may differ in its last bit.
  CHECK((fa - fb).cwiseAbs().maxCoeff() <= 1e-6f);
  CHECK_THROWS_AS(one.step(b, g, sb), std::invalid_argument);  // a state made for two threads
}

namespace {
template <class T>
struct Leaves {
  std::vector<Vec<T>> v;
  GEOMOPT_PTREE(v)
};

// Restores the process's kernel path when a test that changes it ends.
struct KernelPathGuard {
  geomopt::KernelPath before = geomopt::kernel_path();
  ~KernelPathGuard() { geomopt::set_kernel_path(before); }
};

template <class T>
Leaves<T> split(const Vec<T>& all, std::initializer_list<Eigen::Index> sizes) {
  Leaves<T> out;
  Eigen::Index at = 0;
  for (Eigen::Index n : sizes) {
    out.v.push_back(all.segment(at, n));
    at += n;
  }
  return out;
}

// Three Adam or AdamW steps on one tree; returns the parameters flattened, and the state slot by slot (each slot's
// leaves one after the other), so trees that cut the same entries into other leaves compare entry by entry.
template <class T, class Opt>
std::pair<Vec<T>, Vec<T>> three_steps(Opt& opt, Leaves<T> x, const Leaves<T>& g) {
  auto st = opt.init(x);
  for (int t = 0; t < 3; ++t) opt.step(x, g, st);
  std::map<std::string, std::vector<T>> slots;
  st.for_each_slot([&](const auto&, std::string_view name, const auto& m) {
    auto& out = slots[std::string(name)];
    out.insert(out.end(), m.data(), m.data() + m.size());
  });
  std::vector<T> state;
  for (const auto& [name, values] : slots) state.insert(state.end(), values.begin(), values.end());
  return {geomopt::ptree::flatten(x), Eigen::Map<const Vec<T>>(state.data(), static_cast<Eigen::Index>(state.size()))};
}
}  // namespace

TEST_CASE_TEMPLATE("the AVX2 kernel path agrees with the portable one and ignores the cut into chunks", T, float,
                   double) {
  if (!geomopt::kernel_path_available(geomopt::KernelPath::avx2)) {
    MESSAGE("no AVX2 and FMA on this machine: only the portable path runs");
    return;
  }
  KernelPathGuard guard;
  // 2500 entries: one leaf (several full chunks and a tail), and cut into leaves whose tails fall elsewhere.
  const Eigen::Index n = 2500;
  const Vec<T> p0 = Vec<T>::Random(n), g0 = Vec<T>::Random(n);
  const auto whole = {n};
  const auto pieces = {Eigen::Index(1), Eigen::Index(7), Eigen::Index(9), Eigen::Index(513), Eigen::Index(1970)};
  const T eps = std::numeric_limits<T>::epsilon();
  int configs = 0;
  auto compare = [&](auto&& opt, const std::string& what, bool clipped = false) {
    CAPTURE(what);
    ++configs;
    geomopt::set_kernel_path(geomopt::KernelPath::portable);
    const auto [pp, sp] = three_steps<T>(opt, split(p0, whole), split(g0, whole));
    geomopt::set_kernel_path(geomopt::KernelPath::avx2);
    const auto [pa, sa] = three_steps<T>(opt, split(p0, whole), split(g0, whole));
    const auto [pc, sc] = three_steps<T>(opt, split(p0, pieces), split(g0, pieces));
    // Rounding only: the fused multiply-adds move each entry by a few units in the last place of its largest
    // term (the L2 term can cancel the gradient, so relative to the entry alone is not a bound).
    REQUIRE(pp.size() == pa.size());
    REQUIRE(sp.size() == sa.size());
    CHECK(((pp - pa).array().abs() <= T(16) * eps * (pp.array().abs() + T(0.1))).all());
    CHECK(((sp - sa).array().abs() <= T(16) * eps * (sp.array().abs() + sp.cwiseAbs().maxCoeff())).all());
    CHECK((pp - p0).cwiseAbs().maxCoeff() > T(1e-3));  // the step moved the parameters
    // Every entry takes the same arithmetic whatever leaf, chunk or tail it falls in: bitwise equal. With clipping
    // the global norm is summed in another order when the leaves are cut otherwise, so its last bit may differ.
    if (!clipped) {
      CHECK(pc == pa);
      CHECK(sc == sa);
    } else {
      CHECK(((pc - pa).array().abs() <= T(4) * eps * (pa.array().abs() + T(0.1))).all());
      CHECK(((sc - sa).array().abs() <= T(4) * eps * (sa.array().abs() + sa.cwiseAbs().maxCoeff())).all());
    }
  };
  compare(geomopt::Adam({.lr = 0.1}), "Adam");
  compare(geomopt::Adam({.lr = 0.1, .weight_decay = 0.5}), "Adam, L2 weight decay");
  compare(geomopt::Adam({.lr = 0.1, .weight_decay = 0.5, .amsgrad = true}), "Adam, L2, AMSGrad");
  compare(geomopt::AdamW({.lr = 0.1, .weight_decay = 0.5}), "AdamW");
  compare(geomopt::AdamW({.lr = 0.1, .weight_decay = 0.5, .amsgrad = true}), "AdamW, AMSGrad");
  compare(geomopt::AdamW({.lr = 0.1, .weight_decay = 0.5}, {.clip_norm = 1.0, .threads = 2}), "AdamW, clip, 2 threads",
          true);
  CHECK(configs == 6);
}

TEST_CASE("the kernel path can be chosen, and a path the machine lacks is refused") {
  KernelPathGuard guard;
  geomopt::set_kernel_path(geomopt::KernelPath::portable);
  CHECK(geomopt::kernel_path() == geomopt::KernelPath::portable);
  if (geomopt::kernel_path_available(geomopt::KernelPath::avx2)) {
    geomopt::set_kernel_path(geomopt::KernelPath::avx2);
    CHECK(geomopt::kernel_path() == geomopt::KernelPath::avx2);
  } else {
    CHECK_THROWS_AS(geomopt::set_kernel_path(geomopt::KernelPath::avx2), std::invalid_argument);
    CHECK(geomopt::kernel_path() == geomopt::KernelPath::portable);
  }
}

namespace {
// A kernel written by a user: sign descent with a decaying step, lr / sqrt(t), and one slot counting sign flips.
struct SignKernel {
  static constexpr const char* kName = "SignDescent";
  struct Options {
    double lr = 0.1;
    void validate() const {}
  };
  static std::span<const char* const> slots(const Options&) {
    static constexpr const char* kSlots[] = {"last_sign"};
    return kSlots;
  }
  template <class T>
  struct Coeffs {
    T step;
  };
  template <class T>
  static Coeffs<T> coefficients(const Options&, const geomopt::LeafStep& s) {
    return {T(s.lr / std::sqrt(double(s.t)))};
  }
  template <class T>
  static void update(const Coeffs<T>& c, geomopt::Chunk<T>& x) {
    x.s[0] = x.g.sign();
    x.p -= c.step * x.s[0];
  }
  static geomopt::Hyperparameters hyperparameters(const Options& o) { return {{"lr", o.lr}}; }
};
}  // namespace

TEST_CASE("a new optimizer is a kernel") {
  Net<double> x = make_net<double>(0.5);
  const Net<double> g = make_net<double>(-0.6);
  const Vec<double> x0 = flat(x), gf = flat(g);
  geomopt::Optimizer<SignKernel> opt({.lr = 0.2});
  auto state = opt.init(x);
  CHECK(state.optimizer() == "SignDescent");
  opt.step(x, g, state);
  opt.step(x, g, state);
  const Vec<double> expected = x0 - (0.2 + 0.2 / std::sqrt(2.0)) * gf.array().sign().matrix();
  CHECK((flat(x) - expected).norm() < 1e-14);
}

TEST_CASE("bad input is refused before anything changes") {
  Net<double> x = make_net<double>(0.5);
  geomopt::Adam adam({.lr = 1e-2});
  auto state = adam.init(x);
  const Vec<double> before = flat(x);

  Net<double> wrong = make_net<double>(0.1);
  wrong.b.resize(4);
  CHECK_THROWS_AS(adam.step(x, wrong, state), geomopt::StructureError);
  try {
    adam.step(x, wrong, state);
  } catch (const geomopt::StructureError& e) {
    CHECK(std::string(e.what()).find("b") != std::string::npos);
  }
  CHECK(bitwise_equal(flat(x), before));

  Net<double> bigger = make_net<double>(0.5);
  bigger.w.resize(4, 4);
  bigger.w.setZero();
  Net<double> bigger_g = bigger;
  CHECK_THROWS_AS(adam.step(bigger, bigger_g, state), geomopt::StructureError);

  geomopt::SGD sgd({.lr = 0.1});
  Net<double> g = make_net<double>(0.1);
  CHECK_THROWS_WITH_AS(sgd.step(x, g, state), doctest::Contains("made by Adam"), std::invalid_argument);
  CHECK(bitwise_equal(flat(x), before));
  CHECK(state.step_count() == 0);

  CHECK_THROWS_WITH_AS(geomopt::Adam({.lr = -1}), doctest::Contains("lr"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(geomopt::Adam({.beta2 = 1.0}), doctest::Contains("beta2"), std::invalid_argument);
  CHECK_THROWS_AS(geomopt::SGD({.lr = 0.1, .nesterov = true}), std::invalid_argument);
  CHECK_THROWS_WITH_AS(geomopt::SGD({.lr = 0.1}, {.ema_decay = 1.0}), doctest::Contains("ema_decay"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      adam.init(x, [](const Path& p) { return geomopt::LeafOptions{.lr_scale = p.str() == "b" ? -1.0 : 1.0}; }),
      doctest::Contains("b: lr_scale"), std::invalid_argument);
}

TEST_CASE("a tied leaf is stepped once") {
  Tied x{std::make_shared<Vec<double>>(Vec<double>::Ones(3)), nullptr};
  x.dec = x.enc;
  Tied g{std::make_shared<Vec<double>>(Vec<double>::Constant(3, 2.0)), nullptr};
  g.dec = g.enc;
  geomopt::SGD sgd({.lr = 0.25});
  auto state = sgd.init(x);
  CHECK(state.leaf_count() == 1);
  sgd.step(x, g, state);
  CHECK((*x.dec - Vec<double>::Constant(3, 0.5)).norm() < 1e-15);
}

TEST_CASE("manifold leaves: state in tangent coordinates, points kept on their manifolds") {
  geomopt::Rng rng(11);
  Mixed<double> x = make_mixed<double>(rng);
  const Mixed<double> g = random_gradient(x, 3);
  // dims: St(20, 5) 85, Gr(8, 3) 15, S^6 6, SO(4) 6, SPD(4) 10; then 6 + 15 Euclidean numbers.
  const std::size_t coordinates = 85 + 15 + 6 + 6 + 10 + 6 + 15;
  for (auto policy : {geomopt::SectionPolicy::recomputed, geomopt::SectionPolicy::transported}) {
    CAPTURE(static_cast<int>(policy));
    geomopt::Adam adam({.lr = 1e-2}, {.section = policy});
    auto state = adam.init(x);
    CHECK(state.coordinates() == Eigen::Index(coordinates));
    // Transported sections: 20 x 20, 8 x 8, 7 x 7, 4 x 4 for the Stiefel family, and SPD's 4 x 4 factor.
    const std::size_t sections =
        policy == geomopt::SectionPolicy::transported ? (400 + 64 + 49 + 16 + 16) * sizeof(double) : 0;
    CHECK(state.nbytes() == 2 * coordinates * sizeof(double) + sections);
    std::map<std::string, Eigen::Index> rows;
    state.for_each_slot([&](const std::string& path, std::string_view name, auto data) {
      if (name == "exp_avg") rows[path] = data.rows();
      if (name == "section") CHECK(data.rows() == data.cols());
    });
    CHECK(rows["frame"] == 85);
    CHECK(rows["metric"] == 10);
    Mixed<double> y = x;
    for (int t = 0; t < 10; ++t) adam.step(y, g, state);
    CHECK(geomopt::check(y.frame) < 1e-13);
    CHECK(geomopt::check(y.plane) < 1e-13);
    CHECK(geomopt::check(y.direction) < 1e-13);
    CHECK(geomopt::check(y.rotation) < 1e-13);
    CHECK(geomopt::check(y.metric) < 1e-13);
    CHECK((y.frame.value() - x.frame.value()).norm() > 1e-3);  // it moved
  }
  geomopt::Adam decayed({.lr = 1e-2, .weight_decay = 0.1});
  CHECK_NOTHROW(decayed.init(x));  // the optimizer-wide decay skips manifold leaves
  CHECK_THROWS_WITH_AS(decayed.init(x,
                                    [](const Path& p) {
                                      return geomopt::LeafOptions{.weight_decay = p.str() == "frame"
                                                                                      ? std::optional<double>(0.1)
                                                                                      : std::nullopt};
                                    }),
                       doctest::Contains("frame: weight decay does not apply"), std::invalid_argument);
}

TEST_CASE("manifold leaves: the first SGD step is the retraction of -lr times the lifted gradient") {
  geomopt::Rng rng(5);
  Mixed<double> x = make_mixed<double>(rng);
  const Mixed<double> g = random_gradient(x, 9);
  for (auto r : {geomopt::Retraction::cayley, geomopt::Retraction::geodesic}) {
    Mixed<double> y = x;
    geomopt::SGD sgd({.lr = 0.05}, {.retraction = r});
    auto state = sgd.init(y);
    sgd.step(y, g, state);
    // The manifolds API, with its own section at x, as the reference.
    geomopt::Stiefel<double> frame = x.frame;
    auto xi = geomopt::lift(frame, g.frame.value());
    geomopt::ptree::for_each_storage([](auto& b) { b *= -0.05; }, xi);
    geomopt::retract(frame, xi, r);
    CHECK((y.frame.value() - frame.value()).norm() < 1e-13);
    geomopt::SPD<double> metric = x.metric;
    auto eta = geomopt::lift(metric, g.metric.value());
    eta.storage() *= -0.05;
    geomopt::retract(metric, eta, r);
    CHECK((y.metric.value() - metric.value()).norm() < 1e-12);
  }
}

TEST_CASE("manifold leaves: clipping counts the Riemannian gradient, EMA averages the points") {
  geomopt::Rng rng(8);
  Mixed<double> x = make_mixed<double>(rng);
  const Mixed<double> g = random_gradient(x, 4);
  // The global norm: Euclidean leaves' storage, and each manifold leaf's lifted gradient.
  double squared = g.generator.storage().squaredNorm() + g.weight.squaredNorm();
  squared += geomopt::ptree::flatten(geomopt::lift(x.frame, g.frame.value())).squaredNorm();
  squared += geomopt::ptree::flatten(geomopt::lift(x.plane, g.plane.value())).squaredNorm();
  squared += geomopt::ptree::flatten(geomopt::lift(x.direction, g.direction.value())).squaredNorm();
  squared += geomopt::ptree::flatten(geomopt::lift(x.rotation, g.rotation.value())).squaredNorm();
  squared += geomopt::ptree::flatten(geomopt::lift(x.metric, g.metric.value())).squaredNorm();
  geomopt::SGD sgd({.lr = 0.01}, {.clip_norm = 0.5, .ema_decay = 0.5});
  Mixed<double> y = x;
  auto state = sgd.init(y);
  const auto report = sgd.step(y, g, state);
  CHECK(report.grad_norm == doctest::Approx(std::sqrt(squared)).epsilon(1e-12));
  CHECK(report.clip_scale == doctest::Approx(0.5 / (std::sqrt(squared) + 1e-6)).epsilon(1e-12));
  const Mixed<double>& ema = *state.ema();
  CHECK((ema.frame.value() - 0.5 * (x.frame.value() + y.frame.value())).norm() < 1e-14);
  const Mixed<double> projected = geomopt::ema_params(state);
  CHECK(geomopt::check(projected.frame) < 1e-13);
  CHECK(geomopt::check(projected.rotation) < 1e-13);
}

using alloc_count::allocations_of;

TEST_CASE("a step allocates nothing") {
  Net<float> x = make_net<float>(0.5f);
  Net<float> g = make_net<float>(0.1f);
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    geomopt::Adam adam({.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true},
                       {.schedule = geomopt::schedules::cosine(100, 5),
                        .clip_norm = 0.5,
                        .ema_decay = 0.9,
                        .non_finite = geomopt::NonFinitePolicy::skip,
                        .threads = threads});
    auto state = adam.init(x);
    adam.step(x, g, state);  // warm: first-touch of anything lazily made
    long allocations = 0;
    {
      alloc_count::Window counter;
      for (int t = 0; t < 5; ++t) adam.step(x, g, state);
      allocations = counter.count();
    }
    CHECK(allocations == 0);
  }
  geomopt::Rng rng(2);
  Mixed<float> m = make_mixed<float>(rng);
  const Mixed<float> mg = random_gradient(m, 1);
  for (auto policy : {geomopt::SectionPolicy::recomputed, geomopt::SectionPolicy::transported}) {
    for (auto r : {geomopt::Retraction::cayley, geomopt::Retraction::geodesic}) {
      for (int threads : {1, 2}) {
        CAPTURE(threads);
        geomopt::AdamW adamw({.lr = 1e-3}, {.clip_norm = 0.1,
                                            .ema_decay = 0.9,
                                            .non_finite = geomopt::NonFinitePolicy::raise,
                                            .retraction = r,
                                            .section = policy,
                                            .threads = threads});
        auto state = adamw.init(m);
        adamw.step(m, mg, state);
        long allocations = 0;
        {
          alloc_count::Window counter;
          for (int t = 0; t < 3; ++t) adamw.step(m, mg, state);
          allocations = counter.count();
        }
        CHECK(allocations == 0);
      }
    }
  }
  // msign_inplace with a workspace, tall and wide, float and double, on a matrix and on a block.
  {
    Mat<float> tall = Mat<float>::Random(130, 20);
    Mat<double> wide = Mat<double>::Random(20, 90);
    geomopt::MsignWorkspace<float> wf(130, 20);
    geomopt::MsignWorkspace<double> wd(20, 90), wb(12, 12);
    CHECK(allocations_of([&] {
            geomopt::msign_inplace(tall, {}, wf);
            geomopt::msign_inplace(wide, {.polish_steps = 2}, wd);
            geomopt::msign_inplace(wide.block(5, 7, 12, 12), {}, wb);
          }) == 0);
    CHECK(tall.allFinite());
    // msign_batched on one and two threads, Polar Express and Newton-Schulz, with workspaces of the batch's shape.
    Mat<float> blocks = Mat<float>::Random(40, 6 * 24);
    geomopt::MsignBatchWorkspace<float> one(40, 24), two(40, 24, 2);
    const auto batched = [&] {
      geomopt::msign_batched(blocks.data(), 6, 40, 24, {.method = geomopt::MsignMethod::polar_express}, one);
      geomopt::msign_batched(blocks, 24, {}, two);
    };
    // Warm: a worker thread may still be starting when its pool's constructor returns, and a sanitizer's runtime
    // allocates on that thread while it starts; a finished call has every member started and returned.
    batched();
    CHECK(allocations_of(batched) == 0);
    CHECK(blocks.allFinite());
  }
  // Muon: Newton-Schulz on matrices large enough to take several product tiles, AdamW for the rest.
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    Net<float> mx = make_net<float>(0.5f), mgr = make_net<float>(0.1f);
    // Just over one 128 x 128 float product tile (Newton-Schulz at -O0 under the sanitizers is slow).
    Wide wide{{Mat<float>::Random(130, 125), Mat<float>::Random(24, 140)}};
    const Wide wg{{Mat<float>::Random(130, 125), Mat<float>::Random(24, 140)}};
    geomopt::Muon muon(
        {.weight_decay = 0.01},
        {.clip_norm = 0.5, .ema_decay = 0.9, .non_finite = geomopt::NonFinitePolicy::skip, .threads = threads});
    auto small = muon.init(mx);
    auto large = muon.init(wide);
    auto both = [&] {
      muon.step(mx, mgr, small);
      muon.step(wide, wg, large);
    };
    both();  // warm
    CHECK(allocations_of([&] {
            for (int t = 0; t < 2; ++t) both();
          }) == 0);
  }
  {
    alloc_count::Window counter;  // the counter sees allocations
    const Vec<float> v = geomopt::ptree::flatten(x);
    CHECK(counter.count() >= 1);
    CHECK(v.size() == 24);
  }
  geomopt::RMSprop rms({.lr = 1e-2, .momentum = 0.9, .centered = true});
  geomopt::SGD sgd({.lr = 1e-2, .momentum = 0.9, .nesterov = true});
  auto rs = rms.init(x);
  auto ss = sgd.init(x);
  long allocations = 0;
  {
    alloc_count::Window counter;
    for (int t = 0; t < 3; ++t) {
      rms.step(x, g, rs);
      sgd.step(x, g, ss);
    }
    allocations = counter.count();
  }
  CHECK(allocations == 0);
}

TEST_CASE("a leaf's lr_scale and weight decay set between steps act as the rule's would, and are checked") {
  const PartlyFrozen<double> start = make_partly_frozen();
  geomopt::AdamW opt({.lr = 1e-2, .weight_decay = 0.1});
  // Reference: every step made by a state whose rule gave the options of that step.
  const std::vector<std::pair<double, double>> schedule = {{1.0, 0.1}, {0.5, 0.0}, {0.25, 0.3}};
  PartlyFrozen<double> a = start;
  auto sa = opt.init(a);
  std::vector<std::vector<unsigned char>> slots_before;
  for (std::size_t k = 0; k < schedule.size(); ++k) {
    const double scale = schedule[k].first, decay = schedule[k].second;  // clang 14 lambdas cannot capture bindings
    for (std::size_t i = 0; i < sa.leaf_count(); ++i) {
      sa.set_leaf_lr_scale(i, scale);
      const std::string& path = sa.leaf_path(i);
      if (path == "w" || path == "b" || path == "embed") sa.set_leaf_weight_decay(i, decay);
    }
    PartlyFrozen<double> b = a;
    auto sb = opt.init(b, [&](const Path& p) {
      geomopt::LeafOptions o{.lr_scale = scale};
      if (p.str() == "w" || p.str() == "b" || p.str() == "embed") o.weight_decay = decay;
      return o;
    });
    // sb carries sa's moments and count: copy them through the slot maps.
    std::vector<double> values;
    sa.for_each_slot([&](const std::string&, std::string_view, const auto& d) {
      values.insert(values.end(), d.data(), d.data() + d.size());
    });
    std::size_t at = 0;
    sb.for_each_slot([&](const std::string&, std::string_view, auto d) {
      std::copy(values.begin() + static_cast<std::ptrdiff_t>(at),
                values.begin() + static_cast<std::ptrdiff_t>(at) + d.size(), d.data());
      at += static_cast<std::size_t>(d.size());
    });
    sb.set_step_count(sa.step_count());
    const PartlyFrozen<double> g = frozen_test_gradient(a, 60 + static_cast<unsigned>(k), false);
    PartlyFrozen<double> gg = g;
    gg.embed.setRandom();
    gg.plane.value().setRandom();
    gg.sym.storage().setRandom();
    opt.step(a, gg, sa);
    opt.step(b, gg, sb);
    CHECK(tree_bytes(a) == tree_bytes(b));
    CHECK(state_bytes(sa) == state_bytes(sb));
  }
  std::map<std::string, double> recorded;
  sa.for_each_leaf_option([&](const std::string& path, std::string_view name, auto v) {
    if constexpr (std::is_floating_point_v<decltype(v)>)
      if (name == "lr_scale" || name == "weight_decay") recorded[path + ":" + std::string(name)] = v;
  });
  CHECK(recorded["w:lr_scale"] == 0.25);
  CHECK(recorded["w:weight_decay"] == 0.3);

  // Each refusal names the leaf and changes nothing.
  auto frozen = opt.init(start, [](const Path& p) { return geomopt::LeafOptions{.frozen = p.str() == "embed"}; });
  CHECK_THROWS_WITH_AS(frozen.set_leaf_lr_scale(0, 2.0), "embed: lr_scale of a frozen leaf cannot be set",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(sa.set_leaf_lr_scale(5, -1.0), "b: lr_scale must be >= 0, got -1.000000", std::invalid_argument);
  CHECK_THROWS_WITH_AS(sa.set_leaf_weight_decay(1, 0.1),
                       "frame: weight decay does not apply to manifold leaves (Stiefel)", std::invalid_argument);
  CHECK(recorded == [&] {
    std::map<std::string, double> again;
    sa.for_each_leaf_option([&](const std::string& path, std::string_view name, auto v) {
      if constexpr (std::is_floating_point_v<decltype(v)>)
        if (name == "lr_scale" || name == "weight_decay") again[path + ":" + std::string(name)] = v;
    });
    return again;
  }());
}
