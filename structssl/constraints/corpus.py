"""Corpus-level constraints: ratios of counts summed over the corpus against a target (seed 003
section 4.1.1's label proportions and transition fraction, seed 000's expectations)."""

from __future__ import annotations

import copy
import math
from typing import Any, Literal, Optional, Sequence, Union

import torch
from torch import Tensor

from structssl.constraints.base import Constraint
from structssl.constraints.instance import PunctuationTransitions
from structssl.constraints.labelings import LabelSpec, _hinge, transitions_mask

__all__ = ["LabelProportion", "ExpectedCount", "TransitionFraction"]


class _Ratio(Constraint):
    """Corpus-level ratio ``sum(numerator) / sum(denominator)`` against a target.

    ``bound="eq"``: penalty ``weight * |ratio - target|`` (L1 to the target, an expectation);
    ``"ge"``/``"le"``: ``weight * [target - ratio]_+`` / ``[ratio - target]_+`` (hinge).
    counts: (B, 2) = (numerator, denominator) per example.

    Args:
        target: the ratio; must lie in [0, ``max_target``] (``what`` names it in the error);
            or ``"labeled"`` where the subclass allows it (``estimable``): estimated later from
            labeled examples by :meth:`with_target_from` (the procedure does it at setup).
    """

    level = "corpus"
    num_counts = 2
    #: the denominator is fixed by the inputs (does not depend on the labels)
    label_free_denominator: bool = False

    def __init__(
        self,
        target: float,
        bound: Literal["eq", "ge", "le"],
        hard: bool,
        weight: float,
        name: Optional[str],
        what: str = "a fraction in [0, 1]",
        max_target: float = 1.0,
        estimable: bool = False,
    ) -> None:
        #: where the target comes from when it is not given: "labeled" (see with_target_from)
        self.target_from: Optional[str] = None
        self._what, self._max_target = what, max_target
        if estimable and target == "labeled":
            self.target_from = "labeled"
        else:
            self._check_target(target, " (or 'labeled')" if estimable else "")
        super().__init__(hard=hard, weight=weight, name=name)
        if bound not in ("eq", "ge", "le"):
            raise ValueError(f"bound must be one of 'eq', 'ge', 'le'; got {bound!r}")
        self.bound = bound
        self.target: float = math.nan if self.target_from else float(target)

    def _check_target(self, target: object, alternative: str = "") -> None:
        number = isinstance(target, (int, float)) and not isinstance(target, bool)
        if not number or not 0.0 <= target <= self._max_target:  # type: ignore[operator]
            raise ValueError(f"target must be {self._what}{alternative}; got {target!r}")

    def with_target_from(
        self, labels: Union[Tensor, Sequence[Tensor]], lengths: Union[Tensor, Sequence[Tensor]],
        tokens: Optional[Any] = None,
    ) -> "_Ratio":
        """A copy whose target is the ratio of the counts summed over the given (labeled)
        examples, e.g. the class proportion of the tagged sentences (issue 17); the bound and
        the weight stay. The examples may come as one batch or as lists of batches (chunks,
        ``tokens`` then a list too), whose counts are summed.

        Shape:
            labels: (B, N) long; lengths: (B,) (or lists of them).

        Raises:
            ValueError: no examples, a zero denominator, or an estimate outside the allowed range.
        """
        if isinstance(labels, Tensor):
            labels, lengths, tokens = [labels], [lengths], [tokens]  # type: ignore[list-item]
        tokens = [None] * len(labels) if tokens is None else tokens
        if sum(int(n.numel()) for n in lengths) == 0:  # type: ignore[union-attr]
            raise ValueError(f"{self.name}: target='labeled' needs labeled examples; got none")
        totals = sum(
            self.counts(y, n, t).double().sum(0) for y, n, t in zip(labels, lengths, tokens)
        )
        if not float(totals[1]) > 0:
            raise ValueError(f"{self.name}: the labeled examples give a zero denominator")
        estimate = float(totals[0] / totals[1])
        self._check_target(estimate)
        out = copy.copy(self)
        out.target, out.target_from = estimate, None
        return out

    def violation_from_counts(self, counts: Tensor) -> Tensor:
        if self.target_from is not None:
            raise ValueError(
                f"{self.name}: target={self.target_from!r} has not been estimated; call "
                "with_target_from(labels, lengths) on the labeled examples (CCCPModule does it "
                "at setup)"
            )
        ratio = counts[..., 0] / counts[..., 1].clamp(min=1e-12)
        if self.bound == "eq":
            return (ratio - self.target).abs()
        if self.bound == "ge":
            return _hinge(self.target - ratio)
        return _hinge(ratio - self.target)


class _LabelRatio(_Ratio):
    """Shared: numerator = number of tokens with one of ``label``; the denominator per example
    is :meth:`_denominator` (constant in the labels)."""

    label_free_denominator = True

    def __init__(
        self,
        label: Union[LabelSpec, Sequence[LabelSpec]],
        target: Union[float, str],
        bound: Literal["eq", "ge", "le"],
        hard: bool,
        weight: float,
        name: Optional[str],
        **check: Any,
    ) -> None:
        super().__init__(target, bound, hard, weight, name, **check)
        self._set_labels(label, "label")

    def _resolve(self) -> None:
        super()._resolve()
        assert self.label_names is not None
        if len(self.indices) == len(self.label_names):
            raise ValueError(
                f"{self.name}: the label spec {self._label_specs()} matches every label "
                f"{list(self.label_names)[:20]}, so the count never depends on the labeling and "
                "the constraint has no effect (e.g. '[!O]*' on a tag set without O): name the "
                "labels it is about"
            )

    def _denominator(self, lengths: Tensor) -> Tensor:
        raise NotImplementedError

    def _counts(self, labels, lengths, tokens):
        hits = self._label_hits(labels, lengths).sum(1)
        return torch.stack([hits, self._denominator(lengths).to(hits.dtype)], dim=1)

    def _count_node_weights(self, tokens, lengths, n, c):
        den = self._denominator(lengths).double()
        offset = torch.stack([torch.zeros_like(den), den], 1)
        return self._label_node_weights(lengths, n, c, rows=2), offset


class LabelProportion(_LabelRatio):
    """A fraction ``target`` of the tokens carry ``label`` (seed 003: 30% of tokens AUTHOR).

    counts: (B, 2) = (#tokens with the label, #tokens), both linear in parts.

    Args:
        label: a label name (or list: any of them).
        target: the proportion, in [0, 1], or ``"labeled"``: the proportion of the labeled
            examples, estimated by :meth:`with_target_from` (CCCPModule: at setup, logged).
        bound: ``"eq"`` (L1 to target), ``"ge"`` (at least), ``"le"`` (at most).

    Raises:
        ValueError: ``target`` outside [0, 1].
    """

    def __init__(
        self,
        label: Union[LabelSpec, Sequence[LabelSpec]],
        target: Union[float, Literal["labeled"]],
        bound: Literal["eq", "ge", "le"] = "eq",
        hard: bool = False,
        weight: float = 1.0,
        name: Optional[str] = None,
    ) -> None:
        super().__init__(label, target, bound, hard, weight, name, what="a proportion in [0, 1]",
                         estimable=True)

    def _denominator(self, lengths: Tensor) -> Tensor:
        return lengths


class ExpectedCount(_LabelRatio):
    """Each example has on average ``target`` tokens with ``label`` (seed 000 eq. 5 style
    expectation over the corpus).

    counts: (B, 2) = (#tokens with the label, 1), linear in parts. ``target="labeled"``: the
    mean count of the labeled examples (:meth:`with_target_from`).

    Raises:
        ValueError: ``target < 0``.
    """

    def __init__(
        self,
        label: Union[LabelSpec, Sequence[LabelSpec]],
        target: Union[float, Literal["labeled"]],
        bound: Literal["eq", "ge", "le"] = "eq",
        hard: bool = False,
        weight: float = 1.0,
        name: Optional[str] = None,
    ) -> None:
        super().__init__(
            label, target, bound, hard, weight, name, what="an expected count >= 0",
            max_target=float("inf"), estimable=True,
        )

    def _denominator(self, lengths: Tensor) -> Tensor:
        return torch.ones_like(lengths)


class TransitionFraction(_Ratio):
    """The fraction of label changes on non-punctuation boundaries is ``target`` (seed 003
    4.1.1 corpus constraint (2): 0.01).

    counts: (B, 2) = (#changes at non-allowed boundaries, #changes), both linear in parts.
    Boundaries as in :class:`PunctuationTransitions`.

    Raises:
        ValueError: ``target`` outside [0, 1].
    """

    needs_tokens = True

    def __init__(
        self,
        target: float = 0.01,
        bound: Literal["eq", "ge", "le"] = "eq",
        punctuation: Optional[Sequence[str]] = None,
        side: Literal["either", "before", "after"] = "either",
        hard: bool = False,
        weight: float = 1.0,
        name: Optional[str] = None,
    ) -> None:
        super().__init__(target, bound, hard, weight, name)
        self._boundaries = PunctuationTransitions(punctuation=punctuation, side=side)

    def _counts(self, labels, lengths, tokens):
        change = transitions_mask(labels, lengths)
        bad = change & ~self._boundaries.allowed_boundaries(tokens, lengths, labels.shape[1])
        return torch.stack([bad.sum(1), change.sum(1)], dim=1)

    def _count_weights(self, tokens, lengths, n, c):
        b = lengths.shape[0]
        bad = self._boundaries._change_weights(tokens, lengths, n, c)  # (B, N, C, C)
        off_diag = 1.0 - torch.eye(c, dtype=torch.float64, device=lengths.device)
        every = off_diag.expand(b, n, c, c).clone()
        if n:
            every[:, 0] = 0.0
            bad = bad.clone()
            bad[:, 0] = 0.0
        return torch.stack([bad, every], 1), torch.zeros(b, 2, dtype=torch.float64, device=lengths.device)
