"""Learning the similarity measure ``sim(x_j, x_k) = <w, psi(x_j, x_k)>`` (thesis chapter 8).

Four training strategies, all linear in the pairwise features ``psi`` and all returning ``w_``:

- :class:`SequentialSVM`: Optimization Problem 8.2,
  ``min 1/2 ||w||^2 + C sum_{i,j} xi_ij`` s.t. ``<w, Phi(x_i, y_i) - Phi(x_i, ybar)> + xi_ij >=
  Delta_total(y_i, ybar)`` for every message ``j`` and every ``ybar in Y_j`` (message ``j``
  moved to another cluster or to a singleton). At most ``sum_i T_i^2`` constraints; solved
  exactly on a working set with the QP machinery of the cutting-plane baselines
  (:func:`structssl.baselines.oracle.solve_primal_qp`, DAQP).
- :class:`NablaSequentialSVM` with :class:`NablaSequentialLoss`: the same constraints as a
  differentiable, unconstrained objective in the style of the nabla-SVM (thesis chapter 7):
  ``xi_ij = smax_rho over Y_j of l_{Delta, eps}(margin)``; optimised with L-BFGS.
- :class:`CompactLPSVM`: Optimization Problem 8.1 (the LP-relaxed decoder's dual folded into
  the SVM): ``min 1/2 ||w||^2 + C sum_i xi_i`` over ``w, xi, lambda_i, mu_i >= 0`` with
  ``<w, Phi(x_i, y_i)> + xi_i >= kappa_i + 1^T lambda_i + 1^T mu_i`` and
  ``S_i w - zeta_i <= A_i^T lambda_i + mu_i``. Cubic in the window size (3 C(T, 3) multipliers
  per window), so it is for small windows only (``max_window``).
- :class:`PairwiseSVM`: the PCC baseline: a linear SVM on the pairs of each window (label +1
  for same cluster, -1 otherwise), ``w`` used directly as the similarity weights. Solved by
  1-slack cutting planes (Joachims 2006) on the same QP solver.

Inputs are batched: ``features`` (B, N, N, d) pairwise features (strict lower triangle read),
``labels`` (B, N) cluster ids, ``lengths`` (B,). :func:`collate_windows` pads windows of
different sizes.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from structssl.baselines.oracle import solve_primal_qp
from structssl.clustering.decoders import triangle_constraints
from structssl.clustering.structure import SequentialClustering, pair_mask
from structssl.losses.functional import check_positive, huber_hinge, smax

__all__ = [
    "collate_windows",
    "similarities",
    "joint_features",
    "NablaSequentialLoss",
    "SequentialSVM",
    "NablaSequentialSVM",
    "CompactLPSVM",
    "PairwiseSVM",
]

_REDUCTIONS = ("mean", "sum", "none")


def collate_windows(features: Sequence[Tensor], labels: Sequence[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    """Pad windows of different sizes into one batch.

    Shape:
        features[i]: (N_i, N_i, d); labels[i]: (N_i,). Returns features (B, N, N, d),
        labels (B, N) and lengths (B,) with N = max N_i.
    """
    if len(features) == 0 or len(features) != len(labels):
        raise ValueError(
            f"features and labels must be non-empty and of equal length; got {len(features)} and {len(labels)}"
        )
    d = features[0].shape[-1]
    n = max(f.shape[0] for f in features)
    out = torch.zeros(len(features), n, n, d, dtype=features[0].dtype)
    lab = torch.zeros(len(features), n, dtype=torch.long)
    lengths = torch.zeros(len(features), dtype=torch.long)
    for i, (f, y) in enumerate(zip(features, labels)):
        if f.dim() != 3 or f.shape[0] != f.shape[1] or f.shape[2] != d:
            raise ValueError(f"features[{i}] must have shape (N, N, {d}); got {tuple(f.shape)}")
        if y.shape != (f.shape[0],):
            raise ValueError(f"labels[{i}] must have shape ({f.shape[0]},); got {tuple(y.shape)}")
        m = f.shape[0]
        out[i, :m, :m] = f
        lab[i, :m] = y
        lengths[i] = m
    return out, lab, lengths


def _check_batch(features: Tensor, labels: Tensor, lengths: Optional[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    if not isinstance(features, Tensor) or features.dim() != 4 or features.shape[1] != features.shape[2]:
        shape = tuple(features.shape) if isinstance(features, Tensor) else type(features).__name__
        raise ValueError(f"features must be a tensor of shape (B, N, N, d); got {shape}")
    structure = SequentialClustering()
    b, n = features.shape[0], features.shape[1]
    lengths = structure.check_lengths(lengths, b, n, features.device)
    labels = structure.check_labels(labels, lengths)
    return features.to(torch.float64), labels, lengths


def similarities(features: Tensor, w: Tensor) -> Tensor:
    """``sim = <w, psi>`` for every pair.

    Shape:
        features: (..., d); w: (d,). Returns features without the last dim.
    """
    if w.dim() != 1 or features.shape[-1] != w.shape[0]:
        raise ValueError(
            f"w must have shape (d,) = ({features.shape[-1]},) to match features; got {tuple(w.shape)}"
        )
    return features.to(w.dtype) @ w


def joint_features(features: Tensor, labels: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
    """The joint feature map of eq. 8.1: ``Phi(x, y) = sum_{j, k<j} [y]_jk psi(x_j, x_k)``.

    Shape:
        features: (B, N, N, d) (strict lower triangle read); labels: (B, N); lengths: (B,).
        Returns (B, d).
    """
    if not isinstance(features, Tensor) or features.dim() != 4 or features.shape[1] != features.shape[2]:
        shape = tuple(features.shape) if isinstance(features, Tensor) else type(features).__name__
        raise ValueError(f"features must be a tensor of shape (B, N, N, d); got {shape}")
    structure = SequentialClustering()
    b, n = features.shape[0], features.shape[1]
    lengths = structure.check_lengths(lengths, b, n, features.device)
    labels = structure.check_labels(labels, lengths)
    parts = structure.to_parts(labels, lengths).to(features.dtype)
    return (features * parts.unsqueeze(-1)).sum((1, 2))


# ---------------------------------------------------------------------------------- nabla loss
def _nabla_slacks(margins: Tensor, delta: Tensor, mask: Tensor, epsilon: float, rho: float) -> Tensor:
    losses = torch.where(mask, huber_hinge(margins, delta, epsilon), torch.zeros_like(margins))
    return smax(losses, rho, mask=mask, dim=2)  # (B, N)


class NablaSequentialLoss(nn.Module):
    """Differentiable OP 8.2 slack: ``sum_j smax_rho over ybar in Y_j of l_{Delta_total,eps}``.

    For every message ``j`` of a window (treated as the most recent message), the candidates
    are the target clustering with ``j`` moved to another cluster or to a singleton
    (:meth:`~structssl.clustering.structure.SequentialClustering.reassignments`), the margin is
    ``s(y) - s(ybar)`` and the per-candidate loss the Huber hinge of the thesis's chapter 7
    with ``Delta = Delta_total``. As ``epsilon -> 0`` and ``rho -> inf`` the slack of message
    ``j`` tends to OP 8.2's ``xi_ij``.

    Args:
        epsilon: Huber half width, > 0.
        rho: smax sharpness, > 0.
        reduction: ``"mean"``, ``"sum"`` or ``"none"`` over windows (each window's value is
            the sum over its messages).
    """

    def __init__(self, epsilon: float = 0.1, rho: float = 10.0, reduction: str = "mean") -> None:
        super().__init__()
        self.epsilon = check_positive(epsilon, "epsilon")
        self.rho = check_positive(rho, "rho")
        if reduction not in _REDUCTIONS:
            raise ValueError(f"reduction must be one of {_REDUCTIONS}; got {reduction!r}")
        self.reduction = reduction

    def extra_repr(self) -> str:
        return f"epsilon={self.epsilon}, rho={self.rho}, reduction={self.reduction!r}"

    def forward(
        self,
        structure: SequentialClustering,
        potentials: Tensor,
        target: Tensor,
        lengths: Optional[Tensor] = None,
    ) -> Tensor:
        """The loss of each window, reduced over the batch.

        Args:
            structure: a :class:`SequentialClustering`.
            potentials: similarities (B, N, N).
            target: true clusterings (B, N).
            lengths: (B,) window sizes.

        Shape:
            Returns a scalar, or (B,) with ``reduction="none"``.
        """
        if not isinstance(structure, SequentialClustering):
            raise TypeError(f"structure must be a SequentialClustering; got {type(structure).__name__}")
        potentials, lengths = structure.check(potentials, lengths)
        r = structure.reassignments(potentials, target, lengths)
        xi = _nabla_slacks(r.margins, r.delta.to(potentials.dtype), r.mask, self.epsilon, self.rho).sum(1)
        if self.reduction == "mean":
            return xi.mean()
        if self.reduction == "sum":
            return xi.sum()
        return xi


class _Trainer:
    """Shared: ``w_`` and the similarity matrix of new windows."""

    w_: Tensor

    def similarities(self, features: Tensor) -> Tensor:
        """``<w_, psi>`` of every pair. Shape: features (..., d) -> (...)."""
        if not hasattr(self, "w_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit first")
        return similarities(features, self.w_)


def _positive(value: float, name: str) -> float:
    return check_positive(value, name)


class NablaSequentialSVM(_Trainer):
    """``min_w 1/2 ||w||^2 + C sum_i NablaSequentialLoss_i`` by L-BFGS (strong Wolfe).

    Args:
        C: loss weight, > 0 (OP 8.2's scaling).
        epsilon, rho: of :class:`NablaSequentialLoss`.
        max_iter: L-BFGS iterations.
    """

    def __init__(self, C: float = 1.0, epsilon: float = 0.1, rho: float = 10.0, max_iter: int = 200) -> None:
        self.C = _positive(C, "C")
        self.loss = NablaSequentialLoss(epsilon, rho, "sum")
        if not isinstance(max_iter, int) or max_iter < 1:
            raise ValueError(f"max_iter must be an int >= 1; got {max_iter!r}")
        self.max_iter = max_iter

    def fit(self, features: Tensor, labels: Tensor, lengths: Optional[Tensor] = None) -> "NablaSequentialSVM":
        """Train on windows. Shape: features (B, N, N, d); labels (B, N); lengths (B,)."""
        features, labels, lengths = _check_batch(features, labels, lengths)
        r = SequentialClustering().reassignments(features, labels, lengths)  # margins (B,N,N+1,d)
        a, delta, mask = r.margins, r.delta, r.mask
        w = torch.zeros(features.shape[-1], dtype=torch.float64, requires_grad=True)
        opt = torch.optim.LBFGS([w], lr=1, max_iter=self.max_iter, line_search_fn="strong_wolfe",
                                tolerance_grad=1e-9, tolerance_change=1e-12)

        def closure() -> Tensor:
            opt.zero_grad()
            xi = _nabla_slacks(a @ w, delta, mask, self.loss.epsilon, self.loss.rho)
            obj = 0.5 * (w * w).sum() + self.C * xi.sum()
            obj.backward()
            return obj

        opt.step(closure)
        self.w_ = w.detach().clone()
        self.objective_ = float(closure().detach())
        return self


class SequentialSVM(_Trainer):
    """Optimization Problem 8.2 solved exactly on a working set (see the module docstring).

    Every pass finds, for every message of every window, the most violated alternative; those
    violated by more than ``epsilon`` beyond their current slack join the working set and the
    primal QP over the working set is re-solved. Stops when no constraint is violated by more
    than ``epsilon`` (then the solution is within ``C * sum_i T_i * epsilon`` of OP 8.2's
    optimum).

    Args:
        C: loss weight, > 0.
        epsilon: violation tolerance, > 0.
        max_iter: maximum number of QPs.
        solver: ``"daqp"`` or ``"quadprog"``.
    """

    def __init__(self, C: float = 1.0, epsilon: float = 1e-3, max_iter: int = 100, solver: str = "daqp") -> None:
        self.C = _positive(C, "C")
        self.epsilon = _positive(epsilon, "epsilon")
        if not isinstance(max_iter, int) or max_iter < 1:
            raise ValueError(f"max_iter must be an int >= 1; got {max_iter!r}")
        if solver not in ("daqp", "quadprog"):
            raise ValueError(f"solver must be 'daqp' or 'quadprog'; got {solver!r}")
        self.max_iter = max_iter
        self.solver = solver

    def fit(self, features: Tensor, labels: Tensor, lengths: Optional[Tensor] = None) -> "SequentialSVM":
        """Train on windows. Shape: features (B, N, N, d); labels (B, N); lengths (B,)."""
        features, labels, lengths = _check_batch(features, labels, lengths)
        r = SequentialClustering().reassignments(features, labels, lengths)
        b, n, c, d = r.margins.shape
        a = r.margins.reshape(b * n, c, d).numpy()
        delta = r.delta.reshape(b * n, c).numpy()
        mask = r.mask.reshape(b * n, c).numpy()
        groups_all = np.arange(b * n)
        caps = np.full(b * n, self.C)
        w = np.zeros(d)
        vecs = np.zeros((0, d))
        offsets = np.zeros(0)
        groups = np.zeros(0, dtype=np.int64)
        seen: set[tuple[int, int]] = set()
        self.converged_ = False
        self.history_: list[dict[str, float]] = []
        for it in range(self.max_iter):
            viol = np.where(mask, delta - a @ w, -np.inf)  # (G, C)
            best = viol.argmax(1)
            worst = viol[groups_all, best]
            slack = np.zeros(b * n)
            if len(offsets):
                np.maximum.at(slack, groups, offsets - vecs @ w)
            add = np.flatnonzero(worst > slack + self.epsilon)
            add = np.array([g for g in add if (g, best[g]) not in seen], dtype=np.int64)
            primal = 0.5 * float(w @ w) + self.C * float(np.clip(worst, 0, None)[np.isfinite(worst)].sum())
            self.history_.append({"iteration": it, "primal": primal, "num_constraints": len(offsets),
                                  "added": len(add)})
            if len(add) == 0:
                self.converged_ = True
                break
            seen.update((int(g), int(best[g])) for g in add)
            vecs = np.concatenate([vecs, a[add, best[add]]])
            offsets = np.concatenate([offsets, delta[add, best[add]]])
            groups = np.concatenate([groups, add])
            alpha = solve_primal_qp(vecs, offsets, groups, caps, self.solver)
            w = vecs.T @ alpha
        self.w_ = torch.from_numpy(w)
        self.alpha_ = alpha if len(offsets) else np.zeros(0)
        return self


class CompactLPSVM(_Trainer):
    """Optimization Problem 8.1 (LP-SVM, "compact") as one QP (see the module docstring).

    Variables ``[w, xi, lambda_1, mu_1, ..., lambda_n, mu_n]``; the Hessian is the identity on
    ``w`` and zero on the rest (positive semidefinite). DAQP solves it exactly through its
    proximal-point iterations (``eps_prox``); quadprog needs a positive definite Hessian and
    gets ``ridge`` on the non-``w`` variables (perturbing the objective by at most
    ``ridge/2 * ||(xi, lambda, mu)||^2``).

    Args:
        C: loss weight, > 0.
        max_window: refuse windows longer than this (the QP has 3 C(T, 3) + C(T, 2)
            variables per window).
        ridge: quadprog only, > 0 (see above).
        solver: ``"daqp"`` (default) or ``"quadprog"``.
        eps_prox: DAQP's proximal-point weight, > 0.
        eps_prox_fallbacks: DAQP only: larger proximal weights tried in turn when DAQP reports
            no solution at ``eps_prox`` (it does on some problems at 1e-2); empty: no retry.

    Attributes (after ``fit``): ``w_``, ``xi_``, ``num_variables_``, ``eps_prox_failed_`` (the
    proximal weights at which DAQP found no solution before one succeeded).
    """

    def __init__(
        self, C: float = 1.0, max_window: int = 16, ridge: float = 1e-8, solver: str = "daqp",
        eps_prox: float = 1e-2, eps_prox_fallbacks: Sequence[float] = (),
    ) -> None:
        self.eps_prox = _positive(eps_prox, "eps_prox")
        self.eps_prox_fallbacks = tuple(_positive(e, "eps_prox_fallbacks") for e in eps_prox_fallbacks)
        self.C = _positive(C, "C")
        if not isinstance(max_window, int) or max_window < 2:
            raise ValueError(f"max_window must be an int >= 2; got {max_window!r}")
        self.max_window = max_window
        self.ridge = _positive(ridge, "ridge")
        if solver not in ("daqp", "quadprog"):
            raise ValueError(f"solver must be 'daqp' or 'quadprog'; got {solver!r}")
        self.solver = solver

    def fit(self, features: Tensor, labels: Tensor, lengths: Optional[Tensor] = None) -> "CompactLPSVM":
        """Train on windows. Shape: features (B, N, N, d); labels (B, N); lengths (B,).

        Raises:
            ValueError: if a window is longer than ``max_window``.
        """
        from qpsolvers import Problem, solve_problem

        features, labels, lengths = _check_batch(features, labels, lengths)
        if int(lengths.max()) > self.max_window:
            raise ValueError(
                f"CompactLPSVM needs windows of at most max_window = {self.max_window} messages "
                f"(cubic QP); got a window of {int(lengths.max())}"
            )
        structure = SequentialClustering()
        cost, offset = structure.delta_total_terms(labels, lengths, torch.float64)
        parts = structure.to_parts(labels, lengths).to(torch.float64)
        phi = (features * parts.unsqueeze(-1)).sum((1, 2)).numpy()  # (B, d)
        b, d = features.shape[0], features.shape[-1]
        blocks = []
        start = d + b
        for i, t in enumerate(lengths.tolist()):
            rows, cols, tri = triangle_constraints(t)
            blocks.append((rows, cols, tri, start))
            start += tri.shape[0] + len(rows)
        nv = start
        g_rows: list[np.ndarray] = []
        h: list[float] = []
        for i, (rows, cols, tri, s0) in enumerate(blocks):
            nl, npair = tri.shape[0], len(rows)
            # <w, Phi_i> + xi_i >= kappa_i + 1'lambda + 1'mu
            g = np.zeros((1 + npair, nv))
            g[0, :d] = -phi[i]
            g[0, d + i] = -1.0
            g[0, s0 : s0 + nl + npair] = 1.0
            h.append(-float(offset[i]))
            # S w - zeta <= A' lambda + mu,  zeta = -cost
            g[1:, :d] = features[i, rows, cols].numpy()
            g[1:, s0 : s0 + nl] = -tri.T.toarray()
            g[1 + np.arange(npair), s0 + nl + np.arange(npair)] = -1.0
            h.extend((-cost[i, rows, cols].to(torch.float64)).tolist())
            g_rows.append(g)
        p = np.eye(nv) * (self.ridge if self.solver == "quadprog" else 0.0)
        p[np.arange(d), np.arange(d)] = 1.0
        q = np.zeros(nv)
        q[d : d + b] = self.C
        lb = np.zeros(nv)
        lb[:d] = -np.inf
        problem = Problem(p, q, np.concatenate(g_rows), np.asarray(h), lb=lb)
        tries = (self.eps_prox, *self.eps_prox_fallbacks) if self.solver == "daqp" else (None,)
        self.eps_prox_failed_: list[float] = []
        for eps_prox in tries:
            settings = {} if eps_prox is None else {"eps_prox": eps_prox}
            sol = solve_problem(problem, solver=self.solver, **settings)
            if sol.found and sol.x is not None:
                break
            if eps_prox is not None:
                self.eps_prox_failed_.append(eps_prox)
        else:
            tried = f" with eps_prox in {list(tries)}" if self.solver == "daqp" else ""
            raise RuntimeError(
                f"the QP solver {self.solver!r} found no solution for OP 8.1 ({nv} variables){tried}"
            )
        self.w_ = torch.from_numpy(np.asarray(sol.x[:d]))
        self.xi_ = torch.from_numpy(np.asarray(sol.x[d : d + b]))
        self.num_variables_ = nv
        return self


class PairwiseSVM(_Trainer):
    """Pairwise classifier baseline (PCC): a linear SVM without bias on window pairs.

    ``min_w 1/2 ||w||^2 + C sum_p max(0, 1 - y_p <w, psi_p>)`` with ``y_p = +1`` for pairs in
    the same cluster, -1 otherwise, solved by 1-slack cutting planes (Joachims 2006) to a
    violation tolerance ``epsilon`` per pair. A constant feature in ``psi`` plays the bias.

    Args:
        C: loss weight per pair, > 0.
        epsilon: tolerance, > 0.
        max_iter: maximum number of QPs.
    """

    def __init__(self, C: float = 1.0, epsilon: float = 1e-3, max_iter: int = 500, solver: str = "daqp") -> None:
        self.C = _positive(C, "C")
        self.epsilon = _positive(epsilon, "epsilon")
        if not isinstance(max_iter, int) or max_iter < 1:
            raise ValueError(f"max_iter must be an int >= 1; got {max_iter!r}")
        if solver not in ("daqp", "quadprog"):
            raise ValueError(f"solver must be 'daqp' or 'quadprog'; got {solver!r}")
        self.max_iter = max_iter
        self.solver = solver

    def fit(self, features: Tensor, labels: Tensor, lengths: Optional[Tensor] = None) -> "PairwiseSVM":
        """Train on all pairs of the windows. Shape: features (B, N, N, d); labels (B, N)."""
        features, labels, lengths = _check_batch(features, labels, lengths)
        n = features.shape[1]
        pm = pair_mask(lengths, n)
        same = (labels.unsqueeze(2) == labels.unsqueeze(1))[pm]
        x = features[pm].numpy()  # (P, d)
        y = np.where(same.numpy(), 1.0, -1.0)
        yx = x * y[:, None]
        m = len(y)
        w = np.zeros(x.shape[1])
        vecs = np.zeros((0, x.shape[1]))
        offsets = np.zeros(0)
        caps = np.array([self.C * m])
        self.converged_ = False
        for _ in range(self.max_iter):
            active = (yx @ w) < 1
            b_new = active.mean()
            a_new = yx[active].sum(0) / m
            xi = max(0.0, float((offsets - vecs @ w).max())) if len(offsets) else 0.0
            if b_new - a_new @ w <= xi + self.epsilon:
                self.converged_ = True
                break
            vecs = np.vstack([vecs, a_new])
            offsets = np.append(offsets, b_new)
            alpha = solve_primal_qp(vecs, offsets, np.zeros(len(offsets), dtype=np.int64), caps, self.solver)
            w = vecs.T @ alpha
        self.w_ = torch.from_numpy(w)
        return self
