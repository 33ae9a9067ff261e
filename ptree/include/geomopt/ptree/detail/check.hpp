// The structure check run before every multi-tree walk: trees 1... must have tree 0's shape.
//
// Shape means: sequence lengths, optional presence, map keys, variant alternatives, which shared nodes repeat
// which, and the rows and columns of every storage block (buffers included). The first difference throws
// StructureError naming its path; nothing is modified, since the check runs before the walk proper.
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

template <class... Roots>
struct ShapeCheck {
  static constexpr bool kPaths = true;
  static constexpr bool kAllTies = true;
  std::tuple<const Roots&...> roots;

  template <class... Sizes>
  void on_vector(const Path& path, std::size_t n0, Sizes... n) {
    std::size_t i = 1;
    ((n != n0 ? count_mismatch(path, " elements", n0, n, i) : void(), ++i), ...);
  }

  template <class... Present>
  void on_optional(const Path& path, bool p0, Present... p) {
    std::size_t i = 1;
    ((p != p0 ? presence_mismatch(path, p0, i) : void(), ++i), ...);
  }

  template <class... Index>
  void on_variant(const Path& path, std::size_t a0, Index... a) {
    std::size_t i = 1;
    ((a != a0 ? alternative_mismatch(path, a0, a, i) : void(), ++i), ...);
  }

  template <class M0, class... Ms>
  void on_map(const Path& path, const M0& m0, const Ms&... ms) {
    std::size_t i = 1;
    (compare_keys(path, m0, ms, i++), ...);
  }

  template <class M0, class M>
  static void compare_keys(const Path& path, const M0& m0, const M& m, std::size_t i) {
    auto a = m0.begin();
    auto b = m.begin();
    for (; a != m0.end() && b != m.end(); ++a, ++b)
      if (a->first != b->first) fail(path, "key \"" + a->first + "\"", "key \"" + b->first + "\"", i);
    if (m0.size() != m.size()) count_mismatch(path, " keys", m0.size(), m.size(), i);
  }

  template <class Ids, class... N>
  void on_shared(const Path& path, const Ids& ids, const N&... n) {
    const bool null0 = !first(n...);
    std::size_t i = 0;
    (((i != 0 && (!n) != null0) ? null_mismatch(path, null0, i) : void(), ++i), ...);
    if (null0) return;
    for (std::size_t t = 1; t < ids.size(); ++t)
      if (ids[t] != ids[0]) tie_mismatch(path, t, std::index_sequence_for<Roots...>{});
  }

  template <std::size_t... I>
  [[noreturn]] void tie_mismatch(const Path& path, std::size_t t, std::index_sequence<I...>) {
    const std::string p = path.str();
    std::string what_t;
    ((I == t ? (what_t = tie_description(std::get<I>(roots), p), 0) : 0), ...);
    fail(path, tie_description(std::get<0>(roots), p), what_t, t);
  }

  template <class L0, class... L>
  void leaf(const Path& path, const L0& l0, const L&... l) {
    if constexpr (sizeof...(L) > 0) {
      std::size_t i = 1;
      (compare_leaf(path, l0, l, i++), ...);
    }
  }

  template <class L0, class L>
  static void compare_leaf(const Path& path, const L0& l0, const L& l, std::size_t i) {
    auto&& b0 = blocks(l0);
    auto&& b = blocks(l);
    constexpr std::size_t nb = std::tuple_size_v<bare<decltype(b0)>>;
    static_assert(nb == std::tuple_size_v<bare<decltype(b)>>, "leaves of one position differ in storage blocks");
    [&]<std::size_t... B>(std::index_sequence<B...>) {
      (compare_block(path, nb > 1, B, std::get<B>(b0), std::get<B>(b), i), ...);
    }(std::make_index_sequence<nb>{});
  }

  template <class B0, class B>
  static void compare_block(const Path& path, bool several, std::size_t block, const B0& b0, const B& b,
                            std::size_t i) {
    const Eigen::Index r0 = block_rows(b0), r = block_rows(b), c0 = block_cols(b0), c = block_cols(b);
    if (r0 != r || c0 != c) dims_mismatch(path, several, block, r0, r, c0, c, i);
  }
};

// Throws StructureError unless every tree has the shape of the first. Not inlined: every walk of the same trees
// shares one copy.
template <class T0, class... Ts>
[[gnu::noinline]] void check_shapes(const T0& t0, const Ts&... ts) {
  if constexpr (sizeof...(Ts) > 0) {
    ShapeCheck<T0, Ts...> check{{t0, ts...}};
    Walker<all_t, ShapeCheck<T0, Ts...>, T0, Ts...> w(check, t0, ts...);
    w.node(t0, ts...);
  }
}

}  // namespace geomopt::ptree::detail
