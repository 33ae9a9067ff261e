// The code of docs/optimizers.md and of the README's optimizer lines (the page's per-optimizer examples are regions of
// examples/optimizers_tour/main.cpp). Every C++ block of those pages is a region of a compiled file
// (tests/docs/snippet.cmake); docs_examples runs this one (`docs_examples optimizers`): the steps must reduce a
// least-squares loss, keep the Stiefel leaf on its manifold, and leave frozen leaves alone.
// snippet-begin: readme
#include <geomopt/optimizers.hpp>

// snippet-end: readme
#include <Eigen/Core>

#include "expect.hpp"

namespace docs_optimizers {

// snippet-begin: readme
template <class T>
struct Frame {
  geomopt::Stiefel<T> Y;                               // on St(N, n): lifted, Adam in tangent coordinates, retracted
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> W;  // stepped as torch.optim.Adam would
  GEOMOPT_PTREE(Y, W)
};

// snippet-end: readme
template <class T>
struct Dense {
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> weight;
  Eigen::Matrix<T, Eigen::Dynamic, 1> bias;
  GEOMOPT_PTREE(weight, bias)
};

// Paths embed.weight, embed.bias, head.weight, head.bias.
template <class T>
struct Net {
  Dense<T> embed, head;
  GEOMOPT_PTREE(embed, head)
};

// A frame on a Stiefel manifold beside the network (the Muon example).
struct FramedNet {
  geomopt::Stiefel<double> frame;
  Net<double> net;
  GEOMOPT_PTREE(frame, net)
};

// The least-squares loss |head.W (embed.W x + embed.b) + head.b - y|^2 / 2 of one sample, and its gradients.
double loss(const Net<double>& net, const Eigen::VectorXd& x, const Eigen::VectorXd& y, Net<double>& grads) {
  const Eigen::VectorXd h = net.embed.weight * x + net.embed.bias;
  const Eigen::VectorXd r = net.head.weight * h + net.head.bias - y;
  const Eigen::VectorXd dh = net.head.weight.transpose() * r;
  grads.head.weight = r * h.transpose();
  grads.head.bias = r;
  grads.embed.weight = dh * x.transpose();
  grads.embed.bias = dh;
  return r.squaredNorm() / 2;
}

int run() {
  geomopt_docs::Expect expect{"optimizers"};

  {
    geomopt::Rng rng(1);
    Frame<double> params{geomopt::Stiefel<double>::random_point(rng, 100, 4), Eigen::MatrixXd::Random(4, 10)};
    Frame<double> grads{geomopt::Stiefel<double>(Eigen::MatrixXd::Random(100, 4)), Eigen::MatrixXd::Random(4, 10)};
    // snippet-begin: readme
    geomopt::Adam adam({.lr = 1e-3}, {.clip_norm = 1.0, .threads = 2});
    auto state = adam.init(params);
    adam.step(params, grads, state);  // grads: a Frame<T> of Euclidean gradients
    // snippet-end: readme
    expect(geomopt::check(params.Y) < 1e-12 && state.step_count() == 1 && state.coordinates() == 100 * 4 - 10 + 40,
           "README: one clipped two-thread Adam step of a tree with a Stiefel leaf");
  }

  const Eigen::VectorXd x = Eigen::VectorXd::LinSpaced(3, -1, 1), y = Eigen::VectorXd::Constant(2, 0.5);
  const Net<double> start{{Eigen::MatrixXd::Constant(4, 3, 0.1), Eigen::VectorXd::Zero(4)},
                          {Eigen::MatrixXd::Constant(2, 4, 0.1), Eigen::VectorXd::Zero(2)}};
  {
    Net<double> params = start, grads = start;
    const double first = loss(params, x, y, grads);
    // snippet-begin: intro
    geomopt::Adam adam({.lr = 1e-2});  // the optimizer's settings, then optionally the common ones
    auto state = adam.init(params);    // state for this tree (or adam.init(params, rule))
    adam.step(params, grads, state);   // grads: a tree of params' type
    // snippet-end: intro
    for (int t = 0; t < 50; ++t) {
      loss(params, x, y, grads);
      adam.step(params, grads, state);
    }
    expect(loss(params, x, y, grads) < 0.1 * first, "Adam reduces the loss");
  }

  {
    Net<double> params = start, grads = start;
    Net<double> twin = start;  // the same run, with empty gradients for the frozen leaves
    const double first = loss(params, x, y, grads);
    geomopt::Adam adam({.lr = 1e-2, .weight_decay = 1e-3});
    // snippet-begin: leaf_rule
    auto rule = [](const geomopt::ptree::Path& p) {
      if (p.str().starts_with("embed.")) return geomopt::LeafOptions{.frozen = true};
      if (p.str().ends_with(".bias")) return geomopt::LeafOptions{.lr_scale = 0.1, .weight_decay = 0.0};
      return geomopt::LeafOptions{};
    };
    auto state = adam.init(params, rule);
    // snippet-end: leaf_rule
    auto twin_state = adam.init(twin, rule);
    for (int t = 0; t < 50; ++t) {
      adam.step(params, grads, state);
      // snippet-begin: frozen_gradient
      Net<double> head_grads = grads;
      head_grads.embed = {};  // embed.* is frozen: its gradients are not read, and may be empty (a 0 x 0 matrix)
      adam.step(twin, head_grads, twin_state);
      // snippet-end: frozen_gradient
      loss(params, x, y, grads);
    }
    expect(params.embed.weight == start.embed.weight && state.leaf_frozen(0) && state.leaf_frozen(1) &&
               !state.leaf_frozen(2) && state.coordinates() == 2 * 4 + 2,
           "the rule froze embed.*");
    expect(loss(params, x, y, grads) < first, "the head alone still learns");
    expect(geomopt::ptree::flatten(twin) == geomopt::ptree::flatten(params),
           "empty gradients of frozen leaves step the others exactly as full ones");
  }
  {
    // A layer on St(12, 4) next to Euclidean ones: ManifoldMuon steps the Stiefel leaf by manifold Muon, the two
    // weight matrices by Muon and the biases by AdamW, in one call.
    geomopt::Rng rng(2);
    FramedNet params{geomopt::Stiefel<double>::random_point(rng, 12, 4), start}, grads = params;
    const double first = loss(params.net, x, y, grads.net);
    // snippet-begin: muon
    geomopt::ManifoldMuon muon(
        {.lr = 0.02, .momentum = 0.95, .nesterov = true, .ns_steps = 5, .fallback = {.lr = 1e-2, .weight_decay = 0}});
    auto state = muon.init(params);  // matrices: momentum; the frame: also its multiplier; biases: AdamW's
    muon.step(params, grads, state);
    // snippet-end: muon
    for (int t = 0; t < 50; ++t) {
      grads.frame = geomopt::Stiefel<double>(Eigen::MatrixXd(Eigen::MatrixXd::Random(12, 4)));
      loss(params.net, x, y, grads.net);
      muon.step(params, grads, state);
    }
    expect(loss(params.net, x, y, grads.net) < 0.5 * first, "Muon reduces the loss");
    expect(geomopt::check(params.frame) < 1e-12, "ManifoldMuon keeps the frame on St(12, 4)");
    expect(state.muon_leaf_count() == 3 &&
               state.nbytes() == (12 * 4 + 4 * 4 + 4 * 3 + 2 * 4 + 2 * (4 + 2)) * sizeof(double),
           "state: momentum and multiplier for the frame, momentum for the two matrices, AdamW's two moments for the "
           "biases");
  }
  {
    // Three groups, three optimizers, one step: Muon on the network's matrices, Riemannian Adam on the frame, AdamW
    // on the biases; one clip norm over all of them.
    geomopt::Rng rng(3);
    FramedNet params{geomopt::Stiefel<double>::random_point(rng, 12, 4), start}, grads = params;
    const double first = loss(params.net, x, y, grads.net);
    // snippet-begin: partition
    auto matrices = [](const geomopt::LeafInfo& leaf) { return leaf.matrix() && leaf.path.str().ends_with("weight"); };
    geomopt::Partition opt({.clip_norm = 10.0}, geomopt::group("muon", geomopt::Muon({.lr = 0.02}), matrices),
                           geomopt::group("frame", geomopt::Adam({.lr = 1e-2}), geomopt::kind_is("Stiefel")),
                           geomopt::group("rest", geomopt::AdamW({.lr = 1e-2})));  // no rule: every other leaf
    auto state = opt.init(params);  // each group's state, walked and checkpointed by path
    opt.step(params, grads, state);
    // snippet-end: partition
    for (int t = 0; t < 50; ++t) {
      grads.frame = geomopt::Stiefel<double>(Eigen::MatrixXd(Eigen::MatrixXd::Random(12, 4)));
      loss(params.net, x, y, grads.net);
      opt.step(params, grads, state);
    }
    expect(loss(params.net, x, y, grads.net) < 0.5 * first, "the partition reduces the loss");
    expect(geomopt::check(params.frame) < 1e-12, "Adam keeps the frame on St(12, 4)");
    expect(state.group_name(state.group_of_leaf(0)) == "frame" && state.group_name(state.group_of_leaf(1)) == "muon" &&
               state.group_name(state.group_of_leaf(2)) == "rest",
           "frame, embed.weight and embed.bias go to their groups");
  }
  return expect.failures;
}

}  // namespace docs_optimizers
