// What every manifold point type shares: it holds its dense value (a matrix, or a vector for the sphere) and is a
// ptree leaf whose storage is that value. Any value can be held, so a tree of Euclidean gradients has the type of the
// tree of points it differentiates; check() tells how far a value is from the manifold.
#pragma once

#include <Eigen/Core>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "geomopt/ptree.hpp"

namespace geomopt::detail {

template <class T, class Value>
class PointBase {
 public:
  using Scalar = T;
  using value_type = Value;
  static constexpr bool kManifoldPoint = true;

  PointBase() = default;
  explicit PointBase(Value v) : v_(std::move(v)) {}

  Value& value() noexcept { return v_; }
  const Value& value() const noexcept { return v_; }

 protected:
  Value v_;
};

template <class M>
concept manifold_point = requires { requires std::remove_cvref_t<M>::kManifoldPoint; };

// The ambient matrix of a gradient or tangent vector given as a matrix, a vector or a point of a gradient tree: a
// reference to it when it already is a dynamic matrix of T, a converted copy otherwise.
template <class T, class G>
decltype(auto) ambient_matrix(const G& g) {
  if constexpr (manifold_point<G>) {
    return ambient_matrix<T>(g.value());
  } else if constexpr (std::is_same_v<G, Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>>) {
    return (g);
  } else {
    return Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>(g.template cast<T>());
  }
}

}  // namespace geomopt::detail

namespace geomopt {

// The ptree leaf protocol for every manifold point: the storage is the dense value; rebuild keeps the shape.
template <detail::manifold_point M>
auto& free_parameters(M& x) {
  return x.value();
}
template <detail::manifold_point M>
const auto& free_parameters(const M& x) {
  return x.value();
}
template <template <class> class M, class T, class U, int R, int C>
  requires detail::manifold_point<M<T>>
M<U> rebuild(const M<T>& prototype, Eigen::Matrix<U, R, C>&& data) {
  if (data.rows() != prototype.value().rows() || data.cols() != prototype.value().cols())
    throw std::invalid_argument(std::string(M<T>::kName) + "::rebuild: value of shape " +
                                std::to_string(data.rows()) + "x" + std::to_string(data.cols()) + ", expected " +
                                std::to_string(prototype.value().rows()) + "x" +
                                std::to_string(prototype.value().cols()));
  return M<U>(std::move(data));
}
template <detail::manifold_point M>
std::string ptree_type_name(const M&) {
  return M::kName;
}

}  // namespace geomopt
