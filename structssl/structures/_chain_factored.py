"""Factored linear-chain potentials and the dynamic programs that run on them directly.

A chain whose edge potentials are ``emissions[t, j] + transitions[i, j]`` (plus ``start[j]`` at
the first and ``end[j]`` at the last position) never needs the (B, N, C, C) edge tensor: the
recursions below read the (B, N, C) emissions and one (C, C) transition matrix per step. This is
C times less memory and, on a CPU, far fewer and smaller per-step operations.

- :class:`ChainPotentials`: the typed container (every field batch first, so that the generic
  batch operations of the losses, ``index_select`` / ``repeat_interleave`` along dim 0, apply
  to every field).
- :func:`factored_log_partition`: log Z by a forward recursion in exp space (one matrix product
  with the shared transitions per step, per-step rescaling), as an autograd function whose
  backward runs the beta recursion in the same space and returns the part marginals. It is
  exact only when no intermediate can underflow: :func:`exp_space_exact` checks the bound
  (all potentials finite and a bounded dynamic range, see there); otherwise the caller takes
  the log-space path.
- :func:`factored_viterbi`, :func:`factored_kbest`: max-plus decoding on factored potentials
  (Viterbi: each backpointer found while backtracking, from the kept max-plus vectors;
  k-best: a best-first search over the sidetracks of the backward max-plus tree).

Ragged batches are processed packed: examples sorted by decreasing length, time major, and at
step ``t`` only the ``batch_sizes[t]`` examples still running are touched (no per-step masks,
no steps past the longest example). Each step's vectors are label major, a (C, B) matrix
(:meth:`Plan.label_major`): the step's product with a (C, C) matrix and its sums over the
labels then run along rows of B values, which a CPU vectorises; over the C = 9 entries of each
example (the (B, C) layout) the same product took 3-5x longer at B = 200-3,000, and a log Z
forward+backward of CoNLL-2002 Spanish about 10 % more. The steps where the longest example runs alone (at least
``SOLO_SCAN_MIN_STEPS`` of them, C <= ``SOLO_SCAN_MAX_LABELS``) run as a parallel prefix scan
of their step matrices in both recursions of :func:`factored_log_partition`.

Internal module: the public entry point is :class:`~structssl.structures.LinearChain`.
"""

from __future__ import annotations

import copy
import math
from collections import OrderedDict
from typing import Any, Callable, NamedTuple, Optional

import numpy as np
import torch
from torch import Tensor

__all__ = ["ChainPotentials"]


class ChainPotentials(NamedTuple):
    """Factored log-potentials of a first-order chain.

    The score of labels ``y`` of an example of length ``n`` is
    ``sum_{t<n} emissions[t, y_t] + sum_{1<=t<n} transitions[y_{t-1}, y_t] + start[y_0]
    + end[y_{n-1}]``, the same structures and scores as the (B, N, C, C) layout of
    :meth:`LinearChain.potentials_from <structssl.structures.LinearChain.potentials_from>`.

    Fields (all batch first):
        emissions: (B, N, C); positions ``>= lengths`` are padding and may hold anything.
        transitions: (B, C, C), ``[b, i, j]`` for ``y_{t-1} = i -> y_t = j``. A matrix shared
            by the batch is passed expanded (``T.expand(B, C, C)``, no copy; see
            :meth:`from_factors`); the dynamic programs detect sharing and use one matrix
            product per step.
        start: (B, C) potentials of the first label.
        end: (B, C) potentials of each example's last label (at position ``lengths - 1``).

    Marginals of a ``ChainPotentials`` are a ``ChainPotentials`` of the same shapes: node
    marginals, expected transition counts per example, and the first and last label marginals.
    """

    emissions: Tensor
    transitions: Tensor
    start: Tensor
    end: Tensor

    @classmethod
    def from_factors(
        cls,
        emissions: Tensor,
        transitions: Optional[Tensor] = None,
        start: Optional[Tensor] = None,
        end: Optional[Tensor] = None,
    ) -> "ChainPotentials":
        """Build from a (C, C) or (B, C, C) transition matrix and (C,) or (B, C) start / end
        (each default zero); shared factors are expanded along the batch without a copy.

        Shape:
            emissions: (B, N, C) -> fields (B, N, C), (B, C, C), (B, C), (B, C).
        """
        if not isinstance(emissions, Tensor) or emissions.dim() != 3:
            got = tuple(emissions.shape) if isinstance(emissions, Tensor) else type(emissions).__name__
            raise ValueError(f"emissions must have shape (B, N, C); got {got}")
        b, _, c = emissions.shape
        zero = emissions.new_zeros(())

        def batched(x: Optional[Tensor], shape: tuple[int, ...], name: str) -> Tensor:
            if x is None:
                return zero.expand((b,) + shape)
            if not isinstance(x, Tensor):
                raise TypeError(f"{name} must be a torch.Tensor; got {type(x).__name__}")
            if tuple(x.shape) == shape:
                return x.expand((b,) + shape)
            if tuple(x.shape) == (b,) + shape:
                return x
            want = " or ".join(str(s) for s in (shape, (b,) + shape))
            raise ValueError(f"{name} must have shape {want}; got {tuple(x.shape)}")

        return cls(
            emissions,
            batched(transitions, (c, c), "transitions"),
            batched(start, (c,), "start"),
            batched(end, (c,), "end"),
        )


# ---------------------------------------------------------------------- packing
class Plan:
    """How a ragged batch is walked: examples by decreasing length, time major.

    Attributes:
        order: (B,) long, sorted position -> example (``None``: already sorted).
        inverse: (B,) long, example -> sorted position (``None`` with ``order``).
        lengths: (B,) long sorted lengths; ``lengths_list`` the same as Python ints.
        n: steps to run, the longest length.
        batch_sizes: Python ints, ``batch_sizes[t]`` = examples with length > t.
        padding_runs: ``(start, stop, k)`` per run of steps ``start .. stop - 1`` that only
            the first ``k < B`` examples reach (where :meth:`label_major` zeroes the rest).
        ragged: some example is shorter than ``n``.
    """

    def __init__(self, lengths: Tensor) -> None:
        b = lengths.shape[0]
        lens = lengths.tolist()
        self.n = max(lens)
        self.ragged = min(lens) != self.n
        descending = all(lens[i] >= lens[i + 1] for i in range(b - 1))
        if descending:
            self.order: Optional[Tensor] = None
            self.inverse: Optional[Tensor] = None
            self.lengths = lengths
            sorted_lens = lens
        else:
            sorted_len, order = torch.sort(lengths, descending=True, stable=True)
            self.order = order
            self.inverse = torch.empty_like(order)
            self.inverse[order] = torch.arange(b, device=order.device)
            self.lengths = sorted_len
            sorted_lens = sorted(lens, reverse=True)
        self.lengths_list = sorted_lens
        counts = [0] * (self.n + 1)
        for length in sorted_lens:
            counts[length] += 1
        sizes, alive = [], b
        for t in range(self.n):
            alive -= counts[t]
            sizes.append(alive)
        self.batch_sizes = sizes
        self.padding_runs: list[tuple[int, int, int]] = []
        for t, k in enumerate(sizes):
            if k < b:
                if self.padding_runs and self.padding_runs[-1][2] == k:
                    self.padding_runs[-1] = (self.padding_runs[-1][0], t + 1, k)
                else:
                    self.padding_runs.append((t, t + 1, k))
        self.rows = torch.arange(b, device=lengths.device)
        # the longest example's lone steps: batch_sizes[t] == 1 for t >= solo (n: none)
        solo = self.n
        while solo > 1 and sizes[solo - 1] == 1:
            solo -= 1
        self.solo = solo

    def sort(self, x: Tensor) -> Tensor:
        """Batch-first ``x`` in sorted example order (no copy when already sorted)."""
        return x if self.order is None else x.index_select(0, self.order)

    def unsort(self, x: Tensor) -> Tensor:
        """Inverse of :meth:`sort`."""
        return x if self.inverse is None else x.index_select(0, self.inverse)

    def label_major(self, emissions: Tensor) -> Tensor:
        """(B, N, C) -> (n, C, B) sorted, label major, contiguous, padding set to 0: each
        step's (C, B) matrix holds one row of B values per label, so that a step's product
        with a (C, C) matrix and its sums over the labels run along rows of B (vectorised on a
        CPU), not along the C entries of each example. One 2-D transposing copy, (B, n C) to
        (n C, B) (on a CPU about 2x faster than the 3-D permuted copy), then the padding of
        each run of steps with the same running examples zeroed."""
        b, _, c = emissions.shape
        x = self.sort(emissions[:, : self.n]).reshape(b, self.n * c)
        out = torch.empty(self.n, c, b, dtype=x.dtype, device=x.device)
        out.view(self.n * c, b).copy_(x.t())
        for start, stop, k in self.padding_runs:
            out[start:stop, :, k:] = 0
        return out

    def batch_major(self, x: Tensor, n_total: int) -> Tensor:
        """(n, C, B) label major sorted -> (B, n_total, C) in example order (zeros past n),
        by one 2-D transposing copy."""
        n, c, b = x.shape
        out = x.new_zeros(b, n_total, c) if n_total > n else x.new_empty(b, n, c)
        out.view(b, n_total * c)[:, : n * c].copy_(x.reshape(n * c, b).t())
        return self.unsort(out)

    def last(self, x: Tensor) -> Tensor:
        """Columns of label-major (n, C, B) at each sorted example's last position. Shape
        (B, C)."""
        if not self.ragged:
            return x[-1].t()
        return x[self.lengths - 1, :, self.rows]


def shared_transitions(transitions: Tensor) -> bool:
    """Whether every example has the same (C, C) transition matrix (an expanded view, or
    equal values)."""
    if transitions.shape[0] == 1 or transitions.stride(0) == 0:
        return True
    return bool((transitions == transitions[:1]).all())


# ---------------------------------------------------------------------- exp-space log Z
def exp_space_exact(potentials: ChainPotentials, plan: Plan, emissions_lm: Tensor) -> bool:
    """Whether the exp-space recursions are exact for these potentials (``emissions_lm``:
    their emissions as :meth:`Plan.label_major` gives them to the recursions).

    Emissions, transitions and end potentials are rescaled to a maximum of 1 (per position,
    per matrix) and the forward and backward vectors normalised to sum 1 at every step. With
    ``R_T`` the range (max - min) of the transitions and ``R_e`` that of the end potentials,
    and every potential finite, every sum of the recursions keeps a normal term: the emission
    factor of the best label is 1; the forward vector (sum 1) times the transition weights
    (in ``[exp(-R_T), 1]``) is at least ``exp(-R_T)`` everywhere; the backward vector's
    entries differ by at most the factor ``exp(R_T)`` (``exp(R_e)`` at the last position), so
    each is at least ``exp(-max(R_T, R_e)) / C``. Hence each forward sum is at least
    ``exp(-R_T)``, each backward sum ``exp(-R_T - max(R_T, R_e)) / C`` and each marginal
    normaliser ``exp(-max(R_T, R_e)) / C^2``, at any length and whatever the
    emissions' range. The check ``2 (2 R_T + R_e) + 4 log C + 4 < -log(tiny)`` keeps all of
    these above ``sqrt(tiny) e^2``; emission factors below ``tiny`` (labels more than about 87
    nats (float32) or 708 (float64) below the best one at their position) underflow to 0, which
    changes each sum by less than ``C tiny``, a relative ``sqrt(tiny)``, far below rounding. So
    log Z equals the log-space recursion up to rounding, and the marginals too, except those
    of such labels, which are at most ``C^2 exp(2 R_T + R_e) tiny < sqrt(tiny)`` and come out
    0 (or denormal) instead. A trained CRF thus stays on this path (CoNLL-2002 Spanish after
    100 L-BFGS iterations: emissions spanning 20-24 nats at a position, transitions 15; a
    bound with the emission range in it sent 13 of its 16 chunks to the float32 log-space
    loop, 2.5x slower per evaluation and with a gradient about 500 times further from
    float64's, gold counts minus expected counts cancelling near the optimum). Infinite
    potentials (``-inf`` masks) or larger transition / end ranges fail the check and take the
    log-space path.
    """
    dtype = emissions_lm.dtype

    def spread(x: Tensor, dims: tuple[int, ...]) -> Tensor:
        return (x.amax(dim=dims) - x.amin(dim=dims)).max().to(dtype)

    # one synchronisation: finiteness (sums) and the two ranges
    stats = torch.stack([
        emissions_lm.sum(), potentials.transitions.sum().to(dtype), potentials.end.sum().to(dtype),
        potentials.start.sum().to(dtype), spread(potentials.transitions, (1, 2)),
        spread(potentials.end, (1,)),
    ]).tolist()
    if not all(math.isfinite(v) for v in stats):
        return False
    c = potentials.emissions.shape[-1]
    floor = -math.log(torch.finfo(dtype).tiny)  # about 87 (float32), 708 (float64)
    return 2.0 * (2.0 * stats[4] + stats[5]) + 4.0 * math.log(c) + 4.0 < floor


#: the longest example's steps alone at the end of a batch (one very long sentence, e.g. a
#: 1,238-token table in CoNLL-2002's training file) run as a parallel prefix scan of their
#: (C, C) step matrices once there are at least this many of them, and C is at most
#: ``SOLO_SCAN_MAX_LABELS``: log2(L) batched matrix products instead of L small sequential
#: steps (each a few kernels whose cost is their launch). Its work, L log2(L) C^3, would
#: outgrow the saved launches at large C.
SOLO_SCAN_MIN_STEPS = 16
SOLO_SCAN_MAX_LABELS = 16


def _solo_start(plan: Plan, c: int) -> int:
    """Where the steps of the longest example alone start to run as a scan (``n``: nowhere)."""
    if c <= SOLO_SCAN_MAX_LABELS and plan.n - plan.solo >= SOLO_SCAN_MIN_STEPS:
        return plan.solo
    return plan.n


def _prefix_products(mats: Tensor) -> Tensor:
    """Inclusive prefix products ``P_j = M_0 M_1 ... M_j`` of (L, C, C) non-negative matrices,
    each rescaled to a maximum of 1 (a scale-free direction: only normalised vectors are read
    from them), by ``ceil(log2 L)`` rounds of batched matrix products (Hillis-Steele)."""
    out = mats / mats.amax(dim=(1, 2), keepdim=True)
    step = 1
    while step < out.shape[0]:
        nxt = out.clone()
        prod = torch.bmm(out[:-step], out[step:])
        nxt[step:] = prod.div_(prod.amax(dim=(1, 2), keepdim=True))
        out, step = nxt, 2 * step
    return out


def _forward_solo(ex: Tensor, weights: Tensor, alpha: Tensor, scale: Tensor, start: int,
                  shared: bool) -> None:
    """The forward steps ``t >= start`` of example 0 (the only one running there), given
    ``alpha[start - 1, :, 0]``: the directions of ``alpha_t`` from prefix products of the step
    matrices ``W diag(ex_t)``, then every step's sum and normalised vector at once, as the
    sequential step computes them."""
    w = weights if shared else weights[0]
    mats = w.unsqueeze(0) * ex[start:, :, 0].unsqueeze(1)  # (L, C, C): W[i, j] ex_t[j]
    first = alpha[start - 1, :, 0]
    direction = first @ _prefix_products(mats)  # (L, C), alpha_t up to scale
    prev = torch.cat([first.unsqueeze(0), direction[:-1]])
    prev = prev / prev.sum(dim=1, keepdim=True)
    step = torch.bmm(prev.unsqueeze(1), mats).squeeze(1)  # (L, C) = (alpha_{t-1} W) * ex_t
    total = step.sum(dim=1, keepdim=True)
    scale[start:, :, 0] = total
    alpha[start:, :, 0] = step / total


def _backward_solo(ex: Tensor, weights: Tensor, beta: Tensor, ratio: Tensor, start: int,
                   shared: bool) -> None:
    """The beta steps ``t = n-1 .. start`` of example 0 (writing ``beta[t - 1, :, 0]`` and
    ``ratio[t - 1, :, 0]``) from ``beta[n - 1, :, 0]``, as :func:`_forward_solo` does the
    forward: ``beta_{t-1}`` is ``beta_t`` times ``diag(ex_t) W^T``."""
    w = weights if shared else weights[0]
    mats = (ex[start:, :, 0].unsqueeze(2) * w.t().unsqueeze(0)).flip(0)  # t = n-1 .. start
    last = beta[-1, :, 0]
    direction = last @ _prefix_products(mats)  # (L, C): beta_{t-1} up to scale, t descending
    nxt = torch.cat([last.unsqueeze(0), direction[:-1]])
    nxt = nxt / nxt.sum(dim=1, keepdim=True)  # beta_t, t = n-1 .. start
    prev = torch.bmm(nxt.unsqueeze(1), mats).squeeze(1)  # (ex_t * beta_t) W^T
    total = prev.sum(dim=1, keepdim=True)
    ratio[start - 1 : -1, :, 0] = total.flip(0)
    beta[start - 1 : -1, :, 0] = (prev / total).flip(0)


def _forward_steps(ex: Tensor, weights: Tensor, alpha: Tensor, scale: Tensor, plan: Plan,
                   shared: bool) -> None:
    """The forward recursion's steps on label-major (n, C, B) ``ex``, written into ``alpha``
    (zeros, (n, C, B)) and ``scale`` (ones, (n, 1, B)):
    ``alpha_t = normalise((W^T alpha_{t-1}) * ex_t)`` for the examples still running at ``t``
    (the first ``batch_sizes[t]`` columns; the longest example's lone last steps by
    :func:`_forward_solo`). ``weights``: (C, C) shared, or (B, C, C) per example."""
    b = ex.shape[2]
    torch.sum(ex[0], dim=0, keepdim=True, out=scale[0])
    torch.div(ex[0], scale[0], out=alpha[0])
    sizes = plan.batch_sizes
    solo = _solo_start(plan, ex.shape[1])
    # (C_next, C_prev) contiguous: one product per step with the (C_prev, k) vectors;
    # per example (B, C_next, C_prev), a batched product with each example's column
    w_t = weights.t().contiguous() if shared else weights.transpose(1, 2).contiguous()
    # views, made once, of the sequential steps only (a view costs about as much as a step's
    # arithmetic on small batches)
    steps, factors, sums = alpha[:solo].unbind(0), ex[:solo].unbind(0), scale[:solo].unbind(0)
    for t in range(1, solo):
        k = sizes[t]
        prev, step, factor, total = steps[t - 1], steps[t], factors[t], sums[t]
        if k < b:  # only the examples still running
            prev, step, factor, total = prev[:, :k], step[:, :k], factor[:, :k], total[:, :k]
        if shared:
            torch.mm(w_t, prev, out=step)
        else:
            step.copy_(torch.bmm(w_t[:k], prev.t().unsqueeze(2)).squeeze(2).t())
        step.mul_(factor)
        torch.sum(step, dim=0, keepdim=True, out=total)
        step.div_(total)
    if solo < ex.shape[0]:
        _forward_solo(ex, weights, alpha, scale, solo, shared)


def _backward_steps(ex: Tensor, weights: Tensor, end_beta: Tensor, beta: Tensor, ratio: Tensor,
                    plan: Plan, shared: bool) -> None:
    """The beta recursion's steps on label-major (n, C, B) ``ex``, written into ``beta``
    (zeros, (n, C, B)) and ``ratio`` (ones, (n, 1, B)), from ``end_beta`` (B, C) at each
    example's last position: ``beta_{t-1} = normalise(W (ex_t * beta_t))`` (the longest
    example's lone last steps by :func:`_backward_solo`)."""
    n, c, b = ex.shape
    if plan.ragged:
        beta[plan.lengths - 1, :, plan.rows] = end_beta
    else:
        beta[-1] = end_beta.t()
    tmp = torch.empty(c, b, dtype=ex.dtype, device=ex.device)
    sizes = plan.batch_sizes
    solo = _solo_start(plan, c)
    if solo < n:
        _backward_solo(ex, weights, beta, ratio, solo, shared)
    steps, factors, sums = beta[:solo].unbind(0), ex[:solo].unbind(0), ratio[:solo].unbind(0)
    for t in range(min(n, solo) - 1, 0, -1):
        k = sizes[t]
        w, nxt, factor, prev, total = tmp, steps[t], factors[t], steps[t - 1], sums[t - 1]
        if k < b:  # only the examples still running at t
            w, nxt, factor, prev, total = w[:, :k], nxt[:, :k], factor[:, :k], prev[:, :k], total[:, :k]
        torch.mul(factor, nxt, out=w)
        if shared:
            torch.mm(weights, w, out=prev)
        else:
            prev.copy_(torch.bmm(weights[:k], w.t().unsqueeze(2)).squeeze(2).t())
        torch.sum(prev, dim=0, keepdim=True, out=total)
        prev.div_(total)


class _StepGraphs:
    """CUDA graphs of the recursions' step loops, captured the second time a batch shape is
    seen and replayed from then on.

    On a GPU the loops are launch bound: four small kernels per step, about 16,000 launches
    (and as many Python calls) per objective evaluation of CoNLL-2002 Spanish, whose CUDA time
    is a fifth of the wall time. A full-batch optimiser evaluates the same chunks again and
    again, so each chunk's forward and backward loop becomes one graph launch. A graph is keyed
    by the loop, device, dtype, shape, sharing, inference mode and the batch sizes per step
    (which fix the sorted lengths); it owns static copies of its inputs and outputs (inputs
    copied in before a replay, outputs cloned after it), so results are those of the same
    kernels run eagerly.
    Shapes seen once (e.g. mini-batches of varying lengths) run eagerly; at most ``capacity``
    graphs are kept (least recently used dropped).
    """

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self.seen: dict[tuple, int] = {}
        self.graphs: "OrderedDict[tuple, _Captured]" = OrderedDict()

    def run(self, steps: Callable[..., None], inputs: tuple[Tensor, ...], plan: Plan, shared: bool
            ) -> Optional[tuple[Tensor, ...]]:
        """Replay (or capture) ``steps(*inputs, *_blank(inputs[0]), plan, shared)`` and return
        its filled outputs; ``None`` where the shape was not seen before (the caller runs it
        eagerly)."""
        first = inputs[0]
        # inference mode is part of the key: a graph's static tensors made under it are
        # inference tensors, which may not be written outside it (evaluation under Lightning)
        key = (steps.__name__, first.device, first.dtype, tuple(x.shape for x in inputs), shared,
               torch.is_inference_mode_enabled(), tuple(plan.batch_sizes))
        entry = self.graphs.get(key)
        if entry is None:
            count = self.seen.get(key, 0) + 1
            if count < 2:
                if len(self.seen) > 16 * self.capacity:
                    self.seen.clear()
                self.seen[key] = count
                return None
            self.seen.pop(key, None)
            entry = self._capture(steps, inputs, plan, shared)
            self.graphs[key] = entry
            if len(self.graphs) > self.capacity:
                self.graphs.popitem(last=False)
        else:
            self.graphs.move_to_end(key)
        for dst, src in zip(entry.inputs, inputs):
            dst.copy_(src)
        entry.graph.replay()
        return tuple(x.clone() for x in entry.outputs)

    @staticmethod
    def _capture(steps: Callable[..., None], inputs: tuple[Tensor, ...], plan: Plan, shared: bool
                 ) -> "_Captured":
        static_in = tuple(x.clone() for x in inputs)
        static_out = _blank(inputs[0])  # stays zeros / ones where the loop never writes
        # the lengths the loop indexes with live on as the graph's own tensors
        plan_copy = copy.copy(plan)
        plan_copy.lengths, plan_copy.rows = plan.lengths.clone(), plan.rows.clone()
        side = torch.cuda.Stream(device=static_in[0].device)
        side.wait_stream(torch.cuda.current_stream(static_in[0].device))
        with torch.cuda.stream(side):  # warm-up outside the capture (library handles, workspaces)
            steps(*static_in, *_blank(inputs[0]), plan_copy, shared)
        torch.cuda.current_stream(static_in[0].device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            steps(*static_in, *static_out, plan_copy, shared)
        return _Captured(graph, static_in, static_out, plan_copy)


class _Captured(NamedTuple):
    """A captured loop and every tensor its kernels read or write (kept alive with it)."""

    graph: Any  # torch.cuda.CUDAGraph
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    plan: Plan  # its lengths and rows are the graph's index tensors


#: the step loops' CUDA graphs (see :class:`_StepGraphs`); ``USE_CUDA_GRAPHS = False`` runs every
#: loop eagerly
_GRAPHS = _StepGraphs()
USE_CUDA_GRAPHS = True


def _blank(ex: Tensor) -> tuple[Tensor, Tensor]:
    """A recursion's output buffers for label-major ``ex`` (n, C, B): the (n, C, B) vectors
    (zeros) and the (n, 1, B) per-step sums (ones), the values past each example's length."""
    n, _, b = ex.shape
    return torch.zeros_like(ex), ex.new_ones(n, 1, b)


def _run_steps(steps: Callable[..., None], inputs: tuple[Tensor, ...], plan: Plan, shared: bool
               ) -> tuple[Tensor, ...]:
    """The outputs of ``steps(*inputs, *_blank(inputs[0]), plan, shared)``; on a GPU through a
    replayed CUDA graph once the same shape comes again (no buffers made for a replay)."""
    if (USE_CUDA_GRAPHS and inputs[0].is_cuda and torch.cuda.is_available()
            and not torch.cuda.is_current_stream_capturing()):  # inside a caller's capture: eager
        replayed = _GRAPHS.run(steps, inputs, plan, shared)
        if replayed is not None:
            return replayed
    outputs = _blank(inputs[0])
    steps(*inputs, *outputs, plan, shared)
    return outputs



class _Forward(NamedTuple):
    ex: Tensor  # (n, C, B) exp(u - max u), start folded in at t = 0
    scale: Tensor  # (n, 1, B) per-step sums (1 past each length)
    alpha: Tensor  # (n, C, B) normalised forward vectors (0 past each length)
    weights: Tensor  # (C, C) or (B, C, C) exp(T - max T)
    end_weights: Tensor  # (B, C) exp(end - max end)
    log_z: Tensor  # (B,) sorted


def _exp_forward(u: Tensor, transitions: Tensor, start: Tensor, end: Tensor, plan: Plan,
                 shared: bool) -> _Forward:
    """Forward recursion in exp space on sorted inputs, ``u`` the label-major (n, C, B)
    emissions (see the module docstring), overwritten: it becomes the returned ``ex``."""
    b = u.shape[2]
    u[0] += start.t()
    top = u.amax(dim=1, keepdim=True)  # (n, 1, B); 0 at padding (zeroed emissions)
    ex = u.sub_(top).exp_()
    if shared:
        t_max = transitions[0].max()
        weights = (transitions[0] - t_max).exp()  # (C, C)
        trans_shift = t_max * (plan.lengths - 1).to(u.dtype)  # (B,)
    else:
        t_max = transitions.amax(dim=(1, 2))  # (B,)
        weights = (transitions - t_max.view(b, 1, 1)).exp()  # (B, C, C)
        trans_shift = t_max * (plan.lengths - 1).to(u.dtype)
    alpha, scale = _run_steps(_forward_steps, (ex, weights), plan, shared)
    end_max = end.amax(dim=1, keepdim=True)  # (B, 1)
    end_weights = (end - end_max).exp()
    final = (plan.last(alpha) * end_weights).sum(dim=1)  # (B,)
    log_z = (
        scale.log().sum(dim=(0, 1)) + top.sum(dim=(0, 1)) + trans_shift + final.log()
        + end_max.squeeze(1)
    )
    return _Forward(ex, scale, alpha, weights, end_weights, log_z)


def _exp_backward(fwd: _Forward, plan: Plan, shared: bool, grad: Tensor,
                  need_transitions: bool, pooled: bool = False
                  ) -> tuple[Tensor, Optional[Tensor], Tensor, Tensor]:
    """Beta recursion in exp space and the marginals times ``grad`` (B,), sorted.

    Returns node marginals (n, C, B) label major, transition counts (B, C, C) (or ``None``;
    ``pooled``: their sum over the examples, (1, C, C)), first and last label marginals (B, C).
    """
    ex, alpha, weights = fwd.ex, fwd.alpha, fwd.weights
    n, c, b = ex.shape
    end_beta = fwd.end_weights / fwd.end_weights.sum(dim=1, keepdim=True)
    beta, ratio = _run_steps(_backward_steps, (ex, weights, end_beta), plan, shared)
    joint = alpha * beta  # (n, C, B)
    norm = joint.sum(dim=1, keepdim=True)  # (n, 1, B), > 0 at valid positions, 0 past them
    g = grad.view(1, 1, b)
    node = joint.div_(torch.where(norm > 0, norm, 1.0)).mul_(g)
    first = node[0].t()
    last = plan.last(node)
    counts = None
    if need_transitions and n > 1:
        # xi_t[i, j] = alpha[t-1, i] W[i, j] ex[t, j] beta[t, j] / (ratio[t-1] * norm[t-1])
        denom = ratio[:-1] * norm[:-1]
        denom = torch.where(denom > 0, denom, 1.0)
        right = (ex[1:] * beta[1:]).div_(denom).mul_(g)  # (n-1, C, B), 0 past each length
        if pooled:
            # one matrix for every example: the sum of their counts, a (C, B) x (B, C) product
            # per step read in place, summed (per example: B products of (C, n-1) x (n-1, C)
            # matrices, 6.7 % of a CoNLL fit for the same sum; addbmm loops over the steps:
            # 4.7x slower at n = 1,238, B = 9)
            counts = torch.bmm(alpha[:-1], right.transpose(1, 2)).sum(dim=0, keepdim=True)
            counts = counts.mul_(weights)
        else:
            # both time major, (n-1, B, C) contiguous (a transpose of each step's small
            # matrix): per example a (C, n-1) and an (n-1, C) matrix with unit strides, which
            # bmm reads in place; on the label-major layout it copied each example's matrices
            left = alpha[:-1].transpose(1, 2).contiguous()
            right = right.transpose(1, 2).contiguous()
            counts = torch.bmm(left.permute(1, 2, 0), right.transpose(0, 1))  # (B, C, C)
            counts.mul_(weights)
    elif need_transitions:
        counts = ex.new_zeros(1 if pooled else b, c, c)
    return node, counts, first, last


class _FactoredLogPartition(torch.autograd.Function):
    """log Z of factored chains in exp space: forward recursion in the forward, beta recursion
    and the marginals in the backward. Double backward recomputes through the log-space loop
    on the edge layout (differentiable marginals)."""

    @staticmethod
    def forward(ctx, emissions: Tensor, transitions: Tensor, start: Tensor, end: Tensor,  # type: ignore[override]
                lengths: Tensor, plan: Plan, shared: bool, u: Tensor) -> Tensor:
        # transitions (1, C, C): one matrix for every example, its gradient their summed counts
        pooled = transitions.shape[0] == 1
        trans = transitions if pooled else plan.sort(transitions)
        fwd = _exp_forward(u, trans, plan.sort(start), plan.sort(end), plan, shared or pooled)
        ctx.plan, ctx.shared, ctx.n_total = plan, shared or pooled, emissions.shape[1]
        ctx.pooled = pooled
        ctx.fwd = fwd
        ctx.save_for_backward(emissions, transitions, start, end, lengths)
        return plan.unsort(fwd.log_z)

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[no-untyped-def, override]
        emissions, transitions, start, end, lengths = ctx.saved_tensors
        none = (None, None, None, None)
        if torch.is_grad_enabled():  # create_graph: differentiable marginals
            from structssl.semirings import Log
            from structssl.structures.linear_chain import LinearChain, _inside_loop

            with torch.enable_grad():
                matrix = transitions[0] if ctx.pooled else transitions
                edges = LinearChain.potentials_from(emissions, matrix, start, end, lengths)
                again = _inside_loop(edges, lengths, Log())
                grads = torch.autograd.grad(
                    again, (emissions, transitions, start, end), grad, create_graph=True,
                    allow_unused=True, materialize_grads=True,
                )
            return (*grads, *none)
        plan: Plan = ctx.plan
        node, counts, first, last = _exp_backward(
            ctx.fwd, plan, ctx.shared, plan.sort(grad), ctx.needs_input_grad[1], ctx.pooled
        )
        g_emissions = plan.batch_major(node, ctx.n_total) if ctx.needs_input_grad[0] else None
        g_transitions = counts if counts is None or ctx.pooled else plan.unsort(counts)
        return (g_emissions, g_transitions, plan.unsort(first), plan.unsort(last), *none)


def factored_log_partition(potentials: ChainPotentials, lengths: Tensor, plan: Plan,
                           emissions_lm: Tensor) -> Tensor:
    """log Z (B,) by the exp-space recursion (the caller checked :func:`exp_space_exact`);
    ``emissions_lm``, the emissions as :meth:`Plan.label_major` gave them, is overwritten."""
    transitions = potentials.transitions
    shared = shared_transitions(transitions)
    if shared and transitions.stride(0) == 0 and _expanded_in_graph(transitions):
        # one matrix expanded over the batch inside the graph (e.g. a scorer's transition
        # parameter): autograd sums the expansion's gradient, so it is computed summed
        transitions = transitions[:1]
    return _FactoredLogPartition.apply(
        potentials.emissions, transitions, potentials.start, potentials.end, lengths,
        plan, shared, emissions_lm,
    )


def _expanded_in_graph(transitions: Tensor) -> bool:
    """Whether ``transitions`` is the output of an ``expand`` in the autograd graph, whose
    backward sums the gradient over the batch: log Z then sends that matrix the examples'
    summed transition counts (one matrix product per step; per-example counts take B small
    products, 6.7 % of a CoNLL-2002 fit). The gradient of the expanded tensor itself then holds
    the sum in row 0: per-example marginals come from :meth:`Structure.marginals`, which reads
    the gradient of its own view of the potentials, never of the expansion."""
    fn = transitions.grad_fn
    return fn is not None and fn.name().startswith("ExpandBackward")


# ---------------------------------------------------------------------- decoders
def _decoder_inputs(potentials: ChainPotentials, plan: Plan) -> tuple[Tensor, Tensor, bool, Tensor]:
    u = plan.label_major(potentials.emissions)  # (n, C, B)
    u[0] += plan.sort(potentials.start).t()
    shared = shared_transitions(potentials.transitions)
    trans = potentials.transitions[0] if shared else plan.sort(potentials.transitions)
    return u, trans, shared, plan.sort(potentials.end)


#: below this many candidates per step the decoders use one max / top-k with indices (fewer
#: operations); above it the outer-dimension reductions (cheaper per element on a CPU)
SMALL_STEP = 8192


def factored_viterbi(potentials: ChainPotentials, plan: Plan, n_total: int) -> Tensor:
    """Best labels (B, n_total), 0 at padded positions, by max-plus on factored potentials.

    Label-major layout (C, B) per step, so that every max over the previous label is a
    reduction over the outermost dimension of a contiguous (C_prev, C_next, B) tensor: a
    vectorised elementwise maximum, far cheaper on a CPU than a reduction over an inner
    dimension or a max with indices. Backpointers are found while backtracking
    (:func:`_viterbi_lazy`); tiny steps (``C^2 B <= SMALL_STEP``, e.g. B = 1) take one max
    with indices per step instead (:func:`_viterbi_pointers`, fewer operations).
    """
    u, trans, shared, end = _decoder_inputs(potentials, plan)
    _, c, b = u.shape
    decode = _viterbi_pointers if c * c * b <= SMALL_STEP else _viterbi_lazy
    out = plan.unsort(decode(u, trans, shared, end, plan))
    if plan.ragged:  # past each length the label is the example's last one: zero it
        out = torch.where(_valid_bn(lengths_of(plan), plan.n), out, 0)
    return _pad_labels(out, n_total)


def _viterbi_forward(ut: Tensor, trans: Tensor, shared: bool, plan: Plan,
                     step: Callable[[Tensor, Tensor], Tensor]) -> Tensor:
    """The max-plus forward on label-major ``ut`` (n, C, B) sorted; ``step(alpha, cand)``
    reduces the (C_prev, C_next, k) candidates ``alpha + T`` of a step to (C_next, k) (and
    keeps what the backtrack needs). Returns the final vectors (B, C) in sorted order."""
    b = ut.shape[2]
    sizes = plan.batch_sizes
    # (C_prev, C_next, 1) shared, else (C_prev, C_next, B)
    outer = trans.unsqueeze(2) if shared else trans.permute(1, 2, 0).contiguous()
    alpha = ut[0]  # (C, k): the examples still running; fresh contiguous tensors per step
    finals = []  # (C, examples that end here) per step, in sorted order
    for t in range(1, ut.shape[0]):
        k = sizes[t]
        if k < alpha.shape[1]:
            finals.append(alpha[:, k:])
            alpha = alpha[:, :k]
        cand = alpha.unsqueeze(1) + (outer if shared else outer[:, :, :k])
        alpha = step(alpha, cand).add_(ut[t] if k == b else ut[t, :, :k])
    finals.append(alpha)
    # columns in sorted order: the longest examples (still running at the end) first
    return torch.cat(finals[::-1], dim=1).t() if len(finals) > 1 else alpha.t()


def _backtrack(final: Tensor, end: Tensor, plan: Plan, pointer: Callable[[int, Tensor], Tensor]
               ) -> Tensor:
    """Labels (B, n) sorted from the final vectors (B, C): ``pointer(t, labels)`` gives the
    label at ``t - 1`` of the paths whose label at ``t`` is ``labels`` (the k_t running)."""
    b = final.shape[0]
    sizes = plan.batch_sizes
    current = (final + end).argmax(dim=1)  # (B,) label at each example's last position
    path = [current] * plan.n
    for t in range(plan.n - 1, 0, -1):
        path[t] = current
        k = sizes[t]
        back = pointer(t, current if k == b else current[:k])
        current = back if k == b else torch.cat([back, current[k:]])
    path[0] = current
    return torch.stack(path, dim=1)


def _viterbi_pointers(ut: Tensor, trans: Tensor, shared: bool, end: Tensor, plan: Plan) -> Tensor:
    """Sorted best labels (B, n) with a backpointer per label and step: the path of tiny steps
    (``C^2 B <= SMALL_STEP``, e.g. B = 1), where an operation's cost is its call, not its size.

    Every step's candidates ``T[i, j] + u_t[j]`` are summed before the loop (one operation),
    and the max-plus vector alternates between a column (C, 1, k) and a row (1, C, k), so
    that a step is one add and one max with indices over the step's candidates, their
    transposed view on odd steps (no reshape). On a CPU the backpointers are followed in numpy
    (an indexing of a few labels costs a tenth of a torch gather's call); elsewhere one gather
    per step.
    """
    n, c, b = ut.shape
    sizes = plan.batch_sizes
    outer = trans.unsqueeze(2) if shared else trans.permute(1, 2, 0)  # (C_prev, C_next, 1 or B)
    cand = outer.unsqueeze(0) + ut.unsqueeze(1)  # (n, C_prev, C_next, B): step t's T + u_t
    even, odd = cand.unbind(0), cand.transpose(1, 2).unbind(0)  # odd: (C_next, C_prev, B)
    alpha = ut[0].unsqueeze(1)  # (C, 1, k) on odd t - 1, (1, C, k) on even
    finals = []  # (C, examples that end here) per step, in sorted order
    pointers: list[Tensor] = [ut[0]]  # per step, (C_next, k) once reshaped; index 0 unused
    for t in range(1, n):
        k = sizes[t]
        if k < alpha.shape[2]:
            finals.append(alpha[..., k:].reshape(c, -1))
            alpha = alpha[..., :k]
        if t % 2:  # column in: the max over the previous label is over dim 0
            step = even[t] if k == b else even[t][..., :k]
            alpha, arg = torch.max(alpha + step, dim=0, keepdim=True)
        else:  # row in: over dim 1 of the transposed candidates
            step = odd[t] if k == b else odd[t][..., :k]
            alpha, arg = torch.max(alpha + step, dim=1, keepdim=True)
        pointers.append(arg)
    finals.append(alpha.reshape(c, -1))
    final = torch.cat(finals[::-1], dim=1).t() if len(finals) > 1 else finals[0].t()  # (B, C)
    if ut.device.type == "cpu":
        return _backtrack_host(final, end, plan, pointers)
    return _backtrack(final, end, plan,
                      lambda t, labels: pointers[t].reshape(c, -1).gather(0, labels.unsqueeze(0))[0])


def _backtrack_host(final: Tensor, end: Tensor, plan: Plan, pointers: list[Tensor]) -> Tensor:
    """:func:`_backtrack` in numpy for CPU tensors: ``pointers[t]`` holds (C_next, k_t)
    entries (any shape of that size) naming the label at ``t - 1``."""
    import numpy as np

    b, c = final.shape
    sizes = plan.batch_sizes
    path = np.empty((plan.n, b), dtype=np.int64)
    current = (final + end).argmax(dim=1).numpy()  # (B,) label at each example's last position
    cols = np.arange(b)
    for t in range(plan.n - 1, 0, -1):
        path[t] = current
        k = sizes[t]
        back = pointers[t].numpy().reshape(c, k)
        if k == b:
            current = back[current, cols]
        else:
            current = current.copy()
            current[:k] = back[current[:k], cols[:k]]
    path[0] = current
    return torch.from_numpy(path.T.copy())


def _viterbi_lazy(ut: Tensor, trans: Tensor, shared: bool, end: Tensor, plan: Plan) -> Tensor:
    """Sorted best labels (B, n) with backpointers found while backtracking.

    The forward keeps each step's incoming max-plus vectors (C, k) and takes only the max
    over the previous label; the backtrack recomputes ``alpha_{t-1} + T[:, label_t]`` for the
    one label on each path and takes its argmax: O(C k) per step instead of comparing all
    C^2 k candidates with their maximum (B = 256, T = 120 on a CPU: 1.2-2x faster at C = 12,
    2.5-3.5x at C = 50, with max's indices for the argmax). The recomputed sums are the
    forward's own float additions, so the argmax attains the forward's maximum.
    """
    c = ut.shape[1]
    prevs: list[Tensor] = [ut[0]]  # per step t: the (C_prev, k_t) vectors of step t - 1

    def step(alpha: Tensor, cand: Tensor) -> Tensor:
        prevs.append(alpha)
        return cand.amax(dim=0)

    def pointer(t: int, labels: Tensor) -> Tensor:
        if shared:
            cols = trans.index_select(1, labels)  # (C_prev, k): T[i, label_t]
        else:  # trans (B, C_prev, C_next) sorted: cols[i, e] = trans[e, i, labels[e]]
            k = labels.shape[0]
            cols = trans[:k].gather(2, labels.view(k, 1, 1).expand(k, c, 1)).squeeze(2).t()
        # max's indices, not argmax: over the outer dimension of a (C, k) tensor torch's
        # argmax walks column by column (5x slower at k = 256, C = 12); the same first index
        return (prevs[t] + cols).max(dim=0).indices

    final = _viterbi_forward(ut, trans, shared, plan, step)
    return _backtrack(final, end, plan, pointer)


def factored_kbest(potentials: ChainPotentials, k: int, plan: Plan, n_total: int) -> tuple[Tensor, Tensor]:
    """The k best labels (B, k, n_total) and their scores (B, k), by sidetracks of the
    backward max-plus tree (Eppstein's heap-ordered tree of paths, for a chain).

    One backward max-plus recursion gives ``beta_t(i)``, the best score of a suffix that has
    label ``i`` at ``t``, and ``v_t = u_t + beta_t``; following ``argmax_j T[i, j] + v_t(j)``
    from each label is the tree of best suffixes. Any path leaves that tree at a set of
    *sidetracks*, a label ``j`` at ``t`` other than the tree's after ``y_{t-1}``, each with a
    loss ``delta = beta_{t-1}(y_{t-1}) - T[y_{t-1}, j] - v_t(j) >= 0`` (at t = 0: the best
    start's score minus ``v_0(j)``), and its score is the best score minus the sum of its
    sidetracks' losses. The paths form a heap-ordered tree (a path's losses never exceed its
    descendants'): a path's first child adds the smallest sidetrack after its last one; its
    next sibling replaces its last sidetrack by the next larger one in its parent's list. The
    k best are the first k pops of a best-first search of that tree, with at most k
    candidates held. Each pop follows the tree from the new sidetrack until it meets the
    parent path (a few steps), then ranks the new path's later sidetracks (one top-k over
    (B, n C) losses). The cost is one backward recursion (about a Viterbi's forward), one
    traversal of the best path and k - 1 pops of a few (B, n C) operations each, where the
    list Viterbi merges C sorted k-lists per label at every step (27 small operations a
    step at B = 256, C = 12, k = 5: 6.6x a Viterbi; this about 4x, ``benchmarks/README.md``).

    The recursion and the losses are float64 whatever the input dtype (each input value is
    promoted exactly, so every loss is computed from the same sums as the recursion's maxima,
    and a tree edge's loss is exactly 0). -inf potentials need no special value: a sidetrack
    onto a -inf edge or into a label with no finite suffix has an infinite loss and is never
    taken (the NaN of ``-inf - -inf`` at such labels counts as infinite too), so finite losses
    are exactly the sidetracks of finite paths, and ranks past the last finite path get -inf
    scores. Every tree step is the same deterministic argmax (the first maximum), so each path
    has exactly one set of sidetracks: the k paths are distinct, ties included. The public
    :meth:`LinearChain.kbest` re-scores the returned labels in the input dtype. The tree is
    followed on the host (a few labels per step: numpy indexing costs a tenth of a torch
    call), whatever the device.
    """
    u, trans, _, end = _decoder_inputs(potentials, plan)
    return _sidetrack_kbest(u, trans, end, k, plan, n_total)


def edge_kbest(potentials: Tensor, k: int, plan: Plan, n_total: int) -> tuple[Tensor, Tensor]:
    """The k best labels (B, k, n_total) and scores (B, k) of edge potentials (B, N, C, C)
    (``LinearChain``'s layout: ``potentials[:, 0, 0]`` the first position's scores, the end
    folded into each example's last edge): :func:`factored_kbest`'s search with per-position
    transitions ``potentials[:, t]``, emissions 0 but at the first position, end 0."""
    b, _, c, _ = potentials.shape
    f64 = torch.float64  # the search's dtype: no second copy of u and end
    u = potentials.new_zeros(plan.n, c, b, dtype=f64)
    u[0] = plan.sort(potentials[:, 0, 0]).t()
    return _sidetrack_kbest(u, plan.sort(potentials[:, : plan.n]), potentials.new_zeros(b, c, dtype=f64),
                            k, plan, n_total)


def _sidetrack_kbest(u: Tensor, trans: Tensor, end: Tensor, k: int, plan: Plan, n_total: int
                     ) -> tuple[Tensor, Tensor]:
    """The search of :func:`factored_kbest` on label-major emissions ``u`` (n, C, B) (start
    folded in), transitions (C, C) shared, (B, C, C) per example or (B, n, C, C) per position
    (position 0 unused), end (B, C), all in sorted example order."""
    n, c, b = u.shape
    dev, dtype = u.device, u.dtype
    # float64 copies of the small inputs (mixed-precision arithmetic is slower); per-position
    # transitions, C times larger, are promoted inside each operation instead
    u, end = u.to(torch.float64), end.to(torch.float64)
    trans = trans if trans.dim() == 4 else trans.to(torch.float64)
    beta, v = _backward_max(u, trans, end, plan)
    best, start = v[0].max(dim=0)  # (B,): the best score and its first label
    paths = _Sidetracks(beta, v, best, trans, plan)
    kk = min(k, n * c)  # the ranks of a path's sidetrack list that a search of k pops can read
    rows = torch.arange(b, device=dev)
    inf = float("inf")
    # every popped path: its labels (host, (k, n, B)), the sum of its losses, and its kk
    # smallest later sidetracks (losses, flat index t * C + j), a +inf pad at rank kk
    labels = np.zeros((k, n, b), dtype=np.int64)
    labels[0] = paths.tree_path(start.cpu().numpy())
    lost = torch.zeros(k, b, dtype=torch.float64, device=dev)
    side_loss = torch.full((k, b, kk + 1), inf, dtype=torch.float64, device=dev)
    side_index = torch.zeros(k, b, kk + 1, dtype=torch.long, device=dev)
    no_side = torch.full((b,), -1, dtype=torch.long, device=dev)
    side_loss[0, :, :kk], side_index[0, :, :kk] = paths.smallest(labels[0], no_side, kk)
    # the frontier, k slots: a candidate is path `parent` with its sidetrack of rank `rank`
    total = torch.full((b, k), inf, dtype=torch.float64, device=dev)
    parent = torch.zeros(b, k, dtype=torch.long, device=dev)
    rank = torch.zeros(b, k, dtype=torch.long, device=dev)
    total[:, 0] = side_loss[0, :, 0]
    for q in range(1, k):
        loss, slot = total.min(dim=1)  # (B,): the next path's loss, and where it was
        src, r = parent[rows, slot], rank[rows, slot]
        flat = side_index[src, rows, r]
        at = flat // c
        src_h, at_h, label_h = torch.stack([src, at, flat % c]).cpu().numpy()  # one transfer
        labels[q] = paths.branch(labels[src_h, :, paths.cols].T, at_h, label_h)
        lost[q] = loss
        # its sibling (the parent's next sidetrack) takes the slot; its first child slot q
        nxt = (r + 1).clamp(max=kk)
        total[rows, slot] = lost[src, rows] + side_loss[src, rows, nxt]
        rank[rows, slot] = nxt
        if q + 1 < k:
            side_loss[q, :, :kk], side_index[q, :, :kk] = paths.smallest(labels[q], at, kk)
            total[:, q] = loss + side_loss[q, :, 0]
            parent[:, q], rank[:, q] = q, 0
    out = plan.unsort(torch.from_numpy(labels).to(dev).permute(2, 0, 1))  # (B, k, n)
    if plan.ragged:
        out = torch.where(_valid_bn(lengths_of(plan), plan.n).unsqueeze(1), out, 0)
    scores = (best - lost).t().to(dtype)  # (B, k); +inf losses (no such path) give -inf
    return _pad_labels(out, n_total), plan.unsort(scores)


def _backward_max(ut: Tensor, trans: Tensor, end: Tensor, plan: Plan) -> tuple[Tensor, Tensor]:
    """The backward max-plus recursion, in float64, on label-major ``ut`` (n, C, B) sorted:
    ``beta`` (n, C, B), the best suffix score from label i at t (end included), and ``v = ut +
    beta`` (0 past each example's length). Each step is one add into the (C_next, C_prev, k)
    candidates and a max over their outermost dimension (per-position transitions: their
    (k, C_prev, C_next) layout and a max over the last, cheaper than a transposed copy of
    all of them)."""
    n, c, b = ut.shape
    sizes = list(plan.batch_sizes) + [0]
    layout = trans.dim()
    # transposed transitions: (C_next, C_prev, 1) shared, (C_next, C_prev, B) per example
    tt = trans.t().unsqueeze(2) if layout == 2 else trans.permute(2, 1, 0).contiguous() if layout == 3 else None
    beta = torch.empty(n, c, b, dtype=torch.float64, device=ut.device)
    v = torch.zeros_like(beta)
    end_t = end.t()
    for t in range(n - 1, -1, -1):
        m, ended = sizes[t], sizes[t + 1]  # running at t; of those, running after t
        if ended < m:  # examples whose last position is t
            beta[t, :, ended:m] = end_t[:, ended:m]
        torch.add(ut[t, :, :m], beta[t, :, :m], out=v[t, :, :m])
        if not t:
            break
        if tt is None:  # per position: (m, C_prev, C_next), the max over the last dimension
            beta[t - 1, :, :m] = (trans[:m, t] + v[t, :, :m].t().unsqueeze(1)).amax(dim=2).t()
        else:
            step = tt if layout == 2 else tt[..., :m]
            torch.amax(step + v[t, :, :m].unsqueeze(1), dim=0, out=beta[t - 1, :, :m])
    return beta, v


class _Sidetracks:
    """A path's sidetracks off the tree of best suffixes (see :func:`factored_kbest`).

    Paths are (n, B) label arrays on the host in sorted example order; labels past an
    example's length are never read."""

    def __init__(self, beta: Tensor, v: Tensor, best: Tensor, trans: Tensor, plan: Plan) -> None:
        n, c, b = v.shape
        dev = v.device
        self.n, self.c, self.b, self.layout = n, c, b, trans.dim()
        # v in (B, n, C) layout (one 2-D transposing copy), position 0 as v_0 - best: minus
        # the start losses
        self.v = v.new_empty(b, n, c)
        self.v.view(b, n * c).copy_(v.view(n * c, b).t())
        self.v[:, 0] -= best.unsqueeze(1)
        self.beta = beta.view(-1)
        self.pos = torch.arange(n, device=dev)
        # beta_{t-1}(i) of example e, for t >= 1, is beta[(t - 1) C B + i B + e]
        self.beta_at = (self.pos[:-1] * (c * b)).unsqueeze(1) + torch.arange(b, device=dev)
        self.past = self.pos >= plan.lengths.unsqueeze(1)  # (B, n)
        # transition rows (C values each) and, per (example, position), where the rows of that
        # step start (the row read is that start plus the previous label): shared (C, C) rows
        # at 0, per example (B, C, C) at e C, per position (B, n, C, C) at (e n + t) C; position
        # 0 has no previous label (its scores are in v) and reads row 0, then zeroed
        self.rows = trans.reshape(-1, c)
        e, t = torch.arange(b, device=dev).unsqueeze(1), self.pos.unsqueeze(0)
        if self.layout == 2:
            self.row_start = torch.zeros(b, n, dtype=torch.long, device=dev)
        else:
            self.row_start = (e * c).expand(b, n) if self.layout == 3 else (e * n + t) * c
        self.losses = v.new_empty(b, n, c)  # minus a path's sidetrack losses, reused
        # a path's transition rows, where they are not float64 already
        self.row_buf = None if trans.dtype == v.dtype else trans.new_empty(b, n, c)
        # no -inf, and no +inf / NaN in the padding of per-position transitions: no NaN loss
        # (one reduction each: a sum is finite only if every term is; an overflow to inf only
        # sends a finite batch down the NaN pass too)
        self.finite = math.isfinite(float(self.v.sum()) + float(trans.sum()))
        # host copies for following the tree (numpy has no bfloat16: promoted, as in torch)
        self.v_host = self.v.cpu().numpy()
        exact = trans.dtype in (torch.float32, torch.float64)
        self.t_host = (trans if exact else trans.double()).cpu().numpy()
        self.lengths_host = plan.lengths.cpu().numpy()
        self.cols = np.arange(b)

    def _step(self, prev: np.ndarray, t: Any, cols: np.ndarray) -> np.ndarray:
        """The tree's labels at positions ``t`` after labels ``prev`` of examples ``cols``."""
        if self.layout == 2:
            trans = self.t_host[prev]
        else:
            trans = self.t_host[cols, prev] if self.layout == 3 else self.t_host[cols, t, prev]
        return (trans + self.v_host[cols, t]).argmax(1)

    def tree_path(self, start: np.ndarray) -> np.ndarray:
        """The tree's path from labels ``start`` (B,) at position 0: the best path."""
        y = np.empty((self.n, self.b), dtype=np.int64)
        y[0] = start
        for t in range(1, self.n):
            y[t] = self._step(y[t - 1], t, self.cols)
        return y

    def branch(self, parent: np.ndarray, at: np.ndarray, label: np.ndarray) -> np.ndarray:
        """``parent`` (n, B) with ``label`` at position ``at`` (B,) and the tree after it: the
        parent's own labels again from where the two meet (after its last sidetrack, which
        comes before ``at``, the parent follows the tree)."""
        y = parent.copy()
        y[at, self.cols] = label
        t = at + 1
        live = np.nonzero(t < self.lengths_host)[0]
        while live.size:
            tl = t[live]
            step = self._step(y[tl - 1, live], tl, live)
            met = step == y[tl, live]
            y[tl, live] = step
            t[live] += 1
            live = live[~met & (t[live] < self.lengths_host[live])]
        return y

    def smallest(self, path: np.ndarray, after: Tensor, kk: int) -> tuple[Tensor, Tensor]:
        """The ``kk`` smallest losses (B, kk) of the sidetracks of ``path`` (n, B) at positions
        after ``after`` (B,), ascending, and their flat indices ``t * C + j``; +inf where
        fewer exist."""
        n, c, b = self.n, self.c, self.b
        y = torch.from_numpy(path).to(self.pos.device)
        prev = self.row_start.clone()
        prev[:, 1:] += y[:-1].t()
        bp = torch.zeros(n, b, dtype=self.v.dtype, device=y.device)
        torch.take(self.beta, self.beta_at + y[:-1] * b, out=bp[1:])  # beta_{t-1}(y_{t-1})
        bp = bp.t().masked_fill((self.pos <= after.unsqueeze(1)) | self.past, float("inf"))
        out, inf = self.losses, float("inf")
        rows = out if self.row_buf is None else self.row_buf
        torch.index_select(self.rows, 0, prev.view(-1), out=rows.view(b * n, c))
        rows[:, 0] = 0
        if rows is out:
            out.add_(self.v)
        else:
            torch.add(rows, self.v, out=out)
        out.sub_(bp.unsqueeze(2))  # T[y_{t-1}, j] + v_t(j) - beta_{t-1}(y_{t-1})
        if not self.finite:  # NaN where a label has no finite suffix (-inf - -inf), +inf only
            # in padding: never taken
            torch.nan_to_num_(out, nan=-inf, posinf=-inf, neginf=-inf)
        out.scatter_(2, y.t().unsqueeze(2), -inf)  # the path's own labels
        top = out.view(b, n * c).topk(kk, dim=1)
        return top.values.neg(), top.indices


def lengths_of(plan: Plan) -> Tensor:
    """Lengths in example order."""
    return plan.unsort(plan.lengths)


def _valid_bn(lengths: Tensor, n: int) -> Tensor:
    return torch.arange(n, device=lengths.device) < lengths.unsqueeze(1)


def _pad_labels(labels: Tensor, n_total: int) -> Tensor:
    n = labels.shape[-1]
    if n_total == n:
        return labels.contiguous()
    pad = labels.new_zeros(labels.shape[:-1] + (n_total - n,))
    return torch.cat([labels, pad], dim=-1)
