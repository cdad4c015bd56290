"""Built-in synthetic data: HMM sequences ("galaxy"), a PCFG treebank, correlated multi-label data.

Every generator is deterministic given ``seed`` (an int, or a ``torch.Generator`` whose state
it advances) and returns batch-first tensors ready for the scorers and structures, plus the
true parameters. Only torch is used.

* :func:`hmm_sequences`: a K-state HMM with uniform start, switch probability p (stay 1 - p,
  move to each other state with p / (K - 1)) and per-state emissions. The defaults are the
  thesis's "galaxy" recipe (ch. 7.4.3, after Lafferty, Zhu and Liu 2004): 2 states, 10%
  switching, 100 sequences of length 20, each state emitting 2-D points of one of two
  classes. The original galaxy point set is not published; as the digest suggests, each
  state's class is an arm of an interleaved 2-D spiral (radius 0.1 .. 1.5, 1.5 turns, the K
  arms rotated by 2 pi / K) sampled uniformly along the arm with Gaussian noise (std
  ``noise``, default 0.05): an approximation, documented as such. ``emission="gaussian"``
  gives general sizes: state k emits N(mu_k, noise^2 I) in ``dim`` dimensions with
  ``|mu_k| = separation`` in a random direction.
* :func:`pcfg_treebank`: a random CNF grammar (N nonterminals, P preterminals, V words;
  rule and emission probabilities drawn from a symmetric Dirichlet) and trees sampled
  *conditioned on the sentence length*: n ~ U{min_length .. max_length}; a span of width
  w > 1 with symbol A picks its split point uniformly, then ``A -> B C`` from the rule
  probabilities restricted to children that fit (nonterminals over width > 1,
  preterminals over width 1); preterminals emit words. Symbols ``0 .. N-1`` are the
  nonterminals (0 is the root), ``N .. N+P-1`` the preterminals. A one-word sentence is a
  single preterminal drawn uniformly. Trees come as pre-order spans (B, 2N-1, 3) in the
  ``CKY`` labels layout.
* :func:`correlated_multilabel`: K binary labels correlated through a low-rank latent factor
  (``method="latent_factor"``) or drawn exactly from a fully connected pairwise model
  (``method="pairwise"``, the ``PairwiseMultiLabel`` factorisation, K <= 16), with inputs X.

References: Brefeld (thesis) ch. 7.4.3; Lafferty, Zhu and Liu (2004), Kernel conditional
random fields; Chang, Sundararajan and Keerthi (seed 004) for the pairwise multi-label model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Optional, Union

import torch
from torch import Tensor

__all__ = [
    "SyntheticSequences",
    "SyntheticTreebank",
    "SyntheticMultiLabel",
    "hmm_sequences",
    "galaxy_points",
    "pcfg_treebank",
    "correlated_multilabel",
]

SeedLike = Union[int, torch.Generator]


def _generator(seed: SeedLike) -> torch.Generator:
    if isinstance(seed, torch.Generator):
        return seed
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int or a torch.Generator; got {type(seed).__name__}")
    return torch.Generator().manual_seed(seed)


def _positive(value: int, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}; got {value!r}")
    return value


def _lengths(num: int, length: int, min_length: Optional[int], g: torch.Generator) -> Tensor:
    if min_length is None:
        return torch.full((num,), length, dtype=torch.long)
    _positive(min_length, "min_length")
    if min_length > length:
        raise ValueError(f"min_length must be <= {length} (the maximum length); got {min_length}")
    return torch.randint(min_length, length + 1, (num,), generator=g)


# ------------------------------------------------------------------------------ sequences
@dataclass(frozen=True)
class SyntheticSequences:
    """Sequences sampled from an HMM.

    Attributes:
        inputs: (B, N, D) emissions (0 at padded positions).
        labels: (B, N) long hidden states (0 at padded positions).
        lengths: (B,) long.
        start: (K,) start probabilities.
        transition: (K, K) transition probabilities ``[from, to]``.
        means: (K, D) emission means (``gaussian``) or empty (``galaxy``).
    """

    inputs: Tensor
    labels: Tensor
    lengths: Tensor
    start: Tensor
    transition: Tensor
    means: Tensor

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def examples(self) -> list[dict[str, Tensor]]:
        """Per sequence ``{"inputs": (n, D), "labels": (n,)}`` (for ``collate_sequences``)."""
        return [
            {"inputs": self.inputs[i, :n], "labels": self.labels[i, :n]}
            for i, n in enumerate(self.lengths.tolist())
        ]


def galaxy_points(
    labels: Tensor,
    num_classes: int = 2,
    noise: float = 0.05,
    seed: SeedLike = 0,
    dtype: Optional[torch.dtype] = None,
) -> Tensor:
    """2-D points on interleaved spiral arms, one arm per class (the galaxy approximation).

    Args:
        labels: (...) long class of each point, in ``0 .. num_classes - 1``.
        num_classes: the number of arms.
        noise: standard deviation of the Gaussian noise added to each coordinate.
        seed: int or generator.
        dtype: output dtype (default: the default float dtype).

    Returns:
        (..., 2) points.
    """
    g = _generator(seed)
    dtype = torch.get_default_dtype() if dtype is None else dtype
    t = torch.rand(labels.shape, generator=g, dtype=torch.float64)
    radius = 0.1 + 1.4 * t
    angle = 3.0 * math.pi * t + 2.0 * math.pi * labels.to(torch.float64) / num_classes
    points = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=-1)
    points = points + noise * torch.randn(points.shape, generator=g, dtype=torch.float64)
    return points.to(dtype)


def hmm_sequences(
    num_sequences: int = 100,
    length: int = 20,
    num_states: int = 2,
    switch_prob: float = 0.1,
    emission: Literal["galaxy", "gaussian"] = "galaxy",
    dim: int = 2,
    separation: float = 2.0,
    noise: Optional[float] = None,
    min_length: Optional[int] = None,
    seed: SeedLike = 0,
    dtype: Optional[torch.dtype] = None,
) -> SyntheticSequences:
    """Sample sequences from an HMM (defaults: the thesis's galaxy task).

    Args:
        num_sequences: B.
        length: the (maximum) length N.
        num_states: K hidden states = labels.
        switch_prob: probability of leaving the current state at each step.
        emission: ``"galaxy"`` (2-D spiral arms, ``dim`` must be 2) or ``"gaussian"``.
        dim: D, the emission dimension.
        separation: distance of the Gaussian means from the origin.
        noise: emission noise std (default 0.05 for galaxy, 1.0 for gaussian).
        min_length: if given, lengths are uniform in ``min_length .. length``.
        seed: int or generator.
        dtype: dtype of ``inputs`` (default: the default float dtype).

    Returns:
        :class:`SyntheticSequences`.
    """
    _positive(num_sequences, "num_sequences")
    _positive(length, "length")
    _positive(num_states, "num_states", 2)
    _positive(dim, "dim")
    if not 0.0 <= switch_prob <= 1.0:
        raise ValueError(f"switch_prob must be in [0, 1]; got {switch_prob}")
    if emission not in ("galaxy", "gaussian"):
        raise ValueError(f"emission must be 'galaxy' or 'gaussian'; got {emission!r}")
    if emission == "galaxy" and dim != 2:
        raise ValueError(f"dim must be 2 with emission='galaxy'; got {dim}")
    g = _generator(seed)
    dtype = torch.get_default_dtype() if dtype is None else dtype
    k = num_states
    lengths = _lengths(num_sequences, length, min_length, g)
    start = torch.full((k,), 1.0 / k, dtype=torch.float64)
    transition = torch.full((k, k), switch_prob / (k - 1), dtype=torch.float64)
    transition.fill_diagonal_(1.0 - switch_prob)

    states = torch.empty(num_sequences, length, dtype=torch.long)
    states[:, 0] = torch.randint(0, k, (num_sequences,), generator=g)
    for t in range(1, length):
        switch = torch.rand(num_sequences, generator=g) < switch_prob
        shift = torch.randint(1, k, (num_sequences,), generator=g)  # to another state
        states[:, t] = torch.where(switch, (states[:, t - 1] + shift) % k, states[:, t - 1])

    if emission == "galaxy":
        means = torch.zeros(0, dim, dtype=dtype)
        inputs = galaxy_points(states, k, 0.05 if noise is None else noise, g, dtype)
    else:
        direction = torch.randn(k, dim, generator=g, dtype=torch.float64)
        direction = direction / direction.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        means64 = separation * direction
        std = 1.0 if noise is None else noise
        eps = torch.randn(num_sequences, length, dim, generator=g, dtype=torch.float64)
        inputs = (means64[states] + std * eps).to(dtype)
        means = means64.to(dtype)
    valid = torch.arange(length) < lengths[:, None]
    labels = torch.where(valid, states, torch.zeros_like(states))
    inputs = inputs * valid[..., None].to(dtype)
    return SyntheticSequences(inputs, labels, lengths, start, transition, means)


# ------------------------------------------------------------------------------- treebank
@dataclass(frozen=True)
class SyntheticTreebank:
    """Sentences with CNF parse trees from a random grammar.

    Attributes:
        words: (B, N) long word indices (0 at padding).
        spans: (B, 2N - 1, 3) long pre-order rows ``(start, end_inclusive, symbol)``,
            padding rows 0 (the ``CKY`` labels layout).
        lengths: (B,) long sentence lengths.
        rules: (NT, S, S) probabilities of ``A -> B C`` (S = NT + PT symbols).
        emissions: (PT, V) probabilities of preterminal -> word.
        num_nonterminals: NT (symbols ``0 .. NT - 1``; 0 is the root).
        symbol_names: ``N0 .. N{NT-1}, P0 .. P{PT-1}``.
    """

    words: Tensor
    spans: Tensor
    lengths: Tensor
    rules: Tensor
    emissions: Tensor
    num_nonterminals: int
    symbol_names: tuple[str, ...]

    def __len__(self) -> int:
        return int(self.words.shape[0])

    def examples(self) -> list[dict[str, Tensor]]:
        """Per sentence ``{"words": (n,), "spans": (2n - 1, 3)}`` (for ``collate_trees``)."""
        return [
            {"words": self.words[i, :n], "spans": self.spans[i, : 2 * n - 1]}
            for i, n in enumerate(self.lengths.tolist())
        ]


def pcfg_treebank(
    num_sentences: int = 100,
    num_nonterminals: int = 4,
    num_preterminals: int = 6,
    vocab_size: int = 30,
    min_length: int = 2,
    max_length: int = 12,
    concentration: float = 0.5,
    seed: SeedLike = 0,
) -> SyntheticTreebank:
    """Sample a treebank from a random CNF grammar, conditioned on sentence lengths.

    Args:
        num_sentences: B.
        num_nonterminals: NT (>= 1).
        num_preterminals: PT (>= 1).
        vocab_size: V.
        min_length: shortest sentence (>= 1).
        max_length: longest sentence N.
        concentration: Dirichlet concentration of the rule and emission distributions
            (small = peaked, more learnable).
        seed: int or generator.

    Returns:
        :class:`SyntheticTreebank`.
    """
    _positive(num_sentences, "num_sentences")
    nt = _positive(num_nonterminals, "num_nonterminals")
    pt = _positive(num_preterminals, "num_preterminals")
    _positive(vocab_size, "vocab_size")
    _positive(min_length, "min_length")
    _positive(max_length, "max_length")
    if min_length > max_length:
        raise ValueError(f"min_length must be <= max_length={max_length}; got {min_length}")
    if not concentration > 0:
        raise ValueError(f"concentration must be > 0; got {concentration}")
    g = _generator(seed)
    s = nt + pt

    def dirichlet(shape: tuple[int, ...], size: int) -> Tensor:
        # torch's Dirichlet sampler takes no generator: draw it under a forked global RNG
        # seeded from g, so the result is deterministic and the global RNG is untouched.
        seed_value = int(torch.randint(0, 2**62, (1,), generator=g))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed_value)
            alpha = torch.full((*shape, size), float(concentration), dtype=torch.float64)
            return torch.distributions.Dirichlet(alpha).sample()

    rules = dirichlet((nt,), s * s).view(nt, s, s)
    emissions = dirichlet((pt,), vocab_size)
    lengths = torch.randint(min_length, max_length + 1, (num_sentences,), generator=g)
    words = torch.zeros(num_sentences, max_length, dtype=torch.long)
    spans = torch.zeros(num_sentences, 2 * max_length - 1, 3, dtype=torch.long)
    is_nt = torch.arange(s) < nt

    def grow(b: int, rows: list[tuple[int, int, int]], start: int, end: int, symbol: int) -> None:
        """Sample the subtree of sentence b over [start, end] rooted in symbol (pre-order)."""
        rows.append((start, end, symbol))
        if start == end:
            words[b, start] = torch.multinomial(emissions[symbol - nt], 1, generator=g)
            return
        split = int(torch.randint(start, end, (1,), generator=g))
        left = is_nt if split > start else ~is_nt
        right = is_nt if end > split + 1 else ~is_nt
        allowed = left[:, None] & right[None, :]
        probs = rules[symbol] * allowed
        if probs.sum() <= 0:  # no mass on children that fit: uniform over those that do
            probs = allowed.to(torch.float64)
        choice = int(torch.multinomial(probs.reshape(-1), 1, generator=g))
        grow(b, rows, start, split, choice // s)
        grow(b, rows, split + 1, end, choice % s)

    for b in range(num_sentences):
        n = int(lengths[b])
        rows: list[tuple[int, int, int]] = []
        if n == 1:
            grow(b, rows, 0, 0, nt + int(torch.randint(0, pt, (1,), generator=g)))
        else:
            grow(b, rows, 0, n - 1, 0)
        spans[b, : len(rows)] = torch.tensor(rows, dtype=torch.long)

    names = tuple(f"N{i}" for i in range(nt)) + tuple(f"P{i}" for i in range(pt))
    return SyntheticTreebank(words, spans, lengths, rules, emissions, nt, names)


# ----------------------------------------------------------------------------- multilabel
@dataclass(frozen=True)
class SyntheticMultiLabel:
    """Inputs with K correlated binary labels.

    Attributes:
        inputs: (B, D) features.
        labels: (B, K) long in {0, 1}.
        unary_weights: (D, K) weights of the label scores (``pairwise``) or (r, K) latent
            loadings (``latent_factor``).
        pairwise: (K, K) symmetric couplings with zero diagonal (``pairwise``), or the implied
            (K, K) latent covariance ``W^T W`` (``latent_factor``).
    """

    inputs: Tensor
    labels: Tensor
    unary_weights: Tensor
    pairwise: Tensor

    def __len__(self) -> int:
        return int(self.inputs.shape[0])


def correlated_multilabel(
    num_examples: int = 200,
    num_labels: int = 6,
    num_features: int = 10,
    method: Literal["latent_factor", "pairwise"] = "latent_factor",
    rank: int = 2,
    coupling: float = 1.0,
    noise: float = 0.5,
    seed: SeedLike = 0,
    dtype: Optional[torch.dtype] = None,
) -> SyntheticMultiLabel:
    """Multi-label data whose labels are correlated.

    ``latent_factor``: z ~ N(0, I_rank); inputs = z A + noise * eps (A: rank x D);
    labels_k ~ Bernoulli(sigmoid(3 (z W)_k - 1)) with W: rank x K, so labels sharing a
    factor co-occur. ``pairwise``: inputs ~ N(0, I_D); exact samples of
    ``p(y | x) ∝ exp(sum_k y_k ((x U)_k + b_k) + sum_{k<l} J_kl y_k y_l)`` with U ~ N(0, 1/D),
    J ~ N(0, coupling^2) and the spin-symmetric biases ``b_k = -sum_l J_kl / 2`` (so the
    couplings favour agreement or disagreement, not a label value), by enumerating the 2^K
    label vectors (K <= 16).

    Args:
        num_examples: B.
        num_labels: K.
        num_features: D.
        method: ``"latent_factor"`` or ``"pairwise"``.
        rank: latent dimension (``latent_factor``).
        coupling: std of the pairwise couplings (``pairwise``).
        noise: input noise std (``latent_factor``).
        seed: int or generator.
        dtype: dtype of ``inputs`` (default: the default float dtype).

    Returns:
        :class:`SyntheticMultiLabel`.
    """
    _positive(num_examples, "num_examples")
    k = _positive(num_labels, "num_labels")
    d = _positive(num_features, "num_features")
    _positive(rank, "rank")
    if method not in ("latent_factor", "pairwise"):
        raise ValueError(f"method must be 'latent_factor' or 'pairwise'; got {method!r}")
    g = _generator(seed)
    dtype = torch.get_default_dtype() if dtype is None else dtype
    f64 = torch.float64
    if method == "latent_factor":
        z = torch.randn(num_examples, rank, generator=g, dtype=f64)
        a = torch.randn(rank, d, generator=g, dtype=f64)
        w = torch.randn(rank, k, generator=g, dtype=f64)
        inputs = z @ a + noise * torch.randn(num_examples, d, generator=g, dtype=f64)
        probs = torch.sigmoid(3.0 * (z @ w) - 1.0)
        labels = (torch.rand(num_examples, k, generator=g, dtype=f64) < probs).long()
        return SyntheticMultiLabel(inputs.to(dtype), labels, w.to(dtype), (w.T @ w).to(dtype))
    if k > 16:
        raise ValueError(
            f"num_labels must be <= 16 with method='pairwise' (exact sampling); got {k}"
        )
    inputs = torch.randn(num_examples, d, generator=g, dtype=f64)
    u = torch.randn(d, k, generator=g, dtype=f64) / math.sqrt(d)
    j = coupling * torch.randn(k, k, generator=g, dtype=f64)
    j = torch.triu(j, diagonal=1)
    j = j + j.T
    configs = ((torch.arange(2**k)[:, None] >> torch.arange(k)) & 1).to(f64)  # (2^K, K)
    bias = -0.5 * j.sum(-1)  # spin-symmetric: no label is favoured by the couplings alone
    quad = 0.5 * ((configs @ j) * configs).sum(-1) + configs @ bias  # sum_{k<l} J_kl y_k y_l
    scores = inputs @ u @ configs.T + quad  # (B, 2^K)
    choice = torch.multinomial(torch.softmax(scores, dim=-1), 1, generator=g).squeeze(-1)
    labels = configs[choice].long()
    return SyntheticMultiLabel(inputs.to(dtype), labels, u.to(dtype), j.to(dtype))
