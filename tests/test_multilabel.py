"""PairwiseMultiLabel against plain-Python enumeration; star trees; dual decomposition; errors."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from oracle import check_structure
from structssl.semirings import LOG_ZERO, KMax, Max
from structssl.structures import multilabel
from structssl.structures.multilabel import (
    MultiLabelPotentials,
    PairwiseMultiLabel,
    star_argmax,
    star_inside,
    star_log_partition,
    star_potentials,
    star_scores,
)


def _random(batch: int, k: int, seed: int, coupling: float = 1.0, dtype=torch.float64) -> MultiLabelPotentials:
    g = torch.Generator().manual_seed(seed)
    unary = torch.randn(batch, k, 2, generator=g, dtype=dtype)
    pairwise = coupling * torch.randn(batch, k, k, 2, 2, generator=g, dtype=dtype)
    return MultiLabelPotentials(unary, pairwise)


def _py_score(pot: MultiLabelPotentials, b: int, y: tuple[int, ...]) -> float:
    """Plain-Python score of labels ``y`` for example ``b`` (only k < l pairs)."""
    u, p = pot.unary[b].tolist(), pot.pairwise[b].tolist()
    k = len(y)
    total = sum(u[i][y[i]] for i in range(k))
    total += sum(p[i][j][y[i]][y[j]] for i in range(k) for j in range(i + 1, k))
    return total


def _brute(pot: MultiLabelPotentials, b: int) -> tuple[list[tuple[int, ...]], list[float]]:
    k = pot.unary.shape[1]
    ys = list(itertools.product((0, 1), repeat=k))
    return ys, [_py_score(pot, b, y) for y in ys]


def _logsumexp(xs: list[float]) -> float:
    m = max(xs)
    return m + math.log(sum(math.exp(x - m) for x in xs))


def _check_against_python(structure: PairwiseMultiLabel, pot: MultiLabelPotentials, kb: int) -> None:
    batch, k = pot.unary.shape[:2]
    log_z = structure.log_partition(pot)
    marg = structure.marginals(pot)
    best, best_score = structure.argmax(pot)
    mx = structure.max(pot)
    labels, scores = structure.kbest(pot, kb)
    kmax = structure.kmax(pot, kb)
    for b in range(batch):
        ys, sc = _brute(pot, b)
        assert log_z[b].item() == pytest.approx(_logsumexp(sc), abs=1e-9)
        assert mx[b].item() == pytest.approx(max(sc), abs=1e-9)
        assert best_score[b].item() == pytest.approx(max(sc), abs=1e-9)
        assert tuple(best[b].tolist()) == ys[max(range(len(sc)), key=sc.__getitem__)]
        order = sorted(sc, reverse=True)
        expect = order[:kb] + [float("-inf")] * max(0, kb - len(order))
        for r in range(kb):
            for got in (scores[b, r].item(), kmax[b, r].item()):
                if expect[r] == float("-inf"):
                    assert got == float("-inf")
                else:
                    assert got == pytest.approx(expect[r], abs=1e-9)
        real = [tuple(labels[b, r].tolist()) for r in range(min(kb, len(ys)))]
        assert len(set(real)) == len(real)
        for r, y in enumerate(real):
            assert _py_score(pot, b, y) == pytest.approx(expect[r], abs=1e-9)
        z = _logsumexp(sc)
        probs = [math.exp(s - z) for s in sc]
        for i in range(k):
            on = sum(p for p, y in zip(probs, ys) if y[i] == 1)
            assert marg.unary[b, i, 1].item() == pytest.approx(on, abs=1e-9)
            assert marg.unary[b, i, 0].item() == pytest.approx(1 - on, abs=1e-9)
            for j in range(k):
                for a, c in itertools.product((0, 1), repeat=2):
                    want = sum(p for p, y in zip(probs, ys) if y[i] == a and y[j] == c) if i < j else 0.0
                    assert marg.pairwise[b, i, j, a, c].item() == pytest.approx(want, abs=1e-9)


@given(batch=st.integers(1, 4), k=st.integers(1, 5), seed=st.integers(0, 10_000))
@settings(max_examples=10)
def test_matches_python_enumeration(batch: int, k: int, seed: int) -> None:
    pot = _random(batch, k, seed)
    structure = PairwiseMultiLabel(k)
    _check_against_python(structure, pot, kb=min(2**k + 3, 9))
    all_labels = torch.tensor(list(itertools.product((0, 1), repeat=k)))
    check_structure(structure, pot, None, lambda b: iter(all_labels), k=min(2**k + 2, 6))


@given(batch=st.integers(1, 3), k=st.integers(2, 5), seed=st.integers(0, 10_000), chunk=st.sampled_from([1, 4, 16]))
@settings(max_examples=10)
def test_chunked_enumeration(batch: int, k: int, seed: int, chunk: int) -> None:
    """Tiny chunks exercise the chunk loop and checkpointed backward (also double backward)."""
    pot = _random(batch, k, seed)
    structure = PairwiseMultiLabel(k)
    whole = (structure.log_partition(pot), structure.marginals(pot), structure.kbest(pot, 5), structure.kmax(pot, 3))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(multilabel, "_CHUNK_ELEMENTS", chunk)
        _check_against_python(structure, pot, kb=5)
        parts = (structure.log_partition(pot), structure.marginals(pot), structure.kbest(pot, 5), structure.kmax(pot, 3))
        u = pot.unary.clone().requires_grad_()
        marg = structure.marginals(MultiLabelPotentials(u, pot.pairwise), create_graph=True)
        (second,) = torch.autograd.grad(marg.unary[..., 1].sum(), u)
    torch.testing.assert_close(parts[0], whole[0])
    torch.testing.assert_close(parts[1], whole[1])
    torch.testing.assert_close(parts[2][1], whole[2][1])
    torch.testing.assert_close(parts[3], whole[3])
    u2 = pot.unary.clone().requires_grad_()
    marg2 = structure.marginals(MultiLabelPotentials(u2, pot.pairwise), create_graph=True)
    (expect,) = torch.autograd.grad(marg2.unary[..., 1].sum(), u2)
    torch.testing.assert_close(second, expect)


@given(k=st.integers(2, 5), seed=st.integers(0, 10_000))
@settings(max_examples=8)
def test_non_parts_are_ignored(k: int, seed: int) -> None:
    pot = _random(3, k, seed)
    structure = PairwiseMultiLabel(k)
    lower = ~torch.ones(k, k, dtype=torch.bool).triu(1)
    junk = torch.randn(3, k, k, 2, 2, dtype=torch.float64) * 100
    junk[:, 0, 0, 0, 0] = float("inf")
    junk[:, -1, 0, 1, 1] = float("-inf")
    noisy = MultiLabelPotentials(pot.unary, torch.where(lower.view(1, k, k, 1, 1), junk, pot.pairwise))
    torch.testing.assert_close(structure.log_partition(noisy), structure.log_partition(pot))
    torch.testing.assert_close(structure.kmax(noisy, 4), structure.kmax(pot, 4))
    assert torch.equal(structure.argmax(noisy)[0], structure.argmax(pot)[0])
    assert torch.equal(structure.kbest(noisy, 3)[0], structure.kbest(pot, 3)[0])
    labels = structure.argmax(pot)[0]
    torch.testing.assert_close(structure.score(noisy, labels), structure.score(pot, labels))
    marg = structure.marginals(noisy)
    assert torch.equal(marg.pairwise[:, lower], torch.zeros_like(marg.pairwise[:, lower]))
    torch.testing.assert_close(marg.unary, structure.marginals(pot).unary)
    dd_noisy = structure.dual_decomposition_argmax(noisy, max_iter=30)
    dd = structure.dual_decomposition_argmax(pot, max_iter=30)
    torch.testing.assert_close(dd_noisy.dual, dd.dual)
    assert torch.equal(dd_noisy.labels, dd.labels)


@given(batch=st.integers(1, 4), k=st.integers(1, 5), seed=st.integers(0, 10_000))
@settings(max_examples=15)
def test_parts_score_hamming(batch: int, k: int, seed: int) -> None:
    pot = _random(batch, k, seed)
    structure = PairwiseMultiLabel(k)
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 2, (batch, k), generator=g)
    parts = structure.to_parts(labels)
    assert isinstance(parts, MultiLabelPotentials)
    assert parts.unary.shape == (batch, k, 2) and parts.pairwise.shape == (batch, k, k, 2, 2)
    assert torch.equal(structure.from_parts(parts), labels)
    assert torch.equal(structure.from_parts(structure.to_parts(labels.bool())), labels)
    dot = (pot.unary * parts.unary).sum((1, 2)) + (pot.pairwise * parts.pairwise).sum((1, 2, 3, 4))
    torch.testing.assert_close(structure.score(pot, labels), dot)
    for b in range(batch):
        assert structure.score(pot, labels)[b].item() == pytest.approx(_py_score(pot, b, tuple(labels[b].tolist())))
    lower = ~torch.ones(k, k, dtype=torch.bool).triu(1)
    assert not parts.pairwise[:, lower].any()
    target = torch.randint(0, 2, (batch, k), generator=g)
    assert torch.equal(structure.hamming(target, labels), (target != labels).sum(1))
    cost = structure.hamming_potentials(target)
    ham = (cost.unary * parts.unary).sum((1, 2)) + (cost.pairwise * parts.pairwise).sum((1, 2, 3, 4))
    torch.testing.assert_close(ham, (target != labels).sum(1).float())
    # cost-augmented decoding against plain Python
    aug_labels, aug = structure.cost_augmented_argmax(pot, target)
    lab01, aug01 = structure.cost_augmented_argmax(pot, target, cost="zero_one")
    for b in range(batch):
        ys, sc = _brute(pot, b)
        t = tuple(target[b].tolist())
        ham_scores = [s + sum(a != c for a, c in zip(y, t)) for y, s in zip(ys, sc)]
        assert aug[b].item() == pytest.approx(max(ham_scores))
        assert aug01[b].item() == pytest.approx(max(s + (y != t) for y, s in zip(ys, sc)))
        y01 = tuple(lab01[b].tolist())
        assert aug01[b].item() == pytest.approx(_py_score(pot, b, y01) + (y01 != t))


def test_potentials_from() -> None:
    g = torch.Generator().manual_seed(0)
    on = torch.randn(2, 3, generator=g, dtype=torch.float64)
    both = torch.randn(2, 3, 3, generator=g, dtype=torch.float64)
    pot = PairwiseMultiLabel.potentials_from(on, both)
    assert pot.unary.shape == (2, 3, 2) and pot.pairwise.shape == (2, 3, 3, 2, 2)
    structure = PairwiseMultiLabel(3)
    for y in itertools.product((0, 1), repeat=3):
        labels = torch.tensor([y, y])
        ising = (on * labels).sum(1) + sum(
            both[:, i, j] * y[i] * y[j] for i in range(3) for j in range(i + 1, 3)
        )
        torch.testing.assert_close(structure.score(pot, labels), ising)
    lower = ~torch.ones(3, 3, dtype=torch.bool).triu(1)
    assert not pot.pairwise[:, lower].any()
    shared = PairwiseMultiLabel.potentials_from(on, both[0])
    torch.testing.assert_close(shared.pairwise[1], pot.pairwise[0])
    full = PairwiseMultiLabel.potentials_from(pot.unary, pot.pairwise)
    torch.testing.assert_close(full.pairwise, pot.pairwise)
    none = PairwiseMultiLabel.potentials_from(on)
    assert not none.pairwise.any()
    with pytest.raises(ValueError, match=r"unary must have shape \(B, K\) or \(B, K, 2\); got \(2, 3, 4\)"):
        PairwiseMultiLabel.potentials_from(torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match=r"pairwise must have shape .* with B = 2, K = 3; got \(2, 4, 4\)"):
        PairwiseMultiLabel.potentials_from(on, torch.zeros(2, 4, 4))


def test_masked_float32_keeps_precision() -> None:
    """LOG_ZERO masks: the one-hot enumeration keeps allowed scores exact in float32."""
    pot64 = _random(4, 6, 3)
    pairwise = pot64.pairwise.clone()
    pairwise[:, 0, 1, 0, 0] = LOG_ZERO  # labels 0 and 1 may not both be off
    pairwise[:, 2, 4, 1, 1] = float("-inf")  # labels 2 and 4 may not both be on
    masked64 = MultiLabelPotentials(pot64.unary, pairwise)
    masked32 = MultiLabelPotentials(pot64.unary.float(), pairwise.float())
    structure = PairwiseMultiLabel(6)
    labels, score = structure.argmax(masked32)
    assert ((labels[:, 0] + labels[:, 1]) >= 1).all() and ((labels[:, 2] * labels[:, 4]) == 0).all()
    torch.testing.assert_close(score.double(), structure.max(masked64), rtol=1e-5, atol=1e-5)
    allowed = [y for y in itertools.product((0, 1), repeat=6) if (y[0] or y[1]) and not (y[2] and y[4])]
    for b in range(4):
        expect = _logsumexp([_py_score(pot64, b, y) for y in allowed])
        assert structure.log_partition(masked32)[b].item() == pytest.approx(expect, abs=1e-4)
    _, scores = structure.kbest(masked64, 64)
    assert (scores[:, : len(allowed)] > LOG_ZERO / 2).all()
    assert (scores[:, len(allowed) :] < LOG_ZERO / 2).all()
    assert (torch.isneginf(scores).sum(1) == 16).all()  # the 16 configurations with y_2 = y_4 = 1


@given(batch=st.integers(1, 4), k=st.integers(1, 6), n=st.integers(1, 9), seed=st.integers(0, 10_000))
@settings(max_examples=15)
def test_scores_of_many_labelings_match_plain_python(batch: int, k: int, n: int, seed: int) -> None:
    """Several labelings per example (the dual decomposition's candidates), with -inf parts
    and junk below the diagonal: the same as one at a time and as plain Python, and the
    gradient reaches exactly the parts each labeling uses."""
    from structssl.inference.dual_decomposition import StarTreeComponents

    pot = _random(batch, k, seed)
    g = torch.Generator().manual_seed(seed + 1)
    labels = torch.randint(0, 2, (batch, n, k), generator=g)
    pairwise = pot.pairwise.clone()
    pairwise[torch.rand(pairwise.shape, generator=g) < 0.1] = float("-inf")
    lower = ~torch.ones(k, k, dtype=torch.bool).triu(1)
    pairwise[:, lower] = float("nan")  # not parts: never read
    pot = MultiLabelPotentials(pot.unary.clone().requires_grad_(), pairwise.requires_grad_())
    many = StarTreeComponents(k).score(pot, labels)
    assert many.shape == (batch, n)
    structure = PairwiseMultiLabel(k)
    for i in range(n):
        torch.testing.assert_close(many[:, i], structure.score(pot, labels[:, i]))
        for b in range(batch):
            assert many[b, i].item() == pytest.approx(_py_score(pot, b, tuple(labels[b, i].tolist())))
    unary_grad, pair_grad = torch.autograd.grad(many.masked_fill(many.isinf(), 0).sum(), pot)
    finite = many.isfinite().to(many.dtype)
    want = sum(finite[:, i].view(-1, 1, 1, 1, 1) * structure.to_parts(labels[:, i]).pairwise for i in range(n))
    assert torch.equal(pair_grad[:, ~lower], want[:, ~lower].to(pair_grad.dtype))
    assert torch.equal(unary_grad, sum(finite[:, i].view(-1, 1, 1) * structure.to_parts(labels[:, i]).unary
                                       for i in range(n)).to(unary_grad.dtype))


def test_star_decomposition() -> None:
    k = 4
    pot = _random(3, k, 7)
    star = star_potentials(pot)
    assert star.unary.shape == (3, k, k, 2) and star.edge.shape == (3, k, k, 2, 2)
    ys = list(itertools.product((0, 1), repeat=k))
    per_star = torch.stack([star_scores(star, torch.tensor([y] * 3)) for y in ys], dim=2)  # (B, C, 2^K)
    full = torch.stack([PairwiseMultiLabel(k).score(pot, torch.tensor([y] * 3)) for y in ys], dim=1)
    torch.testing.assert_close(per_star.sum(1), full)
    # each star is a tree: its own unary 1/K share and half of each edge at its centre
    for b in range(3):
        for c in range(k):
            for i, y in enumerate(ys):
                want = sum(pot.unary[b, j, y[j]].item() / k for j in range(k))
                for l in range(k):
                    if l != c:
                        lo, hi = min(c, l), max(c, l)
                        want += 0.5 * pot.pairwise[b, lo, hi, y[lo], y[hi]].item()
                assert per_star[b, c, i].item() == pytest.approx(want)
    torch.testing.assert_close(star_log_partition(star), per_star.logsumexp(2))
    torch.testing.assert_close(star_inside(star, Max()), per_star.amax(2))
    labels, values = star_argmax(star)
    torch.testing.assert_close(values, per_star.amax(2))
    for c in range(k):
        torch.testing.assert_close(star_scores(star, labels[:, c])[:, c], values[:, c])
    tied = star_argmax(star_potentials(MultiLabelPotentials(pot.unary * 0, pot.pairwise * 0)))
    assert not tied[0].any()  # ties go to state 0, centre and leaves
    structure = PairwiseMultiLabel(k)
    torch.testing.assert_close(structure.star_log_partition(pot), star_log_partition(star))
    with pytest.raises(NotImplementedError, match="scalar semirings only"):
        star_inside(star, KMax(2))
    with pytest.raises(ValueError, match=r"star.edge must have shape \(B, K, K, 2, 2\) = \(3, 4, 4, 2, 2\)"):
        star_inside((star.unary, star.edge[:, :, :3]), Max())  # type: ignore[arg-type]


@given(batch=st.integers(1, 5), k=st.integers(1, 7), seed=st.integers(0, 10_000), coupling=st.sampled_from([0.3, 1.0, 3.0]))
@settings(max_examples=10)
def test_dual_decomposition_bounds(batch: int, k: int, seed: int, coupling: float) -> None:
    pot = _random(batch, k, seed, coupling)
    structure = PairwiseMultiLabel(k)
    exact = structure.max(pot)
    result = structure.dual_decomposition_argmax(pot, max_iter=40)
    assert (result.dual >= exact - 1e-9).all()
    assert (result.score <= exact + 1e-9).all()
    assert (result.gap >= -1e-9).all()
    torch.testing.assert_close(result.score, structure.score(pot, result.labels))
    assert (result.dual_history >= exact - 1e-9).all()  # every iterate's dual is an upper bound
    t = result.iterations
    assert result.primal_history.shape == (t, batch) and result.dual_history.shape == (t, batch)
    assert (result.primal_history.diff(dim=0) >= 0).all()
    torch.testing.assert_close(result.multipliers.sum(1), torch.zeros(batch, k, 2, dtype=torch.float64))
    # certified examples are optimal
    certified = result.converged & (result.gap <= 1e-6 * (1 + result.score.abs()))
    torch.testing.assert_close(result.score[certified], exact[certified])


@pytest.mark.parametrize("rule", ["diminishing", "polyak", "harmonic"])
def test_dual_decomposition_tree_closes_gap(rule: str) -> None:
    """On tree-structured problems the LP relaxation is tight: the gap closes."""
    k, batch = 7, 16
    pot = _random(batch, k, 11, coupling=1.5)
    tree = torch.zeros(k, k, dtype=torch.bool)
    for child in range(1, k):
        tree[(child - 1) // 2, child] = True  # a binary tree over the labels
    pot = MultiLabelPotentials(pot.unary, pot.pairwise * tree.view(1, k, k, 1, 1))
    structure = PairwiseMultiLabel(k)
    result = structure.dual_decomposition_argmax(pot, max_iter=1000, step_rule=rule)
    exact_labels, exact = structure.argmax(pot)
    assert torch.equal(result.labels, exact_labels)
    torch.testing.assert_close(result.score, exact)
    assert (result.gap <= 1e-3 * (1 + exact.abs())).all()


def test_dual_decomposition_weak_coupling_agrees_at_once() -> None:
    k, batch = 12, 32
    pot = _random(batch, k, 5, coupling=0.01)
    unary = pot.unary + 2.0 * torch.sign(pot.unary[..., 1:] - pot.unary[..., :1]) * torch.tensor([-1.0, 1.0], dtype=torch.float64)
    pot = MultiLabelPotentials(unary, pot.pairwise)
    structure = PairwiseMultiLabel(k)
    result = structure.dual_decomposition_argmax(pot)
    assert result.converged.all() and result.iterations <= 3
    assert torch.equal(result.labels, structure.argmax(pot)[0])
    torch.testing.assert_close(result.dual, result.score)
    # warm start from the final multipliers converges at once
    again = structure.dual_decomposition_argmax(pot, multipliers=result.multipliers)
    assert again.iterations == 1


def test_large_k_dual_decomposition_and_exact_limit() -> None:
    k = 24
    structure = PairwiseMultiLabel(k)
    pot = _random(2, k, 1, coupling=0.05)
    result = structure.dual_decomposition_argmax(pot, max_iter=50)
    assert result.labels.shape == (2, k)
    assert (result.dual >= result.score - 1e-9).all()
    structure.score(pot, result.labels)
    structure.to_parts(result.labels)
    msg = r"supports K <= max_exact_labels = 20; got num_labels = 24. Use PairwiseMultiLabel.dual_decomposition_argmax"
    for op in (structure.log_partition, structure.argmax, structure.max, structure.marginals):
        with pytest.raises(ValueError, match=msg):
            op(pot)
    with pytest.raises(ValueError, match=msg):
        structure.kbest(pot, 2)


def test_k16_exact_matches_dual_decomposition_on_weak_coupling() -> None:
    k = 16
    pot = _random(3, k, 2, coupling=0.05, dtype=torch.float32)
    structure = PairwiseMultiLabel(k)
    labels, score = structure.argmax(pot)
    result = structure.dual_decomposition_argmax(pot)
    assert torch.equal(result.labels, labels)
    torch.testing.assert_close(result.score, score)
    log_z = structure.log_partition(MultiLabelPotentials(pot.unary.double(), pot.pairwise.double()))
    torch.testing.assert_close(structure.log_partition(pot).double(), log_z, rtol=1e-5, atol=1e-4)


def test_inference_mode() -> None:
    pot = _random(3, 4, 0)
    structure = PairwiseMultiLabel(4)
    with torch.inference_mode():
        labels, score = structure.argmax(pot)
        kb_labels, kb_scores = structure.kbest(pot, 3)
        log_z = structure.log_partition(pot)
        result = structure.dual_decomposition_argmax(pot, max_iter=20)
        star = star_argmax(star_potentials(pot))
    assert labels.shape == (3, 4) and kb_labels.shape == (3, 3, 4) and log_z.shape == (3,)
    assert result.labels.shape == (3, 4) and star[0].shape == (3, 4, 4)
    torch.testing.assert_close(score, structure.max(pot))


def test_no_input_mutation_and_gradients() -> None:
    pot = _random(2, 3, 0)
    unary = pot.unary.clone().requires_grad_()
    before = unary.detach().clone()
    structure = PairwiseMultiLabel(3)
    marg = structure.marginals(MultiLabelPotentials(unary, pot.pairwise))
    assert torch.equal(unary.detach(), before) and unary.grad is None
    _, score = structure.argmax(MultiLabelPotentials(unary, pot.pairwise))
    score.sum().backward()
    assert unary.grad is not None and torch.equal(unary.grad.sum(-1), torch.ones(2, 3, dtype=torch.float64))
    torch.testing.assert_close(marg.unary.sum(-1), torch.ones(2, 3, dtype=torch.float64))


def test_errors() -> None:
    s = PairwiseMultiLabel(3)
    pot = _random(2, 3, 0)
    with pytest.raises(ValueError, match=r"potentials.unary must have shape \(B, K, 2\) with K = num_labels = 3; got \(2, 4, 2\)"):
        s.log_partition(_random(2, 4, 0))
    with pytest.raises(ValueError, match=r"potentials.pairwise must have shape \(B, K, K, 2, 2\) = \(2, 3, 3, 2, 2\); got \(2, 3, 3, 2\)"):
        s.log_partition(MultiLabelPotentials(pot.unary, pot.pairwise[..., 0]))
    with pytest.raises(ValueError, match=r"potentials.pairwise must have shape .* got \(1, 3, 3, 2, 2\)"):
        s.argmax(MultiLabelPotentials(pot.unary, pot.pairwise[:1]))
    with pytest.raises(ValueError, match="must share dtype and device; got torch.float64 .* and torch.float32"):
        s.argmax(MultiLabelPotentials(pot.unary, pot.pairwise.float()))
    with pytest.raises(TypeError, match="must be a MultiLabelPotentials .*; got Tensor"):
        s.log_partition(pot.unary)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a MultiLabelPotentials .*; got a tuple of 3"):
        s.log_partition((pot.unary, pot.pairwise, pot.pairwise))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"labels must be 0 or 1; got values in \[0, 2\]"):
        s.score(pot, torch.tensor([[0, 1, 2], [0, 0, 0]]))
    with pytest.raises(ValueError, match=r"labels must be 0 or 1; got values in \[-1, 0\]"):
        s.to_parts(torch.tensor([[0, -1, 0], [0, 0, 0]]))
    with pytest.raises(ValueError, match=r"labels must have shape \(B, K\) = \(2, 3\); got \(2, 4\)"):
        s.score(pot, torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="labels must have an integer or bool dtype; got torch.float32"):
        s.score(pot, torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"target must be 0 or 1; got values in \[0, 3\]"):
        s.cost_augmented_argmax(pot, torch.tensor([[0, 3, 0], [0, 0, 0]]))
    nan = pot.unary.clone()
    nan[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="potentials contain NaN"):
        s.log_partition(MultiLabelPotentials(nan, pot.pairwise))
    with pytest.raises(ValueError, match="potentials contain NaN"):
        s.dual_decomposition_argmax(MultiLabelPotentials(nan, pot.pairwise))
    with pytest.raises(ValueError, match=r"non-empty batch dimension; got shape \(0, 3, 2\)"):
        s.log_partition(MultiLabelPotentials(pot.unary[:0], pot.pairwise[:0]))
    with pytest.raises(ValueError, match=r"lengths of a PairwiseMultiLabel structure must all be K = num_labels = 3; got values in \[2, 3\]"):
        s.argmax(pot, torch.tensor([3, 2]))
    with pytest.raises(ValueError, match=r"lengths must have shape \(B,\) = \(2,\); got \(3,\)"):
        s.argmax(pot, torch.tensor([3, 3, 3]))
    torch.testing.assert_close(s.log_partition(pot, torch.tensor([3, 3])), s.log_partition(pot))
    with pytest.raises(ValueError, match=r"parts.unary must have shape \(B, K, 2\) with K = 3; got \(2, 4, 2\)"):
        s.from_parts(_random(2, 4, 0))
    with pytest.raises(ValueError, match="num_labels must be an int >= 1; got 0"):
        PairwiseMultiLabel(0)
    with pytest.raises(ValueError, match="k must be an int >= 1; got 0"):
        s.kbest(pot, 0)
    with pytest.raises(ValueError, match="max_iter must be an int >= 1; got 0"):
        s.dual_decomposition_argmax(pot, max_iter=0)
    with pytest.raises(ValueError, match=r"step must be > 0; got -1.0"):
        s.dual_decomposition_argmax(pot, step=-1.0)
    with pytest.raises(ValueError, match=r"tol must be >= 0; got -1.0"):
        s.dual_decomposition_argmax(pot, tol=-1.0)
    with pytest.raises(ValueError, match=r"step_rule must be one of \('diminishing', 'polyak', 'harmonic'\); got 'fast'"):
        s.dual_decomposition_argmax(pot, step_rule="fast")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"multipliers must have shape \(B, K, K, 2\) = \(2, 3, 3, 2\); got \(2, 3, 2\)"):
        s.dual_decomposition_argmax(pot, multipliers=torch.zeros(2, 3, 2))
    with pytest.raises(ValueError, match=r"labels must have shape \(B, K\) = \(2, 3\); got \(2,\)"):
        star_scores(star_potentials(pot), torch.zeros(2, dtype=torch.long))
