"""Structures: stateless batched dynamic programs over potentials (see :class:`Structure`)."""

from structssl.structures.base import Structure
from structssl.structures.cky import CKY, CKYPotentials
from structssl.structures.dependency import DependencyTree
from structssl.structures.grammar_cky import GrammarCKY
from structssl.structures.linear_chain import ChainPotentials, LinearChain, bio_allowed_transitions
from structssl.structures.multiclass import MultiClass
from structssl.structures.semi_markov import SegmentTags, SemiMarkov
from structssl.structures.torch_struct import TorchStructAdapter
from structssl.structures.multilabel import (
    DualDecompositionResult,
    MultiLabelPotentials,
    PairwiseMultiLabel,
    StarPotentials,
    star_argmax,
    star_inside,
    star_log_partition,
    star_potentials,
    star_scores,
)

__all__ = [
    "Structure",
    "MultiClass",
    "LinearChain",
    "ChainPotentials",
    "bio_allowed_transitions",
    "SemiMarkov",
    "SegmentTags",
    "DependencyTree",
    "TorchStructAdapter",
    "CKY",
    "CKYPotentials",
    "GrammarCKY",
    "PairwiseMultiLabel",
    "MultiLabelPotentials",
    "StarPotentials",
    "DualDecompositionResult",
    "star_potentials",
    "star_inside",
    "star_log_partition",
    "star_argmax",
    "star_scores",
]
