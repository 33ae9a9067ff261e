// Fitting an orthonormal frame with Ceres: orthogonal Procrustes on St(10, 3). Given pairs (a_k, b_k), find Y with
// orthonormal columns minimising sum_k |Y a_k - b_k|^2; the residual is written once for autodiff, and the Stiefel
// constraint is one line, the adapter set on the parameter block. The answer is known: U V^T from the SVD of B A^T.
// docs/ceres.md shows this file; CTest runs it.
#include <ceres/ceres.h>

#include <Eigen/Dense>
#include <cstdio>
#include <geomopt/ceres.hpp>

namespace {

constexpr int kN = 10, kn = 3, kPairs = 20;

// The residuals Y a_k - b_k of all pairs, for any scalar (double, ceres::Jet).
struct FrameResiduals {
  Eigen::MatrixXd a, b;  // kn x kPairs, kN x kPairs
  template <class T>
  bool operator()(const T* y, T* residuals) const {
    for (int k = 0; k < kPairs; ++k)
      for (int i = 0; i < kN; ++i) {
        T r = T(-b(i, k));
        for (int j = 0; j < kn; ++j) r += y[j * kN + i] * a(j, k);  // Y is column-major
        residuals[k * kN + i] = r;
      }
    return true;
  }
};

}  // namespace

int main() {
  geomopt::Rng rng(42);
  FrameResiduals data{Eigen::MatrixXd::Random(kn, kPairs), Eigen::MatrixXd()};
  const auto truth = geomopt::Stiefel<double>::random_point(rng, kN, kn);
  data.b = truth.value() * data.a + 0.05 * Eigen::MatrixXd::Random(kN, kPairs);

  Eigen::MatrixXd y = geomopt::Stiefel<double>(kN, kn).value();  // start at [I; 0]
  ceres::Problem problem;
  problem.AddResidualBlock(
      new ceres::AutoDiffCostFunction<FrameResiduals, kN * kPairs, kN * kn>(new FrameResiduals(data)), nullptr,
      y.data());
  problem.SetManifold(y.data(), new geomopt::CeresManifold<geomopt::Stiefel<double>>(kN, kn));  // the one line

  ceres::Solver::Options options;
  options.function_tolerance = 0;  // stop on the gradient: see docs/ceres.md
  options.parameter_tolerance = 0;
  options.gradient_tolerance = 1e-12;
  ceres::Solver::Summary summary;
  ceres::Solve(options, &problem, &summary);
  std::printf("%s\n", summary.BriefReport().c_str());

  Eigen::JacobiSVD<Eigen::MatrixXd> svd(data.b * data.a.transpose(), Eigen::ComputeThinU | Eigen::ComputeThinV);
  const Eigen::MatrixXd best = svd.matrixU() * svd.matrixV().transpose();
  const double gap = (y - best).norm();
  const double defect = geomopt::check(geomopt::Stiefel<double>(y));
  std::printf("|Y - U V^T| = %.1e, |Y^T Y - I| = %.1e\n", gap, defect);
  return gap < 1e-7 && defect < 1e-12 ? 0 : 1;
}
