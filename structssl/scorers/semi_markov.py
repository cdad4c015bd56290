"""Semi-Markov scorer: segment potentials from token features (span-level NER).

:class:`SemiMarkovScorer` is the linear joint-feature model of a semi-Markov CRF / structural
SVM over token tags (:class:`~structssl.structures.SemiMarkov`). With ``phi(x_p)`` the features
of token ``p`` and ``u[p, t] = W[:, t] . phi(x_p) + b[t]`` the score of tag ``t`` at token
``p`` (the emission scores of a linear chain over the same tags), a segment of label ``c`` on
tokens ``s .. e`` after a segment of label ``c'`` scores

    u[s, B(c)] + sum_{s < p <= e} u[p, I(c)]                 (its tokens' tags: B- then I-)
    + L[e - s, c]                                              (length bias)
    + T[c', c]  (or S[c] when s = 0)  + E[c] if e = n - 1      (transition, start, end)

with ``B(c)`` / ``I(c)`` the begin / inside tags of label ``c`` (:class:`SegmentTags`; a label
with no inside tag, ``O``, has one-token segments only). This is the BIO linear chain's
emission model with transitions between segment labels and a per-length, per-label bias: the
conversion between BIO token tags and segments lives in the tag table, so the data module and
the metrics see ordinary tag sequences.

Shapes: inputs (B, N, F) long, (B, N) long words or (B, N, D) float; potentials
(B, N, K, C, C), 0 where the segment ends past the length. Time O(B N (F T + K C^2)), memory
O(B N K C^2).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch
from torch import Tensor, nn

from structssl.scorers.base import (
    LinearInputs,
    Scorer,
    adopt_input_size,
    check_init_std,
    check_lengths,
    init_,
)
from structssl.structures.base import positive_int
from structssl.structures.semi_markov import SegmentTags

__all__ = ["SemiMarkovScorer"]


class SemiMarkovScorer(Scorer):
    """Linear semi-Markov scorer ``x -> (B, N, K, C, C)`` (see the module docstring).

    Sizes left out (``tags``, the input size) are taken from the data when a training
    procedure sets up (:meth:`resolve_sizes`, as :class:`~structssl.scorers.LinearChainScorer`).

    Args:
        max_length: K, the longest segment (the structure's ``max_length``).
        tags: token tag names (default: from the data); see :class:`SegmentTags`.
        num_features: sparse feature index space (inputs (B, N, F) long, 0 = padding).
        num_words: word vocabulary (inputs (B, N) long word ids).
        input_dim: D of dense inputs (B, N, D).
        length_bias: learn a (K, C) bias per segment length and label.
        transitions: learn a (C, C) transition matrix between segment labels.
        start_end: learn (C,) start and end weights.
        bias: learn a per-tag emission bias.
        init_std: weights ~ N(0, init_std^2) from the global torch RNG; 0 (default) gives zeros.
        validate: check value ranges of inputs and lengths (device syncs).

    Example:
        >>> scorer = SemiMarkovScorer(3, tags=["O", "B-X", "I-X"], input_dim=2)
        >>> scorer(torch.zeros(4, 5, 2), torch.tensor([5, 3, 1, 2])).shape
        torch.Size([4, 5, 3, 2, 2])
    """

    def __init__(
        self,
        max_length: int,
        tags: Optional[Sequence[str]] = None,
        num_features: Optional[int] = None,
        num_words: Optional[int] = None,
        input_dim: Optional[int] = None,
        length_bias: bool = True,
        transitions: bool = True,
        start_end: bool = True,
        bias: bool = True,
        init_std: float = 0.0,
        validate: bool = True,
    ) -> None:
        super().__init__()
        self.max_length = positive_int(max_length, "max_length")
        self.validate = bool(validate)
        self._options = dict(
            num_features=num_features, num_words=num_words, input_dim=input_dim,
            length_bias=length_bias, transitions=transitions, start_end=start_end, bias=bias,
            init_std=check_init_std(init_std),
        )
        given = [k for k in ("num_features", "num_words", "input_dim") if self._options[k] is not None]
        if len(given) > 1:
            raise ValueError(
                f"at most one of num_features, num_words, input_dim may be given; got {given}"
            )
        self.codec: Optional[SegmentTags] = None if tags is None else SegmentTags(tags)
        self.emission: Optional[LinearInputs] = None
        self.length: Optional[nn.Parameter] = None
        self.transition: Optional[nn.Parameter] = None
        self.start: Optional[nn.Parameter] = None
        self.end: Optional[nn.Parameter] = None
        if self.codec is not None and given:
            self._build()

    def _build(self) -> None:
        o, codec = self._options, self.codec
        assert codec is not None
        c = codec.num_labels
        self.emission = LinearInputs(
            codec.num_tags, o["num_features"], o["num_words"], o["input_dim"], o["bias"],
            o["init_std"], self.validate,
        )
        self.length = nn.Parameter(torch.zeros(self.max_length, c)) if o["length_bias"] else None
        self.transition = nn.Parameter(torch.zeros(c, c)) if o["transitions"] else None
        self.start = nn.Parameter(torch.zeros(c)) if o["start_end"] else None
        self.end = nn.Parameter(torch.zeros(c)) if o["start_end"] else None
        self.reset_parameters()

    def resolve_sizes(self, sizes: dict[str, Any]) -> None:
        """Take the tags and the input size from the data, and build the weights.

        Raises:
            ValueError: a size given to the constructor differs from the data's, or the data
                gives no tags or no input size where none was given.
        """
        o = self._options
        tags = sizes.get("tags")
        if tags is not None:
            if self.codec is not None and tuple(tags) != self.codec.tags:
                raise ValueError(
                    f"SemiMarkovScorer tags {list(self.codec.tags)} do not match the data's tags "
                    f"{list(tags)} (leave tags out to take them from the data)"
                )
            if self.codec is None:
                self.codec = SegmentTags(tags)
        mine = adopt_input_size(o, sizes, "SemiMarkovScorer")
        if self.emission is None:
            if self.codec is None or not mine:
                raise ValueError(
                    "SemiMarkovScorer needs tags and one of num_features, num_words, input_dim; "
                    f"got tags={None if self.codec is None else list(self.codec.tags)}, sizes "
                    f"from the data {sorted(sizes)}"
                )
            self._build()

    def reset_parameters(self) -> None:
        """Re-initialise all weights (deterministic given the torch seed)."""
        emission, _ = self._built()
        emission.reset_parameters()
        for p in (self.length, self.transition, self.start, self.end):
            if p is not None:
                init_(p, self._options["init_std"])

    def _built(self) -> tuple[LinearInputs, SegmentTags]:
        if self.emission is None or self.codec is None:
            raise ValueError(
                "SemiMarkovScorer has no weights yet: give tags and num_features / num_words / "
                "input_dim, or train it through a procedure whose data module gives them"
            )
        return self.emission, self.codec

    def forward(self, inputs: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
        """Segment potentials of a batch.

        Args:
            inputs: sparse feature indices (B, N, F) long, word ids (B, N) long, or dense
                (B, N, D), as chosen in the constructor.
            lengths: (B,) long in [1, N] (default: all N).

        Returns:
            (B, N, K, C, C) potentials in the :class:`~structssl.structures.SemiMarkov` layout,
            0 where a segment ends at or past the length.
        """
        emission, codec = self._built()
        emission.check(inputs, "B, N")
        b, n = inputs.shape[:2]
        if n == 0:
            raise ValueError(f"inputs must have N >= 1 positions; got shape {tuple(inputs.shape)}")
        lengths = check_lengths(lengths, b, n, inputs.device, self.validate)
        dev = inputs.device
        valid = (torch.arange(n, device=dev) < lengths.unsqueeze(1)).unsqueeze(2)  # (B, N, 1)
        tag_scores = emission(inputs)  # (B, N, T)
        tag_scores = torch.where(valid, tag_scores, torch.zeros((), dtype=tag_scores.dtype, device=dev))
        first = tag_scores[:, :, codec.begin.to(dev)]  # (B, N, C)
        has_inside = (codec.inside >= 0).to(dev)
        later = tag_scores[:, :, codec.inside.clamp(min=0).to(dev)] * has_inside  # (B, N, C)
        k_max, c = self.max_length, codec.num_labels
        segments = [first]
        inner = torch.zeros_like(first)
        for k in range(1, k_max):  # tokens s + 1 .. s + k take the inside tag
            shifted = torch.cat([later[:, k:], later.new_zeros(b, min(k, n), c)], dim=1)
            inner = inner + shifted
            segments.append(first + inner)
        seg = torch.stack(segments, dim=2)  # (B, N, K, C)
        if self.length is not None:
            seg = seg + self.length
        ends = torch.arange(n, device=dev).view(n, 1) + torch.arange(k_max, device=dev).view(1, k_max)
        if self.end is not None:
            last = (ends.unsqueeze(0) == (lengths.view(b, 1, 1) - 1)).unsqueeze(3)  # (B, N, K, 1)
            seg = seg + last * self.end
        pot = seg.unsqueeze(3).expand(b, n, k_max, c, c)  # [.., i, j]: segment label j after i
        edge = pot.new_zeros(n, 1, c, c)  # [s, 0, i, j]: what the previous label adds
        starts = torch.arange(n, device=dev).view(n, 1, 1, 1)
        if self.transition is not None:  # between segments: s > 0
            edge = edge + (starts > 0) * self.transition.view(1, 1, c, c)
        if self.start is not None:  # at s = 0 only row 0 (the virtual start label) is a part
            row0 = (starts == 0) & (torch.arange(c, device=dev).view(1, 1, c, 1) == 0)
            edge = edge + row0 * self.start.view(1, 1, 1, c)
        pot = pot + edge
        inside = (ends.unsqueeze(0) < lengths.view(b, 1, 1)).view(b, n, k_max, 1, 1)
        return torch.where(inside, pot, torch.zeros((), dtype=pot.dtype, device=dev))
