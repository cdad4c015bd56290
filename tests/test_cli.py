"""The ``structssl`` command: LightningCLI subcommands, ``--print_config``, demo (every config: ``test_configs.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
import torch

pytest.importorskip("pytorch_lightning")
pytest.importorskip("jsonargparse")

from structssl.cli import cli_main, main  # noqa: E402

# raised inside Lightning 2.6 (its pytree helper under recent torch), not by structssl
pytestmark = [
    pytest.mark.filterwarnings(
        r"ignore:.*isinstance\(treespec, LeafSpec\)` is deprecated.*:FutureWarning"
    ),
]

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))
BASELINE_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "baselines" / "cutting_plane.yaml"
QUICKSTART = Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"
#: shrink the data so one step of every config is quick
SMALL = [
    "--data.init_args.num_train=30",
    "--data.init_args.num_dev=5",
    "--data.init_args.num_test=5",
    "--model.init_args.lbfgs_max_iter=2",
    "--trainer.enable_progress_bar=false",
]


@pytest.fixture(autouse=True)
def _isolate(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """pytest's own argv must not reach the CLI; num_threads set by a config is restored."""
    monkeypatch.setattr("sys.argv", ["structssl"])
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_there_are_configs() -> None:
    assert QUICKSTART in CONFIGS


def test_fit_logs_csv_and_tests_after_fit(tmp_path: Path) -> None:
    cli = cli_main([
        "fit", f"--config={QUICKSTART}", "--trainer.max_epochs=1",
        f"--trainer.default_root_dir={tmp_path}", "--data.init_args.num_labeled=5", *SMALL,
    ])
    metrics = cli.trainer.callback_metrics
    assert "test/token_accuracy" in metrics  # test_after_fit: true in the quick start
    (csv,) = tmp_path.rglob("metrics.csv")
    header = csv.read_text().splitlines()[0]
    assert "val/token_accuracy" in header and "train/objective" in header
    assert list(tmp_path.rglob("*.ckpt")), "the default ModelCheckpoint saves the last epoch"


# a new logger version per subcommand moves ModelCheckpoint's dirpath (harmless for evaluation)
@pytest.mark.filterwarnings("ignore:The dirpath has changed:UserWarning")
def test_validate_and_test_from_checkpoint(tmp_path: Path) -> None:
    common = [f"--config={QUICKSTART}", f"--trainer.default_root_dir={tmp_path}",
              "--data.init_args.num_labeled=5", "--test_after_fit=false", *SMALL]
    fit = cli_main(["fit", "--trainer.max_epochs=1", *common])
    ckpt = tmp_path / "checkpoints" / "last.ckpt"  # structssl's run_checkpoints: best and last
    assert ckpt.is_file() and (tmp_path / "checkpoints" / "best.ckpt").is_file()
    weights = fit.model.scorer.emission.weight.detach().clone()
    for sub, key in (("validate", "val/token_accuracy"), ("test", "test/token_accuracy")):
        cli = cli_main([sub, *common, f"--ckpt_path={ckpt}"])
        assert key in cli.trainer.callback_metrics
        assert cli.config[sub].trainer.inference_mode is True  # Lightning's default
        torch.testing.assert_close(cli.model.scorer.emission.weight, weights)


def test_dotted_overrides_reach_the_objects(tmp_path: Path) -> None:
    cli = cli_main([  # run=False: no subcommand
        f"--config={QUICKSTART}", "--model.init_args.Cu=0.25",
        "--model.init_args.unlabeled_loss.init_args.tau=0.5",
        f"--trainer.default_root_dir={tmp_path}", "--data.init_args.num_labeled=5", *SMALL,
    ], run=False)
    assert cli.model.Cu == 0.25 and cli.model.unlabeled_loss.tau == 0.5
    assert cli.datamodule.num_train == 30


def test_print_config(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli_main(["fit", f"--config={QUICKSTART}", "--print_config"])
    assert done.value.code in (0, None)
    out = capsys.readouterr().out
    assert "structssl.training.TransductiveModule" in out
    assert "structssl.structures.LinearChain" in out and "num_labels: 5" in out
    assert "test_after_fit: true" in out


def test_bad_num_threads_is_reported(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="num_threads must be an int >= 1; got 0"):
        cli_main([f"--config={QUICKSTART}", "--num_threads=0",
                  f"--trainer.default_root_dir={tmp_path}"], run=False)


def test_demo_still_works(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["demo", "--iterations", "5", "--train", "20", "--test", "20"]) == 0
    assert "token accuracy" in capsys.readouterr().out
    config = tmp_path / "demo.yaml"
    config.write_text("iterations: 3\ntrain: 10\ntest: 10\n")
    assert main(["demo", "--config", str(config), "--states", "3"]) == 0
    assert "token accuracy" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["demo", "--iterations", "many"])
    assert "iterations" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # the flag's own name, not a traceback of the generator's
        main(["demo", "--states", "0"])
    assert "--states must be >= 2; got 0" in capsys.readouterr().err


def test_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("fit", "validate", "test", "predict", "baselines", "regression", "clustering",
                 "demo"):
        assert f"  {name} " in out, name


@pytest.mark.parametrize("method", ["perceptron", "one_slack"])
def test_baselines_subcommand_runs_from_a_config(
    method: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    out = tmp_path / "result.json"
    assert main(["baselines", "--config", str(BASELINE_CONFIG),
                 "--method", method, "--epochs", "2", "--data.init_args.num_train", "30",
                 "--data.init_args.num_labeled", "8", "--data.init_args.num_test", "20",
                 "--data.init_args.num_dev", "10", "--output", str(out)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result == json.loads(out.read_text())
    assert result["method"] == method and result["num_labeled"] == 8
    assert 0.0 <= result["test"]["token_accuracy"] <= 1.0 and result["primal"] > 0.0


def test_the_ocr_baseline_config_runs_on_the_real_letters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """configs/baselines/cutting_plane_ocr.yaml (the QP on OCR letters; benchmarks/README.md
    times it), shrunk: it parses, takes its sizes from the data and runs."""
    import json

    from structssl.data.paths import resolve_data_dir

    try:
        root = resolve_data_dir()
    except FileNotFoundError:
        pytest.skip("real data directory not found")
    if not (root / "ocr_letters_taskar").is_dir():
        pytest.skip("the OCR letters are not in the data directory")
    config = BASELINE_CONFIG.parent / "cutting_plane_ocr.yaml"
    assert main(["baselines", "--config", str(config), "--data.init_args.num_labeled", "5",
                 "--data.init_args.num_dev", "10", "--data.init_args.num_test", "10",
                 "--epsilon", "0.1"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["dim"] == 128 * 26 + 26 + 26 * 26 + 2 * 26 and result["converged"]


def test_the_conll_baseline_config_runs_on_own_tagged_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """configs/baselines/cutting_plane_conll.yaml with its README'd overrides on files of another
    tag set and scheme (BIOES): the task, tags and scheme come from the data, so the dev split is
    scored with span F1 read in BIOES."""
    import json

    sentences = ["Ana S-PER\nvive O\nen O\nSan B-LOC\nJosé E-LOC\n. O\n",
                 "Luis S-PER\ncome O\n. O\n", "Eva B-PER\nRuiz E-PER\nlee O\n"]
    for name in ("t.bioes", "d.bioes"):
        (tmp_path / name).write_text("\n".join(sentences * 3), encoding="utf-8")
    config = BASELINE_CONFIG.parent / "cutting_plane_conll.yaml"
    assert main(["baselines", "--config", str(config),
                 f"--data.init_args.train_file={tmp_path / 't.bioes'}",
                 f"--data.init_args.dev_file={tmp_path / 'd.bioes'}",
                 "--data.init_args.num_labeled", "null", "--data.init_args.max_dev", "null"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["num_labeled"] == 9 and result["converged"]
    assert {"span_f1", "token_accuracy", "exact_match"} <= set(result["dev"])


@pytest.mark.parametrize("args, message", [
    (["baselines", "--config", str(BASELINE_CONFIG), "--time_limit", "0"],
     "structssl baselines: --time_limit must be a number > 0 or None; got 0.0"),
    (["baselines", "--config", str(BASELINE_CONFIG), "--C", "-1"],
     "structssl baselines: --C must be a number > 0; got -1.0"),
    (["baselines", "--config", str(BASELINE_CONFIG), "--method", "perceptron", "--epochs", "0"],
     "structssl baselines: --epochs must be an int >= 1; got 0"),
    (["fit", f"--config={QUICKSTART}", "--num_threads", "0"],
     "structssl fit: --num_threads must be an int >= 1; got 0"),
])
def test_a_refused_option_value_is_one_line(
    args: list, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Option values the objects refuse were tracebacks of 20 lines (a user test)."""
    if args[0] == "fit":
        args = [*args, f"--trainer.default_root_dir={tmp_path}"]
    assert main(args) == 2
    assert capsys.readouterr().err.strip() == message


def test_baselines_subcommand_rejects_unknown_method() -> None:
    with pytest.raises(SystemExit):
        main(["baselines", "--config", str(BASELINE_CONFIG),
              "--method", "simplex"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="the machine has a CUDA device")
def test_an_accelerator_the_machine_lacks_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Lightning's refusal of --trainer.accelerator cuda on a CPU machine was a 42-line
    traceback (a user test); it is one line, status 2, as the other option errors."""
    assert main(["fit", f"--config={QUICKSTART}", "--trainer.accelerator=cuda",
                 f"--trainer.default_root_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().startswith("structssl fit: ") and err.strip().endswith(
        "(the trainer's options: --trainer.accelerator, --trainer.devices, --trainer.strategy)")
