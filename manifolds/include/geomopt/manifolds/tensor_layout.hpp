// Tensor layout: how the memory of a row-major (C-ordered) tensor, a PyTorch or NumPy array, is a leaf geomopt steps
// in place. One rule for every binding to a tensor library (geomopt.torch in Python, geomopt::libtorch in C++).
//
// geomopt's manifold kernels read a point column-major, so a tensor X of shape (a, b) is, in memory, the b x a point
// X^T, and geomopt steps exactly that, with no copy:
//   - Stiefel and Grassmann: the shorter side of X is orthonormal (as torch's `orthogonal` parametrization has it):
//     X X^T = I for a wide or square X (a <= b), the St(b, a) point X^T; a tall X (a > b, X^T X = I) is the one case
//     memory does not give: `transposed`, the binding steps a column-major copy of X, the St(a, b) point X;
//   - Oblique: each row of X has unit norm (the columns of X^T);
//   - SpecialOrthogonal and SPD: a square X (X^T is in SO(n) or SPD exactly when X is);
//   - Sphere: unit Frobenius norm, any shape: the vector of all entries;
//   - Lorentz: a vector of n + 1 entries.
// A Euclidean tensor is a row-major rows x cols array: its first dimension by the product of the others (a 0-D
// tensor 1 x 1, a 1-D one of n entries n x 1, marked `vector`).
//
// Each kind names its manifold's point type in one place, with_point_type, which the bindings call to make leaves and
// to dispatch functions on points.
//
// tensor_layout throws std::invalid_argument saying what shape the kind needs; with_point_type throws for a kind that
// is no manifold; nothing else here can fail.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "geomopt/manifolds/grassmann/grassmann.hpp"
#include "geomopt/manifolds/lorentz/lorentz.hpp"
#include "geomopt/manifolds/oblique/oblique.hpp"
#include "geomopt/manifolds/spd/spd.hpp"
#include "geomopt/manifolds/special_orthogonal/special_orthogonal.hpp"
#include "geomopt/manifolds/sphere/sphere.hpp"
#include "geomopt/manifolds/stiefel/stiefel.hpp"

namespace geomopt {

/// What a tensor is: Euclidean, or a point of one of the manifolds. The order is the bindings' numbering (Python's
/// geomopt.Manifold.kind), append only.
enum class TensorKind : int { euclidean, stiefel, grassmann, sphere, special_orthogonal, spd, oblique, lorentz };

inline constexpr int kTensorKinds = 8;

/// Calls f(std::type_identity<M>{}) for the point type M, over scalar T, of a manifold kind; std::invalid_argument for
/// the Euclidean kind and for a value outside the enumeration. The one place a kind meets its manifold's type.
template <class T, class F>
decltype(auto) with_point_type(TensorKind kind, F&& f) {
  switch (kind) {
    case TensorKind::stiefel:
      return f(std::type_identity<Stiefel<T>>{});
    case TensorKind::grassmann:
      return f(std::type_identity<Grassmann<T>>{});
    case TensorKind::sphere:
      return f(std::type_identity<Sphere<T>>{});
    case TensorKind::special_orthogonal:
      return f(std::type_identity<SpecialOrthogonal<T>>{});
    case TensorKind::spd:
      return f(std::type_identity<SPD<T>>{});
    case TensorKind::oblique:
      return f(std::type_identity<Oblique<T>>{});
    case TensorKind::lorentz:
      return f(std::type_identity<Lorentz<T>>{});
    case TensorKind::euclidean:
      break;
  }
  throw std::invalid_argument("geomopt: tensor kind " + std::to_string(static_cast<int>(kind)) +
                              " is no manifold's point");
}

/// "Euclidean", or the manifold's name (M::kName); "unknown" outside the enumeration.
inline const char* tensor_kind_name(TensorKind kind) noexcept {
  const int k = static_cast<int>(kind);
  if (k <= 0 || k >= kTensorKinds) return k == 0 ? "Euclidean" : "unknown";
  return with_point_type<double>(kind, []<class M>(std::type_identity<M>) { return M::kName; });
}

/// The leaf geomopt sees for a tensor: rows x cols (column-major for a manifold point, row-major for a Euclidean
/// array), whether it goes through a column-major copy (a tall Stiefel or Grassmann tensor), and whether it is a
/// vector (a Euclidean tensor of 0 or 1 dimensions).
struct TensorLayout {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  bool transposed = false;
  bool vector = false;
};

namespace detail {

inline std::string shape_text(std::span<const std::int64_t> shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

}  // namespace detail

/// The layout of a tensor of `shape` as a leaf of `kind`; std::invalid_argument ("Stiefel needs a matrix (2-D
/// tensor), got shape (4,)") when the kind cannot have that shape.
inline TensorLayout tensor_layout(TensorKind kind, std::span<const std::int64_t> shape) {
  const std::string name = tensor_kind_name(kind);
  auto fail = [&](const std::string& what) -> TensorLayout {
    throw std::invalid_argument(name + " needs " + what + ", got shape " + detail::shape_text(shape));
  };
  std::int64_t entries = 1;
  for (std::int64_t d : shape) {
    if (d < 0) fail("non-negative dimensions");
    entries *= d;
  }
  auto matrix = [&] {
    if (shape.size() != 2) fail("a matrix (2-D tensor)");
  };
  switch (kind) {
    case TensorKind::euclidean: {
      if (shape.size() <= 1) return {entries, 1, false, true};
      std::int64_t rest = 1;
      for (std::size_t i = 1; i < shape.size(); ++i) rest *= shape[i];
      return {shape[0], rest, false, false};
    }
    case TensorKind::stiefel:
    case TensorKind::grassmann: {
      matrix();
      const std::int64_t a = shape[0], b = shape[1];
      if (a == 0 || b == 0) fail("a non-empty matrix");
      return a <= b ? TensorLayout{b, a, false, false} : TensorLayout{a, b, true, false};
    }
    case TensorKind::sphere:
      if (entries == 0) fail("a non-empty tensor");
      return {entries, 1, false, false};
    case TensorKind::special_orthogonal:
    case TensorKind::spd:
      matrix();
      if (shape[0] != shape[1] || shape[0] == 0) fail("a non-empty square matrix");
      return {shape[0], shape[0], false, false};
    case TensorKind::oblique:
      matrix();
      if (shape[1] == 0) fail("rows of at least one entry");
      return {shape[1], shape[0], false, false};
    case TensorKind::lorentz:
      if (shape.size() != 1 || shape[0] == 0) fail("a non-empty vector (1-D tensor)");
      return {shape[0], 1, false, false};
  }
  throw std::invalid_argument("unknown tensor kind " + std::to_string(static_cast<int>(kind)));
}

/// How far (check()) a tensor handed to a binding as a manifold point may be from its manifold: sqrt of the
/// machine epsilon of T, relaxed for large points, max(1, sqrt(rows cols) / 8) times (a float32 St(768, 64) frame from
/// torch's QR is about 2e-6 off).
template <class T>
double tensor_point_tolerance(std::int64_t rows, std::int64_t cols) {
  const double eps = static_cast<double>(std::numeric_limits<T>::epsilon());
  return std::sqrt(eps) * std::max(1.0, std::sqrt(static_cast<double>(rows) * static_cast<double>(cols)) / 8);
}

}  // namespace geomopt
