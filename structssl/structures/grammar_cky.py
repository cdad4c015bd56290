"""CKY whose argmax visits only the rules of a treebank grammar (:class:`GrammarCKY`)."""

from __future__ import annotations

import torch
from torch import Tensor

from structssl.semirings import LOG_ZERO
from structssl.structures.base import Potentials
from structssl.structures.cky import CKY, CKYPotentials, _chart_to_labels

__all__ = ["GrammarCKY"]


class GrammarCKY(CKY):
    """:class:`~structssl.structures.cky.CKY` whose argmax visits only the binary rules with a
    potential above ``LOG_ZERO / 2`` in some sentence of the batch (a treebank grammar allows a
    few hundred of the NT^3 rules: 175 of 140,608 for the 52 symbols of the default
    selection), in O(B N^3 R) instead of O(B N^3 NT^3). Trees and scores equal the dense
    argmax's whenever the best tree uses only allowed rules; a sentence without such a parse
    falls back to the dense argmax. Everything else (scores, marginals, k-best) is CKY's.

    Args:
        num_symbols: NT.
        validate: see :class:`~structssl.structures.cky.CKY`.
    """

    def __repr__(self) -> str:
        return f"GrammarCKY(num_symbols={self.num_symbols})"

    def _argmax(self, potentials: Potentials, lengths: Tensor) -> Tensor:
        terms, rules, roots, spans = potentials
        b, n, nt = terms.shape
        a_idx, b_idx, c_idx = (rules > LOG_ZERO / 2).any(0).nonzero(as_tuple=True)
        if n == 1 or a_idx.numel() == 0:
            return super()._argmax(potentials, lengths)
        parents, parent_of_rule = a_idx.unique(return_inverse=True)  # (A',), (R,)
        pairs, pair_of_rule = (b_idx * nt + c_idx).unique(return_inverse=True)  # (P,), (R,)
        neg = float("-inf")
        weights = terms.new_full((b, parents.numel(), pairs.numel()), neg)  # (B, A', P)
        weights[:, parent_of_rule, pair_of_rule] = rules[:, a_idx, b_idx, c_idx]
        left_sym, right_sym = pairs // nt, pairs % nt
        chart = terms.new_full((b, n, n, nt), neg)
        mirror = terms.new_full((b, n, n, nt), neg)
        back = torch.zeros(b, n, n, nt, dtype=torch.long, device=terms.device)
        leaves = terms + spans.diagonal(0, 1, 2).transpose(1, 2)
        chart[:, :, 0] = leaves
        mirror[:, :, n - 1] = leaves
        for w in range(1, n):
            s = n - w
            left = chart[:, :s, :w][..., left_sym]  # (B, S, split, P)
            right = mirror[:, w:, n - w :][..., right_sym]
            pair_best, pair_split = (left + right).max(dim=2)  # (B, S, P)
            best, pi = (pair_best.unsqueeze(2) + weights.unsqueeze(1)).max(dim=3)  # (B, S, A')
            value = terms.new_full((b, s, nt), neg)
            value[..., parents] = best
            value = value + spans.diagonal(w, 1, 2).transpose(1, 2)
            chart[:, :s, w] = value
            mirror[:, w:, n - 1 - w] = value
            split = pair_split.gather(2, pi)
            back[:, :s, w, parents] = pairs[pi] * n + split  # (B * NT + C) * N + split, as CKY
        top = chart[torch.arange(b, device=terms.device), 0, lengths - 1] + roots  # (B, NT)
        root_value, root = top.max(dim=1)
        symbols = self._backtrack(back.unsqueeze(-1), root, torch.zeros_like(root), lengths, 1)
        labels = _chart_to_labels(symbols, n)
        bad = ~(root_value > LOG_ZERO / 2)
        if bool(bad.any()):  # no parse with allowed rules: the dense argmax's (LOG_ZERO) tree
            sub = CKYPotentials(*(x[bad] for x in (terms, rules, roots, spans)))
            labels[bad] = super()._argmax(sub, lengths[bad])
        return labels
