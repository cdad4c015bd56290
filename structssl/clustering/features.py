"""Pairwise features ``psi(x_j, x_k)`` of email messages (thesis section 8.4.1).

The thesis uses 47 feature functions, "including the TFIDF similarity, equality of sender,
equality of the MIME type, and differences in letter-bigram-counts"; the full list is not
given. :class:`PairwiseFeatures` implements 18 of that kind (``FEATURE_NAMES``), all in
``[0, 1]``, with a constant first feature so that a learned weight can move the
join-or-open-a-new-cluster threshold of the sequential decoder.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Optional, Sequence

import torch
from torch import Tensor

from structssl.clustering.stream import Message

__all__ = ["PairwiseFeatures", "FEATURE_NAMES"]

FEATURE_NAMES: tuple[str, ...] = (
    "bias",
    "body_tfidf_cosine",
    "body_tfidf_cosine>0.5",
    "body_tfidf_cosine>0.8",
    "subject_tfidf_cosine",
    "subject_equal",
    "sender_equal",
    "sender_domain_equal",
    "mime_type_equal",
    "bigram_l1_distance",
    "bigram_l1_distance<0.2",
    "bigram_l1_distance<0.4",
    "bigram_l1_distance<0.6",
    "subject_bigram_jaccard",
    "url_jaccard",
    "body_length_ratio",
    "header_size_similarity",
    "body_word_jaccard",
)

_WORD = re.compile(r"[a-z0-9$]+")
_URL = re.compile(r"https?://[^\s<>\"']+")
_LETTERS = "abcdefghijklmnopqrstuvwxyz "


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _bigrams(text: str) -> Counter:
    t = "".join(ch if ch in _LETTERS else " " for ch in text.lower())
    t = re.sub(" +", " ", t)
    return Counter(t[i : i + 2] for i in range(len(t) - 1))


class PairwiseFeatures:
    """Pairwise feature map over a window of messages.

    Args:
        idf: optional word -> inverse document frequency map (e.g. from :meth:`fit`); by
            default each window's own document frequencies are used.
        dtype: dtype of the output tensor.

    Example::

        featurize = PairwiseFeatures().fit(training_messages)
        psi = featurize(window)  # (N, N, 18)
    """

    names: tuple[str, ...] = FEATURE_NAMES

    def __init__(self, idf: Optional[dict[str, float]] = None, dtype: torch.dtype = torch.float64) -> None:
        if idf is not None and not isinstance(idf, dict):
            raise TypeError(f"idf must be a dict of word -> float; got {type(idf).__name__}")
        self.idf = dict(idf) if idf is not None else None
        self.dtype = dtype

    @property
    def dim(self) -> int:
        """Number of features ``d``."""
        return len(FEATURE_NAMES)

    def fit(self, messages: Sequence[Message]) -> "PairwiseFeatures":
        """Inverse document frequencies of body and subject words over ``messages`` (new object)."""
        _check_messages(messages)
        df: Counter = Counter()
        for m in messages:
            df.update(set(_words(m.body)) | set(_words(m.subject)))
        n = len(messages)
        idf = {w: math.log((1 + n) / (1 + c)) + 1.0 for w, c in df.items()}
        return PairwiseFeatures(idf, self.dtype)

    def _tfidf(self, docs: list[list[str]], local_idf: dict[str, float]) -> Tensor:
        vocab: dict[str, int] = {}
        rows, cols, vals = [], [], []
        default = max(local_idf.values(), default=1.0)
        for i, d in enumerate(docs):
            for w, c in Counter(d).items():
                rows.append(i)
                cols.append(vocab.setdefault(w, len(vocab)))
                vals.append((1 + math.log(c)) * local_idf.get(w, default))
        x = _dense(rows, cols, vals, len(docs), len(vocab), self.dtype)
        return x / x.norm(dim=1, keepdim=True).clamp(min=1e-12)

    def __call__(self, messages: Sequence[Message]) -> Tensor:
        """Features of every pair of ``messages``.

        Shape:
            Returns (N, N, d), symmetric in the two message dims, zero on the diagonal.
        """
        _check_messages(messages)
        n = len(messages)
        bodies = [_words(m.body) for m in messages]
        subjects = [_words(m.subject) for m in messages]
        if self.idf is not None:
            idf = self.idf
        else:
            df: Counter = Counter()
            for b, s in zip(bodies, subjects):
                df.update(set(b) | set(s))
            idf = {w: math.log((1 + n) / (1 + c)) + 1.0 for w, c in df.items()}
        body = self._tfidf(bodies, idf)
        subj = self._tfidf(subjects, idf)
        body_cos = (body @ body.T).clamp(0, 1)
        subj_cos = (subj @ subj.T).clamp(0, 1)

        def equal(values: list[str]) -> Tensor:
            ids = {v: i for i, v in enumerate(sorted(set(values)))}
            t = torch.tensor([ids[v] for v in values])
            known = torch.tensor([v != "" for v in values])
            return ((t.view(-1, 1) == t.view(1, -1)) & known.view(-1, 1) & known.view(1, -1)).to(self.dtype)

        senders = [m.sender.lower() for m in messages]
        domains = [s.rsplit("@", 1)[-1] if "@" in s else "" for s in senders]
        subject_eq = equal([m.subject.strip().lower() for m in messages])

        grams = [_bigrams(m.body) for m in messages]
        gvocab: dict[str, int] = {}
        rows, cols, vals = [], [], []
        for i, c in enumerate(grams):
            for g, v in c.items():
                rows.append(i)
                cols.append(gvocab.setdefault(g, len(gvocab)))
                vals.append(float(v))
        counts = _dense(rows, cols, vals, n, len(gvocab), self.dtype)
        hist = counts / counts.sum(1, keepdim=True).clamp(min=1)
        l1 = torch.cdist(hist, hist, p=1) / 2  # in [0, 1]

        subj_grams = [set(_bigrams(m.subject)) for m in messages]
        urls = [set(_URL.findall(m.body)) for m in messages]
        wordsets = [set(b) for b in bodies]
        sizes = torch.tensor([float(len(m.body)) for m in messages], dtype=self.dtype)
        headers = torch.tensor([float(m.header_size) for m in messages], dtype=self.dtype)
        ratio = torch.minimum(sizes.view(-1, 1), sizes.view(1, -1)) / torch.maximum(
            sizes.view(-1, 1), sizes.view(1, -1)
        ).clamp(min=1)
        header_sim = torch.exp(-(headers.view(-1, 1) - headers.view(1, -1)).abs() / 100.0)

        feats = [
            torch.ones(n, n, dtype=self.dtype),
            body_cos,
            (body_cos > 0.5).to(self.dtype),
            (body_cos > 0.8).to(self.dtype),
            subj_cos,
            subject_eq,
            equal(senders),
            equal(domains),
            equal([m.mime_type.lower() for m in messages]),
            l1,
            (l1 < 0.2).to(self.dtype),
            (l1 < 0.4).to(self.dtype),
            (l1 < 0.6).to(self.dtype),
            _jaccard(subj_grams, self.dtype),
            _jaccard(urls, self.dtype),
            ratio,
            header_sim,
            _jaccard(wordsets, self.dtype),
        ]
        out = torch.stack(feats, -1)
        eye = torch.eye(n, dtype=torch.bool).unsqueeze(-1)
        return out.masked_fill(eye, 0.0)


def _dense(rows: list[int], cols: list[int], vals: list[float], n: int, v: int, dtype: torch.dtype) -> Tensor:
    x = torch.zeros(n, max(v, 1), dtype=dtype)
    if rows:
        x[torch.tensor(rows), torch.tensor(cols)] = torch.tensor(vals, dtype=dtype)
    return x


def _jaccard(sets: list[set], dtype: torch.dtype) -> Tensor:
    vocab: dict[object, int] = {}
    rows, cols = [], []
    for i, st in enumerate(sets):
        for e in st:
            rows.append(i)
            cols.append(vocab.setdefault(e, len(vocab)))
    x = _dense(rows, cols, [1.0] * len(rows), len(sets), len(vocab), dtype)
    inter = x @ x.T
    size = x.sum(1)
    union = size.view(-1, 1) + size.view(1, -1) - inter
    return torch.where(union > 0, inter / union.clamp(min=1), torch.zeros_like(inter))


def _check_messages(messages: Sequence[Message]) -> None:
    if isinstance(messages, (str, bytes)) or not hasattr(messages, "__len__"):
        raise TypeError(f"messages must be a sequence of Message; got {type(messages).__name__}")
    if len(messages) == 0:
        raise ValueError("messages must hold at least one Message; got an empty sequence")
    for i, m in enumerate(messages):
        if not isinstance(m, Message):
            raise TypeError(f"messages[{i}] must be a Message; got {type(m).__name__}")
