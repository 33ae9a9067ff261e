// msign, Muon and ManifoldMuon. References are independent of the code under test: msign against Eigen's JacobiSVD
// in double (one-sided Jacobi: neither the divide-and-conquer SVD nor the Gram eigensolver msign uses); the
// Newton-Schulz band against the scalar recurrence; Muon's first steps against a hand computation (the matrix sign of a
// 2 x 2 symmetric matrix in closed form); the ManifoldMuon direction against its closed forms on St(n, n) (W
// msign(skew(W^T G))) and on the sphere (the normalized projected gradient), and on St(N, n) against its optimality
// conditions (tangent, unit spectral norm, zero duality gap, at least the alignment of the normalized projected
// gradient).
#include <doctest/doctest.h>

#include <Eigen/Core>
#include <Eigen/SVD>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <geomopt/optimizers.hpp>
#include <geomopt/ptree/borrowed_array.hpp>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "../support/sanitized.hpp"

// Every float and double msign of this file, Muon's included, runs libgeomopt_optimizers' compiled code: the header's
// implementation is declared extern here and defined nowhere this executable links (the library's instances are
// hidden), so a call that took the header's path instead would not link.
static_assert(geomopt::detail::compiled_msign<float> && geomopt::detail::compiled_msign<double>);
#define GEOMOPT_EXTERN_MSIGN(T)                                                                                     \
  extern template void geomopt::detail::msign_kernel<T>(geomopt::detail::MsignRef<T>, const geomopt::MsignOptions&, \
                                                        geomopt::MsignWorkspace<T>&);                               \
  extern template void geomopt::detail::msign_batch_kernel<T>(T*, Eigen::Index, Eigen::Index, Eigen::Index,         \
                                                              Eigen::Index, const geomopt::MsignOptions&,           \
                                                              geomopt::MsignBatchWorkspace<T>&);
GEOMOPT_EXTERN_MSIGN(float)
GEOMOPT_EXTERN_MSIGN(double)
#undef GEOMOPT_EXTERN_MSIGN
// And every float and double ManifoldMuon direction and polar step runs the library's compiled ones.
static_assert(geomopt::detail::compiled_stiefel_muon<float> && geomopt::detail::compiled_stiefel_muon<double>);

namespace {

// 10^4 optimizer steps take 2 s in the Release build and 200 s under ASan and UBSan at -O0: that one case runs in the
// Release stage only (it checks arithmetic, which the sanitizers do not; every code path it takes is also taken by
// the cases that do run under them).
constexpr bool kSanitized = test_support::sanitized;

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
using MatD = Mat<double>;

// A rows x cols matrix with the given singular values (min(rows, cols) of them) and Haar singular vectors.
MatD with_singular_values(geomopt::Rng& rng, Eigen::Index rows, Eigen::Index cols, const Eigen::VectorXd& s) {
  const Eigen::Index k = std::min(rows, cols);
  const MatD u = geomopt::Stiefel<double>::random_point(rng, rows, k).value();
  const MatD v = geomopt::Stiefel<double>::random_point(rng, cols, k).value();
  return u * s.asDiagonal() * v.transpose();
}

MatD gaussian(geomopt::Rng& rng, Eigen::Index rows, Eigen::Index cols) {
  std::normal_distribution<double> normal;
  MatD m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
  return m;
}

// U_r V_r^T by a double JacobiSVD, r the numerical rank.
MatD reference_msign(const MatD& m) {
  Eigen::JacobiSVD<MatD> svd(m, Eigen::ComputeThinU | Eigen::ComputeThinV);
  const auto& s = svd.singularValues();
  Eigen::Index r = 0;
  while (r < s.size() && s(r) > 1e-10 * s(0)) ++r;
  return svd.matrixU().leftCols(r) * svd.matrixV().leftCols(r).transpose();
}

Eigen::VectorXd singular_values(const MatD& m) { return Eigen::JacobiSVD<MatD>(m).singularValues(); }

double spectral_norm(const MatD& m) { return m.size() == 0 ? 0.0 : singular_values(m)(0); }

}  // namespace

TEST_CASE_TEMPLATE("msign: svd and gram are exact on random, ill-conditioned and rank-deficient matrices", T, float,
                   double) {
  geomopt::Rng rng(11);
  const double tol = std::is_same_v<T, float> ? 2e-5 : 1e-12;
  for (const auto& shape : {std::pair{12, 12}, {40, 9}, {9, 40}, {1, 7}, {6, 1}}) {
    const int rows = shape.first, cols = shape.second;  // not a structured binding: CAPTURE's lambda takes it
    CAPTURE(rows);
    CAPTURE(cols);
    const MatD m = gaussian(rng, rows, cols);
    const MatD polar = reference_msign(m);
    for (auto method : {geomopt::MsignMethod::svd, geomopt::MsignMethod::gram}) {
      const MatD q = geomopt::msign(Mat<T>(m.cast<T>()), {.method = method}).template cast<double>();
      CHECK((q - polar).norm() <= tol * std::sqrt(static_cast<double>(m.size())));
    }
  }
  // Ill-conditioned: singular values logspaced over 1e-3 .. 1 (float) or 1e-4 .. 1 (double; gram's error grows as
  // cond^2 eps(double)).
  const double low = std::is_same_v<T, float> ? 1e-3 : 1e-4;
  Eigen::VectorXd s(10);
  for (int i = 0; i < 10; ++i) s(i) = std::pow(low, i / 9.0);
  const MatD ill = with_singular_values(rng, 30, 10, s);
  for (auto method : {geomopt::MsignMethod::svd, geomopt::MsignMethod::gram}) {
    const MatD q = geomopt::msign(Mat<T>(ill.cast<T>()), {.method = method}).template cast<double>();
    // float: the input's own rounding (6e-8 relative) moves the smallest singular vectors by 6e-8 / 1e-3.
    CHECK((q - reference_msign(ill)).norm() <= (std::is_same_v<T, float> ? 5e-4 : 1e-7));
  }
  // Rank 3 of 8: msign keeps the rank (U_3 V_3^T), and maps the null space to zero.
  const MatD low_rank = gaussian(rng, 20, 3) * gaussian(rng, 3, 8);
  for (auto method : {geomopt::MsignMethod::svd, geomopt::MsignMethod::gram}) {
    const MatD q = geomopt::msign(Mat<T>(low_rank.cast<T>()), {.method = method}).template cast<double>();
    CHECK((q - reference_msign(low_rank)).norm() <= 50 * tol);
    const Eigen::VectorXd sv = singular_values(q);
    CHECK(sv(2) == doctest::Approx(1).epsilon(50 * tol));
    CHECK(sv(3) <= 50 * tol);  // gram: below sqrt(4 k eps(double)) s_max counts as zero
  }
  CHECK(geomopt::msign(Mat<T>::Zero(4, 3), {.method = geomopt::MsignMethod::gram}).norm() == 0);
  CHECK(geomopt::msign(Mat<T>::Zero(4, 3)).norm() == 0);
}

TEST_CASE_TEMPLATE("msign: Newton-Schulz maps the singular values into the band msign_band states", T, float, double) {
  geomopt::Rng rng(12);
  // A matrix whose singular values fill [s_min, 1] |M|_F densely reaches both ends of the band, and no further.
  const geomopt::MsignOptions muon;  // 5 quintic steps with Muon's coefficients
  for (double s_min : {1e-2, 1e-3}) {
    Eigen::VectorXd s(48);
    for (int i = 0; i < 48; ++i) s(i) = std::pow(s_min, i / 47.0);
    const MatD m = with_singular_values(rng, 60, 48, s);
    const double f = m.norm();
    const auto [lo, hi] = geomopt::msign_band(muon, s.minCoeff() / (f + muon.eps));
    const Eigen::VectorXd out = singular_values(geomopt::msign(Mat<T>(m.cast<T>()), muon).template cast<double>());
    const double slack = std::is_same_v<T, float> ? 1e-4 : 1e-9;
    CHECK(out.minCoeff() >= lo - slack);
    CHECK(out.maxCoeff() <= hi + slack);
    // Each singular value went through the scalar recurrence: compare the sorted spectra.
    Eigen::VectorXd expected(s.size());
    for (Eigen::Index i = 0; i < s.size(); ++i) {
      double x = s(i) / (f + muon.eps);  // Newton-Schulz divides by |M|_F + eps
      for (int k = 0; k < 5; ++k) x = 3.4445 * x - 4.7750 * x * x * x + 2.0315 * x * x * x * x * x;
      expected(i) = x;
    }
    std::sort(expected.data(), expected.data() + expected.size());
    Eigen::VectorXd got = out;
    std::sort(got.data(), got.data() + got.size());
    CHECK((got - expected).cwiseAbs().maxCoeff() <= (std::is_same_v<T, float> ? 1e-4 : 1e-10));
    // The singular vectors are kept: the result is U p(S / |M|_F) V^T, so it commutes with the exact polar factor.
    const MatD q = reference_msign(m);
    const MatD x = geomopt::msign(Mat<T>(m.cast<T>()), muon).template cast<double>();
    CHECK((q.transpose() * x - x.transpose() * q).norm() <= (std::is_same_v<T, float> ? 1e-4 : 1e-10));
  }
  // Muon's published band: about 0.7 .. 1.2 for singular values above 1e-2 |M|_F.
  const auto [lo, hi] = geomopt::msign_band(muon, 1e-2);
  CHECK(lo > 0.65);
  CHECK(hi < 1.21);
  // Polishing converges the band to 1: five cubic steps square the distance each time.
  const auto [plo, phi] = geomopt::msign_band({.polish_steps = 6}, 1e-2);
  CHECK(plo > 1 - 1e-9);
  CHECK(phi < 1 + 1e-9);
  const MatD m = gaussian(rng, 64, 16);
  const MatD polished = geomopt::msign(Mat<T>(m.cast<T>()), {.polish_steps = 6}).template cast<double>();
  CHECK((polished - reference_msign(m)).norm() <= (std::is_same_v<T, float> ? 2e-5 : 1e-12));
  // Wide and tall give transposed results (each iterates on its smaller Gram side).
  const Mat<T> mt = m.transpose().cast<T>();
  CHECK((geomopt::msign(mt).transpose() - geomopt::msign(Mat<T>(m.cast<T>()))).norm() <=
        (std::is_same_v<T, float> ? 1e-5 : 1e-13));
  // Rank-deficient: the null space stays null, the rest lands in the band.
  const MatD low_rank = gaussian(rng, 30, 2) * gaussian(rng, 2, 10);
  const Eigen::VectorXd sv = singular_values(geomopt::msign(Mat<T>(low_rank.cast<T>())).template cast<double>());
  CHECK(sv(1) > 0.65);
  // Rounding in the null directions grows by the quintic's slope at 0, 3.4445 a step: 490 eps after five.
  CHECK(sv(2) <= 1e3 * std::numeric_limits<T>::epsilon());
}

TEST_CASE("msign: in place on a block, bad options and non-finite input") {
  geomopt::Rng rng(13);
  Mat<float> big = gaussian(rng, 10, 10).cast<float>();
  const Mat<float> before = big;
  geomopt::MsignWorkspace<float> ws;
  geomopt::msign_inplace(big.block(2, 3, 6, 4), {.method = geomopt::MsignMethod::svd}, ws);
  CHECK((big.block(2, 3, 6, 4).cast<double>() - reference_msign(before.block(2, 3, 6, 4).cast<double>())).norm() <
        1e-5);
  big.block(2, 3, 6, 4) = before.block(2, 3, 6, 4);
  CHECK(big == before);  // nothing outside the block was written
  CHECK_THROWS_WITH_AS(geomopt::msign(before, {.steps = -1}), doctest::Contains("steps must be in [0, 100]"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(geomopt::msign(before, {.eps = -1}), doctest::Contains("eps must be >= 0"),
                       std::invalid_argument);
  Mat<float> nan = before;
  nan(3, 3) = std::numeric_limits<float>::quiet_NaN();
  for (auto method : {geomopt::MsignMethod::newton_schulz, geomopt::MsignMethod::svd, geomopt::MsignMethod::gram})
    CHECK(geomopt::msign(nan, {.method = method}).hasNaN());
}

namespace {

// Polar Express's published schedule (Amsel, Persson, Musco and Gower 2025, arXiv:2505.16932, appendix A,
// implementation 1), written out here independently of msign.hpp's copy, with the paper's safety factor: every
// quintic but the last evaluated at x / 1.01, and M divided by 1.01 |M|_F.
double polar_express_scalar(double x, int steps) {
  constexpr double kSchedule[8][3] = {{8.28721201814563, -23.595886519098837, 17.300387312530933},
                                      {4.107059111542203, -2.9478499167379106, 0.5448431082926601},
                                      {3.9486908534822946, -2.908902115962949, 0.5518191394370137},
                                      {3.3184196573706015, -2.488488024314874, 0.51004894012372},
                                      {2.300652019954817, -1.6689039845747493, 0.4188073119525673},
                                      {1.891301407787398, -1.2679958271945868, 0.37680408948524835},
                                      {1.8750014808534479, -1.2500016453999487, 0.3750001645474248},
                                      {1.875, -1.25, 0.375}};
  x /= 1.01;
  for (int k = 0; k < steps; ++k) {
    const double* p = kSchedule[std::min(k, 7)];
    const double y = k < 7 ? x / 1.01 : x;
    x = p[0] * y + p[1] * y * y * y + p[2] * y * y * y * y * y;
  }
  return x;
}

}  // namespace

TEST_CASE_TEMPLATE(
    "msign: Polar Express keeps the SVD's singular vectors and maps each singular value by the paper's "
    "schedule, into msign_band's band",
    T, float, double) {
  geomopt::Rng rng(14);
  const bool single = std::is_same_v<T, float>;
  std::vector<std::pair<int, int>> shapes{{64, 64}, {200, 48}, {48, 200}};
  if (!kSanitized) {  // BDCSVD at -O0 under the sanitizers takes minutes at these shapes
    shapes.emplace_back(512, 512);
    shapes.emplace_back(512, 128);
  }
  for (const auto& shape : shapes) {
    const int rows = shape.first, cols = shape.second;
    const int k = std::min(rows, cols);
    CAPTURE(rows);
    CAPTURE(cols);
    Eigen::VectorXd s(k);
    for (int i = 0; i < k; ++i) s(i) = std::pow(1e-3, i / (k - 1.0));  // ill-conditioned: s over [1e-3, 1]
    for (const bool gaussian_input : {true, false}) {
      CAPTURE(gaussian_input);
      const MatD m = gaussian_input ? gaussian(rng, rows, cols) : with_singular_values(rng, rows, cols, s);
      const MatD mt = Mat<T>(m.cast<T>()).template cast<double>();  // the input msign sees
      const Eigen::BDCSVD<MatD> svd(mt, Eigen::ComputeThinU | Eigen::ComputeThinV);
      const Eigen::VectorXd& sv = svd.singularValues();
      const double f = mt.norm();
      for (const int steps : {5, 8}) {
        CAPTURE(steps);
        const geomopt::MsignOptions pe{.method = geomopt::MsignMethod::polar_express, .steps = steps};
        const MatD x = geomopt::msign(Mat<T>(m.cast<T>()), pe).template cast<double>();
        // In the SVD's bases the result is diagonal, p(s_i / |M|_F) on the diagonal: the singular vectors are kept
        // and each singular value went through the schedule's quintics.
        const MatD d = svd.matrixU().transpose() * x * svd.matrixV();
        Eigen::VectorXd expected(k);
        for (int i = 0; i < k; ++i) expected(i) = polar_express_scalar(sv(i) / (f + pe.eps), steps);
        const double tol = single ? 2e-4 : 1e-10;
        CHECK((d.diagonal() - expected).cwiseAbs().maxCoeff() <= tol);
        CHECK((d - MatD(d.diagonal().asDiagonal())).cwiseAbs().maxCoeff() <= tol);
        // Every singular value of the result in the band msign_band states for the input's s_min / |M|_F.
        const auto [lo, hi] = geomopt::msign_band(pe, sv(k - 1) / (f + pe.eps));
        const Eigen::VectorXd out = Eigen::BDCSVD<MatD>(x).singularValues();
        CHECK(out.minCoeff() >= lo - tol);
        CHECK(out.maxCoeff() <= hi + tol);
        // Eight steps take every singular value above 1e-3 |M|_F to 1 (within 1e-14 in exact arithmetic): there the
        // result is the SVD's U V^T to rounding.
        if (steps == 8) {
          Eigen::Index r = 0;
          while (r < k && sv(r) >= 1e-3 * f) ++r;
          REQUIRE(r > 0);
          const MatD err = svd.matrixU().leftCols(r).transpose() * (x - svd.matrixU() * svd.matrixV().transpose()) *
                           svd.matrixV().leftCols(r);
          CHECK(err.cwiseAbs().maxCoeff() <= (single ? 1e-4 : 1e-12));
        }
      }
    }
  }
  // The published band (5 steps, s_min = 1e-3) and its convergence: 8 steps reach 1 to rounding.
  const auto [lo5, hi5] = geomopt::msign_band({.method = geomopt::MsignMethod::polar_express}, 1e-3);
  CHECK(lo5 == doctest::Approx(0.8401).epsilon(1e-3));
  CHECK(hi5 == doctest::Approx(1.1236).epsilon(1e-3));
  const auto [lo8, hi8] = geomopt::msign_band({.method = geomopt::MsignMethod::polar_express, .steps = 8}, 1e-3);
  CHECK(lo8 > 1 - 1e-12);
  CHECK(hi8 < 1 + 1e-12);
  CHECK_THROWS_AS(geomopt::msign_band({.method = geomopt::MsignMethod::svd}, 1e-3), std::invalid_argument);
  // After the schedule's eight quintics the last repeats.
  CHECK(geomopt::polar_express_coefficients(7) == std::array<double, 3>{1.875, -1.25, 0.375});
  CHECK(geomopt::polar_express_coefficients(30) == geomopt::polar_express_coefficients(7));
}

TEST_CASE_TEMPLATE("msign_batched: every matrix gets the bits msign_inplace gives it alone, on 1 to 3 threads", T,
                   float, double) {
  geomopt::Rng rng(15);
  using geomopt::MsignMethod;
  const std::vector<geomopt::MsignOptions> options{
      {},
      {.method = MsignMethod::polar_express},
      {.method = MsignMethod::polar_express, .steps = 9, .polish_steps = 1},
      {.method = MsignMethod::svd},
      {.method = MsignMethod::gram}};
  // 3 x 5 and 10 x 3 matrices start at addresses of every alignment; 64 x 64 ones take several product panels.
  for (const auto& shape : {std::pair{64, 64}, {3, 5}, {10, 3}}) {
    const int rows = shape.first, cols = shape.second, batch = 7;
    CAPTURE(rows);
    CAPTURE(cols);
    Mat<T> all = gaussian(rng, rows, batch * cols).cast<T>();
    all.middleCols(2 * cols, cols).setZero();                // msign(0) = 0
    all.middleCols(3 * cols, cols) *= T(1e-30);              // tiny, not zero
    all(0, 4 * cols) = std::numeric_limits<T>::quiet_NaN();  // NaN stays NaN
    for (std::size_t which = 0; which < options.size(); ++which) {
      const auto& o = options[which];
      CAPTURE(which);
      Mat<T> expected = all;
      geomopt::MsignWorkspace<T> one;
      for (int i = 0; i < batch; ++i) geomopt::msign_inplace(expected.middleCols(i * cols, cols), o, one);
      const auto same = [&](const Mat<T>& got) {
        // NaN == NaN is false: compare the bits.
        return got.size() == expected.size() &&
               std::memcmp(got.data(), expected.data(), sizeof(T) * static_cast<std::size_t>(got.size())) == 0;
      };
      for (int threads : {1, 2, 3}) {
        CAPTURE(threads);
        geomopt::MsignBatchWorkspace<T> ws(rows, cols, threads);
        CHECK(ws.threads() == threads);
        Mat<T> by_pointer = all;
        geomopt::msign_batched(by_pointer.data(), batch, rows, cols, o, ws);
        CHECK(same(by_pointer));
        Mat<T> side_by_side = all;
        geomopt::msign_batched(side_by_side, cols, o, ws);
        CHECK(same(side_by_side));
        // A block of a taller matrix: its columns are `rows` apart no more.
        Mat<T> taller = Mat<T>::Constant(rows + 3, batch * cols, T(7));
        taller.topRows(rows) = all;
        geomopt::msign_batched(taller.topRows(rows), cols, o, ws);
        CHECK(same(taller.topRows(rows)));
        CHECK((taller.bottomRows(3).array() == T(7)).all());
      }
    }
    // The iterative methods iterate on the tall orientation: msign(M^T) = msign(M)^T bit for bit when M is not square.
    const Mat<T> m = all.leftCols(cols);
    for (const auto& o : {options[0], options[1]}) {
      if (rows == cols) break;
      const Mat<T> a = geomopt::msign(m, o), b = geomopt::msign(Mat<T>(m.transpose()), o);
      CHECK((a.array() == b.transpose().array()).all());
    }
  }
  geomopt::MsignBatchWorkspace<T> ws;
  Mat<T> bad(4, 10);
  CHECK_THROWS_WITH_AS(geomopt::msign_batched(bad, 3, {}, ws), doctest::Contains("no whole number"),
                       std::invalid_argument);
  CHECK_THROWS_AS(geomopt::msign_batched(bad.data(), -1, 4, 10, {}, ws), std::invalid_argument);
  CHECK_THROWS_AS(geomopt::MsignBatchWorkspace<T>(4, 4, 0), std::invalid_argument);
  geomopt::msign_batched(bad.data(), 0, 4, 10, {}, ws);  // an empty batch is no error
}

namespace {

template <class T>
struct MuonNet {
  Mat<T> w;                               // 4 x 2: Muon
  Eigen::Matrix<T, Eigen::Dynamic, 1> b;  // a vector: the fallback
  GEOMOPT_PTREE(w, b)
};

// The sign of a symmetric 2 x 2 matrix with eigenvalues of both signs: (2 S - tr(S) I) / (l1 - l2).
Eigen::Matrix2d sign2(const Eigen::Matrix2d& s) {
  const double tr = s.trace(), det = s.determinant();
  REQUIRE(det < 0);
  return (2 * s - tr * Eigen::Matrix2d::Identity()) / std::sqrt(tr * tr - 4 * det);
}

}  // namespace

TEST_CASE("Muon: the first two steps against a hand computation") {
  const double lr = 0.1, wd = 0.5, beta = 0.9;
  MuonNet<double> p{MatD::Constant(4, 2, 0.5), Eigen::VectorXd::Constant(3, 1.0)};
  MuonNet<double> g{MatD::Zero(4, 2), Eigen::VectorXd::Constant(3, 0.25)};
  g.w(0, 0) = 3;
  g.w(1, 1) = -2;
  const MatD p0 = p.w;
  geomopt::Muon muon({.lr = lr,
                      .momentum = beta,
                      .nesterov = true,
                      .ns_steps = 5,
                      .weight_decay = wd,
                      .msign = geomopt::MsignMethod::svd,
                      .fallback = {.lr = 0.01, .weight_decay = 0}});
  auto st = muon.init(p);
  const auto r1 = muon.step(p, g, st);
  CHECK(r1.lr == lr);
  // Step 1: B = (1 - beta) G1, U = (1 - beta) G1 + beta B, msign(U) = diag(1, -1) on top; scale sqrt(4 / 2).
  MatD e1 = MatD::Zero(4, 2);
  e1(0, 0) = 1;
  e1(1, 1) = -1;
  const MatD p1 = (1 - lr * wd) * p0 - lr * std::sqrt(2.0) * e1;
  CHECK((p.w - p1).norm() < 1e-14);
  // The vector leaf took AdamW's first step: -lr sign(g) (bias-corrected m / sqrt(v) = 1).
  CHECK((p.b.array() - (1.0 - 0.01 * 0.25 / (0.25 + 1e-8))).abs().maxCoeff() < 1e-12);
  // Step 2: B = beta (1 - beta) G1 + (1 - beta) G2, U = (1 - beta) G2 + beta B: on top the symmetric
  // S = 0.081 G1 + 0.19 G2 with G2 = [0 1; 1 0].
  g.w.setZero();
  g.w(0, 1) = 1;
  g.w(1, 0) = 1;
  muon.step(p, g, st);
  Eigen::Matrix2d s;
  s << 0.081 * 3, 0.19, 0.19, 0.081 * -2;
  MatD e2 = MatD::Zero(4, 2);
  e2.topRows(2) = sign2(s);
  const MatD p2 = (1 - lr * wd) * p1 - lr * std::sqrt(2.0) * e2;
  CHECK((p.w - p2).norm() < 1e-14);
  // The momentum is the only state of a Muon leaf: B = 0.09 G1 + 0.1 G2.
  MatD b = MatD::Zero(4, 2);
  b(0, 0) = 0.27;
  b(1, 1) = -0.18;
  b(0, 1) = b(1, 0) = 0.1;
  int seen = 0;
  st.for_each_slot([&](const std::string& path, std::string_view name, auto data) {
    if (path != "w") return;
    ++seen;
    CHECK(name == "momentum_buffer");
    CHECK((MatD(data) - b).norm() < 1e-15);
  });
  CHECK(seen == 1);
}

TEST_CASE("Muon: Newton-Schulz steps, plain momentum and the shape scales") {
  // Diagonal gradients stay diagonal under Newton-Schulz: each entry is the scalar quintic applied five times to
  // g_i / |G|_F, computed here from the coefficients.
  auto quintic5 = [](double x) {
    for (int k = 0; k < 5; ++k) x = 3.4445 * x - 4.7750 * x * x * x + 2.0315 * x * x * x * x * x;
    return x;
  };
  for (auto scale : {geomopt::MuonScale::original, geomopt::MuonScale::match_rms_adamw, geomopt::MuonScale::none}) {
    MuonNet<double> p{MatD::Zero(4, 2), Eigen::VectorXd::Zero(2)};
    MuonNet<double> g{MatD::Zero(4, 2), Eigen::VectorXd::Zero(2)};
    g.w(0, 0) = 3;
    g.w(1, 1) = -2;
    geomopt::Muon muon({.lr = 1, .momentum = 0.5, .nesterov = false, .scale = scale});
    auto st = muon.init(p);
    muon.step(p, g, st);
    const double k = scale == geomopt::MuonScale::original          ? std::sqrt(2.0)
                     : scale == geomopt::MuonScale::match_rms_adamw ? 0.2 * 2.0
                                                                    : 1.0;
    // U = B = 0.5 G, scaled by 1 / (|U|_F + 1e-7).
    const double norm = 0.5 * std::sqrt(13.0) + 1e-7;
    CHECK(p.w(0, 0) == doctest::Approx(-k * quintic5(1.5 / norm)).epsilon(1e-12));
    CHECK(p.w(1, 1) == doctest::Approx(k * quintic5(1.0 / norm)).epsilon(1e-12));
    CHECK(p.w(0, 1) == 0);
  }
}

namespace {
struct Tree {
  Mat<float> a, b;
  Eigen::VectorXf c;
  geomopt::Stiefel<float> s;
  GEOMOPT_PTREE(a, b, c, s)
};
}  // namespace

TEST_CASE("Muon: state bytes, leaf choice by rule, and errors that name the leaf") {
  geomopt::Rng rng(3);
  Tree p{Mat<float>::Ones(8, 5), Mat<float>::Ones(3, 7), Eigen::VectorXf::Ones(6),
         geomopt::Stiefel<float>::random_point(rng, 9, 3)};
  geomopt::Muon muon;
  {
    auto st = muon.init(p);
    // a and b: momentum only (40 + 21 floats); c: AdamW's two moments; s: Riemannian AdamW's two moments in the
    // 9 * 3 - 6 = 21 tangent coordinates.
    CHECK(st.nbytes() == (40 + 21 + 2 * 6 + 2 * 21) * sizeof(float));
    CHECK(st.muon_leaf_count() == 2);
    CHECK(st.muon_leaf(0));
    CHECK(!st.muon_leaf(2));
    CHECK(st.optimizer() == "Muon");
  }
  {
    auto st = geomopt::ManifoldMuon().init(p);
    // s: its momentum, N x n, and its n x n multiplier (StiefelMuonOptions::warm_start).
    CHECK(st.nbytes() == (40 + 21 + 2 * 6 + 27 + 9) * sizeof(float));
    CHECK(st.muon_leaf(3));
  }
  {
    auto st = muon.init(p, [](const geomopt::ptree::Path& path) {
      geomopt::LeafOptions o;
      if (path.str() == "b") o.muon = false;
      if (path.str() == "a") o.frozen = true;
      return o;
    });
    CHECK(st.nbytes() == (2 * 21 + 2 * 6 + 2 * 21) * sizeof(float));
    CHECK(st.leaf_frozen(0));
    CHECK(!st.muon_leaf(1));
  }
  auto force = [](const char* which) {
    return [which](const geomopt::ptree::Path& path) {
      geomopt::LeafOptions o;
      if (path.str() == which) o.muon = true;
      return o;
    };
  };
  CHECK_THROWS_WITH_AS(muon.init(p, force("c")), doctest::Contains("c: Muon steps matrices of at least 2 x 2"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(muon.init(p, force("s")), doctest::Contains("s: Muon steps matrices"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(geomopt::Muon({.momentum = 1}), doctest::Contains("momentum must be in [0, 1)"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(geomopt::ManifoldMuon({.stiefel = {.tolerance = 0}}), doctest::Contains("tolerance"),
                       std::invalid_argument);
  // A tree of another shape throws before anything is written.
  auto st = muon.init(p);
  Tree q = p, g = p;
  q.a = Mat<float>::Ones(5, 8);
  g.a = Mat<float>::Ones(5, 8);
  const Tree q0 = q;
  CHECK_THROWS_WITH_AS(muon.step(q, g, st), doctest::Contains("a: the leaf does not match"), geomopt::StructureError);
  CHECK(q.b == q0.b);
  CHECK(q.c == q0.c);
}

namespace {
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Three 5 x 3 heads stored as one row-major 15 x 3 leaf, three 6 x 2 experts as one column-major 6 x 6 leaf.
struct Stacked {
  RowMat heads;
  Mat<float> experts;
  geomopt::Stiefel<float> s;
  GEOMOPT_PTREE(heads, experts, s)
};
// The same matrices as leaves of their own.
struct Apart {
  std::vector<RowMat> heads;
  std::vector<Mat<float>> experts;
  geomopt::Stiefel<float> s;
  GEOMOPT_PTREE(heads, experts, s)
};

// The Stacked tree whose memory holds Apart's matrices one after another.
Stacked stack(const Apart& a) {
  Stacked t{RowMat(15, 3), Mat<float>(6, 6), a.s};
  for (int k = 0; k < 3; ++k) {
    std::copy_n(a.heads[k].data(), 15, t.heads.data() + 15 * k);
    std::copy_n(a.experts[k].data(), 12, t.experts.data() + 12 * k);
  }
  return t;
}
}  // namespace

TEST_CASE("Muon: a leaf of several matrices steps bitwise as those matrices stepped alone") {
  geomopt::Rng rng(17);
  auto random_apart = [&] {
    Apart a;
    for (int k = 0; k < 3; ++k) {
      a.heads.push_back(RowMat::Random(5, 3));
      a.experts.push_back(Mat<float>::Random(6, 2));
    }
    a.s = geomopt::Stiefel<float>::random_point(rng, 7, 3);
    return a;
  };
  const Apart start = random_apart();
  std::vector<Apart> grads;
  for (int k = 0; k < 4; ++k) grads.push_back(random_apart());
  const auto three = [](const geomopt::ptree::Path& path) {
    return geomopt::LeafOptions{.muon_matrices = path.str() == "s" ? 1 : 3};
  };
  for (const geomopt::MuonScale scale : {geomopt::MuonScale::original, geomopt::MuonScale::match_rms_adamw}) {
    geomopt::ManifoldMuon muon({.lr = 0.05, .weight_decay = 0.1, .scale = scale});
    Apart apart = start;
    Stacked stacked = stack(start);
    auto sa = muon.init(apart);
    auto ss = muon.init(stacked, three);
    for (const Apart& g : grads) {
      muon.step(apart, g, sa);
      muon.step(stacked, stack(g), ss);
    }
    const Stacked expected = stack(apart);
    CHECK(stacked.heads == expected.heads);
    CHECK(stacked.experts == expected.experts);
    CHECK(stacked.s.value() == expected.s.value());
    // One Newton-Schulz over the whole leaf, scaled by its whole shape, is another step.
    Stacked whole = stack(start);
    auto sw = muon.init(whole);
    for (const Apart& g : grads) muon.step(whole, stack(g), sw);
    CHECK(whole.experts != expected.experts);
    // The checkpoint's per-leaf options name the split.
    double recorded = 0;
    ss.for_each_leaf_option([&](const std::string& path, std::string_view name, auto value) {
      if constexpr (std::is_same_v<decltype(value), double>)
        if (path == "experts" && name == "muon_matrices") recorded = value;
    });
    CHECK(recorded == 3);
  }
  // A split that does not divide the leaf, leaves matrices under 2 x 2, or falls on a Stiefel leaf names the leaf.
  Stacked p = stack(start);
  const auto split = [](const char* which, int m) {
    return [which, m](const geomopt::ptree::Path& path) {
      return geomopt::LeafOptions{.muon_matrices = path.str() == which ? m : 1};
    };
  };
  geomopt::ManifoldMuon muon;
  CHECK_THROWS_WITH_AS(muon.init(p, split("heads", 4)),
                       doctest::Contains("heads: LeafOptions::muon_matrices = 4 needs a matrix leaf whose rows split "
                                         "into that many matrices of at least 2 x 2; this is a 15x3 row-major matrix"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(muon.init(p, split("experts", 6)), doctest::Contains("experts: LeafOptions::muon_matrices = 6"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(muon.init(p, split("experts", 0)), doctest::Contains("a 6x6 matrix"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(muon.init(p, split("s", 3)), doctest::Contains("s: LeafOptions::muon_matrices = 3"),
                       std::invalid_argument);
}

TEST_CASE("Muon: clipping and the non-finite policy cover its leaves") {
  geomopt::Rng rng(5);
  MuonNet<double> p{gaussian(rng, 4, 2), Eigen::VectorXd::Ones(3)};
  MuonNet<double> g{gaussian(rng, 4, 2), Eigen::VectorXd::Constant(3, 2.0)};
  geomopt::Muon muon({}, {.clip_norm = 1.0, .non_finite = geomopt::NonFinitePolicy::skip});
  auto st = muon.init(p);
  const auto report = muon.step(p, g, st);
  CHECK(report.grad_norm == doctest::Approx(std::sqrt(g.w.squaredNorm() + g.b.squaredNorm())).epsilon(1e-14));
  CHECK(report.clip_scale < 1);
  const auto p1 = p;
  std::vector<double> before;
  st.for_each_slot([&](const std::string&, std::string_view, auto d) {
    for (Eigen::Index i = 0; i < d.size(); ++i) before.push_back(d.data()[i]);
  });
  g.w(1, 1) = std::numeric_limits<double>::infinity();
  const auto skipped = muon.step(p, g, st);
  CHECK(!skipped.applied);
  REQUIRE(skipped.non_finite_leaf != nullptr);
  CHECK(*skipped.non_finite_leaf == "w");
  CHECK(p.w == p1.w);
  CHECK(p.b == p1.b);
  CHECK(st.step_count() == 1);
  std::vector<double> after;
  st.for_each_slot([&](const std::string&, std::string_view, auto d) {
    for (Eigen::Index i = 0; i < d.size(); ++i) after.push_back(d.data()[i]);
  });
  CHECK(before == after);
}

TEST_CASE("ManifoldMuon direction and polar step in long double agree with double") {
  using L = long double;
  geomopt::Rng rng(29);
  const MatD w = geomopt::Stiefel<double>::random_point(rng, 9, 4).value(), u = MatD::Random(9, 4);
  const Eigen::Matrix<L, -1, -1> wl = w.cast<L>(), ul = u.cast<L>();
  MatD a(9, 4);
  Eigen::Matrix<L, -1, -1> al(9, 4);
  const geomopt::StiefelMuonOptions solved{.tolerance = 1e-12, .max_iterations = 1000};
  geomopt::StiefelMuonDirection<double>(9, 4).solve(w.data(), u.data(), a.data(), solved);
  const auto r = geomopt::StiefelMuonDirection<L>(9, 4).solve(wl.data(), ul.data(), al.data(), solved);
  CHECK(r.converged);
  CHECK((al.cast<double>() - a).norm() < 1e-8);
  MatD wd = w;
  Eigen::Matrix<L, -1, -1> wll = wl;
  geomopt::detail::StiefelMuonPolarStep<double> step(9, 4);
  geomopt::detail::StiefelMuonPolarStep<L> step_l(9, 4);
  step.prepare(wd.data(), u.data(), 0.1, solved, nullptr);
  step.apply(wd.data(), u.data());
  step_l.prepare(wll.data(), ul.data(), 0.1, solved, nullptr);
  step_l.apply(wll.data(), ul.data());
  CHECK((wll.cast<double>() - wd).norm() < 1e-8);
  CHECK((wll.transpose() * wll - Eigen::Matrix<L, -1, -1>::Identity(4, 4)).norm() < 1e-15L);
}

TEST_CASE("ManifoldMuon direction: closed forms on St(n, n) and the sphere") {
  geomopt::Rng rng(21);
  for (auto method : {geomopt::StiefelMuonMethod::fixed_point, geomopt::StiefelMuonMethod::dual_ascent}) {
    const geomopt::StiefelMuonOptions o{.method = method, .tolerance = 1e-11, .max_iterations = 5000, .smoothing = 0};
    // Square: A = W Omega with Omega the skew maximizer of <skew(W^T G), Omega>, which is msign(skew(W^T G)).
    const MatD w = geomopt::Stiefel<double>::random_point(rng, 7, 7).value();
    const MatD g = gaussian(rng, 7, 7);
    const MatD k = w.transpose() * g;
    const MatD expected = w * reference_msign(0.5 * (k - k.transpose()));
    geomopt::StiefelMuonReport r;
    const MatD a = geomopt::stiefel_muon_direction(w, g, o, &r);
    CHECK(r.converged);
    CHECK((a - expected).norm() < 1e-8);
    // Sphere: the projected gradient, normalized.
    const MatD x = geomopt::Stiefel<double>::random_point(rng, 9, 1).value();
    const MatD gx = gaussian(rng, 9, 1);
    const MatD proj = gx - x * (x.transpose() * gx);
    CHECK((geomopt::stiefel_muon_direction(x, gx, o) - proj / proj.norm()).norm() < 1e-10);
  }
}

TEST_CASE_TEMPLATE("ManifoldMuon direction: tangent, unit spectral norm, optimal, better aligned than projection", T,
                   float, double) {
  geomopt::Rng rng(22);
  const bool single = std::is_same_v<T, float>;
  for (int rank : {6, 2}) {  // a full-rank gradient and a rank-deficient one
    CAPTURE(rank);
    const MatD w = geomopt::Stiefel<double>::random_point(rng, 30, 6).value();
    const MatD g = gaussian(rng, 30, rank) * gaussian(rng, rank, 6);
    const Mat<T> wt = w.cast<T>(), gt = g.cast<T>();
    for (auto method : {geomopt::StiefelMuonMethod::fixed_point, geomopt::StiefelMuonMethod::dual_ascent}) {
      CAPTURE(static_cast<int>(method));
      geomopt::StiefelMuonReport r;
      std::vector<double> duals;
      const bool fixed = method == geomopt::StiefelMuonMethod::fixed_point;
      // Exact (smoothing 0) on the regular problem; the rank-2 one is degenerate (the optimal Z is rank-deficient)
      // and takes the default smoothing, with which the fixed point converges and dual ascent runs out and projects.
      const geomopt::StiefelMuonOptions o{.method = method, .max_iterations = 500, .smoothing = rank == 6 ? 0.0 : 1e-4};
      const MatD a = geomopt::stiefel_muon_direction(wt, gt, o, &r, &duals).template cast<double>();
      CHECK(r.converged == (rank == 6 || fixed));
      CHECK(r.projected == !r.converged);
      const MatD wd = wt.template cast<double>(), gd = gt.template cast<double>();
      // float W is orthonormal to ~1e-7 only, and the smoothed degenerate solve amplifies that by up to 1 / mu.
      CHECK((wd.transpose() * a + a.transpose() * wd).norm() <= (single ? (rank == 6 ? 2e-5 : 2e-4) : 1e-6));
      CHECK(spectral_norm(a) == doctest::Approx(1).epsilon(single ? 1e-5 : 1e-9));
      const double value = (gd.cwiseProduct(a)).sum();
      CHECK(value == doctest::Approx(r.primal).epsilon(1e-6));
      if (rank == 6) CHECK(r.dual - r.primal <= 1e-6 * r.dual);           // zero duality gap: optimal
      if (rank != 6 && fixed) CHECK(r.dual - r.primal <= 1e-3 * r.dual);  // within the smoothing's bound
      // At least as aligned as the normalized projected gradient, a feasible point.
      const MatD proj = gd - wd * (0.5 * (wd.transpose() * gd + gd.transpose() * wd));
      CHECK(value >= (gd.cwiseProduct(proj)).sum() / spectral_norm(proj) - 1e-5 * value);
      if (method == geomopt::StiefelMuonMethod::dual_ascent) {
        // The dual |G + W X|_* (an upper bound, minimized) improves at every accepted step.
        for (std::size_t i = 1; i < duals.size(); ++i) CHECK(duals[i] <= duals[i - 1] * (1 + 1e-12));
        CHECK(duals.back() < duals.front());
      }
    }
  }
}

namespace {
template <class T>
struct StiefelNet {
  geomopt::Stiefel<T> w;
  Mat<T> m;
  GEOMOPT_PTREE(w, m)
};
}  // namespace

namespace {

// The multiplier a ManifoldMuon state keeps for Stiefel leaf `path` (StiefelMuonOptions::warm_start).
template <class State>
MatD multiplier_of(State& st, const std::string& path) {
  MatD out;
  st.for_each_slot([&](const std::string& p, std::string_view name, auto data) {
    if (p == path && name == "multiplier") out = data.template cast<double>();
  });
  return out;
}

// ManifoldMuon's polar step from W along the momentum U with the multiplier S, by dense matrix functions (JacobiSVD):
// A = msign(U - W sym(W^T U) + W S) projected on the tangent space, then W <- msign(W - lr A_t).
MatD reference_polar_step(const MatD& w, const MatD& u, const MatD& s, double lr) {
  const MatD k = w.transpose() * u;
  const MatD a = reference_msign(u - w * (0.5 * (k + k.transpose())) + w * s);
  const MatD wa = w.transpose() * a;
  return reference_msign(w - lr * (a - w * (0.5 * (wa + wa.transpose()))));
}

}  // namespace

TEST_CASE("ManifoldMuon: the warm-started step against dense matrix functions, and its multiplier update") {
  geomopt::Rng rng(33);
  const double lr = 0.3;
  StiefelNet<double> p{geomopt::Stiefel<double>::random_point(rng, 11, 4), MatD::Zero(2, 2)};
  // Plain momentum 0: the momentum is the gradient. smoothing 0, so that msign is the SVD's.
  geomopt::ManifoldMuon opt({.lr = lr,
                             .momentum = 0,
                             .nesterov = false,
                             .stiefel = {.max_iterations = 1, .smoothing = 0, .warm_start = true}});
  auto st = opt.init(p);
  MatD s = MatD::Zero(4, 4);  // the cold start: U's tangent projection
  CHECK(multiplier_of(st, "w") == s);
  for (int k = 0; k < 3; ++k) {
    CAPTURE(k);
    const MatD g = gaussian(rng, 11, 4);
    const MatD w = p.w.value();
    opt.step(p, StiefelNet<double>{geomopt::Stiefel<double>(g), MatD::Zero(2, 2)}, st);
    CHECK((p.w.value() - reference_polar_step(w, g, s, lr)).norm() < 1e-12);
    CHECK(st.direction_report(0).iterations == 1);
    CHECK(geomopt::check(p.w) < 1e-14);
    // The next multiplier is the fixed-point map's value: with H = (Z^T Z)^{1/2} at the evaluated S, the symmetric
    // S' with H S' + S' H = Omega H - H Omega, Omega = skew(W^T U).
    const MatD next = multiplier_of(st, "w");
    const MatD kk = w.transpose() * g;
    const MatD omega = 0.5 * (kk - kk.transpose());
    const MatD z = g - w * (0.5 * (kk + kk.transpose())) + w * s;
    Eigen::SelfAdjointEigenSolver<MatD> eig(z.transpose() * z);
    const MatD h = eig.eigenvectors() * eig.eigenvalues().cwiseSqrt().asDiagonal() * eig.eigenvectors().transpose();
    CHECK((next - next.transpose()).norm() < 1e-12);
    CHECK((h * next + next * h - (omega * h - h * omega)).norm() < 1e-10 * h.norm());
    CHECK((next - s).norm() > 1e-3);  // it moved
    s = next;
  }
}

TEST_CASE("ManifoldMuon: one multiplier update per step converges across steps to the exact direction") {
  // lr = 0 keeps W and the gradient fixed, so the warm-started updates of successive steps are the iteration of one
  // solve: the multiplier reaches the exact solve's, and the report says converged.
  geomopt::Rng rng(34);
  StiefelNet<double> p{geomopt::Stiefel<double>::random_point(rng, 30, 6), MatD::Zero(2, 2)};
  const MatD g = gaussian(rng, 30, 6);
  geomopt::ManifoldMuon opt(
      {.lr = 0,
       .momentum = 0,
       .nesterov = false,
       .stiefel = {.tolerance = 1e-10, .max_iterations = 1, .smoothing = 0, .acceleration = 0, .warm_start = true}});
  auto st = opt.init(p);
  const StiefelNet<double> grads{geomopt::Stiefel<double>(g), MatD::Zero(2, 2)};
  int steps = 0;
  while (!st.direction_report(0).converged && steps < 2000) {
    opt.step(p, grads, st);
    ++steps;
  }
  CHECK(steps > 5);
  CHECK(st.direction_report(0).converged);
  // The exact solve's multiplier, from the cold start.
  MatD exact_x = MatD::Zero(6, 6);
  geomopt::StiefelMuonDirection<double> direction(30, 6);
  MatD out(30, 6);
  const auto r = direction.solve(p.w.value().data(), g.data(), out.data(),
                                 {.tolerance = 1e-12, .max_iterations = 500, .smoothing = 0}, nullptr, exact_x.data());
  REQUIRE(r.converged);
  CHECK((multiplier_of(st, "w") - exact_x).norm() < 1e-8 * exact_x.norm());
}

TEST_CASE("ManifoldMuon: float weights stay on the manifold for 10^4 steps" * doctest::skip(kSanitized)) {
  geomopt::Rng rng(31);
  StiefelNet<float> p{geomopt::Stiefel<float>::random_point(rng, 48, 12), Mat<float>::Zero(3, 3)};
  StiefelNet<float> g{p.w, Mat<float>::Ones(3, 3)};
  // The default solve, one warm-started multiplier update per step: the retraction, not the direction's accuracy,
  // keeps W on the manifold.
  geomopt::ManifoldMuon opt({.lr = 0.05});
  auto st = opt.init(p);
  for (int k = 0; k < 10000; ++k) {
    g.w = geomopt::Stiefel<float>(gaussian(rng, 48, 12).cast<float>());
    opt.step(p, g, st);
  }
  CHECK(geomopt::check(p.w) < 1e-5);
}

TEST_CASE("ManifoldMuon: each retraction is W - lr A to first order and stays on the manifold") {
  geomopt::Rng rng(32);
  // Halving lr quarters the gap to the first-order point.
  for (auto retraction : {geomopt::StiefelMuonRetraction::polar, geomopt::StiefelMuonRetraction::cayley,
                          geomopt::StiefelMuonRetraction::geodesic}) {
    CAPTURE(static_cast<int>(retraction));
    StiefelNet<double> q{geomopt::Stiefel<double>::random_point(rng, 12, 4), MatD::Zero(2, 2)};
    StiefelNet<double> gq{geomopt::Stiefel<double>(gaussian(rng, 12, 4)), MatD::Zero(2, 2)};
    const MatD a = geomopt::stiefel_muon_direction(q.w.value(), gq.w.value(), {.tolerance = 1e-12});
    double gaps[2];
    for (int h = 0; h < 2; ++h) {
      const double lr = 1e-2 / (1 << h);
      auto copy = q;
      geomopt::ManifoldMuon step({.lr = lr, .momentum = 0, .stiefel = {.tolerance = 1e-12}, .retraction = retraction});
      auto s = step.init(copy);
      step.step(copy, gq, s);
      CHECK(geomopt::check(copy.w) < 1e-13);
      gaps[h] = (copy.w.value() - (q.w.value() - lr * a)).norm();
    }
    CHECK(gaps[1] / gaps[0] == doctest::Approx(0.25).epsilon(0.05));
  }
}

TEST_CASE("ManifoldMuon: Brockett's cost on St(20, 5) reaches its minimum with a decaying step") {
  // f(W) = tr(W^T C W D), D = diag(5, 4, 3, 2, 1): the minimum pairs C's smallest eigenvalues with D's largest.
  geomopt::Rng rng(41);
  const MatD b = gaussian(rng, 20, 20);
  const MatD c = (b + b.transpose()) / 2;
  Eigen::VectorXd d(5);
  d << 5, 4, 3, 2, 1;
  const Eigen::VectorXd lambda = Eigen::SelfAdjointEigenSolver<MatD>(c).eigenvalues();  // ascending
  const double fmin = d.dot(lambda.head(5));
  StiefelNet<double> p{geomopt::Stiefel<double>::random_point(rng, 20, 5), MatD::Zero(2, 2)};
  StiefelNet<double> g{p.w, MatD::Zero(2, 2)};
  auto f = [&](const MatD& w) { return (w.transpose() * c * w * d.asDiagonal()).trace(); };
  geomopt::ManifoldMuon opt({.lr = 0.1, .momentum = 0.9},
                            {.schedule = [](std::int64_t t) { return std::pow(0.997, static_cast<double>(t)); }});
  auto st = opt.init(p);
  const double f0 = f(p.w.value());
  geomopt::StiefelMuonReport first;
  for (int k = 0; k < 6000; ++k) {
    g.w = geomopt::Stiefel<double>(MatD(2 * c * p.w.value() * d.asDiagonal()));
    opt.step(p, g, st);
    if (k == 0) first = st.direction_report(0);
  }
  CHECK(f(p.w.value()) - fmin <= 1e-6 * (f0 - fmin));
  CHECK(geomopt::check(p.w) < 1e-12);
  // The first step's solve was on record: one multiplier update from the cold start, and a direction whose objective
  // is within a percent of the dual bound (unit spectral norm up to the tangency residual it reports, so the
  // objective may pass the bound by as much). (At the minimum the tangent part of U vanishes and the direction is no
  // longer determined.)
  CHECK(first.iterations == 1);
  CHECK(first.projected == !first.converged);
  CHECK(std::abs(first.dual - first.primal) <= 1e-2 * first.dual);
  CHECK_THROWS_WITH_AS(st.direction_report(1), doctest::Contains("leaf 1 is not a Stiefel leaf"),
                       std::invalid_argument);
}

TEST_CASE("Muon: a leaf without a gradient sits the step out under MissingGradient::skip, keeping its own count") {
  geomopt::Rng rng(41);
  const MatD g1 = gaussian(rng, 4, 2), g3 = gaussian(rng, 4, 2);
  const Eigen::VectorXd b1 = Eigen::VectorXd::Constant(3, 0.5);
  geomopt::CommonOptions common;
  common.missing_gradient = geomopt::MissingGradient::skip;
  const geomopt::MuonOptions<> options{.lr = 0.1, .weight_decay = 0.1};
  geomopt::Muon muon(options, common);
  MuonNet<double> p{MatD::Constant(4, 2, 0.5), Eigen::VectorXd::Zero(3)};
  auto st = muon.init(p);
  muon.step(p, MuonNet<double>{g1, b1}, st);
  const MatD w1 = p.w;
  muon.step(p, MuonNet<double>{MatD(), b1}, st);  // w has no gradient
  CHECK(p.w == w1);
  CHECK(st.step_count() == 2);
  CHECK(st.leaf_step_count(0) == 1);
  CHECK(st.leaf_step_count(1) == 2);
  std::vector<std::pair<std::string, std::int64_t>> recorded;
  st.for_each_leaf_step([&](const std::string& path, std::int64_t t) { recorded.emplace_back(path, t); });
  CHECK(recorded == std::vector<std::pair<std::string, std::int64_t>>{{"w", 1}});
  muon.step(p, MuonNet<double>{g3, b1}, st);

  // Muon's update has no step count in it: w is where two steps with g1 and g3 take it, bitwise.
  geomopt::Muon plain(options);
  MuonNet<double> q{MatD::Constant(4, 2, 0.5), Eigen::VectorXd::Zero(3)};
  auto sq = plain.init(q);
  plain.step(q, MuonNet<double>{g1, b1}, sq);
  plain.step(q, MuonNet<double>{g3, b1}, sq);
  CHECK(p.w == q.w);

  // Restoring counts, as a checkpoint does; a count beyond the state's is refused, naming the leaf.
  st.set_leaf_step_count(0, 3);
  CHECK(st.leaf_step_count(0) == 3);
  CHECK_THROWS_WITH_AS(st.set_leaf_step_count(0, 4), "w: a leaf's step count must be from 0 to the state's 3, got 4",
                       std::invalid_argument);
  st.set_leaf_step_count(0, 1);
  st.set_step_count(5);
  CHECK(st.leaf_step_count(0) == 5);
  // Without skip, an empty gradient of a Muon leaf is a structure error, and nothing is written.
  geomopt::Muon erroring(options);
  auto se = erroring.init(p);
  const MatD before = p.w;
  CHECK_THROWS_AS(erroring.step(p, MuonNet<double>{MatD(), b1}, se), geomopt::StructureError);
  CHECK(p.w == before);
}

TEST_CASE("Muon: lr_scale and weight decay set between steps act as the same options given at init") {
  geomopt::Rng rng(42);
  Tree p0{gaussian(rng, 8, 5).cast<float>(), gaussian(rng, 3, 7).cast<float>(), Eigen::VectorXf::Ones(6),
          geomopt::Stiefel<float>::random_point(rng, 9, 3)};
  Tree g{gaussian(rng, 8, 5).cast<float>(), gaussian(rng, 3, 7).cast<float>(), Eigen::VectorXf::Constant(6, 0.3f),
         geomopt::Stiefel<float>(gaussian(rng, 9, 3).cast<float>())};
  geomopt::ManifoldMuon muon({.lr = 0.05, .weight_decay = 0.01});
  auto rule = [](const geomopt::ptree::Path& path) {
    geomopt::LeafOptions o;
    if (path.str() != "s") o.weight_decay = 0.2;
    o.lr_scale = 0.5;
    return o;
  };
  Tree a = p0, b = p0;
  auto sa = muon.init(a, rule);
  auto sb = muon.init(b);
  for (std::size_t i = 0; i < 4; ++i) {
    sb.set_leaf_lr_scale(i, 0.5);
    if (i != 3) sb.set_leaf_weight_decay(i, 0.2);
  }
  muon.step(a, g, sa);
  muon.step(b, g, sb);
  CHECK(a.a == b.a);
  CHECK(a.b == b.b);
  CHECK(a.c == b.c);
  CHECK(a.s.value() == b.s.value());
  CHECK_THROWS_WITH_AS(sb.set_leaf_lr_scale(0, -1), "a: lr_scale must be >= 0, got -1.000000", std::invalid_argument);
  CHECK_THROWS_WITH_AS(sb.set_leaf_weight_decay(3, 0.1), "s: weight decay does not apply to Stiefel leaves",
                       std::invalid_argument);
  CHECK_THROWS_AS(sb.set_leaf_weight_decay(2, -0.5), std::invalid_argument);  // the fallback's leaf, its own rule
}

namespace {
template <class T>
struct BorrowedNet {
  geomopt::ptree::BorrowedArray<T> w;        // row-major, Muon's
  geomopt::Borrowed<geomopt::Stiefel<T>> s;  // ManifoldMuon's
  GEOMOPT_PTREE(w, s)
};
template <class T>
struct OwnedNet {
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> w;
  geomopt::Stiefel<T> s;
  GEOMOPT_PTREE(w, s)
};
}  // namespace

TEST_CASE("ManifoldMuon: leaves over borrowed memory step as the owned leaves do, bitwise, in place") {
  geomopt::Rng rng(43);
  using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  OwnedNet<float> owned{gaussian(rng, 5, 3).cast<float>(), geomopt::Stiefel<float>::random_point(rng, 10, 4)};
  std::vector<float> w(owned.w.data(), owned.w.data() + owned.w.size());
  MatD s0 = owned.s.value().cast<double>();
  std::vector<float> s(owned.s.value().data(), owned.s.value().data() + owned.s.value().size());
  BorrowedNet<float> borrowed{{w.data(), 5, 3}, {s.data(), 10, 4}};
  geomopt::ManifoldMuon muon({.lr = 0.05});
  auto so = muon.init(owned);
  auto sb = muon.init(borrowed);
  CHECK(sb.muon_leaf(0));
  CHECK(sb.muon_leaf(1));
  for (int k = 0; k < 3; ++k) {
    const RowMat gw = gaussian(rng, 5, 3).cast<float>();
    Mat<float> gs = gaussian(rng, 10, 4).cast<float>();
    std::vector<float> gwv(gw.data(), gw.data() + gw.size()), gsv(gs.data(), gs.data() + gs.size());
    muon.step(owned, OwnedNet<float>{gw, geomopt::Stiefel<float>(gs)}, so);
    muon.step(borrowed, BorrowedNet<float>{{gwv.data(), 5, 3}, {gsv.data(), 10, 4}}, sb);
  }
  CHECK(std::equal(w.begin(), w.end(), owned.w.data()));
  CHECK(std::equal(s.begin(), s.end(), owned.s.value().data()));
  CHECK((owned.s.value().cast<double>() - s0).norm() > 1e-3);  // it moved
  CHECK(geomopt::check(borrowed.s) < 1e-5);
}
