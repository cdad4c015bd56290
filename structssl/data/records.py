"""Records shared by the readers: :class:`Vocabulary`, :class:`Sequence`, :class:`TaggedCorpus`.

A reader returns strings exactly as they appear in the file; integer encoding happens through a
:class:`Vocabulary` (labels) or a :class:`~structssl.data.features.FeatureExtractor` (features).
Label indices start at 0 and every index is a real label (padding positions also hold 0, but
validity comes only from ``lengths``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Iterator, Optional
from typing import Sequence as Seq

import torch
from torch import Tensor

__all__ = ["Vocabulary", "Sequence", "TaggedCorpus"]


class Vocabulary:
    """An ordered, immutable bijection between strings and indices ``0 .. len - 1``.

    Args:
        items: the strings in index order (no duplicates).

    Example:
        >>> v = Vocabulary(["O", "B-PER", "I-PER"])
        >>> v.index("B-PER"), v[2], len(v)
        (1, 'I-PER', 3)
    """

    def __init__(self, items: Iterable[str]) -> None:
        self._items: tuple[str, ...] = tuple(items)
        self._index: dict[str, int] = {}
        for i, item in enumerate(self._items):
            if not isinstance(item, str):
                raise TypeError(f"items must be strings; got {type(item).__name__} at {i}")
            if item in self._index:
                raise ValueError(f"items must be distinct; {item!r} occurs twice")
            self._index[item] = i

    @classmethod
    def build(
        cls,
        items: Iterable[str],
        min_count: int = 1,
        first: Seq[str] = (),
    ) -> "Vocabulary":
        """Vocabulary of the strings seen at least ``min_count`` times, sorted.

        Args:
            items: observed strings (with repetitions).
            min_count: minimum number of occurrences (>= 1).
            first: strings placed first, in this order, when they are observed (e.g. ``("O",)``
                so that the outside tag is label 0).

        Returns:
            The vocabulary: ``first`` (those observed), then the rest in sorted order.
        """
        if not isinstance(min_count, int) or min_count < 1:
            raise ValueError(f"min_count must be an int >= 1; got {min_count!r}")
        counts = Counter(items)
        kept = {item for item, c in counts.items() if c >= min_count}
        head = [item for item in first if item in kept]
        return cls(head + sorted(kept.difference(head)))

    @property
    def items(self) -> tuple[str, ...]:
        """The strings in index order."""
        return self._items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __contains__(self, item: object) -> bool:
        return item in self._index

    def __getitem__(self, index: int) -> str:
        return self._items[index]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and other._items == self._items

    def __hash__(self) -> int:
        return hash(self._items)

    def __repr__(self) -> str:
        shown = ", ".join(repr(s) for s in self._items[:8])
        more = ", ..." if len(self) > 8 else ""
        return f"Vocabulary([{shown}{more}], size={len(self)})"

    def get(self, item: str, default: Optional[int] = None) -> Optional[int]:
        """Index of ``item``, or ``default`` when it is not in the vocabulary."""
        return self._index.get(item, default)

    def index(self, item: str) -> int:
        """Index of ``item``.

        Raises:
            ValueError: ``item`` is not in the vocabulary.
        """
        try:
            return self._index[item]
        except KeyError:
            raise ValueError(f"{item!r} is not in the vocabulary {self!r}") from None

    def encode(self, items: Iterable[str]) -> Tensor:
        """Indices of ``items`` as a (n,) long tensor (unknown items raise ``ValueError``)."""
        return torch.tensor([self.index(item) for item in items], dtype=torch.long)

    def decode(self, indices: Iterable[int] | Tensor) -> list[str]:
        """Strings of ``indices`` (a 1-D sequence or tensor)."""
        if isinstance(indices, Tensor):
            indices = indices.tolist()
        return [self._items[int(i)] for i in indices]


@dataclass(frozen=True)
class Sequence:
    """One sentence / citation / word: tokens with optional labels and provided features.

    Attributes:
        tokens: the tokens (words, or letters for OCR-like data).
        labels: one label string per token, or ``None`` for unlabeled data.
        features: per token, the provided feature strings (the POS column of CoNLL files,
            the ``|``-separated column of the citation files), or ``None``.
        line: 1-based line number of the first token in the source file (0 if synthetic).
        document: index of the document the sequence belongs to (counts ``-DOCSTART-``
            lines in CoNLL files; 0 when the file has none).
        lines: the line number of every token when they are not consecutive (CoNLL-U
            files skip multiword-token and empty-node lines), else ``None``; see
            :meth:`line_of`.
    """

    tokens: tuple[str, ...]
    labels: Optional[tuple[str, ...]] = None
    features: Optional[tuple[tuple[str, ...], ...]] = None
    line: int = 0
    document: int = 0
    lines: Optional[tuple[int, ...]] = None

    def line_of(self, t: int) -> int:
        """The 1-based source line of token ``t``."""
        return self.lines[t] if self.lines is not None else self.line + t

    def __post_init__(self) -> None:
        n = len(self.tokens)
        if self.labels is not None and len(self.labels) != n:
            raise ValueError(
                f"labels must have {n} entries (one per token); got {len(self.labels)}"
            )
        if self.lines is not None and len(self.lines) != n:
            raise ValueError(f"lines must have {n} entries (one per token); got {len(self.lines)}")
        if self.features is not None and len(self.features) != n:
            raise ValueError(
                f"features must have {n} entries (one per token); got {len(self.features)}"
            )

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class TaggedCorpus:
    """Sequences read from one file, with their label vocabulary.

    Attributes:
        sequences: the sequences in file order.
        labels: the label vocabulary (empty for unlabeled files).
        path: the file they were read from.
        num_documents: number of documents (``-DOCSTART-`` separated; 1 when there are none).
        num_columns: the number of columns of its token lines (``None``: not a column file,
            or no token line).
    """

    sequences: list[Sequence]
    labels: Vocabulary
    path: str = ""
    num_documents: int = 1
    num_columns: Optional[int] = None

    def __len__(self) -> int:
        return len(self.sequences)

    def __iter__(self) -> Iterator[Sequence]:
        return iter(self.sequences)

    def __getitem__(self, index: int) -> Sequence:
        return self.sequences[index]

    @property
    def num_tokens(self) -> int:
        """Total number of tokens."""
        return sum(len(s) for s in self.sequences)

    def encode_labels(self, vocabulary: Optional[Vocabulary] = None) -> list[Tensor]:
        """Label indices per sequence, each a (n,) long tensor.

        Args:
            vocabulary: the label vocabulary (default: :attr:`labels`).

        Raises:
            ValueError: the corpus is unlabeled, or a label is not in the vocabulary.
        """
        vocabulary = self.labels if vocabulary is None else vocabulary
        out = []
        for s in self.sequences:
            if s.labels is None:
                raise ValueError(f"{self.path}:{s.line}: sequence has no labels (unlabeled data)")
            out.append(vocabulary.encode(s.labels))
        return out
