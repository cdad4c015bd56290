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
objective is decoded by list Viterbi (``structure.kbest``), the non-linear term is evaluated on
each of the ``k`` candidates exactly, hard constraints reject violating candidates, and the best
candidate is returned with a certificate: it is the exact optimum whenever its value is at
least the ``k``-th linear score plus an upper bound of the non-linear bonus (the usual
k-best-reranking bound). Uncertified rows are reported, never silently accepted as exact.
"""

from __future__ import annotations

import copy
import re
from typing import Callable, Literal, NamedTuple, Optional, Sequence, Union

import torch
from torch import Tensor

from structssl.losses.gamma import ConstraintFeatures, LinearConstraintFeatures
from structssl.structures.base import Potentials, Structure, as_tuple, like

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
    "ConstraintSet",
    "PositionFeatures",
    "ConcatFeatures",
    "SearchResult",
    "kbest_search",
    "runs_per_label",
    "transitions_mask",
]

LabelSpec = Union[str, int]
Tokens = Sequence[Sequence[str]]

#: Tokens at which a segment boundary is allowed by :class:`PunctuationTransitions`.
DEFAULT_PUNCTUATION: tuple[str, ...] = (
    ".", ",", ";", ":", "?", "!", "(", ")", "[", "]", "{", "}", '"', "'", "``", "''", "-", "--",
    "/", "\n", "<NEWLINE>",
)  # fmt: skip


# ---------------------------------------------------------------------- helpers on labelings
def _valid(lengths: Tensor, n: int) -> Tensor:
    return torch.arange(n, device=lengths.device).view(1, n) < lengths.view(-1, 1)  # (B, N)


def runs_per_label(labels: Tensor, lengths: Tensor, num_labels: int) -> Tensor:
    """Number of maximal runs of each label per example.

    Shape:
        labels: (B, N) long; lengths: (B,). Returns (B, C) long.
    """
    _check_batch(labels, lengths, None, False, num_labels)
    b, n = labels.shape
    valid = _valid(lengths, n)
    prev = torch.cat([torch.full_like(labels[:, :1], -1), labels[:, :-1]], dim=1)
    start = valid & (labels != prev)  # (B, N)
    out = torch.zeros(b, num_labels, dtype=torch.long, device=labels.device)
    return out.scatter_add_(1, labels.clamp(0, num_labels - 1), start.long())


def transitions_mask(labels: Tensor, lengths: Tensor) -> Tensor:
    """``[t >= 1, t < length, y_t != y_{t-1}]``: a label change between positions t-1 and t.

    Shape:
        labels: (B, N) long; lengths: (B,). Returns (B, N) bool (column 0 is False).
    """
    valid = _valid(lengths, labels.shape[1])
    change = torch.zeros_like(valid)
    change[:, 1:] = labels[:, 1:] != labels[:, :-1]
    return change & valid


def _check_batch(
    labels: Tensor,
    lengths: Tensor,
    tokens: Optional[Tokens],
    needs_tokens: bool,
    num_labels: Optional[int] = None,
) -> None:
    if not isinstance(labels, Tensor) or labels.dim() != 2 or labels.dtype != torch.long:
        got = (tuple(labels.shape), labels.dtype) if isinstance(labels, Tensor) else type(labels).__name__
        raise ValueError(f"labels must be a long tensor of shape (B, N); got {got}")
    b, n = labels.shape
    if not isinstance(lengths, Tensor) or lengths.shape != (b,):
        got = tuple(lengths.shape) if isinstance(lengths, Tensor) else type(lengths).__name__
        raise ValueError(f"lengths must have shape (B,) = ({b},); got {got}")
    if labels.is_meta or lengths.is_meta:
        raise ValueError("labels and lengths must hold data on a real device; got a meta tensor")
    if lengths.device != labels.device:
        raise ValueError(
            f"lengths must be on the device of labels ({labels.device}); got {lengths.device}"
        )
    if lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise ValueError(f"lengths must have an integer dtype; got {lengths.dtype}")
    if bool((lengths < 0).any()) or bool((lengths > n).any()):
        raise ValueError(f"lengths must lie in [0, N] = [0, {n}]; got {lengths.tolist()}")
    if num_labels is not None:
        # out-of-range ids are an error, never clamped into another label's count
        bad = _valid(lengths, n) & ((labels < 0) | (labels >= num_labels))
        if bool(bad.any()):
            e, t = bad.nonzero()[0].tolist()
            raise ValueError(
                f"labels must be label ids in [0, {num_labels}) at positions < length; example "
                f"{e}, position {t} has {int(labels[e, t])}"
            )
    if needs_tokens:
        _check_tokens(tokens, lengths)


def _check_tokens(tokens: Optional[Tokens], lengths: Tensor) -> None:
    if tokens is None:
        raise ValueError("tokens are required by this constraint (a list of B token lists); got None")
    if len(tokens) != lengths.shape[0]:
        raise ValueError(f"tokens must hold B = {lengths.shape[0]} token lists; got {len(tokens)}")
    for i, (toks, length) in enumerate(zip(tokens, lengths.tolist())):
        if len(toks) < length:
            raise ValueError(f"tokens[{i}] has {len(toks)} tokens, fewer than its length {length}")


def _token_mask(tokens: Tokens, n: int, predicate: Callable[[str], bool], device: torch.device) -> Tensor:
    """(B, N) bool ``predicate(token)`` (False beyond each token list)."""
    rows = [[predicate(tok) for tok in toks[:n]] + [False] * (n - min(len(toks), n)) for toks in tokens]
    return torch.tensor(rows, dtype=torch.bool, device=device).view(len(tokens), n)


def _label_mask(indices: Sequence[int], num_labels: int, device: torch.device) -> Tensor:
    mask = torch.zeros(num_labels, dtype=torch.bool, device=device)
    mask[list(indices)] = True
    return mask


def _check_weight(weight: float) -> float:
    if not isinstance(weight, (int, float)) or isinstance(weight, bool) or not weight >= 0:
        raise ValueError(f"weight must be a number >= 0; got {weight!r}")
    return float(weight)


def _check_label_list(labels: object, name: str) -> list[LabelSpec]:
    if isinstance(labels, (str, int)):
        return [labels]
    if not isinstance(labels, (list, tuple)) or len(labels) == 0:
        raise ValueError(f"{name} must be a non-empty list of label names; got {labels!r}")
    return list(labels)


# ---------------------------------------------------------------------- position features
class PositionFeatures(ConstraintFeatures):
    """One constraint dimension per chain position: ``phi_t(y) = offset_t + <W_t, parts_t(y)>``.

    A compact :class:`~structssl.losses.gamma.ConstraintFeatures` for position-local binary
    indicators (seed 000 section 5.1's encoding), O(B N C^2) instead of the O(B N^2 C^2) of a
    dense :class:`~structssl.losses.gamma.LinearConstraintFeatures`.

    Args:
        weights: ``W`` (B, N, C, C), the per-position edge weights.
        offset: (B, N) constant part.
        binary: whether phi is 0/1 on every structure.

    Shape:
        phi(parts): (B, N); adjoint(v): v (B, N) -> (B, N, C, C).
    """

    def __init__(self, weights: Tensor, offset: Tensor, binary: bool = True) -> None:
        if not isinstance(weights, Tensor) or weights.dim() != 4:
            got = tuple(weights.shape) if isinstance(weights, Tensor) else type(weights).__name__
            raise ValueError(f"weights must have shape (B, N, C, C); got {got}")
        if not isinstance(offset, Tensor) or offset.shape != weights.shape[:2]:
            got = tuple(offset.shape) if isinstance(offset, Tensor) else type(offset).__name__
            raise ValueError(f"offset must have shape (B, N) = {tuple(weights.shape[:2])}; got {got}")
        self.weights = weights
        self.offset = offset
        self.num_constraints = int(weights.shape[1])
        self.binary = bool(binary)

    def phi(self, parts: Potentials) -> Tensor:
        assert isinstance(parts, Tensor) and parts.dim() == 4
        w = self.weights.to(parts.dtype) if parts.is_floating_point() else self.weights
        return (w * parts.to(w.dtype)).sum((2, 3)) + self.offset.to(w.dtype)

    def adjoint(self, v: Tensor, potentials: Potentials) -> Potentials:
        if not isinstance(potentials, Tensor) or potentials.dim() != 4:
            raise NotImplementedError("PositionFeatures need LinearChain potentials (B, N, C, C)")
        if v.shape[1] != self.num_constraints:
            raise ValueError(f"v must have d = {self.num_constraints} entries; got {v.shape[1]}")
        return (v.view(v.shape[0], -1, 1, 1).to(potentials.dtype) * self.weights.to(potentials.dtype))

    def offset_dot(self, v: Tensor) -> Tensor:
        return (v * self.offset.to(v.dtype)).sum(-1)


class ConcatFeatures(ConstraintFeatures):
    """Several feature maps side by side: ``phi = [phi_1, phi_2, ...]`` (d = sum of the d_i).

    Args:
        parts: the feature maps (each with ``num_constraints``); binary iff all are.
    """

    def __init__(self, parts: Sequence[ConstraintFeatures]) -> None:
        if len(parts) == 0:
            raise ValueError("parts must hold at least one ConstraintFeatures; got none")
        for i, p in enumerate(parts):
            if not isinstance(p, ConstraintFeatures):
                raise TypeError(f"parts[{i}] must be a ConstraintFeatures; got {type(p).__name__}")
        self.parts = list(parts)
        self.sizes = [int(getattr(p, "num_constraints")) for p in self.parts]
        self.num_constraints = sum(self.sizes)
        self.binary = all(p.binary for p in self.parts)

    def phi(self, parts: Potentials) -> Tensor:
        return torch.cat([p.phi(parts) for p in self.parts], dim=1)

    def adjoint(self, v: Tensor, potentials: Potentials) -> Potentials:
        if v.shape[1] != self.num_constraints:
            raise ValueError(f"v must have d = {self.num_constraints} entries; got {v.shape[1]}")
        total: Optional[list[Tensor]] = None
        for p, chunk in zip(self.parts, v.split(self.sizes, dim=1)):
            extra = as_tuple(p.adjoint(chunk, potentials))
            total = list(extra) if total is None else [a + e for a, e in zip(total, extra)]
        assert total is not None
        return like(potentials, total)

    def offset_dot(self, v: Tensor) -> Tensor:
        return sum(
            (p.offset_dot(chunk) for p, chunk in zip(self.parts, v.split(self.sizes, dim=1))),
            torch.zeros(v.shape[0], dtype=v.dtype, device=v.device),
        )


# ---------------------------------------------------------------------- base class
class Constraint:
    """A piece of prior knowledge about labelings (see the module docstring for the protocol).

    Args:
        hard: whether the constraint must hold (searches reject violating labelings); soft
            constraints are penalised by :meth:`penalty`.
        weight: multiplies the penalty (``r`` of seed 003), >= 0.
        name: a display name (default: the class name and its labels).

    Subclasses set ``level`` (``"instance"`` or ``"corpus"``), ``num_counts``, ``linear_counts``,
    ``linear_indicators``, ``needs_tokens`` and implement :meth:`_counts`,
    :meth:`penalty_from_counts`, :meth:`violation_from_counts` (and, where linear,
    :meth:`_count_node_weights` / :meth:`_count_weights` and :meth:`_indicator_weights`).
    """

    level: Literal["instance", "corpus"] = "instance"
    #: d of :meth:`counts`
    num_counts: int = 1
    #: counts affine in LinearChain parts (features() available)
    linear_counts: bool = True
    #: indicators affine in LinearChain parts (indicator_features() available)
    linear_indicators: bool = False
    #: indicators are one per position (else one global dimension)
    positionwise: bool = False
    #: counts/indicators depend on the tokens
    needs_tokens: bool = False

    def __init__(self, hard: bool = False, weight: float = 1.0, name: Optional[str] = None) -> None:
        if not isinstance(hard, bool):
            raise TypeError(f"hard must be a bool; got {type(hard).__name__}")
        self.hard = hard
        self.weight = _check_weight(weight)
        self._name = name
        self.label_names: Optional[tuple[str, ...]] = None

    # -- labels
    def _label_specs(self) -> list[LabelSpec]:
        """The label specs (names or indices) this constraint refers to."""
        return []

    @property
    def name(self) -> str:
        if self._name is not None:
            return self._name
        specs = self._label_specs()
        return f"{type(self).__name__}({', '.join(map(str, specs))})" if specs else type(self).__name__

    @property
    def num_labels(self) -> int:
        if self.label_names is None:
            raise ValueError(f"{self.name} is not bound to a label list; call bind(labels) first")
        return len(self.label_names)

    def bind(self, labels: Sequence[str]) -> "Constraint":
        """A copy with label names resolved against ``labels`` (the task's label list, in index
        order). Integer specs are checked against ``len(labels)``.

        Raises:
            ValueError: an unknown label name or an index out of range.
        """
        names = tuple(labels)
        if len(names) == 0 or not all(isinstance(x, str) for x in names):
            raise ValueError(f"labels must be a non-empty list of label names; got {list(names)!r}")
        out = copy.copy(self)
        out.label_names = names
        out._resolve()
        return out

    def _index(self, spec: LabelSpec) -> int:
        assert self.label_names is not None
        if isinstance(spec, bool):
            raise ValueError(f"{self.name}: a label must be a name or an index; got {spec!r}")
        if isinstance(spec, int):
            if not 0 <= spec < len(self.label_names):
                raise ValueError(
                    f"{self.name}: label index {spec} out of range [0, {len(self.label_names)})"
                )
            return spec
        if spec not in self.label_names:
            raise ValueError(
                f"{self.name}: unknown label {spec!r}; expected one of {list(self.label_names)}"
            )
        return self.label_names.index(spec)

    def _resolve(self) -> None:
        """Resolve label specs into indices (subclasses store them)."""

    def _bound(self) -> None:
        if self.label_names is None:
            raise ValueError(f"{self.name} is not bound to a label list; call bind(labels) first")

    # -- evaluation on explicit labelings
    def counts(self, labels: Tensor, lengths: Tensor, tokens: Optional[Tokens] = None) -> Tensor:
        """``phi(x, y)`` on explicit labelings.

        Shape:
            labels: (B, N) long; lengths: (B,); tokens: B lists of >= length tokens.
            Returns (B, num_counts) float.
        """
        self._bound()
        _check_batch(labels, lengths, tokens, self.needs_tokens, self.num_labels)
        return self._counts(labels, lengths, tokens).to(torch.get_default_dtype())

    def _counts(self, labels: Tensor, lengths: Tensor, tokens: Optional[Tokens]) -> Tensor:
        raise NotImplementedError

    def penalty_from_counts(self, counts: Tensor) -> Tensor:
        """``Gamma`` of counts along the last dimension (corpus level: of summed counts)."""
        raise NotImplementedError

    def violation_from_counts(self, counts: Tensor) -> Tensor:
        """Non-negative violation of counts along the last dimension, 0 iff satisfied."""
        raise NotImplementedError

    def _reduce(self, counts: Tensor) -> Tensor:
        return counts.sum(0) if self.level == "corpus" else counts

    def penalty(self, labels: Tensor, lengths: Tensor, tokens: Optional[Tokens] = None) -> Tensor:
        """Penalty: (B,) per example (instance level) or a scalar (corpus level)."""
        return self.penalty_from_counts(self._reduce(self.counts(labels, lengths, tokens)))

    def violation(self, labels: Tensor, lengths: Tensor, tokens: Optional[Tokens] = None) -> Tensor:
        """Violation measure: (B,) (instance level) or a scalar (corpus level); 0 = satisfied."""
        return self.violation_from_counts(self._reduce(self.counts(labels, lengths, tokens)))

    def indicators(self, labels: Tensor, lengths: Tensor, tokens: Optional[Tokens] = None) -> Tensor:
        """Binary satisfaction indicators of seed 000 section 5.1 (1 = satisfied).

        Shape:
            Returns (B, N) for position-local constraints (padded positions 1), else (B, 1).
        """
        self._bound()
        if self.level != "instance":
            raise NotImplementedError(f"{self.name}: corpus-level constraints have no per-example indicators")
        _check_batch(labels, lengths, tokens, self.needs_tokens, self.num_labels)
        return self._indicators(labels, lengths, tokens).to(torch.get_default_dtype())

    def _indicators(self, labels: Tensor, lengths: Tensor, tokens: Optional[Tokens]) -> Tensor:
        # default: one global dimension, satisfied iff no violation
        return (self.violation_from_counts(self._counts(labels, lengths, tokens).double()) == 0).view(-1, 1)

    # -- feature maps linear in parts
    def features(
        self,
        tokens: Optional[Tokens],
        lengths: Tensor,
        num_labels: Optional[int] = None,
        structure: Literal["chain", "multiclass"] = "chain",
        dtype: Optional[torch.dtype] = None,
    ) -> LinearConstraintFeatures:
        """``counts`` as a feature map affine in the parts: ``phi(parts(y)) == counts(y)``.

        Args:
            tokens: B token lists (needed by word / punctuation constraints).
            lengths: (B,) lengths; the feature map's N is ``int(lengths.max())`` (the
                potentials must be padded to exactly that N).
            num_labels: C (default: the bound label list's size).
            structure: ``"chain"`` (potentials (B, N, C, C)) or ``"multiclass"`` ((B, C)).
            dtype: floating dtype of the weights (default: torch's default).

        Raises:
            NotImplementedError: counts not linear in parts, or the structure is unsupported.
        """
        self._bound()
        c = self._check_num_labels(num_labels)
        dtype = dtype or torch.get_default_dtype()
        if not self.linear_counts:
            raise NotImplementedError(
                f"{self.name}: counts are not linear in the parts; use kbest_search (see the "
                "module docstring)"
            )
        if self.needs_tokens:
            _check_tokens(tokens, lengths)
        n = int(lengths.max()) if lengths.numel() else 0
        valid = _valid(lengths, n)
        if structure == "multiclass":
            node = self._count_node_weights(tokens, lengths, n, c)
            if node is None or n != 1:
                raise NotImplementedError(f"{self.name}: no MultiClass features (needs lengths 1)")
            w, b = node
            return LinearConstraintFeatures(w[:, :, 0].to(dtype), b.to(dtype), binary=False)
        if structure != "chain":
            raise ValueError(f"structure must be 'chain' or 'multiclass'; got {structure!r}")
        node = self._count_node_weights(tokens, lengths, n, c)
        if node is not None:
            w_node, offset = node  # (B, d, N, C), (B, d)
            w = w_node.unsqueeze(3).expand(-1, -1, -1, c, -1)
        else:
            w, offset = self._count_weights(tokens, lengths, n, c)
        w = w * valid.view(valid.shape[0], 1, n, 1, 1)
        return LinearConstraintFeatures(w.to(dtype).contiguous(), offset.to(dtype), binary=False)

    def indicator_features(
        self,
        tokens: Optional[Tokens],
        lengths: Tensor,
        num_labels: Optional[int] = None,
        dtype: Optional[torch.dtype] = None,
    ) -> ConstraintFeatures:
        """``indicators`` as a binary feature map affine in LinearChain parts (seed 000's phi).

        Raises:
            NotImplementedError: the indicators are not linear in parts (global constraints).
        """
        self._bound()
        c = self._check_num_labels(num_labels)
        dtype = dtype or torch.get_default_dtype()
        if not self.linear_indicators or self.level != "instance":
            raise NotImplementedError(
                f"{self.name}: indicators are not linear in the parts; use kbest_search (see the "
                "module docstring)"
            )
        if self.needs_tokens:
            _check_tokens(tokens, lengths)
        n = int(lengths.max()) if lengths.numel() else 0
        valid = _valid(lengths, n)
        w, offset = self._indicator_weights(tokens, lengths, n, c)  # (B, N, C, C), (B, N)
        w = w * valid.view(-1, n, 1, 1)
        offset = torch.where(valid, offset, torch.ones_like(offset))
        return PositionFeatures(w.to(dtype).contiguous(), offset.to(dtype), binary=True)

    def _check_num_labels(self, num_labels: Optional[int]) -> int:
        c = self.num_labels
        if num_labels is not None and num_labels != c:
            raise ValueError(f"num_labels must equal the bound label list's size {c}; got {num_labels}")
        return c

    def _count_node_weights(
        self, tokens: Optional[Tokens], lengths: Tensor, n: int, c: int
    ) -> Optional[tuple[Tensor, Tensor]]:
        """Counts as node weights (B, d, N, C) and offset (B, d), or None if edges are needed."""
        return None

    def _count_weights(self, tokens: Optional[Tokens], lengths: Tensor, n: int, c: int) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def _indicator_weights(self, tokens: Optional[Tokens], lengths: Tensor, n: int, c: int) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{self.name}[{self.level}, {'hard' if self.hard else 'soft'}, weight={self.weight}]"


def _hinge(x: Tensor) -> Tensor:
    return x.clamp(min=0)


# ---------------------------------------------------------------------- instance level
class _LabelCount(Constraint):
    """Shared: counts = number of tokens with one of ``labels``."""

    def __init__(self, labels: Union[LabelSpec, Sequence[LabelSpec]], **kwargs) -> None:
        super().__init__(**kwargs)
        self.labels = _check_label_list(labels, "labels")
        self.indices: list[int] = []

    def _label_specs(self) -> list[LabelSpec]:
        return self.labels

    def _resolve(self) -> None:
        self.indices = [self._index(s) for s in self.labels]

    def _hit(self, labels: Tensor, lengths: Tensor) -> Tensor:
        mask = _label_mask(self.indices, self.num_labels, labels.device)
        return mask[labels.clamp(0, self.num_labels - 1)] & _valid(lengths, labels.shape[1])

    def _counts(self, labels: Tensor, lengths: Tensor, tokens: Optional[Tokens]) -> Tensor:
        return self._hit(labels, lengths).sum(1, keepdim=True)

    def _count_node_weights(self, tokens, lengths, n, c):
        b = lengths.shape[0]
        w = torch.zeros(b, 1, n, c, dtype=torch.float64, device=lengths.device)
        w[:, 0, :, self.indices] = 1.0
        w = w * _valid(lengths, n).view(b, 1, n, 1)
        return w, torch.zeros(b, 1, dtype=torch.float64, device=lengths.device)


class MustAppear(_LabelCount):
    """At least ``min_count`` tokens carry one of ``labels`` (seed 003: "at least one author").

    counts: (B, 1) number of such tokens (linear). Penalty ``weight * [min_count - n]_+``.

    Args:
        labels: a label name (or list of names: any of them counts).
        min_count: >= 1.
        hard, weight, name: see :class:`Constraint`.
    """

    def __init__(
        self,
        labels: Union[LabelSpec, Sequence[LabelSpec]],
        min_count: int = 1,
        hard: bool = False,
        weight: float = 1.0,
        name: Optional[str] = None,
    ) -> None:
        super().__init__(labels, hard=hard, weight=weight, name=name)
        if not isinstance(min_count, int) or isinstance(min_count, bool) or min_count < 1:
            raise ValueError(f"min_count must be an int >= 1; got {min_count!r}")
        self.min_count = min_count

    def penalty_from_counts(self, counts: Tensor) -> Tensor:
        return self.weight * _hinge(self.min_count - counts[..., 0])

    def violation_from_counts(self, counts: Tensor) -> Tensor:
        return _hinge(self.min_count - counts[..., 0])


class MustNotAppear(_LabelCount):
    """No token carries one of ``labels``.

    counts: (B, 1) number of such tokens (linear); penalty ``weight * n``. Indicators: per
    position ``[y_t not in labels]`` (linear).
    """

    linear_indicators = True
    positionwise = True

    def __init__(
        self,
        labels: Union[LabelSpec, Sequence[LabelSpec]],
        hard: bool = False,
        weight: float = 1.0,
        name: Optional[str] = None,
    ) -> None:
        super().__init__(labels, hard=hard, weight=weight, name=name)

    def penalty_from_counts(self, counts: Tensor) -> Tensor:
        return self.weight * counts[..., 0]

    def violation_from_counts(self, counts: Tensor) -> Tensor:
        return counts[..., 0].clamp(min=0)

    def _indicators(self, labels, lengths, tokens):
        return ~self._hit(labels, lengths)

    def _indicator_weights(self, tokens, lengths, n, c):
        b = lengths.shape[0]
        w = torch.zeros(b, n, c, c, dtype=torch.float64, device=lengths.device)
        w[:, :, :, self.indices] = -1.0
        return w, torch.ones(b, n, dtype=torch.float64, device=lengths.device)


class AtMostOnce(Constraint):
    """A label forms at most one run per example (seed 003 4.1.1 (1): "AUTHOR appears at most
    once in each citation"; a run is a maximal block of consecutive tokens with the label).

    counts: (B, 1) number of runs, linear in chain parts (``y_t = c`` and ``y_{t-1} != c``);
    penalty ``weight * [runs - 1]_+`` (non-linear); indicator ``[runs <= 1]`` is global and not
    linear (no indicator features; see :func:`kbest_search`).
    """

    def __init__(self, label: LabelSpec, hard: bool = False, weight: float = 1.0, name: Optional[str] = None) -> None:
        super().__init__(hard=hard, weight=weight, name=name)
        if not isinstance(label, (str, int)) or isinstance(label, bool):
            raise ValueError(f"label must be one label name; got {label!r}")
        self.label: LabelSpec = label
        self.index = -1

    def _label_specs(self) -> list[LabelSpec]:
        return [self.label]

    def _resolve(self) -> None:
        self.index = self._index(self.label)

    def _counts(self, labels, lengths, tokens):
        return runs_per_label(labels, lengths, self.num_labels)[:, self.index : self.index + 1]

    def penalty_from_counts(self, counts: Tensor) -> Tensor:
        return self.weight * _hinge(counts[..., 0] - 1)

    def violation_from_counts(self, counts: Tensor) -> Tensor:
        return _hinge(counts[..., 0] - 1)

    def _count_weights(self, tokens, lengths, n, c):
        b = lengths.shape[0]
        w = torch.zeros(b, 1, n, c, c, dtype=torch.float64, device=lengths.device)
        w[:, 0, :, :, self.index] = 1.0
        if n > 1:
            w[:, 0, 1:, self.index, self.index] = 0.0  # staying inside the run
        return w, torch.zeros(b, 1, dtype=torch.float64, device=lengths.device)


class WordLabels(Constraint):
    """Given words may only carry given labels (seed 000 5.1 "word rules"; seed 003 "the word CA
    is LOCATION"; CoDL Table 1).

    A token is *restricted* when it is in ``words`` or matches ``pattern`` (``re.fullmatch``),
    compared lower-cased when ``lowercase``. counts: (B, 1) number of restricted tokens whose
    label is not allowed (linear); penalty ``weight * n``. Indicators per position: 1 if the
    token is not restricted or its label is allowed (linear).

    Args:
        labels: the allowed label(s).
        words: the restricted words (non-empty if given).
        pattern: a regular expression for restricted tokens (e.g. ``(19|20)\\d\\d`` for dates).
        lowercase: compare lower-cased tokens (and words).

    Raises:
        ValueError: neither ``words`` nor ``pattern``, an empty word list, a bad pattern.
    """

    linear_indicators = True
    positionwise = True
    needs_tokens = True

    def __init__(
        self,
        labels: Union[LabelSpec, Sequence[LabelSpec]],
        words: Optional[Sequence[str]] = None,
        pattern: Optional[str] = None,
        lowercase: bool = True,
        hard: bool = False,
        weight: float = 1.0,
        name: Optional[str] = None,
    ) -> None:
        super().__init__(hard=hard, weight=weight, name=name)
        self.labels = _check_label_list(labels, "labels")
        if words is None and pattern is None:
            raise ValueError("WordLabels needs words or a pattern; got neither")
        if words is not None:
            if isinstance(words, str) or len(words) == 0 or not all(isinstance(w, str) and w for w in words):
                raise ValueError(f"words must be a non-empty list of non-empty strings; got {words!r}")
        self.lowercase = bool(lowercase)
        self.words = frozenset(w.lower() if lowercase else w for w in (words or ()))
        try:
            self.pattern = re.compile(pattern, re.IGNORECASE if lowercase else 0) if pattern else None
        except re.error as err:
            raise ValueError(f"pattern is not a valid regular expression: {pattern!r} ({err})") from None
        if pattern is not None and not pattern:
            raise ValueError("pattern must be a non-empty regular expression; got ''")
        self.indices: list[int] = []

    def _label_specs(self) -> list[LabelSpec]:
        return self.labels

    @property
    def name(self) -> str:
        if self._name is not None:
            return self._name
        what = sorted(self.words)[:3] + ([self.pattern.pattern] if self.pattern else [])
        return f"WordLabels({'|'.join(what)} -> {', '.join(map(str, self.labels))})"

    def _resolve(self) -> None:
        self.indices = [self._index(s) for s in self.labels]

    def restricted(self, token: str) -> bool:
        """Whether a token is restricted by this rule."""
        tok = token.lower() if self.lowercase else token
        return tok in self.words or (self.pattern is not None and self.pattern.fullmatch(token) is not None)

    def _restricted_mask(self, tokens: Tokens, lengths: Tensor, n: int) -> Tensor:
        return _token_mask(tokens, n, self.restricted, lengths.device) & _valid(lengths, n)

    def _bad(self, labels, lengths, tokens):
        allowed = _label_mask(self.indices, self.num_labels, labels.device)[labels.clamp(0, self.num_labels - 1)]
        return self._restricted_mask(tokens, lengths, labels.shape[1]) & ~allowed

    def _counts(self, labels, lengths, tokens):
        return self._bad(labels, lengths, tokens).sum(1, keepdim=True)

    def penalty_from_counts(self, counts: Tensor) -> Tensor:
        return self.weight * counts[..., 0]

    def violation_from_counts(self, counts: Tensor) -> Tensor:
        return counts[..., 0].clamp(min=0)

    def _indicators(self, labels, lengths, tokens):
        return ~self._bad(labels, lengths, tokens)

    def _count_node_weights(self, tokens, lengths, n, c):
        b = lengths.shape[0]
        restricted = self._restricted_mask(tokens, lengths, n).double()  # (B, N)
        disallowed = (~_label_mask(self.indices, c, lengths.device)).double()  # (C,)
        w = (restricted.view(b, 1, n, 1) * disallowed.view(1, 1, 1, c))
        return w, torch.zeros(b, 1, dtype=torch.float64, device=lengths.device)

    def _indicator_weights(self, tokens, lengths, n, c):
        b = lengths.shape[0]
        restricted = self._restricted_mask(tokens, lengths, n).double()  # (B, N)
        allowed = _label_mask(self.indices, c, lengths.device).double()
        w = (restricted.view(b, n, 1, 1) * allowed.view(1, 1, 1, c)).expand(b, n, c, c)
        return w, 1.0 - restricted


class AllowedFirst(Constraint):
    """The first label is one of ``labels`` (seed 003: "a citation can only start with author";
    CoDL: author or editor).

    counts: (B, 1) ``[y_0 not in labels]`` (linear; 0 for empty examples); penalty
    ``weight * count``. Indicator: one dimension ``[y_0 in labels]`` (linear).
    """

    linear_indicators = True

    def __init__(
        self,
        labels: Union[LabelSpec, Sequence[LabelSpec]],
        hard: bool = False,
        weight: float = 1.0,
        name: Optional[str] = None,
    ) -> None:
        super().__init__(hard=hard, weight=weight, name=name)
        self.labels = _check_label_list(labels, "labels")
        self.indices: list[int] = []

    def _label_specs(self) -> list[LabelSpec]:
        return self.labels

    def _resolve(self) -> None:
        self.indices = [self._index(s) for s in self.labels]

    def _bad(self, labels, lengths):
        allowed = _label_mask(self.indices, self.num_labels, labels.device)
        first = labels[:, 0].clamp(0, self.num_labels - 1) if labels.shape[1] else labels.new_zeros(labels.shape[0])
        return ~allowed[first] & (lengths > 0)

    def _counts(self, labels, lengths, tokens):
        return self._bad(labels, lengths).view(-1, 1)

    def penalty_from_counts(self, counts: Tensor) -> Tensor:
        return self.weight * counts[..., 0]

    def violation_from_counts(self, counts: Tensor) -> Tensor:
        return counts[..., 0].clamp(min=0)

    def _indicators(self, labels, lengths, tokens):
        return ~self._bad(labels, lengths).view(-1, 1)

    def _count_node_weights(self, tokens, lengths, n, c):
        b = lengths.shape[0]
        w = torch.zeros(b, 1, n, c, dtype=torch.float64, device=lengths.device)
        if n:
            w[:, 0, 0, :] = (~_label_mask(self.indices, c, lengths.device)).double()
        return w, torch.zeros(b, 1, dtype=torch.float64, device=lengths.device)

    def indicator_features(self, tokens, lengths, num_labels=None, dtype=None) -> ConstraintFeatures:
        self._bound()
        c = self._check_num_labels(num_labels)
        dtype = dtype or torch.get_default_dtype()
        n = int(lengths.max()) if lengths.numel() else 0
        b = lengths.shape[0]
        w = torch.zeros(b, 1, n, c, c, dtype=dtype, device=lengths.device)
        if n:
            w[:, 0, 0, :, :] = _label_mask(self.indices, c, lengths.device).to(dtype)
        w = w * (lengths > 0).view(b, 1, 1, 1, 1).to(dtype)
        offset = (lengths == 0).to(dtype).view(b, 1)
        return LinearConstraintFeatures(w, offset, binary=True)


class PunctuationTransitions(Constraint):
    """Segment boundaries (label changes) occur only at punctuation or newline (seed 000 5.1,
    CoDL Table 1).

    A change between positions ``t-1`` and ``t`` is allowed when token ``t-1`` or token ``t``
    is in ``punctuation`` (``side="either"``; ``"before"``: token t-1 only; ``"after"``:
    token t only). counts: (B, 1) number of changes at non-allowed boundaries (linear);
    penalty ``weight * count``. Indicators: one per position ``t`` (position 0 constant 1):
    ``[y_{t-1} = y_t or boundary t allowed]`` (linear; seed 000's L-1 dimensions plus one
    constant).

    Args:
        punctuation: tokens at which boundaries are allowed (default
            :data:`DEFAULT_PUNCTUATION`); tokens made only of these characters also count.
        side: which neighbouring token must be punctuation.
    """

    linear_indicators = True
    positionwise = True
    needs_tokens = True

    def __init__(
        self,
        punctuation: Optional[Sequence[str]] = None,
        side: Literal["either", "before", "after"] = "either",
        hard: bool = False,
        weight: float = 1.0,
        name: Optional[str] = None,
    ) -> None:
        super().__init__(hard=hard, weight=weight, name=name)
        punct = DEFAULT_PUNCTUATION if punctuation is None else tuple(punctuation)
        if len(punct) == 0 or not all(isinstance(p, str) and p for p in punct):
            raise ValueError(f"punctuation must be a non-empty list of non-empty strings; got {punctuation!r}")
        if side not in ("either", "before", "after"):
            raise ValueError(f"side must be one of 'either', 'before', 'after'; got {side!r}")
        self.punctuation = frozenset(punct)
        self._chars = frozenset(ch for p in punct if len(p) == 1 for ch in p)
        self.side = side

    def is_punctuation(self, token: str) -> bool:
        """Whether a token counts as punctuation (listed, or made only of listed characters)."""
        return token in self.punctuation or (len(token) > 0 and all(ch in self._chars for ch in token))

    def allowed_boundaries(self, tokens: Tokens, lengths: Tensor, n: int) -> Tensor:
        """(B, N) bool: a label change between t-1 and t is allowed (column 0 True)."""
        punct = _token_mask(tokens, n, self.is_punctuation, lengths.device)
        before = torch.zeros_like(punct)
        before[:, 1:] = punct[:, :-1]
        ok = {"either": before | punct, "before": before, "after": punct}[self.side]
        ok = ok.clone()
        ok[:, :1] = True
        return ok

    def _bad(self, labels, lengths, tokens):
        n = labels.shape[1]
        return transitions_mask(labels, lengths) & ~self.allowed_boundaries(tokens, lengths, n)

    def _counts(self, labels, lengths, tokens):
        return self._bad(labels, lengths, tokens).sum(1, keepdim=True)

    def penalty_from_counts(self, counts: Tensor) -> Tensor:
        return self.weight * counts[..., 0]

    def violation_from_counts(self, counts: Tensor) -> Tensor:
        return counts[..., 0].clamp(min=0)

    def _indicators(self, labels, lengths, tokens):
        return ~self._bad(labels, lengths, tokens)

    def _change_weights(self, tokens, lengths, n, c) -> Tensor:
        """(B, N, C, C): 1 on edges with a label change at a non-allowed boundary."""
        b = lengths.shape[0]
        bad_boundary = (~self.allowed_boundaries(tokens, lengths, n)).double()  # (B, N)
        off_diag = 1.0 - torch.eye(c, dtype=torch.float64, device=lengths.device)
        return bad_boundary.view(b, n, 1, 1) * off_diag

    def _count_weights(self, tokens, lengths, n, c):
        w = self._change_weights(tokens, lengths, n, c).unsqueeze(1)
        return w, torch.zeros(lengths.shape[0], 1, dtype=torch.float64, device=lengths.device)

    def _indicator_weights(self, tokens, lengths, n, c):
        w = -self._change_weights(tokens, lengths, n, c)
        return w, torch.ones(lengths.shape[0], n, dtype=torch.float64, device=lengths.device)


class ConsecutiveFields(Constraint):
    """Each field is one consecutive run of words and occurs at most once (seed 000 5.1's global
    constraint, seed 003 4.1.1 (3), CoDL "AppearsOnce").

    counts: (B, 1) ``sum_c [runs_c - 1]_+`` over ``labels`` (default: all labels); not linear.
    Penalty ``weight * count``. Indicator: one global dimension ``[count == 0]`` (the extra
    binary feature of seed 000), not linear: handled by :func:`kbest_search`.
    """

    linear_counts = False

    def __init__(
        self,
        labels: Optional[Sequence[LabelSpec]] = None,
        hard: bool = False,
        weight: float = 1.0,
        name: Optional[str] = None,
    ) -> None:
        super().__init__(hard=hard, weight=weight, name=name)
        self.labels = None if labels is None else _check_label_list(labels, "labels")
        self.indices: list[int] = []

    def _label_specs(self) -> list[LabelSpec]:
        return self.labels or []

    def _resolve(self) -> None:
        specs = self.labels if self.labels is not None else list(range(self.num_labels))
        self.indices = [self._index(s) for s in specs]

    def _counts(self, labels, lengths, tokens):
        runs = runs_per_label(labels, lengths, self.num_labels)[:, self.indices]
        return _hinge(runs - 1).sum(1, keepdim=True)

    def penalty_from_counts(self, counts: Tensor) -> Tensor:
        return self.weight * counts[..., 0]

    def violation_from_counts(self, counts: Tensor) -> Tensor:
        return counts[..., 0].clamp(min=0)


# ---------------------------------------------------------------------- corpus level
class _Ratio(Constraint):
    """Corpus-level ratio ``sum(numerator) / sum(denominator)`` against a target.

    ``bound="eq"``: penalty ``weight * |ratio - target|`` (L1 to the target, an expectation);
    ``"ge"``/``"le"``: ``weight * [target - ratio]_+`` / ``[ratio - target]_+`` (hinge).
    counts: (B, 2) = (numerator, denominator) per example.
    """

    level = "corpus"
    num_counts = 2

    def __init__(self, target: float, bound: Literal["eq", "ge", "le"], hard: bool, weight: float, name: Optional[str]) -> None:
        super().__init__(hard=hard, weight=weight, name=name)
        if bound not in ("eq", "ge", "le"):
            raise ValueError(f"bound must be one of 'eq', 'ge', 'le'; got {bound!r}")
        self.bound = bound
        self.target = float(target)

    def _gap(self, counts: Tensor) -> Tensor:
        ratio = counts[..., 0] / counts[..., 1].clamp(min=1e-12)
        if self.bound == "eq":
            return (ratio - self.target).abs()
        if self.bound == "ge":
            return _hinge(self.target - ratio)
        return _hinge(ratio - self.target)

    def penalty_from_counts(self, counts: Tensor) -> Tensor:
        return self.weight * self._gap(counts)

    def violation_from_counts(self, counts: Tensor) -> Tensor:
        return self._gap(counts)


class LabelProportion(_Ratio):
    """A fraction ``target`` of the tokens carry ``label`` (seed 003: 30% of tokens AUTHOR).

    counts: (B, 2) = (#tokens with the label, #tokens), both linear in parts.

    Args:
        label: a label name (or list: any of them).
        target: the proportion, in [0, 1].
        bound: ``"eq"`` (L1 to target), ``"ge"`` (at least), ``"le"`` (at most).

    Raises:
        ValueError: ``target`` outside [0, 1].
    """

    def __init__(
        self,
        label: Union[LabelSpec, Sequence[LabelSpec]],
        target: float,
        bound: Literal["eq", "ge", "le"] = "eq",
        hard: bool = False,
        weight: float = 1.0,
        name: Optional[str] = None,
    ) -> None:
        if not isinstance(target, (int, float)) or isinstance(target, bool) or not 0.0 <= target <= 1.0:
            raise ValueError(f"target must be a proportion in [0, 1]; got {target!r}")
        super().__init__(target, bound, hard, weight, name)
        self.labels = _check_label_list(label, "label")
        self.indices: list[int] = []

    def _label_specs(self) -> list[LabelSpec]:
        return self.labels

    def _resolve(self) -> None:
        self.indices = [self._index(s) for s in self.labels]

    def _counts(self, labels, lengths, tokens):
        hit = _label_mask(self.indices, self.num_labels, labels.device)[labels.clamp(0, self.num_labels - 1)]
        hit = hit & _valid(lengths, labels.shape[1])
        return torch.stack([hit.sum(1), lengths], dim=1)

    def _count_node_weights(self, tokens, lengths, n, c):
        b = lengths.shape[0]
        w = torch.zeros(b, 2, n, c, dtype=torch.float64, device=lengths.device)
        w[:, 0, :, self.indices] = 1.0
        w = w * _valid(lengths, n).view(b, 1, n, 1)
        offset = torch.stack([torch.zeros(b, dtype=torch.float64, device=lengths.device), lengths.double()], 1)
        return w, offset


class ExpectedCount(_Ratio):
    """Each example has on average ``target`` tokens with ``label`` (seed 000 eq. 5 style
    expectation over the corpus).

    counts: (B, 2) = (#tokens with the label, 1), linear in parts.

    Raises:
        ValueError: ``target < 0``.
    """

    def __init__(
        self,
        label: Union[LabelSpec, Sequence[LabelSpec]],
        target: float,
        bound: Literal["eq", "ge", "le"] = "eq",
        hard: bool = False,
        weight: float = 1.0,
        name: Optional[str] = None,
    ) -> None:
        if not isinstance(target, (int, float)) or isinstance(target, bool) or not target >= 0:
            raise ValueError(f"target must be an expected count >= 0; got {target!r}")
        super().__init__(target, bound, hard, weight, name)
        self.labels = _check_label_list(label, "label")
        self.indices: list[int] = []

    def _label_specs(self) -> list[LabelSpec]:
        return self.labels

    def _resolve(self) -> None:
        self.indices = [self._index(s) for s in self.labels]

    def _counts(self, labels, lengths, tokens):
        hit = _label_mask(self.indices, self.num_labels, labels.device)[labels.clamp(0, self.num_labels - 1)]
        hit = hit & _valid(lengths, labels.shape[1])
        return torch.stack([hit.sum(1), torch.ones_like(lengths)], dim=1)

    def _count_node_weights(self, tokens, lengths, n, c):
        b = lengths.shape[0]
        w = torch.zeros(b, 2, n, c, dtype=torch.float64, device=lengths.device)
        w[:, 0, :, self.indices] = 1.0
        w = w * _valid(lengths, n).view(b, 1, n, 1)
        offset = torch.zeros(b, 2, dtype=torch.float64, device=lengths.device)
        offset[:, 1] = 1.0
        return w, offset


class TransitionFraction(_Ratio):
    """The fraction of label changes on non-punctuation boundaries is ``target`` (seed 003
    4.1.1 corpus constraint (2): 0.01).

    counts: (B, 2) = (#changes at non-allowed boundaries, #changes), both linear in parts.
    Boundaries as in :class:`PunctuationTransitions`.

    Raises:
        ValueError: ``target`` outside [0, 1].
    """

    needs_tokens = True

    def __init__(
        self,
        target: float = 0.01,
        bound: Literal["eq", "ge", "le"] = "eq",
        punctuation: Optional[Sequence[str]] = None,
        side: Literal["either", "before", "after"] = "either",
        hard: bool = False,
        weight: float = 1.0,
        name: Optional[str] = None,
    ) -> None:
        if not isinstance(target, (int, float)) or isinstance(target, bool) or not 0.0 <= target <= 1.0:
            raise ValueError(f"target must be a fraction in [0, 1]; got {target!r}")
        super().__init__(target, bound, hard, weight, name)
        self._boundaries = PunctuationTransitions(punctuation=punctuation, side=side)

    def _counts(self, labels, lengths, tokens):
        change = transitions_mask(labels, lengths)
        bad = change & ~self._boundaries.allowed_boundaries(tokens, lengths, labels.shape[1])
        return torch.stack([bad.sum(1), change.sum(1)], dim=1)

    def _count_weights(self, tokens, lengths, n, c):
        b = lengths.shape[0]
        bad = self._boundaries._change_weights(tokens, lengths, n, c)  # (B, N, C, C)
        off_diag = 1.0 - torch.eye(c, dtype=torch.float64, device=lengths.device)
        every = off_diag.expand(b, n, c, c).clone()
        if n:
            every[:, 0] = 0.0
            bad = bad.clone()
            bad[:, 0] = 0.0
        return torch.stack([bad, every], 1), torch.zeros(b, 2, dtype=torch.float64, device=lengths.device)


# ---------------------------------------------------------------------- the set
class ConstraintSet:
    """A list of constraints evaluated together (YAML: see the module docstring).

    Args:
        constraints: the constraints (instance and corpus level, any mix).
        labels: the task's label names in index order; binds every constraint now (else call
            :meth:`bind`).

    Raises:
        TypeError: an entry that is not a :class:`Constraint`.
        ValueError: an unknown label (when ``labels`` is given).
    """

    def __init__(self, constraints: Sequence[Constraint], labels: Optional[Sequence[str]] = None) -> None:
        if isinstance(constraints, Constraint) or not isinstance(constraints, (list, tuple)):
            raise TypeError(f"constraints must be a list of Constraint; got {type(constraints).__name__}")
        for i, con in enumerate(constraints):
            if not isinstance(con, Constraint):
                raise TypeError(f"constraints[{i}] must be a Constraint; got {type(con).__name__}")
        self.constraints: list[Constraint] = list(constraints)
        self.label_names: Optional[tuple[str, ...]] = None
        if labels is not None:
            self.constraints = [c.bind(labels) for c in self.constraints]
            self.label_names = tuple(labels)

    def bind(self, labels: Sequence[str]) -> "ConstraintSet":
        """A copy with every constraint bound to ``labels``."""
        return ConstraintSet(self.constraints, labels)

    def __len__(self) -> int:
        return len(self.constraints)

    def __iter__(self):
        return iter(self.constraints)

    def __repr__(self) -> str:
        return f"ConstraintSet({self.constraints!r})"

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.constraints]

    def select(self, level: Optional[str] = None, hard: Optional[bool] = None) -> "ConstraintSet":
        """The constraints of one level and/or hardness (same binding)."""
        out = ConstraintSet([])
        out.label_names = self.label_names
        out.constraints = [
            c for c in self.constraints
            if (level is None or c.level == level) and (hard is None or c.hard == hard)
        ]
        return out

    @property
    def count_slices(self) -> list[slice]:
        """Where each constraint's counts sit in :meth:`counts`' last dimension."""
        out, start = [], 0
        for c in self.constraints:
            out.append(slice(start, start + c.num_counts))
            start += c.num_counts
        return out

    @property
    def num_counts(self) -> int:
        return sum(c.num_counts for c in self.constraints)

    def counts(self, labels: Tensor, lengths: Tensor, tokens: Optional[Tokens] = None) -> Tensor:
        """All counts side by side. Shape: (B, num_counts)."""
        b = labels.shape[0] if isinstance(labels, Tensor) else 0
        if not self.constraints:
            return torch.zeros(b, 0)
        return torch.cat([c.counts(labels, lengths, tokens) for c in self.constraints], dim=1)

    def penalties_from_counts(self, instance_counts: Tensor, corpus_totals: Optional[Tensor] = None) -> Tensor:
        """Per-constraint penalties from counts.

        Args:
            instance_counts: (..., num_counts) counts of one or more examples; instance-level
                constraints are scored on them.
            corpus_totals: (..., num_counts) counts summed over the corpus; corpus-level
                constraints are scored on them (default: ``instance_counts``).

        Returns:
            (..., len(self)) penalties.
        """
        totals = instance_counts if corpus_totals is None else corpus_totals
        cols = [
            c.penalty_from_counts((totals if c.level == "corpus" else instance_counts)[..., s])
            for c, s in zip(self.constraints, self.count_slices)
        ]
        return torch.stack(cols, dim=-1) if cols else instance_counts.new_zeros(instance_counts.shape[:-1] + (0,))

    def penalty(self, labels: Tensor, lengths: Tensor, tokens: Optional[Tokens] = None) -> Tensor:
        """Total penalty: sum over examples of the instance-level penalties plus the
        corpus-level penalties of the summed counts (a scalar)."""
        counts = self.counts(labels, lengths, tokens)
        total = counts.new_zeros(())
        for c, s in zip(self.constraints, self.count_slices):
            if c.level == "corpus":
                total = total + c.penalty_from_counts(counts[:, s].sum(0))
            else:
                total = total + c.penalty_from_counts(counts[:, s]).sum()
        return total

    def instance_penalty(self, labels: Tensor, lengths: Tensor, tokens: Optional[Tokens] = None) -> Tensor:
        """Sum of the instance-level penalties per example. Shape (B,)."""
        counts = self.counts(labels, lengths, tokens)
        total = counts.new_zeros(counts.shape[0])
        for c, s in zip(self.constraints, self.count_slices):
            if c.level == "instance":
                total = total + c.penalty_from_counts(counts[:, s])
        return total

    def violations(self, labels: Tensor, lengths: Tensor, tokens: Optional[Tokens] = None) -> dict[str, Tensor]:
        """Violation per constraint name: (B,) for instance level, a scalar for corpus level."""
        return {c.name: c.violation(labels, lengths, tokens) for c in self.constraints}

    def hard_violated(self, labels: Tensor, lengths: Tensor, tokens: Optional[Tokens] = None) -> Tensor:
        """(B,) bool: the labeling violates an instance-level hard constraint."""
        out = torch.zeros(labels.shape[0], dtype=torch.bool, device=labels.device)
        for c in self.constraints:
            if c.hard and c.level == "instance":
                out = out | (c.violation(labels, lengths, tokens) > 0)
        return out

    # -- seed 000 binary encoding
    def instance_constraints(self) -> list[Constraint]:
        return [c for c in self.constraints if c.level == "instance"]

    def indicators(self, labels: Tensor, lengths: Tensor, tokens: Optional[Tokens] = None) -> Tensor:
        """Binary indicators of all instance-level constraints, linear ones first then the
        global non-linear ones (the order of :meth:`indicator_features` then
        :meth:`nonlinear_indicators`). Shape (B, d_ind)."""
        lin = [c for c in self.instance_constraints() if c.linear_indicators]
        non = [c for c in self.instance_constraints() if not c.linear_indicators]
        parts = [c.indicators(labels, lengths, tokens) for c in lin + non]
        return torch.cat(parts, dim=1) if parts else torch.zeros(labels.shape[0], 0)

    def indicator_features(
        self, tokens: Optional[Tokens], lengths: Tensor, num_labels: Optional[int] = None,
        dtype: Optional[torch.dtype] = None,
    ) -> Optional[ConstraintFeatures]:
        """Binary features of the instance-level constraints whose indicators are linear
        (None if there are none); the others are in :meth:`nonlinear_indicators`."""
        lin = [c for c in self.instance_constraints() if c.linear_indicators]
        if not lin:
            return None
        feats = [c.indicator_features(tokens, lengths, num_labels, dtype) for c in lin]
        return feats[0] if len(feats) == 1 else ConcatFeatures(feats)

    def nonlinear_indicators(self) -> list[Constraint]:
        """Instance-level constraints with a global, non-linear indicator (kbest_search)."""
        return [c for c in self.instance_constraints() if not c.linear_indicators]

    def features(
        self, tokens: Optional[Tokens], lengths: Tensor, num_labels: Optional[int] = None,
        structure: Literal["chain", "multiclass"] = "chain", dtype: Optional[torch.dtype] = None,
    ) -> ConstraintFeatures:
        """``counts`` of every constraint as one feature map linear in parts.

        Raises:
            NotImplementedError: a constraint whose counts are not linear (named).
        """
        non = [c.name for c in self.constraints if not c.linear_counts]
        if non:
            raise NotImplementedError(
                f"counts of {non} are not linear in the parts; use select()/kbest_search"
            )
        if not self.constraints:
            raise ValueError("the constraint set is empty")
        feats = [c.features(tokens, lengths, num_labels, structure, dtype) for c in self.constraints]
        return feats[0] if len(feats) == 1 else ConcatFeatures(feats)


# ---------------------------------------------------------------------- search
class SearchResult(NamedTuple):
    """Result of :func:`kbest_search`.

    labels: (B, N) best labels found; value: (B,) their objective; certified: (B,) bool, the
    result is provably the exact optimum; feasible: (B,) bool, a candidate satisfying the hard
    constraints was found (if not, ``labels`` is the best linear candidate).
    """

    labels: Tensor
    value: Tensor
    certified: Tensor
    feasible: Tensor


def _rerank(
    kb_labels: Tensor,
    kb_scores: Tensor,
    lengths: Tensor,
    bonus: Callable[..., Tensor],
    bonus_max: Tensor,
    reject: Optional[Callable[..., Tensor]],
    rows: Optional[Tensor],
) -> SearchResult:
    b, kk = kb_scores.shape
    flat = kb_labels.flatten(0, 1)
    flat_len = lengths.repeat_interleave(kk)
    args: tuple = () if rows is None else (rows.repeat_interleave(kk),)
    extra = bonus(flat, flat_len, *args).view(b, kk).to(kb_scores.dtype)
    value = kb_scores + extra
    exists = torch.isfinite(kb_scores)
    value = value.masked_fill(~exists, float("-inf"))
    feasible_k = exists.clone()
    if reject is not None:
        feasible_k &= ~reject(flat, flat_len, *args).view(b, kk)
        value = value.masked_fill(~feasible_k, float("-inf"))
    feasible = feasible_k.any(1)
    best_val, best_idx = value.max(1)
    best_idx = torch.where(feasible, best_idx, torch.zeros_like(best_idx))
    labels = kb_labels[torch.arange(b, device=kb_labels.device), best_idx]
    kth = kb_scores.masked_fill(~exists, float("inf")).min(1).values
    complete = (~exists).any(1)  # fewer than k structures: the list is exhaustive
    certified = feasible & (complete | (best_val >= kth + bonus_max.to(kth.dtype) - 1e-9))
    value = torch.where(feasible, best_val, kb_scores[:, 0] + extra[:, 0])
    return SearchResult(labels, value, certified, feasible)


def kbest_search(
    structure: Structure,
    potentials: Potentials,
    lengths: Tensor,
    bonus: Callable[..., Tensor],
    bonus_max: Tensor,
    k: int = 16,
    reject: Optional[Callable[..., Tensor]] = None,
    adaptive: bool = False,
) -> SearchResult:
    """Maximise ``score(y) + bonus(y)`` for a non-linear ``bonus`` by k-best reranking.

    ``structure.kbest`` lists the ``k`` best labelings under ``potentials``; ``bonus`` (and
    ``reject``, for hard constraints) are evaluated on them exactly, the best is returned. The
    result is certified exact when ``value >= kth_score + bonus_max`` (no unlisted labeling can
    beat it). Runs without autograd.

    With ``adaptive=True`` the plain argmax is tried first (k = 1, the cheap Viterbi pass) and
    the k-best list is computed only for the rows it does not certify; ``bonus`` and ``reject``
    then receive a third argument ``rows`` (M,) long, the example index of each candidate
    (without ``adaptive`` the candidates are always the B k rows in example order).

    Args:
        structure: a structure with ``kbest`` (labels (B, k, N)).
        potentials: the linear part (constraint-folded potentials).
        lengths: (B,) lengths.
        bonus: ``bonus(labels (M, N), lengths (M,)[, rows (M,)]) -> (M,)`` non-linear extra
            score.
        bonus_max: (B,) an upper bound of the bonus per example.
        k: list size.
        reject: ``reject(labels (M, N), lengths (M,)[, rows (M,)]) -> (M,) bool`` hard-constraint
            violation.
        adaptive: argmax first, k-best only where needed (see above).

    Shape:
        potentials: (B, N, C, C) for a chain.
    """
    with torch.no_grad():
        if not adaptive:
            kb_labels, kb_scores = structure.kbest(potentials, k, lengths)  # (B, k, N), (B, k)
            return _rerank(kb_labels, kb_scores, lengths, bonus, bonus_max, reject, None)
        b = lengths.shape[0]
        rows = torch.arange(b, device=lengths.device)
        top, top_score = structure.argmax(potentials, lengths)
        first = _rerank(top.unsqueeze(1), top_score.unsqueeze(1), lengths, bonus, bonus_max, reject, rows)
        todo = (~first.certified).nonzero().view(-1)
        if k == 1 or todo.numel() == 0:
            return first
        sub_pot = like(potentials, [p[todo] for p in as_tuple(potentials)])
        kb_labels, kb_scores = structure.kbest(sub_pot, k, lengths[todo])
        second = _rerank(kb_labels, kb_scores, lengths[todo], bonus, bonus_max[todo], reject, todo)
        labels, value = first.labels.clone(), first.value.clone()
        certified, feasible = first.certified.clone(), first.feasible.clone()
        labels[todo], value[todo] = second.labels, second.value
        certified[todo], feasible[todo] = second.certified, second.feasible
        return SearchResult(labels, value, certified, feasible)
