// The mean over ranks that every geomopt::distributed operation computes, written once: per entry,
// fl(fl(...fl(c_0 + c_1) + ... + c_{P-1}) / P), the left-to-right sum of the ranks' contributions in rank order, then
// one division. GradientAverager (averaging_engine.cpp) and ZeroRedundancyOptimizer (shard_exchange.cpp) call it, so
// a sharded step's gradient has the averager's bits.
#pragma once

#include <algorithm>
#include <cstddef>

namespace geomopt::distributed::detail {

// The mean of the P contributions c[0..P-1] (rank order) of n entries into out, which may be one of them. Tiles keep
// the accumulator in cache and let the compiler vectorise the adds.
template <class S>
void mean_in_rank_order(S* out, const void* const* c, int P, std::ptrdiff_t n) {
  constexpr std::ptrdiff_t kTile = 512;
  S acc[kTile];
  const S divisor = static_cast<S>(P);
  for (std::ptrdiff_t t = 0; t < n; t += kTile) {
    const std::ptrdiff_t m = std::min(kTile, n - t);
    const S* c0 = static_cast<const S*>(c[0]) + t;
    for (std::ptrdiff_t i = 0; i < m; ++i) acc[i] = c0[i];
    for (int q = 1; q < P; ++q) {
      const S* cq = static_cast<const S*>(c[q]) + t;
      for (std::ptrdiff_t i = 0; i < m; ++i) acc[i] += cq[i];
    }
    for (std::ptrdiff_t i = 0; i < m; ++i) out[t + i] = acc[i] / divisor;
  }
}

}  // namespace geomopt::distributed::detail
