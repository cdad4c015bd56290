"""Greedy label switching for semi-supervised structural SVMs (seed 003, Algorithm 2).

For a fixed model ``w`` the constraint-matching problem (seed 003, eq. 3.4) chooses labels
``Y = (y_1 .. y_m)`` of the unlabeled examples minimising

    F(Y) = cu * sum_j u(x_j, y_j; w)                        (unlabeled structured hinge)
         + sum_j sum_{instance constraints k} Gamma_k(phi_k(x_j, y_j))
         + sum_{corpus constraints k} Gamma_k(sum_j phi_k(x_j, y_j))

with hard instance constraints never violated (a labeling that violates one is only left for
one that violates less). ``u`` is the margin-rescaled hinge ``max_y' [s(y') + Delta(y, y')] -
s(y)`` of the structure (Hamming ``Delta`` by default, 0/1 available). The constraints are
:class:`structssl.constraints.ConstraintSet` members (sequences) or :class:`SymbolProportion`
(trees); corpus penalties are scored on the summed counts, kept incrementally
(``totals - counts_j(y) + counts_j(y')``).

:func:`label_switching` (sequences, the paper's section 3.1): passes over a random
permutation of the examples and, per example, of its positions; at each visited position
every alternative label is tried and the one that lowers ``F`` most is kept. Passes stop when
one makes no switch (a local optimum: no single-position switch lowers ``F``), when
``max_passes`` passes ran, or when the switch budget ``max_switches`` is spent.

Batching (the "batch the candidate evaluations on the device" speed-up). Step ``t`` of a
pass visits position ``perm_j[t]`` of every example ``j``; the examples are taken in blocks of
``block_size`` (in the pass's example order), and the ``C`` candidates of every example of a
block are scored at once. For :class:`~structssl.structures.linear_chain.LinearChain` the
hinge of all ``C`` candidates comes from max-marginals of the Hamming-augmented potentials
(one forward-backward per step: the switched position's cost is the only one that changes,
the paper's "recompute only from the switched position"), and counts of linear constraints
from the constraint feature maps (a switch at ``m`` only changes edges ``m`` and ``m + 1``);
non-linear constraints (``ConsecutiveFields``) are counted directly. Within a block every
example picks its best switch against the corpus totals at the start of the block; the block's
switches are applied together when the exact new ``F`` (and the hard violations) do not
increase, otherwise they are re-decided one example at a time against the updated totals, so
``F`` never increases whatever the block size. ``block_size=1`` is the paper's sequential
algorithm exactly; a pass with no switch certifies a local optimum for every block size.

Chunks (bounded padding). The unlabeled examples may come as a list of chunks (e.g. the
length chunks of :func:`structssl.data.length_chunks`), each padded to its own longest
example: the candidates of a block are scored chunk by chunk (one evaluator per chunk, its
potentials and constraint feature maps padded to that chunk's length only), while the
corpus totals, the block decisions and the pass order are corpus-wide. The random choices
(the example permutation of a pass and each example's position order, drawn over the
examples' tokens laid out in ``index`` order) depend on the examples' ids, not on their
layout, so one padded batch and any chunking of it give the same switches, labels and
objective. Memory: the tokens' potentials and feature maps, with no padding beyond a chunk's
longest example (one padded batch: examples x the corpus's longest example).

:func:`leaf_rule_switching` (parse trees, the paper's section 3.2.1): a trial scales up one
preterminal rule at one leaf (adds ``bonus`` to ``terms[i, A]``) and re-runs CKY, which
returns the best tree under the model with that leaf (the other rules keep their weights);
trees that do not parse (score below ``LOG_ZERO / 2`` under the grammar) are skipped; the
trial is kept when it lowers ``F``. Each trial is batched over all examples.
"""

from __future__ import annotations

import math
from typing import Any, Literal, NamedTuple, Optional, Sequence, Union

import torch
from torch import Tensor

from structssl.semirings import LOG_ZERO
from structssl.structures.base import Potentials, Structure, as_detached, as_tuple, like
from structssl.structures.cky import CKY, CKYPotentials
from structssl.structures.linear_chain import LinearChain

__all__ = [
    "SwitchingResult",
    "SymbolProportion",
    "label_switching",
    "leaf_rule_switching",
    "switching_objective",
    "unlabeled_hinge",
]

Cost = Literal["hamming", "zero_one"]
Tokens = Optional[Sequence[Sequence[str]]]
_TOL = 1e-9
#: examples per length-sorted chunk of the chain evaluator's max-marginal refresh
_REFRESH_CHUNK = 128


class SwitchingResult(NamedTuple):
    """Result of a label-switching run.

    Attributes:
        labels: the new labels (same layout as the input labels, a list of tensors for
            chunks; new tensors).
        objective: ``F`` of the new labels (float).
        initial_objective: ``F`` of the input labels.
        switches: number of accepted switches.
        switches_per_pass: accepted switches of each pass (trials for trees).
        budget_exhausted: whether ``max_switches`` stopped the run.
        hard_violations: summed hard-constraint violation of the new labels.
    """

    labels: Union[Tensor, list[Tensor]]
    objective: float
    initial_objective: float
    switches: int
    switches_per_pass: list[int]
    budget_exhausted: bool
    hard_violations: float


# ---------------------------------------------------------------------------------- tree constraint
class SymbolProportion:
    """Corpus-level proportion of tree nodes labelled with given symbols (grammar-rule
    proportions, seed 003 section 4.2: "more than 50% of grammar rules should start with S").

    Counts per tree: ``(#nodes of the chosen kind whose symbol is in symbols, #nodes of that
    kind)``; the penalty is ``weight * |ratio - target|`` (``bound="eq"``) or the hinge of the
    ratio (``"ge"``: ``[target - ratio]+``, ``"le"``: ``[ratio - target]+``) of summed counts.

    Args:
        symbols: symbols counted in the numerator: indices, or names resolved by
            :meth:`bind` (``LabelSwitchingModule`` binds them to the data module's ``symbols``).
        target: the proportion in [0, 1].
        bound: ``"eq"``, ``"ge"`` or ``"le"``.
        nodes: ``"internal"`` (binary rules ``A -> B C``, by their left-hand side),
            ``"leaves"`` (preterminal rules) or ``"all"``.
        weight: penalty scale ``r`` (>= 0).
        name: display name.
    """

    level = "corpus"
    hard = False
    num_counts = 2
    needs_tokens = False

    def __init__(
        self,
        symbols: Sequence[Union[int, str]],
        target: float,
        bound: Literal["eq", "ge", "le"] = "eq",
        nodes: Literal["internal", "leaves", "all"] = "internal",
        weight: float = 1.0,
        name: Optional[str] = None,
    ) -> None:
        syms = list(symbols)
        ok = lambda s: isinstance(s, str) or (isinstance(s, int) and not isinstance(s, bool) and s >= 0)  # noqa: E731
        if not syms or not all(ok(s) for s in syms):
            raise ValueError(f"symbols must be a non-empty list of symbol indices >= 0 or names; got {syms!r}")
        if isinstance(target, bool) or not isinstance(target, (int, float)) or not 0.0 <= target <= 1.0:
            raise ValueError(f"target must be a proportion in [0, 1]; got {target!r}")
        if bound not in ("eq", "ge", "le"):
            raise ValueError(f"bound must be one of 'eq', 'ge', 'le'; got {bound!r}")
        if nodes not in ("internal", "leaves", "all"):
            raise ValueError(f"nodes must be one of 'internal', 'leaves', 'all'; got {nodes!r}")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight >= 0 or not math.isfinite(weight):
            raise ValueError(f"weight must be a finite float >= 0; got {weight!r}")
        self.symbols = syms
        self.target = float(target)
        self.bound = bound
        self.nodes = nodes
        self.weight = float(weight)
        self.name = name or f"SymbolProportion({syms}, {bound} {target})"

    @property
    def label_names(self) -> Optional[list[int]]:
        """The symbol indices, or None while some symbol is an unbound name."""
        return None if any(isinstance(s, str) for s in self.symbols) else list(self.symbols)  # type: ignore[arg-type]

    def bind(self, vocabulary: Sequence[str]) -> "SymbolProportion":
        """A copy with symbol names replaced by their indices in ``vocabulary``.

        Raises:
            ValueError: a name not in ``vocabulary``.
        """
        index = {name: i for i, name in enumerate(vocabulary)}
        missing = [s for s in self.symbols if isinstance(s, str) and s not in index]
        if missing:
            raise ValueError(f"symbols {missing} are not in the grammar's symbols {list(vocabulary)}")
        syms = [index[s] if isinstance(s, str) else s for s in self.symbols]
        return SymbolProportion(syms, self.target, self.bound, self.nodes, self.weight, self.name)

    def counts(self, labels: Tensor, lengths: Tensor, tokens: Tokens = None) -> Tensor:
        """Counts of trees. Shape: labels (B, 2N - 1, 3), lengths (B,) -> (B, 2)."""
        if self.label_names is None:
            raise ValueError(f"{self.name} names symbols; call bind(symbols) first")
        if not isinstance(labels, Tensor) or labels.dim() != 3 or labels.shape[-1] != 3:
            got = tuple(labels.shape) if isinstance(labels, Tensor) else type(labels).__name__
            raise ValueError(f"labels must have shape (B, 2N - 1, 3); got {got}")
        rows = torch.arange(labels.shape[1], device=labels.device)
        valid = rows < (2 * lengths.to(labels.device) - 1).unsqueeze(1)  # (B, R)
        leaf = labels[..., 0] == labels[..., 1]
        kind = {"internal": ~leaf, "leaves": leaf, "all": torch.ones_like(leaf)}[self.nodes] & valid
        hit = torch.isin(labels[..., 2], torch.tensor(self.symbols, device=labels.device)) & kind
        dtype = torch.get_default_dtype()
        return torch.stack([hit.sum(1), kind.sum(1)], dim=1).to(dtype)

    def _ratio(self, counts: Tensor) -> Tensor:
        return counts[..., 0] / counts[..., 1].clamp_min(1.0)

    def violation_from_counts(self, counts: Tensor) -> Tensor:
        gap = self._ratio(counts) - self.target
        if self.bound == "eq":
            return gap.abs()
        return (-gap).clamp_min(0) if self.bound == "ge" else gap.clamp_min(0)

    def penalty_from_counts(self, counts: Tensor) -> Tensor:
        return self.weight * self.violation_from_counts(counts)

    def __repr__(self) -> str:
        return self.name


# ---------------------------------------------------------------------------------- objective terms
class _Terms:
    """Constraint bookkeeping shared by the switching procedures (duck-typed constraints)."""

    def __init__(self, constraints: Any, tokens: Tokens) -> None:
        items = [] if constraints is None else list(getattr(constraints, "constraints", constraints))
        for c in items:
            if c.level == "corpus" and c.hard:
                raise NotImplementedError(
                    f"hard corpus-level constraints are not supported by label switching; got {c.name}"
                )
            if getattr(c, "label_names", True) is None:
                raise ValueError(f"{c.name} is not bound to a label list; call bind(labels) first")
        self.items = items
        self.tokens = tokens
        self.slices: list[slice] = []
        start = 0
        for c in items:
            self.slices.append(slice(start, start + c.num_counts))
            start += c.num_counts
        self.d = start

    def counts(self, labels: Tensor, lengths: Tensor, tokens: Tokens = None, repeat: int = 1) -> Tensor:
        """(M, d) counts of M labelings; ``repeat``: each example's tokens serve ``repeat``
        consecutive rows."""
        if not self.items:
            return torch.zeros(labels.shape[0], 0, dtype=torch.get_default_dtype(), device=labels.device)
        toks = self.tokens if tokens is None else tokens
        cols = []
        for c in self.items:
            t = None
            if c.needs_tokens:
                t = toks if repeat == 1 else [x for x in toks for _ in range(repeat)]  # type: ignore[union-attr]
            cols.append(c.counts(labels, lengths, t).to(labels.device))
        return torch.cat(cols, dim=1)

    def _sum(self, counts: Tensor, level: str, fn: str, hard: Optional[bool] = None) -> Tensor:
        out = counts.new_zeros(counts.shape[:-1])
        for c, s in zip(self.items, self.slices):
            if c.level == level and (hard is None or c.hard == hard):
                out = out + getattr(c, fn)(counts[..., s]).to(out.dtype)
        return out

    def instance_penalty(self, counts: Tensor) -> Tensor:
        return self._sum(counts, "instance", "penalty_from_counts")

    def hard_violation(self, counts: Tensor) -> Tensor:
        return self._sum(counts, "instance", "violation_from_counts", hard=True)

    def corpus_penalty(self, totals: Tensor) -> Tensor:
        return self._sum(totals, "corpus", "penalty_from_counts")


def _check_cu(cu: float) -> float:
    if isinstance(cu, bool) or not isinstance(cu, (int, float)) or not math.isfinite(cu) or cu < 0:
        raise ValueError(f"cu must be a finite float >= 0; got {cu!r}")
    return float(cu)


def _rep(potentials: Potentials, k: int) -> Potentials:
    return like(potentials, [x.repeat_interleave(k, dim=0) for x in as_tuple(potentials)])


def _index_pot(potentials: Potentials, idx: Tensor) -> Potentials:
    return like(potentials, [x[idx] for x in as_tuple(potentials)])


def unlabeled_hinge(
    structure: Structure,
    potentials: Potentials,
    labels: Tensor,
    lengths: Optional[Tensor] = None,
    cost: Cost = "hamming",
) -> Tensor:
    """Margin-rescaled hinge ``max_y' [s(y') + Delta(y, y')] - s(y)`` of each labeling. Shape (B,).

    Args:
        structure: any structure with a cost-augmented decoder.
        potentials: the model's potentials (batch first).
        labels: the labelings ``y`` in the structure's compact form.
        lengths: (B,) lengths.
        cost: ``"hamming"`` or ``"zero_one"``.
    """
    with torch.no_grad():
        pot = as_detached(potentials)
        _, aug = structure.cost_augmented_argmax(pot, labels, lengths, cost=cost)
        return aug - structure.score(pot, labels, lengths)


def switching_objective(
    structure: Structure,
    potentials: Union[Potentials, Sequence[Potentials]],
    labels: Union[Tensor, Sequence[Tensor]],
    lengths: Union[Tensor, Sequence[Tensor], None] = None,
    constraints: Any = None,
    tokens: Union[Tokens, Sequence[Tokens]] = None,
    cu: float = 1.0,
    cost: Cost = "hamming",
) -> tuple[Tensor, Tensor]:
    """``F(Y)`` of seed 003 eq. (3.4) (see the module docstring) and the hard violation.

    The unlabeled examples come in one batch, or as a list of chunks (``labels`` a list; then
    ``potentials``, ``lengths`` and ``tokens`` are lists of the same length, or None): the
    corpus-level penalties are scored on the counts summed over all chunks.

    Shape:
        labels: the structure's labels of all unlabeled examples (B, ...) (or one such tensor
        per chunk); lengths (B,).

    Returns:
        ``(F, hard_violation)`` scalars.
    """
    cu = _check_cu(cu)
    parts = _parts(potentials, labels, lengths, tokens, None)
    value: Optional[Tensor] = None
    hard: Optional[Tensor] = None
    totals: Optional[Tensor] = None
    for pot, y, ln, toks, _ in parts:
        terms = _Terms(constraints, toks)
        ln = structure.check_lengths(ln, y.shape[0], _max_len(structure, y), y.device)
        counts = terms.counts(y, ln)
        part = terms.instance_penalty(counts).sum()
        if cu > 0:
            part = part + cu * unlabeled_hinge(structure, pot, y, ln, cost).sum().to(part.dtype)
        value = part if value is None else value + part
        violation = terms.hard_violation(counts).sum()
        hard = violation if hard is None else hard + violation
        totals = counts.sum(0) if totals is None else totals + counts.sum(0)
    assert value is not None and hard is not None and totals is not None
    return value + _Terms(constraints, None).corpus_penalty(totals), hard


def _max_len(structure: Structure, labels: Tensor) -> int:
    if isinstance(structure, CKY):
        return (labels.shape[1] + 1) // 2
    return labels.shape[1] if labels.dim() > 1 else 1


#: one part of the unlabeled examples: (potentials, labels, lengths, tokens, index)
_Part = tuple[Potentials, Tensor, Optional[Tensor], Tokens, Optional[Tensor]]


def _parts(
    potentials: Any, labels: Any, lengths: Any, tokens: Any, index: Any
) -> list[_Part]:
    """The unlabeled examples as a list of parts: one batch (``labels`` a tensor) is a list
    of one; chunks (``labels`` a list or tuple of tensors) need ``potentials`` and, when given,
    ``lengths``, ``tokens`` and ``index`` as lists of the same length (lists, not tuples:
    factored potentials are tuples).

    Raises:
        ValueError: mismatched kinds or numbers of chunks (named with expected and actual).
    """
    if isinstance(labels, Tensor):
        for name, value in (("potentials", potentials), ("lengths", lengths), ("index", index)):
            if isinstance(value, list):
                raise ValueError(
                    f"{name} must be one batch like labels (a Tensor); got a list of "
                    f"{len(value)} (give labels as a list of chunks too)"
                )
        return [(potentials, labels, lengths, tokens, index)]
    if not isinstance(labels, list) or not labels or not all(isinstance(y, Tensor) for y in labels):
        got = f"a list of {len(labels)}" if isinstance(labels, list) else type(labels).__name__
        raise ValueError(
            f"labels must be a Tensor or a non-empty list of Tensors (chunks); got {got}"
        )
    k = len(labels)
    out: dict[str, list[Any]] = {}
    given = {"potentials": potentials, "lengths": lengths, "tokens": tokens, "index": index}
    for name, value in given.items():
        if value is None and name != "potentials":
            out[name] = [None] * k
        elif not isinstance(value, list) or len(value) != k:
            got = f"a list of {len(value)}" if isinstance(value, list) else type(value).__name__
            raise ValueError(
                f"with labels given as {k} chunks, {name} must be a list of {k}; got {got}"
            )
        else:
            out[name] = value
    return list(zip(out["potentials"], labels, out["lengths"], out["tokens"], out["index"]))


# ---------------------------------------------------------------------------------- chain fast path
def _max_marginals(aug: Tensor, lengths: Tensor) -> Tensor:
    """Max-marginals ``max_{y: y_t = c} s(y)`` of chain potentials. (B, N, C, C) -> (B, N, C)."""
    b, n, c, _ = aug.shape
    alpha = [aug[:, 0, 0, :]]
    for t in range(1, n):
        alpha.append((alpha[-1].unsqueeze(2) + aug[:, t]).amax(1))
    beta = [aug.new_zeros(b, c)]
    last = (lengths - 1).unsqueeze(1)  # (B, 1)
    for t in range(n - 2, -1, -1):
        rec = (aug[:, t + 1] + beta[-1].unsqueeze(1)).amax(2)
        beta.append(torch.where(last <= t, torch.zeros_like(rec), rec))
    beta.reverse()
    return torch.stack(alpha, 1) + torch.stack(beta, 1)


class _ChainEvaluator:
    """Candidate hinge and counts of single-position switches on a linear chain."""

    def __init__(self, pot: Tensor, lengths: Tensor, terms: _Terms, cu: float) -> None:
        self.pot = pot
        self.lengths = lengths
        self.terms = terms
        self.cu = cu
        b, n, c, _ = pot.shape
        self.c = c
        self.linear: list[tuple[slice, Tensor, Tensor]] = []  # (slice, W (B, N, C*C, d), offset)
        self.nonlinear: list[tuple[slice, Any]] = []
        for con, s in zip(terms.items, terms.slices):
            if getattr(con, "linear_counts", False) and hasattr(con, "features"):
                toks = terms.tokens if con.needs_tokens else None
                feats = con.features(toks, lengths, num_labels=c, structure="chain", dtype=pot.dtype)
                w = feats.weights  # (B, d, N', C, C), N' = max length
                if w.shape[2] < n:
                    w = torch.nn.functional.pad(w, (0, 0, 0, 0, 0, n - w.shape[2]))
                w = w.permute(0, 2, 3, 4, 1).reshape(b, n, c * c, -1).to(pot.device)
                self.linear.append((s, w, feats.offset))
            else:
                self.nonlinear.append((s, con))

    def step(
        self, labels: Tensor, idx: Tensor, m: Tensor, state: dict[str, Tensor], base: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Hinge (K, C) and counts (K, C, d) of switching position ``m`` (K,) of examples ``idx``
        (rows of this evaluator's part) whose current counts are ``base`` (K, d)."""
        k, c = idx.shape[0], self.c
        y = labels[idx]  # (K, N)
        n = y.shape[1]
        ln = self.lengths[idx]
        ar = torch.arange(k, device=y.device)
        cands = torch.arange(c, device=y.device)
        ym = y[ar, m]
        prev = torch.where(m > 0, y[ar, (m - 1).clamp_min(0)], torch.zeros_like(m))
        has_next = (m + 1) < ln
        mn = (m + 1).clamp_max(n - 1)
        ynext = y[ar, mn]
        # scores: s(y^c) - s(y)
        row_in = self.pot[idx, m, prev]  # (K, C): edge prev -> c at m
        d_score = row_in - row_in.gather(1, ym.unsqueeze(1))
        col_out = self.pot[idx, mn, :, ynext]  # (K, C): edge c -> y_{m+1}
        d_score = d_score + has_next.unsqueeze(1) * (col_out - col_out.gather(1, ym.unsqueeze(1)))
        hinge = torch.zeros(k, c, dtype=self.pot.dtype, device=y.device)
        if self.cu > 0:
            mm = state["mm"][idx, m]  # (K, C) max-marginals of the augmented potentials
            mmx = mm - (cands.unsqueeze(0) != ym.unsqueeze(1)).to(mm.dtype)
            top = mmx.topk(2, dim=1)
            best_other = torch.where(
                cands.unsqueeze(0) == top.indices[:, :1], top.values[:, 1:2], top.values[:, :1]
            )
            aug_max = torch.maximum(mmx, best_other + 1.0)
            hinge = aug_max - (state["score"][idx].unsqueeze(1) + d_score)
        counts = base.unsqueeze(1).expand(k, c, self.terms.d).clone()
        for s, w, _ in self.linear:
            into = w[idx, m].view(k, c, c, -1)[ar, prev]  # (K, C, d): edges prev -> c
            delta = into - into[ar, ym].unsqueeze(1)
            outof = w[idx, mn].view(k, c, c, -1)[ar, :, ynext]  # (K, C, d): edges c -> y_{m+1}
            delta = delta + has_next.view(k, 1, 1) * (outof - outof[ar, ym].unsqueeze(1))
            counts[..., s] = counts[..., s] + delta.to(counts.dtype)
        if self.nonlinear:
            cand = y.unsqueeze(1).repeat(1, c, 1)  # (K, C, N)
            cand[ar.unsqueeze(1), cands.unsqueeze(0), m.unsqueeze(1)] = cands.unsqueeze(0)
            flat = cand.view(k * c, n)
            lens = ln.repeat_interleave(c)
            toks = None
            if self.terms.tokens is not None:
                toks = [self.terms.tokens[i] for i in idx.tolist()]
            for s, con in self.nonlinear:
                t = [x for x in toks for _ in range(c)] if con.needs_tokens and toks is not None else None
                counts[..., s] = con.counts(flat, lens, t).to(counts.dtype).view(k, c, -1)
        return hinge, counts

    def refresh(self, labels: Tensor, state: dict[str, Tensor], rows: Tensor) -> None:
        """Per-step state of ``rows`` (the examples switched since their last refresh):
        max-marginals of the Hamming-augmented potentials and scores."""
        if self.cu > 0 and rows.numel():
            c = self.c
            if "mm" not in state:
                state["mm"] = self.pot.new_zeros(labels.shape + (c,))
                state["score"] = self.pot.new_zeros(labels.shape[0])
            # rows in chunks of similar lengths, each cut to its longest example (the dynamic
            # program is sequential in the length: padding would cost as much as real tokens)
            ln_all = self.lengths[rows]
            chain = LinearChain(c, validate=False)
            for chunk in ln_all.argsort().split(_REFRESH_CHUNK):
                r, ln = rows[chunk], ln_all[chunk]
                n = int(ln.max())
                y, pot = labels[r, :n], self.pot[r, :n]
                valid = torch.arange(n, device=y.device) < ln.unsqueeze(1)
                wrong = (1.0 - torch.nn.functional.one_hot(y, c).to(pot.dtype)) * valid.unsqueeze(2)
                state["mm"][r, :n] = _max_marginals(pot + wrong.unsqueeze(2), ln)
                state["score"][r] = chain._score(pot, y, ln).to(state["score"].dtype)


class _GenericEvaluator:
    """Candidate evaluation by explicit labelings (any structure with (B, N) labels)."""

    def __init__(
        self, structure: Structure, pot: Potentials, lengths: Tensor, terms: _Terms, cu: float,
        num_labels: int, cost: Cost,
    ) -> None:
        self.structure, self.pot, self.lengths, self.terms = structure, pot, lengths, terms
        self.cu, self.c, self.cost = cu, num_labels, cost

    def refresh(self, labels: Tensor, state: dict[str, Tensor], rows: Tensor) -> None:
        return None

    def step(
        self, labels: Tensor, idx: Tensor, m: Tensor, state: dict[str, Tensor], base: Tensor
    ) -> tuple[Tensor, Tensor]:
        k, c = idx.shape[0], self.c
        y = labels[idx]
        n = y.shape[1]
        ar = torch.arange(k, device=y.device)
        cands = torch.arange(c, device=y.device)
        cand = y.unsqueeze(1).repeat(1, c, 1)
        cand[ar.unsqueeze(1), cands.unsqueeze(0), m.unsqueeze(1)] = cands.unsqueeze(0)
        flat = cand.view(k * c, n)
        lens = self.lengths[idx].repeat_interleave(c)
        pot = _rep(_index_pot(self.pot, idx), c)
        if self.cu > 0:
            hinge = unlabeled_hinge(self.structure, pot, flat, lens, self.cost).view(k, c)
        else:
            hinge = torch.zeros(k, c, dtype=as_tuple(self.pot)[0].dtype, device=y.device)
        toks = None if self.terms.tokens is None else [self.terms.tokens[i] for i in idx.tolist()]
        counts = self.terms.counts(flat, lens, toks, repeat=c).view(k, c, -1)
        return hinge, counts


# ---------------------------------------------------------------------------------- acceptance
def _decide(
    terms: _Terms, cu: float, hinge: Tensor, counts: Tensor, cur: Tensor, cur_counts: Tensor,
    totals: Tensor,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Best candidate per example against fixed ``totals``.

    Shape: hinge (K, C), counts (K, C, d), cur (K,) index of the current labeling among the
    candidates, cur_counts (K, d), totals (d,).

    Returns:
        ``(improves (K,) bool, best (K,), local_delta (K,), hard_best (K,), hard_cur (K,))``;
        local_delta is the change of the example's own terms (hinge and instance penalties).
    """
    k = hinge.shape[0]
    ar = torch.arange(k, device=hinge.device)
    local = cu * hinge + terms.instance_penalty(counts).to(hinge.dtype)  # (K, C)
    hard = terms.hard_violation(counts).to(hinge.dtype)
    cand_tot = totals + (counts - cur_counts.unsqueeze(1))
    corpus = terms.corpus_penalty(cand_tot).to(hinge.dtype)  # (K, C)
    value = local + corpus
    hard_min = hard.min(1).values
    masked = value.masked_fill(hard > hard_min.unsqueeze(1) + _TOL, float("inf"))
    best = masked.argmin(1)
    hard_cur = hard[ar, cur]
    v_best, v_cur = value[ar, best], value[ar, cur]
    scale = 1.0 + v_cur.abs()
    improves = (hard_min < hard_cur - _TOL) | (
        (hard_min <= hard_cur + _TOL) & (v_best < v_cur - _TOL * scale)
    )
    improves &= best != cur
    return improves, best, local[ar, best] - local[ar, cur], hard[ar, best], hard_cur


def _apply_block(
    terms: _Terms, cu: float, hinge: Tensor, counts: Tensor, cur: Tensor, cur_counts: Tensor,
    totals: Tensor, budget: Optional[int],
) -> tuple[Tensor, Tensor]:
    """Choose the switches of a block (see the module docstring).

    Returns:
        ``(chosen (K,) candidate index or -1, new totals (d,))``.
    """
    k = hinge.shape[0]
    chosen = torch.full((k,), -1, dtype=torch.long, device=hinge.device)
    improves, best, local_delta, hard_best, hard_cur = _decide(
        terms, cu, hinge, counts, cur, cur_counts, totals
    )
    movers = improves.nonzero().flatten()
    if budget is not None:
        movers = movers[:budget]
    if movers.numel() == 0:
        return chosen, totals
    delta_counts = counts[movers, best[movers]] - cur_counts[movers]
    new_totals = totals + delta_counts.sum(0)
    change = local_delta[movers].sum() + terms.corpus_penalty(new_totals) - terms.corpus_penalty(totals)
    hard_ok = bool((hard_best[movers] <= hard_cur[movers] + _TOL).all())
    if movers.numel() == 1 or (hard_ok and float(change) < 0):
        chosen[movers] = best[movers]
        return chosen, new_totals
    # re-decide one example at a time against the updated totals (the paper's sequential rule)
    for i in movers.tolist():
        imp, b, _, _, _ = _decide(
            terms, cu, hinge[i : i + 1], counts[i : i + 1], cur[i : i + 1], cur_counts[i : i + 1], totals
        )
        if bool(imp[0]):
            chosen[i] = b[0]
            totals = totals + counts[i, b[0]] - cur_counts[i]
    return chosen, totals


# ---------------------------------------------------------------------------------- sequences
def _check_generator(generator: Optional[torch.Generator]) -> torch.Generator:
    if generator is None:
        return torch.Generator().manual_seed(0)
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator; got {type(generator).__name__}")
    return generator


def _check_opt_count(value: Optional[int], name: str, minimum: int) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum} or None; got {value!r}")
    return value


def label_switching(
    structure: Structure,
    potentials: Union[Potentials, Sequence[Potentials]],
    labels: Union[Tensor, Sequence[Tensor]],
    lengths: Union[Tensor, Sequence[Tensor], None] = None,
    constraints: Any = None,
    tokens: Union[Tokens, Sequence[Tokens]] = None,
    cu: float = 1.0,
    max_switches: Optional[int] = None,
    max_passes: int = 50,
    block_size: Optional[int] = None,
    cost: Cost = "hamming",
    method: Literal["auto", "chain", "generic"] = "auto",
    generator: Optional[torch.Generator] = None,
    index: Union[Tensor, Sequence[Tensor], None] = None,
) -> SwitchingResult:
    """Greedy label switching of sequence labels (seed 003 Algorithm 2; module docstring).

    The unlabeled examples come in one padded batch or as a list of chunks (e.g. the length
    chunks of :func:`structssl.data.length_chunks`; ``labels`` a list, and ``potentials``,
    ``lengths``, ``tokens``, ``index`` lists of the same length): each chunk is padded to its
    own longest example only, the candidates are scored chunk by chunk and the decisions are
    taken over the whole corpus (corpus constraint counts summed over the chunks). The random
    choices are defined over the examples' ``index`` (their identity in the corpus), not over
    their layout, so one batch and any chunking of it, in any order, give the same switches,
    labels and objective.

    Args:
        structure: a structure with (B, N) labels (``LinearChain``; ``MultiClass`` with
            labels reshaped to (B, 1) is not supported here).
        potentials: the fixed model's potentials of the unlabeled examples (one per chunk).
        labels: the current labels ``Y`` (not modified), or one tensor per chunk.
        lengths: (B,) lengths (default all N), or one per chunk.
        constraints: a bound :class:`~structssl.constraints.ConstraintSet` (or a list of
            constraints), or None.
        tokens: B token lists (needed by word / punctuation constraints), or one list per chunk.
        cu: weight of the unlabeled hinge (0: constraints only).
        max_switches: switch budget (None: unlimited).
        max_passes: maximum number of passes.
        block_size: examples scored together (None: all; 1: the paper's sequential rule).
        cost: the hinge's cost, ``"hamming"`` (``"zero_one"`` needs ``method="generic"``).
        method: ``"chain"`` (max-marginal fast path, LinearChain and Hamming only),
            ``"generic"`` (explicit candidates through the structure's decoder) or ``"auto"``.
        generator: random generator of the permutations (default: seeded with 0).
        index: (B,) distinct ids of the examples (e.g. their index in the unlabeled split), or
            one tensor per chunk; the order of the random choices (default: the position in
            the batch, chunks concatenated).

    Shape:
        potentials: (B, N, C, C) or factored :class:`~structssl.structures.ChainPotentials` for
            LinearChain; labels: (B, N) long; lengths: (B,); index: (B,) long. With chunks,
            each chunk's B and N are its own.

    Returns:
        :class:`SwitchingResult` (``labels`` a list of tensors when given as chunks).

    Raises:
        ValueError: bad arguments (named with expected and actual values).
        NotImplementedError: hard corpus-level constraints, or ``method="chain"`` with a
            structure other than LinearChain or a cost other than Hamming.
    """
    cu = _check_cu(cu)
    max_switches = _check_opt_count(max_switches, "max_switches", 0)
    block_size = _check_opt_count(block_size, "block_size", 1)
    if isinstance(max_passes, bool) or not isinstance(max_passes, int) or max_passes < 1:
        raise ValueError(f"max_passes must be an int >= 1; got {max_passes!r}")
    if method not in ("auto", "chain", "generic"):
        raise ValueError(f"method must be one of 'auto', 'chain', 'generic'; got {method!r}")
    if cost not in ("hamming", "zero_one"):
        raise ValueError(f"cost must be one of 'hamming', 'zero_one'; got {cost!r}")
    num_labels = getattr(structure, "num_labels", None)
    if num_labels is None:
        raise NotImplementedError(
            f"label_switching needs a structure with num_labels and (B, N) labels; got {structure!r}"
        )
    is_chain = isinstance(structure, LinearChain)
    if method == "chain" and (not is_chain or cost != "hamming"):
        raise NotImplementedError("method='chain' needs a LinearChain structure and cost='hamming'")
    chunked = not isinstance(labels, Tensor)
    use_chain = is_chain and cost == "hamming" and method != "generic"
    parts: list[_Part] = []
    for pot, y, ln, toks, ids in _parts(potentials, labels, lengths, tokens, index):
        if not isinstance(y, Tensor) or y.dim() != 2:
            raise ValueError(f"labels must have shape (B, N); got {tuple(y.shape)}")
        pot = as_detached(pot)
        pot, ln = structure.check(pot, ln)
        if is_chain:  # factored potentials: the switch evaluator reads the (B, N, C, C) layout
            pot = structure.edge_potentials(pot, ln)
        y = structure.check_labels(y, ln).clone()
        if toks is not None and len(toks) != y.shape[0]:
            raise ValueError(f"tokens must hold B = {y.shape[0]} token lists; got {len(toks)}")
        if ids is not None and (not isinstance(ids, Tensor) or ids.shape != (y.shape[0],)):
            got = tuple(ids.shape) if isinstance(ids, Tensor) else type(ids).__name__
            raise ValueError(f"index must be a ({y.shape[0]},) tensor of example ids; got {got}")
        parts.append((pot, y, ln, toks, ids))
    gen = _check_generator(generator)
    terms = _Terms(constraints, None)  # the corpus-level decisions (no tokens needed)
    device = parts[0][1].device
    sizes = [int(p[1].shape[0]) for p in parts]
    b = sum(sizes)
    ar_parts = torch.arange(len(parts), device=device)
    chunk_of = ar_parts.repeat_interleave(torch.tensor(sizes, device=device))  # (M,)
    row_of = torch.cat([torch.arange(s, device=device) for s in sizes])  # (M,)
    lens = torch.cat([p[2] for p in parts]).to(device)  # (M,)
    if any(p[4] is None for p in parts):
        if any(p[4] is not None for p in parts):
            raise ValueError("index must be given for every chunk or for none")
        ids_all = torch.arange(b, device=device)
    else:
        ids_all = torch.cat([p[4].to(device) for p in parts])  # type: ignore[union-attr]
        distinct = torch.unique(ids_all).numel()
        if distinct != b:
            raise ValueError(f"index must hold {b} distinct example ids; got {distinct} distinct")
    canon = ids_all.argsort(stable=True)  # the examples in index order
    start_of = torch.empty_like(lens)
    lens_c = lens[canon]
    start_of[canon] = lens_c.cumsum(0) - lens_c  # each example's offset in the index-order tokens
    num_tokens = int(lens.sum())
    rows_k = [(chunk_of == k).nonzero().flatten() for k in range(len(parts))]  # global ids
    pots_k, labels_k, lens_k, toks_k = ([p[i] for p in parts] for i in range(4))
    with torch.no_grad():
        evaluators: list[Any] = []
        for pot, ln, toks in zip(pots_k, lens_k, toks_k):
            part_terms = _Terms(constraints, toks)
            if use_chain:
                evaluators.append(_ChainEvaluator(pot, ln, part_terms, cu))  # type: ignore[arg-type]
            else:
                evaluators.append(
                    _GenericEvaluator(structure, pot, ln, part_terms, cu, num_labels, cost)
                )
        objective = lambda: switching_objective(  # noqa: E731
            structure, pots_k, labels_k, lens_k, constraints, toks_k, cu, cost
        )
        initial, _ = objective()
        cur_counts = torch.cat(
            [ev.terms.counts(y, ln) for ev, y, ln in zip(evaluators, labels_k, lens_k)]
        )  # (M, d), M = all examples
        totals = cur_counts[canon].sum(0)
        states: list[dict[str, Tensor]] = [{} for _ in parts]
        dirty = torch.ones(b, dtype=torch.bool, device=device)
        switches, per_pass, exhausted = 0, [], False
        block = b if block_size is None else block_size
        for _ in range(max_passes):
            if num_labels < 2:
                break
            order_ex = canon[torch.randperm(b, generator=gen).to(device)]
            keys = torch.rand(num_tokens, generator=gen).to(device)
            positions = []  # per part (B_k, N_k): the position visited at step t
            for y, rows in zip(labels_k, rows_k):
                steps = torch.arange(y.shape[1], device=device)
                valid = steps < lens[rows].unsqueeze(1)
                at = (start_of[rows].unsqueeze(1) + steps).clamp_max(num_tokens - 1)
                positions.append(keys[at].masked_fill(~valid, 2.0).argsort(1))
            in_pass = 0
            for t in range(int(lens.max())):
                active = order_ex[lens[order_ex] > t]
                stale = active[dirty[active]]
                for k, sel in _groups(chunk_of[stale], len(parts)):
                    evaluators[k].refresh(labels_k[k], states[k], row_of[stale[sel]])
                dirty[stale] = False
                for s in range(0, active.numel(), block):
                    budget = None if max_switches is None else max_switches - switches
                    if budget is not None and budget <= 0:
                        exhausted = True
                        break
                    idx = active[s : s + block]
                    hinge, counts, m, cur = _score_block(
                        evaluators, states, labels_k, positions, chunk_of, row_of, idx, t,
                        cur_counts, num_labels,
                    )
                    chosen, totals = _apply_block(
                        terms, cu, hinge, counts, cur, cur_counts[idx], totals, budget
                    )
                    moved = (chosen >= 0).nonzero().flatten()
                    if moved.numel():
                        rows = idx[moved]
                        for k, sel in _groups(chunk_of[rows], len(parts)):
                            labels_k[k][row_of[rows[sel]], m[moved[sel]]] = chosen[moved[sel]]
                        dirty[rows] = True
                        cur_counts[rows] = counts[moved, chosen[moved]]
                        in_pass += int(moved.numel())
                        switches += int(moved.numel())
                if exhausted:
                    break
            per_pass.append(in_pass)
            if in_pass == 0 or exhausted:
                break
        final, hard = objective()
    out: Union[Tensor, list[Tensor]] = labels_k if chunked else labels_k[0]
    return SwitchingResult(
        out, float(final), float(initial), switches, per_pass, exhausted, float(hard)
    )


def _groups(parts_of: Tensor, num_parts: int) -> list[tuple[int, Tensor]]:
    """``(part, positions)`` of each part present in ``parts_of`` (K,) (one batch: all)."""
    if num_parts == 1:
        everything = torch.arange(parts_of.numel(), device=parts_of.device)
        return [(0, everything)] if parts_of.numel() else []
    return [(int(k), (parts_of == k).nonzero().flatten()) for k in parts_of.unique().tolist()]


def _score_block(
    evaluators: list[Any], states: list[dict[str, Tensor]], labels_k: list[Tensor],
    positions: list[Tensor], chunk_of: Tensor, row_of: Tensor, idx: Tensor, t: int,
    cur_counts: Tensor, num_labels: int,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Candidates of step ``t`` for the examples ``idx`` (K,) (global ids), each scored by its
    part's evaluator. Returns ``hinge (K, C), counts (K, C, d), position (K,), current (K,)``."""
    groups = _groups(chunk_of[idx], len(evaluators))
    if len(groups) == 1:
        k = groups[0][0]
        rows = row_of[idx]
        m = positions[k][rows, t]
        hinge, counts = evaluators[k].step(labels_k[k], rows, m, states[k], cur_counts[idx])
        return hinge, counts, m, labels_k[k][rows, m]
    size = idx.numel()
    hinge: Optional[Tensor] = None
    counts = cur_counts.new_zeros(size, num_labels, cur_counts.shape[1])
    m = torch.zeros(size, dtype=torch.long, device=idx.device)
    cur = torch.zeros(size, dtype=torch.long, device=idx.device)
    for k, sel in groups:
        rows = row_of[idx[sel]]
        m[sel] = positions[k][rows, t]
        h, counts[sel] = evaluators[k].step(
            labels_k[k], rows, m[sel], states[k], cur_counts[idx[sel]]
        )
        hinge = h.new_zeros(size, num_labels) if hinge is None else hinge
        hinge[sel], cur[sel] = h, labels_k[k][rows, m[sel]]
    assert hinge is not None
    return hinge, counts, m, cur


# ---------------------------------------------------------------------------------- trees
def leaf_rule_switching(
    structure: CKY,
    potentials: CKYPotentials,
    labels: Tensor,
    lengths: Optional[Tensor] = None,
    constraints: Optional[Sequence[SymbolProportion]] = None,
    cu: float = 1.0,
    num_trials: int = 16,
    bonus: float = 100.0,
    max_switches: Optional[int] = None,
    cost: Cost = "zero_one",
    generator: Optional[torch.Generator] = None,
) -> SwitchingResult:
    """Leaf-rule label switching for parse trees (seed 003 section 3.2.1; module docstring).

    Each trial picks, for every tree, one leaf ``i`` and one preterminal ``A`` allowed there
    (``terms[i, A] > LOG_ZERO / 2``, other than the current one), re-parses with
    ``terms[i, A] + bonus`` and keeps the tree when it lowers ``F``. Examples whose current
    tree does not parse, and candidate trees that do not parse, are skipped.

    Args:
        structure: the :class:`CKY` structure.
        potentials: the fixed model's :class:`CKYPotentials` of the unlabeled sentences.
        labels: current trees (B, 2N - 1, 3) (not modified).
        lengths: (B,) sentence lengths.
        constraints: corpus-level :class:`SymbolProportion` constraints (or None).
        cu: weight of the unlabeled hinge.
        num_trials: trials per example (each batched over all examples).
        bonus: the score added to the favoured leaf rule (the paper's scale-up).
        max_switches: switch budget (None: unlimited).
        cost: the hinge's cost (``"zero_one"``, the paper's 0/1 loss on trees, or ``"hamming"``).
        generator: random generator (default: seeded with 0).

    Returns:
        :class:`SwitchingResult` with ``switches_per_pass`` the switches of each trial.
    """
    if not isinstance(structure, CKY):
        raise TypeError(f"structure must be a CKY; got {type(structure).__name__}")
    cu = _check_cu(cu)
    if isinstance(num_trials, bool) or not isinstance(num_trials, int) or num_trials < 1:
        raise ValueError(f"num_trials must be an int >= 1; got {num_trials!r}")
    if isinstance(bonus, bool) or not isinstance(bonus, (int, float)) or not bonus > 0 or not math.isfinite(bonus):
        raise ValueError(f"bonus must be a finite float > 0; got {bonus!r}")
    max_switches = _check_opt_count(max_switches, "max_switches", 0)
    if cost not in ("hamming", "zero_one"):
        raise ValueError(f"cost must be one of 'hamming', 'zero_one'; got {cost!r}")
    gen = _check_generator(generator)
    pot = as_detached(potentials)
    pot, lengths = structure.check(pot, lengths)
    assert isinstance(pot, CKYPotentials)
    labels = structure.check_labels(labels, lengths).clone()
    terms = _Terms(constraints, None)
    with torch.no_grad():
        b, n, nt = pot.terms.shape
        initial, _ = switching_objective(structure, pot, labels, lengths, constraints, None, cu, cost)
        parses = structure.score(pot, labels, lengths) > LOG_ZERO / 2  # (B,)
        cur_counts = terms.counts(labels, lengths)
        totals = cur_counts.sum(0)
        cur_hinge = unlabeled_hinge(structure, pot, labels, lengths, cost)
        allowed = pot.terms > LOG_ZERO / 2  # (B, N, NT)
        switches, per_trial, exhausted = 0, [], False
        ar = torch.arange(b, device=labels.device)
        for _ in range(num_trials):
            budget = None if max_switches is None else max_switches - switches
            if budget is not None and budget <= 0:
                exhausted = True
                break
            pos = (torch.rand(b, generator=gen).to(lengths.device) * lengths).long().clamp_max(n - 1)
            options = allowed[ar, pos].clone()  # (B, NT)
            leaf_rows = (labels[..., 0] == labels[..., 1]) & (labels[..., 0] == pos.unsqueeze(1))
            leaf_rows &= torch.arange(labels.shape[1], device=labels.device) < (2 * lengths - 1).unsqueeze(1)
            current_sym = (labels[..., 2] * leaf_rows).sum(1)
            options[ar, current_sym] = False
            has_option = options.any(1) & parses
            weights = torch.rand(b, nt, generator=gen).to(options.device) * options
            sym = weights.argmax(1)
            new_terms = pot.terms.clone()
            new_terms[ar, pos, sym] = new_terms[ar, pos, sym] + bonus
            biased = CKYPotentials(new_terms, pot.rules, pot.roots, pot.spans)
            cand, _ = structure.argmax(biased, lengths)
            ok = has_option & (structure.score(pot, cand, lengths) > LOG_ZERO / 2)
            cand = torch.where(ok.view(b, 1, 1), cand, labels)
            hinge_new = unlabeled_hinge(structure, pot, cand, lengths, cost)
            counts_new = terms.counts(cand, lengths)
            hinge2 = torch.stack([cur_hinge, hinge_new], 1)
            counts2 = torch.stack([cur_counts, counts_new], 1)
            zeros = torch.zeros(b, dtype=torch.long, device=labels.device)
            chosen, totals = _apply_block(terms, cu, hinge2, counts2, zeros, cur_counts, totals, budget)
            moved = ((chosen == 1) & ok).nonzero().flatten()
            if moved.numel():
                labels[moved] = cand[moved]
                cur_counts[moved] = counts_new[moved]
                cur_hinge[moved] = hinge_new[moved]
            per_trial.append(int(moved.numel()))
            switches += int(moved.numel())
        final, hard = switching_objective(structure, pot, labels, lengths, constraints, None, cu, cost)
    return SwitchingResult(labels, float(final), float(initial), switches, per_trial, exhausted, float(hard))
