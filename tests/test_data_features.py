"""Token feature extraction into sparse indices, and the two-view split."""

from __future__ import annotations

import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from structssl.data.features import (
    TOKEN_VIEW_TEMPLATES,
    FeatureExtractor,
    ViewSplit,
    token_shape,
)
from structssl.data.records import Sequence

SENTENCES = [
    ["Por", "el", "Grupo", '"', "Magenta", '"', "CrimeNet", "34.32", "1975", "Lasa-Zabala"],
    ["El", "Grupo", "HSF1", "."],
]


def test_token_shape() -> None:
    assert token_shape("Lasa-Zabala") == "Xxxx-Xxxxxx"
    assert token_shape("Lasa-Zabala", short=True) == "Xx-Xx"
    assert token_shape("34.32", short=True) == "d.d"
    assert token_shape("Ñandú") == "Xxxxx"


def test_surface_clue_strings() -> None:
    fx = FeatureExtractor(window=0)
    feats = fx.strings(SENTENCES[0])
    assert "position[0]=first" in feats[0] and "bias" in feats[0]
    assert "cap[0]=init_upper" in feats[0] and "cap[0]=init_lower" in feats[1]
    assert "quoted[0]=inside" in feats[4] and "quoted[0]=inside" not in feats[2]
    assert "quoted[0]=inside" not in feats[5] and "quoted[0]=inside" not in feats[3]
    assert {"cap[0]=mixed", "cap[0]=upper_at:5"} <= set(feats[6])
    assert {"digits[0]=digit_dot_digit", "digits[0]=has_digit"} <= set(feats[7])
    assert "digits[0]=number" in feats[8]
    assert {"special[0]=has_hyphen", "special[0]=has_special", "short_shape[0]=Xx-Xx"} <= set(
        feats[9]
    )
    assert "position[0]=last" in feats[9]
    assert {
        "prefix[0]=p3:las",
        "suffix[0]=s2:la",
        "lower[0]=lasa-zabala",
        "word[0]=Lasa-Zabala",
    } <= set(feats[9])
    assert "digits[0]=alnum" in fx.strings(SENTENCES[1])[2]
    grams = FeatureExtractor(templates=("ngram",), window=0, ngram_orders=(2,)).strings(["abc"])
    assert grams == [["ngram[0]=ab", "ngram[0]=bc"]]


def test_window_features_and_boundaries() -> None:
    fx = FeatureExtractor(templates=("lower",), window=2, window_templates=("lower",))
    feats = fx.strings(["A", "b", "C"])
    assert sorted(feats[0]) == sorted(
        ["lower[0]=a", "lower[-2]=<s>", "lower[-1]=<s>", "lower[1]=b", "lower[2]=c"]
    )
    assert sorted(feats[2]) == sorted(
        ["lower[0]=c", "lower[-2]=a", "lower[-1]=b", "lower[1]=</s>", "lower[2]=</s>"]
    )


def test_fit_min_count_unseen_and_padding() -> None:
    fx = FeatureExtractor(templates=("bias", "lower"), window=0, min_count=2)
    fx.fit([["a", "b"], ["a", "c"]])
    assert fx.feature_names == ("<pad>", "bias", "lower[0]=a")
    assert fx.num_features == 3
    enc = fx.encode(["a", "zzz", "b"])
    assert enc.tolist() == [[2, 1], [1, 0], [1, 0]]  # unseen -> nothing, rows padded with 0
    batch = fx.transform_batch([["a"], ["b", "a", "a"]])
    assert batch.indices.shape == (2, 3, 2) and batch.lengths.tolist() == [1, 3]
    assert batch.mask.tolist()[0] == [[True, True], [False, False], [False, False]]
    assert fx.encode([]).shape == (0, 0)


def test_embedding_bag_scorer_matches_manual_sum() -> None:
    fx = FeatureExtractor().fit(SENTENCES)
    batch = fx.transform_batch(SENTENCES)
    weight = torch.randn(fx.num_features, 3, dtype=torch.float64)
    weight[0] = 0
    bag = torch.nn.EmbeddingBag.from_pretrained(weight, mode="sum", padding_idx=0)
    b, n, f = batch.indices.shape
    unary = bag(batch.indices.view(-1, f)).view(b, n, 3)
    for i, sentence in enumerate(SENTENCES):
        for t, strings in enumerate(fx.strings(sentence)):
            ids = [fx.vocabulary.index(s) for s in set(strings)]  # type: ignore[union-attr]
            torch.testing.assert_close(unary[i, t], weight[ids].sum(0))


_WORDS = st.sampled_from(["a", "B", "c1", '"', "(", ")", "«", "»", "'", "Xy"])


@settings(max_examples=40, deadline=None)
@given(
    sentences=st.lists(st.lists(_WORDS, min_size=1, max_size=7), min_size=1, max_size=6),
    window=st.integers(0, 2),
    min_count=st.integers(1, 3),
    with_given=st.booleans(),
)
def test_fit_and_encode_equal_the_strings_of_every_position(
    sentences: list[list[str]], window: int, min_count: int, with_given: bool
) -> None:
    # fit counts each (token, offset) pair's strings and each position pattern's strings once,
    # encode caches both: the same vocabulary and rows as counting and looking up
    # strings() of every position (quotes, sentence ends, windows, provided features)
    records = [
        Sequence(tokens=tuple(s), labels=None, features=tuple((w.lower(), str(len(w))) for w in s))
        for s in sentences
    ]
    templates = ("bias", "lower", "short_shape", "position", "quoted") + (
        ("given",) if with_given else ()
    )
    window_templates = ("lower", "quoted", "position") + (("given",) if with_given else ())
    fx = FeatureExtractor(
        templates=templates, window=window, window_templates=window_templates,
        min_count=min_count,
    ).fit(records)
    counts: dict[str, int] = {}
    for r in records:
        for row in fx.strings(r):
            for f in row:
                counts[f] = counts.get(f, 0) + 1
    assert fx.feature_names == ("<pad>", *sorted(f for f, c in counts.items() if c >= min_count))
    for r in records:
        enc = fx.encode(r)
        for t, row in enumerate(fx.strings(r)):
            vocabulary = fx.vocabulary
            assert vocabulary is not None
            expected = sorted(i for f in row if (i := vocabulary.get(f)) is not None)
            got = enc[t].tolist()
            assert sorted(i for i in got if i) == expected
            assert got == [i for i in got if i] + [0] * got.count(0)  # padding at the end


def test_given_features_from_records() -> None:
    seqs = [
        Sequence(
            tokens=("Smith", "."),
            labels=("author", "author"),
            features=(("smith", "_start_", "."), (".", "smith", "_end_")),
        ),
    ]
    fx = FeatureExtractor(templates=("given",), window=1, window_templates=("given",)).fit(seqs)
    assert "given0[0]=smith" in fx.feature_names and "given2[-1]=." in fx.feature_names
    assert "given[1]=</s>" in fx.feature_names  # one boundary feature per template
    with pytest.raises(
        ValueError, match="the 'given' template needs provided features; sentence 0 has none"
    ):
        fx.fit([["a", "b"]])


def test_extractor_argument_errors() -> None:
    with pytest.raises(ValueError, match=re.escape("templates must be drawn from")):
        FeatureExtractor(templates=("word", "pos"))
    with pytest.raises(ValueError, match="window must be an int >= 0; got -1"):
        FeatureExtractor(window=-1)
    with pytest.raises(ValueError, match="min_count must be an int >= 1; got 0"):
        FeatureExtractor(min_count=0)
    with pytest.raises(RuntimeError, match="needs fit"):
        FeatureExtractor().encode(["a"])
    with pytest.raises(TypeError, match="got a str"):
        FeatureExtractor().fit(["abc"])


def test_view_split_token_surface() -> None:
    fx = FeatureExtractor(templates=("bias", "word", "lower", "shape", "cap"), window=0).fit(
        SENTENCES
    )
    split = ViewSplit(fx.feature_names)
    names = fx.feature_names
    for i, name in enumerate(names):
        a = int(split.assignment[i])
        if i == 0:
            assert a == -1
        elif name == "bias":
            assert a == 2
        else:
            assert a == (0 if name.split("[")[0] in TOKEN_VIEW_TEMPLATES else 1)
    batch = fx.transform_batch(SENTENCES)
    first, second = split.split_batch(batch)
    assert first.num_features + second.num_features == fx.num_features + 2  # bias and pad in both
    # view 0 of the first token: bias, word, lower
    assert int(first.mask[0, 0].sum()) == 3 and torch.equal(first.lengths, batch.lengths)


@settings(max_examples=25, deadline=None)
@given(
    scheme=st.sampled_from(["token_surface", "random", "odd_even"]),
    seed=st.integers(0, 100),
    data=st.data(),
)
def test_view_split_partitions_features(scheme: str, seed: int, data: st.DataObject) -> None:
    fx = FeatureExtractor().fit(SENTENCES)
    split = ViewSplit(fx.feature_names, scheme=scheme, seed=seed)  # type: ignore[arg-type]
    size = fx.num_features
    indices = torch.tensor(
        data.draw(
            st.lists(
                st.lists(st.integers(0, size - 1), min_size=4, max_size=4), min_size=1, max_size=5
            )
        )
    )
    views = split(indices)
    # every original feature appears in exactly its view(s), re-indexed injectively
    for v, packed in enumerate(views):
        back = {int(j): i for i, j in enumerate(split._remap[v].tolist()) if j}
        for row, out in zip(indices.tolist(), packed.tolist()):
            expected = sorted(i for i in row if i and int(split.assignment[i]) in (v, 2))
            got = [x for x in out if x]
            assert sorted(back[x] for x in got) == expected
            assert out == got + [0] * (len(out) - len(got))  # packed to the left
    if scheme == "odd_even":
        assert split.assignment[1] == 0 or fx.feature_names[1] == "bias"


def test_view_split_errors() -> None:
    with pytest.raises(
        ValueError, match="scheme must be 'token_surface', 'random' or 'odd_even'; got 'halves'"
    ):
        ViewSplit(["<pad>", "a"], scheme="halves")  # type: ignore[arg-type]
    split = ViewSplit(["<pad>", "a", "b"])
    with pytest.raises(
        ValueError,
        match=re.escape("indices must lie in 0..2 (the split's feature space); got 0..5"),
    ):
        split(torch.tensor([[0, 5]]))
    with pytest.raises(TypeError, match="indices must be a long tensor"):
        split(torch.tensor([[0.0]]))
