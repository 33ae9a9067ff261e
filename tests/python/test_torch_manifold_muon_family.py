"""geomopt.torch.ManifoldMuon on Sphere, SpecialOrthogonal, Grassmann and Oblique parameters: each takes manifold
Muon's step (a momentum buffer, an Oblique one a per-row multiplier too), not AdamW's; on problems of known optimum
(the leading eigenvector, orthogonal Procrustes, the leading subspace, each row's leading eigenvector) every parameter
stays on its manifold and its loss falls to near the optimum computed by torch's eigh and SVD; use_muon=False hands
them back to AdamW."""

import pytest
import torch

import geomopt
import geomopt.manifolds
import geomopt.torch as gt


def problem(dtype, seed=0, params=None):
    """The four parameters (or `params`, bound to this seed's problem), their losses, a function that sets their
    gradients, and the optima."""
    g = torch.Generator().manual_seed(seed)

    def sym(n):
        a = torch.randn(n, n, generator=g, dtype=torch.float64)
        return 0.5 * (a + a.T)

    s, m, sj = sym(8), torch.randn(4, 4, generator=g, dtype=torch.float64), [sym(6) for _ in range(3)]
    x = torch.randn(8, generator=g, dtype=torch.float64)
    q, _ = torch.linalg.qr(torch.randn(4, 4, generator=g, dtype=torch.float64))
    if torch.det(q) < 0:
        q[:, 0] = -q[:, 0]
    w, _ = torch.linalg.qr(torch.randn(8, 3, generator=g, dtype=torch.float64))
    c = torch.randn(3, 6, generator=g, dtype=torch.float64)
    if params is None:
        params = [gt.ManifoldParameter((x / x.norm()).to(dtype), manifold=geomopt.Sphere()),
                  gt.ManifoldParameter(q.to(dtype).contiguous(), manifold=geomopt.SpecialOrthogonal()),
                  gt.ManifoldParameter(w.T.contiguous().to(dtype), manifold=geomopt.Grassmann()),
                  gt.ManifoldParameter((c / c.norm(dim=1, keepdim=True)).to(dtype), manifold=geomopt.Oblique())]

    def losses():
        x, r, w, c = (p.detach().to(torch.float64) for p in params)
        return [-(x @ s @ x).item(), ((r - m) ** 2).sum().item(), -torch.trace(w @ s @ w.T).item(),
                -sum((c[j] @ sj[j] @ c[j]).item() for j in range(3))]

    def set_gradients():
        x, r, w, c = (p.detach().to(torch.float64) for p in params)
        grads = [-2 * s @ x, 2 * (r - m), -2 * w @ s, torch.stack([-2 * sj[j] @ c[j] for j in range(3)])]
        for p, gr in zip(params, grads):
            p.grad = gr.to(dtype)

    e = torch.linalg.eigvalsh(s)
    u, _, vt = torch.linalg.svd(m)
    d = torch.ones(4, dtype=torch.float64)
    d[3] = torch.sign(torch.det(u @ vt))
    best = u @ torch.diag(d) @ vt
    optima = [-e[-1].item(), ((best - m) ** 2).sum().item(), -e[-3:].sum().item(),
              -sum(torch.linalg.eigvalsh(a)[-1].item() for a in sj)]
    return params, losses, set_gradients, optima


def defects(params):
    x, r, w, c = (p.detach().to(torch.float64) for p in params)
    return [abs(x.norm().item() - 1), (r.T @ r - torch.eye(4, dtype=torch.float64)).norm().item() + (
        0 if torch.det(r) > 0 else 2), (w @ w.T - torch.eye(3, dtype=torch.float64)).norm().item(),
            (c.norm(dim=1) - 1).abs().max().item()]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_manifold_leaf_takes_manifold_muons_step_stays_on_its_manifold_and_descends(dtype):
    params, losses, set_gradients, optima = problem(dtype)
    steps = 1500
    opt = gt.ManifoldMuon(params, lr=0.05)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 1 - t / steps)
    first = losses()
    for _ in range(steps):
        set_gradients()
        opt.step()
        sched.step()
    for p in params:
        assert "momentum_buffer" in opt.state[p] and "exp_avg" not in opt.state[p]
    assert opt.state[params[3]]["multiplier"].numel() == 3  # one per unit row
    assert "multiplier" not in opt.state[params[0]]
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    for m, defect in zip(["Sphere", "SpecialOrthogonal", "Grassmann", "Oblique"], defects(params)):
        assert defect < tol, m
    last = losses()
    for a, b, best in zip(first, last, optima):
        assert b < a
        assert best - 10 * tol * (1 + abs(best)) <= b < best + 1e-3 * (1 + abs(best))
    for p, m in zip(params, ["Sphere", "SpecialOrthogonal", "Grassmann", "Oblique"]):
        assert abs(geomopt.manifolds.check(p.manifold, p.detach())) < 10 * tol, m


def test_use_muon_false_hands_the_manifold_leaves_to_adamw():
    params, _, set_gradients, _ = problem(torch.float64, seed=1)
    opt = gt.ManifoldMuon([{"params": params, "use_muon": False}], lr=0.05)
    set_gradients()
    opt.step()
    for p in params:
        assert "exp_avg" in opt.state[p] and "momentum_buffer" not in opt.state[p]
    with pytest.raises(ValueError, match=r"oblique_max_iterations"):
        gt.ManifoldMuon(params, oblique_max_iterations=-1)


class Family(torch.nn.Module):
    def __init__(self, params):
        super().__init__()
        self.sphere, self.rot, self.plane, self.cols = params


def run(params, opt, set_gradients, steps):
    for _ in range(steps):
        set_gradients()
        opt.step()


def test_a_run_resumes_bitwise_from_a_state_dict_and_from_a_checkpoint(tmp_path):
    """The Oblique parameter's multiplier (one entry per row) goes with the momentum through torch's state_dict and
    geomopt.io's checkpoint, so the resumed runs equal the uninterrupted one bit for bit."""
    params, _, set_gradients, _ = problem(torch.float32, seed=2)
    opt = gt.ManifoldMuon(params, lr=0.05)
    run(params, opt, set_gradients, 8)
    expected = [p.detach().clone() for p in params]

    def resumed(restore):
        ps, _, set_g, _ = problem(torch.float32, seed=2)
        o = gt.ManifoldMuon(ps, lr=0.05)
        run(ps, o, set_g, 4)
        ps2, o2 = restore(ps, o)
        _, _, set_g2, _ = problem(torch.float32, seed=2, params=ps2)
        run(ps2, o2, set_g2, 4)
        return ps2

    def by_state_dict(ps, o):
        qs, _, _, _ = problem(torch.float32, seed=2)
        with torch.no_grad():
            for q, p in zip(qs, ps):
                q.copy_(p)
        o2 = gt.ManifoldMuon(qs, lr=0.05)
        o2.load_state_dict(o.state_dict())
        assert torch.equal(o2.state[qs[3]]["multiplier"], o.state[ps[3]]["multiplier"])
        return qs, o2

    for p, q in zip(expected, resumed(by_state_dict)):
        assert torch.equal(p, q)
    try:
        import geomopt.io
        geomopt.io._require_io()
    except Exception as e:  # the HDF5 component is optional
        pytest.skip(f"geomopt.io unavailable: {e}")

    def by_checkpoint(ps, o):
        geomopt.io.save(tmp_path / "family.h5", Family(ps), o)
        qs, _, _, _ = problem(torch.float32, seed=3)  # other numbers, the same shapes
        o2 = gt.ManifoldMuon(qs, lr=0.05)
        geomopt.io.load(tmp_path / "family.h5", Family(qs), o2)
        return qs, o2

    for p, q in zip(expected, resumed(by_checkpoint)):
        assert torch.equal(p, q)
