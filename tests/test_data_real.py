"""Readers on the real benchmark data in ../shared/data (or $STRUCTSSL_DATA), checking the
verified counts of each folder's PROVENANCE.md. Each test skips when its folder is missing."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from structssl.data import (
    CITATION_LABELS,
    CONLL2002_LABELS,
    FeatureExtractor,
    ViewSplit,
    collate_trees,
    encode_trees,
    load_citations,
    load_coil,
    load_conll2002,
    load_mulan,
    load_ocr,
    load_ptb_sample,
    normalize_tree,
    to_cnf,
    tree_spans,
)
from structssl.data.paths import ENV_VAR


def _data_dir() -> Path:
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1].parent / "shared" / "data"


DATA = _data_dir()


def _need(folder: str) -> Path:
    path = DATA / folder
    if not path.is_dir():
        pytest.skip(f"real data folder {path} is missing")
    return DATA


@pytest.mark.parametrize(
    ("split", "sentences", "tokens", "entities"),
    [("train", 8323, 264715, 18797), ("dev", 1915, 52923, 4351), ("test", 1517, 51533, 3558)],
)
def test_conll2002_counts(split: str, sentences: int, tokens: int, entities: int) -> None:
    corpus = load_conll2002(split, data_dir=_need("conll2002"))  # type: ignore[arg-type]
    assert len(corpus) == sentences and corpus.num_tokens == tokens
    assert sum(t.startswith("B-") for s in corpus for t in s.labels or ()) == entities
    assert corpus.num_documents == 1  # no -DOCSTART- lines in the Spanish files
    assert corpus.labels.items == CONLL2002_LABELS
    if split == "train":
        assert corpus[0].tokens[:3] == ("Melbourne", "(", "Australia")


def test_conll2002_features_and_views() -> None:
    corpus = load_conll2002("dev", data_dir=_need("conll2002"))
    sample = corpus.sequences[:200]
    fx = FeatureExtractor(min_count=2).fit(sample)
    batch = fx.transform_batch(sample)
    assert batch.indices.shape[:2] == (200, int(batch.lengths.max()))
    first, second = ViewSplit(fx.feature_names).split_batch(batch)
    assert first.num_features > 1 and second.num_features > 1


@pytest.mark.parametrize(
    ("split", "citations", "tokens", "labels"),
    [
        ("train", 300, 10803, 13),
        ("dev", 100, 3651, 13),
        ("test", 100, 3502, 13),
        ("train.25.0", 25, 933, 12),
        ("train.25.1", 25, 827, 12),
        ("train.25.2", 25, 996, 13),
        ("train.25.3", 25, 908, 13),
        ("train.25.4", 25, 890, 13),
        ("unlabeled", 1000, 34767, 0),
    ],
)
def test_citation_counts(split: str, citations: int, tokens: int, labels: int) -> None:
    corpus = load_citations(split, data_dir=_need("citations_cora"))
    assert len(corpus) == citations and corpus.num_tokens == tokens
    assert len({t for s in corpus for t in s.labels or ()}) == labels
    assert all(len(f) == 7 for s in corpus for f in s.features or ())
    if split != "unlabeled":
        assert corpus.labels.items == CITATION_LABELS


@pytest.mark.parametrize(
    ("name", "split", "instances", "features", "labels", "cardinality"),
    [
        ("scene", "train", 1211, 294, 6, 1.062),
        ("scene", "test", 1196, 294, 6, 1.086),
        ("yeast", "train", 1500, 103, 14, 4.228),
        ("yeast", "test", 917, 103, 14, 4.252),
        ("emotions", "train", 391, 72, 6, 1.813),
        ("emotions", "test", 202, 72, 6, 1.975),
    ],
)
def test_mulan_counts(
    name: str, split: str, instances: int, features: int, labels: int, cardinality: float
) -> None:
    data = load_mulan(name, split, data_dir=_need(f"mulan_{name}"))  # type: ignore[arg-type]
    assert data.X.shape == (instances, features) and data.Y.shape == (instances, labels)
    assert round(float(data.Y.sum(1).mean()), 3) == cardinality
    assert np.isfinite(data.X).all()


def test_ptb_sample_counts() -> None:
    trees = load_ptb_sample(_need("penn_treebank_sample"))
    assert len(trees) == 3914
    tags = [tag for t in trees for _, tag in t.pos()]
    assert len(tags) == 100676
    assert sum(tag != "-NONE-" for tag in tags) == 94084
    assert len(set(tags)) == 46
    cnf = [to_cnf(normalize_tree(t)) for t in trees[:300]]
    assert all(len(tree_spans(c)) == 2 * len(c.leaves()) - 1 for c in cnf)
    examples, symbols = encode_trees(cnf)
    batch = collate_trees(examples[:16])
    assert batch["spans"].shape == (16, 2 * int(batch["lengths"].max()) - 1, 3)
    assert "-NONE-" not in symbols and not any("-SBJ" in s for s in symbols)


def test_ocr_counts() -> None:
    data = load_ocr(_need("ocr_letters_taskar"))
    assert len(data) == 6877 and data.num_letters == 52152
    assert np.bincount(data.folds).tolist() == [626, 704, 684, 698, 693, 651, 739, 717, 690, 675]
    assert len(Counter(int(x) for lab in data.labels for x in lab)) == 26
    assert data.words[0] == "ommanding"
    assert all(p.shape[1] == 128 and p.max() <= 1 for p in data.pixels[:100])


@pytest.mark.parametrize("num_labeled", [10, 100])
def test_coil_counts(num_labeled: int) -> None:
    data = load_coil(num_labeled, data_dir=_need("ssl_coil"))  # type: ignore[arg-type]
    assert data.X.shape == (1500, 241)
    assert np.bincount(data.y).tolist() == [250] * 6
    assert data.labeled.shape == (12, num_labeled) and data.unlabeled.shape == (
        12,
        1500 - num_labeled,
    )
    assert data.labeled.min() >= 0 and data.unlabeled.max() == 1499
    X = torch.as_tensor(data.X)
    assert X.dtype == torch.float64
