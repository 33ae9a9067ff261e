// What a file may contain (docs/file_format.md): every dataset's checksum and the checksum of the optimizer's and
// the metadata's attributes, a checkpoint's step and format_version, links that no load could tell apart refused at
// save time, and the messages of files that are not what a load expects. Every refused load leaves the tree and the
// state as they were; every refused save writes nothing.
#include "common.hpp"

#include <geomopt/io.hpp>

#include <geomopt/manifolds/stiefel.hpp>  // alone: the test needs no dense kernels
#include "../../io/src/checksum.hpp"      // the io library's own CRC-32 (exported from it, private to it)

#include <fcntl.h>
#include <hdf5.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace {

using geomopt::io::ProblemKind;

struct Net {
  Eigen::MatrixXd w;  // column-major: transposed on the way
  Eigen::VectorXd b;
  geomopt::Stiefel<double> st;  // a structured leaf
  double scale = 0;
  GEOMOPT_PTREE(w, b, st, scale)
};

Net make_net(double start) {
  Net n;
  n.w = Eigen::MatrixXd(5, 3);
  n.b = Eigen::VectorXd(4);
  iotest::fill(n, start, 0.01);
  geomopt::Rng rng(static_cast<unsigned>(start * 100));
  n.st = geomopt::Stiefel<double>::random_point(rng, 5, 2);
  return n;
}

using State = iotest::FakeState<double, Net>;

struct Masked {
  Eigen::VectorXd w;
  pt::Buffer<Eigen::VectorXd> mask;  // an attention mask: -infinity is a legitimate value
  GEOMOPT_PTREE(w, mask)
};

// An Adam-like state: a first and a second moment per leaf (the Stiefel leaf's by its 7 tangent coordinates).
State make_state(double start, std::int64_t step) {
  State s;
  s.kind = "Adam";
  s.hp = {{"lr", 0.001}, {"beta1", 0.9}, {"beta2", 0.999}};
  s.step = step;
  const std::vector<std::pair<std::string, std::pair<int, int>>> leaves = {
      {"w", {5, 3}}, {"b", {4, 1}}, {"st", {7, 1}}, {"scale", {1, 1}}};
  double v = start;
  for (const auto& [path, shape] : leaves)
    for (const char* slot : {"exp_avg", "exp_avg_sq"}) {
      Eigen::MatrixXd m(shape.first, shape.second);
      for (Eigen::Index k = 0; k < m.size(); ++k) m.data()[k] = (v += 0.125);
      s.slots.push_back({path, slot, m});
    }
  return s;
}

std::vector<unsigned char> state_bytes(const State& s) {
  std::vector<unsigned char> out;
  for (const auto& slot : s.slots) {
    const auto* p = reinterpret_cast<const unsigned char*>(slot.data.data());
    out.insert(out.end(), p, p + slot.data.size() * static_cast<Eigen::Index>(sizeof(double)));
  }
  const auto* p = reinterpret_cast<const unsigned char*>(&s.step);
  out.insert(out.end(), p, p + sizeof s.step);
  return out;
}

// The checkpoint the checksum and corruption tests alter: make_net(1.0) and make_state(2.0, 17), saved in a fresh
// scratch directory as `file`, and the bytes of that file.
struct SavedCheckpoint {
  iotest::ScratchDir dir;
  Net net = make_net(1.0);
  State state = make_state(2.0, 17);
  std::string file;
  std::vector<char> bytes;

  SavedCheckpoint(const std::string& dir_name, const std::string& file_name)
      : dir(dir_name), file(dir.file(file_name)) {
    geomopt::io::save_checkpoint(file, net, state);
    bytes = iotest::read_bytes(file);
  }
};

// The offset of the first occurrence of a double's bytes in a file.
std::size_t find_double(const std::vector<char>& file, double x) {
  const auto* p = reinterpret_cast<const char*>(&x);
  const auto it = std::search(file.begin(), file.end(), p, p + sizeof x);
  REQUIRE(it != file.end());
  return static_cast<std::size_t>(it - file.begin());
}

// Loads a checkpoint expecting an Error with this kind of problem whose message holds `words`; the tree and the
// state must be unchanged.
void expect_refused(const std::string& file, ProblemKind kind, const std::string& words,
                    const geomopt::io::LoadOptions& options = {}) {
  Net n = make_net(7.0);
  State s = make_state(9.0, 5);
  const auto before = iotest::snapshot(n);
  const auto state_before = state_bytes(s);
  try {
    geomopt::io::load_checkpoint(file, n, s, options);
    FAIL("expected an Error with \"" << words << "\"");
  } catch (const geomopt::io::Error& e) {
    INFO(e.what());
    bool found = false;
    for (const auto& p : e.problems()) found = found || (p.kind == kind && p.message.find(words) != std::string::npos);
    CHECK(found);
  }
  CHECK(iotest::snapshot(n) == before);
  CHECK(state_bytes(s) == state_before);
}

// Rewrites (or, with nullopt, deletes) an attribute of an object of a file with the HDF5 C API, as another tool would.
template <class T>
void set_attribute(const std::string& file, const char* object, const char* name, const T* value, hid_t type) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(f >= 0);
  const hid_t o = H5Oopen(f, object, H5P_DEFAULT);
  REQUIRE(o >= 0);
  if (H5Aexists(o, name) > 0) REQUIRE(H5Adelete(o, name) >= 0);
  if (value != nullptr) {
    const hid_t space = H5Screate(H5S_SCALAR);
    const hid_t a = H5Acreate2(o, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    REQUIRE(a >= 0);
    REQUIRE(H5Awrite(a, type, value) >= 0);
    H5Aclose(a);
    H5Sclose(space);
  }
  H5Oclose(o);
  REQUIRE(H5Fclose(f) >= 0);
}

std::vector<std::string> directory_listing(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("checksums: the CRC-32 of every length and alignment equals a bit-at-a-time reference") {
  // The textbook definition, one bit at a time: independent of the library's table and carry-less folding.
  auto reference = [](const unsigned char* p, std::size_t n) {
    std::uint32_t c = 0xFFFFFFFFu;
    for (std::size_t i = 0; i < n; ++i) {
      c ^= p[i];
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1u) != 0 ? 0xEDB88320u : 0u);
    }
    return ~c;
  };
  std::vector<unsigned char> data(4096 + 64);
  std::uint32_t x = 12345;
  for (auto& c : data) c = static_cast<unsigned char>((x = x * 1103515245u + 12345u) >> 24);
  const unsigned char check[] = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
  CHECK(geomopt::io::detail::crc32(0, check, 9) == 0xCBF43926u);  // the catalogue's check value
  for (std::size_t n : {0, 1, 15, 16, 17, 63, 64, 65, 255, 256, 257, 300, 511, 512, 1000, 1024, 4096})
    for (std::size_t offset : {0, 1, 7, 33}) {
      CAPTURE(n);
      CAPTURE(offset);
      const unsigned char* p = data.data() + offset;
      const std::uint32_t want = reference(p, n);
      CHECK(geomopt::io::detail::crc32(0, p, n) == want);
      CHECK(geomopt::io::detail::crc32_portable(0, p, n) == want);
      CHECK(geomopt::io::detail::crc32(geomopt::io::detail::crc32(0, p, n / 3), p + n / 3, n - n / 3) == want);
    }
}

TEST_CASE("checksums: a changed number in a dataset is refused before anything changes, and only by the checksum") {
  const auto& [dir, net, state, file, good] = SavedCheckpoint("crc", "ckpt.h5");

  // One bit of a parameter (w(1, 2), transposed on the way), of a manifold point and of a state array.
  const double targets[] = {net.w(1, 2), net.st.value()(3, 1), state.slots[3].data(2, 0)};
  for (const double x : targets) {
    CAPTURE(x);
    auto bad = good;
    bad[find_double(bad, x)] ^= 0x01;  // the lowest bit of the mantissa: a finite, plausible number
    iotest::write_bytes(file, bad.data(), bad.size());
    expect_refused(file, ProblemKind::checksum, "does not match its checksum");
    // The same file with the check turned off loads a different number: the checksum is what refuses it.
    Net n = make_net(7.0);
    State s = make_state(9.0, 5);
    geomopt::io::load_checkpoint(file, n, s, {.verify_checksums = false});
    CHECK((iotest::snapshot(n) != iotest::snapshot(net) || state_bytes(s) != state_bytes(state)));
  }
  // The same for a plain save, compressed (the chunked path through HDF5's filters).
  geomopt::io::save(file, net, {.compression = 4});
  Net n = make_net(7.0);
  geomopt::io::load(file, n);
  CHECK(iotest::snapshot(n) == iotest::snapshot(net));
}

TEST_CASE("checksums: the step and the optimizer's attributes are covered; files without checksums still load") {
  const auto& [dir, net, state, file, bytes] = SavedCheckpoint("crc_attr", "ckpt.h5");
  // Another tool changes the step without updating the checksum.
  const std::int64_t step = 18;
  set_attribute(file, "/optimizer", "step", &step, H5T_NATIVE_INT64);
  expect_refused(file, ProblemKind::checksum, "do not match their checksum");

  // Without any checksum (a file written by h5py): loads, unchecked.
  geomopt::io::save_checkpoint(file, net, state);
  set_attribute<int>(file, "/optimizer", "attributes_crc32", nullptr, 0);
  set_attribute<int>(file, "/metadata", "attributes_crc32", nullptr, 0);
  for (const char* d : {"/params/w", "/params/b", "/params/st/0", "/optimizer/w/exp_avg", "/optimizer/st/exp_avg_sq"})
    set_attribute<int>(file, d, "crc32", nullptr, 0);
  Net n = make_net(7.0);
  State s = make_state(9.0, 5);
  const auto report = geomopt::io::load_checkpoint(file, n, s);
  CHECK(report.complete());
  CHECK(iotest::snapshot(n) == iotest::snapshot(net));
  CHECK(state_bytes(s) == state_bytes(state));
  CHECK(report.metadata.attributes.count("attributes_crc32") == 0);

  // A checksum attribute that is not a CRC-32.
  const std::int64_t negative = -3;
  set_attribute(file, "/params/b", "crc32", &negative, H5T_NATIVE_INT64);
  expect_refused(file, ProblemKind::checksum, "a CRC-32 from 0 to 4294967295 is expected");
}

TEST_CASE("a checkpoint's step and format_version are validated; the tree and the state stay as they were") {
  iotest::ScratchDir dir("step");
  const std::string file = dir.file("ckpt.h5");
  auto fresh = [&](std::int64_t step) { geomopt::io::save_checkpoint(file, make_net(1.0), make_state(2.0, step)); };
  // The attributes' checksum would refuse every edit below by itself; each case removes it to reach the check.
  auto edit = [&](auto&& change) {
    fresh(17);
    change();
    set_attribute<int>(file, "/optimizer", "attributes_crc32", nullptr, 0);
  };

  edit([&] { set_attribute<int>(file, "/optimizer", "step", nullptr, 0); });
  expect_refused(file, ProblemKind::metadata, "step is absent in the file; an integer from 0 to");
  {  // A lenient load keeps the state's step and says so.
    Net n = make_net(7.0);
    State s = make_state(9.0, 5);
    const auto r = geomopt::io::load_checkpoint(file, n, s, {.strict = false});
    CHECK(s.step_count() == 5);
    REQUIRE(r.differences.size() == 1);
    CHECK(r.differences[0].find("step is absent") != std::string::npos);
  }
  const double real = 17.0;
  edit([&] { set_attribute(file, "/optimizer", "step", &real, H5T_NATIVE_DOUBLE); });
  expect_refused(file, ProblemKind::metadata, "step is the real number 17 in the file");
  edit([&] {
    const char* text = "17";
    const hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    set_attribute(file, "/optimizer", "step", &text, t);
    H5Tclose(t);
  });
  expect_refused(file, ProblemKind::metadata, "step is the string \"17\" in the file");
  // A leaf's own step count (written for a leaf that sat steps out) must be from 0 to the step count.
  for (const std::int64_t leaf_step : {std::int64_t{18}, std::int64_t{-1}}) {
    edit([&] { set_attribute(file, "/optimizer", "w:step", &leaf_step, H5T_NATIVE_INT64); });
    expect_refused(file, ProblemKind::metadata,
                   "step is " + std::to_string(leaf_step) + " in the file; an integer from 0 to the step count 17");
  }
  edit([&] { set_attribute(file, "/optimizer", "b:step", &real, H5T_NATIVE_DOUBLE); });
  expect_refused(file, ProblemKind::metadata, "step is the real number 17 in the file; an integer from 0 to the step");
  const std::uint64_t huge = std::numeric_limits<std::uint64_t>::max();
  edit([&] { set_attribute(file, "/optimizer", "step", &huge, H5T_NATIVE_UINT64); });
  expect_refused(file, ProblemKind::metadata, "step is 9223372036854775807 in the file");
  // A negative or huge step straight from a state (the save checksums it: only the range refuses it).
  fresh(-1);
  expect_refused(file, ProblemKind::metadata, "step is -1 in the file; an integer from 0 to 9007199254740992");
  fresh((std::int64_t{1} << 53) + 1);
  expect_refused(file, ProblemKind::metadata, "step is 9007199254740993 in the file");

  // format_version: newer, absent, of another type.
  const std::int64_t two = 2;
  edit([&] { set_attribute(file, "/", "format_version", &two, H5T_NATIVE_INT64); });
  expect_refused(file, ProblemKind::metadata,
                 "format_version is 2 in the file; this reader understands format_version 1");
  edit([&] { set_attribute<int>(file, "/", "format_version", nullptr, 0); });
  expect_refused(file, ProblemKind::metadata, "format_version is absent");
  edit([&] { set_attribute(file, "/", "format_version", &real, H5T_NATIVE_DOUBLE); });
  expect_refused(file, ProblemKind::metadata, "format_version is the real number 17");
  // A plain tree written by another tool (no format_version) loads.
  geomopt::io::save(file, make_net(1.0));
  set_attribute<int>(file, "/", "format_version", nullptr, 0);
  Net n = make_net(7.0);
  CHECK(geomopt::io::load(file, n).complete());
  CHECK(iotest::snapshot(n) == iotest::snapshot(make_net(1.0)));
}

TEST_CASE("a strict load refuses NaN and infinity in parameters and state and a negative second moment") {
  iotest::ScratchDir dir("values");
  const std::string file = dir.file("ckpt.h5");
  Net net = make_net(1.0);
  net.w(2, 1) = std::numeric_limits<double>::quiet_NaN();  // a diverged run may be saved
  geomopt::io::save_checkpoint(file, net, make_state(2.0, 3));
  expect_refused(file, ProblemKind::value, "1 of 15 numbers are NaN or infinite in the file");
  {  // A lenient load takes it and says so.
    Net n = make_net(7.0);
    State s = make_state(9.0, 5);
    const auto r = geomopt::io::load_checkpoint(file, n, s, {.strict = false});
    CHECK(std::isnan(n.w(2, 1)));
    REQUIRE(r.differences.size() == 1);
    CHECK(r.differences[0].find("w: 1 of 15 numbers are NaN or infinite") == 0);
  }
  State state = make_state(2.0, 3);
  state.slots[1].data(0, 0) = -std::numeric_limits<double>::infinity();  // w.exp_avg_sq
  state.slots[3].data(2, 0) = -0.5;                                      // b.exp_avg_sq
  geomopt::io::save_checkpoint(file, make_net(1.0), state);
  expect_refused(file, ProblemKind::value, "1 of 15 numbers are NaN or infinite");
  expect_refused(file, ProblemKind::value, "1 of 4 numbers are negative in the file; exp_avg_sq is a second moment");
  // A first moment may be negative; a buffer may hold infinity (a mask).
  Masked m{Eigen::VectorXd::Constant(3, -1.0), pt::Buffer<Eigen::VectorXd>{Eigen::VectorXd::Zero(3)}};
  (*m.mask)(1) = -std::numeric_limits<double>::infinity();
  iotest::FakeState<double, Masked> ms;
  ms.slots = {{"w", "exp_avg", Eigen::MatrixXd::Constant(3, 1, -2.0)}};
  geomopt::io::save_checkpoint(file, m, ms);
  Masked back{Eigen::VectorXd::Zero(3), pt::Buffer<Eigen::VectorXd>{Eigen::VectorXd::Zero(3)}};
  iotest::FakeState<double, Masked> back_state;
  back_state.slots = {{"w", "exp_avg", Eigen::MatrixXd::Zero(3, 1)}};
  CHECK(geomopt::io::load_checkpoint(file, back, back_state).complete());
  CHECK(iotest::snapshot(back) == iotest::snapshot(m));
}

TEST_CASE("a strict load refuses a manifold point off its manifold") {
  iotest::ScratchDir dir("point");
  const std::string file = dir.file("net.h5");
  Net net = make_net(1.0);
  net.st.value() *= 1.001;  // ||Y^T Y - I|| about 3e-3: a damaged or foreign point, not rounding
  geomopt::io::save_checkpoint(file, net, make_state(2.0, 3));
  expect_refused(file, ProblemKind::value, "the point is off its manifold: its defect (check()) is 0.00283");
  Net n = make_net(7.0);
  State s = make_state(9.0, 5);
  const auto r = geomopt::io::load_checkpoint(file, n, s, {.strict = false});
  REQUIRE(r.differences.size() == 1);
  CHECK(r.differences[0].find("st: the point is off its manifold") == 0);
  CHECK(iotest::snapshot(n) == iotest::snapshot(net));
  // A point as saved (rounding only) loads strictly.
  geomopt::io::save_checkpoint(file, make_net(1.0), make_state(2.0, 3));
  CHECK(geomopt::io::load_checkpoint(file, n, s).complete());
}

TEST_CASE("a save refuses, before writing anything, links that no load could tell apart, naming both paths") {
  iotest::ScratchDir dir("collide");
  const std::string file = dir.file("old.h5");
  std::map<std::string, Eigen::VectorXd> old{{"x", Eigen::VectorXd::Ones(2)}};
  geomopt::io::save(file, old);
  const auto old_bytes = iotest::read_bytes(file);
  const auto listing = directory_listing(dir.path());
  auto expect_collision = [&](auto&& save, const std::string& first, const std::string& second) {
    try {
      save();
      FAIL("expected an Error");
    } catch (const geomopt::io::Error& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(first) != std::string::npos);
      CHECK(std::string(e.what()).find(second) != std::string::npos);
      CHECK(std::string(e.what()).find("name already exists") == std::string::npos);
    }
    CHECK(iotest::read_bytes(file) == old_bytes);
    CHECK(directory_listing(dir.path()) == listing);  // no temporary file left
  };

  // Map keys "a" and "a.exp_avg": the optimizer's /optimizer/a/exp_avg against the group /optimizer/a.exp_avg.
  std::map<std::string, Eigen::VectorXd> tree{{"a", Eigen::VectorXd::Ones(2)}, {"a.exp_avg", Eigen::VectorXd::Ones(2)}};
  iotest::FakeState<double, decltype(tree)> st;
  st.slots = {{"a", "exp_avg", Eigen::MatrixXd::Ones(2, 1)}, {"a.exp_avg", "exp_avg", Eigen::MatrixXd::Ones(2, 1)}};
  expect_collision([&] { geomopt::io::save_checkpoint(file, tree, st); }, "/optimizer/a/exp_avg",
                   "/optimizer/a.exp_avg");
  // {"a": {"b.c"}} beside {"a.b": {"c"}}: /params/a/b.c and /params/a.b/c.
  std::map<std::string, std::map<std::string, Eigen::VectorXd>> nested{{"a", {{"b.c", Eigen::VectorXd::Ones(1)}}},
                                                                       {"a.b", {{"c", Eigen::VectorXd::Ones(1)}}}};
  expect_collision([&] { geomopt::io::save(file, nested); }, "/params/a/b.c", "/params/a.b/c");
  // The tree under a group of the checkpoint's own.
  for (const char* group : {"optimizer", "metadata", "optimizer/x"})
    expect_collision(
        [&] {
          geomopt::io::save_checkpoint(file, old, iotest::FakeState<double, decltype(old)>{}, {}, {.group = group});
        },
        std::string("/") + group, "choose another SaveOptions::group");
  // Without the collision, the same shapes save and load.
  std::map<std::string, Eigen::VectorXd> fine{{"a", Eigen::VectorXd::Ones(2)}, {"a_exp_avg", Eigen::VectorXd::Ones(2)}};
  geomopt::io::save(file, fine);
  CHECK(geomopt::io::load(file, fine).complete());
}

TEST_CASE("messages: a directory, a device, a locked file, a float metadata attribute, a missing group") {
  iotest::ScratchDir dir("messages");
  Net n = make_net(7.0);
  const auto before = iotest::snapshot(n);
  auto message = [&](const std::string& file, const geomopt::io::LoadOptions& options = {}) -> std::string {
    try {
      geomopt::io::load(file, n, options);
    } catch (const geomopt::io::Error& e) {
      return e.what();
    }
    FAIL("expected an Error");
    return "";
  };
  CHECK(message(dir.path().string()).find("is a directory, not a file") != std::string::npos);
  CHECK(message("/dev/zero").find("is not a regular file (a character device)") != std::string::npos);
  CHECK(message(dir.file("absent.h5")).find("no such file") != std::string::npos);

  // A file another HDF5 writer holds: its lock, not corruption.
  const std::string file = dir.file("net.h5");
  geomopt::io::save(file, make_net(1.0));
  {
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);  // what HDF5 takes for a writer
    const std::string m = message(file);
    CHECK(m.find("locked by another process") != std::string::npos);
    CHECK(m.find("HDF5_USE_FILE_LOCKING") != std::string::npos);
    CHECK(m.find("corrupt") == std::string::npos);
    ::close(fd);
  }
  CHECK(iotest::snapshot(n) == before);

  // An integer attribute of a structured leaf stored as a real number.
  const double six = 5.0;
  set_attribute(file, "/params/st", "N", &six, H5T_NATIVE_DOUBLE);
  CHECK(message(file).find("N is the real number 5 (an integer attribute is expected) in the file, 5 in the tree") !=
        std::string::npos);

  // A missing group: one problem, not one per leaf.
  geomopt::io::save(file, make_net(1.0), {.group = "weights"});
  try {
    geomopt::io::load(file, n);
    FAIL("expected an Error");
  } catch (const geomopt::io::Error& e) {
    REQUIRE(e.problems().size() == 1);
    CHECK(e.problems()[0].message.find("no group /params in the file (its root holds /weights): the tree's 4 leaves "
                                       "are missing") != std::string::npos);
  }
  CHECK(iotest::snapshot(n) == before);
}

TEST_CASE("a load report counts leaves as leaves and the optimizer's arrays separately") {
  iotest::ScratchDir dir("report");
  const std::string file = dir.file("ckpt.h5");
  geomopt::io::save_checkpoint(file, make_net(1.0), make_state(2.0, 3));
  Net n = make_net(7.0);
  State s = make_state(9.0, 5);
  const auto r = geomopt::io::load_checkpoint(file, n, s);
  CHECK(r.loaded.size() == 4);
  CHECK(r.state.size() == 8);
  CHECK(r.brief_report() == "loaded 4 leaves and 8 state arrays; 0 missing, 0 unexpected");
}

// Every single-byte change at 520 offsets spread over a checkpoint either loads the identical tree and state or
// throws Error with the tree and the state unchanged; none loads different numbers. Each load runs in a forked
// child with the crash guard off (a spawned checker per load would cost 50 ms to 300 ms each on a busy machine): the
// child reports its verdict by exit status, and a child that HDF5 crashed or hung is counted apart (what the
// guard, tested in error_test.cpp, turns into an Error).
TEST_CASE("corruption campaign: no single-byte change of a checkpoint loads different numbers") {
  const auto& [dir, net, state, good_file, good] = SavedCheckpoint("campaign", "good.h5");
  const auto net_bytes = iotest::snapshot(net);
  const auto st_bytes = state_bytes(state);
  const std::string file = dir.file("bad.h5");
  enum Verdict { kIdentical = 10, kRefused = 11, kDifferent = 12, kChangedOnError = 13, kOtherException = 14 };
  constexpr std::size_t kOffsets = 520;
  std::map<int, int> verdicts;
  int guarded = 0;  // offsets that crashed or hung HDF5 in-process, then loaded through the guard
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t k = 0; k < kOffsets; ++k) {
    const std::size_t stride = std::max<std::size_t>(1, good.size() / kOffsets);
    const std::size_t offset = k * good.size() / kOffsets + (k * 7919) % stride;
    CAPTURE(offset);
    auto bad = good;
    // Alternately one flipped bit and an overwritten byte.
    bad[offset] =
        k % 2 == 0 ? static_cast<char>(bad[offset] ^ (1 << (k / 2 % 8))) : static_cast<char>(bad[offset] + 0x5b);
    iotest::write_bytes(file, bad.data(), bad.size());
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      ::alarm(3);  // HDF5 1.10 loops forever on some corrupt files: the guard's deadline, here SIGALRM
      for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) ::signal(sig, SIG_DFL);  // not doctest's report
      Net n = make_net(7.0);
      State s = make_state(9.0, 5);
      const auto n_before = iotest::snapshot(n);
      const auto s_before = state_bytes(s);
      int verdict = kOtherException;
      try {
        geomopt::io::load_checkpoint(file, n, s, {.isolate = false});
        verdict = iotest::snapshot(n) == net_bytes && state_bytes(s) == st_bytes ? kIdentical : kDifferent;
      } catch (const geomopt::io::Error&) {
        verdict = iotest::snapshot(n) == n_before && state_bytes(s) == s_before ? kRefused : kChangedOnError;
      } catch (...) {
      }
      ::_exit(verdict);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    const int verdict = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    ++verdicts[verdict];
    CHECK(verdict != kDifferent);
    CHECK(verdict != kChangedOnError);
    CHECK(verdict != kOtherException);
    CHECK((verdict == kIdentical || verdict == kRefused || verdict < 0));
    if (verdict < 0) {
      // A file that crashes or hangs HDF5 in-process: the default load's guard must turn it into an Error.
      Net n = make_net(7.0);
      State s = make_state(9.0, 5);
      const auto n_before = iotest::snapshot(n);
      const auto s_before = state_bytes(s);
      CHECK_THROWS_AS(geomopt::io::load_checkpoint(file, n, s, {.isolate_timeout = 5}), geomopt::io::Error);
      CHECK(iotest::snapshot(n) == n_before);
      CHECK(state_bytes(s) == s_before);
      ++guarded;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int crashed = 0;
  for (const auto& [v, count] : verdicts)
    if (v < 0 && v != -SIGALRM) crashed += count;
  MESSAGE(verdicts[kIdentical] << " identical, " << verdicts[kRefused] << " refused, " << crashed
                               << " crashed HDF5 and " << verdicts[-SIGALRM] << " hung in it (the guard's cases), of "
                               << kOffsets << " offsets over " << good.size() << " bytes, in " << seconds
                               << " s; each of the " << guarded
                               << " that crashed or hung gave an Error through the guard");
  CHECK(verdicts[kRefused] > 0);
  CHECK(verdicts[kIdentical] > 0);
}
