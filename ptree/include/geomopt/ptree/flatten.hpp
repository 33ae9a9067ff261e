// Flattening: a tree's trainable storage as one vector, and back.
//
// Order: walk order; column-major inside a block; blocks in the order free_parameters returns them. Buffers are
// never flattened; a tied node is flattened once, at its first path.
//
//   Layout l = layout(tree);           per trainable leaf: path, offset, size, dims; l.size() in total
//   auto v = flatten(tree);            Eigen vector of scalar_t<Tree>; flatten<double>(tree) for another scalar
//   flatten_into(v, tree);             into an existing vector, no allocation
//   auto t = unflatten(prototype, v);  rebind_t<Tree, scalar of v>: shapes, buffers and ties from the prototype
//   unflatten_into(tree, v);           in place, no allocation
// A vector of the wrong length throws StructureError, before anything is written.
#pragma once

#include <Eigen/Core>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "geomopt/ptree/build.hpp"
#include "geomopt/ptree/count.hpp"
#include "geomopt/ptree/detail/blocks.hpp"
#include "geomopt/ptree/walk.hpp"

namespace geomopt::ptree {

struct LeafLayout {
  std::string path;
  Eigen::Index offset = 0;  // first entry in the flat vector
  Eigen::Index size = 0;    // free parameters
  std::vector<Eigen::Index> dims;  // {rows, cols}, {rows} for a column vector, {} for a scalar
  friend bool operator==(const LeafLayout&, const LeafLayout&) = default;
};

struct Layout {
  std::vector<LeafLayout> leaves;

  /// Free parameters in all.
  Eigen::Index size() const noexcept { return leaves.empty() ? 0 : leaves.back().offset + leaves.back().size; }
  /// The leaf at `path`, or nullptr.
  const LeafLayout* find(std::string_view path) const noexcept {
    for (const auto& l : leaves)
      if (l.path == path) return &l;
    return nullptr;
  }
  friend bool operator==(const Layout&, const Layout&) = default;
};

namespace detail {

template <class B>
std::vector<Eigen::Index> block_dims(const B& b) {
  if constexpr (any_scalar<B>) {
    return {};
  } else if constexpr (B::ColsAtCompileTime == 1) {
    return {b.rows()};
  } else {
    return {b.rows(), b.cols()};
  }
}

template <class L>
std::vector<Eigen::Index> leaf_dims(const L& leaf) {
  auto&& b = blocks(leaf);
  if constexpr (std::tuple_size_v<bare<decltype(b)>> == 1) {
    return block_dims(std::get<0>(b));
  } else {
    Eigen::Index n = 0;
    for_each_block([&](const auto& block) { n += block_size(block); }, leaf);
    return {n};
  }
}

struct LayoutBuilder {
  static constexpr bool kPaths = true;
  Layout layout;
  Eigen::Index offset = 0;
  template <class L>
  void leaf(const Path& path, const L& leaf) {
    Eigen::Index n = 0;
    for_each_block([&](const auto& b) { n += block_size(b); }, leaf);
    layout.leaves.push_back({path.str(), offset, n, leaf_dims(leaf)});
    offset += n;
  }
};

template <class V>
void require_flat(const V& v, Eigen::Index expected, const char* what) {
  static_assert(bool(bare<V>::IsVectorAtCompileTime) && bool(bare<V>::Flags & Eigen::DirectAccessBit),
                "flat vectors are Eigen vectors with direct access (VectorXd, Map, Ref, a segment)");
  if (v.size() != expected)
    throw StructureError(std::string(what) + ": the vector has " + std::to_string(v.size()) + " entries, the tree " +
                         std::to_string(expected) + " free parameters");
  if (v.size() > 1 && v.innerStride() != 1)
    throw StructureError(std::string(what) + ": the vector must be contiguous (inner stride 1)");
}

template <class S>
struct Packer {
  S* cursor;
  template <class L>
  void leaf(const L& leaf) {
    for_each_block(
        [this](const auto& b) {
          pack(cursor, b);
          cursor += block_size(b);
        },
        leaf);
  }
};

template <class S>
struct Unpacker {
  const S* cursor;
  template <class L>
  void leaf(L& leaf) {
    for_each_block(
        [this](auto& b) {
          unpack(b, cursor);
          cursor += block_size(b);
        },
        leaf);
  }
};

}  // namespace detail

template <class Tree>
Layout layout(const Tree& tree) {
  detail::LayoutBuilder b;
  detail::walk<params_t>(b, tree);
  return std::move(b.layout);
}

template <class V, class Tree>
void flatten_into(V&& v, const Tree& tree) {
  detail::require_flat(v, count(tree), "flatten_into");
  using S = typename detail::bare<V>::Scalar;
  detail::Packer<S> packer{v.data()};
  detail::walk<params_t>(packer, tree);
}

template <class U = void, class Tree>
auto flatten(const Tree& tree) {
  if constexpr (!ptree::tree<Tree>) {  // qualified: the parameter `tree` hides the concept
    detail::not_a_tree<Tree>();
    return detail::flat_vector<double>();
  } else {
    using S = std::conditional_t<std::is_void_v<U>, scalar_t<Tree>, U>;
    static_assert(!std::is_void_v<S>, "flatten: the tree has no trainable storage; name a scalar, flatten<double>");
    detail::flat_vector<S> v(count(tree));
    flatten_into(v, tree);
    return v;
  }
}

template <class Tree, class V>
void unflatten_into(Tree& tree, const V& v) {
  detail::require_flat(v, count(tree), "unflatten_into");
  using S = typename detail::bare<V>::Scalar;
  detail::Unpacker<S> unpacker{v.data()};
  detail::walk<params_t>(unpacker, tree);
}

template <class Tree, class V>
rebind_t<Tree, typename detail::bare<V>::Scalar> unflatten(const Tree& prototype, const V& v) {
  detail::require_flat(v, count(prototype), "unflatten");
  auto out = detail::convert<rebind_t<Tree, typename detail::bare<V>::Scalar>>(prototype);
  unflatten_into(out, v);
  return out;
}

}  // namespace geomopt::ptree
