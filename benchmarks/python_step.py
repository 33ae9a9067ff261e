#!/usr/bin/python3
"""geomopt.torch's step from Python against PyTorch's, in one process, float32, one thread.

1. The 369-leaf tree (the shapes file; 20,153,696 numbers): geomopt.torch.Adam(params, lr=1e-3).step() against
   torch.optim.Adam's best configuration here (foreach=False and foreach=True, the faster one; fused is CUDA-only in
   torch 1.13), and the C++ call alone (geomopt._core.step with the pointers prepared). Python's share of geomopt's
   step is measured directly, as the time of step() with its C++ call replaced by a replay of its result (each such
   call after a real C++ call, so Python's objects are as cold as in a real step) over the step's time, and checked
   as (step - C++ call) / step.
2. A Stiefel-heavy model: 24 St(768, 64) frames and 24 dense 768 x 768 matrices. geomopt: the frames are
   ManifoldParameters (64 x 768, orthonormal rows) and one geomopt.torch.Adam step moves everything. The
   parametrization route: torch.nn.utils.parametrizations.orthogonal on 24 Linear(768, 64) weights (its default map),
   and per training step what it adds to a plain one: the parametrization's forward (computing the 24 weights), the
   backward through it (from a given gradient of the weights), and torch.optim.Adam's step of the unconstrained
   tensors (foreach=True). The model's own forward and backward are the same on both routes, so neither is timed.

Gradients are fixed (uniform in [-1, 1]); every sample is the wall time of --inner calls, divided, after one untimed
call (the case before may have allocated and freed large temporaries, which a first call after it would pay for); the
cases are timed in turn, --reps times, so a drift of the shared machine hits all alike. Prints markdown tables.

usage: PYTHONPATH=<build>/python /usr/bin/python3 benchmarks/python_step.py [--shapes FILE] [--reps R] [--inner K]
           [--quick] [--json FILE]        (benchmarks/run_all --only python sets the path)
"""
import argparse
import statistics
import sys
import time

import torch

import geomopt
import geomopt.torch as gt
from geomopt import _core
from bench_markdown import (default_shapes, describe_tree, positive, read_shapes, require, table, torch_tree,
                            write_results)


def timed(f, inner):
    t0 = time.perf_counter()
    for _ in range(inner):
        f()
    return (time.perf_counter() - t0) / inner


def warm_timed(f, inner):
    """f's mean over inner calls after one untimed call, so that no case pays for what ran before it (the previous
    case's allocations and pages)."""
    f()
    return timed(f, inner)


def python_part(opt, core, inner):
    """opt.step() with geomopt._core.step replaced by a replay of the last real call's reports, each timed call after
    an untimed real one: the Python work of a step."""
    real, total = _core.step, 0.0
    try:
        for _ in range(inner):
            reports = core()
            _core.step = lambda *args: reports
            t0 = time.perf_counter()
            opt.step()
            total += time.perf_counter() - t0
            _core.step = real
    finally:
        _core.step = real
    return total / inner


def tree_cases(shapes):
    params = torch_tree(shapes)
    ours = gt.Adam(params, lr=1e-3)
    torch_plain = torch.optim.Adam(params, lr=1e-3, foreach=False)
    torch_foreach = torch.optim.Adam(params, lr=1e-3, foreach=True)
    pointers = [p.data_ptr() for p in params]
    grads = [p.grad.data_ptr() for p in params]
    lr, wd = [1e-3], [0.0]

    def core():
        return _core.step(ours._engines, pointers, grads, lr, wd)

    numel = sum(p.numel() for p in params)
    return numel, ours, core, {"torch_foreach0": torch_plain.step, "torch_foreach1": torch_foreach.step}


def stiefel_cases(frames, n, p):
    gen = torch.Generator().manual_seed(2)
    # geomopt: the frames on the manifold, stepped with the dense matrices by one Adam.
    ours_params = []
    for _ in range(frames):
        q, _ = torch.linalg.qr(torch.randn(n, p, generator=gen))
        w = gt.ManifoldParameter(q.T.contiguous(), manifold=geomopt.Stiefel())
        w.grad = torch.rand(p, n, generator=gen) * 2 - 1
        ours_params.append(w)
    dense = []
    for _ in range(frames):
        d = torch.nn.Parameter(torch.rand(n, n, generator=gen) * 2 - 1)
        d.grad = torch.rand(n, n, generator=gen) * 2 - 1
        dense.append(d)
    ours = gt.Adam(ours_params + dense, lr=1e-3)

    # The parametrization route: orthogonal Linear(768, 64) weights (64 x 768), their forward, the backward through
    # the parametrization from a fixed weight gradient, and Adam on the unconstrained tensors and the dense ones.
    layers = torch.nn.ModuleList(torch.nn.Linear(n, p, bias=False) for _ in range(frames))
    for layer in layers:
        torch.nn.utils.parametrizations.orthogonal(layer)
    weight_grads = [torch.rand(p, n, generator=gen) * 2 - 1 for _ in range(frames)]
    reference = torch.optim.Adam(list(layers.parameters()) + dense, lr=1e-3, foreach=True)

    def parametrized_step():
        weights = [layer.weight for layer in layers]  # the parametrization's forward
        torch.autograd.backward(weights, weight_grads)  # and backward, into the unconstrained tensors
        reference.step()
        for q in layers.parameters():
            q.grad = None

    return {"geomopt_stiefel_step": ours.step, "torch_orthogonal_step": parametrized_step}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=str(default_shapes()))
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--inner", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="one repetition of one call, small Stiefel model")
    ap.add_argument("--json", help="also write the figures to this file (for benchmarks/run_all)")
    args = ap.parse_args()
    if args.quick:
        args.reps, args.inner = 1, 1
    torch.set_num_threads(1)

    numel, ours, core, cases = tree_cases(read_shapes(args.shapes))
    frames, n, p = (2, 96, 8) if args.quick else (24, 768, 64)
    cases.update(stiefel_cases(frames, n, p))
    for f in [ours.step, core, *cases.values()]:  # warm up: first-touch of the state, the allocator's pools
        f()
    seconds = {name: [] for name in ["geomopt_step", "geomopt_core_call", "geomopt_python_part", *cases]}
    for _ in range(args.reps):
        seconds["geomopt_step"].append(warm_timed(ours.step, args.inner))
        seconds["geomopt_core_call"].append(warm_timed(core, args.inner))
        seconds["geomopt_python_part"].append(python_part(ours, core, args.inner))
        for name, f in cases.items():
            seconds[name].append(warm_timed(f, args.inner))
    median = {name: statistics.median(s) for name, s in seconds.items()}
    require(all(positive(m) for m in median.values()), f"non-positive times {median}")
    best_torch = min(median["torch_foreach0"], median["torch_foreach1"])
    ratios = {
        "torch_best_over_geomopt": best_torch / median["geomopt_step"],
        "python_share": median["geomopt_python_part"] / median["geomopt_step"],
        "python_share_by_difference": (median["geomopt_step"] - median["geomopt_core_call"]) / median["geomopt_step"],
        "orthogonal_over_geomopt": median["torch_orthogonal_step"] / median["geomopt_stiefel_step"],
    }

    ms = lambda name: f"{median[name] * 1e3:.2f}"  # noqa: E731
    print(f"torch {torch.__version__}, float32, one thread (torch.set_num_threads(1)); median of {args.reps} "
          f"samples of {args.inner} calls each.\n")
    print(f"The tree: {describe_tree(args.shapes)}, `geomopt.torch.Adam(params, lr=1e-3).step()` against "
          "`torch.optim.Adam`:\n")
    table(["step", "ms", "torch's best / this"], [
        ["geomopt.torch.Adam", ms("geomopt_step"), f"{ratios['torch_best_over_geomopt']:.2f}"],
        ["  the C++ call alone (`geomopt._core.step`)", ms("geomopt_core_call"), ""],
        ["  the Python part alone (the C++ call replayed)", ms("geomopt_python_part"), ""],
        ["torch.optim.Adam, foreach=False", ms("torch_foreach0"), ""],
        ["torch.optim.Adam, foreach=True", ms("torch_foreach1"), ""],
    ])
    print(f"Python's share of geomopt's step: {100 * ratios['python_share']:.1f} % measured directly, "
          f"{100 * ratios['python_share_by_difference']:.1f} % as (step - C++ call) / step.\n")
    print(f"Stiefel-heavy model: {frames} St({n}, {p}) frames and {frames} dense {n} x {n} matrices, per training "
          "step:\n")
    table(["route", "ms", "ratio to geomopt"], [
        ["geomopt.torch.Adam on ManifoldParameters and the dense matrices", ms("geomopt_stiefel_step"), "1"],
        ["torch's `orthogonal` parametrization: forward, backward through it, torch.optim.Adam (foreach)",
         ms("torch_orthogonal_step"), f"{ratios['orthogonal_over_geomopt']:.2f}"],
    ])
    write_results(args.json, {"torch": torch.__version__, "numel": numel, "leaves": len(read_shapes(args.shapes)),
                              "stiefel_model": {"frames": frames, "n": n, "p": p}, "seconds": seconds,
                              "median": median, "ratios": ratios})


if __name__ == "__main__":
    main()
