"""Quadratic-penalty Gamma loss (seed 000, Gamma-SSVM) and constraint penalties.

Prior knowledge is a constraint feature map ``phi(x, y) in R^d`` (one entry per constraint
``j``) and a convex, Lipschitz penalty ``Gamma`` of its values (seed 000 section 3.1):

- eq. (4), hinge: ``Gamma(v) = sum_j sum_k [1 - v_jk]_+`` (:class:`HingePenalty`, threshold 1);
- eq. (5), L1 to a target vector: ``Gamma(v) = || (1/m) sum_j v_j - a ||_1`` (corpus level) or
  ``sum_j ||v_j - a_j||_1`` (per example, as in the experiments of section 5.1 with
  ``a = 1`` and in section 4 with ``a_j = phi(x_j, y_j)``, scale 1/2) (:class:`L1Penalty`).

**Interface for phi (read this before writing constraints).** ``phi`` must be affine in the
parts of the structure: ``phi(x, y) = A_x(parts(y)) + b_x``. A :class:`ConstraintFeatures` object
gives ``phi(parts) -> (B, d)`` and its adjoint ``adjoint(v, potentials) -> A^T v`` shaped like the
potentials, so that ``v . phi(y) = <A^T v, parts(y)> + v . b`` folds into the potentials and any
structure's decoder maximises it. Ready-made: :class:`LinearConstraintFeatures` (dense per-part
weights ``F`` (B, d, *event_shape) and an offset: ``phi_j(y) = <F_j, parts(y)> + b_j``; tuple
potentials take a tuple of weights), :class:`PartsFeatures` (``phi = parts``, the labeling
formulation of section 4) and :class:`NodeFeatures` (``phi`` = per-position label indicators
of a :class:`~structssl.structures.linear_chain.LinearChain`, the ``l(x) x c`` trellis map of
section 4). ``phi`` must be 0/1-valued on every structure (seed 000 section 3.5): then
``||phi(y)||^2 = 1 . phi(y)`` is affine in the parts too and the decoders below are exact. That
covers the binary constraint features of section 5.1 and the one-hot parts of section 4 (where
``||phi||^2`` is the constant number of parts). Non-binary features (which need the "double
dynamic programming" of section 3.5) raise ``NotImplementedError``; with ``validate`` on, a
decoded structure with a non-0/1 ``phi`` raises ``ValueError``.

The Gamma loss of an unlabeled example ``j`` (seed 000 eq. 13, everything divided by ``C_2``)::

    Gamma(v) + (1/m) sum_j [ (mu/2) ||v_j||^2
        + max_y (s(y) - (mu/2) v_j . phi_j(y) + (mu/4) ||phi_j(y)||^2)          (convex, eq. 14)
        - max_y (s(y) + (mu/2) v_j . phi_j(y) - (mu/4) ||phi_j(y)||^2) ]        (concave, eq. 15)

The bracket is eq. (9) expanded; by Lemma 1 it upper-bounds ``(mu/4) ||phi_j(y(x_j)) - v_j||^2``.
The concave part's maximiser is the constraint-guided prediction of eq. (12) (the same argmax as
eq. 15); a CCCP step (Appendix eq. 21-22) replaces the concave part by its linearisation at that
fixed structure: pass ``linearize_at`` to :meth:`QuadraticPenaltyGammaLoss.terms`. ``v_j`` are
auxiliary variables owned by the training procedure (e.g. an ``nn.Parameter`` per unlabeled
example); gradients flow to both the potentials and ``v``. The supervised hinge term of eq. (13)
is :class:`~structssl.losses.hinge.StructuredHingeLoss`; ``C_1``, ``C_2`` belong to the procedure.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import Tensor, nn

from structssl.losses._common import check_structure
from structssl.losses.functional import check_positive
from structssl.structures.base import Potentials, Structure, as_tuple, like
from structssl.structures.linear_chain import LinearChain

__all__ = [
    "ConstraintFeatures",
    "LinearConstraintFeatures",
    "PartsFeatures",
    "NodeFeatures",
    "HingePenalty",
    "L1Penalty",
    "GammaTerms",
    "QuadraticPenaltyGammaLoss",
    "ConstraintPenalty",
    "constraint_guided_argmax",
]


# ---------------------------------------------------------------------- constraint features
class ConstraintFeatures:
    """An affine constraint feature map ``phi(x, y) = A(parts(y)) + offset`` (see module doc).

    Subclasses implement :meth:`phi` (on parts, marginals or any tensor of the parts layout) and
    :meth:`adjoint`; :attr:`binary` declares that ``phi`` is 0/1-valued on every structure.
    """

    #: phi takes only values 0 and 1 on structures (needed by the Gamma loss)
    binary: bool = True

    def phi(self, parts: Potentials) -> Tensor:
        """``phi`` of parts (0/1 or fractional). Shape (B, d)."""
        raise NotImplementedError

    def adjoint(self, v: Tensor, potentials: Potentials) -> Potentials:
        """``A^T v`` (without the offset) shaped like ``potentials``; ``v`` is (B, d)."""
        raise NotImplementedError

    def offset_dot(self, v: Tensor) -> Tensor:
        """``v . offset`` per example. Shape (B,)."""
        return torch.zeros(v.shape[0], dtype=v.dtype, device=v.device)


class LinearConstraintFeatures(ConstraintFeatures):
    """``phi_j(x, y) = <F_j, parts(y)> + b_j`` with dense per-part weights.

    Args:
        weights: ``F`` (B, d, *event_shape), or a tuple of such for tuple potentials (one per
            component, the constraint dimension right after the batch dimension).
        offset: ``b`` (d,) or (B, d) (default 0).
        binary: whether ``phi`` is 0/1-valued on every structure (required by the Gamma loss).

    Raises:
        ValueError: if the weights are not floating tensors sharing (B, d), or the offset
            does not match d.
    """

    def __init__(
        self, weights: Potentials, offset: Optional[Tensor] = None, binary: bool = True
    ) -> None:
        tensors = as_tuple(weights)
        for i, w in enumerate(tensors):
            if not isinstance(w, Tensor) or not w.is_floating_point() or w.dim() < 3:
                got = tuple(w.shape) if isinstance(w, Tensor) else type(w).__name__
                raise ValueError(
                    f"weights[{i}] must be a floating tensor (B, d, *event_shape); got {got}"
                )
            if w.shape[:2] != tensors[0].shape[:2]:
                raise ValueError(
                    f"weights must share (B, d) = {tuple(tensors[0].shape[:2])}; weights[{i}] has "
                    f"shape {tuple(w.shape)}"
                )
        self.weights = weights
        self.num_constraints = int(tensors[0].shape[1])
        if offset is not None and (
            not isinstance(offset, Tensor) or offset.shape[-1] != self.num_constraints or offset.dim() > 2
        ):
            got = tuple(offset.shape) if isinstance(offset, Tensor) else type(offset).__name__
            raise ValueError(f"offset must have shape (d,) or (B, d) with d = {self.num_constraints}; got {got}")
        self.offset = offset
        self.binary = bool(binary)

    def phi(self, parts: Potentials) -> Tensor:
        total = None
        for w, p in zip(as_tuple(self.weights), as_tuple(parts)):
            term = (w * p.unsqueeze(1).to(w.dtype)).flatten(2).sum(2)  # (B, d)
            total = term if total is None else total + term
        assert total is not None
        return total if self.offset is None else total + self.offset.to(total.dtype)

    def adjoint(self, v: Tensor, potentials: Potentials) -> Potentials:
        out = []
        for w, p in zip(as_tuple(self.weights), as_tuple(potentials)):
            vv = v.view(v.shape + (1,) * (w.dim() - 2)).to(w.dtype)
            out.append((vv * w).sum(1).to(p.dtype))  # (B, *S)
        return like(potentials, out)

    def offset_dot(self, v: Tensor) -> Tensor:
        if self.offset is None:
            return super().offset_dot(v)
        return (v * self.offset.to(v.dtype)).sum(-1).expand(v.shape[0])


class PartsFeatures(ConstraintFeatures):
    """``phi(x, y) = parts(y)``, flattened (all components concatenated): d = number of parts.

    The labeling formulation of seed 000 section 4 for structures whose parts are the node
    indicators (e.g. :class:`~structssl.structures.multiclass.MultiClass`).
    """

    def phi(self, parts: Potentials) -> Tensor:
        return torch.cat([p.flatten(1) for p in as_tuple(parts)], dim=1)

    def adjoint(self, v: Tensor, potentials: Potentials) -> Potentials:
        out, start = [], 0
        for p in as_tuple(potentials):
            size = p[0].numel()
            out.append(v[:, start : start + size].reshape(p.shape).to(p.dtype))
            start += size
        if start != v.shape[1]:
            raise ValueError(f"v must have d = {start} entries (the number of parts); got {v.shape[1]}")
        return like(potentials, out)


class NodeFeatures(ConstraintFeatures):
    """Per-position label indicators of a linear chain, ``phi(x, y)_{t C + c} = [y_t = c]``
    (seed 000 section 4's trellis map; d = N C, zero at padded positions)."""

    def phi(self, parts: Potentials) -> Tensor:
        assert isinstance(parts, Tensor)
        return LinearChain.node_parts(parts).flatten(1)  # (B, N C)

    def adjoint(self, v: Tensor, potentials: Potentials) -> Potentials:
        if not isinstance(potentials, Tensor) or potentials.dim() != 4:
            raise NotImplementedError("NodeFeatures needs LinearChain potentials (B, N, C, C)")
        b, n, c, _ = potentials.shape
        if v.shape[1] != n * c:
            raise ValueError(f"v must have d = N C = {n * c} entries; got {v.shape[1]}")
        return v.view(b, n, 1, c).expand(b, n, c, c).to(potentials.dtype)


# ---------------------------------------------------------------------- penalties Gamma
class HingePenalty(nn.Module):
    """``Gamma(v) = sum_j sum_k [threshold - v_jk]_+`` (seed 000 eq. 4, per constraint entry).

    Args:
        threshold: the lower bound each constraint value should reach (eq. 4: 1).
    """

    def __init__(self, threshold: float = 1.0) -> None:
        super().__init__()
        self.threshold = float(threshold)

    def forward(self, v: Tensor, target: Optional[Tensor] = None) -> Tensor:
        """Shape: v (B, d). Returns a scalar. ``target`` must be None (kept for one interface)."""
        if target is not None:
            raise ValueError("HingePenalty takes no target; got one")
        return (self.threshold - v).clamp(min=0).sum()


class L1Penalty(nn.Module):
    """L1 distance of the constraint values to a target (seed 000 eq. 5, section 4, section 5.1).

    ``corpus=True``: ``scale * ||mean_j v_j - a||_1`` (eq. 5, a corpus-level expectation over the
    batch). ``corpus=False``: ``scale * sum_j ||v_j - a_j||_1`` (section 5.1 with ``a = 1``;
    section 4 with ``a_j = phi(x_j, y_j)`` and ``scale = 1/2``, where it equals the Hamming loss
    when ``v_j`` encodes a structure).

    Args:
        target: default target ``a`` (d,) or (B, d); may be given per call instead.
        corpus: corpus-level (eq. 5) or per-example.
        scale: multiplies the distance.
    """

    def __init__(self, target: Optional[Tensor] = None, corpus: bool = False, scale: float = 1.0) -> None:
        super().__init__()
        self.default_target = target
        self.corpus = bool(corpus)
        self.scale = float(scale)

    def forward(self, v: Tensor, target: Optional[Tensor] = None) -> Tensor:
        """Shape: v (B, d); target (d,) or (B, d). Returns a scalar."""
        a = self.default_target if target is None else target
        if a is None:
            raise ValueError("L1Penalty needs a target: pass one to the constructor or the call")
        if not isinstance(a, Tensor) or a.shape[-1] != v.shape[-1]:
            got = tuple(a.shape) if isinstance(a, Tensor) else type(a).__name__
            raise ValueError(f"target must have shape (d,) or (B, d) with d = {v.shape[-1]}; got {got}")
        a = a.to(v.dtype)
        if self.corpus:
            return self.scale * (v.mean(0) - (a if a.dim() == 1 else a.mean(0))).abs().sum()
        return self.scale * (v - a).abs().sum()


# ---------------------------------------------------------------------- the Gamma loss
class GammaTerms(NamedTuple):
    """The terms of seed 000 eq. (13) per unlabeled example (divided by ``C_2``).

    convex: (B,) ``max_y s(y) - (mu/2) v.phi(y) + (mu/4)||phi(y)||^2`` (eq. 14).
    concave: (B,) ``-max_y s(y) + (mu/2) v.phi(y) - (mu/4)||phi(y)||^2`` (eq. 15), or its
        linearisation at ``guided`` when given.
    quadratic: (B,) ``(mu/2) ||v_j||^2``.
    penalty: scalar ``Gamma(v)``.
    predicted: labels maximising the convex part (eq. 14's argmax).
    guided: the constraint-guided labels (eq. 12 / 15) the concave part is evaluated at.
    """

    convex: Tensor
    concave: Tensor
    quadratic: Tensor
    penalty: Tensor
    predicted: Tensor
    guided: Tensor

    def total(self) -> Tensor:
        """``Gamma(v) + mean_j (convex + concave + quadratic)``: eq. (13) / C_2 without the
        supervised term."""
        return self.penalty + (self.convex + self.concave + self.quadratic).mean()


def _check_features(features: object) -> ConstraintFeatures:
    if not isinstance(features, ConstraintFeatures):
        raise TypeError(f"features must be a ConstraintFeatures; got {type(features).__name__}")
    if not features.binary:
        raise NotImplementedError(
            "the Gamma loss needs 0/1-valued constraint features (||phi||^2 linear in parts, "
            "seed 000 section 3.5); non-binary features need double dynamic programming"
        )
    return features


def _check_v(v: object, b: int) -> Tensor:
    if not isinstance(v, Tensor) or not v.is_floating_point() or v.dim() != 2 or v.shape[0] != b:
        got = (tuple(v.shape), v.dtype) if isinstance(v, Tensor) else type(v).__name__
        raise ValueError(f"v must be a floating tensor of shape (B, d) with B = {b}; got {got}")
    return v


def _augmented(
    potentials: Potentials, v: Tensor, features: ConstraintFeatures, coef_v: float, coef_1: float
) -> tuple[Potentials, Tensor]:
    """``potentials + A^T c`` and ``c . offset`` for ``c = coef_v v + coef_1 1``."""
    c = coef_v * v + coef_1
    extra = features.adjoint(c, potentials)
    aug = like(potentials, [p + e for p, e in zip(as_tuple(potentials), as_tuple(extra))])
    return aug, features.offset_dot(c)


def constraint_guided_argmax(
    structure: Structure,
    potentials: Potentials,
    v: Tensor,
    features: ConstraintFeatures,
    mu: float,
    lengths: Optional[Tensor] = None,
) -> Tensor:
    """Constraint-guided inference (seed 000 eq. 12 = the argmax of eq. 15), no autograd.

    ``argmax_y s(y) - (mu/4) ||v - phi(y)||^2 = argmax_y s(y) + (mu/2) v.phi(y) - (mu/4) ||phi(y)||^2``
    for binary ``phi``. Returns labels.
    """
    check_structure(structure)
    mu = check_positive(mu, "mu")
    features = _check_features(features)
    potentials, lengths = structure.check(potentials, lengths)
    v = _check_v(v, lengths.shape[0])
    with torch.no_grad():
        aug, _ = _augmented(potentials, v.detach(), features, mu / 2, -mu / 4)
        labels, _ = structure.argmax(aug, lengths)
    return labels


class QuadraticPenaltyGammaLoss(nn.Module):
    """Gamma-SSVM constraint term of seed 000 eq. (13): DC decomposition with auxiliary ``v_j``.

    Args:
        mu: quadratic-penalty weight, > 0 (seed 000 eq. 7).
        penalty: the convex penalty ``Gamma`` (:class:`HingePenalty`, :class:`L1Penalty` or any
            module ``penalty(v, target=None) -> scalar``).

    Raises:
        ValueError: if ``mu <= 0``.
    """

    def __init__(self, mu: float, penalty: nn.Module) -> None:
        super().__init__()
        self.mu = check_positive(mu, "mu")
        if not isinstance(penalty, nn.Module):
            raise TypeError(f"penalty must be an nn.Module (e.g. L1Penalty); got {type(penalty).__name__}")
        self.penalty = penalty

    def extra_repr(self) -> str:
        return f"mu={self.mu}"

    def terms(
        self,
        structure: Structure,
        potentials: Potentials,
        v: Tensor,
        features: ConstraintFeatures,
        lengths: Optional[Tensor] = None,
        linearize_at: Optional[Tensor] = None,
        penalty_target: Optional[Tensor] = None,
    ) -> GammaTerms:
        """The convex, concave, quadratic and penalty terms of eq. (13), separately.

        Args:
            structure: any structure.
            potentials: potentials of the unlabeled examples.
            v: auxiliary vectors ``v_j``.
            features: the constraint feature map (binary).
            lengths: (B,) lengths.
            linearize_at: labels at which the concave part is linearised (CCCP, Appendix eq.
                21-22; typically :func:`constraint_guided_argmax` at the current iterate).
                Default: the exact concave part (max over all structures).
            penalty_target: passed to ``penalty`` (e.g. per-example ``a_j`` of :class:`L1Penalty`).

        Shape:
            v: (B, d); linearize_at: (B, *label_shape).
        """
        check_structure(structure)
        features = _check_features(features)
        potentials, lengths = structure.check(potentials, lengths)
        v = _check_v(v, lengths.shape[0])
        mu = self.mu
        aug_convex, const_convex = _augmented(potentials, v, features, -mu / 2, mu / 4)
        predicted, convex = structure.argmax(aug_convex, lengths)
        convex = convex + const_convex
        aug_concave, const_concave = _augmented(potentials, v, features, mu / 2, -mu / 4)
        if linearize_at is None:
            guided, concave = structure.argmax(aug_concave, lengths)
        else:
            guided = structure.check_labels(linearize_at, lengths, "linearize_at")
            concave = structure.score(aug_concave, guided, lengths)
        concave = -(concave + const_concave)
        if structure.validate:
            self._check_binary(structure, features, predicted, lengths)
            self._check_binary(structure, features, guided, lengths)
        quadratic = 0.5 * mu * (v * v).sum(1)
        penalty = self.penalty(v, penalty_target) if penalty_target is not None else self.penalty(v)
        return GammaTerms(convex, concave, quadratic, penalty, predicted, guided)

    @staticmethod
    def _check_binary(
        structure: Structure, features: ConstraintFeatures, labels: Tensor, lengths: Tensor
    ) -> None:
        with torch.no_grad():
            phi = features.phi(structure.to_parts(labels, lengths))
            if not bool(((phi == 0) | (phi == 1)).all()):
                raise ValueError(
                    "features must be 0/1-valued on every structure (seed 000 section 3.5); got "
                    f"phi values in [{float(phi.min())}, {float(phi.max())}] on a decoded structure"
                )

    def forward(
        self,
        structure: Structure,
        potentials: Potentials,
        v: Tensor,
        features: ConstraintFeatures,
        lengths: Optional[Tensor] = None,
        linearize_at: Optional[Tensor] = None,
        penalty_target: Optional[Tensor] = None,
    ) -> Tensor:
        """``Gamma(v) + mean_j [(mu/2)||v_j||^2 + convex_j + concave_j]`` (eq. 13 / C_2).

        Arguments as :meth:`terms`. Returns a scalar.
        """
        return self.terms(
            structure, potentials, v, features, lengths, linearize_at, penalty_target
        ).total()


class ConstraintPenalty(nn.Module):
    """``Gamma(phi(parts))`` for soft constraints, on given labels or on marginals.

    With ``labels`` the penalty of those structures (e.g. a decoded prediction, seed 000 eq. 4-5
    as written); without, the penalty of the expected features ``phi(marginals)`` (differentiable
    w.r.t. the potentials; expectation constraints as in seed 004 / posterior regularisation).

    Args:
        penalty: the convex penalty ``Gamma`` (:class:`HingePenalty`, :class:`L1Penalty`, ...).
    """

    def __init__(self, penalty: nn.Module) -> None:
        super().__init__()
        if not isinstance(penalty, nn.Module):
            raise TypeError(f"penalty must be an nn.Module; got {type(penalty).__name__}")
        self.penalty = penalty

    def forward(
        self,
        structure: Structure,
        potentials: Potentials,
        features: ConstraintFeatures,
        lengths: Optional[Tensor] = None,
        labels: Optional[Tensor] = None,
        penalty_target: Optional[Tensor] = None,
    ) -> Tensor:
        """Penalty of the constraint values. Returns a scalar.

        Shape:
            potentials: (B, *event_shape); labels: (B, *label_shape).
        """
        check_structure(structure)
        if not isinstance(features, ConstraintFeatures):
            raise TypeError(f"features must be a ConstraintFeatures; got {type(features).__name__}")
        potentials, lengths = structure.check(potentials, lengths)
        if labels is None:
            parts = structure.marginals(potentials, lengths, create_graph=True)
        else:
            labels = structure.check_labels(labels, lengths, "labels")
            parts = structure.to_parts(labels, lengths)
        phi = features.phi(parts)
        return self.penalty(phi, penalty_target) if penalty_target is not None else self.penalty(phi)
