// The walker: the one recursion every walk, check and report of ptree runs on.
//
// It descends one or more trees of one shape in lockstep (their shapes already checked), visits each selected
// leaf once, skips a tied node (std::shared_ptr) met before, and never allocates.
//
// Compile-time design: the children of a struct or tuple are recorded by one collector (children.hpp) and walked
// by a loop, so the per-leaf work and the structure check are compiled once per distinct child type, never once per
// child.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "geomopt/ptree/detail/children.hpp"
#include "geomopt/ptree/error.hpp"
#include "geomopt/ptree/path.hpp"
#include "geomopt/ptree/selection.hpp"
#include "geomopt/ptree/traits.hpp"

namespace geomopt::ptree {

namespace detail {

template <class T, class... Ts>
T& first(T& t, Ts&...) noexcept {
  return t;
}

// ---- ties -----------------------------------------------------------------------------------------------------

inline constexpr std::size_t kNotTied = static_cast<std::size_t>(-1);

// Scans a whole tree (entering repeated nodes too) for shared nodes, in walk order. Returns the ordinal of the first
// one pointing at `target`, or kNotTied when the node at address `stop` comes first. Used only past the inline
// record of TieLog, so the common case never re-walks.
template <class T>
bool scan_shared(const T& node, const void* target, const void* stop, std::size_t& ordinal, std::size_t& found);

template <class T>
bool scan_shared(const T& node, const void* target, const void* stop, std::size_t& ordinal, std::size_t& found);

struct ScanChild {
  const void* target;
  const void* stop;
  std::size_t* ordinal;
  std::size_t* found;
  template <class C>
  void operator()(const char*, const C& c) const {
    if (*found == kNotTied && !done) done = scan_shared(c, target, stop, *ordinal, *found);
  }
  mutable bool done = false;
};

template <class T>
bool scan_shared(const T& node, const void* target, const void* stop, std::size_t& ordinal, std::size_t& found) {
  constexpr Kind k = kind_v<T>;
  if constexpr (!has_shared<T>::value) {
    return false;
  } else if constexpr (k == Kind::struct_branch || k == Kind::external_branch || k == Kind::tuple) {
    bool done = false;
    for_each_child(
        [&](auto, const auto& child) {
          if (!done) done = scan_shared(child, target, stop, ordinal, found);
        },
        node);
    return done;
  } else if constexpr (k == Kind::vector || k == Kind::array) {
    for (const auto& e : node)
      if (scan_shared(e, target, stop, ordinal, found)) return true;
    return false;
  } else if constexpr (k == Kind::map) {
    for (const auto& [key, e] : node)
      if (scan_shared(e, target, stop, ordinal, found)) return true;
    return false;
  } else if constexpr (k == Kind::optional) {
    return node.has_value() && scan_shared(*node, target, stop, ordinal, found);
  } else if constexpr (k == Kind::variant) {
    return std::visit([&](const auto& e) { return scan_shared(e, target, stop, ordinal, found); }, node);
  } else if constexpr (k == Kind::shared) {
    if (static_cast<const void*>(&node) == stop) return true;
    if (!node) return false;
    if (static_cast<const void*>(node.get()) == target) {
      found = ordinal;
      return true;
    }
    ++ordinal;
    return scan_shared(*node, target, stop, ordinal, found);
  } else {
    return false;
  }
}

// Which shared nodes of one tree were met so far. The first kInline are remembered in place (no allocation);
// past that, an earlier occurrence is found by scanning the tree from its root.
template <class Root>
struct TieLog {
  static constexpr std::size_t kInline = 64;
  const Root* root = nullptr;
  std::array<const void*, kInline> seen{};
  std::size_t count = 0;

  // Records the shared node `node` (non-null) and returns an id of its first occurrence, or kNotTied if this is it.
  template <class P>
  std::size_t visit(const P& node) {
    const void* p = node.get();
    const std::size_t j = count++;
    const std::size_t inline_end = j < kInline ? j : kInline;
    for (std::size_t i = 0; i < inline_end; ++i)
      if (seen[i] == p) return i;
    if (j < kInline) {
      seen[j] = p;
      return kNotTied;
    }
    std::size_t ordinal = 0, found = kNotTied;
    scan_shared(*root, p, &node, ordinal, found);
    return found == kNotTied ? kNotTied : kInline + found;
  }
};

template <bool kOn, class... Roots>
struct Ties {
  explicit Ties(const Roots&...) {}
};
template <class... Roots>
struct Ties<true, Roots...> {
  explicit Ties(const Roots&... r) : logs{make(r)...} {}
  std::tuple<TieLog<Roots>...> logs;

 private:
  template <class R>
  static TieLog<R> make(const R& r) {
    TieLog<R> log;
    log.root = &r;
    return log;
  }
};

// ---- the walker -----------------------------------------------------------------------------------------------

// Visitor protocol (all members but leaf are optional and cost nothing when absent):
//   static constexpr bool kPaths;              track the Path (leaf and hooks then receive it first)
//   static constexpr bool kAllTies;            compute tie ids in every tree, not only in tree 0
//   leaf(leaves...)                            a selected trainable leaf
//   static constexpr bool kBufferHook;         deliver buffers' values to buffer(...) instead of leaf(...)
//   on_vector(sizes...), on_map(maps...), on_optional(present...), on_variant(indices...)
//   on_shared(nodes, ids...)                   before a shared node; ids are kNotTied or first-occurrence ids
template <class V>
concept wants_paths = requires { requires V::kPaths; };
template <class V>
concept wants_all_ties = requires { requires V::kAllTies; };
template <class V>
concept wants_buffer_hook = requires { requires V::kBufferHook; };

template <class Sel, class V, class... Roots>
class Walker {
 public:
  static constexpr bool kPaths = wants_paths<V>;
  static constexpr bool kTies = has_shared<bare<std::tuple_element_t<0, std::tuple<Roots...>>>>::value;

  Walker(V& visitor, const Roots&... roots) : visitor_(visitor), ties_(roots...) {}

  template <class... N>
  void node(N&... n) {
    using T = bare<decltype(first(n...))>;
    constexpr Kind k = kind_v<T>;
    if constexpr (k == Kind::struct_branch || k == Kind::external_branch || k == Kind::tuple) {
      fixed_children(n...);
    } else if constexpr (k == Kind::vector || k == Kind::array) {
      if constexpr (k == Kind::vector)
        hook([&](auto& v, const auto&... p) -> decltype(v.on_vector(p..., n.size()...)) {
          v.on_vector(p..., n.size()...);
        });
      const std::size_t size = first(n...).size();
      for (std::size_t i = 0; i < size; ++i) child(i, n[i]...);
    } else if constexpr (k == Kind::map) {
      hook([&](auto& v, const auto&... p) -> decltype(v.on_map(p..., n...)) { v.on_map(p..., n...); });
      map_children(first(n...).size(), n.begin()...);
    } else if constexpr (k == Kind::optional) {
      hook([&](auto& v, const auto&... p) -> decltype(v.on_optional(p..., n.has_value()...)) {
        v.on_optional(p..., n.has_value()...);
      });
      if (first(n...).has_value()) node(*n...);
    } else if constexpr (k == Kind::variant) {
      hook([&](auto& v, const auto&... p) -> decltype(v.on_variant(p..., n.index()...)) {
        v.on_variant(p..., n.index()...);
      });
      variant_children(std::make_index_sequence<std::variant_size_v<T>>{}, first(n...).index(), n...);
    } else if constexpr (k == Kind::shared) {
      shared_node(n...);
    } else if constexpr (k == Kind::buffer) {
      if constexpr (Sel::kBuffers) {
        if constexpr (wants_buffer_hook<V> && kPaths) visitor_.buffer(path_, n.value()...);
        else if constexpr (wants_buffer_hook<V>) visitor_.buffer(n.value()...);
        else if constexpr (kPaths) visitor_.leaf(path_, n.value()...);
        else visitor_.leaf(n.value()...);
      }
    } else if constexpr (is_leaf_v<T>) {
      if constexpr (Sel::kParams) {
        if constexpr (!tree<T>) not_a_tree<T>();  // an integer leaf outside a Buffer
        else if constexpr (kPaths) visitor_.leaf(path_, n...);
        else visitor_.leaf(n...);
      }
    } else {
      not_a_tree<T>();
    }
  }

 private:
  // The children of a struct, tuple or pair: a loop over their offsets (children.hpp), with the walk compiled once
  // per distinct row of child types. Kept flat, since every walk instantiates it.
  template <class... N>
  void fixed_children(N&... n) {
    using B = FixedBranch<N...>;
    if constexpr (B::size != 0) {
      const std::array<const std::ptrdiff_t*, sizeof...(N)> offsets = {
          child_layout(std::as_const(n)).offsets.data()...};
      [[maybe_unused]] const char* const* names = child_layout(std::as_const(first(n...))).names.data();
      for (std::size_t i = 0; i < B::size; ++i) {
        if constexpr (kPaths) {
          if constexpr (B::named) path_.push_field(names[i]);
          else path_.push_index(i);
        }
        if constexpr (B::Distinct::size == 1) {
          row(static_cast<typename B::Distinct::first*>(nullptr), offsets, i, std::index_sequence_for<N...>{}, n...);
        } else {
          dispatch_row(static_cast<typename B::Distinct*>(nullptr), B::ids[i], offsets, i, n...);
        }
        if constexpr (kPaths) path_.pop();
      }
    }
  }

  template <class... Rows, class Offsets, class... N>
  void dispatch_row(type_list<Rows...>*, std::size_t id, const Offsets& offsets, std::size_t i, N&... n) {
    // (One row is handled by the caller, without a dispatch.)
    if constexpr (sizeof...(Rows) <= 16) {
      [&]<std::size_t... R>(std::index_sequence<R...>) {
        ((id == R ? (row(static_cast<Rows*>(nullptr), offsets, i, std::index_sequence_for<N...>{}, n...), 0) : 0),
         ...);
      }(std::index_sequence_for<Rows...>{});
    } else {
      // Hundreds of distinct child types: a table, since a fold that wide nests too deep for some compilers.
      using Call = void (*)(Walker&, const Offsets&, std::size_t, N&...);
      static constexpr Call table[] = {&row_entry<Rows, Offsets, N...>...};
      table[id](*this, offsets, i, n...);
    }
  }

  template <class Row, class Offsets, class... N>
  static void row_entry(Walker& w, const Offsets& offsets, std::size_t i, N&... n) {
    w.row(static_cast<Row*>(nullptr), offsets, i, std::index_sequence_for<N...>{}, n...);
  }

  template <class... C, class Offsets, std::size_t... T, class... N>
  void row(type_list<C...>*, const Offsets& offsets, std::size_t i, std::index_sequence<T...>, N&... n) {
    node(child_at<C>(n, offsets[T][i])...);
  }

  template <class Segment, class... C>
  void child(Segment segment, C&... c) {
    if constexpr (kPaths) {
      if constexpr (std::is_same_v<Segment, const char*>) path_.push_field(segment);
      else path_.push_index(segment);
    }
    node(c...);
    if constexpr (kPaths) path_.pop();
    (void)segment;
  }

  template <class It0, class... Its>
  void map_children(std::size_t size, It0 it0, Its... its) {
    // Keys agree across trees (checked), so the iterators advance in lockstep.
    for (; size != 0; --size, ++it0, (++its, ...)) {
      if constexpr (kPaths) path_.push_key(it0->first);
      node(it0->second, its->second...);
      if constexpr (kPaths) path_.pop();
    }
  }

  template <std::size_t... I, class... N>
  void variant_children(std::index_sequence<I...>, std::size_t index, N&... n) {
    ((index == I ? (variant_child<I>(n...), 0) : 0), ...);
  }
  template <std::size_t I, class... N>
  void variant_child(N&... n) {
    node(*std::get_if<I>(&n)...);
  }

  template <class... N>
  void shared_node(N&... n) {
    auto& n0 = first(n...);
    if constexpr (kTies) {
      if constexpr (wants_all_ties<V>) {
        auto ids = tie_ids(std::index_sequence_for<N...>{}, n...);
        hook_shared(ids, n...);
        if (!n0 || std::get<0>(ids) != kNotTied) return;
      } else {
        if (!n0) {
          hook_shared(std::array<std::size_t, 1>{kNotTied}, n...);
          return;
        }
        const std::size_t id = std::get<0>(ties_.logs).visit(n0);
        hook_shared(std::array<std::size_t, 1>{id}, n...);
        if (id != kNotTied) return;
      }
    } else {
      if (!n0) return;
    }
    node(*n...);
  }

  template <class Ids, class... N>
  void hook_shared(const Ids& ids, N&... n) {
    hook([&](auto& v, const auto&... p) -> decltype(v.on_shared(p..., ids, n...)) { v.on_shared(p..., ids, n...); });
  }

  template <std::size_t... I, class... N>
  std::array<std::size_t, sizeof...(N)> tie_ids(std::index_sequence<I...>, N&... n) {
    return {(n ? std::get<I>(ties_.logs).visit(n) : kNotTied)...};
  }

  // Calls the visitor's report (on_vector, on_map, ...) through `call(visitor[, path])` when the visitor has it;
  // `call` names the report in its return type, so a visitor without it costs nothing.
  template <class Call>
  void hook(const Call& call) {
    if constexpr (kPaths) {
      if constexpr (std::is_invocable_v<const Call&, V&, const Path&>) call(visitor_, path_);
    } else {
      if constexpr (std::is_invocable_v<const Call&, V&>) call(visitor_);
    }
  }

  V& visitor_;
  [[no_unique_address]] Ties<kTies, bare<Roots>...> ties_;
  [[no_unique_address]] std::conditional_t<kPaths, Path, std::tuple<>> path_{};
};

}  // namespace detail
}  // namespace geomopt::ptree
