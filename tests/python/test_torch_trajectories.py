"""geomopt.torch against torch.optim: 100-step trajectories of every optimizer with parameter groups, weight decay, a
scheduler and missing gradients, in float64 (1e-12 relative) and float32 (1e-6 relative). torch.optim is the
independent reference: its step is written in PyTorch, geomopt's in C++."""

import math

import pytest
import torch

import geomopt.torch as gt

SHAPES = [(5, 3), (4,), (2, 3, 2), (), (7, 1)]


def make_params(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=g, dtype=dtype)) for s in SHAPES]


def gradient(p, k):
    """A nonlinear gradient that depends on the parameter and the step, so moments differ per entry. Its oscillating
    part keeps the variance a centered RMSprop estimates (E g^2 - (E g)^2) well away from the cancellation that would
    magnify float32 rounding past the comparison's tolerance, in torch's step as in geomopt's."""
    return (p.detach() - 0.3) + 0.1 * p.detach() ** 3 + 0.5 * math.sin(k + 1)


def groups(params, **second):
    return [{"params": params[:2]}, dict(params=params[2:], **second)]


CASES = [
    ("Adam", dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.01), dict(lr=3e-3, weight_decay=0.0)),
    ("Adam", dict(lr=1e-2, amsgrad=True), dict(lr=2e-2, weight_decay=0.1)),
    ("AdamW", dict(lr=1e-2, weight_decay=0.05), dict(lr=5e-3, weight_decay=0.2)),
    ("AdamW", dict(lr=1e-2, amsgrad=True), dict(weight_decay=0.0)),
    ("SGD", dict(lr=1e-2, momentum=0.9, nesterov=True, weight_decay=1e-3), dict(lr=2e-2)),
    ("SGD", dict(lr=1e-2, momentum=0.5, dampening=0.3), dict(lr=5e-3, weight_decay=0.1)),
    ("SGD", dict(lr=1e-2), dict(lr=3e-2, weight_decay=0.05)),
    ("RMSprop", dict(lr=1e-3, alpha=0.9, momentum=0.5, centered=True, weight_decay=0.01), dict(lr=2e-3)),
    ("RMSprop", dict(lr=1e-3), dict(lr=5e-4, weight_decay=0.1)),
    ("Adagrad", dict(lr=1e-2, lr_decay=0.01, initial_accumulator_value=0.1, weight_decay=0.01), dict(lr=2e-2)),
]


def run(make, params, steps, missing):
    opt = make(params)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, [lambda k: 1.0 / (1 + 0.05 * k), lambda k: 0.97 ** k])
    for k in range(steps):
        for i, p in enumerate(params):
            p.grad = None if (k, i) in missing else gradient(p, k)
        opt.step()
        sched.step()
    return opt


@pytest.mark.parametrize("dtype,tolerance", [(torch.float64, 1e-12), (torch.float32, 1e-6)])
@pytest.mark.parametrize("name,options,second", CASES)
def test_trajectory_matches_torch(name, options, second, dtype, tolerance):
    # Parameter 1 has no gradient at steps 3 and 4, parameter 3 at step 10: torch skips them, and so must geomopt.
    missing = {(3, 1), (4, 1), (10, 3)}
    ours, theirs = make_params(dtype), make_params(dtype)
    run(lambda ps: getattr(gt, name)(groups(ps, **second), **options), ours, 100, missing)
    run(lambda ps: getattr(torch.optim, name)(groups(ps, **second), **options), theirs, 100, missing)
    for a, b in zip(ours, theirs):
        scale = max(b.detach().abs().max().item(), 1e-30)
        assert (a.detach() - b.detach()).abs().max().item() <= tolerance * scale, (a, b)


@pytest.mark.parametrize("name,options,second", CASES[:1] + CASES[4:5])
def test_state_matches_torch_layout(name, options, second):
    """The per-parameter state has torch's keys, shapes and step counts (a skipped parameter's own)."""
    missing = {(3, 1), (4, 1)}
    ours, theirs = make_params(torch.float64), make_params(torch.float64)
    a = run(lambda ps: getattr(gt, name)(groups(ps, **second), **options), ours, 10, missing)
    b = run(lambda ps: getattr(torch.optim, name)(groups(ps, **second), **options), theirs, 10, missing)
    sa, sb = a.state_dict(), b.state_dict()
    # geomopt's groups carry one more key, the retraction of their manifold parameters.
    assert [{k: v for k, v in g.items() if k != "retraction"} for g in sa["param_groups"]] == sb["param_groups"]
    assert sorted(sa["state"]) == sorted(sb["state"])
    for i in sb["state"]:
        # torch's SGD keeps no step count (its momentum buffer's absence marks the first step); geomopt's does.
        assert sorted(set(sa["state"][i]) - ({"step"} - set(sb["state"][i]))) == sorted(sb["state"][i])
        for key, value in sb["state"][i].items():
            mine = sa["state"][i][key]
            if key == "step":
                assert float(mine) == float(value)
            else:
                assert mine.shape == value.shape
                assert torch.allclose(mine, value, rtol=1e-12, atol=1e-15)
    assert float(sa["state"][1]["step"]) == 8  # two of ten steps without a gradient
