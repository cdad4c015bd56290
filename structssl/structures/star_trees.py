"""The ``K`` spanning star trees of the fully connected pairwise multi-label model and MAP by
dual decomposition over them (seed 004 sections 4.1 and 5; see
:mod:`structssl.structures.multilabel` for the model and the split of the potentials).

Star ``c`` has centre ``c`` and every other label as a leaf; it receives ``1/K`` of every unary
potential and ``1/2`` of every edge potential ``(c, l)``, so the star scores sum to ``s(y)``.
The star pieces (:func:`star_potentials`, :func:`star_inside`, :func:`star_log_partition`,
:func:`star_argmax`, :func:`star_scores`) serve the composite likelihood loss and the
corpus-level dual decomposition; :func:`star_dual_decomposition` is the master-slave loop of
:meth:`PairwiseMultiLabel.dual_decomposition_argmax`. Also here: the one-hot scoring helpers
shared with the exact enumeration of :class:`PairwiseMultiLabel`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, NamedTuple, Optional

import torch
from torch import Tensor

from structssl.semirings import LOG_ZERO, Log, Semiring
from structssl.structures.base import semiring_sum

if TYPE_CHECKING:
    from structssl.structures.multilabel import MultiLabelPotentials

__all__ = [
    "StarPotentials",
    "DualDecompositionResult",
    "STEP_RULES",
    "star_potentials",
    "star_inside",
    "star_log_partition",
    "star_argmax",
    "star_scores",
    "star_dual_decomposition",
]

StepRule = Literal["diminishing", "polyak", "harmonic"]
#: default ``step`` of each step rule
_DEFAULT_STEP = {"diminishing": 3.0, "polyak": 1.0, "harmonic": 1.0}
STEP_RULES: tuple[str, ...] = ("diminishing", "polyak", "harmonic")


class StarPotentials(NamedTuple):
    """The ``K`` spanning star trees of the fully connected graph, one per centre label.

    Star ``c`` has centre ``c`` and leaves ``l != c``. Its score of a full labeling ``y`` is
    ``sum_j unary[c, j, y_j] + sum_{l != c} edge[c, l, y_c, y_l]``.

    Shape:
        unary: (B, K, K, 2), ``[b, c, j, a]`` star ``c``'s potential of ``y_j = a``.
        edge: (B, K, K, 2, 2), ``[b, c, l, s, t]`` star ``c``'s potential of centre state ``s``
        and leaf state ``t`` on edge ``(c, l)``; zero for ``l == c`` (not an edge).
    """

    unary: Tensor
    edge: Tensor


@dataclass
class DualDecompositionResult:
    """Result of :meth:`PairwiseMultiLabel.dual_decomposition_argmax`.

    Attributes:
        labels: (B, K) long, the best primal labeling found.
        score: (B,) its score ``s(labels)`` (a lower bound on the max).
        dual: (B,) the smallest dual value seen (an upper bound on the max).
        gap: (B,) ``dual - score`` (>= 0 up to rounding; 0 certifies that ``labels`` is optimal).
        converged: (B,) bool, whether the example stopped by agreement of all stars or
            ``gap <= tol * (1 + |score|)``.
        iterations: number of iterations run (the same for the whole batch).
        primal_history: (T, B) best primal score after each iteration.
        dual_history: (T, B) dual value at each iteration's multipliers (not monotone).
        multipliers: (B, K, K, 2) final multipliers ``nu[b, c, j, a]`` (star ``c``, label
            ``j``, state ``a``); they sum to zero over stars ``c`` and can warm-start a new run.
    """

    labels: Tensor
    score: Tensor
    dual: Tensor
    gap: Tensor
    converged: Tensor
    iterations: int
    primal_history: Tensor
    dual_history: Tensor
    multipliers: Tensor


# ---------------------------------------------------------------------- helpers
def _upper_mask(k: int, device: torch.device) -> Tensor:
    """(K, K) bool, True for ``k < l`` (the pairwise parts)."""
    return torch.ones(k, k, dtype=torch.bool, device=device).triu(1)


def _finite(x: Tensor) -> Tensor:
    """``-inf`` read as ``LOG_ZERO`` (so that 0/1 products and differences stay finite)."""
    return torch.where(torch.isneginf(x), torch.full((), LOG_ZERO, dtype=x.dtype, device=x.device), x)


def _pair_matrix(pairwise: Tensor) -> Tensor:
    """Pairwise potentials as a (B, 2K, 2K) matrix, row ``2k + a``, column ``2l + c``, with
    the non-parts (``k >= l``) zeroed (by ``where``, so that ``inf`` there gives no NaN)."""
    b, k = pairwise.shape[:2]
    mask = _upper_mask(k, pairwise.device).view(1, k, k, 1, 1)
    p = torch.where(mask, pairwise, torch.zeros((), dtype=pairwise.dtype, device=pairwise.device))
    return p.permute(0, 1, 3, 2, 4).reshape(b, 2 * k, 2 * k)


def _onehot_scores(z: Tensor, unary_flat: Tensor, pair: Tensor) -> Tensor:
    """Scores of one-hot labelings ``z (B or 1, N, 2K)`` under flat unary (B, 2K) and the
    upper-triangular pair matrix (B, 2K, 2K): (B, N)."""
    lin = (z * unary_flat.unsqueeze(1)).sum(-1)
    quad = (torch.matmul(z, pair) * z).sum(-1)
    return lin + quad


def _check_star(star: StarPotentials) -> tuple[Tensor, Tensor]:
    if not isinstance(star, tuple) or len(star) != 2:
        raise TypeError(f"star must be a StarPotentials (unary, edge); got {type(star).__name__}")
    unary, edge = star
    if not isinstance(unary, Tensor) or not isinstance(edge, Tensor):
        raise TypeError("star.unary and star.edge must be torch.Tensors")
    if unary.dim() != 4 or unary.shape[1] != unary.shape[2] or unary.shape[3] != 2:
        raise ValueError(f"star.unary must have shape (B, K, K, 2); got {tuple(unary.shape)}")
    b, k = unary.shape[:2]
    if tuple(edge.shape) != (b, k, k, 2, 2):
        raise ValueError(
            f"star.edge must have shape (B, K, K, 2, 2) = ({b}, {k}, {k}, 2, 2); got {tuple(edge.shape)}"
        )
    return unary, edge


# ---------------------------------------------------------------------- star trees
def star_potentials(potentials: MultiLabelPotentials) -> StarPotentials:
    """Split potentials among the ``K`` spanning star trees (seed 004 section 5).

    Star ``c`` (centre ``c``, leaves ``l != c``) gets ``unary / K`` for every label and half of
    each edge ``(c, l)``: ``edge[c, l, s, t] = pairwise[c, l, s, t] / 2`` for ``c < l`` and
    ``pairwise[l, c, t, s] / 2`` for ``c > l`` (states ordered centre first). Each edge
    ``(k, l)`` lies in exactly the two stars centred at ``k`` and ``l``, so
    ``sum_c star_scores(...)[:, c] == score(potentials, y)`` for every ``y``. Differentiable.
    Inputs are not checked here (use :meth:`PairwiseMultiLabel.star_potentials`).

    Args:
        potentials: :class:`MultiLabelPotentials` (B, K, 2) and (B, K, K, 2, 2).

    Returns:
        :class:`StarPotentials` with unary (B, K, K, 2) and edge (B, K, K, 2, 2).
    """
    unary, pairwise = potentials
    b, k = unary.shape[:2]
    upper = _upper_mask(k, unary.device).view(1, k, k, 1, 1)
    zero = torch.zeros((), dtype=pairwise.dtype, device=pairwise.device)
    p = torch.where(upper, pairwise, zero)
    # symmetric full edge table: [c, l, s, t] = pairwise[c, l, s, t] (c < l), pairwise[l, c, t, s] (c > l)
    full = p + p.permute(0, 2, 1, 4, 3)
    star_unary = (unary / k).unsqueeze(1).expand(b, k, k, 2)
    return StarPotentials(star_unary, 0.5 * full)


def star_inside(star: StarPotentials, semiring: Semiring) -> Tensor:
    """Exact semiring sum over all labelings of each star tree, in O(K) per centre state.

    ``sum_s unary[c, c, s] * prod_{l != c} sum_t (unary[c, l, t] * edge[c, l, s, t])`` in
    the semiring. Scalar semirings only (:class:`~structssl.semirings.Log`,
    :class:`~structssl.semirings.Max`, :class:`~structssl.semirings.SmoothMax`).

    Args:
        star: :class:`StarPotentials` (B, K, K, 2) and (B, K, K, 2, 2).
        semiring: a scalar semiring.

    Returns:
        (B, K): one value per star (e.g. its log-partition under :class:`Log`).

    Raises:
        NotImplementedError: for semirings with a trailing dimension (:class:`KMax`).
    """
    if semiring.size:
        raise NotImplementedError(f"star_inside supports scalar semirings only; got {semiring!r}")
    unary, edge = _check_star(star)
    b, k = unary.shape[:2]
    leaf = semiring_sum(semiring, unary.unsqueeze(3) + edge, dim=4)  # (B, C, L, S): sum over leaf state t
    eye = torch.eye(k, dtype=torch.bool, device=unary.device).view(1, k, k, 1)
    leaf = torch.where(eye, torch.zeros((), dtype=leaf.dtype, device=leaf.device), leaf)
    centre = torch.diagonal(unary, dim1=1, dim2=2).transpose(1, 2)  # (B, C, S): unary[c, c, s]
    return semiring_sum(semiring, centre + leaf.sum(2), dim=2)


def star_log_partition(star: StarPotentials) -> Tensor:
    """Log-partition of each star tree: (B, K). Differentiable (its gradient gives each
    star's own marginals); the composite likelihood of seed 004 is
    ``sum_c (star_scores[:, c] - star_log_partition[:, c])``."""
    return star_inside(star, Log())


def star_argmax(star: StarPotentials) -> tuple[Tensor, Tensor]:
    """Best full labeling of each star tree (exact, O(K) per centre state), no autograd.

    Args:
        star: :class:`StarPotentials` (B, K, K, 2) and (B, K, K, 2, 2).

    Returns:
        ``(labels (B, K, K) long, values (B, K))``: ``labels[b, c]`` is star ``c``'s best
        labeling of all ``K`` labels and ``values[b, c]`` its star score.
    """
    unary, edge = _check_star(star)
    with torch.no_grad():
        return _star_argmax(unary.detach(), edge.detach())


def _star_argmax(unary: Tensor, edge: Tensor) -> tuple[Tensor, Tensor]:
    # binary states: per centre state s, the leaf's best state t by one maximum and one
    # comparison of two (B, C, L) slices (whole-tensor ops over the trailing (2, 2) states ran
    # their inner loops over 2 elements: 1.4-2.9x slower at B = 1,700, K = 6). The leaf values are
    # summed from one (B, C, L, S) tensor, as before that change: the same float sums.
    k = unary.shape[1]
    eye = torch.eye(k, dtype=torch.bool, device=unary.device).view(1, k, k)
    u0, u1 = unary.unbind(3)  # (B, C, L): leaf state 0 / 1
    leaf_vals, leaf_args = [], []
    for s in range(2):
        x0 = u0 + edge[..., s, 0]
        x1 = u1 + edge[..., s, 1]
        leaf_vals.append(torch.maximum(x0, x1).masked_fill_(eye, 0.0))  # the centre is no leaf
        leaf_args.append(x1 > x0)
    centre = torch.diagonal(unary, dim1=1, dim2=2)  # (B, S, C): unary[c, c, s]
    total = centre.transpose(1, 2) + torch.stack(leaf_vals, dim=3).sum(2)  # (B, C, S)
    state = total[..., 1] > total[..., 0]  # (B, C), ties to 0
    values = torch.maximum(total[..., 0], total[..., 1])
    labels = torch.where(state.unsqueeze(2), leaf_args[1], leaf_args[0])  # (B, C, L)
    labels = torch.where(eye, state.unsqueeze(2), labels)
    return labels.long(), values


def _onehot(labels: Tensor, dtype: torch.dtype) -> Tensor:
    """0/1 labels (...) to one-hot (..., 2) of ``dtype`` (no value check, unlike F.one_hot)."""
    y = labels.to(dtype)
    return torch.stack([1.0 - y, y], dim=-1)


def star_scores(star: StarPotentials, labels: Tensor) -> Tensor:
    """Score of ``labels`` (B, K) under each star tree: (B, K). Differentiable.

    With ``star = star_potentials(potentials)`` the row sums equal the full score.
    """
    unary, edge = _check_star(star)
    b, k = unary.shape[:2]
    if not isinstance(labels, Tensor) or tuple(labels.shape) != (b, k):
        got = tuple(labels.shape) if isinstance(labels, Tensor) else type(labels).__name__
        raise ValueError(f"labels must have shape (B, K) = ({b}, {k}); got {got}")
    y = labels.long()
    un = unary.gather(3, y.view(b, 1, k, 1).expand(b, k, k, 1)).squeeze(3).sum(2)  # (B, C)
    pair_index = (y.view(b, k, 1) * 2 + y.view(b, 1, k)).view(b, k, k, 1)  # [c, l] = 2 y_c + y_l
    ed = edge.reshape(b, k, k, 4).gather(3, pair_index).squeeze(3)  # (B, C, L)
    eye = torch.eye(k, dtype=torch.bool, device=edge.device).view(1, k, k)
    ed = torch.where(eye, torch.zeros((), dtype=ed.dtype, device=ed.device), ed)
    return un + ed.sum(2)


# ---------------------------------------------------------------------- dual decomposition
def star_dual_decomposition(
    potentials: MultiLabelPotentials,
    max_iter: int,
    step: float,
    tol: float,
    step_rule: str,
    multipliers: Optional[Tensor],
) -> DualDecompositionResult:
    """The subgradient loop of :meth:`~structssl.structures.multilabel.PairwiseMultiLabel.
    dual_decomposition_argmax` (which checks the arguments and documents them) on finite,
    detached potentials; runs without autograd."""
    unary, pairwise = potentials
    b, k = unary.shape[:2]
    star = star_potentials(potentials)
    u_flat = unary.reshape(b, 2 * k)
    pair = _pair_matrix(pairwise)
    if multipliers is None:
        nu = unary.new_zeros(b, k, k, 2)
    else:
        nu = multipliers.to(unary.dtype)
        nu = nu - nu.mean(dim=1, keepdim=True)
    best_labels = unary.new_zeros(b, k, dtype=torch.long)
    best_primal = unary.new_full((b,), float("-inf"))
    best_dual = unary.new_full((b,), float("inf"))
    converged = torch.zeros(b, dtype=torch.bool, device=unary.device)
    primal_hist, dual_hist = [], []
    iterations = 0
    gamma0: Optional[Tensor] = None
    for t in range(max_iter):
        iterations = t + 1
        labels, values = _star_argmax(star.unary + nu, star.edge)  # (B, C, K), (B, C)
        dual = values.sum(1)
        best_dual = torch.minimum(best_dual, torch.where(converged, best_dual, dual))
        # primal candidates: every star's labeling, the majority vote, the centres' states
        vote = (labels.float().mean(1) > 0.5).long().unsqueeze(1)
        centres = torch.diagonal(labels, dim1=1, dim2=2).unsqueeze(1)
        cand = torch.cat([labels, vote, centres], dim=1)  # (B, K + 2, K)
        z = _onehot(cand, unary.dtype).reshape(b, k + 2, 2 * k)
        cand_scores = _onehot_scores(z, u_flat, pair)  # (B, K + 2)
        top, arg = cand_scores.max(dim=1)
        better = (top > best_primal) & ~converged
        best_primal = torch.where(better, top, best_primal)
        best_labels = torch.where(
            better.unsqueeze(1), cand.gather(1, arg.view(b, 1, 1).expand(b, 1, k)).squeeze(1), best_labels
        )
        agree = (labels == labels[:, :1]).all(dim=2).all(dim=1)
        gap = best_dual - best_primal
        converged = converged | agree | (gap <= tol * (1.0 + best_primal.abs()))
        primal_hist.append(best_primal.clone())
        dual_hist.append(dual)
        if bool(converged.all()):
            break
        onehot = _onehot(labels, unary.dtype)  # (B, C, K, 2)
        sub = onehot - onehot.mean(dim=1, keepdim=True)
        if step_rule == "harmonic":
            gamma = torch.full_like(dual, step / (1.0 + t))
        else:
            norm = sub.pow(2).flatten(1).sum(1).clamp_min(1e-12)
            polyak = (dual - best_primal).clamp_min(0.0) / norm
            if step_rule == "polyak":
                gamma = step * polyak
            else:  # "diminishing": the first Polyak step sets the scale
                if gamma0 is None:
                    gamma0 = polyak
                gamma = step * gamma0 / (1.0 + t)
        gamma = torch.where(converged, torch.zeros_like(gamma), gamma)
        nu = nu - gamma.view(b, 1, 1, 1) * sub
    # the returned labels' exact score (candidate scores came from the same formula)
    score = _onehot_scores(
        _onehot(best_labels, unary.dtype).reshape(b, 1, 2 * k), u_flat, pair
    ).squeeze(1)
    return DualDecompositionResult(
        labels=best_labels,
        score=score,
        dual=best_dual,
        gap=best_dual - score,
        converged=converged,
        iterations=iterations,
        primal_history=torch.stack(primal_hist),
        dual_history=torch.stack(dual_hist),
        multipliers=nu,
    )
