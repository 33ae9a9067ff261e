// geomopt::StructureError: trees that were meant to have one shape do not.
//
// Thrown before any leaf is touched; what() names the first differing path and what each tree holds there,
// e.g. "layers.2.bias: 64 rows in tree 0, 32 in tree 1".
#pragma once

#include <stdexcept>
#include <string>

namespace geomopt {

class StructureError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

}  // namespace geomopt
