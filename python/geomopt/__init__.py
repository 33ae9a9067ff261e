"""geomopt: optimizers that step parameters on Riemannian and structured manifolds, in place.

The manifolds (``geomopt.Stiefel()``, ...) declare what a parameter is; ``geomopt.torch`` steps PyTorch tensors by
geomopt's C++ optimizers (``geomopt._core``). See docs/python.md.
"""

from geomopt._manifold import (
    Grassmann,
    Lorentz,
    Manifold,
    Oblique,
    SpecialOrthogonal,
    SPD,
    Sphere,
    Stiefel,
)

__all__ = ["Manifold", "Stiefel", "Grassmann", "Sphere", "SpecialOrthogonal", "SPD", "Oblique", "Lorentz"]
