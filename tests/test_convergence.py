"""Training to convergence: ``StructuredModule(tolerance=...)`` (issues 16 and 17).

The stop (module docstring of :mod:`structssl.training.modules`, "Convergence"): at the end of
an epoch whose objective is the final one (no schedule under way) training stops when the
relative decrease of the objective over the epoch is below ``tolerance`` or L-BFGS ended the
epoch by its own tests. Tiny synthetic chains (float64), no shared data.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Optional
from unittest import mock

import pytest
import torch

pl = pytest.importorskip("pytorch_lightning")

from structssl.constraints import AllowedFirst, ConstraintSet  # noqa: E402
from structssl.data import SyntheticHMMDataModule  # noqa: E402
from structssl.scorers import LinearChainScorer  # noqa: E402
from structssl.scorers.multilabel import MultiLabelScorer  # noqa: E402
from structssl.structures import LinearChain, PairwiseMultiLabel  # noqa: E402
from structssl.training import (  # noqa: E402
    CBarrier,
    CCCPModule,
    CoDLPlusModule,
    CompositeLikelihoodModule,
    LabelSwitchingModule,
    SupervisedModule,
    TransductiveModule,
)
from structssl.training.checkpointing import LastCheckpoint  # noqa: E402
from structssl.training.modules import init_options  # noqa: E402

from processes import cpu_ddp_strategy, run_script  # noqa: E402

pytestmark = [
    # Lightning's advice (workers, sync_dist) and its pytree deprecation: not ours
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.usefixtures("one_thread"),
]

CAP = 200  # an epoch cap far beyond what the tolerances below need


def _data(num_labeled: int = 24) -> SyntheticHMMDataModule:
    return SyntheticHMMDataModule(
        num_train=24, num_labeled=num_labeled, num_dev=4, num_test=4, num_states=3, length=6,
        dim=4, separation=2.0, seed=3,
    )


def _supervised(tolerance: Optional[float], lbfgs_max_iter: int = 3) -> SupervisedModule:
    torch.manual_seed(0)
    return SupervisedModule(
        LinearChain(3), LinearChainScorer(3, input_dim=4), lbfgs_max_iter=lbfgs_max_iter,
        tolerance=tolerance,
    )


def _fit(
    model: Any, data: Any, max_epochs: int = CAP, callbacks: Optional[list[Any]] = None,
    root: Optional[Path] = None, ckpt_path: Optional[Path] = None,
) -> Any:
    trainer = pl.Trainer(
        accelerator="cpu", max_epochs=max_epochs, precision="64-true", logger=False,
        enable_checkpointing=root is not None, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0,
        callbacks=list(callbacks or []) + ([LastCheckpoint(root)] if root is not None else []),
    )
    trainer.fit(model, datamodule=data, ckpt_path=ckpt_path)
    return trainer


def _objective(model: SupervisedModule, data: SyntheticHMMDataModule) -> float:
    """J(w) on the whole labeled split (what the full-batch training step minimises)."""
    batch = {k: v.double() if torch.is_tensor(v) and v.is_floating_point() else v
             for k, v in data.collate(data.splits["labeled"]).items()}
    with torch.no_grad():
        return float(model.objective_terms({"labeled": batch}).objective)


# ------------------------------------------------------------------ options
@pytest.mark.parametrize("bad", [-1e-5, 0.0, 0, True, "1e-5", float("nan"), float("inf")])
def test_bad_tolerances_are_named(bad: Any) -> None:
    with pytest.raises(ValueError, match="tolerance must be") as err:
        _supervised(bad)
    assert f"got {bad!r}" in str(err.value)


@pytest.mark.parametrize("name", ["cccp", "label_switching", "composite", "codl_plus"])
def test_procedures_with_their_own_stopping_rule_refuse_it(name: str) -> None:
    chain, scorer = LinearChain(3), LinearChainScorer(3, input_dim=4)
    multilabel, ml_scorer = PairwiseMultiLabel(3), MultiLabelScorer(3, input_dim=4)
    build = {
        "cccp": lambda: CCCPModule(
            chain, scorer, ConstraintSet([AllowedFirst(["a"])], labels=["a", "b", "c"]),
            tolerance=1e-4),
        "label_switching": lambda: LabelSwitchingModule(chain, scorer, tolerance=1e-4),
        "composite": lambda: CompositeLikelihoodModule(multilabel, ml_scorer, tolerance=1e-4),
        "codl_plus": lambda: CoDLPlusModule(multilabel, ml_scorer, tolerance=1e-4),
    }[name]
    cls = {"cccp": "CCCPModule", "label_switching": "LabelSwitchingModule",
           "composite": "CompositeLikelihoodModule", "codl_plus": "CoDLPlusModule"}[name]
    with pytest.raises(ValueError, match=cls + r" does not take tolerance \(got 0.0001\): "):
        build()


def test_tolerance_is_an_option_of_every_procedure_through_configs() -> None:
    for cls in (SupervisedModule, TransductiveModule, CCCPModule, CompositeLikelihoodModule):
        assert "tolerance" in init_options(cls), cls.__name__
    assert _supervised(1e-4).hparams["tolerance"] == 1e-4


# ------------------------------------------------------------------ the stop
def test_none_keeps_the_epoch_cap() -> None:
    model = _supervised(None)
    trainer = _fit(model, _data(), max_epochs=12)
    assert trainer.current_epoch == 12 and model.converged is None


def test_a_fit_stops_at_the_tolerance_near_the_optimum() -> None:
    data = _data()
    model = _supervised(1e-7)
    trainer = _fit(model, data)
    info = model.converged
    assert info is not None and info["reason"] == "relative_decrease", info
    assert trainer.current_epoch == info["epoch"] + 1 < CAP
    assert 0 <= info["relative_decrease"] < 1e-7
    # the optimum, by L-BFGS run until its own tests hold (float64)
    reference = _supervised(None, lbfgs_max_iter=2000)
    _fit(reference, data, max_epochs=1)
    best = _objective(reference, data)
    got = _objective(model, data)
    assert best <= got + 1e-12 and (got - best) / best < 1e-5, (got, best)
    # a looser tolerance stops earlier, farther from the optimum
    loose = _supervised(1e-2)
    _fit(loose, data)
    assert loose.converged is not None and loose.converged["epoch"] < info["epoch"]
    assert _objective(loose, data) > got


def test_lbfgs_own_exit_stops_at_the_first_final_epoch() -> None:
    """L-BFGS converging inside an epoch ends the run at once (no second epoch to compare);
    while a C barrier still moves C it never does."""
    model = _supervised(1e-12, lbfgs_max_iter=500)
    trainer = _fit(model, _data())
    assert model.converged is not None and model.converged["reason"] == "lbfgs"
    assert trainer.current_epoch == 1 and model.converged["lbfgs_iterations"] < 500
    barrier = _supervised(1e-12, lbfgs_max_iter=500)
    trainer = _fit(barrier, _data(), callbacks=[CBarrier(steps=3)])
    # C = C/8, C/4, C/2 in epochs 0-2: the first final objective is epoch 3's
    assert barrier.converged is not None and barrier.converged["epoch"] == 3
    assert trainer.current_epoch == 4


def test_first_order_optimisers_stop_on_the_relative_decrease() -> None:
    """Adam, mini-batches of 8 (3 steps an epoch): J_e is the epoch's mean objective."""
    torch.manual_seed(0)
    model = SupervisedModule(
        LinearChain(3), LinearChainScorer(3, input_dim=4), optimizer="adam", lr=0.05,
        tolerance=1e-3,
    )
    data = SyntheticHMMDataModule(
        num_train=24, num_labeled=24, num_dev=4, num_test=4, num_states=3, length=6, dim=4,
        separation=2.0, seed=3, batch_size=8,
    )
    trainer = _fit(model, data)
    info = model.converged
    assert info is not None and info["reason"] == "relative_decrease"
    assert info["lbfgs_iterations"] is None and trainer.current_epoch == info["epoch"] + 1 < CAP
    assert info["relative_decrease"] < 1e-3


@pytest.mark.parametrize("tolerance", [1e6, 1e-3])
def test_no_stop_while_cu_is_annealed(tolerance: float) -> None:
    """nabla-TSVM with a warm start (C_u = 0, epoch 0) and C_u annealed by a callback
    (C_u/4, C_u/2 in epochs 1-2, C_u from epoch 3): a tolerance that every pair of epochs
    meets stops at epoch 4, the first whose previous epoch had the final objective too."""
    torch.manual_seed(0)
    model = TransductiveModule(
        LinearChain(3), LinearChainScorer(3, input_dim=4), warm_start_epochs=1, cu_start=0.25,
        lbfgs_max_iter=2, tolerance=tolerance,
    )
    trainer = _fit(model, _data(num_labeled=8))
    assert model.converged is not None
    if tolerance > 1:
        assert model.converged["epoch"] == 4 and trainer.current_epoch == 5
    assert model.converged["epoch"] >= 4, model.converged


def test_the_stop_is_reproducible_after_resume(tmp_path: Path) -> None:
    data = _data()
    whole = _supervised(1e-6)
    _fit(whole, data)
    assert whole.converged is not None and whole.converged["reason"] == "relative_decrease"
    stop = whole.converged["epoch"]
    assert stop >= 4, stop  # room to stop the first run with a comparable epoch behind it
    first = _supervised(1e-6)
    _fit(first, _data(), max_epochs=stop, root=tmp_path)
    assert first.converged is None
    saved = torch.load(tmp_path / "last.ckpt", weights_only=False)["structssl"]
    assert saved["previous_objective"] is not None
    resumed = _supervised(1e-6)
    trainer = _fit(resumed, _data(), root=tmp_path / "resumed", ckpt_path=tmp_path / "last.ckpt")
    assert resumed.converged is not None and resumed.converged["epoch"] == stop
    assert trainer.current_epoch == stop + 1
    for key, value in whole.scorer.state_dict().items():
        assert torch.allclose(resumed.scorer.state_dict()[key], value, rtol=0, atol=1e-10), key


# ------------------------------------------------------------------ the user's command
def test_the_tagger_config_trains_to_convergence(tmp_path: Path) -> None:
    """``structssl fit --config configs/tagger.yaml --model.init_args.tolerance=...``."""
    from structssl.cli import main

    rng = random.Random(0)
    words = {"B-PER": ["Ana", "Luis"], "B-LOC": ["Madrid", "Lima"], "O": ["vive", "en", "y"]}
    lines = []
    for _ in range(30):
        for _ in range(rng.randint(2, 7)):
            tag = rng.choice(list(words))
            lines.append(f"{rng.choice(words[tag])} {tag}")
        lines.append("")
    train = tmp_path / "TRAIN.conll"
    train.write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = Path(__file__).resolve().parents[1] / "configs" / "tagger.yaml"
    with mock.patch("sys.argv", ["structssl"]):
        main([
            "fit", f"--config={config}", f"--data.train_file={train}",
            f"--trainer.default_root_dir={tmp_path / 'RUN_DIR'}", "--trainer.max_epochs=100",
            "--model.init_args.tolerance=1e-4", "--model.init_args.lbfgs_max_iter=5",
            "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false",
            "--test_after_fit=false", "--num_threads=1",
        ])
    ckpt = torch.load(tmp_path / "RUN_DIR" / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["hyper_parameters"]["tolerance"] == 1e-4
    assert ckpt["epoch"] + 1 < 100  # stopped by the tolerance, not the cap


# ------------------------------------------------------------------ several processes
DDP_TIMEOUT_S = 300


class _SaveStop(pl.Callback):
    """Each rank writes where it stopped and its weights."""

    def __init__(self, out: str) -> None:
        self.out = out

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        torch.save(
            {"epoch": trainer.current_epoch, "converged": pl_module.converged,
             "weights": {k: v.detach().double().cpu()
                         for k, v in pl_module.scorer.state_dict().items()}},
            Path(self.out) / f"stop.devices{trainer.world_size}.rank{trainer.global_rank}.pt",
        )


def _fit_ranks(devices: int, out: str) -> None:
    """The supervised fit of :func:`test_two_processes_stop_together` on ``devices`` processes."""
    torch.set_num_threads(1)
    strategy: Any = "auto"
    if devices > 1:
        strategy = cpu_ddp_strategy()
    trainer = pl.Trainer(
        accelerator="cpu", devices=devices, strategy=strategy, precision="64-true",
        max_epochs=CAP, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0, callbacks=[_SaveStop(out)],
    )
    # 23 labeled sentences: shards of 12 and 11
    data = SyntheticHMMDataModule(
        num_train=23, num_labeled=23, num_dev=4, num_test=4, num_states=3, length=6, dim=4,
        separation=2.0, seed=3,
    )
    trainer.fit(_supervised(1e-6), datamodule=data)


def test_two_processes_stop_together(tmp_path: Path) -> None:
    """DDP (2 processes, gloo, started by a subprocess running this file): both ranks stop at
    the epoch one process stops at, with its weights."""
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not available")
    result = run_script(Path(__file__).resolve(), str(tmp_path), timeout_s=DDP_TIMEOUT_S)
    log = result.stdout
    files = [tmp_path / f"stop.devices2.rank{r}.pt" for r in (0, 1)]
    assert result.returncode == 0 and all(f.is_file() for f in files), log[-4000:]
    ranks = [torch.load(f, weights_only=False) for f in files]
    _fit_ranks(1, str(tmp_path))
    single = torch.load(tmp_path / "stop.devices1.rank0.pt", weights_only=False)
    assert single["converged"] is not None and single["epoch"] < CAP
    for got in ranks:
        assert got["epoch"] == single["epoch"], (got["epoch"], single["epoch"])
        assert got["converged"]["epoch"] == single["converged"]["epoch"]
        assert got["converged"]["reason"] == single["converged"]["reason"]
        for key, value in single["weights"].items():
            assert float((got["weights"][key] - value).abs().max()) < 1e-6, key


if __name__ == "__main__":
    import sys as _sys

    _fit_ranks(2, _sys.argv[1])
