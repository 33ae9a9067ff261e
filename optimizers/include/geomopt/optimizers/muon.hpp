// Muon and ManifoldMuon: steepest descent under the spectral norm for matrix leaves, with every other leaf of the
// tree stepped by a fallback optimizer (AdamW by default) in the same call.
//
//   geomopt::Muon muon({.lr = 0.02, .momentum = 0.95, .fallback = {.lr = 3e-4}});
//   auto state = muon.init(params);          // or muon.init(params, rule): LeafOptions::muon picks leaves
//   muon.step(params, grads, state);
//
// Muon, per matrix leaf P (rows x cols as stored) with gradient G:
//   B <- momentum B + (1 - momentum) G                       (B starts at 0; torch.optim.Muon's lerp)
//   U <- nesterov ? (1 - momentum) G + momentum B : B
//   P <- (1 - lr weight_decay) P - lr scale(rows, cols) msign(U)
// with msign by Newton-Schulz (msign.hpp) and scale sqrt(max(1, rows / cols)) as published (MuonScale). Its state is
// the momentum B only. A leaf of m matrices one after another (LeafOptions::muon_matrices = m: per-head or per-expert
// weights) takes the last line per matrix, by that matrix's shape.
//
// ManifoldMuon steps the leaves of five manifolds by the spectral-norm steepest tangent direction A of the momentum
// blend U, with the same momentum, Nesterov blend and lr scale as Muon's matrices:
//   - Stiefel (W^T W = I, N x n): A from stiefel_muon.hpp, then W <- R_W(-lr A) by the polar retraction
//     msign(W - lr A) (or the library's Cayley or geodesic retraction, MuonOptions::retraction);
//   - Sphere, SpecialOrthogonal, Grassmann, Oblique: A from spectral_directions.hpp (Oblique's multiplier warm-started
//     from the leaf's previous step, MuonOptions::oblique its budget), then W <- R_W(-lr A) by the leaf manifold's
//     own retraction (LeafOptions::retraction, else CommonOptions::retraction, else the manifold's default).
// Its Euclidean matrix leaves take Muon's step, every other leaf the fallback's.
//
// Its leaves are matrices and points of those five manifolds, owned or over borrowed memory (ptree::BorrowedArray,
// Borrowed<Stiefel>, Borrowed<Sphere>, ...).
//
// Structure: MuonCore is Muon's step alone, a member of the step protocol (step_protocol.hpp) built on the public
// parts of the library; BasicMuon is the Partition (partition.hpp) of MuonCore and the fallback optimizer, and is
// itself a member, so "Muon on these matrices" is one group of any Partition.
//
// Invariants: a step reads every gradient before writing (clipping, the non-finite policy, the schedule, the EMA and
// MissingGradient::skip of CommonOptions cover Muon's leaves and the fallback's alike: a leaf without a gradient sits
// the step out with its own step count); per-leaf lr_scale and weight decay may change between steps, as for an
// OptimizerState; Muon's Newton-Schulz step allocates nothing; stepping a tree that does not match the state throws
// before anything is written.
#pragma once

#include <Eigen/Core>
#include <Eigen/Eigenvalues>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "geomopt/manifolds.hpp"
#include "geomopt/manifolds/detail/dense_kernels.hpp"
#include "geomopt/optimizers/detail/thread_pool.hpp"
#include "geomopt/optimizers/kernels.hpp"
#include "geomopt/optimizers/msign.hpp"
#include "geomopt/optimizers/optimizer.hpp"
#include "geomopt/optimizers/options.hpp"
#include "geomopt/optimizers/partition.hpp"
#include "geomopt/optimizers/spectral_directions.hpp"
#include "geomopt/optimizers/state.hpp"
#include "geomopt/optimizers/step_protocol.hpp"
#include "geomopt/optimizers/stiefel_muon.hpp"
#include "geomopt/ptree.hpp"

namespace geomopt {

/// How Muon scales a leaf's orthogonalized update by its stored shape rows x cols.
enum class MuonScale {
  original,         ///< sqrt(max(1, rows / cols)): Keller Jordan's Muon, torch.optim.Muon's default
  match_rms_adamw,  ///< 0.2 sqrt(max(rows, cols)): the update's RMS matches AdamW's typical 0.2 (Moonlight)
  none,             ///< 1
};

/// The scale's name in code: "original", "match_rms_adamw", "none".
inline const char* muon_scale_name(MuonScale s) noexcept {
  switch (s) {
    case MuonScale::original:
      return "original";
    case MuonScale::match_rms_adamw:
      return "match_rms_adamw";
    case MuonScale::none:
      return "none";
  }
  return "scale";
}

/// How ManifoldMuon returns a Stiefel leaf to the manifold after its step.
enum class StiefelMuonRetraction {
  polar,     ///< W <- msign(W - lr A), by the Gram eigendecomposition in double
  cayley,    ///< the library's Cayley retraction of -lr A (StiefelFamilyStepper)
  geodesic,  ///< the library's exponential map of -lr A
};

/// The retraction's name in code: "polar", "cayley", "geodesic".
inline const char* retraction_name(StiefelMuonRetraction r) noexcept {
  switch (r) {
    case StiefelMuonRetraction::polar:
      return "polar";
    case StiefelMuonRetraction::cayley:
      return "cayley";
    case StiefelMuonRetraction::geodesic:
      return "geodesic";
  }
  return "?";
}

/// Muon's settings. The first five are torch.optim.Muon's names; `fallback` holds the options of the optimizer that
/// steps every other leaf (its lr is its own: Muon's lr is in spectral units, AdamW's per entry).
template <class Fallback = AdamWKernel>
struct MuonOptions {
  double lr = 0.02;
  double momentum = 0.95;
  bool nesterov = true;
  int ns_steps = 5;
  /// Decoupled: P <- (1 - lr weight_decay) P before the update, on Euclidean Muon leaves (LeafOptions overrides).
  double weight_decay = 0;
  std::array<double, 3> ns_coefficients{3.4445, -4.7750, 2.0315};
  double ns_eps = 1e-7;
  /// newton_schulz as published; svd or gram orthogonalize exactly (and allocate).
  MsignMethod msign = MsignMethod::newton_schulz;
  MuonScale scale = MuonScale::original;
  /// ManifoldMuon: the direction's solver and the retraction of Stiefel leaves. By default each step makes one
  /// multiplier update, warm-started from the leaf's previous step (docs/design.md, "Manifold Muon's solver", has
  /// the measurements behind it); StiefelMuonOptions{} solves every step to its tolerance from a cold start.
  StiefelMuonOptions stiefel{.max_iterations = 1, .warm_start = true};
  StiefelMuonRetraction retraction = StiefelMuonRetraction::polar;
  /// ManifoldMuon: the Oblique direction's Newton continuation, started from the multiplier of the leaf's previous
  /// step. By default at most 5 Newton steps a step: tall leaves then converge to the tolerance in most steps at the
  /// cost of a full solve, square and wide ones stop within a few percent of the optimal alignment (feasible
  /// directions) at a third of it; docs/design.md, "The family on Sphere, SO(n), Grassmann and Oblique", has the
  /// measurements. ObliqueMuonOptions{} solves every step to its tolerance.
  ObliqueMuonOptions oblique{.max_iterations = 5};
  typename Fallback::Options fallback{};

  MsignOptions msign_options() const {
    MsignOptions o;
    o.method = msign;
    o.steps = ns_steps;
    o.coefficients = ns_coefficients;
    o.eps = ns_eps;
    return o;
  }

  void validate() const {
    auto fail = [](const char* what, double v) {
      throw std::invalid_argument(std::string("Muon: ") + what + ", got " + std::to_string(v));
    };
    if (!(lr >= 0)) fail("lr must be >= 0", lr);
    if (!(momentum >= 0 && momentum < 1)) fail("momentum must be in [0, 1)", momentum);
    if (!(weight_decay >= 0)) fail("weight_decay must be >= 0", weight_decay);
    msign_options().validate();
    stiefel.validate();
    oblique.validate();
    fallback.validate();
  }
};

namespace detail {

template <class T>
using MuonMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;

// How Muon steps one of its leaves: a Euclidean matrix by msign, a manifold leaf (ManifoldMuon) by its manifold's
// spectral direction and a retraction.
enum class MuonLeafKind { matrix, stiefel, sphere, special_orthogonal, grassmann, oblique };

inline const char* muon_kind_name(MuonLeafKind k) noexcept {
  switch (k) {
    case MuonLeafKind::matrix:
      return "matrix";
    case MuonLeafKind::stiefel:
      return "Stiefel";
    case MuonLeafKind::sphere:
      return "Sphere";
    case MuonLeafKind::special_orthogonal:
      return "SpecialOrthogonal";
    case MuonLeafKind::grassmann:
      return "Grassmann";
    case MuonLeafKind::oblique:
      return "Oblique";
  }
  return "?";
}

// Whether a manifold's name (M::kName, as LeafInfo::kind holds it) is one of the kinds ManifoldMuon steps.
inline bool muon_manifold_name(std::string_view name) noexcept {
  for (MuonLeafKind k : {MuonLeafKind::stiefel, MuonLeafKind::sphere, MuonLeafKind::special_orthogonal,
                         MuonLeafKind::grassmann, MuonLeafKind::oblique})
    if (name == muon_kind_name(k)) return true;
  return false;
}

// The manifold leaves ManifoldMuon steps, as a message lists them.
inline constexpr const char* kManifoldMuonLeaves = "Stiefel, Sphere, SpecialOrthogonal, Grassmann and Oblique leaves";

// The one map from a leaf type of scalar T to its kind: a point of one of the five manifolds, owned or Borrowed;
// matrix for every other type (Euclidean leaves, other manifolds: init tells them apart).
template <class L, class T>
constexpr MuonLeafKind muon_leaf_kind() {
  auto is = [](auto tag) {
    using M = typename decltype(tag)::type;
    return std::is_same_v<L, M> || std::is_same_v<L, Borrowed<M>>;
  };
  if (is(std::type_identity<Stiefel<T>>{})) return MuonLeafKind::stiefel;
  if (is(std::type_identity<Sphere<T>>{})) return MuonLeafKind::sphere;
  if (is(std::type_identity<SpecialOrthogonal<T>>{})) return MuonLeafKind::special_orthogonal;
  if (is(std::type_identity<Grassmann<T>>{})) return MuonLeafKind::grassmann;
  if (is(std::type_identity<Oblique<T>>{})) return MuonLeafKind::oblique;
  return MuonLeafKind::matrix;
}

// Whether a leaf of scalar T is a point ManifoldMuon steps by a spectral direction.
template <class L, class T>
inline constexpr bool muon_manifold_leaf = muon_leaf_kind<L, T>() != MuonLeafKind::matrix;

// What Muon keeps of one of its leaves.
struct MuonLeafRecord {
  std::size_t leaf = 0;             // index in walk order
  Eigen::Index rows = 0, cols = 0;  // the storage order read column-major (a row-major matrix's transpose)
  bool transposed = false;          // a row-major matrix: rows x cols is the transpose of its shape
  Eigen::Index matrices = 1;        // LeafOptions::muon_matrices: rows x (cols / matrices) blocks, one after another
  Eigen::Index offset = 0;          // first entry of its momentum
  MuonLeafKind kind = MuonLeafKind::matrix;
  // First entry of its multiplier in the state: a Stiefel leaf's n x n under StiefelMuonOptions::warm_start, an
  // Oblique leaf's n entries always; -1 for none.
  Eigen::Index multiplier = -1;
  double lr_scale = 1;
  double weight_decay = 0;
  bool weight_decay_set = false;                                    // by the rule (else Muon's weight_decay applies)
  StiefelMuonRetraction retraction = StiefelMuonRetraction::polar;  // a Stiefel leaf's
  Retraction manifold_retraction = Retraction::cayley;              // the other manifold leaves' (leaf_retraction)
  std::int64_t skipped = 0;  // steps sat out for want of a gradient (MissingGradient::skip)
  bool missing = false;      // this step's gradient is empty and the leaf sits it out

  bool manifold() const noexcept { return kind != MuonLeafKind::matrix; }
  bool stiefel() const noexcept { return kind == MuonLeafKind::stiefel; }
  // A leaf stepped by a spectral_directions.hpp direction and its manifold's own retraction.
  bool spectral() const noexcept { return manifold() && !stiefel(); }
  // Entries of its multiplier in the state (when kept).
  Eigen::Index multiplier_size() const noexcept {
    return stiefel() ? cols * cols : kind == MuonLeafKind::oblique ? cols : 0;
  }
};

// The direction of a Sphere, SpecialOrthogonal, Grassmann or Oblique leaf: one of spectral_directions.hpp's, by kind.
template <class T>
struct SpectralLeafDirection {
  std::unique_ptr<SphereMuonDirection<T>> sphere;
  std::unique_ptr<SpecialOrthogonalMuonDirection<T>> special_orthogonal;
  std::unique_ptr<GrassmannMuonDirection<T>> grassmann;
  std::unique_ptr<ObliqueMuonDirection<T>> oblique;

  SpectralLeafDirection(MuonLeafKind kind, Eigen::Index rows, Eigen::Index cols) {
    switch (kind) {
      case MuonLeafKind::sphere:
        sphere = std::make_unique<SphereMuonDirection<T>>(rows, cols);
        break;
      case MuonLeafKind::special_orthogonal:
        special_orthogonal = std::make_unique<SpecialOrthogonalMuonDirection<T>>(rows, cols);
        break;
      case MuonLeafKind::grassmann:
        grassmann = std::make_unique<GrassmannMuonDirection<T>>(rows, cols);
        break;
      case MuonLeafKind::oblique:
        oblique = std::make_unique<ObliqueMuonDirection<T>>(rows, cols);
        break;
      default:
        throw std::logic_error("SpectralLeafDirection: not a spectral leaf kind");
    }
  }

  // a <- the direction for w and g; an Oblique leaf's multiplier d (n entries) receives the next and, with warm, is
  // the start.
  SpectralDirectionReport solve(const T* w, const T* g, T* a, const ObliqueMuonOptions& o, T* d, bool warm) {
    if (sphere) return sphere->solve(w, g, a);
    if (special_orthogonal) return special_orthogonal->solve(w, g, a);
    if (grassmann) return grassmann->solve(w, g, a);
    return oblique->solve(w, g, a, o, d, warm);
  }

  std::size_t bytes() const noexcept {
    return (sphere ? sphere->bytes() : 0) + (special_orthogonal ? special_orthogonal->bytes() : 0) +
           (grassmann ? grassmann->bytes() : 0) + (oblique ? oblique->bytes() : 0);
  }
};

// The per-step buffers of one Muon leaf (scratch, rebuilt by init).
template <class T>
struct MuonLeafWork {
  MuonMatrix<T> u;  // the update before msign / the direction's input
  MsignWorkspace<T> ms;
  // Manifold leaves:
  MuonMatrix<T> a, z;  // the direction; Z = W^T G for a Stiefel leaf's gradient norm
  std::unique_ptr<StiefelMuonDirection<T>> direction;
  std::unique_ptr<SpectralLeafDirection<T>> spectral;  // the other manifolds' direction
  std::unique_ptr<StiefelMuonPolarStep<T>> polar;      // the polar retraction with the fixed point: the fused step
  MuonMatrix<T> multiplier;                            // the direction's next multiplier, until the step writes it
  StiefelMuonReport report;                            // of the last step's direction
  Eigen::MatrixXd yd, gram, p;                         // polar: W - lr A in double, its Gram matrix, (Gram)^-1/2
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig;
  MuonMatrix<T> pt;
  std::unique_ptr<ManifoldStepper<T>> stepper;  // Stiefel's cayley / geodesic, the other manifolds' retraction
  MuonMatrix<T> coords;
  double squared = 0;  // the gradient's squared norm at the last prepass

  std::size_t bytes() const noexcept {
    std::size_t b = static_cast<std::size_t>(u.size() + a.size() + z.size() + pt.size() + coords.size()) * sizeof(T) +
                    ms.bytes() + static_cast<std::size_t>(yd.size() + gram.size() + p.size()) * sizeof(double);
    if (direction) b += direction->bytes();
    if (spectral) b += spectral->bytes();
    if (polar) b += polar->bytes();
    b += static_cast<std::size_t>(multiplier.size()) * sizeof(T);
    if (stepper) b += stepper->workspace_bytes();
    return b;
  }
};

}  // namespace detail

/// The state of MuonCore for one parameter tree: the momentum of its leaves, the multiplier of ManifoldMuon's Stiefel
/// leaves under StiefelMuonOptions::warm_start and of its Oblique leaves always; every other leaf is frozen or excluded
/// (another group's). Walked like an OptimizerState: for_each_slot gives a Muon leaf's "momentum_buffer" shaped like
/// the leaf, then a Stiefel leaf's n x n "multiplier" or an Oblique leaf's n x 1 "multiplier".
template <class Tree>
class MuonCoreState {
 public:
  using Scalar = typename OptimizerState<Tree>::Scalar;
  using Vector = typename OptimizerState<Tree>::Vector;
  using MatrixMap = typename OptimizerState<Tree>::MatrixMap;
  using ConstMatrixMap = typename OptimizerState<Tree>::ConstMatrixMap;

  MuonCoreState() = default;
  MuonCoreState(MuonCoreState&&) noexcept = default;
  MuonCoreState& operator=(MuonCoreState&&) noexcept = default;

  std::int64_t step_count() const noexcept { return step_; }
  void set_step_count(std::int64_t t) {
    step_ = t;
    for (auto& r : records_) r.skipped = 0;
  }
  /// The steps leaf i has taken: the state's count less the steps it sat out; 0 for a leaf that is not Muon's.
  std::int64_t leaf_step_count(std::size_t i) const {
    const int m = muon_of_leaf_.at(i);
    return m < 0 ? 0 : step_ - records_[static_cast<std::size_t>(m)].skipped;
  }
  /// Sets leaf i's own step count: std::invalid_argument unless the leaf is Muon's and 0 <= t <= step_count().
  void set_leaf_step_count(std::size_t i, std::int64_t t) {
    const int m = muon_of_leaf_.at(i);
    if (m < 0 || t < 0 || t > step_)
      throw std::invalid_argument(leaf_path(i) + ": a leaf's step count must be from 0 to the state's " +
                                  std::to_string(step_) + (m < 0 ? " and the leaf not frozen" : "") + ", got " +
                                  std::to_string(t));
    records_[static_cast<std::size_t>(m)].skipped = step_ - t;
  }
  template <class F>
  void for_each_leaf_step(F&& f) const {
    for (const auto& r : records_)
      if (r.skipped != 0) f(paths_[r.leaf], step_ - r.skipped);
  }
  /// Changes leaf i's lr_scale or weight decay between steps: std::invalid_argument naming the leaf for a leaf that
  /// is not Muon's or a value that is not >= 0 (a manifold leaf's weight decay must stay 0), and nothing changes then.
  void set_leaf_lr_scale(std::size_t i, double lr_scale) { changeable(i, "lr_scale", lr_scale).lr_scale = lr_scale; }
  void set_leaf_weight_decay(std::size_t i, double weight_decay) {
    auto& rec = changeable(i, "weight_decay", weight_decay);
    if (rec.manifold() && weight_decay != 0)
      throw std::invalid_argument(leaf_path(i) + ": weight decay does not apply to " + muon_kind_name(rec.kind) +
                                  " leaves");
    rec.weight_decay = weight_decay;
    rec.weight_decay_set = true;
  }
  /// "Muon" or "ManifoldMuon".
  std::string_view optimizer() const noexcept { return name_; }
  const Hyperparameters& hyperparameters() const noexcept { return hyperparameters_; }

  /// Bytes of state: the momentum, the multipliers and the moving average.
  std::size_t nbytes() const noexcept {
    std::size_t b = static_cast<std::size_t>(momentum_.size() + multipliers_.size()) * sizeof(Scalar);
    if (ema_) b += static_cast<std::size_t>(ptree::count(*ema_)) * sizeof(Scalar);
    return b;
  }
  std::size_t workspace_bytes() const noexcept {
    std::size_t b = 0;
    for (const auto& w : work_) b += w->bytes();
    return b;
  }

  std::size_t leaf_count() const noexcept { return paths_.size(); }
  const std::string& leaf_path(std::size_t i) const { return paths_.at(i); }
  /// Whether leaf i is stepped by Muon; a leaf that is not is frozen here (or another group's).
  bool muon_leaf(std::size_t i) const { return muon_of_leaf_.at(i) >= 0; }
  bool leaf_frozen(std::size_t i) const { return !muon_leaf(i); }
  std::size_t muon_leaf_count() const noexcept { return records_.size(); }
  /// ManifoldMuon: what the last step's direction solve of manifold leaf i reported (iterations, convergence, duality
  /// gap; all zero before the first step). A Sphere, SpecialOrthogonal, Grassmann or Oblique leaf reports its
  /// SpectralDirectionReport in these fields, which mean the same (iterations 0 and converged for the closed forms).
  /// Throws std::invalid_argument when leaf i is not one of its manifold leaves.
  const StiefelMuonReport& direction_report(std::size_t i) const {
    const int m = i < muon_of_leaf_.size() ? muon_of_leaf_[i] : -1;
    if (m < 0 || !records_[static_cast<std::size_t>(m)].manifold())
      throw std::invalid_argument("MuonState::direction_report: leaf " + std::to_string(i) +
                                  " is not a Stiefel leaf or another manifold leaf stepped by ManifoldMuon (" +
                                  detail::kManifoldMuonLeaves + ")");
    return work_[static_cast<std::size_t>(m)]->report;
  }

  /// f(path, name, value) for each per-leaf option (see OptimizerState::for_each_leaf_option); a Stiefel leaf
  /// reports its StiefelMuonRetraction ("polar", "cayley" or "geodesic"), another manifold leaf its Retraction.
  template <class F>
  void for_each_leaf_option(F&& f) const {
    for (std::size_t i = 0; i < paths_.size(); ++i) for_each_option_of_leaf(i, f);
  }
  template <class F>
  void for_each_option_of_leaf(std::size_t i, F&& f) const {
    const int m = muon_of_leaf_.at(i);
    f(paths_[i], std::string_view("frozen"), m < 0);
    if (m < 0) return;
    const auto& r = records_[static_cast<std::size_t>(m)];
    f(paths_[i], std::string_view("lr_scale"), r.lr_scale);
    if (r.weight_decay_set) f(paths_[i], std::string_view("weight_decay"), r.weight_decay);
    if (r.stiefel()) f(paths_[i], std::string_view("retraction"), retraction_name(r.retraction));
    if (r.spectral()) f(paths_[i], std::string_view("retraction"), retraction_name(r.manifold_retraction));
    if (r.matrices != 1) f(paths_[i], std::string_view("muon_matrices"), static_cast<double>(r.matrices));
  }

  /// f(path, name, map) for every array of state, by leaf in walk order.
  template <class F>
  void for_each_slot(F&& f) {
    for (std::size_t i = 0; i < paths_.size(); ++i) visit_leaf_slots(*this, i, f);
  }
  template <class F>
  void for_each_slot(F&& f) const {
    for (std::size_t i = 0; i < paths_.size(); ++i) visit_leaf_slots(*this, i, f);
  }
  template <class F>
  void for_each_slot_of_leaf(std::size_t i, F&& f) {
    visit_leaf_slots(*this, i, f);
  }
  template <class F>
  void for_each_slot_of_leaf(std::size_t i, F&& f) const {
    visit_leaf_slots(*this, i, f);
  }

  const Tree* ema() const noexcept { return ema_ ? &*ema_ : nullptr; }
  Tree* ema() noexcept { return ema_ ? &*ema_ : nullptr; }

 private:
  template <class F, bool M>
  friend class MuonCore;

  detail::MuonLeafRecord& changeable(std::size_t i, const char* what, double value) {
    const int m = muon_of_leaf_.at(i);
    if (m < 0 || !(value >= 0))
      throw std::invalid_argument(leaf_path(i) + ": " + what + (m < 0 ? " of a frozen leaf cannot be set" : "") +
                                  (value >= 0 ? "" : " must be >= 0, got " + std::to_string(value)));
    return records_[static_cast<std::size_t>(m)];
  }

  template <class Self, class F>
  static void visit_leaf_slots(Self& self, std::size_t i, F& f) {
    using Map = std::conditional_t<std::is_const_v<Self>, ConstMatrixMap, MatrixMap>;
    const int m = self.muon_of_leaf_.at(i);
    if (m < 0) return;
    const auto& r = self.records_[static_cast<std::size_t>(m)];
    f(self.paths_[i], std::string_view("momentum_buffer"), Map(self.momentum_.data() + r.offset, r.rows, r.cols));
    if (r.multiplier >= 0)
      f(self.paths_[i], std::string_view("multiplier"),
        Map(self.multipliers_.data() + r.multiplier, r.cols, r.stiefel() ? r.cols : 1));
  }

  std::string name_;
  Hyperparameters hyperparameters_;
  std::int64_t step_ = 0;
  double factor_ = 1;  // the schedule's factor for the step under way (begin_step)
  int threads_ = 1;
  std::vector<std::string> paths_;  // every leaf's, in walk order
  std::vector<char> checked_;       // per leaf: frozen here, whose gradient this state's step checks (not excluded)
  std::vector<detail::MuonLeafRecord> records_;
  std::vector<int> muon_of_leaf_;  // per leaf in walk order: its record, or -1
  Vector momentum_;
  Vector multipliers_;  // per Stiefel leaf under warm_start its n x n multiplier, per Oblique leaf its n
  std::vector<std::unique_ptr<detail::MuonLeafWork<Scalar>>> work_;
  std::vector<detail::UnitPointers<Scalar>> pointers_;  // per record, found by each step
  std::vector<std::vector<std::size_t>> plan_;          // per thread: records
  std::vector<std::size_t> failed_;                     // per thread: the first leaf verify refused
  std::optional<Tree> ema_;
};

/// Muon's step alone: the orthogonalized (ManifoldMuon: spectral steepest tangent) update of the matrix (and manifold)
/// leaves its rule gives it, every other leaf frozen or excluded. A member of the step protocol written on the public
/// parts of the library only; Muon and ManifoldMuon are the Partition of it and a fallback optimizer, and it can be a
/// group of any Partition. MuonOptions::fallback is ignored.
template <class Fallback, bool kManifold>
class MuonCore {
 public:
  using Options = MuonOptions<Fallback>;
  static constexpr const char* kName = kManifold ? "ManifoldMuon" : "Muon";

  explicit MuonCore(Options options = {}, CommonOptions common = {})
      : options_(std::move(options)), common_(std::move(common)) {
    options_.validate();
    common_.validate();
    if (common_.threads > 1) pool_ = std::make_unique<detail::ThreadPool>(common_.threads);
  }

  const Options& options() const noexcept { return options_; }
  const CommonOptions& common() const noexcept { return common_; }
  StepTransforms transforms() const noexcept { return StepTransforms::of(common_); }

  /// The state for params. Every leaf rule(path) neither freezes nor excludes is Muon's: it must be a Euclidean
  /// leaf of one contiguous matrix block of at least 2 x 2 (ManifoldMuon: or a Stiefel, Sphere, SpecialOrthogonal,
  /// Grassmann or Oblique leaf) whose LeafOptions::muon is not false; any other throws std::invalid_argument naming
  /// the path. A manifold leaf other than Stiefel retracts by LeafOptions::retraction, else CommonOptions::retraction,
  /// else its manifold's default.
  template <class Tree>
  MuonCoreState<Tree> init(const Tree& params, const LeafRule& rule = {}) const {
    if constexpr (ptree::tree<Tree>) {
      return init_tree(params, rule);
    } else {
      ptree::detail::not_a_tree<Tree>();
      return {};
    }
  }

  /// One step of its leaves (see Optimizer::step).
  template <class Tree>
  StepReport step(Tree& params, const Tree& grads, MuonCoreState<Tree>& st) {
    return detail::step_alone(*this, params, grads, st);
  }

  /// Muon's hyperparameters as a checkpoint records them.
  Hyperparameters hyperparameters() const {
    Hyperparameters h = {{"lr", options_.lr},
                         {"momentum", options_.momentum},
                         {"nesterov", options_.nesterov ? 1.0 : 0.0},
                         {"ns_steps", static_cast<double>(options_.ns_steps)},
                         {"weight_decay", options_.weight_decay},
                         {"ns_a", options_.ns_coefficients[0]},
                         {"ns_b", options_.ns_coefficients[1]},
                         {"ns_c", options_.ns_coefficients[2]},
                         {"ns_eps", options_.ns_eps},
                         {"msign", msign_method_name(options_.msign)},
                         {"scale", muon_scale_name(options_.scale)}};
    if (kManifold) {
      h.emplace_back("stiefel_method", stiefel_muon_method_name(options_.stiefel.method));
      h.emplace_back("stiefel_tolerance", options_.stiefel.tolerance);
      h.emplace_back("stiefel_max_iterations", static_cast<double>(options_.stiefel.max_iterations));
      h.emplace_back("stiefel_smoothing", options_.stiefel.smoothing);
      h.emplace_back("stiefel_acceleration", static_cast<double>(options_.stiefel.acceleration));
      h.emplace_back("stiefel_warm_start", options_.stiefel.warm_start ? 1.0 : 0.0);
      h.emplace_back("retraction", retraction_name(options_.retraction));
      h.emplace_back("oblique_tolerance", options_.oblique.tolerance);
      h.emplace_back("oblique_max_iterations", static_cast<double>(options_.oblique.max_iterations));
      h.emplace_back("oblique_smoothing", options_.oblique.smoothing);
    }
    return h;
  }

  // The step protocol (step_protocol.hpp).

  /// Checks the state and finds every Muon leaf's numbers (the tree's structure, each leaf's kind and shape, each
  /// gradient's and moving average's shape), and schedules the step. Throws StructureError naming the leaf before
  /// anything is written.
  template <class Tree>
  void begin_step(Tree& params, const Tree& grads, MuonCoreState<Tree>& st, Tree* ema, MissingGradient missing) {
    if (st.name_ != kName)
      throw std::invalid_argument(std::string(kName) + "::step: the state was made by " + st.name_ + "::init");
    if (st.threads_ != common_.threads)
      throw std::invalid_argument(std::string(kName) + "::step: the state was made for " + std::to_string(st.threads_) +
                                  " threads, this optimizer has " + std::to_string(common_.threads));
    collect(params, grads, st, ema, missing == MissingGradient::skip);
    st.factor_ = common_.schedule ? common_.schedule(st.step_) : 1.0;
  }

  /// The squared norms of its gradients: Euclidean for matrices, the canonical Riemannian gradient's for Stiefel
  /// leaves (|G|^2 - |Z|^2 + |Z - Z^T|^2 / 2 with Z = W^T G, as the library's lift measures it), the Riemannian
  /// gradient's in its manifold's metric for the other manifold leaves (the squared norm of the lift's orthonormal
  /// coordinates); 0 without norm.
  template <class Tree>
  double gradient_squared_norm(MuonCoreState<Tree>& st, bool norm) const {
    using T = ptree::scalar_t<Tree>;
    if (!norm) return 0;
    double total = 0;
    for (std::size_t r = 0; r < st.records_.size(); ++r) {
      const auto& rec = st.records_[r];
      const auto& ptr = st.pointers_[r];
      st.work_[r]->squared = 0;
      if (rec.missing) continue;
      const Eigen::Map<const detail::Mat<T>> g(ptr.g, rec.rows, rec.cols);
      double sq = 0;
      for (Eigen::Index j = 0; j < rec.cols; ++j) sq += g.col(j).template cast<double>().squaredNorm();
      if (rec.spectral() && std::isfinite(sq)) {
        auto& w = *st.work_[r];
        w.stepper->lift(ptr.p, ptr.g, w.coords.data());
        sq = w.coords.template cast<double>().squaredNorm();
      }
      if (rec.stiefel() && std::isfinite(sq)) {
        auto& z = st.work_[r]->z;
        const Eigen::Map<const detail::Mat<T>> w(ptr.p, rec.rows, rec.cols);
        detail::dense_product<T>(z, w, detail::ProductOp::transposed, g, detail::ProductOp::plain, T(1), false);
        // Lazy expressions: no temporary in the step.
        sq +=
            -z.template cast<double>().squaredNorm() + 0.5 * (z - z.transpose()).template cast<double>().squaredNorm();
      }
      st.work_[r]->squared = sq;
      total += sq;
    }
    return total;
  }

  template <class Tree>
  std::pair<std::size_t, const char*> first_non_finite(const MuonCoreState<Tree>& st) const {
    using T = ptree::scalar_t<Tree>;
    std::size_t first = kNoLeaf;
    for (std::size_t r = 0; r < st.records_.size(); ++r) {
      const auto& rec = st.records_[r];
      if (rec.missing) continue;
      const Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> g(st.pointers_[r].g, rec.rows * rec.cols);
      if (!g.allFinite()) first = std::min(first, rec.leaf);
    }
    return {first, first == kNoLeaf ? nullptr : "the gradient is not finite"};
  }

  template <class Tree>
  NormOverflow norm_overflow(const MuonCoreState<Tree>& st) const {
    NormOverflow o;
    for (std::size_t r = 0; r < st.records_.size(); ++r) {
      if (st.records_[r].missing) continue;
      const double sq = st.work_[r]->squared;
      if (!std::isfinite(sq)) {
        o.first = std::min(o.first, st.records_[r].leaf);
      } else if (sq > o.most) {
        o.most = sq, o.largest = st.records_[r].leaf;
      }
    }
    return o;
  }

  /// Each leaf's update into its scratch, nothing written; the first leaf whose update is not finite.
  template <class Tree>
  std::size_t verify_step(MuonCoreState<Tree>& st, double gscale) {
    using T = ptree::scalar_t<Tree>;
    auto member_verify = [&](int member) {
      std::size_t first = kNoLeaf;
      for (std::size_t r : st.plan_[static_cast<std::size_t>(member)])
        if (!st.records_[r].missing && !prepare_leaf(st, r, static_cast<T>(gscale), true))
          first = std::min(first, st.records_[r].leaf);
      st.failed_[static_cast<std::size_t>(member)] = first;
    };
    run(member_verify);
    return *std::min_element(st.failed_.begin(), st.failed_.end());
  }

  template <class Tree>
  void apply_step(MuonCoreState<Tree>& st, double gscale, double ema_decay, bool verified) {
    using T = ptree::scalar_t<Tree>;
    auto member_step = [&](int member) {
      for (std::size_t r : st.plan_[static_cast<std::size_t>(member)])
        if (!st.records_[r].missing) step_leaf(st, r, static_cast<T>(gscale), static_cast<T>(ema_decay), verified);
    };
    run(member_step);
    ++st.step_;
    for (auto& rec : st.records_) rec.skipped += rec.missing ? 1 : 0;
  }

  template <class Tree>
  double scheduled_lr(const MuonCoreState<Tree>& st) const noexcept {
    return options_.lr * st.factor_;
  }

 private:
  template <class Tree>
  MuonCoreState<Tree> init_tree(const Tree& params, const LeafRule& rule) const {
    using T = ptree::scalar_t<Tree>;
    static_assert(std::is_floating_point_v<T>, "Muon::init: the tree's trainable scalar must be float or double");
    MuonCoreState<Tree> st;
    Eigen::Index entries = 0, multiplier_entries = 0;
    ptree::for_each_with_path(
        [&](const ptree::Path& path, const auto& leaf) {
          using L = std::remove_cvref_t<decltype(leaf)>;
          const std::size_t i = st.paths_.size();
          st.paths_.push_back(path.str());
          const LeafOptions lo = rule ? rule(path) : LeafOptions{};
          st.checked_.push_back(lo.frozen && !lo.excluded ? 1 : 0);
          st.muon_of_leaf_.push_back(-1);
          if (lo.frozen || lo.excluded) return;
          detail::MuonLeafRecord rec;
          rec.leaf = i;
          bool eligible = false;
          std::string kind;
          if constexpr (detail::manifold_leaf<L>) {
            eligible = kManifold && detail::muon_manifold_leaf<L, T>;
            kind = "a ";
            kind += L::kName;
            kind += " leaf";
            if constexpr (detail::muon_manifold_leaf<L, T>) {
              rec.rows = leaf.value().rows();
              rec.cols = leaf.value().cols();
              rec.kind = detail::muon_leaf_kind<L, T>();
              if (!kManifold) kind += " (ManifoldMuon steps those)";
              if (kManifold && rec.spectral())
                rec.manifold_retraction =
                    detail::leaf_retraction<L>(path.str(), lo.retraction ? lo.retraction : common_.retraction);
            }
          } else {
            std::size_t blocks = 0;
            bool contiguous = true;
            ptree::detail::for_each_block(
                [&](const auto& b) {
                  ++blocks;
                  std::tie(rec.rows, rec.cols) = detail::storage_shape(b);
                  rec.transposed = rec.rows != ptree::detail::block_rows(b);
                  contiguous = contiguous && detail::block_contiguous(b);
                },
                leaf);
            eligible = blocks == 1 && contiguous && rec.rows >= 2 && rec.cols >= 2;
            kind = blocks != 1  ? "a leaf of " + std::to_string(blocks) + " storage blocks"
                   : contiguous ? "a " + std::to_string(rec.rows) + "x" + std::to_string(rec.cols) + " block"
                                : "a non-contiguous block";
          }
          if (!eligible)
            throw std::invalid_argument(path.str() + ": " + kName + " steps matrices of at least 2 x 2" +
                                        (kManifold ? std::string(" and ") + detail::kManifoldMuonLeaves : "") +
                                        ", this is " + kind + " (leave LeafOptions::muon unset or false)");
          if (!lo.muon.value_or(true))
            throw std::invalid_argument(path.str() + ": LeafOptions::muon is false, yet the leaf is given to " + kName +
                                        "; give it to another group");
          if (lo.muon_matrices != 1) {
            // The split is along the storage's columns: a row-major leaf's rows, a column-major leaf's columns.
            const int m = lo.muon_matrices;
            if (rec.manifold() || m < 1 || rec.cols % m != 0 || rec.cols / m < 2)
              throw std::invalid_argument(
                  path.str() + ": LeafOptions::muon_matrices = " + std::to_string(m) + " needs a matrix leaf whose " +
                  (rec.transposed ? "rows" : "columns") + " split into that many matrices of at least 2 x 2; this is " +
                  (rec.manifold() ? std::string("a ") + detail::muon_kind_name(rec.kind) + " leaf"
                                  : "a " +
                                        (rec.transposed ? detail::shape_string(rec.cols, rec.rows) + " row-major"
                                                        : detail::shape_string(rec.rows, rec.cols)) +
                                        " matrix"));
            rec.matrices = m;
          }
          if (!(lo.lr_scale >= 0))
            throw std::invalid_argument(path.str() + ": lr_scale must be >= 0, got " + std::to_string(lo.lr_scale));
          rec.lr_scale = lo.lr_scale;
          rec.weight_decay = lo.weight_decay.value_or(rec.manifold() ? 0.0 : options_.weight_decay);
          rec.weight_decay_set = lo.weight_decay.has_value();
          if (!(rec.weight_decay >= 0))
            throw std::invalid_argument(path.str() + ": weight_decay must be >= 0, got " +
                                        std::to_string(rec.weight_decay));
          if (rec.manifold() && rec.weight_decay != 0)
            throw std::invalid_argument(path.str() + ": weight decay does not apply to " +
                                        detail::muon_kind_name(rec.kind) + " leaves");
          rec.retraction = options_.retraction;
          if (lo.retraction.has_value())
            rec.retraction =
                *lo.retraction == Retraction::cayley ? StiefelMuonRetraction::cayley : StiefelMuonRetraction::geodesic;
          rec.offset = entries;
          entries += rec.rows * rec.cols;
          if ((rec.stiefel() && options_.stiefel.warm_start) || rec.kind == detail::MuonLeafKind::oblique) {
            rec.multiplier = multiplier_entries;
            multiplier_entries += rec.multiplier_size();
          }
          st.muon_of_leaf_.back() = static_cast<int>(st.records_.size());
          st.records_.push_back(rec);
        },
        params);

    st.name_ = kName;
    st.hyperparameters_ = hyperparameters();
    transforms().record(st.hyperparameters_);
    st.threads_ = common_.threads;
    st.momentum_ = MuonCoreState<Tree>::Vector::Zero(entries);
    st.multipliers_ = MuonCoreState<Tree>::Vector::Zero(multiplier_entries);
    st.pointers_.resize(st.records_.size());
    st.failed_.assign(static_cast<std::size_t>(common_.threads), kNoLeaf);
    if (common_.ema_decay > 0) st.ema_.emplace(ptree::cast<T>(params));

    // Buffers, and the records shared among the threads by an estimate of their cost (msign_flops).
    const int threads = common_.threads;
    st.plan_.assign(static_cast<std::size_t>(threads), {});
    std::vector<double> load(static_cast<std::size_t>(threads), 0.0);
    std::size_t walk = 0;
    ptree::for_each(
        [&](const auto& leaf) {
          using L = std::remove_cvref_t<decltype(leaf)>;
          const std::size_t i = walk++;
          const int m = st.muon_of_leaf_[i];
          if (m < 0) return;
          const auto& rec = st.records_[static_cast<std::size_t>(m)];
          auto w = std::make_unique<detail::MuonLeafWork<T>>();
          w->u.resize(rec.rows, rec.cols);
          if (rec.stiefel() && fused(rec)) {
            w->z.resize(rec.cols, rec.cols);
            w->polar = std::make_unique<detail::StiefelMuonPolarStep<T>>(rec.rows, rec.cols);
          } else if (rec.stiefel()) {
            w->a.resize(rec.rows, rec.cols);
            w->z.resize(rec.cols, rec.cols);
            w->direction = std::make_unique<StiefelMuonDirection<T>>(rec.rows, rec.cols);
            if (rec.multiplier >= 0) w->multiplier.resize(rec.cols, rec.cols);
            if (rec.retraction == StiefelMuonRetraction::polar) {
              w->yd.resize(rec.rows, rec.cols);
              w->gram.resize(rec.cols, rec.cols);
              w->p.resize(rec.cols, rec.cols);
              w->pt.resize(rec.cols, rec.cols);
              w->eig = Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(rec.cols);
            } else {
              if constexpr (detail::muon_manifold_leaf<L, T>) {
                w->stepper = detail::make_leaf_stepper(leaf, SectionPolicy::recomputed);
                w->coords.resize(w->stepper->tangent_size(), 1);
              }
            }
          } else if (rec.spectral()) {
            w->a.resize(rec.rows, rec.cols);
            w->spectral = std::make_unique<detail::SpectralLeafDirection<T>>(rec.kind, rec.rows, rec.cols);
            if (rec.multiplier >= 0) w->multiplier.resize(rec.cols, 1);
            if constexpr (detail::muon_manifold_leaf<L, T>) {
              w->stepper = detail::make_leaf_stepper(leaf, SectionPolicy::recomputed);
              w->coords.resize(w->stepper->tangent_size(), 1);
            }
          } else {
            w->ms.reserve(rec.rows, rec.cols / rec.matrices);
          }
          st.work_.push_back(std::move(w));
          const double cost = static_cast<double>(rec.matrices) *
                              msign_flops(rec.rows, rec.cols / rec.matrices, options_.msign_options());
          const auto member = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
          st.plan_[member].push_back(static_cast<std::size_t>(m));
          load[member] += cost;
        },
        params);
    return st;
  }

  template <class F>
  void run(F& f) {
    if (pool_) {
      pool_->run(f);
    } else {
      f(0);
    }
  }

  // Whether a Stiefel leaf takes the fused polar step (StiefelMuonPolarStep, in the leaf's precision): the budgeted
  // (warm-started) fixed point with the polar retraction. The Cayley and geodesic retractions need A itself, dual
  // ascent its own iteration, and a solve to tolerance from the cold start StiefelMuonDirection's double arithmetic.
  bool fused(const detail::MuonLeafRecord& rec) const {
    return rec.retraction == StiefelMuonRetraction::polar &&
           options_.stiefel.method == StiefelMuonMethod::fixed_point && options_.stiefel.warm_start;
  }

  // Muon's step scale by the shape of the leaf's matrices (a row-major leaf is stepped as its transpose: msign(M^T) =
  // msign(M)^T).
  double shape_scale(const detail::MuonLeafRecord& rec) const {
    const Eigen::Index block = rec.cols / rec.matrices;
    const Eigen::Index rows = rec.transposed ? block : rec.rows, cols = rec.transposed ? rec.rows : block;
    switch (options_.scale) {
      case MuonScale::original:
        return std::sqrt(std::max(1.0, static_cast<double>(rows) / static_cast<double>(cols)));
      case MuonScale::match_rms_adamw:
        return 0.2 * std::sqrt(static_cast<double>(std::max(rows, cols)));
      case MuonScale::none:
        return 1.0;
    }
    return 1.0;
  }

  // Finds each Muon leaf's numbers in params, grads and ema, checking its kind and shape against the state's record
  // and each gradient (and moving average) against its parameter; a frozen leaf's gradient is checked as
  // Optimizer's are, an excluded leaf's not at all. The walk checks the trees' structure above the leaves.
  template <class Tree>
  static void collect(Tree& params, const Tree& grads, MuonCoreState<Tree>& st, Tree* ema, bool skip_missing) {
    std::size_t leaf = 0;
    auto visit = [&](auto& p, const auto& g, auto&... e) {
      using L = std::remove_cvref_t<decltype(p)>;
      const std::size_t i = leaf++;
      if (i >= st.paths_.size())
        throw StructureError("Muon::step: the tree has more leaves than the state (" +
                             std::to_string(st.paths_.size()) + ")");
      const int m = st.muon_of_leaf_[i];
      const std::string& path = st.paths_[i];
      if (m < 0) {
        if (st.checked_[i]) detail::check_frozen_gradient(path, p, g);
        return;
      }
      auto& rec = st.records_[static_cast<std::size_t>(m)];
      auto& ptr = st.pointers_[static_cast<std::size_t>(m)];
      rec.missing = skip_missing && detail::holds_no_number(g) && !detail::holds_no_number(p);
      if (rec.missing) {
        ptr = {};
        return;
      }
      if constexpr (detail::manifold_leaf<L>) {
        const Eigen::Index rows = p.value().rows(), cols = p.value().cols();
        if (detail::muon_leaf_kind<L, ptree::scalar_t<Tree>>() != rec.kind || !rec.manifold() || rows != rec.rows ||
            cols != rec.cols)
          throw StructureError(path + ": the leaf is a " + detail::shape_string(rows, cols) + " " + L::kName +
                               " point, the state was made for " +
                               (rec.manifold() ? "a " + detail::shape_string(rec.rows, rec.cols) + " " +
                                                     detail::muon_kind_name(rec.kind) + " point"
                                               : "a matrix"));
        detail::check_like_leaf(path, "gradient", 0, false, g.value(), rows, cols);
        (detail::check_like_leaf(path, "moving average", 0, false, e.value(), rows, cols), ...);
        ptr = {p.value().data(), g.value().data(), detail::ema_data(e.value()...)};
      } else {
        bool ok = !rec.manifold();
        ptree::detail::for_each_block(
            [&](auto& bp, const auto& bg, auto&... be) {
              if (detail::storage_shape(bp) != std::pair{rec.rows, rec.cols}) ok = false;
              if (!ok) return;
              const Eigen::Index rows = ptree::detail::block_rows(bp), cols = ptree::detail::block_cols(bp);
              detail::check_like_leaf(path, "gradient", 0, false, bg, rows, cols);
              (detail::check_like_leaf(path, "moving average", 0, false, be, rows, cols), ...);
              ptr = {detail::block_data(bp), detail::block_data(bg), detail::ema_data(be...)};
            },
            p, g, e...);
        if (!ok)
          throw StructureError(
              path + ": the leaf does not match the state's (a " +
              detail::shape_string(rec.transposed ? rec.cols : rec.rows, rec.transposed ? rec.rows : rec.cols) +
              " matrix)");
      }
    };
    detail::visit_leaves(visit, params, grads, ema);
    if (leaf != st.paths_.size())
      throw StructureError("Muon::step: the tree has " + std::to_string(leaf) + " leaves, the state " +
                           std::to_string(st.paths_.size()));
  }

  // The leaf's update from its gradient and momentum into its scratch, writing no state: w.u <- msign(U) for a
  // matrix, w.a <- the direction for a manifold leaf (and its next multiplier into w.multiplier), with U the momentum
  // blend of the step. With `check`, returns whether the update (and a matrix's new parameters) are finite; true
  // otherwise.
  template <class Tree, class T>
  bool prepare_leaf(MuonCoreState<Tree>& st, std::size_t r, T gscale, bool check) {
    const auto& rec = st.records_[r];
    const auto& ptr = st.pointers_[r];
    auto& w = *st.work_[r];
    const Eigen::Index size = rec.rows * rec.cols;
    if (size == 0) return true;
    using Arr = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
    using ConstArr = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
    const ConstArr g(ptr.g, size), buf(st.momentum_.data() + rec.offset, size);
    Arr u(w.u.data(), size);
    const T beta = static_cast<T>(options_.momentum);
    const T keep = T(1) - beta;
    // The new momentum, as step_leaf writes it, then the Nesterov blend.
    u = beta * buf + (keep * gscale) * g;
    if (options_.nesterov) u = (keep * gscale) * g + beta * u;
    if (check && !u.allFinite()) return false;
    const double lr = options_.lr * st.factor_ * rec.lr_scale;
    if (!rec.manifold()) {
      const Eigen::Index block = rec.cols / rec.matrices;
      for (Eigen::Index k = 0; k < rec.matrices; ++k)
        msign_inplace(w.u.middleCols(k * block, block), options_.msign_options(), w.ms);
      if (!check) return true;
      const T step = static_cast<T>(lr * shape_scale(rec));
      const ConstArr p(ptr.p, size);
      return (static_cast<T>(1 - lr * rec.weight_decay) * p - step * u).allFinite();
    }
    if (rec.spectral()) {
      // An Oblique leaf's multiplier starts from the one its previous step left (its first step from the tangent
      // projection of U, the direction's cold start).
      T* d = nullptr;
      if (rec.multiplier >= 0) {
        w.multiplier =
            Eigen::Map<const detail::Mat<T>>(st.multipliers_.data() + rec.multiplier, rec.multiplier_size(), 1);
        d = w.multiplier.data();
      }
      const bool warm = st.step_ - rec.skipped > 0;
      w.report = stiefel_report(w.spectral->solve(ptr.p, w.u.data(), w.a.data(), options_.oblique, d, warm));
      return !check || w.a.allFinite();
    }
    const T* multiplier = rec.multiplier >= 0 ? st.multipliers_.data() + rec.multiplier : nullptr;
    if (w.polar) {
      w.report = w.polar->prepare(ptr.p, w.u.data(), lr, options_.stiefel, multiplier);
      return !check || w.polar->finite();
    }
    if (multiplier != nullptr) w.multiplier = Eigen::Map<const detail::Mat<T>>(multiplier, rec.cols, rec.cols);
    w.report = w.direction->solve(ptr.p, w.u.data(), w.a.data(), options_.stiefel, nullptr,
                                  multiplier != nullptr ? w.multiplier.data() : nullptr, multiplier != nullptr);
    return !check || w.a.allFinite();
  }

  // Writes the leaf's step: the momentum, the parameters (from the update prepare_leaf left when `prepared`), the
  // EMA. Arithmetic and retractions only: throws nothing.
  template <class Tree, class T>
  void step_leaf(MuonCoreState<Tree>& st, std::size_t r, T gscale, T decay, bool prepared) {
    const auto& rec = st.records_[r];
    const auto& ptr = st.pointers_[r];
    auto& w = *st.work_[r];
    const Eigen::Index size = rec.rows * rec.cols;
    if (size == 0) return;
    using Arr = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
    using ConstArr = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
    if (!prepared) prepare_leaf(st, r, gscale, false);
    const ConstArr g(ptr.g, size);
    Arr buf(st.momentum_.data() + rec.offset, size);
    const T beta = static_cast<T>(options_.momentum);
    buf = beta * buf + ((T(1) - beta) * gscale) * g;
    const double lr = options_.lr * st.factor_ * rec.lr_scale;
    Arr p(ptr.p, size);
    if (!rec.manifold()) {
      const Arr u(w.u.data(), size);
      const T step = static_cast<T>(lr * shape_scale(rec));
      if (rec.weight_decay != 0) {
        p = static_cast<T>(1 - lr * rec.weight_decay) * p - step * u;
      } else {
        p -= step * u;
      }
    } else if (w.polar) {
      w.polar->apply(ptr.p, w.u.data());
      if (rec.multiplier >= 0)
        Eigen::Map<detail::Mat<T>>(st.multipliers_.data() + rec.multiplier, rec.cols, rec.cols) =
            w.polar->next_multiplier();
    } else if (rec.spectral()) {
      retract_spectral(rec, w, ptr.p, static_cast<T>(lr));
      if (rec.multiplier >= 0)
        Eigen::Map<detail::Mat<T>>(st.multipliers_.data() + rec.multiplier, rec.multiplier_size(), 1) = w.multiplier;
    } else {
      retract(rec, w, ptr.p, static_cast<T>(lr));
      if (rec.multiplier >= 0)
        Eigen::Map<detail::Mat<T>>(st.multipliers_.data() + rec.multiplier, rec.cols, rec.cols) = w.multiplier;
    }
    if (ptr.ema != nullptr) {
      Arr e(ptr.ema, size);
      e = decay * e + (T(1) - decay) * p;
    }
  }

  // W <- R_W(-lr A) for a Stiefel leaf, A in w.a.
  template <class T>
  static void retract(const detail::MuonLeafRecord& rec, detail::MuonLeafWork<T>& w, T* y, T lr) {
    Eigen::Map<detail::Mat<T>> ym(y, rec.rows, rec.cols);
    if (rec.cols == 0) return;  // St(N, 0) is one point
    if (rec.retraction == StiefelMuonRetraction::polar) {
      // Y = W - lr A, then W = Y (Y^T Y)^-1/2 with the Gram matrix formed and decomposed in double.
      w.u = ym - lr * w.a;
      w.yd = w.u.template cast<double>();
      detail::dense_product<double>(w.gram, w.yd, detail::ProductOp::transposed, w.yd, detail::ProductOp::plain, 1.0,
                                    false);
      w.eig.compute(w.gram);
      const auto& lambda = w.eig.eigenvalues();
      const auto& q = w.eig.eigenvectors();
      // Y's singular values are sqrt(1 + lr^2 s_i(A)^2) >= 1 for a tangent A: the Gram matrix is well conditioned.
      for (Eigen::Index j = 0; j < rec.cols; ++j) w.p.col(j) = q.col(j) / std::sqrt(std::max(lambda(j), 1e-300));
      w.gram.noalias() = w.p * q.transpose();
      w.pt = w.gram.template cast<T>();
      detail::dense_product<T>(ym, w.u, w.pt);
      return;
    }
    // The library's retraction of the tangent vector -lr A: its lift coordinates are those of the Euclidean
    // gradient A - W Omega / 2 (Omega = W^T A), whose canonical Riemannian gradient is A.
    detail::dense_product<T>(w.z, ym, detail::ProductOp::transposed, w.a, detail::ProductOp::plain, T(1), false);
    detail::dense_product<T>(w.u, ym, detail::ProductOp::plain, w.z, detail::ProductOp::plain, T(-0.5), false);
    w.u += w.a;
    w.stepper->lift(y, w.u.data(), w.coords.data());
    w.coords *= -lr;
    w.stepper->retract(y, w.coords.data(),
                       rec.retraction == StiefelMuonRetraction::cayley ? Retraction::cayley : Retraction::geodesic);
  }

  // W <- R_W(-lr A) for a Sphere, SpecialOrthogonal, Grassmann or Oblique leaf, A in w.a, by the leaf manifold's
  // retraction. The library's lift gives A's coordinates from the Euclidean gradient whose Riemannian gradient is A:
  // A itself under the Euclidean metric of Sphere, Grassmann and Oblique, A / 2 under SpecialOrthogonal's
  // tr(U^T V) / 2. A zero A (a tangent space {0}, or U normal to it) leaves W as it is: R_W(0) = W, exactly.
  template <class T>
  static void retract_spectral(const detail::MuonLeafRecord& rec, detail::MuonLeafWork<T>& w, T* y, T lr) {
    if ((w.a.array() == T(0)).all()) return;
    const T metric = rec.kind == detail::MuonLeafKind::special_orthogonal ? T(0.5) : T(1);
    w.u = metric * w.a;
    w.stepper->lift(y, w.u.data(), w.coords.data());
    w.coords *= -lr;
    w.stepper->retract(y, w.coords.data(), rec.manifold_retraction);
  }

  // A spectral direction's report in the fields direction_report shows (the same quantities).
  static StiefelMuonReport stiefel_report(const SpectralDirectionReport& s) {
    StiefelMuonReport r;
    r.iterations = s.iterations;
    r.converged = s.converged;
    r.residual = s.residual;
    r.dual = s.dual;
    r.primal = s.primal;
    r.projected = s.projected;
    return r;
  }

  Options options_;
  CommonOptions common_;
  std::unique_ptr<detail::ThreadPool> pool_;
};

/// The state of Muon or ManifoldMuon for one parameter tree: a PartitionState of two groups, "fallback" (the
/// fallback optimizer's state, Muon's leaves excluded from it) and "muon" (MuonCore's: the momentum of Muon's leaves
/// and the multipliers of ManifoldMuon's Stiefel and Oblique leaves), with the moving average. Saved and restored by
/// geomopt::io like an OptimizerState: for_each_slot visits every leaf in walk order, a Muon leaf with
/// "momentum_buffer" shaped like the leaf, then a Stiefel leaf's n x n or an Oblique leaf's n x 1 "multiplier"; the
/// hyperparameters are Muon's, then the fallback's as "fallback.<kernel>.<name>", then the transforms.
template <class Tree>
class MuonState : public PartitionState<Tree, OptimizerState<Tree>, MuonCoreState<Tree>> {
  using Base = PartitionState<Tree, OptimizerState<Tree>, MuonCoreState<Tree>>;

 public:
  // An OptimizerState's types; like it, movable and not copyable.
  using Scalar = typename OptimizerState<Tree>::Scalar;
  using Vector = typename OptimizerState<Tree>::Vector;
  using MatrixMap = typename OptimizerState<Tree>::MatrixMap;
  using ConstMatrixMap = typename OptimizerState<Tree>::ConstMatrixMap;

  MuonState() = default;
  MuonState(Base&& parts, std::string_view name, Hyperparameters hyperparameters) : Base(std::move(parts)) {
    this->name_ = name;
    this->hyperparameters_ = std::move(hyperparameters);
  }

  /// Whether leaf i is stepped by Muon (its momentum) rather than by the fallback or frozen.
  bool muon_leaf(std::size_t i) const { return this->group_of_leaf(i) == 1; }
  /// Leaves stepped by Muon.
  std::size_t muon_leaf_count() const noexcept { return core().muon_leaf_count(); }
  /// The fallback optimizer's state (Muon's leaves are excluded from it; the moving average is this state's).
  const OptimizerState<Tree>& fallback() const noexcept { return this->template group_state<0>(); }
  /// ManifoldMuon: what the last step's direction solve of manifold leaf i reported (see MuonCoreState).
  const StiefelMuonReport& direction_report(std::size_t i) const { return core().direction_report(i); }

 private:
  const MuonCoreState<Tree>& core() const noexcept { return this->template group_state<1>(); }
};

/// Muon (kManifold = false) and ManifoldMuon (true): the Partition of MuonCore, which steps the matrices (and
/// ManifoldMuon's manifold leaves) LeafOptions::muon or its default picks, and the fallback optimizer, which steps
/// every other leaf; one step covers both with CommonOptions' transforms.
template <class Fallback, bool kManifold>
class BasicMuon {
  using Core = MuonCore<Fallback, kManifold>;
  using Parts = Partition<Optimizer<Fallback>, Core>;

 public:
  using Options = MuonOptions<Fallback>;
  static constexpr const char* kName = Core::kName;

  explicit BasicMuon(Options options = {}, CommonOptions common = {})
      : common_(common),
        parts_(StepTransforms::of(common),
               group("fallback", Optimizer<Fallback>(options.fallback, StepTransforms::without(common))),
               group("muon", Core(options, StepTransforms::without(common)), muon_rule())) {}

  const Options& options() const noexcept { return parts_.template group_optimizer<1>().options(); }
  const CommonOptions& common() const noexcept { return common_; }
  StepTransforms transforms() const noexcept { return StepTransforms::of(common_); }

  /// The state for params. A leaf is Muon's when rule(path).muon says so, or, unset, when it is a Euclidean leaf of
  /// one matrix block of at least 2 x 2 (ManifoldMuon: or a Stiefel, Sphere, SpecialOrthogonal, Grassmann or Oblique
  /// leaf); a frozen leaf is the fallback's. Throws std::invalid_argument naming the path when a rule asks Muon to
  /// step a leaf it cannot (a vector, a packed leaf, a manifold leaf of another manifold).
  template <class Tree>
  MuonState<Tree> init(const Tree& params, const LeafRule& rule = {}) const {
    if constexpr (ptree::tree<Tree>) {
      Hyperparameters h = hyperparameters();
      transforms().record(h);
      return MuonState<Tree>(parts_.init(params, rule), kName, std::move(h));
    } else {
      ptree::detail::not_a_tree<Tree>();
      return {};
    }
  }

  /// One step of every leaf: Muon's by the orthogonalized (ManifoldMuon: spectral steepest tangent) update, the
  /// rest by the fallback (see Optimizer::step for the report, the gradients' shapes and the non-finite policy; the
  /// report's lr is Muon's).
  template <class Tree>
  StepReport step(Tree& params, const Tree& grads, MuonState<Tree>& st) {
    return detail::step_alone(*this, params, grads, st);
  }

  /// Muon's hyperparameters as a checkpoint records them, then the fallback's as "fallback.<kernel>.<name>" (the
  /// state adds the transforms).
  Hyperparameters hyperparameters() const {
    Hyperparameters h = parts_.template group_optimizer<1>().hyperparameters();
    for (auto& [name, value] : parts_.template group_optimizer<0>().hyperparameters())
      h.emplace_back("fallback." + std::string(Fallback::kName) + "." + name, std::move(value));
    return h;
  }

  // The step protocol (step_protocol.hpp), so that Muon can be a group of a Partition.

  template <class Tree>
  void begin_step(Tree& params, const Tree& grads, MuonState<Tree>& st, Tree* ema, MissingGradient missing) {
    if (st.optimizer() != kName)
      throw std::invalid_argument(std::string(kName) + "::step: the state was made by " + std::string(st.optimizer()) +
                                  "::init");
    parts_.begin_step(params, grads, st, ema, missing);
  }
  template <class Tree>
  double gradient_squared_norm(MuonState<Tree>& st, bool norm) {
    return parts_.gradient_squared_norm(st, norm);
  }
  template <class Tree>
  std::pair<std::size_t, const char*> first_non_finite(const MuonState<Tree>& st) const {
    return parts_.first_non_finite(st);
  }
  template <class Tree>
  NormOverflow norm_overflow(const MuonState<Tree>& st) const {
    return parts_.norm_overflow(st);
  }
  template <class Tree>
  std::size_t verify_step(MuonState<Tree>& st, double gscale) {
    return parts_.verify_step(st, gscale);
  }
  template <class Tree>
  void apply_step(MuonState<Tree>& st, double gscale, double ema_decay, bool verified) {
    parts_.apply_step(st, gscale, ema_decay, verified);
  }
  /// Muon's learning rate at this step.
  template <class Tree>
  double scheduled_lr(const MuonState<Tree>& st) const {
    return parts_.template group_optimizer<1>().scheduled_lr(st.template group_state<1>());
  }

 private:
  // Muon's leaves: those the rule marks (LeafOptions::muon), or, unmarked, the matrices (and ManifoldMuon's manifold
  // leaves); never a frozen one.
  static GroupRule muon_rule() {
    return [](const LeafInfo& l) {
      if (l.options.frozen || l.options.excluded) return false;
      return l.options.muon.value_or(l.matrix() || (kManifold && detail::muon_manifold_name(l.kind)));
    };
  }

  CommonOptions common_;
  Parts parts_;
};

/// Muon with AdamW for every other leaf.
using Muon = BasicMuon<AdamWKernel, false>;
/// Manifold Muon on Stiefel, Sphere, SpecialOrthogonal, Grassmann and Oblique leaves, Muon on Euclidean matrices, AdamW
/// for every other leaf.
using ManifoldMuon = BasicMuon<AdamWKernel, true>;

}  // namespace geomopt
