// save and load round trips (io/tree.hpp): every branch kind, plain, structured and manifold leaves, buffers of
// integers and bools, ties, float and double, and the file's row-major order checked against a row-major leaf.
#include "common.hpp"

#include <geomopt/io.hpp>
#include <geomopt/manifolds.hpp>

#include <array>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

namespace {

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
template <class T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;

template <class T>
struct Dense {
  Mat<T> weight;
  Vec<T> bias;
  GEOMOPT_PTREE(weight, bias)
};

template <class T>
struct Everything {
  std::vector<Dense<T>> layers;
  std::array<Eigen::Matrix<T, 3, 1>, 2> fixed;
  std::tuple<T, Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> tup;
  std::pair<Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic>, Eigen::Matrix<T, 1, Eigen::Dynamic>> pr;
  std::map<std::string, Vec<T>> heads;
  std::optional<Vec<T>> present, absent;
  std::variant<Vec<T>, Dense<T>> alt;
  std::shared_ptr<Mat<T>> enc, dec;            // a tied leaf
  std::shared_ptr<Dense<T>> block_a, block_b;  // a tied subtree
  std::shared_ptr<Vec<T>> none;
  geomopt::SymmetricMatrix<T> sym;
  geomopt::Stiefel<T> st;
  geomopt::SPD<T> spd;
  geomopt::StiefelLieAlgHorMatrix<T> hor;  // two storage blocks
  pt::Buffer<Eigen::VectorXi> counts;
  pt::Buffer<std::int64_t> step;
  pt::Buffer<bool> flag;
  pt::Buffer<Mat<T>> running;
  GEOMOPT_PTREE(layers, fixed, tup, pr, heads, present, absent, alt, enc, dec, block_a, block_b, none, sym, st, spd,
                hor, counts, step, flag, running)
};

template <class T>
Everything<T> make_everything(double start) {
  Everything<T> e;
  e.layers = {{Mat<T>(4, 3), Vec<T>(4)}, {Mat<T>(2, 4), Vec<T>(2)}};
  e.tup = {T(0), Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>(2, 5)};
  e.pr = {Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic>(3, 2), Eigen::Matrix<T, 1, Eigen::Dynamic>(4)};
  e.heads = {{"cls", Vec<T>(3)}, {"reg.out", Vec<T>(1)}};
  e.present = Vec<T>(2);
  e.alt = Dense<T>{Mat<T>(1, 2), Vec<T>(1)};
  e.enc = std::make_shared<Mat<T>>(3, 3);
  e.dec = e.enc;
  e.block_a = std::make_shared<Dense<T>>(Dense<T>{Mat<T>(2, 2), Vec<T>(2)});
  e.block_b = e.block_a;
  e.sym = geomopt::SymmetricMatrix<T>(3);
  e.st = geomopt::Stiefel<T>(5, 2);
  e.spd = geomopt::SPD<T>(3);
  e.hor = geomopt::StiefelLieAlgHorMatrix<T>(5, 2);
  e.counts = pt::Buffer<Eigen::VectorXi>{Eigen::VectorXi(3)};
  e.running = pt::Buffer<Mat<T>>{Mat<T>(2, 3)};
  iotest::fill(e, start);
  return e;
}

struct Col {
  Eigen::MatrixXd m;
  GEOMOPT_PTREE(m)
};
struct Row {
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> m;
  GEOMOPT_PTREE(m)
};
using Big = Col;

}  // namespace

TEST_CASE_TEMPLATE("a tree of every branch and leaf kind loads back bit for bit", T, float, double) {
  iotest::ScratchDir dir("roundtrip");
  const auto saved = make_everything<T>(1.0);
  geomopt::io::save(dir.file("e.h5"), saved);

  auto loaded = make_everything<T>(1000.0);  // same shapes, other values
  REQUIRE(iotest::snapshot(loaded) != iotest::snapshot(saved));
  const geomopt::io::LoadReport r = geomopt::io::load(dir.file("e.h5"), loaded);
  CHECK(iotest::snapshot(loaded) == iotest::snapshot(saved));
  CHECK(r.complete());
  CHECK(r.missing.empty());
  CHECK(r.unexpected.empty());
  // Every leaf once (aliases are not leaves): 2x2 dense + fixed 2 + tup 2 + pr 2 + heads 2 + present + alt 2 + enc +
  // block_a 2 + sym, st, spd, hor + 4 buffers.
  CHECK(r.loaded.size() == 4 + 2 + 2 + 2 + 2 + 1 + 2 + 1 + 2 + 4 + 4);

  // The ties are the prototype's, and hold the saved values.
  CHECK(loaded.enc.get() == loaded.dec.get());
  CHECK(loaded.block_a.get() == loaded.block_b.get());
  CHECK(*loaded.dec == *saved.dec);
  CHECK(loaded.block_b->weight == saved.block_b->weight);
  CHECK(loaded.none == nullptr);
  CHECK(!loaded.absent.has_value());
  CHECK(loaded.flag.value() == saved.flag.value());
}

TEST_CASE("each alias is a hard link to the first path's object") {
  iotest::ScratchDir dir("links");
  const auto saved = make_everything<double>(1.0);
  geomopt::io::save(dir.file("e.h5"), saved);
  // describe() finds aliases by the address of the object each link points to.
  const std::string d = geomopt::io::describe(dir.file("e.h5"));
  CHECK(d.find("alias: dec -> enc") != std::string::npos);
  CHECK(d.find("alias: block_b -> block_a") != std::string::npos);
  CHECK(d.find("block_b.weight") == std::string::npos);  // not listed as a leaf of its own
}

TEST_CASE("the file holds matrices row-major: a column-major leaf and a row-major leaf read each other") {
  iotest::ScratchDir dir("order");
  Col c{Eigen::MatrixXd(3, 4)};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) c.m(i, j) = 10 * i + j;
  geomopt::io::save(dir.file("c.h5"), c);
  Row r{decltype(Row::m)::Zero(3, 4)};
  geomopt::io::load(dir.file("c.h5"), r);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) CHECK(r.m(i, j) == 10 * i + j);
  // And back: large enough to cross the transposition's tiles.
  Row big{decltype(Row::m)(70, 45)};
  for (int i = 0; i < 70; ++i)
    for (int j = 0; j < 45; ++j) big.m(i, j) = 1000 * i + j;
  geomopt::io::save(dir.file("r.h5"), big);
  Col back{Eigen::MatrixXd::Zero(70, 45)};
  geomopt::io::load(dir.file("r.h5"), back);
  for (int i = 0; i < 70; ++i)
    for (int j = 0; j < 45; ++j) REQUIRE(back.m(i, j) == 1000 * i + j);
}

template <class T>
struct Panels {
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> col;
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> row;
  GEOMOPT_PTREE(col, row)
};

// Plain data is read straight from the file, a column-major matrix in row panels of about 256 KiB; these shapes
// need several panels with a short last one. The same tree saved compressed goes through HDF5 instead: both loads
// must give back every bit, NaN payloads included.
TEST_CASE_TEMPLATE("matrices larger than a read panel load back bit for bit in both memory orders", T, float, double) {
  iotest::ScratchDir dir("panels");
  const Eigen::Index rows = sizeof(T) == 4 ? 700 : 333, cols = sizeof(T) == 4 ? 301 : 257;
  Panels<T> saved{decltype(Panels<T>::col)(rows, cols), decltype(Panels<T>::row)(cols + 1, rows)};
  for (Eigen::Index i = 0; i < saved.col.size(); ++i) saved.col.data()[i] = static_cast<T>(i) * T(0.25) - T(7);
  for (Eigen::Index i = 0; i < saved.row.size(); ++i) saved.row.data()[i] = -static_cast<T>(i);
  saved.col(rows - 1, cols - 1) = std::numeric_limits<T>::quiet_NaN();
  geomopt::io::save(dir.file("raw.h5"), saved);
  geomopt::io::save(dir.file("gz.h5"), saved, {.compression = 1});
  for (const char* name : {"raw.h5", "gz.h5"}) {
    CAPTURE(name);
    Panels<T> loaded{decltype(Panels<T>::col)::Zero(rows, cols), decltype(Panels<T>::row)::Zero(cols + 1, rows)};
    geomopt::io::load(dir.file(name), loaded);
    CHECK(iotest::snapshot(loaded) == iotest::snapshot(saved));
  }
}

TEST_CASE("options: another group, compression, and no overwrite") {
  iotest::ScratchDir dir("options");
  auto saved = make_everything<double>(1.0);
  geomopt::io::save(dir.file("g.h5"), saved, {.group = "run/weights", .compression = 6});
  auto loaded = make_everything<double>(-5.0);
  CHECK_THROWS_AS(geomopt::io::load(dir.file("g.h5"), loaded), geomopt::io::Error);  // no /params
  geomopt::io::load(dir.file("g.h5"), loaded, {.group = "run/weights"});
  CHECK(iotest::snapshot(loaded) == iotest::snapshot(saved));

  // Compression shrinks a constant leaf far below its raw size.
  Big big{Eigen::MatrixXd::Constant(300, 200, 0.5)};
  geomopt::io::save(dir.file("raw.h5"), big);
  geomopt::io::save(dir.file("gz.h5"), big, {.compression = 9});
  CHECK(std::filesystem::file_size(dir.file("raw.h5")) > 300 * 200 * 8);
  CHECK(std::filesystem::file_size(dir.file("gz.h5")) < 300 * 200 * 8 / 20);
  Big back{Eigen::MatrixXd::Zero(300, 200)};
  geomopt::io::load(dir.file("gz.h5"), back);
  CHECK(back.m == big.m);

  // overwrite = false keeps the existing file, byte for byte.
  const auto before = iotest::read_bytes(dir.file("raw.h5"));
  Big other{Eigen::MatrixXd::Constant(300, 200, 2.0)};
  try {
    geomopt::io::save(dir.file("raw.h5"), other, {.overwrite = false});
    FAIL("expected an Error");
  } catch (const geomopt::io::Error& e) {
    CHECK(std::string(e.what()).find("exists") != std::string::npos);
  }
  CHECK(iotest::read_bytes(dir.file("raw.h5")) == before);

  std::string why;
  CHECK_FALSE(geomopt::io::SaveOptions{.compression = 10}.is_valid(&why));
  CHECK(why.find("compression") != std::string::npos);
  CHECK_THROWS_AS(geomopt::io::save(dir.file("x.h5"), big, {.group = "/abs"}), geomopt::io::Error);
  // A save leaves no temporary file behind.
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
    CHECK(entry.path().filename().string().find(".tmp.") == std::string::npos);
}

TEST_CASE("a map key that cannot name an HDF5 link is refused with its path") {
  std::map<std::string, Eigen::VectorXd> m{{"a/b", Eigen::VectorXd::Zero(2)}};
  iotest::ScratchDir dir("names");
  try {
    geomopt::io::save(dir.file("m.h5"), m);
    FAIL("expected an Error");
  } catch (const geomopt::io::Error& e) {
    CHECK(e.has(geomopt::io::ProblemKind::type, "a/b"));
  }
  CHECK_FALSE(std::filesystem::exists(dir.file("m.h5")));
}
