"""geomopt.manifolds: the manifold functions on NumPy arrays and CPU tensors, by geomopt's C++ implementation.

    import numpy as np, geomopt, geomopt.manifolds as gm
    St = geomopt.Stiefel()
    x = gm.random_point(St, (3, 8))            # a 3 x 8 matrix with orthonormal rows (float64 NumPy)
    xi = gm.lift(St, x, np.ones((3, 8)))       # the Riemannian gradient's coordinates (dim numbers)
    y = gm.retract(St, x, -0.1 * xi)           # a step along it, still on the manifold
    gm.check(St, y)                            # ~1e-16: its distance from the manifold

A point is an array laid out as ``geomopt.torch`` lays out a ``ManifoldParameter`` (``geomopt._manifold``: the
shorter side of a Stiefel matrix orthonormal, Oblique's rows of unit norm, ...); a tangent vector is a 1-D array of
its ``dim`` orthonormal coordinates, those of the manifold's metric, so that their dot product is the metric. Every
function returns new arrays of the point's type (a torch.Tensor for a tensor, else a NumPy array) and dtype (float32
or float64; others are converted to float64) and leaves its arguments unchanged. A shape the manifold has no point
of, an unknown retraction, coordinates of the wrong count or a non-finite one raise ValueError; a CUDA tensor raises
TypeError.
"""

import numpy as np

from geomopt import _core
from geomopt._manifold import Manifold

__all__ = ["random_point", "check", "project", "dim", "lift", "retract", "inverse_retract"]


def _array(x, what, dtype=None):
    """x as a NumPy array (sharing a CPU tensor's memory), and whether it was a tensor."""
    tensor = type(x).__module__.startswith("torch")
    if tensor:
        if x.device.type != "cpu":
            raise TypeError(f"{what} is on {x.device}; geomopt.manifolds works on CPU tensors")
        x = x.detach().resolve_conj().numpy()
    a = np.asarray(x)
    if dtype is None:
        dtype = a.dtype if a.dtype in (np.float32, np.float64) else np.float64
    return a.astype(dtype, copy=False), tensor


def _layout(manifold, shape):
    if not isinstance(manifold, Manifold) or manifold.kind == 0:
        raise TypeError(f"expected a geomopt manifold (geomopt.Stiefel(), ...), got {manifold!r}")
    return manifold.layout(tuple(shape))


def _to_core(manifold, a):
    """a in geomopt's layout: C-ordered (cols, rows), the column-major rows x cols point."""
    rows, cols, transposed = _layout(manifold, a.shape)
    b = a.T if transposed else a.reshape(cols, rows)
    return np.ascontiguousarray(b), rows, cols, transposed


def _from_core(b, shape, transposed, tensor):
    out = np.ascontiguousarray(b.T) if transposed else b.reshape(shape)
    if tensor:
        import torch
        return torch.from_numpy(out)
    return out


def _call(f, *args):
    try:
        return f(*args)
    except RuntimeError as e:  # the library's std::domain_error: a non-finite number, a target out of reach
        raise ValueError(str(e)) from None


def random_point(manifold, shape, dtype=np.float64, seed=0, like=None):
    """A point of shape ``shape`` drawn from the manifold's own distribution (uniform on Stiefel, SO(n), the sphere;
    geomopt's documented ones for SPD and Lorentz), by a generator seeded with ``seed``. A torch.Tensor when ``like``
    is one (or ``dtype`` is a torch dtype)."""
    tensor = like is not None and type(like).__module__.startswith("torch")
    if type(dtype).__module__.startswith("torch"):
        tensor, dtype = True, {"torch.float32": np.float32, "torch.float64": np.float64}[str(dtype)]
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise TypeError(f"random_point: dtype must be float32 or float64, got {dtype}")
    rows, cols, transposed = _layout(manifold, shape)
    b = _call(_core.manifold_random_point, manifold.kind, dtype == np.float64, rows, cols, int(seed))
    return _from_core(b, tuple(shape), transposed, tensor)


def check(manifold, x):
    """How far x is from the manifold (0 on it, to rounding), by the manifold's own measure (for Stiefel
    ``|X X^T - I|_F``); +infinity for a point no longer of the manifold's kind."""
    a, _ = _array(x, "the point")
    b, rows, cols, _ = _to_core(manifold, a)
    return _call(_core.manifold_check, manifold.kind, b, rows, cols)


def project(manifold, x):
    """The nearest point of the manifold to x (for Stiefel the polar factor, for the sphere x / |x|, ...)."""
    a, tensor = _array(x, "the point")
    b, rows, cols, transposed = _to_core(manifold, a)
    return _from_core(_call(_core.manifold_project, manifold.kind, b, rows, cols), a.shape, transposed, tensor)


def dim(manifold, x):
    """The number of tangent coordinates at x: the manifold's dimension."""
    a, _ = _array(x, "the point")
    b, rows, cols, _ = _to_core(manifold, a)
    return _call(_core.manifold_dim, manifold.kind, b, rows, cols)


def lift(manifold, x, egrad):
    """The coordinates of the Riemannian gradient at x of a function whose Euclidean gradient is egrad (x's shape)."""
    a, tensor = _array(x, "the point")
    g, _ = _array(egrad, "the gradient", a.dtype)
    if g.shape != a.shape:
        raise ValueError(f"lift: the gradient has shape {g.shape}, the point {a.shape}")
    b, rows, cols, _ = _to_core(manifold, a)
    h, _, _, _ = _to_core(manifold, g)
    return _vector(_call(_core.manifold_lift, manifold.kind, b, h, rows, cols), tensor)


def retract(manifold, x, xi, retraction=None):
    """R_x(xi): the point reached from x along the tangent with coordinates xi, by ``retraction`` ('cayley',
    'geodesic', 'second_order'; None: the manifold's default, as the optimizers use it)."""
    a, tensor = _array(x, "the point")
    c, _ = _array(xi, "the coordinates", a.dtype)
    b, rows, cols, transposed = _to_core(manifold, a)
    out = _call(_core.manifold_retract, manifold.kind, b, np.ascontiguousarray(c), rows, cols, retraction or "")
    return _from_core(out, a.shape, transposed, tensor)


def inverse_retract(manifold, x, y, retraction=None):
    """The coordinates xi of the tangent at x with R_x(xi) = y (ValueError when y is out of reach)."""
    a, tensor = _array(x, "the point")
    t, _ = _array(y, "the target", a.dtype)
    if t.shape != a.shape:
        raise ValueError(f"inverse_retract: the target has shape {t.shape}, the point {a.shape}")
    b, rows, cols, _ = _to_core(manifold, a)
    d, _, _, _ = _to_core(manifold, t)
    return _vector(_call(_core.manifold_inverse_retract, manifold.kind, b, d, rows, cols, retraction or ""), tensor)


def _vector(c, tensor):
    if tensor:
        import torch
        return torch.from_numpy(c)
    return c
