"""Scalar losses of the nabla-SVM family as functions, with their printed derivatives.

These are the building blocks of :mod:`structssl.losses.nabla` (thesis, seed 001, chapter 7;
reconstructed formulas in ``notes/thesis-digest.md`` section 7):

- :func:`huber_hinge`: the Huber-smoothed margin-rescaled hinge ``l_{Delta,eps}(t)`` (sec. 7.1),
- :func:`unlabeled_loss`: the symmetric unlabeled loss ``u_{Delta,tau}(t)`` (sec. 7.2),
- :func:`smax`: the thesis's soft maximum over a candidate set,
  ``(1/rho) log(1 + sum_i (exp(rho s_i) - 1))`` (sec. 7.1).

Each has a ``*_grad`` function returning the derivative exactly as printed in the thesis; autograd
through the loss functions gives the same values (tested), so the ``*_grad`` functions serve as a
test oracle and as documentation. All functions are elementwise (or reduce one dimension for
:func:`smax`), broadcast their arguments, keep the dtype of ``t`` (or ``scores``) and never mutate
their inputs.
"""

from __future__ import annotations

from typing import Literal, Optional, Union

import torch
from torch import Tensor

__all__ = [
    "huber_hinge",
    "huber_hinge_grad",
    "unlabeled_loss",
    "unlabeled_loss_grad",
    "smax",
    "smax_grad",
    "margin_hinge",
    "check_positive",
]

Scalar = Union[Tensor, float]
Plateau = Literal["one", "delta"]
PLATEAUS: tuple[str, ...] = ("one", "delta")

#: above this value of max(rho * s), smax switches from log1p(sum(expm1)) to the shifted form
_SMAX_SWITCH = 20.0


def check_positive(value: float, name: str) -> float:
    """``value`` as a float if it is a finite number > 0, else a ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number > 0; got {value!r}")
    if not (value > 0 and value < float("inf")):
        raise ValueError(f"{name} must be a finite number > 0; got {value!r}")
    return float(value)


def _as_tensor(x: Scalar, like: Tensor) -> Tensor:
    if isinstance(x, Tensor):
        return x.to(dtype=like.dtype, device=like.device)
    return torch.as_tensor(x, dtype=like.dtype, device=like.device)


def margin_hinge(t: Tensor, delta: Scalar) -> Tensor:
    """The margin-rescaled hinge ``l_Delta(t) = max(Delta - t, 0)`` (thesis eq. 7.1).

    Shape:
        t: any; delta: broadcastable to ``t``. Returns the broadcast shape.
    """
    return (_as_tensor(delta, t) - t).clamp(min=0)


def huber_hinge(t: Tensor, delta: Scalar, epsilon: float) -> Tensor:
    """Huber hinge ``l_{Delta,eps}(t)`` of thesis section 7.1 (C^1 smoothing of the hinge).

    ``l(t) = Delta - t`` for ``t <= Delta - eps``; ``(Delta + eps - t)^2 / (4 eps)`` for
    ``Delta - eps <= t <= Delta + eps``; ``0`` for ``t >= Delta + eps``. It tends to the hinge
    ``max(Delta - t, 0)`` as ``eps -> 0`` and exceeds it by at most ``eps / 4`` (at ``t = Delta``).

    Args:
        t: margins ``<w, Phi(x, y) - Phi(x, ybar)>``.
        delta: the loss ``Delta(y, ybar)`` of each margin (broadcastable to ``t``).
        epsilon: half width of the quadratic region, > 0 (thesis experiments: 0.3).

    Shape:
        t: any; delta: broadcastable to ``t``. Returns the broadcast shape.

    Raises:
        ValueError: if ``epsilon`` is not a finite number > 0.
    """
    eps = check_positive(epsilon, "epsilon")
    d = _as_tensor(delta, t)
    r = (d + eps - t).clamp(min=0)  # 0 beyond the margin: value and derivative vanish there
    return torch.where(t <= d - eps, d - t, r * r / (4 * eps))


def huber_hinge_grad(t: Tensor, delta: Scalar, epsilon: float) -> Tensor:
    """``d l_{Delta,eps} / d t`` as printed in thesis section 7.1.

    ``-1`` for ``t <= Delta - eps``; ``-(1/2)((Delta - t)/eps + 1)`` in the quadratic region;
    ``0`` for ``t >= Delta + eps``.
    """
    eps = check_positive(epsilon, "epsilon")
    d = _as_tensor(delta, t)
    mid = -0.5 * ((d - t) / eps + 1)
    return torch.where(t <= d - eps, -torch.ones_like(mid), torch.where(t >= d + eps, 0.0 * mid, mid))


def _check_plateau(plateau: str) -> None:
    if plateau not in PLATEAUS:
        raise ValueError(f"plateau must be one of {PLATEAUS}; got {plateau!r}")


def unlabeled_loss(t: Tensor, delta: Scalar, tau: float, plateau: Plateau = "one") -> Tensor:
    """Unlabeled loss ``u_{Delta,tau}(t)`` of thesis section 7.2 (symmetric in ``t``).

    With ``a = |t|``: ``1`` for ``a <= Delta - tau``; ``1 - (a - Delta + tau)^2 / (2 tau^2)`` for
    ``Delta - tau <= a <= Delta``; ``(a - Delta - tau)^2 / (2 tau^2)`` for
    ``Delta <= a <= Delta + tau``; ``0`` beyond. Its derivative is 0 at ``t = 0``.

    Args:
        t: margins ``<w, Phi(x, y*) - Phi(x, ybar)>`` between the pseudo-label and a competitor.
        delta: ``Delta(y*, ybar)``, broadcastable to ``t``.
        tau: width of each quadratic piece, > 0 (thesis experiments: 0.4).
        plateau: ``"one"`` (default) is the thesis as printed, whose plateau height is 1 whatever
            ``Delta`` (thesis-digest X5.1, option a); where ``Delta < tau`` the first piece is
            empty and ``u(0) < 1``. ``"delta"`` is the Delta-scaled variant
            ``Delta * u_{1, tau/Delta}(t / Delta)`` (X5.1 option b, a deviation from the printed
            formula; needs ``Delta > 0``).

    Shape:
        t: any; delta: broadcastable to ``t``. Returns the broadcast shape.

    Raises:
        ValueError: if ``tau`` is not a finite number > 0 or ``plateau`` is unknown.
    """
    tau = check_positive(tau, "tau")
    _check_plateau(plateau)
    d = _as_tensor(delta, t)
    if plateau == "delta":
        return d * _u(t / d, torch.ones_like(d), tau / d)
    return _u(t, d, tau)


def _u(t: Tensor, d: Tensor, tau: Union[Tensor, float]) -> Tensor:
    a = t.abs()
    p = (a - d + tau).clamp(min=0)  # 0 on the plateau
    q = (d + tau - a).clamp(min=0)  # 0 beyond Delta + tau
    return torch.where(a <= d, 1 - p * p / (2 * tau * tau), q * q / (2 * tau * tau))


def unlabeled_loss_grad(t: Tensor, delta: Scalar, tau: float) -> Tensor:
    """``d u_{Delta,tau} / d t`` as printed in thesis section 7.2 (plateau ``"one"``).

    ``0`` for ``|t| <= Delta - tau``; ``-(sgn(t)/tau^2)(|t| - Delta + tau)`` for
    ``Delta - tau <= |t| <= Delta``; ``(sgn(t)/tau^2)(|t| - Delta - tau)`` for
    ``Delta <= |t| <= Delta + tau``; ``0`` beyond.
    """
    tau = check_positive(tau, "tau")
    d = _as_tensor(delta, t)
    a, sgn = t.abs(), torch.sign(t)
    inner = -(sgn / tau**2) * (a - d + tau)
    outer = (sgn / tau**2) * (a - d - tau)
    zero = torch.zeros_like(inner)
    return torch.where(
        a <= d - tau, zero, torch.where(a <= d, inner, torch.where(a <= d + tau, outer, zero))
    )


def _masked(scores: Tensor, mask: Optional[Tensor]) -> tuple[Tensor, Tensor]:
    if mask is None:
        return scores, torch.ones_like(scores, dtype=torch.bool)
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor; got dtype {mask.dtype}")
    mask = mask.expand_as(scores)
    return scores.masked_fill(~mask, 0.0), mask


def smax(scores: Tensor, rho: float, mask: Optional[Tensor] = None, dim: int = -1) -> Tensor:
    """The thesis's soft maximum over a candidate set (section 7.1, "1 + / - 1" form).

    ``smax_rho(s) = (1/rho) log(1 + sum_i (exp(rho s_i) - 1))`` over the candidates ``i`` where
    ``mask`` is True. For ``s >= 0`` (the Huber and unlabeled losses are), it lies between
    ``max_i s_i`` and ``sum_i s_i``, tends to the max as ``rho -> inf`` and to the sum as
    ``rho -> 0``; candidates with ``s_i = 0`` contribute exactly nothing, so an empty or all-zero
    set gives exactly 0. Evaluated stably: ``log1p(sum(expm1(rho s)))`` while ``max(rho s) <= 20``,
    else ``M + log(sum(exp(rho s - M)) + (1 - n) exp(-M))`` with ``M = max(rho s)``, which has no
    cancellation there; no overflow even at ``rho s = 1e4``.

    Args:
        scores: candidate losses ``s_i >= 0`` (values < 0 are outside the thesis's definition).
        rho: sharpness, > 0 (not stated in the thesis; thesis-digest X5.2).
        mask: bool, broadcastable to ``scores``; False drops a candidate (default: all kept).
        dim: the candidate dimension.

    Shape:
        scores: (..., M, ...); mask: broadcastable to scores. Returns ``scores`` without ``dim``.

    Raises:
        ValueError: if ``rho`` is not a finite number > 0 or ``mask`` is not bool.
    """
    rho = check_positive(rho, "rho")
    s, mask = _masked(scores, mask)
    z = rho * s.movedim(dim, -1)  # (..., M)
    mask = mask.movedim(dim, -1)
    n = mask.sum(-1).to(z.dtype)  # number of candidates
    big = z.masked_fill(~mask, float("-inf")).amax(-1)  # M, -inf for empty sets
    m = big.clamp(min=_SMAX_SWITCH)  # shift of the large branch (finite)
    small = torch.log1p(torch.where(mask, torch.expm1(z.clamp(max=_SMAX_SWITCH)), 0.0).sum(-1))
    shifted = torch.where(mask, torch.exp(z - m.unsqueeze(-1)), 0.0).sum(-1)
    use_small = big <= _SMAX_SWITCH
    inside = torch.where(use_small, 1.0, shifted + (1 - n) * torch.exp(-m))  # > 0 where used
    large = m + torch.log(inside)
    return torch.where(use_small, small, large) / rho


def smax_grad(scores: Tensor, rho: float, mask: Optional[Tensor] = None, dim: int = -1) -> Tensor:
    """``d smax / d s_i = exp(rho s_i) / (1 + sum_j (exp(rho s_j) - 1))`` (thesis section 7.1).

    Evaluated stably (both numerator and denominator scaled by ``exp(-max(rho s, 0))``); 0 for
    masked candidates. Shaped like ``scores``.
    """
    rho = check_positive(rho, "rho")
    s, mask = _masked(scores, mask)
    z = (rho * s).masked_fill(~mask, float("-inf"))
    m = z.amax(dim, keepdim=True).clamp(min=0)
    num = torch.exp(z - m)
    den = torch.exp(-m) + (num - torch.exp(-m) * mask).sum(dim, keepdim=True)
    return num / den
