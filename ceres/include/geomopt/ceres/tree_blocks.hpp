// CeresTreeBlocks<Tree>: a parameter tree as Ceres parameter blocks, one block per trainable leaf, with a
// CeresManifold set on every manifold leaf's block, and back.
//
//   geomopt::CeresTreeBlocks<Model<double>> blocks(model);    // copies model's parameters into its own storage
//   blocks.add_to(problem);                                     // AddParameterBlock and SetManifold per leaf
//   problem.AddResidualBlock(blocks.autodiff_cost(cost, residuals), nullptr, blocks.parameter_blocks());
//   ceres::Solve(options, &problem, &summary);
//   blocks.write_to(model);                                     // or: Model<double> fitted = blocks.tree();
//
// cost(const Model<T>& tree, T* residuals) -> bool is written once for any scalar T; it receives the tree unflattened
// from Ceres's parameter blocks (T = ceres::Jet inside the automatic differentiation). Invariants: the blocks are the
// segments of ptree::flatten(tree) given by ptree::layout(tree), in walk order (a leaf with no parameters gets no
// block); tree() == ptree::unflatten(prototype, flatten of the blocks), so CeresTreeBlocks(t).tree() equals t;
// Euclidean and packed leaves get no manifold (a packed leaf's storage is already its free coordinates).
#pragma once

#include <ceres/dynamic_autodiff_cost_function.h>
#include <ceres/problem.h>

#include <Eigen/Core>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "geomopt/ceres/manifold.hpp"
#include "geomopt/ptree.hpp"

namespace geomopt {

/// The retractions of the manifolds CeresTreeBlocks sets.
struct CeresTreeOptions {
  /// Every manifold leaf's retraction. Unset: each leaf's manifold default (default_retraction<M>()); set to one a
  /// leaf's manifold lacks, the CeresTreeBlocks constructor throws std::invalid_argument naming the leaf.
  std::optional<Retraction> retraction{};
};

namespace detail {

// What a cost functor needs from the tree: its shape, and where each leaf's parameters are.
template <class Tree>
struct CeresTreeShape {
  Tree prototype;
  ptree::Layout layout;
  std::vector<int> block_of_leaf;  // index into the parameter blocks, -1 for a leaf without parameters

  template <class T>
  ptree::rebind_t<Tree, T> unflatten(T const* const* parameters) const {
    Eigen::Matrix<T, Eigen::Dynamic, 1> flat(layout.size());
    for (std::size_t leaf = 0; leaf < layout.leaves.size(); ++leaf) {
      if (block_of_leaf[leaf] < 0) continue;
      const auto& l = layout.leaves[leaf];
      const T* block = parameters[block_of_leaf[leaf]];
      for (Eigen::Index i = 0; i < l.size; ++i) flat[l.offset + i] = block[i];
    }
    return ptree::unflatten(prototype, flat);
  }
};

template <class Tree, class F>
struct CeresTreeCost {
  std::shared_ptr<const CeresTreeShape<Tree>> shape;
  F cost;
  template <class T>
  bool operator()(T const* const* parameters, T* residuals) const {
    return cost(shape->unflatten(parameters), residuals);
  }
};

// A factory of the manifold of one leaf, empty for a Euclidean or packed leaf. Throws std::invalid_argument naming
// the leaf when its shape or the retraction asked for does not fit its manifold.
template <class L>
std::function<ceres::Manifold*()> ceres_manifold_factory(const std::string& path, const L& leaf,
                                                         const CeresTreeOptions& options) {
  if constexpr (Manifold<L>) {
    using M = std::remove_cvref_t<L>;
    const CeresShape shape{leaf.value().rows(), leaf.value().cols()};
    const Retraction r = options.retraction.value_or(default_retraction<M>());
    try {
      CeresManifold<M> check(shape, r);  // the shape and the retraction, checked before Ceres sees the block
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(path + ": " + e.what());
    }
    return [=] { return new CeresManifold<M>(shape, r); };
  } else {
    (void)path;
    (void)leaf;
    (void)options;
    return {};
  }
}

}  // namespace detail

template <class Tree>
class CeresTreeBlocks {
  static_assert(std::is_same_v<ptree::scalar_t<Tree>, double>,
                "CeresTreeBlocks: Ceres works in double; expected a tree over double");

 public:
  /// Copies the tree's parameters; checks every manifold leaf has the shape its manifold needs.
  explicit CeresTreeBlocks(const Tree& tree, CeresTreeOptions options = {}) : values_(ptree::flatten<double>(tree)) {
    auto built = std::make_shared<detail::CeresTreeShape<Tree>>();
    auto& shape = *built;
    shape.prototype = tree;
    shape.layout = ptree::layout(tree);
    std::size_t leaf = 0;
    ptree::for_each_with_path(
        [&](const ptree::Path& path, const auto& l) {
          const auto& layout = shape.layout.leaves[leaf++];
          if (layout.size == 0) {
            shape.block_of_leaf.push_back(-1);
            return;
          }
          shape.block_of_leaf.push_back(static_cast<int>(blocks_.size()));
          blocks_.push_back(values_.data() + layout.offset);
          sizes_.push_back(static_cast<int>(layout.size));
          make_manifold_.push_back(detail::ceres_manifold_factory(path.str(), l, options));
        },
        tree);
    shape_ = std::move(built);
  }

  CeresTreeBlocks(const CeresTreeBlocks&) = delete;  // the blocks point into values_
  CeresTreeBlocks& operator=(const CeresTreeBlocks&) = delete;
  CeresTreeBlocks(CeresTreeBlocks&&) noexcept = default;  // a moved Eigen vector keeps its buffer
  CeresTreeBlocks& operator=(CeresTreeBlocks&&) noexcept = default;

  /// Adds every block to the problem, and sets a new CeresManifold on each manifold leaf's block. The problem owns
  /// the manifolds under its default Problem::Options::manifold_ownership (TAKE_OWNERSHIP).
  void add_to(ceres::Problem& problem) const {
    for (std::size_t b = 0; b < blocks_.size(); ++b) {
      problem.AddParameterBlock(blocks_[b], sizes_[b]);
      if (make_manifold_[b]) problem.SetManifold(blocks_[b], make_manifold_[b]());
    }
  }

  /// The parameter blocks, in walk order: what AddResidualBlock takes alongside autodiff_cost.
  const std::vector<double*>& parameter_blocks() const noexcept { return blocks_; }
  const std::vector<int>& block_sizes() const noexcept { return sizes_; }
  /// The block of the leaf at `path` ("frame", "layers.0.weight"), e.g. for SetParameterBlockConstant.
  double* block(std::string_view path) {
    const ptree::LeafLayout* l = shape_->layout.find(path);
    if (l == nullptr || l->size == 0)
      throw std::invalid_argument("CeresTreeBlocks::block: expected the path of a leaf with parameters, got \"" +
                                  std::string(path) + "\"");
    return values_.data() + l->offset;
  }
  const ptree::Layout& layout() const noexcept { return shape_->layout; }

  /// The tree shaped like the prototype, over Ceres's parameter blocks (any scalar: double, ceres::Jet).
  template <class T>
  ptree::rebind_t<Tree, T> unflatten(T const* const* parameters) const {
    return shape_->unflatten(parameters);
  }

  /// A cost function over all the blocks, differentiated automatically: cost(const rebind_t<Tree, T>&, T*) -> bool.
  /// Stride is DynamicAutoDiffCostFunction's: derivatives per pass, the cost is evaluated ceil(parameters / Stride)
  /// times per Jacobian.
  template <int Stride = 4, class F>
  ceres::CostFunction* autodiff_cost(F cost, int num_residuals) const {
    using Functor = detail::CeresTreeCost<Tree, F>;
    auto* function = new ceres::DynamicAutoDiffCostFunction<Functor, Stride>(new Functor{shape_, std::move(cost)});
    for (int size : sizes_) function->AddParameterBlock(size);
    function->SetNumResiduals(num_residuals);
    return function;
  }

  /// The current values as a tree shaped like the prototype.
  Tree tree() const { return ptree::unflatten(shape_->prototype, values_); }
  /// Writes the current values into a tree of the prototype's shape: the same leaves at the same paths with the same
  /// shapes, matched leaf by leaf (a 2 x 5 leaf does not take a 5 x 2 block's values). Throws StructureError naming the
  /// path and both shapes otherwise, before anything is written.
  void write_to(Tree& tree) const {
    const ptree::Layout target = ptree::layout(tree);
    const auto& expected = shape_->layout.leaves;
    if (target.leaves.size() != expected.size())
      throw StructureError("CeresTreeBlocks::write_to: the tree has " + std::to_string(target.leaves.size()) +
                           " leaves, the blocks were made from a tree with " + std::to_string(expected.size()));
    for (std::size_t i = 0; i < expected.size(); ++i) {
      const ptree::LeafLayout& got = target.leaves[i];
      const ptree::LeafLayout& want = expected[i];
      if (got.path != want.path)
        throw StructureError("CeresTreeBlocks::write_to: leaf " + std::to_string(i) + " is \"" + got.path +
                             "\", the blocks have \"" + want.path + "\" there");
      if (got.dims != want.dims || got.size != want.size)
        throw StructureError("CeresTreeBlocks::write_to: leaf \"" + got.path + "\" has shape " + shape_text(got) +
                             ", the blocks hold shape " + shape_text(want));
    }
    ptree::unflatten_into(tree, values_);
  }

 private:
  // "5x2", "7" (a column vector), "scalar", with the free parameter count when it differs from the dense size.
  static std::string shape_text(const ptree::LeafLayout& l) {
    std::string text;
    for (Eigen::Index d : l.dims) text += (text.empty() ? "" : "x") + std::to_string(d);
    if (text.empty()) text = "scalar";
    Eigen::Index dense = 1;
    for (Eigen::Index d : l.dims) dense *= d;
    if (dense != l.size) text += " (" + std::to_string(l.size) + " free parameters)";
    return text;
  }

  std::shared_ptr<const detail::CeresTreeShape<Tree>> shape_;
  Eigen::VectorXd values_;
  std::vector<double*> blocks_;
  std::vector<int> sizes_;
  std::vector<std::function<ceres::Manifold*()>> make_manifold_;
};

}  // namespace geomopt
