// ModuleTree<T>: the parameters of a torch::nn::Module as a geomopt parameter tree over the tensors' own memory, and
// a tree of the same shape over their gradients, so that geomopt's C++ optimizers step a libtorch model in place
// with the gradients of libtorch's autograd.
//
//   Net net;                                                               // a torch::nn::Module
//   geomopt::libtorch::ModuleTree<float> tree(net, {{"frame", geomopt::TensorKind::stiefel}});
//   geomopt::Adam adam({.lr = 1e-3});
//   auto state = adam.init(tree.params());
//   ...  loss.backward();
//   adam.step(tree.params(), tree.grads(), state);                         // writes the parameters' storage
//
// The tree is a std::map from the module's parameter names (named_parameters(): "fc.weight", "layers.0.bias") to
// leaves, so paths, per-leaf options and geomopt::io checkpoints use PyTorch's names, and a checkpoint moves between
// this tree, geomopt.io in Python and a C++ struct with members of those names. A tensor is the leaf
// tensor_layout.hpp says: a Euclidean tensor a ptree::BorrowedArray (row-major, the vector form for 0-D and 1-D
// tensors), a manifold tensor of the kind given for its name a Borrowed<M> point (a wide Stiefel X, rows
// orthonormal, is the point X^T). Nothing is copied: a step writes the tensors' storage.
//
// Invariants:
//   - construction checks every parameter: CPU, strided, contiguous, of scalar T, of a shape its kind can have, a
//     manifold parameter on its manifold (tensor_point_tolerance), every name in `manifolds` a parameter; a tall
//     Stiefel or Grassmann tensor (orthonormal columns) is not a point in its memory and is refused: store its
//     transpose. Failures throw std::invalid_argument naming the parameter and what was expected;
//   - grads() points the gradient leaves at each parameter's current .grad() (zero_grad may have replaced or reset
//     it), after checking all of them (std::invalid_argument naming the first bad one, and nothing re-pointed); an
//     undefined gradient is an empty leaf, which the optimizer's CommonOptions::missing_gradient decides about
//     (MissingGradient::skip: the parameter sits the step out, as torch.optim does). It allocates nothing;
//   - refresh() points the parameter leaves at the tensors' current storage, for a parameter whose storage was
//     replaced (set_data, a load); it checks as construction does;
//   - the module and its parameters must outlive the tree.
#pragma once

#include <torch/torch.h>

#include <Eigen/Core>
#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "geomopt/manifolds.hpp"
#include "geomopt/manifolds/tensor_layout.hpp"
#include "geomopt/ptree/borrowed_array.hpp"

namespace geomopt::libtorch {

/// A leaf over a tensor's memory: Euclidean (matrix or vector form) or a point of one of the manifolds.
template <class T>
using Leaf = std::variant<ptree::BorrowedArray<T>, ptree::BorrowedArray<T, 1>, Borrowed<Stiefel<T>>,
                          Borrowed<Grassmann<T>>, Borrowed<Sphere<T>>, Borrowed<SpecialOrthogonal<T>>, Borrowed<SPD<T>>,
                          Borrowed<Oblique<T>>, Borrowed<Lorentz<T>>>;
/// The parameter tree: leaves by the module's parameter names.
template <class T>
using Tree = std::map<std::string, Leaf<T>>;

namespace detail {

template <class T>
Leaf<T> empty_leaf(TensorKind kind, bool vector) {
  if (kind == TensorKind::euclidean)
    return vector ? Leaf<T>(ptree::BorrowedArray<T, 1>()) : Leaf<T>(ptree::BorrowedArray<T>());
  return with_point_type<T>(kind, []<class M>(std::type_identity<M>) { return Leaf<T>(Borrowed<M>()); });
}

template <class T>
constexpr torch::Dtype dtype_of() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "ModuleTree<T>: T is float or double");
  return std::is_same_v<T, float> ? torch::kFloat32 : torch::kFloat64;
}

}  // namespace detail

template <class T = float>
class ModuleTree {
 public:
  using Manifolds = std::map<std::string, TensorKind>;

  /// The tree over module's parameters (named_parameters(), recursively); `manifolds` gives the kind of each
  /// manifold parameter by name, every other parameter is Euclidean.
  explicit ModuleTree(const torch::nn::Module& module, const Manifolds& manifolds = {}) {
    std::set<std::string> unused;
    for (const auto& [name, kind] : manifolds) unused.insert(name);
    for (const auto& item : module.named_parameters(/*recurse=*/true)) {
      Entry e{item.key(), item.value(), TensorKind::euclidean, {}};
      if (const auto it = manifolds.find(e.name); it != manifolds.end()) {
        e.kind = it->second;
        unused.erase(e.name);
      }
      e.layout = layout_of(e);
      params_.emplace(e.name, detail::empty_leaf<T>(e.kind, e.layout.vector));
      grads_.emplace(e.name, detail::empty_leaf<T>(e.kind, e.layout.vector));
      entries_.push_back(std::move(e));
    }
    if (!unused.empty())
      throw std::invalid_argument("geomopt::libtorch::ModuleTree: '" + *unused.begin() +
                                  "' is given a manifold but is not a parameter of the module");
    for (Entry& e : entries_) {
      e.param = &params_.at(e.name);
      e.grad = &grads_.at(e.name);
    }
    refresh();
  }

  ModuleTree(const ModuleTree&) = delete;  // the entries point into the trees
  ModuleTree& operator=(const ModuleTree&) = delete;

  /// The parameters, over the tensors' memory.
  Tree<T>& params() noexcept { return params_; }
  const Tree<T>& params() const noexcept { return params_; }

  /// The gradients, over each parameter's current .grad() (an undefined one: an empty leaf).
  const Tree<T>& grads() {
    for (const Entry& e : entries_) {
      const torch::Tensor& g = e.tensor.grad();
      if (g.defined()) require(e, g, "gradient");
    }
    for (const Entry& e : entries_) {
      const torch::Tensor& g = e.tensor.grad();
      lend(*e.grad, g.defined() ? g.template data_ptr<T>() : nullptr, e.layout);
    }
    return grads_;
  }

  /// Points the parameter leaves at the tensors' current storage, checking each as construction does.
  void refresh() {
    for (const Entry& e : entries_) {
      require(e, e.tensor, "parameter");
      if (e.kind != TensorKind::euclidean) require_on_manifold(e);
    }
    for (const Entry& e : entries_) lend(*e.param, e.tensor.template data_ptr<T>(), e.layout);
  }

  /// The parameters' names, in named_parameters() order.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const Entry& e : entries_) out.push_back(e.name);
    return out;
  }

 private:
  struct Entry {
    std::string name;
    torch::Tensor tensor;  // shares the parameter's TensorImpl: set_data and .grad() are seen through it
    TensorKind kind;
    TensorLayout layout;
    Leaf<T>* param = nullptr;
    Leaf<T>* grad = nullptr;
  };

  static std::string shape_of(const torch::Tensor& t) {
    return geomopt::detail::shape_text(std::vector<std::int64_t>(t.sizes().begin(), t.sizes().end()));
  }

  static TensorLayout layout_of(const Entry& e) {
    const std::vector<std::int64_t> shape(e.tensor.sizes().begin(), e.tensor.sizes().end());
    TensorLayout l;
    try {
      l = tensor_layout(e.kind, shape);
    } catch (const std::invalid_argument& error) {
      throw std::invalid_argument("geomopt::libtorch: parameter '" + e.name + "': " + error.what());
    }
    if (l.transposed)
      throw std::invalid_argument("geomopt::libtorch: parameter '" + e.name + "': a tall " + tensor_kind_name(e.kind) +
                                  " tensor of shape " + shape_of(e.tensor) +
                                  " (orthonormal columns) is not a point in its row-major memory; store its "
                                  "transpose, with orthonormal rows");
    return l;
  }

  // t (the parameter or its gradient) is a dense CPU tensor of T, contiguous, of the parameter's shape.
  static void require(const Entry& e, const torch::Tensor& t, const char* what) {
    auto fail = [&](const std::string& expected) {
      throw std::invalid_argument("geomopt::libtorch: the " + std::string(what) + " of '" + e.name + "' " + expected);
    };
    if (!t.device().is_cpu() || t.layout() != torch::kStrided) fail("must be a dense CPU tensor");
    if (t.scalar_type() != detail::dtype_of<T>())
      fail(std::string("must be ") + (std::is_same_v<T, float> ? "float32" : "float64") + ", not " +
           std::string(c10::toString(t.scalar_type())));
    if (!t.is_contiguous()) fail("must be contiguous");
    if (t.sizes() != e.tensor.sizes())
      fail("must have the parameter's shape " + shape_of(e.tensor) + ", not " + shape_of(t));
  }

  static void require_on_manifold(const Entry& e) {
    const double distance = with_point_type<T>(e.kind, [&]<class M>(std::type_identity<M>) {
      return static_cast<double>(check(Borrowed<M>(e.tensor.template data_ptr<T>(), e.layout.rows, e.layout.cols)));
    });
    const double tolerance = tensor_point_tolerance<T>(e.layout.rows, e.layout.cols);
    if (!(distance <= tolerance))
      throw std::invalid_argument("geomopt::libtorch: parameter '" + e.name + "' is not a point of " +
                                  tensor_kind_name(e.kind) + ": its distance from the manifold is " +
                                  std::to_string(distance) + ", the tolerance " + std::to_string(tolerance));
  }

  static void lend(Leaf<T>& leaf, T* data, const TensorLayout& l) {
    std::visit([&](auto& x) { x.lend(data, l.rows, l.cols); }, leaf);
  }

  std::vector<Entry> entries_;
  Tree<T> params_, grads_;
};

}  // namespace geomopt::libtorch
