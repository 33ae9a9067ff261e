// Copying between Eigen's column-major storage and the file's row-major order. Invariant: for the rows x cols
// block, dst[i * ldd + j] = src[j * ld + i] bit for bit, for every element size the library stores (1, 2, 4 and
// 8 bytes). Tiles of 8 x 8 were measured fastest for the power-of-two strides of typical layers (larger tiles alias
// in L1); inside them 4 x 4 (float) and 2 x 2 (double) blocks move through SSE2 registers by shuffles alone, so NaN
// payloads and signalling NaNs are copied exactly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif

namespace geomopt::io::detail {

template <class T>
inline void transpose_scalar(T* dst, const T* src, std::int64_t i0, std::int64_t i1, std::int64_t j0, std::int64_t j1,
                             std::int64_t ldd, std::int64_t ld) {
  for (std::int64_t i = i0; i < i1; ++i)
    for (std::int64_t j = j0; j < j1; ++j) dst[i * ldd + j] = src[j * ld + i];
}

template <class T>
void transpose_tiles(T* dst, const T* src, std::int64_t rows, std::int64_t cols, std::int64_t ld, std::int64_t ldd) {
  constexpr std::int64_t kTile = 8;
  for (std::int64_t i0 = 0; i0 < rows; i0 += kTile) {
    const std::int64_t i1 = i0 + kTile < rows ? i0 + kTile : rows;
    for (std::int64_t j0 = 0; j0 < cols; j0 += kTile) {
      const std::int64_t j1 = j0 + kTile < cols ? j0 + kTile : cols;
#if defined(__SSE2__)
      if constexpr (sizeof(T) == 4) {
        const std::int64_t i4 = i0 + (i1 - i0) / 4 * 4, j4 = j0 + (j1 - j0) / 4 * 4;
        for (std::int64_t j = j0; j < j4; j += 4)
          for (std::int64_t i = i0; i < i4; i += 4) {
            const auto* s = reinterpret_cast<const float*>(src);
            auto* d = reinterpret_cast<float*>(dst);
            __m128 c0 = _mm_loadu_ps(s + (j + 0) * ld + i), c1 = _mm_loadu_ps(s + (j + 1) * ld + i);
            __m128 c2 = _mm_loadu_ps(s + (j + 2) * ld + i), c3 = _mm_loadu_ps(s + (j + 3) * ld + i);
            _MM_TRANSPOSE4_PS(c0, c1, c2, c3);
            _mm_storeu_ps(d + (i + 0) * ldd + j, c0);
            _mm_storeu_ps(d + (i + 1) * ldd + j, c1);
            _mm_storeu_ps(d + (i + 2) * ldd + j, c2);
            _mm_storeu_ps(d + (i + 3) * ldd + j, c3);
          }
        transpose_scalar(dst, src, i0, i4, j4, j1, ldd, ld);
        transpose_scalar(dst, src, i4, i1, j0, j1, ldd, ld);
        continue;
      }
      if constexpr (sizeof(T) == 8) {
        const std::int64_t i2 = i0 + (i1 - i0) / 2 * 2, j2 = j0 + (j1 - j0) / 2 * 2;
        for (std::int64_t i = i0; i < i2; i += 2)
          for (std::int64_t j = j0; j < j2; j += 2) {
            const auto* s = reinterpret_cast<const double*>(src);
            auto* d = reinterpret_cast<double*>(dst);
            const __m128d c0 = _mm_loadu_pd(s + j * ld + i), c1 = _mm_loadu_pd(s + (j + 1) * ld + i);
            _mm_storeu_pd(d + i * ldd + j, _mm_unpacklo_pd(c0, c1));
            _mm_storeu_pd(d + (i + 1) * ldd + j, _mm_unpackhi_pd(c0, c1));
          }
        transpose_scalar(dst, src, i0, i2, j2, j1, ldd, ld);
        transpose_scalar(dst, src, i2, i1, j0, j1, ldd, ld);
        continue;
      }
#endif
      transpose_scalar(dst, src, i0, i1, j0, j1, ldd, ld);
    }
  }
}

/// dst (row-major, rows x cols, leading dimension ldd >= cols; 0 means cols) from src (column-major, leading
/// dimension ld >= rows). To go from row-major to column-major, swap rows and cols, pass ld = the row-major
/// source's cols and ldd = the column-major destination's leading dimension.
inline void transpose(void* dst, const void* src, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                      std::size_t element, std::int64_t ldd = 0) {
  if (ldd == 0) ldd = cols;
  switch (element) {
    case 8:
      transpose_tiles(static_cast<std::uint64_t*>(dst), static_cast<const std::uint64_t*>(src), rows, cols, ld,
                      ldd);
      break;
    case 4:
      transpose_tiles(static_cast<std::uint32_t*>(dst), static_cast<const std::uint32_t*>(src), rows, cols, ld,
                      ldd);
      break;
    case 2:
      transpose_tiles(static_cast<std::uint16_t*>(dst), static_cast<const std::uint16_t*>(src), rows, cols, ld,
                      ldd);
      break;
    default:
      transpose_tiles(static_cast<std::uint8_t*>(dst), static_cast<const std::uint8_t*>(src), rows, cols, ld,
                      ldd);
      break;
  }
}

}  // namespace geomopt::io::detail
