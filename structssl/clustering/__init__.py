"""Supervised clustering of streaming data (thesis, seed 001, chapter 8): email batch detection.

- :mod:`~structssl.clustering.structure`: :class:`SequentialClustering` (the linear-time
  decoder of Table 8.2, Decoding Strategy 8.1, their loss-augmented variants, the joint feature
  map of eq. 8.1 through ``to_parts``, ``Delta_total``);
- :mod:`~structssl.clustering.decoders`: LP-relaxed correlation clustering (HiGHS) and greedy
  agglomerative clustering;
- :mod:`~structssl.clustering.training`: the sequential SVM (OP 8.2), its nabla-style
  differentiable loss, the compact LP-SVM (OP 8.1) and the pairwise baseline;
- :mod:`~structssl.clustering.stream`: messages, a synthetic batch stream, a ``.eml`` / mbox
  reader, cross-validation windows;
- :mod:`~structssl.clustering.features`: pairwise message features.
"""

from __future__ import annotations

from structssl.clustering.decoders import LPResult, greedy_agglomerative, lp_decode, triangle_constraints
from structssl.clustering.features import FEATURE_NAMES, PairwiseFeatures
from structssl.clustering.stream import (
    Message,
    batch_windows,
    cluster_labels,
    read_mail,
    synthetic_stream,
    cross_validation_windows,
)
from structssl.clustering.structure import (
    Reassignments,
    SequentialClustering,
    canonical_labels,
    labels_from_adjacency,
    pair_mask,
)
from structssl.clustering.training import (
    CompactLPSVM,
    NablaSequentialLoss,
    NablaSequentialSVM,
    PairwiseSVM,
    SequentialSVM,
    collate_windows,
    joint_features,
    similarities,
)

__all__ = [
    "SequentialClustering",
    "Reassignments",
    "canonical_labels",
    "labels_from_adjacency",
    "pair_mask",
    "LPResult",
    "lp_decode",
    "greedy_agglomerative",
    "triangle_constraints",
    "Message",
    "synthetic_stream",
    "read_mail",
    "cluster_labels",
    "batch_windows",
    "cross_validation_windows",
    "PairwiseFeatures",
    "FEATURE_NAMES",
    "collate_windows",
    "joint_features",
    "similarities",
    "NablaSequentialLoss",
    "SequentialSVM",
    "NablaSequentialSVM",
    "CompactLPSVM",
    "PairwiseSVM",
]
