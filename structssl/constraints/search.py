"""Constraint-guided decoding with non-linear terms: k-best reranking with a certificate of
exactness (:func:`kbest_search`, see :mod:`structssl.constraints`)."""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import torch
from torch import Tensor

from structssl.structures.base import Potentials, Structure, as_tuple, like

__all__ = ["SearchResult", "kbest_search"]



class SearchResult(NamedTuple):
    """Result of :func:`kbest_search`.

    labels: (B, N) best labels found; value: (B,) their objective; certified: (B,) bool, the
    result is provably the exact optimum; feasible: (B,) bool, a candidate satisfying the hard
    constraints was found (if not, ``labels`` is the best linear candidate).
    """

    labels: Tensor
    value: Tensor
    certified: Tensor
    feasible: Tensor


def _rerank(
    kb_labels: Tensor,
    kb_scores: Tensor,
    lengths: Tensor,
    bonus: Callable[..., Tensor],
    bonus_max: Tensor,
    reject: Optional[Callable[..., Tensor]],
    rows: Optional[Tensor],
) -> SearchResult:
    b, kk = kb_scores.shape
    flat = kb_labels.flatten(0, 1)
    flat_len = lengths.repeat_interleave(kk)
    args: tuple = () if rows is None else (rows.repeat_interleave(kk),)
    extra = bonus(flat, flat_len, *args).view(b, kk).to(kb_scores.dtype)
    value = kb_scores + extra
    exists = torch.isfinite(kb_scores)
    value = value.masked_fill(~exists, float("-inf"))
    feasible_k = exists.clone()
    if reject is not None:
        feasible_k &= ~reject(flat, flat_len, *args).view(b, kk)
        value = value.masked_fill(~feasible_k, float("-inf"))
    feasible = feasible_k.any(1)
    best_val, best_idx = value.max(1)
    best_idx = torch.where(feasible, best_idx, torch.zeros_like(best_idx))
    labels = kb_labels[torch.arange(b, device=kb_labels.device), best_idx]
    kth = kb_scores.masked_fill(~exists, float("inf")).min(1).values
    complete = (~exists).any(1)  # fewer than k structures: the list is exhaustive
    certified = feasible & (complete | (best_val >= kth + bonus_max.to(kth.dtype) - 1e-9))
    value = torch.where(feasible, best_val, kb_scores[:, 0] + extra[:, 0])
    return SearchResult(labels, value, certified, feasible)


def kbest_search(
    structure: Structure,
    potentials: Potentials,
    lengths: Tensor,
    bonus: Callable[..., Tensor],
    bonus_max: Tensor,
    k: int = 16,
    reject: Optional[Callable[..., Tensor]] = None,
    adaptive: bool = False,
) -> SearchResult:
    """Maximise ``score(y) + bonus(y)`` for a non-linear ``bonus`` by k-best reranking.

    ``structure.kbest`` lists the ``k`` best labelings under ``potentials``; ``bonus`` (and
    ``reject``, for hard constraints) are evaluated on them exactly, the best is returned. The
    result is certified exact when ``value >= kth_score + bonus_max`` (no unlisted labeling can
    beat it). Runs without autograd.

    With ``adaptive=True`` the plain argmax is tried first (k = 1, the cheap Viterbi pass) and
    the k-best list is computed only for the rows it does not certify; ``bonus`` and ``reject``
    then receive a third argument ``rows`` (M,) long, the example index of each candidate
    (without ``adaptive`` the candidates are always the B k rows in example order).

    Args:
        structure: a structure with ``kbest`` (labels (B, k, N)).
        potentials: the linear part (constraint-folded potentials).
        lengths: (B,) lengths.
        bonus: ``bonus(labels (M, N), lengths (M,)[, rows (M,)]) -> (M,)`` non-linear extra
            score.
        bonus_max: (B,) an upper bound of the bonus per example.
        k: list size.
        reject: ``reject(labels (M, N), lengths (M,)[, rows (M,)]) -> (M,) bool`` hard-constraint
            violation.
        adaptive: argmax first, k-best only where needed (see above).

    Shape:
        potentials: (B, N, C, C) for a chain.
    """
    with torch.no_grad():
        if not adaptive:
            kb_labels, kb_scores = structure.kbest(potentials, k, lengths)  # (B, k, N), (B, k)
            return _rerank(kb_labels, kb_scores, lengths, bonus, bonus_max, reject, None)
        b = lengths.shape[0]
        rows = torch.arange(b, device=lengths.device)
        top, top_score = structure.argmax(potentials, lengths)
        first = _rerank(top.unsqueeze(1), top_score.unsqueeze(1), lengths, bonus, bonus_max, reject, rows)
        todo = (~first.certified).nonzero().view(-1)
        if k == 1 or todo.numel() == 0:
            return first
        sub_pot = like(potentials, [p[todo] for p in as_tuple(potentials)])
        kb_labels, kb_scores = structure.kbest(sub_pot, k, lengths[todo])
        second = _rerank(kb_labels, kb_scores, lengths[todo], bonus, bonus_max[todo], reject, todo)
        labels, value = first.labels.clone(), first.value.clone()
        certified, feasible = first.certified.clone(), first.feasible.clone()
        labels[todo], value[todo] = second.labels, second.value
        certified[todo], feasible[todo] = second.certified, second.feasible
        return SearchResult(labels, value, certified, feasible)