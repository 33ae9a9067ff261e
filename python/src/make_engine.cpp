// make_engine: the kernel by name, the common options from Python's words.
#include "make_engine.hpp"

#include <stdexcept>

namespace geomopt::python {

std::unique_ptr<AnyEngine> make_engine(const std::string& kernel, bool is_double, const EngineArgs& args) {
  if (kernel == "SGD") return make_kernel_engine<SGDKernel>(is_double, args);
  if (kernel == "Adam") return make_kernel_engine<AdamKernel>(is_double, args);
  if (kernel == "AdamW") return make_kernel_engine<AdamWKernel>(is_double, args);
  if (kernel == "RMSprop") return make_kernel_engine<RMSpropKernel>(is_double, args);
  if (kernel == "Adagrad") return make_kernel_engine<AdagradKernel>(is_double, args);
  throw std::invalid_argument("geomopt: no optimizer kernel named '" + kernel +
                              "'; expected SGD, Adam, AdamW, RMSprop or Adagrad");
}

}  // namespace geomopt::python
