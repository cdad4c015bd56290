"""Kernels for co-regularized least squares regression, with the thesis's heuristics.

Thesis (seed 001) section 4.4 uses a Gaussian kernel ``k(x, x') = exp(-||x - x'||^2 / sigma^2)``
with ``sigma^2 = 1/n^2 sum_{i,j} ||x_i - x_j||^2`` (the mean pairwise squared distance of the
*labeled* points of a view) and the regularization parameter
``eta = (1/n sum_i ||x_i||)^{-1}``, both computed per view from the labeled examples only:
:func:`bandwidth_heuristic` and :func:`eta_heuristic`.

A kernel is a small immutable object: :meth:`Kernel.fit` returns a copy whose free
hyperparameters are resolved from data (the unchanged kernel when there are none) and
``kernel(x1, x2)`` returns the (n1, n2) kernel matrix. Kernels keep the dtype and device of
their inputs.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

__all__ = [
    "GaussianKernel",
    "Kernel",
    "LinearKernel",
    "bandwidth_heuristic",
    "check_matrix",
    "eta_heuristic",
    "squared_distances",
]


def check_matrix(x: object, name: str) -> Tensor:
    """``x`` if it is a 2-d floating-point tensor, else a ``TypeError``/``ValueError`` naming it."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"{name} must be 2-d (num_points, num_features); got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must have a floating-point dtype; got {x.dtype}")
    check_finite(x, name)
    return x


def check_finite(x: Tensor, name: str) -> Tensor:
    """``x`` if every value is finite, else a ``ValueError`` naming ``name``, the first
    non-finite entry (row, column) and its value."""
    if x.numel() and not bool(torch.isfinite(x).all()):
        index = (~torch.isfinite(x)).nonzero()[0].tolist()
        where = ", ".join(str(i) for i in index)
        raise ValueError(
            f"{name} must be finite (no NaN or inf); got {x[tuple(index)].item()} at "
            f"{name}[{where}]"
        )
    return x


def squared_distances(x1: Tensor, x2: Tensor) -> Tensor:
    """Pairwise squared Euclidean distances ``||x1_i - x2_j||^2``, clamped at 0.

    Shape:
        x1: (n1, d); x2: (n2, d); returns (n1, n2).
    """
    sq = (x1 * x1).sum(-1)[:, None] + (x2 * x2).sum(-1)[None, :] - 2.0 * (x1 @ x2.T)
    return sq.clamp_min(0.0)


def bandwidth_heuristic(x: Tensor) -> float:
    """The thesis's Gaussian bandwidth ``sigma = sqrt(1/n^2 sum_{i,j} ||x_i - x_j||^2)``.

    Computed in O(n d) through ``1/n^2 sum_{i,j} ||x_i - x_j||^2 = 2 (mean ||x_i||^2 -
    ||mean x||^2)``.

    Args:
        x: the labeled points of one view.

    Shape:
        x: (n, d).

    Raises:
        ValueError: if ``x`` has fewer than 2 rows or all its rows are equal (sigma = 0).
    """
    check_matrix(x, "x")
    if x.shape[0] < 2:
        raise ValueError(f"bandwidth_heuristic needs at least 2 points; got x with {x.shape[0]}")
    xd = x.double()
    centred = xd - xd.mean(0, keepdim=True)
    sigma2 = 2.0 * float((centred * centred).sum(-1).mean())
    if not sigma2 > 0.0:
        raise ValueError(
            "bandwidth_heuristic: all rows of x are equal, so the mean pairwise squared distance "
            "is 0; pass an explicit bandwidth"
        )
    return math.sqrt(sigma2)


def eta_heuristic(x: Tensor) -> float:
    """The thesis's regularization parameter ``eta = (1/n sum_i ||x_i||)^{-1}``.

    Args:
        x: the labeled points of one view.

    Shape:
        x: (n, d).

    Raises:
        ValueError: if ``x`` has no rows or all its rows are zero.
    """
    check_matrix(x, "x")
    if x.shape[0] < 1:
        raise ValueError("eta_heuristic needs at least 1 point; got x with 0 rows")
    mean_norm = float(torch.linalg.vector_norm(x.double(), dim=-1).mean())
    if not mean_norm > 0.0:
        raise ValueError(
            "eta_heuristic: all rows of x are zero, so (mean ||x_i||)^-1 is infinite; pass an "
            "explicit eta"
        )
    return 1.0 / mean_norm


class Kernel:
    """A positive semi-definite kernel ``k(x, x')`` on row vectors."""

    def fit(self, x: Tensor) -> Kernel:
        """A copy with the free hyperparameters resolved from ``x`` (this kernel if none).

        Shape:
            x: (n, d), the labeled points of one view.
        """
        return self

    def __call__(self, x1: Tensor, x2: Tensor) -> Tensor:
        """The kernel matrix ``[k(x1_i, x2_j)]``.

        Shape:
            x1: (n1, d); x2: (n2, d); returns (n1, n2) in their dtype and on their device.
        """
        raise NotImplementedError

    def _check_pair(self, x1: Tensor, x2: Tensor) -> None:
        check_matrix(x1, "x1")
        check_matrix(x2, "x2")
        if x1.shape[1] != x2.shape[1]:
            raise ValueError(
                f"x1 and x2 must have the same number of features; got {x1.shape[1]} and "
                f"{x2.shape[1]}"
            )


class GaussianKernel(Kernel):
    """``k(x, x') = exp(-||x - x'||^2 / bandwidth^2)`` (the thesis's parameterisation).

    Args:
        bandwidth: ``sigma`` > 0, or ``None`` to take :func:`bandwidth_heuristic` of the data
            passed to :meth:`fit` (the thesis's choice).
    """

    def __init__(self, bandwidth: Optional[float] = None) -> None:
        if bandwidth is not None:
            if isinstance(bandwidth, bool) or not isinstance(bandwidth, (int, float)):
                raise TypeError(f"bandwidth must be a float or None; got {type(bandwidth).__name__}")
            if not (math.isfinite(bandwidth) and bandwidth > 0):
                raise ValueError(f"bandwidth must be a finite float > 0; got {bandwidth!r}")
            bandwidth = float(bandwidth)
        self.bandwidth = bandwidth

    def __repr__(self) -> str:
        return f"GaussianKernel(bandwidth={self.bandwidth!r})"

    def fit(self, x: Tensor) -> GaussianKernel:
        if self.bandwidth is not None:
            return self
        return GaussianKernel(bandwidth_heuristic(x))

    def __call__(self, x1: Tensor, x2: Tensor) -> Tensor:
        if self.bandwidth is None:
            raise ValueError(
                "GaussianKernel(bandwidth=None) has no bandwidth yet; call kernel.fit(x) first"
            )
        self._check_pair(x1, x2)
        return torch.exp(squared_distances(x1, x2) / -(self.bandwidth**2))


class LinearKernel(Kernel):
    """``k(x, x') = <x, x'>``. Its kernel matrix is singular when n > d, so the exact
    (non-parametric) coRLSR problem, which needs a strictly positive definite matrix, is
    usually ill-posed with it; it serves the semi-parametric variant and RLSR (ridge)."""

    def __repr__(self) -> str:
        return "LinearKernel()"

    def __call__(self, x1: Tensor, x2: Tensor) -> Tensor:
        self._check_pair(x1, x2)
        return x1 @ x2.T
