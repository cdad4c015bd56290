"""structssl.memo: values kept per tensor, and the input checks that use it still catch every
bad value (an in-place change, also through a view, checks again)."""

from __future__ import annotations

import pytest
import torch

from structssl.memo import TensorMemo
from structssl.scorers import LinearChainScorer
from structssl.structures import ChainPotentials, LinearChain


def _counting(memo: TensorMemo, x: torch.Tensor, also: tuple = ()) -> list[int]:
    calls: list[int] = []

    def make() -> int:
        calls.append(1)
        return int(x.sum())

    memo.get(x, make, also)
    return calls


def test_kept_per_tensor_until_it_changes() -> None:
    memo: TensorMemo[int] = TensorMemo()
    x = torch.arange(6)
    assert _counting(memo, x) == [1]
    assert _counting(memo, x) == []  # kept
    assert _counting(memo, x.clone()) == [1]  # another tensor, equal values
    x[0] = 5  # in place
    assert _counting(memo, x) == [1]
    x.view(2, 3)[1, 2] = 7  # through a view: the shared version counter
    assert _counting(memo, x) == [1]
    assert memo.get(x, lambda: -1) == int(x.sum())


def test_also_tensors_by_identity_and_version() -> None:
    memo: TensorMemo[int] = TensorMemo()
    x, lengths = torch.arange(4), torch.tensor([2, 2])
    assert _counting(memo, x, (lengths,)) == [1]
    assert _counting(memo, x, (lengths,)) == []
    assert _counting(memo, x, (lengths.clone(),)) == [1]  # equal values, another tensor
    # another tensor object with the same storage, version, shape and strides (as a new tensor
    # at a freed one's address can have): compared by identity, so computed again
    assert _counting(memo, x, (lengths,)) == [1]
    assert _counting(memo, x, (lengths.view(2),)) == [1]
    lengths[0] = 1
    assert _counting(memo, x, (lengths,)) == [1]
    assert _counting(memo, x, ()) == [1]  # another key set


def test_inference_tensors_are_never_kept() -> None:
    memo: TensorMemo[int] = TensorMemo()
    with torch.inference_mode():
        x = torch.arange(3)
    assert _counting(memo, x) == [1]
    assert _counting(memo, x) == [1]


def test_entries_go_with_their_tensor() -> None:
    memo: TensorMemo[int] = TensorMemo()
    x = torch.arange(3)
    memo.get(x, lambda: 0)
    assert len(memo._store) == 1
    del x
    assert len(memo._store) == 0


def test_checks_see_in_place_changes_of_labels_lengths_and_potentials() -> None:
    chain = LinearChain(3)
    emissions = torch.zeros(2, 4, 3)
    pot = ChainPotentials.from_factors(emissions, torch.zeros(3, 3))
    labels = torch.tensor([[0, 1, 2, 0], [1, 1, 0, 0]])
    lengths = torch.tensor([4, 2])
    chain.score(pot, labels, lengths)
    chain.score(pot, labels, lengths)  # kept ranges and verdicts
    labels[1, 1] = 3  # out of range at a valid position
    with pytest.raises(ValueError, match=r"labels must be in \[0, C\) = \[0, 3\).*\[0, 3\]"):
        chain.score(pot, labels, lengths)
    labels[1, 1] = 0
    labels[1, 3] = 7  # padding may hold anything
    chain.score(pot, labels, lengths)
    lengths[1] = 0
    with pytest.raises(ValueError, match=r"lengths must be in \[1, N\]"):
        chain.log_partition(pot, lengths)
    lengths[1] = 2
    chain.log_partition(pot, lengths)
    emissions[0, 1, 2] = float("nan")  # the same tensors, now with a NaN
    with pytest.raises(ValueError, match="potentials contain NaN"):
        chain.log_partition(pot, lengths)
    edges = torch.zeros(1, 3, 3, 3)
    chain.log_partition(edges)
    edges[0, 1, 0, 0] = float("inf")
    with pytest.raises(ValueError, match=r"potentials contain \+inf"):
        chain.log_partition(edges)


def test_scorer_sees_in_place_changes_of_feature_indices() -> None:
    scorer = LinearChainScorer(num_labels=2, num_features=5)
    inputs, lengths = torch.tensor([[[1, 2], [3, 0]]]), torch.tensor([2])
    scorer(inputs, lengths)
    scorer(inputs, lengths)
    inputs[0, 1, 1] = 5  # out of range
    with pytest.raises(ValueError, match=r"feature indices\) must be in \[0, num_features\) = "
                                         r"\[0, 5\); got values in \[1, 5\]"):
        scorer(inputs, lengths)
