// geomopt._core's checkpoints: a torch module's tensors (and a geomopt.torch optimizer's state) saved to and loaded
// from geomopt's HDF5 layout (docs/file_format.md) by the io library, for geomopt.io.
//
// The tree is a map from PyTorch's dotted names ("fc.weight") to leaves over the tensors' memory: a 2-D or larger
// parameter is a row-major BorrowedArray (its first dimension by the product of the others), a 1-D or 0-D one the
// vector form (a 0-D tensor is saved as a vector of one number), a manifold parameter a Borrowed point (a tall Stiefel
// or Grassmann tensor through a column-major copy), a buffer (named_buffers) the same inside ptree::Buffer, float32,
// float64 or int64. A name is one link in /params, "fc.weight", whose dotted path equals that of a C++ tree's
// /params/fc/weight: the two load each other. The optimizer's state is its engine's, presented under the same names;
// the engine's kernel lr is 1 and each leaf's lr_scale its group's lr (engine.hpp), so the file records the
// optimizer as a C++ program configured like group 0 would: lr and weight_decay of group 0 as hyperparameters, a
// leaf's lr_scale as its group's lr over group 0's, its weight decay only where it differs from group 0's. A Muon
// optimizer has two such rates per group, Muon's and its AdamW fallback's (adamw_lr, adamw_weight_decay): each leaf is
// recorded against the rate of whichever steps it.
//
// Invariants: a load that throws leaves every tensor and the state as they were (the io library checks everything
// before it writes, and copies into tall tensors happen after it returned); a save never writes a tensor.
#pragma once

#include <pybind11/pybind11.h>

namespace geomopt::python {

/// Adds save_checkpoint, load_checkpoint and CheckpointError to the module.
void bind_checkpoints(pybind11::module_& m);

}  // namespace geomopt::python
