// The settings every optimizer shares: per-leaf options chosen by path, the step's transforms (learning-rate
// schedule, clipping by global norm, an exponential moving average of the parameters, the non-finite gradient
// policy), the geometry of manifold leaves, and threads; and what a step reports.
//
// A transform changes what a step does, never when it reads or writes: clipping and the finiteness check read the
// gradients in one pass before any leaf is written, and the EMA is updated leaf by leaf inside the step pass.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "geomopt/manifolds/common.hpp"
#include "geomopt/ptree/path.hpp"

namespace geomopt {

/// One option as a checkpoint records it: a number (a bool as 0 or 1), or an enumerated choice by its name in code
/// ("polar", "newton_schulz"), so that the file reads the same to h5py as to the code that wrote it.
using HyperparameterValue = std::variant<double, std::string>;

/// An optimizer's options by name: every one that changes the trajectory of the parameters, their state or their
/// moving average. A checkpoint records them, and a strict load refuses a state whose options differ.
using Hyperparameters = std::vector<std::pair<std::string, HyperparameterValue>>;

/// Options of one leaf, chosen at init by a rule of its path.
struct LeafOptions {
  double lr_scale = 1;                     ///< this leaf's learning rate is lr * lr_scale
  std::optional<double> weight_decay{};    ///< replaces the optimizer's weight_decay for this leaf
  bool frozen = false;                     ///< no state, never written
  std::optional<Retraction> retraction{};  ///< manifold leaves: replaces CommonOptions::retraction
  /// Muon and ManifoldMuon: true steps the leaf by the orthogonalized update, false hands it to the fallback
  /// optimizer; unset means true for every Euclidean leaf stored as one matrix of at least 2 x 2 (and, for
  /// ManifoldMuon, every Stiefel leaf). Other optimizers ignore it, so one rule serves several optimizers.
  std::optional<bool> muon{};
  /// Muon and ManifoldMuon, on a matrix leaf: its memory holds this many matrices one after another, each stepped on
  /// its own (orthogonalized and scaled by its shape): a row-major (m M) x N leaf holds m M x N matrices, a
  /// column-major M x (m N) leaf m M x N matrices. A [..., M, N] weight of per-head or per-expert matrices, as batched
  /// Newton-Schulz over the leading dimensions treats it. Recorded per leaf by a checkpoint when not 1.
  int muon_matrices = 1;
  /// The leaf is another optimizer's (a Partition's other group): no state, never written, its gradient neither read
  /// nor checked. A state reports it frozen.
  bool excluded = false;
};

/// A rule giving each trainable leaf its options: (const ptree::Path&) -> LeafOptions.
using LeafRule = std::function<LeafOptions(const ptree::Path&)>;

/// A learning-rate schedule: the factor applied to lr at a step, as a function of the number of steps taken before
/// it (0 for the first step), like torch.optim.lr_scheduler.LambdaLR. See schedules.hpp.
using Schedule = std::function<double(std::int64_t)>;

/// What a step does when it meets an infinity or a NaN: in a gradient, in a manifold gradient's lift, in the global
/// gradient norm (finite gradients whose squares overflow), or in what the kernel would write (new parameters, a
/// manifold leaf's update coordinates, new slots). skip and raise compute all of that before any leaf is written, so
/// they leave parameters, state and EMA exactly as they were; they cost one more read of the gradients and the
/// state (docs/optimizers.md has the measurement). A finite tangent retracts to a finite point, so the retraction is
/// not checked.
enum class NonFinitePolicy {
  propagate,  ///< no check (torch.optim's behaviour): the step runs and the non-finite values spread
  skip,       ///< no leaf, moment or step count changes; the report names the leaf and the reason
  raise,      ///< throws NonFiniteGradient naming the leaf and the reason
};

/// The policy's name in code: "propagate", "skip", "raise".
inline const char* non_finite_policy_name(NonFinitePolicy p) noexcept {
  switch (p) {
    case NonFinitePolicy::propagate:
      return "propagate";
    case NonFinitePolicy::skip:
      return "skip";
    case NonFinitePolicy::raise:
      return "raise";
  }
  return "non_finite";
}

/// Thrown by a step under NonFinitePolicy::raise; what() names the leaf's path.
class NonFiniteGradient : public std::domain_error {
 public:
  using std::domain_error::domain_error;
};

/// What a step does with a leaf that is not frozen and whose gradient is empty (every storage block holds no number:
/// a 0 x 0 matrix, a default-constructed manifold point), the gradient of a parameter nobody differentiated.
enum class MissingGradient {
  error,  ///< StructureError naming the leaf: an empty gradient is a mistake unless the leaf is frozen
  skip,   ///< the leaf sits this step out, as torch.optim skips a parameter whose .grad is None: its parameters,
          ///< slots and moving average stay, and its own step count (the t of its bias corrections and first-step
          ///< rules) does not advance; the other leaves step
};

struct CommonOptions {
  /// Factor on lr at each step; empty means constant.
  Schedule schedule{};
  /// Clip the gradients by their global norm (over every non-frozen leaf; a manifold leaf counts the norm of its
  /// Riemannian gradient): when the norm exceeds clip_norm they are scaled by clip_norm / (norm + 1e-6), as
  /// torch.nn.utils.clip_grad_norm_ does. 0 turns clipping off.
  double clip_norm = 0;
  /// Keep an exponential moving average of the parameters, ema = decay * ema + (1 - decay) * params after each
  /// step, starting from the parameters at init. 0 turns it off.
  double ema_decay = 0;
  NonFinitePolicy non_finite = NonFinitePolicy::propagate;
  MissingGradient missing_gradient = MissingGradient::error;
  /// The retraction of manifold leaves (a leaf's LeafOptions::retraction overrides it). Unset: each leaf's
  /// manifold default (default_retraction<M>()); set to one a leaf's manifold lacks, init throws
  /// std::invalid_argument naming the leaf, the manifold and the retractions it supports.
  std::optional<Retraction> retraction{};
  /// How manifold leaves keep their global section between steps (docs/design.md has the measurements).
  SectionPolicy section = SectionPolicy::recomputed;
  /// Threads that step leaves in parallel (the caller's thread is one of them).
  int threads = 1;

  void validate() const {
    if (!(clip_norm >= 0))
      throw std::invalid_argument("CommonOptions: clip_norm must be >= 0 (0 is off), got " + std::to_string(clip_norm));
    if (!(ema_decay >= 0 && ema_decay < 1))
      throw std::invalid_argument("CommonOptions: ema_decay must be in [0, 1) (0 is off), got " +
                                  std::to_string(ema_decay));
    if (threads < 1 || threads > 256)
      throw std::invalid_argument("CommonOptions: threads must be in [1, 256], got " + std::to_string(threads));
  }
};

/// The transforms a step applies to the tree as a whole: CommonOptions' clipping by global norm, moving average,
/// non-finite policy and missing-gradient rule. An optimizer's are taken from its CommonOptions; in a Partition they
/// are the partition's, and its groups' own must be off (any() false), since one norm, one decision to skip and one
/// average cover every group.
struct StepTransforms {
  double clip_norm = 0;
  double ema_decay = 0;
  NonFinitePolicy non_finite = NonFinitePolicy::propagate;
  MissingGradient missing_gradient = MissingGradient::error;

  static StepTransforms of(const CommonOptions& c) noexcept {
    return {c.clip_norm, c.ema_decay, c.non_finite, c.missing_gradient};
  }
  /// c with these transforms off: the options of a group whose transforms its partition applies.
  static CommonOptions without(CommonOptions c) {
    c.clip_norm = 0;
    c.ema_decay = 0;
    c.non_finite = NonFinitePolicy::propagate;
    c.missing_gradient = MissingGradient::error;
    return c;
  }
  /// The first transform that is on, by its CommonOptions name; nullptr when none is.
  const char* first_on() const noexcept {
    if (clip_norm != 0) return "clip_norm";
    if (ema_decay != 0) return "ema_decay";
    if (non_finite != NonFinitePolicy::propagate) return "non_finite";
    if (missing_gradient != MissingGradient::error) return "missing_gradient";
    return nullptr;
  }
  /// Appends the transforms that change a trajectory to h by their CommonOptions names, the policy by name. Not
  /// missing_gradient: a step under `error` either steps as under `skip` or throws, so no trajectory depends on it.
  void record(Hyperparameters& h) const {
    h.emplace_back("clip_norm", clip_norm);
    h.emplace_back("ema_decay", ema_decay);
    h.emplace_back("non_finite", non_finite_policy_name(non_finite));
  }
  void validate() const {
    CommonOptions c;
    c.clip_norm = clip_norm;
    c.ema_decay = ema_decay;
    c.validate();
  }
};

/// What a step did.
struct StepReport {
  bool applied = false;   ///< false: skipped for a non-finite gradient
  std::int64_t step = 0;  ///< steps taken so far, this one included when applied
  double lr = 0;          ///< the scheduled learning rate of this step (before per-leaf scales)
  /// The global gradient norm, when clipping or the finiteness check computed it; NaN otherwise.
  double grad_norm = std::numeric_limits<double>::quiet_NaN();
  double clip_scale = 1;  ///< the factor the gradients were multiplied by
  /// skip: the path of the first leaf, in walk order, where the step met a non-finite number
  const std::string* non_finite_leaf = nullptr;
  /// skip: what was not finite there ("the gradient is not finite", "the gradient's lift to the tangent space is not
  /// finite", "the global gradient norm overflows", "the update is not finite"); a string with static storage
  const char* non_finite_reason = nullptr;
};

}  // namespace geomopt
