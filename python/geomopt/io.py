"""geomopt.io: a torch module, and a geomopt.torch optimizer's state, in geomopt's HDF5 checkpoint layout.

    import geomopt.io
    geomopt.io.save("ckpt.h5", net, opt, attributes={"epoch": 3})   # atomic: the old file or the new one, whole
    report = geomopt.io.load("ckpt.h5", net, opt)                  # every tensor and the state, or nothing

The file is the C++ library's (docs/file_format.md), written and read by it: /params holds the module's
``named_parameters()`` and ``named_buffers()`` under PyTorch's dotted names ("fc.weight"), /optimizer the state and
its settings, /metadata the step and your attributes. A dotted name reads the same as a C++ tree's path, so a
checkpoint of ``struct {Fc fc; Stiefel<float> frame;}`` (``fc.weight``, ``fc.bias``, ``frame``) loads into a module
with those names, and the other way. A manifold parameter is saved as the C++ point of its manifold (a wide Stiefel
tensor X as the point X^T); a 0-D tensor as a vector of one number; a tensor of 3 or more dimensions as its first
dimension by the product of the others.

A load checks everything before it changes anything (shapes, dtypes, checksums, finite numbers, manifold points, and
for a checkpoint the optimizer's kind and settings): on any error, CheckpointError (a RuntimeError) listing each
problem by name, and no tensor and no state changed. ``strict=False`` loads despite different settings and lists them
in the report's "differences"; the optimizer then steps with its own settings, as in C++. The optimizer's param
groups are recorded as a C++ optimizer configured like group 0: lr and weight_decay of group 0, each parameter's lr
as an lr_scale relative to it.
"""

import torch

from geomopt import _core
from geomopt._manifold import euclidean_layout

__all__ = ["save", "load", "CheckpointError"]

try:
    CheckpointError = _core.CheckpointError
except AttributeError:  # built without the io library (HDF5 not found)
    CheckpointError = RuntimeError

_DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.int64: "int64"}


def _require_io():
    if not hasattr(_core, "save_checkpoint"):
        raise RuntimeError("geomopt.io: this geomopt was built without its io library (HDF5's development files were "
                           "not found when it was configured)")


def _tensor_specs(module):
    """One TensorSpec per parameter and buffer of the module, checked, with the parameters' ids."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"geomopt.io: expected a torch.nn.Module, got {type(module).__name__}")
    specs, by_id = [], {}
    for trainable, named in ((True, module.named_parameters()), (False, module.named_buffers())):
        for name, t in named:
            what = "parameter" if trainable else "buffer"
            if t.device.type != "cpu" or t.layout is not torch.strided:
                raise TypeError(f"geomopt.io: {what} '{name}' is a {t.layout} tensor on {t.device}; geomopt saves "
                                f"dense CPU tensors")
            if t.dtype not in _DTYPES or (trainable and t.dtype == torch.int64):
                raise TypeError(f"geomopt.io: {what} '{name}' is {t.dtype}; parameters are torch.float32 or "
                                f"torch.float64, buffers also torch.int64")
            if not t.is_contiguous():
                raise ValueError(f"geomopt.io: {what} '{name}' is not contiguous; call .contiguous() on it first")
            s = _core.TensorSpec()
            s.name, s.dtype, s.data, s.trainable = name, _DTYPES[t.dtype], t.data_ptr(), trainable
            manifold = getattr(t, "manifold", None) if trainable else None
            if manifold is not None:
                try:
                    s.rows, s.cols, s.transposed = manifold.layout(tuple(t.shape))
                except ValueError as e:
                    raise ValueError(f"geomopt.io: parameter '{name}': {e}") from None
                s.kind = manifold.kind
            elif t.dim() <= 1:
                s.rows, s.cols, s.vector = max(1, t.numel()) if t.dim() == 0 else t.shape[0], 1, True
            else:
                s.rows, s.cols, _ = euclidean_layout(tuple(t.shape))
            specs.append(s)
            if trainable:
                by_id[id(t)] = name
    return specs, by_id


def _optimizer_args(optimizer, by_id):
    """(engine, the module's name of each of its parameters, group 0's rates: lr and weight decay, and for Muon its
    fallback's adamw_lr and adamw_weight_decay), or Nones."""
    if optimizer is None:
        return None, [], [], []
    engines = getattr(optimizer, "_engines", None)
    if engines is None:
        raise TypeError(f"geomopt.io: expected a geomopt.torch optimizer, got {type(optimizer).__name__}")
    if len(engines) != 1:
        raise ValueError("geomopt.io: the optimizer's parameters are stepped by several engines (more than one dtype, "
                         "or groups with different betas, eps, momentum, ...); a checkpoint holds one optimizer state")
    engine = engines[0]
    names = []
    for leaf in range(len(engine)):
        spec = optimizer._specs[engine.index(leaf)]
        name = by_id.get(id(spec.param))
        if name is None:
            raise ValueError(f"geomopt.io: the optimizer's {spec.label()} is not a parameter of the module")
        names.append(name)
    lr0, wd0 = optimizer._rates(optimizer.param_groups[:1])
    return engine, names, lr0, wd0


def save(file, module, optimizer=None, *, step=None, attributes=None, overwrite=True, durable=True):
    """Saves the module's parameters and buffers, and with ``optimizer`` (a geomopt.torch optimizer over parameters of
    the module) its state, as a checkpoint. ``step`` (default: the optimizer's step count) and ``attributes`` (str to
    int, float or str) go to /metadata. Atomic: the file is written beside the target and renamed over it."""
    _require_io()
    specs, by_id = _tensor_specs(module)
    engine, names, lr0, wd0 = _optimizer_args(optimizer, by_id)
    if optimizer is None and (step is not None or attributes):
        raise ValueError("geomopt.io.save: step and attributes are recorded with an optimizer's checkpoint")
    with torch.no_grad():
        _core.save_checkpoint(str(file), specs, engine, names, lr0, wd0, step, dict(attributes or {}), overwrite,
                              durable)


def load(file, module, optimizer=None, *, strict=True):
    """Loads the module's parameters and buffers, and with ``optimizer`` its state, from a file ``save`` or the C++
    library wrote. Returns the report as a dict: loaded, state, missing, unexpected, differences (lists of names),
    metadata (step and attributes) and brief (one line)."""
    _require_io()
    specs, by_id = _tensor_specs(module)
    engine, names, lr0, wd0 = _optimizer_args(optimizer, by_id)
    with torch.no_grad():
        return _core.load_checkpoint(str(file), specs, engine, names, lr0, wd0, strict)
