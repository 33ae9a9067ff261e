// Fashion-MNIST with orthonormal hidden layers, written with libtorch's torch::nn and autograd in C++, stepped by
// geomopt: the gradients come from libtorch's reverse mode (no hand-written backward pass), the step is geomopt's
// fused Adam over a geomopt::libtorch::ModuleTree, the hidden weights in their Stiefel geometry.
//
// The network is the Python example's (examples/python/fashion_mnist.py) and the C++ example's `stiefel` one:
// 784 - 128 - 64 - 10, hidden layers y = relu(g * (W x) + b) with W orthonormal (128 x 784 and 64 x 128, rows
// orthonormal: Stiefel points), a Euclidean gain g and bias b, and a free linear head. Adam lr 2e-3, the Stiefel
// weights at half that rate (a LeafRule by parameter name), batch 256, one thread.
//
//   libtorch_mlp [--epochs 3] [--train-limit N] [--test-limit N] [--threads 1] [--min-accuracy A] [--save FILE]
//
// Prints the test accuracy after each epoch and max |W W^T - I| over the hidden weights, computed by torch. Exits 1
// when that defect exceeds 1e-4 or the final accuracy is below --min-accuracy (percent); --save writes a geomopt::io
// checkpoint that geomopt.io in Python loads into the same network written with torch.nn.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <geomopt/libtorch.hpp>
#include <geomopt/optimizers.hpp>
#include <iostream>
#include <string>
#include <vector>

#include "../common/cli.hpp"
#include "../nn/idx.hpp"
#ifdef GEOMOPT_EXAMPLE_IO
#include <geomopt/io.hpp>
#endif

namespace {

constexpr float kMean = 0.2860f, kStd = 0.3530f;  // the training set's pixel mean and deviation (of pixel / 255)

torch::Tensor orthonormal_rows(std::int64_t rows, std::int64_t cols) {
  const auto q = std::get<0>(torch::linalg::qr(torch::randn({cols, rows}, torch::kFloat64)));
  return q.t().contiguous().to(torch::kFloat32);
}

// A hidden layer relu(g * (W x) + b), W with orthonormal rows.
struct StiefelLayerImpl : torch::nn::Module {
  StiefelLayerImpl(std::int64_t in, std::int64_t out) {
    weight = register_parameter("weight", orthonormal_rows(out, in));
    gain = register_parameter("gain", torch::full({out}, std::sqrt(static_cast<float>(in) / out)));
    bias = register_parameter("bias", torch::zeros({out}));
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::relu(gain * x.matmul(weight.t()) + bias); }
  torch::Tensor weight, gain, bias;
};
TORCH_MODULE(StiefelLayer);

struct NetImpl : torch::nn::Module {
  NetImpl() {
    hidden1 = register_module("hidden1", StiefelLayer(784, 128));
    hidden2 = register_module("hidden2", StiefelLayer(128, 64));
    head = register_module("head", torch::nn::Linear(64, 10));
  }
  torch::Tensor forward(const torch::Tensor& x) { return head(hidden2(hidden1(x))); }
  StiefelLayer hidden1{nullptr}, hidden2{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(Net);

struct Data {
  torch::Tensor x, y;
};

Data load(const std::string& split, std::int64_t limit) {
  const std::string dir = "/usr/share/datasets/fashion-mnist/";  // Debian's dataset-fashion-mnist
  const std::string prefix = split == "train" ? "train" : "t10k";
  auto pair = geomopt::examples::read_idx_pair(dir + prefix + "-images-idx3-ubyte.gz",
                                               dir + prefix + "-labels-idx1-ubyte.gz", 10);
  const std::int64_t n = std::min<std::int64_t>(limit, pair.images.count);
  auto pixels = torch::from_blob(pair.images.pixels.data(), {n, 784}, torch::kUInt8).to(torch::kFloat32);
  auto labels = torch::from_blob(pair.labels.labels.data(), {n}, torch::kUInt8).to(torch::kInt64);
  return {(pixels / 255 - kMean) / kStd, labels};
}

double accuracy(Net& net, const Data& d) {
  torch::NoGradGuard no_grad;
  const auto predicted = net->forward(d.x).argmax(1);
  return 100.0 * predicted.eq(d.y).sum().item<double>() / static_cast<double>(d.y.size(0));
}

double defect(Net& net) {
  torch::NoGradGuard no_grad;
  double worst = 0;
  for (const auto& w : {net->hidden1->weight, net->hidden2->weight}) {
    const auto wd = w.to(torch::kFloat64);
    worst = std::max(worst, (wd.matmul(wd.t()) - torch::eye(w.size(0), torch::kFloat64)).abs().max().item<double>());
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) try {
  long epochs = 3, train_limit = 60000, test_limit = 10000, threads = 1;
  double min_accuracy = 0;
  std::string save;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a value");
    const char* value = argv[++i];
    if (flag == "--epochs")
      epochs = geomopt::examples::parse_integer(flag, value, 1);
    else if (flag == "--train-limit")
      train_limit = geomopt::examples::parse_integer(flag, value, 1);
    else if (flag == "--test-limit")
      test_limit = geomopt::examples::parse_integer(flag, value, 1);
    else if (flag == "--threads")
      threads = geomopt::examples::parse_integer(flag, value, 1);
    else if (flag == "--min-accuracy")
      min_accuracy = geomopt::examples::parse_real(flag, value, 0);
    else if (flag == "--save")
      save = value;
    else
      throw std::invalid_argument("unknown flag " + flag);
  }
  torch::set_num_threads(static_cast<int>(threads));
  torch::manual_seed(0);
  const Data train = load("train", train_limit), test = load("test", test_limit);

  // snippet-begin: tree
  Net net;
  // The hidden weights are Stiefel points; every other parameter is Euclidean.
  geomopt::libtorch::ModuleTree<float> tree(
      *net, {{"hidden1.weight", geomopt::TensorKind::stiefel}, {"hidden2.weight", geomopt::TensorKind::stiefel}});
  geomopt::Adam adam({.lr = 2e-3}, {.threads = static_cast<int>(threads)});
  auto state = adam.init(tree.params(), [](const geomopt::ptree::Path& path) {
    geomopt::LeafOptions o;
    if (path.str().ends_with(".weight") && path.str().starts_with("hidden")) o.lr_scale = 0.5;
    return o;
  });
  // snippet-end: tree

  constexpr std::int64_t batch = 256;
  const std::int64_t n = train.x.size(0);
  double seconds = 0;
  for (long epoch = 1; epoch <= epochs; ++epoch) {
    const auto order = torch::randperm(n);
    const auto start = std::chrono::steady_clock::now();
    for (std::int64_t b = 0; b < n; b += batch) {
      const auto index = order.slice(0, b, std::min(b + batch, n));
      // snippet-begin: tree
      net->zero_grad();
      torch::nn::functional::cross_entropy(net->forward(train.x.index_select(0, index)), train.y.index_select(0, index))
          .backward();                                // libtorch's reverse mode
      adam.step(tree.params(), tree.grads(), state);  // geomopt's step, in place, Stiefel leaves retracted
      // snippet-end: tree
    }
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("epoch %ld: test accuracy %.2f %%, max |W W^T - I| %.2e, %.1f s training\n", epoch, accuracy(net, test),
                defect(net), seconds);
  }
  const double final_accuracy = accuracy(net, test), final_defect = defect(net);
#ifdef GEOMOPT_EXAMPLE_IO
  if (!save.empty()) {
    geomopt::io::save_checkpoint(save, tree.params(), state);
    std::printf("saved %s\n", save.c_str());
  }
#else
  if (!save.empty()) throw std::invalid_argument("--save needs geomopt::io (HDF5), which this build does not have");
#endif
  if (final_defect > 1e-4 || final_accuracy < min_accuracy) {
    std::fprintf(stderr, "libtorch_mlp: accuracy %.2f %% (at least %.2f wanted), defect %.2e (at most 1e-4)\n",
                 final_accuracy, min_accuracy, final_defect);
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "libtorch_mlp: " << e.what() << "\n";
  return 2;
}
