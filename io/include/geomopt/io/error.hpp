// geomopt::io::Error: a file could not be saved or loaded as asked; what() lists every problem, each with its path.
//
// A load collects every problem it finds (missing and unexpected paths, shape, scalar type, structured type,
// metadata and tie mismatches, checksum mismatches, numbers a checkpoint may not hold, an unreadable file) before it
// throws, and a tree it throws for is unchanged (but
// for an operating-system read error after every check, see docs/file_format.md).
// Each Problem names its path in the tree ("layers.0.weight"), or the file itself for a file-level problem.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace geomopt::io {

enum class ProblemKind {
  file,        ///< the file cannot be opened, read, written or renamed, or is not HDF5
  missing,     ///< in the tree, not in the file
  unexpected,  ///< in the file, not in the tree
  shape,       ///< dimensions differ
  dtype,       ///< the scalar type differs (float32 against float64, ...) and no cast was asked for
  type,        ///< a structured leaf's type differs, or a leaf meets a group of branches
  metadata,    ///< a structured leaf's metadata (n, N, ...) or an optimizer's kind or hyperparameters differ
  tie,         ///< a tied path is not a link to the same object in the file
  checksum,    ///< the data or attributes differ from what was written (their CRC-32 does not match)
  value,       ///< a number the file's meaning forbids (NaN in a strict load, a negative second moment, ...)
};

/// "missing", "unexpected", "shape", ...: the word every message of that kind carries.
const char* kind_name(ProblemKind kind) noexcept;

struct Problem {
  ProblemKind kind = ProblemKind::file;
  std::string path;     ///< dotted path in the tree ("" for the file as a whole)
  std::string message;  ///< what was found against what was expected
};

class Error : public std::runtime_error {
 public:
  /// `context` says what was attempted ("load(\"run.h5\")").
  Error(const std::string& context, std::vector<Problem> problems);
  ~Error() override;
  Error(const Error&) = default;
  Error& operator=(const Error&) = default;

  const std::vector<Problem>& problems() const noexcept { return problems_; }
  /// Whether some problem is of this kind at this path.
  bool has(ProblemKind kind, const std::string& path) const noexcept;

 private:
  std::vector<Problem> problems_;
};

}  // namespace geomopt::io
