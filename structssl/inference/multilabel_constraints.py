"""Corpus-level constraints of multi-label classification (seed 004 section 5).

- **LDC** (label distribution constraint): the number of times each label takes each state
  over the corpus, ``sum_j [y_jp = a] = n(p, a)`` for every label ``p`` and state ``a``.
- **LCC** (label correlation constraint): the number of times each pair of labels takes each
  joint state, ``sum_j [(y_jp, y_jq) = (a, c)] = n(p, q, a, c)`` for every pair ``p < q``.

The counts are estimated from labeled data as rates (``fit(labels)``: the fraction of labeled
examples in each state) and the constraints are written in rates, so they apply to a corpus of
any size: ``rate - tolerance <= (1/B) sum_j <F, parts(y_j)> <= rate + tolerance`` (seed 004 uses
equalities, ``tolerance = 0``; a small band helps when the rates come from a handful of labeled
examples). Both compile to :class:`~structssl.inference.dual_decomposition.
CorpusLinearConstraints` over the :class:`~structssl.structures.multilabel.PairwiseMultiLabel`
parts (unary (K, 2), pairwise (K, K, 2, 2)), which the corpus dual decomposition enforces.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from structssl.inference.dual_decomposition import CorpusLinearConstraints

__all__ = ["LabelDistributionConstraint", "LabelCorrelationConstraint", "multilabel_constraints"]


def _check_labels(labels: Tensor, name: str = "labels") -> Tensor:
    if not isinstance(labels, Tensor) or labels.dim() != 2 or labels.shape[0] == 0:
        got = tuple(labels.shape) if isinstance(labels, Tensor) else type(labels).__name__
        raise ValueError(f"{name} must be a non-empty (B, K) tensor of 0/1 labels; got {got}")
    if labels.is_floating_point() or labels.dtype == torch.bool:
        labels = labels.long()
    if int(labels.min()) < 0 or int(labels.max()) > 1:
        raise ValueError(
            f"{name} must hold 0/1 labels; got values in [{int(labels.min())}, {int(labels.max())}]"
        )
    return labels.long()


def _check_tolerance(tolerance: float) -> float:
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not (
        math.isfinite(tolerance) and tolerance >= 0
    ):
        raise ValueError(f"tolerance must be a finite float >= 0; got {tolerance!r}")
    return float(tolerance)


class _MultiLabelCorpusConstraint:
    """Shared machinery: rates estimated from labels, compiled to linear corpus constraints."""

    kind = ""

    def __init__(self, tolerance: float = 0.0, rates: Optional[Tensor] = None) -> None:
        self.tolerance = _check_tolerance(tolerance)
        self.rates: Optional[Tensor] = None
        if rates is not None:
            self._set_rates(rates)

    def _set_rates(self, rates: Tensor) -> None:
        raise NotImplementedError

    @property
    def num_labels(self) -> int:
        if self.rates is None:
            raise ValueError(f"{type(self).__name__} has no rates: call fit(labels) first")
        return int(self.rates.shape[0])

    def fit(self, labels: Tensor) -> "_MultiLabelCorpusConstraint":
        """Estimate the rates from labeled data (the counts ``n(.)`` of seed 004 as fractions).

        Shape:
            labels: (B, K) in {0, 1}.
        """
        raise NotImplementedError

    def compile(self) -> CorpusLinearConstraints:
        """The :class:`CorpusLinearConstraints` over the multi-label parts (float64)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        k = None if self.rates is None else int(self.rates.shape[0])
        return f"{type(self).__name__}(num_labels={k}, tolerance={self.tolerance})"


class LabelDistributionConstraint(_MultiLabelCorpusConstraint):
    """LDC: the rate of each label state over the corpus (2 K constraints).

    Args:
        tolerance: half-width of the band around each rate (0: equality, as in seed 004).
        rates: (K, 2) rates ``P(y_p = a)`` (instead of :meth:`fit`).
    """

    kind = "ldc"

    def _set_rates(self, rates: Tensor) -> None:
        if not isinstance(rates, Tensor) or rates.dim() != 2 or rates.shape[1] != 2:
            got = tuple(rates.shape) if isinstance(rates, Tensor) else type(rates).__name__
            raise ValueError(f"rates must have shape (K, 2); got {got}")
        self.rates = rates.detach().to(torch.float64)

    def fit(self, labels: Tensor) -> "LabelDistributionConstraint":
        y = _check_labels(labels)
        onehot = torch.nn.functional.one_hot(y, 2).to(torch.float64)
        self.rates = onehot.mean(0)  # (K, 2)
        return self

    def compile(self) -> CorpusLinearConstraints:
        k = self.num_labels
        assert self.rates is not None
        unary = torch.eye(2 * k, dtype=torch.float64).view(2 * k, k, 2)
        pair = torch.zeros(2 * k, k, k, 2, 2, dtype=torch.float64)
        r = self.rates.reshape(-1)
        names = tuple(f"ldc[{p}]={a}" for p in range(k) for a in (0, 1))
        return CorpusLinearConstraints(
            (unary, pair), (r - self.tolerance).clamp_min(0), (r + self.tolerance).clamp_max(1), names
        )


class LabelCorrelationConstraint(_MultiLabelCorpusConstraint):
    """LCC: the rate of each joint state of each label pair ``p < q`` (4 K (K-1) / 2 constraints).

    Args:
        tolerance: half-width of the band around each rate (0: equality, as in seed 004).
        rates: (K, K, 2, 2) rates ``P(y_p = a, y_q = c)`` (used for ``p < q``; instead of
            :meth:`fit`).
    """

    kind = "lcc"

    def _set_rates(self, rates: Tensor) -> None:
        if not isinstance(rates, Tensor) or rates.dim() != 4 or tuple(rates.shape[2:]) != (2, 2) or (
            rates.shape[0] != rates.shape[1]
        ):
            got = tuple(rates.shape) if isinstance(rates, Tensor) else type(rates).__name__
            raise ValueError(f"rates must have shape (K, K, 2, 2); got {got}")
        self.rates = rates.detach().to(torch.float64)

    def fit(self, labels: Tensor) -> "LabelCorrelationConstraint":
        y = _check_labels(labels)
        onehot = torch.nn.functional.one_hot(y, 2).to(torch.float64)  # (B, K, 2)
        self.rates = torch.einsum("bpa,bqc->pqac", onehot, onehot) / y.shape[0]
        return self

    def compile(self) -> CorpusLinearConstraints:
        k = self.num_labels
        assert self.rates is not None
        rows, cols = torch.triu_indices(k, k, offset=1)
        p = rows.numel()
        m = 4 * p
        unary = torch.zeros(m, k, 2, dtype=torch.float64)
        pair = torch.zeros(m, k, k, 2, 2, dtype=torch.float64)
        idx = torch.arange(m)
        pair_index = idx // 4
        state = idx % 4
        pair[idx, rows[pair_index], cols[pair_index], state // 2, state % 2] = 1.0
        r = self.rates[rows, cols].reshape(-1)
        names = tuple(
            f"lcc[{int(rows[i])},{int(cols[i])}]=({a},{c})" for i in range(p) for a in (0, 1) for c in (0, 1)
        )
        return CorpusLinearConstraints(
            (unary, pair), (r - self.tolerance).clamp_min(0), (r + self.tolerance).clamp_max(1), names
        )


_KINDS = ("none", "ldc", "lcc", "both")


def multilabel_constraints(
    kind: str, labels: Tensor, tolerance: float = 0.0
) -> Optional[CorpusLinearConstraints]:
    """The constraints of seed 004 Table 3, estimated from ``labels``.

    Args:
        kind: ``"none"`` (returns ``None``), ``"ldc"``, ``"lcc"`` or ``"both"``.
        labels: (B, K) labeled data to estimate the rates from.
        tolerance: half-width of the bands (0: equalities).

    Returns:
        :class:`CorpusLinearConstraints` or ``None``.
    """
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {_KINDS}; got {kind!r}")
    if kind == "none":
        _check_labels(labels)
        return None
    parts: list[CorpusLinearConstraints] = []
    if kind in ("ldc", "both"):
        parts.append(LabelDistributionConstraint(tolerance).fit(labels).compile())
    if kind in ("lcc", "both"):
        parts.append(LabelCorrelationConstraint(tolerance).fit(labels).compile())
    out = parts[0]
    for extra in parts[1:]:
        out = out.concat(extra)
    return out

