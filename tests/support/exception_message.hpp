// What a piece of code throws, as text for a test to compare: message_of<E>(f) runs f and gives what() of the E it
// throws, or std::nullopt when it returns. An exception of another type is not E's business and propagates to the
// caller, which decides what it means (a failed check, a marker in the text, the test case's own report).
//
// Header-only, without doctest or geomopt, so that every test directory can include it by its relative path.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace test_support {

template <class E, class F>
std::optional<std::string> message_of(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const E& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

}  // namespace test_support
