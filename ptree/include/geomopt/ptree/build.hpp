// Making new trees: map, zeros_like, cast.
//
//   map(f, trees...)     a new tree of tree 0's type; selected leaf = f(leaf0, leaf1, ...), the others copied
//   zeros_like(tree)     a copy whose selected storage is zero
//   cast<U>(tree)        rebind_t<Tree, U>, every floating scalar converted (buffers too)
//
// Invariant: the result owns all its storage, and a node tied in the source is tied (once, to a new object) in
// the result. Every leaf type must be default-constructible and move-assignable; a structured leaf is made with
// rebuild(source_leaf, converted storage).
#pragma once

#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>

#include "geomopt/ptree/detail/blocks.hpp"
#include "geomopt/ptree/walk.hpp"

namespace geomopt::ptree {
namespace detail {

// Source object -> its copy, so that a tie is copied once.
using CopiedNodes = std::unordered_map<const void*, std::shared_ptr<void>>;

template <class D, class S>
void convert_into(D& d, const S& s, CopiedNodes& copied);

// A storage block of scalar DS shaped like block b.
template <class DS, class B>
auto converted_block(const B& b) {
  if constexpr (any_scalar<bare<B>>) {
    return static_cast<DS>(b);
  } else {
    using Plain = typename rebind<typename bare<B>::PlainObject, DS>::type;
    Plain out = b.template cast<DS>();
    return out;
  }
}

template <class DBlocks, class S, class SBlocks, std::size_t... B>
auto rebuild_blocks(const S& s, SBlocks& sb, std::index_sequence<B...>) {
  return rebuild(s, std::make_tuple(converted_block<block_scalar_t<std::tuple_element_t<B, DBlocks>>>(
                        std::get<B>(sb))...));
}

template <class D, class S>
void convert_leaf(D& d, const S& s) {
  constexpr Kind k = kind_v<S>;
  if constexpr (k == Kind::eigen_leaf) {
    d = s.template cast<typename D::Scalar>();
  } else if constexpr (k == Kind::scalar_leaf) {
    d = static_cast<D>(s);
  } else {
    using DBlocks = bare<blocks_t<D>>;
    auto&& sb = blocks(s);
    using R = decltype(free_parameters(s));
    if constexpr (is_std_tuple<bare<R>>::value) {
      d = rebuild_blocks<DBlocks>(s, sb, std::make_index_sequence<std::tuple_size_v<DBlocks>>{});
    } else {
      d = rebuild(s, converted_block<block_scalar_t<std::tuple_element_t<0, DBlocks>>>(std::get<0>(sb)));
    }
  }
}

template <class D, class S>
void convert_into(D& d, const S& s, CopiedNodes& copied) {
  constexpr Kind k = kind_v<S>;
  static_assert(kind_v<D> == k, "trees of one shape must have the same kind of node at each position");
  if constexpr (k == Kind::struct_branch || k == Kind::external_branch || k == Kind::tuple) {
    for_each_child([&](auto, auto& dc, const auto& sc) { convert_into(dc, sc, copied); }, d, s);
  } else if constexpr (k == Kind::vector) {
    d.clear();
    d.resize(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) convert_into(d[i], s[i], copied);
  } else if constexpr (k == Kind::array) {
    for (std::size_t i = 0; i < s.size(); ++i) convert_into(d[i], s[i], copied);
  } else if constexpr (k == Kind::map) {
    d.clear();
    for (const auto& [key, value] : s) convert_into(d[key], value, copied);
  } else if constexpr (k == Kind::optional) {
    if (s.has_value()) {
      d.emplace();
      convert_into(*d, *s, copied);
    } else {
      d.reset();
    }
  } else if constexpr (k == Kind::variant) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((s.index() == I ? (convert_into(d.template emplace<I>(), *std::get_if<I>(&s), copied), 0) : 0), ...);
    }(std::make_index_sequence<std::variant_size_v<S>>{});
  } else if constexpr (k == Kind::shared) {
    using Element = typename D::element_type;
    if (!s) {
      d.reset();
      return;
    }
    if (auto it = copied.find(s.get()); it != copied.end()) {
      d = std::static_pointer_cast<Element>(it->second);
      return;
    }
    d = std::make_shared<Element>();
    copied.emplace(s.get(), d);
    convert_into(*d, *s, copied);
  } else if constexpr (k == Kind::buffer) {
    convert_leaf(d.value(), s.value());
  } else if constexpr (is_leaf_v<S>) {
    convert_leaf(d, s);
  } else {
    not_a_tree<S>();
  }
}

// A deep copy of src as a Dst, a tree of src's shape (possibly of other scalars). Not inlined: constructing a wide
// struct is a lot of code (one exception cleanup per member), and every map, cast and unflatten of a tree type
// shares this one copy.
template <class Dst, class Src>
[[gnu::noinline]] Dst convert(const Src& src) {
  Dst dst{};
  CopiedNodes copied;
  convert_into(dst, src, copied);
  return dst;
}

}  // namespace detail

template <class U, class Tree>
rebind_t<Tree, U> cast(const Tree& tree) {
  return detail::convert<rebind_t<Tree, U>>(tree);
}

template <selection S, class Tree>
detail::bare<Tree> zeros_like(S sel, const Tree& tree) {
  auto out = detail::convert<detail::bare<Tree>>(tree);
  for_each_storage(sel, [](auto& b) { detail::set_zero(b); }, out);
  return out;
}
template <class Tree>
  requires(!selection<Tree>)
detail::bare<Tree> zeros_like(const Tree& tree) {
  return zeros_like(params, tree);
}

template <selection S, class F, class T0, class... T>
detail::bare<T0> map(S sel, F&& f, const T0& tree0, const T&... trees) {
  detail::check_shapes(tree0, trees...);
  auto out = detail::convert<detail::bare<T0>>(tree0);
  map_into(sel, f, out, tree0, trees...);
  return out;
}
template <class F, class T0, class... T>
  requires(!selection<F>)
detail::bare<T0> map(F&& f, const T0& tree0, const T&... trees) {
  return map(params, f, tree0, trees...);
}

}  // namespace geomopt::ptree
