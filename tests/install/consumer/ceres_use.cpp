// The installed ceres component in use: a Stiefel parameter block's Plus stays on the manifold.
#include <geomopt/ceres.hpp>

#include <Eigen/Core>
#include <cstdio>

int main() {
  const geomopt::CeresManifold<geomopt::Stiefel<double>> manifold(5, 2);
  const Eigen::MatrixXd x = Eigen::MatrixXd::Identity(5, 2);
  const Eigen::VectorXd delta = Eigen::VectorXd::Constant(manifold.TangentSize(), 0.1);
  Eigen::MatrixXd y(5, 2);
  if (!manifold.Plus(x.data(), delta.data(), y.data()) || !(geomopt::check(geomopt::Stiefel<double>(y)) < 1e-12)) {
    std::fprintf(stderr, "consumer_ceres: Plus left St(5, 2)\n");
    return 1;
  }
  std::puts("consumer_ceres: Plus on St(5, 2)");
  return 0;
}
