"""The losses on parse trees (CKY) against enumeration of every tree."""

from __future__ import annotations

import pytest
import torch

from structssl.losses import CRFNLLLoss, NablaSVMLoss, NablaTSVMLoss, StructuredHingeLoss
from structssl.losses.functional import huber_hinge, smax, unlabeled_loss
from structssl.structures import CKY
from test_cky import _all_trees, _random_potentials

N, NT = 3, 2


def _setup():
    g = torch.Generator().manual_seed(5)
    potentials = _random_potentials(2, N, NT, g)
    trees = _all_trees(N, NT, N)  # (S, 2N - 1, 3): every tree of length 3
    target = trees[torch.tensor([7, 40])]
    return CKY(NT), potentials, trees, target


def _enumerate(structure, potentials, trees, target, b):
    s = len(trees)
    rep = type(potentials)(*[x[b : b + 1].expand(s, *x.shape[1:]) for x in potentials])
    scores = structure.score(rep, trees)
    ham = structure.hamming(target[b : b + 1].expand(s, -1, -1), trees).to(scores.dtype)
    return scores, ham, ham == 0


@pytest.mark.parametrize("cost", ["hamming", "zero_one"])
def test_cky_margin_hinge_and_crf_nll(cost: str) -> None:
    structure, potentials, trees, target = _setup()
    hinge = StructuredHingeLoss("margin", cost, reduction="none")(structure, potentials, target)
    nll = CRFNLLLoss(reduction="none")(structure, potentials, target)
    for b in range(2):
        scores, ham, is_t = _enumerate(structure, potentials, trees, target, b)
        delta = ham if cost == "hamming" else (~is_t).to(scores.dtype)
        torch.testing.assert_close(hinge[b], (scores + delta).max() - scores[is_t][0])
        torch.testing.assert_close(nll[b], scores.logsumexp(0) - scores[is_t][0])


def test_cky_nabla_svm_and_tsvm_all_candidates() -> None:
    structure, potentials, trees, target = _setup()
    k = len(trees)  # every other tree is a candidate
    nabla = NablaSVMLoss(epsilon=0.3, rho=2.0, k=k, reduction="none")(structure, potentials, target)
    tsvm = NablaTSVMLoss(tau=0.4, rho=2.0, k=k, reduction="none")(structure, potentials)
    best, _ = structure.argmax(potentials)
    for b in range(2):
        scores, ham, is_t = _enumerate(structure, potentials, trees, target, b)
        t = scores[is_t][0] - scores[~is_t]
        torch.testing.assert_close(nabla[b], smax(huber_hinge(t, ham[~is_t], 0.3), 2.0))
        scores, ham, is_t = _enumerate(structure, potentials, trees, best, b)
        t = scores[is_t][0] - scores[~is_t]
        torch.testing.assert_close(tsvm[b], smax(unlabeled_loss(t, ham[~is_t], 0.4), 2.0))
