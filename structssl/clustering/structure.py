"""Sequential clustering of a message window (thesis, seed 001, chapter 8).

A window holds ``N`` messages in arrival order. The output is a clustering; its compact form
(``labels``) is one cluster id per message, (B, N) long, and its parts are the strict lower
triangle of the adjacency matrix, ``parts[b, j, k] = [y]_{jk}`` for ``k < j`` (1 iff messages
``j`` and ``k`` share a cluster). ``potentials`` have the same (B, N, N) layout: the pairwise
similarities ``sim(x_j, x_k) = <w, psi(x_j, x_k)>``; entries on and above the diagonal are
ignored. The score of a clustering is ``sum_{j, k<j} [y]_{jk} sim(x_j, x_k) = <w, Phi(x, y)>``
(eq. 3.35 / 8.1).

Decoders:

- :meth:`SequentialClustering.argmax` / :meth:`SequentialClustering.decode`: the sequential
  clustering algorithm of Table 8.2. Each message joins the existing cluster of largest total
  similarity, or opens a new cluster if that total is negative. Cluster membership is never
  revised, so this is *not* the exact correlation-clustering argmax (NP-hard); it is the exact
  argmax of each step given the past (eq. 8.3). O(N) per message, O(N^2) per window, batched.
- :meth:`SequentialClustering.extend`: Decoding Strategy 8.1 (eq. 8.4), the best clustering of
  the last message given the clustering of the others.
- ``loss_augmented_*``: the same with ``Delta_total`` folded into the potentials (margin
  rescaling).
- The LP relaxation and greedy agglomerative clustering live in
  :mod:`structssl.clustering.decoders`.

``Delta_total`` (thesis section 3.2.4, "number of incorrectly assigned objects")::

    Delta_total(y, z) = sum_{j, k<j} |[y]_jk - [z]_jk| / sum_{k' != j} [y]_{k'k}

with the diagonal ``[y]_kk = 1`` inside the denominator, which therefore equals
``|cluster_y(k)| - [y]_jk >= 1``. It is affine in the parts of ``z``:
``Delta_total = offset + <cost, z>`` with ``cost_jk = (1 - 2 [y]_jk) / d_jk`` and
``offset = sum [y]_jk / d_jk`` (the ``-zeta`` and ``kappa`` of section 8.2).

Canonical labels: cluster ids are numbered by first occurrence (message 0 is in cluster 0,
the next new cluster gets id 1, ...); padding positions hold 0. Every decoder returns canonical
labels; :meth:`SequentialClustering.check_labels` accepts any ids in ``[0, N)`` and
canonicalises them.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import Tensor

from structssl.semirings import Semiring
from structssl.structures.base import Potentials, Structure

__all__ = [
    "SequentialClustering",
    "Reassignments",
    "canonical_labels",
    "labels_from_adjacency",
    "pair_mask",
]


def pair_mask(lengths: Tensor, n: int) -> Tensor:
    """Strict lower triangle restricted to each example's length. Shape (B, N, N), bool."""
    idx = torch.arange(n, device=lengths.device)
    lower = idx.view(n, 1) > idx.view(1, n)  # j > k
    valid = idx.view(1, n) < lengths.view(-1, 1)  # (B, N)
    return lower.unsqueeze(0) & valid.unsqueeze(2) & valid.unsqueeze(1)


def canonical_labels(labels: Tensor, lengths: Tensor) -> Tensor:
    """Renumber cluster ids by first occurrence; padding becomes 0 (a new tensor).

    Shape:
        labels: (B, N) integer ids in ``[0, N)``; lengths: (B,). Returns (B, N) long.
    """
    b, n = labels.shape
    device = labels.device
    pos = torch.arange(n, device=device)
    valid = pos.view(1, n) < lengths.view(-1, 1)
    same = (labels.unsqueeze(2) == labels.unsqueeze(1)) & valid.unsqueeze(1)  # [j, i]
    big = torch.full((b, n, n), n, dtype=torch.long, device=device)
    f = torch.where(same, pos.view(1, 1, n).expand(b, n, n), big).amin(-1)  # first occurrence
    is_first = (f == pos.view(1, n)) & valid
    opened = torch.cumsum(is_first.long(), 1) - is_first.long()  # firsts strictly before j
    new = opened.gather(1, f.clamp(max=n - 1))
    return torch.where(valid, new, torch.zeros_like(new))


def labels_from_adjacency(adjacency: Tensor, lengths: Tensor, threshold: float = 0.5) -> Tensor:
    """Clusters as connected components of ``adjacency > threshold`` (transitive closure).

    Only the strict lower triangle of ``adjacency`` is read. Batched label propagation, at most
    N rounds of a (B, N, N) min-reduction.

    Shape:
        adjacency: (B, N, N); lengths: (B,). Returns canonical labels (B, N).
    """
    b, n, _ = adjacency.shape
    edges = (adjacency > threshold) & pair_mask(lengths, n)
    edges = edges | edges.transpose(1, 2)
    lab = torch.arange(n, device=adjacency.device).expand(b, n).clone()
    big = torch.full((b, n, n), n, dtype=torch.long, device=adjacency.device)
    for _ in range(n):
        nxt = torch.minimum(lab, torch.where(edges, lab.unsqueeze(1).expand(b, n, n), big).amin(-1))
        if torch.equal(nxt, lab):
            break
        lab = nxt
    return canonical_labels(lab, lengths)


class Reassignments(NamedTuple):
    """The alternatives ``Y_j`` of OP 8.2 for every message ``j`` of every window.

    Candidate ``c < N`` moves message ``j`` into cluster ``c`` of the target clustering (the
    other members of ``c``); candidate ``c = N`` makes ``j`` a singleton. ``mask`` is False for
    the target itself and for empty clusters.

    Attributes:
        margins: ``<w, Phi(y) - Phi(ybar)>`` summed over the trailing dims of the input
            values: (B, N, N + 1, *F) where the input was (B, N, N, *F).
        delta: ``Delta_total(y, ybar)``, (B, N, N + 1).
        mask: (B, N, N + 1) bool.
    """

    margins: Tensor
    delta: Tensor
    mask: Tensor


class SequentialClustering(Structure):
    """Clusterings of a window of messages in arrival order (see the module docstring).

    Potentials: (B, N, N) similarities (strict lower triangle used). Labels: (B, N) cluster ids.
    Parts: (B, N, N) 0/1 adjacency (strict lower triangle). ``lengths``: messages per window.

    ``log_partition``, ``marginals``, ``kbest`` and friends raise ``NotImplementedError``: the
    partition function over all clusterings (Bell-number many) has no tractable form.

    Args:
        validate: check values at the public entry points (see :class:`Structure`).
    """

    event_shape_doc = "(N, N) similarities; strict lower triangle [j, k], k < j"

    # ------------------------------------------------------------------ primitives
    def _check(self, potentials: Potentials, lengths: Optional[Tensor]) -> tuple[Tensor, Tensor]:
        if not isinstance(potentials, Tensor):
            raise TypeError(
                f"SequentialClustering potentials must be a tensor (B, N, N); got "
                f"{type(potentials).__name__}"
            )
        if potentials.dim() != 3 or potentials.shape[1] != potentials.shape[2]:
            raise ValueError(
                f"SequentialClustering potentials must have shape (B, N, N); got "
                f"{tuple(potentials.shape)}"
            )
        b, n = potentials.shape[0], potentials.shape[1]
        if n == 0:
            raise ValueError("SequentialClustering potentials must have N >= 1 messages; got N = 0")
        return potentials, self.check_lengths(lengths, b, n, potentials.device)

    def _inside(self, potentials: Potentials, lengths: Tensor, semiring: Semiring) -> Tensor:
        raise NotImplementedError(
            "SequentialClustering has no inside pass: the sum over all clusterings is "
            "intractable; use decode / extend, or the LP decoder in structssl.clustering.decoders"
        )

    def _kbest(self, potentials: Potentials, k: int, lengths: Tensor) -> tuple[Tensor, Tensor]:
        raise NotImplementedError("SequentialClustering has no k-best decoder")

    def hamming_potentials(self, target: Tensor, lengths: Optional[Tensor] = None) -> Potentials:
        raise NotImplementedError(
            "the edge Hamming loss of a clustering is affine, not linear, in parts; use "
            "SequentialClustering.hamming or delta_total_terms"
        )

    def check_labels(self, labels: Tensor, lengths: Tensor, name: str = "labels") -> Tensor:
        if not isinstance(labels, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor; got {type(labels).__name__}")
        b = lengths.shape[0]
        if labels.dim() != 2 or labels.shape[0] != b:
            raise ValueError(f"{name} must have shape (B, N) with B = {b}; got {tuple(labels.shape)}")
        if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
            raise ValueError(f"{name} must have an integer dtype; got {labels.dtype}")
        n = labels.shape[1]
        if self.validate and int(lengths.max()) > n:
            raise ValueError(
                f"{name} has N = {n} positions but lengths go up to {int(lengths.max())}"
            )
        valid = torch.arange(n, device=labels.device).view(1, n) < lengths.view(-1, 1)
        if self.validate and valid.any():
            lo, hi = int(labels[valid].min()), int(labels[valid].max())
            if lo < 0 or hi >= n:
                raise ValueError(f"{name} must be cluster ids in [0, N) = [0, {n}); got values in [{lo}, {hi}]")
        return canonical_labels(labels.long(), lengths)

    def _lengths_of(self, labels: Tensor, lengths: Optional[Tensor], name: str) -> Tensor:
        if not isinstance(labels, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor; got {type(labels).__name__}")
        if labels.dim() != 2:
            raise ValueError(f"{name} must have shape (B, N); got {tuple(labels.shape)}")
        return self.check_lengths(lengths, labels.shape[0], labels.shape[1], labels.device)

    def to_parts(self, labels: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
        """Labels to the 0/1 adjacency (strict lower triangle). Shape (B, N, N), default dtype."""
        n = labels.shape[-1]
        lengths = self._lengths_of(labels, lengths, "labels")
        same = labels.unsqueeze(2) == labels.unsqueeze(1)
        return (same & pair_mask(lengths, n)).to(torch.get_default_dtype())

    def from_parts(self, parts: Potentials, lengths: Optional[Tensor] = None) -> Tensor:
        """Adjacency (0/1 or fractional) to labels: components of ``parts > 0.5``."""
        if not isinstance(parts, Tensor) or parts.dim() != 3 or parts.shape[1] != parts.shape[2]:
            shape = tuple(parts.shape) if isinstance(parts, Tensor) else type(parts).__name__
            raise ValueError(f"parts must be a tensor of shape (B, N, N); got {shape}")
        b, n = parts.shape[0], parts.shape[1]
        lengths = self.check_lengths(lengths, b, n, parts.device)
        return labels_from_adjacency(parts, lengths)

    def _score(self, potentials: Potentials, labels: Tensor, lengths: Tensor) -> Tensor:
        assert isinstance(potentials, Tensor)
        parts = self.to_parts(labels, lengths).to(potentials.dtype)
        return (potentials * parts).flatten(1).sum(1)

    # ------------------------------------------------------------------ decoders
    def _argmax(self, potentials: Potentials, lengths: Tensor) -> Tensor:
        assert isinstance(potentials, Tensor)
        return _sequential(potentials, lengths, None, 0)

    def decode(self, potentials: Tensor, lengths: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
        """The sequential clustering algorithm of Table 8.2 (same as :meth:`argmax`).

        Shape:
            potentials: (B, N, N); lengths: (B,). Returns labels (B, N) and scores (B,).
        """
        return self.argmax(potentials, lengths)

    def extend(
        self, potentials: Tensor, labels: Tensor, lengths: Optional[Tensor] = None
    ) -> tuple[Tensor, Tensor]:
        """Decoding Strategy 8.1: place the last message of each window (eq. 8.4).

        The clustering of messages ``0 .. T-2`` (``T = lengths``) is taken from ``labels`` and
        kept; message ``T-1`` joins the cluster with the largest total similarity, or opens a new
        cluster if that total is negative. O(N) per window.

        Args:
            potentials: similarities (B, N, N).
            labels: clustering of the earlier messages (position ``T-1`` is ignored).
            lengths: (B,) window sizes (default: N).

        Shape:
            Returns labels (B, N) (canonical) and the score of the whole clustering (B,).
        """
        potentials, lengths = self.check(potentials, lengths)
        labels = self.check_labels(labels, lengths)
        with torch.no_grad():
            out = _sequential(potentials.detach(), lengths, labels, -1)
        return out, self._score(potentials, out, lengths)

    def assign(self, row: Tensor, labels: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
        """Streaming form of Decoding Strategy 8.1: the cluster of one new message.

        Only the new message's similarities to the window are needed, so adding a message
        costs O(N) time and memory (Figure 8.4).

        Args:
            row: similarities of the new message to the window's messages (B, N).
            labels: canonical clustering of the window (B, N) (e.g. from :meth:`decode`).
            lengths: (B,) number of messages in each window (default: N).

        Shape:
            Returns (B,) long: an existing cluster id, or the number of clusters in the window
            (a new cluster) where the best total similarity is negative or the window is empty.
        """
        if not isinstance(row, Tensor) or row.dim() != 2 or not row.is_floating_point():
            shape = tuple(row.shape) if isinstance(row, Tensor) else type(row).__name__
            raise ValueError(f"row must be a floating tensor of shape (B, N); got {shape}")
        b, n = row.shape
        if lengths is None:
            lengths = torch.full((b,), n, dtype=torch.long, device=row.device)
        elif not isinstance(lengths, Tensor) or lengths.shape != (b,):
            raise ValueError(f"lengths must be a tensor of shape (B,) = ({b},); got {lengths!r}")
        lengths = lengths.to(device=row.device, dtype=torch.long)
        if self.validate and (int(lengths.min()) < 0 or int(lengths.max()) > n):
            raise ValueError(f"lengths must be in [0, N] = [0, {n}]; got values in [{int(lengths.min())}, {int(lengths.max())}]")
        if not isinstance(labels, Tensor) or labels.shape != (b, n):
            shape = tuple(labels.shape) if isinstance(labels, Tensor) else type(labels).__name__
            raise ValueError(f"labels must have shape (B, N) = ({b}, {n}); got {shape}")
        with torch.no_grad():
            inside = torch.arange(n, device=row.device).view(1, n) < lengths.view(-1, 1)
            lab = labels.long().masked_fill(~inside, 0)
            if self.validate and bool(inside.any()):
                lo, hi = int(lab.min()), int(lab.max())
                if lo < 0 or hi >= n:
                    raise ValueError(f"labels must be cluster ids in [0, N) = [0, {n}); got values in [{lo}, {hi}]")
            num = torch.where(lengths > 0, lab.amax(1) + 1, torch.zeros_like(lengths))
            sums = torch.zeros(b, n + 1, dtype=row.dtype, device=row.device)
            sums.scatter_add_(1, lab, row.detach().masked_fill(~inside, 0.0))
            return _choose(sums, num)

    def delta_total_terms(
        self, target: Tensor, lengths: Optional[Tensor] = None, dtype: Optional[torch.dtype] = None
    ) -> tuple[Tensor, Tensor]:
        """``Delta_total(target, z) = offset + <cost, z>`` for every (fractional) adjacency z.

        Shape:
            target: (B, N); lengths: (B,). Returns cost (B, N, N) (strict lower triangle) and
            offset (B,), computed in ``dtype`` (default: torch's default dtype); pass the
            potentials' dtype so float64 scores are not rounded through float32.
        """
        lengths = self._lengths_of(target, lengths, "target")
        target = self.check_labels(target, lengths, "target")
        y = self.to_parts(target, lengths)
        inv_d = _inverse_denominators(target, lengths, dtype)
        cost = (1 - 2 * y) * inv_d
        return cost, (y * inv_d).flatten(1).sum(1)

    def delta_total(
        self, target: Tensor, labels: Tensor, lengths: Optional[Tensor] = None
    ) -> Tensor:
        """``Delta_total(target, labels)``: the number of incorrectly assigned messages. Shape (B,)."""
        lengths = self._lengths_of(target, lengths, "target")
        labels = self.check_labels(labels, lengths)
        cost, offset = self.delta_total_terms(target, lengths)
        return offset + (cost * self.to_parts(labels, lengths)).flatten(1).sum(1)

    def hamming(self, target: Tensor, labels: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
        """Number of disagreeing edges (pairs ``k < j``) between two clusterings. Shape (B,)."""
        lengths = self._lengths_of(target, lengths, "target")
        target = self.check_labels(target, lengths, "target")
        labels = self.check_labels(labels, lengths)
        diff = self.to_parts(target, lengths) != self.to_parts(labels, lengths)
        return diff.flatten(1).sum(1).to(torch.get_default_dtype())

    def loss_augmented_potentials(
        self, potentials: Tensor, target: Tensor, lengths: Optional[Tensor] = None
    ) -> tuple[Tensor, Tensor]:
        """``(potentials + cost, offset)``: the loss-augmented score of z is ``<., z> + offset``."""
        potentials, lengths = self.check(potentials, lengths)
        cost, offset = self.delta_total_terms(target, lengths, potentials.dtype)
        return potentials + cost, offset

    def loss_augmented_decode(
        self, potentials: Tensor, target: Tensor, lengths: Optional[Tensor] = None
    ) -> tuple[Tensor, Tensor]:
        """Table 8.2 on ``sim + Delta_total(target, .)`` (margin rescaling).

        Returns:
            labels (B, N) and the augmented scores ``s(z) + Delta_total(target, z)`` (B,).
        """
        aug, offset = self.loss_augmented_potentials(potentials, target, lengths)
        labels, scores = self.argmax(aug, lengths)
        return labels, scores + offset

    def loss_augmented_extend(
        self, potentials: Tensor, target: Tensor, lengths: Optional[Tensor] = None
    ) -> tuple[Tensor, Tensor]:
        """Decoding Strategy 8.1 on ``sim + Delta_total(target, .)``: the most violating
        placement of the last message given the target clustering of the others.

        Returns:
            labels (B, N) and augmented scores (B,).
        """
        aug, offset = self.loss_augmented_potentials(potentials, target, lengths)
        labels, scores = self.extend(aug, target, lengths)
        return labels, scores + offset

    # ------------------------------------------------------------------ training support
    def reassignments(
        self, values: Tensor, target: Tensor, lengths: Optional[Tensor] = None
    ) -> Reassignments:
        """The alternatives ``Y_j`` of OP 8.2 for every message ``j`` (thesis-digest X5.13:
        relative to all other messages of the window).

        Args:
            values: pairwise values, similarities (B, N, N) or features (B, N, N, F); only the
                strict lower triangle is read (pairs are symmetric).
            target: the true clustering (B, N).
            lengths: (B,) window sizes.

        Returns:
            :class:`Reassignments`; ``margins[b, j, c]`` is the score (or feature) difference
            ``Phi(y) - Phi(ybar_c)`` restricted to row ``j``, differentiable in ``values``.
        """
        if not isinstance(values, Tensor):
            raise TypeError(f"values must be a torch.Tensor; got {type(values).__name__}")
        if values.dim() < 3 or values.shape[1] != values.shape[2]:
            raise ValueError(f"values must have shape (B, N, N, *F); got {tuple(values.shape)}")
        b, n = values.shape[0], values.shape[1]
        lengths = self.check_lengths(lengths, b, n, values.device)
        target = self.check_labels(target, lengths, "target")
        extra = values.dim() - 3
        pm = pair_mask(lengths, n)
        sym_mask = pm | pm.transpose(1, 2)  # all valid pairs k != j
        low = values * pm.view(pm.shape + (1,) * extra).to(values.dtype)
        sym = low + low.transpose(1, 2)  # value of pair {j, k} at [j, k] and [k, j]
        valid = torch.arange(n, device=values.device).view(1, n) < lengths.view(-1, 1)
        onehot = torch.nn.functional.one_hot(target, n).to(values.dtype) * valid.unsqueeze(2)
        # sums[b, j, c] = sum_{k in c, k != j} value(j, k)   (sym is 0 on the diagonal)
        sums = torch.einsum("bjk...,bkc->bjc...", sym, onehot)
        sums = torch.cat([sums, torch.zeros_like(sums[:, :, :1])], dim=2)  # c = N: singleton
        own = sums.gather(2, target.view(b, n, 1, *([1] * extra)).expand(b, n, 1, *values.shape[3:]))
        margins = own - sums
        # Delta: R_j + sum_{k in c} D_jk for c != c(j); R_j for the singleton
        inv_d = _inverse_denominators(target, lengths).to(values.dtype)
        inv_sym = inv_d + inv_d.transpose(1, 2)
        same = (target.unsqueeze(2) == target.unsqueeze(1)) & sym_mask
        r = (inv_sym * same).sum(-1)  # (B, N)
        add = torch.einsum("bjk,bkc->bjc", inv_sym * sym_mask, onehot)
        delta = r.unsqueeze(2) + torch.cat([add, torch.zeros_like(add[:, :, :1])], dim=2)
        counts = onehot.sum(1)  # (B, C) cluster sizes
        others = counts.unsqueeze(1) - onehot  # members of c other than j
        has_other = torch.cat([others > 0, (others.gather(2, target.unsqueeze(2)) > 0)], dim=2)
        # has_other[..., N] is True when j is not alone: then the singleton is an alternative
        is_target = torch.nn.functional.one_hot(target, n + 1).bool()
        own_alone = ~has_other[:, :, n]
        is_target[:, :, n] |= own_alone
        is_target[:, :, :n] &= ~own_alone.unsqueeze(2)
        mask = has_other.clone()
        mask[:, :, n] = True
        mask = mask & ~is_target & valid.unsqueeze(2)
        return Reassignments(margins, delta.masked_fill(~mask, 0.0), mask)


def _inverse_denominators(
    target: Tensor, lengths: Tensor, dtype: Optional[torch.dtype] = None
) -> Tensor:
    """``1 / d_jk`` with ``d_jk = |cluster(k)| - [y]_jk`` on valid pairs, else 0. (B, N, N)
    in ``dtype`` (default: torch's default dtype)."""
    b, n = target.shape
    valid = torch.arange(n, device=target.device).view(1, n) < lengths.view(-1, 1)
    dtype = dtype if dtype is not None else torch.get_default_dtype()
    onehot = torch.nn.functional.one_hot(target, n).to(dtype) * valid.unsqueeze(2)
    size = onehot.sum(1).gather(1, target)  # (B, N): size of each message's cluster
    y = (target.unsqueeze(2) == target.unsqueeze(1)).to(dtype)
    d = size.unsqueeze(1) - y  # [j, k] -> |c(k)| - y_jk
    pm = pair_mask(lengths, n)
    return torch.where(pm, 1.0 / d.clamp(min=1.0), torch.zeros_like(d))


def _sequential(potentials: Tensor, lengths: Tensor, fixed: Optional[Tensor], start: int) -> Tensor:
    """Table 8.2 from position ``start`` (``-1``: only the last message of each window).

    Positions before ``start`` keep the clusters of ``fixed``. Batched over windows; one
    scatter-add of O(N) per position.
    """
    b, n, _ = potentials.shape
    device = potentials.device
    batch = torch.arange(b, device=device)
    labels = torch.zeros(b, n, dtype=torch.long, device=device)
    if start == -1:
        assert fixed is not None
        last = lengths - 1
        pos = torch.arange(n, device=device).view(1, n)
        labels = torch.where(pos < last.view(-1, 1), fixed, torch.zeros_like(fixed))
        prev = torch.where(pos < last.view(-1, 1), fixed, torch.full_like(fixed, -1))
        num = (prev.amax(1) + 1).clamp(min=0)  # clusters among the earlier messages
        row = potentials[batch, last]  # (B, N)
        row = torch.where(pos < last.view(-1, 1), row, torch.zeros_like(row))
        sums = torch.zeros(b, n + 1, dtype=potentials.dtype, device=device)
        sums = sums.scatter_add(1, labels, row)
        choice = _choose(sums, num)
        return canonical_labels(labels.scatter(1, last.view(-1, 1), choice.view(-1, 1)), lengths)
    num = torch.zeros(b, dtype=torch.long, device=device)
    for j in range(n):
        sums = torch.zeros(b, n + 1, dtype=potentials.dtype, device=device)
        if j:
            sums = sums.scatter_add(1, labels[:, :j], potentials[:, j, :j])
        choice = _choose(sums, num)
        active = j < lengths
        labels[:, j] = torch.where(active, choice, torch.zeros_like(choice))
        num = num + (active & (choice == num)).long()
    return labels


def _choose(sums: Tensor, num: Tensor) -> Tensor:
    """Best existing cluster (ids < num) or ``num`` (a new cluster) if its total is < 0."""
    ids = torch.arange(sums.shape[1], device=sums.device).view(1, -1)
    masked = sums.masked_fill(ids >= num.view(-1, 1), float("-inf"))
    best_val, best = masked.max(1)
    new = (num == 0) | (best_val < 0)
    return torch.where(new, num, best)
