// Eigen configured to count its own heap allocations, for the test programs that count allocations
// (tests/optimizers/count_allocations.hpp) and everything linked into them.
//
// Eigen's allocations call malloc, not operator new: EIGEN_RUNTIME_NO_MALLOC makes each one check
// Eigen::internal::is_malloc_allowed() through eigen_assert, and the eigen_assert below records instead of aborting
// while allocations are forbidden (alloc_count::Window). Any other failed Eigen assertion aborts with its expression.
//
// Active only where GEOMOPT_TEST_COUNTING is defined, and then it must precede every inclusion of Eigen. The test
// build defines it for each test that counts and for the kernels library those tests link
// (geomopt_test_kernels_counting), so one executable never mixes two configurations of Eigen's inline functions: the
// linker keeps one copy of each, and an uncounting copy would hide allocations. Elsewhere this header is empty.
#pragma once

#ifdef GEOMOPT_TEST_COUNTING

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace alloc_count {
inline std::atomic<long> news{0};           // calls to any operator new
inline std::atomic<long> eigen_mallocs{0};  // Eigen heap allocations (or other failed assertions) while forbidden
inline bool report = true;                  // print where each forbidden one happened
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

#endif  // GEOMOPT_TEST_COUNTING
