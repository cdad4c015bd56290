"""Quadratic-penalty Gamma loss (seed 000) and constraint penalties against enumeration."""

from __future__ import annotations

import itertools

import pytest
import torch

from structssl.losses import (
    ConstraintPenalty,
    HingePenalty,
    L1Penalty,
    LinearConstraintFeatures,
    NodeFeatures,
    PartsFeatures,
    QuadraticPenaltyGammaLoss,
    StructuredHingeLoss,
    constraint_guided_argmax,
)
from structssl.structures import LinearChain, MultiClass

D = torch.float64
N, C = 3, 3


def binary_features(b: int) -> LinearConstraintFeatures:
    """Per example: 'position t has a label in S' (node sets) and 'no transition at t'."""
    torch.manual_seed(7)
    rows = []
    for _ in range(b):
        fs = []
        for t in range(N):
            allowed = torch.rand(C) < 0.5
            f = torch.zeros(N, C, C, dtype=D)
            f[t, :, allowed] = 1.0
            fs.append(f)
        for t in range(1, N):
            f = torch.zeros(N, C, C, dtype=D)
            f[t] = torch.eye(C, dtype=D)
            fs.append(f)
        rows.append(torch.stack(fs))
    return LinearConstraintFeatures(torch.stack(rows))  # (B, d, N, C, C)


def enumerate_chain(structure, pot, b):
    ys = torch.tensor(list(itertools.product(range(C), repeat=N)))
    scores = structure.score(pot[b : b + 1].expand(len(ys), -1, -1, -1), ys)
    parts = structure.to_parts(ys).to(D)
    return ys, scores, parts


def case():
    torch.manual_seed(5)
    structure = LinearChain(C)
    pot = torch.randn(2, N, C, C, dtype=D)
    features = binary_features(2)
    v = torch.rand(2, features.num_constraints, dtype=D)
    return structure, pot, features, v


def test_terms_brute_force_and_lemma1() -> None:
    structure, pot, features, v = case()
    mu = 1.5
    loss = QuadraticPenaltyGammaLoss(mu, L1Penalty(torch.ones(features.num_constraints, dtype=D)))
    terms = loss.terms(structure, pot, v, features)
    prediction, _ = structure.argmax(pot)
    for b in range(2):
        ys, scores, parts = enumerate_chain(structure, pot, b)
        w = features.weights[b : b + 1]
        phi = (w * parts.unsqueeze(1)).flatten(2).sum(2)  # (S, d)
        assert bool(((phi == 0) | (phi == 1)).all())
        sq = (phi * phi).sum(1)
        convex = (scores - mu / 2 * phi @ v[b] + mu / 4 * sq).max()  # eq. 14
        concave = -(scores + mu / 2 * phi @ v[b] - mu / 4 * sq).max()  # eq. 15
        torch.testing.assert_close(terms.convex[b], convex)
        torch.testing.assert_close(terms.concave[b], concave)
        torch.testing.assert_close(terms.quadratic[b], mu / 2 * (v[b] ** 2).sum())
        bound = terms.convex[b] + terms.concave[b] + terms.quadratic[b]
        # eq. (9) written out: max[s + mu/4||phi - v||^2] - max[s - mu/4||phi - v||^2]
        dist = ((phi - v[b]) ** 2).sum(1)
        torch.testing.assert_close(bound, (scores + mu / 4 * dist).max() - (scores - mu / 4 * dist).max())
        # Lemma 1 and its factor-2 tighter version for the constraint-guided output
        pred = structure.to_parts(prediction[b : b + 1]).to(D)
        phi_pred = (w * pred.unsqueeze(1)).flatten(2).sum(2)[0]
        assert bound >= mu / 4 * ((phi_pred - v[b]) ** 2).sum() - 1e-12
        guided = (scores - mu / 4 * dist).argmax()
        assert bound >= mu / 2 * dist[guided] - 1e-12
    torch.testing.assert_close(terms.penalty, (v - 1).abs().sum())
    torch.testing.assert_close(loss(structure, pot, v, features), terms.total())


def test_constraint_guided_argmax_brute_force() -> None:
    structure, pot, features, v = case()
    mu = 2.0
    labels = constraint_guided_argmax(structure, pot, v, features, mu)
    for b in range(2):
        ys, scores, parts = enumerate_chain(structure, pot, b)
        phi = (features.weights[b : b + 1] * parts.unsqueeze(1)).flatten(2).sum(2)
        best = ys[(scores - mu / 4 * ((phi - v[b]) ** 2).sum(1)).argmax()]  # eq. 12
        assert torch.equal(labels[b], best)
    terms = QuadraticPenaltyGammaLoss(mu, HingePenalty()).terms(structure, pot, v, features)
    assert torch.equal(terms.guided, labels)


def test_cccp_linearisation_upper_bounds_and_touches() -> None:
    structure, pot, features, v = case()
    loss = QuadraticPenaltyGammaLoss(1.0, HingePenalty())
    guided = constraint_guided_argmax(structure, pot, v, features, 1.0)
    exact = loss.terms(structure, pot, v, features)
    lin = loss.terms(structure, pot, v, features, linearize_at=guided)
    torch.testing.assert_close(lin.concave, exact.concave)  # tight at the linearisation point
    other = torch.randn_like(pot)  # the linearisation upper-bounds the concave part everywhere
    lin2 = loss.terms(structure, other, v, features, linearize_at=guided)
    ex2 = loss.terms(structure, other, v, features)
    assert bool((lin2.concave >= ex2.concave - 1e-12).all())


def test_gradcheck_potentials_and_v() -> None:
    structure, pot, features, v = case()
    loss = QuadraticPenaltyGammaLoss(1.0, L1Penalty(torch.ones(features.num_constraints, dtype=D), corpus=True))
    p = pot.clone().requires_grad_()
    vv = (v + 0.013).clone().requires_grad_()  # away from L1 kinks
    guided = constraint_guided_argmax(structure, pot, v, features, 1.0)
    assert torch.autograd.gradcheck(
        lambda a, c: loss(structure, a, c, features, linearize_at=guided), (p, vv), fast_mode=True
    )


def test_labeling_formulation_section4_multiclass() -> None:
    # phi = one-hot parts; Gamma = 1/2 ||v - phi(y_i)||_1 equals the 0/1 (= Hamming) loss
    structure = MultiClass(4)
    pot = torch.randn(3, 4, dtype=D)
    target = torch.tensor([0, 3, 1])
    phi_target = structure.to_parts(target).to(D)
    loss = QuadraticPenaltyGammaLoss(1.0, L1Penalty(scale=0.5))
    v = structure.to_parts(torch.tensor([2, 3, 1])).to(D)
    terms = loss.terms(structure, pot, v, PartsFeatures(), penalty_target=phi_target)
    assert terms.penalty.item() == 1.0  # one example wrong
    for b in range(3):
        phi = torch.eye(4, dtype=D)
        conv = (pot[b] - 0.5 * phi @ v[b] + 0.25).max()  # ||phi||^2 = 1 is constant
        torch.testing.assert_close(terms.convex[b], conv)
        torch.testing.assert_close(terms.concave[b], -(pot[b] + 0.5 * phi @ v[b] - 0.25).max())


def test_labeling_formulation_node_features_chain() -> None:
    structure = LinearChain(C)
    pot = torch.randn(2, N, C, C, dtype=D)
    target = torch.randint(0, C, (2, N))
    features = NodeFeatures()
    phi_t = features.phi(structure.to_parts(target).to(D))
    assert phi_t.shape == (2, N * C) and bool((phi_t.sum(1) == N).all())
    v = phi_t.clone()
    terms = QuadraticPenaltyGammaLoss(1.0, L1Penalty(scale=0.5)).terms(
        structure, pot, v, features, penalty_target=phi_t
    )
    assert terms.penalty.item() == 0.0
    for b in range(2):
        ys, scores, parts = enumerate_chain(structure, pot, b)
        phi = features.phi(parts)
        torch.testing.assert_close(terms.convex[b], (scores - 0.5 * phi @ v[b] + 0.25 * N).max())
    # the Gamma of a decoded v equals the Hamming loss (seed 000 section 4)
    other = torch.randint(0, C, (2, N))
    v2 = features.phi(structure.to_parts(other).to(D))
    gamma = L1Penalty(scale=0.5)(v2, phi_t)
    assert gamma.item() == structure.hamming(target, other).sum().item()


def test_penalties() -> None:
    v = torch.tensor([[0.5, 1.5], [-1.0, 1.0]], dtype=D)
    assert HingePenalty()(v).item() == pytest.approx(0.5 + 2.0)  # eq. 4
    a = torch.tensor([0.0, 1.0], dtype=D)
    assert L1Penalty(a, corpus=True)(v).item() == pytest.approx(abs(-0.25) + abs(0.25))  # eq. 5
    assert L1Penalty(a)(v).item() == pytest.approx(0.5 + 0.5 + 1.0 + 0.0)


def test_constraint_penalty_on_marginals_and_labels() -> None:
    structure, pot, features, _ = case()
    pen = ConstraintPenalty(HingePenalty())
    p = pot.clone().requires_grad_()
    value = pen(structure, p, features)
    expect = 0.0
    for b in range(2):
        ys, scores, parts = enumerate_chain(structure, pot, b)
        probs = torch.softmax(scores, 0)
        phi = (features.weights[b : b + 1] * parts.unsqueeze(1)).flatten(2).sum(2)
        expect = expect + (1 - probs @ phi).clamp(min=0).sum()
    torch.testing.assert_close(value, expect)
    value.backward()
    assert p.grad is not None and bool(torch.isfinite(p.grad).all())
    labels, _ = structure.argmax(pot)
    phi = features.phi(structure.to_parts(labels).to(D))
    torch.testing.assert_close(pen(structure, pot, features, labels=labels), (1 - phi).clamp(min=0).sum())


def test_gamma_combines_with_hinge() -> None:
    # eq. (13) = C1 * hinge(labeled) + C2 * gamma(unlabeled): both are plain tensors
    structure, pot, features, v = case()
    target = torch.randint(0, C, (2, N))
    total = StructuredHingeLoss()(structure, pot, target) + 0.5 * QuadraticPenaltyGammaLoss(
        1.0, HingePenalty()
    )(structure, pot, v, features)
    assert bool(torch.isfinite(total))


def test_gamma_bad_input() -> None:
    structure, pot, features, v = case()
    with pytest.raises(ValueError, match="mu must be a finite number > 0"):
        QuadraticPenaltyGammaLoss(0.0, HingePenalty())
    with pytest.raises(ValueError, match="v must be a floating tensor of shape"):
        QuadraticPenaltyGammaLoss(1.0, HingePenalty())(structure, pot, v[:1], features)
    nonbinary = LinearConstraintFeatures(features.weights * 2.0)
    with pytest.raises(ValueError, match="features must be 0/1-valued"):
        QuadraticPenaltyGammaLoss(1.0, HingePenalty())(structure, pot, v, nonbinary)
    declared = LinearConstraintFeatures(features.weights, binary=False)
    with pytest.raises(NotImplementedError, match="0/1-valued constraint features"):
        QuadraticPenaltyGammaLoss(1.0, HingePenalty())(structure, pot, v, declared)
    with pytest.raises(ValueError, match="offset must have shape"):
        LinearConstraintFeatures(features.weights, offset=torch.zeros(3))
    with pytest.raises(ValueError, match="weights\\[0\\] must be a floating tensor"):
        LinearConstraintFeatures(torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="L1Penalty needs a target"):
        L1Penalty()(v)
    with pytest.raises(ValueError, match="linearize_at must have"):
        QuadraticPenaltyGammaLoss(1.0, HingePenalty())(structure, pot, v, features, linearize_at=v)
