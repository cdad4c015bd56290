"""Distributional word clusters learned from raw text: what unlabeled sentences teach the features.

With a few tagged sentences most words of a test sentence were never seen tagged, and their
feature weights stay zero. Words that occur in the same contexts tend to take the same tags
("Madrid", "Bilbao" and "Sevilla" all follow "en" and precede ","), so a cluster id shared by
such words lets a weight learned on one of them reach the others. :class:`WordClusters` learns
those ids from *untagged* text, the classic semi-supervised feature route for sequence taggers
(Miller, Guinness & Zamanian, NAACL 2004; Turian, Ratinov & Bengio, ACL 2010), with a
count-based embedding instead of Brown's agglomerative clustering (Levy, Goldberg & Dagan,
TACL 2015):

1. words (lower-cased) seen at least ``min_count`` times form the vocabulary V;
2. each word is described by the counts of the ``contexts`` most frequent words at offsets
   ``-window .. window`` (sentence boundaries count as the words ``<s>`` / ``</s>``): a sparse
   (|V|, 2 * window * (contexts + 2)) matrix;
3. positive pointwise mutual information with context-distribution smoothing 0.75, then a
   truncated SVD to ``dim`` dimensions (rows ``U sqrt(S)``, normalised to unit length);
4. k-means (k-means++ start, seeded) for every size in ``sizes``: a coarse-to-fine hierarchy
   of ids per word, like the prefixes of a Brown path.

With ``case_profile`` each word of V also gets its *case profile*, from the same text: how often
it is capitalised where capitals are not forced, i.e. not first in its sentence
(:data:`CASE_PROFILES`). A sentence-initial "Madrid" and "El" look alike to the token's own
shape features; their profiles (``always`` vs ``never``) tell the name from the article.

:class:`~structssl.data.features.FeatureExtractor` turns the ids of a token and its neighbours
into ``cluster<k>[<offset>]=<id>`` features (option ``cluster_sizes``); the fitted clusters are
saved with it, so a checkpoint tags new text with the same ids.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Optional, Sequence as Seq

import numpy as np

_BOUNDARY = ("<s>", "</s>")

#: case profiles, by id: capitalised in none of the word's occurrences after the first token of
#: a sentence, in under half of them, in half or more (not all), in all of them; or the word
#: only ever opens a sentence
CASE_PROFILES = ("never", "minority", "majority", "always", "initial_only")


def _case_profile(capitalised: int, occurrences: int) -> int:
    """The :data:`CASE_PROFILES` id of a word capitalised ``capitalised`` times in its
    ``occurrences`` non-initial occurrences."""
    if occurrences == 0:
        return 4
    if capitalised == 0:
        return 0
    if capitalised == occurrences:
        return 3
    return 1 if 2 * capitalised < occurrences else 2


def _positive_int(value: Any, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an int >= {low}; got {value!r}")
    return int(value)


def _kmeans(x: np.ndarray, k: int, rng: np.random.Generator, iters: int = 20) -> np.ndarray:
    """Lloyd's k-means with a k-means++ start (Arthur & Vassilvitskii 2007): (n, d) rows ->
    (n,) cluster ids in ``0 .. k-1``. The start keeps each row's distance to its nearest
    centre, O(n k d) in all (scipy's ``kmeans2`` recomputes all of them at every step)."""
    n = x.shape[0]
    sq = (x * x).sum(1)
    centres = np.empty((k, x.shape[1]))
    centres[0] = x[rng.integers(n)]
    nearest = np.maximum(sq - 2 * x @ centres[0] + centres[0] @ centres[0], 0)
    for j in range(1, k):
        total = nearest.sum()
        i = rng.choice(n, p=nearest / total) if total > 0 else rng.integers(n)
        centres[j] = x[i]
        nearest = np.minimum(nearest, np.maximum(sq - 2 * x @ x[i] + x[i] @ x[i], 0))
    labels = np.zeros(n, dtype=np.int64)
    for step in range(iters):
        dist = (centres * centres).sum(1)[None, :] - 2 * x @ centres.T
        new = dist.argmin(1)
        if step and np.array_equal(new, labels):
            break
        labels = new
        sums = np.zeros_like(centres)
        np.add.at(sums, labels, x)
        sizes = np.bincount(labels, minlength=k)
        filled = sizes > 0  # an emptied cluster keeps its centre
        centres[filled] = sums[filled] / sizes[filled, None]
    return labels


class WordClusters:
    """Hierarchical word-cluster ids from untagged sentences (module docstring).

    Args:
        sizes: the numbers of clusters, coarse to fine, e.g. ``(32, 128, 512)``; each is capped
            at the vocabulary size.
        min_count: words seen fewer times get no cluster (their ids are ``None``).
        contexts: how many of the most frequent words serve as context features.
        window: context offsets ``-window .. window``.
        dim: SVD dimensions (capped by the matrix size).
        seed: seed of the SVD start vector and of k-means.
        case_profile: also learn every word's case profile (:meth:`case`).

    Example:
        >>> wc = WordClusters(sizes=(2,), min_count=1).fit([["en", "Madrid", "."], ["en", "Bilbao", "."]])
        >>> wc.ids("madrid") == wc.ids("Bilbao")
        True

    Raises:
        ValueError: an option out of range (empty ``sizes``, a size < 2, ``dim`` < 1, ...).
    """

    def __init__(
        self,
        sizes: Seq[int] = (32, 128, 512),
        min_count: int = 2,
        contexts: int = 2000,
        window: int = 1,
        dim: int = 64,
        seed: int = 0,
        case_profile: bool = True,
    ) -> None:
        sizes = tuple(sizes)
        if not sizes:
            raise ValueError("sizes must name at least one number of clusters; got ()")
        self.sizes = tuple(_positive_int(k, "every cluster size", 2) for k in sizes)
        self.min_count = _positive_int(min_count, "min_count", 1)
        self.contexts = _positive_int(contexts, "contexts", 1)
        self.window = _positive_int(window, "window", 1)
        self.dim = _positive_int(dim, "dim", 1)
        self.seed = _positive_int(seed, "seed", 0)
        if not isinstance(case_profile, bool):
            raise ValueError(f"case_profile must be True or False; got {case_profile!r}")
        self.case_profile = case_profile
        self._ids: Optional[dict[str, tuple[int, ...]]] = None
        self._case: dict[str, int] = {}

    def __repr__(self) -> str:
        fitted = f", words={len(self._ids)}" if self._ids is not None else ""
        return f"WordClusters(sizes={self.sizes}, min_count={self.min_count}{fitted})"

    def __len__(self) -> int:
        """The number of words that have cluster ids."""
        if self._ids is None:
            raise RuntimeError("WordClusters needs fit() first")
        return len(self._ids)

    def ids(self, word: str) -> Optional[tuple[int, ...]]:
        """The cluster id of ``word`` (any case) at every size, or ``None`` for a rare word."""
        if self._ids is None:
            raise RuntimeError("WordClusters.ids needs fit() first")
        return self._ids.get(word.lower())

    def case(self, word: str) -> Optional[int]:
        """The case profile of ``word`` (any case): an index into :data:`CASE_PROFILES`, or
        ``None`` for a rare word or without ``case_profile``."""
        if self._ids is None:
            raise RuntimeError("WordClusters.case needs fit() first")
        return self._case.get(word.lower())

    # ------------------------------------------------------------------ fitting
    def fit(self, sentences: Iterable[Seq[str]]) -> "WordClusters":
        """Learn the clusters from token lists (tags, if any, are not used).

        A text too small to cluster (fewer than 3 words seen ``min_count`` times) gives no
        ids at all: every :meth:`ids` is ``None`` and the features simply do not fire.
        """
        import scipy.sparse as sp
        from scipy.sparse.linalg import svds

        sentences = [list(s) for s in sentences]
        words = [[w.lower() for w in s] for s in sentences]
        counts = Counter(w for s in words for w in s)
        vocab = sorted(w for w, c in counts.items() if c >= self.min_count)
        self._ids = {}
        self._case = {}
        if self.case_profile:
            inside = Counter(w for s in words for w in s[1:])
            capitalised = Counter(w.lower() for s in sentences for w in s[1:] if w[:1].isupper())
            self._case = {w: _case_profile(capitalised[w], inside[w]) for w in vocab}
        if len(vocab) < 3:
            return self
        row_of = {w: i for i, w in enumerate(vocab)}
        frequent = sorted(counts, key=lambda w: (-counts[w], w))[: self.contexts]
        col_of = {w: j for j, w in enumerate([*frequent, *_BOUNDARY])}
        width = len(col_of)
        rows: list[int] = []
        cols: list[int] = []
        for s in words:
            n = len(s)
            for t, w in enumerate(s):
                r = row_of.get(w)
                if r is None:
                    continue
                for slot, offset in enumerate(o for o in range(-self.window, self.window + 1) if o):
                    u = t + offset
                    c = _BOUNDARY[0] if u < 0 else _BOUNDARY[1] if u >= n else s[u]
                    j = col_of.get(c)
                    if j is not None:
                        rows.append(r)
                        cols.append(slot * width + j)
        shape = (len(vocab), 2 * self.window * width)
        counts_m = sp.coo_matrix(
            (np.ones(len(rows)), (np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64))),
            shape=shape,
        ).tocsr()  # sums repeated (word, context) entries
        m = counts_m.tocoo()
        total = float(m.data.sum())
        p_word = np.asarray(counts_m.sum(axis=1)).ravel() / total
        p_ctx = np.asarray(counts_m.sum(axis=0)).ravel() ** 0.75
        p_ctx = p_ctx / p_ctx.sum()
        pmi = np.log(m.data / total) - np.log(p_word[m.row]) - np.log(p_ctx[m.col])
        keep = pmi > 0
        ppmi = sp.csr_matrix((pmi[keep], (m.row[keep], m.col[keep])), shape=shape)
        k = min(self.dim, min(shape) - 1)
        if k >= 1 and ppmi.nnz:
            v0 = np.random.default_rng(self.seed).standard_normal(min(shape))
            u, s, _ = svds(ppmi, k=k, v0=v0)
            x = u * np.sqrt(s)
        else:  # nothing co-occurs: every word alone
            x = np.eye(len(vocab))
        x = x / (np.linalg.norm(x, axis=1, keepdims=True) + 1e-12)
        rng = np.random.default_rng(self.seed)
        labels = [_kmeans(x, min(size, len(vocab)), rng) for size in self.sizes]
        self._ids = {w: tuple(int(lab[i]) for lab in labels) for w, i in row_of.items()}
        return self

    # ------------------------------------------------------------------ saving
    def state_dict(self) -> dict[str, Any]:
        """Options and the learned ids as plain lists (what a checkpoint keeps)."""
        if self._ids is None:
            raise RuntimeError("WordClusters.state_dict needs fit() first")
        words = sorted(self._ids)
        return {
            "sizes": list(self.sizes), "min_count": self.min_count, "contexts": self.contexts,
            "window": self.window, "dim": self.dim, "seed": self.seed,
            "words": words, "ids": [list(self._ids[w]) for w in words],
            "case_profile": self.case_profile, "case": dict(sorted(self._case.items())),
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> "WordClusters":
        """The fitted clusters of :meth:`state_dict`.

        Raises:
            ValueError: a key is missing or the ids do not match the words and sizes.
        """
        keys = ("sizes", "min_count", "contexts", "window", "dim", "seed", "words", "ids")
        missing = [k for k in keys if k not in state]
        if missing:
            raise ValueError(f"a WordClusters state must hold {list(keys)}; missing {missing}")
        # states saved before case profiles existed have none
        out = cls(state["sizes"], state["min_count"], state["contexts"], state["window"],
                  state["dim"], state["seed"], bool(state.get("case_profile", False)))
        words, ids = list(state["words"]), list(state["ids"])
        if len(words) != len(ids) or any(len(row) != len(out.sizes) for row in ids):
            raise ValueError(
                f"a WordClusters state must give {len(out.sizes)} ids for each of its "
                f"{len(words)} words; got {len(ids)} rows"
            )
        out._ids = {w: tuple(int(i) for i in row) for w, row in zip(words, ids)}
        case = dict(state.get("case") or {})
        bad = [v for v in case.values() if not 0 <= int(v) < len(CASE_PROFILES)]
        if bad:
            raise ValueError(
                f"a WordClusters state's case profiles must be ids in 0..{len(CASE_PROFILES) - 1}; "
                f"got {bad[0]!r}"
            )
        out._case = {str(w): int(v) for w, v in case.items()}
        return out
