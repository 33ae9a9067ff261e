// geomopt::libtorch: geomopt's optimizers over libtorch models. ModuleTree<T> is a parameter tree over the tensors of
// a torch::nn::Module, by their names, with a tree of the same shape over their gradients (module_tree.hpp).
#pragma once

#include "geomopt/libtorch/module_tree.hpp"
