"""Semi-supervised structural SVM by label switching and deterministic annealing (seed 003).

Algorithm 1 of seed 003 as a Lightning module. The objective (module docstring of
:mod:`structssl.training.modules`, divided by n like every structssl procedure) is

    J(w, Y) = ||w||^2 / (2 n) + C mean_i l(x_i, y_i; w) + Cu (m / n) mean_j l(x_j, Y_j; w)
              + P(Y) / n

with ``l`` the structured hinge (``loss``, Hamming or 0/1 cost), ``Y`` the current labels of
the m unlabeled examples and ``P`` the constraint penalties of seed 003 eq. (3.4)
(:mod:`structssl.constraints` for sequences, :class:`~structssl.inference.label_switching.
SymbolProportion` for trees). It alternates (one training epoch = one alternation):

1. epochs ``< supervised_epochs``: supervised training on the labeled data only (step 2);
2. first annealing epoch: ``Y`` = the supervised model's argmax on the unlabeled data (step 4),
   or, with ``guide`` (sequences; not in the paper), its constraint-guided argmax
   ``argmax_y s(y) - sum_k weight_k count_k(y)`` by exact Viterbi over the guide's constraints
   (instance level, counts linear in the chain's parts, penalty = weight x the number of
   violations, e.g. :class:`~structssl.constraints.PunctuationTransitions`): a single-token
   switch cannot move a field boundary to the next punctuation mark without passing through
   labelings that do not lower the objective, so the greedy search leaves what such rules would
   correct where it is (``benchmarks/bench_label_switching.py --tasks diagnostic``);
3. every annealing epoch: label switching of ``Y`` for the current ``w``
   (:func:`~structssl.inference.label_switching.label_switching`, or
   :func:`~structssl.inference.label_switching.leaf_rule_switching` for ``CKY``), then one
   supervised step on labeled + ``Y`` (``lbfgs_max_iter`` full-batch L-BFGS iterations on the
   hinge objective; the paper uses SDM here).

:class:`LabelSwitchingAnnealing` anneals ``Cu`` (``final * start * factor^k`` up to the final
value, which by default equals ``C``: an unlabeled example then weighs like a labeled one): it
moves to the next ``Cu`` when an alternation makes no switch, spends the switch budget, or after
``max_alternations``; it records the monitored dev metric at the end of each ``Cu`` (the
paper's per-``Cu`` model selection), stops after the final ``Cu`` and can restore the scorer
of the best ``Cu``. Its state and the module's (``current_Cu``, ``Y``, the per-epoch history)
are saved in checkpoints, and the switching randomness is seeded by ``(seed, epoch)``, so a
resumed run repeats an uninterrupted one.

Each training step must hold the whole unlabeled set (``unlabeled_batch_size=None``: corpus
constraints need every example), in one padded batch or, for sequences
(:attr:`LabelSwitchingModule.supports_chunks`), as a list of length chunks (what
:class:`~structssl.data.CoNLLDataModule` gives with ``batch_size=None``), each padded to its
own longest sentence: the switching scores each chunk's candidates and decides over the whole
corpus, and the hinge objective is evaluated and differentiated chunk by chunk, with the same
switches, labels, objective and gradient as one padded batch. The examples carry ``index``
(their index in the split: ``Y`` is stored per example, and the switching's random choices
follow it) and, for token constraints, ``tokens``.
"""

from __future__ import annotations

import copy
import time
import warnings
from typing import Any, Literal, Optional

import pytorch_lightning as pl
import torch
from torch import Tensor, nn

from structssl.constraints import ConstraintSet, kbest_search
from structssl.inference.label_switching import (
    SymbolProportion,
    label_switching,
    leaf_rule_switching,
    switching_objective,
)
from structssl.losses.hinge import StructuredHingeLoss
from structssl.structures.base import Structure
from structssl.structures.cky import CKY
from structssl.structures.linear_chain import LinearChain
from structssl.training.modules import (
    Batch,
    ObjectiveTerms,
    StructuredModule,
    as_chunks,
    chunk_shares,
    num_examples,
)

__all__ = ["LabelSwitchingModule", "LabelSwitchingAnnealing", "plot_label_switching"]


def _count(value: Optional[int], name: str, minimum: int, allow_none: bool = True) -> Optional[int]:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}{' or None' if allow_none else ''}; got {value!r}")
    return value


class LabelSwitchingModule(StructuredModule):
    """Seed 003's semi-supervised structural SVM (see the module docstring).

    Args:
        structure: ``LinearChain`` (or any structure with (B, N) labels) or ``CKY``.
        scorer: inputs -> potentials.
        constraints: a :class:`~structssl.constraints.ConstraintSet` (sequences; bound to the
            data module's ``label_names`` at setup when unbound) or a list of
            :class:`SymbolProportion` (trees), or None.
        loss: the structured hinge of both terms (default ``StructuredHingeLoss()``, Hamming
            cost, margin rescaling).
        C: labeled loss weight.
        Cu: the final unlabeled weight (default: ``C``).
        supervised_epochs: epochs of supervised training before the switching starts.
        max_switches: switch budget of one label-switching call (None: unlimited).
        max_passes: passes of one label-switching call (sequences).
        block_size: label-switching block size (None: all examples; 1: the paper's order).
        num_trials: leaf-rule trials per example of one call (trees).
        bonus: leaf-rule scale-up (trees).
        seed: seed of the switching randomness (combined with the epoch).
        guide: a :class:`~structssl.constraints.ConstraintSet` whose penalties guide the first
            labeling ``Y`` (module docstring; sequences only), or None (the model's argmax, the
            paper's step 4). Bound to the data's label names at setup like ``constraints``.
        constrained_decoding: decode evaluation and prediction batches (:meth:`decode`) with
            the constraint-guided search ``argmax_y s(y) - penalty_scale P(y)`` over the
            instance-level constraints (:meth:`guided_argmax`; sequences; not in seed 003,
            whose SSVM-LS decodes with the plain argmax). ``structssl predict --constraints
            true|false`` switches it for one prediction.
        penalty_scale: ``rho`` of that search, >= 0.
        search_k: candidates of its k-best search per example, >= 1.
        **kwargs: the options of :class:`~structssl.training.modules.StructuredModule`
            (``optimizer``, ``lr``, ``lbfgs_max_iter``, ``lbfgs_history``, ``momentum``,
            ``regularize_bias``, ``num_labeled``, ``num_unlabeled``, ``task``, ``tags``).
    """

    uses_unlabeled = True
    sharding_refusal = (
        "its greedy label switching compares constraint penalties across all unlabeled "
        "examples at once and keeps one label per example of the whole corpus, which is not "
        "split across processes; train it on one process (--trainer.devices=1; a GPU runs its "
        "dynamic programs), or use CompositeLikelihoodModule / TSVMPlusModule (multi-label) "
        "or TransductiveModule, which reduce across processes"
    )
    convergence_refusal = (
        "its objective changes with every label switch, and LabelSwitchingAnnealing ends each "
        "C_u step (no switch, the switch budget, or max_alternations) and the run (after the "
        "final C_u); set those instead"
    )

    def __init__(
        self,
        structure: Structure,
        scorer: nn.Module,
        constraints: Any = None,
        loss: Optional[nn.Module] = None,
        C: float = 1.0,
        Cu: Optional[float] = None,
        supervised_epochs: int = 1,
        max_switches: Optional[int] = None,
        max_passes: int = 10,
        block_size: Optional[int] = None,
        num_trials: int = 16,
        bonus: float = 100.0,
        seed: int = 0,
        guide: Any = None,
        constrained_decoding: bool = False,
        penalty_scale: float = 1.0,
        search_k: int = 16,
        **kwargs: Any,
    ) -> None:
        super().__init__(structure, scorer, C, C if Cu is None else Cu, **kwargs)
        self.loss = StructuredHingeLoss() if loss is None else loss
        if not isinstance(self.loss, nn.Module):
            raise TypeError(f"loss must be an nn.Module; got {type(self.loss).__name__}")
        self.is_tree = isinstance(structure, CKY)
        if self.is_tree and constraints is not None:
            bad = [c for c in constraints if not isinstance(c, SymbolProportion)]
            if bad:
                raise TypeError(
                    f"constraints of a CKY structure must be SymbolProportion; got {type(bad[0]).__name__}"
                )
        self.constraints = constraints
        self.guide = _check_guide(guide, structure)
        if isinstance(penalty_scale, bool) or not isinstance(penalty_scale, (int, float)) or penalty_scale < 0:
            raise ValueError(f"penalty_scale must be a number in [0.0, inf]; got {penalty_scale!r}")
        if constrained_decoding and not (
            isinstance(structure, LinearChain) and isinstance(constraints, ConstraintSet)
            and constraints.select(level="instance").constraints
        ):
            got = "no constraints" if constraints is None else f"{type(constraints).__name__} {getattr(constraints, 'names', '')}"
            raise ValueError(
                "constrained_decoding needs a LinearChain and a ConstraintSet with instance-level "
                f"constraints (it decodes each example with them); got {type(structure).__name__} and {got}"
            )
        self.penalty_scale = float(penalty_scale)
        self.search_k = _count(search_k, "search_k", 1, allow_none=False)
        self.constrained_decoding = bool(constrained_decoding)
        self.supervised_epochs = _count(supervised_epochs, "supervised_epochs", 0, allow_none=False)
        self.max_switches = _count(max_switches, "max_switches", 0)
        self.max_passes = _count(max_passes, "max_passes", 1, allow_none=False)
        self.block_size = _count(block_size, "block_size", 1)
        self.num_trials = _count(num_trials, "num_trials", 1, allow_none=False)
        self.bonus = float(bonus)
        self.seed = int(seed)
        self.register_buffer("pseudo_labels", torch.zeros(0, dtype=torch.long))
        #: per-epoch records: epoch, Cu, switches, switches_per_pass, objective, seconds, ...
        self.history: list[dict[str, Any]] = []
        #: whether the annealing phase has started (set by the callback or by the epoch count)
        self.last_switches = 0
        self.last_budget_exhausted = False
        self._init_rho()

    # ------------------------------------------------------------------ setup / checkpoints
    def losses(self) -> list[nn.Module]:
        return [self.loss]

    def setup(self, stage: str) -> None:
        super().setup(stage)
        dm = self._datamodule()
        if stage == "fit":
            self._check_data_module(dm)
        adopt = getattr(self.scorer, "adopt_grammar", None)
        if callable(adopt) and dm is not None and getattr(dm, "lexicon", None) is not None:
            adopt(dm)  # a GrammarScorer configured by sizes only takes the treebank's grammar
        vocabulary = getattr(dm, "symbols", None)
        if self.is_tree and self.constraints is not None and vocabulary:
            self.constraints = [c.bind(list(vocabulary)) for c in self.constraints]
        if not self.is_tree and self.constraints is not None:
            # bound to the data's labels (BIO or plain tags), target="labeled" estimated
            self.constraints = self.bind_constraints(self.constraints, stage == "fit")
        if self.guide is not None:
            self.guide = self.bind_constraints(self.guide, estimate_targets=False)
        self._check_evaluation_tokens()

    def _check_evaluation_tokens(self) -> None:
        """Fail at setup, not at the first step, when the constraint-guided decoding needs the
        tokens of examples that do not carry them (labeled: the training metrics; dev, test)."""
        if not self.constrained_decoding:  # (constraints then a ConstraintSet: __init__)
            return
        needing = [c.name for c in self.constraints if c.needs_tokens]
        dm = self._datamodule()
        splits = getattr(dm, "splits", None)
        if not (needing and isinstance(splits, dict)):
            return
        for name in ("labeled", "dev", "test"):  # the training metrics decode labeled batches
            examples = splits.get(name) or []
            if examples and "tokens" not in examples[0]:
                raise ValueError(
                    f"constrained_decoding with the token constraints {needing} needs {name} "
                    f"examples that carry 'tokens'; {type(dm).__name__}'s carry "
                    f"{sorted(examples[0])} (set constrained_decoding=False)"
                )

    def _check_data_module(self, dm: Any) -> None:
        """Fail at setup, not after an epoch, when the data cannot be label-switched."""
        splits = getattr(dm, "splits", None)
        if not isinstance(splits, dict):
            return
        unlabeled = splits.get("unlabeled") or []
        name = type(dm).__name__
        if not unlabeled:
            raise ValueError(f"{type(self).__name__} needs unlabeled examples; {name} has none")
        if "index" not in unlabeled[0]:
            raise ValueError(
                f"{type(self).__name__} needs unlabeled examples that carry 'index' (their index "
                f"in the split); {name}'s carry {sorted(unlabeled[0])}"
            )
        size = getattr(dm, "unlabeled_batch_size", None)
        if size is not None and size < len(unlabeled):
            raise ValueError(
                f"{type(self).__name__} needs the whole unlabeled set in one batch (or as "
                "length chunks, all in one step: corpus constraints): set the data module's "
                f"unlabeled_batch_size=None; got {size} for {len(unlabeled)} unlabeled examples"
            )

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint["label_switching_history"] = copy.deepcopy(self.history)
        checkpoint["label_switching_state"] = {
            "last_switches": self.last_switches,
            "last_budget_exhausted": self.last_budget_exhausted,
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        saved = checkpoint.get("state_dict", {}).get("pseudo_labels")
        if saved is not None:
            self.pseudo_labels = torch.zeros_like(saved)
        self.history = copy.deepcopy(checkpoint.get("label_switching_history", []))
        state = checkpoint.get("label_switching_state") or {}
        self.last_switches = int(state.get("last_switches", self.last_switches))
        self.last_budget_exhausted = bool(
            state.get("last_budget_exhausted", self.last_budget_exhausted)
        )

    # ------------------------------------------------------------------ constrained decoding
    def guided_argmax(self, batch: Batch) -> Tensor:
        """``argmax_y s(y) - rho P(y)`` per example of a batch, (B, N) labels, with ``P`` the
        instance-level constraints' penalties and ``rho`` ``penalty_scale``. No autograd.

        The rules linear in the parts (word, first-label and punctuation-transition rules)
        are folded into the potentials (:meth:`ConstraintSet.fold_penalties`: soft ones as
        penalties, hard ones as ``-inf``), so they are exact; the rest (global rules such as
        ``AtMostOnce``) rerank the ``search_k`` best labelings of the folded potentials. An
        example where no candidate meets the hard constraints keeps the plain argmax, and a
        warning (once per module) says how many there were."""
        constraints = self.constraints
        assert isinstance(constraints, ConstraintSet)
        constraints = constraints.select(level="instance")  # corpus rules are not per example
        lengths = batch["lengths"]
        tokens = batch.get("tokens")
        with torch.no_grad():
            plain = self.structure.edge_potentials(self.span_constrained(self.potentials(batch), lengths), lengths)
            # rules linear in the parts go into the potentials: the search is exact for them
            pot, rest = constraints.fold_penalties(plain, lengths, tokens, self.penalty_scale)

            def rows_tokens(rows: Tensor) -> Optional[list[Any]]:
                return None if tokens is None else [tokens[i] for i in rows.tolist()]

            def bonus(labels: Tensor, lens: Tensor, rows: Tensor) -> Tensor:
                return -self.penalty_scale * rest.instance_penalty(labels, lens, rows_tokens(rows))

            def reject(labels: Tensor, lens: Tensor, rows: Tensor) -> Tensor:
                return rest.hard_violated(labels, lens, rows_tokens(rows))

            hard = any(c.hard for c in rest)
            result = kbest_search(
                self.structure, pot, lengths, bonus, pot.new_zeros(lengths.shape[0]),
                k=self.search_k, reject=reject if hard else None, adaptive=True,
            )
            labels, infeasible = result.labels, ~result.feasible
            if bool(infeasible.any()):
                labels = torch.where(infeasible.unsqueeze(1), self.structure.argmax(plain, lengths)[0], labels)
                self._warn_infeasible(int(infeasible.sum()), int(lengths.shape[0]))
        return labels

    def _warn_infeasible(self, count: int, total: int) -> None:
        """Say (once per module) that examples kept the plain argmax: no candidate met the
        hard constraints."""
        if getattr(self, "_warned_infeasible", False):
            return
        self._warned_infeasible = True
        hard = [c.name for c in self.constraints or [] if c.hard]
        warnings.warn(
            f"{type(self).__name__}: {count} of {total} examples of a batch have no labeling "
            f"among the search_k={self.search_k} best that meets the hard constraints {hard}; "
            "they keep the plain argmax, which breaks them (raise search_k, or make a rule soft "
            "with a large weight). Said once per model.",
            stacklevel=2,
        )

    def decode(self, batch: Batch) -> Tensor:
        """The argmax labels, or with ``constrained_decoding`` the constraint-guided ones."""
        if self.constrained_decoding:
            return self.guided_argmax(batch)
        return super().decode(batch)

    # ------------------------------------------------------------------ phases
    @property
    def switching(self) -> bool:
        """Whether the current epoch is an annealing (switching) epoch."""
        trainer = self._trainer
        epoch = trainer.current_epoch if trainer is not None else 0
        return epoch >= self.supervised_epochs

    @property
    def supports_chunks(self) -> bool:  # type: ignore[override]
        """Sequences: the labeled and the whole unlabeled set may come as length chunks (see
        the module docstring and :attr:`StructuredModule.supports_chunks`); trees (leaf-rule
        switching of ``CKY``) take one batch."""
        return not self.is_tree

    def _pseudo(self, unlabeled: Batch) -> Tensor:
        """The current labels of the batch's examples (padded to the batch's size)."""
        idx = unlabeled["index"].to(self.pseudo_labels.device)
        y = self.pseudo_labels[idx]
        n = int(unlabeled["lengths"].max())
        return y[:, : 2 * n - 1] if self.is_tree else y[:, :n]

    def _store(self, chunks: list[Batch], labels: list[Tensor]) -> None:
        """Store the labels of each chunk's examples by their index (the first call allocates
        ``pseudo_labels``, (m, longest example, ...), from the widest chunk)."""
        if self.pseudo_labels.numel() == 0:
            m = self.dataset_sizes()[1]
            width = max(int(y.shape[1]) for y in labels)
            shape = (m, width) + tuple(labels[0].shape[2:])
            self.pseudo_labels = torch.zeros(shape, dtype=torch.long, device=labels[0].device)
        for chunk, y in zip(chunks, labels):
            self.pseudo_labels[chunk["index"].to(y.device), : y.shape[1]] = y

    def _check_unlabeled(self, unlabeled: Any) -> list[Batch]:
        """The unlabeled part of a step as its list of chunks (one batch: a list of one)."""
        if unlabeled is None:
            raise ValueError(f"{type(self).__name__} needs unlabeled batches; the data module gave none")
        chunks = as_chunks(unlabeled)
        if not chunks or any("index" not in chunk for chunk in chunks):
            raise ValueError("unlabeled batches must carry 'index' (each example's index in its split)")
        if self.is_tree and len(chunks) != 1:
            raise NotImplementedError(
                "leaf-rule switching (CKY) takes the whole unlabeled set in one batch; got "
                f"{len(chunks)} chunks"
            )
        self.require_whole_unlabeled(chunks, "label switching decides its switches over the whole unlabeled set")
        return chunks

    @staticmethod
    def _tokens(chunks: list[Batch]) -> Optional[list[Any]]:
        tokens = [chunk.get("tokens") for chunk in chunks]
        return None if any(t is None for t in tokens) else tokens

    def start_labels(self, potentials: Any, chunk: Batch) -> Tensor:
        """The first labels ``Y`` of a chunk: the argmax, or the constraint-guided argmax
        ``argmax_y s(y) - sum_k weight_k count_k(y)`` with ``guide`` (the module docstring)."""
        lengths = chunk["lengths"]
        if self.guide is None:
            return self.structure.argmax(potentials, lengths)[0]
        edges = self.structure.edge_potentials(potentials, lengths)  # (B, N, C, C)
        edges, rest = self.guide.fold_penalties(edges, lengths, chunk.get("tokens"))
        assert len(rest) == 0  # _check_guide: every guide penalty folds
        return self.structure.argmax(edges, lengths)[0]

    def switch(self, unlabeled: Any) -> dict[str, Any]:
        """Initialise (first call) and label-switch the unlabeled labels for the current w
        (``unlabeled``: the whole unlabeled set, one batch or a list of chunks)."""
        chunks = self._check_unlabeled(unlabeled)
        with torch.no_grad():
            pots = [self.potentials(chunk) for chunk in chunks]
            lengths = [chunk["lengths"] for chunk in chunks]
            if self.pseudo_labels.numel() == 0:  # Y starts at the model's (guided) best labels
                self._store(chunks, [self.start_labels(p, chunk) for p, chunk in zip(pots, chunks)])
            labels = [self._pseudo(chunk) for chunk in chunks]
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.current_epoch)
            cu = self.current("Cu")
            if self.is_tree:
                result = leaf_rule_switching(
                    self.structure, pots[0], labels[0], lengths[0], self.constraints, cu,
                    self.num_trials, self.bonus, self.max_switches, _cost(self.loss), gen,
                )
                new = [result.labels]
            else:
                result = label_switching(
                    self.structure, pots, labels, lengths, self.constraints, self._tokens(chunks),
                    cu, self.max_switches, self.max_passes, self.block_size, _cost(self.loss),
                    "auto", gen, index=[chunk["index"] for chunk in chunks],
                )
                new = result.labels
            self._store(chunks, new)  # type: ignore[arg-type]
        self.last_switches = result.switches
        self.last_budget_exhausted = result.budget_exhausted
        return {
            "switches": result.switches,
            "switches_per_pass": list(result.switches_per_pass),
            "switch_objective_before": result.initial_objective,
            "switch_objective": result.objective,
            "hard_violations": result.hard_violations,
        }

    def penalty(self, unlabeled: Any) -> float:
        """``P(Y)``: the constraint penalties of the current unlabeled labels (``unlabeled``:
        one batch or a list of chunks; corpus counts summed over the chunks)."""
        if self.constraints is None or self.pseudo_labels.numel() == 0:
            return 0.0
        chunks = as_chunks(unlabeled)
        with torch.no_grad():
            value, _ = switching_objective(  # cu = 0: the potentials are not read
                self.structure, [None] * len(chunks), [self._pseudo(c) for c in chunks],
                [c["lengths"] for c in chunks], self.constraints, self._tokens(chunks), 0.0,
                _cost(self.loss),
            )
        return float(value)

    # ------------------------------------------------------------------ objective
    def labeled_term(self, batch: Batch) -> Tensor:
        """``mean_i l(x_i, y_i; w)`` over a labeled batch (or chunk)."""
        pot = self.potentials(batch)
        return self.loss(self.structure, pot, batch["labels"], batch.get("lengths"))

    def unlabeled_term(self, batch: Batch) -> Tensor:
        """``mean_j l(x_j, Y_j; w)`` over an unlabeled batch (or chunk) with its current ``Y``."""
        pot = self.potentials(batch)
        return self.loss(self.structure, pot, self._pseudo(batch), batch.get("lengths"))

    def _pseudo_term(self, unlabeled: Any) -> bool:
        """Whether the objective has its unlabeled term (annealing epochs, once ``Y`` exists)."""
        return self.switching and unlabeled is not None and self.pseudo_labels.numel() > 0

    @staticmethod
    def _mean(part: Any, term: Any) -> Tensor:
        """``term``'s mean over the examples of ``part`` (one batch or a list of chunks)."""
        chunks = as_chunks(part)
        if len(chunks) == 1:
            return term(chunks[0])
        return sum(share * term(c) for share, c in zip(chunk_shares(chunks), chunks))  # type: ignore[return-value]

    def objective_terms(self, batch: Batch) -> ObjectiveTerms:
        labeled, unlabeled = self._split(batch)
        value = self._mean(labeled, self.labeled_term)
        unl = self._mean(unlabeled, self.unlabeled_term) if self._pseudo_term(unlabeled) else None
        return self._combine(self.weight_norm_squared(), value, unl)

    def backward_objective(self, batch: Batch) -> ObjectiveTerms:
        """:meth:`StructuredModule.backward_objective` (one batch or chunks), the unlabeled
        part left out while the objective has no unlabeled term."""
        labeled, unlabeled = self._split(batch)
        if unlabeled is not None and not self._pseudo_term(unlabeled):
            batch = {"labeled": labeled}
        return super().backward_objective(batch)

    def eval_loss(self, batch: Batch) -> Tensor:
        return self.labeled_term(batch)

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        start = time.perf_counter()
        record: dict[str, Any] = {"epoch": int(self.current_epoch), "Cu": self.current("Cu")}
        labeled, unlabeled = self._split(batch)
        if self.switching:
            record.update(self.switch(unlabeled))
        else:
            record.update(switches=0, switches_per_pass=[])
            self.last_switches, self.last_budget_exhausted = 0, False
        out = super().training_step(batch, batch_idx)
        with torch.no_grad():
            terms = self.objective_terms(batch)
        n, _ = self.dataset_sizes()
        penalty = self.penalty(unlabeled) if (self.switching and unlabeled is not None) else 0.0
        record.update(
            objective=float(terms.objective) + penalty / n,
            labeled_loss=float(terms.labeled_loss),
            unlabeled_loss=float(terms.unlabeled_loss),
            penalty=penalty,
            seconds=time.perf_counter() - start,
        )
        self.history.append(record)
        log = dict(on_step=False, on_epoch=True, batch_size=num_examples(as_chunks(labeled)))
        self.log("train/switches", float(record["switches"]), **log)
        self.log("train/full_objective", record["objective"], **log)
        return out


def _check_guide(guide: Any, structure: Structure) -> Any:
    """``guide`` of :class:`LabelSwitchingModule`: None, or a ConstraintSet of instance-level
    constraints whose penalty is linear in the chain's parts (weight x the number of
    violations), for a LinearChain."""
    if guide is None:
        return None
    from structssl.constraints import ConstraintSet

    if not isinstance(guide, ConstraintSet):
        raise TypeError(f"guide must be a ConstraintSet or None; got {type(guide).__name__}")
    if not isinstance(structure, LinearChain):
        raise ValueError(f"guide needs a LinearChain structure (Viterbi on edges); got {type(structure).__name__}")
    for con in guide:
        if not con.linear_penalty:
            raise ValueError(
                f"guide: {con.name} must be an instance-level constraint whose penalty is weight x "
                "its number of violations, linear in the chain's parts (e.g. PunctuationTransitions, "
                f"WordLabels, AllowedFirst); got level={con.level!r}, linear_counts={con.linear_counts}"
            )
        if con.hard:
            raise ValueError(
                f"guide: {con.name} is hard; the guide weighs violations (weight=...), so give it "
                "hard=False and a weight (a large one enforces it)"
            )
    return guide


def _cost(loss: nn.Module) -> Literal["hamming", "zero_one"]:
    cost = getattr(loss, "cost", "hamming")
    if cost not in ("hamming", "zero_one"):
        raise NotImplementedError(f"label switching supports hamming / zero_one costs; got {cost!r}")
    return cost


class LabelSwitchingAnnealing(pl.Callback):
    """Deterministic annealing of ``Cu`` for :class:`LabelSwitchingModule` (seed 003 Alg. 1).

    ``Cu_k = final * min(1, start * factor^k)``; step ``k`` ends after an alternation with no
    switch, one that spent the switch budget, or ``max_alternations`` alternations. At the end
    of each step the monitored metric (of the validation run of that epoch) is recorded in
    ``records``; training stops after the step with ``Cu = final``. With ``restore_best`` the
    scorer of the best step (the paper's per-``Cu`` dev selection) is loaded at the end of fit.

    Args:
        start: first multiplier of the final ``Cu``, in (0, 1].
        factor: growth factor per step, > 1.
        max_alternations: alternations per step at most.
        monitor: the logged metric of the selection (e.g. ``"val/token_accuracy"``; None: no
            selection).
        mode: ``"max"`` or ``"min"``.
        restore_best: load the best step's scorer at the end of fit.
    """

    def __init__(
        self,
        start: float = 0.01,
        factor: float = 2.0,
        max_alternations: int = 10,
        monitor: Optional[str] = "val/token_accuracy",
        mode: Literal["max", "min"] = "max",
        restore_best: bool = True,
    ) -> None:
        super().__init__()
        if isinstance(start, bool) or not isinstance(start, (int, float)) or not 0 < start <= 1:
            raise ValueError(f"start must be in (0, 1]; got {start!r}")
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor > 1:
            raise ValueError(f"factor must be > 1; got {factor!r}")
        if mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min'; got {mode!r}")
        self.start = float(start)
        self.factor = float(factor)
        self.max_alternations = _count(max_alternations, "max_alternations", 1, allow_none=False)
        self.monitor = monitor
        self.mode = mode
        self.restore_best = bool(restore_best)
        self.step = 0
        self.alternations = 0
        self.records: list[dict[str, Any]] = []
        self.best_index = -1
        self.best_state: Optional[dict[str, Tensor]] = None

    def multiplier(self, step: int) -> float:
        return min(1.0, self.start * self.factor**step)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not isinstance(pl_module, LabelSwitchingModule):
            raise TypeError(
                f"LabelSwitchingAnnealing needs a LabelSwitchingModule; got {type(pl_module).__name__}"
            )

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        assert isinstance(pl_module, LabelSwitchingModule)
        value = pl_module.final_value("Cu") * self.multiplier(self.step) if pl_module.switching else 0.0
        pl_module.set_current("Cu", value)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        assert isinstance(pl_module, LabelSwitchingModule)
        if not pl_module.switching:
            return
        self.alternations += 1
        done = (
            pl_module.last_switches == 0
            or pl_module.last_budget_exhausted
            or self.alternations >= self.max_alternations
        )
        if not done:
            return
        metric = trainer.callback_metrics.get(self.monitor) if self.monitor else None
        value = None if metric is None else float(metric)
        self.records.append(
            {"step": self.step, "Cu": pl_module.current("Cu"), "epoch": trainer.current_epoch,
             "alternations": self.alternations, "monitor": value}
        )
        if value is not None:
            best = None if self.best_index < 0 else self.records[self.best_index]["monitor"]
            if best is None or (value > best if self.mode == "max" else value < best):
                self.best_index = len(self.records) - 1
                self.best_state = {k: v.detach().clone() for k, v in pl_module.scorer.state_dict().items()}
        final = self.multiplier(self.step) >= 1.0
        self.step += 1
        self.alternations = 0
        if final:
            trainer.should_stop = True

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.restore_best and self.best_state is not None:
            pl_module.scorer.load_state_dict(self.best_state)

    @property
    def best(self) -> Optional[dict[str, Any]]:
        """The record of the selected ``Cu`` step (None before any)."""
        return None if self.best_index < 0 else self.records[self.best_index]

    def state_dict(self) -> dict[str, Any]:
        return {
            "start": self.start, "factor": self.factor, "max_alternations": self.max_alternations,
            "step": self.step, "alternations": self.alternations,
            "records": copy.deepcopy(self.records), "best_index": self.best_index,
            "best_state": self.best_state,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        config = {k: state_dict[k] for k in ("start", "factor", "max_alternations")}
        mine = {"start": self.start, "factor": self.factor, "max_alternations": self.max_alternations}
        if config != mine:
            raise ValueError(
                "the checkpoint's LabelSwitchingAnnealing schedule must match this one to resume "
                f"exactly; checkpoint {config}, configured {mine}"
            )
        self.step = int(state_dict["step"])
        self.alternations = int(state_dict["alternations"])
        self.records = copy.deepcopy(state_dict["records"])
        self.best_index = int(state_dict["best_index"])
        self.best_state = state_dict["best_state"]


#: the quantities of :func:`plot_label_switching`: (history key, y-axis label, file suffix)
_PLOTS = (
    ("objective", "primal objective J(w, Y)", "objective"),
    ("test_accuracy", "test accuracy (%)", "test_accuracy"),
    ("switches", "label switches", "switches"),
)


def plot_label_switching(
    histories: dict[str, list[dict[str, Any]]], prefix: str, title: str = ""
) -> list[str]:
    """Seed 003's Figures 2-4: objective, test accuracy and switches per iteration as PNGs.

    Args:
        histories: panel title -> :attr:`LabelSwitchingModule.history` records (one per
            alternation; ``test_accuracy`` is read when present, e.g. added by a callback;
            a record with ``"selected": True`` gets the paper's square marker).
        prefix: output path prefix; writes ``<prefix>_objective.png``,
            ``<prefix>_test_accuracy.png`` and ``<prefix>_switches.png`` (a quantity absent
            from every record is skipped).
        title: figure title prefix.

    Returns:
        The paths written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for key, ylabel, suffix in _PLOTS:
        panels = [(name, h) for name, h in histories.items() if any(key in r for r in h)]
        if not panels:
            continue
        fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.2), squeeze=False)
        for ax, (name, hist) in zip(axes[0], panels):
            rows = [r for r in hist if key in r]
            ax.plot([r["epoch"] for r in rows], [r[key] for r in rows], "-o", ms=3)
            changes = [b["epoch"] for a, b in zip(hist, hist[1:]) if a.get("Cu") != b.get("Cu")]
            for e in changes:  # a new Cu (the spikes of the paper's plots)
                ax.axvline(e - 0.5, color="0.8", lw=0.8, zorder=0)
            for r in rows:
                if r.get("selected"):
                    ax.plot([r["epoch"]], [r[key]], "s", ms=9, mfc="none", mec="red")
            ax.set_title(name, fontsize=9)
            ax.set_xlabel("iteration (alternation)")
            ax.set_ylabel(ylabel)
        if title:
            fig.suptitle(f"{title}: {ylabel}", fontsize=10)
        fig.tight_layout()
        path = f"{prefix}_{suffix}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
