// Must not compile: a struct without GEOMOPT_PTREE handed to an optimizer's init and step. The entry points test
// ptree::tree first, so the compiler's first error is ptree's static_assert naming what to declare, and its output
// stays short (run.cmake counts the lines) instead of hundreds of lines from Eigen and the optimizer's internals.
#include <geomopt/optimizers.hpp>

struct Net {
  Eigen::MatrixXd w;
  Eigen::VectorXd b;
};

int main() {
  Net params, grads;
  geomopt::Adam adam({.lr = 1e-3});
  auto state = adam.init(params);
  adam.step(params, grads, state);
}
