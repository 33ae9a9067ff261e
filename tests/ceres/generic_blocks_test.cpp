// CeresTreeBlocks on a tree whose manifold leaf is written only from the contract (tests/support/toy_manifold.hpp):
// the generic adapter is set on its block, the retraction option is checked against the manifold by leaf path, and
// a fit through DynamicAutoDiffCostFunction reaches the closed-form optimum (the normalised target) on the sphere.
#include "ceres_doctest.hpp"

#include <Eigen/Core>
#include <cmath>
#include <stdexcept>

#include "toy_manifold.hpp"

namespace {

template <class T>
struct Model {
  toy::Sphere<T> direction;                    // 4
  Eigen::Matrix<T, Eigen::Dynamic, 1> offset;  // 2
  GEOMOPT_PTREE(direction, offset)
};

struct Residuals {
  Eigen::VectorXd v, o;
  template <class T>
  bool operator()(const Model<T>& m, T* r) const {
    for (Eigen::Index i = 0; i < 4; ++i) *r++ = m.direction.value()[i] - v[i];
    for (Eigen::Index i = 0; i < 2; ++i) *r++ = m.offset[i] - o[i];
    return true;
  }
};

Model<double> start() { return {toy::Sphere<double>(4), Eigen::VectorXd::Zero(2)}; }

}  // namespace

TEST_CASE("CeresTreeBlocks sets the generic adapter on a contract manifold's block and fits on it") {
  for (auto r : {std::optional<geomopt::Retraction>{}, std::optional(geomopt::Retraction::second_order)}) {
    Model<double> model = start();
    geomopt::CeresTreeBlocks<Model<double>> blocks(model, {.retraction = r});
    ceres::Problem problem;
    blocks.add_to(problem);
    REQUIRE(problem.NumParameterBlocks() == 2);
    const ceres::Manifold* m = problem.GetManifold(blocks.parameter_blocks()[0]);
    REQUIRE(m != nullptr);
    CHECK(m->AmbientSize() == 4);
    CHECK(m->TangentSize() == 3);
    CHECK(problem.GetManifold(blocks.parameter_blocks()[1]) == nullptr);

    Residuals res{Eigen::VectorXd::Zero(4), Eigen::VectorXd::Zero(2)};
    res.v << 0.5, -2.0, 1.0, 0.25;
    res.o << 3.0, -1.0;
    problem.AddResidualBlock(blocks.autodiff_cost(res, 6), nullptr, blocks.parameter_blocks());
    ceres::Solver::Options options;
    options.function_tolerance = 1e-14;
    options.gradient_tolerance = 1e-14;
    options.parameter_tolerance = 1e-14;
    ceres::Solver::Summary summary;
    ceres::Solve(options, &problem, &summary);
    INFO(summary.BriefReport());
    blocks.write_to(model);
    // The residual at the optimum is not zero (|v| != 1): Ceres stops on the relative cost change, which places the
    // point to about the square root of its tolerance.
    CHECK((model.direction.value() - res.v.normalized()).norm() < 1e-6);
    CHECK((model.offset - res.o).norm() < 1e-6);
    CHECK(std::abs(model.direction.value().norm() - 1) < 1e-14);
  }
}

TEST_CASE("CeresTreeBlocks refuses, by leaf path, a retraction the manifold lacks") {
  const Model<double> model = start();
  CHECK_THROWS_WITH_AS(geomopt::CeresTreeBlocks<Model<double>>(model, {.retraction = geomopt::Retraction::cayley}),
                       doctest::Contains("direction: CeresManifold<ToySphere>: ToySphere has no cayley retraction"),
                       std::invalid_argument);
}
