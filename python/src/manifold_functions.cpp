#include "manifold_functions.hpp"

#include <pybind11/numpy.h>

#include <Eigen/Core>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "engine.hpp"
#include "geomopt/manifolds.hpp"

namespace py = pybind11;

namespace geomopt::python {
namespace {

template <class T>
using Array = py::array_t<T, py::array::c_style | py::array::forcecast>;

// Calls f(std::type_identity<M>{}) for the point type M of a kind (geomopt::with_point_type).
template <class T, class F>
py::object with_manifold(int kind, F&& f) {
  return with_point_type<T>(static_cast<Kind>(kind), std::forward<F>(f));
}

// M's point holding the array's numbers (rows x cols, column-major); the array's size must be rows * cols.
template <class M, class T>
M point_of(const Array<T>& a, Eigen::Index rows, Eigen::Index cols) {
  using Value = geomopt::detail::PlainValue<M>;
  if (a.size() != rows * cols)
    throw std::invalid_argument(std::string(M::kName) + ": " + std::to_string(a.size()) + " numbers for a " +
                                std::to_string(rows) + "x" + std::to_string(cols) + " point");
  if constexpr (Value::ColsAtCompileTime == 1) {
    if (cols != 1)
      throw std::invalid_argument(std::string(M::kName) + ": a point is a column, not " + std::to_string(cols) +
                                  " columns");
    return M(Value(Eigen::Map<const Value>(a.data(), rows)));
  } else {
    return M(Value(Eigen::Map<const Value>(a.data(), rows, cols)));
  }
}

// A (cols, rows) C-ordered array of a column-major rows x cols value.
template <class V>
py::object array_of(const V& v) {
  using T = typename V::Scalar;
  Array<T> out({static_cast<py::ssize_t>(v.cols()), static_cast<py::ssize_t>(v.rows())});
  Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>>(out.mutable_data(), v.rows(), v.cols()) = v;
  return out;
}

template <class M>
py::object coordinates_array(const M& x, const typename M::Tangent& xi) {
  using T = typename M::Scalar;
  Array<T> out({static_cast<py::ssize_t>(dim(x))});
  M::coordinates_of(xi, out.mutable_data());
  return out;
}

template <class M, class T>
typename M::Tangent tangent_of(const M& x, const Array<T>& c) {
  if (c.ndim() != 1 || c.size() != dim(x))
    throw std::invalid_argument(std::string(M::kName) + ": a tangent at this point has " + std::to_string(dim(x)) +
                                " coordinates, got an array of " + std::to_string(c.size()));
  return M::tangent_from(x, c.data());
}

template <class M>
Retraction retraction_of(const std::string& name) {
  const auto r = detail::retraction_named(name);
  return r ? *r : default_retraction<M>();
}

template <class T>
void bind_scalar(py::module_& m) {
  using Idx = Eigen::Index;
  m.def("manifold_check", [](int kind, Array<T> x, Idx rows, Idx cols) {
    return with_manifold<T>(kind, [&]<class M>(std::type_identity<M>) {
      return py::cast(static_cast<double>(check(point_of<M>(x, rows, cols))));
    });
  });
  m.def("manifold_project", [](int kind, Array<T> x, Idx rows, Idx cols) {
    return with_manifold<T>(kind, [&]<class M>(std::type_identity<M>) {
      M p = point_of<M>(x, rows, cols);
      project(p);
      return array_of(p.value());
    });
  });
  m.def("manifold_dim", [](int kind, Array<T> x, Idx rows, Idx cols) {
    return with_manifold<T>(kind, [&]<class M>(std::type_identity<M>) {
      return py::cast(static_cast<std::int64_t>(dim(point_of<M>(x, rows, cols))));
    });
  });
  m.def("manifold_lift", [](int kind, Array<T> x, Array<T> g, Idx rows, Idx cols) {
    return with_manifold<T>(kind, [&]<class M>(std::type_identity<M>) {
      const M p = point_of<M>(x, rows, cols);
      if (g.size() != rows * cols)
        throw std::invalid_argument(std::string(M::kName) + "::lift: the gradient has " + std::to_string(g.size()) +
                                    " numbers, the point " + std::to_string(rows * cols));
      using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
      return coordinates_array(p, lift(p, Matrix(Eigen::Map<const Matrix>(g.data(), rows, cols))));
    });
  });
  m.def("manifold_retract", [](int kind, Array<T> x, Array<T> c, Idx rows, Idx cols, const std::string& r) {
    return with_manifold<T>(kind, [&]<class M>(std::type_identity<M>) {
      M p = point_of<M>(x, rows, cols);
      retract(p, tangent_of(p, c), retraction_of<M>(r));
      return array_of(p.value());
    });
  });
  m.def("manifold_inverse_retract", [](int kind, Array<T> x, Array<T> y, Idx rows, Idx cols, const std::string& r) {
    return with_manifold<T>(kind, [&]<class M>(std::type_identity<M>) {
      const M p = point_of<M>(x, rows, cols);
      const M q = point_of<M>(y, rows, cols);
      return coordinates_array(p, inverse_retract(p, q.value(), retraction_of<M>(r)));
    });
  });
}

}  // namespace

void bind_manifold_functions(py::module_& m) {
  bind_scalar<double>(m);
  bind_scalar<float>(m);
  // A random point: the manifold's own distribution (M::random_point), drawn by std::mt19937_64 from the seed.
  m.def("manifold_random_point",
        [](int kind, bool is_double, Eigen::Index rows, Eigen::Index cols, std::uint64_t seed) {
          std::mt19937_64 rng(seed);
          auto draw = [&]<class M>(std::type_identity<M>) -> py::object {
            if constexpr (requires { M::random_point(rng, rows, cols); }) {  // Stiefel, Grassmann, Oblique: N x n
              return array_of(M::random_point(rng, rows, cols).value());
            } else if constexpr (std::is_same_v<M, Lorentz<typename M::Scalar>>) {  // H^n: n + 1 entries
              if (rows < 1) throw std::invalid_argument("Lorentz: a point has at least one entry");
              return array_of(M::random_point(rng, rows - 1).value());
            } else {  // by their one size: Sphere's N (cols is 1), SO(n)'s and SPD's n
              return array_of(M::random_point(rng, rows).value());
            }
          };
          return is_double ? with_manifold<double>(kind, draw) : with_manifold<float>(kind, draw);
        });
}

}  // namespace geomopt::python
