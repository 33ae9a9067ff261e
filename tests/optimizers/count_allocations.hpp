// Counting heap allocations in a test executable: every global operator new, and Eigen's own allocations, which call
// malloc directly and are caught by EIGEN_RUNTIME_NO_MALLOC with an eigen_assert that records instead of aborting.
//
// Include it first, before anything that includes Eigen, in one file per test executable (it defines the global
// operator new and delete). Then { alloc_count::Window window; ...; CHECK(window.count() == 0); }. Any other failed
// Eigen assertion aborts with its expression, as it would in a debug build.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>

namespace alloc_count {
inline std::atomic<long> news{0};           // calls to any operator new
inline std::atomic<long> eigen_mallocs{0};  // Eigen heap allocations (or other failed assertions) while forbidden
inline bool report = true;                 // print where each forbidden one happened
void eigen_assert_failed(const char* expr, const char* file, int line);
}  // namespace alloc_count

#define EIGEN_RUNTIME_NO_MALLOC
#define eigen_assert(x)                                                                    \
  do {                                                                                     \
    if (!static_cast<bool>(x)) ::alloc_count::eigen_assert_failed(#x, __FILE__, __LINE__); \
  } while (false)

#include <Eigen/Core>

namespace alloc_count {
inline void eigen_assert_failed(const char* expr, const char* file, int line) {
  if (!Eigen::internal::is_malloc_allowed()) {
    ++eigen_mallocs;
    if (report) std::fprintf(stderr, "while allocations are forbidden: %s at %s:%d\n", expr, file, line);
    return;
  }
  std::fprintf(stderr, "eigen_assert failed: %s at %s:%d\n", expr, file, line);
  std::abort();
}

inline void* allocate(std::size_t n) {
  ++news;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
inline void* allocate_aligned(std::size_t n, std::align_val_t al) {
  ++news;
  const auto a = static_cast<std::size_t>(al);
  const std::size_t size = ((n == 0 ? 1 : n) + a - 1) / a * a;
  if (void* p = std::aligned_alloc(a, size)) return p;
  throw std::bad_alloc();
}
inline void* allocate_nothrow(std::size_t n) noexcept {
  try {
    return allocate(n);
  } catch (...) {
    return nullptr;
  }
}
inline void* allocate_aligned_nothrow(std::size_t n, std::align_val_t al) noexcept {
  try {
    return allocate_aligned(n, al);
  } catch (...) {
    return nullptr;
  }
}

// Counts the allocations of both kinds from its construction to count(); Eigen's are forbidden (and recorded) in
// between.
class Window {
 public:
  Window() : news_(news.load()), eigen_(eigen_mallocs.load()) { Eigen::internal::set_is_malloc_allowed(false); }
  ~Window() { Eigen::internal::set_is_malloc_allowed(true); }
  long count() const { return news.load() - news_ + eigen_mallocs.load() - eigen_; }

 private:
  long news_, eigen_;
};
}  // namespace alloc_count

void* operator new(std::size_t n) { return alloc_count::allocate(n); }
void* operator new[](std::size_t n) { return alloc_count::allocate(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return alloc_count::allocate_nothrow(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return alloc_count::allocate_nothrow(n); }
void* operator new(std::size_t n, std::align_val_t al) { return alloc_count::allocate_aligned(n, al); }
void* operator new[](std::size_t n, std::align_val_t al) { return alloc_count::allocate_aligned(n, al); }
void* operator new(std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
  return alloc_count::allocate_aligned_nothrow(n, al);
}
void* operator new[](std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
  return alloc_count::allocate_aligned_nothrow(n, al);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
