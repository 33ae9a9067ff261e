#include "dense_reference.hpp"

#include <Eigen/Dense>
#include <unsupported/Eigen/MatrixFunctions>

namespace manifold_props::reference {

using MatD = Eigen::MatrixXd;

MatD expm(const MatD& x) { return MatD(x.exp()); }

MatD cayley(const MatD& x) {
  const MatD id = MatD::Identity(x.rows(), x.cols());
  return Eigen::FullPivLU<MatD>(id - 0.5 * x).solve(id + 0.5 * x);
}

MatD solve(const MatD& a, const MatD& b) { return Eigen::FullPivLU<MatD>(a).solve(b); }

MatD sym_sqrt(const MatD& m) { return Eigen::SelfAdjointEigenSolver<MatD>(m).operatorSqrt(); }

MatD spd_geodesic(const MatD& X, const MatD& U) {
  const Eigen::SelfAdjointEigenSolver<MatD> eig(X);
  const MatD root = eig.operatorSqrt(), inv_root = eig.operatorInverseSqrt();
  const MatD w = inv_root * U * inv_root;
  return root * MatD(((w + w.transpose()) * 0.5).exp()) * root;
}

}  // namespace manifold_props::reference
