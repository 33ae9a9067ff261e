// The ManifoldMuon engines, float and double.
#include "engine_kernel.hpp"

namespace geomopt::python {
template std::unique_ptr<AnyEngine> make_optimizer_engine<ManifoldMuon>(bool, const EngineArgs&);
}  // namespace geomopt::python
