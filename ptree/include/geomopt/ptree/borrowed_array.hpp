// BorrowedArray<T>: a Euclidean leaf over numbers it does not own, rows x cols in row-major order (a C-ordered
// array's layout: a PyTorch tensor's or a NumPy array's storage), so that a tree of them steps someone else's memory
// in place, with no copy in or out. BorrowedArray<T, 1> is the column-vector form (a 1-D array), cols always 1.
//
//   std::vector<float> weight(4 * 3);                        // rows-major 4 x 3
//   geomopt::ptree::BorrowedArray<float> w(weight.data(), 4, 3);
//
// Invariants:
//   - a BorrowedArray made over memory reads and writes that memory, and never frees it; the memory must outlive it;
//   - a copy owns its numbers (an optimizer's moving average of a tree of them never aliases the caller's memory),
//     and so does a leaf ptree rebuilds (cast, unflatten);
//   - assigning to one that borrows writes the numbers into the borrowed memory (the shape must match:
//     std::invalid_argument otherwise, and nothing is written); assigning to one that owns, or to an empty one, takes
//     the source's shape;
//   - lend(data, rows, cols) points it at other memory (storage that moved), writing nothing;
//   - copying, assigning and lending follow ptree::OwnedOrBorrowed, which holds the numbers;
//   - as a ptree leaf its storage is the map, one block; an empty one (0 x 0) is a missing gradient;
//   - it is a plain array to geomopt::io (ptree_plain_leaf): saved as a dataset of its shape, (rows, cols) or, for
//     the vector form, (rows,), as an Eigen matrix or vector leaf is, so files move between the two.
#pragma once

#include <Eigen/Core>
#include <string>
#include <type_traits>
#include <utility>

#include "geomopt/ptree/owned_or_borrowed.hpp"

namespace geomopt::ptree {

template <class T, int Cols = Eigen::Dynamic>
class BorrowedArray {
  static_assert(Cols == Eigen::Dynamic || Cols == 1, "BorrowedArray: Cols is Eigen::Dynamic (a matrix) or 1");

 public:
  using Scalar = T;
  using Value = std::conditional_t<Cols == 1, Eigen::Matrix<T, Eigen::Dynamic, 1>,
                                   Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
  using Map = Eigen::Map<Value>;

  /// An empty leaf (0 x 0), owning nothing.
  BorrowedArray() = default;
  /// The rows x cols numbers at data, row-major (the vector form: rows numbers; cols must be 1, or 0 when empty).
  BorrowedArray(T* data, Eigen::Index rows, Eigen::Index cols) : numbers_(data, rows, cols) {}
  /// A leaf owning v (what ptree's rebuild makes).
  explicit BorrowedArray(Value v) : numbers_(std::move(v)) {}

  Map& value() noexcept { return numbers_.map(); }
  const Map& value() const noexcept { return numbers_.map(); }
  /// Whether the numbers are the caller's memory (false for a copy, a rebuilt leaf and an empty one).
  bool borrows() const noexcept { return numbers_.borrows(); }
  /// Points the leaf at the rows x cols numbers at data (owned numbers are released); writes nothing.
  void lend(T* data, Eigen::Index rows, Eigen::Index cols) noexcept { numbers_.lend(data, rows, cols); }

  static std::string leaf_name() { return "BorrowedArray"; }

 private:
  OwnedOrBorrowed<Value, BorrowedArray> numbers_;
};

// The leaf protocol: the storage is the map; a rebuilt leaf owns its numbers.
template <class T, int C>
typename BorrowedArray<T, C>::Map& free_parameters(BorrowedArray<T, C>& x) {
  return x.value();
}
template <class T, int C>
const typename BorrowedArray<T, C>::Map& free_parameters(const BorrowedArray<T, C>& x) {
  return x.value();
}
/// A plain array, not a structured leaf: geomopt::io saves a leaf that has this function as one dataset of its shape.
template <class T, int C>
constexpr bool ptree_plain_leaf(const BorrowedArray<T, C>&) {
  return true;
}
template <class T, int Cols, class U, int R, int C, int O>
BorrowedArray<U, Cols> rebuild(const BorrowedArray<T, Cols>& prototype, Eigen::Matrix<U, R, C, O>&& data) {
  using Out = BorrowedArray<U, Cols>;
  return Out(rebuilt_value<typename Out::Value, BorrowedArray<T, Cols>>(prototype.value().rows(),
                                                                        prototype.value().cols(), std::move(data)));
}

}  // namespace geomopt::ptree
