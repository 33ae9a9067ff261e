"""geomopt.torch.Muon and ManifoldMuon against independent references: Muon's 100-step float64 trajectory against a
NumPy Muon (momentum, Nesterov blend, Newton-Schulz quintic, shape scale, decoupled weight decay) with parameter
groups and a scheduler, its AdamW leaves against torch.optim.AdamW; ManifoldMuon's first step on a square frame against
the closed form W msign(skew(W^T U)) and the polar retraction (by NumPy's SVD), its frames on the manifold after 10^4
float32 steps; the state in torch's layout (momentum_buffer shaped like the parameter, AdamW's moments for the rest),
state_dict round trips, missing gradients and the errors. torch 1.13 has no torch.optim.Muon: the NumPy step is the
reference."""

import math

import numpy as np
import pytest
import torch

import geomopt
import geomopt.manifolds
import geomopt.torch as gt

NS = (3.4445, -4.7750, 2.0315)


def msign_ns(u, steps=5, coefficients=NS, eps=1e-7):
    """Newton-Schulz's quintic on U / (|U|_F + eps), in the wide orientation, float64."""
    a, b, c = coefficients
    tall = u.shape[0] > u.shape[1]
    x = u.T if tall else u
    x = x / (np.linalg.norm(x) + eps)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


def msign_svd(m):
    u, _, vt = np.linalg.svd(m, full_matrices=False)
    return u @ vt


class NumpyMuon:
    """Muon on one matrix: B <- m B + (1 - m) G; U <- (1 - m) G + m B (Nesterov) or B; P <- (1 - lr wd) P - lr
    sqrt(max(1, rows / cols)) msign(U)."""

    def __init__(self, p, momentum, nesterov):
        self.p, self.buf = p.copy(), np.zeros_like(p)
        self.momentum, self.nesterov = momentum, nesterov

    def step(self, g, lr, weight_decay):
        m = self.momentum
        self.buf = m * self.buf + (1 - m) * g
        u = (1 - m) * g + m * self.buf if self.nesterov else self.buf
        rows, cols = self.p.shape
        self.p = (1 - lr * weight_decay) * self.p - lr * math.sqrt(max(1.0, rows / cols)) * msign_ns(u)


SHAPES = [(8, 5), (5,), (5, 8), (4, 2, 3)]  # Muon, AdamW, Muon, Muon as its 4 x 6 matrix


def make_params(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=g, dtype=dtype)) for s in SHAPES]


def gradient(p, k):
    return (p.detach() - 0.3) + 0.1 * p.detach() ** 3 + 0.5 * math.sin(k + 1)


def test_muon_trajectory_matches_the_numpy_muon_and_torch_adamw():
    steps = 100
    params = make_params(torch.float64)
    groups = [{"params": params[:2], "lr": 0.02, "weight_decay": 0.1},
              {"params": params[2:], "lr": 0.01, "weight_decay": 0.0, "nesterov": False, "momentum": 0.9}]
    opt = gt.Muon(groups, adamw_lr=3e-3, adamw_weight_decay=0.05, adamw_betas=(0.8, 0.99), adamw_eps=1e-6)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, [lambda k: 1.0 / (1 + 0.05 * k), lambda k: 0.97 ** k])

    ref = make_params(torch.float64)
    muons = {0: NumpyMuon(ref[0].detach().numpy(), 0.95, True), 2: NumpyMuon(ref[2].detach().numpy(), 0.9, False),
             3: NumpyMuon(ref[3].detach().numpy().reshape(4, 6), 0.9, False)}
    adamw = torch.optim.AdamW([ref[1]], lr=3e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05)
    for k in range(steps):
        if k == 50:  # AdamW's rate moves too, read at every step like lr
            opt.param_groups[0]["adamw_lr"] = adamw.param_groups[0]["lr"] = 1e-3
        for p, q in zip(params, ref):
            p.grad = gradient(p, k)
            q.grad = gradient(q, k)
        rates = [g["lr"] for g in opt.param_groups]
        opt.step()
        sched.step()
        for i, m in muons.items():
            group = 0 if i == 0 else 1
            m.step(ref[i].grad.numpy().reshape(m.p.shape), rates[group], 0.1 if group == 0 else 0.0)
            ref[i].data = torch.from_numpy(m.p.reshape(SHAPES[i]).copy())
        adamw.step()
    for i, p in enumerate(params):
        expected = ref[i].detach()
        assert torch.allclose(p.detach(), expected, rtol=0, atol=1e-12 * expected.abs().max().item()), i
    # The state in torch's layout: a Muon leaf's momentum buffer is shaped like it and is the reference's.
    state = opt.state[params[0]]
    assert set(state) == {"step", "momentum_buffer"}
    assert state["momentum_buffer"].shape == params[0].shape
    np.testing.assert_allclose(state["momentum_buffer"].numpy(), muons[0].buf, rtol=1e-12, atol=1e-14)
    assert {"step", "exp_avg", "exp_avg_sq"} <= set(opt.state[params[1]])
    assert int(state["step"]) == steps


def test_muon_float32_follows_the_float64_reference():
    params = make_params(torch.float32)
    ref = [NumpyMuon(p.detach().double().numpy().reshape(p.shape[0], -1), 0.95, True) for p in params if p.dim() > 1]
    opt = gt.Muon([p for p in params if p.dim() > 1], lr=0.02, weight_decay=0.1)
    for k in range(20):
        for p, m in zip([p for p in params if p.dim() > 1], ref):
            p.grad = gradient(p, k)
            m.step(p.grad.double().numpy().reshape(m.p.shape), 0.02, 0.1)
        opt.step()
    for p, m in zip([p for p in params if p.dim() > 1], ref):
        np.testing.assert_allclose(p.detach().double().numpy().reshape(m.p.shape), m.p, rtol=0,
                                   atol=1e-4 * np.abs(m.p).max())


def frame(n, k, dtype=torch.float64, seed=3):
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(n, k, generator=g, dtype=torch.float64))
    return q.to(dtype).contiguous()


def test_manifold_muon_first_step_on_a_square_frame_is_the_closed_form():
    # On St(n, n) the tangent space is W skew, and the steepest direction in the spectral norm is W msign(skew(W^T U)):
    # n even, so that skew(W^T U) has full rank and its msign is unique.
    lr, momentum = 0.1, 0.95
    x = frame(4, 4)
    p = gt.ManifoldParameter(x.clone(), manifold=geomopt.Stiefel())
    g = torch.randn(4, 4, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    opt = gt.ManifoldMuon([p], lr=lr, momentum=momentum, stiefel_tolerance=1e-12)
    p.grad = g.clone()
    opt.step()
    # geomopt sees the tensor's transpose: W = X^T, gradient G^T (docs/python.md, the layout of a square frame).
    w, u = x.numpy().T, (1 - momentum) * (1 + momentum) * g.numpy().T
    k = w.T @ u
    a = w @ msign_svd((k - k.T) / 2)
    w1 = msign_svd(w - lr * a)
    # The solver's smoothing (relative 1e-4 of the spectral norm) moves the direction by about 1e-8.
    np.testing.assert_allclose(p.detach().numpy(), w1.T, rtol=0, atol=1e-6)
    assert np.abs(p.detach().numpy() - x.numpy()).max() > 1e-3  # it moved


@pytest.mark.parametrize("retraction", ["polar", "cayley", "geodesic"])
def test_manifold_muon_keeps_float32_frames_on_the_manifold(retraction):
    wide = gt.ManifoldParameter(frame(9, 3, torch.float32).T.contiguous(), manifold=geomopt.Stiefel())
    tall = gt.ManifoldParameter(frame(8, 4, torch.float32, seed=5).contiguous(), manifold=geomopt.Stiefel())
    dense = torch.nn.Parameter(torch.randn(4, 4))
    opt = gt.ManifoldMuon([wide, tall, dense], lr=0.05, stiefel_retraction=retraction, stiefel_max_iterations=3)
    g = torch.Generator().manual_seed(6)
    steps = 10_000 if retraction == "polar" else 1000
    for _ in range(steps):
        for p in (wide, tall, dense):
            p.grad = torch.randn(p.shape, generator=g)
        opt.step()
    assert geomopt.manifolds.check(geomopt.Stiefel(), wide.detach()) < 1e-5
    assert geomopt.manifolds.check(geomopt.Stiefel(), tall.detach()) < 1e-5
    # With stiefel_warm_start (the default) the state keeps the multiplier the next step's solve starts from.
    assert set(opt.state[wide]) == {"step", "momentum_buffer", "multiplier"}


def run_steps(opt, params, ks, missing=()):
    for k in ks:
        for i, p in enumerate(params):
            p.grad = None if (k, i) in missing else gradient(p, k)
        opt.step()


@pytest.mark.parametrize("name", ["Muon", "ManifoldMuon"])
def test_state_dict_round_trip_is_bitwise(name, tmp_path):
    def make():
        params = make_params(torch.float32, seed=7)
        params.append(gt.ManifoldParameter(frame(6, 2, torch.float32).T.contiguous(), manifold=geomopt.Stiefel()))
        return params, getattr(gt, name)(params, lr=0.02, weight_decay=0.01, adamw_lr=1e-3)

    a, opt_a = make()
    run_steps(opt_a, a, range(6), missing={(2, 0)})
    run_steps(opt_a, a, range(6, 12))
    b, opt_b = make()
    run_steps(opt_b, b, range(6), missing={(2, 0)})
    torch.save(opt_b.state_dict(), tmp_path / "opt.pt")
    c, opt_c = make()
    for p, q in zip(c, b):
        p.data.copy_(q.data)
    opt_c.load_state_dict(torch.load(tmp_path / "opt.pt"))
    assert int(opt_c.state[c[0]]["step"]) == 5  # the step it sat out is not counted
    run_steps(opt_c, c, range(6, 12))
    for p, q in zip(a, c):
        assert torch.equal(p, q)


def test_a_parameter_without_gradient_sits_the_step_out():
    params = make_params(torch.float64)
    opt = gt.Muon(params, lr=0.02)
    run_steps(opt, params, range(2))
    before = params[0].detach().clone()
    buf = opt.state[params[0]]["momentum_buffer"].clone()
    run_steps(opt, params, [2], missing={(2, 0)})
    assert torch.equal(params[0].detach(), before)
    assert torch.equal(opt.state[params[0]]["momentum_buffer"], buf)
    assert int(opt.state[params[0]]["step"]) == 2
    assert int(opt.state[params[2]]["step"]) == 3


def test_use_muon_chooses_the_leaves_and_errors_name_the_parameter():
    params = make_params(torch.float64)
    opt = gt.Muon([{"params": params[:2]}, {"params": params[2:], "use_muon": False}], lr=0.02)
    run_steps(opt, params, range(1))
    assert "momentum_buffer" in opt.state[params[0]]
    assert "exp_avg" in opt.state[params[2]] and "momentum_buffer" not in opt.state[params[2]]
    with pytest.raises(ValueError, match=r"group 0, parameter 1.*Muon steps matrices"):
        gt.Muon([{"params": params[:2], "use_muon": True}])
    stiefel = gt.ManifoldParameter(frame(6, 2).T.contiguous(), manifold=geomopt.Stiefel())
    with pytest.raises(ValueError, match=r"group 0, parameter 0.*ManifoldMuon steps those"):
        gt.Muon([{"params": [stiefel], "use_muon": True}])
    assert "exp_avg" in gt.Muon([stiefel]).state[stiefel]  # Riemannian AdamW steps it
    for bad in [dict(momentum=1.0), dict(ns_steps=0), dict(lr=-1.0), dict(adjust_lr_fn="other"),
                dict(adamw_betas=(1.0, 0.9)), dict(stiefel_retraction="qr")]:
        with pytest.raises(ValueError):
            (gt.ManifoldMuon if "stiefel_retraction" in bad else gt.Muon)(params, **bad)
    before = [p.detach().clone() for p in params]
    params[0].grad = torch.randn(5, 8, dtype=torch.float64).T  # not contiguous
    with pytest.raises(ValueError, match=r"group 0, parameter 0: the gradient is not contiguous"):
        opt.step()
    assert all(torch.equal(p, q) for p, q in zip(params, before))


@pytest.mark.parametrize("optimizer", [gt.Muon, gt.ManifoldMuon])
def test_batched_parameters_step_as_their_matrices_stepped_alone(optimizer):
    # A [2, 3, 5, 4] and a [3, 4, 6] parameter with batched=True against their 6 + 3 matrices as parameters of their
    # own, bitwise; the scale is each matrix's (5 x 4: 1.118, 4 x 6: 1), not the whole parameter's.
    g = torch.Generator().manual_seed(3)
    stacked = [torch.nn.Parameter(torch.randn(2, 3, 5, 4, generator=g)),
               torch.nn.Parameter(torch.randn(3, 4, 6, generator=g))]
    apart = [torch.nn.Parameter(m.detach().clone()) for p in stacked for m in p.detach().reshape(-1, *p.shape[-2:])]
    a = optimizer(stacked, lr=0.05, weight_decay=0.1, batched=True)
    b = optimizer(apart, lr=0.05, weight_decay=0.1)
    for k in range(4):
        for p in stacked:
            p.grad = gradient(p, k)
        for p, q in zip(apart, [m for p in stacked for m in p.grad.reshape(-1, *p.shape[-2:])]):
            p.grad = q.clone()
        a.step()
        b.step()
    together = [m for p in stacked for m in p.detach().reshape(-1, *p.shape[-2:])]
    assert all(torch.equal(x, y.detach()) for x, y in zip(together, apart))
    momenta = [m for p in stacked for m in a.state[p]["momentum_buffer"].reshape(-1, *p.shape[-2:])]
    assert all(torch.equal(x, b.state[y]["momentum_buffer"]) for x, y in zip(momenta, apart))
    # Without batched, a 4-D kernel is one matrix of its first dimension by the others (Keller Jordan's reshape).
    kernel = torch.nn.Parameter(torch.randn(4, 3, 2, 2, generator=g, dtype=torch.float64))
    reference = NumpyMuon(kernel.detach().numpy().reshape(4, 12), momentum=0.95, nesterov=True)
    c = gt.Muon([kernel], lr=0.05, weight_decay=0.1)
    for k in range(3):
        kernel.grad = gradient(kernel, k)
        reference.step(kernel.grad.numpy().reshape(4, 12), 0.05, 0.1)
        c.step()
    assert np.allclose(kernel.detach().numpy().reshape(4, 12), reference.p, rtol=0, atol=1e-12)
    # A batch of matrices under 2 x 2, or a batched flag that is not a bool, names the parameter.
    with pytest.raises(ValueError, match=r"group 0, parameter 0.*muon_matrices = 4"):
        optimizer([torch.nn.Parameter(torch.randn(4, 1, 5))], batched=True)
    with pytest.raises(ValueError, match="batched"):
        optimizer(stacked, batched=1)
