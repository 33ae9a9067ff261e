"""geomopt.manifolds against closed forms written here in NumPy: points drawn or projected satisfy each manifold's
defining equations; projection is the polar factor (Stiefel), x / |x| (Sphere), row normalization (Oblique); lift is
the Riemannian gradient, checked by the derivative along retraction curves (d/dt f(R_x(t xi)) at 0 = <lift, xi>, the
coordinates being orthonormal for the metric); inverse_retract inverts retract; tensors and NumPy arrays, float32 and
float64 give the same answers; arguments are never written; bad input raises ValueError naming what was expected."""

import numpy as np
import pytest
import torch

import geomopt
import geomopt.manifolds as gm
from manifold_equations import defect

CASES = [
    (geomopt.Stiefel(), (3, 8)),
    (geomopt.Stiefel(), (8, 3)),
    (geomopt.Grassmann(), (2, 6)),
    (geomopt.Sphere(), (3, 4)),
    (geomopt.SpecialOrthogonal(), (4, 4)),
    (geomopt.SPD(), (4, 4)),
    (geomopt.Oblique(), (5, 3)),
    (geomopt.Lorentz(), (5,)),
]
IDS = [f"{m.name}{s}" for m, s in CASES]


@pytest.mark.parametrize("manifold,shape", CASES, ids=IDS)
def test_random_points_and_projections_are_on_the_manifold(manifold, shape):
    x = gm.random_point(manifold, shape, seed=3)
    assert x.shape == shape and x.dtype == np.float64
    assert defect(manifold, x) < 1e-12
    assert gm.check(manifold, x) < 1e-12
    assert not np.array_equal(x, gm.random_point(manifold, shape, seed=4))
    np.testing.assert_array_equal(x, gm.random_point(manifold, shape, seed=3))
    # A point of the manifold is its own projection.
    np.testing.assert_allclose(gm.project(manifold, x), x, atol=1e-12)


def test_projections_match_their_closed_forms():
    a = np.random.default_rng(0).standard_normal((3, 7))
    u, _, vt = np.linalg.svd(a, full_matrices=False)
    np.testing.assert_allclose(gm.project(geomopt.Stiefel(), a), u @ vt, atol=1e-12)  # the polar factor
    np.testing.assert_allclose(gm.project(geomopt.Stiefel(), a.T.copy()), (u @ vt).T, atol=1e-12)
    np.testing.assert_allclose(gm.project(geomopt.Sphere(), a), a / np.linalg.norm(a), atol=1e-15)
    np.testing.assert_allclose(gm.project(geomopt.Oblique(), a), a / np.linalg.norm(a, axis=1, keepdims=True),
                               atol=1e-15)
    assert gm.check(geomopt.Stiefel(), a) > 0.1


@pytest.mark.parametrize("manifold,shape", CASES, ids=IDS)
def test_lift_is_the_derivative_along_retraction_curves(manifold, shape):
    rng = np.random.default_rng(1)
    x = gm.random_point(manifold, shape, seed=5)
    c = rng.standard_normal(shape)
    grad = gm.lift(manifold, x, c)
    assert grad.shape == (gm.dim(manifold, x),)
    xi = rng.standard_normal(grad.shape)
    t = 1e-5
    f = lambda y: float(np.sum(c * y))  # noqa: E731
    derivative = (f(gm.retract(manifold, x, t * xi)) - f(gm.retract(manifold, x, -t * xi))) / (2 * t)
    assert derivative == pytest.approx(grad @ xi, rel=1e-6, abs=1e-8)


@pytest.mark.parametrize("manifold,shape", CASES, ids=IDS)
def test_inverse_retract_inverts_retract(manifold, shape):
    x = gm.random_point(manifold, shape, seed=6)
    xi = 0.3 * np.random.default_rng(2).standard_normal(gm.dim(manifold, x))
    y = gm.retract(manifold, x, xi)
    assert defect(manifold, y) < 1e-12
    np.testing.assert_allclose(gm.inverse_retract(manifold, x, y), xi, atol=1e-10)
    np.testing.assert_allclose(gm.retract(manifold, x, np.zeros_like(xi)), x, atol=1e-14)


def test_named_retractions_differ_and_an_unknown_one_is_refused():
    St = geomopt.Stiefel()
    x = gm.random_point(St, (3, 6), seed=7)
    xi = 0.3 * np.random.default_rng(3).standard_normal(gm.dim(St, x))  # inside the injectivity radius
    cayley, geodesic = gm.retract(St, x, xi, "cayley"), gm.retract(St, x, xi, "geodesic")
    assert defect(St, cayley) < 1e-12 and defect(St, geodesic) < 1e-12
    assert np.abs(cayley - geodesic).max() > 1e-4
    np.testing.assert_allclose(gm.inverse_retract(St, x, geodesic, "geodesic"), xi, atol=1e-9)
    with pytest.raises(ValueError, match="unknown retraction 'polar'"):
        gm.retract(St, x, xi, "polar")


def test_tensors_and_float32_give_the_same_answers_and_inputs_stay_unchanged():
    St = geomopt.Stiefel()
    x = gm.random_point(St, (4, 9), seed=8)
    g = np.random.default_rng(4).standard_normal((4, 9))
    xt, gt = torch.from_numpy(x.copy()), torch.from_numpy(g.copy())
    lifted = gm.lift(St, xt, gt)
    assert isinstance(lifted, torch.Tensor)
    np.testing.assert_array_equal(lifted.numpy(), gm.lift(St, x, g))
    y = gm.retract(St, xt, -0.1 * lifted)
    assert isinstance(y, torch.Tensor) and y.shape == (4, 9)
    assert torch.equal(xt, torch.from_numpy(x)) and torch.equal(gt, torch.from_numpy(g))
    x32 = gm.random_point(St, (4, 9), dtype=torch.float32, seed=8)
    assert x32.dtype == torch.float32 and gm.check(St, x32) < 1e-5
    y32 = gm.retract(St, x32, -0.1 * gm.lift(St, x32, gt.float()))
    assert y32.dtype == torch.float32
    np.testing.assert_allclose(y32.numpy(), y.numpy(), atol=1e-5)


def test_bad_input_raises_value_error_saying_what_was_expected():
    St = geomopt.Stiefel()
    x = gm.random_point(St, (3, 6))
    with pytest.raises(ValueError, match="needs a matrix"):
        gm.check(St, np.zeros(4))
    n = gm.dim(St, x)
    assert n == 6 * 3 - 3 * 4 // 2  # St(6, 3): N n - n (n + 1) / 2
    with pytest.raises(ValueError, match=rf"has {n} coordinates, got an array of 4"):
        gm.retract(St, x, np.zeros(4))
    with pytest.raises(ValueError, match=r"the gradient has shape \(6, 3\), the point \(3, 6\)"):
        gm.lift(St, x, np.zeros((6, 3)))
    with pytest.raises(ValueError, match="not finite|non-finite|NaN|nan"):
        gm.retract(St, x, np.full(n, np.nan))
    with pytest.raises(TypeError, match="expected a geomopt manifold"):
        gm.check("Stiefel", x)
    with pytest.raises(ValueError, match="SpecialOrthogonal needs a non-empty square matrix"):
        gm.random_point(geomopt.SpecialOrthogonal(), (3, 4))
