// The explicit instantiation definitions declared in extern_kernels.hpp, for double.
#include "extern_kernels.hpp"

GEOMOPT_TEST_KERNELS(, double)
