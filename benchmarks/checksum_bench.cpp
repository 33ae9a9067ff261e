// The CRC-32 of io's dataset checksums (io/src/checksum.cpp) against memcpy of the same bytes, one thread: in cache
// (a 256 KiB buffer, what a load checks at a time) and from memory (256 MiB). zlib's crc32 is the reference for
// the value (every run checks equality first) and the speed a plain table reaches. Prints GB/s, medians of 9 runs,
// and each checksum's ratio to memcpy.
//
//   build/dev/benchmarks/checksum_bench
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "checksum.hpp"

namespace {

namespace gd = geomopt::io::detail;

template <class F>
double gbps(std::size_t bytes, int repeat, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < 9; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < repeat; ++k) f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return static_cast<double>(bytes) * repeat / t[4] / 1e9;
}

}  // namespace

int main() {
  std::mt19937 rng(1);
  for (const std::size_t n :
       {std::size_t{0}, std::size_t{63}, std::size_t{64}, std::size_t{1000}, std::size_t{1} << 20}) {
    std::vector<unsigned char> v(n);
    for (auto& c : v) c = static_cast<unsigned char>(rng());
    const auto z = static_cast<std::uint32_t>(::crc32(0, v.data(), static_cast<uInt>(n)));
    if (gd::crc32(0, v.data(), n) != z || gd::crc32_portable(0, v.data(), n) != z) {
      std::printf("checksum differs from zlib's crc32 at %zu bytes\n", n);
      return 1;
    }
  }
  std::printf("%-10s %-16s %8s %10s\n", "size", "what", "GB/s", "/ memcpy");
  for (const auto& [bytes, repeat] : {std::pair<std::size_t, int>{std::size_t{256} << 10, 2000},
                                      std::pair<std::size_t, int>{std::size_t{256} << 20, 2}}) {
    std::vector<unsigned char> src(bytes), dst(bytes);
    for (auto& c : src) c = static_cast<unsigned char>(rng());
    volatile std::uint32_t sink = 0;
    const double copy = gbps(bytes, repeat, [&] {
      std::memcpy(dst.data(), src.data(), bytes);
      sink = sink + dst[bytes / 2];
    });
    const double clmul = gbps(bytes, repeat, [&] { sink = sink + gd::crc32(0, src.data(), bytes); });
    const double table = gbps(bytes, repeat, [&] { sink = sink + gd::crc32_portable(0, src.data(), bytes); });
    const double zlib = gbps(bytes, repeat, [&] {
      sink = sink + static_cast<std::uint32_t>(::crc32(0, src.data(), static_cast<uInt>(bytes)));
    });
    const char* size = bytes < (std::size_t{1} << 20) ? "256 KiB" : "256 MiB";
    std::printf("%-10s %-16s %8.2f %10s\n", size, "memcpy", copy, "1.00");
    for (const auto& [name, v] :
         {std::pair<const char*, double>{"crc32 (geomopt)", clmul},
          std::pair<const char*, double>{"crc32 (table)", table}, std::pair<const char*, double>{"zlib crc32", zlib}})
      std::printf("%-10s %-16s %8.2f %10.2f\n", size, name, v, v / copy);
  }
  return 0;
}
