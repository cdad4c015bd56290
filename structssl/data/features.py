"""Sparse token features for linear scorers, and the two-view split for co-training.

:class:`FeatureExtractor` turns each token of a sentence into a set of binary features named
by strings ``"<template>[<offset>]=<value>"`` (``"lower[0]=madrid"``, ``"shape[-1]=Xx"``),
learns a vocabulary of those seen at least ``min_count`` times in the training data
(:meth:`FeatureExtractor.fit`) and maps sentences to integer feature indices
(:meth:`FeatureExtractor.transform`): per sentence an (n, F_i) long tensor, padded with 0.
Index 0 is reserved for padding; real features are ``1 .. num_features - 1``. Unseen features
map to nothing (they are left out). :meth:`FeatureExtractor.transform_batch` pads a batch into
a :class:`FeatureBatch` ``(B, N, F_max)`` that feeds an ``nn.EmbeddingBag`` scorer directly::

    bag = nn.EmbeddingBag(extractor.num_features, num_labels, mode="sum", padding_idx=0)
    unary = bag(batch.indices.view(-1, batch.indices.shape[-1])).view(B, N, num_labels)

Templates (token ``w`` at position ``t`` of a sentence of length ``n``):

=============== =====================================================================
``bias``        always on (one feature)
``word``        ``w``
``lower``       ``w.lower()``
``prefix``      prefixes of lengths ``affix_lengths`` (``p2:ma``), only if shorter than w
``suffix``      suffixes likewise (``s3:rid``)
``ngram``       letter n-grams of orders ``ngram_orders`` (of ``w.lower()``)
``shape``       ``X`` upper, ``x`` lower, ``d`` digit, other characters kept: ``Xxxxx``
``short_shape`` the shape with repeats collapsed: ``Xx``, ``Xx-Xx``, ``d.d``
``cap``         ``init_upper``, ``init_lower``, ``all_upper``, ``mixed`` (upper and lower
                after the first character), ``upper_at:i`` for upper-case positions 1..9
``digits``      ``number`` (all digits), ``has_digit``, ``digit_dot_digit`` (``34.32``),
                ``alnum`` (letters and digits, ``HSF1``)
``special``     ``has_hyphen``, ``has_special`` (a non-alphanumeric character),
                ``all_special``
``length``      ``min(len(w), 10)``
``position``    ``first`` (t = 0), ``last`` (t = n - 1)
``quoted``      ``inside`` when the token lies between an open quote or bracket and its
                closing one (el Grupo "Magenta")
``given``       the provided feature columns of the reader (CoNLL POS column, the
                citation files' 7 fields): ``given<j>[<offset>]=<value>``
=============== =====================================================================

The templates in ``window_templates`` are also taken from the neighbours at offsets
``-window .. window``; positions outside the sentence give ``<s>`` / ``</s>`` values.

Two views (thesis chapters 5 and 6): :class:`ViewSplit` assigns every feature to view 0, view
1 or both. ``scheme="token_surface"`` puts token identity (``word``, ``lower``, ``prefix``,
``suffix``, ``ngram``, and any templates you add to ``token_templates``) in view 0 and the
surface clues (everything else) in view 1; ``"random"`` splits the features into two random
halves; ``"odd_even"`` puts odd feature indices in view 0 and even ones in view 1 (the
splits compared in the thesis, Fig. 5.3). The ``bias`` feature belongs to both views. For the
citation files the provided stems are token identity: pass
``token_templates=TOKEN_VIEW_TEMPLATES + ("given0", "given1", "given2")``.

References: Brefeld (thesis), ch. 5 Table 5.3/5.4 and ch. 6 for the views; Ratnaparkhi (1996)
and Collins (2002) for the lexical feature templates.
"""

from __future__ import annotations

import re
from array import array
from collections import Counter
from dataclasses import dataclass
from itertools import repeat
from typing import Any, Iterable, Literal, Optional, Union
from typing import Sequence as Seq

import torch
from torch import Tensor

from structssl.data.batch import pad_features
from structssl.data.clusters import CASE_PROFILES
from structssl.data.records import Sequence, Vocabulary

__all__ = [
    "TEMPLATES",
    "TOKEN_VIEW_TEMPLATES",
    "FeatureBatch",
    "FeatureExtractor",
    "ViewSplit",
    "token_shape",
]

#: All template names (``given`` expands to ``given0``, ``given1``, ... per column).
TEMPLATES = (
    "bias", "word", "lower", "prefix", "suffix", "ngram", "shape", "short_shape", "cap",
    "digits", "special", "length", "position", "quoted", "given",
)  # fmt: skip
#: Templates describing the token's identity (view 0 of the ``token_surface`` split).
TOKEN_VIEW_TEMPLATES = ("word", "lower", "prefix", "suffix", "ngram")

_DEFAULT_TEMPLATES = (
    "bias", "word", "lower", "prefix", "suffix", "shape", "short_shape", "cap", "digits",
    "special", "length", "position", "quoted",
)  # fmt: skip
_INTRINSIC = frozenset(
    ("word", "lower", "prefix", "suffix", "ngram", "shape", "short_shape", "cap", "digits",
     "special", "length")
)  # fmt: skip
#: Templates whose strings depend on the position in the sentence, not on the token string.
_POSITIONAL = frozenset(("bias", "position", "quoted", "given"))
#: One offset of a window: (offset, its positional templates, its strings past the start and
#: past the end of a sentence).
_OffsetPlan = tuple[int, tuple[str, ...], tuple[str, ...], tuple[str, ...]]
_DIGIT_DOT_DIGIT = re.compile(r"^\d+[.,]\d+$")
_OPEN = {"(": ")", "[": "]", "{": "}", "«": "»", "“": "”", "‘": "’", "¿": "?", "¡": "!"}
_SYMMETRIC_QUOTES = frozenset(('"', "'", "``", "''"))
_BOS, _EOS = "<s>", "</s>"


def token_shape(token: str, short: bool = False) -> str:
    """``Madrid`` -> ``Xxxxxx`` (``short``: ``Xx``); digits ``d``, other characters kept."""
    out = []
    for ch in token:
        c = "X" if ch.isupper() else "x" if ch.islower() else "d" if ch.isdigit() else ch
        if not (short and out and out[-1] == c):
            out.append(c)
    return "".join(out)


def _intrinsic_values(
    token: str, template: str, affix_lengths: Seq[int], ngram_orders: Seq[int]
) -> list[str]:
    """Values of a template that depends only on the token string."""
    if template == "word":
        return [token]
    if template == "lower":
        return [token.lower()]
    if template == "prefix":
        return [f"p{k}:{token[:k].lower()}" for k in affix_lengths if k < len(token)]
    if template == "suffix":
        return [f"s{k}:{token[-k:].lower()}" for k in affix_lengths if k < len(token)]
    if template == "ngram":
        low = token.lower()
        grams = {low[i : i + k] for k in ngram_orders for i in range(len(low) - k + 1)}
        return sorted(grams)
    if template == "shape":
        return [token_shape(token)]
    if template == "short_shape":
        return [token_shape(token, short=True)]
    if template == "cap":
        out = []
        if token[0].isupper():
            out.append("init_upper")
        elif token[0].islower():
            out.append("init_lower")
        if token.isupper() and len(token) > 1:
            out.append("all_upper")
        rest = token[1:]
        if any(c.isupper() for c in rest) and any(c.islower() for c in token):
            out.append("mixed")
        out.extend(f"upper_at:{i}" for i, c in enumerate(token[:10]) if i > 0 and c.isupper())
        return out
    if template == "digits":
        out = []
        if token.isdigit():
            out.append("number")
        if any(c.isdigit() for c in token):
            out.append("has_digit")
            if any(c.isalpha() for c in token):
                out.append("alnum")
        if _DIGIT_DOT_DIGIT.match(token):
            out.append("digit_dot_digit")
        return out
    if template == "special":
        out = []
        if "-" in token:
            out.append("has_hyphen")
        special = [not c.isalnum() for c in token]
        if any(special):
            out.append("all_special" if all(special) else "has_special")
        return out
    if template == "length":
        return [str(min(len(token), 10))]
    raise AssertionError(template)


def _quoted(tokens: Seq[str]) -> list[bool]:
    """Whether each token lies inside an open quote or bracket."""
    inside = []
    stack: list[str] = []
    for tok in tokens:
        if stack and tok == stack[-1]:
            stack.pop()
            inside.append(False)
            continue
        inside.append(bool(stack))
        if tok in _OPEN:
            stack.append(_OPEN[tok])
        elif tok in _SYMMETRIC_QUOTES:
            stack.append(tok if tok == '"' or tok == "'" else "''")
    return inside


@dataclass(frozen=True)
class FeatureBatch:
    """Padded sparse features of a batch of sentences.

    Attributes:
        indices: (B, N, F) long feature indices, 0 = padding (no feature).
        lengths: (B,) long sentence lengths (positions ``>= lengths`` are padding).
        num_features: size of the index space (including the padding index 0).
    """

    indices: Tensor
    lengths: Tensor
    num_features: int

    @property
    def mask(self) -> Tensor:
        """(B, N, F) bool: which slots hold a feature."""
        return self.indices != 0


class FeatureExtractor:
    """Sparse binary token features with a vocabulary learned on training sentences.

    Args:
        templates: template names (see the module docstring); default: all but ``ngram`` and
            ``given``.
        window: neighbours at offsets ``-window .. window`` contribute ``window_templates``.
        window_templates: templates also taken from the neighbours.
        min_count: features seen fewer times in :meth:`fit` are dropped.
        affix_lengths: prefix / suffix lengths.
        ngram_orders: letter n-gram orders of the ``ngram`` template.
        cluster_sizes: with sizes, e.g. ``(32, 128, 512)``, :meth:`fit` also learns
            distributional word clusters from its sentences
            (:class:`~structssl.data.clusters.WordClusters`; untagged ones count), and the
            token and its neighbours at offsets ``-window .. window`` get one
            ``cluster<k>[<offset>]=<id>`` feature per size, and the word's case profile
            learned from the same text, ``case_profile[<offset>]=<profile>``
            (:meth:`~structssl.data.clusters.WordClusters.case`). Empty (default): none.

    Example:
        >>> fx = FeatureExtractor(min_count=1).fit([["El", "Grupo", "Magenta"]])
        >>> fx.transform([["El", "Grupo"]])[0].shape[0]
        2
    """

    def __init__(
        self,
        templates: Seq[str] = _DEFAULT_TEMPLATES,
        window: int = 1,
        window_templates: Seq[str] = ("lower", "short_shape"),
        min_count: int = 1,
        affix_lengths: Seq[int] = (1, 2, 3),
        ngram_orders: Seq[int] = (2, 3, 4),
        cluster_sizes: Seq[int] = (),
    ) -> None:
        from structssl.data.clusters import WordClusters

        for name, values in (("templates", templates), ("window_templates", window_templates)):
            unknown = [t for t in values if t not in TEMPLATES]
            if unknown:
                raise ValueError(f"{name} must be drawn from {list(TEMPLATES)}; got {unknown}")
        if not isinstance(window, int) or window < 0:
            raise ValueError(f"window must be an int >= 0; got {window!r}")
        if window and "bias" in window_templates:
            raise ValueError("window_templates must not contain 'bias' (it is the same everywhere)")
        if not isinstance(min_count, int) or min_count < 1:
            raise ValueError(f"min_count must be an int >= 1; got {min_count!r}")
        if any(k < 1 for k in affix_lengths) or any(k < 1 for k in ngram_orders):
            raise ValueError(
                f"affix_lengths and ngram_orders must be >= 1; got {tuple(affix_lengths)} and "
                f"{tuple(ngram_orders)}"
            )
        self.templates = tuple(templates)
        self.window = window
        self.window_templates = tuple(window_templates) if window else ()
        self.min_count = min_count
        self.affix_lengths = tuple(affix_lengths)
        self.ngram_orders = tuple(ngram_orders)
        self.cluster_sizes = tuple(cluster_sizes)
        #: the word clusters (learned by :meth:`fit` when ``cluster_sizes`` is given)
        self.clusters: Optional[WordClusters] = None
        if self.cluster_sizes:
            WordClusters(self.cluster_sizes)  # validates the sizes now, not at fit
        self.vocabulary: Optional[Vocabulary] = None
        self._string_cache: dict[tuple[str, int], tuple[str, ...]] = {}
        self._id_cache: dict[tuple[str, int], tuple[int, ...]] = {}
        self._position_id_cache: dict[tuple[Any, ...], tuple[int, ...]] = {}
        self._plan_key: Optional[tuple[Any, ...]] = None
        self._plan: tuple[_OffsetPlan, ...] = ()

    def __repr__(self) -> str:
        fitted = f", num_features={self.num_features}" if self.vocabulary is not None else ""
        return (
            f"FeatureExtractor(templates={self.templates}, window={self.window}, "
            f"window_templates={self.window_templates}, min_count={self.min_count}, "
            f"cluster_sizes={self.cluster_sizes}{fitted})"
        )

    # ------------------------------------------------------------------------ saving
    def state_dict(self) -> dict[str, Any]:
        """The options and the learned vocabulary as plain lists (what a checkpoint keeps).

        Raises:
            RuntimeError: before :meth:`fit`.
        """
        return {
            "templates": list(self.templates),
            "window": self.window,
            "window_templates": list(self.window_templates),
            "min_count": self.min_count,
            "affix_lengths": list(self.affix_lengths),
            "ngram_orders": list(self.ngram_orders),
            "vocabulary": list(self.feature_names),
            "cluster_sizes": list(self.cluster_sizes),
            "clusters": None if self.clusters is None else self.clusters.state_dict(),
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> "FeatureExtractor":
        """The fitted extractor of :meth:`state_dict`.

        Raises:
            ValueError: ``state`` lacks a key or its vocabulary does not start with ``<pad>``.
        """
        keys = ("templates", "window", "window_templates", "min_count", "affix_lengths",
                "ngram_orders", "vocabulary")
        missing = [k for k in keys if k not in state]
        if missing:
            raise ValueError(f"a FeatureExtractor state must hold {list(keys)}; missing {missing}")
        vocabulary = list(state["vocabulary"])
        if not vocabulary or vocabulary[0] != "<pad>":
            raise ValueError(
                "a FeatureExtractor vocabulary must start with '<pad>'; got "
                f"{vocabulary[:1]!r}"
            )
        out = cls(
            templates=state["templates"], window=int(state["window"]),
            window_templates=state["window_templates"] or ("lower",),
            min_count=int(state["min_count"]), affix_lengths=state["affix_lengths"],
            ngram_orders=state["ngram_orders"], cluster_sizes=state.get("cluster_sizes", ()),
        )
        if state.get("clusters") is not None:
            from structssl.data.clusters import WordClusters

            out.clusters = WordClusters.from_state_dict(state["clusters"])
        out.window_templates = tuple(state["window_templates"])
        out.vocabulary = Vocabulary(vocabulary)
        return out

    # ------------------------------------------------------------------------ strings
    def _token_strings(self, token: str, offset: int) -> tuple[str, ...]:
        """Feature strings of the intrinsic templates of ``token`` seen at ``offset``."""
        key = (token, offset)
        cached = self._string_cache.get(key)
        if cached is not None:
            return cached
        names = self.templates if offset == 0 else self.window_templates
        out = []
        for tmpl in names:
            if tmpl in _INTRINSIC:
                for v in _intrinsic_values(token, tmpl, self.affix_lengths, self.ngram_orders):
                    out.append(f"{tmpl}[{offset}]={v}")
        if self.clusters is not None:
            ids = self.clusters.ids(token)
            if ids is not None:
                out.extend(f"cluster{k}[{offset}]={i}" for k, i in zip(self.clusters.sizes, ids))
            case = self.clusters.case(token)
            if case is not None:
                out.append(f"case_profile[{offset}]={CASE_PROFILES[case]}")
        result = tuple(out)
        self._string_cache[key] = result
        return result

    def _context_plan(self) -> tuple[_OffsetPlan, ...]:
        """Per offset ``-window .. window``: the position templates in template order, and the
        strings every template gives past the sentence's start (``<s>``) and end (``</s>``)."""
        key = (self.templates, self.window_templates, self.window)
        if self._plan_key != key:
            plan = []
            for offset in range(-self.window, self.window + 1):
                names = self.templates if offset == 0 else self.window_templates
                plan.append((
                    offset,
                    tuple(t for t in names if t in _POSITIONAL),
                    tuple(f"{t}[{offset}]={_BOS}" for t in names),
                    tuple(f"{t}[{offset}]={_EOS}" for t in names),
                ))
            self._plan, self._plan_key = tuple(plan), key
        return self._plan

    def _context_strings(
        self, tokens: Seq[str], given: Optional[Seq[Seq[str]]], quoted: list[bool], t: int
    ) -> list[str]:
        """Feature strings that depend on the position, not only on the token string."""
        n = len(tokens)
        out: list[str] = []
        for offset, names, before, after in self._context_plan():
            u = t + offset
            if u < 0:
                out.extend(before)
                continue
            if u >= n:
                out.extend(after)
                continue
            for tmpl in names:
                if tmpl == "bias":
                    out.append("bias")
                elif tmpl == "position":
                    if u == 0:
                        out.append(f"position[{offset}]=first")
                    if u == n - 1:
                        out.append(f"position[{offset}]=last")
                elif tmpl == "quoted":
                    if quoted[u]:
                        out.append(f"quoted[{offset}]=inside")
                else:  # given
                    assert given is not None
                    out.extend(f"given{j}[{offset}]={v}" for j, v in enumerate(given[u]))
        return out

    def _position_key(self, n: int, t: int, quoted: list[bool]) -> tuple[Any, ...]:
        """What :meth:`_context_strings` of position ``t`` of ``n`` depends on without the
        ``given`` template, as a key: its distance to either end up to ``window + 1`` and the
        quote flags of its window."""
        w = self.window
        return min(t, w + 1), min(n - 1 - t, w + 1), tuple(quoted[max(0, t - w) : t + w + 1])

    @staticmethod
    def _unpack(sentence: Union[Sequence, Seq[str]]) -> tuple[Seq[str], Optional[Seq[Seq[str]]]]:
        if isinstance(sentence, Sequence):
            return sentence.tokens, sentence.features
        if isinstance(sentence, str):
            raise TypeError("sentences must be Sequence records or lists of tokens; got a str")
        return sentence, None

    def _check_given(self, given: Optional[Seq[Seq[str]]], index: int) -> None:
        if given is None and ("given" in self.templates or "given" in self.window_templates):
            raise ValueError(
                f"the 'given' template needs provided features; sentence {index} has none "
                "(pass Sequence records from a reader)"
            )

    def strings(self, sentence: Union[Sequence, Seq[str]]) -> list[list[str]]:
        """The feature strings of every position of one sentence (before the vocabulary)."""
        tokens, given = self._unpack(sentence)
        self._check_given(given, 0)
        return self._strings(tokens, given)

    def _uses(self, template: str) -> bool:
        return template in self.templates or template in self.window_templates

    def _strings(self, tokens: Seq[str], given: Optional[Seq[Seq[str]]]) -> list[list[str]]:
        quoted = _quoted(tokens) if self._uses("quoted") else []
        n = len(tokens)
        out = []
        for t in range(n):
            feats = list(self._token_strings(tokens[t], 0))
            for offset in range(-self.window, self.window + 1):
                if offset and 0 <= t + offset < n:
                    feats.extend(self._token_strings(tokens[t + offset], offset))
            feats.extend(self._context_strings(tokens, given, quoted, t))
            out.append(feats)
        return out

    # ------------------------------------------------------------------------ fitting
    def fit(self, sentences: Iterable[Union[Sequence, Seq[str]]]) -> "FeatureExtractor":
        """Learn the feature vocabulary (features seen at least ``min_count`` times).

        Args:
            sentences: :class:`~structssl.data.records.Sequence` records or token lists
                (with ``cluster_sizes``, also the text the word clusters are learned from).

        Returns:
            ``self``.
        """
        sentences = list(sentences)
        self._string_cache = {}
        if self.cluster_sizes:
            from structssl.data.clusters import WordClusters

            self.clusters = WordClusters(self.cluster_sizes).fit(
                self._unpack(sentence)[0] for sentence in sentences
            )
        # a token's strings are the same wherever it occurs: count the (token, offset) pairs
        # and the position strings, then each pair's strings once (the counts _strings gives)
        counts: Counter[str] = Counter()
        pairs: Counter[tuple[str, int]] = Counter()
        occurrences: Counter[tuple[Any, ...]] = Counter()
        positions: dict[tuple[Any, ...], list[str]] = {}
        # with the 'given' template a position's strings hold the data's own features
        uses_given = self._uses("given")
        for i, sentence in enumerate(sentences):
            tokens, given = self._unpack(sentence)
            self._check_given(given, i)
            n = len(tokens)
            for offset in range(-self.window, self.window + 1):
                pairs.update(zip(tokens[max(0, offset) : n + min(0, offset)], repeat(offset)))
            quoted = _quoted(tokens) if self._uses("quoted") else []
            for t in range(n):
                if uses_given:
                    counts.update(self._context_strings(tokens, given, quoted, t))
                    continue
                key = self._position_key(n, t, quoted)
                if key not in positions:
                    positions[key] = self._context_strings(tokens, given, quoted, t)
                occurrences[key] += 1
        for (token, offset), count in pairs.items():
            for feature in self._token_strings(token, offset):
                counts[feature] += count
        for key, count in occurrences.items():
            for feature in positions[key]:
                counts[feature] += count
        kept = sorted(s for s, c in counts.items() if c >= self.min_count)
        self.vocabulary = Vocabulary(["<pad>"] + kept)
        self._id_cache = {}
        self._position_id_cache = {}
        return self

    @property
    def num_features(self) -> int:
        """Size of the index space, including the padding index 0."""
        if self.vocabulary is None:
            raise RuntimeError("FeatureExtractor.num_features needs fit() first")
        return len(self.vocabulary)

    @property
    def feature_names(self) -> tuple[str, ...]:
        """Feature strings by index (index 0 is ``<pad>``)."""
        if self.vocabulary is None:
            raise RuntimeError("FeatureExtractor.feature_names needs fit() first")
        return self.vocabulary.items

    def _ids(self, strings: Iterable[str]) -> list[int]:
        assert self.vocabulary is not None
        get = self.vocabulary.get
        return [i for i in (get(s) for s in strings) if i is not None]

    def encode(self, sentence: Union[Sequence, Seq[str]]) -> Tensor:
        """Feature indices of one sentence.

        Args:
            sentence: a :class:`~structssl.data.records.Sequence` or a token list.

        Returns:
            (n, F) long tensor, rows padded with 0 (F = the most features of a position).
        """
        if self.vocabulary is None:
            raise RuntimeError("FeatureExtractor.encode needs fit() first")
        tokens, given = self._unpack(sentence)
        self._check_given(given, 0)
        quoted = _quoted(tokens) if self._uses("quoted") else []
        uses_given = self._uses("given")
        n = len(tokens)
        rows: list[list[int]] = []
        for t in range(n):
            ids: list[int] = []
            for offset in range(-self.window, self.window + 1):
                u = t + offset
                if 0 <= u < n:
                    key = (tokens[u], offset)
                    cached = self._id_cache.get(key)
                    if cached is None:
                        cached = tuple(self._ids(self._token_strings(tokens[u], offset)))
                        self._id_cache[key] = cached
                    ids.extend(cached)
            if uses_given:
                ids.extend(self._ids(self._context_strings(tokens, given, quoted, t)))
            else:
                key = self._position_key(n, t, quoted)
                cached = self._position_id_cache.get(key)
                if cached is None:
                    cached = tuple(self._ids(self._context_strings(tokens, given, quoted, t)))
                    self._position_id_cache[key] = cached
                ids.extend(cached)
            rows.append(ids)
        if n == 0:
            return torch.zeros(0, 0, dtype=torch.long)
        width = max(len(r) for r in rows)
        if width == 0:
            return torch.zeros(n, 0, dtype=torch.long)
        flat = array("q")  # the rows padded with 0, converted to int64 in one C loop
        for r in rows:
            flat.extend(r)
            flat.extend(repeat(0, width - len(r)))
        return torch.frombuffer(flat, dtype=torch.long).view(n, width)

    def transform(self, sentences: Iterable[Union[Sequence, Seq[str]]]) -> list[Tensor]:
        """:meth:`encode` of every sentence: a list of (n_i, F_i) long tensors."""
        return [self.encode(s) for s in sentences]

    def transform_batch(self, sentences: Seq[Union[Sequence, Seq[str]]]) -> FeatureBatch:
        """Padded features of a batch: indices (B, N, F_max), lengths (B,)."""
        indices, lengths = pad_features(self.transform(sentences))
        return FeatureBatch(indices=indices, lengths=lengths, num_features=self.num_features)


class ViewSplit:
    """An assignment of features to two views, and the re-indexing into each view.

    Args:
        feature_names: the feature strings by index (index 0 = padding), e.g.
            :attr:`FeatureExtractor.feature_names`.
        scheme: ``"token_surface"``, ``"random"`` or ``"odd_even"`` (see the module docstring).
        token_templates: templates of view 0 under ``"token_surface"`` (``given<j>`` names a
            provided column).
        seed: the seed of the ``"random"`` split.

    Attributes:
        assignment: (num_features,) long: 0 or 1 for one view, 2 for both, -1 for padding.
        num_features: the index-space sizes of the two views (each with its padding index 0).
    """

    def __init__(
        self,
        feature_names: Seq[str],
        scheme: Literal["token_surface", "random", "odd_even"] = "token_surface",
        token_templates: Seq[str] = TOKEN_VIEW_TEMPLATES,
        seed: int = 0,
    ) -> None:
        if scheme not in ("token_surface", "random", "odd_even"):
            raise ValueError(
                f"scheme must be 'token_surface', 'random' or 'odd_even'; got {scheme!r}"
            )
        size = len(feature_names)
        if size < 1:
            raise ValueError("feature_names must include the padding name at index 0; got none")
        assignment = torch.empty(size, dtype=torch.long)
        token = set(token_templates)
        if scheme == "token_surface":
            for i, name in enumerate(feature_names):
                assignment[i] = 0 if name.split("[", 1)[0] in token else 1
        elif scheme == "odd_even":
            assignment = (torch.arange(size) % 2 == 0).long()  # odd -> view 0, even -> view 1
        else:
            g = torch.Generator().manual_seed(seed)
            perm = torch.randperm(size - 1, generator=g) + 1
            assignment[perm[: (size - 1) // 2]] = 0
            assignment[perm[(size - 1) // 2 :]] = 1
        for i, name in enumerate(feature_names):
            if name == "bias":
                assignment[i] = 2
        assignment[0] = -1
        self.assignment = assignment
        self._remap = []
        sizes = []
        for v in (0, 1):
            member = (assignment == v) | (assignment == 2)
            remap = torch.zeros(size, dtype=torch.long)
            remap[member] = torch.arange(1, int(member.sum()) + 1)
            self._remap.append(remap)
            sizes.append(int(member.sum()) + 1)
        self.num_features = (sizes[0], sizes[1])

    def __repr__(self) -> str:
        return f"ViewSplit(num_features={self.num_features})"

    def __call__(self, indices: Tensor) -> tuple[Tensor, Tensor]:
        """Split feature indices into the two views' own index spaces.

        Args:
            indices: (..., F) long feature indices (0 = padding).

        Returns:
            Two (..., F_v) long tensors: each view's features, packed to the left, 0-padded,
            re-indexed to ``1 .. num_features[v] - 1``.

        Shape:
            indices: (..., F) -> ((..., F_0), (..., F_1)).
        """
        if indices.dtype != torch.long:
            raise TypeError(f"indices must be a long tensor; got {indices.dtype}")
        size = self.assignment.shape[0]
        if indices.numel() and (int(indices.min()) < 0 or int(indices.max()) >= size):
            raise ValueError(
                f"indices must lie in 0..{size - 1} (the split's feature space); got "
                f"{int(indices.min())}..{int(indices.max())}"
            )
        out = []
        for remap in self._remap:
            mapped = remap[indices]
            empty = (mapped == 0).to(torch.uint8)
            order = torch.sort(empty, dim=-1, stable=True).indices
            packed = mapped.gather(-1, order)
            width = int((mapped != 0).sum(-1).max()) if mapped.numel() else 0
            out.append(packed[..., :width].contiguous())
        return out[0], out[1]

    def split_batch(self, batch: FeatureBatch) -> tuple[FeatureBatch, FeatureBatch]:
        """:meth:`__call__` on a :class:`FeatureBatch`."""
        first, second = self(batch.indices)
        return (
            FeatureBatch(first, batch.lengths, self.num_features[0]),
            FeatureBatch(second, batch.lengths, self.num_features[1]),
        )
