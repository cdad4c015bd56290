"""Solvers of the coRLSR problem: the thesis's block system (:func:`solve_block`), the
two-view closed form (:func:`solve_two_view`), the reduced system of exact mode
(:func:`solve_reduced`) and block coordinate descent, Algorithm 4.1
(:func:`block_coordinate_descent`, per-view update :class:`ViewUpdate`). See
:mod:`structssl.regression.corlsr` for when each applies."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from structssl.regression.problem import (
    CoRLSRProblem,
    Mode,
    _check_mode,
    _nonneg_float,
    _positive_int,
)

__all__ = [
    "solve_block",
    "solve_reduced",
    "solve_two_view",
    "ViewUpdate",
    "BCDResult",
    "converged_change",
    "block_coordinate_descent",
]


def solve_block(problem: CoRLSRProblem) -> list[Tensor]:
    """Solve the thesis's block system ``A alpha = b`` (Props. 4.1 / 4.2) by one LU solve."""
    a, b = problem.block_system()
    return problem.split(torch.linalg.solve(a, b))


def solve_reduced(problem: CoRLSRProblem) -> list[Tensor]:
    """Solve exact coRLSR through the reduced system ``A' alpha = b'`` (module docstring).

    Raises:
        ValueError: if ``problem.mode`` is not ``"exact"``.
    """
    a, b = problem.reduced_system()
    return problem.split(torch.linalg.solve(a, b))


def solve_two_view(problem: CoRLSRProblem) -> list[Tensor]:
    """The two-view closed form (partitioned inverse), both modes::

        alpha_1 = (G_1 - 4 lam^2 U_1^T U_2 G_2^-1 U_2^T U_1)^-1 (b_1 + 2 lam U_1^T U_2 G_2^-1 b_2)

    and correspondingly ``alpha_2``.

    Raises:
        ValueError: if the problem does not have exactly 2 views.
    """
    if problem.num_views != 2:
        raise ValueError(
            f"solve_two_view needs exactly 2 views; got {problem.num_views} (use solve_block)"
        )
    lam = problem.lam
    grams = [problem.gram(0), problem.gram(1)]
    rhs = [problem.rhs(0), problem.rhs(1)]
    out = []
    for v, u in ((0, 1), (1, 0)):
        cross = problem.unlabeled[v].T @ problem.unlabeled[u]  # U_v^T U_u, (p_v, p_u)
        solved = torch.linalg.solve(grams[u], torch.cat([cross.T, rhs[u][:, None]], dim=1))
        g_inv_cross, g_inv_b = solved[:, :-1], solved[:, -1]
        schur = grams[v] - 4.0 * lam**2 * (cross @ g_inv_cross)
        out.append(torch.linalg.solve(schur, rhs[v] + 2.0 * lam * (cross @ g_inv_b)))
    return out


class ViewUpdate:
    """The block update of view ``v`` in Algorithm 4.1: ``alpha_v = G_v^-1 [L_v^T y_v +
    2 lam U_v^T s]`` with ``s = sum_{u != v} yhat_u`` the peers' predictions on the unlabeled
    data. The matrix is factorised once (LU); each call is one triangular solve.

    Exact mode solves the equivalent reduced update ``([L_v; 2 lam (V-1) U_v] + eta_v I)
    alpha_v = [y_v; 2 lam s]`` (module docstring), semi-parametric mode the update as printed.

    Args:
        labeled, unlabeled, regularizer, targets, eta: view ``v``'s entries of a
            :class:`CoRLSRProblem`.
        lam: the co-regularization weight.
        num_views: V.
        mode: ``"exact"`` or ``"semiparametric"``.

    Shape:
        labeled (n_v, p_v); unlabeled (m, p_v); regularizer (p_v, p_v); targets (n_v,).
    """

    def __init__(
        self,
        labeled: Tensor,
        unlabeled: Tensor,
        regularizer: Tensor,
        targets: Tensor,
        eta: float,
        lam: float,
        num_views: int,
        mode: Mode,
    ) -> None:
        _check_mode(mode)
        self.mode, self.lam = mode, float(lam)
        self.unlabeled = unlabeled
        scale = 2.0 * self.lam * (num_views - 1)
        p = labeled.shape[1]
        if mode == "exact":
            eye = torch.eye(p, dtype=labeled.dtype, device=labeled.device)
            matrix = torch.cat([labeled, scale * unlabeled]) + eta * eye
            self._base = torch.cat([targets, targets.new_zeros(unlabeled.shape[0])])
        else:
            matrix = labeled.T @ labeled + eta * regularizer + scale * (unlabeled.T @ unlabeled)
            self._base = labeled.T @ targets
        self._lu, self._pivots = torch.linalg.lu_factor(matrix)

    def __call__(self, others: Tensor) -> Tensor:
        """``alpha_v`` given ``others = sum_{u != v} yhat_u``. Shape: others (m,) -> (p_v,)."""
        if self.mode == "exact":
            n = self._base.shape[0] - others.shape[0]
            rhs = self._base + torch.cat([others.new_zeros(n), 2.0 * self.lam * others])
        else:
            rhs = self._base + 2.0 * self.lam * (self.unlabeled.T @ others)
        return torch.linalg.lu_solve(self._lu, self._pivots, rhs[:, None])[:, 0]

    def predict_unlabeled(self, alpha: Tensor) -> Tensor:
        """``yhat_v = U_v alpha_v``. Shape: (p_v,) -> (m,)."""
        return self.unlabeled @ alpha


@dataclass(frozen=True)
class BCDResult:
    """Result of :func:`block_coordinate_descent`.

    Attributes:
        alphas: per view ``alpha_v`` (p_v,).
        predictions: (V, m) the views' predictions ``U_v alpha_v`` on the unlabeled data.
        num_iterations: sweeps over the views that were run.
        converged: whether the stopping rule was met within ``max_iter`` sweeps.
    """

    alphas: list[Tensor]
    predictions: Tensor
    num_iterations: int
    converged: bool


def converged_change(new: Tensor, old: Tensor, tol: float) -> bool:
    """The stopping rule of Algorithm 4.1 used here: ``max |yhat_new - yhat_old| <= tol *
    max(1, max |yhat_new|)`` over all views and unlabeled points (every site can evaluate it,
    since every site holds all predictions)."""
    if new.numel() == 0:
        return True
    change = float((new - old).abs().max())
    return change <= tol * max(1.0, float(new.abs().max()))


def block_coordinate_descent(
    problem: CoRLSRProblem, tol: float = 1e-10, max_iter: int = 1000
) -> BCDResult:
    """Algorithm 4.1 (Table 4.1) on one machine: start from ``yhat_u = 0``, then sweep the
    views in order, each solving its block given the peers' current predictions, until the
    predictions change by at most ``tol`` (relative, :func:`converged_change`).

    Args:
        problem: the coRLSR problem.
        tol: the relative tolerance on the change of the unlabeled predictions per sweep.
        max_iter: the most sweeps.
    """
    _nonneg_float(tol, "tol")
    _positive_int(max_iter, "max_iter")
    num, m = problem.num_views, problem.num_unlabeled
    updates = [
        ViewUpdate(
            problem.labeled[v], problem.unlabeled[v], problem.regularizer[v],
            problem.targets[v], problem.etas[v], problem.lam, num, problem.mode,
        )
        for v in range(num)
    ]
    ref = problem.targets[0]
    preds = ref.new_zeros(num, m)
    alphas: list[Tensor] = [ref.new_zeros(p) for p in problem.sizes]
    converged = False
    it = 0
    for it in range(1, max_iter + 1):
        old = preds.clone()
        for v in range(num):
            others = preds.sum(0) - preds[v]
            alphas[v] = updates[v](others)
            preds[v] = updates[v].predict_unlabeled(alphas[v])
        if converged_change(preds, old, tol):
            converged = True
            break
    return BCDResult(alphas, preds, it, converged)
