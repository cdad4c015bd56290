"""Several processes (Lightning DDP, CPU, gloo): 2 processes end with 1 process's weights, or refuse.

The 2-process runs are started by a subprocess running this file (``python tests/test_ddp.py
PROCEDURES OUT``), bounded by a timeout (a hang fails the test and its process group is
killed), with ``processes.cpu_ddp_strategy()`` on gloo (``ddp_fork``, or ``ddp_spawn``
where a process cannot fork); the 1-process runs train the same model on the same data in
the test's own process. float64 throughout
(``precision="64-true"``); labeled and unlabeled sets of odd sizes, so the two shards differ
in size.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

import pytest
import torch

pytest.importorskip("pytorch_lightning")

import pytorch_lightning as pl  # noqa: E402

from pixel_words import PixelWords  # noqa: E402
from processes import cpu_ddp_strategy, run_script  # noqa: E402
from structssl.data import (  # noqa: E402
    CoNLLDataModule,
    SemiSupervisedDataModule,
    SyntheticHMMDataModule,
)

TIMEOUT_S = 600  # the 2-process runs of every procedure: about 2 min on 2 idle cores
HERE = Path(__file__).resolve()

pytestmark = [
    pytest.mark.skipif(
        not torch.distributed.is_available(), reason="torch.distributed is not available"
    ),
    # Lightning's advice (workers, sync_dist for logged values) and its pytree deprecation
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]


class ToyMultiLabelDataModule(SemiSupervisedDataModule):
    """Correlated multi-label data from a random linear model (K = 3 labels, D = 4 inputs)."""

    def __init__(
        self, num_labeled: int = 9, num_unlabeled: int = 13, num_eval: int = 7, tied: bool = False
    ) -> None:
        super().__init__(shuffle=True)
        self.sizes = (num_labeled, num_unlabeled, num_eval)
        self.num_labels = 3
        self.tied = tied

    def build(self) -> dict[str, list[dict[str, torch.Tensor]]]:
        gen = torch.Generator().manual_seed(0)
        n_l, n_u, n_e = self.sizes
        total = n_l + n_u + 2 * n_e
        x = torch.randn(total, 4, generator=gen, dtype=torch.float64)
        w = torch.randn(4, 3, generator=gen, dtype=torch.float64)
        y = ((x @ w + 0.5 * torch.randn(total, 3, generator=gen, dtype=torch.float64)) > 0).long()
        if self.tied:  # labels 1 and 2 always equal: a model symmetric in them, tied scores
            y[:, 2] = y[:, 1]
        ex = [{"inputs": x[i], "labels": y[i]} for i in range(total)]
        return {
            "labeled": ex[:n_l],
            "unlabeled": [{"inputs": e["inputs"]} for e in ex[n_l : n_l + n_u]],
            "dev": ex[n_l + n_u : n_l + n_u + n_e],
            "test": ex[n_l + n_u + n_e :],
        }

    @staticmethod
    def collate(examples: list[dict[str, torch.Tensor]]) -> dict[str, Any]:
        return {key: torch.stack([e[key] for e in examples]) for key in examples[0]}


class _RankSeeds(pl.Callback):
    """Seeds torch's RNG by the rank at fit start: the ranks' draws differ."""

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        torch.manual_seed(100 + trainer.global_rank)


def _hmm(two_view: bool = False) -> SyntheticHMMDataModule:
    return SyntheticHMMDataModule(
        num_train=20, num_labeled=7, num_dev=5, num_test=5, num_states=3, length=6, dim=4,
        two_view=two_view, seed=1,
    )


def _conll(root: Path, sentences: int = 23, num_labeled: Optional[int] = None) -> CoNLLDataModule:
    """Random tagged sentences of 2 to 12 tokens in ``root/train.conll`` (written once), cut
    into chunks of at most 40 padded positions for the full-batch objective; with
    ``num_labeled``, the rest are untagged."""
    import random

    path = root / "train.conll"
    if not path.is_file():
        rng = random.Random(0)
        words = {"N": ["perro", "gata", "casa", "libro"], "V": ["come", "lee", "ve"],
                 "D": ["el", "la", "un"]}
        lines = []
        for _ in range(sentences):
            for _ in range(rng.randint(2, 12)):
                tag = rng.choice("NVD")
                lines.append(f"{rng.choice(words[tag])} {tag}")
            lines.append("")
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return CoNLLDataModule(
        train_file=str(path), dev_file=None, test_file=None, max_chunk_positions=40,
        num_labeled=num_labeled,
    )


def build(
    name: str, root: Optional[Path] = None
) -> tuple[pl.LightningModule, pl.LightningDataModule, list[pl.Callback]]:
    """The procedure ``name``, its data and its annealing callbacks (small, float64 via the
    trainer); ``root``: where file-based data is written (``supervised_chunks``)."""
    from structssl.losses import NablaSVMLoss, NablaTSVMLoss
    from structssl.scorers import LinearChainScorer
    from structssl.scorers.multilabel import MultiLabelScorer
    from structssl.scorers.two_view import TwoViewScorer
    from structssl.structures import LinearChain, PairwiseMultiLabel
    from structssl.training import (
        CCCPModule,
        CoDLPlusModule,
        CompositeLikelihoodModule,
        CoTrainingModule,
        CuRamp,
        GeometricCuSchedule,
        LabelSwitchingModule,
        SupervisedModule,
        TransductiveModule,
        TSVMPlusModule,
    )

    torch.manual_seed(0)
    chain = LinearChain(3)
    lbfgs = dict(lbfgs_max_iter=8)
    if name == "supervised":
        return SupervisedModule(chain, LinearChainScorer(3, input_dim=4), **lbfgs), _hmm(), []
    if name == "zero_start":  # L-BFGS stalls at w = 0: every rank starts from rank 0's draw
        from structssl.losses import StructuredHingeLoss

        model = SupervisedModule(LinearChain(4), LinearChainScorer(4, input_dim=12),
                                 StructuredHingeLoss(), **lbfgs)
        data = PixelWords(num_labeled=21, num_dev=3, dtype=torch.float64)
        return model, data, [_RankSeeds()]
    if name == "in_order":  # an unshuffled data module: its order, epoch after epoch
        data = SyntheticHMMDataModule(num_train=9, num_labeled=9, num_dev=2, num_test=2,
                                      num_states=3, length=4, dim=4, shuffle=False)
        model = SupervisedModule(chain, LinearChainScorer(3, input_dim=4), lbfgs_max_iter=1)
        return model, data, [_FirstInputs(str(root))]
    if name == "supervised_chunks":  # CoNLL full batch evaluated in length chunks
        assert root is not None
        from structssl.losses import CRFNLLLoss

        model = SupervisedModule(LinearChain(), LinearChainScorer(init_std=0.3), CRFNLLLoss(), **lbfgs)
        return model, _conll(root), [_CountLabeled(str(root))]
    if name == "tsvm_chunks":  # tagged and untagged CoNLL sentences, both in length chunks
        assert root is not None
        from structssl.losses import CRFNLLLoss

        model = TransductiveModule(
            LinearChain(), LinearChainScorer(factored=True, init_std=0.3), CRFNLLLoss(),
            NablaTSVMLoss(tau=0.4, rho=5.0), Cu=0.5, **lbfgs,
        )
        return model, _conll(root, num_labeled=8), [_CountLabeled(str(root), "unlabeled")]
    if name == "tsvm":
        model = TransductiveModule(
            chain, LinearChainScorer(3, input_dim=4), NablaSVMLoss(epsilon=0.3, rho=5.0),
            NablaTSVMLoss(tau=0.4, rho=5.0), **lbfgs,
        )
        return model, _hmm(), [CuRamp(steps=2)]
    if name == "cotraining":
        scorer = TwoViewScorer(LinearChainScorer(3, input_dim=2), LinearChainScorer(3, input_dim=2))
        return CoTrainingModule(chain, scorer, **lbfgs), _hmm(two_view=True), [CuRamp(steps=2)]
    multilabel = PairwiseMultiLabel(3)
    scorer = MultiLabelScorer(3, input_dim=4, pairwise="linear")
    schedule = [GeometricCuSchedule(start=0.1, factor=3.0, every_n_epochs=1)]
    if name == "composite":
        # C = sigma^2 = 9: seed 004's prior on the mean likelihood, as weak as the per-example
        # scaling's with these 9 labeled examples; with C = 1 the weights after one round are so
        # small that the next constrained assignment has near-ties (differences of 1e-17 in
        # the weights, one process or two, flip labels: composite_tied tests exact ties)
        module = CompositeLikelihoodModule(multilabel, scorer, C=9.0, **lbfgs)
        return module, ToyMultiLabelDataModule(), schedule
    if name == "composite_tied":  # two labels the data cannot tell apart: tied assignments
        data = ToyMultiLabelDataModule(num_unlabeled=61, tied=True)
        return CompositeLikelihoodModule(multilabel, scorer, **lbfgs), data, schedule
    if name == "tsvm_plus":
        return TSVMPlusModule(multilabel, scorer, **lbfgs), ToyMultiLabelDataModule(), schedule
    if name == "codl_plus":
        return CoDLPlusModule(multilabel, scorer), ToyMultiLabelDataModule(), schedule
    if name == "cccp":
        return CCCPModule(chain, LinearChainScorer(3, input_dim=4), formulation="labeling"), _hmm(), []
    if name == "label_switching":  # tagged and untagged sentences (with their index)
        model = LabelSwitchingModule(LinearChain(), LinearChainScorer(init_std=0.3))
        return model, (_hmm() if root is None else _conll(root, num_labeled=8)), []
    raise ValueError(name)


class _CountLabeled(pl.Callback):
    """Writes how many examples of ``part`` (in how many chunks) each rank's first step holds."""

    def __init__(self, out: str, part: str = "labeled") -> None:
        self.out, self.part = out, part

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if trainer.current_epoch == 0 and batch_idx == 0:
            chunks = batch[self.part]
            sizes = [int(c["inputs"].shape[0]) for c in chunks]
            tag = "chunks" if self.part == "labeled" else f"{self.part}_chunks"
            where = Path(self.out) / f"{tag}.devices{trainer.world_size}.rank{trainer.global_rank}"
            where.write_text(" ".join(map(str, sizes)))


class _FirstInputs(pl.Callback):
    """Saves the labeled inputs of each epoch's first training batch."""

    def __init__(self, out: str) -> None:
        self.out = out

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if batch_idx == 0:
            where = Path(self.out) / f"in_order.epoch{trainer.current_epoch}.pt"
            torch.save(batch["labeled"]["inputs"].cpu(), where)


class _SaveWeights(pl.Callback):
    def __init__(self, out: str, name: str) -> None:
        self.out, self.name = out, name

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        state = {k: v.detach().double().cpu() for k, v in pl_module.state_dict().items()}
        torch.save(state, Path(self.out) / f"{self.name}.rank{trainer.global_rank}.pt")


#: epochs per procedure (3 unless named): the tied assignments part only after a few rounds
EPOCHS = {"composite_tied": 6}


def fit(name: str, devices: int, out: str, epochs: Optional[int] = None, ddp: bool = False) -> None:
    """Train ``name`` on ``devices`` processes (DDP when more than one, or ``ddp``) for
    ``epochs`` (default :data:`EPOCHS`); each rank saves its weights under ``out``."""
    epochs = EPOCHS.get(name, 3) if epochs is None else epochs
    model, data, callbacks = build(name, Path(out))
    strategy: Any = "auto"
    if devices > 1 or ddp:
        strategy = cpu_ddp_strategy()
    trainer = pl.Trainer(
        accelerator="cpu", devices=devices, strategy=strategy, precision="64-true",
        max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0,
        callbacks=[*callbacks, _SaveWeights(out, name)],
    )
    trainer.fit(model, datamodule=data)


def _run_two_processes(names: list[str], out: Path) -> subprocess.CompletedProcess:
    return run_script(HERE, ",".join(names), str(out), timeout_s=TIMEOUT_S)


SHARDED = [
    "supervised", "supervised_chunks", "tsvm", "tsvm_chunks", "cotraining", "composite",
    "composite_tied", "tsvm_plus",
]
REFUSING = ["cccp", "label_switching", "codl_plus"]


@pytest.fixture(scope="module")
def two_process_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("ddp")
    result = _run_two_processes(SHARDED + REFUSING + ["zero_start"], out)
    return out, result.stdout


@pytest.mark.parametrize("name", SHARDED)
def test_two_processes_end_with_one_process_weights(
    name: str, two_process_runs: tuple[Path, str], tmp_path: Path
) -> None:
    out, log = two_process_runs
    files = [out / f"{name}.rank{r}.pt" for r in (0, 1)]
    assert all(f.is_file() for f in files), f"{name}: no weights from both ranks\n{log[-4000:]}"
    rank0, rank1 = (torch.load(f) for f in files)
    fit(name, 1, str(tmp_path))
    single = torch.load(tmp_path / f"{name}.rank0.pt")
    for key, value in single.items():
        if key.startswith("scorer"):
            assert torch.equal(rank0[key], rank1[key]), f"{name}: ranks differ on {key}"
            diff = float((rank0[key] - value).abs().max())
            assert diff < 1e-5, f"{name}: {key} differs from 1 process by {diff}"


def test_a_stalled_zero_start_is_drawn_once_for_every_rank(
    two_process_runs: tuple[Path, str]
) -> None:
    """A margin loss's first L-BFGS step leaves w = 0 (every labeling ties), so the fit draws a
    start: rank 0's, broadcast, so that the ranks (whose RNGs differ here) keep one model; each
    drawing its own made them diverge."""
    out, log = two_process_runs
    files = [out / f"zero_start.rank{r}.pt" for r in (0, 1)]
    assert all(f.is_file() for f in files), f"zero_start: no weights from both ranks\n{log[-4000:]}"
    rank0, rank1 = (torch.load(f) for f in files)
    scorer = [key for key in rank0 if key.startswith("scorer")]
    assert scorer and all(bool(rank0[key].any()) for key in scorer)  # it left 0
    for key in scorer:
        assert torch.equal(rank0[key], rank1[key]), f"ranks differ on {key}"


def test_chunked_full_batch_is_sharded(two_process_runs: tuple[Path, str]) -> None:
    """Each rank evaluates the length chunks of its own shard of the labeled set: together
    exactly the labeled set (23 sentences), each rank about half, in several chunks."""
    out, log = two_process_runs
    sizes = [
        [int(v) for v in (out / f"chunks.devices2.rank{r}").read_text().split()] for r in (0, 1)
    ]
    assert sorted(sum(s) for s in sizes) == [11, 12], sizes
    assert all(len(s) > 1 for s in sizes), sizes


def test_chunked_unlabeled_part_is_sharded(two_process_runs: tuple[Path, str]) -> None:
    """nabla-TSVM on tagged + untagged CoNLL sentences: each rank evaluates the length chunks
    of its own shard of the 15 untagged sentences (the weights equal one process's, above)."""
    out, log = two_process_runs
    files = [out / f"unlabeled_chunks.devices2.rank{r}" for r in (0, 1)]
    assert all(f.is_file() for f in files), log[-4000:]
    sizes = [[int(v) for v in f.read_text().split()] for f in files]
    assert sorted(sum(s) for s in sizes) == [7, 8], sizes
    assert any(len(s) > 1 for s in sizes), sizes


@pytest.mark.parametrize("name", REFUSING)
def test_unshardable_procedures_refuse_two_processes(
    name: str, two_process_runs: tuple[Path, str]
) -> None:
    """A real 2-process run of CCCP, label switching and CoDL+ stops at the start of fit with
    an error naming the procedure and what to use instead; no rank trains a model of its own."""
    out, log = two_process_runs
    refused = [line for line in log.splitlines() if line.startswith(f"REFUSED {name} ")]
    assert refused, log[-4000:]
    cls = {"cccp": "CCCPModule", "label_switching": "LabelSwitchingModule",
           "codl_plus": "CoDLPlusModule"}[name]
    assert f"{cls} cannot train on 2 processes" in refused[0]
    assert "--trainer.devices=1" in refused[0]
    assert not (out / f"{name}.rank0.pt").exists()


@pytest.mark.parametrize("name", ["cccp", "label_switching", "codl_plus"])
def test_unsharded_procedures_refuse_world_size_above_one(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from structssl.training import distributed

    model, _, _ = build(name)
    distributed.check_sharding(model)  # one process: fine
    monkeypatch.setattr(distributed, "world_size", lambda: 3)
    with pytest.raises(RuntimeError, match=r"cannot train on 3 processes.*devices=1"):
        distributed.check_sharding(model)


def test_balance_penalty_refuses_world_size_above_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from structssl.training import distributed

    model, _, _ = build("tsvm")
    monkeypatch.setattr(distributed, "world_size", lambda: 2)
    distributed.check_sharding(model)  # balance_weight = 0: shards fine
    model.balance_weight = 1.0
    with pytest.raises(RuntimeError, match="balance_weight"):
        distributed.check_sharding(model)


def test_one_process_under_ddp_keeps_an_unshuffled_order(two_process_runs: tuple[Path, str]) -> None:
    """``--trainer.devices=1 --trainer.strategy=ddp`` with ``shuffle: false``: the training
    batches come in the data module's order every epoch (Lightning's own sampler would
    shuffle them)."""
    out, log = two_process_runs
    model, data, _ = build("in_order", out)
    data.setup("fit")
    want = torch.stack([e["inputs"] for e in data.splits["labeled"]]).double()
    for epoch in (0, 1):
        got = torch.load(out / f"in_order.epoch{epoch}.pt")
        assert torch.equal(got.double(), want), f"epoch {epoch}: the batch is reordered"


def test_shard_sampler_partitions_without_repeats() -> None:
    from structssl.data import ShardSampler

    for shuffle in (False, True):
        shards = [list(ShardSampler(11, 3, r, shuffle, seed=5, pad=False)) for r in range(3)]
        assert sorted(sum(shards, [])) == list(range(11))
        padded = [list(ShardSampler(11, 3, r, shuffle, seed=5, pad=True)) for r in range(3)]
        assert {len(p) for p in padded} == {4}
    a = ShardSampler(11, 1, 0, True, seed=5, pad=False)
    first = list(a)
    a.set_epoch(1)
    assert list(a) != first and sorted(a) == list(range(11))
    a.set_epoch(0)
    assert list(a) == first  # a function of (seed, epoch): resumable


def _worker(names: list[str], out: str) -> None:
    torch.set_num_threads(1)
    fit("in_order", 1, out, epochs=2, ddp=True)
    for name in names:
        try:
            fit(name, 2, out)
        except Exception as err:  # spawn wraps the ranks' RuntimeError
            if name not in REFUSING or "cannot train on 2 processes" not in str(err):
                raise
            print(f"REFUSED {name}", " ".join(str(err).split()), flush=True)


if __name__ == "__main__":
    _worker(sys.argv[1].split(","), sys.argv[2])
