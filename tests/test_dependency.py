"""DependencyTree (Eisner) against brute-force enumeration of projective trees, torch-struct;
errors (non-projective gold trees)."""

from __future__ import annotations

import itertools
import math
import warnings
from functools import cache

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from oracle import check_structure
from structssl.structures import DependencyTree
from structssl.structures.torch_struct import dependency_to_torch_struct as to_torch_struct

F64 = torch.float64


# ---------------------------------------------------------------------- brute force
def _is_tree(heads: tuple[int, ...]) -> bool:
    n = len(heads)
    for m in range(1, n + 1):
        seen, node = set(), m
        while node != 0:
            if node in seen:
                return False
            seen.add(node)
            node = heads[node - 1]
    return True


def _projective(heads: tuple[int, ...]) -> bool:
    arcs = [(min(h, m), max(h, m)) for m, h in enumerate(heads, start=1)]
    return not any(a[0] < b[0] < a[1] < b[1] for a in arcs for b in arcs)


@cache
def projective_trees(n: int, multiroot: bool) -> tuple[tuple[int, ...], ...]:
    out = []
    for heads in itertools.product(range(n + 1), repeat=n):
        if any(h == m for m, h in enumerate(heads, start=1)):
            continue
        if not multiroot and sum(h == 0 for h in heads) != 1:
            continue
        if _is_tree(heads) and _projective(heads):
            out.append(heads)
    return tuple(out)


def enumerate_heads(lengths: torch.Tensor, max_length: int, multiroot: bool):
    def labels_of(b: int):
        n = int(lengths[b])
        for heads in projective_trees(n, multiroot):
            yield torch.tensor(list(heads) + [0] * (max_length - n))

    return labels_of


def brute_score(pot: torch.Tensor, heads: tuple[int, ...]) -> torch.Tensor:
    return sum((pot[h, m] for m, h in enumerate(heads, start=1)), pot.new_zeros(()))


def _close(a: torch.Tensor, b: torch.Tensor, msg: str = "") -> None:
    torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-7, msg=msg)


# ---------------------------------------------------------------------- oracle suite
def test_tree_counts() -> None:
    # projective trees of n words under a root: 1, 3, 12, 55 (multi-root); 1, 2, 7, 30 (one root)
    assert [len(projective_trees(n, True)) for n in range(1, 5)] == [1, 3, 12, 55]
    assert [len(projective_trees(n, False)) for n in range(1, 5)] == [1, 2, 7, 30]


@settings(deadline=None, max_examples=25)
@given(
    batch=st.integers(1, 3),
    max_len=st.integers(1, 4),
    multiroot=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_dependency_matches_enumeration(batch: int, max_len: int, multiroot: bool, seed: int) -> None:
    tree = DependencyTree(multiroot=multiroot)
    g = torch.Generator().manual_seed(seed)
    pot = torch.randn(batch, max_len + 1, max_len + 1, generator=g, dtype=F64)
    lengths = torch.randint(1, max_len + 1, (batch,), generator=g)
    lengths[0] = max_len
    check_structure(tree, pot, lengths, enumerate_heads(lengths, max_len, multiroot), k=6)


def test_scores_follow_the_layout_definition() -> None:
    tree = DependencyTree()
    g = torch.Generator().manual_seed(1)
    pot = torch.randn(1, 5, 5, generator=g, dtype=F64)
    for heads in projective_trees(4, True):
        y = torch.tensor([heads])
        _close(tree.score(pot, y)[0], brute_score(pot[0], heads))
        parts = tree.to_parts(y)
        assert torch.equal(tree.from_parts(parts), y)
        wrong = sum(int(a != b) for a, b in zip(heads, (0, 1, 1, 3)))
        assert int(tree.hamming(torch.tensor([[0, 1, 1, 3]]), y)[0]) == wrong


def test_ties_and_kbest_beyond_the_number_of_trees() -> None:
    tree = DependencyTree()
    pot = torch.zeros(2, 3, 3, dtype=F64)
    labels, scores = tree.kbest(pot, 5, torch.tensor([2, 1]))
    assert (scores[0, :3] == 0).all() and torch.isneginf(scores[0, 3:]).all()
    assert (scores[1, :1] == 0).all() and torch.isneginf(scores[1, 1:]).all()
    assert {tuple(y.tolist()) for y in labels[0, :3]} == {(0, 0), (0, 1), (2, 0)}


# ---------------------------------------------------------------------- infinities, padding, scales
def test_minus_inf_masks_give_zero_marginals_and_finite_gradients() -> None:
    tree = DependencyTree()
    g = torch.Generator().manual_seed(2)
    pot = torch.randn(2, 5, 5, generator=g, dtype=F64)
    allowed = torch.ones(2, 5, 5, dtype=torch.bool)
    allowed[:, 0, 2:] = False  # only word 1 may attach to the root
    allowed[:, 3, 4] = False
    masked = tree.mask_potentials(pot, allowed)
    lengths = torch.tensor([4, 3])

    def finite(b: int):
        n = int(lengths[b])
        for heads in projective_trees(n, True):
            if math.isfinite(float(brute_score(masked[b], heads))):
                yield torch.tensor(list(heads) + [0] * (4 - n))

    check_structure(tree, masked, lengths, finite, k=4)
    marg = tree.marginals(masked, lengths)
    assert torch.isfinite(marg).all() and (marg[~allowed] == 0).all()
    leaf = masked.clone().requires_grad_()
    tree.log_partition(leaf, lengths).sum().backward()
    assert torch.isfinite(leaf.grad).all() and (leaf.grad[~allowed] == 0).all()
    labels, _ = tree.argmax(masked, lengths)
    valid = tree.valid_mask(lengths, 4)
    assert ((labels[:, 1:] != 0) | ~valid[:, 1:]).all()  # one root child: word 1


def test_padding_and_non_parts_may_hold_anything() -> None:
    tree = DependencyTree()
    g = torch.Generator().manual_seed(3)
    pot = torch.randn(3, 5, 5, generator=g, dtype=F64)
    lengths = torch.tensor([4, 2, 1])
    dirty = pot.clone()
    non_part = ~tree.arc_mask(lengths, 4)
    values = torch.tensor([float("nan"), float("inf"), float("-inf"), 1e30], dtype=F64)
    dirty[non_part] = values[torch.arange(int(non_part.sum())) % 4]
    _close(tree.log_partition(dirty, lengths), tree.log_partition(pot, lengths))
    marg = tree.marginals(dirty, lengths)
    _close(marg, tree.marginals(pot, lengths))
    assert (marg[non_part] == 0).all()
    assert torch.equal(tree.kbest(dirty, 3, lengths)[0], tree.kbest(pot, 3, lengths)[0])
    labels = tree.argmax(pot, lengths)[0]
    assert (labels[1, 2:] == 0).all() and labels[2].tolist() == [0, 0, 0, 0]
    # each word has one head: the marginals of its incoming arcs sum to 1
    _close(marg.sum(1)[:, 1:], tree.valid_mask(lengths, 4).to(F64))


@pytest.mark.parametrize("scale", [1e-8, 1e3, 1e6])
def test_extreme_scales(scale: float) -> None:
    tree = DependencyTree(multiroot=False)
    g = torch.Generator().manual_seed(4)
    pot = scale * torch.randn(2, 5, 5, generator=g, dtype=F64)
    lengths = torch.tensor([4, 3])
    log_z = tree.log_partition(pot, lengths)
    assert torch.isfinite(tree.marginals(pot, lengths)).all()
    for b in range(2):
        scores = torch.stack(
            [brute_score(pot[b], t) for t in projective_trees(int(lengths[b]), False)]
        )
        torch.testing.assert_close(log_z[b], torch.logsumexp(scores, 0), rtol=1e-9, atol=1e-9)
        _close(tree.argmax(pot, lengths)[1][b], scores.max())


def test_plus_inf_nan_and_empty_examples() -> None:
    tree = DependencyTree()
    pot = torch.zeros(2, 4, 4, dtype=F64)
    bad = pot.clone()
    bad[1, 0, 2] = float("inf")
    with pytest.raises(ValueError, match=r"\+inf.*example 1"):
        tree.log_partition(bad)
    empty = pot.clone()
    empty[1, :, 3] = float("-inf")  # word 3 can have no head
    with pytest.raises(ValueError, match=r"example 1 has no valid structure"):
        tree.argmax(empty)
    assert torch.isneginf(DependencyTree(validate=False).log_partition(empty)[1])


# ---------------------------------------------------------------------- autograd
@pytest.mark.parametrize("multiroot", [True, False])
def test_gradcheck_and_gradgradcheck(multiroot: bool) -> None:
    tree = DependencyTree(multiroot=multiroot)
    g = torch.Generator().manual_seed(5)
    lengths = torch.tensor([4, 2])
    x = torch.randn(2, 5, 5, generator=g, dtype=F64)
    x = torch.where(tree.arc_mask(lengths, 4), x, 0.0).requires_grad_()
    assert torch.autograd.gradcheck(lambda p: tree.log_partition(p, lengths), (x,))
    assert torch.autograd.gradgradcheck(lambda p: tree.log_partition(p, lengths), (x,))


def test_inference_mode_leaf_inputs_and_no_mutation() -> None:
    tree = DependencyTree()
    g = torch.Generator().manual_seed(6)
    pot = torch.randn(3, 6, 6, generator=g, dtype=F64, requires_grad=True)
    before = pot.detach().clone()
    lengths = torch.tensor([5, 2, 4])
    labels, scores = tree.argmax(pot, lengths)
    (grad,) = torch.autograd.grad(scores.sum(), pot)
    _close(grad, tree.to_parts(labels, lengths).to(F64))
    with torch.inference_mode():
        labels2, _ = tree.argmax(pot, lengths)
        kb, _ = tree.kbest(pot, 3, lengths)
        marg = tree.marginals(pot, lengths)
    assert torch.equal(labels2, labels) and torch.equal(kb[:, 0], labels)
    assert torch.isfinite(marg).all() and pot.grad is None and torch.equal(pot.detach(), before)


# ---------------------------------------------------------------------- gold trees and errors
def test_gold_trees_are_checked() -> None:
    tree = DependencyTree()
    pot = torch.zeros(1, 5, 5)
    with pytest.raises(ValueError, match=r"not projective.*example 0 has crossing arcs 3 -> 1 and 4 -> 2"):
        tree.score(pot, torch.tensor([[3, 4, 0, 1]]))  # 3 -> 1 and 4 -> 2 cross
    with pytest.raises(ValueError, match=r"cycle through word 1"):
        tree.score(pot, torch.tensor([[2, 1, 0, 0]]))
    with pytest.raises(ValueError, match=r"self-loop: example 0, word 2"):
        tree.score(pot, torch.tensor([[0, 2, 0, 0]]))
    with pytest.raises(ValueError, match=r"heads in \[0, n\].*word 3 the head 4"):
        tree.score(pot, torch.tensor([[0, 1, 4, 0]]), torch.tensor([3]))
    with pytest.raises(ValueError, match=r"exactly one word headed by the root.*has 2"):
        DependencyTree(multiroot=False).score(pot, torch.tensor([[0, 0, 2, 3]]))
    with pytest.raises(ValueError, match=r"not projective"):
        tree.cost_augmented_argmax(pot, torch.tensor([[3, 4, 0, 1]]))


def test_errors_name_the_argument() -> None:
    tree = DependencyTree()
    with pytest.raises(ValueError, match=r"\(B, N \+ 1, N \+ 1\).*got \(2, 4, 5\)"):
        tree.log_partition(torch.zeros(2, 4, 5))
    with pytest.raises(ValueError, match=r"N >= 1; got \(2, 1, 1\)"):
        tree.log_partition(torch.zeros(2, 1, 1))
    with pytest.raises(ValueError, match=r"lengths must be in \[1, N\] = \[1, 3\]"):
        tree.log_partition(torch.zeros(2, 4, 4), torch.tensor([4, 1]))
    with pytest.raises(ValueError, match=r"labels must have shape \(B, N\) with B = 2"):
        tree.score(torch.zeros(2, 4, 4), torch.zeros(3, 3, dtype=torch.long))


# ---------------------------------------------------------------------- torch-struct
@pytest.mark.parametrize("multiroot", [True, False])
def test_against_torch_struct(multiroot: bool) -> None:
    torch_struct = pytest.importorskip("torch_struct")
    tree = DependencyTree(multiroot=multiroot)
    g = torch.Generator().manual_seed(7)
    pot = torch.randn(3, 7, 7, generator=g, dtype=F64)
    lengths = torch.tensor([6, 4, 6])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ts = to_torch_struct(pot).requires_grad_()  # torch-struct 0.5 needs a non-leaf-safe input
        dist = torch_struct.DependencyCRF(ts * 1.0, lengths=lengths, multiroot=multiroot)
        _close(tree.log_partition(pot, lengths), dist.partition)
        _close(tree.max(pot, lengths), dist.max)
        marg = tree.marginals(pot, lengths)
        _close(to_torch_struct(marg), dist.marginals)
