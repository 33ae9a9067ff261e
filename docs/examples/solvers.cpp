// The code of docs/solvers.md: the Brockett cost tr(X^T A X N) on St(20, 5), whose minimum is known from the
// eigenvalues of A, by L-BFGS and by the trust region with the user's Hessian. Every C++ block of the page is a
// region of this file (tests/docs/snippet.cmake); docs_examples runs it (`docs_examples solvers`) and checks both
// minima against the eigenvalues.
#include <geomopt/solvers.hpp>

#include <Eigen/Eigenvalues>
#include <cmath>
#include <iostream>

#include "expect.hpp"

namespace docs_solvers {

struct Brockett {
  geomopt::Stiefel<double> X;
  GEOMOPT_PTREE(X)
};

int run() {
  geomopt_docs::Expect expect{"solvers"};

  geomopt::Rng rng(5);
  const Eigen::MatrixXd B = Eigen::MatrixXd::Random(20, 20);
  const Eigen::MatrixXd A = B + B.transpose();
  const Eigen::MatrixXd N = Eigen::VectorXd::LinSpaced(5, 1, 5).asDiagonal();
  const Eigen::VectorXd lambda = Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(A).eigenvalues();
  double optimum = 0;  // the smallest eigenvalues paired with the largest weights
  for (int i = 0; i < 5; ++i) optimum += N(i, i) * lambda[4 - i];
  Brockett x{geomopt::Stiefel<double>::random_point(rng, 20, 5)};
  Brockett y = x;

  // snippet-begin: minimize
  // f(x); when egrad is not null, also the Euclidean gradient (a tree of x's type: storage gradients for packed
  // leaves, ambient gradients for manifold leaves, as for the stochastic optimizers)
  auto cost = [&](const Brockett& x, Brockett* egrad) -> double {
    const Eigen::MatrixXd AX = A * x.X.value();
    if (egrad != nullptr) egrad->X.value() = 2 * AX * N;
    return (x.X.value().transpose() * AX * N).trace();
  };

  geomopt::SolverOptions options;
  options.method = geomopt::SolverMethod::lbfgs;
  geomopt::SolverSummary summary = geomopt::minimize(cost, x, options);  // x is updated in place
  std::cout << summary.BriefReport() << "\n" << summary.FullReport();
  // snippet-end: minimize
  expect(std::abs(summary.final_cost - optimum) < 1e-8 * std::abs(optimum) && geomopt::check(x.X) < 1e-12,
         "L-BFGS reaches the Brockett minimum");

  // snippet-begin: hessian
  // *hv <- D(egrad)(x)[xi]: the derivative of the Euclidean gradient along the tangent vector xi, in the gradient's
  // layout (storage for Euclidean and packed leaves, an ambient matrix for manifold leaves)
  auto hessian = [&](const Brockett&, const Brockett& xi, Brockett* hv) { hv->X.value() = 2 * A * xi.X.value() * N; };
  options.method = geomopt::SolverMethod::trust_region;
  geomopt::SolverSummary tr = geomopt::minimize(cost, hessian, y, options);  // options is required here
  // snippet-end: hessian
  std::cout << tr.BriefReport() << "\n";
  expect(std::abs(tr.final_cost - optimum) < 1e-8 * std::abs(optimum) && tr.num_hessian_evaluations > 0,
         "the trust region with the user's Hessian reaches the minimum");
  return expect.failures;
}

}  // namespace docs_solvers
