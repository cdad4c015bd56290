"""Semirings over log-space values.

A semiring here is a pair of operations on tensors of log-space values: ``sum`` (semiring
addition, a reduction over one dimension) and ``mul`` (semiring multiplication, elementwise
with broadcasting). Scalar semirings (:class:`Log`, :class:`Max`, :class:`SmoothMax`) hold one
value per cell; :class:`KMax` holds the ``k`` best values per cell in a trailing dimension of
size ``k`` (sorted, best first), which leaves batch-first indexing alone.

``LOG_ZERO`` is the one named log-space zero used for masking throughout structssl. It is finite
so that fully masked cells keep finite gradients (``-inf`` gives ``nan`` through ``logsumexp``);
``exp(LOG_ZERO - x)`` is exactly ``0.0`` in float32 and float64 for any realistic ``x``.
"""

from __future__ import annotations

import torch
from torch import Tensor

#: The log-space zero used to mask parts. Finite: see the module docstring.
LOG_ZERO: float = -1e9

__all__ = ["LOG_ZERO", "Semiring", "Log", "Max", "SmoothMax", "KMax"]


class Semiring:
    """Interface of a commutative semiring over log-space values.

    ``zero`` and ``one`` are the additive and multiplicative identities as plain floats;
    ``lift`` turns a tensor of log-potentials into semiring values (a no-op for scalar
    semirings) and ``unlift`` returns the best (or only) value per cell.
    """

    zero: float = LOG_ZERO
    one: float = 0.0
    #: size of the trailing semiring dimension (0 for scalar semirings)
    size: int = 0

    def sum(self, x: Tensor, dim: int) -> Tensor:
        """Semiring addition reducing ``dim`` (a dimension before the semiring dimension)."""
        raise NotImplementedError

    def mul(self, x: Tensor, y: Tensor) -> Tensor:
        """Semiring multiplication, elementwise with broadcasting."""
        return x + y

    def lift(self, potentials: Tensor) -> Tensor:
        """Log-potentials to semiring values."""
        return potentials

    def unlift(self, x: Tensor) -> Tensor:
        """Semiring values to one log-space value per cell."""
        return x

    def mul_potentials(self, x: Tensor, potentials: Tensor) -> Tensor:
        """``x (*shape, *S) ⊗ lift(potentials (*shape))``: adds plain log-potentials.

        For every semiring here, multiplying by a lifted scalar is adding it to each of the
        semiring's entries, which avoids materialising the lift.
        """
        if self.size:
            return x + potentials.unsqueeze(-1)
        return x + potentials

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Log(Semiring):
    """Log semiring: ``sum`` is log-sum-exp, ``mul`` is ``+``. Inside pass gives log Z."""

    def sum(self, x: Tensor, dim: int) -> Tensor:
        return torch.logsumexp(x, dim=dim)


class Max(Semiring):
    """Max (Viterbi) semiring: ``sum`` is ``max``, ``mul`` is ``+``."""

    def sum(self, x: Tensor, dim: int) -> Tensor:
        return x.amax(dim=dim)


class SmoothMax(Semiring):
    """Max smoothed with a temperature: ``sum(x) = temperature * logsumexp(x / temperature)``.

    Tends to :class:`Max` as ``temperature -> 0`` and equals :class:`Log` at 1. Its inside
    value upper-bounds the max by at most ``temperature * log(#structures)``.

    Args:
        temperature: positive smoothing temperature.
    """

    def __init__(self, temperature: float) -> None:
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0; got {temperature}")
        self.temperature = float(temperature)

    def sum(self, x: Tensor, dim: int) -> Tensor:
        return self.temperature * torch.logsumexp(x / self.temperature, dim=dim)

    def __repr__(self) -> str:
        return f"SmoothMax(temperature={self.temperature})"


class KMax(Semiring):
    """k-best semiring: each cell holds its ``k`` best values, sorted, in a trailing dimension.

    ``sum`` keeps the ``k`` best of the union, ``mul`` the ``k`` best pairwise sums. Missing
    entries (fewer than ``k`` structures) are ``-inf`` so that they never outrank a real one.

    Args:
        k: number of values kept per cell, >= 1.
    """

    zero = float("-inf")

    def __init__(self, k: int) -> None:
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ValueError(f"k must be an int >= 1; got {k!r}")
        self.k = k
        self.size = k

    def _top(self, x: Tensor) -> Tensor:
        # x (..., m) -> (..., k), padding with -inf when m < k
        m = x.shape[-1]
        if m < self.k:
            pad = x.new_full((*x.shape[:-1], self.k - m), float("-inf"))
            x = torch.cat([x, pad], dim=-1)
        return x.topk(self.k, dim=-1).values

    def sum(self, x: Tensor, dim: int) -> Tensor:
        d = dim % (x.dim() - 1)  # dim counts among the non-semiring dims
        moved = x.movedim(d, -2)  # (..., n, k)
        return self._top(moved.flatten(-2))

    def mul(self, x: Tensor, y: Tensor) -> Tensor:
        pairs = x.unsqueeze(-1) + y.unsqueeze(-2)  # (..., k, k)
        return self._top(pairs.flatten(-2))

    def lift(self, potentials: Tensor) -> Tensor:
        rest = potentials.new_full((*potentials.shape, self.k - 1), float("-inf"))
        return torch.cat([potentials.unsqueeze(-1), rest], dim=-1)

    def unlift(self, x: Tensor) -> Tensor:
        return x[..., 0]

    def __repr__(self) -> str:
        return f"KMax(k={self.k})"
