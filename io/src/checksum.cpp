// CRC-32 by folding with carry-less multiplication (Intel, "Fast CRC Computation for Generic Polynomials Using
// PCLMULQDQ Instruction", 2009): four 512-bit lanes of VPCLMULQDQ where AVX-512 has it, four 128-bit PCLMULQDQ lanes
// otherwise, and a slicing-by-8 table for the tail and for processors without either. A fold by d bits multiplies
// the low and high halves of a 128-bit lane by x^(d+32) and x^(d-32) modulo the polynomial (bit-reflected, 33 bits).
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

#define GEOMOPT_WIDE __attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.1")))
GEOMOPT_WIDE inline __m512i load512(const unsigned char* q) { return _mm512_loadu_si512(static_cast<const void*>(q)); }
GEOMOPT_WIDE inline __m512i fold512(__m512i x, __m512i k, __m512i next) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00), _mm512_clmulepi64_epi128(x, k, 0x11), next,
                                   0x96);  // a ^ b ^ c
}

// The same folding four 512-bit registers at a time (VPCLMULQDQ): each 128-bit lane folds by 256 bytes, then the four
// registers fold into one by 64 bytes and its four lanes into one by 16. n >= 256.
GEOMOPT_WIDE std::uint32_t wide_update(std::uint32_t reg, const unsigned char* p, std::size_t n) noexcept {
  // x^(2048+32) and x^(2048-32) modulo the polynomial, reflected: a fold by 256 bytes; then by 64 bytes.
  const long long h256 = 0x1322d1430LL, l256 = 0x11542778aLL, h64 = 0x1c6e41596LL, l64 = 0x154442bd4LL;
  const __m512i k256 = _mm512_set_epi64(h256, l256, h256, l256, h256, l256, h256, l256);
  const __m512i k64 = _mm512_set_epi64(h64, l64, h64, l64, h64, l64, h64, l64);
  __m512i z0 = _mm512_xor_si512(load512(p), _mm512_set_epi64(0, 0, 0, 0, 0, 0, 0, static_cast<long long>(reg)));
  __m512i z1 = load512(p + 64), z2 = load512(p + 128), z3 = load512(p + 192);
  p += 256;
  n -= 256;
  while (n >= 256) {
    z0 = fold512(z0, k256, load512(p));
    z1 = fold512(z1, k256, load512(p + 64));
    z2 = fold512(z2, k256, load512(p + 128));
    z3 = fold512(z3, k256, load512(p + 192));
    p += 256;
    n -= 256;
  }
  z1 = fold512(z0, k64, z1);
  z2 = fold512(z1, k64, z2);
  z3 = fold512(z2, k64, z3);
  const __m128i k1 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);
  unsigned char lanes[64];
  _mm512_storeu_si512(static_cast<void*>(lanes), z3);
  auto lane = [&](int i) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(lanes + 16 * i)); };
  __m128i x = lane(0);
  x = fold(x, k1, lane(1));
  x = fold(x, k1, lane(2));
  x = fold(x, k1, lane(3));
  while (n >= 16) {
    x = fold(x, k1, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    p += 16;
    n -= 16;
  }
  unsigned char rest[16];
  _mm_storeu_si128(reinterpret_cast<__m128i*>(rest), x);
  return table_update(table_update(0, rest, 16), p, n);
}

#undef GEOMOPT_WIDE

bool has_clmul() noexcept {
  static const bool has = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  return has;
}
bool has_wide() noexcept {
  static const bool has = has_clmul() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq");
  return has;
}
#endif

}  // namespace

std::uint32_t crc32_portable(std::uint32_t crc, const void* data, std::size_t bytes) noexcept {
  return ~table_update(~crc, static_cast<const unsigned char*>(data), bytes);
}

std::uint32_t crc32(std::uint32_t crc, const void* data, std::size_t bytes) noexcept {
#ifdef GEOMOPT_CRC_CLMUL
  if (bytes >= 256 && has_wide()) return ~wide_update(~crc, static_cast<const unsigned char*>(data), bytes);
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
