"""Structures: stateless batched dynamic programs over potentials (see :class:`Structure`)."""

from structssl.structures.base import Structure
from structssl.structures.linear_chain import LinearChain, bio_allowed_transitions
from structssl.structures.multiclass import MultiClass

__all__ = ["Structure", "MultiClass", "LinearChain", "bio_allowed_transitions"]
