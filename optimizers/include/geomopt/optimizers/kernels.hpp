// Per-leaf kernels: what one optimizer does to one stretch of parameters, written as Eigen array expressions on a
// chunk of a few thousand entries. The driver (optimizer.hpp) walks the tree, cuts every leaf into chunks small
// enough to stay in L1 and hands each chunk to the kernel, so a kernel's several statements cost one pass over
// memory. A new optimizer is a new kernel:
//
//   struct MyKernel {
//     static constexpr const char* kName = "MyKernel";
//     struct Options { double lr = 1e-2; ...; void validate() const; };
//     static std::span<const char* const> slots(const Options&);     // names of the per-entry state arrays
//     static double slot_init(const Options&, std::size_t slot);      // (optional) their initial value, else 0
//     template <class T> static Coeffs<T> coefficients(const Options&, const LeafStep&);  // once per leaf and step
//     template <class T> static void update(const Coeffs<T>&, Chunk<T>&);                // the arithmetic
//     template <class T> static bool update_avx2(const Coeffs<T>&, Chunk<T>&);  // (optional) the same in AVX2
//     static Hyperparameters hyperparameters(const Options&);         // every option, by name, for checkpoints
//   };
//
// Invariants: update reads chunk.g and writes chunk.p and chunk.s[0..slots) in place, entry by entry (no entry
// depends on another), so any cut of a leaf into chunks, and any split of the chunks across threads, gives the same
// result. For a manifold leaf the driver hands a chunk whose p starts at zero and reads the update from it (weight
// decay is 0 there), so a kernel never needs to know the geometry. When kernel_path() is avx2 the driver first
// offers a chunk to update_avx2, which returns false for the cases it does not cover; Eigen's vectorization at the
// program's flags stops at 128 bits on x86-64, and Adam's square root and division then cost more than its memory
// traffic (docs/design.md, "Kernel paths").
#pragma once

#include <Eigen/Core>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "geomopt/optimizers/kernel_path.hpp"
#include "geomopt/optimizers/options.hpp"

namespace geomopt {

/// The most state arrays a kernel may keep per entry.
inline constexpr std::size_t kMaxSlots = 4;

/// One chunk of a leaf: parameters p, gradient g, and the kernel's state arrays s[i], all of one length.
template <class T>
struct Chunk {
  using Array = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
  using ConstArray = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
  Array p;
  ConstArray g;
  std::array<Array, kMaxSlots> s;
};

/// What a kernel knows of a leaf at a step.
struct LeafStep {
  std::int64_t t = 1;       ///< 1 at the first step
  double lr = 0;            ///< scheduled, times the leaf's lr_scale
  double weight_decay = 0;  ///< the leaf's (0 for manifold leaves)
};

namespace detail {
inline void require(bool ok, const char* kernel, const char* what, double value) {
  if (!ok) throw std::invalid_argument(std::string(kernel) + ": " + what + ", got " + std::to_string(value));
}

// Calls f with the gradient an update sees: g, or g + wd p under L2 weight decay (torch's weight_decay for SGD,
// Adam, RMSprop and Adagrad), as an expression that f's statements evaluate entry by entry.
template <class T, class F>
void with_l2(Chunk<T>& x, T wd, F&& f) {
  if (wd != T(0)) {
    f(x.g + wd * x.p);
  } else {
    f(x.g);
  }
}

// The coefficients of one Adam or AdamW step of a leaf (AdamKernelBase::coefficients).
template <class T>
struct AdamCoeffs {
  T b1, one_minus_b1, b2, one_minus_b2, l2, shrink, step_size, inv_bc2_sqrt, eps;
  bool amsgrad;
};

#if GEOMOPT_HAVE_AVX2_PATH
// optimizers/detail/avx2.hpp's Adam over n entries (p, m, v and, for AMSGrad, vmax updated in place), compiled into
// libgeomopt_optimizers (src/avx2_kernels.cpp) so that <immintrin.h> stays out of the headers.
void avx2_adam(const AdamCoeffs<float>& c, float* p, const float* g, float* m, float* v, float* vmax, Eigen::Index n);
void avx2_adam(const AdamCoeffs<double>& c, double* p, const double* g, double* m, double* v, double* vmax,
               Eigen::Index n);
#endif
}  // namespace detail

/// torch.optim.SGD: L2 weight decay, momentum with dampening (the first step copies the gradient into the buffer),
/// Nesterov.
struct SGDKernel {
  static constexpr const char* kName = "SGD";
  struct Options {
    double lr = 1e-2;
    double momentum = 0;
    double dampening = 0;
    bool nesterov = false;
    double weight_decay = 0;

    void validate() const {
      detail::require(lr >= 0, kName, "lr must be >= 0", lr);
      detail::require(momentum >= 0, kName, "momentum must be >= 0", momentum);
      detail::require(weight_decay >= 0, kName, "weight_decay must be >= 0", weight_decay);
      if (nesterov && (momentum <= 0 || dampening != 0))
        throw std::invalid_argument("SGD: Nesterov momentum requires a momentum and zero dampening");
    }
  };

  static std::span<const char* const> slots(const Options& o) {
    static constexpr const char* kSlots[] = {"momentum_buffer"};
    return {kSlots, o.momentum != 0 ? 1u : 0u};
  }

  template <class T>
  struct Coeffs {
    T lr, wd, momentum, keep;
    bool first, nesterov, has_momentum;
  };
  template <class T>
  static Coeffs<T> coefficients(const Options& o, const LeafStep& s) {
    return {T(s.lr), T(s.weight_decay), T(o.momentum), T(1 - o.dampening), s.t == 1, o.nesterov, o.momentum != 0};
  }

  template <class T>
  static void update(const Coeffs<T>& c, Chunk<T>& x) {
    detail::with_l2(x, c.wd, [&](const auto& g) { apply(c, x, g); });
  }

  static Hyperparameters hyperparameters(const Options& o) {
    return {{"lr", o.lr},
            {"momentum", o.momentum},
            {"dampening", o.dampening},
            {"nesterov", o.nesterov ? 1.0 : 0.0},
            {"weight_decay", o.weight_decay}};
  }

 private:
  template <class T, class G>
  static void apply(const Coeffs<T>& c, Chunk<T>& x, const G& g) {
    if (!c.has_momentum) {
      x.p -= c.lr * g;
      return;
    }
    auto& buf = x.s[0];
    if (c.first) {
      buf = g;
    } else {
      buf = c.momentum * buf + c.keep * g;
    }
    if (c.nesterov) {
      x.p -= c.lr * (g + c.momentum * buf);
    } else {
      x.p -= c.lr * buf;
    }
  }
};

/// torch.optim.Adam (kDecoupled = false: L2 weight decay added to the gradient) and torch.optim.AdamW (true: the
/// parameters shrink by lr * weight_decay before the step), with bias correction and AMSGrad.
template <bool kDecoupled>
struct AdamKernelBase {
  static constexpr const char* kName = kDecoupled ? "AdamW" : "Adam";
  struct Options {
    double lr = 1e-3;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = kDecoupled ? 1e-2 : 0;
    bool amsgrad = false;

    void validate() const {
      detail::require(lr >= 0, kName, "lr must be >= 0", lr);
      detail::require(beta1 >= 0 && beta1 < 1, kName, "beta1 must be in [0, 1)", beta1);
      detail::require(beta2 >= 0 && beta2 < 1, kName, "beta2 must be in [0, 1)", beta2);
      detail::require(eps >= 0, kName, "eps must be >= 0", eps);
      detail::require(weight_decay >= 0, kName, "weight_decay must be >= 0", weight_decay);
    }
  };

  static std::span<const char* const> slots(const Options& o) {
    static constexpr const char* kSlots[] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
    return {kSlots, o.amsgrad ? 3u : 2u};
  }

  template <class T>
  using Coeffs = detail::AdamCoeffs<T>;
  template <class T>
  static Coeffs<T> coefficients(const Options& o, const LeafStep& s) {
    const double t = static_cast<double>(s.t);
    const double bc1 = 1 - std::pow(o.beta1, t), bc2 = 1 - std::pow(o.beta2, t);
    return {T(o.beta1),
            T(1 - o.beta1),
            T(o.beta2),
            T(1 - o.beta2),
            T(kDecoupled ? 0 : s.weight_decay),
            T(kDecoupled ? 1 - s.lr * s.weight_decay : 1),
            T(s.lr / bc1),
            T(1 / std::sqrt(bc2)),
            T(o.eps),
            o.amsgrad};
  }

  template <class T>
  static void update(const Coeffs<T>& c, Chunk<T>& x) {
    if (c.shrink != T(1)) return apply<true>(c, x, x.g);  // AdamW: no L2 term
    detail::with_l2(x, c.l2, [&](const auto& g) { apply<false>(c, x, g); });
  }

  template <class T>
  static bool update_avx2([[maybe_unused]] const Coeffs<T>& c, [[maybe_unused]] Chunk<T>& x) {
#if GEOMOPT_HAVE_AVX2_PATH
    detail::avx2_adam(c, x.p.data(), x.g.data(), x.s[0].data(), x.s[1].data(), c.amsgrad ? x.s[2].data() : nullptr,
                      x.p.size());
    return true;
#else
    return false;
#endif
  }

  static Hyperparameters hyperparameters(const Options& o) {
    return {{"lr", o.lr},
            {"beta1", o.beta1},
            {"beta2", o.beta2},
            {"eps", o.eps},
            {"weight_decay", o.weight_decay},
            {"amsgrad", o.amsgrad ? 1.0 : 0.0}};
  }

 private:
  // kShrink: AdamW's decay folded into the last statement, so p is read and written once.
  template <bool kShrink, class T, class G>
  static void apply(const Coeffs<T>& c, Chunk<T>& x, const G& g) {
    auto& m = x.s[0];
    auto& v = x.s[1];
    m = c.b1 * m + c.one_minus_b1 * g;
    v = c.b2 * v + c.one_minus_b2 * g.square();
    if (c.amsgrad) {
      auto& vmax = x.s[2];
      vmax = vmax.max(v);
      finish<kShrink>(c, x, m / (vmax.sqrt() * c.inv_bc2_sqrt + c.eps));
    } else {
      finish<kShrink>(c, x, m / (v.sqrt() * c.inv_bc2_sqrt + c.eps));
    }
  }
  template <bool kShrink, class T, class U>
  static void finish(const Coeffs<T>& c, Chunk<T>& x, const U& u) {
    if constexpr (kShrink) {
      x.p = c.shrink * x.p - c.step_size * u;
    } else {
      x.p -= c.step_size * u;
    }
  }
};
using AdamKernel = AdamKernelBase<false>;
using AdamWKernel = AdamKernelBase<true>;

/// torch.optim.RMSprop: L2 weight decay, momentum, and the centered variant (dividing by the estimated standard
/// deviation rather than the root mean square).
struct RMSpropKernel {
  static constexpr const char* kName = "RMSprop";
  struct Options {
    double lr = 1e-2;
    double alpha = 0.99;
    double eps = 1e-8;
    double weight_decay = 0;
    double momentum = 0;
    bool centered = false;

    void validate() const {
      detail::require(lr >= 0, kName, "lr must be >= 0", lr);
      detail::require(alpha >= 0 && alpha <= 1, kName, "alpha must be in [0, 1]", alpha);
      detail::require(eps >= 0, kName, "eps must be >= 0", eps);
      detail::require(weight_decay >= 0, kName, "weight_decay must be >= 0", weight_decay);
      detail::require(momentum >= 0, kName, "momentum must be >= 0", momentum);
    }
  };

  // square_avg first; then momentum_buffer and grad_avg when used, in that order.
  static std::span<const char* const> slots(const Options& o) {
    static constexpr const char* kPlain[] = {"square_avg"};
    static constexpr const char* kMomentum[] = {"square_avg", "momentum_buffer"};
    static constexpr const char* kCentered[] = {"square_avg", "grad_avg"};
    static constexpr const char* kBoth[] = {"square_avg", "momentum_buffer", "grad_avg"};
    if (o.momentum > 0) return o.centered ? std::span<const char* const>(kBoth) : kMomentum;
    return o.centered ? std::span<const char* const>(kCentered) : kPlain;
  }

  template <class T>
  struct Coeffs {
    T lr, wd, alpha, one_minus_alpha, eps, momentum;
    bool has_momentum, centered;
  };
  template <class T>
  static Coeffs<T> coefficients(const Options& o, const LeafStep& s) {
    return {T(s.lr),  T(s.weight_decay), T(o.alpha),     T(1 - o.alpha),
            T(o.eps), T(o.momentum),     o.momentum > 0, o.centered};
  }

  template <class T>
  static void update(const Coeffs<T>& c, Chunk<T>& x) {
    detail::with_l2(x, c.wd, [&](const auto& g) { apply(c, x, g); });
  }

  static Hyperparameters hyperparameters(const Options& o) {
    return {{"lr", o.lr},
            {"alpha", o.alpha},
            {"eps", o.eps},
            {"weight_decay", o.weight_decay},
            {"momentum", o.momentum},
            {"centered", o.centered ? 1.0 : 0.0}};
  }

 private:
  template <class T, class G>
  static void apply(const Coeffs<T>& c, Chunk<T>& x, const G& g) {
    auto& sq = x.s[0];
    sq = c.alpha * sq + c.one_minus_alpha * g.square();
    if (c.centered) {
      auto& ga = x.s[c.has_momentum ? 2 : 1];
      ga = c.alpha * ga + c.one_minus_alpha * g;
      step(c, x, g, (sq - ga.square()).sqrt() + c.eps);
    } else {
      step(c, x, g, sq.sqrt() + c.eps);
    }
  }
  template <class T, class G, class D>
  static void step(const Coeffs<T>& c, Chunk<T>& x, const G& g, const D& denom) {
    if (c.has_momentum) {
      auto& buf = x.s[1];
      buf = c.momentum * buf + g / denom;
      x.p -= c.lr * buf;
    } else {
      x.p -= c.lr * (g / denom);
    }
  }
};

/// torch.optim.Adagrad: a running sum of squared gradients, with learning-rate decay lr / (1 + (t - 1) lr_decay).
struct AdagradKernel {
  static constexpr const char* kName = "Adagrad";
  struct Options {
    double lr = 1e-2;
    double lr_decay = 0;
    double weight_decay = 0;
    double initial_accumulator_value = 0;
    double eps = 1e-10;

    void validate() const {
      detail::require(lr >= 0, kName, "lr must be >= 0", lr);
      detail::require(lr_decay >= 0, kName, "lr_decay must be >= 0", lr_decay);
      detail::require(weight_decay >= 0, kName, "weight_decay must be >= 0", weight_decay);
      detail::require(initial_accumulator_value >= 0, kName, "initial_accumulator_value must be >= 0",
                      initial_accumulator_value);
      detail::require(eps >= 0, kName, "eps must be >= 0", eps);
    }
  };

  static std::span<const char* const> slots(const Options&) {
    static constexpr const char* kSlots[] = {"sum"};
    return kSlots;
  }
  static double slot_init(const Options& o, std::size_t) { return o.initial_accumulator_value; }

  template <class T>
  struct Coeffs {
    T clr, wd, eps;
  };
  template <class T>
  static Coeffs<T> coefficients(const Options& o, const LeafStep& s) {
    return {T(s.lr / (1 + static_cast<double>(s.t - 1) * o.lr_decay)), T(s.weight_decay), T(o.eps)};
  }

  template <class T>
  static void update(const Coeffs<T>& c, Chunk<T>& x) {
    detail::with_l2(x, c.wd, [&](const auto& g) { apply(c, x, g); });
  }

  static Hyperparameters hyperparameters(const Options& o) {
    return {{"lr", o.lr},
            {"lr_decay", o.lr_decay},
            {"weight_decay", o.weight_decay},
            {"initial_accumulator_value", o.initial_accumulator_value},
            {"eps", o.eps}};
  }

 private:
  template <class T, class G>
  static void apply(const Coeffs<T>& c, Chunk<T>& x, const G& g) {
    auto& sum = x.s[0];
    sum += g.square();
    x.p -= c.clr * (g / (sum.sqrt() + c.eps));
  }
};

}  // namespace geomopt
