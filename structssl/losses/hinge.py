"""Structured hinge loss (structural SVM), margin and slack rescaling, by cost-augmented decoding.

Margin rescaling (seed 002 section "Soft margin with loss"; seed 000 eq. 1; thesis OP 6.3 and
eq. 7.1 with r = 1)::

    l_m(x, y*) = max_{y in Y} [Delta(y*, y) + s(y)] - s(y*)            >= 0

computed exactly by the structure's cost-augmented argmax (Hamming cost folded into the potentials;
0/1 cost through the 2-best decoder). Slack rescaling (thesis OP 6.4, r = 1)::

    l_s(x, y*) = max(0, max_{y != y*} Delta(y*, y) (1 - s(y*) + s(y)))

is not decomposable for Hamming cost: it is maximised over the union of the ``k`` best structures
of the cost-augmented decoder and the ``k`` best of the plain decoder (exact when these cover
every structure; thesis-digest X5.9 suggests the same k-best strategy). For 0/1 cost both
rescalings coincide and are exact for any ``k``.

Scores ``s(y) = <potentials, parts(y)>`` are differentiable w.r.t. the potentials, so the loss is
a (sub)gradient-trainable objective for any scorer. Time: one cost-augmented decode (margin
rescaling) or two k-best decodes (slack rescaling) of the structure.
"""

from __future__ import annotations

from typing import Literal, Optional

import torch
from torch import Tensor, nn

from structssl.losses._common import (
    COSTS,
    REDUCTIONS,
    Reduction,
    check_k,
    check_option,
    delta_k,
    prepare,
    reduce,
    violator_candidates,
)
from structssl.structures.base import Potentials, Structure

__all__ = ["StructuredHingeLoss"]

Rescaling = Literal["margin", "slack"]
RESCALINGS: tuple[str, ...] = ("margin", "slack")


class StructuredHingeLoss(nn.Module):
    """The structural SVM hinge loss (margin or slack rescaling), parameter-free.

    Args:
        rescaling: ``"margin"`` (exact by cost-augmented decoding) or ``"slack"``.
        cost: ``"hamming"`` (the structure's decomposable Hamming distance) or ``"zero_one"``.
        normalize_cost: divide the Hamming cost by each example's length (the thesis's
            "fraction of wrong tokens"); default False (seeds 000 and 002 use raw counts).
        k: candidates per decoder for slack rescaling with Hamming cost (ignored otherwise).
        reduction: ``"mean"`` (seed 000 eq. 1's ``C/n`` sum), ``"sum"`` or ``"none"``.

    Raises:
        ValueError: on an unknown option or ``k < 1``.
    """

    def __init__(
        self,
        rescaling: Rescaling = "margin",
        cost: Literal["hamming", "zero_one"] = "hamming",
        normalize_cost: bool = False,
        k: int = 4,
        reduction: Reduction = "mean",
    ) -> None:
        super().__init__()
        self.rescaling = check_option(rescaling, "rescaling", RESCALINGS)
        self.cost = check_option(cost, "cost", COSTS)
        self.normalize_cost = bool(normalize_cost)
        self.k = check_k(k)
        self.reduction = check_option(reduction, "reduction", REDUCTIONS)

    def extra_repr(self) -> str:
        return f"rescaling={self.rescaling!r}, cost={self.cost!r}, reduction={self.reduction!r}"

    def forward(
        self,
        structure: Structure,
        potentials: Potentials,
        target: Tensor,
        lengths: Optional[Tensor] = None,
    ) -> Tensor:
        """Hinge loss of ``target`` under ``potentials``.

        Args:
            structure: any :class:`~structssl.structures.base.Structure`.
            potentials: the structure's potentials (tensor or tuple), batch first.
            target: gold labels in the structure's compact form.
            lengths: (B,) lengths (default: full).

        Shape:
            potentials: (B, *event_shape); target: (B, *label_shape); lengths: (B,).
            Returns a scalar, or (B,) with ``reduction="none"``.
        """
        potentials, target, lengths = prepare(structure, potentials, target, lengths)
        target_score = structure.score(potentials, target, lengths)  # (B,)
        if self.rescaling == "margin" or self.cost == "zero_one":
            loss = self._margin(structure, potentials, target, lengths, target_score)
        else:
            loss = self._slack(structure, potentials, target, lengths, target_score)
        return reduce(loss, self.reduction)

    def _margin(
        self,
        structure: Structure,
        potentials: Potentials,
        target: Tensor,
        lengths: Tensor,
        target_score: Tensor,
    ) -> Tensor:
        if self.cost == "hamming" and self.normalize_cost:
            labels, scores, valid = violator_candidates(
                structure, potentials, target, 1, lengths, "hamming", True
            )
            dtype = target_score.dtype
            delta = delta_k(structure, target, labels, lengths, "hamming", True, dtype)[:, 0]
            other = torch.where(valid[:, 0], scores[:, 0] + delta, target_score)
            return (torch.maximum(other, target_score) - target_score).clamp(min=0)
        _, aug = structure.cost_augmented_argmax(potentials, target, lengths, cost=self.cost)
        # aug >= target_score exactly in exact arithmetic (y = target is a candidate)
        return (aug - target_score).clamp(min=0)

    def _slack(
        self,
        structure: Structure,
        potentials: Potentials,
        target: Tensor,
        lengths: Tensor,
        target_score: Tensor,
    ) -> Tensor:
        dtype = target_score.dtype
        aug_labels, aug_scores, aug_valid = violator_candidates(
            structure, potentials, target, self.k, lengths, "hamming", self.normalize_cost
        )
        plain_labels, plain_scores, plain_valid = violator_candidates(
            structure, potentials, target, self.k, lengths, "zero_one", False
        )
        labels = torch.cat([aug_labels, plain_labels], dim=1)
        scores = torch.cat([aug_scores, plain_scores], dim=1)
        valid = torch.cat([aug_valid, plain_valid], dim=1)
        delta = delta_k(structure, target, labels, lengths, "hamming", self.normalize_cost, dtype)
        violation = delta * (1.0 - target_score.unsqueeze(1) + scores)  # (B, 2k)
        violation = torch.where(valid, violation, torch.zeros_like(violation))
        return violation.amax(dim=1).clamp(min=0)

