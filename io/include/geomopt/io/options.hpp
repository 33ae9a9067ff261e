// Options of save and load, checkpoint metadata, and the report of a load.
//
// SaveOptions: where the tree goes in the file (group), gzip level (0 = none), whether an existing file may be
// replaced, and whether the file is flushed to disk before it replaces the target (durable).
// LoadOptions: strict (every missing or unexpected path is an error) or not, and whether float32 and float64 may be
// converted into each other. A LoadReport holds what a successful load found: loaded, missing and unexpected
// paths, the paths converted by a cast, differences a non-strict load let pass, and a checkpoint's metadata.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace geomopt::io {

struct SaveOptions {
  std::string group = "params";  ///< the group of the tree under the file's root ("a/b" nests)
  int compression = 0;           ///< gzip level 0 (none) to 9; chunked storage when above 0
  bool overwrite = true;         ///< replace an existing file; false throws Error when the target exists
  bool durable = true;           ///< fsync the new file and its directory before and after the rename

  /// Whether the options make sense; when not, *error says why.
  bool is_valid(std::string* error) const;
};

struct LoadOptions {
  std::string group = "params";
  /// Missing and unexpected paths are errors, and in load_checkpoint a hyperparameter or per-leaf option that
  /// differs, NaN or infinity in a parameter or the state, a negative second moment, a manifold point off its
  /// manifold, an absent step or format_version; otherwise they are reported (LoadReport), and the settings of the
  /// state in memory, not the file's, step.
  bool strict = true;
  bool cast = false;  ///< float32 <-> float64 (and integer widths) are converted instead of being an error
  /// Read the file's structure once in a child process (`geomopt-inspect --check`, or a fork() where the checker
  /// cannot be found) before reading it here, so that a corrupt file which crashes the HDF5 library ends in an
  /// Error (HDF5 1.10 trusts parts of a file's structure). The verdict is the child's report over a pipe, so it
  /// holds as PID 1, with SIGCHLD ignored or reaped by the application. Costs a process start and a second pass over
  /// the metadata (about 50 ms of the child's CPU for 369 leaves); turn off only for files you trust
  /// (docs/file_format.md, "Damaged files").
  bool isolate = true;
  /// How long the isolated check may take, in seconds: positive, infinity for no limit (NaN, zero or a negative
  /// value makes the load throw Error naming it). HDF5 1.10 loops forever on some corrupt files; a check that
  /// has not finished by then is killed and the load throws Error, the tree untouched. A walk over a file's structure
  /// takes milliseconds (about 50 ms for 369 leaves, the process start included); raise this for trusted files with
  /// very many chunked datasets, whose data the check also reads.
  double isolate_timeout = 60;
  /// Check every dataset's CRC-32 (its `crc32` attribute) and the checksum of /optimizer's and /metadata's attributes
  /// where the file has them, before anything in the tree changes. A file without checksums (another tool's) loads
  /// unchecked. Costs one more pass over the data, from the page cache (docs/file_format.md, "Checksums").
  bool verify_checksums = true;

  bool is_valid(std::string* error) const;
};

/// A user attribute of a checkpoint: an integer, a real number or a string.
using Attribute = std::variant<std::int64_t, double, std::string>;

struct Metadata {
  /// The training step recorded with the checkpoint; save_checkpoint records the optimizer's step count when unset.
  std::optional<std::int64_t> step = std::nullopt;
  std::map<std::string, Attribute> attributes{};  ///< epoch, learning rate schedule, git revision, ...
};

struct LoadReport {
  std::vector<std::string> loaded{};   ///< leaves of the tree (and of the moving average) read, by dotted path
  std::vector<std::string> state{};    ///< load_checkpoint: the optimizer's state arrays read ("optimizer:w.exp_avg")
  std::vector<std::string> missing{};  ///< in the tree, not in the file (left as they were)
  std::vector<std::string> unexpected{};   ///< in the file, not in the tree (ignored)
  std::vector<std::string> cast{};         ///< leaves whose scalar type was converted
  /// What a non-strict load let pass (hyperparameters, per-leaf options, ties), and in any load what it could not
  /// compare (per-leaf options of a checkpoint written before they were recorded).
  std::vector<std::string> differences{};
  Metadata metadata{};                     ///< load_checkpoint: the checkpoint's step and attributes

  /// True when every leaf of the tree was loaded and nothing in the file was left over.
  bool complete() const noexcept { return missing.empty() && unexpected.empty(); }
  /// One line: "loaded 12 leaves; 1 missing, 0 unexpected" ("loaded 2 leaves and 4 state arrays; ..." for a
  /// checkpoint).
  std::string brief_report() const;
  /// Every path of every list, one per line.
  std::string full_report() const;
};

}  // namespace geomopt::io
