// geomopt::libtorch::ModuleTree: geomopt's optimizers step a torch::nn::Module's tensors in place with libtorch's
// gradients. Checked against independent references: torch::optim::Adam's trajectory (float64, 100 steps) for the
// Euclidean parameters; the manifold's defining equation computed by torch for a Stiefel parameter after 2000 steps;
// a C++ struct of Eigen leaves stepped on the same numbers, bit for bit (the layout: row-major weights, a 0-D tensor,
// a wide Stiefel tensor as the point X^T); a checkpoint of the tree read by that struct and back. Bad input throws
// std::invalid_argument naming the parameter and leaves the tree as it was.
//
// libtorch's headers define glog's CHECK, which replaces doctest's short name: this file writes DOCTEST_CHECK.
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <Eigen/Core>
#include <cmath>
#include <cstring>
#include <geomopt/libtorch.hpp>
#include <geomopt/optimizers.hpp>
#include <string>
#include <vector>
#ifdef GEOMOPT_TEST_IO
#include <filesystem>
#include <geomopt/io.hpp>
#endif

namespace {

using geomopt::TensorKind;
using geomopt::libtorch::ModuleTree;
using Vector = geomopt::ptree::BorrowedArray<float, 1>;

torch::Tensor orthonormal_rows(std::int64_t rows, std::int64_t cols, torch::Dtype dtype) {
  const auto q = std::get<0>(torch::linalg::qr(torch::randn({cols, rows}, torch::kFloat64)));
  return q.t().contiguous().to(dtype);
}

// out = scale * fc(x frame^T): a Linear(2, 3), a Stiefel frame (2 x 6, orthonormal rows) and a 0-D scale.
struct NetImpl : torch::nn::Module {
  explicit NetImpl(torch::Dtype dtype = torch::kFloat32) {
    fc = register_module("fc", torch::nn::Linear(2, 3));
    frame = register_parameter("frame", orthonormal_rows(2, 6, dtype));
    scale = register_parameter("scale", torch::full({}, 1.5, dtype));
    to(dtype);
  }
  torch::Tensor forward(const torch::Tensor& x) { return scale * fc(x.matmul(frame.t())); }
  torch::nn::Linear fc{nullptr};
  torch::Tensor frame, scale;
};
TORCH_MODULE(Net);

void backward(Net& net, std::int64_t seed) {
  torch::manual_seed(seed);
  const auto x = torch::randn({16, 6}, net->frame.scalar_type());
  const auto target = torch::randn({16, 3}, net->frame.scalar_type());
  net->zero_grad();
  torch::mse_loss(net->forward(x), target).backward();
}

// The same model as a C++ user writes it; torch's (3, 2) weight is a column-major Eigen matrix here.
struct EigenFc {
  Eigen::MatrixXf weight;
  Eigen::VectorXf bias;
  GEOMOPT_PTREE(weight, bias)
};
struct EigenNet {
  EigenFc fc;
  geomopt::Stiefel<float> frame;
  Eigen::VectorXf scale;
  GEOMOPT_PTREE(fc, frame, scale)
};

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

EigenNet eigen_of(const torch::Tensor& w, const torch::Tensor& b, const torch::Tensor& frame, const torch::Tensor& s) {
  EigenNet e;
  e.fc.weight = Eigen::Map<const RowMajor>(w.data_ptr<float>(), w.size(0), w.size(1));
  e.fc.bias = Eigen::Map<const Eigen::VectorXf>(b.data_ptr<float>(), b.numel());
  // The wide (2, 6) tensor, row-major, is the column-major 6 x 2 point.
  e.frame = geomopt::Stiefel<float>(Eigen::Map<const Eigen::MatrixXf>(frame.data_ptr<float>(), 6, 2));
  e.scale = Eigen::Map<const Eigen::VectorXf>(s.data_ptr<float>(), 1);
  return e;
}
EigenNet params_of(Net& net) { return eigen_of(net->fc->weight, net->fc->bias, net->frame, net->scale); }
EigenNet grads_of(Net& net) {
  return eigen_of(net->fc->weight.grad(), net->fc->bias.grad(), net->frame.grad(), net->scale.grad());
}

bool same_bits(const EigenNet& e, Net& net) {
  const EigenNet t = params_of(net);
  auto eq = [](const auto& a, const auto& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
  };
  return eq(e.fc.weight, t.fc.weight) && eq(e.fc.bias, t.fc.bias) && eq(e.frame.value(), t.frame.value()) &&
         eq(e.scale, t.scale);
}

}  // namespace

TEST_CASE("the tree holds the module's parameters by name, over their memory") {
  // named_parameters() order: the module's own parameters, then its submodules'.
  Net net;
  ModuleTree<float> tree(*net, {{"frame", TensorKind::stiefel}});
  DOCTEST_CHECK((tree.names() == std::vector<std::string>{"frame", "scale", "fc.weight", "fc.bias"}));
  const auto& p = tree.params();
  DOCTEST_CHECK(std::get<geomopt::ptree::BorrowedArray<float>>(p.at("fc.weight")).value().data() ==
                net->fc->weight.data_ptr<float>());
  const auto& frame = std::get<geomopt::Borrowed<geomopt::Stiefel<float>>>(p.at("frame"));
  DOCTEST_CHECK(frame.value().data() == net->frame.data_ptr<float>());
  DOCTEST_CHECK(frame.value().rows() == 6);
  DOCTEST_CHECK(frame.value().cols() == 2);
  DOCTEST_CHECK(std::get<Vector>(p.at("scale")).value().size() == 1);
  DOCTEST_CHECK(geomopt::ptree::count(tree.params()) == 3 * 2 + 3 + 12 + 1);
}

TEST_CASE("a step through the tree is the C++ struct's step on the same numbers, bit for bit") {
  torch::manual_seed(1);
  Net net;
  ModuleTree<float> tree(*net, {{"frame", TensorKind::stiefel}});
  EigenNet reference = params_of(net);
  geomopt::Adam adam({.lr = 1e-2, .weight_decay = 0.1});
  auto state = adam.init(tree.params());
  auto reference_state = adam.init(reference);
  for (int k = 0; k < 5; ++k) {
    backward(net, 100 + k);
    const EigenNet g = grads_of(net);
    adam.step(reference, g, reference_state);
    adam.step(tree.params(), tree.grads(), state);
    REQUIRE(same_bits(reference, net));
  }
  DOCTEST_CHECK(geomopt::check(reference.frame) < 1e-5);
}

TEST_CASE("geomopt::Adam through the tree follows torch::optim::Adam (float64, 100 steps, weight decay)") {
  torch::manual_seed(2);
  auto make = [] {
    torch::manual_seed(3);
    return torch::nn::Sequential(torch::nn::Linear(5, 8), torch::nn::Tanh(), torch::nn::Linear(8, 2));
  };
  auto ours = make(), theirs = make();
  ours->to(torch::kFloat64);
  theirs->to(torch::kFloat64);
  ModuleTree<double> tree(*ours);
  geomopt::Adam adam({.lr = 1e-2, .weight_decay = 0.05});
  auto state = adam.init(tree.params());
  torch::optim::Adam reference(theirs->parameters(), torch::optim::AdamOptions(1e-2).weight_decay(0.05));
  for (int k = 0; k < 100; ++k) {
    const auto x = torch::randn({32, 5}, torch::kFloat64);
    const auto y = torch::randn({32, 2}, torch::kFloat64);
    for (auto* m : {&ours, &theirs}) {
      (*m)->zero_grad();
      torch::mse_loss((*m)->forward(x), y).backward();
    }
    adam.step(tree.params(), tree.grads(), state);
    reference.step();
  }
  const auto a = ours->parameters(), b = theirs->parameters();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double scale = b[i].abs().max().item<double>();
    DOCTEST_CHECK((a[i] - b[i]).abs().max().item<double>() <= 1e-12 * scale);
    DOCTEST_CHECK(!torch::equal(a[i], make()->parameters()[i].to(torch::kFloat64)));  // it moved
  }
}

TEST_CASE("a Stiefel parameter stays on its manifold over 2000 float32 steps, by torch's arithmetic") {
  torch::manual_seed(4);
  Net net;
  ModuleTree<float> tree(*net, {{"frame", TensorKind::stiefel}});
  geomopt::Adam adam({.lr = 3e-2});
  auto state = adam.init(tree.params());
  const auto start = net->frame.clone();
  for (int k = 0; k < 2000; ++k) {
    backward(net, 1000 + k);
    adam.step(tree.params(), tree.grads(), state);
  }
  const auto f = net->frame.detach().to(torch::kFloat64);
  const double defect = (f.matmul(f.t()) - torch::eye(2, torch::kFloat64)).abs().max().item<double>();
  DOCTEST_CHECK(defect < 1e-5);
  DOCTEST_CHECK((net->frame - start).abs().max().item<float>() > 1e-2);
}

TEST_CASE("a parameter without a gradient sits the step out under MissingGradient::skip") {
  torch::manual_seed(5);
  Net net;
  ModuleTree<float> tree(*net, {{"frame", TensorKind::stiefel}});
  geomopt::Adam adam({.lr = 1e-2}, {.missing_gradient = geomopt::MissingGradient::skip});
  auto state = adam.init(tree.params());
  backward(net, 7);
  net->scale.mutable_grad() = torch::Tensor();  // undefined, as after zero_grad(set_to_none)
  const auto scale = net->scale.clone(), weight = net->fc->weight.clone();
  adam.step(tree.params(), tree.grads(), state);
  DOCTEST_CHECK(torch::equal(net->scale, scale));
  DOCTEST_CHECK(!torch::equal(net->fc->weight, weight));
}

TEST_CASE("bad parameters and gradients throw std::invalid_argument naming the parameter") {
  torch::manual_seed(6);
  SUBCASE("construction") {
    Net net;
    CHECK_THROWS_WITH_AS((void)ModuleTree<double>(*net),
                         doctest::Contains("the parameter of 'frame' must be float64, not Float"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS((void)(ModuleTree<float>(*net, {{"fc.bias", TensorKind::stiefel}})),
                         doctest::Contains("parameter 'fc.bias': Stiefel needs a matrix (2-D tensor), got shape (3,)"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS((void)(ModuleTree<float>(*net, {{"nowhere", TensorKind::sphere}})),
                         doctest::Contains("'nowhere' is given a manifold but is not a parameter"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS((void)(ModuleTree<float>(*net, {{"fc.weight", TensorKind::stiefel}})),
                         doctest::Contains("'fc.weight': a tall Stiefel tensor of shape (3, 2)"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS((void)(ModuleTree<float>(*net, {{"frame", TensorKind::special_orthogonal}})),
                         doctest::Contains("SpecialOrthogonal needs a non-empty square matrix, got shape (2, 6)"),
                         std::invalid_argument);
    {
      torch::NoGradGuard no_grad;
      net->frame.mul_(1.01f);
    }
    CHECK_THROWS_WITH_AS((void)(ModuleTree<float>(*net, {{"frame", TensorKind::stiefel}})),
                         doctest::Contains("parameter 'frame' is not a point of Stiefel"), std::invalid_argument);
    net->fc->weight.set_data(torch::randn({2, 3}).t());  // (3, 2), not contiguous
    CHECK_THROWS_WITH_AS((void)ModuleTree<float>(*net), doctest::Contains("'fc.weight' must be contiguous"),
                         std::invalid_argument);
  }
  SUBCASE("gradients: all are checked before any is re-pointed") {
    Net net;
    ModuleTree<float> tree(*net, {{"frame", TensorKind::stiefel}});
    backward(net, 8);
    const auto& weight_grad = std::get<geomopt::ptree::BorrowedArray<float>>(tree.grads().at("fc.weight"));
    const float* before = weight_grad.value().data();
    REQUIRE(before == net->fc->weight.grad().data_ptr<float>());
    net->fc->weight.mutable_grad() = torch::zeros({3, 2});  // new storage: fine
    net->scale.mutable_grad() = torch::zeros({}, torch::kFloat64);
    CHECK_THROWS_WITH_AS(tree.grads(), doctest::Contains("the gradient of 'scale' must be float32, not Double"),
                         std::invalid_argument);
    DOCTEST_CHECK(weight_grad.value().data() == before);
    net->scale.mutable_grad() = torch::zeros({2});
    CHECK_THROWS_WITH_AS(tree.grads(), doctest::Contains("the gradient of 'scale' must have the parameter's shape ()"),
                         std::invalid_argument);
    DOCTEST_CHECK(weight_grad.value().data() == before);
    net->scale.mutable_grad() = torch::zeros({});
    tree.grads();
    DOCTEST_CHECK(weight_grad.value().data() == net->fc->weight.grad().data_ptr<float>());
  }
}

#ifdef GEOMOPT_TEST_IO
TEST_CASE("a checkpoint of the tree is read by the C++ struct of the same names, and back; runs continue bitwise") {
  const auto dir = std::filesystem::temp_directory_path() / "geomopt_libtorch_test";
  std::filesystem::create_directories(dir);
  torch::manual_seed(9);
  Net net;
  ModuleTree<float> tree(*net, {{"frame", TensorKind::stiefel}});
  geomopt::Adam adam({.lr = 1e-2, .weight_decay = 0.1});
  auto state = adam.init(tree.params());
  for (int k = 0; k < 3; ++k) {
    backward(net, 200 + k);
    adam.step(tree.params(), tree.grads(), state);
  }
  geomopt::io::save_checkpoint((dir / "tree.h5").string(), tree.params(), state);

  EigenNet e = params_of(net);
  e.fc.weight.setZero();
  e.fc.bias.setZero();
  e.scale.setZero();
  auto e_state = adam.init(e);
  geomopt::io::load_checkpoint((dir / "tree.h5").string(), e, e_state);
  REQUIRE(same_bits(e, net));
  for (int k = 3; k < 6; ++k) {
    backward(net, 200 + k);
    adam.step(e, grads_of(net), e_state);
    adam.step(tree.params(), tree.grads(), state);
  }
  DOCTEST_CHECK(same_bits(e, net));

  // And back: the struct's file into a fresh module's tree.
  geomopt::io::save_checkpoint((dir / "struct.h5").string(), e, e_state);
  Net other;
  ModuleTree<float> other_tree(*other, {{"frame", TensorKind::stiefel}});
  auto other_state = adam.init(other_tree.params());
  geomopt::io::load_checkpoint((dir / "struct.h5").string(), other_tree.params(), other_state);
  DOCTEST_CHECK(same_bits(e, other));
  backward(other, 300);
  backward(net, 300);
  adam.step(other_tree.params(), other_tree.grads(), other_state);
  adam.step(tree.params(), tree.grads(), state);
  DOCTEST_CHECK(same_bits(params_of(net), other));
  std::filesystem::remove_all(dir);
}
#endif
