"""Training procedures, annealing callbacks and data modules (Lightning layer)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

pl = pytest.importorskip("pytorch_lightning")

from pixel_words import PixelWords  # noqa: E402
from structssl.data import (  # noqa: E402
    CoNLLDataModule,
    SyntheticHMMDataModule,
    split_pool,
)
from structssl.losses import (  # noqa: E402
    CRFNLLLoss,
    NablaCoSVMLoss,
    NablaSVMLoss,
    NablaTSVMLoss,
    StructuredHingeLoss,
)
from structssl.scorers import LinearChainScorer, TwoViewScorer  # noqa: E402
from structssl.structures import LinearChain  # noqa: E402
from structssl.training import (  # noqa: E402
    CBarrier,
    CoTrainingModule,
    CuRamp,
    GeometricAnnealing,
    GeometricCuSchedule,
    RhoContinuation,
    SupervisedModule,
    TransductiveModule,
)

# Lightning 2.6's pytree helper trips a torch deprecation warning (not ours)
pytestmark = pytest.mark.filterwarnings(
    r"ignore:.*isinstance\(treespec, LeafSpec\)` is deprecated.*:FutureWarning"
)

C_LABELS, DIM = 3, 4


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """The tiny batched DPs are latency bound: one intra-op thread is far faster."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _data(**kwargs: Any) -> SyntheticHMMDataModule:
    args: dict[str, Any] = dict(
        num_train=24, num_labeled=8, num_dev=6, num_test=6, num_states=C_LABELS, length=6,
        dim=DIM, separation=3.0,
    )
    args.update(kwargs)
    return SyntheticHMMDataModule(**args)


def _scorer(dim: int = DIM) -> LinearChainScorer:
    return LinearChainScorer(C_LABELS, input_dim=dim)


def _module(kind: str, optimizer: str = "lbfgs", **kwargs: Any) -> Any:
    chain = LinearChain(C_LABELS)
    opt: dict[str, Any] = dict(optimizer=optimizer, lbfgs_max_iter=5)
    if optimizer != "lbfgs":
        opt["lr"] = 0.05
    opt.update(kwargs)
    if kind == "supervised":
        return SupervisedModule(chain, _scorer(), **opt)
    if kind == "transductive":
        return TransductiveModule(chain, _scorer(), **opt)
    assert kind == "cotraining"
    scorer = TwoViewScorer(_scorer(DIM // 2), _scorer(DIM - DIM // 2))
    return CoTrainingModule(chain, scorer, **opt)


def _trainer(**kwargs: Any) -> Any:
    args: dict[str, Any] = dict(
        accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False,
    )
    args.update(kwargs)
    return pl.Trainer(**args)


# ------------------------------------------------------------------------------ data modules
def test_split_pool_is_seeded_and_disjoint() -> None:
    lab, unl = split_pool(50, num_labeled=5, num_unlabeled=20, seed=3)
    lab2, unl2 = split_pool(50, num_labeled=5, num_unlabeled=20, seed=3)
    assert torch.equal(lab, lab2) and torch.equal(unl, unl2)
    assert len(lab) == 5 and len(unl) == 20
    assert not set(lab.tolist()) & set(unl.tolist())
    lab3, _ = split_pool(50, num_labeled=5, seed=4)
    assert not torch.equal(lab, lab3)
    by_degree, rest = split_pool(50, labeled_fraction=0.2, seed=0)
    assert len(by_degree) == 10 and len(rest) == 40
    default, _ = split_pool(50)
    assert len(default) == 5  # 10% when neither is given


def test_split_pool_errors() -> None:
    with pytest.raises(ValueError, match="at most one of num_labeled and labeled_fraction"):
        split_pool(10, num_labeled=2, labeled_fraction=0.5)
    with pytest.raises(ValueError, match=r"labeled_fraction must be in \(0, 1\]; got 1.5"):
        split_pool(10, labeled_fraction=1.5)
    with pytest.raises(ValueError, match="num_labeled must be <= the pool size 10; got 11"):
        split_pool(10, num_labeled=11)
    with pytest.raises(ValueError, match=r"num_unlabeled must be <= .* \(10 - 4 = 6\); got 7"):
        split_pool(10, num_labeled=4, num_unlabeled=7)
    with pytest.raises(ValueError, match="num_labeled must be an int >= 1 or None; got 0"):
        split_pool(10, num_labeled=0)


def test_synthetic_datamodule_batches() -> None:
    dm = _data(num_unlabeled=10, batch_size=4)
    dm.setup("fit")
    assert (dm.num_labeled_examples, dm.num_unlabeled_examples, dm.num_labels) == (8, 10, 3)
    batches = list(dm.train_dataloader())
    # max_size_cycle: as many steps as the longer loader (unlabeled: one batch of 10)
    assert len(batches) == 2
    batch = batches[0][0] if isinstance(batches[0], tuple) else batches[0]
    assert set(batch) == {"labeled", "unlabeled"}
    lab, unl = batch["labeled"], batch["unlabeled"]
    assert lab["inputs"].shape == (4, 6, DIM) and lab["labels"].shape == (4, 6)
    assert lab["lengths"].tolist() == [6] * 4
    assert "labels" not in unl and unl["inputs"].shape == (10, 6, DIM)
    val = next(iter(dm.val_dataloader()))
    assert val["inputs"].shape == (6, 6, DIM) and val["labels"].shape == (6, 6)


def test_synthetic_datamodule_is_reproducible_and_two_view() -> None:
    a, b = _data(), _data()
    for key in ("labeled", "unlabeled", "test"):
        for x, y in zip(a.splits[key], b.splits[key]):
            assert all(torch.equal(x[k], y[k]) for k in x)
    other = _data(split_seed=1)
    assert not all(
        torch.equal(x["inputs"], y["inputs"])
        for x, y in zip(a.splits["labeled"], other.splits["labeled"])
    )
    two = _data(two_view=True, num_labeled=None, labeled_fraction=0.5)
    assert two.num_labeled_examples == 12
    ex = two.splits["labeled"][0]
    assert ex["inputs"].shape == (6, DIM // 2) and ex["inputs_b"].shape == (6, DIM - DIM // 2)


def test_datamodule_drops_unlabeled_for_supervised() -> None:
    dm = _data(num_unlabeled=10)
    trainer = _trainer(fast_dev_run=True)
    module = _module("supervised")
    trainer.fit(module, dm)
    dm.trainer = trainer
    batch = next(iter(dm.train_dataloader()))
    batch = batch[0] if isinstance(batch, tuple) else batch
    assert set(batch) == {"labeled"}


def test_datamodule_errors() -> None:
    with pytest.raises(ValueError, match="batch_size must be an int >= 1 or None; got 0"):
        _data(batch_size=0)
    with pytest.raises(ValueError, match="num_labeled must be <= the pool size 24; got 30"):
        _data(num_labeled=30)
    with pytest.raises(ValueError, match="at most one of num_labeled and labeled_fraction"):
        CoNLLDataModule(num_labeled=3, labeled_fraction=0.5)


def test_data_package_imports_without_lightning() -> None:
    code = (
        "import sys\n"
        "for name in ('lightning', 'pytorch_lightning', 'torchmetrics', 'jsonargparse'):\n"
        "    sys.modules[name] = None\n"
        "import structssl.data\n"
        "assert 'structssl.data.modules' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


_CONLL_FIXTURE = """\
El DA O
Grupo NC B-ORG
Magenta NC I-ORG
vive VMI O
en SP O
Madrid NC B-LOC
. Fp O

Juan NC B-PER
come VMI O
en SP O
Barcelona NC B-LOC

La DA O
ONU NC B-ORG
dijo VMI O
algo PI O

Pedro NC B-PER
y CC O
Ana NC B-PER
. Fp O
"""


@pytest.mark.parametrize("two_view", [False, True])
def test_conll_datamodule_on_fixture(tmp_path: Path, two_view: bool) -> None:
    for name in ("train", "dev", "test"):
        (tmp_path / f"tiny.{name}").write_text(_CONLL_FIXTURE, encoding="utf-8")
    dm = CoNLLDataModule(
        data_dir=str(tmp_path), train_file="tiny.train", dev_file="tiny.dev",
        test_file="tiny.test", num_labeled=2, num_unlabeled=2, max_test=3, two_view=two_view,
    )
    dm.setup("fit")
    assert (dm.num_labeled_examples, dm.num_unlabeled_examples) == (2, 2)
    # the tag set is learned from the training file: O and B-/I- of LOC, ORG, PER
    assert len(dm.splits["test"]) == 3 and dm.num_labels == 7
    assert dm.tags == ("O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER")
    ex = dm.splits["labeled"][0]
    assert ex["inputs"].dtype == torch.long and ex["labels"].shape == (ex["inputs"].shape[0],)
    assert dm.num_features > 1
    chain = LinearChain(dm.num_labels)
    if two_view:
        fa, fb = dm.view_num_features
        scorer: Any = TwoViewScorer(
            LinearChainScorer(dm.num_labels, num_features=fa),
            LinearChainScorer(dm.num_labels, num_features=fb),
        )
        module: Any = CoTrainingModule(chain, scorer, lbfgs_max_iter=3, task="bio", tags=dm.tags)
    else:
        scorer = LinearChainScorer(dm.num_labels, num_features=dm.num_features)
        module = TransductiveModule(chain, scorer, lbfgs_max_iter=3, task="bio", tags=dm.tags)
    trainer = _trainer(fast_dev_run=True)
    trainer.fit(module, dm)
    (result,) = trainer.test(module, dm, verbose=False)
    assert 0.0 <= result["test/span_f1"] <= 1.0


def test_conll_real_data_smoke() -> None:
    from structssl.data.paths import resolve_data_dir

    try:
        root = resolve_data_dir()
    except FileNotFoundError:
        pytest.skip("real data directory not found")
    if not (root / "conll2002" / "esp.train").exists():
        pytest.skip("CoNLL-2002 not in the data directory")
    dm = CoNLLDataModule(dev_file="conll2002/esp.testa", test_file="conll2002/esp.testb",
                         num_labeled=5, num_unlabeled=5, max_dev=5, max_test=5)
    dm.setup("fit")
    assert dm.num_labeled_examples == 5 and len(dm.splits["test"]) == 5
    assert dm.num_features > 100


# ------------------------------------------------------------------------------ procedures
@pytest.mark.parametrize("kind", ["supervised", "transductive", "cotraining"])
@pytest.mark.parametrize("optimizer", ["lbfgs", "adam"])
def test_fast_dev_run_every_procedure(kind: str, optimizer: str) -> None:
    dm = _data(two_view=kind == "cotraining", batch_size=None if optimizer == "lbfgs" else 4,
               unlabeled_batch_size=None if optimizer == "lbfgs" else 8)
    module = _module(kind, optimizer)
    before = [p.detach().clone() for p in module.parameters()]
    trainer = _trainer(fast_dev_run=True)
    trainer.fit(module, dm)
    assert any(not torch.equal(a, b) for a, b in zip(before, module.parameters()))
    metrics = trainer.callback_metrics
    for key in ("train/objective", "train/token_accuracy", "val/token_accuracy", "val/loss"):
        assert key in metrics and math.isfinite(float(metrics[key])), key


@pytest.mark.parametrize(
    "loss", [CRFNLLLoss(), NablaSVMLoss(), StructuredHingeLoss()], ids=lambda x: type(x).__name__
)
def test_supervised_any_loss(loss: Any) -> None:
    module = SupervisedModule(LinearChain(C_LABELS), _scorer(), loss, lbfgs_max_iter=3)
    _trainer(fast_dev_run=True).fit(module, _data())


@pytest.mark.parametrize(
    "loss", [StructuredHingeLoss(), NablaSVMLoss()], ids=lambda x: type(x).__name__
)
def test_lbfgs_leaves_all_zero_weights_of_a_margin_loss(loss: Any) -> None:
    """From w = 0 every labeling ties: a margin loss's gradient is no descent direction and
    L-BFGS took no step, so the fit ended at w = 0 (6 % accuracy on OCR letters in a user
    test, silently). The weights now start from N(0, 0.01^2), with a warning."""
    pl.seed_everything(0)
    module = SupervisedModule(LinearChain(4), LinearChainScorer(4, input_dim=12), loss)
    with pytest.warns(UserWarning, match=r"L-BFGS made no step from all-zero weights \(with "
                      rf"{type(loss).__name__}, .* set the scorer's init_std"):
        _trainer(max_epochs=2).fit(module, PixelWords())
    assert all(bool(p.any()) for p in module.scorer.parameters())
    stuck = SupervisedModule(LinearChain(4), LinearChainScorer(4, input_dim=12), loss)
    stuck._zero_checked = True  # the check off: the fit stays at 0, as before
    _trainer(max_epochs=2).fit(stuck, PixelWords())
    assert not any(bool(p.any()) for p in stuck.scorer.parameters())


def test_sgd_optimizer_runs() -> None:
    module = _module("supervised", "sgd", momentum=0.9)
    _trainer(fast_dev_run=True).fit(module, _data(batch_size=4))


class _StepValues(pl.Callback):
    """Each training step's objective (the step's return value) and labeled batch size, and
    the logged ``train/...`` values after each epoch."""

    def __init__(self) -> None:
        self.steps: list[list[tuple[float, int]]] = []
        self.logged: list[dict[str, float]] = []

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        self.steps.append([])

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.steps[-1].append((float(outputs["loss"]), int(batch["labeled"]["inputs"].shape[0])))

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        self.logged.append({k: float(v) for k, v in trainer.callback_metrics.items()
                            if k.startswith("train/")})


def test_logged_training_values_are_the_epoch_means_of_the_steps() -> None:
    """train/objective is the mean of the epoch's step objectives weighted by their labeled
    examples (8 labeled in batches of 3, 3, 2), logged once per epoch; C, Cu and rho too."""
    steps = _StepValues()
    module = _module("transductive", "adam", C=2.0, Cu=0.5)
    _trainer(max_epochs=3, callbacks=[steps], num_sanity_val_steps=0).fit(
        module, _data(batch_size=3, unlabeled_batch_size=5, num_unlabeled=10, shuffle=False))
    assert [[size for _, size in s] for s in steps.steps] == [[3, 3, 2]] * 3
    for epoch, logged in zip(steps.steps, steps.logged):
        weights = sum(size for _, size in epoch)
        mean = sum(value * size for value, size in epoch) / weights
        assert logged["train/objective"] == pytest.approx(mean, rel=1e-6)
        assert logged["train/C"] == 2.0 and logged["train/Cu"] == 0.5
        assert logged["train/rho"] == pytest.approx(10.0)
        assert {"train/labeled_loss", "train/unlabeled_loss", "train/weight_norm_squared"} <= set(logged)
    assert steps.logged[0]["train/objective"] != steps.logged[2]["train/objective"]


def test_objective_scaling_matches_formula() -> None:
    dm = _data(num_unlabeled=10)
    module = _module("transductive", Cu=0.5, C=2.0)
    torch.nn.init.normal_(module.scorer.emission.weight)
    trainer = _trainer(fast_dev_run=True)
    trainer.fit(module, dm)  # attaches the trainer and data module
    module.set_current("C", 2.0)
    module.set_current("Cu", 0.5)
    batch = {key: dm.collate(dm.splits[key]) for key in ("labeled", "unlabeled")}
    terms = module.objective_terms(batch)
    lab, unl = batch["labeled"], batch["unlabeled"]
    pot = module.scorer(lab["inputs"], lab["lengths"])
    upot = module.scorer(unl["inputs"], unl["lengths"])
    loss = NablaSVMLoss()(module.structure, pot, lab["labels"], lab["lengths"])
    uloss = NablaTSVMLoss()(module.structure, upot, None, unl["lengths"])
    norm = sum((p**2).sum() for p in module.scorer.parameters())
    n, m = 8, 10
    expected = norm / (2 * n) + 2.0 * loss + 0.5 * (m / n) * uloss
    torch.testing.assert_close(terms.objective, expected)
    torch.testing.assert_close(terms.unlabeled_loss, uloss)


def test_dataset_sizes_from_arguments_and_errors() -> None:
    module = SupervisedModule(LinearChain(C_LABELS), _scorer(), num_labeled=7)
    assert module.dataset_sizes() == (7, 0)
    module = TransductiveModule(LinearChain(C_LABELS), _scorer())
    with pytest.raises(ValueError, match="num_labeled and num_unlabeled must be given"):
        module.dataset_sizes()


def test_module_argument_errors() -> None:
    chain = LinearChain(C_LABELS)
    with pytest.raises(ValueError, match="optimizer must be 'lbfgs', 'adam' or 'sgd'; got 'rms'"):
        SupervisedModule(chain, _scorer(), optimizer="rms")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="C must be > 0; got 0"):
        SupervisedModule(chain, _scorer(), C=0)
    with pytest.raises(ValueError, match="Cu must be >= 0; got -1"):
        TransductiveModule(chain, _scorer(), Cu=-1)
    with pytest.raises(TypeError, match="structure must be a Structure; got str"):
        SupervisedModule("chain", _scorer())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="loss must be an nn.Module; got str"):
        SupervisedModule(chain, _scorer(), loss="crf")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must share one smax rho"):
        TransductiveModule(chain, _scorer(), NablaSVMLoss(rho=5.0), NablaTSVMLoss(rho=10.0))
    with pytest.raises(NotImplementedError, match="have no smax rho"):
        SupervisedModule(chain, _scorer(), CRFNLLLoss()).final_value("rho")
    with pytest.raises(ValueError, match="name must be one of"):
        SupervisedModule(chain, _scorer()).final_value("lr")


def test_num_labels_mismatch_is_reported() -> None:
    module = SupervisedModule(LinearChain(4), LinearChainScorer(4, input_dim=DIM))
    with pytest.raises(ValueError, match="LinearChain num_labels = 4 does not match the data.s num_labels = 3"):
        _trainer(fast_dev_run=True).fit(module, _data())


def test_cotraining_needs_two_views() -> None:
    with pytest.raises(ValueError, match="inputs_b"):
        _trainer(fast_dev_run=True).fit(_module("cotraining"), _data())


def test_validate_and_test_run_under_inference_mode() -> None:
    seen: list[bool] = []

    class Probe(pl.Callback):
        def on_validation_batch_end(self, *args: Any, **kwargs: Any) -> None:
            seen.append(torch.is_inference_mode_enabled())

        on_test_batch_end = on_validation_batch_end

    module, dm = _module("transductive"), _data()
    trainer = _trainer(callbacks=[Probe()], inference_mode=True)
    (val,) = trainer.validate(module, dm, verbose=False)
    (test,) = trainer.test(module, dm, verbose=False)
    assert seen and all(seen)
    assert {"val/token_accuracy", "val/exact_match", "val/loss"} <= set(val)
    assert {"test/token_accuracy", "test/loss"} <= set(test)
    preds = trainer.predict(module, dm)
    assert preds[0]["labels"].shape == (6, 6)


@pytest.mark.parametrize("kind", ["supervised", "transductive"])
def test_short_training_beats_chance(kind: str) -> None:
    dm = SyntheticHMMDataModule(
        num_train=60, num_labeled=20, num_dev=10, num_test=40, num_states=4, length=10, dim=6,
        separation=2.5,
    )
    chain = LinearChain(4)
    scorer = LinearChainScorer(4, input_dim=6)
    if kind == "supervised":
        module: Any = SupervisedModule(chain, scorer, lbfgs_max_iter=15)
        callbacks: list[Any] = []
    else:
        module = TransductiveModule(chain, scorer, lbfgs_max_iter=15)
        callbacks = [CuRamp(steps=2)]
    trainer = _trainer(max_epochs=3, callbacks=callbacks, num_sanity_val_steps=0)
    trainer.fit(module, dm)
    (result,) = trainer.test(module, dm, verbose=False)
    assert result["test/token_accuracy"] > 0.6  # chance is 0.25


# ------------------------------------------------------------------------------ annealing
def test_geometric_schedule_values() -> None:
    cb = GeometricCuSchedule()  # seed 004: 1e-4, x3, up to 1, every 5 epochs
    values = [cb.multiplier_at(e) for e in range(0, 60, 5)]
    assert values[0] == pytest.approx(1e-4) and values[1] == pytest.approx(3e-4)
    assert values[8] == pytest.approx(1e-4 * 3**8) and values[9] == 1.0 and values[-1] == 1.0
    assert cb.multiplier_at(4) == pytest.approx(1e-4)
    barrier = CBarrier(steps=3)
    assert [barrier.multiplier_at(e) for e in range(5)] == [0.125, 0.25, 0.5, 1.0, 1.0]
    ramp = CuRamp(steps=2, delay_epochs=3)
    assert [ramp.multiplier_at(e) for e in range(7)] == [0.25, 0.25, 0.25, 0.25, 0.5, 1.0, 1.0]


def test_callback_errors() -> None:
    with pytest.raises(ValueError, match="hyperparameter must be 'C', 'Cu' or 'rho'; got 'lr'"):
        GeometricAnnealing("lr", 0.1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"start must be in \(0.0, 1.0\]; got 2"):
        GeometricAnnealing("C", 2)
    with pytest.raises(ValueError, match="factor must be > 1.0; got 0.5"):
        GeometricAnnealing("C", 0.1, factor=0.5)
    with pytest.raises(ValueError, match="every_n_epochs must be an int >= 1; got 0"):
        CBarrier(every_n_epochs=0)
    module = SupervisedModule(LinearChain(C_LABELS), _scorer(), CRFNLLLoss())
    with pytest.raises(NotImplementedError, match="have no smax rho"):
        _trainer(fast_dev_run=True, callbacks=[RhoContinuation()]).fit(module, _data())


class _Record(pl.Callback):
    def __init__(self) -> None:
        self.values: list[tuple[float, float, float]] = []

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        self.values.append((module.current("C"), module.current("Cu"), module.current("rho")))


def _annealing_callbacks() -> list[Any]:
    return [CBarrier(steps=2), CuRamp(steps=3, delay_epochs=2), RhoContinuation(0.25, 2.0)]


def test_annealing_applies_schedules_and_pushes_rho() -> None:
    record = _Record()
    module = _module("transductive", C=4.0, Cu=2.0)
    trainer = _trainer(max_epochs=5, callbacks=[*_annealing_callbacks(), record],
                       limit_val_batches=0, num_sanity_val_steps=0)
    trainer.fit(module, _data())
    assert [v[0] for v in record.values] == [1.0, 2.0, 4.0, 4.0, 4.0]
    assert [v[1] for v in record.values] == [0.25, 0.25, 0.25, 0.5, 1.0]
    assert [v[2] for v in record.values] == [2.5, 5.0, 10.0, 10.0, 10.0]
    assert module.loss.rho == 10.0 and module.unlabeled_loss.rho == 10.0


@pytest.mark.filterwarnings("ignore:The dirpath has changed:UserWarning")
def test_checkpoint_resume_restores_annealing_exactly(tmp_path: Path) -> None:
    def run(max_epochs: int, ckpt: Any = None, root: Path = tmp_path) -> tuple[Any, Any, Any]:
        torch.manual_seed(0)
        record, callbacks = _Record(), _annealing_callbacks()
        module = _module("transductive", C=4.0, Cu=2.0)
        trainer = _trainer(
            max_epochs=max_epochs, callbacks=[*callbacks, record], default_root_dir=root,
            enable_checkpointing=True, limit_val_batches=0, num_sanity_val_steps=0,
        )
        # shuffle off: Lightning does not checkpoint the global RNG that orders the batches
        trainer.fit(module, _data(shuffle=False), ckpt_path=ckpt)
        return record, callbacks, module

    full_record, full_callbacks, full_module = run(5, root=tmp_path / "full")
    run(2, root=tmp_path / "part")
    (ckpt,) = (tmp_path / "part").rglob("*.ckpt")
    saved = torch.load(ckpt, weights_only=False)
    states = {k: v for k, v in saved["callbacks"].items() if "[" in k}
    assert states["CBarrier[C]"]["epoch"] == 1 and states["CBarrier[C]"]["multiplier"] == 0.5
    assert saved["state_dict"]["current_C"].item() == 2.0

    record, callbacks, module = run(5, ckpt=ckpt, root=tmp_path / "resumed")
    assert record.values == full_record.values[2:]
    for a, b in zip(callbacks, full_callbacks):
        assert a.state_dict() == b.state_dict()
    for name in ("C", "Cu", "rho"):
        assert module.current(name) == full_module.current(name)
    for a, b in zip(module.parameters(), full_module.parameters()):
        torch.testing.assert_close(a, b)


def test_resume_with_other_schedule_raises() -> None:
    cb = CBarrier(steps=2)
    state = cb.state_dict()
    with pytest.raises(ValueError, match="schedule must match this one"):
        CBarrier(steps=3).load_state_dict(state)


def test_transductive_term_moves_the_boundary_into_the_gap() -> None:
    """The unlabeled nabla-TSVM term works end to end (sign, C_u scaling, pseudo-labels).

    Two vertically elongated clusters at x = -2 and x = +2; one labeled point per cluster at
    opposite heights, so the supervised max-margin boundary is tilted and cuts both clusters
    (about a quarter of the unlabeled points wrong). With the unlabeled term ramped in, the
    boundary must rotate into the empty gap at x = 0 (thesis ch. 7.2, the cluster assumption).
    """
    from structssl.scorers import MultiClassScorer
    from structssl.structures import MultiClass

    g = torch.Generator().manual_seed(0)

    def cluster(cx: float, k: int) -> torch.Tensor:
        return torch.stack([cx + 0.3 * torch.randn(k, generator=g), 2.0 * torch.randn(k, generator=g)], 1)

    unlabeled = {"inputs": torch.cat([cluster(-2.0, 40), cluster(2.0, 40)])}
    gold = torch.cat([torch.zeros(40), torch.ones(40)]).long()
    labeled = {"inputs": torch.tensor([[-2.0, 3.0], [2.0, -3.0]]), "labels": torch.tensor([0, 1])}

    def error(module: Any, ramp: list[float]) -> float:
        opt = torch.optim.LBFGS(module.scorer.parameters(), max_iter=50,
                                line_search_fn="strong_wolfe")
        for cu in [0.0] + ramp:  # supervised start, then the C_u ramp
            batch: dict[str, Any] = {"labeled": labeled}
            if cu > 0:
                module.set_current("Cu", cu * module.Cu)
                batch["unlabeled"] = unlabeled

            def closure() -> torch.Tensor:
                opt.zero_grad()
                value = module.objective_terms(batch).objective
                value.backward()
                return value

            opt.step(closure)
        with torch.inference_mode():
            return float((module.decode(unlabeled) != gold).float().mean())

    common = dict(num_labeled=2, task="multiclass")
    svm = SupervisedModule(MultiClass(2), MultiClassScorer(2, input_dim=2),
                           NablaSVMLoss(cost="zero_one"), **common)
    tsvm = TransductiveModule(MultiClass(2), MultiClassScorer(2, input_dim=2),
                              NablaSVMLoss(cost="zero_one"), NablaTSVMLoss(cost="zero_one"),
                              Cu=1.0, num_unlabeled=80, **common)
    supervised = error(svm, [])
    transductive = error(tsvm, [2.0**-k for k in range(5, -1, -1)])
    assert supervised > 0.15  # the tilted supervised boundary cuts the clusters
    assert transductive < 0.05 < supervised - 0.1


def test_a_fit_without_labeled_examples_stops_at_setup() -> None:
    """An empty training file: the fit trained nothing and reported the untrained model's
    test scores with exit status 0."""

    class Unlabeled(SyntheticHMMDataModule):
        def build(self):  # type: ignore[no-untyped-def]
            from structssl.data.modules.base import without_labels

            splits = super().build()
            unlabeled = without_labels(splits["labeled"]) + splits["unlabeled"]
            return {**splits, "unlabeled": unlabeled, "labeled": []}

    data = Unlabeled(num_train=24, num_labeled=8, num_dev=6, num_test=6, num_states=C_LABELS,
                     length=6, dim=DIM)
    with pytest.raises(ValueError, match="SupervisedModule: Unlabeled has no labeled training examples"):
        _trainer(max_epochs=1).fit(SupervisedModule(LinearChain(C_LABELS), _scorer()), data)


def test_best_checkpoint_is_never_chosen_on_the_labels_of_unlabeled_examples(tmp_path: Path) -> None:
    """A dev split made of the unlabeled training examples with their labels (seed 004's
    transductive report, MulanDataModule(evaluate_unlabeled=True)) is reported, but best.ckpt
    is the last epoch's model; an ordinary dev split chooses it."""
    from structssl.training.checkpointing import run_checkpoints

    class Transductive(SyntheticHMMDataModule):
        dev_from_unlabeled = True

    args = dict(num_train=24, num_labeled=8, num_dev=6, num_test=6, num_states=C_LABELS, length=6,
                dim=DIM, separation=3.0)
    for data, monitored in ((SyntheticHMMDataModule(**args), True), (Transductive(**args), False)):
        best, _ = run_checkpoints(tmp_path / type(data).__name__)
        _trainer(max_epochs=3, callbacks=[best], enable_checkpointing=True).fit(
            SupervisedModule(LinearChain(C_LABELS), _scorer()), data)
        assert (best.monitor == "val/token_accuracy") == monitored
        if not monitored:
            assert best.monitor is None
            assert torch.load(best.best_model_path, weights_only=False)["epoch"] == 2
