// What a node of a parameter tree is, decided from its type alone.
//
// Branches: GEOMOPT_PTREE structs (and GEOMOPT_PTREE_EXTERNAL types), std::vector, std::array, std::tuple,
// std::pair, std::map<std::string, T>, std::optional, std::variant, std::shared_ptr (a tie) and Buffer.
// Leaves: Eigen plain dense objects, scalars, and structured leaves that speak the two-function protocol
// (free_parameters / rebuild, found by argument-dependent lookup). A leaf's storage is a tuple of blocks; every
// block is an Eigen dense lvalue or a scalar lvalue.
#pragma once

#include <Eigen/Core>
#include <array>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "geomopt/ptree/buffer.hpp"
#include "geomopt/ptree/declare.hpp"

namespace geomopt::ptree {

/// A scalar with an infinitesimal part, such as ceres::Jet<T, N>: recognised by shape (members `a` of the real
/// type and `v`, an Eigen vector), so ptree needs no Ceres header. Specialise to true for other AD scalars.
template <class T>
struct is_dual_number : std::false_type {};

template <template <class, int> class J, class T, int N>
  requires requires(J<T, N> j) {
    { j.a } -> std::convertible_to<T>;
    { j.v } -> std::convertible_to<Eigen::Matrix<T, N, 1>>;
  }
struct is_dual_number<J<T, N>> : std::true_type {};

/// Replaces every floating-point scalar of T by U; see rebind_t.
template <class T, class U>
struct rebind;

namespace detail {

template <class T>
using bare = std::remove_cvref_t<T>;

template <class T>
inline constexpr bool always_false = false;

// Scalars that can be trained and rebound.
template <class T>
concept real_scalar = std::is_floating_point_v<T> || is_dual_number<T>::value;

// Scalars that can sit in a leaf at all (integers and bool only inside a Buffer).
template <class T>
concept any_scalar = real_scalar<T> || std::is_arithmetic_v<T>;

template <class T>
concept eigen_plain = std::is_base_of_v<Eigen::PlainObjectBase<T>, T>;

template <class T>
concept eigen_dense = std::is_base_of_v<Eigen::DenseBase<T>, T>;

template <class T>
concept struct_branch = requires { typename T::ptree_children; };

template <class T>
concept external_branch = requires { typename external<T>::ptree_children; };

template <class T> struct is_vector : std::false_type {};
template <class T, class A> struct is_vector<std::vector<T, A>> : std::true_type {};
template <class T> struct is_array : std::false_type {};
template <class T, std::size_t N> struct is_array<std::array<T, N>> : std::true_type {};
template <class T> struct is_tuple : std::false_type {};
template <class... T> struct is_tuple<std::tuple<T...>> : std::true_type {};
template <class A, class B> struct is_tuple<std::pair<A, B>> : std::true_type {};
template <class T> struct is_map : std::false_type {};
template <class T, class C, class A> struct is_map<std::map<std::string, T, C, A>> : std::true_type {};
template <class T> struct is_optional : std::false_type {};
template <class T> struct is_optional<std::optional<T>> : std::true_type {};
template <class T> struct is_variant : std::false_type {};
template <class... T> struct is_variant<std::variant<T...>> : std::true_type {};
template <class T> struct is_shared : std::false_type {};
template <class T> struct is_shared<std::shared_ptr<T>> : std::true_type {};
template <class T> struct is_buffer : std::false_type {};
template <class L> struct is_buffer<Buffer<L>> : std::true_type {};

// Ordinary lookup must not find anything here: the protocol is found by argument-dependent lookup only.
void free_parameters() = delete;
void rebuild() = delete;

template <class L>
concept has_free_parameters = requires(L& x, const L& c) {
  free_parameters(x);
  free_parameters(c);
};

enum class Kind {
  struct_branch,
  external_branch,
  vector,
  array,
  tuple,
  map,
  optional,
  variant,
  shared,
  buffer,
  eigen_leaf,
  scalar_leaf,
  protocol_leaf,
  unknown
};

template <class T>
constexpr Kind kind_of() {
  if constexpr (is_buffer<T>::value) return Kind::buffer;
  else if constexpr (is_shared<T>::value) return Kind::shared;
  else if constexpr (is_optional<T>::value) return Kind::optional;
  else if constexpr (is_variant<T>::value) return Kind::variant;
  else if constexpr (is_vector<T>::value) return Kind::vector;
  else if constexpr (is_array<T>::value) return Kind::array;
  else if constexpr (is_tuple<T>::value) return Kind::tuple;
  else if constexpr (is_map<T>::value) return Kind::map;
  else if constexpr (eigen_plain<T>) return Kind::eigen_leaf;
  else if constexpr (any_scalar<T>) return Kind::scalar_leaf;
  else if constexpr (struct_branch<T>) return Kind::struct_branch;
  else if constexpr (external_branch<T>) return Kind::external_branch;
  else if constexpr (has_free_parameters<T>) return Kind::protocol_leaf;
  else return Kind::unknown;
}

template <class T>
inline constexpr Kind kind_v = kind_of<bare<T>>();

template <class T>
inline constexpr bool is_leaf_v =
    kind_v<T> == Kind::eigen_leaf || kind_v<T> == Kind::scalar_leaf || kind_v<T> == Kind::protocol_leaf;

// The two messages for a type that is no tree, each written once: the compiler shows whichever applies first.
#define GEOMOPT_PTREE_DETAIL_UNKNOWN_NODE                                                                      \
  "geomopt::ptree: this type is neither a branch nor a leaf of a parameter tree. Make it a branch with "       \
  "GEOMOPT_PTREE(members...) inside it (or GEOMOPT_PTREE_EXTERNAL at global scope), or a structured leaf by "  \
  "defining, in its namespace, free_parameters(L&) and free_parameters(const L&) (returning its storage) and " \
  "rebuild(const L& prototype, Storage&& data)."
#define GEOMOPT_PTREE_DETAIL_UNTRAINABLE_LEAF                                                                   \
  "geomopt::ptree: a trainable leaf must have a floating-point (or dual-number) scalar; wrap integer and bool " \
  "leaves in geomopt::ptree::Buffer<> to make them non-trainable"

// ---- storage blocks -------------------------------------------------------------------------------------------

template <class T> struct is_std_tuple : std::false_type {};
template <class... T> struct is_std_tuple<std::tuple<T...>> : std::true_type {};

// The storage of a leaf as a tuple of references (one per block).
template <class L>
decltype(auto) blocks(L& leaf) {
  if constexpr (kind_v<L> == Kind::protocol_leaf) {
    using R = decltype(free_parameters(leaf));
    if constexpr (is_std_tuple<bare<R>>::value) {
      return free_parameters(leaf);  // a tuple of references, by value
    } else {
      static_assert(std::is_lvalue_reference_v<R>,
                    "free_parameters must return its storage by reference (or a std::tuple of references)");
      return std::tuple<R>(free_parameters(leaf));
    }
  } else {
    return std::tuple<L&>(leaf);
  }
}

template <class L>
using blocks_t = decltype(blocks(std::declval<L&>()));

template <class B>
constexpr std::size_t block_count_v = std::tuple_size_v<bare<blocks_t<B>>>;

template <class Block>
struct block_traits {
  using type = bare<Block>;
  static_assert(eigen_dense<type> || any_scalar<type>,
                "a storage block (what free_parameters returns) must be an Eigen dense object or a scalar");
  using scalar = typename std::conditional_t<eigen_dense<type>, type, std::type_identity<type>>::Scalar;
};
template <class Block>
  requires any_scalar<bare<Block>>
struct block_traits<Block> {
  using scalar = bare<Block>;
};

template <class Block>
using block_scalar_t = typename block_traits<Block>::scalar;

template <class Block>
Eigen::Index block_size(const Block& b) {
  if constexpr (eigen_dense<Block>) return b.size();
  else return 1;
}
template <class Block>
Eigen::Index block_rows(const Block& b) {
  if constexpr (eigen_dense<Block>) return b.rows();
  else return 1;
}
template <class Block>
Eigen::Index block_cols(const Block& b) {
  if constexpr (eigen_dense<Block>) return b.cols();
  else return 1;
}

// ---- scalar promotion -----------------------------------------------------------------------------------------

template <class T>
struct tag {
  using type = T;
};

template <class A, class B>
struct promote {
  using type = std::common_type_t<A, B>;
};
template <class A>
struct promote<A, void> {
  using type = A;
};
template <class B>
struct promote<void, B> {
  using type = B;
};
template <>
struct promote<void, void> {
  using type = void;
};
template <template <class, int> class J, class T, int N, class B>
  requires(is_dual_number<J<T, N>>::value && std::is_arithmetic_v<B>)
struct promote<J<T, N>, B> {
  using type = J<typename promote<T, B>::type, N>;
};
template <template <class, int> class J, class T, int N, class A>
  requires(is_dual_number<J<T, N>>::value && std::is_arithmetic_v<A>)
struct promote<A, J<T, N>> {
  using type = J<typename promote<T, A>::type, N>;
};
template <class A>
  requires is_dual_number<A>::value
struct promote<A, A> {
  using type = A;
};

// ---- folds over long lists of types ----------------------------------------------------------------------------
//
// A branch may have hundreds of children. A fold expression over them nests as deep as the list is long (clang
// stops at 256), and a recursion that peels one type at a time costs a quadratic number of template arguments.
// fold_types<Op, Acc, Ts...> peels sixteen at a time: Acc = Op<Acc, T>::type for each T, in order.

template <template <class, class> class Op, class Acc>
struct fold_acc {
  using type = Acc;
};
template <template <class, class> class Op, class Acc, class T>
constexpr fold_acc<Op, typename Op<Acc, T>::type> operator+(fold_acc<Op, Acc>, tag<T>) {
  return {};
}

template <template <class, class> class Op, class Acc, class... Ts>
struct fold_chunk {  // a shallow fold over a few types
  using type = typename decltype((fold_acc<Op, Acc>{} + ... + tag<Ts>{}))::type;
};

template <template <class, class> class Op, class Acc, class... Ts>
struct fold_types : fold_chunk<Op, Acc, Ts...> {};  // at most fifteen left
template <template <class, class> class Op, class Acc, class T0, class T1, class T2, class T3, class T4, class T5,
          class T6, class T7, class T8, class T9, class T10, class T11, class T12, class T13, class T14, class T15,
          class... Rest>
struct fold_types<Op, Acc, T0, T1, T2, T3, T4, T5, T6, T7, T8, T9, T10, T11, T12, T13, T14, T15, Rest...>
    : fold_types<Op,
                 typename fold_chunk<Op, Acc, T0, T1, T2, T3, T4, T5, T6, T7, T8, T9, T10, T11, T12, T13, T14,
                                     T15>::type,
                 Rest...> {};

// Whether any of the values is true, without a fold expression (see above).
template <bool... B>
inline constexpr bool any_of_v = [] {
  constexpr bool values[] = {B..., false};
  for (bool v : values)
    if (v) return true;
  return false;
}();

template <class T, Kind K = kind_v<T>>
struct scalar_of;

template <class... Ts>
using promote_all_t = typename fold_types<promote, void, typename scalar_of<Ts>::type...>::type;

template <class T>
struct children_of;
template <class... Ts>
struct children_of<children<Ts...>> {
  using type = promote_all_t<Ts...>;
};

template <class T>
struct scalar_of<T, Kind::struct_branch> : children_of<typename T::ptree_children> {};
template <class T>
struct scalar_of<T, Kind::external_branch> : children_of<typename external<T>::ptree_children> {};
template <class T>
struct scalar_of<T, Kind::vector> : scalar_of<typename T::value_type> {};
template <class T>
struct scalar_of<T, Kind::array> : scalar_of<typename T::value_type> {};
template <class T>
struct scalar_of<T, Kind::optional> : scalar_of<typename T::value_type> {};
template <class T>
struct scalar_of<T, Kind::map> : scalar_of<typename T::mapped_type> {};
template <class T>
struct scalar_of<T, Kind::shared> : scalar_of<typename T::element_type> {};
template <class T>
struct scalar_of<T, Kind::buffer> {
  using type = void;
};
template <class... Ts>
struct scalar_of<std::tuple<Ts...>, Kind::tuple> {
  using type = promote_all_t<Ts...>;
};
template <class A, class B>
struct scalar_of<std::pair<A, B>, Kind::tuple> {
  using type = promote_all_t<A, B>;
};
template <class... Ts>
struct scalar_of<std::variant<Ts...>, Kind::variant> {
  using type = promote_all_t<Ts...>;
};

template <class S>
struct trainable_scalar {
  static_assert(real_scalar<S>, GEOMOPT_PTREE_DETAIL_UNTRAINABLE_LEAF);
  using type = S;
};

template <class T>
struct scalar_of<T, Kind::eigen_leaf> : trainable_scalar<typename T::Scalar> {};
template <class T>
struct scalar_of<T, Kind::scalar_leaf> : trainable_scalar<T> {};

template <class Tuple>
struct block_scalars;
template <class... Bs>
struct block_scalars<std::tuple<Bs...>> {
  using type = typename fold_types<promote, void, block_scalar_t<Bs>...>::type;
};
template <class T>
struct scalar_of<T, Kind::protocol_leaf> : trainable_scalar<typename block_scalars<blocks_t<T>>::type> {};

template <class T>
struct scalar_of<T, Kind::unknown> {
  static_assert(always_false<T>, GEOMOPT_PTREE_DETAIL_UNKNOWN_NODE);
  using type = void;
};

// Does a subtree of this type contain any tie (std::shared_ptr)? Ties cost bookkeeping only where they can occur.
template <class T, Kind K = kind_v<T>>
struct has_shared : std::false_type {};
template <class... Ts>
constexpr bool any_shared(children<Ts...>*) {
  return any_of_v<has_shared<bare<Ts>>::value...>;
}
template <class T>
struct has_shared<T, Kind::struct_branch>
    : std::bool_constant<any_shared(static_cast<typename T::ptree_children*>(nullptr))> {};
template <class T>
struct has_shared<T, Kind::external_branch>
    : std::bool_constant<any_shared(static_cast<typename external<T>::ptree_children*>(nullptr))> {};
template <class T>
struct has_shared<T, Kind::vector> : has_shared<bare<typename T::value_type>> {};
template <class T>
struct has_shared<T, Kind::array> : has_shared<bare<typename T::value_type>> {};
template <class T>
struct has_shared<T, Kind::optional> : has_shared<bare<typename T::value_type>> {};
template <class T>
struct has_shared<T, Kind::map> : has_shared<bare<typename T::mapped_type>> {};
template <class T>
struct has_shared<T, Kind::shared> : std::true_type {};
template <class... Ts>
struct has_shared<std::tuple<Ts...>, Kind::tuple> : std::bool_constant<any_of_v<has_shared<bare<Ts>>::value...>> {};
template <class A, class B>
struct has_shared<std::pair<A, B>, Kind::tuple>
    : std::bool_constant<has_shared<bare<A>>::value || has_shared<bare<B>>::value> {};
template <class... Ts>
struct has_shared<std::variant<Ts...>, Kind::variant>
    : std::bool_constant<any_of_v<has_shared<bare<Ts>>::value...>> {};

// Whether every node of T is a branch or a leaf and every trainable leaf has a real scalar: the recursion of
// scalar_of without its static_asserts, so that an entry point can ask and stop (ptree::tree, not_a_tree).
template <bool... B>
inline constexpr bool all_of_v = !any_of_v<!B...>;

template <class T, Kind K = kind_v<T>>
struct well_formed : std::false_type {};  // Kind::unknown
template <class... Ts>
constexpr bool all_well_formed(children<Ts...>*) {
  return all_of_v<well_formed<bare<Ts>>::value...>;
}
template <class T>
struct well_formed<T, Kind::struct_branch>
    : std::bool_constant<all_well_formed(static_cast<typename T::ptree_children*>(nullptr))> {};
template <class T>
struct well_formed<T, Kind::external_branch>
    : std::bool_constant<all_well_formed(static_cast<typename external<T>::ptree_children*>(nullptr))> {};
template <class T>
struct well_formed<T, Kind::vector> : well_formed<bare<typename T::value_type>> {};
template <class T>
struct well_formed<T, Kind::array> : well_formed<bare<typename T::value_type>> {};
template <class T>
struct well_formed<T, Kind::optional> : well_formed<bare<typename T::value_type>> {};
template <class T>
struct well_formed<T, Kind::map> : well_formed<bare<typename T::mapped_type>> {};
template <class T>
struct well_formed<T, Kind::shared> : well_formed<bare<typename T::element_type>> {};
template <class... Ts>
struct well_formed<std::tuple<Ts...>, Kind::tuple> : std::bool_constant<all_of_v<well_formed<bare<Ts>>::value...>> {};
template <class A, class B>
struct well_formed<std::pair<A, B>, Kind::tuple>
    : std::bool_constant<well_formed<bare<A>>::value && well_formed<bare<B>>::value> {};
template <class... Ts>
struct well_formed<std::variant<Ts...>, Kind::variant>
    : std::bool_constant<all_of_v<well_formed<bare<Ts>>::value...>> {};
template <class T>
struct well_formed<T, Kind::buffer> : std::true_type {};
template <class T>
struct well_formed<T, Kind::eigen_leaf> : std::bool_constant<real_scalar<typename T::Scalar>> {};
template <class T>
struct well_formed<T, Kind::scalar_leaf> : std::bool_constant<real_scalar<T>> {};
template <class T>
struct well_formed<T, Kind::protocol_leaf>
    : std::bool_constant<real_scalar<typename block_scalars<blocks_t<T>>::type>> {};

}  // namespace detail

/// The promoted scalar of all trainable storage of Tree; void when there is none.
template <class Tree>
using scalar_t = typename detail::scalar_of<detail::bare<Tree>>::type;

/// A parameter tree: every node of T is a branch (GEOMOPT_PTREE, GEOMOPT_PTREE_EXTERNAL, a standard container) or a
/// leaf, and every trainable leaf has a floating-point or dual-number scalar.
template <class T>
concept tree = detail::well_formed<detail::bare<T>>::value;

namespace detail {

// Why T is no tree: its first child in walk order that is no tree, followed down to an unknown type or a trainable
// leaf whose scalar is not real. Only ever instantiated for a type that is no tree.
template <class T, Kind K = kind_v<T>>
struct culprit {
  using type = T;  // a leaf or an unknown type
};
template <class... Ts>
struct first_culprit {
  static constexpr std::size_t index = [] {
    constexpr bool good[] = {well_formed<bare<Ts>>::value..., false};
    std::size_t i = 0;
    while (good[i]) ++i;
    return i;
  }();
  using type = typename culprit<bare<std::tuple_element_t<index, std::tuple<Ts...>>>>::type;
};
template <class C>
struct culprit_of_children;
template <class... Ts>
struct culprit_of_children<children<Ts...>> : first_culprit<Ts...> {};
template <class T>
struct culprit<T, Kind::struct_branch> : culprit_of_children<typename T::ptree_children> {};
template <class T>
struct culprit<T, Kind::external_branch> : culprit_of_children<typename external<T>::ptree_children> {};
template <class T>
struct culprit<T, Kind::vector> : culprit<bare<typename T::value_type>> {};
template <class T>
struct culprit<T, Kind::array> : culprit<bare<typename T::value_type>> {};
template <class T>
struct culprit<T, Kind::optional> : culprit<bare<typename T::value_type>> {};
template <class T>
struct culprit<T, Kind::map> : culprit<bare<typename T::mapped_type>> {};
template <class T>
struct culprit<T, Kind::shared> : culprit<bare<typename T::element_type>> {};
template <class... Ts>
struct culprit<std::tuple<Ts...>, Kind::tuple> : first_culprit<Ts...> {};
template <class A, class B>
struct culprit<std::pair<A, B>, Kind::tuple> : first_culprit<A, B> {};
template <class... Ts>
struct culprit<std::variant<Ts...>, Kind::variant> : first_culprit<Ts...> {};

// The static_assert for culprit C: one instantiation per culprit, so the entry points and walks that meet it report
// it once.
template <class C>
void culprit_message() {
  if constexpr (kind_v<C> == Kind::unknown) {
    static_assert(always_false<C>, GEOMOPT_PTREE_DETAIL_UNKNOWN_NODE);
  } else {
    static_assert(always_false<C>, GEOMOPT_PTREE_DETAIL_UNTRAINABLE_LEAF);
  }
}

/// What an entry point (Optimizer::init and step, flatten, save, a walk meeting an unknown node, ...) does with a type
/// that is no tree, in the branch of `if constexpr (ptree::tree<Tree>)` that is compiled then: the static_assert
/// naming the offending type (the culprit, in the compiler's note) and what to declare. Nothing else is compiled for
/// the type, so this is the compiler's first error and its only one.
template <class T>
void not_a_tree() {
  culprit_message<typename culprit<bare<T>>::type>();
}

}  // namespace detail

// ---- rebind ---------------------------------------------------------------------------------------------------

namespace detail {
template <class T, class U>
struct rebind_default {
  using type = T;  // not a template, not a scalar: unchanged (int, std::string, user configuration types)
};
template <class T, class U>
  requires real_scalar<T>
struct rebind_default<T, U> {
  using type = U;
};
template <template <class...> class Tmpl, class... Ts, class U>
  requires(!real_scalar<Tmpl<Ts...>>)
struct rebind_default<Tmpl<Ts...>, U> {
  using type = Tmpl<typename rebind<Ts, U>::type...>;
};
}  // namespace detail

/// rebind<T, U>::type is T with every floating-point (or dual-number) scalar replaced by U. Class templates are
/// rebound through their type arguments; specialise this for types where that rule is wrong.
template <class T, class U>
struct rebind : detail::rebind_default<T, U> {};

template <class T, class U>
struct rebind<const T, U> {
  using type = const typename rebind<T, U>::type;
};
template <class S, int R, int C, int O, int MR, int MC, class U>
struct rebind<Eigen::Matrix<S, R, C, O, MR, MC>, U> {
  using type = Eigen::Matrix<typename rebind<S, U>::type, R, C, O, MR, MC>;
};
template <class S, int R, int C, int O, int MR, int MC, class U>
struct rebind<Eigen::Array<S, R, C, O, MR, MC>, U> {
  using type = Eigen::Array<typename rebind<S, U>::type, R, C, O, MR, MC>;
};
template <class T, std::size_t N, class U>
struct rebind<std::array<T, N>, U> {
  using type = std::array<typename rebind<T, U>::type, N>;
};
template <class T, class A, class U>
struct rebind<std::vector<T, A>, U> {
  using type = std::vector<typename rebind<T, U>::type>;
};
template <class T, class C, class A, class U>
struct rebind<std::map<std::string, T, C, A>, U> {
  using type = std::map<std::string, typename rebind<T, U>::type, C>;
};
template <class T, class U>
struct rebind<std::basic_string<T>, U> {
  using type = std::basic_string<T>;
};

/// Tree with its scalar replaced by U: Dense<double> -> Dense<float> or Dense<ceres::Jet<double, 4>>.
template <class Tree, class U>
using rebind_t = typename rebind<detail::bare<Tree>, U>::type;

}  // namespace geomopt::ptree
