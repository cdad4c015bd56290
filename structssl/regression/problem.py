"""The coRLSR problem (thesis chapter 4): OP 4.1 (exact) and OP 4.2 (semi-parametric) in one
form, :class:`CoRLSRProblem`, built from kernels and data by :func:`build_problem`; and the
argument checks shared by the estimators (see :mod:`structssl.regression.corlsr` for the
objective and the solvers)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Sequence, Union

import torch
from torch import Tensor

from structssl.regression.kernels import Kernel

__all__ = ["CoRLSRProblem", "build_problem", "MODES", "SOLVERS"]

Mode = Literal["exact", "semiparametric"]
Solver = Literal["direct", "block", "two_view", "bcd"]
MODES = ("exact", "semiparametric")
SOLVERS = ("direct", "block", "two_view", "bcd")
KernelArg = Union[Kernel, Sequence[Kernel], None]
EtaArg = Union[float, Sequence[float], None]


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
