"""Losses: parameter-free ``nn.Module``s returning a value to minimise.

Every loss is called as ``loss(structure, potentials, target, lengths, ...)`` with any
:class:`~structssl.structures.base.Structure`, and trains any scorer by autograd. See
``docs/losses.md`` for the equations each one implements and the modelling choices.
"""

from __future__ import annotations

from structssl.losses.functional import (
    margin_hinge,
    huber_hinge,
    huber_hinge_grad,
    smax,
    smax_grad,
    unlabeled_loss,
    unlabeled_loss_grad,
)
from structssl.losses.gamma import (
    ConstraintFeatures,
    ConstraintPenalty,
    GammaTerms,
    HingePenalty,
    L1Penalty,
    LinearConstraintFeatures,
    NodeFeatures,
    PartsFeatures,
    QuadraticPenaltyGammaLoss,
    constraint_guided_argmax,
)
from structssl.losses.hinge import StructuredHingeLoss
from structssl.losses.likelihood import (
    CompositeLikelihoodLoss,
    CRFNLLLoss,
    Decomposition,
    Factors,
    StarTrees,
    WholeStructure,
)
from structssl.losses.nabla import NablaCoSVMLoss, NablaSVMLoss, NablaTSVMLoss, Violators

__all__ = [
    "margin_hinge",
    "huber_hinge",
    "huber_hinge_grad",
    "unlabeled_loss",
    "unlabeled_loss_grad",
    "smax",
    "smax_grad",
    "StructuredHingeLoss",
    "NablaSVMLoss",
    "NablaTSVMLoss",
    "NablaCoSVMLoss",
    "Violators",
    "CRFNLLLoss",
    "CompositeLikelihoodLoss",
    "Decomposition",
    "StarTrees",
    "Factors",
    "WholeStructure",
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
