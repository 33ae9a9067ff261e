// The tensor layout rule (manifolds/tensor_layout.hpp), against what it promises of a row-major tensor's memory:
//   - a tensor that satisfies its kind's defining condition as a row-major array (orthonormal rows of a wide matrix,
//     unit rows, an orthogonal or symmetric positive definite square) is, read column-major with the layout's rows x
//     cols, a point of the manifold (check() at rounding); a tall Stiefel tensor is the one marked `transposed`;
//   - Euclidean shapes: first dimension by the product of the others, 0-D and 1-D tensors as vectors;
//   - a shape the kind cannot have throws std::invalid_argument saying what was needed and the shape given;
//   - with_point_type names each manifold kind's point type, whose kName is tensor_kind_name; the Euclidean kind and
//     values outside the enumeration throw.
#include <doctest/doctest.h>

#include <Eigen/Dense>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "geomopt/manifolds/api.hpp"
#include "geomopt/manifolds/tensor_layout.hpp"

using geomopt::TensorKind;
using geomopt::TensorLayout;
using RowMajor = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ColMajor = Eigen::MatrixXd;

namespace {

TensorLayout layout(TensorKind kind, std::vector<std::int64_t> shape) { return geomopt::tensor_layout(kind, shape); }

// The defect (check()) of the point of `kind` the row-major tensor x is, read as its layout says.
double defect_as_point(TensorKind kind, const RowMajor& x) {
  const TensorLayout l = layout(kind, {x.rows(), x.cols()});
  CHECK_FALSE(l.transposed);
  REQUIRE(l.rows * l.cols == x.size());
  const ColMajor memory = Eigen::Map<const ColMajor>(x.data(), l.rows, l.cols);
  return geomopt::with_point_type<double>(kind, [&]<class M>(std::type_identity<M>) {
    return static_cast<double>(geomopt::check(M(geomopt::detail::PlainValue<M>(memory))));
  });
}

// A rows x cols matrix with orthonormal rows (rows <= cols), from the QR of a random matrix.
RowMajor orthonormal_rows(Eigen::Index rows, Eigen::Index cols) {
  const ColMajor q = Eigen::HouseholderQR<ColMajor>(ColMajor::Random(cols, cols)).householderQ();
  return q.leftCols(rows).transpose();
}

}  // namespace

TEST_CASE("a row-major tensor that satisfies its kind's condition is a point where the layout says") {
  CHECK(defect_as_point(TensorKind::stiefel, orthonormal_rows(3, 7)) < 1e-13);
  CHECK(defect_as_point(TensorKind::stiefel, orthonormal_rows(5, 5)) < 1e-13);
  CHECK(defect_as_point(TensorKind::grassmann, orthonormal_rows(2, 6)) < 1e-13);

  RowMajor q = orthonormal_rows(4, 4);
  if (q.determinant() < 0) q.row(0) *= -1;
  CHECK(defect_as_point(TensorKind::special_orthogonal, q) < 1e-13);

  const ColMajor a = ColMajor::Random(4, 4);
  const RowMajor spd = a * a.transpose() + ColMajor::Identity(4, 4);
  CHECK(defect_as_point(TensorKind::spd, spd) < 1e-13);

  RowMajor unit_rows = RowMajor::Random(3, 5);
  unit_rows.rowwise().normalize();
  CHECK(defect_as_point(TensorKind::oblique, unit_rows) < 1e-13);

  // The same memory read the other way round is no point: the rule is not symmetric by accident.
  const RowMajor wide = orthonormal_rows(3, 7);
  const ColMajor as_tall_rows = Eigen::Map<const ColMajor>(wide.data(), 3, 7);
  CHECK(geomopt::check(geomopt::Oblique<double>(as_tall_rows)) > 1e-3);
}

TEST_CASE("shapes: tall Stiefel transposed, Sphere and Lorentz vectors, Euclidean first dimension by the rest") {
  auto same = [](TensorLayout l, TensorLayout expected) {
    CHECK(l.rows == expected.rows);
    CHECK(l.cols == expected.cols);
    CHECK(l.transposed == expected.transposed);
    CHECK(l.vector == expected.vector);
  };
  same(layout(TensorKind::stiefel, {3, 5}), {5, 3, false, false});
  same(layout(TensorKind::stiefel, {5, 3}), {5, 3, true, false});
  same(layout(TensorKind::grassmann, {7, 2}), {7, 2, true, false});
  same(layout(TensorKind::sphere, {2, 3, 4}), {24, 1, false, false});
  same(layout(TensorKind::lorentz, {4}), {4, 1, false, false});
  same(layout(TensorKind::oblique, {3, 5}), {5, 3, false, false});
  same(layout(TensorKind::euclidean, {}), {1, 1, false, true});
  same(layout(TensorKind::euclidean, {6}), {6, 1, false, true});
  same(layout(TensorKind::euclidean, {2, 3, 4}), {2, 12, false, false});
  same(layout(TensorKind::euclidean, {0, 3}), {0, 3, false, false});
}

TEST_CASE("a shape the kind cannot have is refused, saying what was needed") {
  auto refused = [](TensorKind kind, std::vector<std::int64_t> shape, const std::string& message) {
    CHECK_THROWS_WITH_AS(layout(kind, shape), message.c_str(), std::invalid_argument);
  };
  refused(TensorKind::stiefel, {4}, "Stiefel needs a matrix (2-D tensor), got shape (4,)");
  refused(TensorKind::grassmann, {0, 3}, "Grassmann needs a non-empty matrix, got shape (0, 3)");
  refused(TensorKind::spd, {2, 3}, "SPD needs a non-empty square matrix, got shape (2, 3)");
  refused(TensorKind::special_orthogonal, {2, 2, 2},
          "SpecialOrthogonal needs a matrix (2-D tensor), got shape (2, 2, 2)");
  refused(TensorKind::sphere, {3, 0}, "Sphere needs a non-empty tensor, got shape (3, 0)");
  refused(TensorKind::lorentz, {2, 2}, "Lorentz needs a non-empty vector (1-D tensor), got shape (2, 2)");
  refused(TensorKind::oblique, {3, 0}, "Oblique needs rows of at least one entry, got shape (3, 0)");
  refused(TensorKind::euclidean, {2, -1}, "Euclidean needs non-negative dimensions, got shape (2, -1)");
}

TEST_CASE("with_point_type: each manifold kind's point type, named as tensor_kind_name says") {
  for (int k = 1; k < geomopt::kTensorKinds; ++k) {
    const auto kind = static_cast<TensorKind>(k);
    const std::string name =
        geomopt::with_point_type<float>(kind, []<class M>(std::type_identity<M>) { return std::string(M::kName); });
    CHECK(name == geomopt::tensor_kind_name(kind));
    CHECK(geomopt::with_point_type<float>(
        kind, []<class M>(std::type_identity<M>) { return std::is_same_v<typename M::Scalar, float>; }));
  }
  CHECK(std::string(geomopt::tensor_kind_name(TensorKind::euclidean)) == "Euclidean");
  CHECK(std::string(geomopt::tensor_kind_name(static_cast<TensorKind>(99))) == "unknown");
  auto nothing = []<class M>(std::type_identity<M>) { return 0; };
  CHECK_THROWS_WITH_AS(geomopt::with_point_type<double>(TensorKind::euclidean, nothing),
                       "geomopt: tensor kind 0 is no manifold's point", std::invalid_argument);
  CHECK_THROWS_AS(geomopt::with_point_type<double>(static_cast<TensorKind>(99), nothing), std::invalid_argument);
}
