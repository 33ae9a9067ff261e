// Checkpoints (io/checkpoint.hpp): optimizer state for SGD, Adam, AdamW, Muon and ManifoldMuon saved and restored by path, metadata,
// and exact resumption: N steps, a checkpoint, a fresh tree and state loaded from it, N more steps equal 2N steps of
// an uninterrupted run bit for bit (parameters, every state array, the step count and the moving average).
#include "common.hpp"

#include <geomopt/io.hpp>
#include <geomopt/optimizers/muon.hpp>
#include <geomopt/optimizers/optimizer.hpp>

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
  if (opt.common().section == geomopt::SectionPolicy::transported)
    CHECK(geomopt::io::describe(dir.file("ckpt.h5")).find("st.section") != std::string::npos);
  if (opt.common().ema_decay > 0) CHECK(geomopt::io::describe(dir.file("ckpt.h5")).find("/ema:") != std::string::npos);

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

TEST_CASE("Muon and ManifoldMuon resume exactly") {
  // w takes Muon's step, st ManifoldMuon's (Muon hands it to AdamW), the rest AdamW's; the EMA covers them all.
  check_exact_resume(geomopt::Muon({.lr = 0.02, .weight_decay = 0.1}, {.ema_decay = 0.9}), 4);
  check_exact_resume(geomopt::ManifoldMuon({.lr = 0.05, .fallback = {.lr = 0.01}}), 4);
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
  for (const char* needle : {"/optimizer:", "optimizer=\"Adam\"", "step=3", "lr=0.02", "w.exp_avg_sq", "st.exp_avg ",
                             "/metadata: epoch=2 git=\"abc123\" loss=0.125 step=1234"})
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
