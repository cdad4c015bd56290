"""Small-treebank parsing protocol of seed 003 (section 4.2) on the NLTK Penn Treebank sample.

Seed 003 parses 92 CESS-CAT sentences: 5 labeled, 65 unlabeled, 22 test, five random
permutations, rule features only, and "the grammar rules of all sentences known to the
model". :class:`TreebankDataModule` reproduces the protocol on the Penn Treebank sample
(``<data_dir>/penn_treebank_sample/treebank.zip``): ``num_sentences`` trees with
``min_length <= words <= max_length`` are drawn with ``selection_seed`` (normalised, CNF with
``unary="bottom"`` so that leaves are POS tags), then permuted with ``permutation`` as the seed
and split into labeled / unlabeled / test. The grammar (binary rules, root symbols,
preterminals and the lexicon ``(word, tag)``) is read off **all** selected trees, as in the
paper; :class:`GrammarScorer` masks everything else.

Examples: ``inputs`` (n,) word ids, ``labels`` (2n - 1, 3) CKY spans (labeled, dev, test),
``index``; the unlabeled examples' gold trees are kept in ``unlabeled_labels`` for the
evaluation on unlabeled data. ``dev`` is the labeled set (seed 003 tunes nothing for parsing).
After :meth:`setup`: ``symbols`` (the vocabulary), ``num_symbols``, ``num_words``,
``allowed_terms``, ``allowed_rules``, ``allowed_roots``, ``lexicon``.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from structssl.data.batch import collate_trees, pad_sequences
from structssl.data.modules.base import (
    Example,
    SemiSupervisedDataModule,
    _count,
    seeded_parts,
    with_index,
    without_labels,
)
from structssl.scorers.cky import CKYScorer
from structssl.semirings import LOG_ZERO
from structssl.structures.cky import CKYPotentials

__all__ = ["TreebankDataModule", "GrammarScorer"]


class TreebankDataModule(SemiSupervisedDataModule):
    """Seed 003's parsing protocol on the Penn Treebank sample (see the module docstring).

    Args:
        data_dir: the data directory (default ``$STRUCTSSL_DATA``, else ``../shared/data``).
        num_sentences: sentences drawn (92 in the paper).
        num_labeled: labeled sentences (5).
        num_unlabeled: unlabeled sentences (65); the rest is the test set (22).
        min_length: shortest sentence drawn (words).
        max_length: longest sentence drawn (words).
        selection_seed: seed of the draw of the sentences.
        permutation: seed of the permutation into labeled / unlabeled / test (0..4).
        **kwargs: the loader options of :class:`~structssl.data.SemiSupervisedDataModule`
            (``batch_size``, ``unlabeled_batch_size``, ``eval_batch_size``, ``shuffle``,
            ``num_workers``).
    """

    def __init__(
        self,
        data_dir: Optional[str] = None,
        num_sentences: int = 92,
        num_labeled: int = 5,
        num_unlabeled: int = 65,
        min_length: int = 4,
        max_length: int = 8,
        selection_seed: int = 0,
        permutation: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.data_dir = data_dir
        self.num_sentences = _count(num_sentences, "num_sentences", 3)
        self.num_labeled = _count(num_labeled, "num_labeled", 1)
        self.num_unlabeled = _count(num_unlabeled, "num_unlabeled", 1)
        if self.num_labeled + self.num_unlabeled >= self.num_sentences:
            raise ValueError(
                "num_labeled + num_unlabeled must be < num_sentences (the rest is the test set); "
                f"got {self.num_labeled} + {self.num_unlabeled} >= {self.num_sentences}"
            )
        self.min_length = _count(min_length, "min_length", 1)
        self.max_length = _count(max_length, "max_length", self.min_length)
        self.selection_seed = int(selection_seed)
        self.permutation = int(permutation)
        self.unlabeled_labels: list[Tensor] = []
        self.num_symbols = 0
        self.num_words = 0

    @staticmethod
    def collate(examples: list[Example]) -> dict[str, Any]:
        if "labels" not in examples[0]:  # unlabeled: words only
            inputs, lengths = pad_sequences([ex["inputs"] for ex in examples], 0)
            out: dict[str, Any] = {"inputs": inputs, "lengths": lengths}
            out["index"] = torch.stack([ex["index"] for ex in examples])
            out["tokens"] = [ex["tokens"] for ex in examples]
            return out
        renamed = [{("spans" if k == "labels" else k): v for k, v in ex.items()} for ex in examples]
        out = collate_trees(renamed)
        out["labels"] = out.pop("spans")
        return out

    def build(self) -> dict[str, list[Example]]:
        from structssl.data.formats.treebank import encode_trees, load_ptb_sample, normalize_tree, to_cnf

        trees = []
        for tree in load_ptb_sample(self.data_dir):
            try:
                cnf = to_cnf(normalize_tree(tree), unary="bottom")
            except ValueError:
                continue
            if self.min_length <= len(cnf.leaves()) <= self.max_length:
                trees.append(cnf)
        if len(trees) < self.num_sentences:
            raise ValueError(
                f"num_sentences must be <= {len(trees)} (trees of {self.min_length}..{self.max_length} "
                f"words); got {self.num_sentences}"
            )
        gen = torch.Generator().manual_seed(self.selection_seed)
        chosen = [trees[i] for i in torch.randperm(len(trees), generator=gen)[: self.num_sentences].tolist()]
        examples, symbols = encode_trees(chosen)
        self.symbols = symbols
        self.num_symbols = nt = len(symbols)
        words = sorted({w for ex in examples for w in ex["tokens"]})  # type: ignore[union-attr]
        word_index = {w: i + 1 for i, w in enumerate(words)}  # 0: padding
        self.num_words = len(words) + 1
        terms = torch.zeros(nt, dtype=torch.bool)
        rules = torch.zeros(nt, nt, nt, dtype=torch.bool)
        roots = torch.zeros(nt, dtype=torch.bool)
        lexicon = torch.zeros(self.num_words, nt, dtype=torch.bool)
        for ex in examples:
            spans: Tensor = ex["spans"]  # type: ignore[assignment]
            toks = ex["tokens"]
            roots[spans[0, 2]] = True
            for row, (s, e, a) in enumerate(spans.tolist()):
                if s == e:
                    terms[a] = True
                    lexicon[word_index[toks[s]], a] = True  # type: ignore[index]
                else:  # children: the next row, then the row starting after its span
                    left = spans[row + 1]
                    right_rows = (spans[:, 0] == int(left[1]) + 1) & (spans[:, 1] == e)
                    right = spans[right_rows.nonzero()[0, 0]]
                    rules[a, int(left[2]), int(right[2])] = True
        self.allowed_terms, self.allowed_rules, self.allowed_roots = terms, rules, roots
        self.lexicon = lexicon
        encoded = [
            {
                "inputs": torch.tensor([word_index[w] for w in ex["tokens"]], dtype=torch.long),  # type: ignore[union-attr]
                "labels": ex["spans"],
                "tokens": ex["tokens"],
            }
            for ex in examples
        ]
        parts = seeded_parts(len(encoded), [self.num_labeled, self.num_unlabeled], self.permutation)
        labeled, unl, test = (with_index([encoded[i] for i in part.tolist()]) for part in parts)
        self.unlabeled_labels = [ex["labels"] for ex in unl]  # type: ignore[misc]
        unlabeled = without_labels(unl)
        return {"labeled": labeled, "unlabeled": unlabeled, "dev": list(labeled), "test": test}

    def unlabeled_eval_dataloader(self) -> Any:
        """The unlabeled sentences with their gold trees (for evaluation only)."""
        examples = [
            dict(ex, labels=y) for ex, y in zip(self.splits["unlabeled"], self.unlabeled_labels)
        ]
        return self._loader(examples, self.eval_batch_size, False)


class GrammarScorer(CKYScorer):
    """:class:`~structssl.scorers.cky.CKYScorer` over word ids with a lexicon mask: the
    preterminal ``A`` may cover word ``w`` only where ``lexicon[w, A]`` (rule features only:
    one weight per lexical rule ``A -> w``, binary rule and root symbol).

    Args:
        num_symbols: NT.
        num_words: word vocabulary (0 = padding).
        lexicon: (num_words, NT) bool, allowed lexical rules (default all).
        allowed_terms, allowed_rules, allowed_roots, init_std: see ``CKYScorer``.
    """

    def __init__(
        self,
        num_symbols: int,
        num_words: int,
        lexicon: Optional[Tensor] = None,
        allowed_terms: Optional[Tensor] = None,
        allowed_rules: Optional[Tensor] = None,
        allowed_roots: Optional[Tensor] = None,
        init_std: float = 0.0,
    ) -> None:
        super().__init__(
            num_symbols, num_words=num_words, allowed_terms=allowed_terms,
            allowed_rules=allowed_rules, allowed_roots=allowed_roots, bias=False, init_std=init_std,
        )
        if lexicon is not None and (
            not isinstance(lexicon, Tensor) or lexicon.dtype != torch.bool
            or tuple(lexicon.shape) != (num_words, num_symbols)
        ):
            got = (lexicon.dtype, tuple(lexicon.shape)) if isinstance(lexicon, Tensor) else type(lexicon).__name__
            raise ValueError(f"lexicon must be a bool tensor of shape ({num_words}, {num_symbols}); got {got}")
        self.lexicon_words = num_words
        self.lexicon: Optional[Tensor]
        self.register_buffer("lexicon", None if lexicon is None else lexicon.clone())

    def adopt_grammar(self, datamodule: Any) -> None:
        """Install the grammar of a set-up :class:`TreebankDataModule` (its ``lexicon``,
        ``allowed_terms``, ``allowed_rules``, ``allowed_roots``) in place of the masks not given
        at construction, so that a config needs only the sizes. The data module's symbols and
        words must fit this scorer's ``num_symbols`` / ``num_words`` (extra ones stay masked).
        :class:`~structssl.training.label_switching.LabelSwitchingModule` calls it at setup.

        Raises:
            ValueError: the data module is not set up, or its grammar does not fit.
        """
        lexicon = getattr(datamodule, "lexicon", None)
        if not isinstance(lexicon, Tensor):
            raise ValueError(
                f"adopt_grammar needs a set-up TreebankDataModule (with a lexicon); got {type(datamodule).__name__}"
            )
        words, nt = lexicon.shape
        if nt > self.num_symbols or words > self.lexicon_words:
            raise ValueError(
                f"the data module's grammar has {nt} symbols and {words} word ids; the scorer was "
                f"built for num_symbols = {self.num_symbols}, num_words = {self.lexicon_words} "
                f"(set num_symbols >= {nt} and num_words >= {words})"
            )
        device = self.rules.device if self.rules is not None else lexicon.device

        def pad(mask: Tensor, shape: tuple[int, ...]) -> Tensor:
            out = torch.zeros(shape, dtype=torch.bool, device=device)
            out[tuple(slice(0, k) for k in mask.shape)] = mask.to(device)
            return out

        s = self.num_symbols
        if self.lexicon is None:
            self.lexicon = pad(lexicon, (self.lexicon_words, s))
        if self.allowed_terms is None:
            self.allowed_terms = pad(datamodule.allowed_terms, (s,))
        if self.allowed_rules is None:
            self.allowed_rules = pad(datamodule.allowed_rules, (s, s, s))
        if self.allowed_roots is None:
            self.allowed_roots = pad(datamodule.allowed_roots, (s,))

    def forward(self, inputs: Tensor, lengths: Optional[Tensor] = None) -> CKYPotentials:
        pot = super().forward(inputs, lengths)
        if self.lexicon is None:
            return pot
        allowed = self.lexicon[inputs]  # (B, N, NT)
        n = inputs.shape[1]
        valid = torch.arange(n, device=inputs.device) < (
            torch.full((inputs.shape[0],), n, device=inputs.device) if lengths is None else lengths
        ).unsqueeze(1)
        keep = allowed | ~valid.unsqueeze(2)
        terms = torch.where(keep, pot.terms, torch.full((), LOG_ZERO, dtype=pot.terms.dtype))
        return CKYPotentials(terms, pot.rules, pot.roots, pot.spans)
