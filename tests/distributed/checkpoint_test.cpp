// Sharded checkpoints: a ZeroRedundancyOptimizer's checkpoint written by the first S = min(3, P) ranks loads at
// P = 2, at P = world size and in one process (geomopt::io::load_checkpoint into the unsharded optimizer), and every
// continuation equals, bit for bit, one process that took the same steps on the same means: the first steps on the
// mean over S ranks, the continued ones on the mean over the ranks that continue. The reference is computed without
// the distributed component (the unsharded optimizer on the serial mean). A load that fails on one rank (its file
// missing, a truncated file, another optimizer's checkpoint) and a save that fails on rank 0 throw on every rank,
// naming the failing rank, and change nothing: parameters, state, the file on disk.
#include "geomopt/distributed/checkpoint.hpp"

#include <doctest/doctest.h>
#include <mpi.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <geomopt/io/checkpoint.hpp>
#include <geomopt/optimizers.hpp>
#include <string>
#include <vector>

#include "mixed_tree.hpp"
#include "world.hpp"

namespace gd = geomopt::distributed;
namespace fs = std::filesystem;
using dtest::bytes_of;
using dtest::gradient_of;
using dtest::kPieces;
using dtest::make_params;
using dtest::Mixed;
using dtest::serial_mean;
using dtest::world_rank;
using dtest::world_size;

namespace {

constexpr int kSaved = 3;      // steps before the checkpoint
constexpr int kContinued = 3;  // steps after it

// A directory of rank 0's choosing, the same on every rank, removed at the end of the test case.
class SharedDirectory {
 public:
  SharedDirectory() {
    long pid = static_cast<long>(::getpid());
    MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    path_ = fs::temp_directory_path() / ("geomopt_distributed_checkpoint_" + std::to_string(pid));
    if (world_rank() == 0) fs::create_directories(path_);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  ~SharedDirectory() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) fs::remove_all(path_);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

// The ranks 0 .. size-1 of the world as a communicator (MPI_COMM_NULL on the others).
MPI_Comm first_ranks(int size) {
  MPI_Comm c = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() < size ? 0 : MPI_UNDEFINED, world_rank(), &c);
  return c;
}

// Parameters other than the run's, so that a load has to overwrite every number.
Mixed<double> other_params() {
  Mixed<double> p = make_params<double>();
  geomopt::ptree::for_each_storage([](auto& b) { b *= 0.5; }, p);
  return p;
}

// The one-process run: kSaved steps on the mean over `saved` ranks, then kContinued on the mean over `continued`.
template <class Make>
Mixed<double> reference_run(Make make, int saved, int continued) {
  Mixed<double> params = make_params<double>();
  auto opt = make();
  auto state = opt.init(params);
  for (int k = 0; k < kSaved + kContinued; ++k)
    opt.step(params, serial_mean(params, k < kSaved ? saved : continued, k), state);
  return params;
}

// The sharded continuation at the world's first `size` ranks from the checkpoint; the parameters it ends with (on
// those ranks; the others return the starting parameters unchanged).
template <class Make>
Mixed<double> continue_sharded(Make make, const std::string& file, int size) {
  Mixed<double> params = other_params();
  MPI_Comm sub = first_ranks(size);
  if (sub == MPI_COMM_NULL) return params;
  {
    const gd::Communicator comm(sub);
    gd::ZeroRedundancyOptimizer zero(comm, make(), params, {}, kPieces);
    const geomopt::io::LoadReport report = gd::load_checkpoint(comm, file, params, zero);
    CHECK(report.missing.empty());
    for (int k = kSaved; k < kSaved + kContinued; ++k) {
      Mixed<double> grads = gradient_of(params, comm.rank(), k);
      zero.step(params, grads);
    }
  }
  MPI_Comm_free(&sub);
  return params;
}

// Saves the first kSaved steps of a sharded run at the first S ranks to `file`.
template <class Make>
void save_sharded(Make make, const std::string& file, int S) {
  MPI_Comm sub = first_ranks(S);
  if (sub == MPI_COMM_NULL) return;
  {
    const gd::Communicator comm(sub);
    Mixed<double> params = make_params<double>();
    gd::ZeroRedundancyOptimizer zero(comm, make(), params, {}, kPieces);
    for (int k = 0; k < kSaved; ++k) {
      Mixed<double> grads = gradient_of(params, comm.rank(), k);
      zero.step(params, grads);
    }
    gd::save_checkpoint(comm, file, params, zero);
  }
  MPI_Comm_free(&sub);
}

template <class Make>
void check_resumes_anywhere(Make make) {
  const SharedDirectory dir;
  const std::string file = dir.file("run.h5");
  const int P = world_size(), S = std::min(3, P);
  save_sharded(make, file, S);
  MPI_Barrier(MPI_COMM_WORLD);

  // In one process, by the io component alone, on every rank.
  {
    Mixed<double> params = other_params();
    auto opt = make();
    auto state = opt.init(params);
    geomopt::io::load_checkpoint(file, params, state);
    CHECK(state.step_count() == kSaved);
    for (int k = kSaved; k < kSaved + kContinued; ++k) opt.step(params, serial_mean(params, 1, k), state);
    CHECK(bytes_of(params) == bytes_of(reference_run(make, S, 1)));
  }
  // At two ranks and at the world's size.
  for (const int size : {2, P}) {
    if (size > P) continue;
    const Mixed<double> params = continue_sharded(make, file, size);
    if (world_rank() < size) CHECK(bytes_of(params) == bytes_of(reference_run(make, S, size)));
  }
}

}  // namespace

TEST_CASE("a checkpoint of sharded Adam written at min(3, P) ranks continues exactly at 1, 2 and P ranks") {
  check_resumes_anywhere([] { return geomopt::Adam({.lr = 1e-2}); });
}

TEST_CASE("a checkpoint of sharded ManifoldMuon (whole matrices and manifold leaves on owners) continues exactly") {
  check_resumes_anywhere([] { return geomopt::ManifoldMuon(); });
}

TEST_CASE("the gathered state is the unsharded state, slot for slot") {
  const gd::Communicator comm(MPI_COMM_WORLD);
  const int P = world_size();
  Mixed<double> params = make_params<double>(), reference = params;
  gd::ZeroRedundancyOptimizer zero(comm, geomopt::Adam({.lr = 1e-2}), params, {}, kPieces);
  auto adam = geomopt::Adam({.lr = 1e-2});
  auto state = adam.init(reference);
  for (int k = 0; k < 2; ++k) {
    Mixed<double> grads = gradient_of(params, comm.rank(), k);
    zero.step(params, grads);
    adam.step(reference, serial_mean(reference, P, k), state);
  }
  const int root = P - 1;
  const auto full = zero.gather_state(comm, params, root);
  CHECK(full.has_value() == (comm.rank() == root));
  if (!full) return;
  CHECK(full->step_count() == 2);
  std::vector<double> got, expected;
  full->for_each_slot(
      [&](const std::string&, std::string_view, auto m) { got.insert(got.end(), m.data(), m.data() + m.size()); });
  state.for_each_slot([&](const std::string&, std::string_view, auto m) {
    expected.insert(expected.end(), m.data(), m.data() + m.size());
  });
  CHECK(got.size() == expected.size());
  CHECK(got == expected);
}

TEST_CASE("a load that fails on one rank throws on every rank, naming it, and changes nothing") {
  const SharedDirectory dir;
  const gd::Communicator comm(MPI_COMM_WORLD);
  const int P = world_size(), rank = world_rank();
  const std::string good = dir.file("good.h5"), truncated = dir.file("truncated.h5"), sgd = dir.file("sgd.h5");
  Mixed<double> params = make_params<double>();
  gd::ZeroRedundancyOptimizer zero(comm, geomopt::Adam({.lr = 1e-2}), params, {}, kPieces);
  for (int k = 0; k < 2; ++k) {
    Mixed<double> grads = gradient_of(params, rank, k);
    zero.step(params, grads);
  }
  gd::save_checkpoint(comm, good, params, zero);
  if (rank == 0) {
    fs::copy_file(good, truncated);
    fs::resize_file(truncated, fs::file_size(good) / 2);
    Mixed<double> p = make_params<double>();
    auto plain = geomopt::SGD({.lr = 0.1});
    geomopt::io::save_checkpoint(sgd, p, plain.init(p));
  }
  comm.barrier();

  // Steps after each failed load must continue as if none had been tried: compare with a twin that never tried.
  Mixed<double> twin_params = make_params<double>();
  gd::ZeroRedundancyOptimizer twin(comm, geomopt::Adam({.lr = 1e-2}), twin_params, {}, kPieces);
  gd::load_checkpoint(comm, good, twin_params, twin);

  const int failing = P - 1;
  const std::vector<unsigned char> before = bytes_of(params);
  SUBCASE("one rank's file is missing") {
    const std::string mine = rank == failing ? dir.file("absent.h5") : good;
    if (rank == failing) {
      CHECK_THROWS_AS(gd::load_checkpoint(comm, mine, params, zero), geomopt::io::Error);
    } else {
      try {
        gd::load_checkpoint(comm, mine, params, zero);
        FAIL("load_checkpoint returned on a rank whose file was there");
      } catch (const gd::Error& e) {
        CHECK(std::string(e.what()).find("rank " + std::to_string(failing)) != std::string::npos);
        CHECK(std::string(e.what()).find("absent.h5") != std::string::npos);
      }
    }
  }
  SUBCASE("a truncated file") { CHECK_THROWS(gd::load_checkpoint(comm, truncated, params, zero)); }
  SUBCASE("another optimizer's checkpoint") {
    CHECK_THROWS_AS(gd::load_checkpoint(comm, sgd, params, zero), geomopt::io::Error);
  }
  CHECK(bytes_of(params) == before);
  for (int k = 2; k < 4; ++k) {
    Mixed<double> grads = gradient_of(params, rank, k), twin_grads = grads;
    zero.step(params, grads);
    twin.step(twin_params, twin_grads);
  }
  CHECK(bytes_of(params) == bytes_of(twin_params));
}

TEST_CASE("a save that fails on rank 0 throws on every rank and leaves the last checkpoint as it was") {
  const SharedDirectory dir;
  const gd::Communicator comm(MPI_COMM_WORLD);
  const std::string file = dir.file("last.h5");
  Mixed<double> params = make_params<double>();
  gd::ZeroRedundancyOptimizer zero(comm, geomopt::Adam({.lr = 1e-2}), params, {}, kPieces);
  gd::save_checkpoint(comm, file, params, zero);
  std::vector<char> saved;
  if (world_rank() == 0) {
    std::ifstream in(file, std::ios::binary);
    saved.assign(std::istreambuf_iterator<char>(in), {});
  }
  Mixed<double> grads = gradient_of(params, world_rank(), 0);
  zero.step(params, grads);
  const geomopt::io::SaveOptions keep{.overwrite = false};  // the target exists: rank 0's write is refused
  if (world_rank() == 0) {
    CHECK_THROWS_AS(gd::save_checkpoint(comm, file, params, zero, {}, keep), geomopt::io::Error);
    std::ifstream in(file, std::ios::binary);
    CHECK(std::vector<char>(std::istreambuf_iterator<char>(in), {}) == saved);
  } else {
    CHECK_THROWS_WITH_AS(gd::save_checkpoint(comm, file, params, zero, {}, keep), doctest::Contains("failed on rank 0"),
                         gd::Error);
  }
}
