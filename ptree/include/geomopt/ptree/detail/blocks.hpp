// Copying storage blocks, or a range of their entries, to and from flat memory, column-major inside a block.
//
// A plain column-major block of the vector's own scalar is copied with memcpy; anything else (another scalar, a
// row-major matrix, a strided view) goes through an Eigen expression in column-major order.
#pragma once

#include <Eigen/Core>
#include <cstring>
#include <type_traits>

#include "geomopt/ptree/traits.hpp"

namespace geomopt::ptree::detail {

template <class B>
concept contiguous_colmajor = eigen_plain<B> &&(bool(B::IsVectorAtCompileTime) || !bool(B::IsRowMajor));

template <class S>
using flat_vector = Eigen::Matrix<S, Eigen::Dynamic, 1>;

// Writes entries [begin, begin + count) of block b, in column-major order, to dst[0, count).
template <class S, class B>
void pack_range(S* dst, const B& b, Eigen::Index begin, Eigen::Index count) {
  if constexpr (any_scalar<B>) {
    *dst = static_cast<S>(b);
  } else {
    using BS = typename B::Scalar;
    if constexpr (contiguous_colmajor<B> && std::is_same_v<BS, S> && std::is_trivially_copyable_v<S>) {
      if (count != 0) std::memcpy(dst, b.data() + begin, sizeof(S) * static_cast<std::size_t>(count));
    } else if constexpr (contiguous_colmajor<B>) {
      Eigen::Map<flat_vector<S>>(dst, count) =
          Eigen::Map<const flat_vector<BS>>(b.data() + begin, count).template cast<S>();
    } else {
      Eigen::Map<flat_vector<S>>(dst, count) = b.reshaped().segment(begin, count).template cast<S>();
    }
  }
}

// Reads entries [begin, begin + count) of block b, in column-major order, from src[0, count).
template <class S, class B>
void unpack_range(B& b, const S* src, Eigen::Index begin, Eigen::Index count) {
  if constexpr (any_scalar<B>) {
    b = static_cast<B>(*src);
  } else {
    using BS = typename B::Scalar;
    if constexpr (contiguous_colmajor<B> && std::is_same_v<BS, S> && std::is_trivially_copyable_v<S>) {
      if (count != 0) std::memcpy(b.data() + begin, src, sizeof(S) * static_cast<std::size_t>(count));
    } else if constexpr (contiguous_colmajor<B>) {
      Eigen::Map<flat_vector<BS>>(b.data() + begin, count) =
          Eigen::Map<const flat_vector<S>>(src, count).template cast<BS>();
    } else {
      b.reshaped().segment(begin, count) = Eigen::Map<const flat_vector<S>>(src, count).template cast<BS>();
    }
  }
}

// Writes block b to dst[0, size(b)).
template <class S, class B>
void pack(S* dst, const B& b) {
  if constexpr (any_scalar<B>)
    pack_range(dst, b, 0, 1);
  else
    pack_range(dst, b, 0, b.size());
}

// Reads block b from src[0, size(b)).
template <class S, class B>
void unpack(B& b, const S* src) {
  if constexpr (any_scalar<B>)
    unpack_range(b, src, 0, 1);
  else
    unpack_range(b, src, 0, b.size());
}

template <class B>
void set_zero(B& b) {
  if constexpr (any_scalar<B>)
    b = B(0);
  else
    b.setZero();
}

}  // namespace geomopt::ptree::detail
