// Checkpoints (io/checkpoint.hpp): optimizer state for SGD, Adam, AdamW, Muon and ManifoldMuon saved and restored by
// path, metadata, and exact resumption: N steps, a checkpoint, a fresh tree and state loaded from it, N more steps
// equal 2N steps of an uninterrupted run bit for bit (parameters, every state array, the step count and the moving
// average), frozen leaves with empty gradients included. Per-leaf options are saved and checked by the
// hyperparameters' rule: a strict load refuses each change, a lenient one lists it and the options in memory step.
#include "common.hpp"

#include <geomopt/io.hpp>
#include <geomopt/optimizers/muon.hpp>
#include <geomopt/optimizers/optimizer.hpp>
#include <geomopt/optimizers/partition.hpp>
#include <geomopt/ptree/borrowed_array.hpp>

#include <Eigen/QR>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace {

struct Model {
  Eigen::MatrixXd w;
  Eigen::VectorXd b;
  geomopt::Stiefel<double> st;
  geomopt::SymmetricMatrix<double> sym;
  double scale = 0;
  pt::Buffer<Eigen::VectorXd> stats;
  GEOMOPT_PTREE(w, b, st, sym, scale, stats)
};

Model make_model(double start) {
  Model m;
  m.w = Eigen::MatrixXd(5, 3);
  m.b = Eigen::VectorXd(5);
  m.sym = geomopt::SymmetricMatrix<double>(3);
  m.stats = pt::Buffer<Eigen::VectorXd>{Eigen::VectorXd(2)};
  iotest::fill(m, start, 0.01);
  geomopt::Rng rng(static_cast<unsigned>(start * 100));
  m.st = geomopt::Stiefel<double>::random_point(rng, 6, 2);
  return m;
}

// The gradient of sum(0.5 (x - 0.3)^2 + 0.05 x^4) over every entry: nonlinear, so the moments differ per entry.
Model gradient(const Model& m) {
  Model g = m;
  auto grad = [](const auto& x) { return ((x.array() - 0.3) + 0.2 * x.array().cube()).matrix().eval(); };
  g.w = grad(m.w);
  g.b = grad(m.b);
  g.st.value() = grad(m.st.value());
  g.sym.storage() = grad(m.sym.storage());
  g.scale = (m.scale - 0.3) + 0.2 * m.scale * m.scale * m.scale;
  return g;
}

template <class State>
std::vector<unsigned char> slot_bytes(const State& s) {
  std::vector<unsigned char> out;
  s.for_each_slot([&](const std::string&, std::string_view, const auto& data) {
    const auto* p = reinterpret_cast<const unsigned char*>(data.data());
    out.insert(out.end(), p, p + data.size() * static_cast<Eigen::Index>(sizeof(double)));
  });
  return out;
}

template <class Opt>
void check_exact_resume(Opt opt, int n) {
  iotest::ScratchDir dir("resume");
  Model a = make_model(1.0);
  auto sa = opt.init(a);
  for (int k = 0; k < 2 * n; ++k) opt.step(a, gradient(a), sa);

  Model b = make_model(1.0);
  auto sb = opt.init(b);
  for (int k = 0; k < n; ++k) opt.step(b, gradient(b), sb);
  geomopt::io::save_checkpoint(dir.file("ckpt.h5"), b, sb);
  if constexpr (requires { opt.common(); }) {
    if (opt.common().section == geomopt::SectionPolicy::transported)
      CHECK(geomopt::io::describe(dir.file("ckpt.h5")).find("st.section") != std::string::npos);
  }
  if (opt.transforms().ema_decay > 0)
    CHECK(geomopt::io::describe(dir.file("ckpt.h5")).find("/ema:") != std::string::npos);

  Model c = make_model(7.0);  // a fresh process: other values, a fresh state
  auto sc = opt.init(c);
  REQUIRE(iotest::snapshot(c) != iotest::snapshot(b));
  const auto report = geomopt::io::load_checkpoint(dir.file("ckpt.h5"), c, sc);
  CHECK(report.complete());
  CHECK(sc.step_count() == n);
  CHECK(report.metadata.step == n);
  CHECK(iotest::snapshot(c) == iotest::snapshot(b));
  CHECK(slot_bytes(sc) == slot_bytes(sb));
  for (int k = 0; k < n; ++k) opt.step(c, gradient(c), sc);

  CHECK(iotest::snapshot(c) == iotest::snapshot(a));
  CHECK(slot_bytes(sc) == slot_bytes(sa));
  CHECK(sc.step_count() == sa.step_count());
  REQUIRE((sa.ema() == nullptr) == (sc.ema() == nullptr));
  if (sa.ema() != nullptr) CHECK(iotest::snapshot(*sc.ema()) == iotest::snapshot(*sa.ema()));
  // The state made a difference: without it the resumed run would differ.
  Model d = make_model(7.0);
  auto sd = opt.init(d);
  geomopt::io::load(dir.file("ckpt.h5"), d);
  for (int k = 0; k < n; ++k) opt.step(d, gradient(d), sd);
  CHECK(iotest::snapshot(d) != iotest::snapshot(a));
}

}  // namespace

TEST_CASE("SGD with Nesterov momentum resumes exactly") {
  check_exact_resume(geomopt::SGD({.lr = 0.05, .momentum = 0.9, .nesterov = true, .weight_decay = 0.01}), 4);
}

TEST_CASE("Adam with a transported section and a moving average resumes exactly") {
  check_exact_resume(
      geomopt::Adam({.lr = 0.02, .amsgrad = true}, {.ema_decay = 0.9, .section = geomopt::SectionPolicy::transported}),
      5);
}

TEST_CASE("AdamW resumes exactly") { check_exact_resume(geomopt::AdamW({.lr = 0.02, .weight_decay = 0.1}), 5); }

TEST_CASE("a Partition of Muon, manifold Adam and AdamW resumes exactly, with one clip norm and one moving average") {
  // w is the Muon group's, st the Adam group's (its tangent moments), the rest AdamW's.
  auto partition = geomopt::Partition(
      {.clip_norm = 2.0, .ema_decay = 0.9},
      geomopt::group("muon", geomopt::Muon({.lr = 0.02, .weight_decay = 0.1}),
                     [](const geomopt::LeafInfo& l) { return l.matrix(); }),
      geomopt::group("frames", geomopt::Adam({.lr = 0.02, .amsgrad = true}), geomopt::kind_is("Stiefel")),
      geomopt::group("rest", geomopt::AdamW({.lr = 0.02, .weight_decay = 0.1})));
  check_exact_resume(std::move(partition), 4);
  // The file names each group's optimizer and hyperparameters; a partition of other groups refuses it.
  iotest::ScratchDir dir("partition_kind");
  Model m = make_model(1.0);
  auto p3 =
      geomopt::Partition(geomopt::group("muon", geomopt::Muon(), [](const geomopt::LeafInfo& l) { return l.matrix(); }),
                         geomopt::group("rest", geomopt::AdamW()));
  auto s3 = p3.init(m);
  p3.step(m, gradient(m), s3);
  geomopt::io::save_checkpoint(dir.file("ckpt.h5"), m, s3);
  const std::string text = geomopt::io::describe(dir.file("ckpt.h5"));
  CHECK(text.find("muon.Muon.lr") != std::string::npos);
  CHECK(text.find("rest.AdamW.weight_decay") != std::string::npos);
  auto other =
      geomopt::Partition(geomopt::group("muon", geomopt::Muon(), [](const geomopt::LeafInfo& l) { return l.matrix(); }),
                         geomopt::group("rest", geomopt::Adam()));
  Model n = make_model(1.0);
  auto so = other.init(n);
  CHECK_THROWS_AS(geomopt::io::load_checkpoint(dir.file("ckpt.h5"), n, so), geomopt::io::Error);
}

TEST_CASE("Muon and ManifoldMuon resume exactly") {
  // w takes Muon's step, st ManifoldMuon's (Muon hands it to AdamW), the rest AdamW's; the EMA covers them all.
  check_exact_resume(geomopt::Muon({.lr = 0.02, .weight_decay = 0.1}, {.ema_decay = 0.9}), 4);
  check_exact_resume(geomopt::ManifoldMuon({.lr = 0.05, .fallback = {.lr = 0.01}}), 4);
}

TEST_CASE("every option that changes the trajectory is recorded, an enumerated one by name, and checked on load") {
  iotest::ScratchDir dir("options");
  geomopt::ManifoldMuon muon({.lr = 0.05, .msign = geomopt::MsignMethod::polar_express}, {.clip_norm = 3.0});
  Model m = make_model(1.0);
  auto s = muon.init(m);
  muon.step(m, gradient(m), s);
  geomopt::io::save_checkpoint(dir.file("c.h5"), m, s);
  const std::string d = geomopt::io::describe(dir.file("c.h5"));
  for (const char* needle : {"msign=\"polar_express\"", "scale=\"original\"", "stiefel_method=\"fixed_point\"",
                             "retraction=\"polar\"", "clip_norm=3 ", "fallback.AdamW.section=\"recomputed\""})
    CHECK_MESSAGE(d.find(needle) != std::string::npos, std::string(needle) << "\n" << d);
  // Each differing option is refused by a strict load, names and values in the message, and nothing changes.
  const auto refused = [&](const auto& other, const std::string& expected) {
    Model t = make_model(2.0);
    auto st = other.init(t);
    const auto before = iotest::snapshot(t);
    try {
      geomopt::io::load_checkpoint(dir.file("c.h5"), t, st);
      FAIL("expected an Error for " << expected);
    } catch (const geomopt::io::Error& e) {
      CHECK_MESSAGE(std::string(e.what()).find(expected) != std::string::npos, e.what());
    }
    CHECK(iotest::snapshot(t) == before);
  };
  refused(geomopt::ManifoldMuon({.lr = 0.05}, {.clip_norm = 3.0}),
          "msign is \"polar_express\" in the file, \"newton_schulz\" here");
  refused(geomopt::ManifoldMuon({.lr = 0.05,
                                 .msign = geomopt::MsignMethod::polar_express,
                                 .retraction = geomopt::StiefelMuonRetraction::cayley},
                                {.clip_norm = 3.0}),
          "retraction is \"polar\" in the file, \"cayley\" here");
  refused(geomopt::ManifoldMuon({.lr = 0.05, .msign = geomopt::MsignMethod::polar_express}),
          "clip_norm is 3 in the file, 0 here");
  refused(geomopt::ManifoldMuon({.lr = 0.05, .msign = geomopt::MsignMethod::polar_express},
                                {.clip_norm = 3.0, .non_finite = geomopt::NonFinitePolicy::skip}),
          "non_finite is \"propagate\" in the file, \"skip\" here");
  Model t = make_model(2.0);
  auto same = muon.init(t);
  geomopt::io::load_checkpoint(dir.file("c.h5"), t, same);
  CHECK(same.step_count() == 1);
}

namespace {

struct Rows {
  geomopt::Oblique<double> cols;
  geomopt::Sphere<double> dir;
  GEOMOPT_PTREE(cols, dir)
};

// The gradient of -sum_j c_j^T S c_j - d^T S d, S = diag(1, .., 6): nonlinear in the point.
Rows rows_gradient(const Rows& x) {
  const Eigen::VectorXd s = Eigen::VectorXd::LinSpaced(6, 1, 6);
  Rows g = x;
  g.cols.value() = -2 * s.asDiagonal() * x.cols.value();
  g.dir.value() = -2 * s.asDiagonal() * x.dir.value();
  return g;
}

Rows make_rows(unsigned seed) {
  geomopt::Rng rng(seed);
  return {geomopt::Oblique<double>::random_point(rng, 6, 3), geomopt::Sphere<double>::random_point(rng, 6)};
}

}  // namespace

TEST_CASE("ManifoldMuon's Oblique and Sphere leaves resume exactly, the Oblique multiplier with them") {
  iotest::ScratchDir dir("oblique_muon");
  geomopt::ManifoldMuon muon({.lr = 0.05});
  Rows a = make_rows(1);
  auto sa = muon.init(a);
  for (int k = 0; k < 8; ++k) muon.step(a, rows_gradient(a), sa);
  Rows b = make_rows(1);
  auto sb = muon.init(b);
  for (int k = 0; k < 4; ++k) muon.step(b, rows_gradient(b), sb);
  geomopt::io::save_checkpoint(dir.file("ckpt.h5"), b, sb);
  CHECK(geomopt::io::describe(dir.file("ckpt.h5")).find("multiplier") != std::string::npos);
  Rows c = make_rows(2);
  auto sc = muon.init(c);
  CHECK(geomopt::io::load_checkpoint(dir.file("ckpt.h5"), c, sc).complete());
  CHECK(slot_bytes(sc) == slot_bytes(sb));
  for (int k = 0; k < 4; ++k) muon.step(c, rows_gradient(c), sc);
  CHECK(iotest::snapshot(c) == iotest::snapshot(a));
  CHECK(slot_bytes(sc) == slot_bytes(sa));
}

TEST_CASE("the state is stored by path with the optimizer's kind, step, hyperparameters and metadata") {
  iotest::ScratchDir dir("state");
  geomopt::Adam adam({.lr = 0.02});
  Model m = make_model(1.0);
  auto s = adam.init(m);
  for (int k = 0; k < 3; ++k) adam.step(m, gradient(m), s);
  geomopt::io::save_checkpoint(
      dir.file("c.h5"), m, s,
      {.step = 1234, .attributes = {{"epoch", std::int64_t{2}}, {"loss", 0.125}, {"git", std::string("abc123")}}});
  const std::string d = geomopt::io::describe(dir.file("c.h5"));
  for (const char* needle :
       {"/optimizer:", "optimizer=\"Adam\"", "step=3", "lr=0.02", "w.exp_avg_sq", "st.exp_avg ", "clip_norm=0 ",
        "non_finite=\"propagate\"", "section=\"recomputed\"", "/metadata: epoch=2 git=\"abc123\" loss=0.125 step=1234"})
    CHECK_MESSAGE(d.find(needle) != std::string::npos, std::string(needle) << "\n" << d);

  Model c = make_model(2.0);
  auto sc = adam.init(c);
  const auto r = geomopt::io::load_checkpoint(dir.file("c.h5"), c, sc);
  CHECK(r.metadata.step == 1234);
  CHECK(std::get<std::int64_t>(r.metadata.attributes.at("epoch")) == 2);
  CHECK(std::get<double>(r.metadata.attributes.at("loss")) == 0.125);
  CHECK(std::get<std::string>(r.metadata.attributes.at("git")) == "abc123");
  CHECK(sc.step_count() == 3);

  // Another optimizer's state never loads; other hyperparameters only without strict.
  geomopt::SGD sgd({.lr = 0.02, .momentum = 0.9});
  Model e = make_model(2.0);
  auto se = sgd.init(e);
  try {
    geomopt::io::load_checkpoint(dir.file("c.h5"), e, se, {.strict = false});
    FAIL("expected an Error");
  } catch (const geomopt::io::Error& err) {
    CHECK(std::string(err.what()).find("optimizer is \"Adam\" in the file, \"SGD\" here") != std::string::npos);
  }
  geomopt::Adam faster({.lr = 0.05});
  auto sf = faster.init(e);
  const auto before = iotest::snapshot(e);
  CHECK_THROWS_AS(geomopt::io::load_checkpoint(dir.file("c.h5"), e, sf), geomopt::io::Error);
  CHECK(iotest::snapshot(e) == before);
  const auto lenient = geomopt::io::load_checkpoint(dir.file("c.h5"), e, sf, {.strict = false});
  REQUIRE(lenient.differences.size() == 1);
  CHECK(lenient.differences[0] == "optimizer: lr is 0.02 in the file, 0.050000000000000003 here");
  CHECK(sf.step_count() == 3);

  // A plain load reads a checkpoint's parameters.
  Model p = make_model(3.0);
  CHECK(geomopt::io::load(dir.file("c.h5"), p).complete());
  CHECK(iotest::snapshot(p) == iotest::snapshot(m));
}

namespace {

// The members of an optimizer state that save_checkpoint used before per-leaf options were recorded: saving through
// it writes a checkpoint as an earlier geomopt did (no per-leaf attributes, no frozen marks).
template <class State>
struct WithoutLeafOptions {
  State& s;
  std::int64_t step_count() const { return s.step_count(); }
  void set_step_count(std::int64_t t) { s.set_step_count(t); }
  std::string_view optimizer() const { return s.optimizer(); }
  const auto& hyperparameters() const { return s.hyperparameters(); }
  template <class F>
  void for_each_slot(F&& f) {
    s.for_each_slot(f);
  }
  template <class F>
  void for_each_slot(F&& f) const {
    std::as_const(s).for_each_slot(f);
  }
  auto ema() const { return std::as_const(s).ema(); }
};

// The rule of the run that is saved: w at half the learning rate, b with its own weight decay, st by the geodesic,
// scale frozen.
geomopt::LeafOptions saved_rule(const pt::Path& p) {
  if (p.str() == "w") return {.lr_scale = 0.5};
  if (p.str() == "b") return {.weight_decay = 0.01};
  if (p.str() == "st") return {.retraction = geomopt::Retraction::geodesic};
  if (p.str() == "scale") return {.frozen = true};
  return {};
}

std::string load_error(const std::string& file, Model& m, geomopt::OptimizerState<Model>& s) {
  try {
    geomopt::io::load_checkpoint(file, m, s);
  } catch (const geomopt::io::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("per-leaf options are saved with the state and checked on load by the hyperparameters' rule") {
  iotest::ScratchDir dir("leaf_options");
  geomopt::Adam adam({.lr = 0.02});
  Model m = make_model(1.0);
  auto s = adam.init(m, saved_rule);
  for (int k = 0; k < 3; ++k) adam.step(m, gradient(m), s);
  geomopt::io::save_checkpoint(dir.file("c.h5"), m, s);

  // The summary: each leaf's options, and the frozen leaf not trainable (nor a buffer).
  const std::string d = geomopt::io::describe(dir.file("c.h5"));
  for (const char* needle :
       {"options of w: frozen=0 lr_scale=0.5\n", "options of b: frozen=0 lr_scale=1 weight_decay=0.01\n",
        "options of st: frozen=0 lr_scale=1 retraction=\"geodesic\"\n", "options of scale: frozen=1\n",
        "options of sym: frozen=0 lr_scale=1\n", "1 frozen values (8 B)"})
    CHECK_MESSAGE(d.find(needle) != std::string::npos, needle << "\n" << d);
  CHECK(d.find("no (frozen)") != std::string::npos);
  CHECK(d.find("no (buffer)") != std::string::npos);  // stats, still a buffer

  // The same rule loads strictly and resumes.
  {
    Model c = make_model(2.0);
    auto sc = adam.init(c, saved_rule);
    const auto r = geomopt::io::load_checkpoint(dir.file("c.h5"), c, sc);
    CHECK(r.differences.empty());
    CHECK(iotest::snapshot(c) == iotest::snapshot(m));
  }

  // Each option changed is refused by a strict load, naming the leaf, both values and the way to load anyway; the
  // tree and the state are unchanged.
  struct Change {
    const char* what;
    geomopt::LeafRule rule;
    geomopt::CommonOptions common;
    const char* message;
  };
  const std::string hint =
      "; a lenient load (LoadOptions::strict = false) loads anyway, lists it, and steps with the value here";
  auto changed = [](const char* path, geomopt::LeafOptions o) {
    return [path, o](const pt::Path& p) { return p.str() == path ? o : saved_rule(p); };
  };
  const std::vector<Change> changes = {
      {"lr_scale",
       changed("w", {.lr_scale = 0.25}),
       {},
       "optimizer:w: metadata: lr_scale is 0.5 in the file, 0.25 here"},
      {"a weight decay set",
       changed("b", {.weight_decay = 0.5}),
       {},
       "optimizer:b: metadata: weight_decay is 0.01 in the file, 0.5 here"},
      {"a weight decay no longer set",
       changed("b", {}),
       {},
       "optimizer:b: metadata: weight_decay is 0.01 in the file, not set here"},
      {"a weight decay newly set",
       changed("w", {.lr_scale = 0.5, .weight_decay = 0.0}),
       {},
       "optimizer:w: metadata: weight_decay is 0 here, absent in the file"},
      {"the leaf's retraction",
       changed("st", {}),
       {},
       "optimizer:st: metadata: retraction is \"geodesic\" in the file, \"cayley\" here"},
      {"frozen",
       changed("w", {.lr_scale = 0.5, .frozen = true}),
       {},
       "optimizer:w: metadata: frozen is 0 in the file, 1 here"},
      {"no longer frozen", changed("scale", {}), {}, "optimizer:scale: metadata: frozen is 1 in the file, 0 here"},
  };
  for (const Change& c : changes) {
    CAPTURE(c.what);
    geomopt::Adam other({.lr = 0.02}, c.common);
    Model t = make_model(2.0);
    auto st = other.init(t, c.rule);
    const auto before = iotest::snapshot(t);
    const std::string error = load_error(dir.file("c.h5"), t, st);
    CHECK_MESSAGE(error.find(std::string(c.message) + hint) != std::string::npos, error);
    CHECK(iotest::snapshot(t) == before);
    CHECK(st.step_count() == 0);
    // Leniently: loaded, the difference listed.
    const auto r = geomopt::io::load_checkpoint(dir.file("c.h5"), t, st, {.strict = false});
    const std::string difference = std::string(c.message).replace(std::string(c.message).find(" metadata:"), 10, "");
    CHECK_MESSAGE(std::find(r.differences.begin(), r.differences.end(), difference) != r.differences.end(),
                  r.full_report());
    CHECK(st.step_count() == 3);
  }

  // What is compared is the retraction the steps use: the same one chosen by CommonOptions instead of the rule loads.
  {
    geomopt::Adam same({.lr = 0.02}, {.retraction = geomopt::Retraction::geodesic});
    Model t = make_model(2.0);
    auto st = same.init(t, changed("st", {}));
    CHECK(load_error(dir.file("c.h5"), t, st).empty());
  }

  // The optimizer's own hyperparameters follow the same rule and carry the same hint.
  {
    geomopt::Adam faster({.lr = 0.25});
    Model t = make_model(2.0);
    auto st = faster.init(t, saved_rule);
    const std::string error = load_error(dir.file("c.h5"), t, st);
    CHECK_MESSAGE(error.find("optimizer: metadata: lr is 0.02 in the file, 0.25 here" + hint) != std::string::npos,
                  error);
  }
}

TEST_CASE("after a lenient load the options in memory decide the steps, not the file's") {
  iotest::ScratchDir dir("lenient_wins");
  geomopt::Adam adam({.lr = 0.02});
  Model m = make_model(1.0);
  auto s = adam.init(m, saved_rule);
  for (int k = 0; k < 3; ++k) adam.step(m, gradient(m), s);
  geomopt::io::save_checkpoint(dir.file("c.h5"), m, s);

  // Two resumed runs from one file: one with the file's lr_scale (a strict load), one with w's lr_scale halved.
  Model same = make_model(2.0), halved = make_model(2.0);
  auto s_same = adam.init(same, saved_rule);
  auto s_halved = adam.init(halved, [](const pt::Path& p) {
    return p.str() == "w" ? geomopt::LeafOptions{.lr_scale = 0.25} : saved_rule(p);
  });
  geomopt::io::load_checkpoint(dir.file("c.h5"), same, s_same);
  geomopt::io::load_checkpoint(dir.file("c.h5"), halved, s_halved, {.strict = false});
  REQUIRE(iotest::snapshot(same) == iotest::snapshot(halved));
  const Model g = gradient(same);
  adam.step(same, g, s_same);
  adam.step(halved, g, s_halved);
  // Adam's update of w is lr * lr_scale times the same moment ratio: w moved half as far, every other leaf as far.
  const Eigen::MatrixXd full = same.w - m.w, half = halved.w - m.w;
  CHECK(full.norm() > 1e-4);
  CHECK((half - 0.5 * full).norm() <= 1e-12 * full.norm());
  CHECK(same.b == halved.b);
  CHECK(same.st.value() == halved.st.value());
  CHECK(same.sym.storage() == halved.sym.storage());
  // A later checkpoint records the options in memory.
  geomopt::io::save_checkpoint(dir.file("d.h5"), halved, s_halved);
  CHECK(geomopt::io::describe(dir.file("d.h5")).find("options of w: frozen=0 lr_scale=0.25\n") != std::string::npos);
}

TEST_CASE("a checkpoint written before per-leaf options were recorded still loads, strictly") {
  iotest::ScratchDir dir("old_layout");
  geomopt::Adam adam({.lr = 0.02});
  Model m = make_model(1.0);
  auto s = adam.init(m, saved_rule);
  for (int k = 0; k < 2; ++k) adam.step(m, gradient(m), s);
  geomopt::io::save_checkpoint(dir.file("old.h5"), m, WithoutLeafOptions<decltype(s)>{s});
  const std::string d = geomopt::io::describe(dir.file("old.h5"));
  REQUIRE(d.find("options of") == std::string::npos);
  REQUIRE(d.find("frozen") == std::string::npos);

  Model c = make_model(2.0);
  auto sc = adam.init(c, saved_rule);
  const auto r = geomopt::io::load_checkpoint(dir.file("old.h5"), c, sc);
  REQUIRE(r.differences.size() == 1);
  CHECK(r.differences[0] ==
        "optimizer: the file records no per-leaf options (lr_scale, weight_decay, frozen, retraction): a checkpoint "
        "written before geomopt recorded them; not compared");
  CHECK(iotest::snapshot(c) == iotest::snapshot(m));
  CHECK(sc.step_count() == 2);
  // The hyperparameters are still checked.
  geomopt::Adam faster({.lr = 0.05});
  auto sf = faster.init(c, saved_rule);
  CHECK_THROWS_AS(geomopt::io::load_checkpoint(dir.file("old.h5"), c, sf), geomopt::io::Error);
}

TEST_CASE("a run with frozen leaves and empty gradients for them resumes exactly") {
  iotest::ScratchDir dir("frozen_resume");
  const auto rule = [](const pt::Path& p) {
    return geomopt::LeafOptions{.frozen = p.str() == "b" || p.str() == "st" || p.str() == "sym"};
  };
  auto grad = [](const Model& x) {
    Model g = gradient(x);
    g.b.resize(0);
    g.st = {};
    g.sym = {};
    return g;
  };
  geomopt::AdamW opt({.lr = 0.02, .weight_decay = 0.1}, {.clip_norm = 0.5, .ema_decay = 0.9});
  Model a = make_model(1.0), b = make_model(1.0);
  auto sa = opt.init(a, rule), sb = opt.init(b, rule);
  for (int k = 0; k < 6; ++k) opt.step(a, grad(a), sa);
  for (int k = 0; k < 3; ++k) opt.step(b, grad(b), sb);
  geomopt::io::save_checkpoint(dir.file("c.h5"), b, sb);
  Model c = make_model(5.0);
  auto sc = opt.init(c, rule);
  CHECK(geomopt::io::load_checkpoint(dir.file("c.h5"), c, sc).complete());
  for (int k = 0; k < 3; ++k) opt.step(c, grad(c), sc);
  CHECK(iotest::snapshot(c) == iotest::snapshot(a));
  CHECK(slot_bytes(sc) == slot_bytes(sa));
  CHECK(iotest::snapshot(*sc.ema()) == iotest::snapshot(*sa.ema()));
  CHECK(a.b == make_model(1.0).b);  // frozen: never written
}

namespace {

// A run whose leaves sit steps out for want of a gradient (w at odd steps, st at step 2), saved after three steps and
// resumed for three more, equals the uninterrupted six, each leaf with its own count; the file's description holds
// `lines`.
template <class Opt>
void check_missing_resume(Opt& opt, const char* name, const std::vector<std::string>& lines) {
  iotest::ScratchDir dir(name);
  auto grad = [](const Model& x, int k) {
    Model g = gradient(x);
    if (k % 2 == 1) g.w.resize(0, 0);
    if (k == 2) g.st = {};
    return g;
  };
  Model a = make_model(1.0), b = make_model(1.0);
  auto sa = opt.init(a), sb = opt.init(b);
  for (int k = 0; k < 6; ++k) opt.step(a, grad(a, k), sa);
  for (int k = 0; k < 3; ++k) opt.step(b, grad(b, k), sb);
  geomopt::io::save_checkpoint(dir.file("c.h5"), b, sb);
  const std::string text = geomopt::io::describe(dir.file("c.h5"));
  INFO(text);
  for (const std::string& line : lines) CHECK(text.find(line) != std::string::npos);

  Model c = make_model(5.0);
  auto sc = opt.init(c);
  CHECK(geomopt::io::load_checkpoint(dir.file("c.h5"), c, sc).complete());
  for (std::size_t i = 0; i < sc.leaf_count(); ++i) CHECK(sc.leaf_step_count(i) == sb.leaf_step_count(i));
  CHECK(sc.leaf_step_count(0) == 2);  // w: steps 0 and 2 of three
  for (int k = 3; k < 6; ++k) opt.step(c, grad(c, k), sc);
  CHECK(iotest::snapshot(c) == iotest::snapshot(a));
  CHECK(slot_bytes(sc) == slot_bytes(sa));
  CHECK(iotest::snapshot(*sc.ema()) == iotest::snapshot(*sa.ema()));
}

}  // namespace

TEST_CASE("a run whose leaves sat steps out for want of a gradient resumes exactly, each leaf with its own count") {
  const geomopt::CommonOptions common{.ema_decay = 0.9, .missing_gradient = geomopt::MissingGradient::skip};
  geomopt::Adam adam({.lr = 0.02}, common);
  check_missing_resume(
      adam, "missing_resume",
      {"options of w: frozen=0 lr_scale=1 step=2\n",
       "options of st: frozen=0 lr_scale=1 retraction=\"cayley\" step=2\n", "options of b: frozen=0 lr_scale=1\n"});
  // Muon's leaves (w a matrix, st a Stiefel frame) keep their own counts as the fallback's do.
  geomopt::ManifoldMuon muon({.lr = 0.05, .fallback = {.lr = 0.01}}, common);
  check_missing_resume(muon, "missing_resume_muon",
                       {"options of w: frozen=0 lr_scale=1 step=2\n",
                        "options of st: frozen=0 lr_scale=1 retraction=\"polar\" step=2\n"});
}

namespace {

// One network three ways: Eigen's column-major leaves, a row-major matrix, and leaves over borrowed row-major memory
// (a tensor's storage, as geomopt's Python package holds them). The file does not tell them apart.
struct ColumnMajorNet {
  Eigen::MatrixXf w;
  Eigen::VectorXf b;
  GEOMOPT_PTREE(w, b)
};
struct RowMajorNet {
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> w;
  Eigen::VectorXf b;
  GEOMOPT_PTREE(w, b)
};
struct BorrowedNet {
  pt::BorrowedArray<float> w;
  pt::BorrowedArray<float, 1> b;
  GEOMOPT_PTREE(w, b)
};

// A leaf's numbers: an Eigen leaf itself, a BorrowedArray's map.
template <class X>
auto& numbers(X& x) {
  if constexpr (requires { x.borrows(); })
    return x.value();
  else
    return x;
}

template <class Net>
void descend(Net& net, geomopt::Adam& adam, geomopt::OptimizerState<Net>& state, int steps) {
  for (int k = 0; k < steps; ++k) {
    Net g = net;  // owns its numbers
    numbers(g.w) = (numbers(net.w).array() - 0.3f + 0.1f * numbers(net.w).array().cube()).matrix();
    numbers(g.b) = (numbers(net.b).array() - 0.3f).matrix();
    adam.step(net, g, state);
  }
}

}  // namespace

TEST_CASE("a slot is saved in its leaf's shape: row-major and borrowed leaves resume as Eigen's column-major ones") {
  iotest::ScratchDir dir("slot_shape");
  geomopt::Adam adam({.lr = 1e-2, .weight_decay = 0.1});
  ColumnMajorNet reference{Eigen::MatrixXf(3, 4), Eigen::VectorXf(3)};
  iotest::fill(reference, -0.5, 0.1);
  auto reference_state = adam.init(reference);
  descend(reference, adam, reference_state, 4);

  SUBCASE("row-major") {
    RowMajorNet net{reference.w, reference.b};
    auto state = adam.init(net);
    state.set_step_count(reference_state.step_count());
    // The same state: copy the reference's slots into the row-major state by path and name, as matrices.
    reference_state.for_each_slot([&](const std::string& path, std::string_view name, const auto& from) {
      state.for_each_slot([&](const std::string& p, std::string_view n, auto to) {
        if (p == path && n == name) {
          if (path == "w")
            Eigen::Map<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(to.data(), 3, 4) =
                Eigen::Map<const Eigen::MatrixXf>(from.data(), 3, 4);
          else
            to = from;
        }
      });
    });
    geomopt::io::save_checkpoint(dir.file("row.h5"), net, state);
    ColumnMajorNet loaded{Eigen::MatrixXf::Zero(3, 4), Eigen::VectorXf::Zero(3)};
    auto loaded_state = adam.init(loaded);
    geomopt::io::load_checkpoint(dir.file("row.h5"), loaded, loaded_state);
    CHECK(iotest::snapshot(loaded) == iotest::snapshot(reference));
    ColumnMajorNet continued = reference;
    descend(continued, adam, reference_state, 3);
    descend(loaded, adam, loaded_state, 3);
    CHECK(iotest::snapshot(loaded) == iotest::snapshot(continued));
  }

  SUBCASE("borrowed, both ways") {
    std::vector<float> w(12), b(3);
    Eigen::Map<Eigen::Matrix<float, 3, 4, Eigen::RowMajor>>(w.data()) = reference.w;
    std::copy(reference.b.data(), reference.b.data() + 3, b.data());
    geomopt::io::save_checkpoint(dir.file("column.h5"), reference, reference_state);
    BorrowedNet net{pt::BorrowedArray<float>(w.data(), 3, 4), pt::BorrowedArray<float, 1>(b.data(), 3, 1)};
    auto state = adam.init(net);
    geomopt::io::load_checkpoint(dir.file("column.h5"), net, state);  // the Eigen tree's file, into borrowed memory
    geomopt::io::save_checkpoint(dir.file("borrowed.h5"), net, state);
    ColumnMajorNet loaded{Eigen::MatrixXf::Zero(3, 4), Eigen::VectorXf::Zero(3)};
    auto loaded_state = adam.init(loaded);
    geomopt::io::load_checkpoint(dir.file("borrowed.h5"), loaded, loaded_state);  // and back
    CHECK(iotest::snapshot(loaded) == iotest::snapshot(reference));
    ColumnMajorNet continued = reference;
    descend(continued, adam, reference_state, 3);
    descend(loaded, adam, loaded_state, 3);
    descend(net, adam, state, 3);
    CHECK(iotest::snapshot(loaded) == iotest::snapshot(continued));
    CHECK(Eigen::Map<const Eigen::Matrix<float, 3, 4, Eigen::RowMajor>>(w.data()) == continued.w);
    CHECK(b == std::vector<float>(continued.b.data(), continued.b.data() + 3));
  }
}

namespace {

struct OwnedFrame {
  geomopt::Stiefel<double> frame;
  GEOMOPT_PTREE(frame)
};
struct BorrowedFrame {
  geomopt::Borrowed<geomopt::Stiefel<double>> frame;
  GEOMOPT_PTREE(frame)
};

}  // namespace

TEST_CASE("a tree of Borrowed Stiefel leaves and the owned tree read each other's files (the points' N and n)") {
  iotest::ScratchDir dir("borrowed_frame");
  const Eigen::MatrixXd q =
      Eigen::MatrixXd::Random(6, 2).householderQr().householderQ() * Eigen::MatrixXd::Identity(6, 2);
  OwnedFrame owned{geomopt::Stiefel<double>(q)};
  geomopt::io::save(dir.file("owned.h5"), owned);

  std::vector<double> buffer(12, 0.0);
  BorrowedFrame lent{geomopt::Borrowed<geomopt::Stiefel<double>>(buffer.data(), 6, 2)};
  geomopt::io::load(dir.file("owned.h5"), lent);
  CHECK(Eigen::Map<const Eigen::MatrixXd>(buffer.data(), 6, 2) == q);

  geomopt::io::save(dir.file("borrowed.h5"), lent);
  OwnedFrame back{geomopt::Stiefel<double>(Eigen::MatrixXd::Identity(6, 2))};
  const auto report = geomopt::io::load(dir.file("borrowed.h5"), back);
  CHECK(report.complete());
  CHECK(back.frame.value() == q);
}
