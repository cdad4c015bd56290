"""nabla-TSVM (thesis OP 7.4) as a procedure, on the base of the procedures with an unlabeled
term on pseudo-labels and its safeguards (:class:`SafeguardedModule`)."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import pytorch_lightning as pl
import torch
from torch import Tensor, nn

from structssl.losses import NablaSVMLoss, NablaTSVMLoss
from structssl.losses.nabla import LabelBalanceLoss, label_proportions
from structssl.structures.base import Potentials, Structure
from structssl.training.modules import (
    Batch,
    ObjectiveTerms,
    StructuredModule,
    _optional_count,
    _positive,
)

__all__ = ["SafeguardedModule", "TransductiveModule"]


class SafeguardedModule(StructuredModule):
    """Base of the procedures with an unlabeled term on pseudo-labels (nabla-TSVM, nabla-coSVM):
    the safeguards against a collapse of the pseudo-labels (issue 17), as constructor options.

    Args:
        structure, scorer: see :class:`~structssl.training.modules.StructuredModule`.
        C: labeled weight. Cu: unlabeled weight.
        warm_start_epochs: safeguard: labeled-only epochs before the unlabeled term enters
            (C_u = 0, unlabeled batches not scored; a
            :class:`~structssl.training.callbacks.SupervisedWarmStart`), so that the first
            pseudo-labels come from a trained supervised model, not from the initial weights.
        cu_start: safeguard: anneal C_u from ``Cu * cu_start`` (in (0, 1]), times ``cu_factor``
            per epoch up to ``Cu``, from the end of the warm start (a ``GeometricAnnealing`` of
            ``"Cu"``; ``None``: no schedule of its own, e.g. a ``CuRamp`` in the trainer).
        cu_factor: growth of C_u per epoch with ``cu_start`` (> 1).
        balance_weight: safeguard: weight ``lambda`` of the label-balance constraint
            ``lambda * sum_c (pbar_c - q_c)^2`` (:class:`~structssl.losses.nabla.LabelBalanceLoss`)
            added to ``J`` while the unlabeled term is active: ``pbar`` the expected label
            proportions on the unlabeled batch, ``q`` those of the labeled data (thesis ch. 7).
            Prevents a one-label (all-``O``) collapse of the pseudo-labels. 0 = off; logged as
            ``train/balance_penalty``.
        balance_temperature: temperature of the marginals in the balance penalty.
        label_proportions: ``q`` (one value per label, summing to 1); default: counted on the
            data module's labeled split at the start of fit (else on each labeled batch).
        **kwargs: the options of :class:`~structssl.training.modules.StructuredModule`.
    """

    uses_unlabeled = True

    def __init__(
        self,
        structure: Structure,
        scorer: nn.Module,
        C: float = 1.0,
        Cu: float = 1.0,
        warm_start_epochs: int = 0,
        cu_start: Optional[float] = None,
        cu_factor: float = 2.0,
        balance_weight: float = 0.0,
        balance_temperature: float = 1.0,
        label_proportions: Optional[Sequence[float]] = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(structure, scorer, C, Cu, **kwargs)
        self._init_safeguards(
            warm_start_epochs, cu_start, cu_factor, balance_weight, balance_temperature,
            label_proportions,
        )

    # ------------------------------------------------------------------ safeguards
    def _init_safeguards(
        self,
        warm_start_epochs: int,
        cu_start: Optional[float],
        cu_factor: float,
        balance_weight: float,
        balance_temperature: float,
        label_proportions: Optional[Sequence[float]],
    ) -> None:
        from structssl.training.callbacks import safeguard_callbacks

        self.warm_start_epochs = _optional_count(warm_start_epochs, "warm_start_epochs", 0) or 0
        self.cu_start = None if cu_start is None else _positive(cu_start, "cu_start")
        if self.cu_start is not None and self.cu_start > 1:
            raise ValueError(f"cu_start must be in (0, 1]; got {cu_start!r}")
        self.cu_factor = _positive(cu_factor, "cu_factor")
        if self.cu_factor <= 1:
            raise ValueError(f"cu_factor must be > 1; got {cu_factor!r}")
        safeguard_callbacks(self.warm_start_epochs, self.cu_start, self.cu_factor)  # validates
        self.balance_weight = _positive(balance_weight, "balance_weight", allow_zero=True)
        self.balance_loss = LabelBalanceLoss(balance_temperature)
        self._given_proportions: Optional[Tensor] = None
        if label_proportions is not None:
            q = torch.as_tensor(list(label_proportions), dtype=torch.float64)
            num = getattr(self.structure, "num_labels", None)
            if q.dim() != 1 or (num is not None and q.shape != (num,)) or bool((q < 0).any()):
                raise ValueError(
                    f"label_proportions must be {num} non-negative values (one per label); got "
                    f"{list(label_proportions)!r}"
                )
            if abs(float(q.sum()) - 1.0) > 1e-6:
                raise ValueError(f"label_proportions must sum to 1; got sum {float(q.sum())}")
            self._given_proportions = q
        #: ``q`` of the balance constraint (empty until known: given, or counted at fit start)
        self.register_buffer(
            "label_proportions",
            torch.zeros(0, dtype=torch.float64) if self._given_proportions is None
            else self._given_proportions.clone(),
            persistent=False,
        )

    def configure_callbacks(self) -> list[pl.Callback]:
        """The safeguard callbacks (C_u annealing, supervised warm start) of the options; none
        outside ``fit`` (a schedule of C_u has nothing to do in ``test`` or ``validate``, and
        Lightning would announce that they replace the fit's own)."""
        from structssl.training.callbacks import safeguard_callbacks

        trainer = self._trainer
        if trainer is not None and trainer.state.fn is not None and trainer.state.fn != "fit":
            return []
        return safeguard_callbacks(self.warm_start_epochs, self.cu_start, self.cu_factor)

    def on_fit_start(self) -> None:
        StructuredModule.on_fit_start(self)
        if self.balance_weight == 0 or self._given_proportions is not None:
            return
        dm = self._datamodule()
        examples = getattr(dm, "splits", {}).get("labeled") if dm is not None else None
        num = getattr(self.structure, "num_labels", None)
        if examples and num:
            labels = torch.cat([ex["labels"].reshape(-1) for ex in examples])
            self.label_proportions = label_proportions(labels, num).to(self.device)

    def _balance(
        self, labeled: Batch, unlabeled: Batch, potentials: Sequence[Potentials]
    ) -> Optional[Tensor]:
        """Sum over ``potentials`` of the balance penalty; None when the constraint is off."""
        if self.balance_weight == 0:
            return None
        q = self.label_proportions
        if q.numel() == 0:  # no data module split: the labeled batch's proportions
            num = int(self.structure.num_labels)
            q = label_proportions(labeled["labels"], num, labeled.get("lengths"))
        lengths = unlabeled.get("lengths")
        total = sum(self.balance_loss(self.structure, p, q, lengths) for p in potentials)
        assert isinstance(total, Tensor)
        size = int(unlabeled["inputs"].shape[0])
        self.log("train/balance_penalty", total.detach(), on_step=False, on_epoch=True,
                 batch_size=size, sync_dist=True)
        return total

    def _with_balance(self, terms: ObjectiveTerms, penalty: Optional[Tensor]) -> ObjectiveTerms:
        if penalty is None:
            return terms
        return terms._replace(objective=terms.objective + self.balance_weight * penalty)


class TransductiveModule(SafeguardedModule):
    """nabla-TSVM (thesis OP 7.4): labeled nabla-SVM loss plus ``C_u`` times the unlabeled loss.

    ``J = ||w||^2 / (2n) + C mean_i xi_i + C_u (m/n) mean_j xi*_j`` with ``xi_i`` the labeled
    loss (default :class:`~structssl.losses.NablaSVMLoss`) and ``xi*_j`` the unlabeled loss
    (default :class:`~structssl.losses.NablaTSVMLoss`: the pseudo-label is the current argmax,
    re-decoded at every evaluation). Anneal ``C`` / ``C_u`` / ``rho`` with the callbacks of
    :mod:`structssl.training.callbacks` (the thesis's barrier and ramp: ``CBarrier``,
    ``CuRamp``).

    Args:
        structure: the structure.
        scorer: inputs -> potentials.
        loss: labeled loss (default ``NablaSVMLoss()``).
        unlabeled_loss: unlabeled loss ``u(structure, potentials, None, lengths)`` (default
            ``NablaTSVMLoss()``).
        C: labeled weight. Cu: unlabeled weight (1 = same weight per example as a labeled one).
        **kwargs: the safeguards of :class:`SafeguardedModule` (``warm_start_epochs``,
            ``cu_start``, ``cu_factor``, ``balance_weight``, ``balance_temperature``,
            ``label_proportions``) and the options of
            :class:`~structssl.training.modules.StructuredModule` (``optimizer``, ``lr``, ...).
    """

    def __init__(
        self,
        structure: Structure,
        scorer: nn.Module,
        loss: Optional[nn.Module] = None,
        unlabeled_loss: Optional[nn.Module] = None,
        C: float = 1.0,
        Cu: float = 1.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(structure, scorer, C, Cu, **kwargs)
        self.loss = NablaSVMLoss() if loss is None else loss
        self.unlabeled_loss = NablaTSVMLoss() if unlabeled_loss is None else unlabeled_loss
        for name, value in (("loss", self.loss), ("unlabeled_loss", self.unlabeled_loss)):
            if not isinstance(value, nn.Module):
                raise TypeError(f"{name} must be an nn.Module; got {type(value).__name__}")
        self._init_rho()

    def losses(self) -> list[nn.Module]:
        return [self.loss, self.unlabeled_loss]

    @property
    def supports_chunks(self) -> bool:  # type: ignore[override]
        """Full batches chunk by chunk (labeled and unlabeled; see
        :attr:`StructuredModule.supports_chunks`), unless the label-balance penalty, which is
        not additive over examples, is on."""
        return self.balance_weight == 0

    def labeled_term(self, batch: Batch) -> Tensor:
        pot = self.potentials(batch)
        return self.loss(self.structure, pot, batch["labels"], batch.get("lengths"))

    def unlabeled_term(self, batch: Batch) -> Tensor:
        pot = self.potentials(batch)
        return self.unlabeled_loss(self.structure, pot, None, batch.get("lengths"))

    def objective_terms(self, batch: Batch) -> ObjectiveTerms:
        labeled, unlabeled = self._split(batch)
        value = self.labeled_term(labeled)
        u_value: Optional[Tensor] = None
        penalty: Optional[Tensor] = None
        if unlabeled is not None and self.current("Cu") > 0:
            u_pot = self.potentials(unlabeled)
            u_value = self.unlabeled_loss(self.structure, u_pot, None, unlabeled.get("lengths"))
            penalty = self._balance(labeled, unlabeled, [u_pot])
        terms = self._combine(self.weight_norm_squared(), value, u_value)
        return self._with_balance(terms, penalty)

    def eval_loss(self, batch: Batch) -> Tensor:
        return self.labeled_term(batch)
