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

// Where ptree_walk put child i: its address, its name, and the index of its type in branch_info<T>::distinct.
struct ChildRecord {
  void* address;
  const char* name;
  std::size_t type;
};

template <class T>
[[noreturn, gnu::cold]] void bad_walk(std::size_t i, const char* name) {
  throw std::logic_error(std::string("geomopt::ptree: the ptree_walk of ") + typeid(T).name() +
                         " disagrees with its ptree_children at child " + std::to_string(i) + " (\"" +
                         (name ? name : "") + "\"): they must list the same types in the same order");
}

// Records each child as ptree_walk visits it: three stores, no branch, so that the one instantiation of a wide
// struct's ptree_walk stays cheap to compile. The records are checked afterwards, in a loop.
template <class T>
struct Collector {
  ChildRecord* next;
  ChildRecord* end;

  template <class C>
  void operator()(const char* name, const C& child) {
    constexpr std::size_t type = index_of<bare<C>, typename branch_info<T>::distinct>::value;
    static_assert(type != kNoIndex, "ptree_walk visits a member whose type ptree_children does not list");
    if (next != end) *next = {const_cast<void*>(static_cast<const void*>(std::addressof(child))), name, type};
    ++next;
  }
};

// Always from a const branch, so a struct's ptree_walk is instantiated once, whatever the constness of the walk;
// the addresses are read back with the constness of the tree they came from. Not inlined, so that every walk over
// a struct calls the one compiled copy.
template <class T>
[[gnu::noinline]] void collect(const T& branch, ChildRecord* records) {
  using Info = branch_info<T>;
  constexpr Kind k = kind_v<T>;
  if constexpr (k == Kind::struct_branch || k == Kind::external_branch) {
    Collector<T> c{records, records + Info::size};
    if constexpr (k == Kind::struct_branch) T::ptree_walk(c, branch);
    else external<T>::ptree_walk(c, branch);
    if (c.next != records + Info::size) bad_walk<T>(static_cast<std::size_t>(c.next - records), nullptr);
    for (std::size_t i = 0; i < Info::size; ++i)
      if (records[i].type != Info::ids[i]) bad_walk<T>(i, records[i].name);
  } else {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      const void* const addresses[] = {std::addressof(std::get<I>(branch))...};
      for (std::size_t i = 0; i < Info::size; ++i) records[i].address = const_cast<void*>(addresses[i]);
    }(std::make_index_sequence<Info::size>{});
  }
}

template <class Q, class C>
using like_const_t = std::conditional_t<std::is_const_v<Q>, const C, C>;

// Calls f with the children of row `id` of Distinct, each read back as the type it was recorded as.
template <class Distinct, class... Q>
struct RowDispatch;
template <class... Rows, class... Q>
struct RowDispatch<type_list<Rows...>, Q...> {
  template <class F, class Segment>
  static void call(std::size_t id, F& f, Segment segment, void* const* at) {
    if constexpr (sizeof...(Rows) <= 16) {
      // A few distinct types (the common case): a switch the compiler can inline through.
      [&]<std::size_t... R>(std::index_sequence<R...>) {
        ((id == R ? (typed(static_cast<Rows*>(nullptr), f, segment, at, std::index_sequence_for<Q...>{}), 0) : 0),
         ...);
      }(std::index_sequence_for<Rows...>{});
    } else {
      using Call = void (*)(F&, Segment, void* const*);
      static constexpr Call table[] = {&typed_entry<Rows, F, Segment>...};
      table[id](f, segment, at);
    }
  }

  template <class Row, class F, class Segment>
  static void typed_entry(F& f, Segment segment, void* const* at) {
    typed(static_cast<Row*>(nullptr), f, segment, at, std::index_sequence_for<Q...>{});
  }

  template <class... C, class F, class Segment, std::size_t... T>
  static void typed(type_list<C...>*, F& f, Segment segment, void* const* at, std::index_sequence<T...>) {
    f(segment, *static_cast<like_const_t<Q, C>*>(at[T])...);
  }
};

// Calls f(segment, child_of_branch0, child_of_branch1, ...) for each child, in order. The segment is the member
// name (const char*) for a struct and the index (std::size_t) for a tuple or pair.
template <class F, class... Q>
void for_each_child(F&& f, Q&... branch) {
  using T0 = bare<std::tuple_element_t<0, std::tuple<Q...>>>;
  constexpr std::size_t m = branch_info<T0>::size;
  constexpr std::size_t k = sizeof...(Q);
  if constexpr (m != 0) {
    using Rows = typename zip<fixed_children_t<Q>...>::type;
    using Distinct = typename unique<Rows>::type;
    using Dispatch = RowDispatch<Distinct, Q...>;
    static constexpr auto ids = row_ids<Rows, Distinct>::value;
    std::array<std::array<ChildRecord, m>, k> records;
    {
      std::size_t t = 0;
      ((collect(std::as_const(branch), records[t].data()), ++t), ...);
    }
    constexpr bool named = kind_v<T0> == Kind::struct_branch || kind_v<T0> == Kind::external_branch;
    for (std::size_t i = 0; i < m; ++i) {
      std::array<void*, k> at;
      for (std::size_t t = 0; t < k; ++t) at[t] = records[t][i].address;
      if constexpr (named) {
        Dispatch::call(ids[i], f, records[0][i].name, at.data());
      } else {
        Dispatch::call(ids[i], f, i, at.data());
      }
    }
  }
}

}  // namespace geomopt::ptree::detail
