// The children of a fixed branch (a GEOMOPT_PTREE struct, a GEOMOPT_PTREE_EXTERNAL type, a std::tuple or a
// std::pair), handed to a function one at a time, for one or more trees together.
//
// This is where compile time is won or lost. A struct's ptree_walk is instantiated only with a Collector that
// records each child's address (and name): once per struct type and constness, whatever the walk. The walk proper
// is then a runtime loop over the recorded addresses that dispatches on a compile-time table of child *types*,
// so the per-leaf work of each walk is instantiated once per distinct child type, never once per child. A
// 369-member struct costs one 369-statement function (the collector) for all walks together.
//
// The collector checks that a hand-written ptree_walk visits exactly the types its ptree_children declares, in
// order, so an address is only ever read back as the type it was taken from.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "geomopt/ptree/traits.hpp"

namespace geomopt::ptree::detail {

template <class... Ts>
struct type_list {
  static constexpr std::size_t size = sizeof...(Ts);
};
template <class T, class... Ts>
struct type_list<T, Ts...> {
  static constexpr std::size_t size = 1 + sizeof...(Ts);
  using first = T;
};

// ---- the children of a fixed branch, as a type_list --------------------------------------------------------------

template <class C>
struct as_type_list;
template <class... Ts>
struct as_type_list<children<Ts...>> {
  using type = type_list<bare<Ts>...>;
};

template <class T, Kind K = kind_v<T>>
struct fixed_children;
template <class T>
struct fixed_children<T, Kind::struct_branch> : as_type_list<typename T::ptree_children> {};
template <class T>
struct fixed_children<T, Kind::external_branch> : as_type_list<typename external<T>::ptree_children> {};
template <class... Ts>
struct fixed_children<std::tuple<Ts...>, Kind::tuple> {
  using type = type_list<Ts...>;
};
template <class A, class B>
struct fixed_children<std::pair<A, B>, Kind::tuple> {
  using type = type_list<A, B>;
};
template <class T>
using fixed_children_t = typename fixed_children<bare<T>>::type;

// ---- type-list algebra, linear in the number of children -------------------------------------------------------

template <class List, class T>
struct unique_step;
template <class... U, class T>
struct unique_step<type_list<U...>, T> {
  using type = std::conditional_t<any_of_v<std::is_same_v<T, U>...>, type_list<U...>, type_list<U..., T>>;
};
// The distinct types of a list, in order of first appearance.
template <class L>
struct unique;
template <class... Ts>
struct unique<type_list<Ts...>> : fold_types<unique_step, type_list<>, Ts...> {};

inline constexpr std::size_t kNoIndex = static_cast<std::size_t>(-1);

template <class T, class L>
struct index_of;
template <class T, class... U>
struct index_of<T, type_list<U...>> {
  static constexpr std::size_t value = [] {
    constexpr bool same[] = {std::is_same_v<T, U>..., false};
    for (std::size_t i = 0; i < sizeof...(U); ++i)
      if (same[i]) return i;
    return kNoIndex;
  }();
};

template <class Row, class C>
struct append;
template <class... R, class C>
struct append<type_list<R...>, C> {
  using type = type_list<R..., C>;
};

template <class Rows, class L>
struct zip_append;
template <class... Rows, class... C>
struct zip_append<type_list<Rows...>, type_list<C...>> {
  static_assert(sizeof...(Rows) == sizeof...(C), "trees of one shape must have the same number of children");
  using type = type_list<typename append<Rows, C>::type...>;
};

// Rows of the children of several branches: row i lists child i of each branch.
template <class L>
struct singletons;
template <class... C>
struct singletons<type_list<C...>> {
  using type = type_list<type_list<C>...>;
};
template <class Rows, class... Ls>
struct zip_rows {
  using type = Rows;
};
template <class Rows, class L, class... Ls>
struct zip_rows<Rows, L, Ls...> : zip_rows<typename zip_append<Rows, L>::type, Ls...> {};
template <class L0, class... Ls>
struct zip : zip_rows<typename singletons<L0>::type, Ls...> {};

template <class Rows, class Unique>
struct row_ids;
template <class... Rows, class Unique>
struct row_ids<type_list<Rows...>, Unique> {
  using id_t = std::conditional_t<(Unique::size < 256), std::uint8_t, std::uint16_t>;
  static constexpr std::array<id_t, sizeof...(Rows)> value = {static_cast<id_t>(index_of<Rows, Unique>::value)...};
};

// ---- one branch type: its children, their distinct types, and which is which ------------------------------------

template <class T>
struct branch_info {
  using children = fixed_children_t<T>;
  using distinct = typename unique<children>::type;
  static constexpr std::size_t size = children::size;
  static constexpr auto ids = row_ids<children, distinct>::value;
};

template <class T>
[[noreturn, gnu::cold]] void bad_walk(std::size_t i, const char* name, const char* what) {
  throw std::logic_error(std::string("geomopt::ptree: the ptree_walk of ") + typeid(T).name() + " " + what +
                         " at child " + std::to_string(i) + (name ? std::string(" (\"") + name + "\")" : std::string()));
}

// Where the children of a T live (byte offsets from the start of the T) and their names. Member offsets are a
// property of the type, so this is computed once per type, from the first T walked.
template <class T>
struct ChildLayout {
  static constexpr std::size_t size = branch_info<T>::size;
  std::array<std::ptrdiff_t, size> offsets{};
  std::array<const char*, size> names{};
};

// Fills a ChildLayout as ptree_walk visits the children. Its call is not inlined: it runs once per type, and a wide
// struct's ptree_walk then compiles to a plain list of calls.
template <class T>
struct LayoutRecorder {
  const unsigned char* base;
  ChildLayout<T>* layout;
  std::size_t count = 0;

  template <class C>
  [[gnu::noinline]] void operator()(const char* name, const C& child) {
    using Info = branch_info<T>;
    constexpr std::size_t type = index_of<bare<C>, typename Info::distinct>::value;
    static_assert(type != kNoIndex, "ptree_walk visits a member whose type ptree_children does not list");
    if (count < Info::size) {
      if (Info::ids[count] != type) bad_walk<T>(count, name, "visits another type than ptree_children lists");
      const std::ptrdiff_t offset = reinterpret_cast<const unsigned char*>(std::addressof(child)) - base;
      if (offset < 0 || offset + static_cast<std::ptrdiff_t>(sizeof(C)) > static_cast<std::ptrdiff_t>(sizeof(T)))
        bad_walk<T>(count, name, "visits an object that is not a member");
      layout->offsets[count] = offset;
      layout->names[count] = name;
    }
    ++count;
  }
};

template <class T>
ChildLayout<T> compute_child_layout(const T& branch) {
  ChildLayout<T> layout;
  const auto* base = reinterpret_cast<const unsigned char*>(std::addressof(branch));
  constexpr Kind k = kind_v<T>;
  if constexpr (k == Kind::struct_branch || k == Kind::external_branch) {
    LayoutRecorder<T> recorder{base, &layout};
    if constexpr (k == Kind::struct_branch) T::ptree_walk(recorder, branch);
    else external<T>::ptree_walk(recorder, branch);
    if (recorder.count != ChildLayout<T>::size)
      bad_walk<T>(recorder.count, nullptr, "visits another number of children than ptree_children lists");
  } else {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      const void* const addresses[] = {std::addressof(std::get<I>(branch))...};
      for (std::size_t i = 0; i < ChildLayout<T>::size; ++i)
        layout.offsets[i] = static_cast<const unsigned char*>(addresses[i]) - base;
    }(std::make_index_sequence<ChildLayout<T>::size>{});
  }
  return layout;
}

// The layout of T's children, computed at the first call (thread-safe) and then read from a static.
template <class T>
const ChildLayout<T>& child_layout(const T& branch) {
  static const ChildLayout<T> layout = compute_child_layout(branch);
  return layout;
}

// Child i of a branch, as the type C it was recorded as, with the constness of the branch.
template <class C, class Q>
auto& child_at(Q& branch, std::ptrdiff_t offset) {
  using Byte = std::conditional_t<std::is_const_v<Q>, const unsigned char, unsigned char>;
  using Child = std::conditional_t<std::is_const_v<Q>, const C, C>;
  return *reinterpret_cast<Child*>(reinterpret_cast<Byte*>(std::addressof(branch)) + offset);
}

// The children of fixed branches Q... (one per tree), row by row: which distinct row of child types each child
// belongs to.
template <class... Q>
struct FixedBranch {
  using T0 = bare<std::tuple_element_t<0, std::tuple<Q...>>>;
  static constexpr std::size_t size = branch_info<T0>::size;
  static constexpr bool named = kind_v<T0> == Kind::struct_branch || kind_v<T0> == Kind::external_branch;
  using Rows = typename zip<fixed_children_t<Q>...>::type;
  using Distinct = typename unique<Rows>::type;
  static constexpr auto ids = row_ids<Rows, Distinct>::value;
};

template <class Q, class C>
using like_const_t = std::conditional_t<std::is_const_v<Q>, const C, C>;

template <class... C, class F, class Segment, std::size_t... T, class... Q>
void call_row(type_list<C...>*, F& f, Segment segment, std::size_t i, std::index_sequence<T...>, Q&... branch) {
  const std::tuple<const ChildLayout<bare<Q>>&...> layouts{child_layout(std::as_const(branch))...};
  f(segment, child_at<C>(branch, std::get<T>(layouts).offsets[i])...);
}

template <class Row, class F, class... Q>
void call_row_at(F& f, std::size_t i, const char* name, Q&... branch) {
  if constexpr (FixedBranch<Q...>::named) {
    call_row(static_cast<Row*>(nullptr), f, name, i, std::index_sequence_for<Q...>{}, branch...);
  } else {
    (void)name;
    call_row(static_cast<Row*>(nullptr), f, i, i, std::index_sequence_for<Q...>{}, branch...);
  }
}

// Calls f(segment, child_of_branch0, child_of_branch1, ...) for each child, in order. The segment is the member
// name (const char*) for a struct and the index (std::size_t) for a tuple or pair. For the walks that run once per
// tree type (conversion, tie scans); the walker has its own loop.
template <class F, class Q0, class... Q>
void for_each_child(F&& f, Q0& branch0, Q&... branch) {
  using B = FixedBranch<Q0, Q...>;
  const auto& names = child_layout(std::as_const(branch0)).names;
  [&]<class... Rows>(type_list<Rows...>*) {
    using Call = void (*)(F&, std::size_t, const char*, Q0&, Q&...);
    static constexpr Call table[] = {&call_row_at<Rows, F, Q0, Q...>...};
    for (std::size_t i = 0; i < B::size; ++i) table[B::ids[i]](f, i, names[i], branch0, branch...);
  }(static_cast<typename B::Distinct*>(nullptr));
}

}  // namespace geomopt::ptree::detail
