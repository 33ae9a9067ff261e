// Uses the installed package the way a user would: declare a tree, flatten it, count its parameters; asking for the
// optimizers component alone must bring manifolds, ptree and the thread library with it; a Stiefel retraction must
// stay on the manifold, and two-thread Adam steps of a tree with a Stiefel leaf must too; a checkpoint of them must load
// back into a fresh tree and state (the io component, with HDF5 nowhere in this project).
#include <geomopt/io.hpp>
#include <geomopt/manifolds.hpp>
#include <geomopt/optimizers.hpp>
#include <geomopt/ptree.hpp>

#include <unistd.h>

#include <Eigen/Core>
#include <cstdio>
#include <filesystem>
#include <string>

namespace {

struct Frame {
  geomopt::Stiefel<double> y;
  Eigen::VectorXd scale;
  GEOMOPT_PTREE(y, scale)
};

struct Affine {
  Eigen::MatrixXd weight = Eigen::MatrixXd::Ones(3, 2);
  Eigen::VectorXd bias = Eigen::VectorXd::Zero(3);
  GEOMOPT_PTREE(weight, bias)
};

}  // namespace

int main() {
  const Affine affine;
  const Eigen::VectorXd flat = geomopt::ptree::flatten(affine);
  if (flat.size() != 9 || geomopt::ptree::count(affine) != 9 || flat.head(6).sum() != 6.0) {
    std::fprintf(stderr, "consumer: expected 9 parameters, 6 of them ones; flatten gave %td\n", flat.size());
    return 1;
  }
  std::puts("consumer: flattened 9 parameters");

  geomopt::Rng rng(7);
  auto y = geomopt::Stiefel<double>::random_point(rng, 12, 3);
  const auto xi = geomopt::random_tangent(y, rng);
  geomopt::retract(y, xi, geomopt::Retraction::geodesic);
  if (!(geomopt::check(y) < 1e-12)) {
    std::fprintf(stderr, "consumer: a Stiefel retraction left the manifold, check = %g\n", geomopt::check(y));
    return 1;
  }
  std::puts("consumer: retracted a point of St(12, 3)");

  Frame frame{y, Eigen::VectorXd::Ones(3)};
  Frame grads{geomopt::Stiefel<double>(Eigen::MatrixXd::Ones(12, 3)), Eigen::VectorXd::Ones(3)};
  geomopt::Adam adam({.lr = 0.1}, {.threads = 2});
  auto state = adam.init(frame);
  for (int t = 0; t < 3; ++t) adam.step(frame, grads, state);
  if (!(geomopt::check(frame.y) < 1e-12) || !(frame.scale(0) < 0.8)) {
    std::fprintf(stderr, "consumer: Adam steps went wrong: check = %g, scale = %g\n", geomopt::check(frame.y),
                 frame.scale(0));
    return 1;
  }
  std::puts("consumer: three Adam steps on two threads");

  const std::string file =
      (std::filesystem::temp_directory_path() / ("geomopt_consumer_" + std::to_string(::getpid()) + ".h5")).string();
  geomopt::io::save_checkpoint(file, frame, state);
  Frame loaded{geomopt::Stiefel<double>(12, 3), Eigen::VectorXd::Zero(3)};
  auto fresh = adam.init(loaded);
  geomopt::io::load_checkpoint(file, loaded, fresh);
  std::filesystem::remove(file);
  if (loaded.y.value() != frame.y.value() || loaded.scale != frame.scale || fresh.step_count() != 3) {
    std::fprintf(stderr, "consumer: the checkpoint did not load back\n");
    return 1;
  }
  std::puts("consumer: saved and loaded a checkpoint");
  return 0;
}
