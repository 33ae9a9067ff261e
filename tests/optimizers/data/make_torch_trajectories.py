#!/usr/bin/python3
"""Reference trajectories of torch.optim for tests/optimizers/torch_equivalence_test.cpp.

What it generates
-----------------
tests/optimizers/data/torch_trajectories.txt: for a parameter set of three leaves,

    w  a 3 x 4 matrix
    b  a 5-vector
    s  a 6-vector, the packed storage of a symmetric 3 x 3 matrix (geomopt::SymmetricMatrix)

fixed initial values, 100 fixed gradients (independent of the parameters; p.grad is set to them, there is no loss),
and, for every configuration in CONFIGS and both float32 and float64, the parameters torch.optim produces after
steps of `p.grad = stored gradient; opt.step()`. Every optimizer runs with foreach=False, torch's plain per-tensor
loop, so the reference is the formulas of torch's documentation evaluated in the tensor's dtype.

The gradients have a spread of magnitudes: every entry has its own scale, log-spaced from 1e-9 to 3e1 over the 23
entries (shuffled across the leaves), so that eps dominates the denominators of Adam and RMSprop on the smallest
entries and is negligible on the largest; about 3% of the gradient entries are exactly zero. Initial values and
gradients are rounded to 4 significant digits (in float64, then cast to float32 as torch's .to() does) so that they
print short; the trajectories are printed in full.

Everything comes from numpy.random.default_rng(SEED): rerunning gives the same file, byte for byte, given the same
torch build (the trajectories depend on torch's CPU kernels to the last bit, the inputs do not).

Rerun:   /usr/bin/python3 tests/optimizers/data/make_torch_trajectories.py
(Debian's python3-torch; written against torch 1.13. The script checks that every number it prints parses back to
the same value.)

File format (plain text, whitespace-separated tokens, one record per line; '#' starts a comment line)
-----------------------------------------------------------------------------------------------------
    geomopt-torch-trajectories 1
    torch <version>
    steps <S>                          gradients and steps per configuration (100)
    record <n> <k1> ... <kn>           the steps after which the parameters are recorded, increasing, kn = S
    leaves 3 w 3 4 b 5 1 s 6 1         name rows cols of each leaf, in the order of every number row below
    configs <m>
    dtype <float32|float64>            then, for this dtype:
      init <23 numbers>                  the initial parameters
      grad <k> <23 numbers>              k = 1..S, the gradient given to step k
      config <name> <Optimizer> <key>=<value> ...   torch's constructor arguments (bools as 0/1)
        step <k> <23 numbers>            the parameters after step k, for every k in `record`
      ...                                m configurations
    end

A row of 23 numbers is w row by row (w(0,0) w(0,1) ... w(2,3)), then b, then s. float64 numbers are printed with
Python's repr and float32 numbers with numpy's shortest round-trip repr, so both parse back exactly (strtod /
strtof, std::istream >> double / float).

The parameters are recorded after steps 1..20 and then every 5th step: recording all 100 steps of 12 configurations
in two dtypes takes about 985 KB of round-trip text, more than this data file should weigh. A wrong formula changes
the parameters from the step where it acts onwards, so it still shows at the next recorded step.
"""

import os
import sys

import numpy as np
import torch

SEED = 20240611
STEPS = 100
RECORD = list(range(1, 21)) + list(range(25, STEPS + 1, 5))
LEAVES = [("w", 3, 4), ("b", 5, 1), ("s", 6, 1)]
DTYPES = [("float32", torch.float32), ("float64", torch.float64)]

# name, optimizer, constructor arguments (besides params and foreach=False). The C++ test builds geomopt's
# optimizer from these same arguments, read from the file.
CONFIGS = [
    ("sgd_plain", "SGD", dict(lr=0.1)),
    ("sgd_momentum", "SGD", dict(lr=0.05, momentum=0.9, dampening=0.1)),
    ("sgd_nesterov", "SGD", dict(lr=0.05, momentum=0.9, nesterov=True)),
    ("sgd_weight_decay", "SGD", dict(lr=0.1, momentum=0.5, weight_decay=0.01)),
    ("adam", "Adam", dict(lr=1e-2)),
    ("adam_betas_eps", "Adam", dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6)),
    ("adam_amsgrad", "Adam", dict(lr=1e-2, amsgrad=True)),
    ("adam_weight_decay", "Adam", dict(lr=1e-2, weight_decay=0.1)),
    ("adamw", "AdamW", dict(lr=1e-2, weight_decay=0.1)),
    ("adamw_amsgrad", "AdamW", dict(lr=1e-2, weight_decay=0.1, amsgrad=True)),
    ("rmsprop", "RMSprop", dict(lr=1e-2)),
    ("rmsprop_centered_momentum", "RMSprop", dict(lr=1e-2, momentum=0.9, centered=True, weight_decay=0.01)),
    ("adagrad", "Adagrad", dict(lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1, weight_decay=0.01)),
]

# Every constructor argument of the five optimizers, with torch 1.13's default, in the order written to the file;
# betas=(b1, b2) is written as beta1 and beta2, the names of geomopt's options.
DEFAULTS = {
    "SGD": dict(lr=None, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0),
    "Adam": dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False),
    "AdamW": dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False),
    "RMSprop": dict(lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False),
    "Adagrad": dict(lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10),
}


def round4(x):
    """x (float64 array) rounded to 4 significant digits, zeros kept."""
    return np.array([float("%.4g" % v) for v in np.asarray(x, dtype=np.float64).ravel()]).reshape(np.shape(x))


def make_inputs(rng):
    n = sum(r * c for _, r, c in LEAVES)
    init = round4(rng.standard_normal(n))
    scale = 10.0 ** np.linspace(-9.0, np.log10(30.0), n)
    rng.shuffle(scale)
    grads = []
    for _ in range(STEPS):
        g = scale * rng.standard_normal(n)
        g[rng.random(n) < 0.03] = 0.0
        grads.append(round4(g))
    return init, grads


def split(flat, dtype):
    """The leaves of a row of numbers, as fresh torch tensors of dtype (w row-major, as torch stores it)."""
    out, k = [], 0
    for _, r, c in LEAVES:
        t = torch.tensor(flat[k:k + r * c], dtype=torch.float64).to(dtype)
        out.append(t.reshape(r, c) if c > 1 else t)
        k += r * c
    return out


def row(tensors):
    return np.concatenate([t.detach().reshape(-1).numpy() for t in tensors])


def fmt(values, dtype_name):
    if dtype_name == "float64":
        strs = [repr(float(v)) for v in values]
        back = np.array([float(s) for s in strs], dtype=np.float64)
        ok = np.array_equal(back.view(np.uint64), np.asarray(values, dtype=np.float64).view(np.uint64))
    else:
        vals = np.asarray(values, dtype=np.float32)
        strs = [str(v) for v in vals]  # numpy's shortest repr that parses back to the same float32
        back = np.array([np.float32(s) for s in strs], dtype=np.float32)
        ok = np.array_equal(back.view(np.uint32), vals.view(np.uint32))
    if not ok:
        sys.exit("make_torch_trajectories: a number does not round-trip: %r" % (strs,))
    return " ".join(strs)


def run(optimizer, kwargs, init, grads, dtype):
    params = [p.requires_grad_(True) for p in split(init, dtype)]
    opt = getattr(torch.optim, optimizer)(params, foreach=False, **kwargs)
    out = {}
    for k in range(1, STEPS + 1):
        for p, g in zip(params, split(grads[k - 1], dtype)):
            p.grad = g
        opt.step()
        if k in RECORD:
            out[k] = row(params)
    return out


def describe(optimizer, kwargs):
    args = dict(DEFAULTS[optimizer])
    args.update(kwargs)
    words = []
    for key, value in args.items():
        if key == "betas":
            words += ["beta1=%r" % float(value[0]), "beta2=%r" % float(value[1])]
        elif isinstance(value, bool):
            words.append("%s=%d" % (key, value))
        else:
            words.append("%s=%r" % (key, float(value)))
    return " ".join(words)


def main():
    torch.manual_seed(SEED)  # nothing here draws from torch's generator; set for good measure
    torch.set_num_threads(1)
    rng = np.random.default_rng(SEED)
    init, grads = make_inputs(rng)
    n = len(init)

    lines = [
        "geomopt-torch-trajectories 1",
        "# Made by tests/optimizers/data/make_torch_trajectories.py (the format is described there); do not edit.",
        "torch %s" % torch.__version__,
        "steps %d" % STEPS,
        "record %d %s" % (len(RECORD), " ".join(str(k) for k in RECORD)),
        "leaves %d %s" % (len(LEAVES), " ".join("%s %d %d" % leaf for leaf in LEAVES)),
        "configs %d" % len(CONFIGS),
    ]
    for dtype_name, dtype in DTYPES:
        lines.append("dtype %s" % dtype_name)
        lines.append("init " + fmt(row(split(init, dtype)), dtype_name))
        for k in range(1, STEPS + 1):
            lines.append("grad %d %s" % (k, fmt(row(split(grads[k - 1], dtype)), dtype_name)))
        for name, optimizer, kwargs in CONFIGS:
            lines.append("config %s %s %s" % (name, optimizer, describe(optimizer, kwargs)))
            traj = run(optimizer, kwargs, init, grads, dtype)
            for k in RECORD:
                assert traj[k].shape == (n,) and np.all(np.isfinite(traj[k]))
                lines.append("step %d %s" % (k, fmt(traj[k], dtype_name)))
    lines.append("end")

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_trajectories.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %s (%d bytes)" % (path, os.path.getsize(path)))


if __name__ == "__main__":
    main()
