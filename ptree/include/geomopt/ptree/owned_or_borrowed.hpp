// OwnedOrBorrowed<Value, Leaf>: the storage of a leaf whose numbers are either someone else's memory (borrowed: a
// PyTorch tensor's storage, a std::vector's) or its own (owned), seen through one Eigen::Map<Value> either way. It is
// the one place that says how such leaves copy, move, assign and re-point; ptree::BorrowedArray and geomopt::Borrowed
// hold one and forward to it.
//
// Leaf names the leaf in errors: Leaf::leaf_name() returns its name ("BorrowedArray", "Borrowed<Stiefel>").
//
// Invariants:
//   - storage made over memory reads and writes that memory, and never frees it; the memory must outlive it;
//   - a copy owns its numbers (a copy of a tree, such as an optimizer's EMA or a solver's iterates, never aliases the
//     caller's memory);
//   - assigning to storage that borrows writes the numbers into the borrowed memory (the shape must match:
//     std::invalid_argument naming the leaf otherwise, and nothing is written); assigning to storage that owns, or
//     to an empty one, takes the source's shape, and moving from a borrowing source borrows the same memory;
//   - lend(data, rows, cols) points it at other memory, releasing owned numbers and writing nothing; lending null
//     data (a tensor without a gradient) leaves it empty, whatever rows and cols say;
//   - a column-vector Value (ColsAtCompileTime == 1) maps rows numbers; its cols is 1, or 0 for an empty map.
#pragma once

#include <Eigen/Core>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

namespace geomopt::ptree {

template <class Value, class Leaf>
class OwnedOrBorrowed {
 public:
  using Scalar = typename Value::Scalar;
  using Map = Eigen::Map<Value>;

  /// Empty (0 x 0, or length 0), owning nothing.
  OwnedOrBorrowed() : map_(map_of(nullptr, 0, 0)) {}
  /// The rows x cols numbers at data, in Value's storage order.
  OwnedOrBorrowed(Scalar* data, Eigen::Index rows, Eigen::Index cols) : map_(map_of(data, rows, cols)) {}
  /// Owning v.
  explicit OwnedOrBorrowed(Value v) : owned_(std::make_unique<Value>(std::move(v))), map_(map_of(nullptr, 0, 0)) {
    remap();
  }

  OwnedOrBorrowed(const OwnedOrBorrowed& other) : OwnedOrBorrowed(Value(other.map_)) {}
  OwnedOrBorrowed(OwnedOrBorrowed&& other) noexcept : owned_(std::move(other.owned_)), map_(other.map_) {
    other.reset();
  }
  OwnedOrBorrowed& operator=(const OwnedOrBorrowed& other) {
    if (this != &other) assign(other.map_);
    return *this;
  }
  OwnedOrBorrowed& operator=(OwnedOrBorrowed&& other) {
    if (this == &other) return *this;
    if (borrows()) {
      assign(other.map_);
    } else {
      owned_ = std::move(other.owned_);
      if (owned_) {
        remap();
      } else {
        new (&map_) Map(other.map_);  // other borrows: this borrows the same memory
      }
      other.reset();
    }
    return *this;
  }
  ~OwnedOrBorrowed() = default;

  Map& map() noexcept { return map_; }
  const Map& map() const noexcept { return map_; }
  /// Whether the numbers are someone else's memory (false when owned or empty).
  bool borrows() const noexcept { return !owned_ && map_.data() != nullptr; }
  /// Points the map at the rows x cols numbers at data (owned numbers are released), or empties it when data is
  /// null; writes nothing.
  void lend(Scalar* data, Eigen::Index rows, Eigen::Index cols) noexcept {
    owned_.reset();
    new (&map_) Map(data != nullptr ? map_of(data, rows, cols) : map_of(nullptr, 0, 0));
  }

 private:
  static Map map_of(Scalar* data, Eigen::Index rows, Eigen::Index cols) {
    if constexpr (Value::ColsAtCompileTime == 1) {
      return Map(data, cols == 0 ? 0 : rows);
    } else {
      return Map(data, rows, cols);
    }
  }
  void remap() { new (&map_) Map(map_of(owned_->data(), owned_->rows(), owned_->cols())); }
  void reset() noexcept {
    owned_.reset();
    new (&map_) Map(map_of(nullptr, 0, 0));
  }
  template <class Other>
  void assign(const Other& source) {
    if (borrows()) {
      if (source.rows() != map_.rows() || source.cols() != map_.cols())
        throw std::invalid_argument(Leaf::leaf_name() + ": cannot write a " + std::to_string(source.rows()) + "x" +
                                    std::to_string(source.cols()) + " value into borrowed memory of shape " +
                                    std::to_string(map_.rows()) + "x" + std::to_string(map_.cols()));
      map_ = source;
    } else {
      owned_ = std::make_unique<Value>(source);
      remap();
    }
  }

  std::unique_ptr<Value> owned_;
  Map map_;
};

/// The value a rebuilt leaf owns (ptree's rebuild: cast, unflatten): data, which must have the prototype leaf's
/// rows x cols (std::invalid_argument naming the leaf otherwise).
template <class Value, class Leaf, class Data>
Value rebuilt_value(Eigen::Index rows, Eigen::Index cols, Data&& data) {
  if (data.rows() != rows || data.cols() != cols)
    throw std::invalid_argument(Leaf::leaf_name() + "::rebuild: value of shape " + std::to_string(data.rows()) + "x" +
                                std::to_string(data.cols()) + ", expected " + std::to_string(rows) + "x" +
                                std::to_string(cols));
  return Value(std::forward<Data>(data));
}

}  // namespace geomopt::ptree
