// The structure check run before every multi-tree walk: trees 1... must have tree 0's shape.
//
// Shape means: sequence lengths, optional presence, map keys, variant alternatives, which shared nodes repeat
// which, and the rows and columns of every storage block (buffers included). The first difference throws
// StructureError naming its path; nothing is modified, since the check runs before the walk proper. A walk may leave
// the rows and columns of trainable leaves to its visitor (LeafShapes::by_visitor): an optimizer, whose frozen
// leaves may take an empty gradient, checks each leaf against what it expects there.
#pragma once

#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "geomopt/ptree/detail/walker.hpp"

namespace geomopt::ptree::detail {

// Collects (alias path, first path) for every repeated shared node of one tree.
struct AliasCollector {
  static constexpr bool kPaths = true;
  std::unordered_map<const void*, std::string> first_path;
  std::vector<std::pair<std::string, std::string>> aliases;

  template <class Ids, class N>
  void on_shared(const Path& path, const Ids& ids, const N& node) {
    if (!node) return;
    if (ids[0] == kNotTied) {
      first_path.emplace(node.get(), path.str());
    } else {
      aliases.emplace_back(path.str(), first_path.at(node.get()));
    }
  }
  template <class L>
  void leaf(const Path&, const L&) {}
};

template <class Tree>
std::vector<std::pair<std::string, std::string>> collect_aliases(const Tree& tree) {
  AliasCollector c;
  Walker<all_t, AliasCollector, Tree> w(c, tree);
  w.node(tree);
  return std::move(c.aliases);
}

template <class Tree>
std::string tie_description(const Tree& tree, const std::string& path) {
  for (const auto& [alias, target] : collect_aliases(tree))
    if (alias == path) return "tied to " + target;
  return "not tied";
}

// The messages, built out of line: they are the cold path of every walk.
[[noreturn]] inline void fail(const Path& path, const std::string& what0, const std::string& what_i, std::size_t i) {
  throw StructureError(path.display() + ": " + what0 + " in tree 0, " + what_i + " in tree " + std::to_string(i));
}
[[noreturn, gnu::cold]] inline void count_mismatch(const Path& path, const char* unit, std::size_t n0, std::size_t n,
                                                   std::size_t i) {
  fail(path, std::to_string(n0) + unit, std::to_string(n), i);
}
[[noreturn, gnu::cold]] inline void presence_mismatch(const Path& path, bool present0, std::size_t i) {
  fail(path, present0 ? "present" : "absent", present0 ? "absent" : "present", i);
}
[[noreturn, gnu::cold]] inline void null_mismatch(const Path& path, bool null0, std::size_t i) {
  fail(path, null0 ? "null" : "non-null", null0 ? "non-null" : "null", i);
}
[[noreturn, gnu::cold]] inline void alternative_mismatch(const Path& path, std::size_t a0, std::size_t a,
                                                         std::size_t i) {
  fail(path, "alternative " + std::to_string(a0), "alternative " + std::to_string(a), i);
}
[[noreturn, gnu::cold]] inline void dims_mismatch(const Path& path, bool several, std::size_t block, Eigen::Index r0,
                                                  Eigen::Index r, Eigen::Index c0, Eigen::Index c, std::size_t i) {
  const std::string where = path.display() + (several ? " (block " + std::to_string(block) + ")" : "");
  const bool rows = r0 != r;
  throw StructureError(where + ": " + std::to_string(rows ? r0 : c0) + (rows ? " rows" : " cols") + " in tree 0, " +
                       std::to_string(rows ? r : c) + " in tree " + std::to_string(i));
}

// Who checks the rows and columns of the trainable leaves of trees 1... in a multi-tree walk.
enum class LeafShapes {
  checked,     ///< the structure check, like everything else
  by_visitor,  ///< the walk's visitor, leaf by leaf (buffers are still checked)
};

// Compares tree 0 with tree `index` (a run-time number, only for messages): one instantiation per pair of tree
// types, shared by the walks of every arity.
template <class T0, class T1, LeafShapes kLeaves = LeafShapes::checked>
struct ShapeCheck {
  static constexpr bool kPaths = true;
  static constexpr bool kAllTies = true;
  static constexpr bool kBufferHook = true;
  const T0& root0;
  const T1& root1;
  std::size_t index;

  void on_vector(const Path& path, std::size_t n0, std::size_t n1) {
    if (n0 != n1) count_mismatch(path, " elements", n0, n1, index);
  }
  void on_optional(const Path& path, bool present0, bool present1) {
    if (present0 != present1) presence_mismatch(path, present0, index);
  }
  void on_variant(const Path& path, std::size_t a0, std::size_t a1) {
    if (a0 != a1) alternative_mismatch(path, a0, a1, index);
  }
  template <class M0, class M1>
  void on_map(const Path& path, const M0& m0, const M1& m1) {
    auto a = m0.begin();
    auto b = m1.begin();
    for (; a != m0.end() && b != m1.end(); ++a, ++b)
      if (a->first != b->first) fail(path, "key \"" + a->first + "\"", "key \"" + b->first + "\"", index);
    if (m0.size() != m1.size()) count_mismatch(path, " keys", m0.size(), m1.size(), index);
  }
  template <class Ids, class N0, class N1>
  void on_shared(const Path& path, const Ids& ids, const N0& n0, const N1& n1) {
    if (!n0 != !n1) null_mismatch(path, !n0, index);
    if (n0 && ids[0] != ids[1]) {
      const std::string p = path.str();
      fail(path, tie_description(root0, p), tie_description(root1, p), index);
    }
  }
  template <class L0, class L1>
  void leaf(const Path& path, const L0& l0, const L1& l1) {
    if constexpr (kLeaves == LeafShapes::checked) compare_leaf(path, l0, l1);
  }
  template <class L0, class L1>
  void buffer(const Path& path, const L0& l0, const L1& l1) {
    compare_leaf(path, l0, l1);
  }
  template <class L0, class L1>
  void compare_leaf(const Path& path, const L0& l0, const L1& l1) {
    auto&& b0 = blocks(l0);
    auto&& b1 = blocks(l1);
    constexpr std::size_t nb = std::tuple_size_v<bare<decltype(b0)>>;
    static_assert(nb == std::tuple_size_v<bare<decltype(b1)>>, "leaves of one position differ in storage blocks");
    [&]<std::size_t... B>(std::index_sequence<B...>) {
      (compare_block(path, nb > 1, B, std::get<B>(b0), std::get<B>(b1)), ...);
    }(std::make_index_sequence<nb>{});
  }
  template <class B0, class B1>
  void compare_block(const Path& path, bool several, std::size_t block, const B0& b0, const B1& b1) {
    const Eigen::Index r0 = block_rows(b0), r1 = block_rows(b1), c0 = block_cols(b0), c1 = block_cols(b1);
    if (r0 != r1 || c0 != c1) dims_mismatch(path, several, block, r0, r1, c0, c1, index);
  }
};

// Throws StructureError unless `tree` (tree number `index` of a walk) has the shape of `tree0`. Not inlined: every
// walk over the same tree types shares one copy.
template <LeafShapes kLeaves, class T0, class T1>
[[gnu::noinline]] void check_shape(const T0& tree0, const T1& tree, std::size_t index) {
  ShapeCheck<T0, T1, kLeaves> check{tree0, tree, index};
  Walker<all_t, ShapeCheck<T0, T1, kLeaves>, T0, T1> w(check, tree0, tree);
  w.node(tree0, tree);
}

// Throws StructureError unless every tree has the shape of the first: tree 0 against each other tree in turn.
template <LeafShapes kLeaves = LeafShapes::checked, class T0, class... Ts>
void check_shapes(const T0& t0, const Ts&... ts) {
  std::size_t index = 1;
  (check_shape<kLeaves>(t0, ts, index++), ...);
}

}  // namespace geomopt::ptree::detail
