"""Parse trees of a weighted context-free grammar in Chomsky normal form (CKY).

Factorisation. A tree of a sentence of length ``n`` is a full binary tree over the positions
``0 .. n-1`` whose ``2n - 1`` nodes are labelled spans ``(i, j, A)`` (``i <= j`` inclusive, ``A``
a symbol in ``[0, NT)``). One symbol set serves every node: leaves (preterminals), internal
nodes and the root, so a length-1 sentence is a single leaf that is also the root; a grammar
restricts which symbol may go where by masking (``LOG_ZERO``) the potentials. The score of a
tree is

    sum over leaves (i, i, A)                  terms[i, A]        (preterminal rule A -> word_i)
  + sum over internal nodes A -> B C           rules[A, B, C]     (shared across spans)
  + roots[A_root]                                                 (the root symbol)
  + sum over all nodes (i, j, A)               spans[i, j, A]     (labelled-span score)

``spans`` makes span-level scores and costs (span features, Hamming cost, Lagrange
multipliers, constraints on brackets) linear in parts; entries with ``i > j`` are never used
and get zero marginals. This is the decoder of the thesis (seed 001, section 3.2.3 and
appendix C: rule-count joint feature map, CKY with back-pointers) and of the label-switching
paper (seed 003, section 3.2.1: leaf-level rules are the ``terms``).

Potentials: :class:`CKYPotentials` ``(terms (B, N, NT), rules (B, NT, NT, NT), roots (B, NT),
spans (B, N, N, NT))``; build them with :meth:`CKY.potentials_from`. Parts have the same
layout (counts of each leaf symbol, rule, root symbol and labelled span).

Labels: the tree as labelled spans, a long tensor (B, 2N - 1, 3) of rows ``(start,
end_inclusive, symbol)`` in pre-order (parent before children, left before right, i.e. sorted
by start ascending then end descending); rows ``>= 2 * length - 1`` are all zero. Row 0 is the
root ``(0, length - 1, A)``. :meth:`CKY.to_bracketed` / :meth:`CKY.from_bracketed` convert to
and from strings such as ``"(S (NP (D the) (N dog)) (V ran))"``.

Complexity (B examples, N positions, NT symbols). The inside pass loops over span widths
only, batched over examples and over all spans of one width, and factorises each width as
split-then-rule: first reduce over split points for every (left child symbol, right child
symbol) pair, then over the rules. Time O(B N^3 NT^2 + B N^2 NT^3); charts O(B N^2 NT);
per-width temporaries O(B N^2 NT^2 + B N NT^3). With autograd (log-partition backward,
marginals) the per-width temporaries are kept for backward: memory O(B N^3 NT^2 + B N^2 NT^3).
Argmax stores backpointers O(B N^2 NT) (the best split is recomputed only for the chosen
children) and backtracks top-down in N batched steps. k-best and kmax (the KMax semiring with
backpointers to (split, B, C, left rank, right rank)) combine only the rank pairs with
(r1 + 1)(r2 + 1) <= k, about k ln k of them: time O(B N^3 NT^2 k log k + B N^2 NT^3 k),
per-width temporaries O(B N^2 NT^2 k log k + B N NT^3 k), charts and backpointers
O(B N^2 NT k).

References: Cocke-Younger-Kasami parsing (Hopcroft and Ullman, 1979); Goodman (1999)
"Semiring parsing"; Huang and Chiang (2005) for k-best parsing; Joachims, Finley and Yu (2009)
for parse trees as structural-SVM outputs.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import Tensor

from structssl.semirings import KMax, Log, Semiring
from structssl.structures.base import Potentials, Structure, positive_int, semiring_sum
from structssl.structures.brackets import from_bracketed, to_bracketed, words_from_bracketed

__all__ = ["CKY", "CKYPotentials"]


class CKYPotentials(NamedTuple):
    """Potentials (or parts) of :class:`CKY`.

    Shape:
        terms: (B, N, NT), score of symbol A at leaf i (preterminal rule A -> word_i).
        rules: (B, NT, NT, NT), score of the binary rule A -> B C, shared across spans.
        roots: (B, NT), score of the root symbol.
        spans: (B, N, N, NT), score of the labelled span [i, j] (inclusive; i > j unused).
    """

    terms: Tensor
    rules: Tensor
    roots: Tensor
    spans: Tensor


class CKY(Structure):
    """Binary parse trees with ``NT`` symbols (see the module docstring for the layout).

    Args:
        num_symbols: NT, the number of symbols (shared by leaves, internal nodes and root).
        validate: check values at the public entry points (see :class:`Structure`).
    """

    event_shape_doc = "terms (N, NT), rules (NT, NT, NT), roots (NT,), spans (N, N, NT)"
    mask_value = float("-inf")  # exact exclusion (see Structure.mask_potentials)

    def __init__(self, num_symbols: int, validate: bool = True) -> None:
        super().__init__(validate)
        self.num_symbols = positive_int(num_symbols, "num_symbols")

    def __repr__(self) -> str:
        return f"CKY(num_symbols={self.num_symbols})"

    # ------------------------------------------------------------------ building potentials
    @staticmethod
    def potentials_from(
        terms: Tensor,
        rules: Tensor,
        roots: Optional[Tensor] = None,
        spans: Optional[Tensor] = None,
    ) -> CKYPotentials:
        """Broadcast shared rule / root scores and fill missing components with zeros.

        Args:
            terms: (B, N, NT) leaf (preterminal) scores.
            rules: (NT, NT, NT) or (B, NT, NT, NT) binary rule scores ``[A, B, C]``.
            roots: (NT,) or (B, NT) root scores (default zero).
            spans: (B, N, N, NT) labelled-span scores (default zero).

        Returns:
            :class:`CKYPotentials`; shared tensors are broadcast views (not copies).
        """
        if not isinstance(terms, Tensor) or terms.dim() != 3:
            got = tuple(terms.shape) if isinstance(terms, Tensor) else type(terms).__name__
            raise ValueError(f"terms must have shape (B, N, NT); got {got}")
        b, n, nt = terms.shape
        if (
            not isinstance(rules, Tensor)
            or rules.shape[-3:] != (nt, nt, nt)
            or rules.dim() not in (3, 4)
        ):
            got = tuple(rules.shape) if isinstance(rules, Tensor) else type(rules).__name__
            raise ValueError(
                f"rules must have shape (NT, NT, NT) or (B, NT, NT, NT) = ({b}, {nt}, {nt}, {nt}); "
                f"got {got}"
            )
        if rules.dim() == 4 and rules.shape[0] != b:
            raise ValueError(f"rules must have batch size B = {b}; got shape {tuple(rules.shape)}")
        rules = rules.expand(b, nt, nt, nt)
        if roots is None:
            roots = terms.new_zeros(b, nt)
        else:
            if (
                not isinstance(roots, Tensor)
                or roots.dim() not in (1, 2)
                or roots.shape[-1] != nt
                or (roots.dim() == 2 and roots.shape[0] != b)
            ):
                got = tuple(roots.shape) if isinstance(roots, Tensor) else type(roots).__name__
                raise ValueError(f"roots must have shape (NT,) or (B, NT) = ({b}, {nt}); got {got}")
            roots = roots.expand(b, nt)
        if spans is None:
            spans = terms.new_zeros(b, n, n, nt)
        elif not isinstance(spans, Tensor) or tuple(spans.shape) != (b, n, n, nt):
            got = tuple(spans.shape) if isinstance(spans, Tensor) else type(spans).__name__
            raise ValueError(
                f"spans must have shape (B, N, N, NT) = ({b}, {n}, {n}, {nt}); got {got}"
            )
        return CKYPotentials(terms, rules, roots, spans)

    # ------------------------------------------------------------------ checks
    def _check(
        self, potentials: Potentials, lengths: Optional[Tensor]
    ) -> tuple[CKYPotentials, Tensor]:
        if isinstance(potentials, Tensor) or len(potentials) != 4:
            got = (
                type(potentials).__name__
                if isinstance(potentials, Tensor)
                else f"{len(potentials)} tensors"
            )
            raise TypeError(
                "CKY potentials must be a CKYPotentials (terms, rules, roots, spans) of 4 tensors; "
                f"got {got}"
            )
        terms, rules, roots, spans = potentials
        nt = self.num_symbols
        if terms.dim() != 3 or terms.shape[2] != nt:
            raise ValueError(
                f"potentials.terms must have shape (B, N, NT) with NT = num_symbols = {nt}; got "
                f"{tuple(terms.shape)}"
            )
        b, n = terms.shape[:2]
        if n == 0:
            raise ValueError(
                f"potentials.terms must have N >= 1 positions; got shape {tuple(terms.shape)}"
            )
        for name, x, shape in (
            ("rules", rules, (b, nt, nt, nt)),
            ("roots", roots, (b, nt)),
            ("spans", spans, (b, n, n, nt)),
        ):
            if tuple(x.shape) != shape:
                raise ValueError(
                    f"potentials.{name} must have shape {shape} (B, N from terms, NT = "
                    "num_symbols); "
                    f"got {tuple(x.shape)}"
                )
            if x.dtype != terms.dtype or x.device != terms.device:
                raise ValueError(
                    f"potentials.{name} must have the dtype and device of terms ({terms.dtype}, "
                    f"{terms.device}); got ({x.dtype}, {x.device})"
                )
        return CKYPotentials(terms, rules, roots, spans), self.check_lengths(
            lengths, b, n, terms.device
        )

    def valid_masks(self, potentials: Potentials, lengths: Tensor) -> tuple[Optional[Tensor], ...]:
        """Valid entries: ``terms[i]`` and ``spans[i, j]`` with ``i <= j < length``; every rule
        and root. Other entries (padding, ``i > j``) may hold anything and are ignored."""
        n = potentials[0].shape[1]
        pos = torch.arange(n, device=lengths.device)
        inside = pos.view(1, n) < lengths.view(-1, 1)  # (B, N)
        spans = (pos.view(1, n, 1) <= pos.view(1, 1, n)) & inside.unsqueeze(1)  # (B, N, N)
        return (inside.unsqueeze(2), None, None, spans.unsqueeze(3))

    def check_labels(self, labels: Tensor, lengths: Tensor, name: str = "labels") -> Tensor:
        b = lengths.shape[0]
        if not isinstance(labels, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor; got {type(labels).__name__}")
        if labels.dim() != 3 or labels.shape[0] != b or labels.shape[2] != 3:
            raise ValueError(
                f"{name} must have shape (B, 2N - 1, 3) with B = {b}; got {tuple(labels.shape)}"
            )
        if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
            raise ValueError(f"{name} must have an integer dtype; got {labels.dtype}")
        rows = labels.shape[1]
        need = 2 * int(lengths.max()) - 1
        if rows < need:
            raise ValueError(
                f"{name} must have at least 2 * max(lengths) - 1 = {need} rows; got shape "
                f"{tuple(labels.shape)}"
            )
        valid = _row_mask(lengths, rows)  # (B, R)
        labels = torch.where(valid.unsqueeze(2), labels.long(), 0)
        if self.validate:
            self._validate_tree(labels, lengths, valid, name)
        return labels

    def _validate_tree(self, labels: Tensor, lengths: Tensor, valid: Tensor, name: str) -> None:
        b, rows, _ = labels.shape
        start, end, sym = labels.unbind(2)  # (B, R) each
        n = lengths.view(b, 1)
        in_range = (start >= 0) & (start <= end) & (end < n) & (sym >= 0) & (sym < self.num_symbols)
        bad = valid & ~in_range
        if bool(bad.any()):
            e, r = bad.nonzero()[0].tolist()
            raise ValueError(
                f"{name} rows must be (start, end, symbol) with 0 <= start <= end < length and "
                f"symbol in [0, {self.num_symbols}); example {e}, row {r} is "
                f"{tuple(labels[e, r].tolist())} with length {int(lengths[e])}"
            )
        root_ok = (start[:, 0] == 0) & (end[:, 0] == lengths - 1)
        if not bool(root_ok.all()):
            e = int((~root_ok).nonzero()[0])
            raise ValueError(
                f"{name} row 0 must be the root span (0, length - 1, symbol); example {e} has "
                f"{tuple(labels[e, 0].tolist())} with length {int(lengths[e])}"
            )
        left, right, internal = _children(labels, valid)
        l_start, l_end = _take(start, left), _take(end, left)
        r_start, r_end = _take(start, right), _take(end, right)
        right_row = torch.arange(rows, device=labels.device) + 2 * (l_end - start + 1)
        ok = (
            (left < rows)
            & valid.gather(1, left.clamp(max=rows - 1))
            & (l_start == start)
            & (l_end < end)
            & (right_row < 2 * n - 1)
            & (r_start == l_end + 1)
            & (r_end == end)
        )
        bad = internal & ~ok
        if bool(bad.any()):
            e, r = bad.nonzero()[0].tolist()
            raise ValueError(
                f"{name} must be a binary tree of labelled spans in pre-order (parent, then its "
                f"left subtree, then its right subtree); example {e}, row {r} "
                f"{tuple(labels[e, r].tolist())} has no valid children"
            )

    # ------------------------------------------------------------------ dynamic programs
    def _inside(self, potentials: Potentials, lengths: Tensor, semiring: Semiring) -> Tensor:
        if isinstance(semiring, KMax):  # pruned rank pairs, see _kmax_chart
            return self._kmax_chart(potentials, semiring.k, lengths, track=False)[0].values
        terms, rules, roots, spans = potentials
        b, n, nt = terms.shape
        extra = (semiring.size,) if semiring.size else ()
        # chart[b, start, width, A(, k)]; mirror[b, end, N - 1 - width, A(, k)] so that the left
        # children and the right children of all spans of one width are both plain slices
        chart = terms.new_full((b, n, n, nt, *extra), semiring.zero)
        mirror = terms.new_full((b, n, n, nt, *extra), semiring.zero)
        leaves = semiring.lift(terms + spans.diagonal(0, 1, 2).transpose(1, 2))  # (B, N, NT, *S)
        chart[:, :, 0] = leaves
        mirror[:, :, n - 1] = leaves
        flat_rules = rules.reshape(b, 1, nt, nt * nt)  # (B, 1, A, BC)
        for w in range(1, n):
            s = n - w  # number of spans of width w
            left = chart[:, :s, :w].unsqueeze(4)  # (B, S, split, B_sym, 1, *S)
            right = mirror[:, w:, n - w :].unsqueeze(3)  # (B, S, split, 1, C_sym, *S)
            pairs = _sum(semiring, semiring.mul(left, right), dim=2)  # (B, S, B_sym, C_sym, *S)
            pairs = pairs.reshape(b, s, 1, nt * nt, *extra)
            inner = _sum(
                semiring, semiring.mul_potentials(pairs, flat_rules), dim=3
            )  # (B, S, A, *S)
            value = semiring.mul_potentials(inner, spans.diagonal(w, 1, 2).transpose(1, 2))
            chart[:, :s, w] = value
            mirror[:, w:, n - 1 - w] = value
        top = chart[torch.arange(b, device=terms.device), 0, lengths - 1]  # (B, NT, *S)
        total = _sum(semiring, semiring.mul_potentials(top, roots), dim=1)  # (B, *S)
        return total

    def _argmax(self, potentials: Potentials, lengths: Tensor) -> Tensor:
        terms, rules, roots, spans = potentials
        b, n, nt = terms.shape
        chart = terms.new_full((b, n, n, nt), float("-inf"))
        mirror = terms.new_full((b, n, n, nt), float("-inf"))
        # back[b, start, width, A] = (B * NT + C) * N + split (left child width - 1)
        back = torch.zeros(b, n, n, nt, dtype=torch.long, device=terms.device)
        leaves = terms + spans.diagonal(0, 1, 2).transpose(1, 2)
        chart[:, :, 0] = leaves
        mirror[:, :, n - 1] = leaves
        flat_rules = rules.reshape(b, 1, nt, nt * nt)
        for w in range(1, n):
            s = n - w
            left = chart[:, :s, :w]  # (B, S, split, B_sym)
            right = mirror[:, w:, n - w :]  # (B, S, split, C_sym)
            pairs = (left.unsqueeze(4) + right.unsqueeze(3)).amax(dim=2)  # (B, S, NT, NT)
            best, bc = (pairs.reshape(b, s, 1, nt * nt) + flat_rules).max(dim=3)  # (B, S, A)
            # the best split only for the chosen children of each (span, A): O(B S w NT)
            l_sym = (bc // nt).unsqueeze(2).expand(b, s, w, nt)
            r_sym = (bc % nt).unsqueeze(2).expand(b, s, w, nt)
            # max's indices: the same first index as argmax, which is several times slower on
            # the CPU over a dimension that is not the last
            split = (left.gather(3, l_sym) + right.gather(3, r_sym)).max(dim=2).indices  # (B, S, A)
            value = best + spans.diagonal(w, 1, 2).transpose(1, 2)
            chart[:, :s, w] = value
            mirror[:, w:, n - 1 - w] = value
            back[:, :s, w] = bc * n + split
        top = chart[torch.arange(b, device=terms.device), 0, lengths - 1]  # (B, NT)
        root = (top + roots).argmax(dim=1)  # (B,)
        symbols = self._backtrack(back.unsqueeze(-1), root, torch.zeros_like(root), lengths, 1)
        return _chart_to_labels(symbols, n)

    def _kbest(self, potentials: Potentials, k: int, lengths: Tensor) -> tuple[Tensor, Tensor]:
        b, n = potentials[0].shape[:2]
        final, back = self._kmax_chart(potentials, k, lengths, track=True)
        assert back is not None
        root, rank = final.indices // k, final.indices % k
        symbols = self._backtrack(back, root.reshape(-1), rank.reshape(-1), lengths, k)
        labels = _chart_to_labels(symbols, n).view(b, k, 2 * n - 1, 3)
        missing = torch.isneginf(final.values)  # fewer than k trees: repeat the best tree
        labels = torch.where(missing.view(b, k, 1, 1), labels[:, :1], labels)
        return labels, final.values

    def _kmax_chart(
        self, potentials: Potentials, k: int, lengths: Tensor, track: bool
    ) -> tuple[torch.return_types.topk, Optional[Tensor]]:
        """k-best inside pass (KMax semiring), with backpointers when ``track``.

        Returns the top-k of the root cell (values (B, k); indices ``A * k + rank``) and the
        backpointers (B, N, N, NT, k) ``[b, start, width, A, rank] = (((B_sym * NT + C_sym) * N
        + split) * k + r_left) * k + r_right``.
        """
        terms, rules, roots, spans = potentials
        b, n, nt = terms.shape
        dev = terms.device
        # the k best sums of two sorted lists use only rank pairs with (r1 + 1)(r2 + 1) <= k
        rank_pairs = [(r1, r2) for r1 in range(k) for r2 in range(k) if (r1 + 1) * (r2 + 1) <= k]
        r1_idx = torch.tensor([p[0] for p in rank_pairs], device=dev)
        r2_idx = torch.tensor([p[1] for p in rank_pairs], device=dev)
        num_pairs = len(rank_pairs)
        chart = terms.new_full((b, n, n, nt, k), float("-inf"))
        mirror = terms.new_full((b, n, n, nt, k), float("-inf"))
        back = torch.zeros(b, n, n, nt, k, dtype=torch.long, device=dev) if track else None
        leaves = terms + spans.diagonal(0, 1, 2).transpose(1, 2)
        chart[:, :, 0, :, 0] = leaves
        mirror[:, :, n - 1, :, 0] = leaves
        flat_rules = rules.reshape(b, 1, nt, nt * nt, 1)
        for w in range(1, n):
            s = n - w
            left = chart[:, :s, :w].transpose(2, 3)[..., r1_idx]  # (B, S, B_sym, split, P)
            right = mirror[:, w:, n - w :].transpose(2, 3)[..., r2_idx]  # (B, S, C_sym, split, P)
            # (B, S, B_sym, C_sym, split * P) -> k best per (B_sym, C_sym)
            cand = left.unsqueeze(3) + right.unsqueeze(2)
            pairs = cand.reshape(b, s, nt, nt, w * num_pairs).topk(k, dim=4)  # (B, S, NT, NT, k)
            cand = pairs.values.reshape(b, s, 1, nt * nt, k) + flat_rules  # (B, S, A, BC, k)
            best = cand.reshape(b, s, nt, nt * nt * k).topk(k, dim=3)  # index = BC * k + m
            value = best.values + spans.diagonal(w, 1, 2).transpose(1, 2).unsqueeze(-1)
            chart[:, :s, w] = value
            mirror[:, w:, n - 1 - w] = value
            if back is not None:
                index = pairs.indices.reshape(b, s, 1, nt * nt * k).expand(b, s, nt, nt * nt * k)
                index = index.gather(3, best.indices)  # (B, S, A, k): split * P + pair
                split, pair = index // num_pairs, index % num_pairs
                code = (split * k + r1_idx[pair]) * k + r2_idx[pair]
                back[:, :s, w] = (best.indices // k) * (n * k * k) + code
        top = chart[torch.arange(b, device=dev), 0, lengths - 1]  # (B, NT, k)
        return (top + roots.unsqueeze(-1)).reshape(b, nt * k).topk(k, dim=1), back

    def _backtrack(
        self, back: Tensor, root: Tensor, rank: Tensor, lengths: Tensor, k: int
    ) -> Tensor:
        """Top-down backtracking of ``b * k`` trees in N batched steps (one per width).

        Args:
            back: (B, N, N, NT, k) backpointers ``[b, start, width, A, rank]`` (see
                ``_kmax_chart``; ``k = 1`` for argmax, where the
                ranks are all 0).
            root, rank: (B * k,) root symbol and rank of each tree.

        Returns:
            (B * k, N * N) symbol chart indexed ``start * N + width``; -1 where no span.
        """
        n, nt = back.shape[1], back.shape[3]
        dev = back.device
        m = root.shape[0]
        example = torch.arange(m, device=dev) // k  # (M,)
        lengths = lengths.repeat_interleave(k)
        size = n * n  # one extra dummy slot at `size` absorbs writes of inactive spans
        symbols = torch.full((m, size + 1), -1, dtype=torch.long, device=dev)
        ranks = torch.zeros(m, size + 1, dtype=torch.long, device=dev)
        symbols[torch.arange(m, device=dev), lengths - 1] = root  # root at start 0, width n - 1
        ranks[torch.arange(m, device=dev), lengths - 1] = rank
        dummy = torch.tensor(size, device=dev)
        for w in range(n - 1, 0, -1):
            starts = torch.arange(n - w, device=dev)  # (S,)
            cells = starts * n + w
            sym, r = symbols[:, cells], ranks[:, cells]  # (M, S)
            active = sym >= 0
            code = back[example.unsqueeze(1), starts.unsqueeze(0), w, sym.clamp(min=0), r]  # (M, S)
            r_right = code % k
            r_left = (code // k) % k
            split = (code // (k * k)) % n
            bc = code // (n * k * k)
            left_cell = torch.where(active, starts * n + split, dummy)
            right_cell = torch.where(active, (starts + split + 1) * n + (w - split - 1), dummy)
            symbols.scatter_(1, left_cell, bc // nt)
            symbols.scatter_(1, right_cell, bc % nt)
            ranks.scatter_(1, left_cell, r_left)
            ranks.scatter_(1, right_cell, r_right)
        return symbols[:, :size]

    # ------------------------------------------------------------------ parts
    def to_parts(self, labels: Tensor, lengths: Optional[Tensor] = None) -> CKYPotentials:
        """Labels (B, 2N - 1, 3) to 0/1 parts: counts of leaf symbols, rules, root, spans.

        ``lengths`` defaults to the lengths the labels give (root row ``(0, length - 1, A)``).
        Parts are in the default float dtype.
        """
        labels, lengths = self._labels_and_lengths(labels, lengths)
        b, rows, _ = labels.shape
        n = (rows + 1) // 2
        nt = self.num_symbols
        dtype = torch.get_default_dtype()
        start, end, sym = labels.unbind(2)
        valid = _row_mask(lengths, rows)
        left, right, internal = _children(labels, valid)
        leaf = valid & (start == end)
        terms = torch.zeros(b, n * nt, dtype=dtype, device=labels.device)
        terms.scatter_add_(1, start * nt + sym, leaf.to(dtype))
        spans = torch.zeros(b, n * n * nt, dtype=dtype, device=labels.device)
        spans.scatter_add_(1, (start * n + end) * nt + sym, valid.to(dtype))
        rules = torch.zeros(b, nt * nt * nt, dtype=dtype, device=labels.device)
        index = (sym * nt + _take(sym, left)) * nt + _take(sym, right)
        rules.scatter_add_(1, index, internal.to(dtype))
        roots = torch.nn.functional.one_hot(sym[:, 0], nt).to(dtype)
        return CKYPotentials(
            terms.view(b, n, nt), rules.view(b, nt, nt, nt), roots, spans.view(b, n, n, nt)
        )

    def from_parts(self, parts: Potentials, lengths: Optional[Tensor] = None) -> Tensor:
        """Parts to labels: the tree with the largest sum of ``parts.spans`` over its labelled
        spans (exact for 0/1 parts; for marginals, the tree of maximum expected labelled-span
        recall). ``lengths`` defaults to the number of leaves, ``parts.terms.sum()`` per example.

        Shape: parts as potentials -> labels (B, 2N - 1, 3).
        """
        if isinstance(parts, Tensor) or len(parts) != 4:
            raise ValueError(
                "parts must be a CKYPotentials (terms, rules, roots, spans) of 4 tensors"
            )
        spans = parts[3]
        nt = self.num_symbols
        if (
            not isinstance(spans, Tensor)
            or spans.dim() != 4
            or spans.shape[1] != spans.shape[2]
            or spans.shape[3] != nt
        ):
            got = tuple(spans.shape) if isinstance(spans, Tensor) else type(spans).__name__
            raise ValueError(f"parts.spans must have shape (B, N, N, NT) with NT = {nt}; got {got}")
        b, n = spans.shape[:2]
        if lengths is None:
            terms = parts[0]
            if not isinstance(terms, Tensor) or tuple(terms.shape) != (b, n, nt):
                got = tuple(terms.shape) if isinstance(terms, Tensor) else type(terms).__name__
                raise ValueError(
                    f"parts.terms must have shape (B, N, NT) = ({b}, {n}, {nt}); got {got}"
                )
            lengths = terms.detach().sum((1, 2)).round().long()  # one leaf per position
        lengths = self.check_lengths(lengths, b, n, spans.device)
        with torch.no_grad():
            spans = spans.detach()
            zeros = CKYPotentials(
                spans.new_zeros(b, n, nt),
                spans.new_zeros(b, nt, nt, nt),
                spans.new_zeros(b, nt),
                spans,
            )
            return self._argmax(zeros, lengths)

    def hamming_potentials(self, target: Tensor, lengths: Optional[Tensor] = None) -> CKYPotentials:
        """Cost linear in span parts: ``spans[i, j, A] = 1`` for every labelled span within the
        length that is not in ``target`` (so the cost of a tree is 2n - 1 minus its matches)."""
        target, lengths = self._labels_and_lengths(target, lengths, "target")
        parts = self.to_parts(target, lengths)
        b, n = parts.spans.shape[:2]
        pos = torch.arange(n, device=target.device)
        inside = (pos.view(1, n, 1) <= pos.view(1, 1, n)) & (
            pos.view(1, 1, n) < lengths.view(b, 1, 1)
        )
        cost = inside.unsqueeze(3).to(parts.spans.dtype) - parts.spans  # (B, N, N, NT)
        return CKYPotentials(
            torch.zeros_like(parts.terms),
            torch.zeros_like(parts.rules),
            torch.zeros_like(parts.roots),
            cost,
        )

    def hamming(self, target: Tensor, labels: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
        """Number of labelled spans of ``labels`` not in ``target`` (2n - 1 minus matches). (B,)"""
        target, lengths = self._labels_and_lengths(target, lengths, "target")
        cost = self.hamming_potentials(target, lengths)
        labels, _ = self._labels_and_lengths(labels, lengths)
        if labels.shape != target.shape:
            raise ValueError(
                f"labels must have the shape of target {tuple(target.shape)}; got "
                f"{tuple(labels.shape)}"
            )
        return self._score(cost, labels, lengths).round().long()

    def cost_augmented_potentials(
        self,
        potentials: Potentials,
        target: Tensor,
        lengths: Optional[Tensor] = None,
        scale: float = 1.0,
    ) -> Potentials:
        """``potentials + scale * Delta_hamming(target, .)`` written in parts (span potentials)."""
        n = potentials[0].shape[1]
        if isinstance(target, Tensor) and target.dim() == 3 and target.shape[1] != 2 * n - 1:
            raise ValueError(
                f"target must have 2N - 1 = {2 * n - 1} rows (N from the potentials); got shape "
                f"{tuple(target.shape)}"
            )
        return super().cost_augmented_potentials(potentials, target, lengths, scale)

    def _labels_and_lengths(
        self, labels: Tensor, lengths: Optional[Tensor], name: str = "labels"
    ) -> tuple[Tensor, Tensor]:
        if (
            not isinstance(labels, Tensor)
            or labels.dim() != 3
            or labels.shape[2] != 3
            or labels.shape[1] < 1
        ):
            got = tuple(labels.shape) if isinstance(labels, Tensor) else type(labels).__name__
            raise ValueError(f"{name} must have shape (B, 2N - 1, 3); got {got}")
        if labels.shape[0] == 0:
            raise ValueError(
                f"{name} must have a non-empty batch dimension; got shape {tuple(labels.shape)}"
            )
        n = (labels.shape[1] + 1) // 2
        if lengths is None:
            lengths = labels[:, 0, 1].long() + 1  # the root spans (0, length - 1)
            if self.validate:
                lo, hi = int(lengths.min()), int(lengths.max())
                if lo < 1 or hi > n:
                    raise ValueError(
                        f"{name} row 0 must be the root span (0, length - 1, symbol) with "
                        "length in "
                        f"[1, {n}]; got lengths in [{lo}, {hi}]"
                    )
        lengths = self.check_lengths(lengths, labels.shape[0], n, labels.device)
        return self.check_labels(labels, lengths, name), lengths

    def _score(self, potentials: Potentials, labels: Tensor, lengths: Tensor) -> Tensor:
        # gathers instead of dense dot products with one-hot parts
        terms, rules, roots, spans = potentials
        b, n, nt = terms.shape
        rows = labels.shape[1]
        start, end, sym = labels.unbind(2)
        valid = _row_mask(lengths, rows)
        left, right, internal = _children(labels, valid)
        leaf = valid & (start == end)
        zero = terms.new_zeros(())
        total = torch.where(leaf, terms.reshape(b, n * nt).gather(1, start * nt + sym), zero).sum(1)
        span = spans.reshape(b, n * n * nt).gather(1, (start * n + end) * nt + sym)
        total = total + torch.where(valid, span, zero).sum(1)
        index = (sym * nt + _take(sym, left)) * nt + _take(sym, right)
        total = total + torch.where(internal, rules.reshape(b, nt**3).gather(1, index), zero).sum(1)
        return total + roots.gather(1, sym[:, :1]).squeeze(1)

    # ------------------------------------------------------------------ bracketed strings
    #: trees as bracketed strings (:func:`structssl.structures.brackets.to_bracketed`)
    to_bracketed = staticmethod(to_bracketed)
    #: labels from bracketed strings (:func:`structssl.structures.brackets.from_bracketed`)
    from_bracketed = staticmethod(from_bracketed)
    #: the leaf words of bracketed strings (:func:`~structssl.structures.brackets.words_from_bracketed`)
    words_from_bracketed = staticmethod(words_from_bracketed)


def _sum(semiring: Semiring, x: Tensor, dim: int) -> Tensor:
    """``semiring.sum(x, dim)`` with a faster log-sum-exp for :class:`Log`.

    ``x`` must be a fresh temporary (it is overwritten in place). The shift is detached (the
    result does not depend on it), and non-finite maxima (all ``-inf``) shift by 0 so that such
    cells give ``-inf`` as :func:`torch.logsumexp` does, with a zero (not NaN) gradient: cells
    that no tree can reach (forbidden parts, padding) leave the gradient of the others exact.
    """
    if type(semiring) is not Log:
        return semiring_sum(semiring, x, dim)
    shift = x.detach().amax(dim, keepdim=True)
    shift = torch.where(torch.isfinite(shift), shift, 0.0)
    total = x.sub_(shift).exp_().sum(dim)
    empty = total == 0
    out = torch.where(empty, float("-inf"), total.masked_fill(empty, 1.0).log())
    return out + shift.squeeze(dim)


def _row_mask(lengths: Tensor, rows: int) -> Tensor:
    """(B, R) bool: rows that are nodes of the tree (the first 2 * length - 1)."""
    return torch.arange(rows, device=lengths.device) < (2 * lengths - 1).unsqueeze(1)


def _take(x: Tensor, index: Tensor) -> Tensor:
    """``x[b, index[b, r]]`` with the index clamped into range. (B, R)"""
    return x.gather(1, index.clamp(0, x.shape[1] - 1))


def _children(labels: Tensor, valid: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Rows of the left and right children of each row in pre-order, and which rows are internal.

    The left child of internal row p is row p + 1; its subtree has 2 * (its width) - 1 rows, so
    the right child is row p + 2 * (end of left - start + 1). Indices of leaves and padding rows
    are meaningless (clamp before use).
    """
    start, end, _ = labels.unbind(2)
    rows = labels.shape[1]
    index = torch.arange(rows, device=labels.device).expand_as(start)
    left = index + 1
    right = index + 2 * (_take(end, left) - start + 1)
    return left, right, valid & (start < end)


def _chart_to_labels(symbols: Tensor, n: int) -> Tensor:
    """(M, N * N) symbol chart (``start * N + width``, -1 where no span) to labels (M, 2N - 1, 3)
    in pre-order: start ascending, then width descending."""
    cell = torch.arange(n * n, device=symbols.device)
    start, width = cell // n, cell % n
    key = torch.where(symbols >= 0, start * n + (n - 1 - width), n * n)  # (M, N * N)
    order = key.argsort(dim=1)[:, : 2 * n - 1]
    chosen = symbols.gather(1, order)
    rows = torch.stack([start[order], start[order] + width[order], chosen], dim=2)
    return torch.where((chosen >= 0).unsqueeze(2), rows, 0)
