// CeresTreeBlocks on a mixed tree (Stiefel, SO(3), SPD, Sphere and Euclidean leaves, one of them empty): the blocks
// and manifolds it sets on a ceres::Problem, the round trip back into the tree, and a fit through
// DynamicAutoDiffCostFunction whose every leaf has a closed-form optimum (polar factor, Kabsch, the target matrix,
// the normalised vector, the target offset).
#include "ceres_doctest.hpp"

#include <Eigen/Dense>
#include <cmath>

namespace {

template <class T>
struct Model {
  geomopt::Stiefel<T> frame;                   // 6 x 2
  geomopt::SpecialOrthogonal<T> rotation;      // 3 x 3
  geomopt::SPD<T> covariance;                  // 2 x 2
  geomopt::Sphere<T> direction;                // 4
  Eigen::Matrix<T, Eigen::Dynamic, 1> offset;  // 3
  Eigen::Matrix<T, Eigen::Dynamic, 1> empty;   // no parameters, so no block
  GEOMOPT_PTREE(frame, rotation, covariance, direction, offset, empty)
};

using Eigen::MatrixXd;
using Eigen::VectorXd;

struct Data {
  MatrixXd a1, b1, a2, b2, c;
  VectorXd v, o;
};

// The residuals of every leaf, written once for double and ceres::Jet, with loops rather than Eigen products over
// Jets (cheaper to compile).
struct Residuals {
  const Data* d;
  template <class T>
  bool operator()(const Model<T>& m, T* r) const {
    auto fit = [&r](const auto& y, const MatrixXd& a, const MatrixXd& b) {  // vec(Y A - B)
      for (Eigen::Index c = 0; c < b.cols(); ++c)
        for (Eigen::Index i = 0; i < b.rows(); ++i) {
          T s = T(-b(i, c));
          for (Eigen::Index k = 0; k < a.rows(); ++k) s += y(i, k) * a(k, c);
          *r++ = s;
        }
    };
    fit(m.frame.value(), d->a1, d->b1);
    fit(m.rotation.value(), d->a2, d->b2);
    for (Eigen::Index i = 0; i < 4; ++i) *r++ = m.covariance.value()(i % 2, i / 2) - d->c(i % 2, i / 2);
    for (Eigen::Index i = 0; i < 4; ++i) *r++ = m.direction.value()[i] - d->v[i];
    for (Eigen::Index i = 0; i < 3; ++i) *r++ = m.offset[i] - d->o[i];
    return true;
  }
  static constexpr int kCount = 6 * 6 + 3 * 8 + 4 + 4 + 3;
};

MatrixXd polar(const MatrixXd& m, bool rotation) {
  Eigen::JacobiSVD<MatrixXd> svd(m, Eigen::ComputeThinU | Eigen::ComputeThinV);
  MatrixXd u = svd.matrixU();
  if (rotation && (u * svd.matrixV().transpose()).determinant() < 0) u.col(u.cols() - 1) *= -1;
  return u * svd.matrixV().transpose();
}

Model<double> start_model(geomopt::Rng& rng) {
  return {geomopt::Stiefel<double>::random_point(rng, 6, 2),
          geomopt::SpecialOrthogonal<double>::random_point(rng, 3),
          geomopt::SPD<double>::random_point(rng, 2),
          geomopt::Sphere<double>::random_point(rng, 4),
          VectorXd::Zero(3),
          VectorXd(0)};
}

}  // namespace

TEST_CASE("CeresTreeBlocks: one block per leaf with parameters, manifolds on the manifold leaves, and back") {
  geomopt::Rng rng(1);
  const Model<double> model = start_model(rng);
  geomopt::CeresTreeBlocks<Model<double>> blocks(model);
  REQUIRE(blocks.parameter_blocks().size() == 5);
  CHECK(blocks.block_sizes() == std::vector<int>{12, 9, 4, 4, 3});
  CHECK(blocks.block("rotation") == blocks.parameter_blocks()[1]);
  CHECK_THROWS_AS(blocks.block("empty"), std::invalid_argument);

  // The round trip, and the blocks hold flatten(model) in walk order.
  CHECK(geomopt::ptree::flatten(blocks.tree()) == geomopt::ptree::flatten(model));
  CHECK(Eigen::Map<const MatrixXd>(blocks.block("covariance"), 2, 2) == model.covariance.value());
  const Model<double> through = blocks.unflatten<double>(blocks.parameter_blocks().data());
  CHECK(geomopt::ptree::flatten(through) == geomopt::ptree::flatten(model));

  ceres::Problem problem;
  blocks.add_to(problem);
  CHECK(problem.NumParameterBlocks() == 5);
  const int tangent[] = {12 - 3, 3, 3, 3, 3};
  const bool on_manifold[] = {true, true, true, true, false};
  for (int b = 0; b < 5; ++b) {
    CAPTURE(b);
    CHECK((problem.GetManifold(blocks.parameter_blocks()[b]) != nullptr) == on_manifold[b]);
    CHECK(problem.ParameterBlockTangentSize(blocks.parameter_blocks()[b]) == tangent[b]);
  }
}

TEST_CASE("CeresTreeBlocks: a mixed tree fitted by ceres::Solve through DynamicAutoDiffCostFunction") {
  geomopt::Rng rng(2);
  Data d;
  d.a1 = geomopt::detail::gaussian<double>(rng, 2, 6);
  d.b1 = geomopt::detail::gaussian<double>(rng, 6, 6);
  d.a2 = geomopt::detail::gaussian<double>(rng, 3, 8);
  d.b2 = geomopt::SpecialOrthogonal<double>::random_point(rng, 3).value() * d.a2 +
         0.1 * geomopt::detail::gaussian<double>(rng, 3, 8);
  d.c = geomopt::SPD<double>::random_point(rng, 2).value();
  d.v = geomopt::detail::gaussian<double>(rng, 4, 1).col(0);
  d.o = geomopt::detail::gaussian<double>(rng, 3, 1).col(0);

  Model<double> model = start_model(rng);
  geomopt::CeresTreeBlocks<Model<double>> blocks(model);
  ceres::Problem problem;
  blocks.add_to(problem);
  problem.AddResidualBlock(blocks.autodiff_cost(Residuals{&d}, Residuals::kCount), nullptr, blocks.parameter_blocks());
  ceres::Solver::Options options;
  options.max_num_iterations = 300;
  options.function_tolerance = 0;
  options.parameter_tolerance = 0;
  options.gradient_tolerance = 1e-12;
  ceres::Solver::Summary summary;
  ceres::Solve(options, &problem, &summary);
  INFO(summary.BriefReport());
  REQUIRE(summary.IsSolutionUsable());

  blocks.write_to(model);
  CHECK((model.frame.value() - polar(d.b1 * d.a1.transpose(), false)).norm() < 1e-7);
  CHECK((model.rotation.value() - polar(d.b2 * d.a2.transpose(), true)).norm() < 1e-7);
  CHECK((model.covariance.value() - d.c).norm() < 1e-7);
  CHECK((model.direction.value() - d.v / d.v.norm()).norm() < 1e-7);
  CHECK((model.offset - d.o).norm() < 1e-7);
  CHECK(geomopt::check(model.frame) < 1e-12);
  CHECK(geomopt::check(model.rotation) < 1e-12);
  CHECK(geomopt::check(model.direction) < 1e-12);
  CHECK(geomopt::check(model.covariance) < 1e-12);
  CHECK(model.empty.size() == 0);
}
