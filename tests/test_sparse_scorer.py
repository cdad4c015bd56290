"""The sparse feature map (scorers/base.py): cached CSR layouts, float64 agreement with the
index_add path it replaces and with embedding_bag, gradchecks, and the cache's invalidation."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from structssl.scorers import LinearChainScorer
from structssl.scorers.base import SparseLayout, sparse_feature_sum, sparse_layout
from structssl.structures import LinearChain

F64 = torch.float64


def _indices(shape: tuple[int, ...], rows: int, seed: int) -> torch.Tensor:
    """Random feature indices with padding slots (0), items without any feature and repeats."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, rows, shape, generator=g)
    idx[torch.rand(shape, generator=g) < 0.4] = 0  # padding slots anywhere
    flat = idx.view(-1, shape[-1])
    flat[0] = 0  # an item with no feature
    flat[-1, 0] = flat[-1, -1] = rows - 1  # a repeated feature counts twice
    return idx


def _index_add_reference(idx: torch.Tensor, weight: torch.Tensor, up: torch.Tensor):
    """The previous implementation: forward by a loop over slots, gradient by index_add."""
    flat = idx.reshape(-1, idx.shape[-1])
    out = torch.zeros(flat.shape[0], weight.shape[1], dtype=weight.dtype)
    for m in range(flat.shape[0]):
        for f in flat[m].tolist():
            if f:
                out[m] += weight[f]
    active = flat != 0
    bag = torch.arange(flat.shape[0]).unsqueeze(1).expand_as(flat)[active]
    grad = torch.zeros_like(weight).index_add(0, flat[active], up.reshape(-1, up.shape[-1])[bag])
    return out.view(*idx.shape[:-1], -1), grad


@pytest.mark.parametrize("shape", [(3, 5, 4), (2, 1, 1), (7, 6), (1, 9, 3)])
def test_forward_and_gradient_equal_the_index_add_path_in_float64(shape) -> None:
    rows = 11
    idx = _indices(shape, rows, seed=len(shape) * 10 + shape[-1])
    g = torch.Generator().manual_seed(1)
    weight = torch.randn(rows, 4, dtype=F64, generator=g)
    weight[0] = 1e6  # the padding row is never read
    w = weight.clone().requires_grad_()
    out = sparse_feature_sum(idx, w)
    up = torch.randn(out.shape, dtype=F64, generator=g)
    (grad,) = torch.autograd.grad(out, w, up)
    ref_out, ref_grad = _index_add_reference(idx, weight, up)
    torch.testing.assert_close(out, ref_out, rtol=0, atol=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=0, atol=1e-12)
    assert bool((grad[0] == 0).all())
    # and against the dense embedding_bag with padding_idx
    bag = F.embedding_bag(idx.reshape(-1, shape[-1]), weight, mode="sum", padding_idx=0)
    torch.testing.assert_close(out.reshape(-1, 4), bag, rtol=0, atol=1e-9)
    assert torch.autograd.gradcheck(lambda x: sparse_feature_sum(idx, x), (w,))
    assert torch.autograd.gradgradcheck(lambda x: sparse_feature_sum(idx, x).pow(2), (w,))


def test_transpose_is_the_csr_of_the_transposed_matrix() -> None:
    idx = _indices((4, 5, 3), 9, seed=3)
    layout = SparseLayout(idx)
    flat = idx.view(-1, 3)
    dense = torch.zeros(flat.shape[0], 9, dtype=torch.long)  # items x features counts
    for m in range(flat.shape[0]):
        for f in flat[m].tolist():
            if f:
                dense[m, f] += 1
    features, items, offsets = layout.transpose()
    assert layout.transpose()[1] is items  # built once
    assert features.tolist() == sorted(set(flat[flat != 0].tolist()))
    ends = offsets.tolist()[1:] + [items.numel()]
    for u, f in enumerate(features.tolist()):
        got = items[offsets[u] : ends[u]].tolist()
        assert got == sorted(got)  # ascending item within a feature
        counts = torch.bincount(torch.tensor(got, dtype=torch.long), minlength=flat.shape[0])
        assert counts.tolist() == dense[:, f].tolist()


def test_layout_is_cached_per_tensor_and_rebuilt_after_a_change() -> None:
    rows = 8
    idx = _indices((3, 4, 2), rows, seed=5)
    assert sparse_layout(idx) is sparse_layout(idx)
    assert sparse_layout(idx.clone()) is not sparse_layout(idx)  # another tensor
    weight = torch.randn(rows, 3, dtype=F64).requires_grad_()
    before = sparse_feature_sum(idx, weight)
    first = sparse_layout(idx)
    idx[0, 0, 0] = rows - 2  # in place: the version counter moves
    assert sparse_layout(idx) is not first
    after = sparse_feature_sum(idx, weight)
    ref = F.embedding_bag(idx.view(-1, 2), weight.detach(), mode="sum", padding_idx=0)
    torch.testing.assert_close(after.detach().view(-1, 3), ref)
    assert not torch.equal(before, after)
    ref_w = weight.detach().clone().requires_grad_()
    up = torch.randn(after.shape, dtype=F64)
    ref_out = F.embedding_bag(idx.view(-1, 2), ref_w, mode="sum", padding_idx=0)
    torch.testing.assert_close(
        torch.autograd.grad(after, weight, up)[0],
        torch.autograd.grad(ref_out, ref_w, up.view(-1, 3))[0],
    )
    with torch.inference_mode():  # inference tensors have no version counter: not cached
        frozen = idx.clone()
        assert sparse_layout(frozen) is not sparse_layout(frozen)
        torch.testing.assert_close(sparse_feature_sum(frozen, weight).view(-1, 3), ref)


def test_repeated_evaluations_give_the_same_gradient() -> None:
    """A full-batch L-BFGS closure evaluates the same chunk many times: the cached layout
    gives the first evaluation's value and gradient (and the edge and factored layouts agree)."""
    torch.manual_seed(0)
    idx = _indices((5, 7, 4), 30, seed=9)
    lengths = torch.tensor([7, 3, 1, 5, 6])
    labels = torch.randint(0, 4, (5, 7))
    results = []
    for factored in (False, True, True):
        torch.manual_seed(1)
        scorer = LinearChainScorer(4, num_features=30, init_std=0.5, factored=factored).double()
        chain = LinearChain(4)
        pot = scorer(idx, lengths)
        nll = (chain.log_partition(pot, lengths) - chain.score(pot, labels, lengths)).sum()
        grads = torch.autograd.grad(nll, list(scorer.parameters()))
        results.append((nll.detach(), grads))
    for nll, grads in results[1:]:
        torch.testing.assert_close(nll, results[0][0], rtol=1e-12, atol=1e-12)
        for a, b in zip(grads, results[0][1]):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
