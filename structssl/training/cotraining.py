"""nabla-coSVM (thesis OP 7.5) as a procedure: two views, each trained on the peer view's
predictions."""

from __future__ import annotations

from typing import Any, Optional

from torch import Tensor, nn

from structssl.losses import NablaCoSVMLoss
from structssl.structures.base import Potentials, Structure
from structssl.training.modules import Batch, ObjectiveTerms
from structssl.training.transductive import SafeguardedModule

__all__ = ["CoTrainingModule"]


class CoTrainingModule(SafeguardedModule):
    """nabla-coSVM (thesis OP 7.5): two views, each trained on the peer view's predictions.

    ``J = (||w^a||^2 + ||w^b||^2) / (2n) + C mean_i (xi^a_i + xi^b_i)
    + C_u (m/n) mean_j (xi^a_j + xi^b_j)`` with the loss
    :class:`~structssl.losses.NablaCoSVMLoss`: on labeled examples both views take the gold
    labels, on unlabeled ones view a's target is view b's argmax (a pseudo-label from the peer
    view, no gradient through the choice) and vice versa. Decoding uses the joint potentials
    (the sum of the views').

    Args:
        structure: the structure shared by both views.
        scorer: a two-view scorer, ``scorer(inputs, inputs_b, lengths)`` returning
            :class:`~structssl.scorers.TwoViewPotentials` (e.g. ``TwoViewScorer``).
        loss: the two-view loss (default ``NablaCoSVMLoss()``), called as
            ``loss(structure, potentials_a, potentials_b, target_or_None, lengths)``; the
            unlabeled term, and the labeled one unless ``labeled_loss`` is given.
        labeled_loss: a one-view loss ``l(structure, potentials, labels, lengths)`` (e.g.
            ``CRFNLLLoss``) for the labeled term instead, on the joint potentials (the sum of
            the views', which decodes): the CRF-likelihood + nabla-coSVM recipe of
            ``configs/tagger_ssl_cosvm.yaml``, as ``TransductiveModule``'s ``loss`` +
            ``unlabeled_loss``; its warm start is then the supervised CRF on all features. (On
            CoNLL-2002 Spanish, 100 tagged sentences, draw 0, the joint CRF reached dev span F1
            56.8 after the warm start, each view's own CRF summed 54.2, both 53.8.) None:
            ``loss`` with the gold labels.
        C: labeled weight. Cu: unlabeled weight.
        **kwargs: the safeguards of :class:`~structssl.training.transductive.SafeguardedModule`
            (the balance penalty is applied to each view's potentials on the unlabeled batch,
            each view's labeling being the other's target, and summed) and the options of
            :class:`~structssl.training.modules.StructuredModule`.
    """

    def __init__(
        self,
        structure: Structure,
        scorer: nn.Module,
        loss: Optional[nn.Module] = None,
        labeled_loss: Optional[nn.Module] = None,
        C: float = 1.0,
        Cu: float = 1.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(structure, scorer, C, Cu, **kwargs)
        self.loss = NablaCoSVMLoss() if loss is None else loss
        self.labeled_loss = labeled_loss
        if not isinstance(self.loss, nn.Module):
            raise TypeError(f"loss must be an nn.Module; got {type(self.loss).__name__}")
        if labeled_loss is not None and not isinstance(labeled_loss, nn.Module):
            raise TypeError(f"labeled_loss must be an nn.Module; got {type(labeled_loss).__name__}")
        self._init_rho()

    def losses(self) -> list[nn.Module]:
        return [self.loss] if self.labeled_loss is None else [self.labeled_loss, self.loss]

    @property
    def supports_chunks(self) -> bool:  # type: ignore[override]
        """Full batches chunk by chunk (see :attr:`StructuredModule.supports_chunks`), unless
        the label-balance penalty, which is not additive over examples, is on."""
        return self.balance_weight == 0

    def potentials(self, batch: Batch) -> Any:
        """Both views' potentials and their sum (``TwoViewPotentials``)."""
        if "inputs_b" not in batch:
            raise ValueError(
                "batch must hold the second view's inputs under 'inputs_b' for "
                f"CoTrainingModule (use a data module with two_view=True); got keys {sorted(batch)}"
            )
        return self.scorer(batch["inputs"], batch["inputs_b"], batch.get("lengths"))

    def decode_potentials(self, batch: Batch) -> Potentials:
        """The joint potentials, restricted to valid BIO sequences with ``valid_spans``."""
        return self.span_constrained(self.potentials(batch).joint, batch.get("lengths"))

    def labeled_term(self, batch: Batch) -> Tensor:
        """The mean labeled loss on the gold labels: ``labeled_loss`` of the joint potentials
        if given, else the two-view ``loss`` (``mean_i (xi^a_i + xi^b_i)``)."""
        pot = self.potentials(batch)
        labels, lengths = batch["labels"], batch.get("lengths")
        if self.labeled_loss is not None:
            return self.labeled_loss(self.structure, pot.joint, labels, lengths)
        return self.loss(self.structure, pot.view_a, pot.view_b, labels, lengths)

    def unlabeled_term(self, batch: Batch) -> Tensor:
        """``mean_j (xi^a_j + xi^b_j)``, each view's target the peer view's argmax."""
        pot = self.potentials(batch)
        return self.loss(self.structure, pot.view_a, pot.view_b, None, batch.get("lengths"))

    def objective_terms(self, batch: Batch) -> ObjectiveTerms:
        labeled, unlabeled = self._split(batch)
        value = self.labeled_term(labeled)
        u_value: Optional[Tensor] = None
        penalty: Optional[Tensor] = None
        if unlabeled is not None and self.current("Cu") > 0:
            pot = self.potentials(unlabeled)
            lengths = unlabeled.get("lengths")
            u_value = self.loss(self.structure, pot.view_a, pot.view_b, None, lengths)
            penalty = self._balance(labeled, unlabeled, [pot.view_a, pot.view_b])
        terms = self._combine(self.weight_norm_squared(), value, u_value)
        return self._with_balance(terms, penalty)

    def eval_loss(self, batch: Batch) -> Tensor:
        return self.labeled_term(batch)
