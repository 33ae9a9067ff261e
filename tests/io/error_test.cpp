// What load does with a file that does not match the tree (io/error.hpp, io/tree.hpp): strict loads name every
// mismatch with its path and kind and change nothing; non-strict loads report missing and unexpected paths and
// still refuse shape and scalar-type differences; damaged, truncated, foreign and non-HDF5 files give clear errors.
#include "common.hpp"

#include <sys/wait.h>

#include <geomopt/io.hpp>
#include <geomopt/manifolds.hpp>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <variant>

namespace {

// A structured leaf whose metadata (n) does not follow from its storage size, so a metadata mismatch can be made
// with the shapes equal.
struct Tagged {
  Eigen::VectorXd v;
  Eigen::Index n_ = 0;
  Eigen::Index n() const { return n_; }
};
Eigen::VectorXd& free_parameters(Tagged& t) { return t.v; }
const Eigen::VectorXd& free_parameters(const Tagged& t) { return t.v; }
[[maybe_unused]] Tagged rebuild(const Tagged& p, Eigen::VectorXd&& v) { return {std::move(v), p.n_}; }
std::string ptree_type_name(const Tagged&) { return "Tagged"; }

// One type for every mismatch: variants change a leaf's scalar or structured type, optionals and maps add and
// remove paths, and the shared pointers are tied or not.
struct Net {
  std::variant<Eigen::MatrixXd, Eigen::MatrixXf> w;
  Eigen::VectorXd b;
  std::variant<geomopt::SymmetricMatrix<double>, geomopt::SkewSymMatrix<double>> sym;
  Tagged tag;
  std::optional<Eigen::VectorXd> extra;
  std::map<std::string, Eigen::VectorXd> heads;
  std::shared_ptr<Eigen::MatrixXd> enc, dec;
  pt::Buffer<Eigen::VectorXd> stats;
  GEOMOPT_PTREE(w, b, sym, tag, extra, heads, enc, dec, stats)
};

Net make_net(double start, bool tied = true) {
  Net n;
  n.w = Eigen::MatrixXd(3, 2);
  n.b = Eigen::VectorXd(3);
  n.sym = geomopt::SymmetricMatrix<double>(3);  // 6 numbers, like SkewSymMatrix(4)
  n.tag = Tagged{Eigen::VectorXd(2), 5};
  n.heads = {{"cls", Eigen::VectorXd(2)}};
  n.enc = std::make_shared<Eigen::MatrixXd>(2, 2);
  n.dec = tied ? n.enc : std::make_shared<Eigen::MatrixXd>(2, 2);
  n.stats = pt::Buffer<Eigen::VectorXd>{Eigen::VectorXd(4)};
  iotest::fill(n, start);
  return n;
}

using geomopt::io::ProblemKind;

}  // namespace

TEST_CASE("a strict load lists every mismatch with its path and kind, and changes nothing") {
  iotest::ScratchDir dir("strict");
  Net saved = make_net(1.0, /*tied=*/false);
  saved.heads["old"] = Eigen::VectorXd::Ones(2);
  geomopt::io::save(dir.file("n.h5"), saved);

  Net t = make_net(100.0);
  t.w = Eigen::MatrixXf(Eigen::MatrixXf::Zero(3, 2));  // float32 against float64
  t.b = Eigen::VectorXd::Zero(4);                      // 4 against 3
  t.sym = geomopt::SkewSymMatrix<double>(4);           // another structured type of the same size
  t.tag.n_ = 6;                                        // metadata
  t.extra = Eigen::VectorXd::Zero(2);                  // not in the file
  const auto before = iotest::snapshot(t);
  try {
    geomopt::io::load(dir.file("n.h5"), t);
    FAIL("expected an Error");
  } catch (const geomopt::io::Error& e) {
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(e.has(ProblemKind::dtype, "w"));
    CHECK(e.has(ProblemKind::shape, "b"));
    CHECK(e.has(ProblemKind::type, "sym"));
    CHECK(e.has(ProblemKind::metadata, "tag"));
    CHECK(e.has(ProblemKind::missing, "extra"));
    CHECK(e.has(ProblemKind::unexpected, "heads.old"));
    CHECK(e.has(ProblemKind::tie, "dec"));
    CHECK(e.problems().size() == 7);
    for (const char* needle :
         {"w: dtype: float64 in the file, float32 in the tree", "b: shape: shape (3,) in the file, (4,) in the tree",
          "sym: type: SymmetricMatrix in the file, SkewSymMatrix in the tree",
          "tag: metadata: n is 5 in the file, 6 in the tree", "extra: missing", "heads.old: unexpected", "dec: tie"})
      CHECK_MESSAGE(what.find(needle) != std::string::npos, std::string(needle));
  }
  CHECK(iotest::snapshot(t) == before);
}

TEST_CASE("a non-strict load reports missing and unexpected paths and loads the rest") {
  iotest::ScratchDir dir("lenient");
  Net saved = make_net(1.0);
  saved.heads["old"] = Eigen::VectorXd::Ones(2);
  geomopt::io::save(dir.file("n.h5"), saved);

  Net t = make_net(100.0);
  t.extra = Eigen::VectorXd::Constant(2, -1.0);
  const auto r = geomopt::io::load(dir.file("n.h5"), t, {.strict = false});
  CHECK(r.missing == std::vector<std::string>{"extra"});
  CHECK(r.unexpected == std::vector<std::string>{"heads.old"});
  CHECK_FALSE(r.complete());
  CHECK(r.loaded.size() == 7);                            // w, b, sym, tag, heads.cls, enc (dec is its alias), stats
  CHECK(*t.extra == Eigen::VectorXd::Constant(2, -1.0));  // left as it was
  CHECK(std::get<Eigen::MatrixXd>(t.w) == std::get<Eigen::MatrixXd>(saved.w));
  CHECK(t.heads.at("cls") == saved.heads.at("cls"));
  CHECK(*t.stats == *saved.stats);
  CHECK(r.brief_report() == "loaded 7 leaves; 1 missing, 1 unexpected");
}

TEST_CASE("a non-strict load still refuses shapes, and scalar types unless cast is set") {
  iotest::ScratchDir dir("cast");
  const Net saved = make_net(1.0);
  geomopt::io::save(dir.file("n.h5"), saved);

  Net shape = make_net(100.0);
  shape.b = Eigen::VectorXd::Zero(5);
  const auto before = iotest::snapshot(shape);
  try {
    geomopt::io::load(dir.file("n.h5"), shape, {.strict = false});
    FAIL("expected an Error");
  } catch (const geomopt::io::Error& e) {
    CHECK(e.has(ProblemKind::shape, "b"));
  }
  CHECK(iotest::snapshot(shape) == before);

  Net f = make_net(100.0);
  f.w = Eigen::MatrixXf(Eigen::MatrixXf::Zero(3, 2));
  CHECK_THROWS_AS(geomopt::io::load(dir.file("n.h5"), f, {.strict = false}), geomopt::io::Error);
  const auto r = geomopt::io::load(dir.file("n.h5"), f, {.cast = true});
  CHECK(std::get<Eigen::MatrixXf>(f.w) == std::get<Eigen::MatrixXd>(saved.w).cast<float>());
  REQUIRE(r.cast.size() == 1);
  CHECK(r.cast[0] == "w: float64 -> float32");
}

TEST_CASE("ties: the alias must be a link to the same object, and a non-strict load notes the difference") {
  iotest::ScratchDir dir("ties");
  geomopt::io::save(dir.file("tied.h5"), make_net(1.0, true));
  geomopt::io::save(dir.file("untied.h5"), make_net(1.0, false));
  Net t = make_net(100.0, true);
  CHECK(geomopt::io::load(dir.file("tied.h5"), t).complete());
  CHECK(t.enc == t.dec);
  try {
    geomopt::io::load(dir.file("untied.h5"), t);
    FAIL("expected an Error");
  } catch (const geomopt::io::Error& e) {
    CHECK(e.problems().size() == 1);
    CHECK(std::string(e.what()).find("dec: tie: tied to enc in the tree; a separate object in the file") !=
          std::string::npos);
  }
  const auto r = geomopt::io::load(dir.file("untied.h5"), t, {.strict = false});
  REQUIRE(r.differences.size() == 1);
  CHECK(r.differences[0].find("dec") == 0);
  // A file with the tie loads into a tree without it: each path gets the one object's values.
  Net u = make_net(100.0, false);
  CHECK(geomopt::io::load(dir.file("tied.h5"), u).complete());
  CHECK(*u.dec == *u.enc);
}

TEST_CASE("damaged, truncated, foreign and non-HDF5 files give a clear error and change nothing") {
  iotest::ScratchDir dir("damaged");
  geomopt::io::save(dir.file("good.h5"), make_net(1.0));
  const auto good = iotest::read_bytes(dir.file("good.h5"));
  Net t = make_net(100.0);
  const auto before = iotest::snapshot(t);
  auto expect_error = [&](const std::string& file, const std::string& words) {
    try {
      geomopt::io::load(file, t);
      FAIL("expected an Error for " << file);
    } catch (const geomopt::io::Error& e) {
      CHECK_MESSAGE(std::string(e.what()).find(words) != std::string::npos, e.what());
    }
    CHECK(iotest::snapshot(t) == before);
  };

  expect_error(dir.file("nonexistent.h5"), "no such file");
  iotest::write_bytes(dir.file("empty.h5"), "", 0);
  expect_error(dir.file("empty.h5"), "not an HDF5 file");
  iotest::write_bytes(dir.file("text.h5"), "hello, world\n", 13);
  expect_error(dir.file("text.h5"), "not an HDF5 file");
  std::mt19937 rng(7);
  std::vector<char> noise(4096);
  for (auto& c : noise) c = static_cast<char>(rng());
  iotest::write_bytes(dir.file("noise.h5"), noise.data(), noise.size());
  expect_error(dir.file("noise.h5"), "not an HDF5 file");

  // Truncated anywhere: at the signature, in the metadata, in the data, one byte short.
  for (std::size_t cut : {std::size_t{4}, std::size_t{100}, std::size_t{1000}, good.size() / 2, good.size() - 1}) {
    CAPTURE(cut);
    iotest::write_bytes(dir.file("cut.h5"), good.data(), cut);
    expect_error(dir.file("cut.h5"), cut < 8 ? "not an HDF5 file" : "");
  }
  // The signature kept, the rest scrambled.
  auto scrambled = good;
  for (std::size_t i = 64; i < scrambled.size(); i += 7) scrambled[i] = static_cast<char>(rng());
  iotest::write_bytes(dir.file("scrambled.h5"), scrambled.data(), scrambled.size());
  expect_error(dir.file("scrambled.h5"), "");

  // A valid HDF5 file of another layout: no /params.
  geomopt::io::save(dir.file("other.h5"), make_net(1.0), {.group = "weights"});
  expect_error(dir.file("other.h5"), "no group /params in the file (its root holds /weights)");
  // A branch where the tree has a leaf.
  std::map<std::string, std::map<std::string, Eigen::VectorXd>> nested{{"w", {{"x", Eigen::VectorXd::Zero(2)}}}};
  geomopt::io::save(dir.file("nested.h5"), nested);
  std::map<std::string, Eigen::VectorXd> flat{{"w", Eigen::VectorXd::Zero(2)}};
  try {
    geomopt::io::load(dir.file("nested.h5"), flat);
    FAIL("expected an Error");
  } catch (const geomopt::io::Error& e) {
    CHECK(e.has(ProblemKind::type, "w"));
    CHECK(e.has(ProblemKind::unexpected, "w.x"));
  }
}

TEST_CASE("a file that crashes the HDF5 library gives an Error, and so does a checker that dies") {
  // Found by tests/io/fuzz_load.cpp: HDF5 1.10.8 frees a pointer it never initialised while releasing these files'
  // link tables. Whether that crashes depends on what the heap held before (here it usually holds zeros, and
  // free(NULL) passes; a CI machine crashed in-process), so the guard's child poisons its heap to make the crash
  // certain, and both the spawned checker and the forked child (GEOMOPT_IO_CHECKER empty) must report it.
  Net t = make_net(100.0);
  const auto before = iotest::snapshot(t);
  auto expect_crash_error = [&](const std::string& file, const geomopt::io::LoadOptions& options) {
    try {
      geomopt::io::load(file, t, options);
      FAIL("expected an Error");
    } catch (const geomopt::io::Error& e) {
      CHECK_MESSAGE(std::string(e.what()).find("crashed the HDF5 library") != std::string::npos, e.what());
    }
    CHECK(iotest::snapshot(t) == before);
  };
  for (const char* checker : {"spawned", "forked"}) {
    CAPTURE(checker);
    if (std::string(checker) == "forked") ::setenv("GEOMOPT_IO_CHECKER", "", 1);
    for (const char* name : {"crashes_hdf5_1_10.h5", "crashes_hdf5_1_10_b.h5"}) {
      CAPTURE(name);
      const std::string file = std::string(GEOMOPT_TEST_SOURCE_DIR) + "/io/data/" + name;
      expect_crash_error(file, {});
      expect_crash_error(file, {.strict = false});
    }
  }
  ::unsetenv("GEOMOPT_IO_CHECKER");

  // The guard itself: a checker killed by a signal makes the load an Error naming the crash, with the tree intact.
  iotest::ScratchDir dir("guard");
  geomopt::io::save(dir.file("good.h5"), make_net(1.0));
  const std::string checker = dir.file("dies.sh");
  {
    std::ofstream out(checker);
    out << "#!/bin/sh\nkill -SEGV $$\n";
  }
  std::filesystem::permissions(checker, std::filesystem::perms::owner_all);
  ::setenv("GEOMOPT_IO_CHECKER", checker.c_str(), 1);
  try {
    geomopt::io::load(dir.file("good.h5"), t);
    FAIL("expected an Error");
  } catch (const geomopt::io::Error& e) {
    CHECK(std::string(e.what()).find("crashed the HDF5 library (signal 11") != std::string::npos);
  }
  CHECK(iotest::snapshot(t) == before);
  // Without the guard the same file loads.
  CHECK(geomopt::io::load(dir.file("good.h5"), t, {.isolate = false}).complete());
  ::unsetenv("GEOMOPT_IO_CHECKER");
  CHECK(geomopt::io::load(dir.file("good.h5"), t).complete());
}

TEST_CASE("a file on which HDF5 loops forever ends in an Error after isolate_timeout, and the child is gone") {
  // Found by tests/io/fuzz_load.cpp: HDF5 1.10.8 never returns from walking this file's whole structure, which the
  // spawned checker (and describe) do; it is killed at the deadline. The forked child replays only the load's own
  // pass, which stops early on this file (no /params): a plain Error. Either way, no hang, and the tree unchanged.
  Net t = make_net(100.0);
  const auto before = iotest::snapshot(t);
  const std::string file = std::string(GEOMOPT_TEST_SOURCE_DIR) + "/io/data/hangs_hdf5_1_10.h5";
  for (const std::string checker : {"spawned", "forked"}) {
    CAPTURE(checker);
    if (checker == "forked") ::setenv("GEOMOPT_IO_CHECKER", "", 1);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      geomopt::io::load(file, t, {.isolate_timeout = 1});
      FAIL("expected an Error");
    } catch (const geomopt::io::Error& e) {
      const std::string what = e.what();
      const bool timed_out = what.find("did not finish within 1 s in a child process") != std::string::npos;
      CHECK_MESSAGE(timed_out == (checker == "spawned"), what);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(seconds >= (checker == "spawned" ? 1.0 : 0.0));
    CHECK(seconds < 5.0);
    CHECK(iotest::snapshot(t) == before);
    CHECK_THROWS_AS(geomopt::io::describe(file, 0.5), geomopt::io::Error);
    // No child left behind: every child of this process has been reaped.
    CHECK(::waitpid(-1, nullptr, WNOHANG) == -1);
  }
  ::unsetenv("GEOMOPT_IO_CHECKER");
  try {
    geomopt::io::load(file, t, {.isolate_timeout = 0});
    FAIL("expected an Error");
  } catch (const geomopt::io::Error& e) {
    CHECK(std::string(e.what()).find("isolate_timeout must be a positive number of seconds") != std::string::npos);
  }
}
