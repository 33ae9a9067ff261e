// make_engine: the kernel by name, the common options from Python's words.
#include "make_engine.hpp"

#include <stdexcept>

namespace geomopt::python {

std::unique_ptr<AnyEngine> make_engine(const std::string& kernel, bool is_double, const EngineArgs& args) {
  if (kernel == "SGD") return make_optimizer_engine<Optimizer<SGDKernel>>(is_double, args);
  if (kernel == "Adam") return make_optimizer_engine<Optimizer<AdamKernel>>(is_double, args);
  if (kernel == "AdamW") return make_optimizer_engine<Optimizer<AdamWKernel>>(is_double, args);
  if (kernel == "RMSprop") return make_optimizer_engine<Optimizer<RMSpropKernel>>(is_double, args);
  if (kernel == "Adagrad") return make_optimizer_engine<Optimizer<AdagradKernel>>(is_double, args);
  if (kernel == "Muon") return make_optimizer_engine<Muon>(is_double, args);
  if (kernel == "ManifoldMuon") return make_optimizer_engine<ManifoldMuon>(is_double, args);
  throw std::invalid_argument("geomopt: no optimizer kernel named '" + kernel +
                              "'; expected SGD, Adam, AdamW, RMSprop, Adagrad, Muon or ManifoldMuon");
}

}  // namespace geomopt::python
