// The code of docs/getting_started.md: a first model, a tree with a Stiefel leaf and a dense leaf trained by Adam on
// a least-squares loss. The page's C++ block is a region of this file (tests/docs/snippet.cmake); docs_examples runs
// it (`docs_examples getting_started`) and checks that the loss fell and the frame stayed orthonormal.
// snippet-begin: first_model
#include <geomopt/optimizers.hpp>

// snippet-end: first_model
#include <Eigen/Core>
#include <cmath>
#include <cstdio>

namespace docs_getting_started {

// snippet-begin: first_model
template <class T> struct Model {
  geomopt::Stiefel<T> frame;                              // Y: 8 x 2 with orthonormal columns
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> head;  // W: 2 x 3, unconstrained
  GEOMOPT_PTREE(frame, head)
};

// snippet-end: first_model
int run() {
  // The target: sin(1 + i + 8 j) = sin(1 + i) cos(8 j) + cos(1 + i) sin(8 j) has rank 2, so Y W can fit it exactly.
  const Eigen::MatrixXd B =
      Eigen::MatrixXd::NullaryExpr(8, 3, [](Eigen::Index i, Eigen::Index j) { return std::sin(1.0 + i + 8.0 * j); });
  // snippet-begin: first_model
  geomopt::Rng rng(1);
  Model<double> params{geomopt::Stiefel<double>::random_point(rng, 8, 2), Eigen::MatrixXd::Zero(2, 3)};
  Model<double> grads = params;                           // gradients: a tree of the same type
  geomopt::Adam adam({.lr = 0.05});
  auto state = adam.init(params);
  for (int step = 0; step < 200; ++step) {
    const Eigen::MatrixXd r = params.frame.value() * params.head - B;  // loss |Y W - B|^2 / 2
    grads.frame.value() = r * params.head.transpose();                 // Euclidean gradients
    grads.head = params.frame.value().transpose() * r;
    adam.step(params, grads, state);                      // Y moves on St(8, 2), W in R^{2 x 3}
  }
  // snippet-end: first_model
  auto loss = [&](const Model<double>& m) { return (m.frame.value() * m.head - B).squaredNorm() / 2; };
  geomopt::Rng same_seed(1);
  const Model<double> start{geomopt::Stiefel<double>::random_point(same_seed, 8, 2), Eigen::MatrixXd::Zero(2, 3)};
  const double first = loss(start), last = loss(params), defect = geomopt::check(params.frame);
  std::printf("loss %.3g -> %.1e, |Y^T Y - I| = %.1e\n", first, last, defect);
  return last < 1e-4 * first && defect < 1e-12 ? 0 : 1;
}

}  // namespace docs_getting_started
