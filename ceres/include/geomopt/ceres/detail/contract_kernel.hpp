// The arithmetic of CeresManifold<M> for every M satisfying geomopt::Manifold over double, written once from the
// contract (contract.hpp), on raw pointers laid out as Ceres lays them out (points column-major, Jacobians
// row-major). With E(x) the section's basis and R_x the chosen retraction:
//   plus(x, delta)      = R_x(delta)                               M::Workspace::retract (false for x outside the
//                                                                  domain; an overflowing step is returned as is)
//   plus_jacobian(x)    = J = [to_ambient(x, e_1) .. to_ambient(x, e_d)]   ambient x tangent
//   right_multiply(x,G) = G J, row by row lift(x, g): lift is to_ambient's transpose
//   minus(y, x)         = R_x^-1(y)                                M::Workspace::inverse_retract
//   minus_jacobian(x)   = (J^T J)^-1 J^T, the Frobenius left inverse of J, which the contract states is the
//                         derivative of inverse_retract at y = x (J^T itself where E is Frobenius-orthonormal)
// Each call makes its own workspace (a recomputed section from the x it is given), so the adapter holds no mutable
// state and Ceres may call it from several threads.
#pragma once

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <cmath>
#include <exception>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "geomopt/manifolds/any_workspace.hpp"
#include "geomopt/manifolds/contract.hpp"

namespace geomopt::detail {

// Ceres's interfaces return false on failure; geomopt's functions throw (a point off the workspace's domain, a
// target out of the retraction's reach). The exception must not cross Ceres's frames.
template <class F>
bool ceres_guarded(F&& f) noexcept {
  try {
    f();
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

/// The shape of a parameter block: the rows x cols of the points it holds.
struct CeresShape {
  Eigen::Index rows = 0, cols = 0;
};

template <Manifold M>
class ContractCeresKernel {
  using Point = std::remove_cvref_t<M>;
  using Workspace = OpenWorkspace<Point>;
  using RowMajor = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Vector = Eigen::VectorXd;
  static_assert(std::is_same_v<typename Point::Scalar, double>,
                "geomopt::CeresManifold: Ceres works in double; use the manifold over double");

 public:
  /// The manifold of rows x cols points. Throws std::invalid_argument naming M when the shape is not one of its
  /// points (M::tangent_size's message), when the block would be empty, or when Ceres's int sizes cannot hold it.
  /// Allocates nothing.
  ContractCeresKernel(Eigen::Index rows, Eigen::Index cols, Retraction r) : rows_(rows), cols_(cols), r_(r) {
    const std::string who = std::string("CeresManifold<") + Point::kName + ">: ";
    if (!supports<Point>(r)) throw std::invalid_argument(who + missing_retraction<Point>(r));
    try {
      tangent_ = Point::tangent_size(rows, cols);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(who + e.what());
    }
    const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
    if (rows == 0 || cols == 0)
      throw std::invalid_argument(who + "a Ceres parameter block needs at least one entry, got a " + shape + " point");
    // rows cols is checked by division: the product could overflow Eigen::Index.
    if (rows > std::numeric_limits<int>::max() / cols)
      throw std::invalid_argument(who + "a " + shape +
                                  " point has more entries than a Ceres parameter block can hold (" +
                                  std::to_string(std::numeric_limits<int>::max()) + ")");
  }

  Eigen::Index rows() const noexcept { return rows_; }
  Eigen::Index cols() const noexcept { return cols_; }
  Retraction retraction() const noexcept { return r_; }
  int ambient_size() const noexcept { return static_cast<int>(rows_ * cols_); }
  int tangent_size() const noexcept { return static_cast<int>(tangent_); }

  void plus(const double* x, const double* delta, double* out) const {
    for (int k = 0; k < tangent_size(); ++k)
      if (!std::isfinite(delta[k]))
        throw std::domain_error(std::string("CeresManifold<") + Point::kName + ">::Plus: delta[" + std::to_string(k) +
                                "] is not finite");
    Workspace ws = workspace();
    Vector y = Eigen::Map<const Vector>(x, ambient_size());
    ws.retract(y.data(), delta, r_);
    // retract never throws: x outside the manifold's domain (an SPD block that is not positive definite) and a step
    // that overflows both leave non-finite entries. The first is a failure; the second is a step too long, which
    // Ceres must see (its trust region rejects it by its cost, and Plus(x, -gradient) of a steep start must not end
    // the solve), so it is returned as computed. R_x(0), finite for every x in the domain, tells them apart.
    if (!y.allFinite()) {
      Vector at_zero = Eigen::Map<const Vector>(x, ambient_size());
      const Vector zero = Vector::Zero(tangent_);
      ws.forget_point();
      ws.retract(at_zero.data(), zero.data(), r_);
      if (!at_zero.allFinite())
        throw std::domain_error(std::string("CeresManifold<") + Point::kName +
                                ">::Plus: x is outside the manifold's domain");
    }
    Eigen::Map<Vector>(out, ambient_size()) = y;
  }

  void minus(const double* y, const double* x, double* out) const {
    Vector c(tangent_);
    workspace().inverse_retract(x, y, c.data(), r_);
    Eigen::Map<Vector>(out, tangent_size()) = c;
  }

  void plus_jacobian(const double* x, double* jacobian) const {
    Eigen::Map<RowMajor>(jacobian, ambient_size(), tangent_size()) = dense_plus_jacobian(x);
  }

  void minus_jacobian(const double* x, double* jacobian) const {
    const Eigen::MatrixXd j = dense_plus_jacobian(x);
    const Eigen::MatrixXd gram = j.transpose() * j;
    Eigen::Map<RowMajor>(jacobian, tangent_size(), ambient_size()) = gram.ldlt().solve(j.transpose());
  }

  void right_multiply(const double* x, int rows, const double* ambient, double* tangent) const {
    Workspace ws = workspace();
    Vector c(tangent_);
    for (int row = 0; row < rows; ++row) {
      ws.lift(x, ambient + static_cast<Eigen::Index>(row) * ambient_size(), c.data());
      Eigen::Map<Vector>(tangent + static_cast<Eigen::Index>(row) * tangent_size(), tangent_size()) = c;
    }
  }

 private:
  Workspace workspace() const { return open_workspace<Point>(rows_, cols_, SectionPolicy::recomputed, nullptr); }

  Eigen::MatrixXd dense_plus_jacobian(const double* x) const {
    Workspace ws = workspace();
    Eigen::MatrixXd j(ambient_size(), tangent_size());
    Vector e = Vector::Zero(tangent_);
    for (Eigen::Index k = 0; k < tangent_; ++k) {
      e[k] = 1;
      ws.to_ambient(x, e.data(), j.col(k).data());
      e[k] = 0;
    }
    return j;
  }

  Eigen::Index rows_, cols_, tangent_ = 0;
  Retraction r_;
};

}  // namespace geomopt::detail
