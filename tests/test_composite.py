"""Seed 004's procedures: composite likelihood module, TSVM+, CoDL+, the Mulan data module."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

pl = pytest.importorskip("pytorch_lightning")

from structssl.data import MulanDataModule, load_pooled, mulan_split  # noqa: E402
from structssl.inference.dual_decomposition import CorpusDualDecomposition  # noqa: E402
from structssl.losses.likelihood import CompositeLikelihoodLoss, CRFNLLLoss  # noqa: E402
from structssl.scorers.multilabel import MultiLabelScorer  # noqa: E402
from structssl.structures.linear_chain import LinearChain  # noqa: E402
from structssl.structures.multilabel import MultiLabelPotentials, PairwiseMultiLabel  # noqa: E402
from structssl.training.callbacks import GeometricCuSchedule  # noqa: E402
from structssl.training.composite import (  # noqa: E402
    CoDLPlusModule,
    CompositeLikelihoodModule,
    TSVMPlusModule,
    annealing_schedule,
)

pytestmark = pytest.mark.filterwarnings(
    r"ignore:.*isinstance\(treespec, LeafSpec\)` is deprecated.*:FutureWarning"
)

D = torch.float64
K, DIM = 6, 3


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _toy(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Correlated multi-label data: labels are thresholded noisy linear functions of x."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, DIM, generator=g, dtype=D)
    w = torch.tensor([[2.0, 0, 0], [2.0, 0.5, 0], [0, 2.0, 0], [0, 2.0, 0.5], [0, 0, 2.0], [0.5, 0, 2.0]], dtype=D)
    y = ((x @ w.t() + 0.3 * torch.randn(n, K, generator=g, dtype=D)) > 0.3).long()
    return x, y


def _write_mulan(root: Path, n_train: int = 50, n_test: int = 30) -> Path:
    """A Mulan 'emotions' fixture (6 labels, 3 features) under ``root/mulan_emotions``."""
    folder = root / "mulan_emotions"
    folder.mkdir(parents=True)
    names = [f"L{j}" for j in range(K)]
    (folder / "emotions.xml").write_text(
        '<labels xmlns="http://mulan.sourceforge.net/labels">'
        + "".join(f'<label name="{n}"></label>' for n in names) + "</labels>"
    )
    for split, n, seed in (("train", n_train, 0), ("test", n_test, 1)):
        x, y = _toy(n, seed)
        lines = ["@relation toy"] + [f"@attribute f{i} numeric" for i in range(DIM)]
        lines += [f"@attribute {name} {{0,1}}" for name in names] + ["@data"]
        lines += [",".join([f"{v:.6f}" for v in xi.tolist()] + [str(int(v)) for v in yi]) for xi, yi in zip(x, y)]
        with gzip.open(folder / f"emotions-{split}.arff.gz", "wt") as f:
            f.write("\n".join(lines) + "\n")
    return root


def _scorer() -> MultiLabelScorer:
    return MultiLabelScorer(K, input_dim=DIM, pairwise="linear").double()


def _engine() -> CorpusDualDecomposition:
    return CorpusDualDecomposition(outer_iter=8, inner_iter=3)


# ---------------------------------------------------------------- likelihoods
def test_composite_likelihood_is_the_full_likelihood_for_two_labels() -> None:
    """K = 2: each of the two spanning stars is the whole graph with half of every potential,
    so the composite log-likelihood is exactly ``2 L(theta / 2)`` (the full log-likelihood at
    half the potentials, twice): the same model family, the same maximiser up to the factor 2.
    The exact-learning module's loss is the full likelihood itself."""
    structure = PairwiseMultiLabel(2)
    pot = MultiLabelPotentials(torch.randn(5, 2, 2, dtype=D), torch.randn(5, 2, 2, 2, 2, dtype=D))
    y = torch.randint(0, 2, (5, 2))
    composite = CompositeLikelihoodLoss("star_trees", reduction="none")(structure, pot, y)
    half = MultiLabelPotentials(pot.unary / 2, pot.pairwise / 2)
    full_half = CRFNLLLoss(reduction="none")(structure, half, y)
    torch.testing.assert_close(composite, 2 * full_half)
    exact = CompositeLikelihoodModule(structure, MultiLabelScorer(2, input_dim=DIM), learning="exact")
    torch.testing.assert_close(exact.labeled_loss(pot, y), CRFNLLLoss()(structure, pot, y))


def test_annealing_schedule_is_seed_004s() -> None:
    s = annealing_schedule()
    assert len(s) == 45 and s[0] == 1e-4 and s[4] == 1e-4 and s[5] == pytest.approx(3e-4)
    assert s[-1] == pytest.approx(1e-4 * 3**8)
    assert annealing_schedule(rounds_per_value=1, num_values=12)[-1] == 1.0
    with pytest.raises(ValueError, match="factor > 1"):
        annealing_schedule(factor=1.0)


@pytest.mark.parametrize("cls", [CompositeLikelihoodModule, TSVMPlusModule])
def test_objective_is_seed_004s_whatever_the_set_sizes(cls: type) -> None:
    """Eqs. 2 and 5 negated: ``||w||^2 / (2 sigma^2) + mean_L loss + C_m mean_U loss`` with
    ``C = sigma^2`` and ``Cu = C_m``, the same number for 6 or 600 labeled examples (the
    per-example scaling of the other procedures divides the prior by n: 100 times weaker
    here, and weighs the unlabeled mean by m / n)."""
    torch.manual_seed(0)
    x, y = _toy(10, 3)
    scorer = _scorer()
    with torch.no_grad():
        for p in scorer.parameters():
            p.add_(0.3 * torch.randn_like(p))
    by_size = []
    for n, m in ((6, 4), (600, 4000)):
        module = cls(PairwiseMultiLabel(K), scorer, C=0.5, Cu=0.3, num_labeled=n, num_unlabeled=m)
        module.pseudo_labels = y[6:]
        terms = module.objective_terms({"labeled": {"inputs": x[:6], "labels": y[:6]},
                                        "unlabeled": {"inputs": x[6:]}})
        pot = scorer(x)
        mean_l = module.labeled_loss(MultiLabelPotentials(pot.unary[:6], pot.pairwise[:6]), y[:6])
        mean_u = module.labeled_loss(MultiLabelPotentials(pot.unary[6:], pot.pairwise[6:]), y[6:])
        norm = sum((p**2).sum() for p in scorer.parameters())
        torch.testing.assert_close(terms.objective, norm / (2 * 0.5) + mean_l + 0.3 * mean_u)
        by_size.append(terms.objective)
    torch.testing.assert_close(by_size[0], by_size[1])


# ---------------------------------------------------------------- the procedures, seed 004's protocol
@pytest.mark.filterwarnings("ignore:.*does not have many workers.*")
@pytest.mark.parametrize("cls", ["composite", "exact", "tsvm", "codl"])
def test_annealed_rounds_run_and_respect_test_constraints(cls: str, tmp_path: Path) -> None:
    """A supervised first epoch, then one round per epoch with C_m annealed 0.01, 0.1, 1 (the
    protocol of benchmarks/bench_multilabel.py): one assignment per round, pseudo-labels for
    every unlabeled example, constrained and free collective decoding of the test split."""
    from structssl.training.callbacks import SupervisedWarmStart

    dm = MulanDataModule("emotions", 0.2, 0, data_dir=_write_mulan(tmp_path, 80, 20), evaluate_unlabeled=False)
    structure = PairwiseMultiLabel(K)
    module: Any
    if cls == "composite":
        module = CompositeLikelihoodModule(structure, _scorer(), engine=_engine(), constraint_tolerance=0.05)
    elif cls == "exact":
        module = CompositeLikelihoodModule(
            structure, _scorer(), learning="exact", inference="exact", engine=_engine(), constraints="ldc",
        )
    elif cls == "tsvm":
        module = TSVMPlusModule(structure, _scorer(), engine=_engine(), lbfgs_max_iter=5)
    else:
        module = CoDLPlusModule(structure, _scorer(), engine=_engine(), perceptron_epochs=1, perceptron_batch=16)
    schedule = GeometricCuSchedule(start=0.01, factor=10.0, every_n_epochs=1, delay_epochs=1)
    _trainer(max_epochs=4, precision="64-true", callbacks=[schedule, SupervisedWarmStart(1)]).fit(module, dm)
    m = len(dm.splits["unlabeled"])
    assert module.pseudo_labels is not None and module.pseudo_labels.shape == (m, K)
    assert len(module.assignment_history) == 3
    assert module.current("Cu") == 1.0
    test = dm.collate(dm.splits["test"])
    pred = module.decode(test)
    assert pred.shape == (len(dm.splits["test"]), K) and set(pred.unique().tolist()) <= {0, 1}
    with torch.no_grad():
        free = module.infer(module.decode_potentials(test), constrained=False)
    assert free.shape == pred.shape


@pytest.mark.filterwarnings("ignore:.*does not have many workers.*")
def test_supervised_epoch_learns_the_toy_task(tmp_path: Path) -> None:
    dm = MulanDataModule("emotions", 0.7, 0, data_dir=_write_mulan(tmp_path, 200, 30), evaluate_unlabeled=False)
    module = CompositeLikelihoodModule(PairwiseMultiLabel(K), _scorer(), constraints="none", engine=_engine(), Cu=0.0)
    _trainer(max_epochs=1, precision="64-true").fit(module, dm)
    test = dm.collate(dm.splits["test"])
    assert (module.decode(test) == test["labels"]).float().mean() > 0.8


def test_module_errors() -> None:
    with pytest.raises(NotImplementedError, match="implemented for PairwiseMultiLabel"):
        CompositeLikelihoodModule(LinearChain(3), _scorer())
    with pytest.raises(ValueError, match="constraints must be one of"):
        CompositeLikelihoodModule(PairwiseMultiLabel(K), _scorer(), constraints="all")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="inference must be one of"):
        CompositeLikelihoodModule(PairwiseMultiLabel(K), _scorer(), inference="lp")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="learning must be one of"):
        CompositeLikelihoodModule(PairwiseMultiLabel(K), _scorer(), learning="pl")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="engine must be a CorpusDualDecomposition"):
        TSVMPlusModule(PairwiseMultiLabel(K), _scorer(), engine="dd")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="perceptron_epochs must be an int >= 1"):
        CoDLPlusModule(PairwiseMultiLabel(K), _scorer(), perceptron_epochs=0)


# ---------------------------------------------------------------- data module
def test_mulan_data_module_splits(tmp_path: Path) -> None:
    root = _write_mulan(tmp_path)
    dm = MulanDataModule("emotions", labeled_fraction=0.1, split_seed=1, data_dir=root)
    s = dm.arrays()
    assert s.labeled_inputs.shape == (6, DIM) and s.unlabeled_inputs.shape == (50, DIM)
    assert s.test_inputs.shape == (24, DIM) and s.test_labels.shape == (24, K)
    train = torch.cat([s.labeled_inputs, s.unlabeled_inputs])
    torch.testing.assert_close(train.mean(0), torch.zeros(DIM, dtype=D))  # standardised on train
    again = MulanDataModule("emotions", labeled_fraction=0.1, split_seed=1, data_dir=root).arrays()
    assert torch.equal(again.labeled_labels, s.labeled_labels)
    other = MulanDataModule("emotions", labeled_fraction=0.1, split_seed=2, data_dir=root).arrays()
    assert not torch.equal(other.test_inputs, s.test_inputs)
    dm.setup()
    batch = next(iter(dm.train_dataloader()))[0]
    assert batch["labeled"]["labels"].shape == (6, K) and "labels" not in batch["unlabeled"]
    assert dm.num_unlabeled_examples == 50 and dm.input_dim == DIM
    trans = MulanDataModule("emotions", 0.1, 1, data_dir=root, transductive=True)
    assert trans.num_unlabeled_examples == 74
    # the dev split is the unlabeled training set with its labels (seed 004 Fig. 1)
    dev = next(iter(dm.val_dataloader()))
    assert torch.equal(dev["labels"], s.unlabeled_labels) and torch.equal(dev["inputs"], s.unlabeled_inputs)
    small = MulanDataModule("emotions", 0.1, 1, data_dir=root, num_unlabeled=7, max_test=3)
    small.setup()
    assert small.num_unlabeled_examples == 7 and len(small.splits["dev"]) == 7
    assert len(small.splits["test"]) == 3 and len(small.splits["labeled"]) == 6
    none = MulanDataModule("emotions", 0.1, 1, data_dir=root, evaluate_unlabeled=False)
    none.setup()
    assert none.splits["dev"] == []


def test_mulan_data_module_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="name must be one of"):
        MulanDataModule("rcv")
    with pytest.raises(ValueError, match=r"labeled_fraction must be a float in \(0, 1\)"):
        MulanDataModule("scene", labeled_fraction=1.5)
    with pytest.raises(ValueError, match="num_unlabeled must be None or an int >= 0"):
        MulanDataModule("scene", num_unlabeled=-1)
    with pytest.raises(ValueError, match="max_test must be None or an int >= 0"):
        MulanDataModule("scene", max_test=2.5)  # type: ignore[arg-type]
    data = load_pooled("emotions", _write_mulan(tmp_path))
    with pytest.raises(ValueError, match="split_seed must be an int >= 0"):
        mulan_split(data, 0.1, -1)
    with pytest.raises(ValueError, match=r"train_fraction must be a float in \(0, 1\)"):
        mulan_split(data, 0.1, 0, train_fraction=0.0)


def test_real_mulan_split_sizes() -> None:
    try:
        data = load_pooled("emotions")
    except (FileNotFoundError, ValueError):
        pytest.skip("the shared Mulan emotions data is not available")
    s = mulan_split(data, 0.01, 0)
    assert s.labeled_inputs.shape == (4, 72)  # 1 % of the 415 training examples
    assert s.unlabeled_inputs.shape[0] == 411 and s.test_inputs.shape[0] == 178


# ---------------------------------------------------------------- Lightning and checkpoints
def _trainer(**kwargs: Any) -> Any:
    args: dict[str, Any] = dict(
        accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, limit_val_batches=0, num_sanity_val_steps=0,
    )
    args.update(kwargs)
    return pl.Trainer(**args)


@pytest.mark.filterwarnings("ignore:The dirpath has changed:UserWarning")
@pytest.mark.filterwarnings("ignore:.*does not have many workers.*")
def test_checkpoint_resume_restores_schedule_and_multipliers(tmp_path: Path) -> None:
    root = _write_mulan(tmp_path / "data")

    def run(max_epochs: int, ckpt: Any = None, where: str = "x") -> tuple[Any, Any]:
        torch.manual_seed(0)
        module = CompositeLikelihoodModule(
            PairwiseMultiLabel(K), _scorer(), engine=_engine(), constraint_tolerance=0.05, lbfgs_max_iter=5,
        )
        schedule = GeometricCuSchedule(start=1e-2, factor=3.0, every_n_epochs=1)
        trainer = _trainer(
            max_epochs=max_epochs, callbacks=[schedule], default_root_dir=tmp_path / where,
            enable_checkpointing=True,
        )
        trainer.fit(module, MulanDataModule("emotions", 0.2, 0, data_dir=root), ckpt_path=ckpt)
        return module, schedule

    full, full_schedule = run(4, where="full")
    part, _ = run(2, where="part")
    (ckpt,) = (tmp_path / "part").rglob("*.ckpt")
    saved = torch.load(ckpt, weights_only=False)
    assert "structssl_corpus_inference" in saved
    assert part.multipliers is not None
    torch.testing.assert_close(saved["structssl_corpus_inference"]["multipliers"]["lower"], part.multipliers.lower)
    resumed, schedule = run(4, ckpt=ckpt, where="resumed")
    assert schedule.state_dict() == full_schedule.state_dict()
    assert resumed.current("Cu") == full.current("Cu") == pytest.approx(0.27)  # 1e-2 * 3^3
    assert resumed.multipliers is not None and full.multipliers is not None
    torch.testing.assert_close(resumed.multipliers.lower, full.multipliers.lower)
    torch.testing.assert_close(resumed.multipliers.nu, full.multipliers.nu)
    assert torch.equal(resumed.pseudo_labels, full.pseudo_labels)
    for a, b in zip(resumed.parameters(), full.parameters()):
        torch.testing.assert_close(a, b)
    # collective constrained test inference through the Trainer
    metrics = _trainer().test(resumed, MulanDataModule("emotions", 0.2, 0, data_dir=root), verbose=False)
    assert 0.0 <= metrics[0]["test/micro_f1"] <= 1.0
