// Which instructions the built-in kernels run on. The library is built for the baseline of its target (x86-64
// means SSE2: 4 floats per instruction), which leaves an Adam step compute-bound, well short of memory bandwidth, and
// the dense products of the manifold kernels at a third to a half of the multiply-add rate. The kernels that matter
// (Adam and AdamW in optimizers/detail/avx2.hpp, the products of manifolds/detail/gemm_avx2.hpp) therefore also carry a
// 256-bit AVX2 + FMA version, compiled for that target alone and chosen at run time when the CPU has it, so no -march
// flag is needed by the library or its users.
//
//   geomopt::kernel_path()                 avx2 where the CPU has AVX2 and FMA, else portable
//   geomopt::set_kernel_path(path)         force one (tests and benchmarks compare the two)
//   GEOMOPT_KERNEL_PATH=portable           the same from the environment, read at the first kernel call
//
// Each path is deterministic and independent of the thread count and of how leaves are cut into chunks. The two
// paths differ by rounding only: the AVX2 one fuses multiply-adds.
#pragma once

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define GEOMOPT_HAVE_AVX2_PATH 1
#else
#define GEOMOPT_HAVE_AVX2_PATH 0
#endif

namespace geomopt {

enum class KernelPath {
  portable,  ///< Eigen's vectorization at the flags the program was built with
  avx2,      ///< 256-bit AVX2 + FMA kernels, selected at run time
};

namespace detail {
inline bool cpu_has_avx2_fma() noexcept {
#if GEOMOPT_HAVE_AVX2_PATH
  // Also true only when the operating system saves the 256-bit registers (the builtin checks XCR0).
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

inline std::atomic<int>& kernel_path_setting() noexcept {
  static std::atomic<int> setting{[] {
    const char* env = std::getenv("GEOMOPT_KERNEL_PATH");
    const bool portable = env != nullptr && std::strcmp(env, "portable") == 0;
    return static_cast<int>(!portable && cpu_has_avx2_fma() ? KernelPath::avx2 : KernelPath::portable);
  }()};
  return setting;
}
}  // namespace detail

/// Whether this build and this CPU can run the given path.
inline bool kernel_path_available(KernelPath path) noexcept {
  return path == KernelPath::portable || detail::cpu_has_avx2_fma();
}

/// The path the next steps take.
inline KernelPath kernel_path() noexcept {
  return static_cast<KernelPath>(detail::kernel_path_setting().load(std::memory_order_relaxed));
}

/// Makes every later kernel call (optimizer steps, manifold retractions and lifts) take the given path. Throws
/// std::invalid_argument when it is not available (avx2 on a CPU or build without it); the setting is then unchanged.
inline void set_kernel_path(KernelPath path) {
  if (!kernel_path_available(path))
    throw std::invalid_argument("set_kernel_path: avx2 requested, but this CPU or build has no AVX2 and FMA");
  detail::kernel_path_setting().store(static_cast<int>(path), std::memory_order_relaxed);
}

}  // namespace geomopt
