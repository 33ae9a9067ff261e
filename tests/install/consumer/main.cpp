// Uses the installed ptree the way a user would: declare a tree, flatten it, count its parameters.
#include <geomopt/ptree.hpp>

#include <Eigen/Core>
#include <cstdio>

namespace {

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
  return 0;
}
