"""Exact resume, checkpoints during training, bad checkpoint files, files never overwritten.

A ``structssl fit`` run killed with ``kill -9`` (SIGKILL to its process group) mid-annealing,
once it has written ``last.ckpt``, and resumed from that file with ``--ckpt_path`` ends with
exactly the weights and test metric of the uninterrupted run: the quick start as shipped
(shuffle on, the ``C_u`` ramp under way) and seed 004's corpus-constrained composite
likelihood on Mulan emotions (float64, ``C_m`` annealing). In process, a run stopped after
epoch k and resumed ends as the uninterrupted one for the composite likelihood and CoDL+ on
small synthetic data (no shared data needed; CoDL+'s round counter)."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("pytorch_lightning")

import pytorch_lightning as pl  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

pytestmark = [
    # Lightning's advice (workers, sync_dist) and its pytree deprecation: not ours
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]


@pytest.fixture(autouse=True)
def _one_thread() -> Any:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _quickstart(root: Path, epochs: int, *extra: str) -> Any:
    from structssl.cli import cli_main

    return cli_main([
        "fit", "--config", str(ROOT / "configs" / "quickstart.yaml"),
        f"--trainer.max_epochs={epochs}", f"--trainer.default_root_dir={root}",
        "--trainer.enable_progress_bar=false", "--test_after_fit=false", *extra,
    ])


def _scorer(model: pl.LightningModule) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items() if k.startswith("scorer")}


# ------------------------------------------------------------------ kill -9 and resume
KILL_TIMEOUT_S = 150  # per CLI run; a hang fails the test


def _data_dir() -> Path:
    from structssl.data import ENV_VAR

    env = os.environ.get(ENV_VAR)
    return Path(env) if env else ROOT.parent / "shared" / "data"


def _fit_command(config: Path, root: Path, epochs: int, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "structssl.cli", "fit", "--config", str(config),
        f"--trainer.max_epochs={epochs}", f"--trainer.default_root_dir={root}",
        "--trainer.enable_progress_bar=false", *extra,
    ]


def _env() -> dict[str, str]:
    from structssl.data import ENV_VAR

    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), **{ENV_VAR: str(_data_dir())})


def _run_cli(command: list[str]) -> None:
    try:
        done = subprocess.run(
            command, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            timeout=KILL_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"{' '.join(command)} ran past {KILL_TIMEOUT_S} s:\n{err.stdout}")
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout[-4000:]}"


def _saved_epoch(path: Path) -> int:
    """The epoch stored in a checkpoint (-1 while there is none; checkpoints are written by an
    atomic rename, so a file that exists is complete)."""
    if not path.is_file():
        return -1
    return int(torch.load(path, map_location="cpu", weights_only=False)["epoch"])


def _fit_killed(command: list[str], last: Path, after_epoch: int) -> int:
    """Run ``command`` and ``kill -9`` it (its whole process group) as soon as ``last`` holds
    epoch ``after_epoch`` or later; returns the epoch of the checkpoint it left."""
    proc = subprocess.Popen(
        command, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + KILL_TIMEOUT_S
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if _saved_epoch(last) >= after_epoch:
                os.killpg(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, f"the run was not killed (exit {proc.returncode})"
    return _saved_epoch(last)


def _test_metrics(root: Path) -> dict[str, str]:
    """The ``test/`` values of a run folder's CSV logs (all versions: a resumed run logs in a
    new one)."""
    values: dict[str, str] = {}
    for path in sorted(root.glob("lightning_logs/version_*/metrics.csv")):
        with open(path, newline="") as handle:
            for row in csv.DictReader(handle):
                values.update({k: v for k, v in row.items() if k.startswith("test/") and v})
    return values


def _kill_and_resume(
    tmp_path: Path, config: Path, epochs: int, after_epoch: int, *extra: str
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], int]:
    """The uninterrupted run, and the same run killed with SIGKILL once its ``last.ckpt`` holds
    epoch ``after_epoch`` and resumed from that file with ``--ckpt_path``; returns the two
    final ``last.ckpt`` state dicts, after comparing their test metrics."""
    from structssl.cli import cli_main

    full, cut = tmp_path / "full", tmp_path / "cut"
    last = cut / "checkpoints" / "last.ckpt"
    cli_main(_fit_command(config, full, epochs, *extra)[3:])  # in this process: one start less
    killed_at = _fit_killed(_fit_command(config, cut, epochs, *extra), last, after_epoch)
    assert after_epoch <= killed_at < epochs - 1, f"killed after epoch {killed_at}"
    _run_cli(_fit_command(config, cut, epochs, *extra, f"--ckpt_path={last}"))
    want, got = (
        torch.load(root / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
        for root in (full, cut)
    )
    assert got["epoch"] == want["epoch"] == epochs - 1
    if (full / "checkpoints" / "best.ckpt").is_file():  # what test_after_fit tests
        best_want, best_got = (
            torch.load(root / "checkpoints" / "best.ckpt", map_location="cpu", weights_only=False)
            for root in (full, cut)
        )
        assert best_got["epoch"] == best_want["epoch"]
        _assert_same_state(best_got["state_dict"], best_want["state_dict"])
    metrics = _test_metrics(full)
    assert metrics, f"no test metric logged under {full}"
    assert _test_metrics(cut) == metrics
    return want["state_dict"], got["state_dict"], killed_at


def _assert_same_state(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys()
    for key, value in want.items():  # bit for bit (buffers may hold NaN: "not set")
        torch.testing.assert_close(got[key], value, rtol=0, atol=0, equal_nan=True, msg=key)


def test_quickstart_killed_mid_annealing_resumes_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """configs/quickstart.yaml as shipped (shuffle on, the 5-epoch C_u ramp), 6 epochs: killed
    with ``kill -9`` during epoch 2 or 3 of the ramp, resumed from ``last.ckpt``."""
    monkeypatch.chdir(tmp_path)
    want, got, killed_at = _kill_and_resume(tmp_path, ROOT / "configs" / "quickstart.yaml", 6, 1)
    assert killed_at < 4  # C_u still ramping when killed
    _assert_same_state(got, want)


def test_corpus_constrained_composite_killed_mid_annealing_resumes_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """configs/multilabel_composite_emotions.yaml as shipped (float64, corpus dual
    decomposition with LDC + LCC, C_m x 3 every 5 epochs) but 6 epochs of 10 L-BFGS iterations:
    killed with ``kill -9`` after epoch 1 and resumed across the C_m step of epoch 5."""
    if not (_data_dir() / "mulan_emotions").is_dir():
        pytest.skip(f"the shared Mulan emotions data is not available under {_data_dir()}")
    from structssl.data import ENV_VAR

    monkeypatch.setenv(ENV_VAR, str(_data_dir()))
    monkeypatch.chdir(tmp_path)
    config = ROOT / "configs" / "multilabel_composite_emotions.yaml"
    want, got, killed_at = _kill_and_resume(
        tmp_path, config, 6, 1, "--model.init_args.lbfgs_max_iter=10"
    )
    assert killed_at < 4  # the resumed run crosses the C_m step of epoch 5
    assert all(v.dtype == torch.float64 for k, v in got.items() if k.startswith("scorer"))
    _assert_same_state(got, want)


def _fit_multilabel(name: str, root: Path, epochs: int, ckpt: Any = None) -> pl.LightningModule:
    from test_ddp import build

    from structssl.training.checkpointing import run_checkpoints

    model, data, callbacks = build(name)
    trainer = pl.Trainer(
        accelerator="cpu", devices=1, precision="64-true", max_epochs=epochs, logger=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        callbacks=[*callbacks, *run_checkpoints(root / "checkpoints")], default_root_dir=root,
    )
    trainer.fit(model, datamodule=data, ckpt_path=ckpt)
    return model


@pytest.mark.parametrize("name", ["composite", "codl_plus"])
def test_corpus_constrained_procedure_resumes_exactly(name: str, tmp_path: Path) -> None:
    full = _fit_multilabel(name, tmp_path / "full", 4)
    _fit_multilabel(name, tmp_path / "cut", 2)
    last = tmp_path / "cut" / "checkpoints" / "last.ckpt"
    assert last.is_file(), f"{name} wrote no checkpoint during training"
    saved = torch.load(last, weights_only=False)
    assert saved["global_step"] > 0
    assert all(v.dtype == torch.float64 for k, v in saved["state_dict"].items() if k.startswith("scorer"))
    resumed = _fit_multilabel(name, tmp_path / "cut", 4, ckpt=str(last))
    want, got = _scorer(full), _scorer(resumed)
    for key, value in want.items():
        assert got[key].dtype == torch.float64
        assert torch.equal(got[key], value), f"{name} {key}: off by {(got[key] - value).abs().max()}"
    if name == "codl_plus":
        assert resumed._round_index == full._round_index


def test_bad_checkpoint_files_are_named(tmp_path: Path) -> None:
    from structssl.cli import check_checkpoint_file

    good = tmp_path / "good.ckpt"
    torch.save({"state_dict": {"w": torch.ones(1000)}}, good)
    check_checkpoint_file(good)
    empty = tmp_path / "empty.ckpt"
    empty.write_bytes(b"")
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    garbage = tmp_path / "garbage.ckpt"
    garbage.write_bytes(b"not a checkpoint at all\n" * 10)
    for bad in (empty, truncated, garbage):
        with pytest.raises(ValueError, match=str(bad)):
            check_checkpoint_file(bad)
    with pytest.raises(FileNotFoundError, match="missing.ckpt"):
        check_checkpoint_file(tmp_path / "missing.ckpt")
    check_checkpoint_file("last")  # Lightning's own names pass through


def test_cli_fit_with_a_truncated_checkpoint_names_it(tmp_path: Path) -> None:
    from structssl.cli import cli_main

    bad = tmp_path / "last.ckpt"
    bad.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(ValueError, match=str(bad)):
        cli_main(["fit", "--config", str(ROOT / "configs" / "quickstart.yaml"),
                  f"--ckpt_path={bad}", f"--trainer.default_root_dir={tmp_path}"])


def test_config_save_keeps_a_users_config_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    mine = tmp_path / "config.yaml"
    mine.write_text("my own file\n")
    with pytest.warns(UserWarning, match="not saving the run's config"):
        _quickstart(tmp_path, 1, "--trainer.logger=false")
    assert mine.read_text() == "my own file\n"


def test_cluster_output_is_not_overwritten(tmp_path: Path) -> None:
    from structssl.clustering.cli import main

    out = tmp_path / "clusters.txt"
    out.write_text("mine\n")
    args = ["--num-messages", "40", "--window", "10", "--num-train", "1", "--folds", "0",
            "--strategy", "pairwise", "--decoders", "greedy", "--cluster-out", str(out)]
    assert main(args) == 2
    assert out.read_text() == "mine\n"
    assert main([*args, "--overwrite"]) == 0
    assert out.read_text() != "mine\n"
