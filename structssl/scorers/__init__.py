"""Scorers: ``nn.Module``s that turn inputs into potentials (they own the parameters).

:class:`LinearChainScorer`   (B, N, C, C) for :class:`~structssl.structures.LinearChain`
:class:`MultiClassScorer`    (B, C) for :class:`~structssl.structures.MultiClass`
:class:`MultiLabelScorer`    ``MultiLabelPotentials`` for ``PairwiseMultiLabel``
:class:`CKYScorer`           ``CKYPotentials`` for ``CKY``
:class:`TwoViewScorer`       both views' potentials and their sum (co-training)
:class:`NeuralChainScorer`   (B, N, C, C) from any encoder, e.g. :class:`BiLSTMEncoder`
:class:`SemiMarkovScorer`    (B, N, K, C, C) segment potentials for :class:`~structssl.structures.SemiMarkov`

The linear scorers compute ``<w, Psi(x, y)>`` part by part, so ``structure.score(scorer(x), y)``
is the joint-feature score; they read sparse feature indices (0 = padding), word ids or dense
inputs (:class:`LinearInputs`). ``scorer.weight_norm_squared()`` is the ``||w||^2`` of the SVM
objectives (every parameter, biases included unless ``include_bias=False``; see
:mod:`structssl.scorers.base`). Initialisation is deterministic given the torch seed (zeros by
default for the linear scorers). This package imports only torch, the standard library and the
torch-only structures.
"""

from __future__ import annotations

from structssl.scorers.base import LinearInputs, Scorer, weight_norm_squared
from structssl.scorers.chain import ChainHead, LinearChainScorer
from structssl.scorers.cky import CKYScorer, grammar_masks
from structssl.scorers.multiclass import MultiClassScorer
from structssl.scorers.multilabel import MultiLabelScorer
from structssl.scorers.neural import BiLSTMEncoder, NeuralChainScorer
from structssl.scorers.semi_markov import SemiMarkovScorer
from structssl.scorers.two_view import TwoViewPotentials, TwoViewScorer

__all__ = [
    "Scorer",
    "LinearInputs",
    "weight_norm_squared",
    "ChainHead",
    "LinearChainScorer",
    "MultiClassScorer",
    "MultiLabelScorer",
    "CKYScorer",
    "grammar_masks",
    "TwoViewScorer",
    "TwoViewPotentials",
    "BiLSTMEncoder",
    "NeuralChainScorer",
    "SemiMarkovScorer",
]
