// The checks that every rank holds the same tree: at the construction of a distributed operation (with the setting
// of the one option its messages depend on; collective), and the error of a call at which one rank's tree differs
// from the one the operation was built with.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>

#include "geomopt/distributed/detail/averaging_engine.hpp"
#include "wait.hpp"

namespace geomopt::distributed::detail {

/// The operation and its message-shaping option, as this rank has it.
struct SharedSetting {
  const char* who;      ///< the operation, for messages ("GradientAverager")
  const char* options;  ///< its options struct ("AverageOptions")
  const char* field;    ///< the field every rank must set alike ("bucket_bytes")
  std::uint64_t value;  ///< this rank's value of that field
  bool valid;           ///< whether this rank's options are valid
  std::string invalid;  ///< why not, when they are not
};

/// Exchanges every rank's tree signature (entry count, leaf count, a hash of its paths, shapes and scalars, the flat
/// scalar) and setting. Throws on every rank, with the same message: std::invalid_argument when a rank's options are
/// invalid or its value differs from rank 0's; MismatchError when a rank's tree differs from rank 0's, naming the
/// lowest differing rank, the first differing path and what each side has there. Each of its collectives is
/// non-blocking, waited for within the link's timeout (TimeoutError).
void check_same_tree(const Link& link, const TreeShape& shape, std::int64_t entries, FlatScalar scalar,
                     const SharedSetting& setting);

/// Words of the status message each rank sends with a call's first messages: its LocalMismatch (leaf, block, rows,
/// cols); leaf < 0 when its tree matched.
inline constexpr int kStatusWords = 4;

/// Throws MismatchError for the lowest rank whose status (status_in: P x kStatusWords, rank order) reports a
/// mismatch, naming the rank, the path and the shapes: "<who>: rank q's tree differs from the one <built> was built
/// with, at <path> ...; every rank's tree is unchanged".
[[noreturn]] void throw_status_mismatch(const TreeShape& shape, const std::int64_t* status_in, int P,
                                        const std::string& who, const std::string& built);

}  // namespace geomopt::distributed::detail
