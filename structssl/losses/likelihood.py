"""Likelihood losses: CRF negative log-likelihood and composite (piecewise) likelihood.

CRF NLL (seed 004 section 3.1, the instance log-likelihood ``L_x``)::

    -log p(y* | x) = log Z(potentials) - s(y*)

Composite likelihood (seed 004 section 3.3): the likelihood is replaced by a sum of component
log-likelihoods ``L_C = sum_c [phi_c(y_c) - log Z_c]`` where each component ``c`` is tractable
and all components share the same potentials (parameters are learned jointly). A
:class:`Decomposition` says what the components are:

- :class:`StarTrees` (seed 004 section 5, the worked case): the ``K`` spanning star trees of the
  fully connected pairwise multi-label model (:class:`~structssl.structures.multilabel.
  PairwiseMultiLabel`). Star ``k`` has root ``k`` and every other label as a leaf and scores
  ``s_k(y) = (1/K) sum_p unary[p, y_p] + (1/2) sum_{q != k} edge_{kq}(y_k, y_q)``; each edge lies
  in the two stars centred at its ends, so ``sum_k s_k = s``. The printed ``theta_{pq}`` with
  ``q != k`` is read as the edges ``(k, q)`` of star ``k`` (the only reading under which the
  components are spanning stars and the scores sum to ``s``). Each ``log Z_k`` is closed form in
  O(K): ``logsumexp_{y_k} [unary_k / K + sum_{q != k} logsumexp_{y_q}(unary_q / K + edge_kq / 2)]``.
  Cost O(B K^2).
- :class:`Factors` (piecewise training, Sutton and McCallum 2005; the general case of seed 004
  section 3.3 "components are factors of the graphical model"): every factor is normalised on its
  own, ``log p_f(y_f) = theta_f(y_f) - log sum_{y'_f} exp theta_f(y'_f)``. Implemented for
  :class:`~structssl.structures.multiclass.MultiClass` (one factor: the full likelihood),
  :class:`~structssl.structures.linear_chain.LinearChain` (one factor per valid position: the
  ``C`` first-label potentials at position 0, the ``C x C`` edge table after) and
  :class:`~structssl.structures.multilabel.PairwiseMultiLabel` (``K`` unary and ``K(K-1)/2`` edge
  factors). Other structures raise ``NotImplementedError``.
- :class:`WholeStructure`: one component, the structure itself; the composite likelihood is then
  the full likelihood (the CRF NLL). Any tree-structured model (chain, CKY, single star) is a
  single tractable component.

A decomposition is a small object with one method, so users can write their own (e.g. spanning
chains of a grid): ``log_likelihoods(structure, potentials, target, lengths) -> (B, n_c)``.
"""

from __future__ import annotations

from typing import Literal, Optional, Union

import torch
from torch import Tensor, nn

from structssl.losses._common import REDUCTIONS, Reduction, check_option, prepare, reduce
from structssl.structures.base import Potentials, Structure, as_tuple
from structssl.structures.linear_chain import LinearChain
from structssl.structures.multiclass import MultiClass

__all__ = [
    "CRFNLLLoss",
    "CompositeLikelihoodLoss",
    "Decomposition",
    "StarTrees",
    "Factors",
    "WholeStructure",
]


class CRFNLLLoss(nn.Module):
    """Negative log-likelihood of a CRF over any structure: ``log Z - s(target)``.

    Args:
        reduction: ``"mean"`` (seed 004's ``1/n_L`` average), ``"sum"`` or ``"none"``.
    """

    def __init__(self, reduction: Reduction = "mean") -> None:
        super().__init__()
        self.reduction = check_option(reduction, "reduction", REDUCTIONS)

    def forward(
        self,
        structure: Structure,
        potentials: Potentials,
        target: Tensor,
        lengths: Optional[Tensor] = None,
    ) -> Tensor:
        """NLL of ``target``.

        Shape:
            potentials: (B, *event_shape); target: (B, *label_shape); lengths: (B,).
            Returns a scalar, or (B,) with ``reduction="none"``.
        """
        potentials, target, lengths = prepare(structure, potentials, target, lengths)
        nll = structure.log_partition(potentials, lengths) - structure.score(potentials, target, lengths)
        return reduce(nll, self.reduction)


class Decomposition:
    """Components of a composite likelihood (see the module docstring)."""

    def log_likelihoods(
        self, structure: Structure, potentials: Potentials, target: Tensor, lengths: Tensor
    ) -> Tensor:
        """Component log-likelihoods of checked inputs. Shape (B, number of components)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class WholeStructure(Decomposition):
    """A single component, the whole structure: the composite likelihood is the likelihood."""

    def log_likelihoods(
        self, structure: Structure, potentials: Potentials, target: Tensor, lengths: Tensor
    ) -> Tensor:
        ll = structure.score(potentials, target, lengths) - structure.log_partition(potentials, lengths)
        return ll.unsqueeze(1)


def _multilabel_layout(structure: Structure, potentials: Potentials) -> tuple[Tensor, Tensor]:
    tensors = as_tuple(potentials)
    if len(tensors) != 2 or tensors[0].dim() != 3 or tensors[1].dim() != 5:
        raise NotImplementedError(
            f"this decomposition needs the PairwiseMultiLabel layout (unary (B, K, 2), pairwise "
            f"(B, K, K, 2, 2)); {structure!r} has potentials of shapes "
            f"{[tuple(t.shape) for t in tensors]}"
        )
    return tensors[0], tensors[1]


class StarTrees(Decomposition):
    """The ``K`` spanning star trees of the fully connected multi-label model (seed 004 sec. 5).

    Uses the star pieces of :mod:`structssl.structures.multilabel` (:func:`star_potentials`,
    :func:`star_scores`, :func:`star_log_partition`); ``(B, K)`` component log-likelihoods.
    """

    def log_likelihoods(
        self, structure: Structure, potentials: Potentials, target: Tensor, lengths: Tensor
    ) -> Tensor:
        from structssl.structures.multilabel import (
            MultiLabelPotentials,
            star_log_partition,
            star_potentials,
            star_scores,
        )

        unary, pairwise = _multilabel_layout(structure, potentials)
        star = star_potentials(MultiLabelPotentials(unary, pairwise))
        return star_scores(star, target) - star_log_partition(star)


class Factors(Decomposition):
    """Piecewise likelihood: every factor of the model normalised on its own."""

    def log_likelihoods(
        self, structure: Structure, potentials: Potentials, target: Tensor, lengths: Tensor
    ) -> Tensor:
        if isinstance(structure, MultiClass):
            assert isinstance(potentials, Tensor)
            picked = potentials.gather(1, target.unsqueeze(1))  # (B, 1)
            return picked - torch.logsumexp(potentials, dim=1, keepdim=True)
        if isinstance(structure, LinearChain):
            return self._chain(structure, potentials, target, lengths)
        from structssl.structures.multilabel import PairwiseMultiLabel

        if isinstance(structure, PairwiseMultiLabel):
            return self._multilabel(structure, potentials, target)
        raise NotImplementedError(
            f"Factors (piecewise likelihood) is implemented for MultiClass, LinearChain and "
            f"PairwiseMultiLabel; got {structure!r}"
        )

    @staticmethod
    def _chain(
        structure: LinearChain, potentials: Potentials, target: Tensor, lengths: Tensor
    ) -> Tensor:
        assert isinstance(potentials, Tensor)
        b, n, c, _ = potentials.shape
        prev = torch.cat([target.new_zeros(b, 1), target[:, :-1]], dim=1)  # y_{-1} = 0
        picked = potentials.reshape(b, n, c * c).gather(2, (prev * c + target).unsqueeze(2))
        log_z_edges = torch.logsumexp(potentials.reshape(b, n, c * c), dim=2)  # (B, N)
        log_z_first = torch.logsumexp(potentials[:, 0, 0, :], dim=1)  # only row 0 is a part at t = 0
        log_z = torch.cat([log_z_first.unsqueeze(1), log_z_edges[:, 1:]], dim=1)
        ll = picked.squeeze(2) - log_z  # (B, N)
        return ll * structure.valid_mask(lengths, n).to(ll.dtype)

    @staticmethod
    def _multilabel(structure: Structure, potentials: Potentials, target: Tensor) -> Tensor:
        unary, pairwise = _multilabel_layout(structure, potentials)
        b, k = unary.shape[:2]
        un = unary.gather(2, target.unsqueeze(2)).squeeze(2) - torch.logsumexp(unary, dim=2)  # (B, K)
        rows, cols = torch.triu_indices(k, k, offset=1, device=unary.device)
        tables = pairwise[:, rows, cols].reshape(b, -1, 4)  # (B, P, 4), entry 2 y_k + y_l
        index = (target[:, rows] * 2 + target[:, cols]).unsqueeze(2)
        pair = tables.gather(2, index).squeeze(2) - torch.logsumexp(tables, dim=2)  # (B, P)
        return torch.cat([un, pair], dim=1)


_DECOMPOSITIONS = {"star_trees": StarTrees, "factors": Factors, "whole": WholeStructure}


class CompositeLikelihoodLoss(nn.Module):
    """Negative composite log-likelihood ``-sum_c [phi_c(y_c) - log Z_c]`` (seed 004 sec. 3.3).

    Args:
        decomposition: ``"star_trees"`` (seed 004 section 5, multi-label), ``"factors"``
            (piecewise), ``"whole"`` (the full likelihood), or a :class:`Decomposition`.
        reduction: ``"mean"``, ``"sum"`` or ``"none"`` over the batch.

    Raises:
        ValueError: on an unknown decomposition name or reduction.
    """

    def __init__(
        self,
        decomposition: Union[Literal["star_trees", "factors", "whole"], Decomposition] = "factors",
        reduction: Reduction = "mean",
    ) -> None:
        super().__init__()
        if isinstance(decomposition, Decomposition):
            self.decomposition = decomposition
        else:
            name = check_option(decomposition, "decomposition", tuple(_DECOMPOSITIONS))
            self.decomposition = _DECOMPOSITIONS[name]()
        self.reduction = check_option(reduction, "reduction", REDUCTIONS)

    def extra_repr(self) -> str:
        return f"decomposition={self.decomposition!r}, reduction={self.reduction!r}"

    def forward(
        self,
        structure: Structure,
        potentials: Potentials,
        target: Tensor,
        lengths: Optional[Tensor] = None,
    ) -> Tensor:
        """Negative composite log-likelihood of ``target``.

        Shape:
            potentials: (B, *event_shape); target: (B, *label_shape); lengths: (B,).
            Returns a scalar, or (B,) with ``reduction="none"``.
        """
        potentials, target, lengths = prepare(structure, potentials, target, lengths)
        ll = self.decomposition.log_likelihoods(structure, potentials, target, lengths)
        return reduce(-ll.sum(dim=1), self.reduction)

    def components(
        self,
        structure: Structure,
        potentials: Potentials,
        target: Tensor,
        lengths: Optional[Tensor] = None,
    ) -> Tensor:
        """The component log-likelihoods themselves. Shape (B, number of components)."""
        potentials, target, lengths = prepare(structure, potentials, target, lengths)
        return self.decomposition.log_likelihoods(structure, potentials, target, lengths)
