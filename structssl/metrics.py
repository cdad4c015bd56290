"""Evaluation metrics as torchmetrics ``Metric``s, over batched label tensors and ``lengths``.

Every metric keeps integer counts as its state, summed across ``update`` calls and across
processes (``dist_reduce_fx="sum"``), so one big update, many small ones and a distributed run
give the same value. Results are fractions in [0, 1]; a ratio with a zero denominator is 0
(as conlleval reports it). Padding is defined only by ``lengths``.

=========================  ===============================  ===================================
metric                     inputs (preds, target)           value
=========================  ===============================  ===================================
:class:`TokenAccuracy`     (B, N) labels, ``lengths``       correct / valid positions
:class:`SpanF1`            (B, N) BIO tag ids, ``lengths``  CoNLL entity-level F1 (conlleval)
:class:`MicroF1`           (B, K) 0/1 label vectors         micro F1 over all (example, label)
:class:`ExactMatch`        any labels (+ ``lengths``)       fraction of examples entirely right
:class:`BracketF1`         (B, 2N - 1, 3) CKY spans         PARSEVAL labelled bracket F1
:class:`LabelProportions`  (B, N) labels, ``lengths``       predicted and gold label fractions
=========================  ===============================  ===================================

**Entities (SpanF1).** The semantics of the CoNLL-2000/2002 ``conlleval`` script on BIO (IOB2)
tags: an entity starts at a token tagged ``B-X``, at an ``I-X`` that follows ``O`` or the start of
the sentence, or at an ``I-X`` that follows a tag of another type (a "stray" ``I-X`` starts an
entity, as conlleval does; it is not dropped or repaired); it continues over the following
``I-X`` of the same type and ends before anything else. A predicted entity is correct iff a
gold entity has the same first token, last token and type. Precision = correct / predicted,
recall = correct / gold, F1 = 2 P R / (P + R), all micro-averaged over types (per-type values
with ``output="all"``). Sentences are the batch rows (the blank lines of conlleval's input).
With ``scheme="io"`` (a model of IO files, whose predictions are written back in IO) the tags
are read as their IO output reads them: a ``B-X`` directly after a ``B-X`` / ``I-X`` continues
that entity, so adjacent entities of one type merge into one (IO cannot tell them apart).

**Tags as a scheme writes them.** A model of IOB1, BIOES, BILOU or IO files tags in BIO and its
output is written back in the file's scheme. With ``tags`` and ``scheme``,
:class:`TokenAccuracy` and :class:`ExactMatch` compare the written tags
(:func:`written_tag_keys`): in BIOES ``S-X`` against ``B-X`` is an error although both are
``B-X`` in BIO, in IO ``B-X`` against ``I-X`` is not.

**Brackets (BracketF1).** A tree is its set of labelled spans ``(start, end, symbol)`` (rows of
the :class:`~structssl.structures.cky.CKY` labels layout, rows ``>= 2 * length - 1`` are padding).
Matching counts a predicted bracket as correct while an identical gold bracket is left
(multiset intersection, as EVALB). By default the length-1 spans (preterminals / POS tags,
which EVALB does not count) are left out and the root span is kept; ``exclude_root=True`` also
leaves out the span ``(0, length - 1)``, ``labelled=False`` ignores symbols. The trees are
scored as given (CNF trees including any binarisation nodes; undo the binarisation first to
compare with published PARSEVAL numbers on the original trees).

References: Tjong Kim Sang (2002), CoNLL-2002 shared task and ``conlleval``; Black et al.
(1991) PARSEVAL; Sekine and Collins (1997) EVALB; seed 004 for micro-F1 on multi-label data.
"""

from __future__ import annotations

import math
from typing import Literal, Optional, Sequence

import torch
from torch import Tensor
from torchmetrics import Metric, MetricCollection

from structssl.data.tag_schemes import SCHEMES

__all__ = [
    "TokenAccuracy",
    "SpanF1",
    "MicroF1",
    "ExactMatch",
    "BracketF1",
    "LabelProportions",
    "bio_entities",
    "written_tag_keys",
    "SPAN_SCHEMES",
    "metric_scheme",
    "task_metrics",
]

_O, _B, _I = 0, 1, 2
#: the span tag schemes of :mod:`structssl.data.tag_schemes` the metrics of BIO tags read them as
SPAN_SCHEMES: tuple[str, ...] = tuple(scheme for scheme in SCHEMES if scheme != "plain")


def _shape(x: object) -> object:
    return tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__


def _as_labels(x: Tensor, name: str, ndim: Optional[int] = None) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(x).__name__}")
    if x.is_floating_point() or x.is_complex():
        raise ValueError(f"{name} must have an integer or bool dtype; got {x.dtype}")
    if ndim is not None and x.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dims; got shape {tuple(x.shape)}")
    return x.long()


def _check_lengths(lengths: Optional[Tensor], b: int, max_length: int, what: str) -> Tensor:
    """(B,) long lengths in [0, max_length]; all ``max_length`` when ``None``."""
    if lengths is None:
        return torch.full((b,), max_length, dtype=torch.long)
    if not isinstance(lengths, Tensor):
        raise TypeError(f"lengths must be a torch.Tensor; got {type(lengths).__name__}")
    if lengths.shape != (b,):
        raise ValueError(
            f"lengths must have shape (B,) = ({b},) (B from preds); got {tuple(lengths.shape)}"
        )
    if lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool:
        raise ValueError(f"lengths must have an integer dtype; got {lengths.dtype}")
    if b and (int(lengths.min()) < 0 or int(lengths.max()) > max_length):
        raise ValueError(
            f"lengths must be in [0, {max_length}] ({what}); got values in "
            f"[{int(lengths.min())}, {int(lengths.max())}]"
        )
    return lengths.long()


def _sequence_pair(
    preds: Tensor, target: Tensor, lengths: Optional[Tensor]
) -> tuple[Tensor, Tensor, Tensor]:
    """Checked (B, N) label pairs and the (B, N) bool mask of valid positions."""
    preds, target = _pair(preds, target, 2)
    b, n = preds.shape
    lengths = _check_lengths(lengths, b, n, "N from preds").to(preds.device)
    return preds, target, torch.arange(n, device=preds.device) < lengths.unsqueeze(1)


def _pair(preds: Tensor, target: Tensor, ndim: Optional[int] = None) -> tuple[Tensor, Tensor]:
    preds = _as_labels(preds, "preds", ndim)
    target = _as_labels(target, "target", ndim)
    if preds.shape != target.shape:
        raise ValueError(
            "preds and target must have the same shape; got "
            f"{tuple(preds.shape)} and {tuple(target.shape)}"
        )
    return preds, target.to(preds.device)


def _ratio(num: Tensor, den: Tensor) -> Tensor:
    """``num / den`` as float, 0 where ``den == 0``."""
    num, den = num.double(), den.double()
    return torch.where(den > 0, num / den.clamp(min=1), torch.zeros_like(num)).float()


def _f1(tp: Tensor, n_pred: Tensor, n_gold: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    precision, recall = _ratio(tp, n_pred), _ratio(tp, n_gold)
    f1 = _ratio(2 * tp, n_pred + n_gold)  # = 2 P R / (P + R), 0 when tp = 0
    return precision, recall, f1


def _multiset_overlap(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """Multiset intersection of the rows of ``a`` (M_a, W) and ``b`` (M_b, W).

    Returns:
        ``(rows (U, W), count (U,))``: the distinct common rows and how often each is shared.
    """
    if a.shape[0] == 0 or b.shape[0] == 0:
        return a[:0], a.new_zeros(0)
    both = torch.cat([a, b])
    key = _row_keys(both)
    if key is None:
        rows, inverse = torch.unique(both, dim=0, return_inverse=True)
    else:  # one integer per row: a flat unique, about 30x faster than unique(dim=0)
        keys, inverse = torch.unique(key, return_inverse=True)
        rows = both.new_empty(keys.shape[0], both.shape[1])
        rows[inverse] = both  # every occurrence of a key is the same row
    count_a = torch.bincount(inverse[: a.shape[0]], minlength=rows.shape[0])
    count_b = torch.bincount(inverse[a.shape[0] :], minlength=rows.shape[0])
    return rows, torch.minimum(count_a, count_b)


def _row_keys(rows: Tensor) -> Optional[Tensor]:
    """One int64 per row of non-negative integer ``rows`` (M, W), equal exactly for equal rows
    and ascending in the rows' lexicographic order (the columns as digits of a mixed radix);
    ``None`` when the radices' product could overflow or a value is negative."""
    if rows.is_floating_point() or int(rows.min()) < 0:
        return None
    radices = (rows.amax(dim=0) + 1).tolist()
    if math.prod(radices) >= 2**62:
        return None
    key = rows[:, 0].long()
    for j in range(1, rows.shape[1]):
        key = key * radices[j] + rows[:, j]
    return key


class _CountMetric(Metric):
    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def _count(self, name: str, size: int = 0) -> None:
        default = torch.zeros(size, dtype=torch.long) if size else torch.zeros((), dtype=torch.long)
        self.add_state(name, default=default, dist_reduce_fx="sum")


# ---------------------------------------------------------------------- token accuracy
def metric_scheme(data_format: object) -> str:
    """The scheme the metrics read BIO tags in for data of ``data_format`` (a data module's
    ``saved_format()``, a dict with ``scheme``): its span scheme, else ``"bio"``."""
    scheme = data_format.get("scheme") if isinstance(data_format, dict) else None
    return scheme if scheme in SPAN_SCHEMES else "bio"


def _check_scheme(scheme: str, tags: Optional[Sequence[str]]) -> None:
    if scheme not in SPAN_SCHEMES:
        raise ValueError(f"scheme must be one of {list(SPAN_SCHEMES)}; got {scheme!r}")
    if scheme != "bio" and tags is None:
        raise ValueError(f"scheme {scheme!r} needs the BIO tags (tags=...); got tags=None")


def _register_tags(metric: Metric, tags: Sequence[str]) -> tuple[str, ...]:
    """Parse BIO ``tags`` into the ``kinds`` / ``types`` buffers of ``metric``; the type names."""
    kinds, types, names = _parse_tags(tags)
    metric.register_buffer("kinds", torch.tensor(kinds, dtype=torch.long), persistent=False)
    metric.register_buffer("types", torch.tensor(types, dtype=torch.long), persistent=False)
    return names


def written_tag_keys(
    labels: Tensor, lengths: Tensor, kinds: Tensor, types: Tensor, scheme: str
) -> Tensor:
    """One integer per position, equal at two positions iff the tags the BIO ``labels`` are
    written as in ``scheme`` are equal: what a tagger of ``scheme`` files outputs and what
    ``structssl predict`` scores (``from_bio`` of :mod:`structssl.data.tag_schemes`).

    ``bio``: the labels themselves. ``bioes`` / ``bilou``: the type and whether the token is
    the first and the last of its entity (``S-X`` / ``B-X`` / ``I-X`` / ``E-X``). ``iob1``: the
    type and whether a ``B-X`` follows an entity of type ``X`` (IOB1's ``B-X``; every other
    entity token is ``I-X``). ``io``: the type. ``O`` is one key. Entities are read as
    conlleval reads BIO (a stray ``I-X`` begins one), as ``from_bio`` does.

    Args:
        labels: (B, N) BIO tag ids.
        lengths: (B,) long; positions ``>= lengths`` read as ``O``.
        kinds, types: (C,) long, as for :func:`bio_entities`.
        scheme: one of ``bio``, ``iob1``, ``bioes``, ``bilou``, ``io``.

    Returns:
        (B, N) long keys.
    """
    if scheme == "bio":
        return labels
    b, n = labels.shape
    valid = torch.arange(n, device=labels.device) < lengths.unsqueeze(1)
    kind = torch.where(valid, kinds[labels], _O)
    etype = torch.where(valid, types[labels], -1)
    prev_type = torch.cat([etype.new_full((b, 1), -1), etype[:, :-1]], dim=1)
    inside = kind != _O
    first = inside & ((kind == _B) | (prev_type != etype))  # prev O has type -1
    if scheme == "io":
        flags = torch.zeros_like(kind)
    elif scheme == "iob1":
        flags = (first & (prev_type == etype)).long()
    else:
        next_kind = torch.cat([kind[:, 1:], kind.new_full((b, 1), _O)], dim=1)
        next_type = torch.cat([etype[:, 1:], etype.new_full((b, 1), -1)], dim=1)
        last = inside & ~((next_kind == _I) & (next_type == etype))
        flags = 2 * first.long() + last.long()
    return (etype + 1) * 4 + flags


class _SchemeMetric(_CountMetric):
    """A count metric over (B, N) tags that compares them as ``scheme`` writes them."""

    def _init_scheme(self, tags: Optional[Sequence[str]], scheme: str) -> None:
        _check_scheme(scheme, tags)
        self.scheme = scheme
        if scheme != "bio":
            assert tags is not None
            _register_tags(self, tags)

    def _written(self, preds: Tensor, target: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        if self.scheme == "bio":
            return preds, target
        c = self.kinds.shape[0]
        kinds, types = self.kinds.to(preds.device), self.types.to(preds.device)
        return tuple(  # type: ignore[return-value]
            written_tag_keys(x.clamp(0, c - 1), lengths, kinds, types, self.scheme)
            for x in (preds, target)
        )


class TokenAccuracy(_SchemeMetric):
    """Fraction of valid positions whose predicted label equals the target.

    ``update(preds, target, lengths=None)`` with preds, target (B, N) integer labels and
    lengths (B,) (default: all N).

    Args:
        tags: the BIO tag names of the label ids (needed by ``scheme``).
        scheme: compare the tags as a tagger of ``scheme`` files writes them
            (:func:`written_tag_keys`: for ``io`` ``B-X`` and ``I-X`` are one tag, for
            ``bioes`` ``B-X`` before ``O`` is ``S-X``), as ``structssl predict`` scores its
            output; default ``bio``: the labels themselves.
    """

    correct: Tensor
    total: Tensor

    def __init__(
        self, tags: Optional[Sequence[str]] = None, scheme: str = "bio", **kwargs: object
    ) -> None:
        super().__init__(**kwargs)
        self._init_scheme(tags, scheme)
        self._count("correct")
        self._count("total")

    def update(self, preds: Tensor, target: Tensor, lengths: Optional[Tensor] = None) -> None:
        """Add a batch.

        Shape:
            preds, target: (B, N); lengths: (B,).
        """
        preds, target, valid = _sequence_pair(preds, target, lengths)
        preds, target = self._written(preds, target, valid.sum(dim=1))
        self.correct += ((preds == target) & valid).sum()
        self.total += valid.sum()

    def compute(self) -> Tensor:
        return _ratio(self.correct, self.total)


# ---------------------------------------------------------------------- span F1
def _parse_tags(tags: Sequence[str]) -> tuple[list[int], list[int], tuple[str, ...]]:
    if isinstance(tags, str) or len(tags) == 0:
        raise ValueError(f"tags must be a non-empty sequence of tag names; got {tags!r}")
    kinds, types, names = [], [], []
    for tag in tags:
        if not isinstance(tag, str):
            raise TypeError(f"tags must be strings; got {tag!r}")
        if tag == "O":
            kinds.append(_O)
            types.append(-1)
            continue
        if len(tag) < 3 or tag[:2] not in ("B-", "I-"):
            raise ValueError(f"tags must be 'O', 'B-X' or 'I-X' (BIO / IOB2); got {tag!r}")
        if tag[2:] not in names:
            names.append(tag[2:])
        kinds.append(_B if tag[0] == "B" else _I)
        types.append(names.index(tag[2:]))
    if len(set(tags)) != len(tags):
        raise ValueError(f"tags must be distinct; got {list(tags)}")
    return kinds, types, tuple(names)


def bio_entities(
    labels: Tensor, lengths: Tensor, kinds: Tensor, types: Tensor, merge_adjacent: bool = False
) -> Tensor:
    """Entities of BIO-tagged sentences, conlleval semantics (see the module docstring).

    Args:
        labels: (B, N) tag ids.
        lengths: (B,) long.
        kinds: (C,) long, 0 / 1 / 2 for ``O`` / ``B-`` / ``I-`` tags.
        types: (C,) long entity type of each tag (-1 for ``O``).
        merge_adjacent: read the tags as IO reads them: a ``B-X`` right after a tag of type
            ``X`` continues that entity (``B-X B-X`` and ``B-X I-X B-X`` are one entity), as
            ``to_bio(from_bio(tags, "io"), "io")`` of :mod:`structssl.data.tag_schemes` gives.

    Returns:
        (M, 4) long rows ``(example, first, last, type)`` in row-major order.
    """
    b, n = labels.shape
    valid = torch.arange(n, device=labels.device) < lengths.unsqueeze(1)  # (B, N)
    kind = torch.where(valid, kinds[labels], _O)  # (B, N); padding reads as O
    etype = torch.where(valid, types[labels], -1)
    prev_kind = torch.cat([kind.new_full((b, 1), _O), kind[:, :-1]], dim=1)
    prev_type = torch.cat([etype.new_full((b, 1), -1), etype[:, :-1]], dim=1)
    inside = kind != _O
    start = inside & ((prev_kind == _O) | (etype != prev_type))
    if not merge_adjacent:
        start |= inside & (kind == _B)
    cont = inside & ~start  # an I-X continuing the entity on its left
    next_cont = torch.cat([cont[:, 1:], cont.new_zeros(b, 1)], dim=1)
    end = inside & ~next_cont
    first = start.nonzero()  # (M, 2) (example, position), row-major
    last = end.nonzero()  # entities do not overlap: the k-th end closes the k-th start
    assert first.shape == last.shape and bool((first[:, 0] == last[:, 0]).all())
    return torch.stack(
        [first[:, 0], first[:, 1], last[:, 1], etype[first[:, 0], first[:, 1]]], dim=1
    )


class SpanF1(_CountMetric):
    """CoNLL entity-level precision / recall / F1 from BIO tags (conlleval; module docstring).

    ``update(preds, target, lengths=None)`` with preds, target (B, N) tag ids into ``tags``.

    Args:
        tags: the tag vocabulary, e.g. ``CONLL2002_LABELS``: ``"O"``, ``"B-X"``, ``"I-X"``.
        output: what :meth:`compute` returns: ``"f1"``, ``"precision"``, ``"recall"`` (a scalar),
            or ``"all"``: a dict with ``precision``, ``recall``, ``f1`` and per type
            ``precision/X``, ``recall/X``, ``f1/X``.
        key_prefix: prepended to every key of the ``"all"`` dict (``"span_"`` gives
            ``span_f1``, ``span_precision/PER``, ...; how :func:`task_metrics` logs them).
        scheme: the tag scheme of the data the BIO tags stand for
            (:mod:`structssl.data.tag_schemes`): ``"io"`` scores the entities as the IO output
            reads them, adjacent entities of one type merged (``B-PER B-PER`` is one entity;
            module docstring); the other span schemes convert to and from BIO exactly and score
            the BIO entities as they are.
        kwargs: passed to ``torchmetrics.Metric``.

    Attributes:
        entity_types: the type names ``X`` in order of first appearance in ``tags``.
    """

    tp: Tensor
    n_pred: Tensor
    n_gold: Tensor

    def __init__(
        self,
        tags: Sequence[str],
        output: Literal["f1", "precision", "recall", "all"] = "f1",
        key_prefix: str = "",
        scheme: str = "bio",
        **kwargs: object,
    ) -> None:
        super().__init__(**kwargs)
        if output not in ("f1", "precision", "recall", "all"):
            raise ValueError(
                f"output must be one of 'f1', 'precision', 'recall', 'all'; got {output!r}"
            )
        _check_scheme(scheme, tags)
        if not isinstance(key_prefix, str):
            raise TypeError(f"key_prefix must be a str; got {type(key_prefix).__name__}")
        self.entity_types = _register_tags(self, tags)
        self.tags = tuple(tags)
        self.output = output
        self.key_prefix = key_prefix
        self.scheme = scheme
        size = max(len(self.entity_types), 1)
        self._count("tp", size)
        self._count("n_pred", size)
        self._count("n_gold", size)

    def update(self, preds: Tensor, target: Tensor, lengths: Optional[Tensor] = None) -> None:
        """Add a batch of sentences.

        Shape:
            preds, target: (B, N) tag ids; lengths: (B,).
        """
        preds, target = _pair(preds, target, 2)
        b, n = preds.shape
        lengths = _check_lengths(lengths, b, n, "N from preds").to(preds.device)
        c = len(self.tags)
        valid = torch.arange(n, device=preds.device) < lengths.unsqueeze(1)
        for name, x in (("preds", preds), ("target", target)):
            used = x[valid]
            if used.numel() and (int(used.min()) < 0 or int(used.max()) >= c):
                raise ValueError(
                    f"{name} must be tag ids in [0, {c}) at valid positions; got values in "
                    f"[{int(used.min())}, {int(used.max())}]"
                )
        kinds, types = self.kinds.to(preds.device), self.types.to(preds.device)
        merge = self.scheme == "io"
        pred = bio_entities(preds.clamp(0, c - 1), lengths, kinds, types, merge)  # (M_p, 4)
        gold = bio_entities(target.clamp(0, c - 1), lengths, kinds, types, merge)
        rows, shared = _multiset_overlap(pred, gold)
        size = self.tp.shape[0]
        self.tp += torch.zeros_like(self.tp).index_add_(0, rows[:, 3], shared)
        self.n_pred += torch.bincount(pred[:, 3], minlength=size)
        self.n_gold += torch.bincount(gold[:, 3], minlength=size)

    def compute(self) -> object:
        precision, recall, f1 = _f1(self.tp.sum(), self.n_pred.sum(), self.n_gold.sum())
        if self.output != "all":
            return {"f1": f1, "precision": precision, "recall": recall}[self.output]
        out = {"precision": precision, "recall": recall, "f1": f1}
        per_p, per_r, per_f = _f1(self.tp, self.n_pred, self.n_gold)
        for i, name in enumerate(self.entity_types):
            out[f"precision/{name}"] = per_p[i]
            out[f"recall/{name}"] = per_r[i]
            out[f"f1/{name}"] = per_f[i]
        return {f"{self.key_prefix}{key}": value for key, value in out.items()}


# ---------------------------------------------------------------------- label proportions
class LabelProportions(_CountMetric):
    """Predicted and gold label proportions over the valid positions (shows a collapse).

    An all-``O`` NER model scores about 0.92 token accuracy on CoNLL-2002; its proportions give
    it away: ``pred_fraction/O`` = 1 next to ``gold_fraction/O`` = 0.88 and
    ``pred_fraction/entity`` = 0. ``update(preds, target, lengths=None)`` with preds, target
    (B, N) label ids (the target's proportions are those of the data it is scored on: the
    labeled training batch for ``train/``, the dev set for ``val/``).

    :meth:`compute` returns a dict: ``pred_fraction/<label>`` and ``gold_fraction/<label>`` for
    each label name, and with BIO tags also ``pred_fraction/entity`` and
    ``gold_fraction/entity``: the fraction of tokens tagged ``B-X`` or ``I-X`` (inside an entity).

    Args:
        labels: the label names (e.g. the BIO tags), or the number of labels (names ``0``,
            ``1``, ...).
        kwargs: passed to ``torchmetrics.Metric``.
    """

    higher_is_better = None
    pred: Tensor
    gold: Tensor

    def __init__(self, labels: "Sequence[str] | int", **kwargs: object) -> None:
        super().__init__(**kwargs)
        if isinstance(labels, int) and not isinstance(labels, bool):
            if labels < 1:
                raise ValueError(f"labels must be >= 1 when given as a count; got {labels}")
            names = tuple(str(i) for i in range(labels))
        elif isinstance(labels, str) or not isinstance(labels, Sequence) or len(labels) == 0:
            raise ValueError(
                f"labels must be a non-empty sequence of names or a count; got {labels!r}"
            )
        else:
            names = tuple(str(name) for name in labels)
            if len(set(names)) != len(names):
                raise ValueError(f"labels must be distinct; got {list(names)}")
        self.names = names
        self.bio = all(n == "O" or n[:2] in ("B-", "I-") for n in names) and "O" in names
        self._count("pred", len(names))
        self._count("gold", len(names))

    def update(self, preds: Tensor, target: Tensor, lengths: Optional[Tensor] = None) -> None:
        """Add a batch.

        Shape:
            preds, target: (B, N); lengths: (B,).
        """
        preds, target, valid = _sequence_pair(preds, target, lengths)
        c = len(self.names)
        for name, x, state in (("preds", preds, "pred"), ("target", target, "gold")):
            used = x[valid]
            if used.numel() and (int(used.min()) < 0 or int(used.max()) >= c):
                raise ValueError(
                    f"{name} must be label ids in [0, {c}) at valid positions; got values in "
                    f"[{int(used.min())}, {int(used.max())}]"
                )
            setattr(self, state, getattr(self, state) + torch.bincount(used, minlength=c))

    def compute(self) -> dict[str, Tensor]:
        out: dict[str, Tensor] = {}
        for state in ("pred", "gold"):
            counts = getattr(self, state)
            total = counts.sum()
            for i, name in enumerate(self.names):
                out[f"{state}_fraction/{name}"] = _ratio(counts[i], total)
            if self.bio:
                o = self.names.index("O")
                out[f"{state}_fraction/entity"] = _ratio(total - counts[o], total)
        return out


# ---------------------------------------------------------------------- micro F1
class MicroF1(_CountMetric):
    """Micro-averaged F1 of multi-label predictions: ``2 TP / (2 TP + FP + FN)`` over all labels.

    ``update(preds, target)`` with preds, target (B, K) in {0, 1} (integer or bool).
    """

    tp: Tensor
    fp: Tensor
    fn: Tensor

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self._count("tp")
        self._count("fp")
        self._count("fn")

    def update(self, preds: Tensor, target: Tensor) -> None:
        """Add a batch.

        Shape:
            preds, target: (B, K).
        """
        preds, target = _pair(preds, target, 2)
        for name, x in (("preds", preds), ("target", target)):
            if x.numel() and (int(x.min()) < 0 or int(x.max()) > 1):
                raise ValueError(
                    f"{name} must hold 0/1 label indicators; got values in "
                    f"[{int(x.min())}, {int(x.max())}]"
                )
        self.tp += ((preds == 1) & (target == 1)).sum()
        self.fp += ((preds == 1) & (target == 0)).sum()
        self.fn += ((preds == 0) & (target == 1)).sum()

    def compute(self) -> Tensor:
        return _ratio(2 * self.tp, 2 * self.tp + self.fp + self.fn)


# ---------------------------------------------------------------------- exact match
class ExactMatch(_SchemeMetric):
    """Fraction of examples whose whole structure is predicted exactly.

    ``update(preds, target, lengths=None)`` with preds, target (B, ...) labels of any layout:
    (B,) classes, (B, K) label vectors, (B, N) tags, (B, 2N - 1, 3) tree spans. With
    ``lengths``, only the valid entries along dim 1 are compared: the first ``lengths``
    positions, or with ``tree=True`` the first ``2 * lengths - 1`` span rows.

    Args:
        tree: read ``lengths`` as sentence lengths of the CKY span layout.
        tags, scheme: for (B, N) BIO tags, compare them as ``scheme`` writes them (see
            :class:`TokenAccuracy`; ``io`` output cannot tell ``B-X`` from ``I-X``).
        kwargs: passed to ``torchmetrics.Metric``.
    """

    correct: Tensor
    total: Tensor

    def __init__(
        self,
        tree: bool = False,
        tags: Optional[Sequence[str]] = None,
        scheme: str = "bio",
        **kwargs: object,
    ) -> None:
        super().__init__(**kwargs)
        self.tree = bool(tree)
        if self.tree and scheme != "bio":
            raise ValueError(
                f"scheme is for (B, N) tags, not trees; got tree=True, scheme={scheme!r}"
            )
        self._init_scheme(tags, scheme)
        self._count("correct")
        self._count("total")

    def update(self, preds: Tensor, target: Tensor, lengths: Optional[Tensor] = None) -> None:
        """Add a batch.

        Shape:
            preds, target: (B, ...); lengths: (B,).
        """
        preds, target = _pair(preds, target)
        if preds.dim() == 0:
            raise ValueError("preds must have a batch dimension; got a 0-dim tensor")
        if self.scheme != "bio":
            preds, target, valid = _sequence_pair(preds, target, lengths)
            preds, target = self._written(preds, target, valid.sum(dim=1))
        b = preds.shape[0]
        same = (preds == target).reshape(b, -1) if preds.dim() > 1 else (preds == target).view(b, 1)
        if lengths is not None:
            if preds.dim() < 2:
                raise ValueError(
                    f"lengths needs preds with a dim 1 to mask; got shape {tuple(preds.shape)}"
                )
            rows = preds.shape[1]
            limit = (rows + 1) // 2 if self.tree else rows
            what = "(rows + 1) / 2 from preds" if self.tree else "N from preds"
            lengths = _check_lengths(lengths, b, limit, what).to(preds.device)
            valid_rows = 2 * lengths - 1 if self.tree else lengths
            valid = torch.arange(rows, device=preds.device) < valid_rows.unsqueeze(1)  # (B, R)
            valid = (
                valid.view(b, rows, *([1] * (preds.dim() - 2))).expand(preds.shape).reshape(b, -1)
            )
            same = same | ~valid
        self.correct += same.all(dim=1).sum()
        self.total += b

    def compute(self) -> Tensor:
        return _ratio(self.correct, self.total)


# ---------------------------------------------------------------------- bracket F1
class BracketF1(_CountMetric):
    """PARSEVAL labelled bracket F1 over CKY span labels (see the module docstring).

    ``update(preds, target, lengths)`` with preds, target (B, R, 3) rows ``(start, end, symbol)``
    (R >= 2 max(lengths) - 1; the two may differ in R) and lengths (B,) sentence lengths.

    Args:
        labelled: match symbols too (else unlabelled brackets).
        exclude_preterminals: leave out length-1 spans (EVALB does not count POS tags).
        exclude_root: leave out the span covering the whole sentence.
        output: ``"f1"``, ``"precision"``, ``"recall"`` or ``"all"`` (a dict of the three).
        kwargs: passed to ``torchmetrics.Metric``.
    """

    tp: Tensor
    n_pred: Tensor
    n_gold: Tensor

    def __init__(
        self,
        labelled: bool = True,
        exclude_preterminals: bool = True,
        exclude_root: bool = False,
        output: Literal["f1", "precision", "recall", "all"] = "f1",
        **kwargs: object,
    ) -> None:
        super().__init__(**kwargs)
        if output not in ("f1", "precision", "recall", "all"):
            raise ValueError(
                f"output must be one of 'f1', 'precision', 'recall', 'all'; got {output!r}"
            )
        self.labelled = bool(labelled)
        self.exclude_preterminals = bool(exclude_preterminals)
        self.exclude_root = bool(exclude_root)
        self.output = output
        self._count("tp")
        self._count("n_pred")
        self._count("n_gold")

    def _brackets(self, spans: Tensor, lengths: Tensor) -> Tensor:
        """(M, 4) rows ``(example, start, end, symbol or 0)`` of the counted brackets."""
        b, rows, _ = spans.shape
        valid = torch.arange(rows, device=spans.device) < (2 * lengths - 1).unsqueeze(1)  # (B, R)
        start, end, symbol = spans.unbind(2)
        keep = valid
        if self.exclude_preterminals:
            keep = keep & (start != end)
        if self.exclude_root:
            keep = keep & ~((start == 0) & (end == lengths.unsqueeze(1) - 1))
        example = torch.arange(b, device=spans.device).unsqueeze(1).expand(b, rows)
        symbol = symbol if self.labelled else torch.zeros_like(symbol)
        return torch.stack([example, start, end, symbol], dim=2)[keep]

    def update(self, preds: Tensor, target: Tensor, lengths: Tensor) -> None:
        """Add a batch of trees.

        Shape:
            preds: (B, R_p, 3); target: (B, R_t, 3); lengths: (B,).
        """
        preds = _as_labels(preds, "preds", 3)
        target = _as_labels(target, "target", 3).to(preds.device)
        if preds.shape[2] != 3 or target.shape[2] != 3 or preds.shape[0] != target.shape[0]:
            raise ValueError(
                "preds and target must have shape (B, 2N - 1, 3) with the same B; got "
                f"{tuple(preds.shape)} and {tuple(target.shape)}"
            )
        if lengths is None:
            raise ValueError("lengths must be given (sentence lengths (B,)); got None")
        b = preds.shape[0]
        rows = min(preds.shape[1], target.shape[1])
        lengths = _check_lengths(
            lengths, b, (rows + 1) // 2, "2 * lengths - 1 <= rows of preds and target"
        )
        lengths = lengths.to(preds.device)
        pred, gold = self._brackets(preds, lengths), self._brackets(target, lengths)
        _, shared = _multiset_overlap(pred, gold)
        self.tp += shared.sum()
        self.n_pred += pred.shape[0]
        self.n_gold += gold.shape[0]

    def compute(self) -> object:
        precision, recall, f1 = _f1(self.tp, self.n_pred, self.n_gold)
        out = {"precision": precision, "recall": recall, "f1": f1}
        return out if self.output == "all" else out[self.output]


# ---------------------------------------------------------------------- collections
Task = Literal["sequence", "bio", "multiclass", "multilabel", "tree"]
TASKS: tuple[str, ...] = ("sequence", "bio", "multiclass", "multilabel", "tree")


def task_metrics(
    task: Task, prefix: str = "", tags: Optional[Sequence[str]] = None, scheme: str = "bio"
) -> MetricCollection:
    """The standard metrics of a task as a ``MetricCollection`` logged as ``{prefix}{name}``.

    ==============  ================================================================
    task            metrics (names)
    ==============  ================================================================
    ``sequence``    ``token_accuracy``, ``exact_match``
    ``bio``         ``token_accuracy``, ``span_f1``, ``exact_match`` (needs ``tags``);
                    ``span_precision``, ``span_recall`` (micro) and per entity type
                    ``span_{precision,recall,f1}/X``; ``pred_fraction/<tag>``,
                    ``gold_fraction/<tag>``, ``{pred,gold}_fraction/entity``
                    (:class:`LabelProportions`: an all-``O`` collapse shows as
                    ``pred_fraction/entity`` = 0 whatever the token accuracy)
    ``multiclass``  ``accuracy`` (exact match of (B,) labels)
    ``multilabel``  ``micro_f1``, ``exact_match``
    ``tree``        ``bracket_f1``, ``exact_match``
    ==============  ================================================================

    Call ``metrics.update(preds, target, lengths=lengths)`` (metrics without ``lengths``
    ignore it) and log ``metrics.compute()``; use one collection per stage, e.g.
    ``task_metrics("bio", "val/", CONLL2002_LABELS)`` gives ``val/span_f1``. ``scheme`` (task
    ``bio``): the data's tag scheme. Token accuracy and exact match compare the tags as that
    scheme writes them (:func:`written_tag_keys`: in ``bioes`` ``S-X`` against ``B-X`` is an
    error, in ``io`` ``B-X`` against ``I-X`` is not), and span F1 with ``"io"`` merges adjacent
    entities of one type, as the IO output does: the values ``structssl predict`` gives.
    """
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}; got {task!r}")
    if (task == "bio") != (tags is not None):
        raise ValueError(
            f"tags must be given for task 'bio' and only for it; got task {task!r}, tags {tags!r}"
        )
    metrics: dict[str, Metric]
    if task == "sequence":
        metrics = {"token_accuracy": TokenAccuracy(), "exact_match": ExactMatch()}
    elif task == "bio":
        assert tags is not None
        metrics = {  # tags compared as the scheme writes them, as predict scores its output
            "token_accuracy": TokenAccuracy(tags, scheme),
            "span": SpanF1(tags, output="all", key_prefix="span_", scheme=scheme),
            "exact_match": ExactMatch(tags=tags, scheme=scheme),
            "proportions": LabelProportions(tags),
        }
    elif task == "multiclass":
        metrics = {"accuracy": ExactMatch()}
    elif task == "multilabel":
        metrics = {"micro_f1": MicroF1(), "exact_match": ExactMatch()}
    else:
        metrics = {"bracket_f1": BracketF1(), "exact_match": ExactMatch(tree=True)}
    return MetricCollection(metrics, prefix=prefix, compute_groups=False)
