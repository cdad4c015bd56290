"""Instance-level constraints: prior knowledge about the labels of one example, penalised per
example (seed 000 section 5.1, seed 003 section 4.1.1)."""

from __future__ import annotations

import re
from typing import Literal, Optional, Sequence, Union

import torch
from torch import Tensor

from structssl.constraints.base import Constraint, _unique
from structssl.constraints.labelings import (
    LabelSpec,
    Tokens,
    _check_label_list,
    _hinge,
    _label_mask,
    _token_mask,
    _valid,
    runs_per_label,
    transitions_mask,
)
from structssl.losses.gamma import ConstraintFeatures, LinearConstraintFeatures

__all__ = [
    "DEFAULT_PUNCTUATION",
    "MustAppear",
    "MustNotAppear",
    "AtMostOnce",
    "WordLabels",
    "AllowedFirst",
    "PunctuationTransitions",
    "ConsecutiveFields",
]

#: Tokens at which a segment boundary is allowed by :class:`PunctuationTransitions`.
DEFAULT_PUNCTUATION: tuple[str, ...] = (
    ".", ",", ";", ":", "?", "!", "(", ")", "[", "]", "{", "}", '"', "'", "``", "''", "-", "--",
    "/", "\n", "<NEWLINE>",
)  # fmt: skip


class _LabelCount(Constraint):
    """Shared: counts = number of tokens with one of ``labels``."""

    def __init__(self, labels: Union[LabelSpec, Sequence[LabelSpec]], **kwargs) -> None:
        super().__init__(**kwargs)
        self._set_labels(labels)

    def _counts(self, labels: Tensor, lengths: Tensor, tokens: Optional[Tokens]) -> Tensor:
        return self._label_hits(labels, lengths).sum(1, keepdim=True)

    def _count_node_weights(self, tokens, lengths, n, c):
        zero = torch.zeros(lengths.shape[0], 1, dtype=torch.float64, device=lengths.device)
        return self._label_node_weights(lengths, n, c), zero


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

    def _indicators(self, labels, lengths, tokens):
        return ~self._label_hits(labels, lengths)

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
        self._set_labels(labels)
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

    @property
    def name(self) -> str:
        if self._name is not None:
            return self._name
        words = sorted(self.words)
        what = words[:3] + (["..."] if len(words) > 3 else []) + ([self.pattern.pattern] if self.pattern else [])
        return f"WordLabels({'|'.join(what)} -> {', '.join(map(str, self._label_specs()))})"

    def restricted(self, token: str) -> bool:
        """Whether a token is restricted by this rule."""
        tok = token.lower() if self.lowercase else token
        return tok in self.words or (self.pattern is not None and self.pattern.fullmatch(token) is not None)

    def _restricted_mask(self, tokens: Tokens, lengths: Tensor, n: int) -> Tensor:
        return _token_mask(tokens, n, self.restricted, lengths.device) & _valid(lengths, n)

    def _bad(self, labels, lengths, tokens):
        return self._restricted_mask(tokens, lengths, labels.shape[1]) & ~self._label_hits(labels, lengths)

    def _counts(self, labels, lengths, tokens):
        return self._bad(labels, lengths, tokens).sum(1, keepdim=True)

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
        self._set_labels(labels)

    def _bad(self, labels, lengths):
        allowed = _label_mask(self.indices, self.num_labels, labels.device)
        first = labels[:, 0].clamp(0, self.num_labels - 1) if labels.shape[1] else labels.new_zeros(labels.shape[0])
        return ~allowed[first] & (lengths > 0)

    def _counts(self, labels, lengths, tokens):
        return self._bad(labels, lengths).view(-1, 1)

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

    def _resolve(self) -> None:
        specs = self.labels if self.labels is not None else list(range(self.num_labels))
        self.indices = _unique(i for s in specs for i in self._indices(s))

    def _counts(self, labels, lengths, tokens):
        runs = runs_per_label(labels, lengths, self.num_labels)[:, self.indices]
        return _hinge(runs - 1).sum(1, keepdim=True)

