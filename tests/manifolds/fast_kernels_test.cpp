// The allocation-free kernels of geomopt/manifolds/detail (stack_gemm.hpp, householder_blocked.hpp,
// stiefel_cayley.hpp) against dense references computed another way, in float and double:
//   - stack_gemm and stack_gram against Eigen's product, every transpose flag, shapes across several tiles, on each
//     kernel path the machine has (the AVX2 products: rows around two registers, columns around the 6- and 4-wide
//     tiles, depths around a register and a depth block);
//   - BlockedHouseholder: Q against GlobalSection(y).dense() (the section's reflectors applied one at a time by
//     Eigen's HouseholderSequence), Q [I; 0] = y for an orthonormal y, Q^T Q = I, apply_transpose the inverse of
//     apply, and |R| against Eigen::HouseholderQR's (same columns, so same |diagonal|);
//   - BlockedLuSolve against Eigen::PartialPivLU; StiefelCayleySchur against the first n columns of the dense Cayley
//     transform (I - W/2)^-1 (I + W/2) of W = [A, -B^T; B, 0] solved by PartialPivLU in double, and its defect
//     against the dense path's in float from norm 1e-3 to the spectral threshold; its bound refuses cores it cannot
//     prove below the threshold, and non-finite entries;
//   - edge shapes (n = 0, n = 1, N = n, N - n < n, more columns than a block or a tile), and no heap allocation in
//     any call after construction (count_allocations.hpp).
#include "../support/count_allocations.hpp"

#include <doctest/doctest.h>

#include <Eigen/Dense>
#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

#include "geomopt/manifolds.hpp"
#include "geomopt/manifolds/detail/householder_blocked.hpp"
#include "geomopt/manifolds/detail/stack_gemm.hpp"
#include "geomopt/manifolds/detail/stiefel_cayley.hpp"

namespace {

using geomopt::detail::BlockedHouseholder;
using geomopt::detail::BlockedLuSolve;
using geomopt::detail::GemmMode;
using geomopt::detail::GemmOp;
using geomopt::detail::StiefelCayleySchur;

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
using MatD = Mat<double>;

template <class T>
double eps() {
  return static_cast<double>(std::numeric_limits<T>::epsilon());
}

MatD normal_matrix(Eigen::Index rows, Eigen::Index cols, std::mt19937& rng, double scale = 1) {
  std::normal_distribution<double> normal;
  MatD m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = scale * normal(rng);
  return m;
}

// An orthonormal N x n matrix, from Eigen's (LAPACK-convention) QR in double.
MatD orthonormal(Eigen::Index N, Eigen::Index n, std::mt19937& rng) {
  if (n == 0) return MatD(N, 0);
  const Eigen::HouseholderQR<MatD> qr(normal_matrix(N, n, rng));
  return qr.householderQ() * MatD::Identity(N, n);
}

double defect(const MatD& y) { return (y.transpose() * y - MatD::Identity(y.cols(), y.cols())).norm(); }

// |a - b| / max(|b|, 1), in double.
template <class A>
double relative(const A& a, const MatD& b) {
  return (a.template cast<double>() - b).norm() / std::max(1.0, b.norm());
}

const std::vector<std::pair<Eigen::Index, Eigen::Index>> kShapes = {
    {7, 0}, {9, 1}, {1, 1}, {6, 6}, {40, 33}, {50, 50}, {200, 7}, {300, 70}, {130, 100}, {260, 129}};

// Restores the process's kernel path when a test that changes it ends.
struct KernelPathGuard {
  geomopt::KernelPath before = geomopt::kernel_path();
  ~KernelPathGuard() { geomopt::set_kernel_path(before); }
};

std::vector<geomopt::KernelPath> available_paths() {
  std::vector<geomopt::KernelPath> paths{geomopt::KernelPath::portable};
  if (geomopt::kernel_path_available(geomopt::KernelPath::avx2)) paths.push_back(geomopt::KernelPath::avx2);
  return paths;
}

}  // namespace

TEST_CASE_TEMPLATE("stack_gemm and stack_gram equal Eigen's products and allocate nothing", T, float, double) {
  std::mt19937 rng(1);
  const double tol = 50 * eps<T>();
  // m k n: the first seven across Eigen's tiles, the rest around the AVX2 tiles (two registers of rows, 6 and 4
  // columns, a register of depth, the depth block of 256) and empty products.
  const std::vector<std::array<int, 3>> shapes = {{1, 1, 1},   {5, 0, 3},     {130, 250, 121}, {7, 300, 9},
                                                  {1, 300, 9}, {9, 300, 1},   {1, 200, 1},     {16, 8, 12},
                                                  {17, 9, 13}, {33, 513, 14}, {0, 4, 5},       {4, 7, 0}};
  const KernelPathGuard guard;
  for (const geomopt::KernelPath path : available_paths()) {
    geomopt::set_kernel_path(path);
    CAPTURE(static_cast<int>(path));
    for (const auto& shape : shapes) {
      const int m = shape[0], k = shape[1], n = shape[2];
      CAPTURE(m);
      CAPTURE(k);
      CAPTURE(n);
      const MatD a = normal_matrix(m, k, rng), b = normal_matrix(k, n, rng), c = normal_matrix(m, n, rng);
      const Mat<T> at = a.transpose().cast<T>(), bt = b.transpose().cast<T>(), af = a.cast<T>(), bf = b.cast<T>();
      const Mat<T> cf = c.cast<T>();
      Mat<T> d1 = cf, d2 = cf, d3 = cf, d4 = cf;
      const double scale = std::sqrt(static_cast<double>(k) + 1);
      {
        alloc_count::Window window;
        geomopt::detail::stack_gemm<T>(d1, af, GemmOp::plain, bf, GemmOp::plain, GemmMode::assign);
        geomopt::detail::stack_gemm<T>(d2, at, GemmOp::transposed, bf, GemmOp::plain, GemmMode::subtract);
        geomopt::detail::stack_gemm<T>(d3, af, GemmOp::plain, bt, GemmOp::transposed, GemmMode::add);
        geomopt::detail::stack_gemm<T>(d4, at, GemmOp::transposed, bt, GemmOp::transposed, GemmMode::subtract);
        CHECK(window.count() == 0);
      }
      CHECK(relative(d1, a * b) <= tol * scale);
      CHECK(relative(d2, c - a * b) <= tol * scale);
      CHECK(relative(d3, c + a * b) <= tol * scale);
      CHECK(relative(d4, c - a * b) <= tol * scale);
      Mat<T> g(k, k);
      {
        alloc_count::Window window;
        geomopt::detail::stack_gram<T>(g, af);
        CHECK(window.count() == 0);
      }
      CHECK(relative(g, a.transpose() * a) <= tol * std::sqrt(static_cast<double>(m) + 1));
      CHECK(g == g.transpose());
    }
  }
}

TEST_CASE_TEMPLATE("BlockedHouseholder builds the global section's Q and applies it without allocating", T, float,
                   double) {
  std::mt19937 rng(2);
  const double tol = 20 * eps<T>();
  for (const auto& shape : kShapes) {
    const Eigen::Index N = shape.first, n = shape.second;
    CAPTURE(N);
    CAPTURE(n);
    const MatD y = orthonormal(N, n, rng);
    const Mat<T> yt = y.cast<T>();
    BlockedHouseholder<T> house(N, n, N + 3);
    const MatD x = normal_matrix(N, n + 3, rng);
    Mat<T> qx = x.cast<T>(), qtx = x.cast<T>(), round = x.cast<T>(), q = Mat<T>::Identity(N, n);
    {
      alloc_count::Window window;
      house.factor(yt);
      house.apply(qx);
      house.apply_transpose(qtx);
      house.apply(q);
      house.apply_transpose(round);
      house.apply(round);
      CHECK(window.count() == 0);
    }
    // The reference: the manifolds API's section, in double (its reflectors applied one at a time).
    const MatD lambda = geomopt::GlobalSection<double>(y).dense();
    const double size = std::sqrt(static_cast<double>(N));
    CHECK(relative(qx, lambda * x) <= tol * size);
    CHECK(relative(qtx, lambda.transpose() * x) <= tol * size);
    CHECK(relative(q, y) <= tol * size);  // Q [I; 0] = y: R = I with the section's reflectors
    CHECK(relative(round, x) <= tol * size);
    CHECK(defect(q.template cast<double>()) <= tol * size);

    // A matrix that is not orthonormal: Q is still the section's, and |R| is Eigen's |R|.
    const MatD a = normal_matrix(N, n, rng);
    house.factor(a.cast<T>());
    Mat<T> qa = Mat<T>::Identity(N, N);
    house.apply(qa);
    CHECK(relative(qa, geomopt::GlobalSection<double>(a).dense()) <= tol * size * 10);
    if (n > 0) {
      Mat<T> r = a.cast<T>();
      house.apply_transpose(r);
      const Eigen::HouseholderQR<MatD> eigen_qr(a);
      const MatD eigen_r = eigen_qr.matrixQR().topRows(n).template triangularView<Eigen::Upper>();
      CHECK(relative(r.topRows(n).cwiseAbs(), eigen_r.cwiseAbs()) <= tol * size * 10);
      CHECK(r.bottomRows(N - n).norm() <= tol * size * 10 * a.norm());
      CHECK((r.topRows(n).diagonal().array() >= T(0)).all());  // the section's sign: R's diagonal nonnegative
    }
  }
}

TEST_CASE_TEMPLATE("BlockedLuSolve solves like Eigen's PartialPivLU", T, float, double) {
  std::mt19937 rng(3);
  for (int n : {0, 1, 5, 32, 33, 100, 130}) {
    CAPTURE(n);
    const MatD m = normal_matrix(n, n, rng) + 3 * MatD::Identity(n, n), b = normal_matrix(n, 7, rng);
    Mat<T> mt = m.cast<T>(), x = b.cast<T>();
    BlockedLuSolve<T> lu(n);
    {
      alloc_count::Window window;
      lu.solve(mt, x);
      CHECK(window.count() == 0);
    }
    const MatD ref = m.partialPivLu().solve(b);
    CHECK(relative(x, ref) <= 1e3 * eps<T>() * std::max(1.0, std::sqrt(static_cast<double>(n))));
  }
}

namespace {

// The Cayley local point by the dense N x N system, in double: the first n columns of (I - W/2)^-1 (I + W/2).
MatD dense_cayley(const MatD& a, const MatD& b) {
  const Eigen::Index n = a.rows(), N = n + b.rows();
  MatD w = MatD::Zero(N, N);
  w.topLeftCorner(n, n) = a;
  w.bottomLeftCorner(N - n, n) = b;
  w.topRightCorner(n, N - n) = -b.transpose();
  if (n == 0) return MatD(N, 0);  // Eigen's LU solve of zero right-hand sides offsets a null pointer
  const MatD id = MatD::Identity(N, N);
  return (id - w / 2).partialPivLu().solve((id + w / 2).leftCols(n));
}

MatD random_skew(Eigen::Index n, std::mt19937& rng, double scale) {
  const MatD m = normal_matrix(n, n, rng, scale);
  return (m - m.transpose()) / std::sqrt(2.0);
}

// The core's 1-norm, as detail::use_spectral measures it: S = [A, -r^T; r, 0] with B = Q_B [r; 0].
double core_norm1(const MatD& a, const MatD& b) {
  const Eigen::Index n = a.rows(), k = std::min(b.rows(), b.cols());
  MatD s = MatD::Zero(n + k, n + k);
  s.topLeftCorner(n, n) = a;
  if (k > 0) {
    const Eigen::HouseholderQR<MatD> qr(b);
    const MatD r = qr.matrixQR().topRows(k).triangularView<Eigen::Upper>();
    s.bottomLeftCorner(k, n) = r;
    s.topRightCorner(n, k) = -r.transpose();
  }
  return s.size() == 0 ? 0.0 : s.cwiseAbs().colwise().sum().maxCoeff();
}

}  // namespace

TEST_CASE_TEMPLATE("StiefelCayleySchur gives the dense Cayley transform's point, allocation-free", T, float, double) {
  std::mt19937 rng(4);
  for (const auto& shape : kShapes) {
    const Eigen::Index N = shape.first, n = shape.second;
    for (double scale : {1e-3, 0.05, 0.3}) {
      CAPTURE(N);
      CAPTURE(n);
      CAPTURE(scale);
      const MatD a = random_skew(n, rng, scale), b = normal_matrix(N - n, n, rng, scale);
      StiefelCayleySchur<T> schur(n, N - n);
      Mat<T> local = Mat<T>::Constant(N, n, T(7));
      const Mat<T> at = a.cast<T>(), bt = b.cast<T>();
      bool taken = false;
      {
        alloc_count::Window window;
        taken = schur.local_point(at, bt, local);
        CHECK(window.count() == 0);
      }
      if (!taken) {  // only when the core might be above the threshold: the bound is at most n^(3/4) loose
        CHECK(core_norm1(a, b) * static_cast<double>(n + 1) > geomopt::detail::kSpectralNorm);
        CHECK((local.array() == T(7)).all());
        continue;
      }
      CHECK(core_norm1(a, b) <= geomopt::detail::kSpectralNorm);
      const MatD ref = dense_cayley(a, b);
      CHECK(relative(local, ref) <= 100 * eps<T>() * std::sqrt(static_cast<double>(n) + 1));
      CHECK(defect(local.template cast<double>()) <= 100 * eps<T>() * std::sqrt(static_cast<double>(n) + 1));
    }
  }
}

TEST_CASE("StiefelCayleySchur in float: as orthonormal as the dense 2n x 2n path up to the spectral threshold") {
  // The dense path of detail::stiefel_step in float (the QR of B, the 2n x 2n core solved by LU), next to the Schur
  // complement, at core norms from 1e-3 up to the threshold; the Schur form may lose at most a small factor.
  std::mt19937 rng(5);
  const Eigen::Index N = 200, n = 12;
  int taken = 0;
  for (double scale : {1e-3, 1e-2, 0.1, 0.3, 0.6, 1.0, 1.5}) {
    CAPTURE(scale);
    const MatD a = random_skew(n, rng, scale), b = normal_matrix(N - n, n, rng, scale / std::sqrt(N / 10.0));
    const double norm = core_norm1(a, b);
    CAPTURE(norm);
    StiefelCayleySchur<float> schur(n, N - n);
    Mat<float> local(N, n);
    if (!schur.local_point(a.cast<float>(), b.cast<float>(), local)) continue;
    ++taken;
    // The dense path in float.
    const Mat<float> bf = b.cast<float>();
    const Eigen::HouseholderQR<Mat<float>> qr(bf);
    const Mat<float> r = qr.matrixQR().topRows(n).triangularView<Eigen::Upper>();
    Mat<float> s = Mat<float>::Zero(2 * n, 2 * n);
    s.topLeftCorner(n, n) = a.cast<float>();
    s.bottomLeftCorner(n, n) = r;
    s.topRightCorner(n, n) = -r.transpose();
    const Mat<float> id = Mat<float>::Identity(2 * n, 2 * n);
    const Mat<float> f = (id - s / 2.0f).partialPivLu().solve(id + s / 2.0f);
    Mat<float> low = Mat<float>::Zero(N - n, n);
    low.topRows(n) = f.bottomLeftCorner(n, n);
    Mat<float> dense(N, n);
    dense.topRows(n) = f.topLeftCorner(n, n);
    dense.bottomRows(N - n) = qr.householderQ() * low;
    const double d_schur = defect(local.cast<double>()), d_dense = defect(dense.cast<double>());
    CAPTURE(d_schur);
    CAPTURE(d_dense);
    CHECK(d_schur <= std::max(4 * d_dense, 20 * eps<float>()));
    CHECK(relative(local, dense_cayley(a, b)) <= 1e-5);
  }
  CHECK(taken >= 4);
}

TEST_CASE_TEMPLATE("StiefelCayleySchur refuses what it cannot prove below the spectral threshold", T, float, double) {
  std::mt19937 rng(6);
  const Eigen::Index N = 30, n = 4;
  StiefelCayleySchur<T> schur(n, N - n);
  Mat<T> local = Mat<T>::Constant(N, n, T(7));
  const MatD a = random_skew(n, rng, 1), b = normal_matrix(N - n, n, rng, 1);
  CHECK_FALSE(schur.local_point((20 * a).cast<T>(), b.cast<T>(), local));  // |A|_1 alone above 16
  CHECK_FALSE(schur.local_point(a.cast<T>(), (10 * b).cast<T>(), local));
  Mat<T> bad = b.cast<T>();
  bad(3, 2) = std::numeric_limits<T>::quiet_NaN();
  CHECK_FALSE(schur.local_point(a.cast<T>(), bad, local));
  bad(3, 2) = std::numeric_limits<T>::infinity();
  CHECK_FALSE(schur.local_point(a.cast<T>(), bad, local));
  CHECK((local.array() == T(7)).all());
}
