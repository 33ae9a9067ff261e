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
// the momentum B only.
//
// ManifoldMuon steps Stiefel leaves (W^T W = I, N x n) by the spectral-norm steepest tangent direction A of the
// momentum U (stiefel_muon.hpp), then W <- R_W(-lr A) by the polar retraction msign(W - lr A) (or the library's Cayley
// or geodesic retraction). Its Euclidean matrix leaves take Muon's step, every other leaf the fallback's.
//
// Its leaves are matrices and Stiefel points, owned or over borrowed memory (ptree::BorrowedArray, Borrowed<Stiefel>).
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
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

#include "geomopt/manifolds.hpp"
#include "geomopt/manifolds/detail/dense_kernels.hpp"
#include "geomopt/optimizers/kernels.hpp"
#include "geomopt/optimizers/msign.hpp"
#include "geomopt/optimizers/optimizer.hpp"
#include "geomopt/optimizers/options.hpp"
#include "geomopt/optimizers/state.hpp"
#include "geomopt/optimizers/stiefel_muon.hpp"
#include "geomopt/ptree.hpp"

namespace geomopt {

/// How Muon scales a leaf's orthogonalized update by its stored shape rows x cols.
enum class MuonScale {
  original,         ///< sqrt(max(1, rows / cols)): Keller Jordan's Muon, torch.optim.Muon's default
  match_rms_adamw,  ///< 0.2 sqrt(max(rows, cols)): the update's RMS matches AdamW's typical 0.2 (Moonlight)
  none,             ///< 1
};

/// How ManifoldMuon returns a Stiefel leaf to the manifold after its step.
enum class StiefelMuonRetraction {
  polar,     ///< W <- msign(W - lr A), by the Gram eigendecomposition in double
  cayley,    ///< the library's Cayley retraction of -lr A (StiefelFamilyStepper)
  geodesic,  ///< the library's exponential map of -lr A
};

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
    fallback.validate();
  }
};

namespace detail {

template <class T>
using MuonMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;

// What Muon keeps of one of its leaves.
struct MuonLeafRecord {
  std::size_t leaf = 0;             // index in walk order
  Eigen::Index rows = 0, cols = 0;  // the storage order read column-major (a row-major matrix's transpose)
  bool transposed = false;          // a row-major matrix: rows x cols is the transpose of its shape
  Eigen::Index offset = 0;          // first entry of its momentum
  bool stiefel = false;             // ManifoldMuon's Stiefel leaf
  Eigen::Index multiplier = -1;     // a Stiefel leaf under StiefelMuonOptions::warm_start: first entry of it
  double lr_scale = 1;
  double weight_decay = 0;
  bool weight_decay_set = false;  // by the rule (else Muon's weight_decay applies)
  StiefelMuonRetraction retraction = StiefelMuonRetraction::polar;
  std::int64_t skipped = 0;  // steps sat out for want of a gradient (MissingGradient::skip)
  bool missing = false;      // this step's gradient is empty and the leaf sits it out
};

// Whether a leaf of scalar T is a Stiefel point ManifoldMuon steps: Stiefel<T>, or one over borrowed memory.
template <class L, class T>
inline constexpr bool muon_stiefel_leaf = std::is_same_v<L, Stiefel<T>> || std::is_same_v<L, Borrowed<Stiefel<T>>>;

// The per-step buffers of one Muon leaf (scratch, rebuilt by init).
template <class T>
struct MuonLeafWork {
  MuonMatrix<T> u;  // the update before msign / the direction's input
  MsignWorkspace<T> ms;
  // Stiefel leaves:
  MuonMatrix<T> a, z;  // the direction; Z = W^T G for the gradient norm
  std::unique_ptr<StiefelMuonDirection<T>> direction;
  std::unique_ptr<StiefelMuonPolarStep<T>> polar;  // the polar retraction with the fixed point: the fused step
  MuonMatrix<T> multiplier;                        // the direction's next multiplier, until the step writes it
  StiefelMuonReport report;                        // of the last step's direction
  Eigen::MatrixXd yd, gram, p;                     // polar: W - lr A in double, its Gram matrix, (Gram)^-1/2
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig;
  MuonMatrix<T> pt;
  std::unique_ptr<ManifoldStepper<T>> stepper;  // cayley / geodesic
  MuonMatrix<T> coords;
  double squared = 0;  // the gradient's squared norm at the last prepass

  std::size_t bytes() const noexcept {
    std::size_t b = static_cast<std::size_t>(u.size() + a.size() + z.size() + pt.size() + coords.size()) * sizeof(T) +
                    ms.bytes() + static_cast<std::size_t>(yd.size() + gram.size() + p.size()) * sizeof(double);
    if (direction) b += direction->bytes();
    if (polar) b += polar->bytes();
    b += static_cast<std::size_t>(multiplier.size()) * sizeof(T);
    if (stepper) b += stepper->workspace_bytes();
    return b;
  }
};

}  // namespace detail

/// The state of Muon or ManifoldMuon for one parameter tree: the fallback optimizer's state (Muon's leaves frozen in
/// it), the momentum of Muon's leaves and, under StiefelMuonOptions::warm_start, the multiplier of ManifoldMuon's
/// Stiefel leaves. Saved and restored by geomopt::io like an OptimizerState: for_each_slot visits every leaf in walk
/// order, a Muon leaf with "momentum_buffer" shaped like the leaf, then a Stiefel leaf's n x n "multiplier".
template <class Tree>
class MuonState {
 public:
  // An OptimizerState's types; like it, movable and not copyable.
  using Scalar = typename OptimizerState<Tree>::Scalar;
  using Vector = typename OptimizerState<Tree>::Vector;
  using MatrixMap = typename OptimizerState<Tree>::MatrixMap;
  using ConstMatrixMap = typename OptimizerState<Tree>::ConstMatrixMap;

  std::int64_t step_count() const noexcept { return fallback_.step_count(); }
  /// Sets the step count, for restoring a checkpoint; every leaf's own count becomes t too.
  void set_step_count(std::int64_t t) {
    fallback_.set_step_count(t);
    for (auto& r : records_) r.skipped = 0;
  }
  /// The steps leaf i (walk order) has taken, as OptimizerState::leaf_step_count says: the state's count less the
  /// steps it sat out for want of a gradient (CommonOptions::missing_gradient = skip); 0 for a frozen leaf.
  std::int64_t leaf_step_count(std::size_t i) const {
    const int m = muon_of_leaf_.at(i);
    return m < 0 ? fallback_.leaf_step_count(i) : step_count() - records_[static_cast<std::size_t>(m)].skipped;
  }
  /// Sets leaf i's own step count, for restoring a checkpoint: std::invalid_argument unless the leaf is not frozen
  /// and 0 <= t <= step_count().
  void set_leaf_step_count(std::size_t i, std::int64_t t) {
    const int m = muon_of_leaf_.at(i);
    if (m < 0) return fallback_.set_leaf_step_count(i, t);
    if (t < 0 || t > step_count())
      throw std::invalid_argument(leaf_path(i) + ": a leaf's step count must be from 0 to the state's " +
                                  std::to_string(step_count()) + ", got " + std::to_string(t));
    records_[static_cast<std::size_t>(m)].skipped = step_count() - t;
  }
  /// f(path, count) for each leaf whose own step count differs from the state's, in walk order (what a checkpoint
  /// records beside the step count).
  template <class F>
  void for_each_leaf_step(F&& f) const {
    for (std::size_t i = 0; i < muon_of_leaf_.size(); ++i)
      if (!leaf_frozen(i) && leaf_step_count(i) != step_count()) f(leaf_path(i), leaf_step_count(i));
  }
  /// Changes leaf i's lr_scale between steps (a per-group learning rate a schedule moves), Muon's leaves and the
  /// fallback's alike: std::invalid_argument naming the leaf for a frozen leaf or a value that is not >= 0, and
  /// nothing changes then.
  void set_leaf_lr_scale(std::size_t i, double lr_scale) {
    const int m = muon_of_leaf_.at(i);
    if (m < 0) return fallback_.set_leaf_lr_scale(i, lr_scale);
    if (!(lr_scale >= 0))
      throw std::invalid_argument(leaf_path(i) + ": lr_scale must be >= 0, got " + std::to_string(lr_scale));
    records_[static_cast<std::size_t>(m)].lr_scale = lr_scale;
  }
  /// Changes leaf i's weight decay between steps, likewise; a Stiefel leaf's must stay 0.
  void set_leaf_weight_decay(std::size_t i, double weight_decay) {
    const int m = muon_of_leaf_.at(i);
    if (m < 0) return fallback_.set_leaf_weight_decay(i, weight_decay);
    auto& rec = records_[static_cast<std::size_t>(m)];
    if (!(weight_decay >= 0))
      throw std::invalid_argument(leaf_path(i) + ": weight_decay must be >= 0, got " + std::to_string(weight_decay));
    if (rec.stiefel && weight_decay != 0)
      throw std::invalid_argument(leaf_path(i) + ": weight decay does not apply to Stiefel leaves");
    rec.weight_decay = weight_decay;
    rec.weight_decay_set = true;
  }
  /// "Muon" or "ManifoldMuon".
  std::string_view optimizer() const noexcept { return name_; }
  /// Muon's hyperparameters, then the fallback's as "fallback.<kernel>.<name>".
  const Hyperparameters& hyperparameters() const noexcept { return hyperparameters_; }

  /// Bytes of state: Muon's momentum plus the fallback's state (and the EMA copy, counted there once).
  std::size_t nbytes() const noexcept {
    return static_cast<std::size_t>(momentum_.size() + multipliers_.size()) * sizeof(Scalar) + fallback_.nbytes();
  }
  /// Bytes of per-step scratch (not state).
  std::size_t workspace_bytes() const noexcept {
    std::size_t b = fallback_.workspace_bytes();
    for (const auto& w : work_) b += w->bytes();
    return b;
  }

  std::size_t leaf_count() const noexcept { return fallback_.leaf_count(); }
  const std::string& leaf_path(std::size_t i) const { return fallback_.leaf_path(i); }
  /// Whether leaf i is stepped by Muon (its momentum) rather than by the fallback or frozen.
  bool muon_leaf(std::size_t i) const { return muon_of_leaf_.at(i) >= 0; }
  bool leaf_frozen(std::size_t i) const { return !muon_leaf(i) && fallback_.leaf_frozen(i); }
  /// Leaves stepped by Muon.
  std::size_t muon_leaf_count() const noexcept { return records_.size(); }
  /// The fallback optimizer's state (Muon's leaves appear frozen in it).
  const OptimizerState<Tree>& fallback() const noexcept { return fallback_; }
  /// ManifoldMuon: what the last step's direction solve of Stiefel leaf i reported (iterations, convergence, duality
  /// gap; all zero before the first step). Throws std::invalid_argument when leaf i is not one of its Stiefel leaves.
  const StiefelMuonReport& direction_report(std::size_t i) const {
    const int m = i < muon_of_leaf_.size() ? muon_of_leaf_[i] : -1;
    if (m < 0 || !records_[static_cast<std::size_t>(m)].stiefel)
      throw std::invalid_argument("MuonState::direction_report: leaf " + std::to_string(i) +
                                  " is not a Stiefel leaf stepped by ManifoldMuon");
    return work_[static_cast<std::size_t>(m)]->report;
  }

  /// f(path, name, value) for each per-leaf option, by leaf in walk order (see OptimizerState::for_each_leaf_option);
  /// a Stiefel leaf of ManifoldMuon reports its StiefelMuonRetraction ("polar", "cayley" or "geodesic").
  template <class F>
  void for_each_leaf_option(F&& f) const {
    const auto& leaves = fallback_.leaves_;
    for (std::size_t i = 0; i < leaves.size(); ++i) {
      const int m = muon_of_leaf_[i];
      if (m < 0) {
        OptimizerState<Tree>::visit_leaf_options(leaves[i], f);
        continue;
      }
      const auto& r = records_[static_cast<std::size_t>(m)];
      f(leaves[i].path, std::string_view("frozen"), false);
      f(leaves[i].path, std::string_view("lr_scale"), r.lr_scale);
      if (r.weight_decay_set) f(leaves[i].path, std::string_view("weight_decay"), r.weight_decay);
      if (r.stiefel) f(leaves[i].path, std::string_view("retraction"), retraction_name(r.retraction));
    }
  }

  /// f(path, name, map) for every array of state, by leaf in walk order (see OptimizerState::for_each_slot).
  template <class F>
  void for_each_slot(F&& f) {
    visit_slots(*this, f);
  }
  template <class F>
  void for_each_slot(F&& f) const {
    visit_slots(*this, f);
  }

  const Tree* ema() const noexcept { return fallback_.ema(); }
  Tree* ema() noexcept { return fallback_.ema(); }

 private:
  template <class F, bool M>
  friend class BasicMuon;

  template <class Self, class F>
  static void visit_slots(Self& self, F& f) {
    using Map = std::conditional_t<std::is_const_v<Self>, ConstMatrixMap, MatrixMap>;
    const auto& leaves = self.fallback_.leaves_;
    for (std::size_t i = 0; i < leaves.size(); ++i) {
      const int m = self.muon_of_leaf_[i];
      if (m >= 0) {
        const auto& r = self.records_[static_cast<std::size_t>(m)];
        f(leaves[i].path, std::string_view("momentum_buffer"), Map(self.momentum_.data() + r.offset, r.rows, r.cols));
        if (r.multiplier >= 0)
          f(leaves[i].path, std::string_view("multiplier"),
            Map(self.multipliers_.data() + r.multiplier, r.cols, r.cols));
        continue;
      }
      // The fallback's arrays of this one leaf, in its own order.
      OptimizerState<Tree>::visit_leaf_slots(self.fallback_, leaves[i], f);
    }
  }

  OptimizerState<Tree> fallback_;
  std::string name_;
  Hyperparameters hyperparameters_;
  std::vector<detail::MuonLeafRecord> records_;
  std::vector<int> muon_of_leaf_;  // per leaf in walk order: its record, or -1
  Vector momentum_;
  Vector multipliers_;  // per Stiefel leaf under warm_start: its n x n multiplier
  std::vector<std::unique_ptr<detail::MuonLeafWork<Scalar>>> work_;
  std::vector<detail::UnitPointers<Scalar>> pointers_;  // per record, found by each step
  std::vector<std::vector<std::size_t>> plan_;          // per thread: records
};

/// Muon (kManifold = false) and ManifoldMuon (true) over a fallback kernel for the leaves they do not step.
template <class Fallback, bool kManifold>
class BasicMuon {
 public:
  using Options = MuonOptions<Fallback>;
  static constexpr const char* kName = kManifold ? "ManifoldMuon" : "Muon";

  explicit BasicMuon(Options options = {}, CommonOptions common = {})
      : options_(validated(std::move(options))), fallback_(options_.fallback, common) {}

  const Options& options() const noexcept { return options_; }
  const CommonOptions& common() const noexcept { return fallback_.common(); }

  /// The state for params. A leaf is Muon's when rule(path).muon says so, or, unset, when it is a Euclidean leaf of
  /// one matrix block of at least 2 x 2 (ManifoldMuon: or a Stiefel leaf). Throws std::invalid_argument naming the
  /// path when a rule asks Muon to step a leaf it cannot (a vector, a packed or manifold leaf other than Stiefel).
  template <class Tree>
  MuonState<Tree> init(const Tree& params, const LeafRule& rule = {}) const {
    if constexpr (ptree::tree<Tree>) {
      return init_tree(params, rule);
    } else {
      ptree::detail::not_a_tree<Tree>();
      return {};
    }
  }

  /// One step of every leaf: Muon's by the orthogonalized (ManifoldMuon: spectral steepest tangent) update, the
  /// rest by the fallback, in one pass (see Optimizer::step for the report, the gradients' shapes and the non-finite
  /// policy).
  template <class Tree>
  StepReport step(Tree& params, const Tree& grads, MuonState<Tree>& st) {
    if constexpr (ptree::tree<Tree>) {
      if (st.name_ != kName)
        throw std::invalid_argument(std::string(kName) + "::step: the state was made by " + st.name_ + "::init");
      const auto& schedule = fallback_.common().schedule;
      const double factor = schedule ? schedule(st.step_count()) : 1.0;
      Units<Tree> units{*this, st};
      StepReport report = fallback_.step_with(params, grads, st.fallback_, units);
      report.lr = options_.lr * factor;
      if (report.applied)
        for (auto& rec : st.records_) rec.skipped += rec.missing ? 1 : 0;
      return report;
    } else {
      ptree::detail::not_a_tree<Tree>();
      return {};
    }
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
                         {"msign", static_cast<double>(options_.msign)},
                         {"scale", static_cast<double>(options_.scale)}};
    if (kManifold) {
      h.emplace_back("stiefel_method", static_cast<double>(options_.stiefel.method));
      h.emplace_back("stiefel_tolerance", options_.stiefel.tolerance);
      h.emplace_back("stiefel_max_iterations", static_cast<double>(options_.stiefel.max_iterations));
      h.emplace_back("stiefel_smoothing", options_.stiefel.smoothing);
      h.emplace_back("stiefel_acceleration", static_cast<double>(options_.stiefel.acceleration));
      h.emplace_back("stiefel_warm_start", options_.stiefel.warm_start ? 1.0 : 0.0);
      h.emplace_back("retraction", static_cast<double>(options_.retraction));
    }
    for (const auto& [name, value] : Fallback::hyperparameters(options_.fallback))
      h.emplace_back("fallback." + std::string(Fallback::kName) + "." + name, value);
    return h;
  }

 private:
  template <class Tree>
  MuonState<Tree> init_tree(const Tree& params, const LeafRule& rule) const {
    using T = ptree::scalar_t<Tree>;
    static_assert(std::is_floating_point_v<T>, "Muon::init: the tree's trainable scalar must be float or double");
    MuonState<Tree> st;
    std::unordered_set<std::string> mine;
    Eigen::Index entries = 0, multiplier_entries = 0;
    std::size_t index = 0;
    ptree::for_each_with_path(
        [&](const ptree::Path& path, const auto& leaf) {
          using L = std::remove_cvref_t<decltype(leaf)>;
          const std::size_t i = index++;
          const LeafOptions lo = rule ? rule(path) : LeafOptions{};
          if (lo.frozen) return;
          detail::MuonLeafRecord rec;
          rec.leaf = i;
          bool eligible = false;
          std::string kind;
          if constexpr (detail::manifold_leaf<L>) {
            eligible = kManifold && detail::muon_stiefel_leaf<L, T>;
            kind = "a ";
            kind += L::kName;
            kind += " leaf";
            if constexpr (detail::muon_stiefel_leaf<L, T>) {
              rec.rows = leaf.value().rows();
              rec.cols = leaf.value().cols();
              rec.stiefel = true;
              if (!kManifold) kind = "a Stiefel leaf (ManifoldMuon steps those)";
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
          const bool chosen = lo.muon.value_or(eligible);
          if (!chosen) return;
          if (!eligible)
            throw std::invalid_argument(path.str() + ": " + kName + " steps matrices of at least 2 x 2" +
                                        (kManifold ? " and Stiefel leaves" : "") + ", this is " + kind +
                                        " (leave LeafOptions::muon unset or false)");
          if (!(lo.lr_scale >= 0))
            throw std::invalid_argument(path.str() + ": lr_scale must be >= 0, got " + std::to_string(lo.lr_scale));
          rec.lr_scale = lo.lr_scale;
          rec.weight_decay = lo.weight_decay.value_or(rec.stiefel ? 0.0 : options_.weight_decay);
          rec.weight_decay_set = lo.weight_decay.has_value();
          if (!(rec.weight_decay >= 0))
            throw std::invalid_argument(path.str() + ": weight_decay must be >= 0, got " +
                                        std::to_string(rec.weight_decay));
          if (rec.stiefel && rec.weight_decay != 0)
            throw std::invalid_argument(path.str() + ": weight decay does not apply to Stiefel leaves");
          rec.retraction = options_.retraction;
          if (lo.retraction.has_value())
            rec.retraction =
                *lo.retraction == Retraction::cayley ? StiefelMuonRetraction::cayley : StiefelMuonRetraction::geodesic;
          rec.offset = entries;
          entries += rec.rows * rec.cols;
          if (rec.stiefel && options_.stiefel.warm_start) {
            rec.multiplier = multiplier_entries;
            multiplier_entries += rec.cols * rec.cols;
          }
          mine.insert(path.str());
          st.records_.push_back(rec);
        },
        params);

    const LeafRule fallback_rule = [&](const ptree::Path& path) {
      LeafOptions lo = rule ? rule(path) : LeafOptions{};
      if (mine.count(path.str()) != 0) {
        lo.frozen = true;
        lo.weight_decay.reset();
      }
      return lo;
    };
    st.fallback_ = fallback_.init(params, fallback_rule);
    for (const auto& rec : st.records_) st.fallback_.leaves_[rec.leaf].external = true;
    st.name_ = kName;
    st.hyperparameters_ = hyperparameters();
    st.muon_of_leaf_.assign(st.fallback_.leaf_count(), -1);
    for (std::size_t r = 0; r < st.records_.size(); ++r) st.muon_of_leaf_[st.records_[r].leaf] = static_cast<int>(r);
    st.momentum_ = MuonState<Tree>::Vector::Zero(entries);
    st.multipliers_ = MuonState<Tree>::Vector::Zero(multiplier_entries);
    st.pointers_.resize(st.records_.size());

    // Buffers, and the records shared among the threads by an estimate of their cost (rows cols min(rows, cols)).
    const int threads = fallback_.common().threads;
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
          if (rec.stiefel && fused(rec)) {
            w->z.resize(rec.cols, rec.cols);
            w->polar = std::make_unique<detail::StiefelMuonPolarStep<T>>(rec.rows, rec.cols);
          } else if (rec.stiefel) {
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
              if constexpr (detail::muon_stiefel_leaf<L, T>) {
                w->stepper = detail::make_leaf_stepper(leaf, SectionPolicy::recomputed);
                w->coords.resize(w->stepper->tangent_size(), 1);
              }
            }
          } else {
            w->ms.reserve(rec.rows, rec.cols);
          }
          st.work_.push_back(std::move(w));
          const double cost = static_cast<double>(rec.rows * rec.cols * std::min(rec.rows, rec.cols));
          const auto member = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
          st.plan_[member].push_back(static_cast<std::size_t>(m));
          load[member] += cost;
        },
        params);
    return st;
  }

  static Options validated(Options o) {
    o.validate();
    return o;
  }

  // Whether a Stiefel leaf takes the fused polar step (StiefelMuonPolarStep, in the leaf's precision): the budgeted
  // (warm-started) fixed point with the polar retraction. The Cayley and geodesic retractions need A itself, dual
  // ascent its own iteration, and a solve to tolerance from the cold start StiefelMuonDirection's double arithmetic.
  bool fused(const detail::MuonLeafRecord& rec) const {
    return rec.retraction == StiefelMuonRetraction::polar &&
           options_.stiefel.method == StiefelMuonMethod::fixed_point && options_.stiefel.warm_start;
  }

  // Muon's step scale by the leaf's own shape (a row-major leaf is stepped as its transpose: msign(M^T) = msign(M)^T).
  double shape_scale(const detail::MuonLeafRecord& rec) const {
    const Eigen::Index rows = rec.transposed ? rec.cols : rec.rows, cols = rec.transposed ? rec.rows : rec.cols;
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

  // Muon's leaves as the fallback's step sees them (Optimizer::step_with).
  template <class Tree>
  struct Units {
    using T = ptree::scalar_t<Tree>;
    BasicMuon& self;
    MuonState<Tree>& st;

    void collect(Tree& params, const Tree& grads, Tree* ema) {
      const bool skip_missing = self.fallback_.common().missing_gradient == MissingGradient::skip;
      std::size_t leaf = 0;
      auto visit = [&](auto& p, const auto& g, auto&... e) {
        using L = std::remove_cvref_t<decltype(p)>;
        const std::size_t i = leaf++;
        if (i >= st.muon_of_leaf_.size()) return;  // the fallback's collect has thrown for this already
        const int m = st.muon_of_leaf_[i];
        if (m < 0) return;
        auto& rec = st.records_[static_cast<std::size_t>(m)];
        const std::string& path = st.fallback_.leaf_path(i);
        auto& ptr = st.pointers_[static_cast<std::size_t>(m)];
        rec.missing = skip_missing && detail::holds_no_number(g) && !detail::holds_no_number(p);
        if (rec.missing) {
          ptr = {};
          return;
        }
        if constexpr (detail::manifold_leaf<L>) {
          const Eigen::Index rows = p.value().rows(), cols = p.value().cols();
          if (!rec.stiefel || rows != rec.rows || cols != rec.cols)
            throw StructureError(
                path + ": the leaf is a " + detail::shape_string(rows, cols) + " " + L::kName +
                " point, the state was made for " +
                (rec.stiefel ? "a " + detail::shape_string(rec.rows, rec.cols) + " Stiefel point" : "a matrix"));
          detail::check_like_leaf(path, "gradient", 0, false, g.value(), rows, cols);
          (detail::check_like_leaf(path, "moving average", 0, false, e.value(), rows, cols), ...);
          ptr = {p.value().data(), g.value().data(), ema_data(e.value()...)};
        } else {
          bool ok = !rec.stiefel;
          ptree::detail::for_each_block(
              [&](auto& bp, const auto& bg, auto&... be) {
                if (detail::storage_shape(bp) != std::pair{rec.rows, rec.cols}) ok = false;
                if (!ok) return;
                const Eigen::Index rows = ptree::detail::block_rows(bp), cols = ptree::detail::block_cols(bp);
                detail::check_like_leaf(path, "gradient", 0, false, bg, rows, cols);
                (detail::check_like_leaf(path, "moving average", 0, false, be, rows, cols), ...);
                ptr = {detail::block_data(bp), detail::block_data(bg), ema_data(be...)};
              },
              p, g, e...);
          if (!ok)
            throw StructureError(
                path + ": the leaf does not match the state's (a " +
                detail::shape_string(rec.transposed ? rec.cols : rec.rows, rec.transposed ? rec.rows : rec.cols) +
                " matrix)");
        }
      };
      // As the fallback's collect: the shapes of the leaves are checked here, the structure above them by the walk.
      if (ema != nullptr) {
        ptree::detail::for_each_own_leaf_shapes(visit, params, grads, *ema);
      } else {
        ptree::detail::for_each_own_leaf_shapes(visit, params, grads);
      }
    }

    template <class... E>
    static T* ema_data(E&... e) {
      if constexpr (sizeof...(E) == 0) {
        return nullptr;
      } else {
        return detail::block_data(e...);
      }
    }

    // The squared norms of Muon's gradients: Euclidean for matrices, the canonical Riemannian gradient's for
    // Stiefel leaves (|G|^2 - |Z|^2 + |Z - Z^T|^2 / 2 with Z = W^T G, as the library's lift measures it).
    double squared_norm() {
      double total = 0;
      for (std::size_t r = 0; r < st.records_.size(); ++r) {
        const auto& rec = st.records_[r];
        const auto& ptr = st.pointers_[r];
        st.work_[r]->squared = 0;
        if (rec.missing) continue;
        const Eigen::Map<const detail::Mat<T>> g(ptr.g, rec.rows, rec.cols);
        double sq = 0;
        for (Eigen::Index j = 0; j < rec.cols; ++j) sq += g.col(j).template cast<double>().squaredNorm();
        if (rec.stiefel && std::isfinite(sq)) {
          auto& z = st.work_[r]->z;
          const Eigen::Map<const detail::Mat<T>> w(ptr.p, rec.rows, rec.cols);
          detail::dense_product<T>(z, w, detail::ProductOp::transposed, g, detail::ProductOp::plain, T(1), false);
          // Lazy expressions: no temporary in the step.
          sq += -z.template cast<double>().squaredNorm() +
                0.5 * (z - z.transpose()).template cast<double>().squaredNorm();
        }
        st.work_[r]->squared = sq;
        total += sq;
      }
      return total;
    }

    std::size_t first_non_finite() const {
      std::size_t first = static_cast<std::size_t>(-1);
      for (std::size_t r = 0; r < st.records_.size(); ++r) {
        const auto& rec = st.records_[r];
        if (rec.missing) continue;
        const Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> g(st.pointers_[r].g, rec.rows * rec.cols);
        if (!g.allFinite()) first = std::min(first, rec.leaf);
      }
      return first;
    }

    // The first leaf whose own squared gradient norm overflows double.
    std::size_t first_overflow() const {
      std::size_t first = static_cast<std::size_t>(-1);
      for (std::size_t r = 0; r < st.records_.size(); ++r)
        if (!std::isfinite(st.work_[r]->squared)) first = std::min(first, st.records_[r].leaf);
      return first;
    }

    // This member's updates into the leaves' scratch, nothing written; the first leaf whose update is not finite.
    std::size_t verify(int member, double factor, T gscale) {
      std::size_t first = static_cast<std::size_t>(-1);
      for (std::size_t r : st.plan_[static_cast<std::size_t>(member)])
        if (!st.records_[r].missing && !self.prepare_leaf(st, r, factor, gscale, true))
          first = std::min(first, st.records_[r].leaf);
      return first;
    }

    void run(int member, std::int64_t, double factor, T gscale, T decay, bool verified) {
      for (std::size_t r : st.plan_[static_cast<std::size_t>(member)])
        if (!st.records_[r].missing) self.step_leaf(st, r, factor, gscale, decay, verified);
    }
  };

  // The leaf's update from its gradient and momentum into its scratch, writing no state: w.u <- msign(U) for a
  // matrix, w.a <- the direction for a Stiefel leaf, with U the momentum blend of the step. With `check`, returns
  // whether the update (and a matrix's new parameters) are finite; true otherwise.
  template <class Tree, class T>
  bool prepare_leaf(MuonState<Tree>& st, std::size_t r, double factor, T gscale, bool check) {
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
    if (!rec.stiefel) {
      msign_inplace(w.u, options_.msign_options(), w.ms);
      if (!check) return true;
      const double lr = options_.lr * factor * rec.lr_scale;
      const T step = static_cast<T>(lr * shape_scale(rec));
      const ConstArr p(ptr.p, size);
      return (static_cast<T>(1 - lr * rec.weight_decay) * p - step * u).allFinite();
    }
    const T* multiplier = rec.multiplier >= 0 ? st.multipliers_.data() + rec.multiplier : nullptr;
    if (w.polar) {
      w.report = w.polar->prepare(ptr.p, w.u.data(), options_.lr * factor * rec.lr_scale, options_.stiefel, multiplier);
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
  void step_leaf(MuonState<Tree>& st, std::size_t r, double factor, T gscale, T decay, bool prepared) {
    const auto& rec = st.records_[r];
    const auto& ptr = st.pointers_[r];
    auto& w = *st.work_[r];
    const Eigen::Index size = rec.rows * rec.cols;
    if (size == 0) return;
    using Arr = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
    using ConstArr = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
    if (!prepared) prepare_leaf(st, r, factor, gscale, false);
    const ConstArr g(ptr.g, size);
    Arr buf(st.momentum_.data() + rec.offset, size);
    const T beta = static_cast<T>(options_.momentum);
    buf = beta * buf + ((T(1) - beta) * gscale) * g;
    const double lr = options_.lr * factor * rec.lr_scale;
    Arr p(ptr.p, size);
    if (!rec.stiefel) {
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

  Options options_;
  Optimizer<Fallback> fallback_;
};

/// Muon with AdamW for every other leaf.
using Muon = BasicMuon<AdamWKernel, false>;
/// Manifold Muon on Stiefel leaves, Muon on Euclidean matrices, AdamW for every other leaf.
using ManifoldMuon = BasicMuon<AdamWKernel, true>;

}  // namespace geomopt
