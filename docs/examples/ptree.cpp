// The code of docs/ptree.md and of the README's quick start. Every C++ block of those pages is a region of this file
// (tests/docs/snippet.cmake checks the text), and docs_examples runs it (`docs_examples ptree`): run() returns 0 only
// when every walk gave the numbers the page says it gives.
// snippet-begin: readme
#include <geomopt/ptree.hpp>
#include <iostream>
// snippet-end: readme

#include <Eigen/Core>
#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "expect.hpp"

namespace docs_ptree {

// snippet-begin: readme
namespace pt = geomopt::ptree;

// snippet-begin: declare
template <class T>
struct Dense {
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> weight;
  Eigen::Matrix<T, Eigen::Dynamic, 1> bias;
  GEOMOPT_PTREE(weight, bias)  // the children, in walk order, named after the members
};
// snippet-end: declare

struct Mlp {
  std::vector<Dense<float>> layers;
  GEOMOPT_PTREE(layers)
};

// snippet-end: readme

// The same struct with the two members GEOMOPT_PTREE writes spelled out.
template <class T>
struct DenseByHand {
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> weight;
  Eigen::Matrix<T, Eigen::Dynamic, 1> bias;
  // snippet-begin: by_hand
  template <class Visit, class... Self>
  static void ptree_walk(Visit&& visit, Self&&... self) {
    visit("weight", self.weight...);
    visit("bias", self.bias...);
  }
  using ptree_children = geomopt::ptree::children<decltype(weight), decltype(bias)>;
  // snippet-end: by_hand
};

// snippet-begin: leaf_protocol
namespace mylib {

// A diagonal-plus-low-rank matrix diag(d) + U U^T, stored as two blocks: a leaf with two storage blocks.
template <class T>
struct LowRank {
  Eigen::Matrix<T, Eigen::Dynamic, 1> d;
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> U;
};

// The storage: references to the blocks (one lvalue, or a std::tuple of them), for const and non-const leaves.
template <class T>
auto free_parameters(LowRank<T>& x) {
  return std::tie(x.d, x.U);
}
template <class T>
auto free_parameters(const LowRank<T>& x) {
  return std::tie(x.d, x.U);
}

// A leaf like the prototype over new storage (plain Eigen objects whose scalar S may differ from T), for unflatten,
// cast and map; a leaf with sizes or settings beyond its storage would copy them from the prototype.
template <class T, class S>
LowRank<S> rebuild(
    const LowRank<T>&,
    std::tuple<Eigen::Matrix<S, Eigen::Dynamic, 1>, Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic>>&& data) {
  return {std::move(std::get<0>(data)), std::move(std::get<1>(data))};
}

// Optional: the name summary() shows.
template <class T>
std::string ptree_type_name(const LowRank<T>&) {
  return "LowRank";
}

}  // namespace mylib
// snippet-end: leaf_protocol

// snippet-begin: structured_leaf
template <class T>
struct Gaussian {
  mylib::LowRank<T> covariance;
  Eigen::Matrix<T, Eigen::Dynamic, 1> mean;
  GEOMOPT_PTREE(covariance, mean)
};

// snippet-end: structured_leaf

int run() {
  geomopt_docs::Expect expect{"ptree"};

  {
    // snippet-begin: readme
    Mlp model{{{Eigen::MatrixXf::Random(4, 3), Eigen::VectorXf::Zero(4)}}};
    std::cout << pt::summary(model);         // path, type, dims, parameters, bytes
    Eigen::VectorXf v = pt::flatten(model);  // every trainable parameter, in walk order
    pt::for_each_with_path(
        [](const pt::Path& path, const auto& leaf) {
          std::cout << path.str() << ": " << leaf.size() << " numbers\n";  // layers.0.weight: 12 numbers, ...
        },
        model);
    Mlp same = pt::unflatten(model, v);  // a tree shaped like model, over v
    // snippet-end: readme
    expect(v.size() == 16 && same.layers[0].weight == model.layers[0].weight, "README: flatten and unflatten");
  }

  {
    const Dense<double> tree{Eigen::MatrixXd::Random(4, 3), Eigen::VectorXd::Random(4)};
    const DenseByHand<double> by_hand{tree.weight, tree.bias};
    expect(pt::visits(tree) == pt::visits(by_hand) && pt::flatten(tree) == pt::flatten(by_hand),
           "a hand-written ptree_walk walks like GEOMOPT_PTREE");
  }

  {
    // snippet-begin: structured_leaf
    Gaussian<double> g{{Eigen::VectorXd::Ones(3), Eigen::MatrixXd::Random(3, 2)}, Eigen::VectorXd::Zero(3)};
    Eigen::VectorXd v = pt::flatten(g);      // d (3 numbers), U (6, column-major), mean (3)
    Gaussian<float> h = pt::cast<float>(g);  // through rebuild: a LowRank<float>
    std::cout << pt::summary(g);             // covariance: type LowRank, dims 9, 9 parameters
    // snippet-end: structured_leaf
    expect(v.size() == 12 && v.head(3) == Eigen::VectorXd::Ones(3) && v.segment(3, 6) == g.covariance.U.reshaped(),
           "a structured leaf flattens block by block");
    expect(h.covariance.U.cast<double>().isApprox(g.covariance.U, 1e-6) && pt::layout(g).leaves[0].dims.size() == 1,
           "a structured leaf casts through rebuild");
  }

  {
    // snippet-begin: walks
    Dense<double> a{Eigen::MatrixXd::Ones(4, 3), Eigen::VectorXd::Ones(4)};
    Dense<double> b{Eigen::MatrixXd::Constant(4, 3, 2.0), Eigen::VectorXd::Constant(4, 2.0)};

    pt::for_each([](auto& x, const auto& y) { x += y; }, a, b);  // leaf by leaf, in walk order: a's entries are 3
    pt::for_each_with_path(
        [](const pt::Path& path, const auto& x) {
          std::cout << path.str() << " " << x.rows() << "x" << x.cols() << "\n";  // "weight 4x3", "bias 4x1"
        },
        a);
    Dense<double> d = pt::map([](const auto& x, const auto& y) { return x - y; }, a, b);  // a new tree, entries 1
    pt::map_into([](const auto& x) { return 2 * x; }, d, b);  // in place: d = 2 b, entries 4
    double sum = pt::fold([](double acc, const auto& x) { return acc + x.sum(); }, 0.0, d);  // 16 entries of 4: 64
    pt::for_each_storage([](auto& block) { block.setZero(); }, d);  // one storage block at a time
    Eigen::Index n = pt::fold_storage([](Eigen::Index acc, const auto& block) { return acc + block.size(); },
                                      Eigen::Index{0}, a);  // 16 numbers
    // snippet-end: walks
    expect(a.weight(0, 0) == 3 && sum == 64 && n == 16 && d.bias.isZero(), "the walks");

    // snippet-begin: structure_error
    Dense<double> other{Eigen::MatrixXd::Zero(4, 3), Eigen::VectorXd::Zero(2)};
    try {
      pt::for_each([](auto& x, const auto& y) { x += y; }, a, other);
    } catch (const geomopt::StructureError& e) {
      std::cout << e.what() << "\n";  // bias: 4 rows in tree 0, 2 in tree 1
    }
    // snippet-end: structure_error
    expect(a.weight(0, 0) == 3, "a failed walk touches nothing");

    // snippet-begin: flatten
    pt::Layout l = pt::layout(a);               // l.leaves: {path, offset, size, dims}; l.size()
    Eigen::VectorXd v = pt::flatten(a);         // Eigen::Matrix<scalar_t<Tree>, Dynamic, 1>
    Eigen::VectorXf w = pt::flatten<float>(a);  // another scalar
    pt::flatten_into(v, a);                     // no allocation; a wrong length throws StructureError
    Dense<float> t = pt::unflatten(a, w);       // rebind_t<Tree, scalar of w>; sizes, buffers, ties from a
    pt::unflatten_into(a, v);                   // no allocation
    // snippet-end: flatten
    expect(l.size() == 16 && l.leaves[1].path == "bias" && l.leaves[1].offset == 12 && t.bias == w.tail(4),
           "layout and flatten");
  }
  return expect.failures;
}

}  // namespace docs_ptree
