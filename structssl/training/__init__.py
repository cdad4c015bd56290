"""Training procedures (Lightning modules) and annealing callbacks.

=======================================  ===================================================
:class:`SupervisedModule`                any labeled loss (CRF NLL, hinge, nabla-SVM, ...)
:class:`TransductiveModule`              nabla-TSVM: labeled nabla-SVM + C_u x unlabeled u
:class:`CoTrainingModule`                nabla-coSVM: two views, peer pseudo-labels
:class:`CCCPModule`                      Gamma-SSVM by the convex-concave procedure with
                                         prior-knowledge constraints (seed 000)
:class:`LabelSwitchingModule`            SSVM + greedy label switching under constraints,
                                         C_u annealed by :class:`LabelSwitchingAnnealing`
                                         (seed 003)
:class:`CoDLModule`                      constraint-driven learning (Chang et al. 2007), the
                                         baseline of seeds 000 and 003
:class:`CompositeLikelihoodModule`       composite likelihood + corpus-constrained dual
                                         decomposition (seed 004); :class:`TSVMPlusModule`,
                                         :class:`CoDLPlusModule` on the same inference
:class:`GeometricAnnealing` and presets  ``CBarrier``, ``CuRamp``, ``GeometricCuSchedule``,
                                         ``RhoContinuation``; :class:`SupervisedWarmStart`
=======================================  ===================================================

See :mod:`structssl.training.modules` for the objective and its scaling, the optimisers and the
batch format, and :mod:`structssl.training.callbacks` for the schedules.
"""

from __future__ import annotations

from structssl.training.callbacks import (
    CBarrier,
    CuRamp,
    GeometricAnnealing,
    GeometricCuSchedule,
    RhoContinuation,
    SupervisedWarmStart,
)
from structssl.training.cccp import CCCPModule
from structssl.training.codl import CoDLModule
from structssl.training.composite import (
    CoDLPlusModule,
    CompositeLikelihoodModule,
    ConstrainedSelfLabelingModule,
    TSVMPlusModule,
)
from structssl.training.label_switching import LabelSwitchingAnnealing, LabelSwitchingModule
from structssl.training.cotraining import CoTrainingModule
from structssl.training.modules import ObjectiveTerms, StructuredModule, SupervisedModule
from structssl.training.transductive import SafeguardedModule, TransductiveModule

__all__ = [
    "StructuredModule",
    "SupervisedModule",
    "SafeguardedModule",
    "TransductiveModule",
    "CoTrainingModule",
    "CCCPModule",
    "LabelSwitchingModule",
    "LabelSwitchingAnnealing",
    "CoDLModule",
    "ConstrainedSelfLabelingModule",
    "CompositeLikelihoodModule",
    "TSVMPlusModule",
    "CoDLPlusModule",
    "ObjectiveTerms",
    "GeometricAnnealing",
    "CBarrier",
    "CuRamp",
    "GeometricCuSchedule",
    "RhoContinuation",
    "SupervisedWarmStart",
]
