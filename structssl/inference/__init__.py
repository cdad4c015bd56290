"""Inference beyond one example's exact decoder: searches over corpora and constraints.

- :mod:`structssl.inference.dual_decomposition`: joint constrained inference over a corpus
  (master-slave dual decomposition per example, corpus multipliers; seed 004 section 4.2).
- :mod:`structssl.inference.multilabel_constraints`: label distribution / correlation
  constraints for multi-label outputs (seed 004 section 5).
- :mod:`structssl.inference.label_switching`: greedy label switching under instance- and
  corpus-level constraints (seed 003 Algorithm 2).
"""

from __future__ import annotations
