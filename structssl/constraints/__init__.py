"""Declarative prior-knowledge constraints (seed 000 section 5.1, seed 003 section 4.1.1).

A :class:`Constraint` is a piece of domain knowledge about the labels of an input, e.g. "the
word *CA* is a location", "a citation starts with author or editor", "segment boundaries occur
at punctuation", "each field is one consecutive run", or, at corpus level, "30% of the tokens
are AUTHOR". Constraints are plain Python objects built from label *names*; :meth:`bind`
resolves the names against a task's label list (unknown names raise ``ValueError``). A
:class:`ConstraintSet` groups them and is constructible from YAML through jsonargparse::

    constraints:
      class_path: structssl.constraints.ConstraintSet
      init_args:
        labels: [author, booktitle, date, ...]        # optional here, or bind() later
        constraints:
          - class_path: structssl.constraints.AllowedFirst
            init_args: {labels: [author, editor]}
          - class_path: structssl.constraints.WordLabels
            init_args: {words: [ca, australia], labels: [location]}
          - class_path: structssl.constraints.AtMostOnce
            init_args: {label: author, weight: 2.0}
          - class_path: structssl.constraints.LabelProportion
            init_args: {label: author, target: 0.3}

Every constraint offers, batched over examples (labels (B, N) long, lengths (B,), tokens a
list of B token lists; padded positions are ignored):

``counts(labels, lengths, tokens) -> (B, d)``
    ``phi(x, y)``: the feature map of the constraint on explicit labelings, linear or not
    (e.g. the number of runs of a label, the number of transitions on non-punctuation).
``penalty_from_counts(counts) -> (...)``
    ``Gamma`` as a function of counts (last dimension ``d``): hinge for inequalities, L1 to the
    target for expectations, times ``weight``. For **instance-level** constraints it is applied
    per example. For **corpus-level** constraints it is applied to counts *summed over the
    corpus* (ratios are formed from the sums, e.g. proportion = sum(#author) / sum(#tokens)).
    Because the corpus penalty depends on the corpus only through the summed counts, a local
    search keeps ``totals = counts.sum(0)`` and scores a move that changes example ``i`` from
    ``y`` to ``y'`` as ``penalty_from_counts(totals - counts_i(y) + counts_i(y'))`` in O(d);
    many candidate moves can be scored at once by passing totals of shape (K, d) (label
    switching, seed 003, needs exactly this).
``penalty(labels, lengths, tokens)``
    (B,) per example for instance-level constraints; a scalar for corpus-level ones.
``violation(labels, lengths, tokens)``
    a non-negative measure, 0 iff satisfied ((B,) or a scalar as above). ``hard`` constraints
    are to be enforced: searches reject labelings whose violation is positive.
``indicators(labels, lengths, tokens) -> (B, d_ind)``
    the binary encoding of seed 000 section 5.1 (1 = satisfied): one dimension per position for
    position-local constraints (padded positions are 1), one dimension for global ones. Only
    instance-level constraints have it.

Where ``phi`` is linear in the parts of a :class:`~structssl.structures.linear_chain.LinearChain`
(``linear_counts`` / ``linear_indicators``), :meth:`Constraint.features` and
:meth:`Constraint.indicator_features` return a
:class:`~structssl.losses.gamma.ConstraintFeatures` whose ``phi(parts(y))`` equals
``counts(y)`` / ``indicators(y)``; it folds into potentials (``adjoint``) for constrained and
constraint-guided decoding (:func:`~structssl.losses.gamma.constraint_guided_argmax`, the Gamma
loss). Label constraints (must / must not appear, proportions, expected counts) also have
features for :class:`~structssl.structures.multiclass.MultiClass` (``structure="multiclass"``).
The multi-label structure is not covered here.

**Non-linear constraints.** "At most once" and "each field one consecutive run" have counts
that are not affine in the parts with 0/1 values (the run count is linear, but the indicator
``[runs <= 1]`` is not), so they have no binary indicator features. Asking for them raises
``NotImplementedError``; they are handled by :func:`kbest_search`: the linear part of the
objective is decoded k-best (``structure.kbest``), the non-linear term is evaluated on
each of the ``k`` candidates exactly, hard constraints reject violating candidates, and the best
candidate is returned with a certificate: it is the exact optimum whenever its value is at
least the ``k``-th linear score plus an upper bound of the non-linear bonus (the usual
k-best-reranking bound). Uncertified rows are reported, never silently accepted as exact.

**Layout.** :mod:`~structssl.constraints.base` (the :class:`Constraint` protocol),
:mod:`~structssl.constraints.instance` (instance-level constraints),
:mod:`~structssl.constraints.corpus` (corpus-level ratios),
:mod:`~structssl.constraints.corpus_search` (the multiplier searches over a whole corpus for
a ratio with a label-free denominator, used by CCCP's corpus term),
:mod:`~structssl.constraints.constraint_set` (:class:`ConstraintSet`: counts and penalties
together), :mod:`~structssl.constraints.features` (feature maps linear in parts),
:mod:`~structssl.constraints.search` (k-best reranking for the non-linear ones) and
:mod:`~structssl.constraints.labelings` (helpers on labelings). Every public name is importable
from ``structssl.constraints`` (and configs name them so: ``structssl.constraints.WordLabels``).
"""

from structssl.constraints.base import Constraint
from structssl.constraints.constraint_set import ConstraintSet
from structssl.constraints.corpus import ExpectedCount, LabelProportion, TransitionFraction
from structssl.constraints.corpus_search import (
    RatioCorpus,
    RatioPenalty,
    RatioSearch,
    ratio_convex_max,
    ratio_corpus,
    ratio_guided_max,
)
from structssl.constraints.features import ConcatFeatures, PositionFeatures
from structssl.constraints.instance import (
    DEFAULT_PUNCTUATION,
    AllowedFirst,
    AtMostOnce,
    ConsecutiveFields,
    MustAppear,
    MustNotAppear,
    PunctuationTransitions,
    WordLabels,
)
from structssl.constraints.labelings import runs_per_label, transitions_mask
from structssl.constraints.search import SearchResult, kbest_search

__all__ = [
    "DEFAULT_PUNCTUATION",
    "Constraint",
    "MustAppear",
    "MustNotAppear",
    "AtMostOnce",
    "WordLabels",
    "AllowedFirst",
    "PunctuationTransitions",
    "ConsecutiveFields",
    "LabelProportion",
    "ExpectedCount",
    "TransitionFraction",
    "RatioPenalty",
    "RatioCorpus",
    "RatioSearch",
    "ratio_corpus",
    "ratio_convex_max",
    "ratio_guided_max",
    "ConstraintSet",
    "PositionFeatures",
    "ConcatFeatures",
    "SearchResult",
    "kbest_search",
    "runs_per_label",
    "transitions_mask",
]
