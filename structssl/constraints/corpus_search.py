"""Searches over a whole corpus for one corpus-level ratio constraint with a label-free
denominator (:class:`~structssl.constraints.LabelProportion`,
:class:`~structssl.constraints.ExpectedCount`): the two maxima of the smooth DC term that
:class:`~structssl.training.cccp.CCCPModule` adds for it.

Notation. A corpus of ``m`` examples with potentials ``s_j``, labelings ``Y = (y_1..y_m)``,
the mean score ``F(Y) = (1/m) sum_j s_j(y_j)`` and the ratio ``r(Y) = (sum_j num_j(y_j)) / D``
whose numerator is linear in the parts (``num_j(y) = <W_j, parts(y)> + o_j``) and whose
denominator ``D = sum_j den_j`` does not depend on the labels. The penalty is quadratic in the
deviation from the target ``t`` (:class:`RatioPenalty`)::

    q(Y) = a dev(r(Y))^2,  dev = r - t ("eq"), [r - t]_+ ("le"), [t - r]_+ ("ge"),  a >= 0.

Both ``F + q`` and ``F - q`` are maximised over all joint labelings through one scalar
multiplier ``u`` on the ratio. With ``H(u) = max_Y F(Y) + u r(Y)`` (one batched Viterbi over
the corpus with the per-token bias ``u m / D`` on the numerator's parts; convex and piecewise
linear in ``u``, slope ``r`` of its maximiser):

* ``a dev^2 = max_u [u (r - t) - u^2 / (4a)]`` over ``u`` in ``R`` ("eq"), ``u >= 0`` ("le"),
  ``u <= 0`` ("ge"). Hence ``max_Y F + q = max_u G(u)``, ``G(u) = H(u) - u t - u^2 / (4a)``,
  and the jointly optimal pair satisfies ``u* = 2a (r(Y*) - t)`` (clipped to the sign), so
  ``u*`` lies in ``[2a (r_lo - t), 2a (r_hi - t)]`` (``r_lo, r_hi``: the bounds of ``r``).
  ``Y*`` is an upper-hull vertex of the points ``(r(Y), F(Y))`` (a convex function of
  ``(r, F)`` is maximal at an extreme point; one increasing in ``F`` at an upper one), and the
  hull vertices are exactly the maximisers of ``F + u r``: :func:`ratio_convex_max` finds the
  best one by branch and bound over ``u``. On an interval ``[u_a, u_b]`` with known maximisers
  ``Y_a, Y_b`` the convex ``H`` lies under its chord, which bounds ``G`` from above in closed
  form; an interval is split at the crossing ``u_x`` of the two maximisers' lines, and it is
  settled when ``H(u_x)`` equals the lines there (no other vertex in between: ``H`` is the
  maximum of the two lines on the interval and ``G <= max(value(Y_a), value(Y_b))``) or when
  its bound is below the best value found. The result is certified exact when every interval
  is settled within the budget of decodes (else the best value and the bound are reported).
* ``-a dev^2 = min_u [-u (r - t) + u^2 / (4a)]`` (same domains), so
  ``max_Y F - q <= min_u D(u)``, ``D(u) = H(-u) + u t + u^2 / (4a)`` (convex): the Lagrangian
  relaxation. :func:`ratio_guided_max` bisects on the subgradient ``t + u / (2a) - r(Y_{-u})``,
  keeps the best labeling by the true value ``F - q`` among the decodes, the candidates it is
  given and per-example mixtures of the two labelings that bracket the target at the end
  (switching examples from one to the other in the order of their score cost per unit of ratio),
  and reports ``min_u D(u)`` as an upper bound (the gap is the labeling's worst suboptimality).

Everything runs without autograd in float64 on the potentials' device, chunk by chunk (the
corpus is a list of length chunks; the multipliers act on the counts summed over all of them).
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING, Literal, NamedTuple, Optional, Sequence

import torch
from torch import Tensor

from structssl.structures.base import Structure

if TYPE_CHECKING:
    from structssl.constraints.base import Constraint

__all__ = [
    "RatioPenalty",
    "RatioCorpus",
    "ratio_corpus",
    "RatioPoint",
    "RatioSearch",
    "ratio_convex_max",
    "ratio_guided_max",
]


class RatioPenalty:
    """``q(r) = scale * dev(r)^2`` for a ratio against ``target`` (see the module docstring).

    Args:
        target: ``t``.
        bound: ``"eq"``, ``"le"`` (at most ``t``) or ``"ge"`` (at least ``t``).
        scale: ``a >= 0``.

    Raises:
        ValueError: a bound other than the three, a negative or non-finite scale or target.
    """

    def __init__(self, target: float, bound: Literal["eq", "ge", "le"], scale: float) -> None:
        if bound not in ("eq", "ge", "le"):
            raise ValueError(f"bound must be one of 'eq', 'ge', 'le'; got {bound!r}")
        if not math.isfinite(scale) or scale < 0:
            raise ValueError(f"scale must be a finite number >= 0; got {scale!r}")
        if not math.isfinite(target):
            raise ValueError(f"target must be finite; got {target!r}")
        self.target = float(target)
        self.bound = bound
        self.scale = float(scale)

    def deviation(self, ratio: float) -> float:
        if self.bound == "eq":
            return ratio - self.target
        if self.bound == "le":
            return max(ratio - self.target, 0.0)
        return max(self.target - ratio, 0.0)

    def __call__(self, ratio: float) -> float:
        return self.scale * self.deviation(ratio) ** 2

    def multiplier_range(self, r_lo: float, r_hi: float) -> tuple[float, float]:
        """``[u_lo, u_hi]``: where the optimal multiplier lies for ratios in ``[r_lo, r_hi]``."""
        a, t = self.scale, self.target
        if self.bound == "eq":
            return 2 * a * (r_lo - t), 2 * a * (r_hi - t)
        if self.bound == "le":
            return 0.0, 2 * a * max(r_hi - t, 0.0)
        return -2 * a * max(t - r_lo, 0.0), 0.0


class RatioPoint(NamedTuple):
    """A joint labeling of the corpus: ``labels`` (one (B_k, N_k) tensor per chunk), its mean
    score ``score`` = F, its ``ratio`` r, and per chunk the examples' scores and numerators
    ((B_k,) float64 each)."""

    labels: list[Tensor]
    score: float
    ratio: float
    scores: list[Tensor]
    numerators: list[Tensor]


class RatioSearch(NamedTuple):
    """The result of a search: the best ``point``, its ``value`` (``F + q`` or ``F - q``), an
    upper ``bound`` on the maximum (``value`` when certified), ``certified``, the number of
    corpus decodes ``evaluations`` and the ``multiplier`` at which the point was decoded
    (NaN for a candidate or a mixture)."""

    point: RatioPoint
    value: float
    bound: float
    certified: bool
    evaluations: int
    multiplier: float

    @property
    def gap(self) -> float:
        """``bound - value`` (>= 0)."""
        return max(self.bound - self.value, 0.0)


class RatioCorpus:
    """One ratio constraint over a corpus given as chunks (no autograd, float64).

    Args:
        structure: the structure (its ``argmax`` and ``score``).
        potentials: one tensor per chunk, (B_k, *event_shape) (detached; cast to float64).
        lengths: one (B_k,) tensor per chunk.
        numerator: per chunk the numerator's part weights ``W`` shaped like the potentials.
        offset: per chunk the numerator's offsets ``o`` (B_k,).
        denominator: ``D > 0``, the corpus denominator.

    Raises:
        ValueError: lists of different lengths, an empty corpus, or ``D <= 0``.
    """

    def __init__(
        self,
        structure: Structure,
        potentials: Sequence[Tensor],
        lengths: Sequence[Tensor],
        numerator: Sequence[Tensor],
        offset: Sequence[Tensor],
        denominator: float,
    ) -> None:
        k = len(potentials)
        if not k or len(lengths) != k or len(numerator) != k or len(offset) != k:
            raise ValueError(
                "potentials, lengths, numerator and offset must be non-empty lists of the same "
                f"length; got {len(potentials)}, {len(lengths)}, {len(numerator)}, {len(offset)}"
            )
        if not denominator > 0:
            raise ValueError(f"denominator must be > 0; got {denominator!r}")
        self.structure = structure
        self.potentials = [p.detach().double() for p in potentials]
        self.lengths = list(lengths)
        self.numerator = [w.detach().double() for w in numerator]
        self.offset = [o.detach().double() for o in offset]
        self.denominator = float(denominator)
        self.num_examples = sum(int(p.shape[0]) for p in self.potentials)
        if self.num_examples == 0:
            raise ValueError("the corpus has no examples")
        self.evaluations = 0

    def ratio_range(self) -> tuple[float, float]:
        """``(r_lo, r_hi)``: bounds of the ratio over all labelings (per part position the
        smallest and largest weight; valid for any structure whose parts at a position are
        exclusive, e.g. a chain's edges)."""
        lo = hi = 0.0
        for w, o, ln in zip(self.numerator, self.offset, self.lengths):
            valid = self.structure.valid_mask(ln, w.shape[1]).to(w.dtype)
            flat = w.flatten(2)
            lo += float((flat.amin(2) * valid).sum() + o.sum())
            hi += float((flat.amax(2) * valid).sum() + o.sum())
        return lo / self.denominator, hi / self.denominator

    def evaluate(self, labels: Sequence[Tensor]) -> RatioPoint:
        """The point of given labels (one tensor per chunk)."""
        scores, nums = [], []
        rows = zip(self.potentials, self.numerator, self.offset, self.lengths, labels)
        for pot, w, o, ln, y in rows:
            scores.append(self.structure.score(pot, y, ln))
            nums.append(self.structure.score(w, y, ln) + o)
        s = float(sum(x.sum() for x in scores)) / self.num_examples
        r = float(sum(x.sum() for x in nums)) / self.denominator
        return RatioPoint(list(labels), s, r, scores, nums)

    def decode(self, multiplier: float) -> RatioPoint:
        """The maximiser of ``F + multiplier * r`` (one Viterbi per chunk)."""
        beta = multiplier * self.num_examples / self.denominator
        labels = []
        with torch.no_grad():
            for pot, w, ln in zip(self.potentials, self.numerator, self.lengths):
                aug = pot if beta == 0 else pot + beta * w
                y, _ = self.structure.argmax(aug, ln)
                labels.append(y)
        self.evaluations += 1
        return self.evaluate(labels)


def ratio_corpus(
    constraint: "Constraint",
    structure: Structure,
    potentials: Sequence[Tensor],
    lengths: Sequence[Tensor],
    tokens: Sequence[Optional[Sequence[Sequence[str]]]],
) -> RatioCorpus:
    """The :class:`RatioCorpus` of a bound corpus-level ratio constraint (counts ``(numerator,
    denominator)`` linear in the parts, e.g. :class:`~structssl.constraints.LabelProportion`)
    over a corpus in chunks, its numerator and denominator from
    :meth:`~structssl.constraints.Constraint.features`.

    Shape:
        potentials: per chunk (B_k, N_k, C, C) with N_k = max of the chunk's lengths.

    Raises:
        ValueError: the constraint is not a corpus-level ratio, or its denominator depends on
            the labels (its feature weights for the denominator are not all zero).
    """
    if constraint.level != "corpus" or constraint.num_counts != 2 or not constraint.linear_counts:
        raise ValueError(
            f"{constraint.name}: needs a corpus-level ratio with counts (numerator, denominator) "
            "linear in the parts"
        )
    numerator, offset, denominator = [], [], 0.0
    for pot, ln, tok in zip(potentials, lengths, tokens):
        feats = constraint.features(tok, ln, dtype=torch.float64)
        pick_num = torch.zeros(int(ln.shape[0]), 2, dtype=torch.float64, device=ln.device)
        pick_den = pick_num.clone()
        pick_num[:, 0] = 1.0
        pick_den[:, 1] = 1.0
        num_w = feats.adjoint(pick_num, pot.double())
        den_w = feats.adjoint(pick_den, pot.double())
        assert isinstance(num_w, Tensor) and isinstance(den_w, Tensor)
        if bool((den_w != 0).any()):
            raise ValueError(
                f"{constraint.name}: its denominator depends on the labels; the corpus search "
                "needs a denominator fixed by the inputs (e.g. LabelProportion, ExpectedCount)"
            )
        numerator.append(num_w)
        offset.append(feats.offset_dot(pick_num))
        denominator += float(feats.offset_dot(pick_den).sum())
    return RatioCorpus(structure, potentials, lengths, numerator, offset, denominator)


def _tolerance(*values: float) -> float:
    return 1e-9 * (1.0 + max(abs(v) for v in values))


def ratio_convex_max(
    corpus: RatioCorpus,
    penalty: RatioPenalty,
    budget: int = 64,
    grid: int = 3,
    warm: Sequence[float] = (),
) -> RatioSearch:
    """``max_Y F(Y) + q(Y)`` by branch and bound over the multiplier (module docstring).

    Args:
        corpus: the corpus and the constraint's numerator / denominator.
        penalty: ``q``.
        budget: the most corpus decodes (>= 2).
        grid: evenly spaced multipliers decoded first (>= 2, the ends included).
        warm: further multipliers decoded first (e.g. the previous search's; clipped to the range).

    Returns:
        a :class:`RatioSearch`, ``certified`` when the maximum is proven within the budget.
    """
    if budget < 2 or grid < 2:
        raise ValueError(f"budget and grid must be >= 2; got budget={budget}, grid={grid}")
    start = corpus.evaluations
    a, t = penalty.scale, penalty.target
    lo, hi = penalty.multiplier_range(*corpus.ratio_range())
    best: dict[str, object] = {}

    def consider(point: RatioPoint, u: float) -> None:
        value = point.score + penalty(point.ratio)
        if "value" not in best or value > best["value"]:  # type: ignore[operator]
            best.update(value=value, point=point, u=u)

    if a == 0 or hi - lo <= 0:
        u = lo if hi - lo <= 0 else 0.0
        point = corpus.decode(u)
        consider(point, u)
        value = float(best["value"])  # type: ignore[arg-type]
        return RatioSearch(point, value, value, True, corpus.evaluations - start, u)

    def g_bound(ua: float, ha: float, ub: float, hb: float) -> float:
        """max over [ua, ub] of chord(u) - u t - u^2 / (4a)."""
        k = (hb - ha) / (ub - ua)
        u = min(max(2 * a * (k - t), ua), ub)
        return ha + k * (u - ua) - u * t - u * u / (4 * a)

    spaced = {lo + (hi - lo) * i / (grid - 1) for i in range(grid)}
    us = sorted(spaced | {min(max(w, lo), hi) for w in warm})
    known: list[tuple[float, float, float]] = []  # (u, H(u), r)
    for u in us:
        point = corpus.decode(u)
        consider(point, u)
        known.append((u, point.score + u * point.ratio, point.ratio))
    heap: list[tuple[float, tuple[float, float, float], tuple[float, float, float]]] = []

    def push(pa: tuple[float, float, float], pb: tuple[float, float, float]) -> None:
        if pb[0] - pa[0] <= 0:
            return
        ub_value = g_bound(pa[0], pa[1], pb[0], pb[1])
        if ub_value > float(best["value"]) + _tolerance(ub_value):  # type: ignore[arg-type]
            heapq.heappush(heap, (-ub_value, pa, pb))

    for pa, pb in zip(known, known[1:]):
        push(pa, pb)
    while heap:
        neg, pa, pb = heap[0]
        if -neg <= float(best["value"]) + _tolerance(-neg):  # type: ignore[arg-type]
            heapq.heappop(heap)
            continue
        if corpus.evaluations - start >= budget:
            break
        heapq.heappop(heap)
        (ua, ha, ra), (ub, hb, rb) = pa, pb
        if rb - ra <= 1e-12 * (1.0 + abs(ra)):  # equal slopes: H is linear here, nothing new
            continue
        ux = (hb - ha + ra * ua - rb * ub) / (ra - rb)
        ux = min(max(ux, ua), ub)
        line = ha + ra * (ux - ua)
        point = corpus.decode(ux)
        consider(point, ux)
        hx = point.score + ux * point.ratio
        if hx <= line + _tolerance(hx, line):
            continue  # H is the maximum of the two lines on [ua, ub]
        px = (ux, hx, point.ratio)
        push(pa, px)
        push(px, pb)
    value = float(best["value"])  # type: ignore[arg-type]
    bound = max([value] + [-neg for neg, _, _ in heap])
    point = best["point"]  # type: ignore[assignment]
    assert isinstance(point, RatioPoint)
    u_best = float(best["u"])  # type: ignore[arg-type]
    return RatioSearch(point, value, bound, not heap, corpus.evaluations - start, u_best)


def _mixtures(
    corpus: RatioCorpus, penalty: RatioPenalty, first: RatioPoint, second: RatioPoint
) -> Optional[tuple[RatioPoint, float]]:
    """The best per-example mixture of two labelings by ``F - q`` along one greedy order
    (from ``first``, switch examples to ``second`` by their score change per unit of ratio
    moved towards ``second``'s ratio); None when they do not differ."""
    ds = torch.cat([b - a for a, b in zip(first.scores, second.scores)]) / corpus.num_examples
    dr = torch.cat([b - a for a, b in zip(first.numerators, second.numerators)])
    dr = dr / corpus.denominator
    direction = 1.0 if second.ratio >= first.ratio else -1.0
    move = dr * direction
    useful = (move > 0) | ((move == 0) & (ds > 0))
    if not bool(useful.any()):
        return None
    key = torch.where(move > 0, ds / move.clamp(min=1e-300), torch.full_like(ds, math.inf))
    key = torch.where(useful, key, torch.full_like(ds, -math.inf))
    order = torch.argsort(key, descending=True)[: int(useful.sum())]
    f = first.score + torch.cumsum(ds[order], 0)
    r = first.ratio + torch.cumsum(dr[order], 0)
    if penalty.bound == "eq":
        dev = r - penalty.target
    elif penalty.bound == "le":
        dev = (r - penalty.target).clamp(min=0)
    else:
        dev = (penalty.target - r).clamp(min=0)
    values = f - penalty.scale * dev * dev
    i = int(values.argmax())
    chosen = torch.zeros(ds.shape[0], dtype=torch.bool, device=ds.device)
    chosen[order[: i + 1]] = True
    labels, start = [], 0
    for ya, yb in zip(first.labels, second.labels):
        rows = chosen[start : start + ya.shape[0]].view(-1, *([1] * (ya.dim() - 1)))
        labels.append(torch.where(rows, yb, ya))
        start += ya.shape[0]
    point = corpus.evaluate(labels)
    return point, point.score - penalty(point.ratio)


def ratio_guided_max(
    corpus: RatioCorpus,
    penalty: RatioPenalty,
    iterations: int = 24,
    candidates: Sequence[Sequence[Tensor]] = (),
) -> RatioSearch:
    """``max_Y F(Y) - q(Y)`` by Lagrangian relaxation (module docstring): never worse than
    the plain argmax nor than any of ``candidates`` (labelings, one tensor per chunk); the
    bound is the smallest dual value seen.

    Args:
        corpus: the corpus and the constraint's numerator / denominator.
        penalty: ``q``.
        iterations: bisection steps (each one corpus decode).
        candidates: labelings to compare with (e.g. the previous linearisation point).
    """
    if iterations < 0:
        raise ValueError(f"iterations must be >= 0; got {iterations}")
    start = corpus.evaluations
    a, t = penalty.scale, penalty.target
    best: dict[str, object] = {}

    def consider(point: RatioPoint, value: float, u: float) -> None:
        if "value" not in best or value > best["value"]:  # type: ignore[operator]
            best.update(value=value, point=point, u=u)

    def primal(point: RatioPoint) -> float:
        return point.score - penalty(point.ratio)

    plain = corpus.decode(0.0)
    consider(plain, primal(plain), 0.0)
    for labels in candidates:
        point = corpus.evaluate(labels)
        consider(point, primal(point), math.nan)
    lo, hi = penalty.multiplier_range(*corpus.ratio_range())
    dual = math.inf
    if a > 0:
        dual = plain.score  # D(0) = H(0)
        if hi - lo > 0:
            # f(u) = t + u / (2a) - r(Y_{-u}), nondecreasing; find its sign change on [lo, hi]
            below: Optional[RatioPoint] = None  # decoded where f <= 0
            above: Optional[RatioPoint] = None  # decoded where f >= 0
            for step in range(iterations):
                u = (lo + hi) / 2
                point = corpus.decode(-u)
                consider(point, primal(point), -u)
                dual = min(dual, point.score - u * point.ratio + u * t + u * u / (4 * a))
                f = t + u / (2 * a) - point.ratio
                if f <= 0:
                    lo, below = u, point
                if f >= 0:
                    hi, above = u, point
                found = float(best["value"])  # type: ignore[arg-type]
                if f == 0 or dual - found <= _tolerance(dual):
                    break
            if below is not None and above is not None:
                mixed = _mixtures(corpus, penalty, below, above)
                if mixed is not None:
                    consider(mixed[0], mixed[1], math.nan)
    else:
        dual = primal(plain)
    value = float(best["value"])  # type: ignore[arg-type]
    point = best["point"]  # type: ignore[assignment]
    assert isinstance(point, RatioPoint)
    bound = max(dual, value)
    certified = bound - value <= _tolerance(value)
    u_best = float(best["u"])  # type: ignore[arg-type]
    return RatioSearch(point, value, bound, certified, corpus.evaluations - start, u_best)
