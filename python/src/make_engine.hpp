// make_engine: an Engine for a kernel named as geomopt.torch names it, from the options Python passes (torch's
// names), for float or double parameters. Each kernel's engines are compiled in a file of their own
// (engine_<kernel>.cpp), so the extension's files build in parallel.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine.hpp"

namespace geomopt::python {

/// A kernel's options by torch's names ("momentum", "beta1", "amsgrad" as 0 or 1, ...); "lr" and "weight_decay"
/// come per group instead.
using OptionMap = std::map<std::string, double>;

/// The options every optimizer shares (CommonOptions), as Python passes them.
struct Common {
  double clip_norm = 0;
  double ema_decay = 0;
  std::string non_finite = "propagate";  ///< "propagate", "skip" or "raise"
  int threads = 1;
  std::string section = "recomputed";  ///< "recomputed" or "transported"
};

struct EngineArgs {
  OptionMap options;
  Common common;
  std::vector<ParamSpec> specs;
  std::vector<std::uintptr_t> params;
  std::vector<double> lr, weight_decay;
};

/// The engine of `kernel` ("SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Muon", "ManifoldMuon"); std::invalid_argument
/// for another name, an unknown option, or a bad value (the library's validation names it).
std::unique_ptr<AnyEngine> make_engine(const std::string& kernel, bool is_double, const EngineArgs& args);

// One per optimizer (Optimizer<Kernel>, Muon, ManifoldMuon), each in its own file.
template <class Opt>
std::unique_ptr<AnyEngine> make_optimizer_engine(bool is_double, const EngineArgs& args);

}  // namespace geomopt::python
