// Counting heap allocations in a test executable: every global operator new (defined here), and Eigen's own
// allocations, counted by the Eigen configuration of tests/support/eigen_counting.hpp.
//
// Include it first, before anything that includes Eigen, in one file per test executable (it defines the global
// operator new and delete); the test build defines GEOMOPT_TEST_COUNTING for every test that includes it
// (tests/CMakeLists.txt). Then { alloc_count::Window window; ...; CHECK(window.count() == 0); }.
#pragma once

#ifndef GEOMOPT_TEST_COUNTING
#error "count_allocations.hpp: the test build defines GEOMOPT_TEST_COUNTING for the tests that include it"
#endif

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>

#include "../support/eigen_counting.hpp"

namespace alloc_count {
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
