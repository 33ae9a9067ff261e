// 256-bit AVX2 + FMA versions of the hot kernels, compiled for that target by function attribute (the rest of the
// program keeps its own flags) and called only when kernel_path() is avx2. A leaf's tail shorter than one register
// goes through the same arithmetic with masked loads and stores, so every entry is computed alike, whatever the
// cut into chunks.
#pragma once

#include "geomopt/manifolds/detail/avx2_vec.hpp"

#if GEOMOPT_HAVE_AVX2_PATH
#include <array>
#include <cstddef>
#include <utility>

namespace geomopt::detail::avx2 {

// One register of entries: the L2 term joins the gradient, the moments move, and p <- shrink p - step m / denom.
// vmax is null unless AMSGrad. C is AdamKernelBase's Coeffs<T> (kernels.hpp). Masked (tail) lanes read zeros and are
// not stored.
template <class T, bool kL2, bool kShrink, bool kAmsgrad, class C, class... Mask>
GEOMOPT_AVX2_INLINE void adam_lanes(const C& c, T* p, const T* g, T* m, T* v, T* vmax, Mask... mask) {
  using V = Vec<T>;
  using R = typename V::R;
  R x = V::load(p, mask...);
  R grad = V::load(g, mask...);
  if constexpr (kL2) grad = V::fmadd(V::set1(c.l2), x, grad);
  const R mt = V::fmadd(V::set1(c.b1), V::load(m, mask...), V::mul(V::set1(c.one_minus_b1), grad));
  R vt = V::fmadd(V::set1(c.b2), V::load(v, mask...), V::mul(V::set1(c.one_minus_b2), V::mul(grad, grad)));
  V::store(m, mask..., mt);
  V::store(v, mask..., vt);
  if constexpr (kAmsgrad) {
    vt = V::max(V::load(vmax, mask...), vt);
    V::store(vmax, mask..., vt);
  }
  const R denom = V::fmadd(V::sqrt(vt), V::set1(c.inv_bc2_sqrt), V::set1(c.eps));
  if constexpr (kShrink) x = V::mul(x, V::set1(c.shrink));
  V::store(p, mask..., V::fnmadd(V::set1(c.step_size), V::div(mt, denom), x));
}

template <class T, bool kL2, bool kShrink, bool kAmsgrad, class C>
GEOMOPT_AVX2 void adam_span(const C& c, T* p, const T* g, T* m, T* v, T* vmax, Eigen::Index n) {
  using V = Vec<T>;
  constexpr Eigen::Index kLanes = V::kLanes;
  Eigen::Index i = 0;
  for (; i + kLanes <= n; i += kLanes)
    adam_lanes<T, kL2, kShrink, kAmsgrad>(c, p + i, g + i, m + i, v + i, kAmsgrad ? vmax + i : nullptr);
  if (i < n)
    adam_lanes<T, kL2, kShrink, kAmsgrad>(c, p + i, g + i, m + i, v + i, kAmsgrad ? vmax + i : nullptr, V::mask(n - i));
}

template <class T, class C, std::size_t... I>
constexpr auto adam_spans(std::index_sequence<I...>) {
  return std::array{&adam_span<T, (I & 4) != 0, (I & 2) != 0, (I & 1) != 0, C>...};
}

/// p, m, v (and vmax for AMSGrad) updated in place over n entries: the instantiation for this step's L2 term,
/// AdamW decay and AMSGrad, picked from a table.
template <class T, class C>
void adam(const C& c, T* p, const T* g, T* m, T* v, T* vmax, Eigen::Index n) {
  static constexpr auto kSpans = adam_spans<T, C>(std::make_index_sequence<8>{});
  const std::size_t which = (c.l2 != T(0) ? 4u : 0u) | (c.shrink != T(1) ? 2u : 0u) | (c.amsgrad ? 1u : 0u);
  kSpans[which](c, p, g, m, v, vmax, n);
}

}  // namespace geomopt::detail::avx2

#endif  // GEOMOPT_HAVE_AVX2_PATH
