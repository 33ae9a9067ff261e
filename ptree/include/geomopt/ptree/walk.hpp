// Walks: visiting the leaves of one or more parameter trees of one shape together, in walk order.
//
//   for_each(f, trees...)              f(leaf0, leaf1, ...) per selected leaf
//   for_each_with_path(f, trees...)    f(const Path&, leaf0, leaf1, ...)
//   map_into(f, dest, srcs...)         dest leaf = f(src leaves...), in place
//   fold(op, init, trees...)           acc = op(acc, leaf0, ...); returns acc
//   for_each_storage(f, trees...)      f(block0, block1, ...) per storage block
//   fold_storage(op, init, trees...)   acc = op(acc, block0, ...)
//
// Each takes an optional first argument: params (the default), buffers or all. Invariants:
//   - trees 1... are checked against tree 0 before any leaf is visited; a difference throws StructureError naming
//     the first differing path, and no leaf is touched;
//   - a tied node (std::shared_ptr reached from several paths) is visited once, at its first path;
//   - none of these walks allocates, at any arity.
// A leaf handed to f is the leaf object (a Buffer hands its value); a storage block is an Eigen dense lvalue or a
// scalar lvalue, from the leaf itself or from its free_parameters.
#pragma once

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include "geomopt/ptree/detail/check.hpp"
#include "geomopt/ptree/detail/walker.hpp"
#include "geomopt/ptree/selection.hpp"

namespace geomopt::ptree {
namespace detail {

template <class Sel, LeafShapes kLeaves = LeafShapes::checked, class V, class... T>
void walk(V& visitor, T&... trees) {
  check_shapes<kLeaves>(std::as_const(trees)...);
  Walker<Sel, V, bare<T>...> w(visitor, trees...);
  w.node(trees...);
}

template <class F>
struct ForEachLeaf {
  F& f;
  template <class... L>
  void leaf(L&... l) {
    f(l...);
  }
};

template <class F>
struct ForEachLeafWithPath {
  static constexpr bool kPaths = true;
  F& f;
  template <class... L>
  void leaf(const Path& path, L&... l) {
    f(path, l...);
  }
};

template <class F>
struct MapIntoLeaf {
  F& f;
  template <class D, class... S>
  void leaf(D& d, S&... s) {
    d = f(s...);
  }
};

// for_each over the trainable leaves, with the rows and columns of the leaves of trees 1... left to f: everything
// above the leaves (and every buffer) is checked as usual. For the optimizers, whose frozen leaves may take an empty
// gradient and which check every other leaf against their state.
template <class F, class... T>
void for_each_own_leaf_shapes(F&& f, T&&... trees) {
  ForEachLeaf<F> v{f};
  walk<params_t, LeafShapes::by_visitor>(v, trees...);
}

template <class Op, class Acc>
struct FoldLeaf {
  Op& op;
  Acc acc;
  template <class... L>
  void leaf(L&... l) {
    acc = op(std::move(acc), l...);
  }
};

template <std::size_t B, class G, class PerTree>
void call_block(G& g, PerTree& per_tree) {
  std::apply([&](auto&... blocks_of_tree) { g(std::get<B>(blocks_of_tree)...); }, per_tree);
}

// Calls g(block_of_tree0, block_of_tree1, ...) for each storage block of the leaves l...
template <class G, class... L>
void for_each_block(G&& g, L&... l) {
  std::tuple<blocks_t<L>...> per_tree{blocks(l)...};  // tuples of references
  constexpr std::size_t nb = std::tuple_size_v<bare<blocks_t<std::tuple_element_t<0, std::tuple<L...>>>>>;
  [&]<std::size_t... B>(std::index_sequence<B...>) { (call_block<B>(g, per_tree), ...); }(
      std::make_index_sequence<nb>{});
}

template <class F>
struct ForEachBlock {
  F& f;
  template <class... L>
  void leaf(L&... l) {
    for_each_block(f, l...);
  }
};

template <class Op, class Acc>
struct FoldBlock {
  Op& op;
  Acc acc;
  template <class... L>
  void leaf(L&... l) {
    for_each_block([this](auto&... b) { acc = op(std::move(acc), b...); }, l...);
  }
};

}  // namespace detail

template <selection S, class F, class... T>
void for_each(S, F&& f, T&&... trees) {
  detail::ForEachLeaf<F> v{f};
  detail::walk<detail::bare<S>>(v, trees...);
}
template <class F, class... T>
  requires(!selection<F>)
void for_each(F&& f, T&&... trees) {
  detail::ForEachLeaf<F> v{f};
  detail::walk<params_t>(v, trees...);
}

template <selection S, class F, class... T>
void for_each_with_path(S, F&& f, T&&... trees) {
  detail::ForEachLeafWithPath<F> v{f};
  detail::walk<detail::bare<S>>(v, trees...);
}
template <class F, class... T>
  requires(!selection<F>)
void for_each_with_path(F&& f, T&&... trees) {
  detail::ForEachLeafWithPath<F> v{f};
  detail::walk<params_t>(v, trees...);
}

template <selection S, class F, class Dest, class... Src>
void map_into(S, F&& f, Dest& dest, Src&&... srcs) {
  detail::MapIntoLeaf<F> v{f};
  detail::walk<detail::bare<S>>(v, dest, srcs...);
}
template <class F, class Dest, class... Src>
  requires(!selection<F>)
void map_into(F&& f, Dest& dest, Src&&... srcs) {
  detail::MapIntoLeaf<F> v{f};
  detail::walk<params_t>(v, dest, srcs...);
}

template <selection S, class Op, class Acc, class... T>
detail::bare<Acc> fold(S, Op&& op, Acc&& init, T&&... trees) {
  detail::FoldLeaf<Op, detail::bare<Acc>> v{op, std::forward<Acc>(init)};
  detail::walk<detail::bare<S>>(v, trees...);
  return std::move(v.acc);
}
template <class Op, class Acc, class... T>
  requires(!selection<Op>)
detail::bare<Acc> fold(Op&& op, Acc&& init, T&&... trees) {
  detail::FoldLeaf<Op, detail::bare<Acc>> v{op, std::forward<Acc>(init)};
  detail::walk<params_t>(v, trees...);
  return std::move(v.acc);
}

template <selection S, class F, class... T>
void for_each_storage(S, F&& f, T&&... trees) {
  detail::ForEachBlock<F> v{f};
  detail::walk<detail::bare<S>>(v, trees...);
}
template <class F, class... T>
  requires(!selection<F>)
void for_each_storage(F&& f, T&&... trees) {
  detail::ForEachBlock<F> v{f};
  detail::walk<params_t>(v, trees...);
}

template <selection S, class Op, class Acc, class... T>
detail::bare<Acc> fold_storage(S, Op&& op, Acc&& init, T&&... trees) {
  detail::FoldBlock<Op, detail::bare<Acc>> v{op, std::forward<Acc>(init)};
  detail::walk<detail::bare<S>>(v, trees...);
  return std::move(v.acc);
}
template <class Op, class Acc, class... T>
  requires(!selection<Op>)
detail::bare<Acc> fold_storage(Op&& op, Acc&& init, T&&... trees) {
  detail::FoldBlock<Op, detail::bare<Acc>> v{op, std::forward<Acc>(init)};
  detail::walk<params_t>(v, trees...);
  return std::move(v.acc);
}

}  // namespace geomopt::ptree
