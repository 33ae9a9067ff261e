// TreeGeometry: a parameter tree seen as one Riemannian manifold, the product of its leaves, in the global tangent
// coordinates the stochastic optimizers use: storage coordinates for Euclidean and packed leaves, the lift
// coordinates of a recomputed global section for manifold leaves (orthonormal for the metric, so the inner product
// of two tangent vectors is the dot product of their coordinates). The solvers work on coordinate vectors only:
//
//   gradient(x, egrad, g)   g <- coordinates of the Riemannian gradient at x of the Euclidean gradient egrad
//   retract(x, delta)       x <- R_x(delta), each manifold leaf by its own retraction (detail::leaf_retraction)
//   tangent(x, v, h, ...)   the ambient tangent vector at x with coordinates v (for a user's Hessian)
//
// A coordinate vector at x read at another point y is the section's vector transport from x to y (the frame moves
// with the point). That is how the solvers carry directions and (s, y) pairs from one iterate to the next.
//
// A tree in the layout of a gradient (storage blocks of Euclidean and packed leaves, ambient matrices of manifold
// leaves) can be marked unwritten before the user's code fills it: every entry then holds unwritten_mark<T>(), and
// first_unwritten names the first leaf where one still does (minimize, check_gradient).
#pragma once

#include <Eigen/Core>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "geomopt/optimizers/detail/manifold_leaf.hpp"
#include "geomopt/optimizers/detail/manifold_stepper.hpp"
#include "geomopt/optimizers/optimizer.hpp"
#include "geomopt/ptree.hpp"

namespace geomopt::detail {

/// What a gradient entry holds until the user's code writes it: a quiet NaN whose payload no arithmetic makes (a
/// computed NaN carries the default payload or an operand's), so an entry that still holds it, or a NaN computed from
/// it (egrad += ... on an unwritten tree), was never overwritten.
template <class T>
constexpr T unwritten_mark() {
  static_assert(std::numeric_limits<T>::is_iec559 && (sizeof(T) == 4 || sizeof(T) == 8));
  if constexpr (sizeof(T) == 8) {
    return std::bit_cast<T>(std::uint64_t{0x7FF8'0000'0BAD'F00DULL});
  } else {
    return std::bit_cast<T>(std::uint32_t{0x7FC0'F00DU});
  }
}

/// Whether any of p[0, n) holds unwritten_mark<T>(). A written block pays one vectorised sum: entry * 0 is NaN only
/// for a NaN or an infinity, and only then are the bits compared.
template <class T>
bool holds_unwritten(const T* p, Eigen::Index n) {
  if (!std::isnan((Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(p, n) * T(0)).sum())) return false;
  using Bits = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;
  constexpr Bits mark = std::bit_cast<Bits>(unwritten_mark<T>());
  for (Eigen::Index i = 0; i < n; ++i)
    if (std::bit_cast<Bits>(p[i]) == mark) return true;
  return false;
}

template <class Tree>
class TreeGeometry {
 public:
  using T = ptree::scalar_t<Tree>;
  using Vector = Eigen::VectorXd;

  /// Throws std::invalid_argument naming the leaf when `retraction` is set and a manifold leaf lacks it (unset:
  /// each manifold's default).
  explicit TreeGeometry(const Tree& x, std::optional<Retraction> retraction = {}) {
    Eigen::Index largest = 0;
    ptree::for_each_with_path(
        [&](const ptree::Path& path, const auto& leaf) {
          using L = std::remove_cvref_t<decltype(leaf)>;
          if constexpr (manifold_leaf<L>) {
            static_assert(std::is_same_v<typename L::Scalar, T>, "a manifold leaf's scalar must be the tree's");
            const Retraction r = leaf_retraction<L>(path.display(), retraction);
            auto stepper = make_leaf_stepper(leaf, SectionPolicy::recomputed);
            units_.push_back({dim_, stepper->tangent_size(), static_cast<int>(steppers_.size()), leaf.value().rows(),
                              leaf.value().cols(), compact_leaf<L>(), path.display(), r});
            largest = std::max(largest, stepper->tangent_size());
            dim_ += stepper->tangent_size();
            stored_ += leaf.value().size();
            steppers_.push_back(std::move(stepper));
          } else {
            ptree::detail::for_each_block(
                [&](const auto& b) {
                  static_assert(std::is_same_v<ptree::detail::block_scalar_t<decltype(b)>, T>,
                                "minimize: every trainable leaf must have the tree's scalar");
                  if (!block_contiguous(b))
                    throw std::invalid_argument(path.display() +
                                                ": a storage block must be contiguous to be solved for");
                  const Eigen::Index n = ptree::detail::block_size(b);
                  units_.push_back(
                      {dim_, n, -1, ptree::detail::block_rows(b), ptree::detail::block_cols(b), false, path.display()});
                  dim_ += n;
                  stored_ += n;
                },
                leaf);
          }
        },
        x);
    buffer_.resize(largest);
  }

  Eigen::Index dim() const noexcept { return dim_; }
  Eigen::Index stored() const noexcept { return stored_; }
  bool has_compact() const noexcept {
    for (const Unit& u : units_)
      if (u.compact) return true;
    return false;
  }
  /// The norm of v's coordinates on compact manifold leaves.
  double compact_norm(const Vector& v) const {
    double s = 0;
    for (const Unit& u : units_)
      if (u.compact) s += v.segment(u.offset, u.size).squaredNorm();
    return std::sqrt(s);
  }

  void gradient(const Tree& x, const Tree& egrad, Vector& out) {
    out.resize(dim_);
    std::size_t k = 0;
    ptree::for_each(
        [&](const auto& p, const auto& g) {
          using L = std::remove_cvref_t<decltype(p)>;
          if constexpr (manifold_leaf<L>) {
            const Unit& u = next(k, p.value().rows(), p.value().cols());
            if (g.value().rows() != u.rows || g.value().cols() != u.cols)
              throw StructureError(u.path + ": the gradient is " + shape_string(g.value().rows(), g.value().cols()) +
                                   ", the point " + shape_string(u.rows, u.cols));
            ManifoldStepper<T>& s = *steppers_[static_cast<std::size_t>(u.stepper)];
            try {
              s.lift(p.value().data(), g.value().data(), buffer_.data());
            } catch (const std::domain_error& e) {
              throw std::domain_error(u.path + ": " + e.what());
            }
            out.segment(u.offset, u.size) = buffer_.head(u.size).template cast<double>();
          } else {
            ptree::detail::for_each_block(
                [&](const auto& bp, const auto& bg) {
                  const Unit& u = next(k, ptree::detail::block_rows(bp), ptree::detail::block_cols(bp));
                  if (ptree::detail::block_rows(bg) != u.rows || ptree::detail::block_cols(bg) != u.cols)
                    throw StructureError(u.path + ": the gradient's storage is " +
                                         shape_string(ptree::detail::block_rows(bg), ptree::detail::block_cols(bg)) +
                                         ", the point's " + shape_string(u.rows, u.cols));
                  out.segment(u.offset, u.size) =
                      Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>(block_data(bg), u.size)
                          .template cast<double>();
                },
                p, g);
          }
        },
        x, egrad);
    finish(k);
  }

  /// xi <- the tangent vector at x with coordinates v, in the representation of a gradient: v itself on storage
  /// leaves (exact); on manifold leaves the ambient matrix (R_x(h v) - R_x(-h v)) / 2h, the central difference of
  /// the retraction curve, whose velocity at 0 is the tangent vector (error O(h^2 |v|^3)). plus and minus are left
  /// at R_x(h v) and R_x(-h v).
  void tangent(const Tree& x, const Vector& v, double h, Tree& xi, Tree& plus, Tree& minus) {
    plus = x;
    retract(plus, h * v);
    minus = x;
    retract(minus, -h * v);
    std::size_t k = 0;
    ptree::for_each(
        [&](auto& out, const auto& p, const auto& m) {
          using L = std::remove_cvref_t<decltype(out)>;
          if constexpr (manifold_leaf<L>) {
            next(k, p.value().rows(), p.value().cols());
            out.value() = (p.value() - m.value()) / static_cast<T>(2 * h);
          } else {
            ptree::detail::for_each_block(
                [&](auto& b) {
                  const Unit& u = next(k, ptree::detail::block_rows(b), ptree::detail::block_cols(b));
                  Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>(block_data(b), u.size) =
                      v.segment(u.offset, u.size).template cast<T>();
                },
                out);
          }
        },
        xi, plus, minus);
    finish(k);
  }

  /// Names the first leaf, in walk order, whose Euclidean gradient in egrad, or whose coordinates in g (the lift of
  /// egrad), hold a non-finite number; "" when none does.
  std::string first_non_finite(const Tree& egrad, const Vector& g) const {
    std::string found;
    for_each_unit(
        [&](const Unit& u, const T* e) {
          if (!found.empty()) return;
          if (!Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(e, u.rows * u.cols).allFinite())
            found = u.path + ": the gradient is not finite";
          else if (!g.segment(u.offset, u.size).allFinite())
            found = u.path + ": the gradient's lift to the tangent space is not finite";
        },
        egrad);
    return found;
  }

  /// Fills every entry of g, a tree in the layout of a gradient, with unwritten_mark<T>().
  void mark_unwritten(Tree& g) const {
    for_each_unit(
        [](const Unit& u, T* e) {
          Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>(e, u.rows * u.cols).setConstant(unwritten_mark<T>());
        },
        g);
  }

  /// The path of the first leaf of g, in walk order, with an entry mark_unwritten left in place; nullptr when every
  /// entry was overwritten.
  const std::string* first_unwritten(const Tree& g) const {
    const std::string* found = nullptr;
    for_each_unit(
        [&](const Unit& u, const T* e) {
          if (found == nullptr && holds_unwritten(e, u.rows * u.cols)) found = &u.path;
        },
        g);
    return found;
  }

  /// The Euclidean inner product of two trees in the layout of a gradient: the sum over storage blocks and manifold
  /// leaves' ambient matrices of the entry-wise products, in double.
  double ambient_dot(const Tree& a, const Tree& b) const {
    double sum = 0;
    for_each_unit([&](const Unit& u, const T* pa, const T* pb) { sum += dot(pa, pb, u.rows * u.cols); }, a, b);
    return sum;
  }

  /// <egrad, c''(0)>, c(t) = R_x(t v) the retraction curve, from plus = R_x(h v) and minus = R_x(-h v) (as tangent
  /// leaves them): on manifold leaves the central second difference (plus - 2 x + minus) / h^2 of the curve (error
  /// O(h^2), rounding O(epsilon / h^2)); on storage leaves nothing, since their curve is the line x + t v.
  double acceleration_dot(const Tree& x, const Tree& egrad, const Tree& plus, const Tree& minus, double h) const {
    double sum = 0;
    for_each_unit(
        [&](const Unit& u, const T* px, const T* pe, const T* pp, const T* pm) {
          if (u.stepper < 0) return;
          using Map = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>;
          const Eigen::Index n = u.rows * u.cols;
          sum += (Map(pp, n).template cast<double>() - 2 * Map(px, n).template cast<double>() +
                  Map(pm, n).template cast<double>())
                     .dot(Map(pe, n).template cast<double>());
        },
        x, egrad, plus, minus);
    return sum / (h * h);
  }

  /// A leaf's range of the global coordinates: its path, first coordinate and tangent dimension (a packed leaf's
  /// storage blocks together).
  struct LeafSpan {
    std::string path;
    Eigen::Index offset = 0, size = 0;
  };
  /// Every leaf's span, in walk order.
  std::vector<LeafSpan> leaves() const {
    std::vector<LeafSpan> out;
    for (const Unit& u : units_) {
      if (!out.empty() && out.back().path == u.path && out.back().offset + out.back().size == u.offset) {
        out.back().size += u.size;
      } else {
        out.push_back({u.path, u.offset, u.size});
      }
    }
    return out;
  }

  void retract(Tree& x, const Vector& delta) {
    std::size_t k = 0;
    ptree::for_each(
        [&](auto& p) {
          using L = std::remove_cvref_t<decltype(p)>;
          if constexpr (manifold_leaf<L>) {
            const Unit& u = next(k, p.value().rows(), p.value().cols());
            // R_x(0) = x to the bit, where a manifold's retraction of 0 may round: a difference along one leaf
            // (check_gradient's, divided by h^2) must not see the others move.
            if (delta.segment(u.offset, u.size).isZero(0)) return;
            ManifoldStepper<T>& s = *steppers_[static_cast<std::size_t>(u.stepper)];
            buffer_.head(u.size) = delta.segment(u.offset, u.size).template cast<T>();
            s.forget_point();
            s.retract(p.value().data(), buffer_.data(), u.retraction);
          } else {
            ptree::detail::for_each_block(
                [&](auto& b) {
                  const Unit& u = next(k, ptree::detail::block_rows(b), ptree::detail::block_cols(b));
                  Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>(block_data(b), u.size) +=
                      delta.segment(u.offset, u.size).template cast<T>();
                },
                p);
          }
        },
        x);
    finish(k);
  }

 private:
  struct Unit {
    Eigen::Index offset = 0, size = 0;
    int stepper = -1;
    Eigen::Index rows = 0, cols = 0;  // the stored shape when the solve started
    bool compact = false;
    std::string path;                            // Path::display(): "(root)" for a tree that is one leaf
    Retraction retraction = Retraction::cayley;  // manifold leaves
  };

  // The next unit, checked against the leaf's (or block's) stored shape.
  const Unit& next(std::size_t& k, Eigen::Index rows, Eigen::Index cols) const {
    if (k >= units_.size()) throw StructureError("minimize: the tree has more leaves than when the solve started");
    const Unit& u = units_[k++];
    if (rows != u.rows || cols != u.cols)
      throw StructureError(u.path + ": the leaf is " + shape_string(rows, cols) + ", it was " +
                           shape_string(u.rows, u.cols) + " when the solve started");
    return u;
  }
  void finish(std::size_t k) const {
    if (k != units_.size()) throw StructureError("minimize: the tree has fewer leaves than when the solve started");
  }

  // f(unit, data...) for every unit in walk order, data the unit's entries in each tree (a manifold leaf's ambient
  // matrix or a storage block, unit.rows * unit.cols of them); the trees have the layout of a gradient.
  template <class F, class... G>
  void for_each_unit(F&& f, G&... trees) const {
    std::size_t k = 0;
    ptree::for_each(
        [&](auto& first, auto&... rest) {
          using L = std::remove_cvref_t<decltype(first)>;
          if constexpr (manifold_leaf<L>) {
            f(next(k, first.value().rows(), first.value().cols()), first.value().data(), rest.value().data()...);
          } else {
            ptree::detail::for_each_block(
                [&](auto& b, auto&... bs) {
                  f(next(k, ptree::detail::block_rows(b), ptree::detail::block_cols(b)), block_data(b),
                    block_data(bs)...);
                },
                first, rest...);
          }
        },
        trees...);
    finish(k);
  }

  static double dot(const T* a, const T* b, Eigen::Index n) {
    using Map = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>;
    return Map(a, n).template cast<double>().dot(Map(b, n).template cast<double>());
  }

  std::vector<Unit> units_;
  std::vector<std::unique_ptr<ManifoldStepper<T>>> steppers_;
  Eigen::Matrix<T, Eigen::Dynamic, 1> buffer_;
  Eigen::Index dim_ = 0, stored_ = 0;
};

}  // namespace geomopt::detail
