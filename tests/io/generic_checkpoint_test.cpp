// A checkpoint of a tree whose manifold leaf is written only from the contract (tests/support/toy_manifold.hpp):
// saved and loaded by path, with its transported section and moving average, the resumed run equal to an
// uninterrupted one bit for bit; and the same file read into a tree of Borrowed leaves over a caller's buffer.
#include "common.hpp"

#include <geomopt/io.hpp>
#include <geomopt/manifolds/borrowed.hpp>
#include <geomopt/optimizers/optimizer.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "toy_manifold.hpp"

namespace {

struct Model {
  Eigen::VectorXd b;
  toy::Sphere<double> x;
  GEOMOPT_PTREE(b, x)
};
struct Lent {
  Eigen::VectorXd b;
  geomopt::Borrowed<toy::Sphere<double>> x;
  GEOMOPT_PTREE(b, x)
};

Model make_model(double start) {
  Model m{Eigen::VectorXd::LinSpaced(3, start, start + 1), toy::Sphere<double>(Eigen::VectorXd::Zero(5))};
  for (Eigen::Index i = 0; i < 5; ++i) m.x.value()[i] = std::cos(start + static_cast<double>(i));
  m.x.value().normalize();
  return m;
}

// A nonlinear cost per entry, so the moments differ from entry to entry.
Model gradient(const Model& m) {
  Model g = m;
  g.b = (m.b.array() - 0.3 + 0.2 * m.b.array().cube()).matrix();
  g.x.value() = (m.x.value().array() - 0.3 + 0.2 * m.x.value().array().cube()).matrix();
  return g;
}

template <class State>
std::vector<double> slots(const State& s) {
  std::vector<double> out;
  s.for_each_slot([&](const std::string&, std::string_view, const auto& data) {
    out.insert(out.end(), data.data(), data.data() + data.size());
  });
  return out;
}

}  // namespace

TEST_CASE("a contract manifold's leaf, section and moving average resume exactly from a checkpoint") {
  iotest::ScratchDir dir("generic");
  geomopt::Adam adam({.lr = 0.05}, {.ema_decay = 0.9, .section = geomopt::SectionPolicy::transported});
  const int n = 4;
  Model a = make_model(1.0);
  auto sa = adam.init(a);
  for (int k = 0; k < 2 * n; ++k) adam.step(a, gradient(a), sa);

  Model b = make_model(1.0);
  auto sb = adam.init(b);
  for (int k = 0; k < n; ++k) adam.step(b, gradient(b), sb);
  geomopt::io::save_checkpoint(dir.file("ckpt.h5"), b, sb);
  CHECK(geomopt::io::describe(dir.file("ckpt.h5")).find("x.section") != std::string::npos);

  Model c = make_model(7.0);
  auto sc = adam.init(c);
  REQUIRE(iotest::snapshot(c) != iotest::snapshot(b));
  const auto report = geomopt::io::load_checkpoint(dir.file("ckpt.h5"), c, sc);
  CHECK(report.complete());
  CHECK(iotest::snapshot(c) == iotest::snapshot(b));
  CHECK(slots(sc) == slots(sb));
  for (int k = 0; k < n; ++k) adam.step(c, gradient(c), sc);
  CHECK(iotest::snapshot(c) == iotest::snapshot(a));
  CHECK(slots(sc) == slots(sa));
  REQUIRE(sc.ema() != nullptr);
  CHECK(iotest::snapshot(*sc.ema()) == iotest::snapshot(*sa.ema()));

  // The file's parameters into Borrowed leaves: the caller's buffer receives them.
  std::vector<double> buffer(5, 0.0);
  Lent lent{Eigen::VectorXd::Zero(3), geomopt::Borrowed<toy::Sphere<double>>(buffer.data(), 5, 1)};
  geomopt::io::load(dir.file("ckpt.h5"), lent);
  CHECK(lent.x.value().data() == buffer.data());
  CHECK(Eigen::Map<const Eigen::VectorXd>(buffer.data(), 5) == b.x.value());
  CHECK(lent.b == b.b);
}
