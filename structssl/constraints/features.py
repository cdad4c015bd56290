"""Constraint feature maps linear in the parts of a structure, beside
:class:`~structssl.losses.gamma.LinearConstraintFeatures`: one dimension per chain position
(:class:`PositionFeatures`) and several maps side by side (:class:`ConcatFeatures`)."""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor

from structssl.losses.gamma import ConstraintFeatures
from structssl.structures.base import Potentials, as_tuple, like

__all__ = ["PositionFeatures", "ConcatFeatures"]


class PositionFeatures(ConstraintFeatures):
    """One constraint dimension per chain position: ``phi_t(y) = offset_t + <W_t, parts_t(y)>``.

    A compact :class:`~structssl.losses.gamma.ConstraintFeatures` for position-local binary
    indicators (seed 000 section 5.1's encoding), O(B N C^2) instead of the O(B N^2 C^2) of a
    dense :class:`~structssl.losses.gamma.LinearConstraintFeatures`.

    Args:
        weights: ``W`` (B, N, C, C), the per-position edge weights.
        offset: (B, N) constant part.
        binary: whether phi is 0/1 on every structure.

    Shape:
        phi(parts): (B, N); adjoint(v): v (B, N) -> (B, N, C, C).
    """

    def __init__(self, weights: Tensor, offset: Tensor, binary: bool = True) -> None:
        if not isinstance(weights, Tensor) or weights.dim() != 4:
            got = tuple(weights.shape) if isinstance(weights, Tensor) else type(weights).__name__
            raise ValueError(f"weights must have shape (B, N, C, C); got {got}")
        if not isinstance(offset, Tensor) or offset.shape != weights.shape[:2]:
            got = tuple(offset.shape) if isinstance(offset, Tensor) else type(offset).__name__
            raise ValueError(f"offset must have shape (B, N) = {tuple(weights.shape[:2])}; got {got}")
        self.weights = weights
        self.offset = offset
        self.num_constraints = int(weights.shape[1])
        self.binary = bool(binary)

    def phi(self, parts: Potentials) -> Tensor:
        assert isinstance(parts, Tensor) and parts.dim() == 4
        w = self.weights.to(parts.dtype) if parts.is_floating_point() else self.weights
        return (w * parts.to(w.dtype)).sum((2, 3)) + self.offset.to(w.dtype)

    def adjoint(self, v: Tensor, potentials: Potentials) -> Potentials:
        if not isinstance(potentials, Tensor) or potentials.dim() != 4:
            raise NotImplementedError("PositionFeatures need LinearChain potentials (B, N, C, C)")
        if v.shape[1] != self.num_constraints:
            raise ValueError(f"v must have d = {self.num_constraints} entries; got {v.shape[1]}")
        return (v.view(v.shape[0], -1, 1, 1).to(potentials.dtype) * self.weights.to(potentials.dtype))

    def offset_dot(self, v: Tensor) -> Tensor:
        return (v * self.offset.to(v.dtype)).sum(-1)


class ConcatFeatures(ConstraintFeatures):
    """Several feature maps side by side: ``phi = [phi_1, phi_2, ...]`` (d = sum of the d_i).

    Args:
        parts: the feature maps (each with ``num_constraints``); binary iff all are.
    """

    def __init__(self, parts: Sequence[ConstraintFeatures]) -> None:
        if len(parts) == 0:
            raise ValueError("parts must hold at least one ConstraintFeatures; got none")
        for i, p in enumerate(parts):
            if not isinstance(p, ConstraintFeatures):
                raise TypeError(f"parts[{i}] must be a ConstraintFeatures; got {type(p).__name__}")
        self.parts = list(parts)
        self.sizes = [int(getattr(p, "num_constraints")) for p in self.parts]
        self.num_constraints = sum(self.sizes)
        self.binary = all(p.binary for p in self.parts)

    def phi(self, parts: Potentials) -> Tensor:
        return torch.cat([p.phi(parts) for p in self.parts], dim=1)

    def adjoint(self, v: Tensor, potentials: Potentials) -> Potentials:
        if v.shape[1] != self.num_constraints:
            raise ValueError(f"v must have d = {self.num_constraints} entries; got {v.shape[1]}")
        total: Optional[list[Tensor]] = None
        for p, chunk in zip(self.parts, v.split(self.sizes, dim=1)):
            extra = as_tuple(p.adjoint(chunk, potentials))
            total = list(extra) if total is None else [a + e for a, e in zip(total, extra)]
        assert total is not None
        return like(potentials, total)

    def offset_dot(self, v: Tensor) -> Tensor:
        return sum(
            (p.offset_dot(chunk) for p, chunk in zip(self.parts, v.split(self.sizes, dim=1))),
            torch.zeros(v.shape[0], dtype=v.dtype, device=v.device),
        )
