// CRC-32 of a dataset's bytes: the checksum a save writes beside every dataset and a load checks (docs/file_format.md,
// "Checksums"). The polynomial and conventions of zlib's crc32 and Python's zlib.crc32 (CRC-32/ISO-HDLC: reflected
// 0xEDB88320, initial and final value 0xFFFFFFFF), so any tool can verify a file with the standard library.
// Invariant: crc32(crc32(0, a), b) == crc32(0, a followed by b), whatever the split.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "geomopt/io/options.hpp"

namespace geomopt::io::detail {

/// The CRC-32 of `bytes` bytes at `data`, continuing from `crc` (0 to start). Uses carry-less multiplication
/// (PCLMULQDQ) when the processor has it, chosen at run time, and a table otherwise; both give the same value.
std::uint32_t crc32(std::uint32_t crc, const void* data, std::size_t bytes) noexcept;

/// The table-driven implementation alone, for tests that compare the two paths.
std::uint32_t crc32_portable(std::uint32_t crc, const void* data, std::size_t bytes) noexcept;

/// The name of the checksum attribute of every dataset a save writes: a 64-bit integer holding the CRC-32 of the
/// dataset's elements in row-major order, each as the little-endian bytes of the dataset's scalar type.
inline constexpr const char* kChecksumAttribute = "crc32";
/// The name of the checksum attribute of a group whose attributes a load returns (/optimizer, /metadata).
inline constexpr const char* kAttributesChecksumAttribute = "attributes_crc32";

/// The CRC-32 of a group's attributes, `kAttributesChecksumAttribute` itself excluded, in byte order of their names:
/// for each, its name, a 0 byte, then 'i' and the 8 little-endian bytes of an integer, 'f' and those of a double, or
/// 's', the string's bytes and a 0 byte. Integers of any width count as 64-bit, as a load reads them.
std::uint32_t attributes_crc32(std::vector<std::pair<std::string, Attribute>> attributes);

}  // namespace geomopt::io::detail
