// The code of docs/manifolds.md and of the README's manifold lines (the page's worked example is
// examples/manifolds_tour/main.cpp). Every C++ block of those pages is a region of a compiled file
// (tests/docs/snippet.cmake); docs_examples runs this one (`docs_examples manifolds`) and checks what it computes
// against dense formulas.
// snippet-begin: readme
#include <geomopt/manifolds.hpp>

// snippet-end: readme
#include <Eigen/Core>

#include "expect.hpp"

namespace docs_manifolds {

int run() {
  geomopt_docs::Expect expect{"manifolds"};

  {
    const Eigen::MatrixXd egrad = 1e-2 * Eigen::MatrixXd::Random(1000, 16);  // a Euclidean gradient
    // snippet-begin: readme
    geomopt::Rng rng(1);
    auto Y = geomopt::Stiefel<double>::random_point(rng, 1000, 16);  // 1000 x 16, orthonormal columns
    auto xi = geomopt::lift(Y, egrad);                               // Riemannian gradient, orthonormal coordinates
    geomopt::retract(Y, xi, geomopt::Retraction::cayley);            // O(N n^2), never an N x N matrix
    // snippet-end: readme
    expect(geomopt::check(Y) < 1e-12 && xi.B().rows() == 1000 - 16, "README: lift and retract on St(1000, 16)");
  }

  {
    const Eigen::MatrixXd M = Eigen::MatrixXd::Random(5, 5), x = Eigen::MatrixXd::Random(5, 2);
    const Eigen::MatrixXd dL_dS = Eigen::MatrixXd::Random(5, 5);  // a loss's gradient with respect to the dense S
    // snippet-begin: packed
    geomopt::SymmetricMatrix<double> s = geomopt::SymmetricMatrix<double>::from_dense(M);  // (M + M^T) / 2
    Eigen::MatrixXd y = s * x;              // no dense n x n matrix formed
    Eigen::VectorXd g = s.pullback(dL_dS);  // what an optimizer steps s.storage() with
    // snippet-end: packed
    const Eigen::MatrixXd S = (M + M.transpose()) / 2;
    expect(s.dense().isApprox(S) && y.isApprox(S * x), "from_dense and the product");
    // The adjoint identity <pullback(G), t> = <G, dense(t)>, for a random packed t.
    const auto t = geomopt::SymmetricMatrix<double>::from_storage(Eigen::VectorXd::Random(15));
    expect(std::abs(g.dot(t.storage()) - dL_dS.cwiseProduct(t.dense()).sum()) < 1e-12, "pullback is the adjoint");
  }
  return expect.failures;
}

}  // namespace docs_manifolds
