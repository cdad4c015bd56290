"""Joint constrained inference over a corpus by dual decomposition (seed 004 section 4.2).

Problem. Given the potentials of ``B`` examples (one corpus), find labelings ``y_1..y_B``

    max_Y  sum_j s_j(y_j)   s.t.   lower_m <= (1/B) sum_j <F_m, parts(y_j)> <= upper_m   (all m)

where each constraint ``m`` is linear in the parts (its feature ``F_m`` is shaped like one
example's potentials, :class:`CorpusLinearConstraints`); this is what corpus-level constraints
such as the label distribution / correlation constraints of seed 004 compile to
(:mod:`structssl.inference.multilabel_constraints`). An instance-level constraint is the special
case of a corpus of one.

Method (seed 004 section 4.2, Komodakis et al. 2011). The corpus constraints are relaxed with
multipliers ``lambda_lo, lambda_up >= 0`` (one pair per constraint; the paper's eta, scaled by
``1/B`` so that they are in the units of the potentials); for fixed multipliers the problem
splits into one problem per example with potentials ``s_j + sum_m (lambda_lo - lambda_up)_m
F_m``. Each example's problem is split into tractable **components** (:class:`Components`): the
K spanning star trees of the fully connected multi-label MRF (:class:`StarTreeComponents`), or
one exact component (:class:`ExactComponent`: any :class:`~structssl.structures.base.Structure`
with an exact ``argmax``, e.g. a linear chain, or the multi-label model by enumeration for small
K). The per-example master-slave multipliers ``nu`` are updated by projected subgradient with the
mean-removal projection (inner loop, ``inner_iter`` steps, warm started across outer steps); the
corpus multipliers by projected subgradient on the nonnegative orthant (outer loop,
``outer_iter`` steps), with the subgradient ``(1/B) sum_j <F_m, z_j> - bound`` where ``z_j`` is
the components' (fractional) average of their optimal parts. Primal recovery follows Komodakis
et al. (section IV.B): every component's optimal labeling (and the vote of the components) is a
primal candidate; per example the candidate with the best Lagrangian score is taken (of
scores tied up to rounding, the first one, or the labels already held), and over
the outer iterations the corpus labeling with the best primal value among those within
``feasibility_tol`` of feasible (else the least violating one) is returned.

Reported per outer iteration: the primal value ``(1/B) sum_j s_j(y_j)`` of the recovered
labeling, the dual value (an upper bound on the constrained optimum, per example) and the
largest constraint violation (in rate units). Everything is batched over the examples (and runs
on the potentials' device); no autograd.

References: Chang, Sundararajan and Keerthi (seed 004); Komodakis, Paragios and Tziritas, "MRF
energy minimization and beyond via dual decomposition", PAMI 33(3), 2011.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple, Optional, Sequence

import torch
from torch import Tensor

from structssl.structures.base import Potentials, Structure, as_tuple, like, positive_int
from structssl.structures.multilabel import MultiLabelPotentials, PairwiseMultiLabel
from structssl.structures.star_trees import StarPotentials, _star_argmax, star_potentials

__all__ = [
    "CorpusLinearConstraints",
    "Components",
    "ComponentSolution",
    "StarTreeComponents",
    "ExactComponent",
    "CorpusMultipliers",
    "CorpusInferenceResult",
    "corpus_dual_decomposition",
    "CorpusDualDecomposition",
]


# ---------------------------------------------------------------------- constraints
@dataclass(frozen=True)
class CorpusLinearConstraints:
    """``lower <= (1/B) sum_j <features_m, parts(y_j)> <= upper`` for every constraint ``m``.

    Attributes:
        features: a tuple with one tensor per potentials component, each ``(M, *part_shape)``
            (the layout of one example's potentials, e.g. ``(M, K, 2)`` and
            ``(M, K, K, 2, 2)`` for the multi-label model, ``(M, N, C, C)`` for a chain).
        lower: (M,) lower bounds on the rate (``-inf`` for none).
        upper: (M,) upper bounds on the rate (``+inf`` for none).
        names: optional names of the M constraints (for reports).
    """

    features: tuple[Tensor, ...]
    lower: Tensor
    upper: Tensor
    names: Optional[tuple[str, ...]] = None

    def __post_init__(self) -> None:
        feats = self.features
        if isinstance(feats, Tensor):
            feats = (feats,)
            object.__setattr__(self, "features", feats)
        if not isinstance(feats, tuple) or not feats or not all(isinstance(f, Tensor) for f in feats):
            raise TypeError("features must be a non-empty tuple of tensors shaped (M, *part_shape)")
        m = feats[0].shape[0] if feats[0].dim() else -1
        for i, f in enumerate(feats):
            if f.dim() < 1 or f.shape[0] != m or not f.is_floating_point():
                raise ValueError(
                    f"features[{i}] must be a floating tensor (M, ...) with M = {m}; got "
                    f"shape {tuple(f.shape)} dtype {f.dtype}"
                )
        for name in ("lower", "upper"):
            v = getattr(self, name)
            if not isinstance(v, Tensor) or tuple(v.shape) != (m,):
                got = tuple(v.shape) if isinstance(v, Tensor) else type(v).__name__
                raise ValueError(f"{name} must be a tensor of shape (M,) = ({m},); got {got}")
        if bool((self.lower > self.upper).any()):
            raise ValueError("lower must be <= upper for every constraint; got lower > upper")
        if self.names is not None and len(self.names) != m:
            raise ValueError(f"names must have M = {m} entries; got {len(self.names)}")

    @property
    def num_constraints(self) -> int:
        """M."""
        return int(self.lower.shape[0])

    def to(self, device: torch.device, dtype: torch.dtype) -> "CorpusLinearConstraints":
        """A copy on ``device`` with floating tensors of ``dtype``."""
        return CorpusLinearConstraints(
            tuple(f.to(device=device, dtype=dtype) for f in self.features),
            self.lower.to(device=device, dtype=dtype),
            self.upper.to(device=device, dtype=dtype),
            self.names,
        )

    def concat(self, other: "CorpusLinearConstraints") -> "CorpusLinearConstraints":
        """Both sets of constraints together."""
        if len(other.features) != len(self.features):
            raise ValueError("other must have the same potentials layout as self")
        names = None
        if self.names is not None and other.names is not None:
            names = self.names + other.names
        return CorpusLinearConstraints(
            tuple(torch.cat([a, b.to(a)]) for a, b in zip(self.features, other.features)),
            torch.cat([self.lower, other.lower.to(self.lower)]),
            torch.cat([self.upper, other.upper.to(self.upper)]),
            names,
        )

    def rates(self, parts: Potentials) -> Tensor:
        """``(1/B) sum_j <features_m, parts_j>``: (M,).

        Shape:
            parts: the potentials layout, batch first (B, *part_shape) per component.
        """
        tensors = as_tuple(parts)
        if len(tensors) != len(self.features):
            raise ValueError(
                f"parts must have {len(self.features)} components like the features; got {len(tensors)}"
            )
        total = None
        for p, f in zip(tensors, self.features):
            if tuple(p.shape[1:]) != tuple(f.shape[1:]):
                raise ValueError(
                    f"parts must have part shape {tuple(f.shape[1:])}; got {tuple(p.shape[1:])}"
                )
            term = p.flatten(1).to(f.dtype).mean(0) @ f.flatten(1).t()
            total = term if total is None else total + term
        assert total is not None
        return total

    def violation(self, rates: Tensor) -> Tensor:
        """``max(lower - rate, rate - upper, 0)`` per constraint: (M,)."""
        return torch.maximum((self.lower - rates).clamp_min(0), (rates - self.upper).clamp_min(0))

    def coefficients(self, multipliers: Tensor) -> tuple[Tensor, ...]:
        """``sum_m multipliers_m features_m`` per component, shape (1, *part_shape)."""
        return tuple(
            (multipliers.to(f.dtype) @ f.flatten(1)).view(1, *f.shape[1:]) for f in self.features
        )


# ---------------------------------------------------------------------- components
class ComponentSolution(NamedTuple):
    """The components' optimal solutions at given multipliers (see :class:`Components`).

    Attributes:
        values: (B,) the dual value ``sum_c max(...)`` of each example.
        subgradient: the projected subgradient of the dual in ``nu`` (shaped like ``nu``).
        raw: the components' optimal solutions (for :meth:`Components.relaxed_parts`).
        candidates: (B, n_candidates, *label_shape) primal candidates.
        agree: (B,) bool, all components agree (the candidate is then optimal).
    """

    values: Tensor
    subgradient: Tensor
    raw: Tensor
    candidates: Tensor
    agree: Tensor


class Components:
    """How an example's problem splits into tractable components (the slaves).

    Subclasses implement :meth:`prepare`, :meth:`init_multipliers`, :meth:`solve`,
    :meth:`relaxed_parts`, :meth:`score`, :meth:`to_parts` and :meth:`check`. The multipliers ``nu`` must satisfy the master's equality constraint
    (sum over the components sharing a variable is 0); :meth:`solve` returns the subgradient
    already projected (mean removal).
    """

    def init_multipliers(self, potentials: Potentials) -> Tensor:
        """Zero multipliers for ``potentials`` (B, ...)."""
        raise NotImplementedError

    def prepare(self, potentials: Potentials) -> object:
        """Split checked potentials among the components (once per corpus multiplier step)."""
        raise NotImplementedError

    def solve(self, prepared: object, nu: Tensor) -> ComponentSolution:
        """Solve every component exactly at multipliers ``nu``."""
        raise NotImplementedError

    def relaxed_parts(self, raw: Tensor, like_potentials: Potentials) -> Potentials:
        """The components' average optimal parts (the dual's subgradient in the potentials)."""
        raise NotImplementedError

    def score(self, potentials: Potentials, labels: Tensor) -> Tensor:
        """Scores (B, n) of candidates ``labels`` (B, n, *label_shape)."""
        raise NotImplementedError

    def to_parts(self, labels: Tensor) -> Potentials:
        """Parts of labels (B, *label_shape), in the potentials' layout."""
        raise NotImplementedError

    def check(self, potentials: Potentials) -> Potentials:
        """Validate potentials (the structure's checks)."""
        raise NotImplementedError


class StarTreeComponents(Components):
    """The K spanning star trees of :class:`~structssl.structures.multilabel.PairwiseMultiLabel`.

    Star ``c`` gets ``1/K`` of every unary potential and ``1/2`` of each edge at ``c`` (seed 004
    section 5); ``nu`` (B, K, K, 2) adds ``nu[c, j, a]`` to star ``c``'s potential of
    ``y_j = a``. Candidates: the K star labelings, the per-label majority vote, the labeling of
    the star centres. The relaxed parts average the stars' one-hot parts with the weights of
    the split (1/K per unary, 1/2 per edge).

    Args:
        num_labels: K.
    """

    def __init__(self, num_labels: int) -> None:
        self.structure = PairwiseMultiLabel(num_labels)
        self.num_labels = num_labels

    def __repr__(self) -> str:
        return f"StarTreeComponents(num_labels={self.num_labels})"

    def check(self, potentials: Potentials) -> Potentials:
        pot, _ = self.structure.check(potentials)
        return pot

    def init_multipliers(self, potentials: Potentials) -> Tensor:
        unary = as_tuple(potentials)[0]
        b, k = unary.shape[:2]
        return unary.new_zeros(b, k, k, 2)

    def prepare(self, potentials: Potentials) -> object:
        unary, pairwise = as_tuple(potentials)
        return star_potentials(MultiLabelPotentials(unary, pairwise))

    def solve(self, prepared: object, nu: Tensor) -> ComponentSolution:
        assert isinstance(prepared, StarPotentials)
        labels, values = _star_argmax(prepared.unary + nu, prepared.edge)  # (B, C, K)
        y = labels.to(nu.dtype)
        onehot = torch.stack([1.0 - y, y], dim=-1)  # (B, C, K, 2)
        sub = onehot - onehot.mean(dim=1, keepdim=True)
        vote = (y.mean(1) > 0.5).long().unsqueeze(1)
        centres = torch.diagonal(labels, dim1=1, dim2=2).unsqueeze(1)
        candidates = torch.cat([labels, vote, centres], dim=1)
        agree = (labels == labels[:, :1]).all(dim=2).all(dim=1)
        return ComponentSolution(values.sum(1), sub, labels, candidates, agree)

    def relaxed_parts(self, raw: Tensor, like_potentials: Potentials) -> Potentials:
        dtype = as_tuple(like_potentials)[0].dtype
        b, k = raw.shape[:2]
        y = raw.to(dtype)
        onehot = torch.stack([1.0 - y, y], dim=-1)  # (B, C, K, 2)
        rel_unary = onehot.mean(dim=1)
        centre = torch.diagonal(onehot, dim1=1, dim2=2).transpose(1, 2)  # (B, K, 2)
        own = centre.view(b, k, 1, 2, 1) * onehot.view(b, k, k, 1, 2)  # star k: (y_k, y_l)
        rel_pair = 0.5 * (own + own.permute(0, 2, 1, 4, 3))
        upper = torch.ones(k, k, device=y.device, dtype=dtype).triu(1).view(1, k, k, 1, 1)
        return MultiLabelPotentials(rel_unary, rel_pair * upper)

    def score(self, potentials: Potentials, labels: Tensor) -> Tensor:
        b = labels.shape[0]
        lengths = self.structure._lengths(None, b, labels.device)
        return self.structure._score_k(potentials, labels, lengths)

    def to_parts(self, labels: Tensor) -> Potentials:
        return self.structure.to_parts(labels)


class ExactComponent(Components):
    """One component, the whole structure, solved by its exact ``argmax`` (no ``nu``).

    With it the engine is plain Lagrangian relaxation of the corpus constraints: e.g. a
    :class:`~structssl.structures.linear_chain.LinearChain` (Viterbi), or
    :class:`~structssl.structures.multilabel.PairwiseMultiLabel` by enumeration ("exact
    inference" of seed 004 section 6.3). Examples must share one ``lengths`` layout; pass
    ``lengths`` (B,) when the structure has lengths.

    Args:
        structure: any structure with an exact ``argmax``.
        lengths: (B,) lengths for every call (``None``: full length).
    """

    def __init__(self, structure: Structure, lengths: Optional[Tensor] = None) -> None:
        if not isinstance(structure, Structure):
            raise TypeError(f"structure must be a Structure; got {type(structure).__name__}")
        self.structure = structure
        self.lengths = lengths

    def __repr__(self) -> str:
        return f"ExactComponent({self.structure!r})"

    def check(self, potentials: Potentials) -> Potentials:
        pot, _ = self.structure.check(potentials, self.lengths)
        return pot

    def init_multipliers(self, potentials: Potentials) -> Tensor:
        first = as_tuple(potentials)[0]
        return first.new_zeros(first.shape[0], 0)

    def prepare(self, potentials: Potentials) -> object:
        return potentials

    def solve(self, prepared: object, nu: Tensor) -> ComponentSolution:
        labels, values = self.structure.argmax(prepared, self.lengths)  # type: ignore[arg-type]
        agree = torch.ones(labels.shape[0], dtype=torch.bool, device=labels.device)
        return ComponentSolution(values, nu, labels, labels.unsqueeze(1), agree)

    def relaxed_parts(self, raw: Tensor, like_potentials: Potentials) -> Potentials:
        parts = self.to_parts(raw)
        return like(
            like_potentials,
            [p.to(x.dtype) for p, x in zip(as_tuple(parts), as_tuple(like_potentials))],
        )

    def score(self, potentials: Potentials, labels: Tensor) -> Tensor:
        b = labels.shape[0]
        lengths = self.lengths
        if lengths is None:
            _, lengths = self.structure.check(potentials)
        return self.structure._score_k(potentials, labels, lengths).view(b, -1)

    def to_parts(self, labels: Tensor) -> Potentials:
        return self.structure.to_parts(labels, self.lengths)


# ---------------------------------------------------------------------- results
@dataclass
class CorpusMultipliers:
    """Multipliers of a corpus run, for warm starts (and checkpoints).

    Attributes:
        lower: (M,) multipliers of the lower bounds (>= 0).
        upper: (M,) multipliers of the upper bounds (>= 0).
        nu: the components' multipliers (B, ...).
    """

    lower: Tensor
    upper: Tensor
    nu: Tensor

    def state_dict(self) -> dict[str, Tensor]:
        return {"lower": self.lower.detach().cpu(), "upper": self.upper.detach().cpu(), "nu": self.nu.detach().cpu()}

    @classmethod
    def from_state_dict(cls, state: dict[str, Tensor]) -> "CorpusMultipliers":
        return cls(state["lower"], state["upper"], state["nu"])


@dataclass
class CorpusInferenceResult:
    """Result of :func:`corpus_dual_decomposition`.

    Attributes:
        labels: (B, *label_shape) the recovered corpus labeling.
        primal: ``(1/B) sum_j s_j(labels_j)``.
        dual: the best (smallest) dual value seen, an upper bound on the constrained optimum
            (per example); ``inf`` when no iteration ran to completion.
        violation: the largest constraint violation of ``labels`` (rate units; 0 without
            constraints).
        rates: (M,) the constraint rates of ``labels`` (empty without constraints).
        multipliers: the final :class:`CorpusMultipliers` (warm start).
        primal_history, dual_history, violation_history: one float per outer iteration (the
            primal value and violation of that iteration's labeling, the dual value at that
            iteration's multipliers).
        outer_iterations: outer iterations run.
    """

    labels: Tensor
    primal: float
    dual: float
    violation: float
    rates: Tensor
    multipliers: CorpusMultipliers
    primal_history: list[float] = field(default_factory=list)
    dual_history: list[float] = field(default_factory=list)
    violation_history: list[float] = field(default_factory=list)
    outer_iterations: int = 0


# ---------------------------------------------------------------------- engine
def _check_float(value: float, name: str, low: float, strict: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite float; got {value!r}")
    if value < low or (strict and value == low):
        raise ValueError(f"{name} must be {'>' if strict else '>='} {low}; got {value!r}")
    return float(value)


def _add(potentials: Potentials, coef: Sequence[Tensor]) -> Potentials:
    return like(potentials, [p + c.to(p.dtype) for p, c in zip(as_tuple(potentials), coef)])


def _scale(potentials: Potentials) -> float:
    """Typical magnitude of the potentials (for scale-free corpus step sizes)."""
    vals = [x[torch.isfinite(x) & (x.abs() < 1e8)].abs() for x in as_tuple(potentials)]
    vals = [v for v in vals if v.numel()]
    if not vals:
        return 1.0
    mean = float(torch.cat([v.flatten() for v in vals]).mean())
    return mean if mean > 0 else 1.0


def corpus_dual_decomposition(
    potentials: Potentials,
    components: Components,
    constraints: Optional[CorpusLinearConstraints] = None,
    outer_iter: int = 30,
    inner_iter: int = 5,
    step: float = 3.0,
    eta_step: float = 3.0,
    feasibility_tol: float = 1e-2,
    multipliers: Optional[CorpusMultipliers] = None,
) -> CorpusInferenceResult:
    """Joint constrained MAP of a corpus (see the module docstring).

    Args:
        potentials: the corpus's potentials, batch first (B examples).
        components: the decomposition of one example (:class:`StarTreeComponents`,
            :class:`ExactComponent`, or your own).
        constraints: corpus linear constraints (``None``: independent examples; the outer loop
            then runs once).
        outer_iter: corpus multiplier (eta) iterations, >= 1.
        inner_iter: component multiplier (nu) iterations per outer iteration, >= 1.
        step: nu step factor, > 0: ``step * gamma_0 / (1 + t)`` with ``gamma_0`` the Polyak
            step of the first inner iteration of each outer iteration (per example).
        eta_step: corpus step factor, > 0: normalised subgradient steps of length
            ``eta_step * scale / sqrt(1 + t)`` with ``scale`` the mean absolute potential
            (scale-free).
        feasibility_tol: violation (rate units) under which a labeling counts as feasible for
            the primal recovery, >= 0.
        multipliers: warm start (e.g. a previous result's ``multipliers``); ``nu`` is reset
            when its shape does not match.

    Returns:
        :class:`CorpusInferenceResult`.

    Raises:
        ValueError: bad iteration counts or steps, constraints whose part shapes do not match
            the potentials.

    Shape:
        potentials: (B, *event_shape) per component; labels (B, *label_shape).
    """
    if not isinstance(components, Components):
        raise TypeError(f"components must be a Components; got {type(components).__name__}")
    positive_int(outer_iter, "outer_iter")
    positive_int(inner_iter, "inner_iter")
    step = _check_float(step, "step", 0.0, True)
    eta_step = _check_float(eta_step, "eta_step", 0.0, True)
    feasibility_tol = _check_float(feasibility_tol, "feasibility_tol", 0.0, False)
    potentials = components.check(potentials)
    pot = like(potentials, [x.detach() for x in as_tuple(potentials)])
    first = as_tuple(pot)[0]
    dtype, device = first.dtype, first.device
    if constraints is not None:
        if not isinstance(constraints, CorpusLinearConstraints):
            raise TypeError(f"constraints must be CorpusLinearConstraints; got {type(constraints).__name__}")
        shapes = [tuple(x.shape[1:]) for x in as_tuple(pot)]
        fshapes = [tuple(f.shape[1:]) for f in constraints.features]
        if shapes != fshapes:
            raise ValueError(
                f"constraints.features must have the part shapes of the potentials {shapes}; got {fshapes}"
            )
        constraints = constraints.to(device, dtype)
    with torch.no_grad():
        return _run(pot, components, constraints, outer_iter, inner_iter, step, eta_step,
                    feasibility_tol, multipliers)


def _tie_tolerance(values: Tensor) -> Tensor:
    """How close scores must be to count as tied: rounding in ``values``' dtype, relative
    (1024 ulps of ``1 + |value|``; -inf counts as 0)."""
    eps = torch.finfo(values.dtype).eps
    return 1024 * eps * (1.0 + values.abs().nan_to_num(0.0, 0.0, 0.0))


def _better_key(key: tuple[float, float], best: tuple[float, float], dtype: torch.dtype) -> bool:
    """Whether an outer iteration's key (0, -primal) if feasible, else (1, violation) beats
    the best so far by more than rounding (a tie keeps the earlier labeling)."""
    if key[0] != best[0]:
        return key[0] < best[0]
    return key[1] < best[1] - 1024 * torch.finfo(dtype).eps * (1.0 + abs(best[1]))


def _run(
    pot: Potentials,
    components: Components,
    constraints: Optional[CorpusLinearConstraints],
    outer_iter: int,
    inner_iter: int,
    step: float,
    eta_step: float,
    feasibility_tol: float,
    warm: Optional[CorpusMultipliers],
) -> CorpusInferenceResult:
    first = as_tuple(pot)[0]
    dtype, device = first.dtype, first.device
    b = first.shape[0]
    m = 0 if constraints is None else constraints.num_constraints
    lam_lo = first.new_zeros(m)
    lam_up = first.new_zeros(m)
    nu = components.init_multipliers(pot)
    if warm is not None:
        if tuple(warm.lower.shape) == (m,):
            lam_lo = warm.lower.to(device=device, dtype=dtype).clamp_min(0)
            lam_up = warm.upper.to(device=device, dtype=dtype).clamp_min(0)
        if tuple(warm.nu.shape) == tuple(nu.shape):
            nu = warm.nu.to(device=device, dtype=dtype)
    if constraints is not None:
        has_lo = torch.isfinite(constraints.lower)
        has_up = torch.isfinite(constraints.upper)
        lam_lo = torch.where(has_lo, lam_lo, torch.zeros_like(lam_lo))
        lam_up = torch.where(has_up, lam_up, torch.zeros_like(lam_up))
        lo_b = torch.where(has_lo, constraints.lower, torch.zeros_like(constraints.lower))
        up_b = torch.where(has_up, constraints.upper, torch.zeros_like(constraints.upper))
    scale = _scale(pot)
    if constraints is None:
        outer_iter = 1
    result_labels: Optional[Tensor] = None
    best_key: Optional[tuple[float, float]] = None
    best = (0.0, 0.0, first.new_zeros(m))
    best_dual = math.inf
    ph, dh, vh = [], [], []
    for s in range(outer_iter):
        if constraints is not None:
            aug = _add(pot, constraints.coefficients(lam_lo - lam_up))
        else:
            aug = pot
        ex_dual = first.new_full((b,), math.inf)
        cand_best = first.new_full((b,), -math.inf)
        labels: Optional[Tensor] = None
        gamma0: Optional[Tensor] = None
        prepared = components.prepare(aug)
        raw: Optional[Tensor] = None
        def consider(sol: ComponentSolution) -> None:
            nonlocal labels, cand_best
            cand_scores = components.score(aug, sol.candidates)  # (B, n)
            top = cand_scores.max(dim=1).values
            # scores tied up to rounding: the first candidate, and the labels already held
            # (the choice must not depend on rounding noise, i.e. on the order of the
            # corpus, the number of processes or threads)
            tied = cand_scores >= (top - _tie_tolerance(top)).unsqueeze(1)
            arg = tied.to(torch.uint8).argmax(dim=1)  # the first tied candidate
            pick = sol.candidates[torch.arange(b, device=device), arg]
            if labels is None:
                labels = pick
            else:
                shape = (b,) + (1,) * (pick.dim() - 1)
                better = top > cand_best + _tie_tolerance(cand_best)
                labels = torch.where(better.view(shape), pick, labels)
            cand_best = torch.maximum(cand_best, top)

        sol = components.solve(prepared, nu)
        for t in range(inner_iter):
            if t > 0:
                sol = components.solve(prepared, nu)
            ex_dual = torch.minimum(ex_dual, sol.values)
            raw = sol.raw
            consider(sol)
            if bool(sol.agree.all()) or sol.subgradient.numel() == 0:
                break
            if t == inner_iter - 1:
                break
            g = sol.subgradient
            norm = g.pow(2).flatten(1).sum(1).clamp_min(1e-12)
            if gamma0 is None:
                gamma0 = (sol.values - cand_best).clamp_min(0) / norm
            gamma = step * gamma0 / (1.0 + t)
            gamma = torch.where(sol.agree, torch.zeros_like(gamma), gamma)
            nu = nu - gamma.view((b,) + (1,) * (g.dim() - 1)) * g
        assert labels is not None
        value = float(components.score(pot, labels.unsqueeze(1)).mean())
        dual = float(ex_dual.mean())
        if constraints is not None:
            dual -= float((lam_lo * lo_b).sum() - (lam_up * up_b).sum())
            rates = constraints.rates(components.to_parts(labels))
            viol = float(constraints.violation(rates).max()) if m else 0.0
        else:
            rates = first.new_zeros(0)
            viol = 0.0
        best_dual = min(best_dual, dual)
        ph.append(value)
        dh.append(dual)
        vh.append(viol)
        key = (0.0, -value) if viol <= feasibility_tol else (1.0, viol)
        if best_key is None or _better_key(key, best_key, dtype):
            best_key, result_labels, best = key, labels, (value, viol, rates)
        if constraints is None or s == outer_iter - 1:
            break
        assert raw is not None
        rel_rates = constraints.rates(components.relaxed_parts(raw, aug))
        g_lo = (rel_rates - lo_b) * has_lo
        g_up = (up_b - rel_rates) * has_up
        # normalised subgradient step on the active part (a multiplier at 0 with a positive
        # subgradient stays at 0 and does not count)
        act_lo = (lam_lo > 0) | (g_lo < 0)
        act_up = (lam_up > 0) | (g_up < 0)
        norm = float(((g_lo * act_lo).pow(2).sum() + (g_up * act_up).pow(2).sum()).sqrt())
        if norm > 0:
            gamma_eta = eta_step * scale / math.sqrt(1.0 + s) / norm
            lam_lo = (lam_lo - gamma_eta * g_lo).clamp_min(0) * has_lo
            lam_up = (lam_up - gamma_eta * g_up).clamp_min(0) * has_up
    assert result_labels is not None
    return CorpusInferenceResult(
        labels=result_labels,
        primal=best[0],
        dual=best_dual,
        violation=best[1],
        rates=best[2],
        multipliers=CorpusMultipliers(lam_lo, lam_up, nu),
        primal_history=ph,
        dual_history=dh,
        violation_history=vh,
        outer_iterations=len(ph),
    )


class CorpusDualDecomposition:
    """The options of :func:`corpus_dual_decomposition` bundled (for procedures and configs).

    Args:
        outer_iter, inner_iter, step, eta_step, feasibility_tol: see
            :func:`corpus_dual_decomposition`.
    """

    def __init__(
        self,
        outer_iter: int = 30,
        inner_iter: int = 5,
        step: float = 3.0,
        eta_step: float = 3.0,
        feasibility_tol: float = 1e-2,
    ) -> None:
        self.outer_iter = positive_int(outer_iter, "outer_iter")
        self.inner_iter = positive_int(inner_iter, "inner_iter")
        self.step = _check_float(step, "step", 0.0, True)
        self.eta_step = _check_float(eta_step, "eta_step", 0.0, True)
        self.feasibility_tol = _check_float(feasibility_tol, "feasibility_tol", 0.0, False)

    def __repr__(self) -> str:
        return (
            f"CorpusDualDecomposition(outer_iter={self.outer_iter}, inner_iter={self.inner_iter}, "
            f"step={self.step}, eta_step={self.eta_step}, feasibility_tol={self.feasibility_tol})"
        )

    def __call__(
        self,
        potentials: Potentials,
        components: Components,
        constraints: Optional[CorpusLinearConstraints] = None,
        multipliers: Optional[CorpusMultipliers] = None,
    ) -> CorpusInferenceResult:
        return corpus_dual_decomposition(
            potentials, components, constraints, self.outer_iter, self.inner_iter, self.step,
            self.eta_step, self.feasibility_tol, multipliers,
        )

