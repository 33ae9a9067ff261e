// Counting heap allocations in a test executable: alloc_count::allocations counts every block the C allocator hands
// out, whoever asks for it (operator new, Eigen, the test kernels library, Ceres, HDF5), in every thread.
//
// Counted at the allocator, so that nothing is compiled differently to be counted and a test links the same kernels
// as every other test:
//   - a plain build replaces glibc's malloc family in the executable with functions that count and forward to
//     glibc's own allocator (glibc supports replacing malloc from the executable: the calls of every shared library,
//     operator new's among them, reach the replacement);
//   - a sanitizer build, whose runtime owns malloc, counts through the runtime's allocation hook, which sees every
//     allocation, operator new's included.
// free is not counted: a test asks how many allocations a piece of code made, not how much memory it holds.
// While a thread holds a Pause, its allocations are counted apart (paused_allocations): a test that calls a library
// whose allocations are not the code under test's (Open MPI's, inside an MPI call: mpi_allocations.hpp) counts them
// there.
//
// Include it in exactly one file of a test executable (it defines the replacements), then
//   { alloc_count::Window window; ...; CHECK(window.count() == 0); }   or   CHECK(alloc_count::allocations_of(f) == 0);
#pragma once

#include <atomic>
#include <cerrno>
#include <cstddef>

#include "sanitized.hpp"

namespace alloc_count {

inline std::atomic<long> allocations{0};
inline std::atomic<long> paused_allocations{0};
inline thread_local int paused = 0;

inline void record() noexcept {
  (paused > 0 ? paused_allocations : allocations).fetch_add(1, std::memory_order_relaxed);
}

// Counts this thread's allocations apart for its lifetime.
class Pause {
 public:
  Pause() noexcept { ++paused; }
  ~Pause() { --paused; }
  Pause(const Pause&) = delete;
  Pause& operator=(const Pause&) = delete;
};

// The allocations made between its construction and count().
class Window {
 public:
  Window() : start_(allocations.load()), paused_start_(paused_allocations.load()) {}
  long count() const { return allocations.load() - start_; }
  /// The allocations made under a Pause in the window.
  long paused_count() const { return paused_allocations.load() - paused_start_; }

 private:
  long start_;
  long paused_start_;
};

// The allocations f() makes.
template <class F>
long allocations_of(F&& f) {
  Window window;
  f();
  return window.count();
}

}  // namespace alloc_count

#ifdef GEOMOPT_TEST_SANITIZER_ALLOCATOR

#include <sanitizer/allocator_interface.h>

namespace alloc_count {
inline void on_allocate(const volatile void*, std::size_t) { record(); }
inline void on_free(const volatile void*) {}
// Installed before main, by the executable's static initialization.
inline const int hook_installed = __sanitizer_install_malloc_and_free_hooks(&on_allocate, &on_free);
}  // namespace alloc_count

#else

#include <malloc.h>

#include <cstdlib>

// glibc's own allocator, under the names it exports for replacements to call.
extern "C" {
void* __libc_malloc(std::size_t n) noexcept;
void* __libc_calloc(std::size_t count, std::size_t n) noexcept;
void* __libc_realloc(void* p, std::size_t n) noexcept;
void* __libc_memalign(std::size_t alignment, std::size_t n) noexcept;
void* __libc_valloc(std::size_t n) noexcept;
void* __libc_pvalloc(std::size_t n) noexcept;
void __libc_free(void* p) noexcept;
}

extern "C" {
void* malloc(std::size_t n) noexcept {
  alloc_count::record();
  return __libc_malloc(n);
}
void* calloc(std::size_t count, std::size_t n) noexcept {
  alloc_count::record();
  return __libc_calloc(count, n);
}
void* realloc(void* p, std::size_t n) noexcept {
  alloc_count::record();
  return __libc_realloc(p, n);
}
void* memalign(std::size_t alignment, std::size_t n) noexcept {
  alloc_count::record();
  return __libc_memalign(alignment, n);
}
void* aligned_alloc(std::size_t alignment, std::size_t n) noexcept {
  alloc_count::record();
  return __libc_memalign(alignment, n);
}
int posix_memalign(void** out, std::size_t alignment, std::size_t n) noexcept {
  if (alignment == 0 || alignment % sizeof(void*) != 0 || (alignment & (alignment - 1)) != 0) return EINVAL;
  alloc_count::record();
  void* p = __libc_memalign(alignment, n);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
void* valloc(std::size_t n) noexcept {
  alloc_count::record();
  return __libc_valloc(n);
}
void* pvalloc(std::size_t n) noexcept {
  alloc_count::record();
  return __libc_pvalloc(n);
}
void free(void* p) noexcept { __libc_free(p); }
}

#endif  // GEOMOPT_TEST_SANITIZER_ALLOCATOR
