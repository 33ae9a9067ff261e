// msign: the orthogonal polar factor of a matrix, msign(M) = U V^T for the thin SVD M = U S V^T, with the singular
// vectors of zero singular values left out (msign(0) = 0, and a rank-r matrix maps to a rank-r partial isometry).
//
//   Eigen::MatrixXf q = geomopt::msign(m);                                   // Newton-Schulz, Muon's defaults
//   geomopt::msign(m, {.method = geomopt::MsignMethod::polar_express});       // Polar Express, 5 steps
//   geomopt::msign(m, {.method = geomopt::MsignMethod::svd});                 // exact
//   geomopt::MsignWorkspace<float> ws(rows, cols);
//   geomopt::msign_inplace(m, {}, ws);                                        // allocates nothing
//   geomopt::MsignBatchWorkspace<float> bws(rows, cols);
//   geomopt::msign_batched(data, batch, rows, cols, {}, bws);                 // matrices one after another
//
// Four methods:
//   newton_schulz  X <- M / (|M|_F + eps), then `steps` times X <- a X + b X (X^T X) + c X (X^T X)^2 in T, on the
//                  tall orientation (M^T for a wide M: the Gram matrix is the smaller one). It maps each singular value
//                  s of X through the odd quintic p(s) = a s + b s^3 + c s^5 and keeps the singular vectors, so the
//                  result is U p^(k)(S / |M|_F) V^T: with Muon's coefficients (3.4445, -4.7750, 2.0315) the values do
//                  not converge to 1 but are pushed into a band around it (msign_band gives the band for any options).
//                  polish_steps cubic steps X <- 1.5 X - 0.5 X (X^T X) after them converge the band to 1
//                  quadratically.
//   polar_express  the same iteration with another quintic at each step: Polar Express's schedule (Amsel, Persson,
//                  Musco and Gower 2025; polar_express_coefficients), X <- M / (1.01 (|M|_F + eps)) first. Each
//                  step's quintic is the best odd approximation of 1 on the interval the previous steps left the
//                  singular values in, so 5 steps map [1e-3, 1] |M|_F into [0.84, 1.12], 8 to 1 within 1e-14.
//   svd            Eigen's BDCSVD in T; singular values below sqrt(max(rows, cols)) eps(T) s_max (the size of
//                  T's rounding in an exactly rank-deficient M: 3.8e-6 s_max for float at 1024 rows) count as zero.
//   gram           the eigendecomposition of the smaller Gram matrix M^T M (or M M^T), formed and solved in
//                  double: msign(M) = M V diag(1 / s) V^T. Exact to about eps(double) cond(M)^2 relative, so for
//                  float input it is as accurate as the SVD up to cond(M) ~ 1e4, and it is the fastest exact method
//                  for a tall matrix (one N n^2 product each way). Singular values below sqrt(4 k eps(double)) s_max
//                  (k = min(rows, cols); 3e-7 s_max for k = 100) count as zero: the Gram matrix cannot resolve them.
//
// Invariants:
//   - the result depends on M's values only (not on the workspace's history, nor on where M is stored): msign_batched
//     gives every matrix of a batch the bits msign_inplace gives it alone, whatever the number of threads, and the
//     iterative methods give msign(M^T) = msign(M)^T bit for bit for a non-square M;
//   - the iterative methods allocate nothing when given a workspace sized for M (their products are stack_gemm's
//     tiles, AVX2 + FMA where kernel_path() is avx2); svd and gram allocate Eigen's decomposition buffers;
//   - for float and double, a translation unit that links libgeomopt_optimizers (with its Eigen alignment; see
//     geomopt/manifolds/any_workspace.hpp) calls the library's compiled msign instead of instantiating these
//     templates (compiled_msign<T>; an expression that no Eigen::Ref binds is copied into a matrix first); other
//     scalars instantiate them here.
#pragma once

#include <Eigen/Core>
#include <Eigen/Eigenvalues>
#include <Eigen/SVD>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "geomopt/manifolds/any_workspace.hpp"
#include "geomopt/manifolds/detail/stack_gemm.hpp"
#include "geomopt/optimizers/detail/thread_pool.hpp"

namespace geomopt {

enum class MsignMethod { newton_schulz, svd, gram, polar_express };

/// The method's name in code: "newton_schulz", "svd", "gram", "polar_express".
inline const char* msign_method_name(MsignMethod m) noexcept {
  switch (m) {
    case MsignMethod::newton_schulz:
      return "newton_schulz";
    case MsignMethod::svd:
      return "svd";
    case MsignMethod::gram:
      return "gram";
    case MsignMethod::polar_express:
      return "polar_express";
  }
  return "msign";
}

struct MsignOptions {
  MsignMethod method = MsignMethod::newton_schulz;
  /// Newton-Schulz and Polar Express: quintic steps, each s <- a s + b s^3 + c s^5 on the singular values (Polar
  /// Express: the first `steps` of its schedule, the last quintic repeating after the schedule's eight).
  int steps = 5;
  /// Newton-Schulz: (a, b, c), Muon's published coefficients by default. Polar Express has its own schedule.
  std::array<double, 3> coefficients{3.4445, -4.7750, 2.0315};
  /// Newton-Schulz and Polar Express: cubic steps s <- 1.5 s - 0.5 s^3 after the quintic ones (0: none, as Muon
  /// does). Each squares the distance of the band from 1, so 4 to 6 of them bring Muon's band to rounding.
  int polish_steps = 0;
  /// Newton-Schulz and Polar Express: M is scaled by 1 / (|M|_F + eps) first (Polar Express: and by 1 / 1.01), so
  /// every singular value is at most 1.
  double eps = 1e-7;

  void validate() const {
    if (steps < 0 || steps > 100)
      throw std::invalid_argument("MsignOptions: steps must be in [0, 100], got " + std::to_string(steps));
    if (polish_steps < 0 || polish_steps > 100)
      throw std::invalid_argument("MsignOptions: polish_steps must be in [0, 100], got " +
                                  std::to_string(polish_steps));
    if (!(eps >= 0)) throw std::invalid_argument("MsignOptions: eps must be >= 0, got " + std::to_string(eps));
    for (double c : coefficients)
      if (!std::isfinite(c)) throw std::invalid_argument("MsignOptions: the coefficients must be finite");
  }
};

/// Polar Express's safety factor: its first polynomials are p(x / 1.01), and M is divided by 1.01 |M|_F, so that a
/// singular value that rounding lifts a little above the interval a polynomial was fitted on is not thrown far
/// beyond 1 by the steep first quintics (Amsel et al. 2025, section 3.4 and appendix G).
inline constexpr double kPolarExpressSafety = 1.01;

/// The quintic (a, b, c) of Polar Express's step k (k = 0, 1, ...): the published schedule of Amsel, Persson, Musco and
/// Gower, "The Polar Express: Optimal Matrix Sign Methods and Their Application to the Muon Algorithm" (2025,
/// arXiv:2505.16932), appendix A, implementation 1: the optimal odd quintics for singular values in [1e-3, 1] (after
/// the division by |M|_F), each composed with x / 1.01 (a / 1.01, b / 1.01^3, c / 1.01^5) but the eighth, the limit
/// (15/8, -10/8, 3/8) of the schedule, which repeats from step 7 on as in the paper's code.
inline std::array<double, 3> polar_express_coefficients(int k) {
  static constexpr std::array<std::array<double, 3>, 8> kSchedule{{
      {8.28721201814563, -23.595886519098837, 17.300387312530933},
      {4.107059111542203, -2.9478499167379106, 0.5448431082926601},
      {3.9486908534822946, -2.908902115962949, 0.5518191394370137},
      {3.3184196573706015, -2.488488024314874, 0.51004894012372},
      {2.300652019954817, -1.6689039845747493, 0.4188073119525673},
      {1.891301407787398, -1.2679958271945868, 0.37680408948524835},
      {1.8750014808534479, -1.2500016453999487, 0.3750001645474248},
      {1.875, -1.25, 0.375},
  }};
  if (k < 0) throw std::invalid_argument("polar_express_coefficients: step " + std::to_string(k) + " < 0");
  if (k >= static_cast<int>(kSchedule.size()) - 1) return kSchedule.back();
  const auto [a, b, c] = kSchedule[static_cast<std::size_t>(k)];
  constexpr double f = kPolarExpressSafety;
  return {a / f, b / (f * f * f), c / (f * f * f * f * f)};
}

namespace detail {

// The scale of the first step: X = M / (|M|_F + eps) times this.
inline double msign_initial_scale(const MsignOptions& o) {
  return o.method == MsignMethod::polar_express ? 1.0 / kPolarExpressSafety : 1.0;
}

// The (a, b, c) of step k of an iterative method, polish steps included (k >= o.steps).
inline std::array<double, 3> msign_step_coefficients(const MsignOptions& o, int k) {
  if (k >= o.steps) return {1.5, -0.5, 0.0};
  return o.method == MsignMethod::polar_express ? polar_express_coefficients(k) : o.coefficients;
}

inline bool msign_iterative(MsignMethod m) {
  return m == MsignMethod::newton_schulz || m == MsignMethod::polar_express;
}

}  // namespace detail

/// An estimate of the flops of msign of one rows x cols matrix under o, what Muon's threads and a sharded Muon's
/// ranks are balanced by. Per quintic step on the tall orientation (n x k, n >= k): the Gram matrix X^T X (n k^2, its
/// upper triangle), its square (k^3, likewise) and X (a I + b A + c A^2) (2 n k^2); times steps + polish_steps. svd
/// and gram are counted as Muon's default 5 steps: their cost has the same n k^2 order, with constants that depend
/// on the spectrum.
inline double msign_flops(Eigen::Index rows, Eigen::Index cols, const MsignOptions& o = {}) {
  const auto n = static_cast<double>(std::max(rows, cols)), k = static_cast<double>(std::min(rows, cols));
  const int steps = detail::msign_iterative(o.method) ? o.steps + o.polish_steps : MsignOptions{}.steps;
  return static_cast<double>(steps) * (3 * n * k * k + k * k * k);
}

/// The interval [lo, hi] that an iterative method (newton_schulz, polar_express) maps every singular value s of M
/// with s >= s_min (|M|_F + eps) into (the steps of `o` composed on the scalar, sampled on a logarithmic grid of
/// [s_min, 1] fine enough that the polynomials' slopes cannot hide an extremum between samples). Muon's options give
/// about [0.47, 1.20] for s_min = 1e-3 (5 quintic steps lift 1e-3 by 3.4445^5 ~ 490 at most); with polish_steps = 6,
/// 1 to rounding; Polar Express's 5 steps about [0.84, 1.12], 8 steps 1 within 1e-14. Throws std::invalid_argument for
/// svd and gram.
inline std::pair<double, double> msign_band(const MsignOptions& o, double s_min) {
  o.validate();
  if (!detail::msign_iterative(o.method))
    throw std::invalid_argument("msign_band: the band of an iterative method (newton_schulz, polar_express)");
  if (!(s_min > 0 && s_min <= 1))
    throw std::invalid_argument("msign_band: s_min must be in (0, 1], got " + std::to_string(s_min));
  const int total = o.steps + o.polish_steps;
  std::vector<std::array<double, 3>> coefficients;
  for (int k = 0; k < total; ++k) coefficients.push_back(detail::msign_step_coefficients(o, k));
  const double first = detail::msign_initial_scale(o);
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  constexpr int kSamples = 200000;
  const double log_min = std::log(s_min);
  for (int i = 0; i <= kSamples; ++i) {
    double s = first * std::exp(log_min * (1.0 - static_cast<double>(i) / kSamples));
    for (const auto& [a, b, c] : coefficients) {
      const double s2 = s * s;
      s = s * (a + s2 * (b + c * s2));
    }
    lo = std::min(lo, s);
    hi = std::max(hi, s);
  }
  return {lo, hi};
}

template <class T>
class MsignWorkspace;
template <class T>
class MsignBatchWorkspace;

namespace detail {

template <class T>
using MsignRef = Eigen::Ref<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>, 0, Eigen::OuterStride<>>;

template <class T>
void msign_kernel(MsignRef<T> m, const MsignOptions& o, MsignWorkspace<T>& ws);
template <class T>
void msign_batch_kernel(T* data, Eigen::Index ld, Eigen::Index batch, Eigen::Index rows, Eigen::Index cols,
                        const MsignOptions& o, MsignBatchWorkspace<T>& ws);

}  // namespace detail

/// The buffers of msign for one shape: msign_inplace with a workspace of M's shape allocates nothing (the iterative
/// methods).
template <class T>
class MsignWorkspace {
  static_assert(std::is_floating_point_v<T>, "MsignWorkspace: float or double");

 public:
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;

  MsignWorkspace() = default;
  MsignWorkspace(Eigen::Index rows, Eigen::Index cols) { reserve(rows, cols); }

  /// Sizes the buffers for rows x cols (a no-op when they already fit): one copy of the tall orientation of M, a
  /// second for a wide M (the iteration runs on M^T), and two k x k, k = min(rows, cols).
  void reserve(Eigen::Index rows, Eigen::Index cols) {
    if (rows < 0 || cols < 0)
      throw std::invalid_argument("MsignWorkspace: negative shape " + std::to_string(rows) + "x" +
                                  std::to_string(cols));
    const Eigen::Index n = std::max(rows, cols), k = std::min(rows, cols);
    if (x_.rows() != n || x_.cols() != k) x_.resize(n, k);
    const Eigen::Index wide = rows < cols ? n : 0;
    if (y_.rows() != wide || y_.cols() != (wide ? k : 0)) y_.resize(wide, wide ? k : 0);
    if (a_.rows() != k) {
      a_.resize(k, k);
      b_.resize(k, k);
    }
    rows_ = rows;
    cols_ = cols;
  }
  Eigen::Index rows() const noexcept { return rows_; }
  Eigen::Index cols() const noexcept { return cols_; }
  std::size_t bytes() const noexcept {
    return static_cast<std::size_t>(x_.size() + y_.size() + a_.size() + b_.size()) * sizeof(T);
  }

 private:
  template <class U>
  friend void detail::msign_kernel(detail::MsignRef<U>, const MsignOptions&, MsignWorkspace<U>&);
  Matrix x_, y_, a_, b_;
  Eigen::Index rows_ = 0, cols_ = 0;
};

/// The buffers of msign_batched for one shape, and its threads: one MsignWorkspace per thread, and a team of
/// `threads` (1: the caller's thread alone). msign_batched with a workspace of the batch's shape allocates nothing.
template <class T>
class MsignBatchWorkspace {
  static_assert(std::is_floating_point_v<T>, "MsignBatchWorkspace: float or double");

 public:
  MsignBatchWorkspace() : MsignBatchWorkspace(0, 0) {}
  explicit MsignBatchWorkspace(Eigen::Index rows, Eigen::Index cols, int threads = 1)
      : pool_(std::make_unique<detail::ThreadPool>(checked_threads(threads))),
        per_thread_(static_cast<std::size_t>(threads)) {
    reserve(rows, cols);
  }

  /// Sizes every thread's buffers for rows x cols matrices (a no-op when they already fit).
  void reserve(Eigen::Index rows, Eigen::Index cols) {
    for (auto& w : per_thread_) w.reserve(rows, cols);
  }
  int threads() const noexcept { return pool_->size(); }
  std::size_t bytes() const noexcept {
    std::size_t b = 0;
    for (const auto& w : per_thread_) b += w.bytes();
    return b;
  }

 private:
  template <class U>
  friend void detail::msign_batch_kernel(U*, Eigen::Index, Eigen::Index, Eigen::Index, Eigen::Index,
                                         const MsignOptions&, MsignBatchWorkspace<U>&);
  static int checked_threads(int threads) {
    if (threads < 1 || threads > 1024)
      throw std::invalid_argument("MsignBatchWorkspace: threads must be in [1, 1024], got " + std::to_string(threads));
    return threads;
  }

  std::unique_ptr<detail::ThreadPool> pool_;
  std::vector<MsignWorkspace<T>> per_thread_;
};

namespace detail {

// Sum of squares in double, column by column in a fixed order: the scale, hence the result, must not depend on where
// M lies in memory (a vectorized reduction's order follows the alignment of its first entry).
template <class T>
double squared_norm_in_order(const MsignRef<T>& m) {
  double sum = 0;
  for (Eigen::Index j = 0; j < m.cols(); ++j) {
    const T* col = m.data() + j * m.outerStride();
    for (Eigen::Index i = 0; i < m.rows(); ++i) sum += static_cast<double>(col[i]) * static_cast<double>(col[i]);
  }
  return sum;
}

// m <- m / max|m_ij| for a finite m whose squares overflow double (msign(c M) = msign(M) for c > 0); returns the
// squared Frobenius norm after.
template <class T>
double scale_to_unit_max(MsignRef<T> m) {
  const T top = m.cwiseAbs().maxCoeff();
  m /= top;
  return squared_norm_in_order<T>(m);
}

// One quintic step y = x (a I + b A + c A^2), A = x^T x, on the tall orientation (x n x k, n >= k): two symmetric
// products (stack_gram: the upper triangle by panels, then mirrored, so A and A^2 are exactly symmetric) and one
// general one.
template <class T>
void quintic_step(MsignRef<T> x, MsignRef<T> y, MsignRef<T> gram, MsignRef<T> poly, T a, T b, T c) {
  stack_gram<T>(gram, x);
  if (c != T(0)) {
    stack_gram<T>(poly, gram);  // A^T A = A^2
    poly = c * poly + b * gram;
  } else {
    poly = b * gram;
  }
  poly.diagonal().array() += a;
  stack_gemm<T>(y, x, GemmOp::plain, poly, GemmOp::plain, GemmMode::assign);
}

// Newton-Schulz or Polar Express on m in place, with buffers sized for it.
template <class T>
void polynomial_iteration(MsignRef<T> m, const MsignOptions& o, Eigen::Matrix<T, -1, -1>& other,
                          Eigen::Matrix<T, -1, -1>& transposed, Eigen::Matrix<T, -1, -1>& gram,
                          Eigen::Matrix<T, -1, -1>& poly) {
  const Eigen::Index rows = m.rows(), cols = m.cols();
  if (rows == 0 || cols == 0) return;
  // A wide M iterates on M^T, so that both orientations of a matrix take the same arithmetic.
  const bool wide = rows < cols;
  if (wide) transposed = m.transpose();
  MsignRef<T> x0 = wide ? MsignRef<T>(transposed) : m;
  double norm2 = squared_norm_in_order<T>(x0);
  if (norm2 == 0) return;  // msign(0) = 0, with eps = 0 too
  if (!std::isfinite(norm2)) norm2 = scale_to_unit_max<T>(x0);
  const T scale = static_cast<T>(msign_initial_scale(o) / (std::sqrt(norm2) + o.eps));
  if (!std::isfinite(static_cast<double>(scale)) || !std::isfinite(norm2)) {
    m.setConstant(std::numeric_limits<T>::quiet_NaN());
    return;
  }
  x0 *= scale;
  // Two buffers of the tall shape take turns: bufs[cur] holds X, the step writes into the other.
  MsignRef<T> bufs[2] = {x0, MsignRef<T>(other)};
  int cur = 0;
  for (int k = 0; k < o.steps + o.polish_steps; ++k) {
    const auto [a, b, c] = msign_step_coefficients(o, k);
    quintic_step<T>(bufs[cur], bufs[1 - cur], gram, poly, T(a), T(b), T(c));
    cur = 1 - cur;
  }
  if (wide) {
    m = bufs[cur].transpose();
  } else if (cur == 1) {
    m = other;
  }
}

// Exact msign by the thin SVD.
template <class T>
void msign_svd(MsignRef<T> m) {
  using Matrix = Eigen::Matrix<T, -1, -1>;
  if (m.size() == 0) return;
  Eigen::BDCSVD<Matrix> svd(Matrix(m), Eigen::ComputeThinU | Eigen::ComputeThinV);
  const auto& s = svd.singularValues();
  if (!s.allFinite()) {
    m.setConstant(std::numeric_limits<T>::quiet_NaN());
    return;
  }
  const T tol = std::sqrt(static_cast<T>(std::max(m.rows(), m.cols()))) * std::numeric_limits<T>::epsilon() * s(0);
  Eigen::Index r = 0;
  while (r < s.size() && s(r) > tol) ++r;
  m.noalias() = svd.matrixU().leftCols(r) * svd.matrixV().leftCols(r).transpose();
}

// Exact msign through the eigendecomposition of the smaller Gram matrix, in double.
template <class T>
void msign_gram(MsignRef<T> m) {
  if (m.size() == 0) return;
  const bool tall = m.rows() >= m.cols();
  if (!(m.template cast<double>().squaredNorm() < std::numeric_limits<double>::infinity())) scale_to_unit_max<T>(m);
  const Eigen::MatrixXd md = m.template cast<double>();
  const Eigen::MatrixXd gram = tall ? Eigen::MatrixXd(md.transpose() * md) : Eigen::MatrixXd(md * md.transpose());
  if (!gram.allFinite()) {
    m.setConstant(std::numeric_limits<T>::quiet_NaN());
    return;
  }
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(gram);
  const Eigen::VectorXd& lambda = eig.eigenvalues();  // ascending
  const double top = std::max(lambda(lambda.size() - 1), 0.0);
  // s_i > sqrt(max(rows, cols)) eps(T) s_max, the SVD method's rank rule, on s = sqrt(lambda).
  // Or below what the Gram matrix resolves: its eigenvalues carry errors of about k eps(double) lambda_max, so a
  // smaller one says nothing about s_i but that it is below sqrt(k eps(double)) s_max.
  const double rel = std::sqrt(static_cast<double>(std::max(m.rows(), m.cols()))) * std::numeric_limits<T>::epsilon();
  const double floor =
      std::max(rel * rel, 4.0 * static_cast<double>(lambda.size()) * std::numeric_limits<double>::epsilon()) * top;
  Eigen::VectorXd inv(lambda.size());
  for (Eigen::Index i = 0; i < lambda.size(); ++i) inv(i) = lambda(i) > floor && top > 0 ? 1 / std::sqrt(lambda(i)) : 0;
  const Eigen::MatrixXd& v = eig.eigenvectors();
  const Eigen::MatrixXd p = v * inv.asDiagonal() * v.transpose();
  if (tall) {
    m = (md * p).template cast<T>();
  } else {
    m = (p * md).template cast<T>();
  }
}

// msign_inplace's arithmetic, for every scalar: the library's compiled entry points are this function's float and
// double instances.
template <class T>
void msign_kernel(MsignRef<T> m, const MsignOptions& o, MsignWorkspace<T>& ws) {
  o.validate();
  if (!m.allFinite()) {  // no method's arithmetic is defined on it; the NaNs say so downstream
    m.setConstant(std::numeric_limits<T>::quiet_NaN());
    return;
  }
  switch (o.method) {
    case MsignMethod::newton_schulz:
    case MsignMethod::polar_express:
      ws.reserve(m.rows(), m.cols());
      polynomial_iteration<T>(m, o, ws.x_, ws.y_, ws.a_, ws.b_);
      return;
    case MsignMethod::svd:
      msign_svd<T>(m);
      return;
    case MsignMethod::gram:
      msign_gram<T>(m);
      return;
  }
}

// msign_batched's loop: matrix i at data + i cols ld, each by msign_kernel on the thread that owns its stretch of the
// batch (the stretches split it evenly, in order).
template <class T>
void msign_batch_kernel(T* data, Eigen::Index ld, Eigen::Index batch, Eigen::Index rows, Eigen::Index cols,
                        const MsignOptions& o, MsignBatchWorkspace<T>& ws) {
  o.validate();
  if (batch < 0 || rows < 0 || cols < 0 || ld < rows)
    throw std::invalid_argument("msign_batched: bad batch " + std::to_string(batch) + " of " + std::to_string(rows) +
                                "x" + std::to_string(cols) + " (leading dimension " + std::to_string(ld) + ")");
  if (batch == 0 || rows == 0 || cols == 0) return;
  const int threads = static_cast<int>(std::min<Eigen::Index>(ws.threads(), batch));
  auto run = [&](int member) {
    if (member >= threads) return;
    const Eigen::Index begin = batch * member / threads, end = batch * (member + 1) / threads;
    MsignWorkspace<T>& w = ws.per_thread_[static_cast<std::size_t>(member)];
    for (Eigen::Index i = begin; i < end; ++i) {
      Eigen::Map<Eigen::Matrix<T, -1, -1>, 0, Eigen::OuterStride<>> one(data + i * cols * ld, rows, cols,
                                                                        Eigen::OuterStride<>(ld));
      msign_kernel<T>(one, o, w);
    }
  };
  if (threads == 1) {
    run(0);
  } else {
    ws.pool_->run(run);
  }
}

/// Whether this translation unit calls libgeomopt_optimizers' compiled msign for scalar T (the header's invariants).
template <class T>
inline constexpr bool compiled_msign = false;

#if GEOMOPT_USE_COMPILED_KERNELS
// The library's msign_kernel and msign_batch_kernel for float and double (optimizers/src/msign.cpp).
#define GEOMOPT_DECLARE_COMPILED_MSIGN(T)                                                                              \
  GEOMOPT_KERNELS_EXPORT void compiled_msign_kernel(MsignRef<T> m, const MsignOptions& o, MsignWorkspace<T>& ws);      \
  GEOMOPT_KERNELS_EXPORT void compiled_msign_batch_kernel(T* data, Eigen::Index ld, Eigen::Index batch,                \
                                                          Eigen::Index rows, Eigen::Index cols, const MsignOptions& o, \
                                                          MsignBatchWorkspace<T>& ws);                                 \
  template <>                                                                                                          \
  inline constexpr bool compiled_msign<T> = true;
GEOMOPT_DECLARE_COMPILED_MSIGN(float)
GEOMOPT_DECLARE_COMPILED_MSIGN(double)
#undef GEOMOPT_DECLARE_COMPILED_MSIGN
#endif

template <class T>
void msign_dispatch(MsignRef<T> m, const MsignOptions& o, MsignWorkspace<T>& ws) {
  if constexpr (compiled_msign<T>) {
    compiled_msign_kernel(m, o, ws);
  } else {
    msign_kernel<T>(m, o, ws);
  }
}

template <class T>
void msign_batch_dispatch(T* data, Eigen::Index ld, Eigen::Index batch, Eigen::Index rows, Eigen::Index cols,
                          const MsignOptions& o, MsignBatchWorkspace<T>& ws) {
  if constexpr (compiled_msign<T>) {
    compiled_msign_batch_kernel(data, ld, batch, rows, cols, o, ws);
  } else {
    msign_batch_kernel<T>(data, ld, batch, rows, cols, o, ws);
  }
}

}  // namespace detail

/// m <- msign(m) in place, with buffers from ws (resized to m's shape when they do not fit it). m is column-major
/// (or a vector); one whose entries are not evenly spaced down a column (a row of a column-major matrix) is copied
/// into a temporary first.
template <class Derived>
void msign_inplace(const Eigen::MatrixBase<Derived>& m_, const MsignOptions& o,
                   MsignWorkspace<typename Derived::Scalar>& ws) {
  using T = typename Derived::Scalar;
  static_assert(std::is_floating_point_v<T>, "msign: float or double");
  static_assert(!(Derived::Flags & Eigen::RowMajorBit) || Derived::IsVectorAtCompileTime,
                "msign: the matrix must be column-major");
  auto& m = const_cast<Eigen::MatrixBase<Derived>&>(m_).derived();
  if constexpr (std::is_constructible_v<detail::MsignRef<T>, Derived&>) {
    detail::msign_dispatch<T>(detail::MsignRef<T>(m), o, ws);
  } else {
    Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> copy = m;
    detail::msign_dispatch<T>(detail::MsignRef<T>(copy), o, ws);
    m = copy;
  }
}

/// m <- msign(m) in place (allocates its buffers).
template <class Derived>
void msign_inplace(const Eigen::MatrixBase<Derived>& m, const MsignOptions& o = {}) {
  MsignWorkspace<typename Derived::Scalar> ws;
  msign_inplace(m, o, ws);
}

/// msign(m) as a new matrix.
template <class Derived>
Eigen::Matrix<typename Derived::Scalar, Eigen::Dynamic, Eigen::Dynamic> msign(const Eigen::MatrixBase<Derived>& m,
                                                                              const MsignOptions& o = {}) {
  Eigen::Matrix<typename Derived::Scalar, Eigen::Dynamic, Eigen::Dynamic> out = m;
  msign_inplace(out, o);
  return out;
}

/// msign in place on each of `batch` rows x cols column-major matrices stored one after another from data (matrix i
/// at data + i rows cols), on ws.threads() threads; each gets the bits msign_inplace gives it alone. Allocates nothing
/// for the iterative methods when ws was sized for rows x cols.
template <class T>
void msign_batched(T* data, Eigen::Index batch, Eigen::Index rows, Eigen::Index cols, const MsignOptions& o,
                   MsignBatchWorkspace<T>& ws) {
  static_assert(std::is_floating_point_v<T>, "msign: float or double");
  detail::msign_batch_dispatch<T>(data, rows, batch, rows, cols, o, ws);
}

/// The same on matrices side by side: blocks is rows x (batch cols), column-major with unit inner stride (a
/// Matrix, a Map, or a block of columns of one), matrix i its columns [i cols, (i + 1) cols). Throws
/// std::invalid_argument when cols does not divide blocks.cols().
template <class Derived>
void msign_batched(const Eigen::MatrixBase<Derived>& blocks_, Eigen::Index cols, const MsignOptions& o,
                   MsignBatchWorkspace<typename Derived::Scalar>& ws) {
  using T = typename Derived::Scalar;
  static_assert(std::is_constructible_v<detail::MsignRef<T>, Derived&>,
                "msign_batched: the matrices must be column-major with unit inner stride");
  detail::MsignRef<T> blocks(const_cast<Eigen::MatrixBase<Derived>&>(blocks_).derived());
  if (cols < 0 || (cols == 0 ? blocks.cols() != 0 : blocks.cols() % cols != 0))
    throw std::invalid_argument("msign_batched: " + std::to_string(blocks.cols()) + " columns are no whole number of " +
                                std::to_string(cols) + "-column matrices");
  const Eigen::Index batch = cols == 0 ? 0 : blocks.cols() / cols;
  detail::msign_batch_dispatch<T>(blocks.data(), blocks.outerStride(), batch, blocks.rows(), cols, o, ws);
}

}  // namespace geomopt
