"""Exact resume, checkpoints during training, bad checkpoint files, files never overwritten.

A run stopped after epoch k (its ``last.ckpt``, as after a ``kill -9`` between epochs) and
resumed with ``--ckpt_path`` to epoch K ends with exactly the weights of the uninterrupted run
to K: the quick start as shipped (shuffle on, the ``CuRamp`` annealing under way at k) and
seed 004's composite likelihood and CoDL+ (corpus constraints, ``C_m`` annealing, float64).
"""

from __future__ import annotations

import sys
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


def test_quickstart_resumed_mid_annealing_ends_with_the_uninterrupted_weights(
    tmp_path: Path,
) -> None:
    full = _quickstart(tmp_path / "full", 4)
    _quickstart(tmp_path / "cut", 2)  # stopped after epoch 2 of the 5-step C_u ramp
    last = tmp_path / "cut" / "checkpoints" / "last.ckpt"
    assert last.is_file()
    resumed = _quickstart(tmp_path / "cut", 4, f"--ckpt_path={last}")
    assert resumed.trainer.current_epoch == full.trainer.current_epoch == 4
    want, got = _scorer(full.model), _scorer(resumed.model)
    for key, value in want.items():
        assert torch.equal(got[key], value), f"{key}: off by {(got[key] - value).abs().max()}"


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
