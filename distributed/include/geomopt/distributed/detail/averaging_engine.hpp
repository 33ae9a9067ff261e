// The compiled half of GradientAverager: buckets of the flat vector, the persistent messages that average them, and
// the signature check. It sees a tree only as a list of storage blocks (their shapes at construction, type-erased
// access to them at each call), so that every MPI call stays in libgeomopt_distributed while the walk of the user's
// tree, a template, stays in average.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "geomopt/distributed/options.hpp"

namespace geomopt::distributed {
class Communicator;
}

namespace geomopt::distributed::detail {

/// The scalar of the flat vector: the tree's promoted scalar (scalar_t).
enum class FlatScalar { float32, float64 };

/// One storage block, as the tree was at construction.
struct BlockShape {
  std::int64_t leaf = 0;  ///< index of its leaf in walk order
  std::int64_t rows = 1;
  std::int64_t cols = 1;
  int scalar_bytes = 0;  ///< sizeof the block's own scalar (4 float, 8 double)
};

/// What a tree is, for the signature and the messages of a mismatch: per leaf, its path and a description
/// ("float 64 x 32"); per block, its shape.
struct TreeShape {
  std::vector<std::string> paths;
  std::vector<std::string> descriptions;
  std::vector<BlockShape> blocks;
};

/// Access to one block of the tree being averaged, valid during one call: pack copies entries [begin, begin + count)
/// of the block, in column-major order, to dst (converted to the flat scalar); unpack copies them back.
struct BlockAccess {
  void* block = nullptr;
  void (*pack)(const void* block, void* dst, std::ptrdiff_t begin, std::ptrdiff_t count) = nullptr;
  void (*unpack)(void* block, const void* src, std::ptrdiff_t begin, std::ptrdiff_t count) = nullptr;
};

/// How a tree differs, at a call, from the shape it was built for: the first differing block, by leaf and block
/// index, and its rows and cols (-1 when the tree has no block there). leaf < 0: no difference.
struct LocalMismatch {
  std::int64_t leaf = -1;
  std::int64_t block = -1;
  std::int64_t rows = -1;
  std::int64_t cols = -1;
};

class AveragingEngine {
 public:
  /// Collective: duplicates the communicator, exchanges the trees' signatures (throws MismatchError on every rank
  /// when they differ, std::invalid_argument when the options differ or are invalid), allocates the buffers and
  /// creates the persistent requests.
  AveragingEngine(const Communicator& comm, const AverageOptions& options, FlatScalar scalar, TreeShape shape);
  ~AveragingEngine();
  AveragingEngine(AveragingEngine&&) noexcept;
  AveragingEngine& operator=(AveragingEngine&&) noexcept;

  /// Collective: the mean over ranks into every block, bucket by bucket. blocks holds one access per block of the
  /// shape when mismatch.leaf < 0; otherwise nothing is read or written, the messages still flow, and every rank
  /// throws MismatchError once they have.
  void run(const BlockAccess* blocks, const LocalMismatch& mismatch);

  const TreeShape& shape() const noexcept;
  std::size_t bucket_count() const noexcept;
  std::size_t bytes_sent_per_call() const noexcept;
  int rank() const noexcept;
  int size() const noexcept;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace geomopt::distributed::detail
