"""QP and perceptron baselines for linear structured models (thesis chapters 5, 6, 7.4.1).

=======================================  ====================================================
object                                   what
=======================================  ====================================================
:class:`ChainFeatureMap`                 closed-form joint feature map of linear chains
:class:`ScorerFeatureMap`                the feature map of any linear scorer, any structure
:class:`FeatureMapScorer`                a feature map's ``w`` as a scorer, for the procedures
:func:`hinge_objective`                  the n-slack structured hinge primal (all learners)
:class:`CuttingPlaneSSVM`                seed 002: n-slack / 1-slack, margin / slack rescaling
:class:`StructuredPerceptron`            Collins (2002), averaged; thesis Table 5.1
:class:`CoPerceptron`                    thesis Table 5.2 (two views)
:class:`CoSVM`                           thesis chapter 6 (Tables 6.1, 6.2), slack rescaling
=======================================  ====================================================

Every learner has ``fit(...)``, ``predict(inputs, lengths)`` and ``objective(inputs, labels,
lengths)``. Inputs are the tensors of :mod:`structssl.data` (dense (B, N, D) or sparse feature
indices (B, N, K), gold labels, lengths). QPs are solved by ``qpsolvers`` (DAQP).
``python -m structssl.baselines --help`` runs a baseline from the command line.
"""

from __future__ import annotations

from structssl.baselines.base import Baseline, Clock, TwoViewBaseline
from structssl.baselines.cosvm import CoSVM
from structssl.baselines.cutting_plane import FORMULATIONS, CuttingPlaneSSVM
from structssl.baselines.feature_maps import (
    ChainFeatureMap,
    FeatureMapScorer,
    JointFeatureMap,
    ScorerFeatureMap,
)
from structssl.baselines.oracle import (
    hinge_objective,
    separate,
    solve_blocks_qp,
    solve_box_qp,
    solve_primal_qp,
)
from structssl.baselines.perceptron import CoPerceptron, StructuredPerceptron
from structssl.baselines.synthetic import HMMChain, hmm_chain

__all__ = [
    "Baseline",
    "TwoViewBaseline",
    "Clock",
    "JointFeatureMap",
    "ChainFeatureMap",
    "ScorerFeatureMap",
    "FeatureMapScorer",
    "hinge_objective",
    "separate",
    "solve_box_qp",
    "solve_blocks_qp",
    "solve_primal_qp",
    "FORMULATIONS",
    "CuttingPlaneSSVM",
    "StructuredPerceptron",
    "CoPerceptron",
    "CoSVM",
    "HMMChain",
    "hmm_chain",
]
