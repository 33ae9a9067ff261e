"""The manifolds a parameter may live on, and how a tensor's memory maps to a point of each.

A tensor is stored row-major (C order). geomopt's manifold kernels read a point column-major, so a tensor ``X`` of
shape ``(a, b)`` is, in memory, the ``b x a`` point ``X^T``, and that is what geomopt steps, with no copy:

* ``Stiefel`` and ``Grassmann``: the shorter side of ``X`` is orthonormal, as in
  ``torch.nn.utils.parametrizations.orthogonal``: ``X X^T = I`` for a wide or square ``X`` (a <= b, zero-copy) and
  ``X^T X = I`` for a tall one (a > b, stepped through a buffer of the engine, copied in and out at each step).
* ``Oblique``: every row of ``X`` has unit norm (a linear layer's weight with one unit vector per output).
* ``SpecialOrthogonal`` and ``SPD``: square ``X``, as they are.
* ``Sphere``: the whole tensor has unit Frobenius norm (any shape); ``Lorentz``: a vector of n + 1 entries on the
  hyperboloid.

``layout(shape)`` gives the shape geomopt sees, ``(rows, cols, transposed)``, or raises ValueError saying what shape
was expected. The rule is the C++ library's (geomopt/manifolds/tensor_layout.hpp), which libtorch trees share.
"""

from geomopt import _core


class Manifold:
    """A manifold a parameter lives on. Subclasses set ``name`` and ``kind`` (the engine's index of it)."""

    name = "Euclidean"
    kind = 0

    def layout(self, shape):
        """The shape geomopt sees for a tensor of this shape: (rows, cols, transposed)."""
        return _core.tensor_layout(self.kind, list(shape))

    def __repr__(self):
        return f"geomopt.{self.name}()"

    def __eq__(self, other):
        return type(self) is type(other)

    def __hash__(self):
        return hash(type(self))


class Stiefel(Manifold):
    """Matrices with orthonormal rows (wide or square) or columns (tall): the shorter side is orthonormal."""

    name = "Stiefel"
    kind = 1


class Grassmann(Stiefel):
    """Subspaces, each represented by a matrix with orthonormal rows (wide) or columns (tall)."""

    name = "Grassmann"
    kind = 2


class Sphere(Manifold):
    """Tensors of unit Frobenius norm, of any shape."""

    name = "Sphere"
    kind = 3


class SpecialOrthogonal(Manifold):
    """Square rotation matrices: X^T X = I, det X = 1."""

    name = "SpecialOrthogonal"
    kind = 4


class SPD(SpecialOrthogonal):
    """Symmetric positive definite matrices, with the affine-invariant metric."""

    name = "SPD"
    kind = 5


class Oblique(Manifold):
    """Matrices whose rows have unit norm."""

    name = "Oblique"
    kind = 6


class Lorentz(Manifold):
    """The hyperboloid model of hyperbolic space: vectors x of n + 1 entries with <x, x>_L = -1, x_0 > 0."""

    name = "Lorentz"
    kind = 7


def euclidean_layout(shape):
    """A Euclidean tensor as a row-major rows x cols array: its first dimension by the product of the others."""
    return _core.tensor_layout(0, list(shape))
