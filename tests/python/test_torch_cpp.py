"""The same inputs stepped from Python (geomopt.torch.Adam and ManifoldMuon on tensors) and from C++ (geomopt::Adam and
geomopt::ManifoldMuon on a tree written as a C++ user writes it, tests/python/step_tool.cpp) give bitwise equal
parameters: Euclidean, wide and tall Stiefel leaves, with weight decay, over several steps."""

import os
import subprocess

import numpy as np
import pytest
import torch

import geomopt
import geomopt.torch as gt

TOOL = os.environ.get("GEOMOPT_STEP_TOOL")
SHAPES = [(3, 4), (2, 6), (6, 2), (3,)]


def start():
    g = torch.Generator().manual_seed(11)
    q, _ = torch.linalg.qr(torch.randn(6, 2, generator=g, dtype=torch.float64))
    return [
        torch.nn.Parameter(torch.randn(3, 4, generator=g)),
        gt.ManifoldParameter(q.T.contiguous().float(), manifold=geomopt.Stiefel()),
        gt.ManifoldParameter(q.flip(1).contiguous().float(), manifold=geomopt.Stiefel()),
        torch.nn.Parameter(torch.randn(3, generator=g)),
    ]


def compare(tmp_path, seed, tool_args, make_optimizer, steps=5):
    """Steps start()'s parameters by the same gradients in C++ (the tool, with tool_args after the step count) and in
    Python (make_optimizer(params)); asserts the two bitwise equal and moved. Returns the Python optimizer."""
    params = start()
    g = torch.Generator().manual_seed(seed)
    grads = [[torch.randn(s, generator=g) for s in SHAPES] for _ in range(steps)]
    blob = [p.detach().numpy().ravel() for p in params] + [t.numpy().ravel() for step in grads for t in step]
    (tmp_path / "in.bin").write_bytes(np.concatenate(blob).astype(np.float32).tobytes())
    subprocess.run([TOOL, str(tmp_path / "in.bin"), str(tmp_path / "out.bin"), str(steps), *map(str, tool_args)],
                   check=True)
    cpp = np.frombuffer((tmp_path / "out.bin").read_bytes(), dtype=np.float32)

    opt = make_optimizer(params)
    for step in grads:
        for p, t in zip(params, step):
            p.grad = t.clone()
        opt.step()
    python = np.concatenate([p.detach().numpy().ravel() for p in params])
    assert python.tobytes() == cpp.tobytes()
    assert not np.array_equal(python, np.concatenate([p.detach().numpy().ravel() for p in start()]))
    return opt


@pytest.mark.skipif(TOOL is None, reason="GEOMOPT_STEP_TOOL is not set (CTest sets it)")
def test_python_and_cpp_steps_are_bitwise_equal(tmp_path):
    lr, weight_decay = 1e-2, 0.1
    compare(tmp_path, 12, [repr(lr), repr(weight_decay)], lambda p: gt.Adam(p, lr=lr, weight_decay=weight_decay))


@pytest.mark.skipif(TOOL is None, reason="GEOMOPT_STEP_TOOL is not set (CTest sets it)")
def test_manifold_muon_from_python_and_cpp_is_bitwise_equal(tmp_path):
    # w takes Muon's step, the two frames ManifoldMuon's, b AdamW's: each leaf kind of the optimizer.
    lr, weight_decay, adamw_lr, adamw_weight_decay = 2e-2, 0.1, 3e-3, 0.05
    opt = compare(tmp_path, 13, [repr(lr), repr(weight_decay), "manifold_muon", repr(adamw_lr),
                                 repr(adamw_weight_decay)],
                  lambda p: gt.ManifoldMuon(p, lr=lr, weight_decay=weight_decay, adamw_lr=adamw_lr,
                                            adamw_weight_decay=adamw_weight_decay))
    assert set(opt.state[opt.param_groups[0]["params"][1]]) == {"step", "momentum_buffer", "multiplier"}
