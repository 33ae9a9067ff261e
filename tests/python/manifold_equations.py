"""Each manifold's defining equations, written in NumPy independently of geomopt: the reference the Python tests
measure points against (never geomopt's own check)."""

import numpy as np


def defect(manifold, x):
    """How far x (a NumPy array or a tensor) is from the manifold, in float64: the largest violation of its defining
    equations; infinity for a non-positive-definite SPD point. Lorentz's is relative to x_0^2, the size of the terms
    that cancel in -x_0^2 + |x_1:|^2 = -1."""
    if hasattr(x, "detach"):
        x = x.detach().double().numpy()
    x = np.asarray(x, dtype=np.float64)
    name = manifold.name
    if name in ("Stiefel", "Grassmann", "SpecialOrthogonal"):
        a, b = x.shape
        gram = x @ x.T if a <= b else x.T @ x
        d = np.abs(gram - np.eye(min(a, b))).max()
        return max(d, abs(np.linalg.det(x) - 1)) if name == "SpecialOrthogonal" else d
    if name == "SPD":
        return np.abs(x - x.T).max() if np.linalg.eigvalsh((x + x.T) / 2).min() > 0 else np.inf
    if name == "Sphere":
        return abs(np.linalg.norm(x) - 1)
    if name == "Oblique":
        return np.abs(np.linalg.norm(x, axis=1) - 1).max()
    if name == "Lorentz":
        return abs(-x[0] ** 2 + x[1:] @ x[1:] + 1) / x[0] ** 2
    raise AssertionError(f"no defining equations for {name}")
