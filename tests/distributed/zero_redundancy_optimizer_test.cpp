// ZeroRedundancyOptimizer: over a tree of a matrix and a vector large enough to be cut into pieces, a small vector, a
// Stiefel and a Sphere leaf, sharded SGD, Adam, AdamW, Muon and ManifoldMuon take several steps; each rank recomputes
// the mean of every rank's gradient serially (sum in rank order, one division: the averager's formula) and steps the
// unsharded optimizer on it in its own process, the reference: the sharded parameters must equal it bit for bit, and
// every rank's bytes every other's. The ranks' state bytes add up to the unsharded state's, and split evenly on a tree
// of equal leaves; clipping and the non-finite policy decide alike on every rank; a tree that differs on one rank
// throws on every rank naming the rank and the path; a step after the first allocates nothing outside MPI calls.
#include "geomopt/distributed/zero_redundancy_optimizer.hpp"

#include <doctest/doctest.h>
#include <mpi.h>

#include <Eigen/Core>
#include <cmath>
#include <cstring>
#include <geomopt/manifolds/sphere/sphere.hpp>
#include <geomopt/manifolds/stiefel.hpp>
#include <geomopt/optimizers.hpp>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "count_allocations.hpp"
#include "mixed_tree.hpp"
#include "mpi_allocations.hpp"
#include "world.hpp"

namespace gd = geomopt::distributed;
using dtest::bytes_of;
using dtest::gradient_of;
using dtest::kPieces;
using dtest::make_params;
using dtest::Mixed;
using dtest::same_on_every_rank;
using dtest::serial_mean;
using dtest::world_rank;
using dtest::world_size;

namespace {

// Several sharded steps against the unsharded optimizer on the serial mean, bit for bit; the same bytes on every
// rank; the state bytes of the ranks add up to the unsharded state's.
template <class T, class Make>
void check_against_unsharded(Make make, const geomopt::LeafRule& rule = {}) {
  const gd::Communicator comm(MPI_COMM_WORLD);
  const int P = world_size(), rank = world_rank();
  Mixed<T> params = make_params<T>(), reference = params;
  gd::ZeroRedundancyOptimizer zero(comm, make(), params, rule, kPieces);
  auto unsharded = make();
  auto state = unsharded.init(reference, rule);
  for (int k = 0; k < 4; ++k) {
    Mixed<T> grads = gradient_of(params, rank, k);
    const geomopt::StepReport report = zero.step(params, grads);
    const Mixed<T> mean = serial_mean(params, P, k);
    const geomopt::StepReport expected = unsharded.step(reference, mean, state);
    CHECK(report.applied == expected.applied);
    CHECK(report.step == expected.step);
    CHECK(bytes_of(params) == bytes_of(reference));
    CHECK(same_on_every_rank(bytes_of(params)));
  }
  long mine = static_cast<long>(zero.state_bytes()), total = 0;
  MPI_Allreduce(&mine, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  CHECK(total == static_cast<long>(state.nbytes()));
  if (rank == 0) MESSAGE(zero.plan().BriefReport() << "; state bytes of rank 0 " << mine << " of " << total);
}

}  // namespace

TEST_CASE("the plan cuts the large Euclidean leaves and keeps the manifold leaves whole") {
  const gd::Communicator comm(MPI_COMM_WORLD);
  const Mixed<double> params = make_params<double>();
  const gd::ZeroRedundancyOptimizer zero(comm, geomopt::Adam(), params, {}, kPieces);
  int weight = 0, bias = 0;
  for (const gd::OwnedUnit& u : zero.plan().units()) {
    const std::string& path = zero.plan().path(u);
    weight += path == "weight";
    bias += path == "bias";
    if (path == "frame" || path == "direction" || path == "scale") CHECK(u.whole);
  }
  CHECK(weight == 5);
  CHECK(bias == 2);
}

TEST_CASE("sharded SGD, Adam and AdamW equal the unsharded step on the mean, bit for bit, on every rank") {
  check_against_unsharded<double>([] { return geomopt::SGD({.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3}); });
  const auto adam = [] { return geomopt::Adam({.lr = 0.01}); };
  check_against_unsharded<double>(adam);
  check_against_unsharded<float>(adam);
  // Per-leaf options follow the original paths, pieces included.
  const auto adamw = [] { return geomopt::AdamW({.lr = 0.01, .weight_decay = 0.1}); };
  check_against_unsharded<double>(adamw, [](const geomopt::ptree::Path& p) {
    geomopt::LeafOptions lo;
    if (p.str() == "bias") lo.lr_scale = 0.5, lo.weight_decay = 0.0;
    if (p.str() == "scale") lo.frozen = true;
    return lo;
  });
}

TEST_CASE("sharded Muon and ManifoldMuon: each matrix whole on one owner, the unsharded step bit for bit") {
  const gd::Communicator comm(MPI_COMM_WORLD);
  const gd::ZeroRedundancyOptimizer plan_only(comm, geomopt::Muon(), make_params<double>(), {}, kPieces);
  for (const gd::OwnedUnit& u : plan_only.plan().units())
    if (plan_only.plan().path(u) != "bias") CHECK(u.whole);  // the weight is a Muon matrix: never cut
  check_against_unsharded<double>([] { return geomopt::Muon(); });
  check_against_unsharded<double>([] { return geomopt::ManifoldMuon(); });
}

TEST_CASE("state bytes per rank: 1/P of the whole on a tree of equal leaves") {
  const gd::Communicator comm(MPI_COMM_WORLD);
  const int P = world_size();
  std::vector<Eigen::VectorXd> params(12, Eigen::VectorXd::Ones(512));
  gd::ZeroRedundancyOptimizer zero(comm, geomopt::Adam(), params);
  const std::size_t whole = geomopt::Adam().init(params).nbytes();
  long mine = static_cast<long>(zero.state_bytes()), most = 0;
  MPI_Allreduce(&mine, &most, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
  CHECK(static_cast<double>(most) <= static_cast<double>(whole) / P * 1.1);
  if (world_rank() == 0)
    MESSAGE("Adam, 12 x 512 doubles: largest state " << most << " bytes per rank, " << whole << " / " << P << " = "
                                                     << whole / static_cast<std::size_t>(P));
}

TEST_CASE("clipping and the non-finite policy decide alike on every rank") {
  const gd::Communicator comm(MPI_COMM_WORLD);
  const int P = world_size(), rank = world_rank();
  SUBCASE("clip_norm: the same bits on every rank, the unsharded step within rounding") {
    const auto adam = [] { return geomopt::Adam({.lr = 0.01}, {.clip_norm = 0.5}); };
    Mixed<double> params = make_params<double>(), reference = params;
    gd::ZeroRedundancyOptimizer zero(comm, adam(), params, {}, kPieces);
    geomopt::Adam unsharded = adam();
    auto state = unsharded.init(reference);
    Mixed<double> grads = gradient_of(params, rank, 0);
    const geomopt::StepReport report = zero.step(params, grads);
    const geomopt::StepReport expected = unsharded.step(reference, serial_mean(params, P, 0), state);
    CHECK(report.grad_norm == doctest::Approx(expected.grad_norm).epsilon(1e-13));
    CHECK(report.clip_scale < 1);
    CHECK(same_on_every_rank(bytes_of(params)));
    CHECK((params.weight - reference.weight).cwiseAbs().maxCoeff() <= 1e-12);
    CHECK((params.frame.value() - reference.frame.value()).cwiseAbs().maxCoeff() <= 1e-12);
  }
  SUBCASE("skip: a NaN in one rank's gradient skips the step on every rank, naming the leaf") {
    Mixed<double> params = make_params<double>();
    const Mixed<double> before = params;
    gd::ZeroRedundancyOptimizer zero(comm, geomopt::Adam({.lr = 0.01}, {.non_finite = geomopt::NonFinitePolicy::skip}),
                                     params, {}, kPieces);
    Mixed<double> grads = gradient_of(params, rank, 0);
    if (rank == P - 1) grads.bias(299) = std::numeric_limits<double>::quiet_NaN();
    const geomopt::StepReport report = zero.step(params, grads);
    CHECK(!report.applied);
    REQUIRE(report.non_finite_leaf != nullptr);
    CHECK(*report.non_finite_leaf == "bias");
    CHECK(std::string(report.non_finite_reason) == "the gradient is not finite");
    CHECK(bytes_of(params) == bytes_of(before));
  }
  SUBCASE("raise: every rank throws, naming the leaf") {
    Mixed<double> params = make_params<double>();
    gd::ZeroRedundancyOptimizer zero(comm, geomopt::Adam({.lr = 0.01}, {.non_finite = geomopt::NonFinitePolicy::raise}),
                                     params, {}, kPieces);
    Mixed<double> grads = gradient_of(params, rank, 0);
    if (rank == 0) grads.frame.value()(1, 1) = std::numeric_limits<double>::infinity();
    CHECK_THROWS_WITH_AS(zero.step(params, grads), doctest::Contains("frame"), geomopt::NonFiniteGradient);
  }
}

TEST_CASE("a tree that differs on one rank throws on every rank, naming the rank and the path") {
  const gd::Communicator comm(MPI_COMM_WORLD);
  const int P = world_size(), rank = world_rank();
  if (P == 1) return;
  SUBCASE("at construction") {
    const Mixed<double> params = make_params<double>(rank == P - 1 ? 301 : 300);
    try {
      gd::ZeroRedundancyOptimizer zero(comm, geomopt::Adam(), params, {}, kPieces);
      CHECK_MESSAGE(false, "no MismatchError");
    } catch (const gd::MismatchError& e) {
      CHECK(e.rank() == P - 1);
      CHECK(e.path() == "bias");
      CHECK(std::string(e.what()).find("rank " + std::to_string(P - 1)) != std::string::npos);
    }
  }
  SUBCASE("options invalid or different on one rank") {
    const Mixed<double> params = make_params<double>();
    for (const std::int64_t piece : {std::int64_t{100}, std::int64_t{512}}) {
      const gd::OwnershipOptions options{.max_piece_entries = rank == P - 1 ? piece : 256};
      CHECK_THROWS_WITH_AS(gd::ZeroRedundancyOptimizer(comm, geomopt::Adam(), params, {}, options),
                           doctest::Contains(("rank " + std::to_string(P - 1)).c_str()), std::invalid_argument);
    }
  }
  SUBCASE("at a step: every tree untouched") {
    Mixed<double> params = make_params<double>();
    gd::ZeroRedundancyOptimizer zero(comm, geomopt::Adam(), params, {}, kPieces);
    Mixed<double> grads = gradient_of(params, rank, 0);
    if (rank == P - 1) grads.scale.resize(11);
    const std::vector<unsigned char> params_before = bytes_of(params), grads_before = bytes_of(grads);
    try {
      zero.step(params, grads);
      CHECK_MESSAGE(false, "no MismatchError");
    } catch (const gd::MismatchError& e) {
      CHECK(e.rank() == P - 1);
      CHECK(e.path() == "scale");
    }
    CHECK(bytes_of(params) == params_before);
    CHECK(bytes_of(grads) == grads_before);
  }
}

// After the first step, geomopt's code allocates nothing in a step; Open MPI's allocations inside its calls are
// reported, not judged (mpi_allocations.hpp says what they are).
TEST_CASE("no allocation after the first step") {
  const gd::Communicator comm(MPI_COMM_WORLD);
  Mixed<double> params = make_params<double>();
  gd::ZeroRedundancyOptimizer zero(comm, geomopt::Adam({.lr = 0.01}), params, {}, kPieces);
  Mixed<double> grads = gradient_of(params, world_rank(), 0);
  zero.step(params, grads);
  long allocations = 0, in_mpi = 0;
  {
    alloc_count::Window window;
    for (int k = 0; k < 20; ++k) zero.step(params, grads);
    allocations = window.count();
    in_mpi = window.paused_count();
  }
  CHECK(allocations == 0);
  MESSAGE("rank " << world_rank() << ": " << in_mpi << " allocations inside MPI calls in 20 steps after the first");
}
