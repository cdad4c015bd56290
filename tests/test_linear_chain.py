"""LinearChain against brute-force enumeration, torch-struct and pytorch-crf; error messages."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from oracle import check_structure
from structssl.structures import LinearChain, bio_allowed_transitions


def _enumerate(num_labels: int, lengths: torch.Tensor, max_length: int):
    def labels_of(b: int):
        n = int(lengths[b])
        for y in itertools.product(range(num_labels), repeat=n):
            yield torch.tensor(list(y) + [0] * (max_length - n))

    return labels_of


@given(
    batch=st.integers(1, 3),
    max_length=st.integers(1, 4),
    num_labels=st.integers(1, 3),
    seed=st.integers(0, 1000),
)
def test_chain_matches_enumeration(batch: int, max_length: int, num_labels: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    potentials = torch.randn(batch, max_length, num_labels, num_labels, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, max_length + 1, (batch,), generator=g)
    lengths[0] = max_length
    chain = LinearChain(num_labels)
    check_structure(chain, potentials, lengths, _enumerate(num_labels, lengths, max_length), k=5)


def test_chain_without_lengths_and_with_ties() -> None:
    chain = LinearChain(2)
    potentials = torch.zeros(2, 3, 2, 2, dtype=torch.float64)  # all 8 structures tie
    check_structure(chain, potentials, None, _enumerate(2, torch.tensor([3, 3]), 3), k=8)
    _, scores = chain.kbest(potentials, 10)
    assert torch.isneginf(scores[:, 8:]).all() and (scores[:, :8] == 0).all()


def test_potentials_from_folds_unary_transition_start_end() -> None:
    b, n, c = 3, 5, 4
    unary = torch.randn(b, n, c, dtype=torch.float64)
    transition = torch.randn(c, c, dtype=torch.float64)
    start, end = torch.randn(c, dtype=torch.float64), torch.randn(c, dtype=torch.float64)
    lengths = torch.tensor([5, 3, 1])
    chain = LinearChain(c)
    potentials = chain.potentials_from(unary, transition, start, end, lengths)
    labels = torch.randint(0, c, (b, n))
    for i in range(b):
        m = int(lengths[i])
        y = labels[i, :m]
        expected = start[y[0]] + unary[i, torch.arange(m), y].sum() + end[y[m - 1]]
        expected = expected + sum(transition[y[t - 1], y[t]] for t in range(1, m))
        got = chain.score(potentials, labels, lengths)[i]
        torch.testing.assert_close(got, expected)


def test_marginals_do_not_touch_inputs_and_masked_parts_get_zero() -> None:
    chain = LinearChain(3)
    potentials = torch.randn(2, 4, 3, 3, dtype=torch.float64)
    allowed, start = bio_allowed_transitions(["O", "B-X", "I-X"])
    masked = chain.constrain(potentials, allowed_transitions=allowed, allowed_start=start)
    marg = chain.marginals(masked)
    assert not potentials.requires_grad and not masked.requires_grad
    assert (marg[:, 1:][:, :, ~allowed] == 0).all()  # forbidden transitions: exactly zero
    assert (marg[:, 0, 0, 2] == 0).all()  # I-X cannot start
    assert (marg[:, 0, 1:] == 0).all()  # rows 1.. at t = 0 are not parts
    leaf = masked.clone().requires_grad_()
    chain.log_partition(leaf).sum().backward()
    assert torch.isfinite(leaf.grad).all()
    labels, _ = chain.argmax(masked)
    for y in labels:
        assert y[0] != 2 and all(not (y[t] == 2 and y[t - 1] == 0) for t in range(1, 4))


def test_argmax_under_inference_mode_and_on_leaf_requiring_grad() -> None:
    chain = LinearChain(4)
    potentials = torch.randn(3, 6, 4, 4, requires_grad=True)
    lengths = torch.tensor([6, 2, 1])
    with torch.inference_mode():
        labels, scores = chain.argmax(potentials, lengths)
        kl, ks = chain.kbest(potentials, 3, lengths)
    assert labels.shape == (3, 6) and (labels[1, 2:] == 0).all() and (labels[2, 1:] == 0).all()
    assert torch.equal(kl[:, 0], labels)
    assert potentials.grad is None and potentials.is_leaf


def test_partially_observed_labels_and_allowed_labels() -> None:
    chain = LinearChain(3)
    potentials = torch.randn(2, 5, 3, 3, dtype=torch.float64)
    observed = torch.tensor([[-1, 2, -1, -1, 0], [1, -1, -1, -1, -1]])
    masked = chain.constrain(potentials, observed=observed)
    labels, _ = chain.argmax(masked)
    assert labels[0, 1] == 2 and labels[0, 4] == 0 and labels[1, 0] == 1
    node = chain.node_parts(chain.marginals(masked))  # (B, N, C)
    torch.testing.assert_close(node[0, 1], torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64))
    allowed_labels = torch.tensor([True, False, True])
    labels, _ = chain.argmax(chain.constrain(potentials, allowed_labels=allowed_labels))
    assert (labels != 1).all()
    end = torch.tensor([False, True, False])
    lengths = torch.tensor([5, 2])
    labels, _ = chain.argmax(chain.constrain(potentials, lengths, allowed_end=end), lengths)
    assert labels[0, 4] == 1 and labels[1, 1] == 1


def test_linear_part_costs_shift_scores() -> None:
    chain = LinearChain(3)
    potentials = torch.randn(2, 4, 3, 3, dtype=torch.float64)
    costs = torch.randn_like(potentials)
    labels = torch.randint(0, 3, (2, 4))
    expected = chain.score(potentials, labels) + (costs * chain.to_parts(labels)).sum((1, 2, 3))
    torch.testing.assert_close(chain.score(potentials + costs, labels), expected)


@pytest.mark.parametrize("scale", [1.0, 0.5, "per-example"])
def test_cost_augmented_edges_add_the_hamming_parts(scale: object) -> None:
    """On (B, N, C, C) edges the broadcast cost equals potentials + scale * hamming_potentials
    (the parts definition), on -inf entries and padding too; every structure's scores move by
    scale * Hamming."""
    torch.manual_seed(0)
    chain = LinearChain(3)
    potentials = torch.randn(3, 5, 3, 3, dtype=torch.float64)
    potentials[0, 2, 1, 0] = float("-inf")
    target = torch.randint(0, 3, (3, 5))
    lengths = torch.tensor([5, 3, 1])
    factor = torch.tensor([1.0, 2.0, 0.25]) if scale == "per-example" else scale
    got = chain.cost_augmented_potentials(potentials, target, lengths, factor)
    view = factor.view(-1, 1, 1, 1) if isinstance(factor, torch.Tensor) else factor
    expected = potentials + view * chain.hamming_potentials(target, lengths).double()
    torch.testing.assert_close(got, expected)
    labels = torch.randint(0, 3, (3, 5))
    labels[0, 1] = 0  # not through the -inf edge (1 -> 0 at t = 2)
    shift = chain.hamming(target, labels, lengths).double() * (factor if isinstance(factor, torch.Tensor) else factor)
    torch.testing.assert_close(chain.score(got, labels, lengths) - chain.score(potentials, labels, lengths), shift)


def test_against_torch_struct_and_pytorch_crf() -> None:
    torch_struct = pytest.importorskip("torch_struct")
    torchcrf = pytest.importorskip("torchcrf")
    b, n, c = 4, 7, 5
    unary = torch.randn(b, n, c, dtype=torch.float64)
    transition = torch.randn(c, c, dtype=torch.float64)
    start, end = torch.randn(c, dtype=torch.float64), torch.randn(c, dtype=torch.float64)
    chain = LinearChain(c)
    potentials = chain.potentials_from(unary, transition, start, end)
    # torch-struct: edge potentials (B, N - 1, C_next, C_prev) with start/end folded in
    edges = unary[:, 1:, :, None] + transition.T[None, None]
    edges = edges.clone()
    edges[:, 0] += (unary[:, 0] + start)[:, None, :]
    edges[:, -1] += end[None, :, None]
    dist = torch_struct.LinearChainCRF(edges)
    torch.testing.assert_close(chain.log_partition(potentials), dist.partition)
    torch.testing.assert_close(chain.max(potentials), dist.max)
    # pytorch-crf: (N, B, C) emissions by default
    crf = torchcrf.CRF(c, batch_first=True).double()
    with torch.no_grad():
        crf.transitions.copy_(transition)
        crf.start_transitions.copy_(start)
        crf.end_transitions.copy_(end)
    labels, _ = chain.argmax(potentials)
    mask = torch.ones(b, n, dtype=torch.bool)  # a bool mask avoids pytorch-crf's uint8 warning
    assert labels.tolist() == crf.decode(unary, mask=mask)
    llh = crf(unary, labels, mask=mask, reduction="none")
    torch.testing.assert_close(chain.score(potentials, labels) - chain.log_partition(potentials), llh)


def test_kbest_matches_torch_struct_topk() -> None:
    torch_struct = pytest.importorskip("torch_struct")
    b, n, c = 2, 5, 3
    edges = torch.randn(b, n - 1, c, c, dtype=torch.float64)  # [b, t, next, prev]
    potentials = torch.zeros(b, n, c, c, dtype=torch.float64)
    potentials[:, 1:] = edges.transpose(2, 3)
    # torch-struct has no start potentials; our t = 0 row 0 stays zero
    kmax = torch_struct.LinearChainCRF(edges).topk(6)  # (k, B, ...)
    _, scores = LinearChain(c).kbest(potentials, 6)
    expected = torch_struct.LinearChainCRF(edges, ).kmax(6).T
    torch.testing.assert_close(scores, expected)
    assert kmax.shape[0] == 6


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_float32_agrees_with_float64(dtype: torch.dtype) -> None:
    potentials = torch.randn(8, 40, 6, 6, dtype=torch.float64) * 3
    lengths = torch.randint(1, 41, (8,))
    chain = LinearChain(6)
    ref = chain.log_partition(potentials, lengths)
    got = chain.log_partition(potentials.to(dtype), lengths)
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-4)


# ---------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "shape, match",
    [
        ((2, 3, 3), r"potentials must have shape \(B, N, C, C\) with C = num_labels = 3; got \(2, 3, 3\)"),
        ((2, 3, 3, 4), r"with C = num_labels = 3; got \(2, 3, 3, 4\)"),
        ((2, 3, 4, 4), r"with C = num_labels = 3; got \(2, 3, 4, 4\)"),
        ((0, 3, 3, 3), r"non-empty batch dimension; got shape \(0, 3, 3, 3\)"),
        ((2, 0, 3, 3), r"N >= 1 positions"),
    ],
)
def test_bad_potentials_shape(shape: tuple[int, ...], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LinearChain(3).log_partition(torch.zeros(shape))


def test_bad_inputs() -> None:
    chain = LinearChain(3)
    p = torch.zeros(2, 4, 3, 3)
    with pytest.raises(ValueError, match=r"lengths must be in \[1, N\] = \[1, 4\].*got values in \[0, 5\]"):
        chain.log_partition(p, torch.tensor([0, 5]))
    with pytest.raises(ValueError, match=r"lengths must have shape \(B,\) = \(2,\); got \(3,\)"):
        chain.argmax(p, torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="lengths must have an integer dtype; got torch.float32"):
        chain.argmax(p, torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="potentials contain NaN"):
        chain.log_partition(torch.full((2, 4, 3, 3), float("nan")))
    with pytest.raises(ValueError, match="potentials must be floating point; got dtype torch.int64"):
        chain.log_partition(torch.zeros(2, 4, 3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"labels must be in \[0, C\) = \[0, 3\) at valid positions; got values in \[0, 3\]"):
        chain.score(p, torch.tensor([[0, 1, 2, 3], [0, 0, 0, 0]]))
    with pytest.raises(ValueError, match=r"labels must have shape \(B, N\) with B = 2; got \(2,\)"):
        chain.score(p, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"target must be in \[0, C\)"):
        chain.cost_augmented_argmax(p, torch.full((2, 4), -1))
    with pytest.raises(ValueError, match=r"cost must be one of \('hamming', 'zero_one'\); got 'l2'"):
        chain.cost_augmented_argmax(p, torch.zeros(2, 4, dtype=torch.long), cost="l2")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k must be an int >= 1; got 0"):
        chain.kbest(p, 0)
    with pytest.raises(ValueError, match="num_labels must be an int >= 1; got 0"):
        LinearChain(0)
    with pytest.raises(TypeError, match=r"must be a tensor \(B, N, C, C\) or ChainPotentials"):
        chain.log_partition((p, p))


def test_padding_labels_are_ignored_not_validated() -> None:
    chain = LinearChain(3)
    p = torch.randn(2, 4, 3, 3)
    lengths = torch.tensor([4, 2])
    labels = torch.tensor([[0, 1, 2, 1], [2, 1, -100, -100]])  # -100 past the length
    padded = torch.tensor([[0, 1, 2, 1], [2, 1, 0, 0]])
    torch.testing.assert_close(chain.score(p, labels, lengths), chain.score(p, padded, lengths))


def test_constraint_errors() -> None:
    chain = LinearChain(3)
    p = torch.zeros(2, 4, 3, 3)
    with pytest.raises(ValueError, match="no allowed label at a valid position: example 0, position 0"):
        chain.constrain(p, allowed_start=torch.tensor([False, False, False]))
    with pytest.raises(ValueError, match=r"allowed_transitions must be a bool tensor of shape \(3, 3\)"):
        chain.constrain(p, allowed_transitions=torch.ones(3, 3))
    with pytest.raises(ValueError, match=r"observed must be in \[-1, C\) = \[-1, 3\)"):
        chain.constrain(p, observed=torch.full((2, 4), 3))
    with pytest.raises(ValueError, match="tags must be 'O', 'B-X' or 'I-X'; got 'PER'"):
        bio_allowed_transitions(["O", "PER"])
    masked = chain.constrain(p, allowed_transitions=~torch.eye(3, dtype=torch.bool))
    assert torch.isneginf(masked[:, 1:].diagonal(dim1=2, dim2=3)).all()  # an exact exclusion
