"""Structured hinge and the nabla-SVM family against brute-force enumeration."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from structssl.losses import (
    NablaCoSVMLoss,
    NablaSVMLoss,
    NablaTSVMLoss,
    StructuredHingeLoss,
    huber_hinge,
    smax,
    unlabeled_loss,
)
from structssl.structures import LinearChain, MultiClass

D = torch.float64


def all_labels(structure, n: int, length: int) -> torch.Tensor:
    """Every structure of one example: (S, N) for chains, (S,) for multi-class."""
    c = structure.num_labels
    if isinstance(structure, MultiClass):
        return torch.arange(c)
    seqs = torch.tensor(list(itertools.product(range(c), repeat=length)), dtype=torch.long)
    return torch.cat([seqs, seqs.new_zeros(len(seqs), n - length)], dim=1)


def enumerate_example(structure, potentials, target, lengths, b):
    """(labels (S, ...), scores (S,), hamming to target (S,), is_target (S,)) of example b."""
    if isinstance(structure, MultiClass):
        ys = all_labels(structure, 1, 1)
        scores = potentials[b, ys]
        ham = (ys != target[b]).to(D)
        return ys, scores, ham, ham == 0
    n = potentials.shape[1]
    length = int(lengths[b])
    ys = all_labels(structure, n, length)
    rep = potentials[b : b + 1].expand(len(ys), -1, -1, -1)
    scores = structure.score(rep, ys, lengths[b : b + 1].expand(len(ys)))
    ham = (ys[:, :length] != target[b, :length]).sum(1).to(D)
    return ys, scores, ham, ham == 0


def cases():
    torch.manual_seed(1)
    chain = LinearChain(3)
    pc = torch.randn(3, 4, 3, 3, dtype=D) * 2
    lc = torch.tensor([4, 2, 3])
    yc = torch.randint(0, 3, (3, 4))
    mc = MultiClass(4)
    pm = torch.randn(5, 4, dtype=D) * 2
    ym = torch.randint(0, 4, (5,))
    return [(chain, pc, yc, lc), (mc, pm, ym, None)]


@pytest.mark.parametrize("case", range(2))
@pytest.mark.parametrize("cost", ["hamming", "zero_one"])
def test_margin_hinge_brute_force(case: int, cost: str) -> None:
    structure, pot, target, lengths = cases()[case]
    got = StructuredHingeLoss("margin", cost, reduction="none")(structure, pot, target, lengths)
    ln = lengths if lengths is not None else torch.ones(pot.shape[0], dtype=torch.long)
    for b in range(pot.shape[0]):
        _, scores, ham, is_t = enumerate_example(structure, pot, target, ln, b)
        delta = ham if cost == "hamming" else (~is_t).to(D)
        t_score = scores[is_t][0]
        torch.testing.assert_close(got[b], (delta + scores).max() - t_score)


@pytest.mark.parametrize("case", range(2))
@pytest.mark.parametrize("cost", ["hamming", "zero_one"])
def test_slack_hinge_brute_force(case: int, cost: str) -> None:
    structure, pot, target, lengths = cases()[case]
    # k large enough that the candidates cover every structure: the maximisation is exact
    loss = StructuredHingeLoss("slack", cost, k=81, reduction="none")
    got = loss(structure, pot, target, lengths)
    ln = lengths if lengths is not None else torch.ones(pot.shape[0], dtype=torch.long)
    for b in range(pot.shape[0]):
        _, scores, ham, is_t = enumerate_example(structure, pot, target, ln, b)
        delta = ham if cost == "hamming" else (~is_t).to(D)
        t_score = scores[is_t][0]
        expect = (delta * (1 - t_score + scores))[~is_t].max().clamp(min=0)
        torch.testing.assert_close(got[b], expect)


def test_slack_equals_margin_for_zero_one() -> None:
    structure, pot, target, lengths = cases()[0]
    a = StructuredHingeLoss("slack", "zero_one", k=1)(structure, pot, target, lengths)
    b = StructuredHingeLoss("margin", "zero_one")(structure, pot, target, lengths)
    torch.testing.assert_close(a, b)


def test_hinge_nonnegative_and_zero_beyond_margin() -> None:
    structure = LinearChain(3)
    target = torch.tensor([[0, 2, 1, 1]])
    strong = structure.to_parts(target).to(D) * 10.0  # target wins by >= 10 > Hamming
    pot = torch.randn(1, 4, 3, 3, dtype=D) * 0.1 + strong
    for rescaling in ["margin", "slack"]:
        for cost in ["hamming", "zero_one"]:
            assert StructuredHingeLoss(rescaling, cost)(structure, pot, target).item() == 0.0
    pot = torch.randn(6, 4, 3, 3, dtype=D)
    tgt = torch.randint(0, 3, (6, 4))
    assert bool((StructuredHingeLoss(reduction="none")(structure, pot, tgt) >= 0).all())


def test_hinge_normalized_cost() -> None:
    structure, pot, target, lengths = cases()[0]
    got = StructuredHingeLoss(normalize_cost=True, reduction="none")(structure, pot, target, lengths)
    for b in range(pot.shape[0]):
        _, scores, ham, is_t = enumerate_example(structure, pot, target, lengths, b)
        expect = (ham / lengths[b] + scores).max() - scores[is_t][0]
        torch.testing.assert_close(got[b], expect)


def test_hinge_gradient_is_feature_difference() -> None:
    structure, pot, target, lengths = cases()[0]
    pot = pot.clone().requires_grad_()
    StructuredHingeLoss(reduction="sum")(structure, pot, target, lengths).backward()
    aug = structure.cost_augmented_potentials(pot.detach(), target, lengths)
    best, _ = structure.argmax(aug, lengths)
    expect = structure.to_parts(best, lengths).to(D) - structure.to_parts(target, lengths).to(D)
    torch.testing.assert_close(pot.grad, expect)


# ---------------------------------------------------------------------- nabla-SVM
def _nabla_brute(structure, pot, target, lengths, eps, rho, cost, u_tau=None):
    ln = lengths if lengths is not None else torch.ones(pot.shape[0], dtype=torch.long)
    out = []
    for b in range(pot.shape[0]):
        _, scores, ham, is_t = enumerate_example(structure, pot, target, ln, b)
        delta = ham if cost == "hamming" else (~is_t).to(D)
        t = scores[is_t][0] - scores[~is_t]
        if u_tau is None:
            s = huber_hinge(t, delta[~is_t], eps)
        else:
            s = unlabeled_loss(t, delta[~is_t], u_tau)
        out.append(smax(s, rho))
    return torch.stack(out)


@pytest.mark.parametrize("case", range(2))
@pytest.mark.parametrize("cost", ["hamming", "zero_one"])
def test_nabla_svm_all_candidates_brute_force(case: int, cost: str) -> None:
    structure, pot, target, lengths = cases()[case]
    loss = NablaSVMLoss(epsilon=0.3, rho=2.0, k=81, cost=cost, reduction="none")
    got = loss(structure, pot, target, lengths)
    torch.testing.assert_close(got, _nabla_brute(structure, pot, target, lengths, 0.3, 2.0, cost))


def test_nabla_svm_k1_is_the_most_violating_output() -> None:
    structure, pot, target, lengths = cases()[0]
    got = NablaSVMLoss(epsilon=0.3, rho=2.0, k=1, reduction="none")(structure, pot, target, lengths)
    for b in range(pot.shape[0]):
        _, scores, ham, is_t = enumerate_example(structure, pot, target, lengths, b)
        i = torch.where(is_t, float("-inf"), scores + ham).argmax()  # argmax_{y != y_i} Delta + s
        s = huber_hinge(scores[is_t][0] - scores[i], ham[i], 0.3)
        torch.testing.assert_close(got[b], smax(s.view(1), 2.0))


def test_nabla_svm_tends_to_hinge() -> None:
    structure, pot, target, lengths = cases()[0]
    hinge = StructuredHingeLoss(reduction="none")(structure, pot, target, lengths)
    for k in [1, 81]:
        nabla = NablaSVMLoss(epsilon=1e-7, rho=1e7, k=k, reduction="none")(structure, pot, target, lengths)
        torch.testing.assert_close(nabla, hinge, atol=1e-5, rtol=1e-6)


def test_nabla_svm_working_set_union_and_dedup() -> None:
    structure, pot, target, lengths = cases()[0]
    loss = NablaSVMLoss(epsilon=0.3, rho=2.0, k=2, reduction="none")
    found = loss.violators(structure, pot, target, lengths)
    # the working set repeats the decoded candidates and the target: nothing changes
    extra = torch.cat([found.labels, target.unsqueeze(1)], dim=1)
    base = loss(structure, pot, target, lengths)
    torch.testing.assert_close(loss(structure, pot, target, lengths, candidates=extra), base)
    # a full working set of all structures gives the all-candidate loss
    ys = all_labels(structure, 4, 4)
    full = ys.unsqueeze(0).expand(3, -1, -1).clone()
    mask = torch.ones(3, len(ys), dtype=torch.bool)
    for b in range(3):  # structures of other lengths are not structures of example b
        mask[b] = (full[b, :, int(lengths[b]):] == 0).all(1)
    got = loss(structure, pot, target, lengths, candidates=full, candidates_mask=mask)
    torch.testing.assert_close(got, _nabla_brute(structure, pot, target, lengths, 0.3, 2.0, "hamming"))


def test_nabla_svm_gradcheck_and_hand_gradient() -> None:
    structure, pot, target, lengths = cases()[0]
    loss = NablaSVMLoss(epsilon=0.3, rho=2.0, k=4, reduction="sum")
    p = pot.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda x: loss(structure, x, target, lengths), (p,))
    # hand gradient (thesis sec. 7.1): sum_c dsmax/ds_c * l'(t_c) * (parts(y) - parts(c))
    from structssl.losses import huber_hinge_grad, smax_grad

    found = loss.violators(structure, pot, target, lengths)
    (g,) = torch.autograd.grad(loss(structure, p, target, lengths), p)
    expect = torch.zeros_like(pot)
    for b in range(3):
        cand = [found.labels[b, j] for j in range(found.labels.shape[1])]
        tp = structure.to_parts(target[b : b + 1], lengths[b : b + 1]).to(D)[0]
        sc = lambda y: structure.score(pot[b : b + 1], y.unsqueeze(0), lengths[b : b + 1])[0]
        ts = torch.stack([sc(target[b]) - sc(y) for y in cand])
        dl = torch.stack(
            [(y[: lengths[b]] != target[b, : lengths[b]]).sum().to(D) for y in cand]
        )
        valid = torch.tensor([not torch.equal(y, target[b]) for y in cand])
        s = huber_hinge(ts, dl, 0.3)
        w = smax_grad(s, 2.0, valid) * huber_hinge_grad(ts, dl, 0.3)
        for j, y in enumerate(cand):
            if valid[j]:
                yp = structure.to_parts(y.unsqueeze(0), lengths[b : b + 1]).to(D)[0]
                expect[b] += w[j] * (tp - yp)
    torch.testing.assert_close(g, expect)


@pytest.mark.parametrize("case", range(2))
@pytest.mark.parametrize("cost", ["hamming", "zero_one"])
def test_nabla_tsvm_brute_force(case: int, cost: str) -> None:
    structure, pot, _, lengths = cases()[case]
    pseudo, _ = structure.argmax(pot, lengths)
    loss = NablaTSVMLoss(tau=0.4, rho=2.0, k=81, cost=cost, reduction="none")
    got = loss(structure, pot, lengths=lengths)
    expect = _nabla_brute(structure, pot, pseudo, lengths, None, 2.0, cost, u_tau=0.4)
    torch.testing.assert_close(got, expect)
    # a given pseudo-label is used as is
    torch.testing.assert_close(loss(structure, pot, pseudo, lengths), got)


def test_nabla_tsvm_gradcheck() -> None:
    structure, pot, _, lengths = cases()[0]
    pot = pot * 0.3  # margins inside u's quadratic pieces
    loss = NablaTSVMLoss(tau=0.4, rho=2.0, k=3, cost="zero_one", reduction="sum")
    p = pot.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda x: loss(structure, x, lengths=lengths), (p,), fast_mode=True)


def test_nabla_cosvm_uses_peer_predictions() -> None:
    structure, pot, target, lengths = cases()[0]
    peer = torch.randn_like(pot)
    loss = NablaCoSVMLoss(epsilon=0.3, rho=2.0, k=2, reduction="none")
    single = NablaSVMLoss(epsilon=0.3, rho=2.0, k=2, reduction="none")
    y1, _ = structure.argmax(peer, lengths)
    y2, _ = structure.argmax(pot, lengths)
    expect = single(structure, pot, y1, lengths) + single(structure, peer, y2, lengths)
    torch.testing.assert_close(loss(structure, pot, peer, lengths=lengths), expect)
    labeled = single(structure, pot, target, lengths) + single(structure, peer, target, lengths)
    torch.testing.assert_close(loss(structure, pot, peer, target, lengths), labeled)


@given(st.integers(1, 3), st.integers(1, 5), st.integers(1, 3))
def test_nabla_random_shapes_finite(b: int, n: int, k: int) -> None:
    structure = LinearChain(3)
    pot = torch.randn(b, n, 3, 3, dtype=D, requires_grad=True)
    lengths = torch.randint(1, n + 1, (b,))
    target = torch.randint(0, 3, (b, n))
    v = NablaSVMLoss(k=k)(structure, pot, target, lengths) + NablaTSVMLoss(k=k)(structure, pot, lengths=lengths)
    v.backward()
    assert bool(torch.isfinite(v)) and bool(torch.isfinite(pot.grad).all())


# ---------------------------------------------------------------------- errors
def test_bad_input_raises() -> None:
    structure, pot, target, lengths = cases()[0]
    with pytest.raises(ValueError, match="target must have shape"):
        StructuredHingeLoss()(structure, pot, target[:, :1].view(-1), lengths)
    with pytest.raises(ValueError, match="target must have shape"):
        NablaSVMLoss()(structure, pot, target[:2], lengths)
    with pytest.raises(ValueError, match="rescaling must be one of 'margin', 'slack'; got 'both'"):
        StructuredHingeLoss("both")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cost must be one of"):
        NablaSVMLoss(cost="f1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="reduction must be one of"):
        NablaTSVMLoss(reduction="avg")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rho must be a finite number > 0; got 0"):
        NablaSVMLoss(rho=0)
    with pytest.raises(ValueError, match="epsilon must be a finite number > 0; got -0.1"):
        NablaCoSVMLoss(epsilon=-0.1)
    with pytest.raises(ValueError, match="tau must be a finite number > 0"):
        NablaTSVMLoss(tau=0.0)
    with pytest.raises(ValueError, match="k must be an int >= 1"):
        NablaSVMLoss(k=0)
    with pytest.raises(ValueError, match="candidates must have shape"):
        NablaSVMLoss()(structure, pot, target, lengths, candidates=target)
    with pytest.raises(ValueError, match="candidates_mask must be a bool tensor"):
        NablaSVMLoss()(structure, pot, target, lengths, candidates=target.unsqueeze(1),
                       candidates_mask=torch.ones(3, 1))
    with pytest.raises(TypeError, match="structure must be a structssl Structure"):
        NablaSVMLoss()("chain", pot, target, lengths)  # type: ignore[arg-type]


def test_multilabel_hinge_and_nabla_brute_force() -> None:
    ml = pytest.importorskip("structssl.structures.multilabel")
    k = 3
    structure = ml.PairwiseMultiLabel(k)
    pot = ml.MultiLabelPotentials(torch.randn(2, k, 2, dtype=D), torch.randn(2, k, k, 2, 2, dtype=D))
    target = torch.randint(0, 2, (2, k))
    ys = torch.tensor(list(itertools.product([0, 1], repeat=k)))
    hinge = StructuredHingeLoss(reduction="none")(structure, pot, target)
    nabla = NablaSVMLoss(epsilon=0.3, rho=2.0, k=8, reduction="none")(structure, pot, target)
    for b in range(2):
        single = ml.MultiLabelPotentials(*(x[b : b + 1].expand((len(ys),) + x.shape[1:]) for x in pot))
        scores = structure.score(single, ys)
        ham = (ys != target[b]).sum(1).to(D)
        is_t = ham == 0
        t_score = scores[is_t][0]
        torch.testing.assert_close(hinge[b], (scores + ham).max() - t_score)
        s = huber_hinge(t_score - scores[~is_t], ham[~is_t], 0.3)
        torch.testing.assert_close(nabla[b], smax(s, 2.0))


@given(seed=st.integers(0, 10_000))
@settings(max_examples=25, deadline=None)
def test_nabla_svm_k1_fast_path_matches_brute_force_when_margins_hold(seed: int) -> None:
    # k = 1 decodes one argmax and a 2-best only where the cost-augmented argmax is the target;
    # scaling the potentials makes the margins hold on some examples, so both branches run
    torch.manual_seed(seed)
    structure = LinearChain(3)
    lengths = torch.tensor([4, 2, 3, 4])
    pot = torch.randn(4, 4, 3, 3, dtype=D)
    target = structure.argmax(pot, lengths)[0]
    pot = pot * torch.tensor([8.0, 8.0, 1.0, 0.2], dtype=D).view(4, 1, 1, 1)
    target[3] = torch.randint(0, 3, (4,))
    target = structure.check_labels(target, lengths, "target")
    pot.requires_grad_(True)
    got = NablaSVMLoss(epsilon=0.3, rho=2.0, k=1, reduction="none")(structure, pot, target, lengths)
    want = []
    for b in range(pot.shape[0]):
        _, scores, ham, is_t = enumerate_example(structure, pot, target, lengths, b)
        i = torch.where(is_t, float("-inf"), scores + ham).argmax()
        want.append(smax(huber_hinge(scores[is_t][0] - scores[i], ham[i], 0.3).view(1), 2.0))
    want_t = torch.stack(want)
    torch.testing.assert_close(got, want_t)
    g_got, = torch.autograd.grad(got.sum(), pot)
    g_want, = torch.autograd.grad(want_t.sum(), pot)
    torch.testing.assert_close(g_got, g_want)


@pytest.mark.parametrize("make", [NablaSVMLoss, StructuredHingeLoss,
                                  lambda: __import__("structssl.losses", fromlist=["x"]).CRFNLLLoss()])
def test_a_target_under_a_minus_inf_part_is_named(make) -> None:
    """A gold labeling through a forbidden part (a -inf transition of the potentials): an
    error naming the example, instead of NaN (nabla) or an infinite loss (CRF, hinge)."""
    chain = LinearChain(3)
    potentials = torch.randn(2, 4, 3, 3, dtype=D)
    potentials[:, 2, 1, 2] = float("-inf")  # 1 -> 2 at position 2 forbidden
    target = torch.tensor([[0, 1, 1, 1], [0, 1, 2, 2]])
    assert torch.isfinite(make()(chain, potentials[:1], target[:1]))  # the first is possible
    with pytest.raises(ValueError, match=r"target of example\(s\) \[1\] \(of 2\) has score -inf"):
        make()(chain, potentials, target)
