// Packed structured matrices: symmetric, skew-symmetric and strictly triangular n x n matrices stored as the vector
// of their free entries, each a ptree leaf whose storage is that vector.
//
//   type                  storage      entry (i, j) of the dense form (0-based)
//   SymmetricMatrix<T>    n(n+1)/2     i >= j: s[i(i+1)/2 + j];  i < j: (j, i)
//   SkewSymMatrix<T>      n(n-1)/2     i > j:  s[i(i-1)/2 + j];  i < j: -(j, i);  i == j: 0
//   LowerTriangular<T>    n(n-1)/2     i > j:  s[i(i-1)/2 + j];  otherwise 0   (strict lower triangle, row by row)
//   UpperTriangular<T>    n(n-1)/2     i < j:  s[j(j-1)/2 + i];  otherwise 0   (strict upper triangle, column by column)
//   ScaledSymmetricMatrix<T>  n(n+1)/2 as SymmetricMatrix, with the off-diagonal entries stored times sqrt(2) (the
//                                     "svec" of semidefinite programming): s . t = tr(dense(s) dense(t)), so the
//                                     storage is an orthonormal coordinate vector for the Frobenius inner product
//
// Invariants: dense() is the matrix the storage denotes; from_dense(dense()) restores the storage; pullback(G) is
// the adjoint of storage -> dense, so <pullback(G), s> = <G, dense(s)> for every s and G (the gradient with respect
// to the storage, given the gradient G with respect to the dense matrix). Products with dense matrices read the
// storage directly and never form the dense matrix.
#pragma once

#include <Eigen/Core>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

#include "geomopt/ptree.hpp"

namespace geomopt {
namespace detail {

enum class Packing { symmetric, skew, lower, upper, scaled_symmetric };

inline constexpr bool symmetric_like(Packing p) { return p == Packing::symmetric || p == Packing::scaled_symmetric; }

template <Packing P>
constexpr Eigen::Index packed_size(Eigen::Index n) {
  return symmetric_like(P) ? n * (n + 1) / 2 : n * (n - 1) / 2;
}

// Solves packed_size<P>(n) == size for n, or returns -1.
template <Packing P>
Eigen::Index packed_order(Eigen::Index size) {
  Eigen::Index n = 0;
  while (packed_size<P>(n) < size) ++n;
  return packed_size<P>(n) == size ? n : -1;
}

// The storage index of entry (i, j) and its sign: +1, -1, or 0 for a structural zero.
template <Packing P>
constexpr std::pair<Eigen::Index, int> packed_index(Eigen::Index i, Eigen::Index j) {
  switch (P) {
    case Packing::symmetric:
    case Packing::scaled_symmetric:
      return i >= j ? std::pair<Eigen::Index, int>{i * (i + 1) / 2 + j, 1}
                    : std::pair<Eigen::Index, int>{j * (j + 1) / 2 + i, 1};
    case Packing::skew:
      if (i == j) return {0, 0};
      return i > j ? std::pair<Eigen::Index, int>{i * (i - 1) / 2 + j, 1}
                   : std::pair<Eigen::Index, int>{j * (j - 1) / 2 + i, -1};
    case Packing::lower:
      return i > j ? std::pair<Eigen::Index, int>{i * (i - 1) / 2 + j, 1} : std::pair<Eigen::Index, int>{0, 0};
    case Packing::upper:
      return i < j ? std::pair<Eigen::Index, int>{j * (j - 1) / 2 + i, 1} : std::pair<Eigen::Index, int>{0, 0};
  }
  return {0, 0};
}

// The factor between a stored value and the dense entries it denotes: 1, except sqrt(1/2) off the diagonal of the
// scaled symmetric packing.
template <Packing P>
constexpr double packed_weight(Eigen::Index i, Eigen::Index j) {
  return P == Packing::scaled_symmetric && i != j ? 0.70710678118654752440 : 1.0;
}

inline constexpr const char* packing_name(Packing p) {
  switch (p) {
    case Packing::symmetric: return "SymmetricMatrix";
    case Packing::skew: return "SkewSymMatrix";
    case Packing::lower: return "LowerTriangular";
    case Packing::upper: return "UpperTriangular";
    case Packing::scaled_symmetric: return "ScaledSymmetricMatrix";
  }
  return "";
}

// The four packed types share everything but the index map above.
template <class T, Packing P>
class PackedMatrix {
 public:
  using Scalar = T;
  using Storage = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  using Dense = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  static constexpr Packing kPacking = P;

  PackedMatrix() = default;
  /// The zero n x n matrix.
  explicit PackedMatrix(Eigen::Index n) : n_(check_order(n)), s_(Storage::Zero(packed_size<P>(n))) {}
  /// Over the given packed storage; its length must be a packed size, which fixes n.
  static PackedMatrix from_storage(Storage s) {
    const Eigen::Index n = packed_order<P>(s.size());
    if (n < 0)
      throw std::invalid_argument(std::string(packing_name(P)) + ": storage of length " + std::to_string(s.size()) +
                                  " is not n(n" + (symmetric_like(P) ? "+" : "-") + "1)/2 for any n");
    PackedMatrix a;
    a.n_ = n;
    a.s_ = std::move(s);
    return a;
  }
  /// The packed matrix nearest to m in the Frobenius norm: the symmetric or skew part for those two, the strict
  /// triangle for the triangular ones. m must be square.
  template <class Derived>
  static PackedMatrix from_dense(const Eigen::MatrixBase<Derived>& m) {
    if (m.rows() != m.cols())
      throw std::invalid_argument(std::string(packing_name(P)) + "::from_dense: expected a square matrix, got " +
                                  std::to_string(m.rows()) + "x" + std::to_string(m.cols()));
    PackedMatrix a(m.rows());
    for (Eigen::Index i = 0; i < a.n_; ++i) {
      for (Eigen::Index j = 0; j < a.n_; ++j) {
        const auto [k, sign] = packed_index<P>(i, j);
        if (sign == 0 || !owns(i, j)) continue;
        if constexpr (symmetric_like(P)) {
          a.s_[k] = i == j ? T(m(i, i)) : T(T(m(i, j) + m(j, i)) * T(0.5 / packed_weight<P>(i, j)));
        } else if constexpr (P == Packing::skew) {
          a.s_[k] = T(T(m(i, j) - m(j, i)) * T(0.5));
        } else {
          a.s_[k] = T(m(i, j));
        }
      }
    }
    return a;
  }

  Eigen::Index n() const noexcept { return n_; }
  Storage& storage() noexcept { return s_; }
  const Storage& storage() const noexcept { return s_; }

  /// Entry (i, j) of the dense form.
  T operator()(Eigen::Index i, Eigen::Index j) const {
    const auto [k, sign] = packed_index<P>(i, j);
    if (sign == 0) return T(0);
    const T v = packed_weight<P>(i, j) == 1.0 ? s_[k] : T(s_[k] * packed_weight<P>(i, j));
    return sign > 0 ? v : T(-v);
  }

  Dense dense() const {
    Dense d(n_, n_);
    for (Eigen::Index j = 0; j < n_; ++j)
      for (Eigen::Index i = 0; i < n_; ++i) d(i, j) = (*this)(i, j);
    return d;
  }

  /// The gradient with respect to the storage, given the gradient g with respect to the dense matrix.
  template <class Derived>
  Storage pullback(const Eigen::MatrixBase<Derived>& g) const {
    if (g.rows() != n_ || g.cols() != n_)
      throw std::invalid_argument(std::string(packing_name(P)) + "::pullback: expected a " + std::to_string(n_) + "x" +
                                  std::to_string(n_) + " gradient, got " + std::to_string(g.rows()) + "x" +
                                  std::to_string(g.cols()));
    Storage out = Storage::Zero(s_.size());
    for (Eigen::Index j = 0; j < n_; ++j) {
      for (Eigen::Index i = 0; i < n_; ++i) {
        const auto [k, sign] = packed_index<P>(i, j);
        if (sign != 0) out[k] += T(packed_weight<P>(i, j) * (sign > 0 ? 1.0 : -1.0)) * T(g(i, j));
      }
    }
    return out;
  }

  /// this * b, from the storage.
  template <class Derived>
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> operator*(const Eigen::MatrixBase<Derived>& b) const {
    if (b.rows() != n_)
      throw std::invalid_argument(std::string(packing_name(P)) + " * B: B has " + std::to_string(b.rows()) +
                                  " rows, expected " + std::to_string(n_));
    Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> out =
        Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>::Zero(n_, b.cols());
    for_each_entry([&](Eigen::Index i, Eigen::Index j, const T& a) { out.row(i) += a * b.row(j).template cast<T>(); });
    return out;
  }

  /// b * a, from the storage.
  template <class Derived>
  friend Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> operator*(const Eigen::MatrixBase<Derived>& b,
                                                                     const PackedMatrix& a) {
    if (b.cols() != a.n_)
      throw std::invalid_argument(std::string(packing_name(P)) + ": B * A: B has " + std::to_string(b.cols()) +
                                  " columns, expected " + std::to_string(a.n_));
    Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> out =
        Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>::Zero(b.rows(), a.n_);
    a.for_each_entry([&](Eigen::Index i, Eigen::Index j, const T& v) { out.col(j) += v * b.col(i).template cast<T>(); });
    return out;
  }

  friend bool operator==(const PackedMatrix& a, const PackedMatrix& b) { return a.n_ == b.n_ && a.s_ == b.s_; }

 private:
  static Eigen::Index check_order(Eigen::Index n) {
    if (n < 0) throw std::invalid_argument(std::string(packing_name(P)) + ": negative order " + std::to_string(n));
    return n;
  }

  // Whether (i, j) is the entry that holds its storage value (the other of a symmetric or skew pair mirrors it).
  static constexpr bool owns(Eigen::Index i, Eigen::Index j) {
    return P == Packing::upper ? i < j : symmetric_like(P) ? i >= j : i > j;
  }

  // f(i, j, value) for every nonzero entry of the dense form, from the storage.
  template <class F>
  void for_each_entry(F&& f) const {
    for (Eigen::Index i = 0; i < n_; ++i) {
      for (Eigen::Index j = 0; j < n_; ++j) {
        if (!owns(i, j)) continue;
        const auto [k, sign] = packed_index<P>(i, j);
        const T v = packed_weight<P>(i, j) == 1.0 ? s_[k] : T(s_[k] * packed_weight<P>(i, j));
        f(i, j, v);
        if constexpr (symmetric_like(P)) {
          if (i != j) f(j, i, v);
        } else if constexpr (P == Packing::skew) {
          f(j, i, T(-s_[k]));
        }
        (void)sign;
      }
    }
  }

  Eigen::Index n_ = 0;
  Storage s_;
};

// The ptree leaf protocol: the storage is the packed vector; rebuild keeps n from the prototype.
template <class T, Packing P>
typename PackedMatrix<T, P>::Storage& free_parameters(PackedMatrix<T, P>& a) {
  return a.storage();
}
template <class T, Packing P>
const typename PackedMatrix<T, P>::Storage& free_parameters(const PackedMatrix<T, P>& a) {
  return a.storage();
}
template <class T, Packing P, class U>
PackedMatrix<U, P> rebuild(const PackedMatrix<T, P>& prototype, Eigen::Matrix<U, Eigen::Dynamic, 1>&& data) {
  if (data.size() != prototype.storage().size())
    throw std::invalid_argument(std::string(packing_name(P)) + "::rebuild: storage of length " +
                                std::to_string(data.size()) + ", expected " +
                                std::to_string(prototype.storage().size()));
  // n comes from the prototype: a storage of length 0 fits both n = 0 and n = 1 for the strict packings.
  PackedMatrix<U, P> out(prototype.n());
  out.storage() = std::move(data);
  return out;
}
template <class T, Packing P>
std::string ptree_type_name(const PackedMatrix<T, P>&) {
  return packing_name(P);
}

}  // namespace detail

template <class T>
using SymmetricMatrix = detail::PackedMatrix<T, detail::Packing::symmetric>;
template <class T>
using SkewSymMatrix = detail::PackedMatrix<T, detail::Packing::skew>;
template <class T>
using LowerTriangular = detail::PackedMatrix<T, detail::Packing::lower>;
template <class T>
using UpperTriangular = detail::PackedMatrix<T, detail::Packing::upper>;
template <class T>
using ScaledSymmetricMatrix = detail::PackedMatrix<T, detail::Packing::scaled_symmetric>;

}  // namespace geomopt

// rebind_t<SymmetricMatrix<double>, float> is SymmetricMatrix<float>: the packing is a non-type parameter, which the
// generic rule of rebind does not reach.
template <class T, geomopt::detail::Packing P, class U>
struct geomopt::ptree::rebind<geomopt::detail::PackedMatrix<T, P>, U> {
  using type = geomopt::detail::PackedMatrix<typename geomopt::ptree::rebind<T, U>::type, P>;
};
