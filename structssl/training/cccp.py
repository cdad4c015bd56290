"""Gamma-SSVM by the convex-concave procedure (seed 000, eq. 13 / 16 / 22, Algorithm 1).

Objective. With labeled examples ``i <= n``, unlabeled examples ``j <= m`` (for the labeling
formulation of section 4 the ``j`` run over the labeled examples themselves), a binary
constraint map ``phi_j`` and the penalty ``Gamma(v) = lambda sum_j ||v_j - a_j||_1`` (section
5.1: ``a_j = 1``, ``lambda = 1``; section 4: ``a_j = phi(x_j, y_j)``, ``lambda = 1/2``), the
module minimises seed 000's eq. (13) **divided by n** (as every
:class:`~structssl.training.modules.StructuredModule` does)::

    J(w, v) = ||w||^2 / (2n) + (C1/n) mean_i xi_i
              + (C2/n) [ lambda m mean_j ||v_j - a_j||_1 + mean_j B_j(w, v_j) ]
    B_j = (mu/2)||v_j||^2 + max_y [s_j(y) - (mu/2) v_j.phi_j(y) + (mu/4)||phi_j(y)||^2]   (convex)
                          - max_y [s_j(y) + (mu/2) v_j.phi_j(y) - (mu/4)||phi_j(y)||^2]   (concave)

``xi_i`` is the structural hinge loss (``loss``, default margin-rescaled Hamming). By Lemma 1,
``B_j >= (mu/4) ||phi_j(y(x_j; w)) - v_j||^2``.

CCCP (Appendix, eq. 21-22). Each **outer** iteration linearises the concave part at the
constraint-guided prediction ``p_j = argmax_y s_j(y) + (mu/2) v_j.phi_j(y) - (mu/4)||phi_j||^2``
(eq. 12/15), computed with no gradient; the **inner** step minimises the resulting convex upper
bound over ``w`` (and ``v`` in parameter mode) with autograd, for ``inner_epochs`` optimiser
epochs (with full batches and L-BFGS: ``inner_epochs * lbfgs_max_iter`` L-BFGS iterations).
At ``w_t`` the bound equals ``J``, so ``J(w_{t+1}) <= bound(w_{t+1}) <= bound(w_t) = J(w_t)``
whenever the inner step decreases the bound; with full batches ``keep_best_iterate`` (default)
ends each outer iteration at the inner iterate of lowest bound (the start included), so the
bound never increases, whatever the optimiser. The value of ``J`` at each linearisation point is
logged as ``train/cccp_objective``; training stops when its decrease between outer iterations
is below ``tol`` (``trainer.should_stop``). The share of constraint examples whose
constraint-guided labels differ from the model's own argmax at the linearisation point is
logged as ``train/cccp_guided_changed`` (and printed per outer iteration, with ``J``, at the
end of ``fit``):
where the constraints change few taggings, the step has little to move towards, and with a
small ``C2`` CCCP stops after one or two outer iterations close to its start.

The auxiliary vectors ``v_j`` (``v_mode``):

* ``"closed_form"`` (default): ``v_j = a_j``. For the L1 penalty this is the *exact* minimiser
  of the convex bound over ``v`` whenever ``mu <= lambda m``: per coordinate the subgradient
  condition at ``v = a`` reads ``0 in lambda [-1, 1] + (mu/m)(a - (phi_hat + p)/2)`` and
  ``|a - (phi_hat + p)/2| <= 1`` for 0/1 features and ``a in [0, 1]``. The module checks
  ``mu <= lambda m`` at setup and raises ``ValueError`` otherwise. This covers both
  experiments of the paper (section 5.1: m = 1,200; section 4: ``mu = 1``).
* ``"parameter"``: ``v`` is an ``nn.Parameter`` per example (stored per constraint, padded to the
  longest example; batches carry ``index``), optimised jointly with ``w`` by autograd through
  the Gamma and DC terms. ``v_init="target"`` starts at ``a_j`` (section 5.1),
  ``"prediction"`` at ``phi_j(y(x_j; w0))`` (section 4, decoded at the first outer iteration).

Initialisation of ``w``: ``supervised_epochs`` epochs of the supervised objective (``C2``
term off) before the first outer iteration ("w from the supervised solution"), or 0 with a
zero-initialised scorer (section 4's ``w0 = 0``).

Constraint features. ``constraints`` is a :class:`~structssl.constraints.ConstraintSet` of
instance-level constraints, and corpus-level ones as below (bound to the data module's labels
at setup when unbound). Its
linear indicators fold into the potentials
(:meth:`~structssl.constraints.ConstraintSet.indicator_features`); the global non-linear ones
(:class:`~structssl.constraints.ConsecutiveFields`, :class:`~structssl.constraints.AtMostOnce`,
:class:`~structssl.constraints.MustAppear`) add one binary dimension each and their maxima are
found by :func:`~structssl.constraints.kbest_search` with ``search_k`` candidates; rows the
search cannot certify exact are counted in ``train/search_uncertified`` (the DC bound then uses
the best candidate found). ``formulation="labeling"`` ignores ``constraints`` and uses the node
indicators ``phi(x, y)_{tC+c} = [y_t = c]`` of section 4 (d = N C).

Corpus-level constraints (issue 17). A ratio constraint over the whole unlabeled set whose
denominator does not depend on the labels (:class:`~structssl.constraints.LabelProportion`,
:class:`~structssl.constraints.ExpectedCount`; ``r(Y) = sum_j num_j(y_j) / D``, target ``t``)
adds its own DC term to the bracket, with ``v = t`` in closed form (the analogue of ``v_j = a_j``).
Written for one example, the bracket above is ``B_j = max_y [s_j + (mu/4)||phi_j - v_j||^2] -
max_y [s_j - (mu/4)||phi_j - v_j||^2]``; the corpus term is the same with the corpus as the
example::

    J += (C2/n) sum_c B_c,   B_c = max_Y [F(Y) + q_c(Y)] - max_Y [F(Y) - q_c(Y)]
    F(Y) = (1/m) sum_j s_j(y_j),   q_c(Y) = (D/m) weight_c (mu/4) dev_c(r(Y))^2

with ``dev = r - t`` ("eq"), ``[r - t]_+`` ("le"), ``[t - r]_+`` ("ge"). Scaling: ``F`` is
the mean score, so ``B_c`` sits beside ``mean_j B_j`` with the same ``C2/n``; the factor
``D/m`` counts the squared violation once per unit of the denominator (per token for a
proportion, per example for an expected count), which makes the per-token bias of the
searches ``2 weight (mu/4) dev`` whatever the corpus size and the sentence lengths (with ``1``
instead of ``D/m`` a proportion's pull would shrink with the mean sentence length). Lemma-1
analogue: ``B_c >= q_c(y_hat)`` (``max F + q >= F(y_hat) + q(y_hat)``, ``max F - q <=
F(y_hat)``), a smooth surrogate of the prediction's squared corpus violation. Both maxima are
over joint labelings of the corpus and are found through one multiplier on the ratio
(:mod:`structssl.constraints.corpus_search`): the convex part exactly, by a branch and bound
over the multiplier whose every step is one batched Viterbi over all chunks (certified unless
``corpus_budget`` decodes do not suffice: ``train/corpus_uncertified``), its value and its
gradient (Danskin) at the maximiser ``Y*_c``; the concave part at the CCCP linearisation point
``p_c`` (no gradient), by Lagrangian relaxation (bisection on the multiplier, then mixtures of
the two labelings that bracket the target), never worse than the last outer iteration's
``p_c`` (so the logged CCCP objective still cannot increase), its duality gap logged as
``train/corpus_guided_gap`` (any ``p_c`` gives a valid majoriser; a better one a tighter one).
The term needs the whole unlabeled set in every training step (full batches, given as one
batch or as length chunks: the searches sum the counts over the chunks and the gradient is
accumulated chunk by chunk). An "eq" constraint pushes down the most violating labeling on
either side of the target (for a large weight often the one far on the other side of the
prediction's error); "ge" / "le" act only in the direction they name. The weight must make
``2 weight (mu/4) dev`` comparable with the per-token score margins to change the
linearisation point at all. Refused at construction, by name: ratios whose denominator
depends on the labels (:class:`~structssl.constraints.TransitionFraction`: not linear in the
parts, the multiplier search would not be exact; use label switching) and hard corpus
constraints (the term is a soft penalty). ``target="labeled"`` is estimated at the start of
``fit`` from the labeled split's counts (logged; an error without labeled examples).

Extra constraint features in ``Phi`` ("I" of Table 1, ``extra_features=True``): one learned
weight per linear-indicator constraint times its number of satisfied positions, and a second
(C, C) transition matrix used at the boundaries that a
:class:`~structssl.constraints.PunctuationTransitions` constraint allows. (The paper's extra
feature scoring the global constraint is not included: it would make test-time decoding
non-linear.) These weights are part of ``w`` (regularised).

Batches: the data module's examples carry ``tokens`` (a list of token tuples per batch) and, for
the parameter mode or mini-batches, ``index`` (the example's index in its split).
"""

from __future__ import annotations

import math
from typing import Any, Literal, NamedTuple, Optional, Sequence

import torch
from torch import Tensor, nn

from structssl.constraints import (
    Constraint,
    ConstraintSet,
    PunctuationTransitions,
    kbest_search,
)
from structssl.constraints.corpus_search import (
    RatioPenalty,
    RatioSearch,
    ratio_convex_max,
    ratio_corpus,
    ratio_guided_max,
)
from structssl.losses import StructuredHingeLoss
from structssl.losses.gamma import ConstraintFeatures, NodeFeatures
from structssl.structures.base import Structure, as_tuple, like
from structssl.structures.linear_chain import LinearChain
from structssl.training.modules import (
    Batch,
    ObjectiveTerms,
    StructuredModule,
    as_chunks,
    num_examples,
)

__all__ = ["CCCPModule", "GammaDCTerms", "gamma_dc_terms", "lemma1_gap"]


# ---------------------------------------------------------------------- the DC terms
class GammaDCTerms(NamedTuple):
    """Per example (B,): ``convex`` (eq. 14 max), ``concave`` (minus eq. 15 max, or its
    linearisation), ``quadratic`` ``(mu/2)||v||^2``; ``predicted`` / ``guided`` labels;
    ``uncertified`` (B,) bool rows whose non-linear search was not certified exact."""

    convex: Tensor
    concave: Tensor
    quadratic: Tensor
    predicted: Tensor
    guided: Tensor
    uncertified: Tensor

    def bracket(self) -> Tensor:
        """``B_j`` of the module docstring. Shape (B,)."""
        return self.quadratic + self.convex + self.concave


def _nonlinear_values(
    constraints: Sequence[Constraint], labels: Tensor, lengths: Tensor, tokens: Optional[Sequence[Sequence[str]]]
) -> Tensor:
    """(B, K) binary indicators of the global non-linear constraints."""
    cols = [c.indicators(labels, lengths, tokens).view(-1) for c in constraints]
    return torch.stack(cols, 1)


def _augmented_max(
    structure: Structure,
    potentials: Tensor,
    lengths: Tensor,
    coef: Tensor,
    features: Optional[ConstraintFeatures],
    nonlinear: Sequence[Constraint],
    tokens: Optional[Sequence[Sequence[str]]],
    k: int,
    at: Optional[Tensor] = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """``max_y s(y) + coef . phi(y)`` (or its value at ``at``), differentiable in the
    potentials and ``coef``. Returns (values (B,), labels, uncertified (B,) bool)."""
    b = potentials.shape[0]
    d_lin = coef.shape[1] - len(nonlinear)
    c_lin, c_non = coef[:, :d_lin], coef[:, d_lin:]
    if features is not None:
        extra = features.adjoint(c_lin, potentials)
        aug = like(potentials, [p + e for p, e in zip(as_tuple(potentials), as_tuple(extra))])
        offset = features.offset_dot(c_lin)
    else:
        aug, offset = potentials, potentials.new_zeros(b)
    uncertified = torch.zeros(b, dtype=torch.bool, device=potentials.device)
    if at is not None:
        labels = at
    elif not nonlinear:
        labels, _ = structure.argmax(aug, lengths)
    else:
        c_det = c_non.detach()

        def bonus(y: Tensor, ln: Tensor, rows: Tensor) -> Tensor:
            toks = None if tokens is None else [tokens[int(r)] for r in rows.tolist()]
            vals = _nonlinear_values(nonlinear, y, ln, toks)
            return (vals.to(c_det.dtype) * c_det[rows]).sum(1)

        result = kbest_search(
            structure, aug.detach(), lengths, bonus, c_det.clamp(min=0).sum(1), k=k, adaptive=True
        )
        labels, uncertified = result.labels, ~result.certified
    value = structure.score(aug, labels, lengths) + offset
    if nonlinear:
        vals = _nonlinear_values(nonlinear, labels, lengths, tokens).to(c_non.dtype)
        value = value + (vals * c_non).sum(1)
    return value, labels, uncertified


def gamma_dc_terms(
    structure: Structure,
    potentials: Tensor,
    lengths: Tensor,
    v: Tensor,
    mu: float,
    features: Optional[ConstraintFeatures],
    nonlinear: Sequence[Constraint] = (),
    tokens: Optional[Sequence[Sequence[str]]] = None,
    linearize_at: Optional[Tensor] = None,
    search_k: int = 16,
) -> GammaDCTerms:
    """The DC terms of seed 000 eq. (13) for binary constraint features, linear and not.

    Args:
        structure: the structure (non-linear constraints need ``kbest``, i.e. a chain).
        potentials: (B, N, C, C) for a chain.
        lengths: (B,).
        v: (B, d_lin + K): auxiliary vectors, linear features first, then one entry per
            non-linear constraint.
        mu: quadratic-penalty weight > 0.
        features: binary features linear in the parts (``None``: none).
        nonlinear: global non-linear instance constraints (binary indicators).
        tokens: B token lists (for token-dependent non-linear constraints).
        linearize_at: labels where the concave part is linearised (CCCP), else its exact max.
        search_k: k of the k-best search for non-linear constraints.
    """
    if mu <= 0:
        raise ValueError(f"mu must be > 0; got {mu}")
    if features is not None and not features.binary:
        raise NotImplementedError("the Gamma-SSVM DC bound needs binary (0/1) constraint features")
    d_lin = int(getattr(features, "num_constraints", -1)) if features is not None else 0
    if v.dim() != 2 or (d_lin >= 0 and v.shape[1] != d_lin + len(nonlinear)):
        raise ValueError(
            f"v must have shape (B, d) with d = {d_lin + len(nonlinear)} (linear features + "
            f"non-linear constraints); got {tuple(v.shape)}"
        )
    # binary phi: ||phi||^2 = 1 . phi, so both maxima are over s + coef . phi
    convex, predicted, unc1 = _augmented_max(
        structure, potentials, lengths, -mu / 2 * v + mu / 4, features, nonlinear, tokens, search_k
    )
    if linearize_at is None:
        with torch.no_grad():
            _, guided, unc2 = _augmented_max(
                structure, potentials.detach(), lengths, (mu / 2 * v - mu / 4).detach(), features,
                nonlinear, tokens, search_k,
            )
    else:
        guided, unc2 = linearize_at, torch.zeros_like(unc1)
    concave, _, _ = _augmented_max(
        structure, potentials, lengths, mu / 2 * v - mu / 4, features, nonlinear, tokens, search_k, at=guided
    )
    quadratic = 0.5 * mu * (v * v).sum(1)
    return GammaDCTerms(convex, -concave, quadratic, predicted, guided, unc1 | unc2)


def lemma1_gap(
    structure: Structure,
    potentials: Tensor,
    lengths: Tensor,
    v: Tensor,
    mu: float,
    features: Optional[ConstraintFeatures],
    nonlinear: Sequence[Constraint] = (),
    tokens: Optional[Sequence[Sequence[str]]] = None,
    search_k: int = 16,
) -> Tensor:
    """``B_j - (mu/4)||phi_j(y(x_j)) - v_j||^2`` (>= 0 by Lemma 1), with ``y(x_j)`` the plain
    argmax. Shape (B,)."""
    terms = gamma_dc_terms(structure, potentials, lengths, v, mu, features, nonlinear, tokens, None, search_k)
    with torch.no_grad():
        labels, _ = structure.argmax(potentials, lengths)
    phi = _phi(structure, features, nonlinear, labels, lengths, tokens, v.dtype)
    return terms.bracket() - mu / 4 * ((phi - v) ** 2).sum(1)


def _phi(
    structure: Structure,
    features: Optional[ConstraintFeatures],
    nonlinear: Sequence[Constraint],
    labels: Tensor,
    lengths: Tensor,
    tokens: Optional[Sequence[Sequence[str]]],
    dtype: torch.dtype,
) -> Tensor:
    cols = []
    if features is not None:
        cols.append(features.phi(structure.to_parts(labels, lengths)).to(dtype))
    if nonlinear:
        cols.append(_nonlinear_values(nonlinear, labels, lengths, tokens).to(dtype))
    return torch.cat(cols, 1)


def _width(features: Optional[ConstraintFeatures], nonlinear: Sequence[Constraint], potentials: Tensor) -> int:
    """d of v for a batch: the features' dimension plus one per non-linear constraint."""
    if isinstance(features, NodeFeatures):
        return int(potentials.shape[1] * potentials.shape[2])
    return (0 if features is None else int(getattr(features, "num_constraints"))) + len(nonlinear)


def _check_corpus_constraints(corpus: Sequence[Constraint], formulation: str) -> None:
    """Refuse the corpus-level constraints the corpus term cannot take (named, with why)."""
    if corpus and formulation != "transductive":
        raise ValueError(
            f"corpus-level constraints {[c.name for c in corpus]} need "
            "formulation='transductive' (the labeling formulation has no constraint term over "
            f"unlabeled data); got {formulation!r}"
        )
    for con in corpus:
        if not getattr(con, "label_free_denominator", False) or not con.linear_counts:
            raise ValueError(
                f"corpus-level constraints must be ratios whose denominator does not depend on "
                f"the labels (LabelProportion, ExpectedCount); {con.name}'s does (e.g. "
                "TransitionFraction divides by the number of label changes), so its ratio is not "
                "linear in the parts and the multiplier search is not exact: use label switching "
                "(seed 003) for it"
            )
        if con.hard:
            raise ValueError(
                f"corpus-level constraints are penalised softly (a quadratic penalty); "
                f"{con.name} is hard: give hard=False (and a larger weight), or use label switching"
            )


class _CorpusPlan(NamedTuple):
    """The corpus term of one evaluation: per chunk, per corpus constraint, the maximiser of the
    convex part and the linearisation point (labels (B_k, N_k)), the constant ``sum_c q_c(Y*_c)
    + q_c(p_c)`` and the number of convex searches not certified exact."""

    labels: list[list[tuple[Tensor, Tensor]]]
    constant: float
    uncertified: int


# ---------------------------------------------------------------------- the module
class CCCPModule(StructuredModule):
    """Gamma-SSVM (seed 000) trained by CCCP; see the module docstring.

    Args:
        structure: a :class:`~structssl.structures.LinearChain` (the constraint features and
            the k-best search are chain-specific).
        scorer: inputs -> potentials (e.g. ``LinearChainScorer``).
        constraints: the prior knowledge (instance-level, and corpus-level ratios with a
            label-free denominator, see the module docstring; required for
            ``formulation="transductive"``).
        formulation: ``"transductive"`` (eq. 13: labeled hinge + constraints on unlabeled
            data) or ``"labeling"`` (section 4, eq. 16: labels enter only through Gamma with
            the node-indicator map; the labeled batch plays the role of the ``j``).
        loss: the labeled loss (default margin-rescaled Hamming ``StructuredHingeLoss()``).
        C1: weight of the labeled hinge (0 allowed: none).
        C2: weight of the constraint term, > 0.
        mu: quadratic-penalty weight, > 0.
        gamma_weight: ``lambda`` of the L1 penalty (default: 1 transductive, 1/2 labeling).
        inner_epochs: optimiser epochs per CCCP outer iteration.
        tol: stop when the CCCP objective decreases by less than this between outer iterations
            (``None``: never stop early).
        supervised_epochs: initial supervised epochs (w from the supervised solution).
        v_mode: ``"closed_form"`` or ``"parameter"``.
        v_init: ``"target"`` or ``"prediction"`` (parameter mode).
        max_length: longest example (parameter mode storage; default: from the data module).
        extra_features: add the constraint features to ``Phi`` ("I").
        search_k: k of the k-best search for non-linear constraints.
        corpus_budget: the most corpus decodes (batched Viterbi passes over the whole
            unlabeled set) of one convex corpus search; beyond it the search stops uncertified.
        steps_per_batch: optimiser steps per training batch (useful with ``adam``/``sgd`` on
            full batches: an epoch is then ``steps_per_batch`` steps). The hinge loss is not
            smooth; L-BFGS tends to stall on it, Adam is the robust choice.
        keep_best_iterate: end every CCCP outer iteration at the iterate of its inner steps
            with the lowest bound (the values the optimiser's closure evaluated, and the final
            iterate's), so that J never increases between outer iterations whatever the
            optimiser: Adam can overshoot the piecewise-linear bound (Taskar's OCR at C2 = 6260,
            lr 0.01: the bound rose from 25 to 81 within one outer iteration, and CCCP stopped
            at its second). Applies when an epoch is one training batch (full batches).
        **kwargs: the options of :class:`~structssl.training.modules.StructuredModule`
            (``optimizer``, ``lr``, ``lbfgs_max_iter``, ``lbfgs_history``, ``momentum``,
            ``regularize_bias``, ``num_labeled``, ``num_unlabeled``, ``task``, ``tags``).
    """

    uses_unlabeled = True
    annealable = ("C", "Cu")
    sharding_refusal = (
        "its auxiliary vectors v_j, its cached CCCP linearisation points and its outer-loop "
        "stopping test are kept per example and per batch of one process, not reduced across "
        "processes; train it on one process (--trainer.devices=1; a GPU runs its dynamic "
        "programs)"
    )
    convergence_refusal = (
        "its objective changes with every CCCP linearisation, and the outer loop stops on its "
        "own test; use tol (stop when the CCCP objective decreases by less than tol between "
        "outer iterations)"
    )

    def __init__(
        self,
        structure: Structure,
        scorer: nn.Module,
        constraints: Optional[ConstraintSet] = None,
        formulation: Literal["transductive", "labeling"] = "transductive",
        loss: Optional[nn.Module] = None,
        C1: float = 1.0,
        C2: float = 1.0,
        mu: float = 1.0,
        gamma_weight: Optional[float] = None,
        inner_epochs: int = 5,
        tol: Optional[float] = 1e-4,
        supervised_epochs: int = 0,
        v_mode: Literal["closed_form", "parameter"] = "closed_form",
        v_init: Literal["target", "prediction"] = "target",
        max_length: Optional[int] = None,
        extra_features: bool = False,
        search_k: int = 16,
        steps_per_batch: int = 1,
        corpus_budget: int = 64,
        keep_best_iterate: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(structure, scorer, 1.0, float(C2), **kwargs)
        if not isinstance(structure, LinearChain):
            raise NotImplementedError(
                f"CCCPModule supports LinearChain structures (constraint features and k-best "
                f"search are chain-specific); got {type(structure).__name__}"
            )
        if formulation not in ("transductive", "labeling"):
            raise ValueError(f"formulation must be 'transductive' or 'labeling'; got {formulation!r}")
        if formulation == "transductive" and constraints is None:
            raise ValueError("constraints must be given for formulation='transductive'; got None")
        if constraints is not None and not isinstance(constraints, ConstraintSet):
            raise TypeError(f"constraints must be a ConstraintSet; got {type(constraints).__name__}")
        if constraints is not None:
            _check_corpus_constraints(constraints.select(level="corpus").constraints, formulation)
        for name, value, zero_ok in (("C1", C1, True), ("C2", C2, False), ("mu", mu, False), ("tol", 0.0 if tol is None else tol, True)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (value == 0 and not zero_ok):
                raise ValueError(f"{name} must be a number {'>= 0' if zero_ok else '> 0'}; got {value!r}")
        for name, value, minimum in (("inner_epochs", inner_epochs, 1), ("supervised_epochs", supervised_epochs, 0), ("search_k", search_k, 1), ("steps_per_batch", steps_per_batch, 1), ("corpus_budget", corpus_budget, 2)):
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"{name} must be an int >= {minimum}; got {value!r}")
        if v_mode not in ("closed_form", "parameter"):
            raise ValueError(f"v_mode must be 'closed_form' or 'parameter'; got {v_mode!r}")
        if v_init not in ("target", "prediction"):
            raise ValueError(f"v_init must be 'target' or 'prediction'; got {v_init!r}")
        if v_mode == "closed_form" and v_init != "target":
            raise ValueError("v_init='prediction' needs v_mode='parameter' (closed form sets v = a)")
        self.constraints = constraints
        self.formulation = formulation
        self.loss = StructuredHingeLoss() if loss is None else loss
        if not isinstance(self.loss, nn.Module):
            raise TypeError(f"loss must be an nn.Module; got {type(self.loss).__name__}")
        self.C1 = float(C1)
        self.C2 = float(C2)
        self.mu = float(mu)
        default_lambda = 1.0 if formulation == "transductive" else 0.5
        self.gamma_weight = default_lambda if gamma_weight is None else float(gamma_weight)
        if not self.gamma_weight > 0:
            raise ValueError(f"gamma_weight must be > 0; got {gamma_weight!r}")
        self.inner_epochs = inner_epochs
        self.tol = None if tol is None else float(tol)
        self.supervised_epochs = supervised_epochs
        self.v_mode = v_mode
        self.v_init = v_init
        self.max_length = max_length
        self.extra_features = bool(extra_features)
        self.search_k = search_k
        self.steps_per_batch = steps_per_batch
        self.keep_best_iterate = bool(keep_best_iterate)
        #: (parameters, detached terms) of the best iterate of the current outer iteration's
        #: inner steps (``None``: none yet)
        self._inner_best: Optional[tuple[list[Tensor], ObjectiveTerms]] = None
        self.corpus_budget = corpus_budget
        c = structure.num_labels
        self._punct: Optional[PunctuationTransitions] = None
        if self.extra_features:
            if constraints is None:
                raise ValueError("extra_features=True needs constraints")
            lin = [x for x in constraints if x.linear_indicators]
            self.indicator_weight = nn.Parameter(torch.zeros(len(lin)))
            punct = [x for x in constraints if isinstance(x, PunctuationTransitions)]
            self._punct = punct[0] if punct else None
            self.boundary_transition = nn.Parameter(torch.zeros(c, c)) if punct else None
        self.v_store = nn.ParameterDict()
        self._bound: Optional[ConstraintSet] = None
        self._linearized: dict[Any, Any] = {}
        self._lin_outer = -1
        self._binding = [0, 0]  # this outer iteration: examples whose guided labels differ, all
        self._outer_binding: list[tuple[int, int]] = []  # the same, per outer iteration
        self._outer_values: list[float] = []
        self._pending: Optional[float] = None
        self._corpus: list[Constraint] = []
        self._corpus_points: dict[Any, list[list[Tensor]]] = {}
        self._corpus_previous: dict[Any, list[list[Tensor]]] = {}
        self._corpus_warm: dict[int, float] = {}
        self._corpus_log: dict[str, float] = {}
        self._init_rho()

    # ------------------------------------------------------------------ setup
    def losses(self) -> list[nn.Module]:
        return [self.loss]

    def setup(self, stage: str) -> None:
        super().setup(stage)
        dm = self._datamodule()
        if self.constraints is not None:
            self._bound = self.bind_constraints(self.constraints, estimate_targets=stage == "fit")
            if self._punct is not None:
                self._punct = self._punct.bind(self._bound.label_names or ())
            self._corpus = self._bound.select(level="corpus").constraints
        if stage == "fit" and dm is not None:
            n, m = self.dataset_sizes()
            m_eff = n if self.formulation == "labeling" else m
            if self.v_mode == "closed_form" and self.mu > self.gamma_weight * m_eff:
                raise ValueError(
                    f"v_mode='closed_form' is exact only for mu <= gamma_weight * m = "
                    f"{self.gamma_weight * m_eff}; got mu={self.mu} (use v_mode='parameter')"
                )
            if self.v_mode == "parameter" and not len(self.v_store):
                length = self.max_length or getattr(dm, "max_length", None)
                if length is None:
                    raise ValueError("v_mode='parameter' needs max_length (or a data module max_length)")
                self._make_v(m_eff, int(length))

    def _blocks(self) -> list[tuple[str, int]]:
        """(name, width per position or -1 for one global entry) of the v layout."""
        if self.formulation == "labeling":
            return [("node", self.structure.num_labels)]
        assert self._bound is not None
        lin = [c for c in self._bound.instance_constraints() if c.linear_indicators]
        non = self._bound.nonlinear_indicators()
        out = [(f"c{i}", 1 if c.positionwise else -1) for i, c in enumerate(lin)]
        return out + [(f"g{i}", -1) for i in range(len(non))]

    def _make_v(self, m: int, length: int) -> None:
        for name, width in self._blocks():
            size = 1 if width < 0 else width * length
            self.v_store[name] = nn.Parameter(torch.ones(m, size))

    # ------------------------------------------------------------------ potentials
    def potentials(self, batch: Batch) -> Tensor:
        """The scorer's potentials in the (B, N, C, C) edge layout (the constraint features
        fold into it; a factored scorer's are expanded), plus the extra constraint features."""
        pot = self.structure.edge_potentials(super().potentials(batch), batch.get("lengths"))
        if not self.extra_features:
            return pot
        assert self._bound is not None
        tokens, lengths = batch.get("tokens"), batch["lengths"]
        lin = [c for c in self._bound if c.linear_indicators]
        extra = torch.zeros_like(pot)
        for weight, con in zip(self.indicator_weight, lin):
            feats = con.indicator_features(tokens, lengths, dtype=pot.dtype)
            ones = torch.ones(pot.shape[0], int(getattr(feats, "num_constraints")), dtype=pot.dtype, device=pot.device)
            extra = extra + weight * feats.adjoint(ones, pot)
        if self.boundary_transition is not None and self._punct is not None:
            n = pot.shape[1]
            allowed = self._punct.allowed_boundaries(tokens, lengths, n).to(pot.dtype).clone()
            allowed[:, 0] = 0.0
            valid = LinearChain.valid_mask(lengths, n).to(pot.dtype)
            extra = extra + (allowed * valid).view(*allowed.shape, 1, 1) * self.boundary_transition
        return pot + extra

    def weight_norm_squared(self) -> Tensor:
        """``||w||^2``: the scorer's weights plus the extra constraint-feature weights."""
        total = super().weight_norm_squared()
        if self.extra_features:
            total = total + (self.indicator_weight ** 2).sum()
            if self.boundary_transition is not None:
                total = total + (self.boundary_transition ** 2).sum()
        return total

    # ------------------------------------------------------------------ constraint features
    def _features(self, batch: Batch, dtype: torch.dtype) -> tuple[Optional[ConstraintFeatures], list[Constraint]]:
        if self.formulation == "labeling":
            return NodeFeatures(), []
        assert self._bound is not None
        tokens, lengths = batch.get("tokens"), batch["lengths"]
        return self._bound.indicator_features(tokens, lengths, dtype=dtype), self._bound.nonlinear_indicators()

    def _targets(self, batch: Batch, d: int, dtype: torch.dtype) -> Tensor:
        """``a_j`` (B, d): ones (section 5.1) or ``phi(y_j)`` (section 4)."""
        lengths = batch["lengths"]
        if self.formulation == "labeling":
            parts = self.structure.to_parts(batch["labels"], lengths)
            return NodeFeatures().phi(parts).to(dtype)
        return torch.ones(lengths.shape[0], d, dtype=dtype, device=lengths.device)

    def _v(self, batch: Batch, d: int, target: Tensor) -> Tensor:
        if self.v_mode == "closed_form":
            return target
        if "index" not in batch:
            raise ValueError("v_mode='parameter' needs batches with 'index' (the example's index)")
        idx = batch["index"]
        n = int(batch["inputs"].shape[1])
        cols = []
        for name, width in self._blocks():
            store = self.v_store[name]
            cols.append(store[idx] if width < 0 else store[idx, : n * width])
        v = torch.cat(cols, 1).to(target.dtype)
        if v.shape[1] != d:
            raise ValueError(f"stored v has {v.shape[1]} entries for a batch needing {d}")
        return v

    def _init_v_prediction(self, batch: Batch, phi: Tensor) -> None:
        idx = batch["index"]
        n = int(batch["inputs"].shape[1])
        start = 0
        with torch.no_grad():
            for name, width in self._blocks():
                size = 1 if width < 0 else n * width
                store = self.v_store[name]
                store[idx, :size] = phi[:, start : start + size].to(store.dtype)
                start += size

    # ------------------------------------------------------------------ objective
    def _outer(self) -> int:
        return (self.current_epoch - self.supervised_epochs) // self.inner_epochs

    def _cache_key(self, batch: Batch, batch_idx: int) -> Any:
        return batch_idx

    def objective_terms(self, batch: Batch) -> ObjectiveTerms:
        return self._objective(batch, 0, None)

    @property
    def supports_chunks(self) -> bool:  # type: ignore[override]
        """Full batches chunk by chunk (see :attr:`StructuredModule.supports_chunks`) in the
        transductive formulation with ``v`` in closed form, where ``J`` is a sum over the
        labeled and over the unlabeled examples (each chunk keeps its own linearisation
        point); the parameter mode's ``v`` and the labeling formulation take one batch."""
        return self.formulation == "transductive" and self.v_mode == "closed_form"

    def labeled_term(self, batch: Batch) -> Tensor:
        pot = self.potentials(batch)
        return self.loss(self.structure, pot, batch["labels"], batch.get("lengths"))

    def _evaluate(self, batch: Batch, batch_idx: int, guided: Any) -> ObjectiveTerms:
        """``J`` with the concave part linearised at ``guided`` (labels (B, N), or one per
        unlabeled chunk), its gradient accumulated: in one piece, or chunk by chunk when a
        part is a list of chunks (:attr:`supports_chunks`; the same value and gradient)."""
        labeled, unlabeled = self._split(batch)
        key = self._cache_key(batch, batch_idx)
        corpus_points = None if guided is None else self._corpus_points.get(key)
        if not isinstance(labeled, list) and not isinstance(unlabeled, list):
            terms = self._objective(batch, batch_idx, guided, corpus_points)
            self.manual_backward(terms.objective)
            return terms
        n, _ = self.dataset_sizes()
        norm = self.weight_norm_squared()
        self.manual_backward(norm / (2 * n))
        hinge = self._backward_chunks(labeled, self.labeled_term, self.C1 / n).to(norm.dtype)
        objective = norm.detach() / (2 * n) + self.C1 / n * hinge
        u_value = torch.zeros_like(objective)
        self._last_uncertified = 0
        if unlabeled is not None and self.current_epoch >= self.supervised_epochs:
            chunks = as_chunks(unlabeled)
            points = guided if isinstance(guided, list) else [guided] * len(chunks)
            at = {id(chunk): point for chunk, point in zip(chunks, points)}
            index = {id(chunk): k for k, chunk in enumerate(chunks)}
            plan = self.corpus_terms(chunks, corpus_points) if self._corpus else None

            def term(chunk: Batch) -> Tensor:
                pot = self.potentials(chunk)
                value, uncertified = self.constraint_term(chunk, at[id(chunk)], pot)
                self._last_uncertified += uncertified
                if plan is not None:
                    labels = plan.labels[index[id(chunk)]]
                    value = value + self._corpus_chunk_term(labels, pot, chunk["lengths"])
                return value

            u_value = self._backward_chunks(chunks, term, self.C2 / n).to(norm.dtype)
            if plan is not None:
                u_value = u_value + plan.constant
                self._corpus_log["train/corpus_uncertified"] = float(plan.uncertified)
            objective = objective + self.C2 / n * u_value
        return ObjectiveTerms(objective, norm.detach(), hinge, u_value)

    def _objective(
        self,
        batch: Batch,
        batch_idx: int,
        guided: Optional[Tensor],
        corpus_points: Optional[list[list[Tensor]]] = None,
    ) -> ObjectiveTerms:
        labeled, unlabeled = self._split(batch)
        if self.formulation == "labeling":
            unlabeled = labeled
        n, m = self.dataset_sizes()
        norm = self.weight_norm_squared()
        pot_l = self.potentials(labeled)
        if self.C1 > 0:
            hinge = self.loss(self.structure, pot_l, labeled["labels"], labeled.get("lengths"))
        else:
            hinge = pot_l.new_zeros(())
        objective = norm / (2 * n) + self.C1 / n * hinge
        u_value = objective.new_zeros(())
        self._last_uncertified = 0
        if unlabeled is not None and self.current_epoch >= self.supervised_epochs:
            pot_u = pot_l if self.formulation == "labeling" else None
            if self._corpus and pot_u is None:
                pot_u = self.potentials(unlabeled)
            u_value, self._last_uncertified = self.constraint_term(unlabeled, guided, pot_u)
            if self._corpus:
                assert pot_u is not None
                plan = self.corpus_terms(unlabeled, corpus_points)
                corpus = self._corpus_chunk_term(plan.labels[0], pot_u, unlabeled["lengths"])
                u_value = u_value + corpus + plan.constant
                self._corpus_log["train/corpus_uncertified"] = float(plan.uncertified)
            objective = objective + self.C2 / n * u_value
        return ObjectiveTerms(objective, norm, hinge, u_value)

    # ------------------------------------------------------------------ public pieces
    def constraint_term(
        self, unlabeled: Batch, guided: Optional[Tensor] = None, potentials: Optional[Tensor] = None
    ) -> tuple[Tensor, int]:
        """The bracket of eq. (13) on one batch of constraint examples ``j``:
        ``lambda m mean_j ||v_j - a_j||_1 + mean_j B_j`` (multiply by ``C2 / n`` for its share of
        ``J``), with the concave part linearised at ``guided`` (labels (B, N)) when given, else
        its exact max. For ``formulation="labeling"`` pass the labeled batch. Differentiable
        in ``w`` (and ``v`` in parameter mode). ``potentials``: the batch's potentials if the
        caller has them already (else they are computed).

        Returns:
            ``(value, uncertified)``: a scalar tensor and the number of rows whose non-linear
            search was not certified exact.
        """
        n, m = self.dataset_sizes()
        pot_u = self.potentials(unlabeled) if potentials is None else potentials
        assert isinstance(pot_u, Tensor)
        features, nonlinear, d, target = self._constraint_inputs(unlabeled, pot_u)
        v = self._v(unlabeled, d, target)
        terms = gamma_dc_terms(
            self.structure, pot_u, unlabeled["lengths"], v, self.mu, features, nonlinear,
            unlabeled.get("tokens"), guided, self.search_k,
        )
        m_eff = n if self.formulation == "labeling" else m
        gamma = self.gamma_weight * m_eff * (v - target).abs().sum(1).mean()
        return gamma + terms.bracket().mean(), int(terms.uncertified.sum())

    def constraint_guided_labels(
        self, unlabeled: Batch, potentials: Optional[Tensor] = None
    ) -> Tensor:
        """The constraint-guided argmax of eq. (12)/(15) at the current ``w`` and ``v`` (no
        gradient): the CCCP linearisation point of a batch of constraint examples. Shape
        (B, N). ``potentials`` as in :meth:`constraint_term`."""
        with torch.no_grad():
            pot_u = self.potentials(unlabeled) if potentials is None else potentials.detach()
            assert isinstance(pot_u, Tensor)
            features, nonlinear, d, target = self._constraint_inputs(unlabeled, pot_u)
            v = self._v(unlabeled, d, target).detach()
            coef = self.mu / 2 * v - self.mu / 4
            _, guided, _ = _augmented_max(
                self.structure, pot_u, unlabeled["lengths"], coef, features, nonlinear,
                unlabeled.get("tokens"), self.search_k,
            )
        return guided

    # ------------------------------------------------------------------ corpus-level constraints
    def _corpus_penalty(self, con: Constraint, corpus: Any) -> RatioPenalty:
        """``q_c(r) = (D/m) weight (mu/4) dev(r)^2`` of one corpus constraint over ``corpus``
        (a :class:`~structssl.constraints.corpus_search.RatioCorpus`; see the module docstring)."""
        scale = corpus.denominator / corpus.num_examples * con.weight * self.mu / 4
        return RatioPenalty(float(getattr(con, "target")), getattr(con, "bound"), scale)

    def _corpora(self, chunks: list[Batch]) -> list[Any]:
        """One :class:`~structssl.constraints.corpus_search.RatioCorpus` per corpus constraint
        over the unlabeled chunks (potentials without gradient).

        Raises:
            ValueError: the chunks are not the whole unlabeled set (a mini-batch).
        """
        self.require_whole_unlabeled(
            chunks, f"corpus-level constraints {[c.name for c in self._corpus]} are about the whole unlabeled set"
        )
        with torch.no_grad():
            pots = [self.potentials(chunk).detach() for chunk in chunks]
        lengths = [chunk["lengths"] for chunk in chunks]
        tokens = [chunk.get("tokens") for chunk in chunks]
        return [ratio_corpus(con, self.structure, pots, lengths, tokens) for con in self._corpus]

    def _corpus_guided(
        self, corpora: list[Any], previous: Optional[list[list[Tensor]]]
    ) -> list[list[Tensor]]:
        points, gap = [], 0.0
        for i, (con, corpus) in enumerate(zip(self._corpus, corpora)):
            shapes = [tuple(p.shape[:2]) for p in corpus.potentials]
            fits = previous is not None and [tuple(y.shape) for y in previous[i]] == shapes
            candidates = [previous[i]] if fits and previous is not None else []
            penalty = self._corpus_penalty(con, corpus)
            result: RatioSearch = ratio_guided_max(corpus, penalty, candidates=candidates)
            points.append(result.point.labels)
            gap += result.gap
        self._corpus_log["train/corpus_guided_gap"] = gap
        return points

    def corpus_guided_labels(
        self, unlabeled: Any, previous: Optional[list[list[Tensor]]] = None
    ) -> list[list[Tensor]]:
        """The linearisation points of the corpus terms (no gradient): per corpus constraint
        ``c``, ``p_c ~ argmax_Y F(Y) - q_c(Y)`` by Lagrangian relaxation
        (:func:`~structssl.constraints.corpus_search.ratio_guided_max`), never worse by that
        value than the plain argmax or ``previous`` (the last outer iteration's points). The
        summed duality gap is logged as ``train/corpus_guided_gap``.

        Args:
            unlabeled: the whole unlabeled set, one batch or a list of chunks.
            previous: the points of the same chunks from before, or None.

        Returns:
            per constraint a list of labels, one (B_k, N_k) tensor per chunk.
        """
        return self._corpus_guided(self._corpora(as_chunks(unlabeled)), previous)

    def corpus_terms(
        self, unlabeled: Any, points: Optional[list[list[Tensor]]] = None
    ) -> _CorpusPlan:
        """The corpus terms at the current ``w`` (no gradient): for each corpus constraint the
        certified maximiser ``Y*_c`` of ``F + q_c``
        (:func:`~structssl.constraints.corpus_search.ratio_convex_max`, warm started at the
        last multiplier) and the linearisation point ``p_c`` (``points``, else
        :meth:`corpus_guided_labels`). ``B_c = F(Y*_c) + q_c(Y*_c) - F(p_c) + q_c(p_c)``: the
        ``F`` difference is :meth:`_corpus_chunk_term` summed over the chunks by their share,
        the rest is the plan's ``constant``."""
        chunks = as_chunks(unlabeled)
        corpora = self._corpora(chunks)
        if points is None:
            points = self._corpus_guided(corpora, None)
        labels: list[list[tuple[Tensor, Tensor]]] = [[] for _ in chunks]
        constant, uncertified = 0.0, 0
        for i, (con, corpus, point) in enumerate(zip(self._corpus, corpora, points)):
            penalty = self._corpus_penalty(con, corpus)
            warm = [self._corpus_warm[i]] if i in self._corpus_warm else []
            result = ratio_convex_max(corpus, penalty, budget=self.corpus_budget, warm=warm)
            self._corpus_warm[i] = result.multiplier
            constant += result.value - result.point.score + penalty(corpus.evaluate(point).ratio)
            uncertified += int(not result.certified)
            for k in range(len(chunks)):
                labels[k].append((result.point.labels[k], point[k]))
        return _CorpusPlan(labels, constant, uncertified)

    def _corpus_chunk_term(
        self, labels: list[tuple[Tensor, Tensor]], pot: Tensor, lengths: Tensor
    ) -> Tensor:
        """``mean_j sum_c s_j(Y*_cj) - s_j(p_cj)`` over one chunk, differentiable in ``pot``."""
        total = pot.new_zeros(())
        for best, point in labels:
            score = self.structure.score
            gain = score(pot, best, lengths) - score(pot, point, lengths)
            total = total + gain.mean()
        return total

    def _constraint_inputs(
        self, batch: Batch, pot: Tensor
    ) -> tuple[Optional[ConstraintFeatures], list[Constraint], int, Tensor]:
        """``(features, nonlinear, d, target)`` of a batch of constraint examples: the
        constraint features, their width and the targets ``a_j`` (B, d)."""
        features, nonlinear = self._features(batch, pot.dtype)
        d = _width(features, nonlinear, pot)
        return features, nonlinear, d, self._targets(batch, d, pot.dtype)

    def _linearization(self, batch: Batch, batch_idx: int) -> Any:
        """The constraint-guided labels of the current outer iteration (cached, no grad): a
        (B, N) tensor, or a list of them for an unlabeled part given as chunks."""
        if self.current_epoch < self.supervised_epochs:
            return None
        outer = self._outer()
        if outer != self._lin_outer:
            self._linearized = {}
            self._binding = [0, 0]
            if self._corpus_points:
                self._corpus_previous = self._corpus_points
            self._corpus_points = {}
            self._lin_outer = outer
        key = self._cache_key(batch, batch_idx)
        if key in self._linearized:
            return self._linearized[key]
        labeled, unlabeled = self._split(batch)
        if self.formulation == "labeling":
            unlabeled = labeled
        if unlabeled is None:
            return None
        if self._corpus:
            previous = self._corpus_previous.get(key)
            self._corpus_points[key] = self.corpus_guided_labels(unlabeled, previous)
        if isinstance(unlabeled, list):  # chunks (closed-form v: no initialisation of v)
            points = []
            for chunk in unlabeled:
                with torch.no_grad():
                    pot_c = self.potentials(chunk)
                assert isinstance(pot_c, Tensor)
                points.append(self.constraint_guided_labels(chunk, pot_c))
                self._count_binding(pot_c, chunk["lengths"], points[-1])
            self._linearized[key] = points
            return points
        with torch.no_grad():
            pot_u = self.potentials(unlabeled)
            assert isinstance(pot_u, Tensor)
            if self.v_mode == "parameter" and self.v_init == "prediction" and outer == 0:
                features, nonlinear = self._features(unlabeled, pot_u.dtype)
                labels, _ = self.structure.argmax(pot_u, unlabeled["lengths"])
                phi = _phi(self.structure, features, nonlinear, labels, unlabeled["lengths"], unlabeled.get("tokens"), pot_u.dtype)
                self._init_v_prediction(unlabeled, phi)
        guided = self.constraint_guided_labels(unlabeled, pot_u)
        self._count_binding(pot_u, unlabeled["lengths"], guided)
        self._linearized[key] = guided
        return guided

    def _count_binding(self, potentials: Tensor, lengths: Tensor, guided: Tensor) -> None:
        """Count the constraint examples whose guided labels (B, N) differ from the model's own
        argmax at ``potentials``: where the constraints bind at this linearisation point (none:
        the CCCP step has nothing to move towards but the margins of the bound)."""
        with torch.no_grad():
            labels, _ = self.structure.argmax(potentials.detach(), lengths)
            valid = torch.arange(labels.shape[1], device=labels.device) < lengths.unsqueeze(1)
            differ = ((labels != guided) & valid).any(1)
        self._binding[0] += int(differ.sum())
        self._binding[1] += int(differ.numel())

    # ------------------------------------------------------------------ training
    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        opt = self.optimizers()
        guided = self._linearization(batch, batch_idx)
        first_of_outer = (
            guided is not None
            and (self.current_epoch - self.supervised_epochs) % self.inner_epochs == 0
            and batch_idx == 0
        )
        last: dict[str, ObjectiveTerms] = {}
        guard = (
            guided is not None and self.keep_best_iterate
            and getattr(self.trainer, "num_training_batches", 0) == 1
        )
        if first_of_outer:
            self._inner_best = None

        def closure() -> Tensor:
            opt.zero_grad()
            terms = self._evaluate(batch, batch_idx, guided)
            if "first" not in last:
                last["first"] = terms
            last["terms"] = terms
            if guard:
                self._note_iterate(terms)
            return terms.objective

        self._precondition(opt, batch)
        for _ in range(self.steps_per_batch):
            opt.step(closure=closure)
        if self._leave_zero(opt):
            opt.step(closure=closure)
        inner = (self.current_epoch - self.supervised_epochs) % self.inner_epochs
        if guard and inner == self.inner_epochs - 1:
            closure()  # the final iterate's bound, then back to the best one
            opt.zero_grad()
            best = self._restore_best_iterate()
            if best is not None:  # log the iterate the outer iteration ends at
                last["terms"] = best
        terms = last["terms"]
        labeled, _ = self._split(batch)
        chunks = as_chunks(labeled)
        size = num_examples(chunks)
        log = dict(on_step=False, on_epoch=True, batch_size=size)
        self.log("train/objective", terms.objective.detach(), prog_bar=True, **log)
        self.log("train/labeled_loss", terms.labeled_loss.detach(), **log)
        self.log("train/unlabeled_loss", terms.unlabeled_loss.detach(), **log)
        self.log("train/weight_norm_squared", terms.weight_norm_squared.detach(), **log)
        self.log("train/search_uncertified", float(self._last_uncertified), **log)
        for name, value in self._corpus_log.items():
            self.log(name, value, **log)
        if first_of_outer:
            value = float(last["first"].objective.detach())
            self.log("train/cccp_objective", value, **log)
            self.log("train/cccp_outer", float(self._outer()), **log)
            changed, total = self._binding
            self.log("train/cccp_guided_changed", changed / max(total, 1), **log)
            self._outer_binding.append((changed, total))
            if self.tol is not None and self._outer_values and self._outer_values[-1] - value < self.tol:
                self.trainer.should_stop = True
            self._outer_values.append(value)
        with torch.no_grad():
            for chunk in chunks:
                self.train_metrics.update(self.decode(chunk), chunk["labels"], lengths=chunk.get("lengths"))
        return terms.objective.detach()

    def on_fit_end(self) -> None:
        """Adds one line on what CCCP did: J at each outer iteration's linearisation point and
        how many constraint examples the constraints retagged there."""
        if self._outer_values:
            values = ", ".join(f"{v:.6g}" for v in self._outer_values)
            changed = ", ".join(str(c) for c, _ in self._outer_binding)
            self._fit_end_lines.append(
                f"{type(self).__name__}: {len(self._outer_values)} CCCP outer iterations, J = "
                f"{values}; the constraints changed the tagging of {changed} of the "
                f"{self._outer_binding[-1][1]} constraint examples"
            )
        super().on_fit_end()

    @property
    def learns_from_unlabeled(self) -> bool:
        """The labeling formulation (section 4) puts its constraint term on the labeled
        examples: it needs no unlabeled ones."""
        return self.formulation == "transductive"

    def _trainable(self) -> list[Tensor]:
        return [p for p in self.parameters() if p.requires_grad]

    def _note_iterate(self, terms: ObjectiveTerms) -> None:
        """Remember the current parameters and their terms when their bound is the lowest of
        this outer iteration (``keep_best_iterate``)."""
        best = self._inner_best
        if float(terms.objective.detach()) < (math.inf if best is None else float(best[1].objective)):
            kept = ObjectiveTerms(*(x.detach() if isinstance(x, Tensor) else x for x in terms))
            self._inner_best = ([p.detach().clone() for p in self._trainable()], kept)

    def _restore_best_iterate(self) -> Optional[ObjectiveTerms]:
        """Set the parameters to the remembered best iterate; returns its terms (``None``
        when none was remembered)."""
        best, self._inner_best = self._inner_best, None
        if best is None:
            return None
        with torch.no_grad():
            for param, value in zip(self._trainable(), best[0]):
                param.copy_(value)
        return best[1]

    @property
    def cccp_objectives(self) -> list[float]:
        """The CCCP objective J at each outer linearisation point so far."""
        return list(self._outer_values)

    def eval_loss(self, batch: Batch) -> Tensor:
        return self.labeled_term(batch)
