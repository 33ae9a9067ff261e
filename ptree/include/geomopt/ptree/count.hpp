// Counting a tree: free parameters and bytes of storage, each tied node once.
//
//   count(tree)            trainable free parameters (count(all, tree), count(buffers, tree) likewise)
//   nbytes(tree)           bytes of trainable storage (nbytes(all, tree), nbytes(buffers, tree))
#pragma once

#include <Eigen/Core>
#include <cstddef>

#include "geomopt/ptree/walk.hpp"

namespace geomopt::ptree {

template <selection S, class Tree>
Eigen::Index count(S sel, const Tree& tree) {
  return fold_storage(sel, [](Eigen::Index n, const auto& b) { return n + detail::block_size(b); }, Eigen::Index{0},
                      tree);
}
template <class Tree>
  requires(!selection<Tree>)
Eigen::Index count(const Tree& tree) {
  return count(params, tree);
}

template <selection S, class Tree>
std::size_t nbytes(S sel, const Tree& tree) {
  return fold_storage(
      sel,
      [](std::size_t n, const auto& b) {
        using B = detail::bare<decltype(b)>;
        return n + static_cast<std::size_t>(detail::block_size(b)) * sizeof(detail::block_scalar_t<B>);
      },
      std::size_t{0}, tree);
}
template <class Tree>
  requires(!selection<Tree>)
std::size_t nbytes(const Tree& tree) {
  return nbytes(params, tree);
}

}  // namespace geomopt::ptree
