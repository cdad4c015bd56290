"""Corpus-level dual decomposition and the multi-label corpus constraints (seed 004 sec. 4-5)."""

from __future__ import annotations

import itertools
from typing import Iterator

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from structssl.inference.dual_decomposition import (
    CorpusDualDecomposition,
    CorpusLinearConstraints,
    CorpusMultipliers,
    ExactComponent,
    StarTreeComponents,
    corpus_dual_decomposition,
)
from structssl.inference.multilabel_constraints import (
    LabelCorrelationConstraint,
    LabelDistributionConstraint,
    multilabel_constraints,
)
from structssl.structures.linear_chain import LinearChain
from structssl.structures.multilabel import MultiLabelPotentials, PairwiseMultiLabel

D = torch.float64


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Tiny tensors: intra-op threads only add overhead (and contention on shared machines)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _random_multilabel(b: int, k: int, attractive: bool = False, scale: float = 1.0) -> MultiLabelPotentials:
    unary = torch.randn(b, k, 2, dtype=D)
    pair = scale * torch.randn(b, k, k, 2, 2, dtype=D)
    if attractive:  # submodular edges: the LP relaxation (and the star decomposition) is tight
        strength = scale * torch.rand(b, k, k, dtype=D)
        pair = torch.zeros(b, k, k, 2, 2, dtype=D)
        pair[..., 0, 0] = strength
        pair[..., 1, 1] = strength
    return MultiLabelPotentials(unary, pair)


def _brute_force(pot: MultiLabelPotentials, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    structure = PairwiseMultiLabel(k)
    configs = torch.tensor(list(itertools.product([0, 1], repeat=k)))
    b = pot.unary.shape[0]
    scores = torch.stack(
        [structure.score(pot, c.expand(b, k)) for c in configs], dim=1
    )  # (B, 2^K)
    best = scores.max(dim=1)
    return configs[best.indices], best.values


# ---------------------------------------------------------------- without constraints
@settings(max_examples=8, deadline=None)
@given(st.integers(1, 6), st.integers(0, 10_000))
def test_two_labels_is_exact(b: int, seed: int) -> None:
    """K = 2: every star is the whole graph, so dual decomposition is exact."""
    torch.manual_seed(seed)
    pot = _random_multilabel(b, 2)
    labels, values = _brute_force(pot, 2)
    res = corpus_dual_decomposition(pot, StarTreeComponents(2), inner_iter=20)
    got = PairwiseMultiLabel(2).score(pot, res.labels)
    torch.testing.assert_close(got, values)
    assert res.dual >= float(values.mean()) - 1e-9


@pytest.mark.parametrize("k", [3, 5])
def test_attractive_instances_reach_brute_force_optimum(k: int) -> None:
    pot = _random_multilabel(16, k, attractive=True, scale=1.5)
    _, values = _brute_force(pot, k)
    res = corpus_dual_decomposition(pot, StarTreeComponents(k), inner_iter=200)
    got = PairwiseMultiLabel(k).score(pot, res.labels)
    torch.testing.assert_close(got, values)
    assert res.primal == pytest.approx(float(values.mean()))
    assert res.dual == pytest.approx(float(values.mean()), abs=1e-6)
    assert res.violation == 0.0 and res.rates.numel() == 0


@pytest.mark.parametrize("k", [3, 6])
def test_bounds_hold_on_frustrated_instances(k: int) -> None:
    pot = _random_multilabel(12, k, scale=2.0)
    _, values = _brute_force(pot, k)
    res = corpus_dual_decomposition(pot, StarTreeComponents(k), inner_iter=40)
    opt = float(values.mean())
    assert res.primal <= opt + 1e-9
    assert res.dual >= opt - 1e-9
    assert len(res.primal_history) == len(res.dual_history) == len(res.violation_history) == 1


def test_exact_component_matches_argmax_multilabel_and_chain() -> None:
    pot = _random_multilabel(5, 4, scale=2.0)
    labels, values = _brute_force(pot, 4)
    res = corpus_dual_decomposition(pot, ExactComponent(PairwiseMultiLabel(4)))
    torch.testing.assert_close(PairwiseMultiLabel(4).score(pot, res.labels), values)
    chain = LinearChain(3)
    cpot = torch.randn(4, 5, 3, 3, dtype=D)
    res = corpus_dual_decomposition(cpot, ExactComponent(chain))
    ref, _ = chain.argmax(cpot)
    assert torch.equal(res.labels, ref)


def test_does_not_mutate_potentials() -> None:
    pot = _random_multilabel(4, 3)
    copy = MultiLabelPotentials(pot.unary.clone(), pot.pairwise.clone())
    c = multilabel_constraints("both", torch.tensor([[0, 1, 1], [1, 0, 0]]), 0.1)
    corpus_dual_decomposition(pot, StarTreeComponents(3), c, outer_iter=5)
    assert torch.equal(pot.unary, copy.unary) and torch.equal(pot.pairwise, copy.pairwise)


# ---------------------------------------------------------------- with constraints
def _corpus_brute_force(pot: MultiLabelPotentials, k: int, constraints: CorpusLinearConstraints, tol: float) -> float:
    """Best corpus value (mean score) over labelings whose rates are within ``tol``."""
    b = pot.unary.shape[0]
    structure = PairwiseMultiLabel(k)
    configs = torch.tensor(list(itertools.product([0, 1], repeat=k)))  # (C, K)
    n = len(configs)
    scores = torch.stack([structure.score(pot, c.expand(b, k)) for c in configs], dim=1)  # (B, C)
    contrib = torch.stack(
        [constraints.rates(structure.to_parts(c.view(1, k))) for c in configs]
    )  # (C, M): one example's <F, parts>
    choices = torch.tensor(list(itertools.product(range(n), repeat=b)))  # (C^B, B)
    rates = contrib[choices].mean(1)  # (C^B, M)
    viol = torch.maximum(constraints.lower - rates, rates - constraints.upper).clamp_min(0).amax(1)
    values = scores[torch.arange(b), choices].mean(1)
    return float(values[viol <= tol].max())


@pytest.mark.parametrize("components", ["stars", "exact"])
def test_constraints_satisfied_and_bounds_bracket_constrained_optimum(components: str) -> None:
    torch.manual_seed(3)
    k, b = 2, 6  # 4^6 corpus labelings
    pot = _random_multilabel(b, k, scale=0.5)
    pot = MultiLabelPotentials(pot.unary + torch.tensor([0.0, 2.0], dtype=D), pot.pairwise)  # all on
    # at most half of the corpus may have label 0 on; exactly one third label 1 on
    feats_u = torch.zeros(2, k, 2, dtype=D)
    feats_u[0, 0, 1] = 1.0
    feats_u[1, 1, 1] = 1.0
    feats_p = torch.zeros(2, k, k, 2, 2, dtype=D)
    lower = torch.tensor([float("-inf"), 1 / 3], dtype=D)
    upper = torch.tensor([0.5, 1 / 3], dtype=D)
    c = CorpusLinearConstraints((feats_u, feats_p), lower, upper)
    comp = StarTreeComponents(k) if components == "stars" else ExactComponent(PairwiseMultiLabel(k))
    res = corpus_dual_decomposition(pot, comp, c, outer_iter=100, inner_iter=10, feasibility_tol=1e-9)
    assert res.violation <= 1e-9
    opt = _corpus_brute_force(pot, k, c, 1e-9)
    assert res.primal <= opt + 1e-9
    assert res.dual >= opt - 1e-6
    assert res.primal >= opt - 0.5  # close to the optimum
    rates = c.rates(PairwiseMultiLabel(k).to_parts(res.labels))
    assert float(rates[0]) <= 0.5 + 1e-9 and float(rates[1]) == pytest.approx(1 / 3)
    assert (res.multipliers.lower >= 0).all() and (res.multipliers.upper >= 0).all()
    assert float(res.multipliers.lower[0]) == 0.0  # no lower bound: multiplier stays 0
    assert len(res.violation_history) == res.outer_iterations


def test_chain_corpus_constraint_with_exact_component() -> None:
    """Chains as a check: Lagrangian relaxation of a label-count constraint over Viterbi."""
    torch.manual_seed(1)
    chain = LinearChain(3)
    b, n = 20, 6
    pot = torch.randn(b, n, 3, 3, dtype=D)
    pot[:, :, :, 2] += 1.5  # label 2 is favoured everywhere
    feat = torch.zeros(1, n, 3, 3, dtype=D)
    feat[0, :, :, 2] = 1.0 / n  # fraction of positions labelled 2
    c = CorpusLinearConstraints((feat,), torch.tensor([0.0], dtype=D), torch.tensor([0.3], dtype=D))
    free = corpus_dual_decomposition(pot, ExactComponent(chain))
    assert float(c.rates(chain.to_parts(free.labels))) > 0.5
    res = corpus_dual_decomposition(pot, ExactComponent(chain), c, outer_iter=40, feasibility_tol=0.02)
    assert res.violation <= 0.02
    assert res.dual >= res.primal - 1e-9 or res.violation > 0


def test_warm_start_and_engine_wrapper() -> None:
    pot = _random_multilabel(30, 4)
    labels = torch.randint(0, 2, (10, 4))
    c = multilabel_constraints("ldc", labels, 0.05)
    engine = CorpusDualDecomposition(outer_iter=10, inner_iter=3)
    first = engine(pot, StarTreeComponents(4), c)
    state = first.multipliers.state_dict()
    again = engine(pot, StarTreeComponents(4), c, CorpusMultipliers.from_state_dict(state))
    assert again.outer_iterations == 10
    assert again.violation <= first.violation_history[0] + 1e-9
    assert "outer_iter=10" in repr(engine)


# ---------------------------------------------------------------- LDC / LCC
def test_ldc_lcc_rates_are_counts_and_hold_on_their_own_labels() -> None:
    labels = torch.tensor([[1, 0, 1], [1, 1, 0], [0, 0, 1], [1, 0, 1]])
    ldc = LabelDistributionConstraint().fit(labels)
    assert ldc.rates is not None
    torch.testing.assert_close(ldc.rates[:, 1], torch.tensor([0.75, 0.25, 0.75], dtype=D))
    lcc = LabelCorrelationConstraint().fit(labels)
    assert lcc.rates is not None
    assert float(lcc.rates[0, 2, 1, 1]) == pytest.approx(0.5)  # labels 0 and 2 both on: 2 of 4
    both = multilabel_constraints("both", labels)
    assert both is not None
    assert both.num_constraints == 2 * 3 + 4 * 3
    parts = PairwiseMultiLabel(3).to_parts(labels)
    assert float(both.violation(both.rates(parts)).max()) == 0.0
    assert multilabel_constraints("none", labels) is None
    assert multilabel_constraints("lcc", labels, 0.1).num_constraints == 12  # type: ignore[union-attr]
    assert both.names is not None and both.names[0] == "ldc[0]=0"
    assert "num_labels=3" in repr(ldc)


def test_ldc_with_given_rates_and_tolerance() -> None:
    rates = torch.tensor([[0.3, 0.7], [0.9, 0.1]], dtype=D)
    c = LabelDistributionConstraint(0.05, rates).compile()
    torch.testing.assert_close(c.lower, torch.tensor([0.25, 0.65, 0.85, 0.05], dtype=D))
    torch.testing.assert_close(c.upper, torch.tensor([0.35, 0.75, 0.95, 0.15], dtype=D))


def test_constraint_errors() -> None:
    with pytest.raises(ValueError, match="kind must be one of"):
        multilabel_constraints("all", torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="labels must hold 0/1 labels"):
        LabelDistributionConstraint().fit(torch.tensor([[0, 2]]))
    with pytest.raises(ValueError, match="labels must be a non-empty"):
        LabelCorrelationConstraint().fit(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="tolerance must be a finite float >= 0"):
        LabelDistributionConstraint(-0.1)
    with pytest.raises(ValueError, match=r"rates must have shape \(K, 2\)"):
        LabelDistributionConstraint(0.0, torch.zeros(3, 3))
    with pytest.raises(ValueError, match=r"rates must have shape \(K, K, 2, 2\)"):
        LabelCorrelationConstraint(0.0, torch.zeros(3, 2, 2, 2))
    with pytest.raises(ValueError, match="has no rates"):
        LabelDistributionConstraint().compile()


def test_engine_errors() -> None:
    pot = _random_multilabel(2, 3)
    comp = StarTreeComponents(3)
    with pytest.raises(ValueError, match="outer_iter must be an int >= 1"):
        corpus_dual_decomposition(pot, comp, outer_iter=0)
    with pytest.raises(ValueError, match="inner_iter must be an int >= 1"):
        corpus_dual_decomposition(pot, comp, inner_iter=0)
    with pytest.raises(ValueError, match="step must be > 0"):
        corpus_dual_decomposition(pot, comp, step=0.0)
    with pytest.raises(ValueError, match="eta_step must be > 0"):
        corpus_dual_decomposition(pot, comp, eta_step=-1.0)
    with pytest.raises(ValueError, match="feasibility_tol must be >= 0"):
        corpus_dual_decomposition(pot, comp, feasibility_tol=-1.0)
    with pytest.raises(TypeError, match="components must be a Components"):
        corpus_dual_decomposition(pot, "stars")  # type: ignore[arg-type]
    bad = multilabel_constraints("ldc", torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="constraints.features must have the part shapes"):
        corpus_dual_decomposition(pot, comp, bad)
    with pytest.raises(TypeError, match="constraints must be CorpusLinearConstraints"):
        corpus_dual_decomposition(pot, comp, "ldc")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="structure must be a Structure"):
        ExactComponent("chain")  # type: ignore[arg-type]


def test_constraint_container_errors() -> None:
    f = torch.zeros(2, 3, 2, dtype=D)
    with pytest.raises(ValueError, match=r"lower must be a tensor of shape \(M,\)"):
        CorpusLinearConstraints((f,), torch.zeros(3, dtype=D), torch.zeros(2, dtype=D))
    with pytest.raises(ValueError, match="lower must be <= upper"):
        CorpusLinearConstraints((f,), torch.ones(2, dtype=D), torch.zeros(2, dtype=D))
    with pytest.raises(ValueError, match=r"features\[1\] must be a floating tensor"):
        CorpusLinearConstraints((f, torch.zeros(3, 1, dtype=D)), torch.zeros(2, dtype=D), torch.ones(2, dtype=D))
    with pytest.raises(TypeError, match="features must be a non-empty tuple"):
        CorpusLinearConstraints((), torch.zeros(2, dtype=D), torch.ones(2, dtype=D))
    with pytest.raises(ValueError, match="names must have M = 2 entries"):
        CorpusLinearConstraints((f,), torch.zeros(2, dtype=D), torch.ones(2, dtype=D), ("a",))
    c = CorpusLinearConstraints(f, torch.zeros(2, dtype=D), torch.ones(2, dtype=D))
    with pytest.raises(ValueError, match="parts must have 1 components"):
        c.rates((torch.zeros(1, 3, 2), torch.zeros(1)))
    with pytest.raises(ValueError, match=r"parts must have part shape \(3, 2\)"):
        c.rates((torch.zeros(1, 4, 2),))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ldc_and_lcc_from_labels_are_satisfied_by_the_star_decomposition(seed: int) -> None:
    """Seed 004's constraints, estimated from a labeled corpus (rates +- 0.05), bind on
    potentials that push every label on; the star-tree corpus decomposition meets them."""
    g = torch.Generator().manual_seed(seed)
    b, k = 40, 4
    labels = (torch.rand(b, k, generator=g) < 0.4).long()
    unary = torch.randn(b, k, 2, generator=g, dtype=D)
    unary[..., 1] += 1.0
    pair = 0.3 * torch.randn(b, k, k, 2, 2, generator=g, dtype=D)
    pot = MultiLabelPotentials(unary, (pair + pair.transpose(1, 2).transpose(3, 4)) / 2)
    c = multilabel_constraints("both", labels, 0.05)
    free = corpus_dual_decomposition(pot, StarTreeComponents(k), inner_iter=10)
    free_rates = c.rates(PairwiseMultiLabel(k).to_parts(free.labels))
    assert float(c.violation(free_rates).max()) > 0.3  # the constraints bind
    res = corpus_dual_decomposition(pot, StarTreeComponents(k), c, outer_iter=100, inner_iter=10)
    rates = c.rates(PairwiseMultiLabel(k).to_parts(res.labels))
    assert res.violation <= 1e-2 and float(c.violation(rates).max()) == pytest.approx(res.violation)
    assert res.primal <= res.dual + 1e-9 and res.primal <= free.primal + 1e-9
    assert res.violation_history[-1] >= 0 and len(res.primal_history) == res.outer_iterations
