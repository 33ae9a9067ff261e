// Whether this test program is built under the sanitizers, asked in one place.
//
// GEOMOPT_TEST_SANITIZER_ALLOCATOR: a sanitizer whose runtime owns malloc (AddressSanitizer, ThreadSanitizer,
// MemorySanitizer); count_allocations.hpp then counts through the runtime's allocation hook.
// test_support::sanitized: any sanitizer, UndefinedBehaviorSanitizer included. The sanitizer builds compile at -O0 and
// run the numerics 10 to 100 times slower, so a test may shorten a long campaign there; what it leaves out must take
// no code path that the remaining cases do not take, and the Release build runs it all.
//
// g++ defines __SANITIZE_ADDRESS__ and __SANITIZE_THREAD__; clang++ 14 (the sanitizer build's compiler) answers only
// __has_feature.
#pragma once

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define GEOMOPT_TEST_SANITIZER_ALLOCATOR 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define GEOMOPT_TEST_SANITIZER_ALLOCATOR 1
#endif
#endif

namespace test_support {

#if defined(GEOMOPT_TEST_SANITIZER_ALLOCATOR)
inline constexpr bool sanitized = true;
#elif defined(__has_feature)
#if __has_feature(undefined_behavior_sanitizer)
inline constexpr bool sanitized = true;
#else
inline constexpr bool sanitized = false;
#endif
#else
inline constexpr bool sanitized = false;
#endif

}  // namespace test_support
