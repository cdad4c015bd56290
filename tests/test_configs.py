"""Every YAML config in ``configs/`` trains for one step through the ``structssl`` CLI.

The configs are globbed (configs added later are picked up). Each runs ``structssl fit`` with
``fast_dev_run`` and shrinking overrides chosen from the data module's and the procedure's
signatures (synthetic pools get ``num_train=30``; real-data pools ``num_unlabeled=20`` and
``max_dev`` / ``max_test = 5``; L-BFGS gets ``lbfgs_max_iter=2``). A config whose real data is
missing (``FileNotFoundError: missing data file ...``, or no data directory, from
``structssl.data.paths``) is skipped.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

pytest.importorskip("pytorch_lightning")
pytest.importorskip("jsonargparse")
yaml = pytest.importorskip("yaml")

from jsonargparse import ArgumentParser  # noqa: E402

from structssl.cli import cli_main  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings(
        r"ignore:.*isinstance\(treespec, LeafSpec\)` is deprecated.*:FutureWarning"
    ),
]

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
CONFIGS = sorted(CONFIG_DIR.glob("*.yaml"))

#: overrides of a synthetic pool (the data module has ``num_train``)
SYNTHETIC = {"num_train": 30, "num_dev": 5, "num_test": 5}
#: overrides of a real-data pool (any of these the data module accepts)
REAL = {"num_unlabeled": 20, "max_dev": 5, "max_test": 5, "max_train": 30}


def _class(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _params(path: str) -> set[str]:
    """The init args a config may give ``path``, as jsonargparse resolves them (a procedure's
    ``**kwargs`` stand for its base class's options)."""
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(_class(path), "x", fail_untyped=False)
    return set(parser.get_defaults()["x"].keys())


def shrinking_overrides(config: Path) -> list[str]:
    """The dotted CLI flags that make one step of ``config`` quick."""
    content = yaml.safe_load(config.read_text())
    args: list[str] = []
    data = content.get("data") or {}
    if isinstance(data, dict) and "class_path" in data:
        params = _params(data["class_path"])
        given = data.get("init_args") or {}
        chosen = SYNTHETIC if "num_train" in params else REAL
        if str(given.get("train_file", "")).split(".")[0].isupper():
            chosen = {}  # own-data configs run on the tiny placeholder files
        for key, value in chosen.items():
            if key not in params:
                continue
            if key == "num_unlabeled" and given.get(key) is not None and given[key] < value:
                continue
            args.append(f"--data.init_args.{key}={value}")
        if "num_train" in params and (given.get("num_labeled") or 0) > SYNTHETIC["num_train"]:
            args.append("--data.init_args.num_labeled=5")
    model = content.get("model") or {}
    if isinstance(model, dict) and "class_path" in model:
        if "lbfgs_max_iter" in _params(model["class_path"]):
            args.append("--model.init_args.lbfgs_max_iter=2")
    return args


#: a tiny tagged file for the configs of your own data (README "Your own data")
_TAGGED = "El O\nGrupo B-ORG\nMagenta I-ORG\nvive O\nen O\nMadrid B-LOC\n\nAna B-PER\nrie O\n\n"


#: a tiny multi-label ARFF file (configs/multilabel.yaml): 2 features, 2 labels, one row with
#: '?' labels (unlabeled)
_ARFF = ("@relation r\n@attribute a numeric\n@attribute b numeric\n@attribute x {0,1}\n"
         "@attribute y {0,1}\n@data\n1,2,1,0\n0,1,0,1\n3,0,1,1\n2,2,?,?\n")


def placeholder_files(config: Path, tmp_path: Path) -> list[str]:
    """Files for the placeholders (``TRAIN.conll``, ``UNLABELED.txt``, ``TRAIN.arff``) of
    own-data configs."""
    data = (yaml.safe_load(config.read_text()).get("data") or {}).get("init_args") or {}
    args = []
    arff = str(data.get("train_file", "")).endswith(".arff")
    for key, value in data.items():
        if key == "unlabeled_file" and value is None and "train_file" in data and not arff:
            value = "UNLABELED.txt"  # tagger_ssl.yaml leaves it out: a semi-supervised fit needs one
        if isinstance(value, str) and value.split(".")[0].isupper():
            path = tmp_path / value
            text = _ARFF if arff else _TAGGED if key != "unlabeled_file" else "".join(
                line.split()[0] + "\n" if line else "\n" for line in _TAGGED.split("\n")[:-1]
            )
            path.write_text(text, encoding="utf-8")
            args.append(f"--data.init_args.{key}={path}")
    if arff:
        args.append("--data.init_args.labels=2")
    if args and data.get("dev_file") is None:  # fast_dev_run always validates: give a dev set
        dev = tmp_path / ("DEV.arff" if arff else "DEV.conll")
        dev.write_text(_ARFF.replace("2,2,?,?", "2,2,0,0") if arff else _TAGGED, encoding="utf-8")
        args.append(f"--data.init_args.dev_file={dev}")
    return args


@pytest.fixture(autouse=True)
def _isolate(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """pytest's own argv must not reach the CLI; num_threads set by a config is restored."""
    monkeypatch.setattr("sys.argv", ["structssl"])
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_the_configs_of_this_issue_are_there() -> None:
    names = {p.name for p in CONFIGS}
    assert {"conll_svm.yaml", "conll_tsvm.yaml", "conll_cosvm.yaml", "coil_tsvm.yaml"} <= names


def test_shrinking_overrides_follow_the_data_module() -> None:
    conll = shrinking_overrides(CONFIG_DIR / "conll_tsvm.yaml")
    assert "--data.init_args.num_unlabeled=20" in conll
    assert "--data.init_args.max_test=5" in conll
    assert not any("num_train" in a for a in conll)
    quick = shrinking_overrides(CONFIG_DIR / "quickstart.yaml")
    assert "--data.init_args.num_train=30" in quick and "--model.init_args.lbfgs_max_iter=2" in quick


# the shrunk data of a one-step run can leave a margin loss's L-BFGS at w = 0 (every labeling
# ties), which the fit repairs with a warning (cotraining.yaml on 30 sequences; not on its data)
@pytest.mark.filterwarnings(r"ignore:.*L-BFGS made no step from all-zero weights.*:UserWarning")
@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_config_trains_one_step(config: Path, tmp_path: Path) -> None:
    args = [
        "fit", f"--config={config}", "--trainer.fast_dev_run=true",
        f"--trainer.default_root_dir={tmp_path}", "--trainer.enable_progress_bar=false",
        "--test_after_fit=false", *shrinking_overrides(config),
    ]
    args += placeholder_files(config, tmp_path)
    try:
        cli = cli_main(args)
    except FileNotFoundError as err:
        if "missing data file" in str(err) or "data directory" in str(err):
            pytest.skip(f"real data missing: {err}")
        raise
    assert cli.trainer.state.finished
    metrics = cli.trainer.callback_metrics
    assert "train/objective" in metrics
    assert torch.isfinite(metrics["train/objective"])


def test_sizes_left_out_of_a_config_come_from_any_data_module(tmp_path: Path) -> None:
    """README, Training: sizes the data determines may be left out of a config, with any data
    module (the base class's model_sizes: num_labels and the dense input_dim), for fit and
    for the QP baselines; the result equals the config with the sizes written in."""
    from structssl.baselines.__main__ import main as baselines_main

    content = yaml.safe_load((CONFIG_DIR / "supervised_crf.yaml").read_text())
    model = content["model"]["init_args"]
    del model["structure"]["init_args"], model["scorer"]["init_args"]
    (tmp_path / "fit.yaml").write_text(yaml.safe_dump(content))
    cli = cli_main([
        "fit", f"--config={tmp_path / 'fit.yaml'}", "--trainer.max_epochs=1",
        f"--trainer.default_root_dir={tmp_path}", "--trainer.enable_progress_bar=false",
        "--test_after_fit=false",
    ])
    assert cli.model.structure.num_labels == 5
    assert cli.model.scorer.emission.weight.shape == (10, 5)  # input_dim x num_labels
    qp = yaml.safe_load((CONFIG_DIR / "baselines" / "cutting_plane.yaml").read_text())
    written = baselines_main(["--config", str(CONFIG_DIR / "baselines" / "cutting_plane.yaml")])
    del qp["structure"]["init_args"], qp["scorer"]["init_args"]
    (tmp_path / "qp.yaml").write_text(yaml.safe_dump(qp))
    left_out = baselines_main(["--config", str(tmp_path / "qp.yaml")])
    assert left_out["primal"] == pytest.approx(written["primal"]) and left_out["dim"] == written["dim"]
