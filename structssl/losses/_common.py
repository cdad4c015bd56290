"""Shared helpers of the losses: option checks, reductions, candidate (violator) sets.

Everything here works through the generic :class:`~structssl.structures.base.Structure` API, so
every loss works on every structure. Internal: the public entry points are the loss modules.
"""

from __future__ import annotations

from typing import Literal, Optional, Sequence

import torch
from torch import Tensor

from structssl.structures.base import Potentials, Structure, as_tuple, like, positive_int

Reduction = Literal["mean", "sum", "none"]
REDUCTIONS: tuple[str, ...] = ("mean", "sum", "none")
COSTS: tuple[str, ...] = ("hamming", "zero_one")


def check_option(value: object, name: str, choices: Sequence[str]) -> str:
    """``value`` if it is one of ``choices``, else a ``ValueError`` listing them."""
    if not isinstance(value, str) or value not in choices:
        listed = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {listed}; got {value!r}")
    return value


def check_k(k: int, name: str = "k") -> int:
    return positive_int(k, name)


def reduce(loss: Tensor, reduction: str) -> Tensor:
    """Reduce a per-example loss (B,) to a scalar (``mean``, ``sum``) or keep it (``none``)."""
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def check_structure(structure: object) -> Structure:
    if not isinstance(structure, Structure):
        raise TypeError(
            f"structure must be a structssl Structure (e.g. LinearChain(num_labels)); got "
            f"{type(structure).__name__}"
        )
    return structure


def prepare(
    structure: Structure, potentials: Potentials, target: Tensor, lengths: Optional[Tensor]
) -> tuple[Potentials, Tensor, Tensor]:
    """Validate potentials, lengths and target at a loss's entry point.

    Returns the potentials, the target in canonical form (long, 0 at padded positions) and the
    lengths as a (B,) long tensor. Raises ``ValueError`` naming ``target`` on a bad target, and
    naming the examples whose target uses a part of potential ``-inf`` (a transition or label
    the potentials forbid: its loss would be infinite, NaN for the nabla losses), or those
    without any structure (:meth:`~structssl.structures.base.Structure.max`'s error); not
    checked with ``structure.validate`` off.
    """
    check_structure(structure)
    potentials, lengths = structure.check(potentials, lengths)
    target = structure.check_labels(target, lengths, "target")
    if not structure.validate:
        return potentials, target, lengths
    with torch.no_grad():
        impossible = torch.isneginf(structure.score(potentials, target, lengths))
        if not bool(impossible.any()):
            return potentials, target, lengths
        structure.max(potentials, lengths)  # an example without any structure: named there
    rows = impossible.nonzero().flatten().tolist()
    raise ValueError(
        f"target of example(s) {rows[:10]}{' ...' if len(rows) > 10 else ''} (of "
        f"{impossible.numel()}) has score -inf: it uses a part whose potential is -inf, "
        "e.g. a transition or label that the scorer or a mask forbids; the labeled data "
        "contradicts the potentials' constraints (its loss would be infinite)"
    )


def repeat_potentials(potentials: Potentials, k: int) -> Potentials:
    """Each example's potentials repeated ``k`` times along the batch (example-major)."""
    return like(potentials, [x.repeat_interleave(k, dim=0) for x in as_tuple(potentials)])


def score_k(structure: Structure, potentials: Potentials, labels: Tensor, lengths: Tensor) -> Tensor:
    """Differentiable scores of labels (B, k, ...). Shape (B, k)."""
    b, k = labels.shape[:2]
    rep = repeat_potentials(potentials, k)
    return structure.score(rep, labels.flatten(0, 1), lengths.repeat_interleave(k)).view(b, k)


def same(structure: Structure, labels: Tensor, target: Tensor) -> Tensor:
    """Whether each of labels (B, k, ...) equals target (B, ...). Shape (B, k) bool."""
    return structure.same(labels, target.unsqueeze(1))


def cost_scale(lengths: Tensor, normalize: bool, dtype: torch.dtype) -> Tensor:
    """Per-example factor of the Hamming cost: 1, or 1 / length when normalised. Shape (B,)."""
    if normalize:
        return 1.0 / lengths.to(dtype)
    return torch.ones(lengths.shape, dtype=dtype, device=lengths.device)


def delta_k(
    structure: Structure,
    target: Tensor,
    labels: Tensor,
    lengths: Tensor,
    cost: str,
    normalize: bool,
    dtype: torch.dtype,
) -> Tensor:
    """``Delta(target, labels[:, r])`` for labels (B, k, ...). Shape (B, k).

    ``hamming``: the structure's Hamming distance (divided by the length if ``normalize``);
    ``zero_one``: 1 where the labels differ from the target, else 0.
    """
    b, k = labels.shape[:2]
    if cost == "zero_one":
        return (~same(structure, labels, target)).to(dtype)
    ham = structure.hamming(
        target.repeat_interleave(k, dim=0), labels.flatten(0, 1), lengths.repeat_interleave(k)
    ).view(b, k)
    return ham.to(dtype) * cost_scale(lengths, normalize, dtype).unsqueeze(1)


def _first_valid(valid: Tensor, k: int) -> Tensor:
    """Indices (B, k) of the first ``k`` valid ranks, valid ones first, order kept."""
    return torch.sort((~valid).to(torch.int8), dim=1, stable=True).indices[:, :k]


def _gather_ranks(labels: Tensor, order: Tensor) -> Tensor:
    idx = order.view(order.shape + (1,) * (labels.dim() - 2)).expand((-1, -1) + labels.shape[2:])
    return labels.gather(1, idx)


def _k_best_others(
    structure: Structure, potentials: Potentials, target: Tensor, k: int, lengths: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """The ``k`` best structures other than ``target``: ``k + 1`` best, the target dropped.

    Returns ``(labels (B, k, ...), scores (B, k), valid (B, k))``.
    """
    labels, scores = structure.kbest(potentials, k + 1, lengths)  # (B, k+1, ...), (B, k+1)
    valid = torch.isfinite(scores) & ~same(structure, labels, target)
    order = _first_valid(valid, k)
    return _gather_ranks(labels, order), scores.gather(1, order), valid.gather(1, order)


def _best_other(
    structure: Structure, potentials: Potentials, target: Tensor, lengths: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """The best structure other than ``target``: :func:`_k_best_others` with ``k = 1``, faster.

    One argmax for every example; the 2-best decoder runs only on the examples whose argmax
    is the target (with cost-augmented potentials: the examples whose margins all hold). Ties
    may pick another structure of the same score than the 2-best decoder would.

    Returns ``(labels (B, 1, ...), scores (B, 1), valid (B, 1))``.
    """
    best, best_scores = structure.argmax(potentials, lengths)
    labels, scores = best.unsqueeze(1), best_scores.unsqueeze(1)
    hit = same(structure, labels, target)[:, 0]
    if bool(hit.any()):
        idx = hit.nonzero().squeeze(1)
        sub = like(potentials, [p.index_select(0, idx) for p in as_tuple(potentials)])
        other, other_scores, _ = _k_best_others(
            structure, sub, target.index_select(0, idx), 1, lengths.index_select(0, idx)
        )
        labels = labels.index_copy(0, idx, other)
        scores = scores.index_copy(0, idx, other_scores)
    valid = torch.isfinite(scores) & ~same(structure, labels, target)
    return labels, scores, valid


def violator_candidates(
    structure: Structure,
    potentials: Potentials,
    target: Tensor,
    k: int,
    lengths: Tensor,
    cost: str,
    normalize: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """The ``k`` best structures other than ``target`` under ``s(y) + Delta(target, y)``.

    This is the cost-augmented (loss-augmented) k-best decoder of thesis Table 7.1,
    ``argmax_{y != target} Delta(target, y) + <w, Phi(x, y)>``. Hamming cost is folded into the
    potentials and decoded with ``k + 1`` best (the target itself is dropped); 0/1 cost uses the
    structure's 2-best based decoder (every non-target has cost 1).

    Returns:
        ``(labels (B, k, ...), scores (B, k), valid (B, k))``: candidate labels, their plain scores
        ``s(y)`` (differentiable w.r.t. ``potentials``; finite everywhere, arbitrary where not
        valid) and whether each rank is a real structure different from the target.
    """
    if cost == "zero_one":
        labels, aug = structure.cost_augmented_kbest(potentials, target, k, lengths, "zero_one")
        valid = torch.isfinite(aug)
        scores = aug - 1.0
    else:
        ref = as_tuple(potentials)[0]
        scale = cost_scale(lengths, normalize, ref.dtype)
        # through the structure: it knows its potentials layout (e.g. factored chains)
        aug_pot = structure.cost_augmented_potentials(potentials, target, lengths, scale)
        if k == 1:
            labels, aug, valid = _best_other(structure, aug_pot, target, lengths)
        else:
            labels, aug, valid = _k_best_others(structure, aug_pot, target, k, lengths)
        delta = delta_k(structure, target, labels, lengths, cost, normalize, ref.dtype)
        scores = aug - delta
    finite = torch.where(valid, scores, torch.zeros_like(scores))  # no -inf reaches the losses
    return labels, finite, valid


def runner_ups(
    structure: Structure, potentials: Potentials, k: int, lengths: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The argmax and the ``k`` runner-ups (ranks 2 .. k + 1) of the plain k-best decoder.

    Returns ``(best (B, ...), labels (B, k, ...), scores (B, k), valid (B, k))`` with
    differentiable scores (finite; arbitrary where not valid).
    """
    labels, scores = structure.kbest(potentials, k + 1, lengths)
    valid = torch.isfinite(scores[:, 1:])
    rest = torch.where(valid, scores[:, 1:], torch.zeros_like(scores[:, 1:]))
    return labels[:, 0], labels[:, 1:], rest, valid


def check_candidates(
    candidates: Optional[Tensor], candidates_mask: Optional[Tensor], target: Tensor
) -> Optional[tuple[Tensor, Tensor]]:
    """Validate a working set of earlier violators: labels (B, W, ...) and a (B, W) bool mask."""
    if candidates is None:
        if candidates_mask is not None:
            raise ValueError("candidates_mask was given without candidates")
        return None
    if not isinstance(candidates, Tensor):
        raise TypeError(f"candidates must be a torch.Tensor; got {type(candidates).__name__}")
    b = target.shape[0]
    want = (b, "W") + tuple(target.shape[1:])
    if candidates.dim() != target.dim() + 1 or candidates.shape[0] != b or (
        tuple(candidates.shape[2:]) != tuple(target.shape[1:])
    ):
        raise ValueError(
            f"candidates must have shape (B, W, *label_shape) = {want}; got {tuple(candidates.shape)}"
        )
    if candidates.is_floating_point() or candidates.dtype == torch.bool:
        raise ValueError(f"candidates must have an integer dtype; got {candidates.dtype}")
    w = candidates.shape[1]
    if candidates_mask is None:
        candidates_mask = torch.ones(b, w, dtype=torch.bool, device=candidates.device)
    if (
        not isinstance(candidates_mask, Tensor)
        or candidates_mask.dtype != torch.bool
        or tuple(candidates_mask.shape) != (b, w)
    ):
        got = (
            (candidates_mask.dtype, tuple(candidates_mask.shape))
            if isinstance(candidates_mask, Tensor)
            else type(candidates_mask).__name__
        )
        raise ValueError(f"candidates_mask must be a bool tensor of shape (B, W) = ({b}, {w}); got {got}")
    return candidates.long(), candidates_mask


def union_candidates(
    structure: Structure,
    potentials: Potentials,
    target: Tensor,
    lengths: Tensor,
    labels: Tensor,
    scores: Tensor,
    valid: Tensor,
    extra: Optional[tuple[Tensor, Tensor]],
) -> tuple[Tensor, Tensor, Tensor]:
    """Add a working set to decoded candidates; drop the target and duplicates.

    The smax is a sum over a *set*: a structure found both by the decoder and in the working set
    must count once. Returns ``(labels (B, M, ...), scores (B, M), valid (B, M))``.
    """
    if extra is None:
        return labels, scores, valid
    more, more_mask = extra
    w = more.shape[1]
    if w == 0:
        return labels, scores, valid
    # canonical form (0 at padded positions, values checked) so that equality is exact
    more = structure.check_labels(
        more.flatten(0, 1), lengths.repeat_interleave(w), "candidates"
    ).view(more.shape)
    more_scores = score_k(structure, potentials, more, lengths)
    more_valid = more_mask & ~same(structure, more, target)
    labels = torch.cat([labels, more.to(labels.device)], dim=1)
    scores = torch.cat([scores, torch.where(more_valid, more_scores, torch.zeros_like(more_scores))], 1)
    valid = torch.cat([valid, more_valid], dim=1)
    m = labels.shape[1]
    eq = (labels.unsqueeze(2) == labels.unsqueeze(1)).flatten(3).all(-1)  # (B, M, M)
    earlier = torch.ones(m, m, dtype=torch.bool, device=labels.device).tril(-1)  # [j, i]: i < j
    dup = (eq & earlier & valid.unsqueeze(1)).any(-1)  # (B, M): an earlier valid copy exists
    return labels, scores, valid & ~dup
