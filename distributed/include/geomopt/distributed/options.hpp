// AverageOptions: how GradientAverager cuts the flat gradient into buckets and how many it reduces at once.
//
// bucket_bytes is the size of a bucket of the flat vector in bytes (the last bucket may be smaller; a bucket holds at
// least one entry, and a leaf may span several buckets); buckets_in_flight is how many buckets may be between packing
// and their sum at once, each holding a staging area of (P - 1) / P of a bucket. Every rank must pass the same
// bucket_bytes (checked at construction). IsValid keeps Ceres's name, as the solvers' options do.
#pragma once

#include <climits>
#include <cstddef>
#include <string>

namespace geomopt::distributed {

struct AverageOptions {
  /// 25 MiB, PyTorch DDP's bucket_cap_mb: large enough that per-message latency is paid rarely, small enough that
  /// reducing one bucket overlaps packing the next.
  std::size_t bucket_bytes = std::size_t{25} << 20;
  int buckets_in_flight = 2;

  /// True when every option is in range; otherwise false with a message naming the option and the value.
  bool IsValid(std::string* error) const {
    auto fail = [&](const std::string& what) {
      if (error != nullptr) *error = what;
      return false;
    };
    if (bucket_bytes < 1 || bucket_bytes > static_cast<std::size_t>(INT_MAX))
      return fail("bucket_bytes must be in [1, " + std::to_string(INT_MAX) + "], got " + std::to_string(bucket_bytes));
    if (buckets_in_flight < 1) return fail("buckets_in_flight must be >= 1, got " + std::to_string(buckets_in_flight));
    return true;
  }
};

}  // namespace geomopt::distributed
