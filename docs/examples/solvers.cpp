// The code of docs/solvers.md: the Brockett cost tr(X^T A X N) on St(20, 5), whose minimum is known from the
// eigenvalues of A, by L-BFGS and by the trust region with the user's Hessian, and the checks of its gradient and
// Hessian. Every C++ block of the page is a region of this file (tests/docs/snippet.cmake); docs_examples runs it
// (`docs_examples solvers`) and checks both minima against the eigenvalues, and that the derivative checks pass on
// the right derivatives and fail on a gradient 1% off.
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

  const Brockett z{geomopt::Stiefel<double>::random_point(rng, 20, 5)};
  // snippet-begin: check
  // Is egrad the gradient of f? Along the retraction from z, leaf by leaf (docs/solvers.md, "Checking derivatives")
  geomopt::DerivativeCheck check = geomopt::check_gradient(cost, z);
  std::cout << check.BriefReport() << "\n";            // PASSED, slope 2.000 (expected 2), worst leaf 'X' ...
  if (!check.passed) std::cout << check.FullReport();  // every leaf, the Taylor table, the verdict
  geomopt::DerivativeCheck hessian_check = geomopt::check_hessian(cost, hessian, z);  // slope 3 when right

  // A stochastic optimizer's loss, which always writes the gradient, is checked the same way
  auto loss = [&](const Brockett& p, Brockett& grads) { return cost(p, &grads); };
  geomopt::DerivativeCheck loss_check = geomopt::check_gradient(loss, z);
  // snippet-end: check
  std::cout << hessian_check.BriefReport() << "\n";
  expect(check.passed && std::abs(check.slope - 2) < 0.1 && check.worst_leaf == "X", "check_gradient passes");
  expect(hessian_check.passed && std::abs(hessian_check.slope - 3) < 0.1, "check_hessian passes");
  expect(loss_check.passed && loss_check.slope == check.slope, "check_gradient passes the loss form alike");
  auto wrong = [&](const Brockett& p, Brockett* egrad) -> double {
    const double f = cost(p, egrad);
    if (egrad != nullptr) egrad->X.value() *= 1.01;
    return f;
  };
  const geomopt::DerivativeCheck wrong_check = geomopt::check_gradient(wrong, z);
  std::cout << wrong_check.BriefReport() << "\n";
  expect(!wrong_check.passed && wrong_check.worst_leaf == "X" && wrong_check.slope < 1.5,
         "check_gradient fails on a gradient 1% off, naming the leaf");
  return expect.failures;
}

}  // namespace docs_solvers
