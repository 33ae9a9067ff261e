"""Manifold parameters under geomopt.torch: every manifold's parameters stay on it over 10^4 float32 steps, measured
by each manifold's defining equations written here in torch (not by geomopt's check); a step moves a parameter
along its Riemannian gradient (the loss decreases); tall Stiefel weights, stepped through a buffer, keep their
orthonormal columns."""

import pytest
import torch

import geomopt
import geomopt.torch as gt
from manifold_equations import defect


def orthonormal_rows(n, m, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(m, n, generator=g, dtype=torch.float64))
    return q.T.contiguous().to(dtype)  # n x m, rows orthonormal (n <= m)


def make(manifold, shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    name = manifold.name
    if name in ("Stiefel", "Grassmann"):
        a, b = shape
        x = orthonormal_rows(a, b, dtype, seed) if a <= b else orthonormal_rows(b, a, dtype, seed).T.contiguous()
    elif name == "SpecialOrthogonal":
        x = orthonormal_rows(shape[0], shape[0], torch.float64, seed)
        if torch.linalg.det(x) < 0:
            x[0] = -x[0]
        x = x.to(dtype)
    elif name == "SPD":
        a = torch.randn(*shape, generator=g, dtype=torch.float64)
        x = (a @ a.T / shape[0] + torch.eye(shape[0], dtype=torch.float64)).to(dtype)
    elif name == "Sphere":
        x = torch.randn(*shape, generator=g, dtype=torch.float64)
        x = (x / x.norm()).to(dtype)
    elif name == "Oblique":
        x = torch.randn(*shape, generator=g, dtype=torch.float64)
        x = (x / x.norm(dim=1, keepdim=True)).to(dtype)
    elif name == "Lorentz":
        v = 0.3 * torch.randn(shape[0] - 1, generator=g, dtype=torch.float64)
        x = torch.cat([torch.sqrt(1 + v.dot(v)).reshape(1), v]).to(dtype)
    return gt.ManifoldParameter(x, manifold=manifold)


MANIFOLDS = [
    (geomopt.Stiefel(), (4, 9)),
    (geomopt.Stiefel(), (9, 4)),  # tall: through the engine's buffer
    (geomopt.Grassmann(), (3, 8)),
    (geomopt.SpecialOrthogonal(), (5, 5)),
    (geomopt.SPD(), (4, 4)),
    (geomopt.Sphere(), (3, 4)),
    (geomopt.Oblique(), (6, 5)),
    (geomopt.Lorentz(), (5,)),
]


@pytest.mark.parametrize("optimizer", ["Adam", "SGD"])
def test_every_manifold_stays_on_it_over_ten_thousand_float32_steps(optimizer):
    params = [make(m, s, seed=i) for i, (m, s) in enumerate(MANIFOLDS)]
    bias = torch.nn.Parameter(torch.zeros(3))
    options = dict(lr=1e-2) if optimizer == "Adam" else dict(lr=1e-2, momentum=0.9)
    opt = getattr(gt, optimizer)(params + [bias], **options)
    # The gradient of |X - T|^2 / 2 towards a point T of the manifold, plus noise: a walk that stays in a bounded
    # region (pure noise drifts without bound on the hyperboloid, where float32 then runs out of range).
    targets = [make(m, s, seed=100 + i).detach() for i, (m, s) in enumerate(MANIFOLDS)] + [torch.ones(3)]
    g = torch.Generator().manual_seed(7)
    for _ in range(10_000):
        for p, t in zip(params + [bias], targets):
            p.grad = (p.detach() - t) + 0.3 * torch.randn(p.shape, generator=g)
        opt.step()
    for (m, _), p in zip(MANIFOLDS, params):
        assert defect(m, p) < 1e-5, (m, p)
    assert bias.abs().max() > 0  # the Euclidean parameter moved too


@pytest.mark.parametrize("manifold,shape", MANIFOLDS)
def test_a_step_descends_along_the_riemannian_gradient(manifold, shape):
    """f(X) = <C, X>: a small SGD step lowers f, on every manifold, and stays on it."""
    x = make(manifold, shape, dtype=torch.float64, seed=3)
    c = torch.randn(shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    lr = 1e-5
    opt = gt.SGD([x], lr=lr)
    before = (c * x).sum().item()
    x.grad = c.clone()
    opt.step()
    after = (c * x).sum().item()
    assert after < before
    # The decrease is lr <C, grad f>, grad f the Riemannian gradient. With the metric the embedding induces (Sphere,
    # Oblique) grad f is C's projection, so the decrease is at most lr |C|^2; with the canonical metric of the
    # Stiefel family, grad f = C - X C^T X (in X's orthonormal direction), and <C, grad f> is at most 2 |C|^2.
    bound = {"Sphere": 1, "Oblique": 1, "Stiefel": 2, "Grassmann": 2, "SpecialOrthogonal": 2}.get(manifold.name)
    if bound is not None:
        assert before - after <= bound * lr * c.norm().item() ** 2 * (1 + 1e-3)
    assert defect(manifold, x) < 1e-10
