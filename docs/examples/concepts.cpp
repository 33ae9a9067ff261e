// The code of docs/concepts.md: a tree with containers, a manifold leaf and a buffer; tangent coordinates on St(6, 2);
// an optimizer with per-leaf options and every transform. Every C++ block of the page is a region of a compiled file
// (this one, or docs/examples/file_format.cpp for checkpoints; tests/docs/snippet.cmake); docs_examples runs it
// (`docs_examples concepts`) and checks the identities the page states.
#include <geomopt/optimizers.hpp>

#include <Eigen/Core>
#include <cmath>
#include <iostream>
#include <limits>
#include <vector>

#include "expect.hpp"

namespace docs_concepts {

template <class T>
struct Dense {
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> weight;
  Eigen::Matrix<T, Eigen::Dynamic, 1> bias;
  GEOMOPT_PTREE(weight, bias)
};

// snippet-begin: tree
template <class T>
struct Encoder {
  std::vector<Dense<T>> layers;                                      // layers.0.weight, layers.0.bias, ...
  geomopt::Stiefel<T> basis;                                         // a manifold leaf: storage is its 8 x 2 value
  geomopt::ptree::Buffer<Eigen::Matrix<T, Eigen::Dynamic, 1>> mean;  // saved and cast, never trained
  GEOMOPT_PTREE(layers, basis, mean)
};

// snippet-end: tree
int run() {
  geomopt_docs::Expect expect{"concepts"};
  namespace pt = geomopt::ptree;

  geomopt::Rng rng(7);
  // snippet-begin: tree
  Encoder<double> model{{{Eigen::MatrixXd::Random(8, 4), Eigen::VectorXd::Zero(8)}},
                        geomopt::Stiefel<double>::random_point(rng, 8, 2),
                        Eigen::VectorXd::Zero(8).eval()};
  Encoder<double> grads = pt::zeros_like(model);  // gradients: a tree of the model's type
  std::cout << pt::summary(model);                // layers.0.weight, layers.0.bias, basis, mean (a buffer)
  Eigen::Index n = pt::count(model);              // 32 + 8 + 16 = 56 trainable numbers
  Encoder<float> small = pt::cast<float>(model);  // the same tree in float, buffer included
  // snippet-end: tree
  expect(n == 56 && pt::layout(model).leaves.size() == 3 && small.mean->size() == 8, "the tree's parameters");

  {
    // snippet-begin: coordinates
    auto Y = geomopt::Stiefel<double>::random_point(rng, 6, 2);  // St(6, 2): dim(Y) = 6 * 2 - 3 = 9
    auto section = geomopt::make_section(Y);                     // lambda(Y) = [Y, Y_perp], as 2 reflectors
    Eigen::MatrixXd G = Eigen::MatrixXd::Random(6, 2);           // a Euclidean gradient at Y
    auto xi = geomopt::lift(Y, section, G);                      // A: 2 x 2 skew (1 number), B: 4 x 2 (8 numbers)
    Eigen::MatrixXd U = geomopt::to_ambient(Y, section, xi);     // Y A + Y_perp B: the Riemannian gradient
    double norm2 = geomopt::inner(Y, xi, xi);                    // the metric is the dot product of coordinates
    auto Z = Y;
    geomopt::retract(Z, xi, geomopt::Retraction::cayley);  // a step along xi, on St(6, 2)
    auto back = geomopt::inverse_retract(Y, Z);            // xi again: the inverse is exact
    // snippet-end: coordinates
    const Eigen::VectorXd coordinates = pt::flatten(xi);
    expect(geomopt::dim(Y) == 9 && coordinates.size() == 9, "nine coordinates");
    expect(U.isApprox(geomopt::riemannian_gradient(Y, G), 1e-12), "to_ambient(lift(G)) is the Riemannian gradient");
    expect(std::abs(norm2 - geomopt::metric(Y, U, U)) < 1e-12 && std::abs(norm2 - coordinates.squaredNorm()) < 1e-12,
           "inner = metric = dot product");
    expect(std::abs(G.cwiseProduct(U).sum() - norm2) < 1e-12, "metric(grad, V) = <G, V>");
    expect(geomopt::check(Z) < 1e-12 && (pt::flatten(back) - coordinates).norm() < 1e-10, "retract and its inverse");
  }

  {
    Encoder<double> before = model;
    grads.layers[0].weight.setConstant(1.0);  // a global norm above clip_norm
    grads.basis.value().setConstant(1.0);
    // snippet-begin: options
    geomopt::AdamW opt({.lr = 1e-2, .weight_decay = 1e-2},
                       {.schedule = geomopt::schedules::cosine(100, 10),  // 10 warm-up steps, then a half cosine
                        .clip_norm = 1.0,                                 // clip the gradients by their global norm
                        .ema_decay = 0.99,                                // keep a moving average of the parameters
                        .non_finite = geomopt::NonFinitePolicy::skip});   // a NaN or inf gradient skips the step
    auto state = opt.init(model, [](const geomopt::ptree::Path& path) {
      if (path.str() == "layers.0.bias") return geomopt::LeafOptions{.frozen = true};
      if (path.str() == "basis")
        return geomopt::LeafOptions{.lr_scale = 0.5, .retraction = geomopt::Retraction::geodesic};
      return geomopt::LeafOptions{};
    });
    geomopt::StepReport report = opt.step(model, grads, state);  // report.lr, .grad_norm, .clip_scale, .applied
    Encoder<double> averaged = geomopt::ema_params(state);       // the average, basis projected onto St(8, 2)
    // snippet-end: options
    expect(report.applied && std::abs(report.lr - 1e-2 / 11) < 1e-15 && report.clip_scale < 1, "the step's report");
    expect(model.layers[0].bias == before.layers[0].bias && model.layers[0].weight != before.layers[0].weight,
           "a frozen leaf is never written");
    expect(geomopt::check(model.basis) < 1e-12 && geomopt::check(averaged.basis) < 1e-12,
           "the basis and its average are on St(8, 2)");
    grads.layers[0].weight(0, 0) = std::numeric_limits<double>::quiet_NaN();
    const Encoder<double> kept = model;
    report = opt.step(model, grads, state);
    expect(!report.applied && model.layers[0].weight == kept.layers[0].weight && state.step_count() == 1 &&
               report.non_finite_leaf != nullptr && *report.non_finite_leaf == "layers.0.weight",
           "a NaN gradient skips the step");
  }
  return expect.failures;
}

}  // namespace docs_concepts
