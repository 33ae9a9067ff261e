// The explicit instantiation definitions declared in extern_kernels.hpp, for float.
#include "extern_kernels.hpp"

GEOMOPT_TEST_KERNELS(, float)
