// The SGD engines, float and double.
#include "engine_kernel.hpp"

namespace geomopt::python {
template std::unique_ptr<AnyEngine> make_kernel_engine<SGDKernel>(bool, const EngineArgs&);
}  // namespace geomopt::python
