// The definition of make_optimizer_engine<Opt>, included by each engine_<kernel>.cpp: the optimizer's options read
// from torch's names, the common options from Python's words, and an Engine for float or double.
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
  } else if constexpr (std::is_enum_v<V>) {
    field = static_cast<V>(static_cast<int>(it->second));
  } else {
    field = static_cast<V>(it->second);
  }
}

// Reads the choice `name` (0 to count - 1) into the enumeration `field`; std::invalid_argument outside that range.
template <class E>
void read_choice(const OptionMap& options, const char* name, int count, E& field, std::set<std::string>& used) {
  const auto it = options.find(name);
  if (it != options.end() && !(it->second >= 0 && it->second < count && it->second == static_cast<int>(it->second)))
    throw std::invalid_argument(std::string("geomopt: option '") + name + "' must be a choice from 0 to " +
                                std::to_string(count - 1) + ", got " + std::to_string(it->second));
  read_option(options, name, field, used);
}

template <class Opt>
typename Opt::Options optimizer_options(const OptionMap& options) {
  typename Opt::Options o;
  std::set<std::string> used;
  if constexpr (is_muon<Opt>) {
    read_option(options, "momentum", o.momentum, used);
    read_option(options, "nesterov", o.nesterov, used);
    read_option(options, "ns_steps", o.ns_steps, used);
    read_option(options, "ns_a", o.ns_coefficients[0], used);
    read_option(options, "ns_b", o.ns_coefficients[1], used);
    read_option(options, "ns_c", o.ns_coefficients[2], used);
    read_option(options, "ns_eps", o.ns_eps, used);
    read_choice(options, "scale", 3, o.scale, used);
    read_option(options, "adamw_beta1", o.fallback.beta1, used);
    read_option(options, "adamw_beta2", o.fallback.beta2, used);
    read_option(options, "adamw_eps", o.fallback.eps, used);
    if constexpr (std::is_same_v<Opt, ManifoldMuon>) {
      read_choice(options, "stiefel_retraction", 3, o.retraction, used);
      read_choice(options, "stiefel_method", 2, o.stiefel.method, used);
      read_option(options, "stiefel_tolerance", o.stiefel.tolerance, used);
      read_option(options, "stiefel_max_iterations", o.stiefel.max_iterations, used);
      read_option(options, "stiefel_warm_start", o.stiefel.warm_start, used);
      read_option(options, "oblique_tolerance", o.oblique.tolerance, used);
      read_option(options, "oblique_max_iterations", o.oblique.max_iterations, used);
    }
  } else if constexpr (std::is_same_v<Opt, Optimizer<SGDKernel>>) {
    read_option(options, "momentum", o.momentum, used);
    read_option(options, "dampening", o.dampening, used);
    read_option(options, "nesterov", o.nesterov, used);
  } else if constexpr (std::is_same_v<Opt, Optimizer<AdamKernel>> || std::is_same_v<Opt, Optimizer<AdamWKernel>>) {
    read_option(options, "beta1", o.beta1, used);
    read_option(options, "beta2", o.beta2, used);
    read_option(options, "eps", o.eps, used);
    read_option(options, "amsgrad", o.amsgrad, used);
  } else if constexpr (std::is_same_v<Opt, Optimizer<RMSpropKernel>>) {
    read_option(options, "alpha", o.alpha, used);
    read_option(options, "eps", o.eps, used);
    read_option(options, "momentum", o.momentum, used);
    read_option(options, "centered", o.centered, used);
  } else if constexpr (std::is_same_v<Opt, Optimizer<AdagradKernel>>) {
    read_option(options, "lr_decay", o.lr_decay, used);
    read_option(options, "eps", o.eps, used);
    read_option(options, "initial_accumulator_value", o.initial_accumulator_value, used);
  }
  for (const auto& [name, value] : options)
    if (used.count(name) == 0) throw std::invalid_argument("geomopt: unknown option '" + name + "'");
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

template <class Opt>
std::unique_ptr<AnyEngine> make_optimizer_engine(bool is_double, const EngineArgs& a) {
  const auto options = detail::optimizer_options<Opt>(a.options);
  const CommonOptions common = detail::common_options(a.common);
  if (is_double) return std::make_unique<Engine<double, Opt>>(options, common, a.specs, a.params, a.lr, a.weight_decay);
  return std::make_unique<Engine<float, Opt>>(options, common, a.specs, a.params, a.lr, a.weight_decay);
}

}  // namespace geomopt::python
