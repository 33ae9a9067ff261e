// Borrowed<M>: a point of the manifold M over memory it does not own (an Eigen::Map of M's value type), satisfying
// the manifold contract (contract.hpp) with M's own workspace, name, retractions and tangent. A parameter tree with
// Borrowed leaves is stepped in place by every optimizer: the numbers that change are the caller's (a PyTorch
// tensor's storage, a std::vector's), with no copy in or out.
//
//   std::vector<float> buffer = ...;                       // column-major rows x cols, a point of M
//   geomopt::Borrowed<Stiefel<float>> w(buffer.data(), rows, cols);
//
// Invariants:
//   - a Borrowed made over memory reads and writes that memory, and never frees it; the memory must outlive it;
//   - a copy owns its numbers (a copy of a tree, such as the optimizers' EMA copy or a solver's iterates, never
//     aliases the caller's memory); so does a leaf rebuilt by ptree (cast, unflatten);
//   - lend(data, rows, cols) points it at other memory (a tensor whose storage moved), writing nothing;
//   - assigning to a Borrowed that borrows writes the numbers into the borrowed memory (the shape must match:
//     std::invalid_argument otherwise, and nothing is written); assigning to one that owns, or to an empty one, takes
//     the source's shape;
//   - copying, assigning and lending follow ptree::OwnedOrBorrowed, which holds the numbers;
//   - as a ptree leaf its storage is the map, and its type name is M's, so a checkpoint of a tree with Borrowed
//     leaves reads back into the owned tree and the other way round.
#pragma once

#include <Eigen/Core>
#include <string>
#include <type_traits>
#include <utility>

#include "geomopt/manifolds/contract.hpp"
#include "geomopt/ptree.hpp"
#include "geomopt/ptree/owned_or_borrowed.hpp"

namespace geomopt {

template <class M>
class Borrowed {
 public:
  using Owned = M;
  using Scalar = typename M::Scalar;
  /// M's value type (a dense Eigen matrix or vector), and the map over borrowed memory.
  using Value = std::remove_cvref_t<decltype(std::declval<const M&>().value())>;
  using Map = Eigen::Map<Value>;
  using Workspace = typename M::Workspace;
  using Tangent = typename M::Tangent;
  static constexpr const char* kName = M::kName;
  static constexpr bool kCompact = M::kCompact;
  static constexpr auto kRetractions = M::kRetractions;

  /// An empty leaf (0 x 0, or length 0), owning nothing.
  Borrowed() = default;
  /// The point whose rows x cols numbers, column-major, are at data.
  Borrowed(Scalar* data, Eigen::Index rows, Eigen::Index cols) : numbers_(data, rows, cols) {}
  /// The point over x's numbers: stepping it steps x.
  explicit Borrowed(M& x) : numbers_(x.value().data(), x.value().rows(), x.value().cols()) {}
  /// A leaf owning v (what ptree's rebuild makes).
  explicit Borrowed(Value v) : numbers_(std::move(v)) {}

  Map& value() noexcept { return numbers_.map(); }
  const Map& value() const noexcept { return numbers_.map(); }
  /// Whether the numbers are the caller's memory (false for a copy, a rebuilt leaf and an empty one).
  bool borrows() const noexcept { return numbers_.borrows(); }
  /// Points the leaf at the rows x cols numbers at data (storage that moved; owned numbers are released); writes
  /// nothing and checks nothing: a step checks the shape against its state.
  void lend(Scalar* data, Eigen::Index rows, Eigen::Index cols) noexcept { numbers_.lend(data, rows, cols); }
  /// The point as an owned M (a copy of the numbers).
  M owned() const requires std::constructible_from<M, Value> { return M(Value(value())); }
  /// M's sizes of this point, where M has them (the Stiefel family's N and n, SPD's n, ...): geomopt::io records them
  /// beside the point, so a file of Borrowed leaves and one of M's read each other. Computed by M on a copy.
  Eigen::Index N() const requires std::constructible_from<M, Value> && requires(const M& m) { m.N(); }
  { return owned().N(); }
  Eigen::Index n() const requires std::constructible_from<M, Value> && requires(const M& m) { m.n(); }
  { return owned().n(); }

  static Tangent tangent_from(const Borrowed& x, const Scalar* c) requires std::constructible_from<M, Value> {
    return M::tangent_from(x.owned(), c);
  }
  static void coordinates_of(const Tangent& xi, Scalar* c) { M::coordinates_of(xi, c); }
  static Eigen::Index tangent_size(Eigen::Index rows, Eigen::Index cols) { return M::tangent_size(rows, cols); }

  static std::string leaf_name() {
    // Appended in place: g++ 12 warns (-Warray-bounds, a false positive) on the inlined operator+ chain.
    std::string name = "Borrowed<";
    name.append(kName).append(">");
    return name;
  }

 private:
  ptree::OwnedOrBorrowed<Value, Borrowed> numbers_;
};

// The ptree leaf protocol: the storage is the map; a rebuilt leaf owns its numbers; the type name is M's.
template <class M>
typename Borrowed<M>::Map& free_parameters(Borrowed<M>& x) {
  return x.value();
}
template <class M>
const typename Borrowed<M>::Map& free_parameters(const Borrowed<M>& x) {
  return x.value();
}
template <class M, class U, int R, int C>
auto rebuild(const Borrowed<M>& prototype, Eigen::Matrix<U, R, C>&& data) {
  using Out = Borrowed<ptree::rebind_t<M, U>>;
  return Out(ptree::rebuilt_value<typename Out::Value, Borrowed<M>>(prototype.value().rows(), prototype.value().cols(),
                                                                    std::move(data)));
}
template <class M>
std::string ptree_type_name(const Borrowed<M>&) {
  return M::kName;
}

}  // namespace geomopt
