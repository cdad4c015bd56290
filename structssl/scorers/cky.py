"""CKY scorer: a weighted CNF grammar whose preterminal scores are linear in word features.

Score of a tree ``y`` of a sentence ``x`` (the rule-count joint feature map of the thesis, seed
001 section 3.2.3 and appendix C, and of seed 003 section 3.2.1):

    <w, Psi(x, y)> = sum_{leaves (i, i, A)} (W[:, A] . phi(x_i) + b[A])     (terms)
                   + sum_{internal nodes A -> B C} R[A, B, C]                (rules)
                   + S[A_root]                                               (roots)

``phi(x_i)`` reads word ids (B, N) long (an ``nn.Embedding``: ``W[word, A]`` is the weight of
the lexical rule ``A -> word``), sparse word-feature indices (B, N, F) long (0 = padding) or
dense word vectors (B, N, D). Rules and roots are learned tables shared by all sentences.

A grammar restricts which symbol may go where: the optional boolean masks ``allowed_terms``
(NT,), ``allowed_rules`` (NT, NT, NT) and ``allowed_roots`` (NT,) set forbidden potentials to
``LOG_ZERO`` (their weights get no gradient). :func:`grammar_masks` builds the masks of the
usual split into nonterminals (internal nodes) and preterminals (leaves), as in
:func:`~structssl.data.synthetic.pcfg_treebank`.

Potentials: :class:`~structssl.structures.cky.CKYPotentials` built by ``CKY.potentials_from``
(``spans`` zero; terms 0 at positions ``>= lengths``). Parameters: rows x NT + NT^3 + NT.
Time O(B N rows NT) for the terms (rows = F or D; O(B N NT) for words).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor, nn

from structssl.scorers.base import LinearInputs, Scorer, check_init_std, check_lengths, init_
from structssl.semirings import LOG_ZERO
from structssl.structures.base import positive_int
from structssl.structures.cky import CKY, CKYPotentials

__all__ = ["CKYScorer", "grammar_masks"]


def grammar_masks(
    num_nonterminals: int, num_preterminals: int, start_symbols: Optional[Sequence[int]] = (0,)
) -> tuple[Tensor, Tensor, Tensor]:
    """Masks of a CNF grammar: symbols ``0 .. NT-1`` nonterminals, ``NT .. NT+PT-1`` preterminals.

    Preterminals are the only leaves and never have children; nonterminals are the only
    internal nodes (so a child spanning one word is a preterminal, a longer one a nonterminal).
    Roots: ``start_symbols`` (default ``(0,)``; ``None`` allows every nonterminal) and, for
    one-word sentences whose only node is a leaf, every preterminal (the convention of
    :func:`~structssl.data.synthetic.pcfg_treebank`).

    Returns:
        ``(allowed_terms (S,), allowed_rules (S, S, S), allowed_roots (S,))`` bool, S = NT + PT.
    """
    nt = positive_int(num_nonterminals, "num_nonterminals")
    pt = positive_int(num_preterminals, "num_preterminals")
    s = nt + pt
    is_nt = torch.arange(s) < nt
    terms = ~is_nt
    rules = is_nt.view(s, 1, 1).expand(s, s, s).clone()
    if start_symbols is None:
        roots = is_nt.clone()
    else:
        starts = list(start_symbols)
        bad = [a for a in starts if not (isinstance(a, int) and 0 <= a < nt)]
        if bad or not starts:
            raise ValueError(
                f"start_symbols must be nonterminals in [0, {nt}) (at least one); got {starts}"
            )
        roots = torch.zeros(s, dtype=torch.bool)
        roots[starts] = True
    return terms, rules, roots | terms


def _mask_arg(mask: Optional[Tensor], shape: tuple[int, ...], name: str) -> Optional[Tensor]:
    if mask is None:
        return None
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool or tuple(mask.shape) != shape:
        got = (mask.dtype, tuple(mask.shape)) if isinstance(mask, Tensor) else type(mask).__name__
        raise ValueError(f"{name} must be a bool tensor of shape {shape}; got {got}")
    return mask.clone()


class CKYScorer(Scorer):
    """Weighted-grammar scorer ``x -> CKYPotentials`` (see the module docstring).

    Exactly one of ``num_words``, ``num_features``, ``input_dim`` is given.

    Args:
        num_symbols: NT, the number of symbols (leaves, internal nodes and roots share them).
        num_words: word vocabulary (inputs (B, N) long word ids).
        num_features: sparse word-feature index space (inputs (B, N, F) long, 0 = padding).
        input_dim: D of dense word vectors (B, N, D).
        rules: learn the (NT, NT, NT) rule weights (else zero).
        roots: learn the (NT,) root weights (else zero).
        allowed_terms: (NT,) bool, symbols allowed at leaves (default all).
        allowed_rules: (NT, NT, NT) bool, allowed rules ``A -> B C`` (default all).
        allowed_roots: (NT,) bool, symbols allowed at the root (default all).
        bias: learn a per-symbol leaf bias (the weight of a constant word feature).
        init_std: weights ~ N(0, init_std^2) from the global torch RNG; 0 (default) gives zeros.
        validate: check value ranges of inputs and lengths (device syncs).
    """

    def __init__(
        self,
        num_symbols: int,
        num_words: Optional[int] = None,
        num_features: Optional[int] = None,
        input_dim: Optional[int] = None,
        rules: bool = True,
        roots: bool = True,
        allowed_terms: Optional[Tensor] = None,
        allowed_rules: Optional[Tensor] = None,
        allowed_roots: Optional[Tensor] = None,
        bias: bool = True,
        init_std: float = 0.0,
        validate: bool = True,
    ) -> None:
        super().__init__()
        self.num_symbols = nt = positive_int(num_symbols, "num_symbols")
        self.validate = bool(validate)
        self.init_std = check_init_std(init_std)
        self.terms = LinearInputs(nt, num_features, num_words, input_dim, bias, init_std, validate)
        self.rules = nn.Parameter(torch.zeros(nt, nt, nt)) if rules else None
        self.roots = nn.Parameter(torch.zeros(nt)) if roots else None
        self.allowed_terms: Optional[Tensor]
        self.allowed_rules: Optional[Tensor]
        self.allowed_roots: Optional[Tensor]
        self.register_buffer("allowed_terms", _mask_arg(allowed_terms, (nt,), "allowed_terms"))
        self.register_buffer(
            "allowed_rules", _mask_arg(allowed_rules, (nt, nt, nt), "allowed_rules")
        )
        self.register_buffer("allowed_roots", _mask_arg(allowed_roots, (nt,), "allowed_roots"))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Re-initialise (deterministic given the torch seed)."""
        self.terms.reset_parameters()
        for p in (self.rules, self.roots):
            if p is not None:
                init_(p, self.init_std)

    def forward(self, inputs: Tensor, lengths: Optional[Tensor] = None) -> CKYPotentials:
        """Grammar potentials of a batch of sentences.

        Args:
            inputs: word ids (B, N) long, word features (B, N, F) long or dense (B, N, D).
            lengths: (B,) long sentence lengths in [1, N] (default: all N).

        Returns:
            ``CKYPotentials(terms (B, N, NT), rules (B, NT, NT, NT), roots (B, NT),
            spans (B, N, N, NT))``; rules and roots are broadcast views, spans zero.

        Raises:
            ValueError: wrong input shape, dtype or values, or ``lengths`` not matching.
        """
        self.terms.check(inputs, "B, N")
        b, n = inputs.shape[:2]
        if n == 0:
            raise ValueError(f"inputs must have N >= 1 positions; got shape {tuple(inputs.shape)}")
        lengths = check_lengths(lengths, b, n, inputs.device, self.validate)
        terms = self.terms(inputs)  # (B, N, NT)
        dtype, device = terms.dtype, terms.device
        zero = torch.zeros((), dtype=dtype, device=device)
        log_zero = torch.full((), LOG_ZERO, dtype=dtype, device=device)
        nt = self.num_symbols
        if self.allowed_terms is not None:
            terms = torch.where(self.allowed_terms, terms, log_zero)
        valid = torch.arange(n, device=device) < lengths.unsqueeze(1)  # (B, N)
        terms = torch.where(valid.unsqueeze(2), terms, zero)
        rules = self.rules.to(dtype) if self.rules is not None else terms.new_zeros(nt, nt, nt)
        if self.allowed_rules is not None:
            rules = torch.where(self.allowed_rules, rules, log_zero)
        roots = self.roots.to(dtype) if self.roots is not None else terms.new_zeros(nt)
        if self.allowed_roots is not None:
            roots = torch.where(self.allowed_roots, roots, log_zero)
        return CKY.potentials_from(terms, rules, roots)
