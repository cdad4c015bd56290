"""Word clusters learned from untagged text (structssl.data.clusters) and their features.

Every test writes its own small data; nothing here needs ``../shared``.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from structssl.data.clusters import CASE_PROFILES, WordClusters, _kmeans
from structssl.data.features import FeatureExtractor
from structssl.data.tagging import TaggingFormat

_CITIES = ["madrid", "bilbao", "sevilla", "toledo", "cadiz", "malaga"]
_PEOPLE = ["juan", "pedro", "maria", "lucia", "carmen", "pablo"]


def _corpus(n: int = 400, seed: int = 0) -> list[list[str]]:
    """Cities occur between 'en' and 'ayer'; people between 'dijo' and 'que': two context
    classes that share no context word."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        if rng.random() < 0.5:
            out.append(["vive", "en", rng.choice(_CITIES).capitalize(), "ayer", "."])
        else:
            out.append(["hoy", "dijo", rng.choice(_PEOPLE).capitalize(), "que", "no"])
    return out


def test_words_that_share_contexts_share_a_cluster() -> None:
    # 8 context profiles (cities, people and 6 function-word ones), orthogonal in PPMI space
    wc = WordClusters(sizes=(8,), min_count=1, dim=8).fit(_corpus())
    city = {wc.ids(w)[0] for w in _CITIES}
    person = {wc.ids(w)[0] for w in _PEOPLE}
    assert len(city) == 1 and len(person) == 1 and city != person
    assert wc.ids("MADRID") == wc.ids("madrid")  # any case
    assert wc.ids("never-seen") is None
    assert len(wc) == len({w.lower() for s in _corpus() for w in s})


def test_fit_is_deterministic_and_rare_words_get_no_id() -> None:
    text = _corpus() + [["unico", "en", "Madrid"]]
    a = WordClusters(sizes=(2, 3), min_count=2, dim=4, seed=3).fit(text)
    b = WordClusters(sizes=(2, 3), min_count=2, dim=4, seed=3).fit(text)
    assert a.state_dict() == b.state_dict()
    assert a.ids("unico") is None and a.ids("madrid") is not None


def test_text_too_small_to_cluster_gives_no_ids() -> None:
    wc = WordClusters(sizes=(4,), min_count=1).fit([["a", "b"]])
    assert len(wc) == 0 and wc.ids("a") is None
    fx = FeatureExtractor(min_count=1, cluster_sizes=(4,)).fit([["a", "b"]])
    assert not any(name.startswith("cluster") for name in fx.feature_names)


def test_kmeans_recovers_separated_blobs() -> None:
    rng = np.random.default_rng(0)
    centres = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    x = np.concatenate([c + rng.normal(size=(50, 2)) for c in centres])
    labels = _kmeans(x, 3, np.random.default_rng(1))
    groups = [set(labels[i * 50:(i + 1) * 50].tolist()) for i in range(3)]
    assert all(len(g) == 1 for g in groups) and len(set.union(*groups)) == 3


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(sizes=()), "at least one"),
        (dict(sizes=(1,)), "cluster size must be an int >= 2; got 1"),
        (dict(sizes=(8, 2.5)), "got 2.5"),
        (dict(min_count=0), "min_count must be an int >= 1; got 0"),
        (dict(dim=0), "dim must be an int >= 1"),
        (dict(window=True), "window must be an int >= 1; got True"),
    ],
)
def test_bad_options_are_refused(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        WordClusters(**kwargs)
    if kwargs.get("sizes"):  # () is "off" for the extractor
        with pytest.raises(ValueError, match=match):
            FeatureExtractor(cluster_sizes=kwargs["sizes"])


def test_use_before_fit_and_bad_state() -> None:
    wc = WordClusters()
    for call in (lambda: wc.ids("a"), wc.state_dict, lambda: len(wc)):
        with pytest.raises(RuntimeError, match="fit"):
            call()
    state = WordClusters(sizes=(2,), min_count=1, dim=2).fit(_corpus(40)).state_dict()
    with pytest.raises(ValueError, match="missing \\['ids'\\]"):
        WordClusters.from_state_dict({k: v for k, v in state.items() if k != "ids"})
    with pytest.raises(ValueError, match="1 ids for each"):
        WordClusters.from_state_dict({**state, "ids": [[0, 1]] * len(state["words"])})


def test_features_fire_for_the_token_and_its_neighbours() -> None:
    fx = FeatureExtractor(min_count=1, cluster_sizes=(2, 4)).fit(_corpus())
    (strings,) = [fx.strings(["vive", "en", "Toledo", "ayer"])]
    city = fx.clusters.ids("toledo")
    assert f"cluster2[0]={city[0]}" in strings[2] and f"cluster4[0]={city[1]}" in strings[2]
    assert f"cluster2[1]={city[0]}" in strings[1] and f"cluster2[-1]={city[0]}" in strings[3]
    # a city never seen tagged gets the weights its cluster learned: same cluster features
    names = set(fx.feature_names)
    assert {s for s in fx.strings(["en", "Cadiz"])[1] if s.startswith("cluster")} <= names


def test_case_profiles_count_capitals_where_they_are_not_forced() -> None:
    text = [
        ["El", "viaje", "a", "Madrid", "."],        # "El" capitalised only sentence-first
        ["Madrid", "es", "grande", "."],
        ["vive", "en", "madrid", "y", "el", "Rio", "."],
        ["Hoy", "el", "viaje", "."], ["Hoy", "es", "."],
        ["el", "Banco", "y", "el", "Banco", "y", "el", "banco", "."],
    ]
    wc = WordClusters(sizes=(2,), min_count=1, dim=2).fit(text)
    profile = {w: CASE_PROFILES[wc.case(w)] for w in ("el", "madrid", "banco", "hoy", "rio")}
    # el: 0 of 4 inside; madrid: 1 of 2; banco: 2 of 3; hoy: only first; rio: 1 of 1
    assert profile == {"el": "never", "madrid": "majority", "banco": "majority",
                       "hoy": "initial_only", "rio": "always"}
    assert wc.case("Viaje") == CASE_PROFILES.index("never") and wc.case("zzz") is None
    minority = WordClusters(sizes=(2,), min_count=1, dim=2).fit(
        [["a", "Casa", "casa", "casa"], ["b", "c", "d"]])
    assert CASE_PROFILES[minority.case("casa")] == "minority"
    # rare words get none, and so does every word with the option off
    assert WordClusters(sizes=(2,), min_count=2, dim=2).fit(text).case("rio") is None
    assert WordClusters(sizes=(2,), min_count=1, dim=2, case_profile=False).fit(text).case(
        "el") is None
    # the extractor's features: the token's and its neighbours' profiles
    fx = FeatureExtractor(min_count=1, cluster_sizes=(2,)).fit(text)
    strings = fx.strings(["Hoy", "el", "Banco"])
    assert "case_profile[0]=initial_only" in strings[0]
    assert "case_profile[1]=never" in strings[0] and "case_profile[-1]=never" in strings[2]
    with pytest.raises(ValueError, match="case_profile must be True or False"):
        WordClusters(case_profile=1)


def test_extractor_and_format_state_round_trip(tmp_path: Path) -> None:
    fx = FeatureExtractor(min_count=1, cluster_sizes=(2, 3)).fit(_corpus(60))
    again = FeatureExtractor.from_state_dict(fx.state_dict())
    sentence = ["hoy", "dijo", "Lucia", "que", "en", "Cadiz", "zzz"]
    assert torch.equal(again.encode(sentence), fx.encode(sentence))
    # states saved before clusters existed still load
    old = {k: v for k, v in fx.state_dict().items() if k not in ("clusters", "cluster_sizes")}
    assert FeatureExtractor.from_state_dict(old).clusters is None
    # ... and so do clusters saved before case profiles existed: no profile features then
    state = fx.state_dict()
    state["clusters"] = {k: v for k, v in state["clusters"].items()
                         if k not in ("case_profile", "case")}
    before = FeatureExtractor.from_state_dict(state)
    assert before.clusters.case("lucia") is None and fx.clusters.case("lucia") is not None
    with pytest.raises(ValueError, match="case profiles must be ids in 0..4; got 7"):
        WordClusters.from_state_dict({**fx.clusters.state_dict(), "case": {"lucia": 7}})

    path = tmp_path / "train.conll"
    lines = []
    for s in _corpus(50):
        lines += [f"{w} {'B-LOC' if w.lower() in _CITIES else 'O'}" for w in s] + [""]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    fmt = TaggingFormat(word_clusters=[2, 4])
    tagged = fmt.read_labeled(path)
    fmt.fit(tagged, tagged)
    loaded = TaggingFormat.from_state_dict(fmt.state_dict())
    example = tagged[0]
    assert torch.equal(loaded.encode(example, False)["inputs"], fmt.encode(example, False)["inputs"])
    assert loaded.extractor.clusters is not None


def test_semi_supervised_config_learns_clusters_and_predicts(tmp_path: Path) -> None:
    """configs/tagger_ssl.yaml as a user runs it: the clusters come from the untagged file,
    travel in the checkpoint, and predict tags unseen text with them."""
    pytest.importorskip("pytorch_lightning")
    from unittest import mock

    from structssl.cli import main
    from structssl.predict import Tagger

    def write(path: Path, sentences: list[list[str]], tagged: bool) -> None:
        lines = []
        for s in sentences:
            for w in s:
                tag = "B-LOC" if w.lower() in _CITIES else "B-PER" if w.lower() in _PEOPLE else "O"
                lines.append(f"{w} {tag}" if tagged else w)
            lines.append("")
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    write(tmp_path / "train.conll", _corpus(20, seed=1), True)
    write(tmp_path / "dev.conll", _corpus(10, seed=2), True)
    write(tmp_path / "unlabeled.txt", _corpus(100, seed=3), False)
    config = Path(__file__).resolve().parents[1] / "configs" / "tagger_ssl.yaml"
    run = tmp_path / "run"
    with mock.patch("sys.argv", ["structssl"]):
        main([
            "fit", f"--config={config}", f"--data.train_file={tmp_path / 'train.conll'}",
            f"--data.dev_file={tmp_path / 'dev.conll'}",
            f"--data.unlabeled_file={tmp_path / 'unlabeled.txt'}", "--data.word_clusters=[4,8]", f"--trainer.default_root_dir={run}",
            "--trainer.max_epochs=3", "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false",
        ])
    tagger = Tagger.load(run)
    assert type(tagger.model).__name__ == "TransductiveModule"  # nabla-TSVM, as shipped
    clusters = tagger.format.extractor.clusters
    assert clusters is not None and clusters.sizes == (4, 8) and len(clusters) >= 18
    (tags,) = tagger.tag([["vive", "en", "Sevilla", "ayer", "."]])
    assert tags[2] == "B-LOC"
