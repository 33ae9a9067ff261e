// Engine: the C++ half of one geomopt.torch optimizer. It steps, in one call, every parameter of the optimizer in
// place in the caller's memory (a tensor's storage), each in its own geometry, by the library's fused step.
//
// A parameter is described by a ParamSpec: its kind (Euclidean or one of the manifolds), the shape geomopt sees, and
// its param group. A Euclidean tensor is a row-major rows x cols array (any rank, reshaped). A manifold tensor X of
// shape (a, b), stored row-major, is the column-major b x a matrix X^T in memory, and geomopt sees exactly that
// (zero-copy): Stiefel and Grassmann points with orthonormal rows of X (a <= b), Oblique's rows of unit norm, SO(n)
// and SPD as they are. A tall Stiefel or Grassmann tensor (a > b, orthonormal columns of X) is the one case memory does
// not give: it goes through a buffer of the engine (copied in before the step and out after it, allocation-free).
//
// An engine runs one optimizer: an Optimizer<Kernel>, or Muon or ManifoldMuon (BasicMuon), whose matrices and Stiefel
// frames take Muon's step and the rest its fallback's; each group then has two rates, Muon's and the fallback's.
//
// Invariants: the engine never owns a parameter's or a gradient's memory; a step reads the pointers the caller passes
// for this step (storage may move between steps: zero_grad(set_to_none=True) makes new gradients); a gradient pointer
// of 0 is a missing gradient, and that parameter sits the step out with its own step count
// (MissingGradient::skip); each group's learning rate and weight decay are read at every step (a scheduler moves
// them), as leaf options of the one state: the kernel's lr is 1 and a leaf's lr_scale is its group's lr, so the
// kernels see the group's lr exactly. Every check that can fail happens in Python or in the library's step before
// anything is written.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "geomopt/manifolds.hpp"
#include "geomopt/manifolds/tensor_layout.hpp"
#include "geomopt/optimizers.hpp"
#include "geomopt/ptree/borrowed_array.hpp"

namespace geomopt::python {

/// The kinds of parameter (geomopt.Manifold.kind in Python), in the order of Leaf's alternatives.
using Kind = TensorKind;

template <class T>
using Leaf = std::variant<ptree::BorrowedArray<T>, Borrowed<Stiefel<T>>, Borrowed<Grassmann<T>>, Borrowed<Sphere<T>>,
                          Borrowed<SpecialOrthogonal<T>>, Borrowed<SPD<T>>, Borrowed<Oblique<T>>, Borrowed<Lorentz<T>>>;
template <class T>
using Tree = std::vector<Leaf<T>>;
static_assert(std::variant_size_v<Leaf<float>> == kTensorKinds, "Leaf: one alternative per TensorKind, in its order");

/// One parameter as the engine sees it.
struct ParamSpec {
  int kind = 0;           ///< a Kind
  std::int64_t rows = 0;  ///< the shape geomopt sees (row-major for a Euclidean leaf, column-major otherwise)
  std::int64_t cols = 0;
  bool transposed = false;  ///< a tall Stiefel or Grassmann tensor: stepped through the engine's buffer
  int group = 0;            ///< its param group
  std::size_t index = 0;    ///< its position in the optimizer's list of parameters (all groups, in order)
  std::string retraction;   ///< "" for the default of its kind, else a retraction's name
  int muon = -1;            ///< a Muon engine's: 1 Muon steps it, 0 the fallback does, -1 Muon's rule decides
  int matrices = 1;         ///< a Muon engine's: LeafOptions::muon_matrices (rows holds that many matrices)
};

/// What one engine's step did (StepReport with the leaf as an index into the engine's parameters).
struct Report {
  bool applied = false;
  double grad_norm = 0;
  double clip_scale = 1;
  std::int64_t non_finite_leaf = -1;
  std::string non_finite_reason;
};

/// A state array of one parameter: where it is and its type.
struct SlotView {
  void* data = nullptr;
  std::int64_t size = 0;
  bool is_double = false;
};

/// What geomopt.torch's optimizer holds: one engine per scalar type and set of kernel options.
class AnyEngine {
 public:
  virtual ~AnyEngine() = default;
  /// One step. params[k] and grads[k] are the data pointers of the optimizer's k-th parameter and its gradient
  /// (0: none); lr[g] and weight_decay[g] are group g's, or for a Muon engine lr[2 g] and weight_decay[2 g] its Muon
  /// leaves' and lr[2 g + 1] and weight_decay[2 g + 1] its fallback's (rates()).
  virtual Report step(const std::vector<std::uintptr_t>& params, const std::vector<std::uintptr_t>& grads,
                      const std::vector<double>& lr, const std::vector<double>& weight_decay) = 0;
  virtual std::size_t size() const = 0;                   ///< parameters stepped by this engine
  virtual std::size_t index(std::size_t leaf) const = 0;  ///< a leaf's position in the optimizer's list
  /// The names of a leaf's state arrays, in the order slot(leaf, s) numbers them (the kernel's; a Muon leaf's
  /// "momentum_buffer").
  virtual std::vector<std::string> slot_names(std::size_t leaf) const = 0;
  virtual SlotView slot(std::size_t leaf, std::size_t s) = 0;
  virtual SlotView section(std::size_t leaf) = 0;  ///< a transported section (data null when none)
  virtual SlotView ema(std::size_t leaf) = 0;      ///< the moving average's numbers (null when off)
  /// Each leaf's own step count as doubles, kept current by every step: torch's state['step'] views it.
  virtual SlotView steps() = 0;
  virtual std::int64_t step_count() const = 0;
  virtual std::int64_t leaf_step_count(std::size_t leaf) const = 0;
  /// Sets the state's step count to the largest of `steps` and each leaf's own to its entry.
  virtual void set_step_counts(const std::vector<std::int64_t>& steps) = 0;
  virtual std::size_t nbytes() const = 0;
  /// How far a manifold leaf is from its manifold, as at the last step or construction (0 for a Euclidean leaf).
  virtual double distance(std::size_t leaf) const = 0;
  /// The parameters' description, as made (geomopt.io names each leaf by the optimizer's parameters).
  virtual const std::vector<ParamSpec>& specs() const = 0;
  /// Whether the engine steps double (else float) parameters: the type of optimizer_state()'s tree.
  virtual bool is_double() const = 0;
  /// Entries per group in step()'s lr and weight_decay: 1, or 2 for a Muon engine.
  virtual int rates() const = 0;
  /// The optimizer state, an OptimizerState<Tree<T>> (rates() 1) or a MuonState<Tree<T>> (rates() 2), T double or
  /// float as is_double() says, for geomopt.io to save and load by path; state_loaded() after writing it.
  virtual void* optimizer_state() = 0;
  /// Brings the engine's views (the step counts) up to its state after a load wrote it.
  virtual void state_loaded() = 0;
};

namespace detail {

// Makes leaf an empty leaf of the kind's alternative.
template <class T, std::size_t I = 0>
void emplace_leaf(Leaf<T>& leaf, int kind) {
  if constexpr (I < std::variant_size_v<Leaf<T>>) {
    if (kind == static_cast<int>(I)) {
      leaf.template emplace<I>();
    } else {
      emplace_leaf<T, I + 1>(leaf, kind);
    }
  } else {
    throw std::invalid_argument("geomopt: unknown parameter kind " + std::to_string(kind));
  }
}

// Points the leaf, of the kind it holds, at other memory: rows x cols numbers at data, or none when data is null (a
// missing gradient: an empty leaf).
template <class T>
void lend(Leaf<T>& leaf, T* data, Eigen::Index rows, Eigen::Index cols) {
  std::visit([&](auto& x) { x.lend(data, rows, cols); }, leaf);
}

// A tall Stiefel or Grassmann tensor's rows x cols numbers: from its row-major memory into the column-major copy
// geomopt steps, and back.
template <class T>
void copy_to_column_major(const T* row_major, std::int64_t rows, std::int64_t cols, T* column_major) {
  Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>>(column_major, rows, cols) =
      Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(row_major, rows, cols);
}
template <class T>
void copy_to_row_major(const T* column_major, std::int64_t rows, std::int64_t cols, T* row_major) {
  Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(row_major, rows, cols) =
      Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>>(column_major, rows, cols);
}

inline std::optional<Retraction> retraction_named(const std::string& name) {
  if (name.empty()) return std::nullopt;
  for (Retraction r : {Retraction::cayley, Retraction::geodesic, Retraction::second_order})
    if (name == retraction_name(r)) return r;
  throw std::invalid_argument("geomopt: unknown retraction '" + name +
                              "'; expected 'cayley', 'geodesic' or 'second_order'");
}

template <class Opt>
inline constexpr bool is_muon = false;
template <class Fallback, bool kManifold>
inline constexpr bool is_muon<BasicMuon<Fallback, kManifold>> = true;

// The options with lr 1 and no weight decay (the fallback's too): the leaves' lr_scale and weight decay carry the
// groups' rates.
template <class Options>
Options with_unit_lr(Options o) {
  o.lr = 1;
  if constexpr (requires { o.weight_decay; }) o.weight_decay = 0;
  if constexpr (requires { o.fallback; }) o.fallback = with_unit_lr(o.fallback);
  return o;
}

}  // namespace detail

/// The engine of optimizer Opt (an Optimizer<Kernel> or a BasicMuon) over parameters of scalar T.
template <class T, class Opt>
class Engine final : public AnyEngine {
 public:
  using Options = typename Opt::Options;
  static constexpr bool kMuon = detail::is_muon<Opt>;

  /// params[k] is the data pointer of the optimizer's k-th parameter (all of them; this engine reads those of
  /// `specs`); lr and weight_decay are the groups' at construction (rates() entries per group).
  Engine(Options options, CommonOptions common, std::vector<ParamSpec> specs, const std::vector<std::uintptr_t>& params,
         const std::vector<double>& lr, const std::vector<double>& weight_decay)
      : specs_(std::move(specs)), optimizer_(detail::with_unit_lr(std::move(options)), with_skip(std::move(common))) {
    const std::size_t n = specs_.size();
    params_.resize(n);
    grads_.resize(n);
    buffers_.resize(n);
    lr_.assign(n, -1);
    weight_decay_.assign(n, -1);
    for (std::size_t i = 0; i < n; ++i) {
      const ParamSpec& s = specs_[i];
      if (s.transposed) {
        buffers_[i].param.resize(static_cast<std::size_t>(s.rows * s.cols));
        buffers_[i].grad.resize(static_cast<std::size_t>(s.rows * s.cols));
      }
      detail::emplace_leaf(params_[i], s.kind);
      detail::emplace_leaf(grads_[i], s.kind);
    }
    lend_params(params);
    // The rates are set after init, once each leaf's rate is known (a Muon engine's by whose leaf it is).
    state_ = optimizer_.init(params_, [&](const ptree::Path& path) {
      const ParamSpec& s = specs_[std::stoul(path.str())];
      LeafOptions o;
      o.retraction = detail::retraction_named(s.retraction);
      if (s.muon >= 0) o.muon = s.muon != 0;
      o.muon_matrices = s.matrices;
      return o;
    });
    rate_.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      const auto group = static_cast<std::size_t>(specs_[i].group);
      if constexpr (kMuon) {
        rate_[i] = 2 * group + (state_.muon_leaf(i) ? 0 : 1);
      } else {
        rate_[i] = group;
      }
    }
    set_rates(lr, weight_decay);
    steps_.assign(n, 0.0);
  }

  Report step(const std::vector<std::uintptr_t>& params, const std::vector<std::uintptr_t>& grads,
              const std::vector<double>& lr, const std::vector<double>& weight_decay) override {
    set_rates(lr, weight_decay);
    lend_params(params);
    lend_grads(grads);
    const StepReport r = optimizer_.step(params_, grads_, state_);
    for (std::size_t i = 0; i < specs_.size(); ++i)
      if (specs_[i].transposed) copy_out(i, params[specs_[i].index]);
    if (r.applied) refresh_steps();
    Report out;
    out.applied = r.applied;
    out.grad_norm = r.grad_norm;
    out.clip_scale = r.clip_scale;
    if (r.non_finite_leaf != nullptr) {
      out.non_finite_leaf = static_cast<std::int64_t>(std::stoul(*r.non_finite_leaf));
      out.non_finite_reason = r.non_finite_reason;
    }
    return out;
  }

  std::size_t size() const override { return specs_.size(); }
  std::size_t index(std::size_t leaf) const override { return specs_.at(leaf).index; }
  std::vector<std::string> slot_names(std::size_t leaf) const override {
    std::vector<std::string> names;
    state_.for_each_slot([&](const std::string& path, std::string_view name, const auto&) {
      if (name != "section" && std::stoul(path) == leaf) names.emplace_back(name);
    });
    return names;
  }
  SlotView slot(std::size_t leaf, std::size_t s) override {
    SlotView v;
    std::size_t k = 0;
    state_.for_each_slot([&](const std::string& path, std::string_view, auto data) {
      if (v.data == nullptr && std::stoul(path) == leaf) {
        if (k == s) v = {data.data(), data.size(), std::is_same_v<T, double>};
        ++k;
      }
    });
    return v;
  }
  SlotView section(std::size_t leaf) override {
    SlotView v;
    state_.for_each_slot([&](const std::string& path, std::string_view name, auto data) {
      if (name == "section" && std::stoul(path) == leaf) v = {data.data(), data.size(), std::is_same_v<T, double>};
    });
    return v;
  }
  SlotView ema(std::size_t leaf) override {
    Tree<T>* e = state_.ema();
    if (e == nullptr) return {};
    return std::visit(
        [](auto& x) {
          return SlotView{x.value().data(), static_cast<std::int64_t>(x.value().size()), std::is_same_v<T, double>};
        },
        e->at(leaf));
  }
  SlotView steps() override { return {steps_.data(), static_cast<std::int64_t>(steps_.size()), true}; }
  std::int64_t step_count() const override { return state_.step_count(); }
  std::int64_t leaf_step_count(std::size_t leaf) const override { return state_.leaf_step_count(leaf); }
  void set_step_counts(const std::vector<std::int64_t>& steps) override {
    if (steps.size() != specs_.size())
      throw std::invalid_argument("geomopt: " + std::to_string(steps.size()) + " step counts for " +
                                  std::to_string(specs_.size()) + " parameters");
    std::int64_t most = 0;
    for (std::int64_t s : steps) {
      if (s < 0) throw std::invalid_argument("geomopt: a step count must be >= 0, got " + std::to_string(s));
      most = std::max(most, s);
    }
    state_.set_step_count(most);
    for (std::size_t i = 0; i < steps.size(); ++i) state_.set_leaf_step_count(i, steps[i]);
    refresh_steps();
  }
  std::size_t nbytes() const override { return state_.nbytes(); }
  const std::vector<ParamSpec>& specs() const override { return specs_; }
  bool is_double() const override { return std::is_same_v<T, double>; }
  int rates() const override { return kMuon ? 2 : 1; }
  void* optimizer_state() override { return &state_; }
  void state_loaded() override { refresh_steps(); }
  double distance(std::size_t leaf) const override {
    return std::visit(
        [](const auto& x) -> double {
          if constexpr (Manifold<std::remove_cvref_t<decltype(x)>>) {
            return static_cast<double>(check(x));
          } else {
            return 0;
          }
        },
        params_.at(leaf));
  }

 private:
  struct Buffers {
    std::vector<T> param, grad;
  };

  static CommonOptions with_skip(CommonOptions c) {
    c.missing_gradient = MissingGradient::skip;
    return c;
  }

  // Each leaf's lr_scale and weight decay (Euclidean leaves only) from its rate, where they changed: all checked
  // first (std::invalid_argument naming the rate's group), so a bad rate changes nothing.
  void set_rates(const std::vector<double>& lr, const std::vector<double>& weight_decay) {
    const std::size_t groups = rate_.empty() ? 0 : *std::max_element(rate_.begin(), rate_.end()) + 1;
    if (lr.size() < groups || weight_decay.size() < groups)
      throw std::invalid_argument("geomopt: " + std::to_string(lr.size()) + " learning rates and " +
                                  std::to_string(weight_decay.size()) + " weight decays for " + std::to_string(groups) +
                                  " rates");
    for (std::size_t r = 0; r < groups; ++r)
      if (!(lr[r] >= 0) || !(weight_decay[r] >= 0))
        throw std::invalid_argument("geomopt: group " + std::to_string(r / static_cast<std::size_t>(rates())) +
                                    ": lr and weight_decay must be >= 0, got " + std::to_string(lr[r]) + " and " +
                                    std::to_string(weight_decay[r]));
    for (std::size_t i = 0; i < specs_.size(); ++i) {
      const std::size_t r = rate_[i];
      if (lr[r] != lr_[i]) state_.set_leaf_lr_scale(i, lr_[i] = lr[r]);
      if (specs_[i].kind == static_cast<int>(Kind::euclidean) && weight_decay[r] != weight_decay_[i])
        state_.set_leaf_weight_decay(i, weight_decay_[i] = weight_decay[r]);
    }
  }

  void lend_params(const std::vector<std::uintptr_t>& params) {
    for (std::size_t i = 0; i < specs_.size(); ++i) {
      const ParamSpec& s = specs_[i];
      T* data = reinterpret_cast<T*>(params.at(s.index));
      if (s.transposed) {
        detail::copy_to_column_major(data, s.rows, s.cols, buffers_[i].param.data());
        data = buffers_[i].param.data();
      }
      detail::lend(params_[i], data, s.rows, s.cols);
    }
  }
  void lend_grads(const std::vector<std::uintptr_t>& grads) {
    for (std::size_t i = 0; i < specs_.size(); ++i) {
      const ParamSpec& s = specs_[i];
      T* data = reinterpret_cast<T*>(grads.at(s.index));
      if (data != nullptr && s.transposed) {
        detail::copy_to_column_major(data, s.rows, s.cols, buffers_[i].grad.data());
        data = buffers_[i].grad.data();
      }
      detail::lend(grads_[i], data, s.rows, s.cols);
    }
  }
  void refresh_steps() {
    for (std::size_t i = 0; i < steps_.size(); ++i) steps_[i] = static_cast<double>(state_.leaf_step_count(i));
  }
  void copy_out(std::size_t i, std::uintptr_t param) {
    const ParamSpec& s = specs_[i];
    detail::copy_to_row_major(buffers_[i].param.data(), s.rows, s.cols, reinterpret_cast<T*>(param));
  }

  std::vector<ParamSpec> specs_;
  Opt optimizer_;
  Tree<T> params_, grads_;
  decltype(std::declval<Opt&>().init(std::declval<const Tree<T>&>())) state_;
  std::vector<Buffers> buffers_;
  std::vector<std::size_t> rate_;          // per leaf, its entry in the rates
  std::vector<double> lr_, weight_decay_;  // per leaf, in force (-1 before the first); manifold leaves have no decay
  std::vector<double> steps_;              // per leaf, its own step count
};

}  // namespace geomopt::python
