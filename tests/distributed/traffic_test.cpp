// The bytes and messages each rank sends per step, counted at MPI's profiling interface (traffic_counter.hpp), against
// scripts/comm_model.py's model of the same engines: equal, figure for figure, rank for rank, step for step. Both are
// deterministic, so any difference means that the engines or the model changed and the other did not.
//
// The tree is tests/distributed/traffic.shapes, or the file named by the environment variable GEOMOPT_TRAFFIC_SHAPES
// (the 369-leaf tree of docs/design.md's figures). Rank 0 writes the measurements as JSON, to the file named by
// GEOMOPT_TRAFFIC_OUT or traffic_np<P>.json in the working directory, and runs the model's --check on it.
#include <doctest/doctest.h>
#include <mpi.h>

#include <Eigen/Core>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <geomopt/distributed.hpp>
#include <geomopt/distributed/zero_redundancy_optimizer.hpp>
#include <geomopt/optimizers.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "shapes_file.hpp"
#include "traffic_counter.hpp"
#include "world.hpp"

namespace {

namespace gd = geomopt::distributed;

constexpr int kSteps = 3;

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

// The shapes file as a tree of leaves, the same on every rank: entries of a network's scale, 0.02 * [-1, 1].
template <class Matrix>
std::vector<Matrix> read_tree(const std::string& file) {
  std::vector<Matrix> leaves;
  std::srand(24);
  for (const auto& [rows, cols] : bench::read_shape_list(file))
    leaves.push_back(Matrix::Random(rows, cols) * typename Matrix::Scalar(0.02));
  return leaves;
}

// This rank's gradient: finite, and different on each rank.
template <class Tree>
Tree gradient_of(const Tree& params) {
  using Matrix = typename Tree::value_type;
  using Scalar = typename Matrix::Scalar;
  Tree grads = params;
  const auto shift = static_cast<Scalar>(1e-3 * (dtest::world_rank() + 1));
  for (Matrix& g : grads) g = g * Scalar(0.5) + Matrix::Constant(g.rows(), g.cols(), shift);
  return grads;
}

// One measured configuration: the model's inputs, and per step this rank's counts.
struct Run {
  std::string name, mode;
  int scalar_bytes = 4;
  std::size_t bucket_bytes = std::size_t{25} << 20;
  std::int64_t max_piece_entries = 65536;
  bool clip = false;
  std::string non_finite = "propagate";
  std::vector<traffic::Counts> steps;
};

template <class Step>
std::vector<traffic::Counts> measure(Step&& step) {
  std::vector<traffic::Counts> out;
  for (int s = 0; s < kSteps; ++s) {
    const traffic::Counts before = traffic::now();
    step();
    out.push_back(traffic::now() - before);
  }
  return out;
}

template <class Tree>
Run ddp(const std::string& name, const std::string& shapes, std::size_t bucket_bytes) {
  const gd::Communicator comm(MPI_COMM_WORLD);
  Tree params = read_tree<typename Tree::value_type>(shapes), grads = gradient_of(params);
  gd::GradientAverager averager(comm, grads, {.bucket_bytes = bucket_bytes});
  geomopt::Adam adam({.lr = 1e-3});
  auto state = adam.init(params);
  Run run;
  run.name = name, run.mode = "ddp", run.bucket_bytes = bucket_bytes;
  run.scalar_bytes = static_cast<int>(sizeof(typename Tree::value_type::Scalar));
  run.steps = measure([&] {
    averager.average(grads);
    adam.step(params, grads, state);
  });
  return run;
}

template <class Optimizer>
Run zero(const std::string& name, const std::string& mode, const std::string& shapes, Optimizer optimizer,
         std::int64_t max_piece_entries) {
  using Tree = std::vector<Eigen::MatrixXf>;
  const gd::Communicator comm(MPI_COMM_WORLD);
  Tree params = read_tree<Eigen::MatrixXf>(shapes), grads = gradient_of(params);
  const geomopt::StepTransforms x = optimizer.transforms();
  gd::ZeroRedundancyOptimizer sharded(comm, std::move(optimizer), params, {}, {.max_piece_entries = max_piece_entries});
  Run run;
  run.name = name, run.mode = mode, run.max_piece_entries = max_piece_entries;
  run.clip = x.clip_norm > 0;
  run.non_finite = geomopt::non_finite_policy_name(x.non_finite);
  run.steps = measure([&] { CHECK(sharded.step(params, grads).applied); });
  return run;
}

// Every rank's runs, gathered to rank 0 as the JSON that comm_model.py --check reads.
std::string to_json(const std::vector<Run>& runs, const std::string& shapes) {
  const int P = dtest::world_size();
  std::ostringstream out;
  out << "{\"runs\": [";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const Run& r = runs[i];
    std::vector<std::int64_t> mine;
    for (const traffic::Counts& c : r.steps)
      mine.insert(mine.end(), {c.bytes, c.messages, c.collective_calls, c.collective_bytes});
    std::vector<std::int64_t> all(mine.size() * static_cast<std::size_t>(P));
    MPI_Gather(mine.data(), static_cast<int>(mine.size()), MPI_INT64_T, all.data(), static_cast<int>(mine.size()),
               MPI_INT64_T, 0, MPI_COMM_WORLD);
    out << (i ? ", " : "") << "{\"name\": \"" << r.name << "\", \"mode\": \"" << r.mode << "\", \"P\": " << P
        << ", \"shapes\": \"" << shapes << "\", \"scalar_bytes\": " << r.scalar_bytes
        << ", \"bucket_bytes\": " << r.bucket_bytes << ", \"max_piece_entries\": " << r.max_piece_entries
        << ", \"clip\": " << (r.clip ? "true" : "false") << ", \"non_finite\": \"" << r.non_finite
        << "\", \"ranks\": [";
    for (int q = 0; q < P; ++q) {
      out << (q ? ", " : "") << "[";
      for (std::size_t s = 0; s < r.steps.size(); ++s) {
        const std::int64_t* c = &all[static_cast<std::size_t>(q) * mine.size() + 4 * s];
        out << (s ? ", " : "") << "{\"bytes\": " << c[0] << ", \"messages\": " << c[1]
            << ", \"collective_calls\": " << c[2] << ", \"collective_bytes\": " << c[3] << "}";
      }
      out << "]";
    }
    out << "]}";
  }
  out << "]}\n";
  return out.str();
}

}  // namespace

TEST_CASE("every rank sends, per step, the bytes and messages that scripts/comm_model.py predicts") {
  const std::string shapes = env_or("GEOMOPT_TRAFFIC_SHAPES", GEOMOPT_TRAFFIC_SHAPES);
  const bool small = shapes == GEOMOPT_TRAFFIC_SHAPES;
  // Buckets and pieces that end off their boundaries: on the small tree, far smaller than the defaults.
  const std::size_t buckets = small ? 1000 : std::size_t{4} << 20;
  const std::int64_t pieces = small ? 1024 : 65536;
  std::vector<Run> runs;
  runs.push_back(ddp<std::vector<Eigen::MatrixXf>>("ddp float, default buckets", shapes, std::size_t{25} << 20));
  runs.push_back(ddp<std::vector<Eigen::MatrixXf>>("ddp float, small buckets", shapes, buckets));
  runs.push_back(ddp<std::vector<Eigen::MatrixXd>>("ddp double, small buckets", shapes, buckets));
  runs.push_back(zero("zero1 Adam", "zero1", shapes, geomopt::Adam({.lr = 1e-3}), pieces));
  runs.push_back(zero("zero1 Adam, clip and skip", "zero1", shapes,
                      geomopt::Adam({.lr = 1e-3}, {.clip_norm = 1.0, .non_finite = geomopt::NonFinitePolicy::skip}),
                      pieces));
  runs.push_back(zero("owner-muon", "owner-muon", shapes, geomopt::Muon(), pieces));

  const std::string json = to_json(runs, shapes);
  if (dtest::world_rank() != 0) return;
  const std::string file = env_or("GEOMOPT_TRAFFIC_OUT", "traffic_np" + std::to_string(dtest::world_size()) + ".json");
  std::ofstream(file) << json;
  const std::string command = std::string(GEOMOPT_PYTHON) + " " + GEOMOPT_COMM_MODEL + " --check " + file;
  INFO(command);
  CHECK(std::system(command.c_str()) == 0);
}
