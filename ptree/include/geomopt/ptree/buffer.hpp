// Buffer<L>: a non-trainable leaf (running statistics, step counters, masks).
//
// Walks with `buffers` or `all` visit the L inside; `params` walks (the default) skip it, so it is never flattened,
// counted as a parameter or optimized. It is copied by map, zeros_like and cast (cast converts its scalar when
// that scalar is floating point).
#pragma once

#include <utility>

namespace geomopt::ptree {

template <class L>
class Buffer {
 public:
  using value_type = L;

  Buffer() = default;
  Buffer(const L& value) : value_(value) {}          // NOLINT(google-explicit-constructor): Buffer<V>{v}
  Buffer(L&& value) : value_(std::move(value)) {}    // NOLINT(google-explicit-constructor)

  L& value() noexcept { return value_; }
  const L& value() const noexcept { return value_; }
  L& operator*() noexcept { return value_; }
  const L& operator*() const noexcept { return value_; }
  L* operator->() noexcept { return &value_; }
  const L* operator->() const noexcept { return &value_; }

 private:
  L value_{};
};

}  // namespace geomopt::ptree
