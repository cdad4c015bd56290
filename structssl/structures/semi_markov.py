"""Semi-Markov chains (segmental CRF / semi-Markov structural SVM), first order in the labels.

A structure is a segmentation of the ``n`` tokens of an example into consecutive segments of
1 to ``K`` tokens, each with one of ``C`` *segment labels*. Its score is the sum of the
potentials of its segments; a segment's potential may depend on its start, its length, its
label and the label of the previous segment (Sarawagi and Cohen, 2004).

Potentials: (B, N, K, C, C). ``potentials[b, s, k, i, j]`` is the score of a segment of label
``j`` on tokens ``s .. s + k`` (length ``k + 1``) whose previous segment has label ``i``. At
``s = 0`` there is no previous segment: only row ``i = 0`` (a virtual start label) is a part,
as in :class:`~structssl.structures.LinearChain`. Entries with ``s + k >= lengths`` are padding
and may hold anything. Parts have the same layout (one-hot segments).

Labels: (B, N) long **token tags** (0 at padded positions). A tag is a pair (segment label,
begins a segment?), given by a :class:`SegmentTags` table, so that predictions are ordinary tag
sequences (the same tensors as a linear chain over BIO tags: the same data, metrics and
prediction files). The default table has two tags per label, ``B-c`` (tag ``2 c``) and ``I-c``
(tag ``2 c + 1``); a BIO tag set (``["O", "B-LOC", "I-LOC", ...]``) gives the labels ``O``,
``LOC``, ... where a label with no ``I-`` tag (``O``) has one-token segments only: the structure
forbids its longer segments itself (they have no tag sequence), so every structure is exactly
one tag sequence and back. Tags are canonicalised on input (:meth:`SemiMarkov.check_labels`):
an ``I-X`` tag that starts a sequence or follows a token of another label begins a segment
(the conlleval reading); a target segment longer than ``K`` is split into pieces of ``K``
tokens (or rejected, with ``long_segments="error"``).

Hamming cost: the number of tokens whose tag differs (linear in segments: a segment's cost is
the number of its tokens whose target tag differs from the segment's own tag).

Time O(B N K C^2) for log Z, max, argmax and marginals (autograd through the forward pass);
k-best is the semi-Markov generalisation of list Viterbi, O(B N K C^2 k log k) time and
O(B N C k) backpointers. Memory O(B N K C^2) (the potentials; one reordered copy).

References: Sarawagi and Cohen (2004), "Semi-Markov conditional random fields for information
extraction"; Seshadri and Sundberg (1994) for list Viterbi.
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Sequence

import torch
from torch import Tensor

from structssl.semirings import Semiring
from structssl.structures.base import Potentials, Structure, positive_int, semiring_sum

__all__ = ["SegmentTags", "SemiMarkov"]


class SegmentTags:
    """The token tags of segments: which tag each token of a segment gets.

    A tag is ``B-X`` (the first token of a segment of label ``X``), ``I-X`` (a later token of a
    segment of label ``X``) or any other name ``Y`` (e.g. ``O``): a label ``Y`` whose segments
    are one token long. Segment labels are numbered in the order they first appear in ``tags``.

    Args:
        tags: the tag names, in tag-index order (e.g. a data module's ``tags``).

    Attributes:
        tags: the tag names.
        labels: the segment label names, in label-index order (C of them).
        begin: (C,) long, the tag of a segment's first token.
        inside: (C,) long, the tag of a segment's later tokens; -1 where the label has none
            (its segments are one token long).
        tag_label: (T,) long, the segment label of each tag.
        tag_begins: (T,) bool, whether each tag begins a segment.

    Raises:
        ValueError: an empty or repeated tag, or a label with an ``I-`` tag but no ``B-`` tag.
    """

    def __init__(self, tags: Sequence[str]) -> None:
        tags = tuple(str(t) for t in tags)
        if not tags:
            raise ValueError("tags must name at least one tag; got none")
        if len(set(tags)) != len(tags):
            repeated = sorted({t for t in tags if tags.count(t) > 1})
            raise ValueError(f"tags must be distinct; got repeated tags {repeated}")
        labels: list[str] = []
        begin: dict[str, int] = {}
        inside: dict[str, int] = {}
        tag_label, tag_begins = [], []
        for index, tag in enumerate(tags):
            if tag.startswith("B-") or tag.startswith("I-"):
                name, first = tag[2:], tag.startswith("B-")
            else:
                name, first = tag, True
            if name not in labels:
                labels.append(name)
            (begin if first else inside)[name] = index
            tag_label.append(labels.index(name))
            tag_begins.append(first)
        missing = [name for name in labels if name not in begin]
        if missing:
            raise ValueError(
                f"every segment label needs a tag that begins its segments (B-X or a plain "
                f"name); labels {missing} have only I- tags in {list(tags)}"
            )
        self.tags = tags
        self.labels = tuple(labels)
        self.begin = torch.tensor([begin[name] for name in labels], dtype=torch.long)
        self.inside = torch.tensor([inside.get(name, -1) for name in labels], dtype=torch.long)
        self.tag_label = torch.tensor(tag_label, dtype=torch.long)
        self.tag_begins = torch.tensor(tag_begins, dtype=torch.bool)

    @classmethod
    def generic(cls, num_labels: int) -> "SegmentTags":
        """``B-c`` (tag ``2 c``) and ``I-c`` (tag ``2 c + 1``) for every label ``c < num_labels``."""
        positive_int(num_labels, "num_segment_labels")
        return cls([f"{p}-{c}" for c in range(num_labels) for p in ("B", "I")])

    @property
    def num_labels(self) -> int:
        """C, the number of segment labels."""
        return len(self.labels)

    @property
    def num_tags(self) -> int:
        """T, the number of tags."""
        return len(self.tags)

    def allowed(self, max_length: int) -> Tensor:
        """(K, C) bool: which (length - 1, label) segments have a tag sequence."""
        k = torch.arange(max_length).view(-1, 1)
        return (k == 0) | (self.inside >= 0).view(1, -1)

    def __repr__(self) -> str:
        return f"SegmentTags({list(self.tags)})"


class SemiMarkov(Structure):
    """Semi-Markov chain: segments of 1 to ``K`` tokens with ``C`` labels (module docstring).

    Give the label set by ``tags`` (e.g. BIO tags) or by ``num_segment_labels`` (generic
    ``B-c`` / ``I-c`` tags), or neither: the tags are then taken from the data when a training
    procedure sets up (:meth:`resolve_sizes`).

    Args:
        max_length: K >= 1, the longest segment.
        num_segment_labels: C, for the generic tag table.
        tags: token tag names (see :class:`SegmentTags`).
        long_segments: what a target segment longer than ``max_length`` becomes: ``"split"``
            (default) into pieces of ``max_length`` tokens, the nearest structure the chain has
            (so that the loss of dev data with a longer gold entity is defined; decoding never
            produces one), or ``"error"``: a ``ValueError`` naming the example.
        validate: check values at the public entry points (see :class:`Structure`).

    Attributes:
        num_labels: T, the number of token tags (the range of the labels).
        num_segment_labels: C.

    Infinities: ``-inf`` forbids a part (exact, at any scale); padding may hold anything;
    ``+inf`` / NaN at valid positions and examples with no valid structure raise
    ``ValueError`` naming the example.
    """

    event_shape_doc = "(N, K, C, C)"
    mask_value = float("-inf")

    def __init__(
        self,
        max_length: int,
        num_segment_labels: Optional[int] = None,
        tags: Optional[Sequence[str]] = None,
        long_segments: Literal["split", "error"] = "split",
        validate: bool = True,
    ) -> None:
        super().__init__(validate)
        self.max_length = positive_int(max_length, "max_length")
        if long_segments not in ("split", "error"):
            raise ValueError(f"long_segments must be 'split' or 'error'; got {long_segments!r}")
        self.long_segments = long_segments
        if tags is not None and num_segment_labels is not None:
            raise ValueError(
                "give at most one of num_segment_labels and tags (tags define the labels); got "
                f"num_segment_labels={num_segment_labels!r} and tags={list(tags)}"
            )
        self.codec: Optional[SegmentTags] = None
        if tags is not None:
            self._set_codec(SegmentTags(tags))
        elif num_segment_labels is not None:
            self._set_codec(SegmentTags.generic(num_segment_labels))
        else:
            self.num_labels = 0
            self.num_segment_labels = 0

    def _set_codec(self, codec: SegmentTags) -> None:
        self.codec = codec
        self.num_labels = codec.num_tags
        self.num_segment_labels = codec.num_labels
        self._allowed = codec.allowed(self.max_length)  # (K, C)
        self._all_allowed = bool(self._allowed.all())

    def __repr__(self) -> str:
        tags = None if self.codec is None else list(self.codec.tags)
        return f"SemiMarkov(max_length={self.max_length}, tags={tags})"

    def resolve_sizes(self, sizes: dict[str, Any]) -> None:
        """Take the tags from the data when none were given (``SemiMarkov(max_length=K)``).

        Raises:
            ValueError: the tags given differ from the data's, or the data gives only
                ``num_labels`` and no tag names.
        """
        tags = sizes.get("tags")
        if self.codec is not None:
            if tags is not None and tuple(tags) != self.codec.tags:
                raise ValueError(
                    f"SemiMarkov tags {list(self.codec.tags)} do not match the data's tags "
                    f"{list(tags)} (leave tags out to take them from the data)"
                )
            given = sizes.get("num_labels")
            if given is not None and given != self.num_labels:
                raise ValueError(
                    f"SemiMarkov has {self.num_labels} tags; the data has num_labels = {given}"
                )
            return
        if tags is None:
            if sizes.get("num_labels") is None:
                return
            raise ValueError(
                "SemiMarkov needs tag names from the data (the data module gives only "
                "num_labels); pass tags=[...] or num_segment_labels=C"
            )
        self._set_codec(SegmentTags(tags))

    def _codec(self) -> SegmentTags:
        if self.codec is None:
            raise ValueError(
                "SemiMarkov has no tag set: pass tags=[...] or num_segment_labels=C, or train it "
                "through a procedure whose data module gives the tags"
            )
        return self.codec

    # ------------------------------------------------------------------ checks
    def _check(self, potentials: Potentials, lengths: Optional[Tensor]) -> tuple[Tensor, Tensor]:
        if not isinstance(potentials, Tensor):
            raise TypeError(
                "SemiMarkov potentials must be a single tensor (B, N, K, C, C); got a "
                f"{type(potentials).__name__}"
            )
        codec = self._codec()
        k, c = self.max_length, codec.num_labels
        if potentials.dim() != 5 or potentials.shape[2:] != (k, c, c):
            raise ValueError(
                f"potentials must have shape (B, N, K, C, C) with K = max_length = {k} and C = "
                f"{c} segment labels {list(codec.labels)}; got {tuple(potentials.shape)}"
            )
        b, n = potentials.shape[:2]
        if n == 0:
            raise ValueError(
                f"potentials must have N >= 1 positions; got shape {tuple(potentials.shape)}"
            )
        lengths = self.check_lengths(lengths, b, n, potentials.device)
        if not self._all_allowed:  # segments with no tag sequence are no structure
            allowed = self._allowed.to(potentials.device).view(1, 1, k, 1, c)
            potentials = torch.where(allowed, potentials, float("-inf"))
        return potentials, lengths

    def valid_masks(self, potentials: Potentials, lengths: Tensor) -> tuple[Optional[Tensor], ...]:
        """(B, N, K, C, 1): segments within the length; at ``s = 0`` only row 0."""
        assert isinstance(potentials, Tensor)
        b, n, k, c, _ = potentials.shape
        dev = potentials.device
        end = torch.arange(n, device=dev).view(n, 1) + torch.arange(k, device=dev).view(1, k)
        inside = end.unsqueeze(0) < lengths.view(b, 1, 1)  # (B, N, K)
        rows = torch.ones(n, c, dtype=torch.bool, device=dev)
        rows[0, 1:] = False  # (N, C): no previous label at s = 0 but the virtual start
        return ((inside.unsqueeze(3) & rows.view(1, n, 1, c)).unsqueeze(4),)

    def check_labels(self, labels: Tensor, lengths: Tensor, name: str = "labels") -> Tensor:
        """Validate token tags and canonicalise them (see the module docstring).

        Returns:
            (B, N) long tags, 0 at padded positions, where every segment starts with its
            begin tag and is at most ``max_length`` tokens long.

        Raises:
            ValueError: wrong shape, dtype or range, or (``long_segments="error"``) a segment
                longer than ``max_length``.
        """
        codec = self._codec()
        labels, valid = self._position_labels(labels, lengths, name)
        n = labels.shape[1]
        if self.validate and labels.numel():
            lo, hi = int(labels.min()), int(labels.max())
            if lo < 0 or hi >= codec.num_tags:
                raise ValueError(
                    f"{name} must be tags in [0, T) = [0, {codec.num_tags}) at valid positions; "
                    f"got values in [{lo}, {hi}]"
                )
        dev = labels.device
        seg_label = codec.tag_label.to(dev)[labels]  # (B, N)
        begins = _segment_starts(codec.tag_begins.to(dev)[labels], seg_label)
        start, size = _segments(begins, valid)
        if self.long_segments == "error" and self.validate:
            too_long = begins & valid & (size > self.max_length)
            if bool(too_long.any()):
                where = too_long.nonzero()[0].tolist()
                raise ValueError(
                    f"{name} has a segment of {int(size[where[0], where[1]])} tokens at example "
                    f"{where[0]}, position {where[1]}; segments are at most max_length = "
                    f"{self.max_length} tokens (raise max_length, or long_segments='split')"
                )
        # a segment longer than K is split into pieces of K tokens (each begins anew)
        offset = torch.arange(n, device=dev).view(1, n) - start
        begins = begins | (offset % self.max_length == 0)
        canonical = torch.where(begins, codec.begin.to(dev)[seg_label], labels)
        return torch.where(valid, canonical, 0)

    # ------------------------------------------------------------------ dynamic programs
    def _by_end(self, potentials: Tensor) -> Tensor:
        """(B, N, K, C, C) reindexed by the segment's last token: ``[b, e, k] = [b, e - k, k]``
        (entries with ``e - k < 0`` repeat start 0 and are never read)."""
        n, k = potentials.shape[1], potentials.shape[2]
        dev = potentials.device
        ends = torch.arange(n, device=dev).view(n, 1)
        ks = torch.arange(k, device=dev).view(1, k)
        return potentials[:, (ends - ks).clamp(min=0), ks.expand(n, k)]

    def _start(self, potentials: Tensor) -> Tensor:
        """(B, C) log-space start vector: 0 for the virtual start label 0, -inf elsewhere."""
        b, c = potentials.shape[0], potentials.shape[3]
        start = potentials.new_full((b, c), float("-inf"))
        start[:, 0] = 0.0
        return start

    def _inside(self, potentials: Tensor, lengths: Tensor, semiring: Semiring) -> Tensor:
        b, n, k_max = potentials.shape[:3]
        # unbind once: slicing one step out of the whole tensor would give every step's
        # backward a full-size zero gradient (quadratic in N)
        by_end = self._by_end(potentials).unbind(1)
        alphas = [semiring.lift(self._start(potentials))]  # alphas[e]: prefixes of e tokens
        for e in range(1, n + 1):
            width = min(k_max, e)
            prev = torch.stack([alphas[e - 1 - k] for k in range(width)], dim=1)  # (B, L, C, *S)
            step = by_end[e - 1][:, :width]  # (B, L, C_prev, C_next)
            cand = semiring.mul_potentials(prev.unsqueeze(3), step)  # (B, L, C, C, *S)
            alphas.append(semiring_sum(semiring, cand.flatten(1, 2), 1))  # (B, C, *S)
        stacked = torch.stack(alphas, dim=1)  # (B, N + 1, C, *S)
        index = lengths.view((b, 1) + (1,) * (stacked.dim() - 2)).expand(
            (b, 1) + stacked.shape[2:]
        )
        final = stacked.gather(1, index).squeeze(1)  # (B, C, *S)
        return semiring_sum(semiring, final, 1)

    def _argmax(self, potentials: Tensor, lengths: Tensor) -> Tensor:
        labels, _ = self._kbest(potentials, 1, lengths)
        return labels[:, 0]

    def _kbest(self, potentials: Tensor, k: int, lengths: Tensor) -> tuple[Tensor, Tensor]:
        b, n, k_max, c, _ = potentials.shape
        dev = potentials.device
        by_end = self._by_end(potentials).unbind(1)
        first = potentials.new_full((b, c, k), float("-inf"))
        first[:, 0, 0] = 0.0
        alphas = [first]  # (B, C, k) best first
        pointers = [torch.zeros(b, c, k, dtype=torch.long, device=dev)]  # unused at e = 0
        for e in range(1, n + 1):
            width = min(k_max, e)
            prev = torch.stack([alphas[e - 1 - j] for j in range(width)], dim=1)  # (B, L, C, k)
            cand = prev.unsqueeze(3) + by_end[e - 1][:, :width].unsqueeze(-1)  # (B, L, Cp, Cn, k)
            cand = cand.permute(0, 3, 1, 2, 4).reshape(b, c, width * c * k)  # (B, Cn, L Cp k)
            top, arg = _topk_padded(cand, k)
            alphas.append(top)
            pointers.append(arg)  # flat index (length - 1) * C k + prev label * k + rank
        alpha = torch.stack(alphas, dim=1)  # (B, N + 1, C, k)
        pointer = torch.stack(pointers, dim=1)  # (B, N + 1, C, k)
        final = alpha[torch.arange(b, device=dev), lengths].reshape(b, c * k)
        scores, index = _topk_padded(final, k)  # (B, k): label * k + rank
        label, rank = index // k, index % k
        end = lengths.view(b, 1).expand(b, k).clone()  # each rank's current segment end
        codec = self._codec()
        begin_tag, inside_tag = codec.begin.to(dev), codec.inside.clamp(min=0).to(dev)
        batch = torch.arange(b, device=dev).view(b, 1)
        flat = pointer[batch, end, label, rank]  # (B, k)
        seg_start = end - 1 - flat // (c * k)
        prev_label, prev_rank = (flat // k) % c, flat % k
        out = torch.zeros(b, k, n, dtype=torch.long, device=dev)
        for p in range(n - 1, -1, -1):
            active = p < end  # (B, k): within the length (end only decreases)
            is_start = active & (seg_start == p)
            tag = torch.where(is_start, begin_tag[label], inside_tag[label])
            out[:, :, p] = torch.where(active, tag, 0)
            # at a segment start, move to the previous segment (ending just before p)
            move = is_start & (p > 0)
            if bool(move.any()):
                end = torch.where(move, seg_start, end)
                label = torch.where(move, prev_label, label)
                rank = torch.where(move, prev_rank, rank)
                flat = pointer[batch, end, label, rank]
                seg_start = torch.where(move, end - 1 - flat // (c * k), seg_start)
                prev_label = torch.where(move, (flat // k) % c, prev_label)
                prev_rank = torch.where(move, flat % k, prev_rank)
        return out, scores

    # ------------------------------------------------------------------ parts
    def _segments_of(self, labels: Tensor, lengths: Tensor) -> tuple[Tensor, ...]:
        """Segments of canonical tags: ``(begins, size, label, previous label)``, each (B, N);
        ``begins`` marks the first token of each segment within the length."""
        codec = self._codec()
        dev = labels.device
        valid = self.valid_mask(lengths, labels.shape[1])
        seg_label = codec.tag_label.to(dev)[labels]
        begins = codec.tag_begins.to(dev)[labels] & valid
        _, size = _segments(begins, valid)
        prev = torch.cat([seg_label.new_zeros(labels.shape[0], 1), seg_label[:, :-1]], dim=1)
        return begins, size, seg_label, prev


    def to_parts(self, labels: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
        """Tags (B, N) to one-hot segment parts (B, N, K, C, C); padding is all zero."""
        labels, lengths = self._position_labels_and_lengths(labels, lengths)
        b, n = labels.shape
        c, k = self.num_segment_labels, self.max_length
        begins, size, seg_label, prev = self._segments_of(labels, lengths)
        flat = (((size - 1).clamp(0, k - 1) * c + prev) * c + seg_label).view(b, n, 1)
        parts = torch.zeros(b, n, k * c * c, device=labels.device)
        parts.scatter_(2, flat, begins.unsqueeze(2).float())
        return parts.view(b, n, k, c, c)

    def node_parts(self, parts: Tensor) -> Tensor:
        """Per-token tag indicators (or marginals) from segment parts (or marginals).

        ``out[b, p, t]`` is the total weight of the segments that give token ``p`` the tag
        ``t``: with marginals, the marginal probability of each tag at each token.
        Differentiable; zero at padded positions.

        Shape:
            parts: (B, N, K, C, C) -> (B, N, T).
        """
        codec = self._codec()
        b, n, k, c, _ = parts.shape
        seg = parts.sum(3)  # (B, N, K, C): weight of each (start, length, label)
        first = seg.sum(2)  # (B, N, C) weight of segments starting at each token
        # coverage by a difference array: +w at the start, -w one past the segment's end
        ends = (torch.arange(n, device=parts.device).view(n, 1)
                + torch.arange(1, k + 1, device=parts.device).view(1, k)).clamp(max=n)
        diff = torch.zeros(b, n + 1, c, dtype=parts.dtype, device=parts.device)
        diff = diff.index_add(1, ends.flatten(), -seg.reshape(b, n * k, c))
        cover = (diff[:, :n] + first).cumsum(1)  # (B, N, C): weight of segments covering p
        inside = cover - first
        dtype, dev = parts.dtype, parts.device
        to_begin = torch.nn.functional.one_hot(codec.begin, codec.num_tags).to(dev, dtype)
        has_inside = (codec.inside >= 0).to(dev).view(c, 1)
        to_inside = torch.nn.functional.one_hot(codec.inside.clamp(min=0), codec.num_tags)
        to_inside = to_inside.to(dev, dtype) * has_inside
        return first @ to_begin + inside @ to_inside

    def from_parts(self, parts: Potentials, lengths: Optional[Tensor] = None) -> Tensor:
        """Segment parts (B, N, K, C, C) to tags (B, N): exact for one-hot parts; for
        marginals, the most likely tag of each token (which need not form a structure)."""
        if not isinstance(parts, Tensor) or parts.dim() != 5:
            got = tuple(parts.shape) if isinstance(parts, Tensor) else type(parts).__name__
            raise ValueError(f"parts must be a tensor of shape (B, N, K, C, C); got {got}")
        tags = self.node_parts(parts).argmax(2)
        if lengths is None:
            return tags
        return torch.where(self.valid_mask(lengths.to(tags.device), tags.shape[1]), tags, 0)

    def hamming_potentials(self, target: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
        """Token-tag Hamming cost in segment parts (B, N, K, C, C): a segment's cost is the
        number of its tokens whose tag differs from the target's (0 in padding)."""
        target, lengths = self._position_labels_and_lengths(target, lengths, "target")
        codec = self._codec()
        b, n = target.shape
        k, c = self.max_length, codec.num_labels
        dev = target.device
        wrong_begin = (target.unsqueeze(2) != codec.begin.to(dev)).float()  # (B, N, C)
        wrong_inside = (target.unsqueeze(2) != codec.inside.to(dev)).float()  # -1: always
        cost = [wrong_begin]
        inner = torch.zeros_like(wrong_begin)
        for j in range(1, k):  # segment s .. s + j: add token s + j's inside mismatch
            shifted = torch.cat([wrong_inside[:, j:], wrong_inside.new_zeros(b, min(j, n), c)], 1)
            inner = inner + shifted[:, :n]
            cost.append(wrong_begin + inner)
        out = torch.stack(cost, dim=2)  # (B, N, K, C)
        end = torch.arange(n, device=dev).view(n, 1) + torch.arange(k, device=dev).view(1, k)
        out = out * (end.unsqueeze(0) < lengths.view(b, 1, 1)).unsqueeze(3)
        return out.unsqueeze(3).expand(b, n, k, c, c).contiguous()

    def _score(self, potentials: Potentials, labels: Tensor, lengths: Tensor) -> Tensor:
        # gather the segments' potentials: O(B N) instead of the dot product with parts
        assert isinstance(potentials, Tensor)
        b, n, k, c, _ = potentials.shape
        if labels.shape != (b, n):
            raise ValueError(f"labels must have shape (B, N) = ({b}, {n}); got {tuple(labels.shape)}")
        begins, size, seg_label, prev = self._segments_of(labels, lengths)
        flat = ((size - 1).clamp(0, k - 1) * c + prev) * c + seg_label
        picked = potentials.reshape(b, n, k * c * c).gather(2, flat.unsqueeze(2)).squeeze(2)
        return torch.where(begins, picked, 0.0).sum(1)  # where: padding may hold -inf

    # ------------------------------------------------------------------ BIO conversions
    def segments(self, labels: Tensor, lengths: Optional[Tensor] = None) -> list[list[tuple[int, int, str]]]:
        """The segments of tags as ``(start, end_exclusive, label name)`` per example."""
        labels, lengths = self._position_labels_and_lengths(labels, lengths)
        begins, size, seg_label, _ = self._segments_of(labels, lengths)
        names = self._codec().labels
        out: list[list[tuple[int, int, str]]] = []
        for row_b, row_s, row_l in zip(begins.tolist(), size.tolist(), seg_label.tolist()):
            out.append([(s, s + row_s[s], names[row_l[s]]) for s, on in enumerate(row_b) if on])
        return out


def _segment_starts(tag_begins: Tensor, seg_label: Tensor) -> Tensor:
    """(B, N) bool: a begin tag, the first token, or an inside tag after another label."""
    first = torch.zeros_like(tag_begins)
    first[:, 0] = True
    changed = torch.ones_like(tag_begins)
    changed[:, 1:] = seg_label[:, 1:] != seg_label[:, :-1]
    return tag_begins | first | changed


def _segments(begins: Tensor, valid: Tensor) -> tuple[Tensor, Tensor]:
    """For segment starts ``begins`` (B, N): ``(start of the segment of each token, size of
    the segment starting at each start)``; the size is meaningless elsewhere."""
    b, n = begins.shape
    pos = torch.arange(n, device=begins.device).expand(b, n)
    starts = begins & valid
    start = torch.where(starts, pos, 0).cummax(1).values  # (B, N)
    # next start after each position (or the length): reverse cumulative min
    lengths = valid.sum(1, keepdim=True)
    following = torch.where(starts, pos, lengths.expand(b, n))
    following = torch.cat([following[:, 1:], lengths], dim=1)
    nxt = following.flip(1).cummin(1).values.flip(1)
    return start, nxt - pos


def _topk_padded(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """``x.topk(k, -1)`` padded with -inf (index 0) where the last dim has fewer than k."""
    m = x.shape[-1]
    if m >= k:
        top = x.topk(k, dim=-1)
        return top.values, top.indices
    top = x.topk(m, dim=-1)
    pad = x.new_full((*x.shape[:-1], k - m), float("-inf"))
    idx = torch.zeros(*x.shape[:-1], k - m, dtype=torch.long, device=x.device)
    return torch.cat([top.values, pad], -1), torch.cat([top.indices, idx], -1)
