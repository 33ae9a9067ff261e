// The rows of a FullReport (the solvers' Summary, the derivative checks' DerivativeCheck): a name padded to 32
// columns, then its value; numbers in %.6e. One layout, so that every report of the library reads alike and a script
// can split a row at the first run of two spaces.
#pragma once

#include <cstdio>
#include <string>

namespace geomopt::detail {

/// Appends "name<padding> value\n" to out.
struct ReportRows {
  std::string& out;
  void operator()(const char* name, const std::string& value) const {
    char b[512];
    std::snprintf(b, sizeof b, "%-32s %s\n", name, value.c_str());
    out += b;
  }
};

/// v in the reports' number format, %.6e.
inline std::string report_number(double v) {
  char s[32];
  std::snprintf(s, sizeof s, "%.6e", v);
  return s;
}

}  // namespace geomopt::detail
