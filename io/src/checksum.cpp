// CRC-32 by folding with carry-less multiplication (Intel, "Fast CRC Computation for Generic Polynomials Using
// PCLMULQDQ Instruction", 2009), with a slicing-by-8 table for the tail and for processors without PCLMULQDQ.
//
// Folding keeps four 128-bit accumulators congruent, modulo the CRC polynomial, to the data read so far, so the
// 16 bytes left at the end have the same CRC register as everything they replace; the table then finishes those 16
// bytes and the tail. The instruction is enabled per function (target attribute) and chosen at run time, so the
// library needs no -m flags and runs on any x86-64.
#include "checksum.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define GEOMOPT_CRC_CLMUL 1
#endif

namespace geomopt::io::detail {
namespace {

constexpr std::uint32_t kPoly = 0xEDB88320u;  // reflected 0x04C11DB7

constexpr std::array<std::array<std::uint32_t, 256>, 8> make_tables() {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1u) != 0 ? kPoly : 0u);
    t[0][i] = c;
  }
  for (std::size_t s = 1; s < 8; ++s)
    for (std::size_t i = 0; i < 256; ++i) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFFu];
  return t;
}
constexpr auto kTables = make_tables();

// `reg` is the CRC register itself (the value after the initial inversion, before the final one).
std::uint32_t table_update(std::uint32_t reg, const unsigned char* p, std::size_t n) noexcept {
  if constexpr (std::endian::native == std::endian::little) {
    while (n >= 8) {
      std::uint64_t w;
      std::memcpy(&w, p, 8);
      w ^= reg;
      reg = kTables[7][w & 0xFF] ^ kTables[6][(w >> 8) & 0xFF] ^ kTables[5][(w >> 16) & 0xFF] ^
            kTables[4][(w >> 24) & 0xFF] ^ kTables[3][(w >> 32) & 0xFF] ^ kTables[2][(w >> 40) & 0xFF] ^
            kTables[1][(w >> 48) & 0xFF] ^ kTables[0][w >> 56];
      p += 8;
      n -= 8;
    }
  }
  for (; n != 0; --n) reg = kTables[0][(reg ^ *p++) & 0xFFu] ^ (reg >> 8);
  return reg;
}

#ifdef GEOMOPT_CRC_CLMUL
__attribute__((target("pclmul,sse4.1"))) inline __m128i fold(__m128i x, __m128i k, __m128i next) {
  return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), next);
}

// n >= 64.
__attribute__((target("pclmul,sse4.1"))) std::uint32_t clmul_update(std::uint32_t reg, const unsigned char* p,
                                                                    std::size_t n) noexcept {
  auto load = [](const unsigned char* q) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q)); };
  // x^(4*128+32) and x^(4*128-32) modulo the polynomial, bit-reflected and shifted (fold by 64 bytes), and the same
  // for 16 bytes.
  const __m128i k4 = _mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL);
  const __m128i k1 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);
  __m128i x0 = _mm_xor_si128(load(p), _mm_cvtsi32_si128(static_cast<int>(reg)));
  __m128i x1 = load(p + 16), x2 = load(p + 32), x3 = load(p + 48);
  p += 64;
  n -= 64;
  while (n >= 64) {
    x0 = fold(x0, k4, load(p));
    x1 = fold(x1, k4, load(p + 16));
    x2 = fold(x2, k4, load(p + 32));
    x3 = fold(x3, k4, load(p + 48));
    p += 64;
    n -= 64;
  }
  x1 = fold(x0, k1, x1);
  x2 = fold(x1, k1, x2);
  x3 = fold(x2, k1, x3);
  while (n >= 16) {
    x3 = fold(x3, k1, load(p));
    p += 16;
    n -= 16;
  }
  unsigned char rest[16];
  _mm_storeu_si128(reinterpret_cast<__m128i*>(rest), x3);
  return table_update(table_update(0, rest, 16), p, n);
}

bool has_clmul() noexcept {
  static const bool has = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  return has;
}
#endif

}  // namespace

std::uint32_t crc32_portable(std::uint32_t crc, const void* data, std::size_t bytes) noexcept {
  return ~table_update(~crc, static_cast<const unsigned char*>(data), bytes);
}

std::uint32_t crc32(std::uint32_t crc, const void* data, std::size_t bytes) noexcept {
#ifdef GEOMOPT_CRC_CLMUL
  if (bytes >= 64 && has_clmul()) return ~clmul_update(~crc, static_cast<const unsigned char*>(data), bytes);
#endif
  return crc32_portable(crc, data, bytes);
}

std::uint32_t attributes_crc32(std::vector<std::pair<std::string, Attribute>> attributes) {
  std::sort(attributes.begin(), attributes.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string bytes;
  auto put = [&](auto v) {
    std::uint64_t u;
    std::memcpy(&u, &v, 8);
    for (int k = 0; k < 8; ++k) bytes.push_back(static_cast<char>((u >> (8 * k)) & 0xFFu));
  };
  for (const auto& [name, value] : attributes) {
    if (name == kAttributesChecksumAttribute) continue;
    bytes += name;
    bytes.push_back('\0');
    if (const auto* i = std::get_if<std::int64_t>(&value)) {
      bytes.push_back('i');
      put(*i);
    } else if (const auto* d = std::get_if<double>(&value)) {
      bytes.push_back('f');
      put(*d);
    } else {
      bytes.push_back('s');
      bytes += std::get<std::string>(value);
      bytes.push_back('\0');
    }
  }
  return crc32(0, bytes.data(), bytes.size());
}

}  // namespace geomopt::io::detail
