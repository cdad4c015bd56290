"""The thesis's experimental protocol for coRLSR (section 4.4): random view splits, the scaled
RMSE, and synthetic multi-view regression data."""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
from torch import Tensor

from structssl.regression.kernels import check_finite
from structssl.regression.problem import _nonneg_float, _positive_int

__all__ = ["random_views", "scaled_rmse", "make_multiview_regression"]


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
