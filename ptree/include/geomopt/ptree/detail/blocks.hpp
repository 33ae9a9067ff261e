// Copying storage blocks to and from flat memory, column-major inside a block.
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
concept contiguous_colmajor = eigen_plain<B> && (bool(B::IsVectorAtCompileTime) || !bool(B::IsRowMajor));

template <class S>
using flat_vector = Eigen::Matrix<S, Eigen::Dynamic, 1>;

// Writes block b to dst[0, size(b)).
template <class S, class B>
void pack(S* dst, const B& b) {
  if constexpr (any_scalar<B>) {
    *dst = static_cast<S>(b);
  } else {
    using BS = typename B::Scalar;
    const Eigen::Index n = b.size();
    if constexpr (contiguous_colmajor<B> && std::is_same_v<BS, S> && std::is_trivially_copyable_v<S>) {
      if (n != 0) std::memcpy(dst, b.data(), sizeof(S) * static_cast<std::size_t>(n));
    } else if constexpr (contiguous_colmajor<B>) {
      Eigen::Map<flat_vector<S>>(dst, n) = Eigen::Map<const flat_vector<BS>>(b.data(), n).template cast<S>();
    } else {
      Eigen::Map<flat_vector<S>>(dst, n) = b.reshaped().template cast<S>();
    }
  }
}

// Reads block b from src[0, size(b)).
template <class S, class B>
void unpack(B& b, const S* src) {
  if constexpr (any_scalar<B>) {
    b = static_cast<B>(*src);
  } else {
    using BS = typename B::Scalar;
    const Eigen::Index n = b.size();
    if constexpr (contiguous_colmajor<B> && std::is_same_v<BS, S> && std::is_trivially_copyable_v<S>) {
      if (n != 0) std::memcpy(b.data(), src, sizeof(S) * static_cast<std::size_t>(n));
    } else if constexpr (contiguous_colmajor<B>) {
      Eigen::Map<flat_vector<BS>>(b.data(), n) = Eigen::Map<const flat_vector<S>>(src, n).template cast<BS>();
    } else {
      using Dense = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic>;
      b = Eigen::Map<const Dense>(src, b.rows(), b.cols()).template cast<BS>();
    }
  }
}

template <class B>
void set_zero(B& b) {
  if constexpr (any_scalar<B>) b = B(0);
  else b.setZero();
}

}  // namespace geomopt::ptree::detail
