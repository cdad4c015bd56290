"""Flat multi-class labels: the trivial structure, so multi-class problems share the losses.

Potentials: (B, C), one per label; ``-inf`` forbids a label (+inf and NaN are rejected; an
example with every label forbidden raises ``ValueError`` naming it). Labels: (B,) long. Parts: one-hot (B, C). ``lengths`` is
accepted for a uniform interface and must be all ones if given. Time and memory O(B C).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from structssl.semirings import Semiring
from structssl.structures.base import Potentials, Structure, positive_int, semiring_sum

__all__ = ["MultiClass"]


class MultiClass(Structure):
    """One label out of ``C`` per example.

    Args:
        num_labels: C, the number of classes.
        validate: check values at the public entry points (see :class:`Structure`).
    """

    event_shape_doc = "(C,)"
    mask_value = float("-inf")  # exact exclusion (see Structure.mask_potentials)

    def __init__(self, num_labels: int, validate: bool = True) -> None:
        super().__init__(validate)
        self.num_labels = positive_int(num_labels, "num_labels")

    def __repr__(self) -> str:
        return f"MultiClass(num_labels={self.num_labels})"

    def _check(self, potentials: Potentials, lengths: Optional[Tensor]) -> tuple[Tensor, Tensor]:
        if not isinstance(potentials, Tensor):
            raise TypeError(f"MultiClass potentials must be a tensor (B, C); got {type(potentials).__name__}")
        if potentials.dim() != 2 or potentials.shape[1] != self.num_labels:
            raise ValueError(
                f"potentials must have shape (B, C) with C = num_labels = {self.num_labels}; got "
                f"{tuple(potentials.shape)}"
            )
        return potentials, self._lengths(lengths, potentials.shape[0], potentials.device)

    def _lengths(self, lengths: Optional[Tensor], b: int, device: torch.device) -> Tensor:
        if lengths is not None:
            if not isinstance(lengths, Tensor) or lengths.shape != (b,):
                got = tuple(lengths.shape) if isinstance(lengths, Tensor) else type(lengths).__name__
                raise ValueError(f"lengths must have shape (B,) = ({b},); got {got}")
            if self.validate and bool((lengths != 1).any()):
                raise ValueError("lengths of a MultiClass structure must all be 1")
        return torch.ones(b, dtype=torch.long, device=device)

    def check_labels(self, labels: Tensor, lengths: Tensor, name: str = "labels") -> Tensor:
        b = lengths.shape[0]
        if not isinstance(labels, Tensor) or labels.shape != (b,):
            got = tuple(labels.shape) if isinstance(labels, Tensor) else type(labels).__name__
            raise ValueError(f"{name} must have shape (B,) = ({b},); got {got}")
        if labels.is_floating_point() or labels.dtype == torch.bool:
            raise ValueError(f"{name} must have an integer dtype; got {labels.dtype}")
        if self.validate and labels.numel():
            lo, hi = int(labels.min()), int(labels.max())
            if lo < 0 or hi >= self.num_labels:
                raise ValueError(
                    f"{name} must be in [0, C) = [0, {self.num_labels}); got values in [{lo}, {hi}]"
                )
        return labels.long()

    def _inside(self, potentials: Tensor, lengths: Tensor, semiring: Semiring) -> Tensor:
        return semiring_sum(semiring, semiring.lift(potentials), dim=1)  # (B, *S)

    def _argmax(self, potentials: Tensor, lengths: Tensor) -> Tensor:
        return potentials.argmax(dim=1)

    def _kbest(self, potentials: Tensor, k: int, lengths: Tensor) -> tuple[Tensor, Tensor]:
        b, c = potentials.shape
        if k > c:
            pad = potentials.new_full((b, k - c), float("-inf"))
            top = torch.cat([potentials, pad], dim=1).topk(k, dim=1)
            return top.indices.clamp(max=c - 1), top.values
        top = potentials.topk(k, dim=1)
        return top.indices, top.values

    def to_parts(self, labels: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
        labels = self.check_labels(labels, self._lengths(lengths, labels.shape[0], labels.device))
        return torch.nn.functional.one_hot(labels, self.num_labels).float()

    def from_parts(self, parts: Potentials, lengths: Optional[Tensor] = None) -> Tensor:
        if not isinstance(parts, Tensor) or parts.dim() != 2:
            raise ValueError("parts must be a tensor of shape (B, C)")
        return parts.argmax(dim=1)

    def hamming_potentials(self, target: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
        return 1.0 - self.to_parts(target, lengths)

    def _score(self, potentials: Potentials, labels: Tensor, lengths: Tensor) -> Tensor:
        assert isinstance(potentials, Tensor)
        return potentials.gather(1, labels.unsqueeze(1)).squeeze(1)
