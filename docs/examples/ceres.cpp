// The code of docs/ceres.md and of the README's Ceres line (the page's worked example is
// examples/ceres_procrustes/main.cpp). Every C++ block of those pages is a region of a compiled file
// (tests/docs/snippet.cmake); docs_examples runs this one (`docs_examples ceres`): the adapters must give Ceres the
// tangent sizes of the page's table, and a tree of a Stiefel, an SPD and a Euclidean leaf must fit its targets.
// snippet-begin: readme
#include <geomopt/ceres.hpp>

// snippet-end: readme
#include <ceres/ceres.h>

#include <Eigen/Core>
#include <array>
#include <cstddef>
#include <cstdio>

#include "expect.hpp"

namespace docs_ceres {

// snippet-begin: tree_blocks
template <class T>
struct Model {
  geomopt::Stiefel<T> frame;
  geomopt::SPD<T> covariance;
  Eigen::Matrix<T, Eigen::Dynamic, 1> offset;
  GEOMOPT_PTREE(frame, covariance, offset)
};

struct Residuals {  // each leaf minus its target, written once for any scalar (double, ceres::Jet)
  Eigen::MatrixXd frame, covariance;
  Eigen::VectorXd offset;
  template <class T>
  bool operator()(const Model<T>& m, T* residuals) const {
    int k = 0;
    for (Eigen::Index i = 0; i < frame.size(); ++i) residuals[k++] = m.frame.value()(i) - frame(i);
    for (Eigen::Index i = 0; i < covariance.size(); ++i) residuals[k++] = m.covariance.value()(i) - covariance(i);
    for (Eigen::Index i = 0; i < offset.size(); ++i) residuals[k++] = m.offset(i) - offset(i);
    return true;
  }
};

// snippet-end: tree_blocks
int run() {
  geomopt_docs::Expect expect{"ceres"};

  {
    const int N = 7, n = 3;
    Eigen::MatrixXd y = geomopt::Stiefel<double>(N, n).value(), r = Eigen::MatrixXd::Identity(3, 3);
    Eigen::VectorXd v = Eigen::VectorXd::Unit(N, 0);
    Eigen::MatrixXd s = Eigen::MatrixXd::Identity(n, n), w = Eigen::MatrixXd::Zero(n, n);
    double *Y = y.data(), *R = r.data(), *u = v.data(), *S = s.data(), *W = w.data();
    ceres::Problem problem, old_problem;
    for (Eigen::Index k = 0; k < 5; ++k) {
      const int size[] = {N * n, 9, N, n * n, n * n};
      problem.AddParameterBlock(std::array{Y, R, u, S, W}[static_cast<std::size_t>(k)], size[k]);
    }
    // snippet-begin: one_line
    // snippet-begin: readme
    problem.SetManifold(Y, new geomopt::CeresManifold<geomopt::Stiefel<double>>(N, n));  // Y: N x n
    // snippet-end: readme
    problem.SetManifold(R, new geomopt::CeresManifold<geomopt::SpecialOrthogonal<double>>(3));  // R: 3 x 3
    problem.SetManifold(u, new geomopt::CeresManifold<geomopt::Sphere<double>>(N));             // u: N
    problem.SetManifold(S, new geomopt::CeresManifold<geomopt::SPD<double>>(n));                // S: n x n
    problem.SetManifold(W, new geomopt::CeresManifold<geomopt::SymmetricMatrix<double>>(n));    // W: n x n, W = W^T
    // Ceres 2.1 (removed in 2.2): the older interface, same numbers (here on a problem of its own)
    // snippet-end: one_line
#ifdef GEOMOPT_HAS_CERES_LOCAL_PARAMETERIZATION
    old_problem.AddParameterBlock(Y, N * n);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    // snippet-begin: one_line
    old_problem.SetParameterization(Y, new geomopt::CeresLocalParameterization<geomopt::Stiefel<double>>(N, n));
    // snippet-end: one_line
#pragma GCC diagnostic pop
    expect(old_problem.ParameterBlockTangentSize(Y) == N * n - n * (n + 1) / 2, "the LocalParameterization's size");
#endif
    expect(problem.ParameterBlockTangentSize(Y) == N * n - n * (n + 1) / 2 &&
               problem.ParameterBlockTangentSize(R) == 3 && problem.ParameterBlockTangentSize(u) == N - 1 &&
               problem.ParameterBlockTangentSize(S) == n * (n + 1) / 2 &&
               problem.ParameterBlockTangentSize(W) == n * (n + 1) / 2,
           "the tangent sizes of the table");
  }

  {
    geomopt::Rng rng(13);
    Model<double> model{geomopt::Stiefel<double>(6, 2), geomopt::SPD<double>(2), Eigen::VectorXd::Zero(3)};
    const Residuals residuals{geomopt::Stiefel<double>::random_point(rng, 6, 2).value(),
                              geomopt::SPD<double>::random_point(rng, 2).value(), Eigen::VectorXd::Random(3)};
    const int num_residuals = 6 * 2 + 2 * 2 + 3;
    ceres::Solver::Options options;
    options.function_tolerance = 0;  // stop on the gradient (docs/ceres.md, "Stopping")
    options.parameter_tolerance = 0;
    options.gradient_tolerance = 1e-12;
    ceres::Solver::Summary summary;
    // snippet-begin: tree_blocks
    geomopt::CeresTreeBlocks<Model<double>> blocks(model);  // CeresTreeOptions{.retraction}: each leaf's default
    ceres::Problem problem;
    blocks.add_to(problem);  // AddParameterBlock + SetManifold for each leaf
    problem.AddResidualBlock(blocks.autodiff_cost(residuals, num_residuals), nullptr, blocks.parameter_blocks());
    ceres::Solve(options, &problem, &summary);
    blocks.write_to(model);  // or Model<double> fitted = blocks.tree();
    // snippet-end: tree_blocks
    std::printf("%s\n", summary.BriefReport().c_str());
    expect((model.frame.value() - residuals.frame).norm() < 1e-8 &&
               (model.covariance.value() - residuals.covariance).norm() < 1e-8 &&
               (model.offset - residuals.offset).norm() < 1e-8 && geomopt::check(model.frame) < 1e-12,
           "every leaf reaches its target");
  }
  return expect.failures;
}

}  // namespace docs_ceres
