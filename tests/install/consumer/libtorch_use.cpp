// The installed libtorch component in use: a torch::nn::Linear stepped by geomopt::Adam through a ModuleTree, with
// its gradient from libtorch's autograd.
#include <torch/torch.h>

#include <cstdio>
#include <geomopt/libtorch.hpp>
#include <geomopt/optimizers.hpp>

int main() {
  torch::nn::Linear fc(3, 2);
  geomopt::libtorch::ModuleTree<float> tree(*fc);
  geomopt::Adam adam({.lr = 1e-2});
  auto state = adam.init(tree.params());
  const torch::Tensor before = fc->weight.clone();
  fc(torch::ones({4, 3})).sum().backward();
  adam.step(tree.params(), tree.grads(), state);
  if (torch::equal(before, fc->weight)) {
    std::fprintf(stderr, "consumer_libtorch: the step did not move fc.weight\n");
    return 1;
  }
  std::puts("consumer_libtorch: fc.weight and fc.bias stepped in place");
  return 0;
}
