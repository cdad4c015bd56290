"""Constraint-driven learning (CoDL; Chang, Ratinov and Roth 2007) for sequences.

The constraint-guided self-training baseline that seed 000 (Table 1) and seed 003 (Table 2)
compare with, Algorithm 1 of Chang et al. with the module's loss as the learner::

    w0 = learn(L)                                  # supervised_epochs epochs on the labeled data
    repeat (one training epoch = one round):
        Y_j = argmax_y s_j(y; w) - rho P_j(y)      # every unlabeled x_j, the current w
        w' = learn({(x_j, Y_j)})                   # from w0, the pseudo-labeled set alone
        w  = gamma w0 + (1 - gamma) w'

``P_j`` is the instance-level penalty of the constraint set (each constraint's ``weight`` per
violation; hard constraints reject a labeling) and ``rho`` is ``penalty_scale``. The
constraint-guided argmax is exact for the penalties linear in the parts (word, first-label and
punctuation-transition rules), which are folded into the potentials; the others (global rules,
hard constraints) rerank the ``search_k`` best labelings of the folded potentials
(:func:`~structssl.constraints.kbest_search`, the k-best list only for the examples whose
argmax violates one; Chang et al. use a beam search). ``learn(T)`` minimises
``||w||^2 / (2 n) + C_u (m / n) mean_j l(x_j, Y_j; w)`` (times ``n``: ``||w||^2 / 2 + C_u
sum_j l_j``, the labeled objective's scaling with the pseudo-labeled set in place of the
labeled one) for ``lbfgs_max_iter`` optimiser iterations, starting from ``w0`` with a fresh
optimiser state; the labeled set enters through ``w0``. Chang et al. train an HMM by counting
on top-K lists of pseudo-labelings; here each unlabeled example gets its single best labeling
(their K = 1) and the learner is any structured loss (hinge, CRF likelihood).

``constrained_decoding=True`` decodes every batch of :meth:`decode` (validation and test in
``fit`` / ``test``) with the same search, the constraints used at inference: Chang et al.'s and
seed 000's "CODL (I)"; without it, the plain argmax ("no I"). Token constraints need evaluation
examples that carry ``tokens`` (checked at setup). ``structssl predict`` decodes with the
model's ``decode``, so with the search when ``constrained_decoding`` is on (``--constraints
true|false`` switches it); its ``--confidence`` and ``--kbest`` columns are the unconstrained
model's marginals and k-best list.

The constraint-guided search (:meth:`guided_argmax`, ``constrained_decoding``,
``penalty_scale``, ``search_k``) is :class:`~structssl.training.label_switching.
LabelSwitchingModule`'s, shared with label switching, which can decode with it too. The module
reuses the rest of its machinery: the unlabeled labels ``Y`` stored per example (``index``), the whole unlabeled set
in every step (one batch or length chunks), the per-epoch ``history`` and the checks at setup.
Its state (``Y``, ``w0``) is saved in checkpoints.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor, nn

from structssl.constraints import ConstraintSet
from structssl.structures.base import Structure
from structssl.structures.linear_chain import LinearChain
from structssl.training.label_switching import LabelSwitchingModule
from structssl.training.modules import Batch, ObjectiveTerms, as_chunks

__all__ = ["CoDLModule"]


class CoDLModule(LabelSwitchingModule):
    """Constraint-driven learning (see the module docstring).

    Args:
        structure: a :class:`~structssl.structures.LinearChain`.
        scorer: inputs -> potentials.
        constraints: a :class:`~structssl.constraints.ConstraintSet` of instance-level
            constraints (bound to the data module's ``label_names`` at setup when unbound).
        loss: the learner's loss, on the labeled set (``w0``) and on the pseudo-labeled set
            (default ``StructuredHingeLoss()``).
        C: labeled loss weight (``learn(L)``).
        Cu: pseudo-labeled loss weight (``learn(T)``; default ``C``).
        gamma: weight of ``w0`` in each round's interpolation, in [0, 1] (0.9 in Chang et al.).
        penalty_scale: ``rho``, the multiplier of the constraint penalties in the label
            assignment, >= 0 (0: plain self-training).
        search_k: candidates of the k-best search per example, >= 1.
        constrained_decoding: decode evaluation batches with the constraint-guided search.
        supervised_epochs: epochs of ``learn(L)`` before the first round.
        **kwargs: the options of :class:`~structssl.training.modules.StructuredModule`
            (``optimizer``, ``lr``, ``lbfgs_max_iter``, ``lbfgs_history``, ``momentum``,
            ``regularize_bias``, ``num_labeled``, ``num_unlabeled``, ``task``, ``tags``).
    """

    sharding_refusal = (
        "its unlabeled labels Y are stored per example of the whole unlabeled set and each "
        "round's refit starts from w0 with the optimiser state of one process; train it on one "
        "process (--trainer.devices=1; a GPU runs its dynamic programs)"
    )
    convergence_refusal = (
        "its objective changes with every round's labels and interpolation; set the number of "
        "rounds with trainer.max_epochs (supervised_epochs + rounds)"
    )

    def __init__(
        self,
        structure: Structure,
        scorer: nn.Module,
        constraints: ConstraintSet,
        loss: Optional[nn.Module] = None,
        C: float = 1.0,
        Cu: Optional[float] = None,
        gamma: float = 0.9,
        penalty_scale: float = 1.0,
        search_k: int = 16,
        constrained_decoding: bool = False,
        supervised_epochs: int = 1,
        **kwargs: Any,
    ) -> None:
        if not isinstance(structure, LinearChain):
            raise NotImplementedError(
                f"CoDLModule supports LinearChain structures (its search reranks k-best "
                f"labelings); got {type(structure).__name__}"
            )
        if not isinstance(constraints, ConstraintSet):
            raise TypeError(
                f"constraints must be a ConstraintSet (CoDL's label assignment is guided by "
                f"them); got {type(constraints).__name__}"
            )
        corpus = constraints.select(level="corpus").names
        if corpus:
            raise ValueError(
                f"CoDLModule takes instance-level constraints (its search decodes each example "
                f"alone); got corpus-level {corpus} (use LabelSwitchingModule, or CCCPModule for "
                f"LabelProportion and ExpectedCount)"
            )
        if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be a number in [0.0, 1.0]; got {gamma!r}")
        super().__init__(  # label switching's own options fixed: no switching here
            structure, scorer, constraints, loss, C=C, Cu=Cu,
            supervised_epochs=supervised_epochs, max_switches=None, max_passes=1, block_size=None,
            num_trials=1, bonus=0.0, seed=0, constrained_decoding=constrained_decoding,
            penalty_scale=penalty_scale, search_k=search_k, **kwargs,
        )
        self.gamma = float(gamma)
        #: the supervised weights w0 (set at the first round)
        self._w0: Optional[list[Tensor]] = None

    # ------------------------------------------------------------------ checkpoints
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint["codl_w0"] = None if self._w0 is None else [w.clone() for w in self._w0]

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        saved = checkpoint.get("codl_w0")
        self._w0 = None if saved is None else [w.clone() for w in saved]

    # ------------------------------------------------------------------ the search
    def _weights(self) -> list[nn.Parameter]:
        return [p for p in self.scorer.parameters() if p.requires_grad]

    # ------------------------------------------------------------------ a round
    def switch(self, unlabeled: Any) -> dict[str, Any]:
        """The round's label assignment (``Y_j`` for the current ``w``), then the learner's
        start: the scorer back at ``w0`` (taken at the first round) and a fresh optimiser
        state. Returns the epoch's history entries (``switches``: examples whose labels
        changed)."""
        chunks = self._check_unlabeled(unlabeled)
        params = self._weights()
        if self._w0 is None:
            self._w0 = [p.detach().clone() for p in params]
        with torch.no_grad():
            new = [self.guided_argmax(chunk) for chunk in chunks]
            if self.pseudo_labels.numel() == 0:  # the first round: every example is new
                changed = sum(int(chunk["index"].numel()) for chunk in chunks)
            else:
                old = [self._pseudo(chunk) for chunk in chunks]
                changed = sum(int((o[:, : y.shape[1]] != y).any(1).sum()) for o, y in zip(old, new))
            self._store(chunks, new)
            for p, w in zip(params, self._w0):
                p.copy_(w)
        for opt in self._optimizers():
            opt.state.clear()
        self.last_switches, self.last_budget_exhausted = changed, False
        return {"switches": changed, "switches_per_pass": []}

    def _optimizers(self) -> list[torch.optim.Optimizer]:
        if self._trainer is None:
            return []
        opts = self.optimizers(use_pl_optimizer=False)
        return list(opts) if isinstance(opts, list) else [opts]

    def _interpolate(self) -> None:
        """``w = gamma w0 + (1 - gamma) w'`` (the end of a round)."""
        assert self._w0 is not None
        with torch.no_grad():
            for p, w in zip(self._weights(), self._w0):
                p.mul_(1 - self.gamma).add_(w, alpha=self.gamma)

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        out = super().training_step(batch, batch_idx)
        if self.switching:
            self._interpolate()
        return out

    # ------------------------------------------------------------------ learn(T)
    def _round_terms(self, unlabeled: Any, backward: bool) -> ObjectiveTerms:
        """``||w||^2 / (2n) + C_u (m/n) mean_j l(x_j, Y_j)`` (gradient accumulated chunk by
        chunk when ``backward``)."""
        divisor, _, weight = self.objective_weights()  # (2 n, C, C_u m / n)
        norm = self.weight_norm_squared()
        if backward:
            self.manual_backward(norm / divisor)
            u = self._backward_chunks(unlabeled, self.unlabeled_term, weight).to(norm.dtype)
            norm = norm.detach()
        else:
            u = self._mean(unlabeled, self.unlabeled_term).to(norm.dtype)
        zero = torch.zeros((), dtype=norm.dtype, device=norm.device)
        return ObjectiveTerms(norm / divisor + weight * u, norm, zero, u)

    def objective_terms(self, batch: Batch) -> ObjectiveTerms:
        labeled, unlabeled = self._split(batch)
        if not self._pseudo_term(unlabeled):
            return super().objective_terms(batch)
        return self._round_terms(unlabeled, backward=False)

    def backward_objective(self, batch: Batch) -> ObjectiveTerms:
        labeled, unlabeled = self._split(batch)
        if not self._pseudo_term(unlabeled):
            return super().backward_objective(batch)
        return self._round_terms(as_chunks(unlabeled), backward=True)
