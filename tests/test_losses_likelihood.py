"""CRF NLL and composite likelihood against brute-force enumeration."""

from __future__ import annotations

import itertools

import pytest
import torch

from structssl.losses import CompositeLikelihoodLoss, CRFNLLLoss, Decomposition, StarTrees
from structssl.structures import LinearChain, MultiClass

D = torch.float64

try:
    from structssl.structures.multilabel import MultiLabelPotentials, PairwiseMultiLabel

    HAVE_MULTILABEL = True
except ImportError:  # pragma: no cover - the multi-label structure is written separately
    HAVE_MULTILABEL = False

needs_multilabel = pytest.mark.skipif(not HAVE_MULTILABEL, reason="multilabel.py not importable")


def chain_case():
    torch.manual_seed(3)
    return LinearChain(3), torch.randn(3, 4, 3, 3, dtype=D), torch.randint(0, 3, (3, 4)), torch.tensor([4, 1, 3])


def test_crf_nll_brute_force() -> None:
    structure, pot, target, lengths = chain_case()
    got = CRFNLLLoss(reduction="none")(structure, pot, target, lengths)
    for b in range(3):
        n = int(lengths[b])
        ys = torch.tensor(list(itertools.product(range(3), repeat=n)))
        ys = torch.cat([ys, ys.new_zeros(len(ys), 4 - n)], 1)
        scores = structure.score(pot[b : b + 1].expand(len(ys), -1, -1, -1), ys, lengths[b : b + 1].expand(len(ys)))
        t = structure.score(pot[b : b + 1], target[b : b + 1], lengths[b : b + 1])[0]
        torch.testing.assert_close(got[b], torch.logsumexp(scores, 0) - t)


def test_crf_nll_gradcheck_and_gradient_is_marginals_minus_parts() -> None:
    structure, pot, target, lengths = chain_case()
    p = pot.clone().requires_grad_()
    loss = CRFNLLLoss(reduction="sum")
    assert torch.autograd.gradcheck(lambda x: loss(structure, x, target, lengths), (p,))
    (g,) = torch.autograd.grad(loss(structure, p, target, lengths), p)
    expect = structure.marginals(pot, lengths) - structure.to_parts(target, lengths).to(D)
    torch.testing.assert_close(g, expect)


def test_composite_single_tree_equals_full_likelihood() -> None:
    structure, pot, target, lengths = chain_case()
    full = CRFNLLLoss()(structure, pot, target, lengths)
    torch.testing.assert_close(CompositeLikelihoodLoss("whole")(structure, pot, target, lengths), full)
    mc, pm, ym = MultiClass(4), torch.randn(5, 4, dtype=D), torch.randint(0, 4, (5,))
    torch.testing.assert_close(CompositeLikelihoodLoss("factors")(mc, pm, ym), CRFNLLLoss()(mc, pm, ym))


def test_piecewise_chain_brute_force() -> None:
    structure, pot, target, lengths = chain_case()
    got = CompositeLikelihoodLoss("factors", reduction="none")(structure, pot, target, lengths)
    for b in range(3):
        total = torch.log_softmax(pot[b, 0, 0], 0)[target[b, 0]]
        for t in range(1, int(lengths[b])):
            table = torch.log_softmax(pot[b, t].flatten(), 0).view(3, 3)
            total = total + table[target[b, t - 1], target[b, t]]
        torch.testing.assert_close(got[b], -total)


def _star_brute(unary, pairwise, target):
    """Composite log-likelihood over K star trees by enumerating {0,1}^K (seed 004 sec. 5)."""
    b, k = unary.shape[:2]
    ys = torch.tensor(list(itertools.product([0, 1], repeat=k)))
    out = torch.zeros(b, k, dtype=D)
    for i in range(b):
        def star_score(y, root):
            s = sum(unary[i, p, y[p]] / k for p in range(k))
            for q in range(k):
                if q == root:
                    continue
                lo, hi = min(root, q), max(root, q)
                s = s + 0.5 * pairwise[i, lo, hi, y[lo], y[hi]]
            return s
        for root in range(k):
            scores = torch.stack([star_score(y, root) for y in ys])
            out[i, root] = star_score(target[i], root) - torch.logsumexp(scores, 0)
    return out


@needs_multilabel
def test_star_trees_brute_force_and_gradcheck() -> None:
    torch.manual_seed(4)
    k = 4
    structure = PairwiseMultiLabel(k)
    unary = torch.randn(2, k, 2, dtype=D)
    pairwise = torch.randn(2, k, k, 2, 2, dtype=D)
    target = torch.randint(0, 2, (2, k))
    pot = MultiLabelPotentials(unary, pairwise)
    loss = CompositeLikelihoodLoss("star_trees", reduction="none")
    comps = loss.components(structure, pot, target)
    torch.testing.assert_close(comps, _star_brute(unary, pairwise, target))
    torch.testing.assert_close(loss(structure, pot, target), -comps.sum(1))
    u = unary.clone().requires_grad_()
    w = pairwise.clone().requires_grad_()
    assert torch.autograd.gradcheck(
        lambda a, c: CompositeLikelihoodLoss("star_trees", "sum")(structure, MultiLabelPotentials(a, c), target),
        (u, w),
        fast_mode=True,
    )


@needs_multilabel
def test_star_trees_single_label_is_full_likelihood() -> None:
    structure = PairwiseMultiLabel(1)
    pot = MultiLabelPotentials(torch.randn(3, 1, 2, dtype=D), torch.zeros(3, 1, 1, 2, 2, dtype=D))
    target = torch.randint(0, 2, (3, 1))
    torch.testing.assert_close(
        CompositeLikelihoodLoss("star_trees")(structure, pot, target), CRFNLLLoss()(structure, pot, target)
    )


@needs_multilabel
def test_piecewise_multilabel_brute_force() -> None:
    k = 3
    structure = PairwiseMultiLabel(k)
    unary = torch.randn(2, k, 2, dtype=D)
    pairwise = torch.randn(2, k, k, 2, 2, dtype=D)
    target = torch.randint(0, 2, (2, k))
    got = CompositeLikelihoodLoss("factors", "none")(structure, MultiLabelPotentials(unary, pairwise), target)
    for b in range(2):
        ll = sum(torch.log_softmax(unary[b, p], 0)[target[b, p]] for p in range(k))
        for p in range(k):
            for q in range(p + 1, k):
                ll = ll + torch.log_softmax(pairwise[b, p, q].flatten(), 0).view(2, 2)[target[b, p], target[b, q]]
        torch.testing.assert_close(got[b], -ll)


def test_custom_decomposition() -> None:
    class Twice(Decomposition):
        def log_likelihoods(self, structure, potentials, target, lengths):
            ll = structure.score(potentials, target, lengths) - structure.log_partition(potentials, lengths)
            return torch.stack([ll, ll], 1)

    structure, pot, target, lengths = chain_case()
    torch.testing.assert_close(
        CompositeLikelihoodLoss(Twice())(structure, pot, target, lengths),
        2 * CRFNLLLoss()(structure, pot, target, lengths),
    )


def test_likelihood_bad_input() -> None:
    structure, pot, target, lengths = chain_case()
    with pytest.raises(ValueError, match="decomposition must be one of 'star_trees', 'factors', 'whole'"):
        CompositeLikelihoodLoss("trees")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="reduction must be one of"):
        CRFNLLLoss("avg")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="target must have shape"):
        CRFNLLLoss()(structure, pot, target[0], lengths)
    with pytest.raises(NotImplementedError, match="PairwiseMultiLabel layout"):
        CompositeLikelihoodLoss(StarTrees())(structure, pot, target, lengths)
