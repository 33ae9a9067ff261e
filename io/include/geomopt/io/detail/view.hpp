// The flat, type-erased description of a tree that the templates hand to the compiled library: one LeafView per
// leaf (path, segments, storage blocks with scalar type, shape and memory order, structured type and metadata,
// trainable or buffer) and one AliasView per tied path. A view holds pointers into the tree: it is valid while the
// tree is alive and unmoved, and the library writes through them only after a load has checked everything.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "geomopt/io/options.hpp"

namespace geomopt::io::detail {

enum class Dtype : std::uint8_t { f32, f64, i8, u8, i16, u16, i32, u32, i64, u64, boolean };

/// "float32", "int64", "bool", ...
const char* dtype_name(Dtype d) noexcept;
std::size_t dtype_size(Dtype d) noexcept;

struct BlockView {
  void* data = nullptr;
  Dtype dtype = Dtype::f64;
  int rank = 0;  ///< 0 scalar, 1 vector (rows), 2 matrix (rows, cols)
  std::int64_t rows = 1, cols = 1;
  bool row_major = false;  ///< memory order of a rank-2 block; the file is always row-major
};

struct LeafView {
  std::string path;                   ///< dotted
  std::vector<std::string> segments;  ///< one HDF5 link name per segment
  bool trainable = true;              ///< false: a buffer
  /// A parameter the checkpoint's optimizer does not step (LeafOptions::frozen): saved with trainable = false and
  /// frozen = true; loaded and checked like any parameter.
  bool frozen = false;
  bool structured = false;  ///< a group of blocks with a type attribute, not a dataset
  std::string type;         ///< structured: the leaf's type name ("SymmetricMatrix")
  std::vector<std::pair<std::string, std::int64_t>> metadata;  ///< structured: n, N, ...
  std::vector<BlockView> blocks;
  bool nonnegative = false;  ///< optimizer state: a second moment (a load refuses negative numbers)
  /// A manifold point: given its blocks as the file holds them (row-major, in the tree's scalar types), what is wrong
  /// with it ("" when it lies on its manifold within the tolerance of its scalar type).
  std::function<std::string(const std::vector<const void*>&)> validate;
};

struct AliasView {
  std::string path;  ///< the repeated (tied) path
  std::vector<std::string> segments;
  std::string target;  ///< the first path of the same node
  std::vector<std::string> target_segments;
};

/// One group of the file: a tree, an optimizer's slots, or attributes only.
struct GroupView {
  std::string group;  ///< "params", "optimizer", "ema", "metadata"
  std::vector<LeafView> leaves;
  std::vector<AliasView> aliases;
  /// Saved as the group's attributes. On load, `required` ones must be equal (always an error), the others must be
  /// equal in a strict load and are reported as differences otherwise. An attribute of one leaf (a checkpoint's
  /// per-leaf options) is named leaf_attribute(path, name) and follows the same rule; those of the file that the
  /// view lacks, for the view's leaves, differ too; a file with none of them predates them and is not compared.
  std::vector<std::pair<std::string, Attribute>> attributes;
  std::vector<std::string> required;
  /// On load, attributes that must be integers from 0 to the bound (a checkpoint's step count): a value of another
  /// type or out of range is always an error; an absent one is an error in a strict load and a difference otherwise.
  std::vector<std::pair<std::string, std::int64_t>> counters;
  bool has_tree = true;  ///< false: attributes only (no leaves are expected or enumerated)
  bool state = false;    ///< optimizer state: its arrays are neither parameters nor buffers (no trainable attribute)
  /// A checkpoint's group: a load checks the numbers (finite parameters and state, nonnegative second moments,
  /// manifold points on their manifold). A plain tree may be anything shaped like parameters (a gradient), so not.
  bool check_values = false;
  /// A checkpoint's parameters: manifold points must lie on their manifold (a moving average of points need not).
  bool check_points = false;
};

/// The name of the attribute `name` of leaf `path` among a group's attributes: "<path>:<name>". The group's own
/// attributes have no ':', and `name` has none, so the last ':' splits the two.
inline std::string leaf_attribute(const std::string& path, std::string_view name) {
  return path + ":" + std::string(name);
}

/// The name of a leaf's own step count among a checkpoint's per-leaf attributes ("<path>:step"): state, read back
/// and not compared like the options.
inline constexpr std::string_view kLeafStep = "step";
inline bool is_leaf_step(std::string_view name) {
  const auto colon = name.rfind(':');
  return colon != std::string_view::npos && name.substr(colon + 1) == kLeafStep;
}

/// The attributes of each group read, in the order of the views.
using GroupAttributes = std::vector<std::vector<std::pair<std::string, Attribute>>>;

/// Writes the groups atomically to filename (temporary file, flush, rename). Throws Error.
void write_file(const std::string& filename, const std::vector<GroupView>& groups, const SaveOptions& options,
                const char* what);

/// Checks the file against the views and, when everything matches, writes its data through them. Throws Error
/// (with nothing written) otherwise. `attributes` receives every attribute of each group.
LoadReport read_file(const std::string& filename, const std::vector<GroupView>& groups, const LoadOptions& options,
                     GroupAttributes* attributes, const char* what);

}  // namespace geomopt::io::detail
