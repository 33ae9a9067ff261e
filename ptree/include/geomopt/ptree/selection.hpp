// Selections: which leaves a walk visits. Every walk takes one as an optional first argument.
//
//   params   trainable leaves (the default)
//   buffers  the values inside Buffer<L>
//   all      both
#pragma once

#include <type_traits>

namespace geomopt::ptree {

struct params_t {
  static constexpr bool kParams = true, kBuffers = false;
};
struct buffers_t {
  static constexpr bool kParams = false, kBuffers = true;
};
struct all_t {
  static constexpr bool kParams = true, kBuffers = true;
};
/// Trainable leaves (the default of every walk).
inline constexpr params_t params{};
/// Buffer<L> leaves only.
inline constexpr buffers_t buffers{};
/// Both.
inline constexpr all_t all{};

template <class S>
concept selection = std::is_same_v<std::remove_cvref_t<S>, params_t> || std::is_same_v<std::remove_cvref_t<S>, buffers_t> ||
                    std::is_same_v<std::remove_cvref_t<S>, all_t>;

}  // namespace geomopt::ptree
