// The definition of make_kernel_engine<Kernel>, included by each engine_<kernel>.cpp: the kernel's options read from
// torch's names, the common options from Python's words, and an Engine for float or double.
#pragma once

#include <set>
#include <stdexcept>
#include <string>

#include "make_engine.hpp"

namespace geomopt::python {
namespace detail {

// Reads option `name` into `field` when present; `used` collects the names read, so that an unknown one is refused.
template <class V>
void read_option(const OptionMap& options, const char* name, V& field, std::set<std::string>& used) {
  used.insert(name);
  const auto it = options.find(name);
  if (it == options.end()) return;
  if constexpr (std::is_same_v<V, bool>) {
    field = it->second != 0;
  } else {
    field = static_cast<V>(it->second);
  }
}

template <class Kernel>
typename Kernel::Options kernel_options(const OptionMap& options) {
  typename Kernel::Options o;
  std::set<std::string> used;
  if constexpr (std::is_same_v<Kernel, SGDKernel>) {
    read_option(options, "momentum", o.momentum, used);
    read_option(options, "dampening", o.dampening, used);
    read_option(options, "nesterov", o.nesterov, used);
  } else if constexpr (std::is_same_v<Kernel, AdamKernel> || std::is_same_v<Kernel, AdamWKernel>) {
    read_option(options, "beta1", o.beta1, used);
    read_option(options, "beta2", o.beta2, used);
    read_option(options, "eps", o.eps, used);
    read_option(options, "amsgrad", o.amsgrad, used);
  } else if constexpr (std::is_same_v<Kernel, RMSpropKernel>) {
    read_option(options, "alpha", o.alpha, used);
    read_option(options, "eps", o.eps, used);
    read_option(options, "momentum", o.momentum, used);
    read_option(options, "centered", o.centered, used);
  } else if constexpr (std::is_same_v<Kernel, AdagradKernel>) {
    read_option(options, "lr_decay", o.lr_decay, used);
    read_option(options, "eps", o.eps, used);
    read_option(options, "initial_accumulator_value", o.initial_accumulator_value, used);
  }
  for (const auto& [name, value] : options)
    if (used.count(name) == 0)
      throw std::invalid_argument(std::string(Kernel::kName) + ": unknown option '" + name + "'");
  return o;
}

inline CommonOptions common_options(const Common& c) {
  CommonOptions o;
  o.clip_norm = c.clip_norm;
  o.ema_decay = c.ema_decay;
  o.threads = c.threads;
  if (c.non_finite == "propagate") {
    o.non_finite = NonFinitePolicy::propagate;
  } else if (c.non_finite == "skip") {
    o.non_finite = NonFinitePolicy::skip;
  } else if (c.non_finite == "raise") {
    o.non_finite = NonFinitePolicy::raise;
  } else {
    throw std::invalid_argument("geomopt: non_finite must be 'propagate', 'skip' or 'raise', got '" + c.non_finite +
                                "'");
  }
  if (c.section == "recomputed") {
    o.section = SectionPolicy::recomputed;
  } else if (c.section == "transported") {
    o.section = SectionPolicy::transported;
  } else {
    throw std::invalid_argument("geomopt: section must be 'recomputed' or 'transported', got '" + c.section + "'");
  }
  return o;
}

}  // namespace detail

template <class Kernel>
std::unique_ptr<AnyEngine> make_kernel_engine(bool is_double, const EngineArgs& a) {
  const auto options = detail::kernel_options<Kernel>(a.options);
  const CommonOptions common = detail::common_options(a.common);
  if (is_double)
    return std::make_unique<Engine<double, Kernel>>(options, common, a.specs, a.params, a.lr, a.weight_decay);
  return std::make_unique<Engine<float, Kernel>>(options, common, a.specs, a.params, a.lr, a.weight_decay);
}

}  // namespace geomopt::python
