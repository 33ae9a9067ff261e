// Declaring parameter trees.
//
// A struct becomes a branch of a parameter tree by naming its children once:
//
//   template <class T> struct Dense {
//     Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> weight;
//     Eigen::Matrix<T, Eigen::Dynamic, 1> bias;
//     GEOMOPT_PTREE(weight, bias)
//   };
//
// The macro writes out one statement per child, visit("weight", self.weight...), so a walk over k children costs
// k calls in one function body: no tuple recursion, no per-child template instantiation. Invariant: the names and
// the order given to the macro are the paths and the walk order of every operation on the tree.
#pragma once

#include <type_traits>

namespace geomopt::ptree {

/// The types of a branch's children, in walk order; for type-level questions such as scalar_t.
template <class... Ts>
struct children {};

/// Non-intrusive declaration for a type the user cannot edit: specialised by GEOMOPT_PTREE_EXTERNAL (or by hand,
/// e.g. partially for a class template) with the same two members GEOMOPT_PTREE writes.
template <class T>
struct external {};

}  // namespace geomopt::ptree

// A bounded "for each argument" over __VA_ARGS__: each GEOMOPT_PTREE_DETAIL_EXPAND<k> level rescans its argument
// four times, so the five levels give 4^5 = 1024 rescans, one per member: up to 1024 members. The tests declare 400.
#define GEOMOPT_PTREE_DETAIL_PARENS ()
#define GEOMOPT_PTREE_DETAIL_EXPAND(...) \
  GEOMOPT_PTREE_DETAIL_EXPAND5(          \
      GEOMOPT_PTREE_DETAIL_EXPAND5(GEOMOPT_PTREE_DETAIL_EXPAND5(GEOMOPT_PTREE_DETAIL_EXPAND5(__VA_ARGS__))))
#define GEOMOPT_PTREE_DETAIL_EXPAND5(...) \
  GEOMOPT_PTREE_DETAIL_EXPAND4(           \
      GEOMOPT_PTREE_DETAIL_EXPAND4(GEOMOPT_PTREE_DETAIL_EXPAND4(GEOMOPT_PTREE_DETAIL_EXPAND4(__VA_ARGS__))))
#define GEOMOPT_PTREE_DETAIL_EXPAND4(...) \
  GEOMOPT_PTREE_DETAIL_EXPAND3(           \
      GEOMOPT_PTREE_DETAIL_EXPAND3(GEOMOPT_PTREE_DETAIL_EXPAND3(GEOMOPT_PTREE_DETAIL_EXPAND3(__VA_ARGS__))))
#define GEOMOPT_PTREE_DETAIL_EXPAND3(...) \
  GEOMOPT_PTREE_DETAIL_EXPAND2(           \
      GEOMOPT_PTREE_DETAIL_EXPAND2(GEOMOPT_PTREE_DETAIL_EXPAND2(GEOMOPT_PTREE_DETAIL_EXPAND2(__VA_ARGS__))))
#define GEOMOPT_PTREE_DETAIL_EXPAND2(...) \
  GEOMOPT_PTREE_DETAIL_EXPAND1(           \
      GEOMOPT_PTREE_DETAIL_EXPAND1(GEOMOPT_PTREE_DETAIL_EXPAND1(GEOMOPT_PTREE_DETAIL_EXPAND1(__VA_ARGS__))))
#define GEOMOPT_PTREE_DETAIL_EXPAND1(...) __VA_ARGS__

// Statements: m(ctx, a1) m(ctx, a2) ...
#define GEOMOPT_PTREE_DETAIL_EACH(m, ctx, ...) \
  __VA_OPT__(GEOMOPT_PTREE_DETAIL_EXPAND(GEOMOPT_PTREE_DETAIL_EACH_STEP(m, ctx, __VA_ARGS__)))
#define GEOMOPT_PTREE_DETAIL_EACH_STEP(m, ctx, a, ...) \
  m(ctx, a) __VA_OPT__(GEOMOPT_PTREE_DETAIL_EACH_AGAIN GEOMOPT_PTREE_DETAIL_PARENS(m, ctx, __VA_ARGS__))
#define GEOMOPT_PTREE_DETAIL_EACH_AGAIN() GEOMOPT_PTREE_DETAIL_EACH_STEP

// A comma-separated list: m(ctx, a1), m(ctx, a2), ...
#define GEOMOPT_PTREE_DETAIL_LIST(m, ctx, ...) \
  __VA_OPT__(GEOMOPT_PTREE_DETAIL_EXPAND(GEOMOPT_PTREE_DETAIL_LIST_STEP(m, ctx, __VA_ARGS__)))
#define GEOMOPT_PTREE_DETAIL_LIST_STEP(m, ctx, a, ...) \
  m(ctx, a) __VA_OPT__(, GEOMOPT_PTREE_DETAIL_LIST_AGAIN GEOMOPT_PTREE_DETAIL_PARENS(m, ctx, __VA_ARGS__))
#define GEOMOPT_PTREE_DETAIL_LIST_AGAIN() GEOMOPT_PTREE_DETAIL_LIST_STEP

#define GEOMOPT_PTREE_DETAIL_VISIT(ctx, member) visit(#member, self.member...);
#define GEOMOPT_PTREE_DETAIL_MEMBER_TYPE(ctx, member) decltype(member)
#define GEOMOPT_PTREE_DETAIL_EXTERNAL_TYPE(type, member) decltype(type::member)

/// Declares the members of the enclosing struct, in order, as the children of a parameter-tree branch. The struct is
/// at namespace or class scope: a local class (declared in a function) cannot have the member template it defines.
#define GEOMOPT_PTREE(...)                                                                  \
  template <class Visit, class... Self>                                                     \
  static void ptree_walk([[maybe_unused]] Visit&& visit, [[maybe_unused]] Self&&... self) { \
    GEOMOPT_PTREE_DETAIL_EACH(GEOMOPT_PTREE_DETAIL_VISIT, _, __VA_ARGS__)                   \
  }                                                                                         \
  using ptree_children =                                                                    \
      ::geomopt::ptree::children<GEOMOPT_PTREE_DETAIL_LIST(GEOMOPT_PTREE_DETAIL_MEMBER_TYPE, _, __VA_ARGS__)>;

/// GEOMOPT_PTREE for a type declared elsewhere; write it at global scope: GEOMOPT_PTREE_EXTERNAL(ns::Type, a, b).
#define GEOMOPT_PTREE_EXTERNAL(Type, ...)                                                                             \
  template <>                                                                                                         \
  struct geomopt::ptree::external<Type> {                                                                             \
    template <class Visit, class... Self>                                                                             \
    static void ptree_walk([[maybe_unused]] Visit&& visit, [[maybe_unused]] Self&&... self) {                         \
      GEOMOPT_PTREE_DETAIL_EACH(GEOMOPT_PTREE_DETAIL_VISIT, _, __VA_ARGS__)                                           \
    }                                                                                                                 \
    using ptree_children =                                                                                            \
        ::geomopt::ptree::children<GEOMOPT_PTREE_DETAIL_LIST(GEOMOPT_PTREE_DETAIL_EXTERNAL_TYPE, Type, __VA_ARGS__)>; \
  };
