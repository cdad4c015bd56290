"""Padding / collate functions and the synthetic generators."""

from __future__ import annotations

import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from structssl.data.batch import collate_sequences, collate_trees, pad_features, pad_sequences
from structssl.data.records import Vocabulary
from structssl.data.synthetic import (
    correlated_multilabel,
    galaxy_points,
    hmm_sequences,
    pcfg_treebank,
)
from structssl.data.formats.treebank import spans_to_tree


def test_pad_sequences_and_features() -> None:
    padded, lengths = pad_sequences([torch.tensor([1, 2, 3]), torch.tensor([4])])
    assert padded.tolist() == [[1, 2, 3], [4, 0, 0]] and lengths.tolist() == [3, 1]
    assert lengths.dtype == torch.long
    feats, lengths = pad_features([torch.tensor([[1, 2], [3, 0]]), torch.tensor([[5, 6, 7]])])
    assert feats.shape == (2, 2, 3) and feats[1].tolist() == [[5, 6, 7], [0, 0, 0]]
    with pytest.raises(ValueError, match="sequences must hold at least one tensor"):
        pad_sequences([])
    with pytest.raises(
        ValueError,
        match=re.escape(
            "sequences must share a dtype; sequences[0] is torch.int64, sequences[1] is torch.float32"
        ),
    ):
        pad_sequences([torch.tensor([1]), torch.tensor([1.0])])
    with pytest.raises(
        ValueError,
        match=re.escape("features[0] must be a 2-D long tensor (n, F); got 1-D torch.int64"),
    ):
        pad_features([torch.tensor([1])])


def test_collate_sequences() -> None:
    examples = [
        {
            "labels": torch.tensor([1, 2]),
            "features": torch.tensor([[3], [4]]),
            "id": 7,
            "y": torch.tensor(1.0),
        },
        {
            "labels": torch.tensor([5]),
            "features": torch.tensor([[6, 8]]),
            "id": 9,
            "y": torch.tensor(2.0),
        },
    ]
    batch = collate_sequences(examples)
    assert batch["labels"].tolist() == [[1, 2], [5, 0]]
    assert batch["features"].tolist() == [[[3, 0], [4, 0]], [[6, 8], [0, 0]]]
    assert batch["lengths"].tolist() == [2, 1] and batch["id"] == [7, 9]
    assert batch["y"].tolist() == [1.0, 2.0]
    unlabeled = collate_sequences([{"inputs": torch.ones(3, 2)}, {"inputs": torch.ones(1, 2)}])
    assert unlabeled["inputs"].shape == (2, 3, 2) and unlabeled["lengths"].tolist() == [3, 1]
    with pytest.raises(
        ValueError,
        match=re.escape(
            "examples[0] has per-position tensors of different lengths: {'labels': 2, 'inputs': 3}"
        ),
    ):
        collate_sequences(
            [{"labels": torch.zeros(2, dtype=torch.long), "inputs": torch.zeros(3, 1)}]
        )
    with pytest.raises(ValueError, match="examples must have a per-position tensor under one of"):
        collate_sequences([{"x": torch.zeros(2)}])
    with pytest.raises(ValueError, match="examples must share their keys"):
        collate_sequences([{"labels": torch.zeros(1)}, {"inputs": torch.zeros(1)}])


def test_collate_sequences_in_a_dataloader() -> None:
    data = hmm_sequences(num_sequences=5, length=6, min_length=2, seed=3)
    loader = torch.utils.data.DataLoader(
        data.examples(), batch_size=5, collate_fn=collate_sequences
    )
    batch = next(iter(loader))
    assert torch.equal(batch["lengths"], data.lengths)
    n = int(data.lengths.max())
    assert torch.equal(batch["labels"], data.labels[:, :n]) and torch.equal(
        batch["inputs"], data.inputs[:, :n]
    )


# ------------------------------------------------------------------------------ synthetic
def test_hmm_galaxy_defaults() -> None:
    data = hmm_sequences()
    assert data.inputs.shape == (100, 20, 2) and data.labels.shape == (100, 20)
    assert data.inputs.dtype == torch.get_default_dtype() and data.labels.dtype == torch.long
    assert data.lengths.tolist() == [20] * 100
    torch.testing.assert_close(data.start, torch.full((2,), 0.5, dtype=torch.float64))
    torch.testing.assert_close(
        data.transition, torch.tensor([[0.9, 0.1], [0.1, 0.9]], dtype=torch.float64)
    )
    switches = (data.labels[:, 1:] != data.labels[:, :-1]).double().mean()
    assert 0.07 < float(switches) < 0.13  # 1,900 Bernoulli(0.1) draws
    assert 0.35 < float(data.labels[:, 0].double().mean()) < 0.65  # uniform start (100 draws)
    assert float(data.inputs.norm(dim=-1).max()) < 2.0  # spirals of radius <= 1.5 plus noise
    again = hmm_sequences()
    assert torch.equal(again.inputs, data.inputs) and torch.equal(again.labels, data.labels)
    assert not torch.equal(hmm_sequences(seed=1).labels, data.labels)


def test_galaxy_arms_are_separable_by_nearest_neighbour() -> None:
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 2, (400,), generator=g)
    points = galaxy_points(labels, seed=g, dtype=torch.float64)
    d = torch.cdist(points, points)
    d.fill_diagonal_(float("inf"))
    nearest = labels[d.argmin(-1)]
    assert float((nearest == labels).double().mean()) > 0.95


def test_hmm_gaussian_general_sizes() -> None:
    g = torch.Generator().manual_seed(5)
    data = hmm_sequences(
        num_sequences=50,
        length=9,
        num_states=4,
        switch_prob=0.3,
        emission="gaussian",
        dim=3,
        separation=4.0,
        min_length=3,
        seed=g,
        dtype=torch.float64,
    )
    assert data.inputs.shape == (50, 9, 3) and data.means.shape == (4, 3)
    torch.testing.assert_close(data.means.norm(dim=-1), torch.full((4,), 4.0, dtype=torch.float64))
    assert int(data.lengths.min()) >= 3 and int(data.lengths.max()) <= 9
    pad = torch.arange(9) >= data.lengths[:, None]
    assert data.labels[pad].abs().sum() == 0 and data.inputs[pad].abs().sum() == 0
    torch.testing.assert_close(data.transition.sum(-1), torch.ones(4, dtype=torch.float64))
    with pytest.raises(ValueError, match="dim must be 2 with emission='galaxy'; got 3"):
        hmm_sequences(dim=3)
    with pytest.raises(ValueError, match="num_states must be an int >= 2; got 1"):
        hmm_sequences(num_states=1)
    with pytest.raises(ValueError, match=re.escape("switch_prob must be in [0, 1]; got 1.5")):
        hmm_sequences(switch_prob=1.5)
    with pytest.raises(TypeError, match="seed must be an int or a torch.Generator; got str"):
        hmm_sequences(seed="0")  # type: ignore[arg-type]


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 1000),
    nt=st.integers(1, 4),
    pt=st.integers(1, 4),
    min_length=st.integers(1, 4),
)
def test_pcfg_treebank_trees_are_valid(seed: int, nt: int, pt: int, min_length: int) -> None:
    data = pcfg_treebank(
        num_sentences=8,
        num_nonterminals=nt,
        num_preterminals=pt,
        vocab_size=7,
        min_length=min_length,
        max_length=6,
        seed=seed,
    )
    assert data.spans.shape == (8, 11, 3) and data.words.shape == (8, 6)
    symbols = Vocabulary(data.symbol_names)
    for ex, n in zip(data.examples(), data.lengths.tolist()):
        spans = ex["spans"]
        tree = spans_to_tree(
            [str(w) for w in ex["words"].tolist()], spans, symbols
        )  # valid pre-order tree
        assert len(tree.leaves()) == n
        width1 = spans[:, 0] == spans[:, 1]
        assert bool((spans[width1, 2] >= nt).all()) and bool((spans[~width1, 2] < nt).all())
        if n > 1:
            assert int(spans[0, 2]) == 0
        assert int(ex["words"].max()) < 7
    pad_rows = torch.arange(11) >= (2 * data.lengths - 1)[:, None]
    assert data.spans[pad_rows].abs().sum() == 0
    batch = collate_trees(data.examples())
    assert torch.equal(batch["lengths"], data.lengths)
    width = 2 * int(data.lengths.max()) - 1
    assert torch.equal(batch["spans"], data.spans[:, :width])
    torch.testing.assert_close(data.rules.sum((-1, -2)), torch.ones(nt, dtype=torch.float64))


def test_pcfg_is_deterministic_and_leaves_global_rng() -> None:
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = pcfg_treebank(num_sentences=5, seed=4)
    after = torch.rand(1)
    b = pcfg_treebank(num_sentences=5, seed=4)
    assert torch.equal(before, after)
    assert torch.equal(a.spans, b.spans) and torch.equal(a.words, b.words)
    with pytest.raises(ValueError, match="min_length must be <= max_length=3; got 4"):
        pcfg_treebank(min_length=4, max_length=3)


@pytest.mark.parametrize("method", ["latent_factor", "pairwise"])
def test_correlated_multilabel(method: str) -> None:
    data = correlated_multilabel(
        num_examples=2000, num_labels=4, num_features=5, method=method, coupling=2.0, seed=1
    )  # type: ignore[arg-type]
    assert data.inputs.shape == (2000, 5) and data.labels.shape == (2000, 4)
    assert data.labels.dtype == torch.long and set(data.labels.unique().tolist()) <= {0, 1}
    corr = torch.corrcoef(data.labels.T.double())
    off = corr[~torch.eye(4, dtype=torch.bool)]
    assert float(off.abs().max()) > 0.2  # labels are correlated
    again = correlated_multilabel(
        num_examples=2000, num_labels=4, num_features=5, method=method, coupling=2.0, seed=1
    )  # type: ignore[arg-type]
    assert torch.equal(again.labels, data.labels)


def test_pairwise_multilabel_matches_exact_distribution() -> None:
    # with one input feature set to zero the conditional is the same for every example
    data = correlated_multilabel(
        num_examples=4000, num_labels=2, num_features=1, method="pairwise", coupling=2.0, seed=2
    )
    j = float(data.pairwise[0, 1])
    u = data.unary_weights.double()
    x = data.inputs.double()
    configs = torch.tensor([[0, 0], [1, 0], [0, 1], [1, 1]], dtype=torch.float64)
    bias = -0.5 * torch.tensor([j, j], dtype=torch.float64)
    scores = x @ u @ configs.T + configs @ bias + j * configs[:, 0] * configs[:, 1]
    expected = torch.softmax(scores, -1).mean(0)
    index = data.labels[:, 0] + 2 * data.labels[:, 1]
    observed = torch.bincount(index, minlength=4).double() / 4000
    torch.testing.assert_close(observed, expected, atol=0.03, rtol=0)
    with pytest.raises(ValueError, match="num_labels must be <= 16 with method='pairwise'"):
        correlated_multilabel(num_labels=17, method="pairwise")


def test_batch_to_device_keeps_token_lists_and_structure() -> None:
    """The data modules' transfer hook: tensors moved, token lists kept as the same objects
    (not walked string by string), dicts / lists / named tuples rebuilt with their types."""
    import collections

    from structssl.data.batch import batch_to_device

    pair = collections.namedtuple("pair", "a b")
    tokens = [("El", "Grupo"), ("Madrid",)]
    batch = {"labeled": [{"inputs": torch.ones(2, 3), "tokens": tokens}], "unlabeled": None,
             "parts": pair(torch.zeros(1), [torch.ones(1)]), "empty": [], "words": ("a", "b")}
    out = batch_to_device(batch, torch.device("cpu"))
    assert out["labeled"][0]["tokens"] is tokens and out["words"] is batch["words"]
    assert torch.equal(out["labeled"][0]["inputs"], batch["labeled"][0]["inputs"])
    assert isinstance(out["parts"], pair) and torch.equal(out["parts"].b[0], torch.ones(1))
    assert out["unlabeled"] is None and out["empty"] == []
    if torch.cuda.is_available():
        moved = batch_to_device(batch, torch.device("cuda"))
        assert moved["labeled"][0]["inputs"].is_cuda and moved["parts"].b[0].is_cuda
        assert moved["labeled"][0]["tokens"] is tokens


def test_collate_refuses_dense_rows_of_other_widths_and_scalar_examples() -> None:
    """Dense (float) per-position inputs of different widths would be zero-padded into
    another feature space; 0-dim examples (one class each) need stack_collate."""
    examples = [{"inputs": torch.zeros(3, 6), "labels": torch.zeros(3, dtype=torch.long)},
                {"inputs": torch.zeros(2, 7), "labels": torch.zeros(2, dtype=torch.long)}]
    with pytest.raises(ValueError, match=re.escape(
            "examples[1]['inputs'] has shape (2, 7) and examples[0]['inputs'] (3, 6)")):
        collate_sequences(examples)
    sparse = [{"features": torch.zeros(3, 2, dtype=torch.long)},
              {"features": torch.zeros(2, 4, dtype=torch.long)}]
    assert collate_sequences(sparse)["features"].shape == (2, 3, 4)  # slots are padded
    with pytest.raises(ValueError, match=r"examples\[0\]\['labels'\] must be a per-position "
                       r"tensor .* got a 0-dim tensor of shape \(\).*stack_collate"):
        collate_sequences([{"inputs": torch.zeros(5), "labels": torch.tensor(1)}])
