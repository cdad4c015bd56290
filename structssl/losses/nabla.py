"""The nabla-SVM family: unconstrained, differentiable structural SVM losses (thesis chapter 7).

With ``t(ybar) = s(y*) - s(ybar)`` the margin of a target ``y*`` over a competitor ``ybar``
(``s(y) = <potentials, parts(y)>``), each loss is a soft maximum over a candidate set ``S`` of
competitors (thesis section 7.1; :func:`~structssl.losses.functional.smax`)::

    NablaSVMLoss    xi_i   = smax_{ybar in S_i} l_{Delta(y_i, ybar), eps}(t(ybar))    (OP 7.2)
    NablaTSVMLoss   xi*_j  = smax_{ybar in S_j} u_{Delta(y*_j, ybar), tau}(t(ybar))   (OP 7.4)
                    with y*_j = argmax_y s(y) (the min over y*_j set by the decoder, fixed)
    NablaCoSVMLoss  xi^v_j = smax_{ybar in S^v_j} l_{Delta(yhat^vbar_j, ybar), eps}(t^v(ybar))
                    summed over both views v; the target of view v is the other view's
                    argmax ``yhat^vbar_j`` on unlabeled examples (OP 7.5, Table 7.2)

The candidate set ``S`` holds the ``k`` best structures other than the target under the
cost-augmented score ``Delta(y*, y) + s(y)`` (thesis Table 7.1: "argmax_{y != y_i} Delta(y_i, y) +
<w, Phi(x_i, y)>"; for 0/1 cost these are the runner-ups of the plain k-best decoder), plus,
optionally, a per-example working set of earlier violators passed as ``candidates`` (Table 7.1's
W). The target is never a candidate (``l_{0,eps}(0) = eps/4 > 0`` would otherwise count) and a
structure found twice counts once. Candidates that do not violate contribute exactly 0 (the
"1 + / - 1" form of smax), so growing the working set with non-violators changes nothing.

The regulariser ``||w||^2`` and the weights ``C``, ``C_u`` of OP 7.2 / 7.4 / 7.5 belong to the
training procedure; these modules return ``xi`` averaged (or summed) over the batch. Gradients
come from autograd through the scores; they equal the thesis's hand-derived gradients
``sum_ybar dsmax/ds(ybar) * dl/dt * (d t / d potentials)`` (tested).

Decoding cost per call: one k-best decode of ``k + 1`` structures (plus one argmax for the
unlabeled losses), and scoring of the working set.

The label-balance constraint of the transductive and co-training procedures (thesis ch. 7: the
unlabeled data's class proportions are kept at those estimated from the labeled data) is
:class:`LabelBalanceLoss`, a quadratic penalty on the gap between the expected label proportions
on an unlabeled batch and the labeled data's::

    LabelBalanceLoss  b = sum_c (pbar_c - q_c)^2,   pbar_c = sum_{j, t} mu_{j,t}(c) / sum_j N_j

with ``mu_{j,t}(c)`` the label marginal of position t of example j under ``p(y) ∝ exp(s(y) / T)``.
Without it, an unlabeled term whose pseudo-labels come from the model can drift to one label
everywhere (an all-``O`` NER tagger), which its own pseudo-labels then confirm.
"""

from __future__ import annotations

from typing import Literal, NamedTuple, Optional

import torch
from torch import Tensor, nn

from structssl.losses._common import (
    COSTS,
    REDUCTIONS,
    Reduction,
    check_candidates,
    check_k,
    check_option,
    check_structure,
    delta_k,
    prepare,
    reduce,
    union_candidates,
    violator_candidates,
)
from structssl.losses.functional import PLATEAUS, Plateau, check_positive, huber_hinge, smax, unlabeled_loss
from structssl.structures.base import Potentials, Structure

__all__ = [
    "NablaSVMLoss",
    "NablaTSVMLoss",
    "NablaCoSVMLoss",
    "LabelBalanceLoss",
    "label_proportions",
    "Violators",
]

Cost = Literal["hamming", "zero_one"]


class Violators(NamedTuple):
    """Candidates of one call: labels (B, M, ...), whether each is a margin violator (B, M)
    (a real candidate with a positive loss), and the per-candidate losses (B, M)."""

    labels: Tensor
    violating: Tensor
    losses: Tensor


class _NablaBase(nn.Module):
    """Shared machinery: candidate sets, the per-candidate loss, the smax."""

    def __init__(
        self, rho: float, k: int, cost: str, normalize_cost: bool, reduction: str
    ) -> None:
        super().__init__()
        self.rho = check_positive(rho, "rho")
        self.k = check_k(k)
        self.cost = check_option(cost, "cost", COSTS)
        self.normalize_cost = bool(normalize_cost)
        self.reduction = check_option(reduction, "reduction", REDUCTIONS)

    def candidate_loss(self, t: Tensor, delta: Tensor) -> Tensor:
        raise NotImplementedError

    def _terms(
        self,
        structure: Structure,
        potentials: Potentials,
        target: Tensor,
        lengths: Tensor,
        candidates: Optional[Tensor],
        candidates_mask: Optional[Tensor],
    ) -> tuple[Tensor, Violators]:
        """``(xi (B,), Violators)`` for a checked, canonical target."""
        extra = check_candidates(candidates, candidates_mask, target)
        labels, scores, valid = violator_candidates(
            structure, potentials, target, self.k, lengths, self.cost, self.normalize_cost
        )
        labels, scores, valid = union_candidates(
            structure, potentials, target, lengths, labels, scores, valid, extra
        )
        target_score = structure.score(potentials, target, lengths)  # (B,)
        dtype = target_score.dtype
        delta = delta_k(structure, target, labels, lengths, self.cost, self.normalize_cost, dtype)
        t = target_score.unsqueeze(1) - scores  # (B, M) margins
        losses = torch.where(valid, self.candidate_loss(t, delta), torch.zeros_like(t))
        xi = smax(losses, self.rho, mask=valid, dim=1)
        return xi, Violators(labels, valid & (losses > 0), losses)


class NablaSVMLoss(_NablaBase):
    """nabla-SVM slack (thesis OP 7.2 with the Huber hinge and smax), labeled examples.

    ``xi_i = smax_rho over ybar in S_i of l_{Delta(y_i, ybar), eps}(s(y_i) - s(ybar))``, with
    ``S_i`` the cost-augmented k-best violators (and an optional working set). As
    ``eps -> 0`` and ``rho -> inf`` it tends to the margin-rescaled structured hinge
    (:class:`~structssl.losses.hinge.StructuredHingeLoss`) restricted to ``S_i``, which for
    ``k >= 1`` contains the hinge's maximiser.

    Args:
        epsilon: Huber half width, > 0 (thesis experiments: 0.3).
        rho: smax sharpness, > 0 (not stated in the thesis; default 10, thesis-digest X5.2).
        k: violators decoded per example (1 = Table 7.1's single most violating output).
        cost: ``"hamming"`` or ``"zero_one"`` for ``Delta``.
        normalize_cost: Hamming divided by the length (the thesis's fraction of wrong tokens).
        reduction: ``"mean"``, ``"sum"`` or ``"none"`` over the batch.

    Raises:
        ValueError: if ``epsilon <= 0``, ``rho <= 0``, ``k < 1`` or an option is unknown.
    """

    def __init__(
        self,
        epsilon: float = 0.3,
        rho: float = 10.0,
        k: int = 1,
        cost: Cost = "hamming",
        normalize_cost: bool = False,
        reduction: Reduction = "mean",
    ) -> None:
        super().__init__(rho, k, cost, normalize_cost, reduction)
        self.epsilon = check_positive(epsilon, "epsilon")

    def extra_repr(self) -> str:
        return f"epsilon={self.epsilon}, rho={self.rho}, k={self.k}, cost={self.cost!r}"

    def candidate_loss(self, t: Tensor, delta: Tensor) -> Tensor:
        return huber_hinge(t, delta, self.epsilon)

    def forward(
        self,
        structure: Structure,
        potentials: Potentials,
        target: Tensor,
        lengths: Optional[Tensor] = None,
        candidates: Optional[Tensor] = None,
        candidates_mask: Optional[Tensor] = None,
    ) -> Tensor:
        """The nabla-SVM slack of each labeled example, reduced over the batch.

        Args:
            structure: any :class:`~structssl.structures.base.Structure`.
            potentials: the structure's potentials, batch first.
            target: gold labels.
            lengths: (B,) lengths.
            candidates: optional working set of earlier violators (Table 7.1's W), labels.
            candidates_mask: which working-set entries are real (default: all).

        Shape:
            target: (B, *label_shape); candidates: (B, W, *label_shape); candidates_mask: (B, W).
            Returns a scalar, or (B,) with ``reduction="none"``.
        """
        potentials, target, lengths = prepare(structure, potentials, target, lengths)
        xi, _ = self._terms(structure, potentials, target, lengths, candidates, candidates_mask)
        return reduce(xi, self.reduction)

    def violators(
        self,
        structure: Structure,
        potentials: Potentials,
        target: Tensor,
        lengths: Optional[Tensor] = None,
        candidates: Optional[Tensor] = None,
        candidates_mask: Optional[Tensor] = None,
    ) -> Violators:
        """The candidate set of :meth:`forward` with which members violate (loss > 0).

        A procedure grows its working set with ``labels[violating]`` (Table 7.1) and prunes
        entries whose loss (or smax weight) vanished.
        """
        potentials, target, lengths = prepare(structure, potentials, target, lengths)
        with torch.no_grad():
            _, found = self._terms(structure, potentials, target, lengths, candidates, candidates_mask)
        return found


class NablaTSVMLoss(_NablaBase):
    """nabla-TSVM slack of unlabeled examples (thesis OP 7.4 with ``u_{Delta,tau}`` and smax).

    The pseudo-label ``y*_j`` is the current argmax (no gradient flows through the choice; the
    thesis's ``min over y*_j`` is "set by the decoder"), or the ``target`` passed in (e.g. the
    pseudo-label stored with a working set). Competitors are the cost-augmented runner-ups
    relative to ``y*_j`` (for 0/1 cost: ranks 2 .. k + 1 of the k-best decoder).

    Args:
        tau: width of the quadratic pieces of ``u``, > 0 (thesis experiments: 0.4).
        rho: smax sharpness, > 0 (default 10).
        k: runner-ups per example.
        cost: ``"hamming"`` or ``"zero_one"``.
        normalize_cost: Hamming divided by the length.
        plateau: ``"one"`` (u as printed) or ``"delta"`` (Delta-scaled variant); thesis-digest X5.1.
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Raises:
        ValueError: if ``tau <= 0``, ``rho <= 0``, ``k < 1`` or an option is unknown.
    """

    def __init__(
        self,
        tau: float = 0.4,
        rho: float = 10.0,
        k: int = 1,
        cost: Cost = "hamming",
        normalize_cost: bool = False,
        plateau: Plateau = "one",
        reduction: Reduction = "mean",
    ) -> None:
        super().__init__(rho, k, cost, normalize_cost, reduction)
        self.tau = check_positive(tau, "tau")
        self.plateau = check_option(plateau, "plateau", PLATEAUS)

    def extra_repr(self) -> str:
        return f"tau={self.tau}, rho={self.rho}, k={self.k}, cost={self.cost!r}"

    def candidate_loss(self, t: Tensor, delta: Tensor) -> Tensor:
        if self.plateau == "delta":
            safe = torch.where(delta > 0, delta, torch.ones_like(delta))
            return torch.where(delta > 0, unlabeled_loss(t, safe, self.tau, "delta"), 0.0 * t)
        return unlabeled_loss(t, delta, self.tau)

    def forward(
        self,
        structure: Structure,
        potentials: Potentials,
        target: Optional[Tensor] = None,
        lengths: Optional[Tensor] = None,
        candidates: Optional[Tensor] = None,
        candidates_mask: Optional[Tensor] = None,
    ) -> Tensor:
        """The nabla-TSVM slack of each unlabeled example, reduced over the batch.

        Args:
            structure: any structure.
            potentials: potentials of the unlabeled examples.
            target: fixed pseudo-labels (default: the current argmax).
            lengths: (B,) lengths.
            candidates: optional working set of earlier runner-ups of the same pseudo-labels.
            candidates_mask: which working-set entries are real.

        Shape:
            as :meth:`NablaSVMLoss.forward`. Returns a scalar, or (B,) with ``reduction="none"``.
        """
        potentials, target, lengths = self._target(structure, potentials, target, lengths)
        xi, _ = self._terms(structure, potentials, target, lengths, candidates, candidates_mask)
        return reduce(xi, self.reduction)

    def _target(
        self,
        structure: Structure,
        potentials: Potentials,
        target: Optional[Tensor],
        lengths: Optional[Tensor],
    ) -> tuple[Potentials, Tensor, Tensor]:
        if target is None:
            check_structure(structure)
            target, _ = structure.argmax(potentials, lengths)
        return prepare(structure, potentials, target, lengths)

    def violators(
        self,
        structure: Structure,
        potentials: Potentials,
        target: Optional[Tensor] = None,
        lengths: Optional[Tensor] = None,
        candidates: Optional[Tensor] = None,
        candidates_mask: Optional[Tensor] = None,
    ) -> Violators:
        """The candidates of :meth:`forward` and which of them have a positive loss."""
        potentials, target, lengths = self._target(structure, potentials, target, lengths)
        with torch.no_grad():
            _, found = self._terms(structure, potentials, target, lengths, candidates, candidates_mask)
        return found


class NablaCoSVMLoss(nn.Module):
    """nabla-coSVM slack of two views (thesis OP 7.5, Table 7.2), Huber hinge and smax.

    For labeled examples (``target`` given) each view gets the nabla-SVM slack of the gold
    labels. For unlabeled examples (``target=None``) the target of view 1 is view 2's argmax and
    vice versa (the peer view's own prediction, OP 7.5 / Table 7.2, not the joint prediction of
    the prose; thesis-digest X5.5); the dependence of the peer's argmax on its potentials is
    ignored (piecewise constant). Unlabeled examples use the asymmetric Huber loss, not ``u``.
    Returns ``xi^1 + xi^2``.

    With ``pseudo_labels="joint"`` both views take the joint prediction (the argmax of the
    summed potentials, the thesis's prose) as their unlabeled target instead. The peer target
    (default, OP 7.5) lets a weak view teach a strong one its errors: on the quick-start HMM
    (one 5-d half of the emissions alone tags 60 % of the tokens right, the other 76 %) the
    strong view falls to the weak one's level as ``C_u`` grows; the joint target is at least as
    good as either view.

    Args:
        epsilon, rho, k, cost, normalize_cost, reduction: as :class:`NablaSVMLoss`.
        pseudo_labels: ``"peer"`` (OP 7.5) or ``"joint"`` (the summed views' argmax).
    """

    def __init__(
        self,
        epsilon: float = 0.3,
        rho: float = 10.0,
        k: int = 1,
        cost: Cost = "hamming",
        normalize_cost: bool = False,
        reduction: Reduction = "mean",
        pseudo_labels: Literal["peer", "joint"] = "peer",
    ) -> None:
        super().__init__()
        self.view_loss = NablaSVMLoss(epsilon, rho, k, cost, normalize_cost, reduction="none")
        self.reduction = check_option(reduction, "reduction", REDUCTIONS)
        self.pseudo_labels = check_option(pseudo_labels, "pseudo_labels", ("peer", "joint"))

    def forward(
        self,
        structure: Structure,
        potentials: Potentials,
        peer_potentials: Potentials,
        target: Optional[Tensor] = None,
        lengths: Optional[Tensor] = None,
    ) -> Tensor:
        """Sum over both views of the nabla-SVM slack, peer predictions as targets if unlabeled.

        Args:
            structure: the structure shared by both views.
            potentials: view 1 potentials.
            peer_potentials: view 2 potentials (same layout).
            target: gold labels, or None for unlabeled examples.
            lengths: (B,) lengths.

        Shape:
            both potentials: (B, *event_shape). Returns a scalar, or (B,) with
            ``reduction="none"``.
        """
        check_structure(structure)
        if target is None and self.pseudo_labels == "joint":
            from structssl.structures.base import as_tuple, like

            joint = like(
                potentials,
                [a.detach() + b.detach() for a, b in zip(as_tuple(potentials), as_tuple(peer_potentials))],
            )
            target_1 = target_2 = structure.argmax(joint, lengths)[0]
        elif target is None:
            target_1, _ = structure.argmax(peer_potentials, lengths)  # view 2 labels view 1
            target_2, _ = structure.argmax(potentials, lengths)
        else:
            target_1 = target_2 = target
        xi = self.view_loss(structure, potentials, target_1, lengths) + self.view_loss(
            structure, peer_potentials, target_2, lengths
        )
        return reduce(xi, self.reduction)


class LabelBalanceLoss(nn.Module):
    """Label-balance penalty: expected label proportions on a batch vs target proportions.

    ``b = sum_c (pbar_c - q_c)^2`` with ``pbar_c`` the mean over the batch's valid positions of
    the label marginals under ``p(y) ∝ exp(s(y) / temperature)`` (module docstring), ``q`` the
    target proportions (those of the labeled data). Differentiable in the potentials (through
    the marginals: one forward-backward pass with ``create_graph=True``).

    Supported structures: :class:`~structssl.structures.LinearChain` (edge marginals
    (B, N, C, C), a position's label marginal is the sum over the previous label) and
    :class:`~structssl.structures.MultiClass` (marginals (B, C)).

    Args:
        temperature: T > 0; the scores are divided by it before the marginals (smaller: closer
            to the proportions of the argmax labels, less smooth).
    """

    def __init__(self, temperature: float = 1.0) -> None:
        super().__init__()
        self.temperature = check_positive(temperature, "temperature")

    def extra_repr(self) -> str:
        return f"temperature={self.temperature}"

    def proportions(
        self, structure: Structure, potentials: Potentials, lengths: Optional[Tensor] = None
    ) -> Tensor:
        """``pbar`` (C,): the expected label proportions over the batch's valid positions."""
        from structssl.structures.linear_chain import LinearChain
        from structssl.structures.multiclass import MultiClass

        check_structure(structure)
        if not isinstance(structure, (LinearChain, MultiClass)):
            raise TypeError(
                "structure must be a LinearChain or a MultiClass for LabelBalanceLoss; got "
                f"{type(structure).__name__}"
            )
        if not isinstance(potentials, Tensor):
            raise TypeError(f"potentials must be a Tensor; got {type(potentials).__name__}")
        scaled = potentials / self.temperature
        marginals = structure.marginals(scaled, lengths, create_graph=scaled.requires_grad)
        if isinstance(structure, MultiClass):
            return marginals.mean(0)
        node = marginals.sum(-2)  # (B, N, C): marginal of label j at position t
        return node.flatten(0, 1).sum(0) / node.sum().clamp(min=1e-12)

    def forward(
        self,
        structure: Structure,
        potentials: Potentials,
        target_proportions: Tensor,
        lengths: Optional[Tensor] = None,
    ) -> Tensor:
        """The squared gap between the batch's expected and the target label proportions.

        Args:
            structure: a ``LinearChain`` or ``MultiClass``.
            potentials: the batch's potentials (B, N, C, C) or (B, C).
            target_proportions: (C,) target proportions ``q`` (non-negative, summing to 1).
            lengths: (B,) lengths (chains).

        Returns:
            a scalar.
        """
        pbar = self.proportions(structure, potentials, lengths)
        if not isinstance(target_proportions, Tensor) or target_proportions.shape != pbar.shape:
            raise ValueError(
                f"target_proportions must be a ({pbar.shape[0]},) tensor (one per label); got "
                f"{_describe(target_proportions)}"
            )
        q = target_proportions.to(device=pbar.device, dtype=pbar.dtype)
        return ((pbar - q) ** 2).sum()


def _describe(x: object) -> object:
    return tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__


def label_proportions(labels: Tensor, num_labels: int, lengths: Optional[Tensor] = None) -> Tensor:
    """Label proportions (num_labels,) float64 over the valid positions of ``labels``.

    Args:
        labels: (B,) classes or (B, N) sequence labels.
        num_labels: C.
        lengths: (B,) lengths of (B, N) labels (default: all N).
    """
    if labels.dim() == 2 and lengths is not None:
        valid = torch.arange(labels.shape[1], device=labels.device) < lengths.unsqueeze(1)
        labels = labels[valid]
    counts = torch.bincount(labels.reshape(-1).long(), minlength=num_labels).double()
    if counts.shape[0] != num_labels:
        raise ValueError(f"labels must be in [0, {num_labels}); got max {int(labels.max())}")
    return counts / counts.sum().clamp(min=1)
