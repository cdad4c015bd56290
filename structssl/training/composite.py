"""Seed 004's semi-supervised procedures: composite likelihood, TSVM+ and CoDL+.

All three alternate, once per training round (one Lightning epoch with the full-batch data
modules), between

1. **label assignment** of the unlabeled corpus: ``Y_U = argmax_Y sum_j s_j(y_j)`` subject to
   the corpus constraints (LDC / LCC, estimated from the labeled data), solved jointly by the
   corpus dual decomposition of :mod:`structssl.inference.dual_decomposition` (star-tree
   components: "approximate inference"; enumeration: "exact inference"); its corpus
   multipliers warm start the next round (the per-example ones start afresh) and are saved in
   checkpoints;
2. **a model update** at fixed ``Y_U``:

   - :class:`CompositeLikelihoodModule` (seed 004 eqs. 2 and 5): ``||w||^2 / (2 sigma^2) +
     mean_L nl_C(y) + C_m mean_U nl_C(y_U)`` with the negative composite log-likelihood over
     the K spanning star trees (``learning="approximate"``) or the full negative
     log-likelihood by enumeration (``learning="exact"``), minimised by L-BFGS with at most
     ``lbfgs_max_iter = 25`` iterations per round;
   - :class:`TSVMPlusModule` (seed 004 section 6.5, transductive structural SVM solved by
     CCCP): the same objective with the margin-rescaled Hamming hinge; its loss-augmented inference
     uses the same components (approximate: star-tree dual decomposition, Finley and
     Joachims 2008), and the CCCP linearisation of the unlabeled term is the constrained
     label assignment ``Y_U``;
   - :class:`CoDLPlusModule` (seed 004 section 6.5, constraint-driven learning of Chang et al.
     2012 with an averaged structured perceptron): the perceptron is retrained on the labeled
     examples plus the pseudo-labeled ones, whose updates are weighted by ``C_m``.

The objective is seed 004's as written, not the per-example scaling of the other procedures
(``||w||^2 / (2 n) + C mean_L + C_u (m / n) mean_U``): the Gaussian prior's ``sigma^2`` is ``C``
and does not shrink with the number of labeled examples ``n``, and the unlabeled mean is
weighted by ``C_m`` alone (so ``C_m = 1`` gives the labeled and the unlabeled sets equal weight
whatever their sizes). With the per-example scaling and 17 labeled examples (scene, d = 1 %)
the prior would be 17 times weaker than the paper's; it made every scene / emotions cell 1-5
points lower.

``C_m`` is the procedures' current ``Cu``, annealed by
:class:`~structssl.training.callbacks.GeometricCuSchedule` (1e-4, tripled every five rounds, up
to 1). Test-set inference is collective: the whole evaluation batch is one corpus decoded with
the constraints (``test_constraints=True``, seed 004 section 6), with the same components.
Seed 004's protocol through ``pl.Trainer``: one supervised epoch first
(:class:`~structssl.training.callbacks.SupervisedWarmStart`), then one epoch per round with C_m
annealed by :class:`~structssl.training.callbacks.GeometricCuSchedule` (``delay_epochs=1``);
``benchmarks/bench_multilabel.py`` runs every reproduction that way.

The constraint rates and the multipliers are saved with the checkpoint (``on_save_checkpoint``)
and restored on load, together with the module's ``current_Cu`` buffer and the callback state,
so a resumed run continues the same annealing (CoDL+'s round counter too).

Several processes (Lightning DDP): the constraint rates are estimated from the labeled labels
of all ranks, the label assignment and the collective evaluation decoding run on the
potentials of the whole corpus gathered from all ranks (each keeps its own examples' labels;
the multipliers are the same on every rank), and the objective and gradient of every L-BFGS
evaluation are reduced across ranks (:mod:`structssl.training.distributed`); N processes
compute what one computes. CoDL+ (a sequential perceptron over the shuffled corpus) refuses
``world_size > 1``.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

import torch
from torch import Tensor, nn

from structssl.inference.dual_decomposition import (
    Components,
    CorpusDualDecomposition,
    CorpusLinearConstraints,
    CorpusMultipliers,
    ExactComponent,
    StarTreeComponents,
)
from structssl.inference.multilabel_constraints import multilabel_constraints
from structssl.losses.likelihood import CompositeLikelihoodLoss
from structssl.structures.base import Potentials, Structure
from structssl.structures.multilabel import PairwiseMultiLabel
from structssl.training import distributed
from structssl.training.modules import Batch, ObjectiveTerms, StructuredModule

__all__ = [
    "ConstrainedSelfLabelingModule",
    "CompositeLikelihoodModule",
    "TSVMPlusModule",
    "CoDLPlusModule",
    "annealing_schedule",
]

Mode = Literal["approximate", "exact"]
ConstraintKind = Literal["none", "ldc", "lcc", "both"]
MODES: tuple[str, ...] = ("approximate", "exact")
CONSTRAINT_KINDS: tuple[str, ...] = ("none", "ldc", "lcc", "both")


def annealing_schedule(
    start: float = 1e-4, factor: float = 3.0, rounds_per_value: int = 5, num_values: int = 9
) -> list[float]:
    """Seed 004's C_m per round: ``start * factor^k`` (capped at 1), ``rounds_per_value`` each.

    The default gives the paper's 45 rounds (1e-4, 3e-4, ..., 0.6561).
    """
    if not (start > 0 and factor > 1 and rounds_per_value >= 1 and num_values >= 1):
        raise ValueError(
            "start must be > 0, factor > 1, rounds_per_value >= 1 and num_values >= 1; got "
            f"{start!r}, {factor!r}, {rounds_per_value!r}, {num_values!r}"
        )
    return [min(1.0, start * factor**k) for k in range(num_values) for _ in range(rounds_per_value)]


class ConstrainedSelfLabelingModule(StructuredModule):
    """Base of seed 004's procedures (see the module docstring): constrained label assignment.

    Subclasses implement :meth:`labeled_loss` and :meth:`unlabeled_loss` (or override
    :meth:`update`).

    Args:
        structure: a :class:`~structssl.structures.multilabel.PairwiseMultiLabel`.
        scorer: inputs -> potentials (e.g. ``MultiLabelScorer(K, input_dim=D,
            pairwise="linear")``).
        constraints: ``"none"``, ``"ldc"``, ``"lcc"`` or ``"both"`` (seed 004 Table 3), the
            rates estimated from the first labeled batch seen.
        constraint_tolerance: half-width of the rate bands (0: the paper's equalities).
        inference: ``"approximate"`` (star-tree dual decomposition) or ``"exact"``
            (enumeration, small K).
        engine: the corpus dual decomposition options (default ``CorpusDualDecomposition()``).
        test_constraints: decode evaluation batches collectively with the constraints.
        C: ``sigma^2`` of the Gaussian prior ``-||w||^2 / (2 sigma^2)`` (1 in seed 004).
        Cu: final weight C_m of the unlabeled mean loss (1 in seed 004).
        lbfgs_max_iter: L-BFGS iterations per training step.
        **kwargs: the options of :class:`~structssl.training.modules.StructuredModule`
            (``optimizer``, ``lr``, ``lbfgs_history``, ``momentum``, ``regularize_bias``,
            ``num_labeled``, ``num_unlabeled``); the task is ``"multilabel"``.
    """

    uses_unlabeled = True
    convergence_refusal = (
        "each round reassigns the pseudo-labels under the corpus constraints and starts a "
        "fresh model update, on seed 004's schedule of rounds; set the number of rounds "
        "with trainer.max_epochs"
    )

    def __init__(
        self,
        structure: Structure,
        scorer: nn.Module,
        constraints: ConstraintKind = "both",
        constraint_tolerance: float = 0.0,
        inference: Mode = "approximate",
        engine: Optional[CorpusDualDecomposition] = None,
        test_constraints: bool = True,
        C: float = 1.0,
        Cu: float = 1.0,
        lbfgs_max_iter: int = 25,
        **kwargs: Any,
    ) -> None:
        if not isinstance(structure, PairwiseMultiLabel):
            raise NotImplementedError(
                f"{type(self).__name__} is implemented for PairwiseMultiLabel; got {structure!r}"
            )
        super().__init__(
            structure, scorer, C, Cu, lbfgs_max_iter=lbfgs_max_iter, task="multilabel", tags=None,
            **kwargs,
        )
        if constraints not in CONSTRAINT_KINDS:
            raise ValueError(f"constraints must be one of {CONSTRAINT_KINDS}; got {constraints!r}")
        if inference not in MODES:
            raise ValueError(f"inference must be one of {MODES}; got {inference!r}")
        if engine is not None and not isinstance(engine, CorpusDualDecomposition):
            raise TypeError(f"engine must be a CorpusDualDecomposition; got {type(engine).__name__}")
        self.constraint_kind = constraints
        self.constraint_tolerance = float(constraint_tolerance)
        self.inference = inference
        self.engine = engine if engine is not None else CorpusDualDecomposition()
        self.test_constraints = bool(test_constraints)
        self._components: Optional[Components] = None
        self.constraints: Optional[CorpusLinearConstraints] = None
        self._constraints_fitted = False
        self.multipliers: Optional[CorpusMultipliers] = None
        self.pseudo_labels: Optional[Tensor] = None
        #: per-round record of the label assignment (primal, dual, violation)
        self.assignment_history: list[dict[str, float]] = []

    @property
    def components(self) -> Components:
        """The inference components: the K star trees (approximate inference) or the whole
        graph by enumeration (exact); built on first use, once K is known (given, or from the
        data at setup)."""
        if self._components is None:
            k = self.structure.num_labels
            if not k:
                raise ValueError(
                    f"{type(self).__name__}: the structure's num_labels is not set: give it, or "
                    "train through a data module that gives it"
                )
            self._components = (
                StarTreeComponents(k) if self.inference == "approximate" else ExactComponent(self.structure)
            )
        return self._components

    # ------------------------------------------------------------------ constraints
    def fit_constraints(self, labels: Tensor) -> Optional[CorpusLinearConstraints]:
        """Estimate the corpus constraints from labeled data (once; later calls keep them).

        Shape:
            labels: (n, K).
        """
        if not self._constraints_fitted:
            labels, _ = distributed.gather_rows(labels)  # the rates of all ranks' labeled data
            self.constraints = multilabel_constraints(
                self.constraint_kind, labels, self.constraint_tolerance
            )
            self._constraints_fitted = True
        return self.constraints

    # ------------------------------------------------------------------ inference
    def infer(
        self, potentials: Potentials, constrained: bool = True, warm: bool = False
    ) -> Tensor:
        """Collective (corpus) inference of a batch, with the constraints when ``constrained``.

        Returns labels (B, K); with ``warm`` the multipliers are written to
        :attr:`multipliers` (the unlabeled corpus's, for the next round and checkpoints) and
        the corpus multipliers read from it.
        """
        constraints = self.constraints if constrained else None
        mine: Optional[slice] = None
        if constraints is not None and distributed.is_distributed():
            # a corpus-level problem: solved on the whole corpus (all ranks' examples) on
            # every rank alike, each rank keeping its own examples' labels
            potentials, mine = distributed.gather_potentials(potentials)
        start: Optional[CorpusMultipliers] = None
        if warm and self.multipliers is not None:
            # the corpus multipliers carry over from round to round; the per-example ones
            # (nu) start afresh: they are tied to positions in the batch, which need not be
            # the same examples from one round to the next (shuffling, several processes),
            # and carried over they amplify rounding noise round after round, so that the
            # labels would depend on the number of processes or threads
            m = self.multipliers
            start = CorpusMultipliers(m.lower, m.upper, m.nu.new_zeros(0))
        result = self.engine(potentials, self.components, constraints, start)
        if warm:
            self.multipliers = result.multipliers
            self.assignment_history.append(
                {"primal": result.primal, "dual": result.dual, "violation": result.violation}
            )
        return result.labels if mine is None else result.labels[mine]

    def decode(self, batch: Batch) -> Tensor:
        """Evaluation decoding: collective with the constraints when ``test_constraints``."""
        with torch.no_grad():
            pot = self.decode_potentials(batch)
        return self.infer(pot, constrained=self.test_constraints and self.constraints is not None)

    def assign(self, unlabeled: Batch) -> Tensor:
        """Label assignment of the unlabeled batch (step 1 of a round); stores and returns it."""
        with torch.no_grad():
            pot = self.potentials(unlabeled)
        self.pseudo_labels = self.infer(pot, constrained=True, warm=True)
        return self.pseudo_labels

    # ------------------------------------------------------------------ losses
    def labeled_loss(self, potentials: Potentials, labels: Tensor) -> Tensor:
        """Mean loss of labeled examples."""
        raise NotImplementedError

    def unlabeled_loss(self, potentials: Potentials, labels: Tensor) -> Tensor:
        """Mean loss of the pseudo-labeled examples (default: the labeled loss)."""
        return self.labeled_loss(potentials, labels)

    def objective_terms(self, batch: Batch) -> ObjectiveTerms:
        labeled, unlabeled = self._split(batch)
        value = self.labeled_loss(self.potentials(labeled), labeled["labels"])
        u_value: Optional[Tensor] = None
        if unlabeled is not None and self.pseudo_labels is not None and self.current("Cu") > 0:
            u_value = self.unlabeled_loss(self.potentials(unlabeled), self.pseudo_labels)
        return self._combine(self.weight_norm_squared(), value, u_value)

    def objective_weights(self) -> tuple[float, float, float]:
        """Seed 004's objective (eqs. 2, 5), negated: ``||w||^2 / (2 C) + mean_L loss + C_u
        mean_U loss`` (``C = sigma^2``, ``C_u`` = the current C_m): ``(2 C, 1, C_u)``."""
        return 2 * self.current("C"), 1.0, self.current("Cu")

    def eval_loss(self, batch: Batch) -> Tensor:
        return self.labeled_loss(self.potentials(batch), batch["labels"])

    # ------------------------------------------------------------------ a round
    def update(self, batch: Batch, optimizer: Optional[Any] = None) -> ObjectiveTerms:
        """Step 2 of a round: minimise the objective at fixed pseudo-labels (L-BFGS by default)."""
        if optimizer is None:
            optimizer = self._fresh_optimizer()
        last: dict[str, ObjectiveTerms] = {}

        def evaluate() -> ObjectiveTerms:
            terms = self.objective_terms(batch)
            if self._trainer is not None:
                self.manual_backward(terms.objective)
            else:
                terms.objective.backward()
            return terms

        def closure() -> Tensor:
            optimizer.zero_grad()
            # several processes: the whole corpus's objective and gradient on every rank
            terms = distributed.reduced_evaluation(self, evaluate)
            last["terms"] = terms
            return terms.objective

        self._precondition(optimizer, batch)
        optimizer.step(closure=closure)
        return last["terms"]

    def _fresh_optimizer(self) -> torch.optim.Optimizer:
        opt = self.configure_optimizers()
        assert isinstance(opt, torch.optim.Optimizer)
        return opt

    def round(self, batch: Batch, optimizer: Optional[Any] = None) -> ObjectiveTerms:
        """One round: fit the constraints (first time), assign ``Y_U``, update the model."""
        labeled, unlabeled = self._split(batch)
        self.fit_constraints(labeled["labels"])
        if unlabeled is not None and self.current("Cu") > 0:
            self.assign(unlabeled)
        return self.update(batch, optimizer)

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        opt = self.optimizers()
        distributed.set_shard_shares(self, batch)
        inner = getattr(opt, "optimizer", opt)
        if isinstance(inner, torch.optim.LBFGS):
            inner.state.clear()  # a fresh L-BFGS run of lbfgs_max_iter iterations per round
        terms = self.round(batch, opt)
        labeled, _ = self._split(batch)
        log = dict(on_step=False, on_epoch=True, batch_size=int(labeled["inputs"].shape[0]),
                   sync_dist=True)
        self.log("train/objective", terms.objective.detach(), prog_bar=True, **log)
        self.log("train/labeled_loss", terms.labeled_loss.detach(), **log)
        self.log("train/unlabeled_loss", terms.unlabeled_loss.detach(), **log)
        self.log("train/Cu", self.current("Cu"), **log)
        if self.assignment_history:
            last = self.assignment_history[-1]
            self.log("train/assignment_violation", last["violation"], **log)
        return terms.objective.detach()

    # ------------------------------------------------------------------ checkpoints
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        state: dict[str, Any] = {"fitted": self._constraints_fitted}
        if self.constraints is not None:
            c = self.constraints
            state["constraints"] = {
                "features": [f.cpu() for f in c.features], "lower": c.lower.cpu(),
                "upper": c.upper.cpu(), "names": c.names,
            }
        if self.multipliers is not None:
            state["multipliers"] = self.multipliers.state_dict()
        if self.pseudo_labels is not None:
            state["pseudo_labels"] = self.pseudo_labels.cpu()
        checkpoint["structssl_corpus_inference"] = state

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        state = checkpoint.get("structssl_corpus_inference")
        if state is None:
            return
        self._constraints_fitted = bool(state["fitted"])
        if "constraints" in state:
            c = state["constraints"]
            self.constraints = CorpusLinearConstraints(
                tuple(c["features"]), c["lower"], c["upper"], c["names"]
            )
        if "multipliers" in state:
            self.multipliers = CorpusMultipliers.from_state_dict(state["multipliers"])
        if "pseudo_labels" in state:
            self.pseudo_labels = state["pseudo_labels"]


class CompositeLikelihoodModule(ConstrainedSelfLabelingModule):
    """Seed 004's semi-supervised composite likelihood (eq. 5), see the module docstring.

    Args:
        learning: ``"approximate"`` (composite likelihood over the K spanning star trees) or
            ``"exact"`` (full likelihood, log-partition by enumeration: small K only).
        structure, scorer: see :class:`ConstrainedSelfLabelingModule`.
        **kwargs: the options of :class:`ConstrainedSelfLabelingModule` (``constraints``,
            ``constraint_tolerance``, ``inference``, ``engine``, ``test_constraints``, ``C``,
            ``Cu``, ``lbfgs_max_iter``, ...).
    """

    def __init__(
        self,
        structure: Structure,
        scorer: nn.Module,
        learning: Mode = "approximate",
        **kwargs: Any,
    ) -> None:
        super().__init__(structure, scorer, **kwargs)
        if learning not in MODES:
            raise ValueError(f"learning must be one of {MODES}; got {learning!r}")
        self.learning = learning
        self.loss = CompositeLikelihoodLoss("star_trees" if learning == "approximate" else "whole")

    def losses(self) -> list[nn.Module]:
        return [self.loss]

    def labeled_loss(self, potentials: Potentials, labels: Tensor) -> Tensor:
        return self.loss(self.structure, potentials, labels)


class TSVMPlusModule(ConstrainedSelfLabelingModule):
    """TSVM+ (seed 004 section 6.5): transductive structural SVM by CCCP with the corpus engine.

    Loss of an example with target ``y``: ``max_y' [s(y') + Delta(y, y')] - s(y)`` (Hamming
    ``Delta``, margin rescaling); the loss-augmented argmax uses the procedure's components
    (star-tree dual decomposition for ``inference="approximate"``). The unlabeled targets are
    the constrained label assignment (the CCCP linearisation), re-done every round.

    Args: see :class:`ConstrainedSelfLabelingModule`.
    """

    def labeled_loss(self, potentials: Potentials, labels: Tensor) -> Tensor:
        structure = self.structure
        aug = structure.cost_augmented_potentials(potentials, labels)
        with torch.no_grad():
            worst = self.engine(
                tuple(x.detach() for x in aug), self.components, None  # type: ignore[arg-type]
            ).labels
        margin = structure.score(aug, worst) - structure.score(potentials, labels)
        return margin.clamp_min(0).mean()


class CoDLPlusModule(ConstrainedSelfLabelingModule):
    """CoDL+ (seed 004 section 6.5): constraint-driven self-training with an averaged perceptron.

    Each round retrains an averaged structured perceptron (``perceptron_epochs`` passes over
    the labeled and pseudo-labeled examples in shuffled mini-batches of ``perceptron_batch``,
    decoding with the procedure's components; pseudo-labeled updates are weighted by ``C_m``)
    and loads the averaged weights into the scorer. ``C`` / ``optimizer`` are unused (the
    perceptron has no regularizer); ``Cu`` is the final ``C_m``.

    Args:
        perceptron_epochs: passes per round, >= 1.
        perceptron_batch: mini-batch size, >= 1.
        seed: the shuffling seed.
        Cu: the final ``C_m``.
        structure, scorer: see :class:`ConstrainedSelfLabelingModule`.
        **kwargs: the options of :class:`ConstrainedSelfLabelingModule` (``constraints``,
            ``constraint_tolerance``, ``inference``, ``engine``, ``test_constraints``,
            ``num_labeled``, ``num_unlabeled``).
    """

    sharding_refusal = (
        "its averaged perceptron makes sequential passes over the whole shuffled corpus, "
        "which cannot be split across processes without changing the result; train it on one "
        "process (--trainer.devices=1), or use CompositeLikelihoodModule / TSVMPlusModule, "
        "which reduce their statistics across processes"
    )

    def __init__(
        self,
        structure: Structure,
        scorer: nn.Module,
        Cu: float = 1.0,
        perceptron_epochs: int = 3,
        perceptron_batch: int = 32,
        seed: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            structure, scorer, C=1.0, Cu=Cu, optimizer="sgd", lr=1.0, lbfgs_max_iter=25,
            lbfgs_history=10, momentum=0.0, regularize_bias=True, **kwargs,
        )
        for name, value in (("perceptron_epochs", perceptron_epochs), ("perceptron_batch", perceptron_batch)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1; got {value!r}")
        self.perceptron_epochs = perceptron_epochs
        self.perceptron_batch = perceptron_batch
        self.seed = int(seed)
        self._round_index = 0

    def labeled_loss(self, potentials: Potentials, labels: Tensor) -> Tensor:
        """Mean perceptron loss ``s(argmax) - s(y)`` (>= 0 up to the approximation)."""
        with torch.no_grad():
            pred = self.engine(
                tuple(x.detach() for x in potentials), self.components, None  # type: ignore[arg-type]
            ).labels
        return (self.structure.score(potentials, pred) - self.structure.score(potentials, labels)).mean()

    def update(self, batch: Batch, optimizer: Optional[Any] = None) -> ObjectiveTerms:
        labeled, unlabeled = self._split(batch)
        inputs = [labeled["inputs"]]
        targets = [labeled["labels"]]
        weights = [labeled["inputs"].new_ones(labeled["inputs"].shape[0])]
        cm = self.current("Cu")
        if unlabeled is not None and self.pseudo_labels is not None and cm > 0:
            inputs.append(unlabeled["inputs"])
            targets.append(self.pseudo_labels.to(labeled["labels"].device))
            weights.append(unlabeled["inputs"].new_full((unlabeled["inputs"].shape[0],), cm))
        x, y, w = torch.cat(inputs), torch.cat(targets), torch.cat(weights)
        params = [p for p in self.scorer.parameters() if p.requires_grad]
        with torch.no_grad():
            for p in params:
                p.zero_()
        avg = [torch.zeros_like(p) for p in params]
        count = 0
        gen = torch.Generator().manual_seed(self.seed + 7919 * self._round_index)
        self._round_index += 1
        for _ in range(self.perceptron_epochs):
            order = torch.randperm(x.shape[0], generator=gen).to(x.device)
            for lo in range(0, x.shape[0], self.perceptron_batch):
                idx = order[lo : lo + self.perceptron_batch]
                pot = self.scorer(x[idx])
                with torch.no_grad():
                    pred = self.engine(
                        tuple(t.detach() for t in pot), self.components, None  # type: ignore[arg-type]
                    ).labels
                wrong = (pred != y[idx]).any(1).to(w.dtype) * w[idx]
                if bool(wrong.any()):
                    diff = self.structure.score(pot, pred) - self.structure.score(pot, y[idx])
                    for p in params:
                        p.grad = None
                    (wrong * diff).sum().backward()
                    with torch.no_grad():
                        for p in params:
                            if p.grad is not None:
                                p.sub_(p.grad)
                with torch.no_grad():
                    for a, p in zip(avg, params):
                        a.add_(p)
                count += 1
        with torch.no_grad():
            for a, p in zip(avg, params):
                p.copy_(a / max(count, 1))
                p.grad = None
        zero = x.new_zeros(())
        if optimizer is not None:
            # a step that changes nothing (no gradients) but counts: Lightning's global_step
            # advances one per round, so ModelCheckpoint writes during training
            optimizer.step(closure=lambda: zero)
        return ObjectiveTerms(zero, zero, zero, zero)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint["structssl_corpus_inference"]["round_index"] = self._round_index

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        state = checkpoint.get("structssl_corpus_inference") or {}
        if "round_index" in state:
            self._round_index = int(state["round_index"])

