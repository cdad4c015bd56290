"""The :class:`Constraint` protocol (see :mod:`structssl.constraints`): counts ``phi(x, y)`` on
explicit labelings, penalty ``Gamma`` and violation of counts, seed 000's binary indicators, and
both as feature maps linear in the parts where they are."""

from __future__ import annotations

import copy
import fnmatch
from typing import Iterable, Literal, Optional, Sequence

import torch
from torch import Tensor

from structssl.constraints.features import PositionFeatures
from structssl.constraints.labelings import (
    LabelSpec,
    Tokens,
    _check_batch,
    _check_label_list,
    _check_tokens,
    _check_weight,
    _label_mask,
    _valid,
)
from structssl.losses.gamma import ConstraintFeatures, LinearConstraintFeatures

__all__ = ["Constraint"]


class Constraint:
    """A piece of prior knowledge about labelings (see the module docstring for the protocol).

    Args:
        hard: whether the constraint must hold (searches reject violating labelings); soft
            constraints are penalised by :meth:`penalty`.
        weight: multiplies the penalty (``r`` of seed 003), >= 0.
        name: a display name (default: the class name and its labels).

    Subclasses set ``level`` (``"instance"`` or ``"corpus"``), ``num_counts``, ``linear_counts``,
    ``linear_indicators``, ``needs_tokens`` and implement :meth:`_counts` (and, where linear,
    :meth:`_count_node_weights` / :meth:`_count_weights` and :meth:`_indicator_weights`). The
    default violation is the first count (a number of violating tokens or boundaries) and the
    penalty is always ``weight * violation``: a subclass with another violation overrides
    :meth:`violation_from_counts` only. A constraint about a list of labels calls
    :meth:`_set_labels` in its constructor; ``bind`` then resolves them into ``indices``.

    Label specs are names, indices, or shell-style patterns over the names (``fnmatch``: ``*``,
    ``?``, ``[seq]``, ``[!seq]``), so that one configuration fits any tag set of a scheme:
    ``"B-*"`` is every label that begins an entity in BIO, ``"[!BSU]-*"`` every label inside
    or ending one in BIO / BIOES / BILOU. A pattern that matches no label is an error at bind.
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

    def __init_subclass__(cls, **kwargs: object) -> None:
        """A subclass that implements only :meth:`_counts` (neither count weights method nor
        :meth:`features`, and no ``linear_counts`` of its own) has counts that are not known to
        be linear: the searches handle it by k-best reranking instead of asking for features."""
        super().__init_subclass__(**kwargs)
        if "linear_counts" in cls.__dict__:
            return
        declared = [k for k in cls.__mro__[1:-1] if "linear_counts" in k.__dict__
                    and not k.__dict__.get("_linear_counts_found", False) and k is not Constraint]
        if not declared:  # no class between it and Constraint says: found from the methods
            cls.linear_counts = not (cls._count_node_weights is Constraint._count_node_weights
                                     and cls._count_weights is Constraint._count_weights
                                     and cls.features is Constraint.features)
            cls._linear_counts_found = True

    def __init__(self, hard: bool = False, weight: float = 1.0, name: Optional[str] = None) -> None:
        if not isinstance(hard, bool):
            raise TypeError(f"hard must be a bool; got {type(hard).__name__}")
        self.hard = hard
        self.weight = _check_weight(weight)
        self._name = name
        self.label_names: Optional[tuple[str, ...]] = None

    #: the label specs (names or indices) this constraint is about, set by :meth:`_set_labels`
    labels: Optional[list[LabelSpec]] = None

    # -- labels
    def _set_labels(self, labels: object, arg: str = "labels") -> None:
        """Keep ``labels`` (one spec or a non-empty list; ``arg`` names the argument in errors);
        :meth:`bind` resolves them into ``self.indices``."""
        self.labels = _check_label_list(labels, arg)
        self.indices: list[int] = []

    def _label_specs(self) -> list[LabelSpec]:
        """The label specs (names or indices) this constraint refers to."""
        return list(self.labels or [])

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

    def _indices(self, spec: LabelSpec) -> list[int]:
        """The indices of one spec: a name or index (one), or a pattern (every matching
        name, in label order).

        Raises:
            ValueError: an unknown name, an index out of range, a pattern matching no label.
        """
        assert self.label_names is not None
        if isinstance(spec, str) and spec not in self.label_names and any(ch in spec for ch in "*?["):
            hits = [i for i, label in enumerate(self.label_names) if fnmatch.fnmatchcase(label, spec)]
            if not hits:
                raise ValueError(
                    f"{self.name}: the pattern {spec!r} matches no label of {list(self.label_names)}"
                )
            return hits
        return [self._index(spec)]

    def _resolve(self) -> None:
        """Resolve the label specs into ``indices`` (patterns expanded, duplicates dropped;
        subclasses with other specs override)."""
        if self.labels is not None:
            self.indices = _unique(i for s in self.labels for i in self._indices(s))

    def _label_hits(self, labels: Tensor, lengths: Tensor) -> Tensor:
        """(B, N) bool: the token carries one of ``indices`` (False on padding)."""
        mask = _label_mask(self.indices, self.num_labels, labels.device)
        return mask[labels.clamp(0, self.num_labels - 1)] & _valid(lengths, labels.shape[1])

    def _label_node_weights(self, lengths: Tensor, n: int, c: int, rows: int = 1) -> Tensor:
        """Node weights (B, rows, N, C) whose row 0 counts the tokens carrying one of
        ``indices`` (other rows zero, padding zero)."""
        b = lengths.shape[0]
        w = torch.zeros(b, rows, n, c, dtype=torch.float64, device=lengths.device)
        w[:, 0, :, self.indices] = 1.0
        return w * _valid(lengths, n).view(b, 1, n, 1)

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
        _check_batch(labels, lengths, tokens, self.needs_tokens, self.num_labels, self.name)
        return self._counts(labels, lengths, tokens).to(torch.get_default_dtype())

    def _counts(self, labels: Tensor, lengths: Tensor, tokens: Optional[Tokens]) -> Tensor:
        raise NotImplementedError

    @property
    def linear_penalty(self) -> bool:
        """The penalty is ``weight`` times a count linear in a chain's parts (instance level,
        linear counts, the default violation): it folds into the potentials
        (:meth:`~structssl.constraints.ConstraintSet.fold_penalties`)."""
        return (self.level == "instance" and self.linear_counts
                and type(self).violation_from_counts is Constraint.violation_from_counts)

    def penalty_from_counts(self, counts: Tensor) -> Tensor:
        """``Gamma`` of counts along the last dimension (corpus level: of summed counts):
        ``weight * violation``."""
        return self.weight * self.violation_from_counts(counts)

    def violation_from_counts(self, counts: Tensor) -> Tensor:
        """Non-negative violation of counts along the last dimension, 0 iff satisfied
        (default: the first count, a number of violations)."""
        return counts[..., 0].clamp(min=0)

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
        _check_batch(labels, lengths, tokens, self.needs_tokens, self.num_labels, self.name)
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
        """Counts as edge weights (B, d, N, C, C) and offset (B, d), for counts that need edges."""
        raise NotImplementedError(
            f"{self.name}: linear_counts is set, but neither _count_node_weights nor "
            "_count_weights gives the counts as weights: implement one, or set "
            "linear_counts = False"
        )

    def _indicator_weights(self, tokens: Optional[Tokens], lengths: Tensor, n: int, c: int) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{self.name}[{self.level}, {'hard' if self.hard else 'soft'}, weight={self.weight}]"


def _unique(indices: Iterable[int]) -> list[int]:
    """The indices in first-seen order, each once."""
    return list(dict.fromkeys(indices))
