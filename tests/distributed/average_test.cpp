// GradientAverager: every rank's seeded gradient is known to every rank, so each rank computes the serial mean itself
// (left-to-right sum in rank order, one division: the contract's formula) and checks the averaged tree against it bit
// for bit, against the exact mean (long double) within the contract's bound gamma_P sum|x_q| / P, and against every
// other rank's result (all-gathered bytes); for float, double and mixed trees, bucket sizes below one entry, below a
// leaf, odd, equal to the tree and the default; an empty tree; no allocation after the first call; a tree that
// differs on one rank throws on every rank, naming the rank and the path, with every tree untouched.
#include "geomopt/distributed.hpp"

#include <doctest/doctest.h>
#include <mpi.h>

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <geomopt/ptree.hpp>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "../ptree/common.hpp"  // Dense<T>, the docs' canonical tree
#include "count_allocations.hpp"
#include "mpi_allocations.hpp"
#include "world.hpp"

namespace gd = geomopt::distributed;
namespace pt = geomopt::ptree;
using dtest::same_on_every_rank;
using dtest::world_rank;
using dtest::world_size;

namespace {

// A structured leaf of two storage blocks, a vector and a scalar (the ptree leaf protocol).
template <class T>
struct Gain {
  Eigen::Matrix<T, Eigen::Dynamic, 1> per_channel;
  T overall = 0;
};
template <class T>
auto free_parameters(Gain<T>& g) {
  return std::tie(g.per_channel, g.overall);
}
template <class T>
auto free_parameters(const Gain<T>& g) {
  return std::tie(g.per_channel, g.overall);
}

// A tree with a scalar leaf, a row-major leaf (packed through Eigen, not memcpy), a structured leaf and a buffer
// (never averaged).
template <class T>
struct Net {
  std::vector<Dense<T>> layers;
  T scale = 0;
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> mixer;
  Gain<T> gain;
  pt::Buffer<Eigen::VectorXi> steps;
  GEOMOPT_PTREE(layers, scale, mixer, gain, steps)
};

// Float and double leaves in one tree: averaged in double.
struct Mixed {
  Eigen::MatrixXf a;
  Eigen::VectorXd b;
  float c = 0;
  GEOMOPT_PTREE(a, b, c)
};

struct Empty {
  std::vector<Dense<double>> layers;
  GEOMOPT_PTREE(layers)
};

template <class T>
Net<T> net_shape() {
  Net<T> net;
  net.layers = {{Eigen::Matrix<T, -1, -1>::Zero(7, 5), Eigen::Matrix<T, -1, 1>::Zero(7)},
                {Eigen::Matrix<T, -1, -1>::Zero(3, 7), Eigen::Matrix<T, -1, 1>::Zero(3)}};
  net.mixer.setZero(4, 6);
  net.gain.per_channel.setZero(5);
  net.steps.value() = Eigen::VectorXi::Constant(2, 9);
  return net;
}

Mixed mixed_shape() { return {Eigen::MatrixXf::Zero(6, 4), Eigen::VectorXd::Zero(9), 0.0f}; }

// Rank q's gradient for a tree shaped like `shape`: entries of magnitudes 2^-12 to 2^12 and both signs, so that sums
// round, from a seed of (seed, q), reproducible on every rank.
template <class Tree>
Tree gradient_of(const Tree& shape, int q, std::uint64_t seed) {
  using S = gd::detail::flat_scalar_t<Tree>;
  std::mt19937_64 rng(seed * 1000003u + static_cast<std::uint64_t>(q));
  std::uniform_real_distribution<double> mantissa(-1.0, 1.0);
  std::uniform_int_distribution<int> exponent(-12, 12);
  Eigen::Matrix<S, Eigen::Dynamic, 1> v(pt::count(shape));
  for (Eigen::Index i = 0; i < v.size(); ++i) v[i] = static_cast<S>(std::ldexp(mantissa(rng), exponent(rng)));
  Tree g = shape;
  pt::unflatten_into(g, v);
  return g;
}

// The unit roundoff of each flat entry's leaf scalar.
template <class Tree>
std::vector<long double> unit_roundoffs(const Tree& tree) {
  std::vector<long double> u;
  pt::for_each_storage(
      [&](const auto& b) {
        using Scalar = pt::detail::block_scalar_t<pt::detail::bare<decltype(b)>>;
        for (Eigen::Index i = 0; i < pt::detail::block_size(b); ++i)
          u.push_back(static_cast<long double>(std::numeric_limits<Scalar>::epsilon()) / 2);
      },
      tree);
  return u;
}

template <class V>
std::vector<unsigned char> bytes_of(const V& v) {
  std::vector<unsigned char> b(sizeof(typename V::Scalar) * static_cast<std::size_t>(v.size()));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Averages rank-seeded gradients of a tree shaped like `shape` and checks the result on this rank against the serial
// mean (bit for bit), the exact mean (within the bound) and the other ranks (bit for bit). Collective.
template <class Tree>
void check_average(const Tree& shape, gd::AverageOptions options, std::uint64_t seed) {
  using S = gd::detail::flat_scalar_t<Tree>;
  const int P = world_size(), rank = world_rank();
  const gd::Communicator comm(MPI_COMM_WORLD);
  Tree grads = gradient_of(shape, rank, seed);
  gd::GradientAverager averager(comm, grads, options);
  averager.average(grads);
  const Eigen::Matrix<S, Eigen::Dynamic, 1> got = pt::flatten<S>(grads);

  // The contract's formula, serially, and the exact mean with sum |x_q|.
  const Eigen::Index n = pt::count(shape);
  Eigen::Matrix<S, Eigen::Dynamic, 1> serial(n);
  std::vector<long double> exact(static_cast<std::size_t>(n), 0.0L), magnitude(static_cast<std::size_t>(n), 0.0L);
  for (int q = 0; q < P; ++q) {
    const Eigen::Matrix<S, Eigen::Dynamic, 1> x = pt::flatten<S>(gradient_of(shape, q, seed));
    if (q == 0)
      serial = x;
    else
      serial += x;
    for (Eigen::Index i = 0; i < n; ++i) {
      exact[static_cast<std::size_t>(i)] += static_cast<long double>(x[i]);
      magnitude[static_cast<std::size_t>(i)] += std::fabs(static_cast<long double>(x[i]));
    }
  }
  serial /= static_cast<S>(P);
  // The serial mean rounded to the leaves' scalars, as the tree holds it.
  Tree serial_tree = shape;
  pt::unflatten_into(serial_tree, serial);
  serial = pt::flatten<S>(serial_tree);
  CHECK(bytes_of(got) == bytes_of(serial));

  const std::vector<long double> u = unit_roundoffs(shape);
  const long double u_ref = std::numeric_limits<long double>::epsilon() / 2;
  auto gamma = [&](long double unit) { return P * unit / (1 - P * unit); };
  Eigen::Index outside = 0;
  for (Eigen::Index i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    const long double mean = exact[k] / P;
    // The reference's own error, P additions and a division in long double, is added to the bound.
    const long double bound = (gamma(u[k]) + gamma(u_ref)) * magnitude[k] / P;
    if (std::fabs(static_cast<long double>(got[i]) - mean) > bound) ++outside;
  }
  CHECK(outside == 0);
  CHECK(same_on_every_rank(bytes_of(got)));
  if constexpr (requires { grads.steps; }) CHECK(grads.steps.value() == shape.steps.value());
}

template <class Tree>
void check_buckets(const Tree& shape, std::uint64_t seed) {
  using S = gd::detail::flat_scalar_t<Tree>;
  const std::size_t tree_bytes = sizeof(S) * static_cast<std::size_t>(pt::count(shape));
  for (std::size_t bytes : {std::size_t{1}, 3 * sizeof(S), std::size_t{7}, std::size_t{61}, tree_bytes, tree_bytes + 5,
                            gd::AverageOptions{}.bucket_bytes}) {
    for (int in_flight : {1, 2, 5}) {
      CAPTURE(bytes);
      CAPTURE(in_flight);
      check_average(shape, {.bucket_bytes = bytes, .buckets_in_flight = in_flight}, seed++);
    }
  }
}

}  // namespace

// Net's leaves are 35, 7, 21, 3, 1, 24 and 5 + 1 entries: a 3-entry bucket is smaller than most leaves, 7 and 61 bytes
// cut entries' bytes unevenly, and the tree's own size makes one bucket.
TEST_CASE("float: the mean of every rank's gradient, bit for bit the serial mean, within the bound, on every rank") {
  check_buckets(net_shape<float>(), 100);
}

TEST_CASE("double: the same") { check_buckets(net_shape<double>(), 200); }

TEST_CASE("a mixed float and double tree is averaged in double and meets each leaf's own bound") {
  check_buckets(mixed_shape(), 300);
}

TEST_CASE("a tree of many leaves and a bucket smaller than every leaf") {
  Net<double> big = net_shape<double>();
  for (int l = 0; l < 40; ++l)
    big.layers.push_back({Eigen::MatrixXd::Zero(l % 5 + 1, 3), Eigen::VectorXd::Zero(l % 4)});
  check_average(big, {.bucket_bytes = 16}, 400);
  check_average(big, {.bucket_bytes = 1000, .buckets_in_flight = 3}, 401);
}

TEST_CASE("an empty tree: nothing to average, and the call still returns on every rank") {
  const gd::Communicator comm(MPI_COMM_WORLD);
  Empty empty;
  gd::GradientAverager averager(comm, empty);
  CHECK(averager.bucket_count() == 0);
  CHECK(averager.bytes_sent_per_call() == 0);
  averager.average(empty);
  averager.average(empty);
  CHECK(empty.layers.empty());
  gd::average(comm, empty);
}

TEST_CASE("the bytes each rank sends per call are 2 (P - 1) / P of the tree, chunk by chunk") {
  const gd::Communicator comm(MPI_COMM_WORLD);
  const int P = comm.size(), r = comm.rank();
  Net<float> grads = net_shape<float>();
  const std::int64_t n = pt::count(grads);
  for (std::size_t bytes : {std::size_t{4}, std::size_t{40}, std::size_t{1} << 20}) {
    gd::GradientAverager averager(comm, grads, {.bucket_bytes = bytes});
    const std::int64_t per_bucket = std::max<std::int64_t>(1, static_cast<std::int64_t>(bytes / sizeof(float)));
    std::int64_t expected = 0, buckets = 0;
    for (std::int64_t lo = 0; lo < n; lo += per_bucket, ++buckets) {
      const std::int64_t m = std::min(per_bucket, n - lo);
      const std::int64_t own = m * (r + 1) / P - m * r / P;
      expected += P == 1 ? 0 : (m - own) + (P - 1) * own;  // the others' chunks, then mine to each other rank
    }
    CHECK(averager.bucket_count() == static_cast<std::size_t>(buckets));
    CHECK(averager.bytes_sent_per_call() == static_cast<std::size_t>(expected) * sizeof(float));
    if (bytes == (std::size_t{1} << 20) && P > 1) {
      // One bucket: (n - own) + (P - 1) own, between 2 (P-1)/P n - P and 2 (P-1)/P n + P entries.
      const double ratio = static_cast<double>(expected) / (2.0 * (P - 1) / P * static_cast<double>(n));
      CHECK(std::abs(ratio - 1) < static_cast<double>(P) / static_cast<double>(n));
    }
  }
}

TEST_CASE("no allocation after the first call") {
  const gd::Communicator comm(MPI_COMM_WORLD);
  Net<double> grads = gradient_of(net_shape<double>(), comm.rank(), 500);
  Mixed mixed = gradient_of(mixed_shape(), comm.rank(), 501);
  gd::GradientAverager averager(comm, grads, {.bucket_bytes = 40, .buckets_in_flight = 2});
  gd::GradientAverager mixed_averager(comm, mixed, {.bucket_bytes = 24});
  averager.average(grads);
  mixed_averager.average(mixed);
  long allocations = 0, in_mpi = 0;
  {
    alloc_count::Window window;
    for (int call = 0; call < 20; ++call) {
      averager.average(grads);
      mixed_averager.average(mixed);
    }
    allocations = window.count();
    in_mpi = window.paused_count();
  }
  CHECK(allocations == 0);  // geomopt's code; Open MPI's, inside its calls, are reported (mpi_allocations.hpp)
  MESSAGE("rank " << world_rank() << ": " << in_mpi << " allocations inside MPI calls in 40 calls after the first");
}

TEST_CASE("the caller's own messages on the communicator it gave never match the averager's") {
  const gd::Communicator comm(MPI_COMM_WORLD);
  const int P = comm.size(), rank = comm.rank();
  // Rank 0 waits for any message with any tag on MPI_COMM_WORLD while every rank averages over its duplicate.
  int payload = -1;
  MPI_Request pending = MPI_REQUEST_NULL;
  if (rank == 0) MPI_Irecv(&payload, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &pending);
  Net<float> grads = gradient_of(net_shape<float>(), rank, 600);
  gd::average(comm, grads, {.bucket_bytes = 8});
  int matched = 0;
  if (rank == 0) MPI_Test(&pending, &matched, MPI_STATUS_IGNORE);
  CHECK(matched == 0);
  comm.barrier();
  if (rank == P - 1) {
    const int value = 42;
    MPI_Send(&value, 1, MPI_INT, 0, 7, MPI_COMM_WORLD);
  }
  if (rank == 0) {
    MPI_Wait(&pending, MPI_STATUS_IGNORE);
    CHECK(payload == 42);
  }
}

TEST_CASE("trees that differ between ranks: MismatchError on every rank, naming the rank and the path") {
  const gd::Communicator comm(MPI_COMM_WORLD);
  const int P = comm.size(), last = P - 1;
  if (P == 1) return;  // one rank cannot differ from itself; the call-time case below covers one rank
  SUBCASE("a leaf of another shape") {
    Net<float> grads = net_shape<float>();
    if (comm.rank() == last) grads.layers[1].weight.resize(3, 8);
    try {
      gd::GradientAverager averager(comm, grads);
      FAIL("no MismatchError");
    } catch (const gd::MismatchError& e) {
      CHECK(e.rank() == last);
      CHECK(e.path() == "layers.1.weight");
      const std::string what = e.what();
      CHECK(what.find("rank " + std::to_string(last)) != std::string::npos);
      CHECK(what.find("layers.1.weight") != std::string::npos);
      CHECK(what.find("3 x 7") != std::string::npos);
      CHECK(what.find("3 x 8") != std::string::npos);
    }
  }
  SUBCASE("an extra leaf") {
    Net<float> grads = net_shape<float>();
    if (comm.rank() == last) grads.layers.push_back({Eigen::MatrixXf::Zero(2, 2), Eigen::VectorXf::Zero(2)});
    try {
      gd::GradientAverager averager(comm, grads);
      FAIL("no MismatchError");
    } catch (const gd::MismatchError& e) {
      CHECK(e.rank() == last);
      CHECK(e.path() == "layers.2.weight");
      CHECK(std::string(e.what()).find("layers.2.weight") != std::string::npos);
    }
  }
  SUBCASE("a different bucket size") {
    Net<float> grads = net_shape<float>();
    const std::size_t bytes = comm.rank() == last ? 64 : 128;
    CHECK_THROWS_WITH_AS(gd::GradientAverager(comm, grads, {.bucket_bytes = bytes}), doctest::Contains("bucket_bytes"),
                         std::invalid_argument);
  }
  SUBCASE("invalid options on one rank") {
    Net<float> grads = net_shape<float>();
    const int in_flight = comm.rank() == last ? 0 : 2;
    CHECK_THROWS_WITH_AS(gd::GradientAverager(comm, grads, {.buckets_in_flight = in_flight}),
                         doctest::Contains(("rank " + std::to_string(last)).c_str()), std::invalid_argument);
  }
}

TEST_CASE("a tree that changed on one rank after construction: MismatchError on every rank, every tree untouched") {
  const gd::Communicator comm(MPI_COMM_WORLD);
  const int last = comm.size() - 1;
  Net<double> grads = gradient_of(net_shape<double>(), comm.rank(), 700);
  gd::GradientAverager averager(comm, grads, {.bucket_bytes = 24});
  for (int variant = 0; variant < 2; ++variant) {
    CAPTURE(variant);
    Net<double> changed = grads;
    if (comm.rank() == last) {
      if (variant == 0)
        changed.layers[1].bias.setZero(5);  // set: resize leaves the numbers unset, and a NaN among them is != itself
      else
        changed.layers.pop_back();
    }
    const Net<double> before = changed;
    try {
      averager.average(changed);
      FAIL("no MismatchError");
    } catch (const gd::MismatchError& e) {
      CHECK(e.rank() == last);
      CHECK(e.path() == (variant == 0 ? "layers.1.bias" : "layers.1.weight"));
      CHECK(std::string(e.what()).find("rank " + std::to_string(last)) != std::string::npos);
    }
    CHECK(pt::count(changed) == pt::count(before));
    if (pt::count(changed) == pt::count(before)) CHECK(pt::flatten(changed) == pt::flatten(before));
  }
  // The averager is still in step on every rank: a good call averages.
  Net<double> again = grads;
  averager.average(again);
  Net<double> expected = grads;
  gd::average(comm, expected, {.bucket_bytes = 1 << 20});
  CHECK(pt::flatten(again) == pt::flatten(expected));
}
