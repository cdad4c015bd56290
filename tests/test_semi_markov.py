"""SemiMarkov against brute-force enumeration of all segmentations, torch-struct; errors."""

from __future__ import annotations

import math
import warnings
from typing import Iterator, Optional

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from oracle import check_structure
from structssl.structures import SegmentTags, SemiMarkov
from structssl.structures.torch_struct import semi_markov_to_torch_struct as to_torch_struct

F64 = torch.float64
BIO = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


# ---------------------------------------------------------------------- brute force
def segmentations(n: int, sm: SemiMarkov) -> Iterator[list[tuple[int, int, int]]]:
    """Every segmentation of n tokens as (start, size, label) triples."""
    codec = sm.codec
    assert codec is not None

    def labels(size: int) -> list[int]:
        return [c for c in range(codec.num_labels) if size == 1 or int(codec.inside[c]) >= 0]

    def rec(s: int) -> Iterator[list[tuple[int, int, int]]]:
        if s == n:
            yield []
            return
        for size in range(1, min(sm.max_length, n - s) + 1):
            for lab in labels(size):
                for rest in rec(s + size):
                    yield [(s, size, lab)] + rest

    yield from rec(0)


def tags_of(segments: list[tuple[int, int, int]], sm: SemiMarkov, max_length: int) -> torch.Tensor:
    codec = sm.codec
    assert codec is not None
    y = [0] * max_length
    for s, size, lab in segments:
        y[s] = int(codec.begin[lab])
        for p in range(s + 1, s + size):
            y[p] = int(codec.inside[lab])
    return torch.tensor(y)


def enumerate_tags(sm: SemiMarkov, lengths: torch.Tensor, max_length: int):
    def labels_of(b: int) -> Iterator[torch.Tensor]:
        for seg in segmentations(int(lengths[b]), sm):
            yield tags_of(seg, sm, max_length)

    return labels_of


def brute_score(pot: torch.Tensor, segments: list[tuple[int, int, int]]) -> torch.Tensor:
    """Score from the layout's definition (independent of the structure's code)."""
    total = pot.new_zeros(())
    prev = 0
    for s, size, lab in segments:
        total = total + pot[s, size - 1, prev, lab]
        prev = lab
    return total


def _chain(max_length: int, tags: Optional[list[str]] = None, labels: int = 2) -> SemiMarkov:
    if tags is not None:
        return SemiMarkov(max_length, tags=tags)
    return SemiMarkov(max_length, num_segment_labels=labels)


def _close(a: torch.Tensor, b: torch.Tensor, msg: str = "") -> None:
    torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-7, msg=msg)


# ---------------------------------------------------------------------- oracle suite
@settings(deadline=None, max_examples=25)
@given(
    batch=st.integers(1, 3),
    max_len=st.integers(1, 4),
    k=st.integers(1, 4),
    bio=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_semi_markov_matches_enumeration(batch: int, max_len: int, k: int, bio: bool, seed: int) -> None:
    sm = _chain(k, BIO if bio else None, labels=2)
    c = sm.num_segment_labels
    g = torch.Generator().manual_seed(seed)
    pot = torch.randn(batch, max_len, k, c, c, generator=g, dtype=F64)
    lengths = torch.randint(1, max_len + 1, (batch,), generator=g)
    lengths[0] = max_len
    check_structure(sm, pot, lengths, enumerate_tags(sm, lengths, max_len), k=5)


def test_scores_follow_the_layout_definition() -> None:
    sm = _chain(3, BIO)
    g = torch.Generator().manual_seed(1)
    pot = torch.randn(1, 5, 3, 3, 3, generator=g, dtype=F64)
    for seg in segmentations(5, sm):
        y = tags_of(seg, sm, 5).unsqueeze(0)
        _close(sm.score(pot, y)[0], brute_score(pot[0], seg))
        parts = sm.to_parts(y)
        _close((parts.to(F64) * pot).sum(), brute_score(pot[0], seg))
        assert torch.equal(sm.from_parts(parts), y)
    # the BIO table: O segments are one token long, every tag sequence is one segmentation
    assert sum(1 for _ in segmentations(5, sm)) == len(
        {tuple(tags_of(s, sm, 5).tolist()) for s in segmentations(5, sm)}
    )


def test_ties_and_kbest_beyond_the_number_of_structures() -> None:
    sm = _chain(2, labels=1)  # one label, K = 2: segmentations of 3 tokens = 3
    pot = torch.zeros(2, 3, 2, 1, 1, dtype=F64)
    labels, scores = sm.kbest(pot, 5, torch.tensor([3, 1]))
    assert (scores[0, :3] == 0).all() and torch.isneginf(scores[0, 3:]).all()
    assert (scores[1, :1] == 0).all() and torch.isneginf(scores[1, 1:]).all()
    assert len({tuple(y.tolist()) for y in labels[0, :3]}) == 3
    _close(sm.kmax(pot, 5, torch.tensor([3, 1])), scores)
    check_structure(sm, pot, torch.tensor([3, 1]), enumerate_tags(sm, torch.tensor([3, 1]), 3), k=4)


# ---------------------------------------------------------------------- infinities, padding, scales
def test_minus_inf_masks_give_zero_marginals_and_finite_gradients() -> None:
    sm = _chain(3, BIO)
    g = torch.Generator().manual_seed(2)
    pot = torch.randn(3, 5, 3, 3, 3, generator=g, dtype=F64)
    allowed = torch.ones_like(pot, dtype=torch.bool)
    allowed[:, :, 1:, :, 2] = False  # LOC segments one token long
    allowed[:, 1, :, :, 1] = False  # no PER segment starts at token 1
    masked = sm.mask_potentials(pot, allowed)
    lengths = torch.tensor([5, 3, 2])
    check_structure(sm, masked, lengths, _filtered(sm, masked, lengths, 5), k=4)
    marg = sm.marginals(masked, lengths)
    assert torch.isfinite(marg).all() and (marg[~allowed] == 0).all()
    leaf = masked.clone().requires_grad_()
    sm.log_partition(leaf, lengths).sum().backward()
    assert torch.isfinite(leaf.grad).all() and (leaf.grad[~allowed] == 0).all()
    # O segments longer than one token are forbidden by the structure itself
    assert (marg[:, :, 1:, :, 0] == 0).all()


def _filtered(sm: SemiMarkov, pot: torch.Tensor, lengths: torch.Tensor, max_length: int):
    """Enumeration restricted to the structures with a finite score."""

    def labels_of(b: int) -> Iterator[torch.Tensor]:
        for seg in segmentations(int(lengths[b]), sm):
            if math.isfinite(float(brute_score(pot[b], seg))):
                yield tags_of(seg, sm, max_length)

    return labels_of


def test_padding_may_hold_anything() -> None:
    sm = _chain(2, labels=3)
    g = torch.Generator().manual_seed(3)
    pot = torch.randn(3, 4, 2, 3, 3, generator=g, dtype=F64)
    lengths = torch.tensor([4, 2, 1])
    dirty = pot.clone()
    pad = ~sm.valid_masks(pot, lengths)[0].expand_as(pot)
    values = torch.tensor([float("nan"), float("inf"), float("-inf"), 1e30], dtype=F64)
    dirty[pad] = values[torch.arange(int(pad.sum())) % 4]
    _close(sm.log_partition(dirty, lengths), sm.log_partition(pot, lengths))
    marg = sm.marginals(dirty, lengths)
    _close(marg, sm.marginals(pot, lengths))
    assert (marg[pad] == 0).all()
    assert torch.equal(sm.argmax(dirty, lengths)[0], sm.argmax(pot, lengths)[0])
    assert torch.equal(sm.kbest(dirty, 3, lengths)[0], sm.kbest(pot, 3, lengths)[0])
    labels = sm.argmax(pot, lengths)[0]
    assert (labels[1, 2:] == 0).all() and (labels[2, 1:] == 0).all()


@pytest.mark.parametrize("scale", [1e-8, 1e3, 1e6])
def test_extreme_scales(scale: float) -> None:
    sm = _chain(3, BIO)
    g = torch.Generator().manual_seed(4)
    pot = scale * torch.randn(2, 4, 3, 3, 3, generator=g, dtype=F64)
    lengths = torch.tensor([4, 3])
    log_z = sm.log_partition(pot, lengths)
    marg = sm.marginals(pot, lengths)
    assert torch.isfinite(log_z).all() and torch.isfinite(marg).all()
    for b in range(2):
        scores = torch.stack(
            [brute_score(pot[b], s) for s in segmentations(int(lengths[b]), sm)]
        )
        torch.testing.assert_close(log_z[b], torch.logsumexp(scores, 0), rtol=1e-9, atol=1e-9)
        _close(sm.max(pot, lengths)[b], scores.max())
    # marginals of a valid position sum to one token's worth: each token is in one segment
    tags = sm.node_parts(marg)
    _close(tags.sum(2), sm.valid_mask(lengths, 4).to(F64))


def test_plus_inf_and_nan_are_rejected_and_empty_examples_named() -> None:
    sm = _chain(2, labels=2)
    pot = torch.zeros(2, 3, 2, 2, 2, dtype=F64)
    bad = pot.clone()
    bad[1, 0, 0, 0, 1] = float("inf")
    with pytest.raises(ValueError, match=r"\+inf.*example 1"):
        sm.log_partition(bad)
    bad[1, 0, 0, 0, 1] = float("nan")
    with pytest.raises(ValueError, match=r"NaN.*example 1"):
        sm.marginals(bad)
    empty = pot.clone()
    empty[1, 0] = float("-inf")  # no segment can start at token 0
    with pytest.raises(ValueError, match=r"example 1 has no valid structure"):
        sm.log_partition(empty)
    with pytest.raises(ValueError, match=r"example 1 has no valid structure"):
        sm.argmax(empty)
    quiet = SemiMarkov(2, num_segment_labels=2, validate=False)
    assert torch.isneginf(quiet.log_partition(empty)[1])
    assert (quiet.marginals(empty)[1] == 0).all()


# ---------------------------------------------------------------------- autograd
def test_gradcheck_and_gradgradcheck() -> None:
    sm = _chain(3, BIO)
    g = torch.Generator().manual_seed(5)
    pot = torch.randn(2, 4, 3, 3, 3, generator=g, dtype=F64)
    pot[:, :, 1:, :, 0] = 0.0  # forbidden by the structure: their gradient is 0
    lengths = torch.tensor([4, 3])
    x = pot.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda p: sm.log_partition(p, lengths), (x,))
    assert torch.autograd.gradgradcheck(lambda p: sm.log_partition(p, lengths), (x,))
    marg = sm.marginals(x, lengths, create_graph=True)
    (second,) = torch.autograd.grad(marg[:, :, 0].sum(), x)
    assert torch.isfinite(second).all()


def test_argmax_scores_are_differentiable_and_inference_mode_works() -> None:
    sm = _chain(3, BIO)
    g = torch.Generator().manual_seed(6)
    pot = torch.randn(3, 6, 3, 3, 3, generator=g, dtype=F64, requires_grad=True)
    lengths = torch.tensor([6, 2, 4])
    labels, scores = sm.argmax(pot, lengths)
    (grad,) = torch.autograd.grad(scores.sum(), pot)
    _close(grad, sm.to_parts(labels, lengths).to(F64))
    before = pot.detach().clone()
    with torch.inference_mode():
        labels2, _ = sm.argmax(pot, lengths)
        kb, _ = sm.kbest(pot, 3, lengths)
        marg = sm.marginals(pot, lengths)
    assert torch.equal(labels2, labels) and torch.equal(kb[:, 0], labels)
    assert torch.isfinite(marg).all() and pot.grad is None and torch.equal(pot.detach(), before)


# ---------------------------------------------------------------------- tags and costs
def test_bio_tags_are_canonicalised_and_long_segments_rejected() -> None:
    sm = _chain(2, BIO)
    # I-PER at the start and after O begins a segment (the conlleval reading)
    y = torch.tensor([[2, 0, 2, 2, 4]])
    canon = sm.check_labels(y, torch.tensor([5]))
    assert canon.tolist() == [[1, 0, 1, 2, 3]]
    assert sm.segments(y) == [[(0, 1, "PER"), (1, 2, "O"), (2, 4, "PER"), (4, 5, "LOC")]]
    # a gold segment longer than K is split into pieces of K tokens (or rejected)
    long = torch.tensor([[0, 1, 2, 2, 2, 2, 2, 0]])
    assert sm.check_labels(long, torch.tensor([8])).tolist() == [[0, 1, 2, 1, 2, 1, 2, 0]]
    strict = SemiMarkov(2, tags=BIO, long_segments="error")
    with pytest.raises(ValueError, match=r"segment of 3 tokens at example 0, position 1.*max_length = 2"):
        strict.score(torch.zeros(1, 5, 2, 3, 3), torch.tensor([[0, 1, 2, 2, 0]]))
    with pytest.raises(ValueError, match=r"long_segments must be 'split' or 'error'"):
        SemiMarkov(2, tags=BIO, long_segments="drop")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"tags in \[0, T\) = \[0, 5\).*\[0, 7\]"):
        sm.score(torch.zeros(1, 5, 2, 3, 3), torch.tensor([[0, 7, 0, 0, 0]]))


def test_hamming_counts_token_tags() -> None:
    sm = _chain(3, BIO)
    target = torch.tensor([[1, 2, 0, 3, 0]])
    for seg in segmentations(5, sm):
        y = tags_of(seg, sm, 5).unsqueeze(0)
        assert int(sm.hamming(target, y)[0]) == int((y != target).sum())


def test_segment_tags_table() -> None:
    codec = SegmentTags(["B-A", "O", "I-A", "B-B"])
    assert codec.labels == ("A", "O", "B") and codec.begin.tolist() == [0, 1, 3]
    assert codec.inside.tolist() == [2, -1, -1]
    assert SegmentTags.generic(2).tags == ("B-0", "I-0", "B-1", "I-1")
    with pytest.raises(ValueError, match=r"labels \['A'\] have only I- tags"):
        SegmentTags(["O", "I-A"])
    with pytest.raises(ValueError, match=r"distinct"):
        SegmentTags(["O", "O"])


# ---------------------------------------------------------------------- errors
def test_errors_name_the_argument() -> None:
    with pytest.raises(ValueError, match=r"max_length must be an int >= 1; got 0"):
        SemiMarkov(0, num_segment_labels=2)
    with pytest.raises(ValueError, match=r"max_length must be an int >= 1; got -1"):
        SemiMarkov(-1, tags=BIO)
    with pytest.raises(ValueError, match=r"at most one of num_segment_labels and tags"):
        SemiMarkov(2, num_segment_labels=2, tags=BIO)
    sm = SemiMarkov(3, tags=BIO)
    with pytest.raises(ValueError, match=r"\(B, N, K, C, C\) with K = max_length = 3 and C = 3.*got \(2, 4, 2, 3, 3\)"):
        sm.log_partition(torch.zeros(2, 4, 2, 3, 3))
    # torch-struct's layout (B, N - 1, K + 1, C, C) is the wrong size here
    with pytest.raises(ValueError, match=r"got \(2, 3, 4, 3, 3\)"):
        sm.log_partition(torch.zeros(2, 3, 4, 3, 3))
    with pytest.raises(ValueError, match=r"lengths must be in \[1, N\] = \[1, 4\]"):
        sm.log_partition(torch.zeros(2, 4, 3, 3, 3), torch.tensor([5, 1]))
    with pytest.raises(ValueError, match=r"no tag set"):
        SemiMarkov(2).log_partition(torch.zeros(1, 2, 2, 1, 1))
    with pytest.raises(TypeError, match=r"single tensor"):
        sm.log_partition((torch.zeros(1, 2, 3, 3, 3),))


def test_resolve_sizes_takes_the_data_tags() -> None:
    sm = SemiMarkov(4)
    sm.resolve_sizes({"num_labels": 5, "tags": BIO})
    assert sm.num_labels == 5 and sm.num_segment_labels == 3
    with pytest.raises(ValueError, match=r"do not match the data's tags"):
        sm.resolve_sizes({"num_labels": 3, "tags": ["O", "B-X", "I-X"]})
    with pytest.raises(ValueError, match=r"needs tag names"):
        SemiMarkov(4).resolve_sizes({"num_labels": 5})


# ---------------------------------------------------------------------- torch-struct
def test_against_torch_struct() -> None:
    """Each example at its own length: torch-struct 0.5's SemiMarkov is wrong on ragged batches
    (it masks with the batch's shortest length; see tests/test_torch_struct_adapter.py)."""
    torch_struct = pytest.importorskip("torch_struct")
    sm = _chain(3, labels=3)
    g = torch.Generator().manual_seed(7)
    pot = torch.randn(4, 6, 3, 3, 3, generator=g, dtype=F64)
    lengths = torch.tensor([6, 4, 6, 2])
    log_z, best = sm.log_partition(pot, lengths), sm.max(pot, lengths)
    marg = sm.marginals(pot, lengths)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for b in range(4):
            n = int(lengths[b])
            dist = torch_struct.SemiMarkovCRF(to_torch_struct(pot[b : b + 1, :n]))
            _close(log_z[b : b + 1], dist.partition)
            _close(best[b : b + 1], dist.max)
            ts_marg = dist.marginals[0, :, 1:].transpose(-1, -2)  # back to the native layout
            _close(marg[b, :n], ts_marg)


# ---------------------------------------------------------------------- the scorer
def test_scorer_segment_potentials_follow_the_formula() -> None:
    from structssl.scorers import SemiMarkovScorer

    torch.manual_seed(0)
    scorer = SemiMarkovScorer(3, tags=BIO, input_dim=4, init_std=1.0).double()
    for p in (scorer.length, scorer.transition, scorer.start, scorer.end):
        torch.nn.init.normal_(p)
    torch.nn.init.normal_(scorer.emission.bias)
    x = torch.randn(2, 5, 4, dtype=F64)
    lengths = torch.tensor([5, 3])
    pot = scorer(x, lengths)
    sm = SemiMarkov(3, tags=BIO)
    u = x @ scorer.emission.weight + scorer.emission.bias  # (B, N, T) tag scores
    codec = sm.codec
    for b in range(2):
        n = int(lengths[b])
        for seg in segmentations(n, sm):
            expected = pot.new_zeros(())
            prev = None
            for s, size, lab in seg:
                expected = expected + u[b, s, codec.begin[lab]] + scorer.length[size - 1, lab]
                for q in range(s + 1, s + size):
                    expected = expected + u[b, q, codec.inside[lab]]
                expected = expected + (scorer.start[lab] if prev is None else scorer.transition[prev, lab])
                if s + size == n:
                    expected = expected + scorer.end[lab]
                prev = lab
            y = tags_of(seg, sm, 5).unsqueeze(0)
            _close(sm.score(pot[b : b + 1], y, lengths[b : b + 1])[0], expected)
    assert (pot[1, 2, 1:] == 0).all() and (pot[1, 3:] == 0).all()  # past the length
    with pytest.raises(ValueError, match=r"needs tags"):
        SemiMarkovScorer(3).resolve_sizes({"num_features": 10})
    lazy = SemiMarkovScorer(3)
    lazy.resolve_sizes({"tags": BIO, "num_labels": 5, "input_dim": 4})
    assert lazy(torch.zeros(1, 2, 4)).shape == (1, 2, 3, 3, 3)


def test_tutorial_runs_as_written() -> None:
    """docs/tutorial_structure.md: every python block, in order, in one namespace."""
    import re
    from pathlib import Path

    doc = Path(__file__).resolve().parents[1] / "docs" / "tutorial_structure.md"
    blocks = re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S)
    assert len(blocks) >= 7
    namespace: dict = {"__name__": "tutorial"}
    exec(compile("\n".join(blocks), str(doc), "exec"), namespace)  # noqa: S102
    assert namespace["accuracy"] > 0.85
