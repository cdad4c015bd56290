"""Co-regularized least squares regression, coRLSR (thesis, seed 001, chapter 4).

V views; view ``v`` has its own labeled points ``L_v`` (the labeled sets may differ between
views) and all views share ``m`` unlabeled points. The objective (4.2) over ``f_v`` in the RKHS
of kernel ``k_v`` is::

    Q(f) = sum_v [ sum_{x in L_v} (y(x) - f_v(x))^2 + eta_v ||f_v||^2 ]
           + lam sum_{u,v=1}^V sum_{x in U} (f_u(x) - f_v(x))^2            (ordered pairs)

and the model predicts the average ``f = 1/V sum_v f_v``.

* **Exact (non-parametric) coRLSR, OP 4.1.** ``f_v`` expands over the labeled *and* the
  unlabeled points: ``alpha_v`` has ``n_v + m`` entries, ``L_v`` (n_v, n_v + m) and ``U_v``
  (m, n_v + m) are the labeled and unlabeled rows of the kernel matrix ``K_v`` and the
  regularizer is ``alpha_v^T K_v alpha_v``. O(V^3 (n + m)^3).
* **Semi-parametric coRLSR, OP 4.2.** ``f_v`` expands over the labeled points only: ``L_v``
  is the (n_v, n_v) labeled kernel matrix, ``U_v`` the (m, n_v) unlabeled-labeled one and the
  regularizer is ``alpha_v^T L_v alpha_v``. O(V^3 n^3 + V^2 n^2 m): linear in ``m``.

Both share one form (:class:`CoRLSRProblem`, with ``R_v`` the regularizer matrix):
``G_v = L_v^T L_v + eta_v R_v + 2 lam (V - 1) U_v^T U_v``, the gradient
``2 G_v alpha_v - 2 L_v^T y_v - 4 lam sum_{u != v} U_v^T U_u alpha_u`` and the block system
``A alpha = b`` with ``A_vv = G_v``, ``A_vu = -2 lam U_v^T U_u``, ``b_v = L_v^T y_v``
(Propositions 4.1, 4.2), solved by

* :func:`solve_block`: the thesis's block system as printed;
* :func:`solve_two_view`: the two-view closed form (partitioned inverse);
* :func:`solve_reduced`: exact mode only. Since ``L_v``, ``U_v`` are rows of ``K_v``,
  ``G_v = K_v (D_v K_v + eta_v I)`` and ``U_v^T U_u = K_v S_v^T U_u`` (``D_v`` = diag(1 on
  labeled, ``2 lam (V-1)`` on unlabeled), ``S_v`` selects the unlabeled rows), so
  ``A = blockdiag(K_v) A'`` with the *reduced* system
  ``A'_vv = [L_v; 2 lam (V-1) U_v] + eta_v I``, ``A'_vu = [0; -2 lam U_u]``,
  ``b'_v = [y_v; 0]``. Every solution of ``A' alpha = b'`` solves ``A alpha = b``, and ``A'``
  has the conditioning of ``K + eta I`` where ``A`` has that of ``K^2``: Gaussian kernel
  matrices with the thesis's bandwidth are numerically singular already at a few hundred
  points, so this is the default for exact mode;
* :func:`block_coordinate_descent`: Algorithm 4.1 (Table 4.1) on one machine; the
  multi-process version that exchanges only predictions on the unlabeled data is
  :mod:`structssl.regression.distributed`. Its per-view update is :class:`ViewUpdate`.

RLSR (kernel ridge regression, appendix A) is the special case ``V = 1`` or ``m = 0``
(:class:`RLSR`). The user-facing estimator is :class:`CoRLSR`. Everything is plain torch:
float64 by default, on the device of the inputs.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Literal, Optional, Sequence, Union

import torch
from torch import Tensor

from structssl.regression.kernels import GaussianKernel, Kernel, check_finite, check_matrix, eta_heuristic

__all__ = [
    "BCDResult",
    "CoRLSR",
    "CoRLSRProblem",
    "RLSR",
    "ViewUpdate",
    "block_coordinate_descent",
    "build_problem",
    "make_multiview_regression",
    "random_views",
    "scaled_rmse",
    "solve_block",
    "solve_reduced",
    "solve_two_view",
]

Mode = Literal["exact", "semiparametric"]
Solver = Literal["direct", "block", "two_view", "bcd"]
MODES = ("exact", "semiparametric")
SOLVERS = ("direct", "block", "two_view", "bcd")


# ----------------------------------------------------------------------------- validation
def _check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"mode must be 'exact' or 'semiparametric'; got {mode!r}")
    return mode


def _nonneg_float(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a float; got {type(value).__name__}")
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite float >= 0; got {value!r}")
    return float(value)


def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1; got {value!r}")
    return value


def _check_vector(y: object, name: str, length: int) -> Tensor:
    if not isinstance(y, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(y).__name__}")
    if y.dim() != 1 or y.shape[0] != length:
        raise ValueError(f"{name} must have shape ({length},); got {tuple(y.shape)}")
    if y.dtype.is_complex or y.dtype == torch.bool:
        raise TypeError(f"{name} must be real-valued; got {y.dtype}")
    return y


# ----------------------------------------------------------------------------- the problem
@dataclass(frozen=True)
class CoRLSRProblem:
    """The matrices of OP 4.1 (``mode="exact"``) or OP 4.2 (``mode="semiparametric"``).

    Attributes:
        labeled: per view ``L_v``, the kernel rows of the labeled points.
        unlabeled: per view ``U_v``, the kernel rows of the shared unlabeled points.
        regularizer: per view ``R_v``: ``K_v = [L_v; U_v]`` (exact) or ``L_v`` (semi).
        targets: per view ``y_v``.
        etas: per view ``eta_v >= 0``.
        lam: the co-regularization weight ``lam >= 0``.
        mode: ``"exact"`` or ``"semiparametric"``.

    Shape:
        with ``p_v = n_v + m`` (exact) or ``p_v = n_v`` (semi): labeled[v] (n_v, p_v),
        unlabeled[v] (m, p_v), regularizer[v] (p_v, p_v), targets[v] (n_v,).
    """

    labeled: tuple[Tensor, ...]
    unlabeled: tuple[Tensor, ...]
    regularizer: tuple[Tensor, ...]
    targets: tuple[Tensor, ...]
    etas: tuple[float, ...]
    lam: float
    mode: str

    def __post_init__(self) -> None:
        _check_mode(self.mode)
        _nonneg_float(self.lam, "lam")
        num = len(self.labeled)
        if num < 1:
            raise ValueError("a CoRLSRProblem needs at least one view; got 0")
        for name in ("unlabeled", "regularizer", "targets", "etas"):
            if len(getattr(self, name)) != num:
                raise ValueError(
                    f"{name} must have one entry per view ({num}); got {len(getattr(self, name))}"
                )
        m = self.unlabeled[0].shape[0]
        for v in range(num):
            lab, unl, reg, y = self.labeled[v], self.unlabeled[v], self.regularizer[v], self.targets[v]
            _nonneg_float(self.etas[v], f"etas[{v}]")
            n = y.shape[0]
            p = n + m if self.mode == "exact" else n
            expected = {"labeled": (n, p), "unlabeled": (m, p), "regularizer": (p, p)}
            for name, mat in (("labeled", lab), ("unlabeled", unl), ("regularizer", reg)):
                if tuple(mat.shape) != expected[name]:
                    raise ValueError(
                        f"{name}[{v}] must have shape {expected[name]} in {self.mode} mode with "
                        f"n_v={n}, m={m}; got {tuple(mat.shape)}"
                    )

    @property
    def num_views(self) -> int:
        return len(self.labeled)

    @property
    def num_unlabeled(self) -> int:
        return self.unlabeled[0].shape[0]

    @property
    def sizes(self) -> list[int]:
        """The lengths ``p_v`` of the coefficient vectors ``alpha_v``."""
        return [lab.shape[1] for lab in self.labeled]

    def gram(self, v: int) -> Tensor:
        """``G_v = L_v^T L_v + eta_v R_v + 2 lam (V - 1) U_v^T U_v``. Shape: (p_v, p_v)."""
        lab, unl = self.labeled[v], self.unlabeled[v]
        scale = 2.0 * self.lam * (self.num_views - 1)
        return lab.T @ lab + self.etas[v] * self.regularizer[v] + scale * (unl.T @ unl)

    def rhs(self, v: int) -> Tensor:
        """``b_v = L_v^T y_v``. Shape: (p_v,)."""
        return self.labeled[v].T @ self.targets[v]

    def block_system(self) -> tuple[Tensor, Tensor]:
        """The block system ``A alpha = b`` of Propositions 4.1 / 4.2.

        Shape:
            returns A (P, P) and b (P,) with ``P = sum_v p_v``.
        """
        num = self.num_views
        rows = []
        for v in range(num):
            row = []
            for u in range(num):
                if u == v:
                    row.append(self.gram(v))
                else:
                    row.append(-2.0 * self.lam * (self.unlabeled[v].T @ self.unlabeled[u]))
            rows.append(torch.cat(row, dim=1))
        return torch.cat(rows, dim=0), torch.cat([self.rhs(v) for v in range(num)])

    def reduced_system(self) -> tuple[Tensor, Tensor]:
        """The reduced exact-mode system ``A' alpha = b'`` (module docstring); ``A = blockdiag(K_v) A'``.

        Shape:
            returns A' (P, P) and b' (P,).
        """
        if self.mode != "exact":
            raise ValueError(f"reduced_system needs mode='exact'; got mode={self.mode!r}")
        num, m = self.num_views, self.num_unlabeled
        scale = 2.0 * self.lam * (num - 1)
        rows, rhs = [], []
        for v in range(num):
            lab, unl = self.labeled[v], self.unlabeled[v]
            n, p = lab.shape
            row = []
            for u in range(num):
                if u == v:
                    eye = torch.eye(p, dtype=lab.dtype, device=lab.device)
                    row.append(torch.cat([lab, scale * unl]) + self.etas[v] * eye)
                else:
                    other = self.unlabeled[u]
                    zeros = other.new_zeros(n, other.shape[1])
                    row.append(torch.cat([zeros, -2.0 * self.lam * other]))
            rows.append(torch.cat(row, dim=1))
            rhs.append(torch.cat([self.targets[v], self.targets[v].new_zeros(m)]))
        return torch.cat(rows, dim=0), torch.cat(rhs)

    def split(self, vector: Tensor) -> list[Tensor]:
        """Split a stacked (P,) coefficient vector into the per-view ``alpha_v``."""
        return list(torch.split(vector, self.sizes))

    def _check_alphas(self, alphas: Sequence[Tensor]) -> None:
        if len(alphas) != self.num_views:
            raise ValueError(f"alphas must have {self.num_views} entries; got {len(alphas)}")
        for v, (a, p) in enumerate(zip(alphas, self.sizes)):
            if tuple(a.shape) != (p,):
                raise ValueError(f"alphas[{v}] must have shape ({p},); got {tuple(a.shape)}")

    def objective(self, alphas: Sequence[Tensor]) -> Tensor:
        """``Q(alpha)`` of OP 4.1 / 4.2 (disagreement summed over ordered view pairs).

        Shape:
            alphas[v]: (p_v,); returns a scalar.
        """
        self._check_alphas(alphas)
        total = alphas[0].new_zeros(())
        preds = []
        for v, a in enumerate(alphas):
            resid = self.targets[v] - self.labeled[v] @ a
            total = total + resid @ resid + self.etas[v] * (a @ (self.regularizer[v] @ a))
            preds.append(self.unlabeled[v] @ a)
        for u in range(self.num_views):
            for v in range(self.num_views):
                if u != v:
                    diff = preds[u] - preds[v]
                    total = total + self.lam * (diff @ diff)
        return total

    def gradient(self, alphas: Sequence[Tensor]) -> list[Tensor]:
        """The thesis's gradient ``2 G_v alpha_v - 2 L_v^T y_v - 4 lam sum_{u != v} U_v^T U_u alpha_u``.

        Shape:
            alphas[v]: (p_v,); returns a list of (p_v,).
        """
        self._check_alphas(alphas)
        preds = [self.unlabeled[u] @ a for u, a in enumerate(alphas)]
        total = torch.stack(preds).sum(0)
        out = []
        for v, a in enumerate(alphas):
            others = total - preds[v]
            out.append(
                2.0 * (self.gram(v) @ a)
                - 2.0 * self.rhs(v)
                - 4.0 * self.lam * (self.unlabeled[v].T @ others)
            )
        return out


def build_problem(
    kernels: Sequence[Kernel],
    labeled_inputs: Sequence[Tensor],
    targets: Sequence[Tensor],
    unlabeled_inputs: Sequence[Tensor],
    etas: Sequence[float],
    lam: float,
    mode: Mode,
) -> tuple[CoRLSRProblem, list[Tensor]]:
    """The matrices of OP 4.1 / 4.2 from per-view data and (fitted) kernels.

    Args:
        kernels: per view a kernel with its hyperparameters resolved.
        labeled_inputs: per view the labeled points in that view's features.
        targets: per view their labels.
        unlabeled_inputs: per view the shared unlabeled points in that view's features.
        etas: per view ``eta_v``.
        lam: the co-regularization weight.
        mode: ``"exact"`` or ``"semiparametric"``.

    Returns:
        the problem and, per view, the expansion points of ``f_v`` (labeled then unlabeled
        points in exact mode; the labeled points in semi-parametric mode).

    Shape:
        labeled_inputs[v]: (n_v, d_v); targets[v]: (n_v,); unlabeled_inputs[v]: (m, d_v).
    """
    _check_mode(mode)
    labeled, unlabeled, regularizer, points = [], [], [], []
    for kernel, xl, xu in zip(kernels, labeled_inputs, unlabeled_inputs):
        n = xl.shape[0]
        if mode == "exact":
            z = torch.cat([xl, xu])
            gram = kernel(z, z)
            gram = 0.5 * (gram + gram.T)
            labeled.append(gram[:n])
            unlabeled.append(gram[n:])
            regularizer.append(gram)
            points.append(z)
        else:
            gram = kernel(xl, xl)
            gram = 0.5 * (gram + gram.T)
            labeled.append(gram)
            unlabeled.append(kernel(xu, xl))
            regularizer.append(gram)
            points.append(xl)
    problem = CoRLSRProblem(
        tuple(labeled), tuple(unlabeled), tuple(regularizer), tuple(targets),
        tuple(float(e) for e in etas), float(lam), mode,
    )
    return problem, points


# ----------------------------------------------------------------------------- solvers
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


# ----------------------------------------------------------------------------- helpers
def random_views(
    num_features: int, num_views: int = 2, generator: Optional[torch.Generator] = None
) -> list[list[int]]:
    """A random split of the attribute indices into ``num_views`` disjoint, near-equal views
    (the thesis's protocol, redrawn per run)."""
    _positive_int(num_features, "num_features")
    _positive_int(num_views, "num_views")
    if num_views > num_features:
        raise ValueError(
            f"num_views must be <= num_features; got num_views={num_views}, "
            f"num_features={num_features}"
        )
    perm = torch.randperm(num_features, generator=generator).tolist()
    return [sorted(perm[v::num_views]) for v in range(num_views)]


def scaled_rmse(predictions: Tensor, targets: Tensor) -> float:
    """The thesis's scaled RMSE ``sqrt(mean (f(x_i) - y_i)^2) / max_i |y_i|``.

    The thesis divides by ``max_i y_i`` without saying over which set; here it is the
    evaluated targets, with ``|.|`` so that the value stays positive for negative targets
    (identical for positive targets).

    Shape:
        predictions, targets: (k,).
    """
    if not isinstance(predictions, Tensor) or not isinstance(targets, Tensor):
        raise TypeError("predictions and targets must be torch.Tensors")
    if predictions.shape != targets.shape or predictions.dim() != 1 or predictions.numel() == 0:
        raise ValueError(
            "predictions and targets must be non-empty 1-d tensors of the same shape; got "
            f"{tuple(predictions.shape)} and {tuple(targets.shape)}"
        )
    check_finite(targets, "targets")
    check_finite(predictions, "predictions")
    scale = float(targets.abs().max())
    if scale == 0.0:
        raise ValueError("scaled_rmse: all targets are 0, so max |y_i| = 0")
    diff = (predictions.double() - targets.double())
    return math.sqrt(float((diff * diff).mean())) / scale


def make_multiview_regression(
    num_samples: int,
    view_dims: Sequence[int] = (5, 5),
    latent_dim: int = 2,
    noise: float = 0.5,
    target_noise: float = 0.1,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
) -> tuple[Tensor, Tensor, list[list[int]]]:
    """Synthetic multi-view regression data with a natural view split.

    A latent ``z ~ N(0, I_k)`` gives the target ``y = sum_j sin(1.5 z_j) + target_noise * e``;
    view ``v`` observes ``tanh(z W_v) + noise * e_v`` with a random Gaussian ``W_v``
    (k, d_v), so each view is informative but noisy and the views agree through ``z``.

    Returns:
        X (num_samples, sum d_v) with the views' columns side by side, y (num_samples,), and
        the column indices of each view.
    """
    _positive_int(num_samples, "num_samples")
    _positive_int(latent_dim, "latent_dim")
    if len(view_dims) < 1:
        raise ValueError("view_dims must name at least one view; got none")
    for v, d in enumerate(view_dims):
        _positive_int(d, f"view_dims[{v}]")
    _nonneg_float(noise, "noise")
    _nonneg_float(target_noise, "target_noise")
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(num_samples, latent_dim, generator=g, dtype=torch.float64)
    y = torch.sin(1.5 * z).sum(-1) + target_noise * torch.randn(
        num_samples, generator=g, dtype=torch.float64
    )
    blocks, views, start = [], [], 0
    for d in view_dims:
        w = torch.randn(latent_dim, d, generator=g, dtype=torch.float64)
        blocks.append(
            torch.tanh(z @ w) + noise * torch.randn(num_samples, d, generator=g, dtype=torch.float64)
        )
        views.append(list(range(start, start + d)))
        start += d
    return torch.cat(blocks, dim=1).to(dtype), y.to(dtype), views


# ----------------------------------------------------------------------------- estimators
KernelArg = Union[Kernel, Sequence[Kernel], None]
EtaArg = Union[float, Sequence[float], None]


def _per_view(value: object, num: int, name: str) -> list:
    if isinstance(value, (list, tuple)):
        if len(value) != num:
            raise ValueError(f"{name} must have one entry per view ({num}); got {len(value)}")
        return list(value)
    return [value] * num


def _check_kernel(kernel: object, name: str) -> Kernel:
    if not isinstance(kernel, Kernel):
        raise TypeError(f"{name} must be a structssl.regression.kernels.Kernel; got {kernel!r}")
    return kernel


def _check_dtype(dtype: object) -> torch.dtype:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype; got {dtype!r}")
    return dtype


class CoRLSR:
    """Co-regularized least squares regression (exact OP 4.1 or semi-parametric OP 4.2).

    Args:
        views: per view the column indices of the full attribute matrix it sees (views may
            overlap), or ``None`` to use only :meth:`fit_views` / per-view inputs.
        lam: the co-regularization weight ``lam >= 0`` (the thesis uses 1/10).
        eta: ``eta_v >= 0`` per view (a float for all, a sequence per view), or ``None`` for
            the thesis's heuristic ``(mean ||x_i||)^-1`` over each view's labeled points.
        kernel: a :class:`Kernel` for every view or one per view, fitted per view on its
            labeled points; ``None`` is ``GaussianKernel()`` with the thesis's bandwidth.
        mode: ``"exact"`` (cubic in the unlabeled count) or ``"semiparametric"`` (linear).
        solver: ``"direct"`` (exact: :func:`solve_reduced`; semi: :func:`solve_block`),
            ``"block"`` (:func:`solve_block`, the thesis's system as printed), ``"two_view"``
            (:func:`solve_two_view`; needs two views) or ``"bcd"``
            (:func:`block_coordinate_descent`, Algorithm 4.1 on one machine).
        center_targets: fit ``y - mean(y)`` (mean over all labeled targets) and add the mean
            back in :meth:`predict`; the kernels have no bias term. ``False`` fits ``y``.
        dtype: the floating dtype inputs are converted to (float64 by default).
        tol, max_iter: stopping rule of ``solver="bcd"``.

    Attributes (after fit):
        alphas_: per view ``alpha_v``; expansion_points_: per view the points of ``f_v``;
        kernels_: the fitted kernels; etas_: the ``eta_v`` used; offset_: the target mean
        (0 without centering); n_iter_, converged_: set by ``solver="bcd"``.

    Example::

        model = CoRLSR(views=[[0, 1, 2], [3, 4, 5]], mode="semiparametric")
        model.fit(x_labeled, y, x_unlabeled)
        y_hat = model.predict(x_test)
    """

    def __init__(
        self,
        views: Optional[Sequence[Sequence[int]]] = None,
        lam: float = 0.1,
        eta: EtaArg = None,
        kernel: KernelArg = None,
        mode: Mode = "exact",
        solver: Solver = "direct",
        center_targets: bool = True,
        dtype: torch.dtype = torch.float64,
        tol: float = 1e-10,
        max_iter: int = 1000,
    ) -> None:
        self.views = None if views is None else self._check_views(views)
        self.lam = _nonneg_float(lam, "lam")
        self.eta = eta
        if eta is not None:
            for i, e in enumerate(eta if isinstance(eta, (list, tuple)) else [eta]):
                _nonneg_float(e, f"eta[{i}]" if isinstance(eta, (list, tuple)) else "eta")
        if kernel is not None:
            for i, k in enumerate(kernel if isinstance(kernel, (list, tuple)) else [kernel]):
                _check_kernel(k, f"kernel[{i}]" if isinstance(kernel, (list, tuple)) else "kernel")
        self.kernel = kernel
        self.mode = _check_mode(mode)
        if solver not in SOLVERS:
            raise ValueError(
                f"solver must be one of 'direct', 'block', 'two_view', 'bcd'; got {solver!r}"
            )
        self.solver = solver
        if not isinstance(center_targets, bool):
            raise TypeError(f"center_targets must be a bool; got {type(center_targets).__name__}")
        self.center_targets = center_targets
        self.dtype = _check_dtype(dtype)
        self.tol = _nonneg_float(tol, "tol")
        self.max_iter = _positive_int(max_iter, "max_iter")
        self.alphas_: Optional[list[Tensor]] = None

    def __repr__(self) -> str:
        return (
            f"CoRLSR(views={self.views}, lam={self.lam}, eta={self.eta}, kernel={self.kernel}, "
            f"mode={self.mode!r}, solver={self.solver!r})"
        )

    @staticmethod
    def _check_views(views: object) -> tuple[tuple[int, ...], ...]:
        if isinstance(views, (str, bytes)) or not isinstance(views, Sequence):
            raise TypeError(
                f"views must be a sequence of column-index sequences; got {type(views).__name__}"
            )
        if len(views) < 1:
            raise ValueError("views must contain at least one view; got none")
        out = []
        for v, cols in enumerate(views):
            if isinstance(cols, Tensor):
                cols = cols.tolist()
            if isinstance(cols, (str, bytes)) or not isinstance(cols, Sequence) or len(cols) < 1:
                raise ValueError(f"views[{v}] must be a non-empty sequence of ints; got {cols!r}")
            for c in cols:
                if isinstance(c, bool) or not isinstance(c, int) or c < 0:
                    raise ValueError(f"views[{v}] must hold ints >= 0; got {c!r}")
            out.append(tuple(cols))
        return tuple(out)

    @property
    def num_views(self) -> Optional[int]:
        return None if self.views is None else len(self.views)

    # ------------------------------------------------------------------ inputs
    def _slice(self, x: Tensor, name: str) -> list[Tensor]:
        if self.views is None:
            raise ValueError(
                f"{name} is one attribute matrix but the model has views=None; pass per-view "
                "matrices (fit_views / a list to predict) or set views"
            )
        check_matrix(x, name)
        top = max(max(cols) for cols in self.views)
        if top >= x.shape[1]:
            raise ValueError(
                f"views refer to column {top} but {name} has {x.shape[1]} columns"
            )
        return [x[:, list(cols)] for cols in self.views]

    def fit(self, x_labeled: Tensor, y: Tensor, x_unlabeled: Optional[Tensor] = None) -> CoRLSR:
        """Fit on one labeled set shared by all views and (optionally) unlabeled points.

        Args:
            x_labeled: the labeled points, all attributes (views select columns).
            y: their real-valued targets.
            x_unlabeled: the unlabeled points, or ``None`` for none (then coRLSR is the
                average of per-view RLSRs).

        Shape:
            x_labeled: (n, d); y: (n,); x_unlabeled: (m, d).
        """
        views_l = self._slice(x_labeled, "x_labeled")
        if x_unlabeled is None:
            views_u = [xl[:0] for xl in views_l]
        else:
            check_matrix(x_unlabeled, "x_unlabeled")
            if x_unlabeled.shape[1] != x_labeled.shape[1]:
                raise ValueError(
                    f"x_unlabeled must have {x_labeled.shape[1]} columns like x_labeled; got "
                    f"{x_unlabeled.shape[1]}"
                )
            views_u = self._slice(x_unlabeled, "x_unlabeled")
        return self.fit_views(views_l, y, views_u)

    def fit_views(
        self,
        labeled_inputs: Sequence[Tensor],
        targets: Union[Tensor, Sequence[Tensor]],
        unlabeled_inputs: Optional[Sequence[Tensor]] = None,
    ) -> CoRLSR:
        """Fit on per-view data; the labeled sets may differ between views (thesis 4.2).

        Args:
            labeled_inputs: per view its labeled points in its own features.
            targets: one target vector shared by all views (same labeled points), or per view
                the targets of its labeled points.
            unlabeled_inputs: per view the shared unlabeled points in its own features (the
                same points, in the same order, in every view), or ``None``.

        Shape:
            labeled_inputs[v]: (n_v, d_v); targets: (n,) or targets[v]: (n_v,);
            unlabeled_inputs[v]: (m, d_v).
        """
        if isinstance(labeled_inputs, Tensor) or not isinstance(labeled_inputs, Sequence):
            raise TypeError("labeled_inputs must be a sequence of per-view tensors")
        num = len(labeled_inputs)
        if num < 1:
            raise ValueError("labeled_inputs must hold at least one view; got none")
        if self.views is not None and num != len(self.views):
            raise ValueError(
                f"labeled_inputs must have one matrix per view ({len(self.views)}); got {num}"
            )
        for v, xl in enumerate(labeled_inputs):
            check_matrix(xl, f"labeled_inputs[{v}]")
        device = labeled_inputs[0].device
        xls = [xl.to(device=device, dtype=self.dtype) for xl in labeled_inputs]
        if isinstance(targets, Tensor):
            ys = [targets] * num
        else:
            if len(targets) != num:
                raise ValueError(f"targets must have one vector per view ({num}); got {len(targets)}")
            ys = list(targets)
        ys = [
            _check_vector(y, f"targets[{v}]" if not isinstance(targets, Tensor) else "y",
                          xls[v].shape[0]).to(device=device, dtype=self.dtype)
            for v, y in enumerate(ys)
        ]
        for v, xl in enumerate(xls):
            if xl.shape[0] < 1:
                raise ValueError(f"labeled_inputs[{v}] must have at least one row; got 0")
        if unlabeled_inputs is None:
            xus = [xl[:0] for xl in xls]
        else:
            if len(unlabeled_inputs) != num:
                raise ValueError(
                    f"unlabeled_inputs must have one matrix per view ({num}); got "
                    f"{len(unlabeled_inputs)}"
                )
            xus = []
            for v, xu in enumerate(unlabeled_inputs):
                check_matrix(xu, f"unlabeled_inputs[{v}]")
                if xu.shape[1] != xls[v].shape[1]:
                    raise ValueError(
                        f"unlabeled_inputs[{v}] must have {xls[v].shape[1]} columns like "
                        f"labeled_inputs[{v}]; got {xu.shape[1]}"
                    )
                if xu.shape[0] != unlabeled_inputs[0].shape[0]:
                    raise ValueError(
                        "unlabeled_inputs must hold the same points in every view; got "
                        f"{unlabeled_inputs[0].shape[0]} rows in view 0 and {xu.shape[0]} in "
                        f"view {v}"
                    )
                xus.append(xu.to(device=device, dtype=self.dtype))
        if self.solver == "two_view" and num != 2:
            raise ValueError(f"solver='two_view' needs exactly 2 views; got {num}")

        kernels = [
            _check_kernel(k, "kernel").fit(xl)
            for k, xl in zip(_per_view(self.kernel if self.kernel is not None else GaussianKernel(),
                                       num, "kernel"), xls)
        ]
        etas = [
            eta_heuristic(xl) if e is None else _nonneg_float(e, "eta")
            for e, xl in zip(_per_view(self.eta, num, "eta"), xls)
        ]
        offset = float(torch.cat(ys).mean()) if self.center_targets else 0.0
        problem, points = build_problem(
            kernels, xls, [y - offset for y in ys], xus, etas, self.lam, self.mode
        )
        self.n_iter_: Optional[int] = None
        self.converged_: Optional[bool] = None
        if self.solver == "direct":
            alphas = solve_reduced(problem) if self.mode == "exact" else solve_block(problem)
        elif self.solver == "block":
            alphas = solve_block(problem)
        elif self.solver == "two_view":
            alphas = solve_two_view(problem)
        else:
            result = block_coordinate_descent(problem, self.tol, self.max_iter)
            alphas = result.alphas
            self.n_iter_, self.converged_ = result.num_iterations, result.converged
            if not result.converged:
                warnings.warn(
                    f"CoRLSR(solver='bcd') did not converge in max_iter={self.max_iter} sweeps "
                    f"(tol={self.tol})",
                    RuntimeWarning,
                    stacklevel=2,
                )
        self.alphas_ = alphas
        self.expansion_points_ = points
        self.kernels_ = kernels
        self.etas_ = etas
        self.offset_ = offset
        self.problem_ = problem
        return self

    # ------------------------------------------------------------------ prediction
    def predict_views(self, x: Union[Tensor, Sequence[Tensor]]) -> Tensor:
        """Each view's prediction ``f_v(x) + offset``.

        Args:
            x: the points with all attributes (needs ``views``) or per view in its features.

        Shape:
            x: (k, d) or x[v]: (k, d_v); returns (V, k).
        """
        if self.alphas_ is None:
            raise ValueError("this CoRLSR is not fitted yet; call fit or fit_views first")
        num = len(self.alphas_)
        if isinstance(x, Tensor):
            xs = self._slice(x, "x")
        else:
            xs = list(x)
            if len(xs) != num:
                raise ValueError(f"x must have one matrix per view ({num}); got {len(xs)}")
        outs = []
        for v, xv in enumerate(xs):
            check_matrix(xv, f"x[{v}]")
            pts = self.expansion_points_[v]
            if xv.shape[1] != pts.shape[1]:
                raise ValueError(
                    f"x[{v}] must have {pts.shape[1]} columns (view {v}); got {xv.shape[1]}"
                )
            if v and xv.shape[0] != xs[0].shape[0]:
                raise ValueError(
                    f"x must hold the same points in every view; got {xs[0].shape[0]} and "
                    f"{xv.shape[0]} rows"
                )
            xv = xv.to(device=pts.device, dtype=self.dtype)
            outs.append(self.kernels_[v](xv, pts) @ self.alphas_[v] + self.offset_)
        return torch.stack(outs)

    def predict(self, x: Union[Tensor, Sequence[Tensor]]) -> Tensor:
        """The averaged prediction ``1/V sum_v f_v(x)`` (thesis 4.2.3).

        Shape:
            x: (k, d) or x[v]: (k, d_v); returns (k,).
        """
        return self.predict_views(x).mean(0)

    def objective(self) -> float:
        """The value of OP 4.1 / 4.2 at the fitted coefficients (on centred targets)."""
        if self.alphas_ is None:
            raise ValueError("this CoRLSR is not fitted yet; call fit or fit_views first")
        return float(self.problem_.objective(self.alphas_))


class RLSR:
    """Regularized least squares regression (kernel ridge regression, thesis appendix A): the
    minimiser of ``sum_i (y_i - f(x_i))^2 + eta ||f||^2``, ``alpha = (K + eta I)^-1 y``. The
    coRLSR special case ``V = 1`` (or ``m = 0`` per view).

    Args:
        eta: ``eta >= 0`` or ``None`` for the thesis's heuristic.
        kernel: a :class:`Kernel`; ``None`` is ``GaussianKernel()`` with the thesis's bandwidth.
        center_targets: as in :class:`CoRLSR`.
        dtype: the dtype inputs are converted to (float64 by default).
    """

    def __init__(
        self,
        eta: Optional[float] = None,
        kernel: Optional[Kernel] = None,
        center_targets: bool = True,
        dtype: torch.dtype = torch.float64,
    ) -> None:
        self.eta = None if eta is None else _nonneg_float(eta, "eta")
        self.kernel = GaussianKernel() if kernel is None else _check_kernel(kernel, "kernel")
        if not isinstance(center_targets, bool):
            raise TypeError(f"center_targets must be a bool; got {type(center_targets).__name__}")
        self.center_targets = center_targets
        self.dtype = _check_dtype(dtype)
        self.alpha_: Optional[Tensor] = None

    def __repr__(self) -> str:
        return f"RLSR(eta={self.eta}, kernel={self.kernel})"

    def fit(self, x: Tensor, y: Tensor) -> RLSR:
        """Fit on labeled points.

        Shape:
            x: (n, d); y: (n,).
        """
        check_matrix(x, "x")
        if x.shape[0] < 1:
            raise ValueError("x must have at least one row; got 0")
        _check_vector(y, "y", x.shape[0])
        x = x.to(dtype=self.dtype)
        y = y.to(device=x.device, dtype=self.dtype)
        self.kernel_ = self.kernel.fit(x)
        self.eta_ = eta_heuristic(x) if self.eta is None else self.eta
        self.offset_ = float(y.mean()) if self.center_targets else 0.0
        gram = self.kernel_(x, x)
        gram = 0.5 * (gram + gram.T)
        eye = torch.eye(x.shape[0], dtype=x.dtype, device=x.device)
        self.alpha_ = torch.linalg.solve(gram + self.eta_ * eye, y - self.offset_)
        self.points_ = x
        return self

    def predict(self, x: Tensor) -> Tensor:
        """Predictions ``f(x)``. Shape: x (k, d) -> (k,)."""
        if self.alpha_ is None:
            raise ValueError("this RLSR is not fitted yet; call fit first")
        check_matrix(x, "x")
        if x.shape[1] != self.points_.shape[1]:
            raise ValueError(f"x must have {self.points_.shape[1]} columns; got {x.shape[1]}")
        x = x.to(device=self.points_.device, dtype=self.dtype)
        return self.kernel_(x, self.points_) @ self.alpha_ + self.offset_
