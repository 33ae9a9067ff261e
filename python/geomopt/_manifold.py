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
was expected.
"""

import math


class Manifold:
    """A manifold a parameter lives on. Subclasses set ``name`` and ``kind`` (the engine's index of it)."""

    name = "Euclidean"
    kind = 0

    def layout(self, shape):
        """The shape geomopt sees for a tensor of this shape: (rows, cols, transposed)."""
        raise NotImplementedError

    def __repr__(self):
        return f"geomopt.{self.name}()"

    def __eq__(self, other):
        return type(self) is type(other)

    def __hash__(self):
        return hash(type(self))


def _matrix(manifold, shape):
    if len(shape) != 2:
        raise ValueError(f"{manifold.name} needs a matrix (2-D tensor), got shape {tuple(shape)}")
    return shape[0], shape[1]


class Stiefel(Manifold):
    """Matrices with orthonormal rows (wide or square) or columns (tall): the shorter side is orthonormal."""

    name = "Stiefel"
    kind = 1

    def layout(self, shape):
        a, b = _matrix(self, shape)
        if a == 0 or b == 0:
            raise ValueError(f"{self.name} needs a non-empty matrix, got shape {tuple(shape)}")
        return (b, a, False) if a <= b else (a, b, True)


class Grassmann(Stiefel):
    """Subspaces, each represented by a matrix with orthonormal rows (wide) or columns (tall)."""

    name = "Grassmann"
    kind = 2


class Sphere(Manifold):
    """Tensors of unit Frobenius norm, of any shape."""

    name = "Sphere"
    kind = 3

    def layout(self, shape):
        n = math.prod(shape)
        if n == 0:
            raise ValueError(f"{self.name} needs a non-empty tensor, got shape {tuple(shape)}")
        return n, 1, False


class SpecialOrthogonal(Manifold):
    """Square rotation matrices: X^T X = I, det X = 1."""

    name = "SpecialOrthogonal"
    kind = 4

    def layout(self, shape):
        a, b = _matrix(self, shape)
        if a != b or a == 0:
            raise ValueError(f"{self.name} needs a non-empty square matrix, got shape {tuple(shape)}")
        return a, a, False


class SPD(SpecialOrthogonal):
    """Symmetric positive definite matrices, with the affine-invariant metric."""

    name = "SPD"
    kind = 5


class Oblique(Manifold):
    """Matrices whose rows have unit norm."""

    name = "Oblique"
    kind = 6

    def layout(self, shape):
        a, b = _matrix(self, shape)
        if b == 0:
            raise ValueError(f"{self.name} needs rows of at least one entry, got shape {tuple(shape)}")
        return b, a, False


class Lorentz(Manifold):
    """The hyperboloid model of hyperbolic space: vectors x of n + 1 entries with <x, x>_L = -1, x_0 > 0."""

    name = "Lorentz"
    kind = 7

    def layout(self, shape):
        if len(shape) != 1 or shape[0] == 0:
            raise ValueError(f"{self.name} needs a non-empty vector (1-D tensor), got shape {tuple(shape)}")
        return shape[0], 1, False


def euclidean_layout(shape):
    """A Euclidean tensor as a row-major rows x cols array: its first dimension by the product of the others."""
    if len(shape) == 0:
        return 1, 1, False
    return shape[0], math.prod(shape[1:]), False
