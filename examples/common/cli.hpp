// Command-line values of the example programs: each parser throws std::invalid_argument naming the flag, what it
// expects and what it got, so a program can print the message with its usage and exit 2.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace geomopt::examples {

// A whole decimal integer of at least `min`.
inline long parse_integer(const std::string& flag, const char* text, long min) {
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < min)
    throw std::invalid_argument(flag + " expects an integer >= " + std::to_string(min) + ", got '" + text + "'");
  return value;
}

// A finite number of at least `min`.
inline double parse_real(const std::string& flag, const char* text, double min) {
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  if (end == text || *end != '\0' || !std::isfinite(value) || !(value >= min)) {
    char bound[32];
    std::snprintf(bound, sizeof bound, "%g", min);
    throw std::invalid_argument(flag + " expects a number >= " + bound + ", got '" + text + "'");
  }
  return value;
}

}  // namespace geomopt::examples
