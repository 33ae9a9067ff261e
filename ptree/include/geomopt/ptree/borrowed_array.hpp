// BorrowedArray<T>: a Euclidean leaf over numbers it does not own, rows x cols in row-major order (a C-ordered
// array's layout: a PyTorch tensor's or a NumPy array's storage), so that a tree of them steps someone else's memory
// in place, with no copy in or out.
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
//   - as a ptree leaf its storage is the row-major map, one block; an empty one (0 x 0) is a missing gradient.
#pragma once

#include <Eigen/Core>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

namespace geomopt::ptree {

template <class T>
class BorrowedArray {
 public:
  using Scalar = T;
  using Value = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Map = Eigen::Map<Value>;

  /// An empty leaf (0 x 0), owning nothing.
  BorrowedArray() : map_(nullptr, 0, 0) {}
  /// The rows x cols numbers at data, row-major.
  BorrowedArray(T* data, Eigen::Index rows, Eigen::Index cols) : map_(data, rows, cols) {}
  /// A leaf owning v (what ptree's rebuild makes).
  explicit BorrowedArray(Value v) : owned_(std::make_unique<Value>(std::move(v))), map_(nullptr, 0, 0) { remap(); }

  BorrowedArray(const BorrowedArray& other) : BorrowedArray(Value(other.map_)) {}
  BorrowedArray(BorrowedArray&& other) noexcept : owned_(std::move(other.owned_)), map_(other.map_) { other.reset(); }
  BorrowedArray& operator=(const BorrowedArray& other) {
    if (this != &other) assign(other.map_);
    return *this;
  }
  BorrowedArray& operator=(BorrowedArray&& other) {
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
  ~BorrowedArray() = default;

  Map& value() noexcept { return map_; }
  const Map& value() const noexcept { return map_; }
  /// Whether the numbers are the caller's memory (false for a copy, a rebuilt leaf and an empty one).
  bool borrows() const noexcept { return !owned_ && map_.data() != nullptr; }
  /// Points the leaf at the rows x cols numbers at data (owned numbers are released); writes nothing.
  void lend(T* data, Eigen::Index rows, Eigen::Index cols) noexcept {
    owned_.reset();
    new (&map_) Map(data, rows, cols);
  }

 private:
  void remap() { new (&map_) Map(owned_->data(), owned_->rows(), owned_->cols()); }
  void reset() noexcept {
    owned_.reset();
    new (&map_) Map(nullptr, 0, 0);
  }
  template <class Other>
  void assign(const Other& source) {
    if (borrows()) {
      if (source.rows() != map_.rows() || source.cols() != map_.cols())
        throw std::invalid_argument("BorrowedArray: cannot write a " + std::to_string(source.rows()) + "x" +
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

// The leaf protocol: the storage is the map; a rebuilt leaf owns its numbers.
template <class T>
typename BorrowedArray<T>::Map& free_parameters(BorrowedArray<T>& x) {
  return x.value();
}
template <class T>
const typename BorrowedArray<T>::Map& free_parameters(const BorrowedArray<T>& x) {
  return x.value();
}
template <class T, class U, int R, int C, int O>
BorrowedArray<U> rebuild(const BorrowedArray<T>& prototype, Eigen::Matrix<U, R, C, O>&& data) {
  if (data.rows() != prototype.value().rows() || data.cols() != prototype.value().cols())
    throw std::invalid_argument("BorrowedArray::rebuild: value of shape " + std::to_string(data.rows()) + "x" +
                                std::to_string(data.cols()) + ", expected " + std::to_string(prototype.value().rows()) +
                                "x" + std::to_string(prototype.value().cols()));
  return BorrowedArray<U>(typename BorrowedArray<U>::Value(std::move(data)));
}

}  // namespace geomopt::ptree
