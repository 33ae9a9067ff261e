// Turns a parameter tree into GroupView: one walk over all leaves (trainable and buffers), recording each storage
// block's address, scalar type, shape and memory order, and each tied path with the path it repeats. This is the
// only code instantiated per tree type; everything else is compiled once in the io library.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "geomopt/io/detail/view.hpp"
#include "geomopt/io/error.hpp"
#include "geomopt/ptree.hpp"

namespace geomopt::io::detail {

template <class S>
constexpr Dtype dtype_of() {
  if constexpr (std::is_same_v<S, float>)
    return Dtype::f32;
  else if constexpr (std::is_same_v<S, double>)
    return Dtype::f64;
  else if constexpr (std::is_same_v<S, bool>)
    return Dtype::boolean;
  else if constexpr (std::is_integral_v<S> && std::is_signed_v<S> && sizeof(S) == 1)
    return Dtype::i8;
  else if constexpr (std::is_integral_v<S> && std::is_signed_v<S> && sizeof(S) == 2)
    return Dtype::i16;
  else if constexpr (std::is_integral_v<S> && std::is_signed_v<S> && sizeof(S) == 4)
    return Dtype::i32;
  else if constexpr (std::is_integral_v<S> && std::is_signed_v<S> && sizeof(S) == 8)
    return Dtype::i64;
  else if constexpr (std::is_integral_v<S> && sizeof(S) == 1)
    return Dtype::u8;
  else if constexpr (std::is_integral_v<S> && sizeof(S) == 2)
    return Dtype::u16;
  else if constexpr (std::is_integral_v<S> && sizeof(S) == 4)
    return Dtype::u32;
  else if constexpr (std::is_integral_v<S> && sizeof(S) == 8)
    return Dtype::u64;
  else
    static_assert(ptree::detail::always_false<S>,
                  "geomopt::io saves float, double, integer and bool storage only; cast a tree of long double or "
                  "dual numbers (ptree::cast<double>) before saving it");
}

[[noreturn]] void throw_not_contiguous(const std::string& path);  // compiled once

template <class B>
BlockView block_view(const B& b, const std::string& path) {
  BlockView v;
  if constexpr (ptree::detail::any_scalar<B>) {
    v.data = const_cast<B*>(&b);
    v.dtype = dtype_of<B>();
  } else {
    using S = typename B::Scalar;
    v.data = const_cast<S*>(b.data());
    v.dtype = dtype_of<std::remove_cv_t<S>>();
    v.rows = b.rows();
    v.cols = b.cols();
    v.rank = B::ColsAtCompileTime == 1 ? 1 : 2;
    v.row_major = bool(B::IsRowMajor);
    // The library reads and writes a block as one dense array.
    const bool dense = b.size() <= 1 || (b.innerStride() == 1 &&
                                         (v.rank == 1 || b.outerStride() == (v.row_major ? b.cols() : b.rows())));
    if (!dense) throw_not_contiguous(path);
  }
  return v;
}

template <class L>
std::vector<std::pair<std::string, std::int64_t>> leaf_metadata(const L& leaf) {
  std::vector<std::pair<std::string, std::int64_t>> m;
  if constexpr (requires {
                  { leaf.N() } -> std::convertible_to<std::int64_t>;
                })
    m.emplace_back("N", static_cast<std::int64_t>(leaf.N()));
  if constexpr (requires {
                  { leaf.n() } -> std::convertible_to<std::int64_t>;
                })
    m.emplace_back("n", static_cast<std::int64_t>(leaf.n()));
  return m;
}

/// What is wrong with a manifold point read from a file: a copy of the prototype filled with the file's blocks
/// (row-major, the leaf's scalar types), measured by the manifold's own check() (for a Stiefel point
/// ||Y^T Y - I||_F) against sqrt(epsilon) of its scalar times sqrt(n) (n its columns): rounding of a saved point is
/// orders of magnitude below that, a damaged or foreign one far above it.
template <class L>
std::string point_problem(const L& prototype, const std::vector<const void*>& blocks) {
  L x = prototype;
  std::size_t i = 0;
  ptree::detail::for_each_block(
      [&](auto& b) {
        using B = std::remove_cvref_t<decltype(b)>;
        const void* src = blocks.at(i++);
        if constexpr (ptree::detail::any_scalar<B>) {
          std::memcpy(&b, src, sizeof(B));
        } else {
          using S = std::remove_cv_t<typename B::Scalar>;
          const S* s = static_cast<const S*>(src);
          for (Eigen::Index r = 0; r < b.rows(); ++r)
            for (Eigen::Index c = 0; c < b.cols(); ++c) b(r, c) = s[r * b.cols() + c];
        }
      },
      x);
  const auto defect = check(x);
  using T = std::remove_cvref_t<decltype(defect)>;
  double columns = 1;
  if constexpr (requires { x.n(); }) columns = std::max<double>(1, static_cast<double>(x.n()));
  const double tolerance = std::sqrt(static_cast<double>(std::numeric_limits<T>::epsilon())) * std::sqrt(columns);
  const double d = static_cast<double>(defect);
  if (d <= tolerance) return "";
  char text[160];
  std::snprintf(text, sizeof text, "the point is off its manifold: its defect (check()) is %.3g, the tolerance %.3g", d,
                tolerance);
  return text;
}

inline std::vector<std::string> segments_of(const ptree::Path& path) {
  std::vector<std::string> s;
  s.reserve(path.size());
  for (const auto& seg : path) {
    if (seg.kind == ptree::Path::Segment::Kind::index)
      s.push_back(std::to_string(seg.index));
    else
      s.emplace_back(seg.name);
  }
  return s;
}

struct Describer {
  static constexpr bool kPaths = true;
  static constexpr bool kBufferHook = true;

  GroupView* out;
  std::unordered_map<const void*, std::pair<std::string, std::vector<std::string>>> first;

  template <class L>
  void add(const ptree::Path& path, const L& leaf, bool trainable) {
    LeafView v;
    v.path = path.str();
    v.segments = segments_of(path);
    v.trainable = trainable;
    // A protocol leaf is a group of blocks with its type, unless it says it is a plain array (ptree_plain_leaf: one
    // block, saved as the dataset an Eigen leaf of that shape would be, e.g. ptree::BorrowedArray).
    if constexpr (ptree::detail::kind_v<L> == ptree::detail::Kind::protocol_leaf &&
                  !requires { ptree_plain_leaf(leaf); }) {
      v.structured = true;
      v.type = ptree::detail::leaf_type_name(leaf);
      v.metadata = leaf_metadata(leaf);
      // A manifold point (its type has a check() found by argument-dependent lookup) is checked at load.
      if constexpr (requires { static_cast<double>(check(leaf)); })
        v.validate = [&leaf](const std::vector<const void*>& blocks) { return point_problem(leaf, blocks); };
    }
    ptree::detail::for_each_block([&](const auto& b) { v.blocks.push_back(block_view(b, v.path)); }, leaf);
    out->leaves.push_back(std::move(v));
  }
  template <class L>
  void leaf(const ptree::Path& path, const L& l) {
    add(path, l, true);
  }
  template <class L>
  void buffer(const ptree::Path& path, const L& l) {
    add(path, l, false);
  }
  template <class Ids, class N>
  void on_shared(const ptree::Path& path, const Ids& ids, const N& node) {
    if (!node) return;
    if (ids[0] == ptree::detail::kNotTied) {
      first.emplace(node.get(), std::make_pair(path.str(), segments_of(path)));
    } else {
      const auto& target = first.at(node.get());
      out->aliases.push_back({path.str(), segments_of(path), target.first, target.second});
    }
  }
};

/// The view of a tree in `group`. The pointers are writable when the tree is (load); save only reads them.
template <class Tree>
GroupView describe(const Tree& tree, std::string group) {
  GroupView g;
  g.group = std::move(group);
  if constexpr (ptree::tree<Tree>) {
    Describer d{&g, {}};
    ptree::detail::walk<ptree::all_t>(d, tree);
  } else {
    ptree::detail::not_a_tree<Tree>();
  }
  return g;
}

}  // namespace geomopt::io::detail
