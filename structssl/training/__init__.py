"""Training procedures (Lightning modules) and annealing callbacks.

=======================================  ===================================================
:class:`SupervisedModule`                any labeled loss (CRF NLL, hinge, nabla-SVM, ...)
:class:`TransductiveModule`              nabla-TSVM: labeled nabla-SVM + C_u x unlabeled u
:class:`CoTrainingModule`                nabla-coSVM: two views, peer pseudo-labels
:class:`GeometricAnnealing` and presets  ``CBarrier``, ``CuRamp``, ``GeometricCuSchedule``,
                                         ``RhoContinuation``
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
)
from structssl.training.modules import (
    CoTrainingModule,
    ObjectiveTerms,
    StructuredModule,
    SupervisedModule,
    TransductiveModule,
)

__all__ = [
    "StructuredModule",
    "SupervisedModule",
    "TransductiveModule",
    "CoTrainingModule",
    "ObjectiveTerms",
    "GeometricAnnealing",
    "CBarrier",
    "CuRamp",
    "GeometricCuSchedule",
    "RhoContinuation",
]
