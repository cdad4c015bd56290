"""First-order linear chains (HMM / CRF / chain structural SVM).

Factorisation: the score of labels ``y_0 .. y_{n-1}`` of an example of length ``n`` is
``sum_t potentials[t, y_{t-1}, y_t]`` where ``y_{-1} = 0`` is a virtual start state. Parts are
edges: ``parts[t, i, j] = 1`` iff ``y_{t-1} = i`` and ``y_t = j``. At ``t = 0`` only row 0 is a
part (rows 1.. are never used and get zero marginals); positions ``t >= n`` are padding.
Unary, transition, start and end potentials fold into this layout with
:meth:`LinearChain.potentials_from` (end potentials go to each example's last edge).

Potentials: (B, N, C, C). Labels: (B, N) long, 0 at padded positions.
Time O(B N C^2), memory O(B N C^2) (the potentials themselves; backpointers are O(B N C)).
k-best is list Viterbi: time O(B N C^2 k log k), memory O(B N C k).

References: Rabiner (1989) for Viterbi and forward-backward; Seshadri and Sundberg (1994)
for the list Viterbi algorithm.
"""

from __future__ import annotations

from typing import Literal, Optional, Sequence

import torch
from torch import Tensor

from structssl.semirings import LOG_ZERO, Log, Semiring
from structssl.structures.base import Potentials, Structure, positive_int

__all__ = ["LinearChain", "bio_allowed_transitions"]


class LinearChain(Structure):
    """First-order linear chain over ``C`` labels (see the module docstring for the layout).

    Args:
        num_labels: C, the number of labels.
        validate: check values at the public entry points (see :class:`Structure`).
        log_kernel: how the Log-semiring forward pass (log-partition, marginals) combines a
            step: ``"logsumexp"`` (exact in log space) or ``"expmm"`` (one batched matrix
            product of exponentiated, max-shifted factors per step; faster, falls back to
            log-sum-exp when it underflows). See ``benchmarks/README.md`` for which wins where.
    """

    event_shape_doc = "(N, C, C)"

    def __init__(
        self,
        num_labels: int,
        validate: bool = True,
        log_kernel: Literal["logsumexp", "expmm"] = "logsumexp",
    ) -> None:
        super().__init__(validate)
        self.num_labels = positive_int(num_labels, "num_labels")
        if log_kernel not in ("logsumexp", "expmm"):
            raise ValueError(f"log_kernel must be one of 'logsumexp', 'expmm'; got {log_kernel!r}")
        self.log_kernel = log_kernel

    def __repr__(self) -> str:
        return f"LinearChain(num_labels={self.num_labels})"

    # ------------------------------------------------------------------ building potentials
    @staticmethod
    def potentials_from(
        unary: Tensor,
        transition: Optional[Tensor] = None,
        start: Optional[Tensor] = None,
        end: Optional[Tensor] = None,
        lengths: Optional[Tensor] = None,
    ) -> Tensor:
        """Fold unary, transition, start and end log-potentials into edge potentials.

        Args:
            unary: (B, N, C) per-position label potentials.
            transition: (C, C) or (B, C, C) or (B, N - 1, C, C) potentials of ``y_{t-1} = i ->
                y_t = j`` (default zero).
            start: (C,) or (B, C) potentials of the first label (default zero).
            end: (C,) or (B, C) potentials of the last label, added at position
                ``lengths - 1`` of each example (default zero).
            lengths: (B,) lengths, needed only with ``end`` (default: all N).

        Returns:
            (B, N, C, C) potentials.
        """
        if unary.dim() != 3:
            raise ValueError(f"unary must have shape (B, N, C); got {tuple(unary.shape)}")
        b, n, c = unary.shape
        dev = unary.device
        if end is not None:
            if end.shape[-1] != c or end.dim() > 2:
                raise ValueError(f"end must have shape (C,) or (B, C); got {tuple(end.shape)}")
            if lengths is None:
                lengths = torch.full((b,), n, dtype=torch.long, device=dev)
            last = torch.arange(n, device=dev) == (lengths.view(b, 1) - 1)  # (B, N)
            unary = unary + last.unsqueeze(2).to(unary.dtype) * end.view(-1, 1, c)  # (B, N, C)
        # edge: (B or 1, N, C, C) potentials that do not depend on the position's own label
        # score: transitions for t >= 1, start on row 0 (the virtual start state) at t = 0
        if transition is None:
            rest = unary.new_zeros(1, n - 1, c, c)
        elif transition.shape[-2:] != (c, c):
            raise ValueError(f"transition must end in ({c}, {c}); got {tuple(transition.shape)}")
        elif transition.dim() == 2:
            rest = transition.expand(1, n - 1, c, c)
        elif transition.dim() == 3 and transition.shape[0] == b:
            rest = transition.unsqueeze(1).expand(b, n - 1, c, c)
        elif transition.dim() == 4 and transition.shape[:2] == (b, n - 1):
            rest = transition
        else:
            raise ValueError(
                "transition must have shape (C, C), (B, C, C) or (B, N - 1, C, C) = "
                f"({b}, {n - 1}, {c}, {c}); got {tuple(transition.shape)}"
            )
        row0 = (torch.arange(c, device=dev) == 0).view(c, 1)  # (C, 1)
        if start is None:
            first = unary.new_zeros(1, 1, c, c)
        elif start.shape[-1] != c or start.dim() > 2:
            raise ValueError(f"start must have shape (C,) or (B, C); got {tuple(start.shape)}")
        else:
            first = (row0 * start.view(-1, 1, c)).unsqueeze(1)  # (B or 1, 1, C, C)
        rows = max(first.shape[0], rest.shape[0])
        edge = torch.cat([first.expand(rows, 1, c, c), rest.expand(rows, n - 1, c, c)], dim=1)
        return unary.unsqueeze(2) + edge  # (B, N, C, C): [t, i, j] = u[t, j] + edge[t, i, j]

    # ------------------------------------------------------------------ checks
    def _check(self, potentials: Potentials, lengths: Optional[Tensor]) -> tuple[Tensor, Tensor]:
        if not isinstance(potentials, Tensor):
            raise TypeError(
                f"LinearChain potentials must be a single tensor (B, N, C, C); got a "
                f"{type(potentials).__name__}"
            )
        c = self.num_labels
        if potentials.dim() != 4 or potentials.shape[-2:] != (c, c):
            raise ValueError(
                f"potentials must have shape (B, N, C, C) with C = num_labels = {c}; got "
                f"{tuple(potentials.shape)}"
            )
        b, n = potentials.shape[:2]
        if n == 0:
            raise ValueError(f"potentials must have N >= 1 positions; got shape {tuple(potentials.shape)}")
        return potentials, self.check_lengths(lengths, b, n, potentials.device)

    def check_labels(self, labels: Tensor, lengths: Tensor, name: str = "labels") -> Tensor:
        b = lengths.shape[0]
        if not isinstance(labels, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor; got {type(labels).__name__}")
        if labels.dim() != 2 or labels.shape[0] != b:
            raise ValueError(f"{name} must have shape (B, N) with B = {b}; got {tuple(labels.shape)}")
        if labels.is_floating_point() or labels.dtype == torch.bool:
            raise ValueError(f"{name} must have an integer dtype; got {labels.dtype}")
        if labels.shape[1] < int(lengths.max()):
            raise ValueError(
                f"{name} must have at least max(lengths) = {int(lengths.max())} positions; got "
                f"shape {tuple(labels.shape)}"
            )
        valid = self.valid_mask(lengths, labels.shape[1])
        labels = torch.where(valid, labels.long(), 0)
        if self.validate and labels.numel():
            lo, hi = int(labels.min()), int(labels.max())
            if lo < 0 or hi >= self.num_labels:
                raise ValueError(
                    f"{name} must be in [0, C) = [0, {self.num_labels}) at valid positions; got "
                    f"values in [{lo}, {hi}]"
                )
        return labels

    @staticmethod
    def valid_mask(lengths: Tensor, max_length: int) -> Tensor:
        """(B, N) bool: which positions are within each example's length."""
        return torch.arange(max_length, device=lengths.device) < lengths.unsqueeze(1)

    # ------------------------------------------------------------------ dynamic programs
    def _inside(self, potentials: Tensor, lengths: Tensor, semiring: Semiring) -> Tensor:
        if isinstance(semiring, Log) and self.log_kernel == "expmm":
            log_z = self._log_partition_expmm(potentials, lengths)
            if bool(torch.isfinite(log_z).all()):
                return log_z
            # underflow of exp(alpha - max) @ exp(potentials - max): redo in log space
        b, n, c, _ = potentials.shape
        # unbind once: indexing potentials[:, t] in the loop would make autograd allocate a
        # full-size zero gradient per step (O(N^2 C^2) backward traffic)
        steps = potentials.unbind(1)  # N x (B, C_prev, C_next)
        alpha = semiring.lift(steps[0][:, 0, :])  # (B, C, *S)
        extra = (1,) * (alpha.dim() - 2)
        ragged = _ragged(lengths, n)
        for t in range(1, n):
            # alpha (B, C_prev, 1, *S) ⊗ potentials (B, C_prev, C_next) -> sum over C_prev
            step = semiring.sum(semiring.mul_potentials(alpha.unsqueeze(2), steps[t]), dim=1)
            alpha = torch.where((t < lengths).view(b, 1, *extra), step, alpha) if ragged else step
        return semiring.sum(alpha, dim=1)  # (B, *S)

    def _log_partition_expmm(self, potentials: Tensor, lengths: Tensor) -> Tensor:
        """log Z with the exp-matmul kernel: each step is one batched matrix product.

        ``alpha'_j = m + M_j + log sum_i exp(alpha_i - m) exp(potentials_ij - M_j)`` with
        ``m = max_i alpha_i`` and ``M_j = max_i potentials_ij``, so both factors are in (0, 1].
        The product can underflow to 0 when the rows that carry alpha's mass have scores far
        below the column maximum (more than ~87 nats in float32); the caller checks for a
        non-finite result and falls back to log-sum-exp.
        """
        b, n, c, _ = potentials.shape
        col_max = potentials.amax(dim=2, keepdim=True)  # (B, N, 1, C)
        weights = (potentials - col_max).exp().unbind(1)  # N x (B, C_prev, C_next) in (0, 1]
        col_max = col_max.squeeze(2).unbind(1)  # N x (B, C)
        alpha = potentials[:, 0, 0, :]  # (B, C)
        ragged = _ragged(lengths, n)
        for t in range(1, n):
            shift = alpha.amax(dim=1, keepdim=True)  # (B, 1)
            mass = torch.bmm((alpha - shift).exp().unsqueeze(1), weights[t]).squeeze(1)  # (B, C)
            step = mass.log() + shift + col_max[t]
            alpha = torch.where((t < lengths).view(b, 1), step, alpha) if ragged else step
        return torch.logsumexp(alpha, dim=1)

    def _argmax(self, potentials: Tensor, lengths: Tensor) -> Tensor:
        b, n, c, _ = potentials.shape
        alpha = potentials[:, 0, 0, :]  # (B, C)
        backpointers = []
        ragged = _ragged(lengths, n)
        for t in range(1, n):
            step, arg = (alpha.unsqueeze(2) + potentials[:, t]).max(dim=1)  # (B, C), (B, C)
            alpha = torch.where((t < lengths).view(b, 1), step, alpha) if ragged else step
            backpointers.append(arg)
        best = alpha.argmax(dim=1)  # (B,) label at position lengths - 1
        labels = potentials.new_zeros(b, n, dtype=torch.long)
        current = best
        for t in range(n - 1, -1, -1):
            # at t == lengths - 1 start from `best`; below, follow the backpointers of t + 1
            if t < n - 1:
                prev = backpointers[t].gather(1, current.unsqueeze(1)).squeeze(1)
                current = torch.where(t + 1 < lengths, prev, best) if ragged else prev
            labels[:, t] = current
        return torch.where(self.valid_mask(lengths, n), labels, 0) if ragged else labels

    def _kbest(self, potentials: Tensor, k: int, lengths: Tensor) -> tuple[Tensor, Tensor]:
        b, n, c, _ = potentials.shape
        neg_inf = torch.tensor(float("-inf"), dtype=potentials.dtype, device=potentials.device)
        alpha = potentials.new_full((b, c, k), float("-inf"))  # (B, C, k), best first
        alpha[:, :, 0] = potentials[:, 0, 0, :]
        identity = (torch.arange(c, device=potentials.device).view(c, 1) * k
                    + torch.arange(k, device=potentials.device).view(1, k))  # (C, k)
        backpointers = []
        for t in range(1, n):
            cand = alpha.unsqueeze(2) + potentials[:, t].unsqueeze(-1)  # (B, C_prev, C_next, k)
            cand = cand.transpose(1, 2).reshape(b, c, c * k)  # (B, C_next, C_prev * k)
            top = cand.topk(k, dim=2)  # prev index = i * k + r
            active = (t < lengths).view(b, 1, 1)
            alpha = torch.where(active, top.values, alpha)
            backpointers.append(torch.where(active, top.indices, identity))
        final = alpha.reshape(b, c * k).topk(k, dim=1)  # (B, k) over (label, rank)
        scores = torch.where(torch.isfinite(final.values), final.values, neg_inf)
        label = final.indices // k  # (B, k)
        rank = final.indices % k
        labels = potentials.new_zeros(b, k, n, dtype=torch.long)
        labels[:, :, n - 1] = label
        for t in range(n - 1, 0, -1):
            # backpointers[t - 1]: (B, C, k), entry [b, label, rank] = prev_label * k + prev_rank
            flat = backpointers[t - 1].reshape(b, c * k)
            prev = flat.gather(1, label * k + rank)  # (B, k)
            label, rank = prev // k, prev % k
            labels[:, :, t - 1] = label
        # positions past each length repeat the last label (identity backpointers): zero them
        valid = self.valid_mask(lengths, n).unsqueeze(1)  # (B, 1, N)
        return torch.where(valid, labels, 0), scores

    # ------------------------------------------------------------------ parts
    def to_parts(self, labels: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
        """Labels (B, N) to one-hot edge parts (B, N, C, C); padded positions are all zero."""
        labels, lengths = self._labels_and_lengths(labels, lengths)
        b, n = labels.shape
        c = self.num_labels
        prev = torch.cat([labels.new_zeros(b, 1), labels[:, :-1]], dim=1)  # (B, N), y_{-1} = 0
        index = prev * c + labels  # (B, N)
        parts = torch.zeros(b, n, c * c, device=labels.device)
        parts.scatter_(2, index.unsqueeze(2), 1.0)
        parts = parts * self.valid_mask(lengths, n).unsqueeze(2)
        return parts.view(b, n, c, c)

    def from_parts(self, parts: Potentials, lengths: Optional[Tensor] = None) -> Tensor:
        """Edge parts or marginals (B, N, C, C) to labels (B, N): the most likely label per
        position (exact for 0/1 parts)."""
        if not isinstance(parts, Tensor) or parts.dim() != 4:
            raise ValueError("parts must be a tensor of shape (B, N, C, C)")
        b, n = parts.shape[:2]
        lengths = self.check_lengths(lengths, b, n, parts.device)
        labels = self.node_parts(parts).argmax(dim=2)
        return torch.where(self.valid_mask(lengths, n), labels, 0)

    @staticmethod
    def node_parts(parts: Tensor) -> Tensor:
        """Per-position label indicators (or node marginals) (B, N, C) from edge parts."""
        return parts.sum(dim=2)

    def hamming_potentials(self, target: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
        """(B, N, C, C) cost: 1 on every edge into a valid position whose label differs."""
        target, lengths = self._labels_and_lengths(target, lengths, "target")
        b, n = target.shape
        c = self.num_labels
        wrong = 1.0 - torch.nn.functional.one_hot(target, c).float()  # (B, N, C)
        wrong = wrong * self.valid_mask(lengths, n).unsqueeze(2)
        return wrong.unsqueeze(2).expand(b, n, c, c)  # same cost from every previous label

    def hamming(self, target: Tensor, labels: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
        """Number of valid positions where ``labels`` differ from ``target``. Shape (B,)."""
        target, lengths = self._labels_and_lengths(target, lengths, "target")
        labels, _ = self._labels_and_lengths(labels, lengths)
        if labels.shape != target.shape:
            raise ValueError(
                f"labels must have the shape of target {tuple(target.shape)}; got {tuple(labels.shape)}"
            )
        return (target != labels).sum(1)

    def _labels_and_lengths(
        self, labels: Tensor, lengths: Optional[Tensor], name: str = "labels"
    ) -> tuple[Tensor, Tensor]:
        if not isinstance(labels, Tensor) or labels.dim() != 2:
            got = tuple(labels.shape) if isinstance(labels, Tensor) else type(labels).__name__
            raise ValueError(f"{name} must have shape (B, N); got {got}")
        lengths = self.check_lengths(lengths, labels.shape[0], labels.shape[1], labels.device)
        return self.check_labels(labels, lengths, name), lengths

    def _score(self, potentials: Potentials, labels: Tensor, lengths: Tensor) -> Tensor:
        # gather instead of the dense dot product with one-hot parts: O(B N) not O(B N C^2)
        assert isinstance(potentials, Tensor)
        b, n, c, _ = potentials.shape
        if labels.shape != (b, n):
            raise ValueError(f"labels must have shape (B, N) = ({b}, {n}); got {tuple(labels.shape)}")
        prev = torch.cat([labels.new_zeros(b, 1), labels[:, :-1]], dim=1)  # (B, N)
        index = (prev * c + labels).unsqueeze(2)  # (B, N, 1)
        edge = potentials.reshape(b, n, c * c).gather(2, index).squeeze(2)  # (B, N)
        return (edge * self.valid_mask(lengths, n)).sum(1)

    # ------------------------------------------------------------------ constrained decoding
    def constrain(
        self,
        potentials: Tensor,
        lengths: Optional[Tensor] = None,
        allowed_transitions: Optional[Tensor] = None,
        allowed_labels: Optional[Tensor] = None,
        allowed_start: Optional[Tensor] = None,
        allowed_end: Optional[Tensor] = None,
        observed: Optional[Tensor] = None,
    ) -> Tensor:
        """Mask potentials so that only structures meeting hard constraints keep their score.

        Forbidden parts get ``LOG_ZERO``; the result can go to any operation (argmax, kbest,
        marginals, log-partition). Linear part costs (Lagrange multipliers) need no method:
        add them to the potentials.

        Args:
            potentials: (B, N, C, C).
            lengths: (B,).
            allowed_transitions: (C, C) bool, ``[i, j]`` True iff label i may precede label j.
            allowed_labels: (B, N, C) or (N, C) or (C,) bool, labels allowed per position.
            allowed_start: (C,) bool, labels allowed at the first position.
            allowed_end: (C,) bool, labels allowed at each example's last position.
            observed: (B, N) long, partially observed labels: a label in [0, C) fixes that
                position, -1 leaves it free.

        Raises:
            ValueError: on wrong shapes, or when the masks leave a valid position of some example
                with no allowed label (e.g. a masked-out first token).
        """
        potentials, lengths = self.check(potentials, lengths)
        assert isinstance(potentials, Tensor)
        b, n, c, _ = potentials.shape
        dev = potentials.device
        allowed = torch.ones(b, n, c, c, dtype=torch.bool, device=dev)
        nodes = torch.ones(b, n, c, dtype=torch.bool, device=dev)
        if allowed_transitions is not None:
            _expect_bool(allowed_transitions, (c, c), "allowed_transitions")
            allowed[:, 1:] &= allowed_transitions
        if allowed_labels is not None:
            if allowed_labels.dtype != torch.bool or allowed_labels.shape[-1] != c:
                raise ValueError(
                    f"allowed_labels must be a bool tensor ending in C = {c}; got dtype "
                    f"{allowed_labels.dtype}, shape {tuple(allowed_labels.shape)}"
                )
            nodes &= allowed_labels.expand(b, n, c)
        if allowed_start is not None:
            _expect_bool(allowed_start, (c,), "allowed_start")
            nodes[:, 0] &= allowed_start
        if allowed_end is not None:
            _expect_bool(allowed_end, (c,), "allowed_end")
            last = torch.arange(n, device=dev).view(1, n) == (lengths.view(b, 1) - 1)  # (B, N)
            nodes &= ~last.unsqueeze(2) | allowed_end
        if observed is not None:
            if observed.shape != (b, n):
                raise ValueError(f"observed must have shape (B, N) = ({b}, {n}); got {tuple(observed.shape)}")
            if self.validate and observed.numel() and (int(observed.min()) < -1 or int(observed.max()) >= c):
                raise ValueError(
                    f"observed must be in [-1, C) = [-1, {c}) (-1 = unobserved); got values in "
                    f"[{int(observed.min())}, {int(observed.max())}]"
                )
            fixed = torch.nn.functional.one_hot(observed.clamp(min=0).long(), c).bool()
            nodes &= torch.where((observed >= 0).unsqueeze(2), fixed, True)
        if self.validate:
            empty = ~nodes.any(dim=2) & self.valid_mask(lengths, n)  # (B, N)
            if bool(empty.any()):
                where = empty.nonzero()[0].tolist()
                raise ValueError(
                    "constraints leave no allowed label at a valid position: example "
                    f"{where[0]}, position {where[1]} (expected at least one allowed label per "
                    "position within lengths)"
                )
        allowed &= nodes.unsqueeze(2)
        return self.mask_potentials(potentials, allowed)


def _ragged(lengths: Tensor, max_length: int) -> bool:
    """Whether some example is shorter than ``max_length`` (else the DPs skip masking)."""
    return bool((lengths != max_length).any())


def _expect_bool(x: Tensor, shape: tuple[int, ...], name: str) -> None:
    if not isinstance(x, Tensor) or x.dtype != torch.bool or tuple(x.shape) != shape:
        got = (x.dtype, tuple(x.shape)) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"{name} must be a bool tensor of shape {shape}; got {got}")


def bio_allowed_transitions(tags: Sequence[str]) -> tuple[Tensor, Tensor]:
    """Allowed transitions and first labels of the BIO scheme.

    ``I-X`` may only follow ``B-X`` or ``I-X``, and may not start a sequence.

    Args:
        tags: label names such as ``["O", "B-PER", "I-PER"]``.

    Returns:
        ``(allowed_transitions (C, C) bool, allowed_start (C,) bool)`` for
        :meth:`LinearChain.constrain`.
    """
    c = len(tags)
    for tag in tags:
        if tag != "O" and not (tag.startswith("B-") or tag.startswith("I-")):
            raise ValueError(f"tags must be 'O', 'B-X' or 'I-X'; got {tag!r}")
    allowed = torch.ones(c, c, dtype=torch.bool)
    start = torch.ones(c, dtype=torch.bool)
    for j, to in enumerate(tags):
        if to.startswith("I-"):
            start[j] = False
            for i, frm in enumerate(tags):
                allowed[i, j] = frm in ("B-" + to[2:], to)
    return allowed, start
