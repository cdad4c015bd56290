"""Factored chain potentials (``ChainPotentials``: emissions, transitions, start, end) against
brute-force enumeration and the (B, N, C, C) edge layout, in float64: log Z, marginals (exp-space
fused path and its fallback), Viterbi, k-best, scores, constrained and cost-augmented decoding,
losses, ``gradcheck``; -inf masks, padding garbage, extreme scales, ragged and unsorted batches."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from oracle import check_structure
from structssl.losses import CRFNLLLoss, NablaSVMLoss, StructuredHingeLoss
from structssl.scorers import LinearChainScorer
from structssl.structures import ChainPotentials, LinearChain
from structssl.structures._chain_factored import Plan, exp_space_exact

D = torch.float64


class FactoredPartsChain(LinearChain):
    """LinearChain whose ``to_parts`` gives the factored layout (for the generic oracle)."""

    def to_parts(self, labels, lengths=None, factored=True):  # type: ignore[override]
        return super().to_parts(labels, lengths, factored=factored)


def _enumerate(num_labels: int, lengths: torch.Tensor, max_length: int):
    def labels_of(b: int):
        n = int(lengths[b])
        for y in itertools.product(range(num_labels), repeat=n):
            yield torch.tensor(list(y) + [0] * (max_length - n))

    return labels_of


def _factors(b: int, n: int, c: int, shared: bool = True, scale: float = 1.0, seed: int = 0,
             requires_grad: bool = False) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    emissions = scale * torch.randn(b, n, c, generator=g, dtype=D)
    transitions = scale * torch.randn(*((c, c) if shared else (b, c, c)), generator=g, dtype=D)
    start = scale * torch.randn(c, generator=g, dtype=D)
    end = scale * torch.randn(b, c, generator=g, dtype=D)
    out = (emissions, transitions, start, end)
    return tuple(x.requires_grad_(requires_grad) for x in out)


def _brute(pot: ChainPotentials, lengths: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """log Z and the sorted scores of every labelling, from the raw factors (no structssl)."""
    emissions, transitions, start, end = pot
    c = emissions.shape[2]
    log_z, all_scores = [], []
    for i in range(emissions.shape[0]):
        m = int(lengths[i])
        scores = []
        for y in itertools.product(range(c), repeat=m):
            s = start[i, y[0]] + emissions[i, 0, y[0]] + end[i, y[-1]]
            for t in range(1, m):
                s = s + transitions[i, y[t - 1], y[t]] + emissions[i, t, y[t]]
            scores.append(s)
        scores_t = torch.stack(scores)
        log_z.append(torch.logsumexp(scores_t, 0))
        all_scores.append(scores_t.sort(descending=True).values)
    return torch.stack(log_z), all_scores


LENGTHS = [None, torch.tensor([4, 2, 1]), torch.tensor([1, 4, 3])]


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("lengths", LENGTHS, ids=["full", "sorted", "unsorted"])
def test_every_operation_matches_enumeration(shared: bool, lengths) -> None:
    b, n, c = 3, 4, 3
    pot = ChainPotentials.from_factors(*_factors(b, n, c, shared))
    full = torch.full((b,), n) if lengths is None else lengths
    check_structure(FactoredPartsChain(c), pot, lengths, _enumerate(c, full, n), k=5)
    log_z, _ = _brute(pot, full)
    torch.testing.assert_close(LinearChain(c).log_partition(pot, lengths), log_z)


@pytest.mark.parametrize("shared", [True, False])
def test_same_results_as_the_edge_layout(shared: bool) -> None:
    b, n, c = 5, 7, 4
    lengths = torch.tensor([7, 3, 1, 7, 5])
    factors = _factors(b, n, c, shared, requires_grad=True)
    chain = LinearChain(c)
    pot = ChainPotentials.from_factors(*factors)
    edges = chain.edge_potentials(pot, lengths)
    z_f, z_e = chain.log_partition(pot, lengths), chain.log_partition(edges, lengths)
    torch.testing.assert_close(z_f, z_e)
    g_f = torch.autograd.grad(z_f.sum(), factors)
    g_e = torch.autograd.grad(z_e.sum(), factors)
    for a, e in zip(g_f, g_e):
        torch.testing.assert_close(a, e)
    marg = chain.marginals(pot, lengths)
    marg_e = chain.marginals(edges, lengths)
    torch.testing.assert_close(marg.emissions, chain.node_parts(marg_e))
    torch.testing.assert_close(marg.transitions, marg_e[:, 1:].sum(1))
    torch.testing.assert_close(marg.start, marg_e[:, 0, 0])
    labels, scores = chain.argmax(pot, lengths)
    labels_e, scores_e = chain.argmax(edges, lengths)
    assert torch.equal(labels, labels_e)
    torch.testing.assert_close(scores, scores_e)
    kb, kb_scores = chain.kbest(pot, 6, lengths)
    kb_e, kb_scores_e = chain.kbest(edges, 6, lengths)
    torch.testing.assert_close(kb_scores, kb_scores_e)
    real = torch.isfinite(kb_scores)  # missing ranks (example 2 has 4 structures) have arbitrary labels
    assert torch.equal(kb[real], kb_e[real])  # no ties in random float64 potentials
    assert not real.all()
    # the k-best scores are differentiable: gathers from the factors broadcast over the ranks
    # (a fresh graph: the gradients above freed the one the potentials share)
    pot = ChainPotentials.from_factors(*factors)
    g_f = torch.autograd.grad(chain.kbest(pot, 6, lengths)[1][real].sum(), factors)
    edges = chain.edge_potentials(ChainPotentials.from_factors(*factors), lengths)
    g_e = torch.autograd.grad(chain.kbest(edges, 6, lengths)[1][real].sum(), factors)
    for a, e in zip(g_f, g_e):
        torch.testing.assert_close(a, e)
    target = labels.flip(1) % c
    target = torch.where(chain.valid_mask(lengths, n), target, 0)
    for cost in ("hamming", "zero_one"):
        a, sa = chain.cost_augmented_argmax(pot, target, lengths, cost=cost)
        e, se = chain.cost_augmented_argmax(edges, target, lengths, cost=cost)
        assert torch.equal(a, e)
        torch.testing.assert_close(sa, se)


def test_losses_match_the_edge_layout() -> None:
    b, n, c = 4, 6, 3
    lengths = torch.tensor([6, 2, 5, 1])
    chain = LinearChain(c)
    target = torch.randint(0, c, (b, n), generator=torch.Generator().manual_seed(1))
    target = torch.where(chain.valid_mask(lengths, n), target, 0)
    for loss in (CRFNLLLoss(), NablaSVMLoss(k=2), NablaSVMLoss(k=1, cost="zero_one"), StructuredHingeLoss()):
        factors = _factors(b, n, c, requires_grad=True, seed=3)
        pot = ChainPotentials.from_factors(*factors)
        value = loss(chain, pot, target, lengths)
        g = torch.autograd.grad(value, factors)
        factors_e = _factors(b, n, c, requires_grad=True, seed=3)
        edges = LinearChain.potentials_from(*factors_e, lengths=lengths)
        value_e = loss(chain, edges, target, lengths)
        g_e = torch.autograd.grad(value_e, factors_e)
        torch.testing.assert_close(value, value_e, msg=repr(loss))
        for a, e in zip(g, g_e):
            torch.testing.assert_close(a, e, msg=repr(loss))


def test_padding_may_hold_anything() -> None:
    b, n, c = 3, 5, 3
    lengths = torch.tensor([5, 2, 3])
    emissions, transitions, start, end = _factors(b, n, c)
    garbage = emissions.clone()
    garbage[1, 2:] = float("nan")
    garbage[2, 3:] = float("inf")
    chain = LinearChain(c)
    clean = ChainPotentials.from_factors(emissions, transitions, start, end)
    dirty = ChainPotentials.from_factors(garbage, transitions, start, end)
    torch.testing.assert_close(chain.log_partition(dirty, lengths), chain.log_partition(clean, lengths))
    assert torch.equal(chain.argmax(dirty, lengths)[0], chain.argmax(clean, lengths)[0])
    assert torch.equal(chain.kbest(dirty, 3, lengths)[0], chain.kbest(clean, 3, lengths)[0])
    marg = chain.marginals(dirty, lengths)
    assert torch.isfinite(marg.emissions).all() and not marg.emissions[1, 2:].any()
    with pytest.raises(ValueError, match="potentials contain NaN"):
        bad = garbage.clone()
        bad[0, 1, 1] = float("nan")
        chain.log_partition(ChainPotentials.from_factors(bad, transitions, start, end), lengths)


def test_inf_masks_are_exact() -> None:
    """-inf in the factors (and from constrain) goes through the exact path: the same as the
    edge layout and enumeration, zero marginals on forbidden parts."""
    b, n, c = 3, 4, 3
    lengths = torch.tensor([4, 3, 2])
    emissions, transitions, start, end = _factors(b, n, c)
    chain = LinearChain(c)
    allowed = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 1, 1]], dtype=torch.bool)
    observed = torch.tensor([[-1, 2, -1, -1], [0, -1, -1, 0], [-1, -1, 0, 0]])
    pot = ChainPotentials.from_factors(emissions, transitions, start, end)
    masked = chain.constrain(pot, lengths, allowed_transitions=allowed, observed=observed,
                             allowed_end=torch.tensor([True, True, False]))
    assert isinstance(masked, ChainPotentials)
    edges = chain.constrain(chain.edge_potentials(pot, lengths), lengths, allowed_transitions=allowed,
                            observed=observed, allowed_end=torch.tensor([True, True, False]))
    torch.testing.assert_close(chain.log_partition(masked, lengths), chain.log_partition(edges, lengths))
    torch.testing.assert_close(chain.kbest(masked, 4, lengths)[1], chain.kbest(edges, 4, lengths)[1])
    assert torch.equal(chain.argmax(masked, lengths)[0], chain.argmax(edges, lengths)[0])
    marg = chain.marginals(masked, lengths)
    assert not marg.transitions[:, ~allowed].any()
    check_structure(FactoredPartsChain(c), masked, lengths, _enumerate(c, lengths, n), k=4)
    with pytest.raises(ValueError, match="no valid labelling for example"):
        chain.constrain(pot, lengths, allowed_transitions=torch.eye(c, dtype=torch.bool),
                        observed=torch.tensor([[0, 1, -1, -1], [-1] * 4, [-1] * 4]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("scale", [1e-3, 3.0, 30.0, 1e4])
def test_extreme_scales(dtype: torch.dtype, scale: float) -> None:
    """Exact at any scale: the exp-space path where its bound holds, else the log-space one;
    both equal the float64 edge-layout reference to rounding."""
    b, n, c = 4, 30, 5
    lengths = torch.tensor([30, 17, 1, 29])
    factors = [x.to(dtype) for x in _factors(b, n, c, scale=scale, seed=5)]
    chain = LinearChain(c)
    pot = ChainPotentials.from_factors(*factors)
    reference = chain.log_partition(chain.edge_potentials(
        ChainPotentials.from_factors(*[x.double() for x in factors]), lengths), lengths)
    log_z = chain.log_partition(pot, lengths)
    assert torch.isfinite(log_z).all()
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(log_z.double(), reference, rtol=tol, atol=tol * n)
    marg = chain.marginals(pot, lengths)
    assert torch.isfinite(marg.emissions).all()
    valid = chain.valid_mask(lengths, n)
    torch.testing.assert_close(marg.emissions.sum(2)[valid].double(),
                               torch.ones(int(valid.sum()), dtype=D), rtol=tol * 10, atol=tol * 10)
    plan = Plan(lengths)
    fast = exp_space_exact(pot, plan, plan.label_major(pot.emissions))
    assert fast == (scale <= 3.0)  # large scales take the log-space path


def test_exp_space_bound_is_tight_enough_in_float32() -> None:
    """Just inside the bound (float32), the exp-space result equals float64 to rounding."""
    b, n, c = 8, 200, 6
    g = torch.Generator().manual_seed(7)
    emissions = torch.rand(b, n, c, generator=g) * 16.0
    transitions = torch.rand(c, c, generator=g) * 16.0
    pot = ChainPotentials.from_factors(emissions, transitions)
    plan = Plan(torch.full((b,), n))
    assert exp_space_exact(pot, plan, plan.label_major(emissions))
    chain = LinearChain(c)
    double = ChainPotentials.from_factors(emissions.double(), transitions.double())
    torch.testing.assert_close(chain.log_partition(pot).double(), chain.log_partition(double),
                               rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("shared", [True, False])
def test_gradcheck(shared: bool) -> None:
    b, n, c = 3, 4, 3
    lengths = torch.tensor([4, 1, 3])
    factors = _factors(b, n, c, shared, requires_grad=True, seed=11)
    chain = LinearChain(c)

    def log_z(e, t, s, d):
        return chain.log_partition(ChainPotentials.from_factors(e, t, s, d), lengths)

    assert torch.autograd.gradcheck(log_z, factors)
    assert torch.autograd.gradgradcheck(log_z, factors)


def test_marginals_under_inference_mode_and_create_graph() -> None:
    b, n, c = 2, 5, 3
    factors = _factors(b, n, c, requires_grad=True, seed=2)
    chain = LinearChain(c)
    pot = ChainPotentials.from_factors(*factors)
    expected = chain.marginals(pot)
    with torch.inference_mode():
        inside = chain.marginals(ChainPotentials.from_factors(*[x.detach() for x in factors]))
    for a, e in zip(inside, expected):
        torch.testing.assert_close(a, e)
    second = chain.marginals(pot, create_graph=True)
    # per example, although log Z sends the expanded transition matrix their sum
    for a, e in zip(second, expected):
        torch.testing.assert_close(a, e)
    (grad,) = torch.autograd.grad(second.emissions.pow(2).sum(), factors[0])
    edges = LinearChain.potentials_from(*factors)
    second_e = chain.node_parts(chain.marginals(edges, create_graph=True))
    (grad_e,) = torch.autograd.grad(second_e.pow(2).sum(), factors[0])
    torch.testing.assert_close(grad, grad_e)


def test_ties_give_distinct_kbest_and_a_best_path() -> None:
    b, n, c = 2, 3, 2
    pot = ChainPotentials.from_factors(torch.zeros(b, n, c, dtype=D))
    chain = LinearChain(c)
    labels, scores = chain.kbest(pot, 10)  # 8 structures, 2 missing ranks
    assert torch.equal(scores[:, :8], torch.zeros(b, 8, dtype=D))
    assert torch.isneginf(scores[:, 8:]).all()
    assert len({tuple(y.tolist()) for y in labels[0, :8]}) == 8
    assert chain.argmax(pot)[1].eq(0).all()


def test_scorer_factored_option_matches_edges() -> None:
    torch.manual_seed(0)
    scorer = LinearChainScorer(num_labels=4, input_dim=3, init_std=0.5).double()
    factored = LinearChainScorer(num_labels=4, input_dim=3, factored=True).double()
    factored.load_state_dict(scorer.state_dict())
    x = torch.randn(3, 6, 3, dtype=D)
    lengths = torch.tensor([6, 4, 1])
    target = torch.tensor([[0, 1, 2, 3, 0, 1], [3, 3, 2, 1, 0, 0], [2, 0, 0, 0, 0, 0]])
    chain = LinearChain(4)
    pot, pot_f = scorer(x, lengths), factored(x, lengths)
    assert isinstance(pot_f, ChainPotentials)
    torch.testing.assert_close(chain.score(pot_f, target, lengths), chain.score(pot, target, lengths))
    loss, loss_f = CRFNLLLoss()(chain, pot, target, lengths), CRFNLLLoss()(chain, pot_f, target, lengths)
    torch.testing.assert_close(loss_f, loss)
    g = torch.autograd.grad(loss, list(scorer.parameters()))
    g_f = torch.autograd.grad(loss_f, list(factored.parameters()))
    for a, e in zip(g_f, g):
        torch.testing.assert_close(a, e)


def test_single_example_and_single_position() -> None:
    chain = LinearChain(3)
    for b, n in ((1, 6), (4, 1), (1, 1)):
        factors = _factors(b, n, 3, seed=b * 10 + n)
        pot = ChainPotentials.from_factors(*factors)
        edges = chain.edge_potentials(pot)
        torch.testing.assert_close(chain.log_partition(pot), chain.log_partition(edges))
        assert torch.equal(chain.argmax(pot)[0], chain.argmax(edges)[0])
        torch.testing.assert_close(chain.kbest(pot, 4)[1], chain.kbest(edges, 4)[1])
    # the caller's emissions are never modified (B = 1 time-major views share memory)
    emissions = torch.randn(1, 5, 3, dtype=D)
    copy = emissions.clone()
    pot = ChainPotentials.from_factors(emissions, start=torch.ones(3, dtype=D))
    chain.log_partition(pot), chain.argmax(pot), chain.kbest(pot, 3), chain.marginals(pot)
    assert torch.equal(emissions, copy)


def test_bad_factored_inputs() -> None:
    chain = LinearChain(3)
    e = torch.zeros(2, 4, 3)
    with pytest.raises(ValueError, match=r"potentials.emissions must have shape \(B, N, C\).*C = num_labels = 3; got \(2, 4, 2\)"):
        chain.log_partition(ChainPotentials.from_factors(torch.zeros(2, 4, 2)))
    with pytest.raises(ValueError, match=r"potentials.transitions must have shape \(2, 3, 3\).*got \(2, 2, 2\)"):
        chain.log_partition(ChainPotentials(e, torch.zeros(2, 2, 2), torch.zeros(2, 3), torch.zeros(2, 3)))
    with pytest.raises(ValueError, match=r"potentials.end must have the dtype of potentials.emissions"):
        chain.log_partition(ChainPotentials(e, torch.zeros(2, 3, 3), torch.zeros(2, 3), torch.zeros(2, 3, dtype=D)))
    with pytest.raises(ValueError, match=r"transitions must have shape \(3, 3\) or \(2, 3, 3\); got \(4, 4\)"):
        ChainPotentials.from_factors(e, torch.zeros(4, 4))
    with pytest.raises(ValueError, match=r"lengths must be in \[1, N\] = \[1, 4\]"):
        chain.argmax(ChainPotentials.from_factors(e), torch.tensor([5, 1]))


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("c", [3, 6, 20])
def test_large_batch_decoders_match_edges(shared: bool, masked: bool, c: int) -> None:
    """Batches large enough for the backtrack-argmax Viterbi (the small-step path is what the
    enumeration tests reach) and the k-best, with -inf masks, ragged unsorted lengths,
    per-example transitions and k > C (ranks that run out)."""
    b, n, k = 700, 6, 5
    g = torch.Generator().manual_seed(c)
    lengths = torch.randint(1, n + 1, (b,), generator=g)
    pot = ChainPotentials.from_factors(*_factors(b, n, c, shared, seed=c))
    chain = LinearChain(c)
    if masked:
        allowed = torch.rand(c, c, generator=g) > 0.3
        allowed |= torch.eye(c, dtype=torch.bool)  # every example keeps a labelling
        pot = chain.constrain(pot, lengths, allowed_transitions=allowed)
    edges = chain.edge_potentials(pot, lengths)
    labels, scores = chain.argmax(pot, lengths)
    labels_e, scores_e = chain.argmax(edges, lengths)
    assert torch.equal(labels, labels_e)
    torch.testing.assert_close(scores, scores_e)
    kb, kb_scores = chain.kbest(pot, k, lengths)
    kb_e, kb_scores_e = chain.kbest(edges, k, lengths)
    torch.testing.assert_close(kb_scores, kb_scores_e)
    real = torch.isfinite(kb_scores)
    assert torch.equal(kb[real], kb_e[real])
    torch.testing.assert_close(chain.log_partition(pot, lengths), chain.log_partition(edges, lengths))


def _distinct_paths(labels: torch.Tensor, real: torch.Tensor) -> bool:
    """Whether every example's finite-score ranks hold distinct label sequences."""
    same = (labels.unsqueeze(1) == labels.unsqueeze(2)).all(-1)  # (B, k, k)
    pair_real = real.unsqueeze(1) & real.unsqueeze(2)
    off_diagonal = ~torch.eye(labels.shape[1], dtype=torch.bool)
    return not (same & pair_real & off_diagonal).any()


@pytest.mark.parametrize("dtype,scale", [(D, 0.0), (D, 1e-3), (D, 1e4), (D, 1e250), (torch.float32, 0.0),
                                         (torch.float32, 1.0), (torch.float32, 1e30)])
def test_kbest_ties_scales_and_dtypes(dtype: torch.dtype, scale: float) -> None:
    """The sidetrack k-best on a large batch: integer potentials with many exact ties (scale 0:
    values in {-1, 0, 1}, where every tree step and loss must be exact for the paths to stay
    distinct), tiny and huge scales, float32 inputs (the recursion runs in float64), -inf
    masks; the same scores as the edge layout, distinct paths, scores sorted."""
    b, n, c, k = 700, 7, 3, 6
    g = torch.Generator().manual_seed(11)
    lengths = torch.randint(1, n + 1, (b,), generator=g)
    if scale == 0.0:
        factors = [torch.randint(-1, 2, s, generator=g).to(dtype) for s in ((b, n, c), (c, c), (c,), (b, c))]
    else:
        factors = [x.to(dtype) for x in _factors(b, n, c, scale=scale, seed=3)]
    chain = LinearChain(c)
    pot = chain.constrain(ChainPotentials.from_factors(*factors), lengths,
                          allowed_transitions=torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 1]], dtype=torch.bool))
    labels, scores = chain.kbest(pot, k, lengths)
    # reference: the float64 edge layout (float32 inputs: its float32 recursion rounds, and at
    # scale 1e30 path scores cancel, so the bound is absolute, in units of the largest term)
    pot64 = ChainPotentials(*[x.double() for x in pot])
    _, scores_e = chain.kbest(chain.edge_potentials(pot64, lengths), k, lengths)
    if scale == 0.0:
        assert torch.equal(scores.double(), scores_e)
    else:
        term = max(float(x[torch.isfinite(x)].abs().max()) for x in pot)
        atol = 4 * (2 * n + 1) * torch.finfo(dtype).eps * term
        torch.testing.assert_close(scores.double(), scores_e, rtol=0, atol=atol)
    real = torch.isfinite(scores)
    assert torch.equal(real, torch.isfinite(scores_e)) and not real.all()
    assert _distinct_paths(labels, real)
    assert (scores[:, :-1] >= scores[:, 1:]).all()
    # padded positions hold 0 in every returned path
    assert not labels.masked_fill(chain.valid_mask(lengths, n).unsqueeze(1), 0).any()


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("ties", [False, True])
def test_kbest_many_ranks_on_long_ragged_chains_against_the_kmax_semiring(shared: bool, ties: bool) -> None:
    """k = 40 on chains of up to 30 positions: deep chains of siblings and children in the
    sidetrack search, branches that meet their parent path late, ragged lengths (1 included)
    and a transition mask. The scores equal the K-max semiring's on the edge layout (an
    independent dynamic program), every rank scores its labels, and the paths are distinct."""
    b, n, c, k = 6, 30, 5, 40
    g = torch.Generator().manual_seed(7)
    if ties:
        factors = [torch.randint(-1, 2, s, generator=g).to(D) for s in ((b, n, c), (c, c) if shared else (b, c, c), (c,), (c,))]
    else:
        factors = _factors(b, n, c, shared, seed=5)
    lengths = torch.tensor([30, 1, 17, 2, 29, 9])
    chain = LinearChain(c)
    allowed = torch.rand(c, c, generator=g) > 0.25
    allowed |= torch.eye(c, dtype=torch.bool)
    pot = chain.constrain(ChainPotentials.from_factors(*factors), lengths, allowed_transitions=allowed)
    labels, scores = chain.kbest(pot, k, lengths)
    edges = chain.edge_potentials(pot, lengths)
    torch.testing.assert_close(scores, chain.kmax(edges, k, lengths))
    real = torch.isfinite(scores)
    assert _distinct_paths(labels, real) and not real[1].all()  # 5 labellings of one position
    torch.testing.assert_close(chain.score(edges.repeat_interleave(k, 0), labels.flatten(0, 1),
                                           lengths.repeat_interleave(k))[real.flatten()], scores[real])


def test_kbest_takes_huge_float64_magnitudes() -> None:
    """No sentinel or magnitude bound: potentials of 1e305 (a sum of a few stays finite) and
    -inf masks beside them give the K-max semiring's scores, distinct paths, on both
    layouts."""
    chain = LinearChain(3)
    g = torch.Generator().manual_seed(3)
    emissions = torch.randn(2, 4, 3, generator=g, dtype=D)
    emissions[1, 2, 0] = 1e305
    emissions[0, 1, 2] = -math.inf
    pot = ChainPotentials.from_factors(emissions, torch.randn(3, 3, generator=g, dtype=D))
    edges = chain.edge_potentials(pot)
    for p in (pot, edges):
        labels, scores = chain.kbest(p, 5)
        torch.testing.assert_close(scores, chain.kmax(edges, 5))
        assert _distinct_paths(labels, torch.isfinite(scores))
    chain.argmax(ChainPotentials.from_factors(emissions))


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("lengths", [[200, 40, 3, 1], [64]], ids=["ragged", "single"])
def test_lone_steps_of_the_longest_example_run_as_a_scan(shared: bool, lengths: list[int]) -> None:
    """The steps where only the longest example runs (160 here; all 64 of a lone example) go
    through prefix products; log Z, its gradient (the marginals) and the marginals equal the
    log-space edge layout's in float64."""
    from structssl.structures._chain_factored import _solo_start

    lens = torch.tensor(lengths)
    b, n, c = len(lengths), max(lengths), 5
    assert _solo_start(Plan(lens), c) == (lengths[1] if b > 1 else 1)
    factors = _factors(b, n, c, shared, scale=2.0, seed=13, requires_grad=True)
    chain = LinearChain(c)
    pot = ChainPotentials.from_factors(*factors)
    edges = chain.edge_potentials(pot, lens)
    z, z_e = chain.log_partition(pot, lens), chain.log_partition(edges, lens)
    torch.testing.assert_close(z, z_e, rtol=1e-12, atol=1e-10)
    for got, want in zip(torch.autograd.grad(z.sum(), factors),
                         torch.autograd.grad(z_e.sum(), factors)):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    marg = chain.marginals(pot, lens)
    torch.testing.assert_close(marg.emissions, chain.node_parts(chain.marginals(edges, lens)))


@pytest.mark.parametrize("emission_scale", [16.0, 120.0])
def test_lone_steps_scan_in_float32_near_the_bound(emission_scale: float) -> None:
    """Float32 at the exp-space bound (transitions spanning 16 nats) over 900 lone steps, and
    emissions whose factors underflow (a range of up to 120 nats at a position): log Z and the
    node marginals equal float64's to float32 rounding."""
    g = torch.Generator().manual_seed(17)
    lens = torch.tensor([1000, 100, 7])
    b, n, c = 3, 1000, 6
    emissions = torch.rand(b, n, c, generator=g) * emission_scale
    transitions = torch.rand(c, c, generator=g) * 16.0
    chain = LinearChain(c)
    pot = ChainPotentials.from_factors(emissions, transitions)
    plan = Plan(lens)
    assert exp_space_exact(pot, plan, plan.label_major(emissions))
    double = ChainPotentials.from_factors(emissions.double(), transitions.double())
    torch.testing.assert_close(chain.log_partition(pot, lens).double(),
                               chain.log_partition(double, lens), rtol=2e-6, atol=1e-3)
    torch.testing.assert_close(chain.marginals(pot, lens).emissions.double(),
                               chain.marginals(double, lens).emissions, rtol=0, atol=2e-4)
