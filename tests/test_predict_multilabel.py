"""``structssl predict`` of a multi-label classifier (trained on your own ARFF file): the file to
label is standardised with the training part's statistics kept in the checkpoint and decoded
with the procedure's own (collective, constrained) decoding, so that labeling the test rows
gives the score ``structssl test`` gives; label attributes may be absent or ``?``.

Every test writes its own small files; nothing here needs ``../shared``.
"""

from __future__ import annotations

import csv
import re
import warnings
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
import torch

pytest.importorskip("pytorch_lightning")

from structssl.cli import main as _cli_main  # noqa: E402
from structssl.data import MulanDataModule  # noqa: E402
from structssl.data.formats.arff import read_arff  # noqa: E402
from structssl.predict import Tagger, load_predictor  # noqa: E402
from structssl.predict_multilabel import MultiLabelPredictor  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings(
        r"ignore:.*isinstance\(treespec, LeafSpec\)` is deprecated.*:FutureWarning"
    ),
    # small prediction files here, decoded as one corpus (test_no_dev_... checks the warning)
    pytest.mark.filterwarnings(r"ignore:.*rows decoded as one corpus under the label rates"),
]

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "multilabel_composite_emotions.yaml"
LABELS = ("sports", "news", "rare")


def _main(args: list[str]) -> Any:
    """``structssl ARGS`` (pytest's own argv must not reach the CLI)."""
    with mock.patch("sys.argv", ["structssl"]):
        return _cli_main(args)


def _arff(path: Path, x: np.ndarray, y: Any = None, labels: tuple[str, ...] = LABELS) -> Path:
    """Features f0.. on a scale far from standard (so that a missing standardisation shows),
    then the label attributes (``y`` None: '?' values; ``labels`` empty: no label attributes)."""
    header = ["@relation 'mine'"] + [f"@attribute f{i} numeric" for i in range(x.shape[1])]
    header += [f"@attribute {name} {{0,1}}" for name in labels] + ["@data"]
    rows = []
    for i, xi in enumerate(x):
        values = [repr(float(v)) for v in xi]
        if labels:
            values += ["?"] * len(labels) if y is None else [str(int(v)) for v in y[i]]
        rows.append(",".join(values))
    path.write_text("\n".join(header + rows) + "\n")
    return path


def _data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)) * 3.0 + 50.0
    z = x - 50.0
    y = np.stack([z[:, 0] > 0, z[:, 1] + z[:, 2] > 0, z[:, 3] > 3], 1).astype(int)
    return x, y


def _fit(tmp_path: Path, train: Path) -> Path:
    run = tmp_path / "run"
    code = _main([
        "fit", "--config", str(CONFIG), "--data.arff_file", str(train), "--data.labels", "3",
        "--data.labeled_fraction", "0.3", "--trainer.max_epochs", "6",
        "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", str(run),
        "--model.init_args.structure.init_args.num_labels", "3",
        "--model.init_args.scorer.init_args.num_labels", "3",
        "--model.init_args.scorer.init_args.input_dim", "4",
    ])
    assert code in (0, None)
    return run


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp_path = tmp_path_factory.mktemp("multilabel")
    x, y = _data(120, 0)
    train = _arff(tmp_path / "train.arff", x, y)
    return _fit(tmp_path, train), train


def test_predicting_the_test_rows_gives_the_test_score(trained: tuple[Path, Path], tmp_path: Path) -> None:
    """The test rows, written back in raw units, labeled by ``structssl predict``, score what
    the test step scored: the checkpoint's standardisation and collective decoding are the
    fit's."""
    run, train = trained
    dm = MulanDataModule(arff_file=str(train), labels=3, labeled_fraction=0.3)
    split = dm.arrays()
    assert split.feature_mean is not None and split.feature_std is not None
    raw = (split.test_inputs * split.feature_std + split.feature_mean).numpy()
    test_file = _arff(tmp_path / "test.arff", raw, split.test_labels.numpy())

    predictor = load_predictor(run)
    assert isinstance(predictor, MultiLabelPredictor)
    # trained in float64 (the config's precision 64-true): reloaded in float64, not float32
    assert {p.dtype for p in predictor.model.parameters()} == {torch.float64}
    assert predictor.label_names == LABELS and predictor.feature_names == ("f0", "f1", "f2", "f3")
    summary = predictor.predict_file(test_file, tmp_path / "out.tsv")

    model = predictor.model
    with torch.no_grad():
        expected = model.decode({"inputs": split.test_inputs.to(next(model.parameters()).dtype)})
    lines = (tmp_path / "out.tsv").read_text().splitlines()
    assert lines[0].split("\t") == list(LABELS)
    got = torch.tensor([[int(v) for v in line.split("\t")] for line in lines[1:]])
    assert torch.equal(got, expected)
    tp = int(((expected == 1) & (split.test_labels == 1)).sum())
    wrong = int((expected != split.test_labels).sum())
    assert summary == {"examples": len(raw), "micro_f1": pytest.approx(2 * tp / (2 * tp + wrong))}
    assert summary["micro_f1"] > 0.6  # a learnable toy task: the model is not all-off
    # and it is the score the fit's own test step logged (test_after_fit)
    (metrics,) = (run / "lightning_logs").glob("version_*/metrics.csv")
    rows = list(csv.DictReader(metrics.read_text().splitlines()))
    logged = [float(r["test/micro_f1"]) for r in rows if r.get("test/micro_f1")]
    assert logged == [pytest.approx(summary["micro_f1"], abs=1e-6)]

    # the same rows without labels ('?'), or without label attributes: labeled, not scored
    for name, y, labels in (("q", None, LABELS), ("none", None, ())):
        path = _arff(tmp_path / f"{name}.arff", raw, y, labels)
        out = tmp_path / f"{name}.tsv"
        assert predictor.predict_file(path, out) == {"examples": len(raw)}
        assert out.read_text() == "\n".join(lines) + "\n"


def test_predict_command(trained: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run, _ = trained
    x, y = _data(30, 1)
    new = _arff(tmp_path / "new.arff", x, y)
    out = tmp_path / "pred.tsv"
    assert _main(["predict", "--model", str(run), "--input", str(new), "--output", str(out),
                  "--confidence", "true", "--constraints", "false"]) == 0
    line = capsys.readouterr().out
    assert re.search(rf"labeled 30 examples of {re.escape(str(new))} -> {re.escape(str(out))}; "
                     r"against the input's labels: micro_f1 0\.\d{4}", line), line
    rows = [r.split("\t") for r in out.read_text().splitlines()]
    assert rows[0] == [*LABELS, "p(sports)", "p(news)", "p(rare)"] and len(rows) == 31
    for r in rows[1:]:
        labels, probs = [int(v) for v in r[:3]], [float(v) for v in r[3:]]
        assert set(labels) <= {0, 1} and all(0.0 <= p <= 1.0 for p in probs)
        # without constraints, each label is on where the model's decoding puts it; an exact
        # pairwise model's MAP need not threshold the marginals, but the two agree mostly
    # each row alone: the decoding of one row does not depend on the others
    single = _arff(tmp_path / "one.arff", x[:1], y[:1])
    assert _main(["predict", "--model", str(run), "--input", str(single), "--output",
                  str(tmp_path / "one.tsv"), "--constraints", "false"]) == 0
    assert (tmp_path / "one.tsv").read_text().splitlines()[1] == "\t".join(rows[1][:3])

    assert _main(["predict", "--model", str(run), "--input", str(new), "--output", str(out),
                  "--kbest", "2"]) == 2
    assert "--kbest applies to sequence taggers; this model is a multi-label classifier" in capsys.readouterr().err
    with pytest.raises(ValueError, match="a multi-label classifier, not a sequence tagger"):
        Tagger.load(run)


def test_predict_refuses_other_feature_attributes(trained: tuple[Path, Path], tmp_path: Path) -> None:
    run, _ = trained
    predictor = MultiLabelPredictor.load(run)
    x, y = _data(5, 2)
    three = _arff(tmp_path / "three.arff", x[:, :3], y)
    with pytest.raises(ValueError, match=re.escape(
            f"{three}: expected the model's 4 feature attributes, in order; the file has 3 "
            "feature attributes, the model's 4")):
        predictor.predict_file(three, tmp_path / "o.tsv")
    renamed = tmp_path / "renamed.arff"
    renamed.write_text(_arff(tmp_path / "r.arff", x, y).read_text().replace("attribute f2 ", "attribute g2 "))
    with pytest.raises(ValueError, match=re.escape("feature attribute 3 is 'g2', the model's is 'f2'")):
        predictor.predict_file(renamed, tmp_path / "o.tsv")
    with pytest.raises(ValueError, match=r"features must be \(n, 4\), the model's feature count; got \(5, 3\)"):
        predictor.predict(x[:, :3])


def test_read_arff_missing_labels(tmp_path: Path) -> None:
    """``missing_labels``: '?' labels and absent label attributes read as -1, the columns in the
    order of ``labels``; without it both stay errors."""
    head = "@relation r\n@attribute a numeric\n@attribute B {0,1}\n@attribute A numeric\n@data\n"
    path = tmp_path / "m.arff"
    path.write_text(head + "1.5,?,1\n2,1,?\n")
    data = read_arff(path, labels=("A", "B"), missing_labels=True)
    assert data.label_names == ("A", "B")
    np.testing.assert_array_equal(data.X, [[1.5], [2.0]])
    np.testing.assert_array_equal(data.Y, [[1, -1], [-1, 1]])
    # a file holds every label attribute or none
    with pytest.raises(ValueError, match=re.escape(
            f"{path}: expected the label attribute 'C' among the file's attributes; not found; of "
            "the labels given, the file has 'A', 'B', and a file holds all the label attributes or none")):
        read_arff(path, labels=("A", "B", "C"), missing_labels=True)
    none = tmp_path / "none.arff"
    none.write_text("@relation r\n@attribute a numeric\n@data\n1\n")
    np.testing.assert_array_equal(read_arff(none, labels=("A", "B"), missing_labels=True).Y, [[-1, -1]])
    with pytest.raises(ValueError, match=re.escape(f"{path}:6: missing value '?' for attribute 'B'")):
        read_arff(path, labels=("A", "B"))
    bad = tmp_path / "bad.arff"
    bad.write_text(head + "?,0,1\n")  # a missing feature value stays an error
    with pytest.raises(ValueError, match=re.escape(f"{bad}:6: missing value '?' for attribute 'a'")):
        read_arff(bad, labels=("A", "B"), missing_labels=True)
    # a label left out of the labels is read as a feature: the message says so
    with pytest.raises(ValueError, match=re.escape(
        f"{path}:6: missing value '?' for attribute 'B' (not supported); 'B' is read as a feature, "
        "and only label attributes may be '?' (the labels read: ['A']")):
        read_arff(path, label_location="end", num_labels=1, missing_labels=True)


def test_mulan_format_sizes_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A config sized for another data set (the emotions recipe on a 3-label, 4-feature file)
    stops at setup on one line naming the options to set."""
    x, y = _data(40, 3)
    train = _arff(tmp_path / "t.arff", x, y)
    code = _main(["fit", "--config", str(CONFIG), "--data.arff_file", str(train), "--data.labels", "3",
                  "--trainer.max_epochs", "1", "--trainer.default_root_dir", str(tmp_path / "run")])
    assert code == 2
    err = capsys.readouterr().err
    assert ("structssl fit: PairwiseMultiLabel num_labels = 6 does not match the data's num_labels "
            "= 3 (leave num_labels out to take it from the data)") in err
    assert "Traceback" not in err


# ---------------------------------------------------------------------- ArffDataModule
OWN = Path(__file__).resolve().parents[1] / "configs" / "multilabel.yaml"


def test_arff_module_splits_rows_by_their_labels(tmp_path: Path) -> None:
    """Rows of the training file with every label '?' are unlabeled, with the unlabeled file's
    rows (no label attributes); features are standardised with all training rows."""
    from structssl.data import ArffDataModule

    x, y = _data(50, 4)
    train = tmp_path / "train.arff"
    text = _arff(train, x[:20], y[:20]).read_text()
    q = _arff(tmp_path / "q.arff", x[20:30]).read_text()  # '?' labels
    train.write_text(text + q[q.index("@data") + 6:])
    unlabeled = _arff(tmp_path / "u.arff", x[30:40], labels=())
    dev = _arff(tmp_path / "dev.arff", x[40:], y[40:])
    dm = ArffDataModule(str(train), labels=3, unlabeled_file=str(unlabeled), dev_file=str(dev))
    dm.setup()
    splits = dm.splits
    assert [len(splits[k]) for k in ("labeled", "unlabeled", "dev", "test")] == [20, 20, 10, 0]
    assert dm.model_sizes() == {"num_labels": 3, "input_dim": 4}
    mean, std = x[:40].mean(0), x[:40].std(0, ddof=1)
    torch.testing.assert_close(splits["labeled"][3]["inputs"], torch.tensor((x[3] - mean) / std))
    torch.testing.assert_close(splits["unlabeled"][12]["inputs"], torch.tensor((x[32] - mean) / std))
    torch.testing.assert_close(splits["dev"][0]["labels"], torch.tensor(y[40]))
    fmt = dm.saved_format()
    assert fmt["kind"] == "multilabel" and fmt["label_names"] == list(LABELS)
    np.testing.assert_allclose(fmt["mean"], mean)
    # by label names, in another order: the label columns follow the order given
    by_name = ArffDataModule(str(train), labels=["rare", "sports", "news"])
    by_name.setup()
    assert by_name.saved_format()["label_names"] == ["rare", "sports", "news"]
    torch.testing.assert_close(by_name.splits["labeled"][0]["labels"], torch.tensor(y[0, [2, 0, 1]]))


def test_arff_module_errors_name_file_and_line(tmp_path: Path) -> None:
    from structssl.data import ArffDataModule

    x, y = _data(6, 5)
    partial = _arff(tmp_path / "p.arff", x, y)
    lines = partial.read_text().splitlines()
    lines[-2] = lines[-2][: lines[-2].rindex(",")] + ",?"  # row 5: 'rare' unknown, the rest known
    partial.write_text("\n".join(lines) + "\n")
    number = len(lines) - 1
    with pytest.raises(ValueError, match=re.escape(
            f"{partial}:{number}: expected every label of a row known (a labeled row) or every "
            "label '?' (an unlabeled row); labels ['rare'] are '?'")):
        ArffDataModule(str(partial), labels=3).setup()
    good = _arff(tmp_path / "g.arff", x, y)
    unknown_dev = _arff(tmp_path / "d.arff", x)
    with pytest.raises(ValueError, match=re.escape(
            f"{unknown_dev}:10: expected every label of a dev row known (0/1)")):
        ArffDataModule(str(good), labels=3, dev_file=str(unknown_dev)).setup()
    with pytest.raises(ValueError, match=re.escape(
            f"{good}:10: expected the labels of an unlabeled file '?' or absent")):
        ArffDataModule(str(good), labels=3, unlabeled_file=str(good)).setup()
    other = _arff(tmp_path / "o.arff", x[:, :3], y)
    with pytest.raises(ValueError, match=re.escape(
            f"{other}: expected the training file's 4 feature attributes, in order; the file has 3")):
        ArffDataModule(str(good), labels=3, test_file=str(other)).setup()
    none = _arff(tmp_path / "n.arff", x)
    with pytest.raises(ValueError, match=re.escape(f"{none}: no row has its labels (every label '?'")):
        ArffDataModule(str(none), labels=3).setup()
    with pytest.raises(ValueError, match=re.escape("labels (--data.labels) must be the number")):
        ArffDataModule(str(good), labels=0)
    with pytest.raises(FileNotFoundError, match=re.escape("no such file: nope.arff (the train file, --data.train_file")):
        ArffDataModule("nope.arff", labels=3, data_dir=tmp_path).setup()


def test_readme_multilabel_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """README "Your own data", multi-label: fit configs/multilabel.yaml on a training file with
    labeled and '?' rows, an unlabeled file and a dev file (sizes from the data), then predict."""
    x, y = _data(200, 6)
    train = tmp_path / "TRAIN.arff"
    text = _arff(train, x[:30], y[:30]).read_text()
    q = _arff(tmp_path / "q.arff", x[30:100]).read_text()
    train.write_text(text + q[q.index("@data") + 6:])
    _arff(tmp_path / "UNLABELED.arff", x[100:150], labels=())
    _arff(tmp_path / "DEV.arff", x[150:], y[150:])
    run = tmp_path / "RUN_DIR"
    with mock.patch("pytorch_lightning.utilities.rank_zero.rank_zero_info") as info:
        code = _main([
                "fit", "--config", str(OWN), "--data.train_file", str(train), "--data.labels", "3",
            "--data.unlabeled_file", str(tmp_path / "UNLABELED.arff"), "--data.dev_file",
            str(tmp_path / "DEV.arff"), "--trainer.default_root_dir", str(run),
            "--trainer.max_epochs", "6", "--trainer.enable_progress_bar", "false",
        ])
    assert code in (0, None)
    lines = [str(call.args[0]) for call in info.call_args_list]
    assert (f"{train}: 30 labeled rows, 70 unlabeled ('?' labels) + 50 of {tmp_path / 'UNLABELED.arff'}; "
            "4 features (standardised), 3 labels: sports, news, rare; 50 dev rows") in lines
    assert "best dev val/micro_f1" in capsys.readouterr().out
    new_x, new_y = _data(40, 7)
    new = _arff(tmp_path / "NEW.arff", new_x, new_y)
    assert _main(["predict", "--model", str(run), "--input", str(new), "--output",
                  str(tmp_path / "PREDICTIONS.tsv")]) == 0
    f1 = float(re.search(r"micro_f1 (\d\.\d+)", capsys.readouterr().out).group(1))  # type: ignore[union-attr]
    assert f1 > 0.6
    assert len((tmp_path / "PREDICTIONS.tsv").read_text().splitlines()) == 41


def test_meka_header_names_the_labels(tmp_path: Path) -> None:
    """MEKA's '-C N' in the @relation name: the first N attributes are the labels (the last -N
    for a negative N); ArffDataModule reads it when labels are left out."""
    from structssl.data import ArffDataModule

    first = tmp_path / "meka.arff"
    first.write_text("@relation 'music: -C 2'\n@attribute happy {0,1}\n@attribute sad {0,1}\n"
                     "@attribute f0 numeric\n@attribute f1 numeric\n@data\n1,0,0.5,2\n0,1,1.5,3\n?,?,1,1\n")
    data = read_arff(first, label_location="meka", missing_labels=True)
    assert data.label_names == ("happy", "sad") and data.feature_names == ("f0", "f1")
    np.testing.assert_array_equal(data.Y, [[1, 0], [0, 1], [-1, -1]])
    last = tmp_path / "last.arff"
    last.write_text("@relation 'x -C -1'\n@attribute f0 numeric\n@attribute y {0,1}\n@data\n1,1\n")
    assert read_arff(last, label_location="meka").label_names == ("y",)
    dm = ArffDataModule(str(first))
    dm.setup()
    assert [len(dm.splits[k]) for k in ("labeled", "unlabeled")] == [2, 1]
    assert dm.saved_format()["label_names"] == ["happy", "sad"]
    plain = tmp_path / "plain.arff"
    plain.write_text("@relation mine\n@attribute f0 numeric\n@attribute y {0,1}\n@data\n1,1\n")
    with pytest.raises(ValueError, match=re.escape(
            f"{plain}: expected MEKA's label count '-C N' (N of the 2 attributes, the first N, or "
            "the last -N) in the @relation name; got 'mine'")):
        ArffDataModule(str(plain)).setup()


# ---------------------------------------------------------------------- user test round 6
def test_nominal_features_are_one_hot_by_value(tmp_path: Path) -> None:
    """A nominal feature becomes one 0/1 column per value, the values sorted: a file listing
    them in another order reads alike (it was the value's position in the header's list, so
    the same rows read differently, silently)."""
    head = "@relation r\n@attribute f numeric\n@attribute color {{{}}}\n@attribute y {{0,1}}\n@data\n"
    rows = "1.5,red,1\n2,blue,0\n0,green,1\n"
    a = tmp_path / "a.arff"
    a.write_text(head.format("red,green,blue") + rows)
    b = tmp_path / "b.arff"
    b.write_text(head.format("blue,green,red") + rows)
    da = read_arff(a, label_location="end", num_labels=1, one_hot=True)
    db = read_arff(b, label_location="end", num_labels=1, one_hot=True)
    assert da.feature_names == db.feature_names == ("f", "color=blue", "color=green", "color=red")
    assert da.one_hot == ("color",)
    np.testing.assert_array_equal(da.X, [[1.5, 0, 0, 1], [2, 1, 0, 0], [0, 0, 1, 0]])
    np.testing.assert_array_equal(da.X, db.X)
    # without one_hot: the position in the header's list (so a and b differ)
    assert read_arff(a, label_location="end", num_labels=1).X[0, 1] == 0.0
    assert read_arff(b, label_location="end", num_labels=1).X[0, 1] == 2.0


def test_arff_messages_of_round_6(tmp_path: Path) -> None:
    from structssl.data import ArffDataModule

    x, y = _data(6, 8)
    good = _arff(tmp_path / "g.arff", x, y)
    with pytest.raises(ValueError, match=re.escape(
            f"{good}: expected the label attribute 'politic' among the file's attributes; not found; "
            "of the labels given, the file has 'sports', and a file holds all the label attributes "
            "or none; the file's attributes: ['f0', 'f1', 'f2', 'f3', 'sports', 'news', 'rare']")):
        ArffDataModule(str(good), labels=["sports", "politic"]).setup()
    with pytest.raises(ValueError, match=re.escape(
            f"{good}: no row has its labels (every label '?', or no attribute named ['foo', 'bar'])")):
        ArffDataModule(str(good), labels=["foo", "bar"]).setup()
    with pytest.raises(ValueError, match=re.escape(
            f"{good}: 20 trailing label attributes asked for (labels=, --data.labels); the file has "
            "7 attributes, features included")):
        ArffDataModule(str(good), labels=20).setup()
    meka = tmp_path / "m.arff"
    meka.write_text("@relation 'x: -C 1'\n@attribute y {0,1}\n@attribute f numeric\n@data\n1,0.25\n")
    with pytest.raises(ValueError, match=re.escape(
            f"{meka}:5: expected 0 or 1 for label 'f'; got 0.25 ('f' is read as a label because "
            "labels=1 reads the last 1 attribute as labels: ['f']; if 'f' is a feature, give the "
            "number of label attributes (--data.labels N) or their names; the @relation line "
            "declares MEKA's '-C 1': leave the labels out to read the labels it names)")):
        ArffDataModule(str(meka), labels=1).setup()
    yesno = tmp_path / "yn.arff"
    yesno.write_text("@relation r\n@attribute f numeric\n@attribute y {yes,no}\n@data\n1,yes\n")
    with pytest.raises(ValueError, match=re.escape(
            f"{yesno}:3: expected label attribute 'y' to be {{0,1}}; got {{yes,no}}")):
        ArffDataModule(str(yesno), labels=1).setup()
    extra = _arff(tmp_path / "e.arff", np.concatenate([x, x[:, :1]], 1), y)
    with pytest.raises(ValueError, match=re.escape("the file has 5 feature attributes, the training "
                                                   "file's 4: 'f4' is extra")):
        ArffDataModule(str(good), labels=3, dev_file=str(extra)).setup()


def test_constant_labels_warn_and_unlabeled_hint(tmp_path: Path) -> None:
    from structssl.data import ArffDataModule

    x, y = _data(8, 9)
    y[:, 2] = 0
    path = _arff(tmp_path / "c.arff", x, y)
    with pytest.warns(UserWarning, match=re.escape("label(s) 'rare' (never) set: the model learns nothing")):
        ArffDataModule(str(path), labels=3).setup()
    assert "--data.unlabeled_file" in ArffDataModule.unlabeled_hint


def test_no_dev_checks_less_often_still_checkpoints(tmp_path: Path) -> None:
    """configs/multilabel.yaml checks the dev set every 5 epochs: without a dev file, best.ckpt
    and last.ckpt are still written every epoch (they were never written: Lightning saves at the
    end of validation when validation is not every epoch, and it never ran)."""
    x, y = _data(50, 10)
    train = tmp_path / "t.arff"
    text = _arff(train, x[:40], y[:40]).read_text()
    q = _arff(tmp_path / "q.arff", x[40:]).read_text()
    train.write_text(text + q[q.index("@data") + 6:])  # 10 unlabeled rows
    run = tmp_path / "run"
    _main(["fit", "--config", str(OWN), "--data.train_file", str(train), "--data.labels", "3",
           "--trainer.max_epochs", "2", "--trainer.enable_progress_bar", "false",
           "--trainer.default_root_dir", str(run)])
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
    # a small file decoded as one corpus under the constraints warns
    small = _arff(tmp_path / "s.arff", x[:5], y[:5])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        MultiLabelPredictor.load(run).predict_file(small, tmp_path / "s.tsv")
    assert any("5 rows decoded as one corpus under the label rates" in str(w.message) for w in caught)


def test_rows_with_labels_are_scored_among_others(trained: tuple[Path, Path], tmp_path: Path) -> None:
    """A file of labeled rows and '?' rows is scored on the labeled ones, and says how many
    (the score was dropped, silently: user test round 7)."""
    run, _ = trained
    x, y = _data(60, 11)
    mixed = tmp_path / "mixed.arff"
    text = _arff(mixed, x[:50], y[:50]).read_text()
    q = _arff(tmp_path / "q.arff", x[50:]).read_text()
    mixed.write_text(text + q[q.index("@data") + 6:])
    predictor = MultiLabelPredictor.load(run)
    summary = predictor.predict_file(mixed, tmp_path / "m.tsv", constraints=False)
    only = predictor.predict_file(_arff(tmp_path / "l.arff", x[:50], y[:50]), tmp_path / "l.tsv",
                                  constraints=False)
    assert summary == {"examples": 60, "micro_f1": only["micro_f1"], "scored": 50}


# ---------------------------------------------------------------------- messages that say the fix
def _emotions_like(path: Path, relation: str = "my_music") -> Path:
    """Six 0/1 labels after 20 real-valued features (the last of them, 'BHSUM3', not 0/1)."""
    labels = ["amazed-suprised", "happy-pleased", "relaxing-calm", "quiet-still", "sad-lonely",
              "angry-aggresive"]
    header = [f"@relation {relation}"] + [f"@attribute F{i} numeric" for i in range(19)]
    header += ["@attribute BHSUM3 numeric"] + [f"@attribute {n} {{0,1}}" for n in labels] + ["@data"]
    rows = [",".join(["0.5"] * 19 + ["1.82364"] + ["0", "1", "0", "1", "0", "1"])] * 3
    path.write_text("\n".join(header + rows) + "\n")
    return path


def test_no_label_count_names_the_labels_option(tmp_path: Path) -> None:
    """Neither labels nor MEKA's '-C N': the message says to give --data.labels N or the names."""
    from structssl.data import ArffDataModule

    path = _emotions_like(tmp_path / "music.arff")
    with pytest.raises(ValueError, match=re.escape(
            f"{path}: expected MEKA's label count '-C N' (N of the 26 attributes, the first N, or "
            "the last -N) in the @relation name; got 'my_music'; or give the labels with "
            "--data.labels N (labels=N: the last N attributes are the 0/1 labels) or their names "
            "(--data.labels '[a, b]')")) as err:
        ArffDataModule(str(path)).setup()
    assert "\n" not in str(err.value)


def test_wrong_label_count_says_which_attributes_are_read_as_labels(tmp_path: Path) -> None:
    """labels=7 where the file has 6 labels: the feature before them is read as a label, and the
    message says so (with the labels read), keeping file and line."""
    from structssl.data import ArffDataModule

    path = _emotions_like(tmp_path / "music.arff")
    with pytest.raises(ValueError, match=re.escape(
            f"{path}:29: expected 0 or 1 for label 'BHSUM3'; got 1.82364 ('BHSUM3' is read as a "
            "label because labels=7 reads the last 7 attributes as labels: ['BHSUM3', "
            "'amazed-suprised', 'happy-pleased', 'relaxing-calm', 'quiet-still', 'sad-lonely', "
            "'angry-aggresive']; if 'BHSUM3' is a feature, give the number of label attributes "
            "(--data.labels N) or their names)")):
        ArffDataModule(str(path), labels=7).setup()
    with pytest.raises(ValueError, match=re.escape(  # a long list shortened
            f"{path}:29: expected 0 or 1 for label 'F16'; got 0.5 ('F16' is read as a label because "
            "labels=10 reads the last 10 attributes as labels: ['F16', 'F17', 'F18', '...', "
            "'quiet-still', 'sad-lonely', 'angry-aggresive'];")):
        ArffDataModule(str(path), labels=10).setup()
    # MEKA's '-C N' of the wrong size: the @relation name is the cause
    meka = _emotions_like(tmp_path / "meka.arff", "'music: -C -7'")
    with pytest.raises(ValueError, match=re.escape(
            f"{meka}:29: expected 0 or 1 for label 'BHSUM3'; got 1.82364 ('BHSUM3' is read as a "
            "label because the @relation name's '-C -7' reads the last 7 attributes as labels: ")):
        ArffDataModule(str(meka)).setup()
    # a non-binary nominal attribute named as a label
    nominal = tmp_path / "n.arff"
    nominal.write_text("@relation r\n@attribute f numeric\n@attribute mood {up,down}\n"
                       "@attribute y {0,1}\n@data\n1,up,1\n")
    with pytest.raises(ValueError, match=re.escape(
            f"{nominal}:3: expected label attribute 'mood' to be {{0,1}}; got {{up,down}} ('mood' "
            "is read as a label because labels=['mood', 'y'] names it; if 'mood' is a feature, "
            "leave it out of the labels)")):
        ArffDataModule(str(nominal), labels=["mood", "y"]).setup()


def test_label_name_typo_names_the_file_attributes(tmp_path: Path) -> None:
    """A label name that is not an attribute: the message names it, the names found, the file's
    attributes (shortened) and a close match."""
    from structssl.data import ArffDataModule

    path = _emotions_like(tmp_path / "music.arff")
    with pytest.raises(ValueError, match=re.escape(
            f"{path}: expected the label attribute 'happy' among the file's attributes; not found "
            "(did you mean 'happy-pleased'?); of the labels given, the file has 'sad-lonely', and "
            "a file holds all the label attributes or none; the file's attributes: ['F0', 'F1', "
            "'F2', 'F3', 'F4', 'F5', '...', 'amazed-suprised', 'happy-pleased', 'relaxing-calm', "
            "'quiet-still', 'sad-lonely', 'angry-aggresive'] (26 in all)")):
        ArffDataModule(str(path), labels=["happy", "sad-lonely"]).setup()
    # several missing, each with its close match (difflib)
    with pytest.raises(ValueError, match=re.escape(
            "expected the label attributes 'sad-lonly', 'angry' among the file's attributes; not "
            "found (did you mean 'sad-lonely' for 'sad-lonly', 'angry-aggresive' for 'angry'?); "
            "of the labels given, the file has 'quiet-still'")):
        ArffDataModule(str(path), labels=["sad-lonly", "quiet-still", "angry"]).setup()


def _tempo(path: Path, values: str, rows: list[str]) -> Path:
    path.write_text("@relation r\n@attribute f0 numeric\n@attribute f1 numeric\n"
                    f"@attribute tempo {{{values}}}\n@attribute A {{0,1}}\n@attribute B {{0,1}}\n"
                    "@data\n" + "\n".join(rows) + "\n")
    return path


def test_predict_reads_an_unknown_nominal_value_as_none(tmp_path: Path) -> None:
    """A new file whose nominal attribute declares a value the model was not trained on
    (tempo {slow,medium,fast,presto}) is labeled: a row holding it is all 0 in the tempo columns
    (as an unknown word), with one warning naming attribute, value, rows, file and line; the
    other rows read as before, and a reordered value list changes nothing."""
    rng = np.random.default_rng(12)
    tempos = ["slow", "medium", "fast"]
    rows = []
    for i in range(40):
        f0, f1 = rng.normal(size=2)
        tempo = tempos[i % 3]
        labels = f"{int(f0 > 0)},{int(tempo == 'fast')}" if i < 30 else "?,?"  # 10 unlabeled
        rows.append(f"{f0:.3f},{f1:.3f},{tempo},{labels}")
    train = _tempo(tmp_path / "train.arff", "slow,medium,fast", rows)
    run = tmp_path / "run"
    assert _main(["fit", "--config", str(OWN), "--data.train_file", str(train), "--data.labels", "2",
                  "--trainer.max_epochs", "2", "--trainer.enable_progress_bar", "false",
                  "--trainer.default_root_dir", str(run)]) in (0, None)
    predictor = MultiLabelPredictor.load(run)
    assert predictor.feature_names == ("f0", "f1", "tempo=fast", "tempo=medium", "tempo=slow")
    new_rows = ["0.5,-1,slow,?,?", "-0.3,0.2,presto,?,?", "1.2,0.1,fast,?,?", "0.1,0.4,presto,?,?"]
    new = _tempo(tmp_path / "new.arff", "slow,medium,fast,presto", new_rows)
    with pytest.warns(UserWarning) as caught:
        predictor.predict_file(new, tmp_path / "new.tsv", constraints=False)
    assert [str(w.message) for w in caught] == [
        f"{new}:4: attribute 'tempo' declares the value 'presto' which the model was not trained "
        "on (the model's values: fast, medium, slow); 2 rows holding it (the first at line 9) are "
        "read as none of the model's values (all 0 in the tempo=... columns, as an unknown word)"]
    got = (tmp_path / "new.tsv").read_text().splitlines()
    # the presto rows: the model's decoding of all-0 tempo columns; the others as in a file
    # declaring the model's values (here reordered: fast,slow,medium)
    raw = np.array([[0.5, -1, 0, 0, 1], [-0.3, 0.2, 0, 0, 0], [1.2, 0.1, 1, 0, 0], [0.1, 0.4, 0, 0, 0]])
    labels, _ = predictor.predict(raw, constraints=False)
    assert got[1:] == ["\t".join(str(int(v)) for v in row) for row in labels]
    known = _tempo(tmp_path / "known.arff", "fast,slow,medium", [new_rows[0], new_rows[2]])
    predictor.predict_file(known, tmp_path / "known.tsv", constraints=False)  # no warning
    assert (tmp_path / "known.tsv").read_text().splitlines()[1:] == [got[1], got[3]]
    # a declared but unused extra value changes nothing, silently
    unused = _tempo(tmp_path / "unused.arff", "presto,slow,medium,fast", [new_rows[0], new_rows[2]])
    predictor.predict_file(unused, tmp_path / "unused.tsv", constraints=False)
    assert (tmp_path / "unused.tsv").read_text() == (tmp_path / "known.tsv").read_text()
    # a value of the model's left out of the file's list: no row holds it, nothing changes
    fewer = _tempo(tmp_path / "fewer.arff", "slow,fast", [new_rows[0]])
    predictor.predict_file(fewer, tmp_path / "fewer.tsv", constraints=False)
    assert (tmp_path / "fewer.tsv").read_text().splitlines()[1] == got[1]


def test_a_dev_file_with_another_nominal_value_list_is_read(tmp_path: Path) -> None:
    """At fit too (dev, test and unlabeled files): a value the training file does not declare is
    read as none of its values with the warning, one it lacks is no row's; before, the file was
    refused ("feature attribute 3 is 'tempo=presto', the training file's is 'tempo=slow'")."""
    from structssl.data import ArffDataModule

    rows = [f"{i % 3 * 0.5},{i % 2},{['slow', 'medium', 'fast'][i % 3]},{i % 2},{(i + 1) % 2}" for i in range(12)]
    train = _tempo(tmp_path / "train.arff", "slow,medium,fast", rows)
    dev = _tempo(tmp_path / "dev.arff", "fast,presto,slow", ["0.5,1,presto,1,0", "0,0,slow,0,1"])
    dm = ArffDataModule(train_file=str(train), dev_file=str(dev), labels=2, standardize=False)
    with pytest.warns(UserWarning, match=r"dev.arff:4: attribute 'tempo' declares the value 'presto'.*1 row holding it \(the first at line 8\)"):
        dm.setup("fit")
    names = dm.saved_format()["feature_names"]
    cols = [i for i, n in enumerate(names) if n.startswith("tempo=")]
    assert [names[i] for i in cols] == ["tempo=fast", "tempo=medium", "tempo=slow"]
    presto, slow = dm.splits["dev"][0]["inputs"], dm.splits["dev"][1]["inputs"]
    assert presto[cols].tolist() == [0.0, 0.0, 0.0]  # none of the training file's values
    assert slow[cols].tolist() == [0.0, 0.0, 1.0]  # medium, which the dev file lacks: no row's
