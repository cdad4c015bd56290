"""Data module options of the thesis's ch. 7 protocols: random Fourier features (galaxy, COIL),
the galaxy HMM with transductive evaluation, and the CoNLL pool's length bounds; on fixtures
written here."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("pytorch_lightning")
scipy_io = pytest.importorskip("scipy.io")

from structssl.data import (  # noqa: E402
    CoilDataModule,
    CoNLLDataModule,
    SemiSupervisedDataModule,
    SyntheticHMMDataModule,
    hmm_sequences,
)
from structssl.data.modules.base import _random_fourier_features  # noqa: E402


# ---------------------------------------------------------------------- random Fourier features
def test_random_fourier_features_approximate_the_rbf_kernel() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(12, 3, generator=g, dtype=torch.float64)
    sigma = 1.5
    phi = _random_fourier_features(x, 20000, sigma, seed=3)
    assert phi.shape == (12, 20000) and phi.dtype == torch.float32
    kernel = torch.exp(-torch.cdist(x, x) ** 2 / (2 * sigma**2))
    approx = phi.double() @ phi.double().T
    assert float((approx - kernel).abs().max()) < 0.05
    # the same seed gives the same map, another seed another one
    assert torch.equal(phi, _random_fourier_features(x, 20000, sigma, seed=3))
    assert not torch.equal(phi, _random_fourier_features(x, 20000, sigma, seed=4))
    # batched inputs (B, N, D) map their last dimension
    assert _random_fourier_features(x.view(3, 4, 3), 7, sigma, 0).shape == (3, 4, 7)


@pytest.mark.parametrize("num, sigma, match", [
    (0, 1.0, "random_features must be an int >= 1; got 0"),
    (5, 0.0, "kernel_sigma must be a float > 0; got 0.0"),
    (5, -1.0, "kernel_sigma must be a float > 0; got -1.0"),
])
def test_random_fourier_features_reject_bad_sizes(num: int, sigma: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _random_fourier_features(torch.zeros(2, 2), num, sigma, 0)


# ---------------------------------------------------------------------- galaxy HMM
def _galaxy(**kwargs: object) -> SyntheticHMMDataModule:
    options: dict[str, object] = dict(
        num_train=30, num_labeled=4, num_states=2, length=6, dim=2, switch_prob=0.1,
        emission="galaxy", seed=5, split_seed=1,
    )
    options.update(kwargs)
    return SyntheticHMMDataModule(**options)  # type: ignore[arg-type]


def test_galaxy_transductive_evaluates_the_unlabeled_sequences() -> None:
    dm = _galaxy(random_features=16, kernel_sigma=0.35, transductive=True)
    splits = dm.splits
    assert [len(splits[k]) for k in ("labeled", "unlabeled", "dev", "test")] == [4, 26, 26, 26]
    assert dm.num_labeled_examples == 4 and dm.num_unlabeled_examples == 26
    for u, t in zip(splits["unlabeled"], splits["test"]):
        assert "labels" not in u and torch.equal(u["inputs"], t["inputs"])
    assert splits["dev"] is splits["test"]
    assert splits["labeled"][0]["inputs"].shape == (6, 16) and dm.input_dim == 16
    # the features are those of the galaxy points drawn with the same seed
    data = hmm_sequences(30, 6, 2, 0.1, "galaxy", seed=5, dtype=torch.float32)
    phi = _random_fourier_features(data.inputs, 16, 0.35, 5)
    pool = {tuple(phi[i].flatten().tolist()): data.labels[i] for i in range(30)}
    for ex in splits["test"] + splits["labeled"]:
        assert torch.equal(pool[tuple(ex["inputs"].flatten().tolist())], ex["labels"])
    # deterministic
    again = _galaxy(random_features=16, kernel_sigma=0.35, transductive=True).splits
    assert all(torch.equal(a["inputs"], b["inputs"]) for a, b in zip(splits["test"], again["test"]))


def test_galaxy_points_without_features_and_two_views() -> None:
    dm = _galaxy(num_dev=3, num_test=5)
    assert [len(dm.splits[k]) for k in ("labeled", "unlabeled", "dev", "test")] == [4, 26, 3, 5]
    assert dm.splits["test"][0]["inputs"].shape == (6, 2)
    two = _galaxy(random_features=9, two_view=True, transductive=True)
    ex = two.splits["labeled"][0]
    assert two.view_dims == (4, 5)
    assert ex["inputs"].shape == (6, 4) and ex["inputs_b"].shape == (6, 5)


def test_gaussian_default_is_unchanged() -> None:
    # the default emission and noise are the generator's: Gaussian, noise 1
    dm = SyntheticHMMDataModule(num_train=10, num_dev=2, num_test=3, length=4, dim=3)
    data = hmm_sequences(15, 4, 5, 0.2, "gaussian", dim=3, separation=2.0, noise=1.0, seed=0,
                         dtype=torch.float32)
    assert torch.equal(dm.splits["test"][0]["inputs"], data.inputs[12])
    assert torch.equal(dm.splits["dev"][1]["labels"], data.labels[11])


@pytest.mark.parametrize("kwargs, match", [
    (dict(dim=3), "dim must be 2 with emission='galaxy'; got 3"),
    (dict(emission="spiral"), "emission must be 'gaussian' or 'galaxy'; got 'spiral'"),
    (dict(random_features=0), "random_features must be an int >= 1; got 0"),
    (dict(kernel_sigma=0.0), "kernel_sigma must be a float > 0; got 0.0"),
    (dict(random_features=1, two_view=True), "random_features must be >= 2 with two_view=True"),
])
def test_galaxy_options_are_checked(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _galaxy(**kwargs)


# ---------------------------------------------------------------------- COIL
def _write_coil(root: Path, n: int = 40, dim: int = 5) -> np.ndarray:
    folder = root / "ssl_coil"
    folder.mkdir()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, dim))
    scipy_io.savemat(folder / "coil_data.mat", {"X": x, "y": np.arange(n).reshape(n, 1) % 6})
    lab, unl = [], []
    for _ in range(2):
        perm = rng.permutation(n) + 1
        lab.append(perm[:10])
        unl.append(perm[10:])
    scipy_io.savemat(
        folder / "coil_splits_labeled10.mat",
        {"idxLabs": np.array(lab, dtype=np.uint16), "idxUnls": np.array(unl, dtype=np.uint16)},
    )
    return x


def test_coil_random_features(tmp_path: Path) -> None:
    x = _write_coil(tmp_path)
    dm = CoilDataModule(num_labeled=10, split=1, random_features=64, feature_seed=2,
                        data_dir=str(tmp_path))
    dm.setup()
    assert dm.input_dim == 64
    split = dm.splits
    inputs = torch.stack([ex["inputs"] for ex in split["labeled"] + split["unlabeled"]])
    assert inputs.shape == (40, 64)
    # centred over all the points (the labeled and unlabeled points of a split are all of them)
    assert float(inputs.double().mean(0).abs().max()) < 1e-6
    # sigma: the median distance between the split's first unlabeled points, distinct pairs
    z = (x - x.mean(0)) / x.std(0)
    first = torch.as_tensor(z, dtype=torch.float32)[
        torch.as_tensor(scipy_io.loadmat(tmp_path / "ssl_coil" / "coil_splits_labeled10.mat")[
            "idxUnls"][1].astype(np.int64) - 1)
    ].double()
    d = torch.cdist(first, first)
    i, j = torch.triu_indices(30, 30, offset=1)
    assert dm.sigma == pytest.approx(float(d[i, j].median()), rel=1e-6)
    # the features are those of the standardized pixels
    phi = _random_fourier_features(torch.as_tensor(z, dtype=torch.float32), 64, dm.sigma, 2)
    phi = phi - phi.mean(0)
    assert torch.allclose(inputs.sort(0).values, phi.sort(0).values, atol=1e-5)
    # a given bandwidth is used as is; the evaluation splits carry the same features
    fixed = CoilDataModule(num_labeled=10, split=1, random_features=8, kernel_sigma=2.0,
                           data_dir=str(tmp_path))
    fixed.setup()
    assert fixed.sigma == 2.0 and fixed.splits["test"][0]["inputs"].shape == (8,)
    # bandwidth_factor scales the median (a given kernel_sigma wins)
    half = CoilDataModule(num_labeled=10, split=1, random_features=8, bandwidth_factor=0.5,
                          data_dir=str(tmp_path))
    half.setup()
    assert half.sigma == pytest.approx(0.5 * dm.sigma, rel=1e-12)
    assert math.isclose(
        float(torch.stack([e["inputs"] for e in fixed.splits["test"]]).sum()),
        float(torch.stack([e["inputs"] for e in fixed.splits["unlabeled"]]).sum()), rel_tol=1e-5,
        abs_tol=1e-5,
    )


def test_coil_random_features_options_are_checked() -> None:
    with pytest.raises(ValueError, match="random_features must be an int >= 1 or None; got 0"):
        CoilDataModule(random_features=0)
    with pytest.raises(ValueError, match="kernel_sigma must be a float > 0 or None; got -2"):
        CoilDataModule(random_features=4, kernel_sigma=-2)
    for bad in (0.0, float("inf"), True):
        with pytest.raises(ValueError, match=f"bandwidth_factor must be a float > 0; got {bad!r}"):
            CoilDataModule(random_features=4, bandwidth_factor=bad)


# ---------------------------------------------------------------------- CoNLL length bounds
def _write_conll(path: Path) -> None:
    sentences = []
    for n in range(1, 9):  # lengths 1 .. 8; the entity types: PER short, LOC only in the longest
        tags = ["B-PER"] + ["O"] * (n - 1)
        if n == 8:
            tags[-1] = "B-LOC"
        sentences.append("\n".join(f"w{n}_{t} {tag}" for t, tag in enumerate(tags)))
    path.write_text("\n\n".join(sentences) + "\n\n")


def test_conll_pool_length_bounds(tmp_path: Path) -> None:
    _write_conll(tmp_path / "t.conll")
    dm = CoNLLDataModule(train_file=str(tmp_path / "t.conll"), dev_file=None, test_file=None,
                         num_labeled=2, min_length=3, max_length=6)
    dm.setup()
    lengths = sorted(len(ex["inputs"]) for ex in dm.splits["labeled"] + dm.splits["unlabeled"])
    assert lengths == [3, 4, 5, 6]
    assert dm.num_labeled_examples == 2 and dm.num_unlabeled_examples == 2
    assert "B-LOC" in dm.tags  # the tag set still comes from the whole file
    only_long = CoNLLDataModule(train_file=str(tmp_path / "t.conll"), dev_file=None,
                                test_file=None, min_length=8)
    only_long.setup()
    assert [len(ex["labels"]) for ex in only_long.splits["labeled"]] == [8]
    # the same seed and bounds give the same draw
    again = CoNLLDataModule(train_file=str(tmp_path / "t.conll"), dev_file=None, test_file=None,
                            num_labeled=2, min_length=3, max_length=6)
    assert [len(e["labels"]) for e in again.splits["labeled"]] == [
        len(e["labels"]) for e in dm.splits["labeled"]]


def test_conll_pool_length_bounds_are_checked(tmp_path: Path) -> None:
    _write_conll(tmp_path / "t.conll")
    with pytest.raises(ValueError, match="max_length must be >= min_length = 5; got 4"):
        CoNLLDataModule(train_file="x", min_length=5, max_length=4)
    with pytest.raises(ValueError, match="min_length must be an int >= 1 or None; got 0"):
        CoNLLDataModule(train_file="x", min_length=0)
    empty = CoNLLDataModule(train_file=str(tmp_path / "t.conll"), dev_file=None, test_file=None,
                            min_length=9)
    with pytest.raises(ValueError, match=r"t\.conll: no training sentence within the length "
                       r"bounds \(min_length=9, max_length=None\)"):
        empty.setup()


class _Built(SemiSupervisedDataModule):
    """A user's data module whose build() returns ``splits``."""

    num_labels = 2

    def __init__(self, splits) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self._given = splits

    def build(self):  # type: ignore[no-untyped-def]
        return self._given


def test_a_users_build_gets_named_errors_for_wrong_keys_and_empty_sequences() -> None:
    def ex(n: int) -> dict:
        return {"inputs": torch.zeros(n, 3), "labels": torch.zeros(n, dtype=torch.long)}

    from structssl.data.modules.base import is_data_error

    with pytest.raises(ValueError, match=r"_Built.build\(\) must return a dict of the example "
                       r"lists \['dev', 'labeled', 'test', 'unlabeled'\].*got \['labeled', 'train'\]") as keys:
        _Built({"labeled": [ex(2)], "train": []}).setup()
    with pytest.raises(ValueError, match=r"_Built: the test example 1 has length 0 \('labels' of "
                       r"shape \(0,\)\)") as empty:
        _Built({"labeled": [ex(2)], "unlabeled": [], "dev": [], "test": [ex(1), ex(0)]}).setup()
    # a per-position key the padding collate does not pad: stacked, it would fail in batching
    ragged = [dict(ex(3), word_ids=torch.zeros(3, dtype=torch.long)),
              dict(ex(5), word_ids=torch.zeros(5, dtype=torch.long))]
    with pytest.raises(ValueError, match=r"_Built: 'word_ids' has shape \(3,\) in labeled example 0 and "
                       r"\(5,\) in example 1; keys other than the padded per-position ones") as stacked:
        _Built({"labeled": ragged, "unlabeled": [], "dev": [], "test": []}).setup()
    # the user's data: the command line prints them on one line, without a traceback
    assert is_data_error(keys.value) and is_data_error(empty.value) and is_data_error(stacked.value)
    _Built({"labeled": [ex(2)], "unlabeled": [], "dev": [], "test": [ex(1)]}).setup()
    same = [dict(ex(3), weight=torch.tensor(1.0)), dict(ex(5), weight=torch.tensor(2.0))]
    _Built({"labeled": same, "unlabeled": [], "dev": [], "test": []}).setup()  # one shape: fine
    # a label id outside [0, num_labels), and label names that do not match num_labels
    bad = dict(ex(3), labels=torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match=r"_Built: the dev example 1 has label ids in \[0, 2\]; "
                       r"expected ids in \[0, num_labels\) = \[0, 2\)"):
        _Built({"labeled": [ex(2)], "unlabeled": [], "dev": [ex(2), bad], "test": []}).setup()
    named = _Built({"labeled": [ex(2)], "unlabeled": [], "dev": [], "test": []})
    named.label_names = ["a", "b", "c"]
    with pytest.raises(ValueError, match=r"_Built: label_names has 3 names \['a', 'b', 'c'\] for "
                       r"num_labels = 2"):
        named.setup()


def test_a_users_build_gets_named_errors_for_keys_values_and_widths() -> None:
    """What failed later inside batching or the first objective, with a position in a shuffled
    batch for a name (a user test: NaN put in labeled example 3 was reported as "example 13"),
    is refused at setup, naming the split and the example."""
    def ex(n: int, d: int = 3) -> dict:
        return {"inputs": torch.ones(n, d), "labels": torch.zeros(n, dtype=torch.long)}

    def splits(**given: list) -> dict:
        return {"labeled": [ex(2)] * 4, "unlabeled": [], "dev": [], "test": [], **given}

    nan = ex(4)
    nan["inputs"][2, 1] = float("nan")
    with pytest.raises(ValueError, match=r"_Built: the labeled example 3 has nan in 'inputs' at "
                       r"\[2, 1\]; inputs must be finite numbers"):
        _Built(splits(labeled=[ex(2)] * 3 + [nan])).setup()
    inf = {"inputs": ex(2)["inputs"]}
    inf["inputs"][0, 0] = float("inf")
    with pytest.raises(ValueError, match=r"the unlabeled example 1 has inf in 'inputs' at \[0, 0\]"):
        _Built(splits(unlabeled=[{"inputs": torch.ones(2, 3)}, inf])).setup()
    with pytest.raises(ValueError, match=r"_Built: 'inputs' of the test example 0 has shape \(5, 2\), "
                       r"and of the labeled example 0 \(n, 3\); dense per-position inputs need one "
                       r"width"):
        _Built(splits(test=[ex(5, 2)])).setup()
    with pytest.raises(ValueError, match=r"_Built: the dev example 1 has the keys \['inputs'\], and "
                       r"example 0 \['inputs', 'labels'\]; every example of a split needs the same "
                       r"keys \(dev and test examples need 'labels'\)"):
        _Built(splits(dev=[ex(2), {"inputs": torch.ones(2, 3)}])).setup()
    short = dict(ex(3), labels=torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"_Built: the labeled example 4 has per-position tensors of "
                       r"different lengths \{'inputs': 3, 'labels': 2\}"):
        _Built(splits(labeled=[ex(2)] * 4 + [short])).setup()
    floats = dict(ex(3), labels=torch.zeros(3))
    with pytest.raises(ValueError, match=r"_Built: 'labels' of the labeled example 1 has dtype "
                       r"torch.float32, and of example 0 torch.int64"):
        _Built(splits(labeled=[ex(2), floats])).setup()
    # index (sparse) inputs may differ in width: the collate pads them
    sparse = [{"inputs": torch.zeros(2, k, dtype=torch.long), "labels": torch.zeros(2, dtype=torch.long)}
              for k in (1, 3)]
    _Built(splits(labeled=sparse)).setup()


def test_the_base_model_sizes_give_num_labels_and_the_dense_input_dim() -> None:
    def ex(n: int, dtype: torch.dtype) -> dict:
        return {"inputs": torch.zeros(n, 3, dtype=dtype), "labels": torch.zeros(n, dtype=torch.long)}

    dense = _Built({"labeled": [ex(2, torch.float32)], "unlabeled": [], "dev": [], "test": []})
    assert dense.model_sizes() == {"num_labels": 2, "input_dim": 3}
    sparse = _Built({"labeled": [ex(2, torch.long)], "unlabeled": [], "dev": [], "test": []})
    assert sparse.model_sizes() == {"num_labels": 2}  # index features: the config's size
