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
//   - as a ptree leaf its storage is the map, and its type name is M's, so a checkpoint of a tree with Borrowed
//     leaves reads back into the owned tree and the other way round.
#pragma once

#include <Eigen/Core>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "geomopt/manifolds/contract.hpp"
#include "geomopt/ptree.hpp"

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
  /// The columns of an empty map: a vector type has exactly one (Eigen asserts it), a matrix none.
  static constexpr Eigen::Index kEmptyCols = Value::ColsAtCompileTime == 1 ? 1 : 0;

  /// An empty leaf (0 x 0, or length 0), owning nothing.
  Borrowed() : map_(nullptr, 0, kEmptyCols) {}
  /// The point whose rows x cols numbers, column-major, are at data.
  Borrowed(Scalar* data, Eigen::Index rows, Eigen::Index cols) : map_(data, rows, cols) {}
  /// The point over x's numbers: stepping it steps x.
  explicit Borrowed(M& x) : map_(x.value().data(), x.value().rows(), x.value().cols()) {}
  /// A leaf owning v (what ptree's rebuild makes).
  explicit Borrowed(Value v) : owned_(std::make_unique<Value>(std::move(v))), map_(nullptr, 0, kEmptyCols) { remap(); }

  Borrowed(const Borrowed& other) : Borrowed(Value(other.map_)) {}
  Borrowed(Borrowed&& other) noexcept : owned_(std::move(other.owned_)), map_(other.map_) { other.reset(); }
  Borrowed& operator=(const Borrowed& other) {
    if (this != &other) assign(other.map_);
    return *this;
  }
  Borrowed& operator=(Borrowed&& other) {
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
  ~Borrowed() = default;

  Map& value() noexcept { return map_; }
  const Map& value() const noexcept { return map_; }
  /// Whether the numbers are the caller's memory (false for a copy, a rebuilt leaf and an empty one).
  bool borrows() const noexcept { return !owned_ && map_.data() != nullptr; }
  /// Points the leaf at the rows x cols numbers at data (storage that moved; owned numbers are released); writes
  /// nothing and checks nothing: a step checks the shape against its state.
  void lend(Scalar* data, Eigen::Index rows, Eigen::Index cols) noexcept {
    owned_.reset();
    new (&map_) Map(data, rows, cols);
  }
  /// The point as an owned M (a copy of the numbers).
  M owned() const requires std::constructible_from<M, Value> { return M(Value(map_)); }

  static Tangent tangent_from(const Borrowed& x, const Scalar* c) requires std::constructible_from<M, Value> {
    return M::tangent_from(x.owned(), c);
  }
  static void coordinates_of(const Tangent& xi, Scalar* c) { M::coordinates_of(xi, c); }
  static Eigen::Index tangent_size(Eigen::Index rows, Eigen::Index cols) { return M::tangent_size(rows, cols); }

 private:
  void remap() { new (&map_) Map(owned_->data(), owned_->rows(), owned_->cols()); }
  void reset() noexcept {
    owned_.reset();
    new (&map_) Map(nullptr, 0, kEmptyCols);
  }
  template <class Other>
  void assign(const Other& source) {
    if (borrows()) {
      if (source.rows() != map_.rows() || source.cols() != map_.cols())
        throw std::invalid_argument(std::string("Borrowed<") + kName + ">: cannot write a " +
                                    std::to_string(source.rows()) + "x" + std::to_string(source.cols()) +
                                    " value into borrowed memory of shape " + std::to_string(map_.rows()) + "x" +
                                    std::to_string(map_.cols()));
      map_ = source;
    } else {
      owned_ = std::make_unique<Value>(source);
      remap();
    }
  }

  std::unique_ptr<Value> owned_;
  Map map_;
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
  if (data.rows() != prototype.value().rows() || data.cols() != prototype.value().cols())
    throw std::invalid_argument(std::string(M::kName) + "::rebuild: value of shape " + std::to_string(data.rows()) +
                                "x" + std::to_string(data.cols()) + ", expected " +
                                std::to_string(prototype.value().rows()) + "x" +
                                std::to_string(prototype.value().cols()));
  return Out(typename Out::Value(std::move(data)));
}
template <class M>
std::string ptree_type_name(const Borrowed<M>&) {
  return M::kName;
}

}  // namespace geomopt
