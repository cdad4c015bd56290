"""Diagonally preconditioned full-batch L-BFGS (``StructuredModule(lbfgs_precondition=a)``).

L-BFGS starts every two-loop recursion from a multiple of the identity, ``gamma I``, so until
its short memory has learned the curvature it steps as if every weight had the same one. Over
sparse features that is far from true: in the objective

    J(w) = ||w||^2 / (2 n) + C mean_i l_i(w)

of a linear CRF, the Hessian's diagonal entry of a weight is ``(1 + C v) / n`` with ``v`` the
variance of that weight's feature count over the training set, and on CoNLL-2002 Spanish
feature counts run from 1 to 10^5. :class:`PreconditionedLBFGS` runs torch's L-BFGS in the
coordinates ``u = w / s`` for a fixed positive scale ``s`` per weight: the parameters hold
``w`` throughout, the objective, its minimiser and the stopping tests are unchanged, and only
the path differs (the initial inverse Hessian becomes ``gamma diag(s^2)``).

The scales (:func:`curvature_scales`) are ``s = (1 + a C v)^(-1/2)``, an estimate of the
inverse square root of the Hessian diagonal (times ``n``) from the labeled training data (for
seed 004's objective, ``||w||^2 / (2 C) + mean_i l_i``, the weight is ``C / n``), where ``v``
is the variance of the weight's count, as if each count were one choice among ``K``. For
linear scorers the gradient of the gold score ``sum_i <w, Psi(x_i, y_i)>`` is the vector of
gold part counts ``G``:

* a row of a :class:`~structssl.scorers.base.LinearInputs` weight (one feature's weight for
  each output, e.g. each label; ``K`` outputs) counts ``T`` tokens in all, and an entry's
  share is its label's smoothed share among them, ``p = (G + 1/K) / (T + 1)``: then
  ``v = T p (1 - p)``, the Bernoulli variance of the count if the model's conditional were the
  empirical one. This is where sparse features need it: counts from 1 to 10^5;
* every other tensor (a bias, the transition matrix, start and end weights: parts that every
  position or example has) is one group of ``K`` entries with ``T`` counts in all, each with
  the uniform share ``p = 1/K`` (the model at the start): a few weights, kept on one scale.
  (Their empirical shares instead, which give unseen transitions ``s = 1``, took 0.8318
  instead of 0.8238 after 100 iterations in the measurement below.)

The model's conditional given all features is sharper than the empirical label distribution
of one feature, so the true variance is smaller: ``a`` (the option's value) scales it.
Measured on CoNLL-2002 Spanish (``benchmarks/README.md``, "Your own data"; objective of
``configs/tagger.yaml``, float32, one L-BFGS run from zero weights): after 100 / 150
iterations 0.9367 / 0.8377 plain; 0.8358 / 0.8255 at ``a = 3``, 0.8288 / 0.8235 at 1, 0.8256 /
0.8222 at 0.1, 0.8241 / 0.8216 at 0.03, 0.8237 / 0.8215 at 0.01, 0.8234 / 0.8212 at 0.003,
0.8275 / 0.8213 at 0.001 (plain L-BFGS ends by its own tests after 275 iterations at 0.8212).

Scorers whose gold-score gradient is not a count (a neural encoder, dense inputs of either
sign) keep ``s = 1`` on the tensors where it has a negative entry; :func:`curvature_scales`
returns their names.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import torch
from torch import Tensor, nn

from structssl.scorers.base import LinearInputs

__all__ = ["PreconditionedLBFGS", "curvature_scales", "check_precondition"]


def check_precondition(value: Optional[float]) -> Optional[float]:
    """Check the ``lbfgs_precondition`` option: None, or a finite float > 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
        math.isfinite(value) and value > 0
    ):
        raise ValueError(
            f"lbfgs_precondition must be a finite float > 0 (the curvature weight a; 0.01 is "
            f"a good value) or None (plain L-BFGS); got {value!r}"
        )
    return float(value)


class PreconditionedLBFGS(torch.optim.LBFGS):
    """``torch.optim.LBFGS`` in the coordinates ``u = w / s`` (see the module docstring).

    Until :meth:`set_scales` is called it is torch's L-BFGS. The scales are not part of the
    optimiser's state: the caller computes the same ones again from the same data after a
    resume (:func:`curvature_scales` is deterministic), so the saved history (in ``u``) stays
    valid.

    Args:
        params: the parameters (one group).
        **kwargs: ``torch.optim.LBFGS``'s options.
    """

    def __init__(self, params: Any, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        #: (numel,) the flat scales in parameter order, or None (not preconditioned yet)
        self.scale: Optional[Tensor] = None

    def set_scales(self, scales: Sequence[Tensor]) -> None:
        """Set the scale of every weight: one tensor per parameter, its shape, finite, > 0."""
        params = self._params
        if len(scales) != len(params):
            raise ValueError(
                f"expected {len(params)} scale tensors (one per parameter); got {len(scales)}"
            )
        flat = []
        for i, (p, s) in enumerate(zip(params, scales)):
            if tuple(s.shape) != tuple(p.shape):
                raise ValueError(
                    f"scale {i} must have the parameter's shape {tuple(p.shape)}; got "
                    f"{tuple(s.shape)}"
                )
            if not bool(torch.isfinite(s).all()) or not bool((s > 0).all()):
                raise ValueError(f"scale {i} must be finite and > 0")
            flat.append(s.detach().reshape(-1).to(dtype=p.dtype, device=p.device))
        self.scale = torch.cat(flat) if flat else None

    def _gather_flat_grad(self) -> Tensor:
        grad = super()._gather_flat_grad()
        return grad if self.scale is None else grad * self.scale

    def _add_grad(self, step_size: float, update: Tensor) -> None:
        super()._add_grad(step_size, update if self.scale is None else update * self.scale)


def _groups_by_row(scorer: nn.Module) -> set[int]:
    """The ids of the weights whose rows are groups: those of the scorer's
    :class:`LinearInputs` (one row per feature, word or input dimension)."""
    return {id(m.weight) for m in scorer.modules() if isinstance(m, LinearInputs)}


def curvature_scales(
    module: Any, chunks: Sequence[dict[str, Any]], weight: float
) -> tuple[list[Tensor], list[str]]:
    """The scales ``s = (1 + a C v)^(-1/2)`` of every trainable parameter of ``module`` (a
    :class:`~structssl.training.StructuredModule`), from its labeled training chunks.

    The gold part counts are summed over ``chunks`` (and over the processes, when training on
    several). Returns the scales in ``module.parameters()`` order (trainable ones) and the
    names of the parameters left at ``s = 1`` (their gold-score gradient has a negative entry,
    so it is not a count).

    Args:
        module: the procedure; ``module.potentials(chunk)`` and ``module.structure.score`` give
            the gold scores, ``module.objective_weights()`` and ``module.dataset_sizes()`` the
            weight ``C`` of ``v`` in the objective's Hessian (``C / n`` for seed 004's form).
        chunks: labeled batches (``inputs``, ``labels``, ``lengths``).
        weight: ``a`` > 0.
    """
    from structssl.training.distributed import all_reduce_sum, is_distributed

    named = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
    params = [p for _, p in named]
    counts = [torch.zeros_like(p, dtype=torch.float64) for p in params]
    with torch.enable_grad():
        for chunk in chunks:
            gold = module.structure.score(
                module.potentials(chunk), chunk["labels"], chunk.get("lengths")
            ).sum()
            grads = torch.autograd.grad(gold, params, allow_unused=True)
            for total, grad in zip(counts, grads):
                if grad is not None:
                    total += grad.detach().double()
    if is_distributed():
        sizes = [c.numel() for c in counts]
        flat = all_reduce_sum(torch.cat([c.reshape(-1) for c in counts]))
        counts = [piece.view(c.shape) for piece, c in zip(flat.split(sizes), counts)]
    # J = ||w||^2 / d + c mean_L l: Hessian (2 / d) (1 + (c d / (2 n)) sum_i H_i)
    divisor, weight_l, _ = module.objective_weights()
    n, _ = module.dataset_sizes()
    factor = float(weight_l) * float(divisor) / (2 * n)
    by_row = _groups_by_row(module.scorer)
    scales, unscaled = [], []
    for (name, p), g in zip(named, counts):
        if bool((g < 0).any()) or g.numel() == 0:
            scales.append(torch.ones_like(p))
            unscaled.append(name)
            continue
        if id(p) in by_row and g.dim() == 2:  # one feature's weights: its labels' shares
            total = g.sum(dim=1, keepdim=True)
            share = (g + 1.0 / g.shape[1]) / (total + 1.0)
        else:  # weights every position uses (bias, transitions, start, end): uniform shares
            total = g.sum()
            share = torch.full_like(g, 1.0 / g.numel())
        variance = total * share * (1 - share)
        h = 1.0 + weight * factor * variance
        scales.append(h.rsqrt().to(dtype=p.dtype))
    return scales, unscaled
