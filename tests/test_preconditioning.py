"""Diagonally preconditioned L-BFGS (``StructuredModule(lbfgs_precondition=a)``, issue 16).

:class:`~structssl.training.preconditioning.PreconditionedLBFGS` is torch's L-BFGS in the
coordinates ``u = w / s``: the scales come from the gold part counts of the labeled data
(:func:`~structssl.training.preconditioning.curvature_scales`), checked here against counts
made by hand; the minimiser is the plain L-BFGS one; a resumed run ends where the
uninterrupted one does. Tiny CoNLL-style files written by the tests, no shared data.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any, Optional

import pytest
import torch

pl = pytest.importorskip("pytorch_lightning")

from structssl.data import CoNLLDataModule  # noqa: E402
from structssl.losses import CRFNLLLoss  # noqa: E402
from structssl.scorers import LinearChainScorer  # noqa: E402
from structssl.structures import LinearChain  # noqa: E402
from structssl.training import SupervisedModule, TransductiveModule  # noqa: E402
from structssl.training.checkpointing import LastCheckpoint  # noqa: E402
from structssl.training.preconditioning import (  # noqa: E402
    PreconditionedLBFGS,
    curvature_scales,
)

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.usefixtures("one_thread"),
]

WORDS = {
    "B-PER": ["Ana", "Luis", "Marta"], "I-PER": ["Gomez", "Ruiz"],
    "B-LOC": ["Madrid", "Lima", "Quito"], "O": ["vive", "en", "y", "la", "de", "casa"],
}


def _write(path: Path, sentences: int, seed: int) -> Path:
    rng = random.Random(seed)
    lines = []
    for _ in range(sentences):
        prev = "O"
        for _ in range(rng.randint(2, 8)):
            allowed = [t for t in WORDS if t != "I-PER" or prev in ("B-PER", "I-PER")]
            tag = rng.choice(allowed)
            lines.append(f"{rng.choice(WORDS[tag])} {tag}")
            prev = tag
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _data(tmp_path: Path, sentences: int = 40) -> CoNLLDataModule:
    return CoNLLDataModule(
        train_file=str(_write(tmp_path / "train.conll", sentences, 0)),
        dev_file=str(_write(tmp_path / "dev.conll", 6, 1)),
    )


def _model(precondition: Optional[float], max_iter: int = 5, **kwargs: Any) -> SupervisedModule:
    torch.manual_seed(0)
    return SupervisedModule(
        LinearChain(), LinearChainScorer(factored=True), CRFNLLLoss(), C=2.0,
        lbfgs_max_iter=max_iter, lbfgs_precondition=precondition, **kwargs,
    )


def _fit(model: Any, data: Any, epochs: int, root: Optional[Path] = None,
         ckpt_path: Optional[Path] = None) -> Any:
    trainer = pl.Trainer(
        accelerator="cpu", max_epochs=epochs, precision="64-true", logger=False,
        enable_checkpointing=root is not None, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0,
        callbacks=[LastCheckpoint(root)] if root is not None else [],
    )
    trainer.fit(model, datamodule=data, ckpt_path=ckpt_path)
    return trainer


def _objective(model: SupervisedModule, data: CoNLLDataModule) -> float:
    batch = data.collate(data.splits["labeled"])
    model = model.double()
    with torch.no_grad():
        return float(model.objective_terms({"labeled": batch}).objective)


# ------------------------------------------------------------------ the optimiser
def test_exact_scales_make_a_stiff_quadratic_easy() -> None:
    """f(w) = 1/2 sum h_i (w_i - c_i)^2 with h over 8 orders of magnitude: with s = h^(-1/2)
    the problem is the identity in u, solved to 1e-10 in 2 iterations; plain L-BFGS is far
    from it after as many."""
    gen = torch.Generator().manual_seed(0)
    h = torch.logspace(-4, 4, 50, dtype=torch.float64)
    c = torch.randn(50, dtype=torch.float64, generator=gen)

    def run(scaled: bool) -> torch.Tensor:
        w = torch.zeros(50, dtype=torch.float64, requires_grad=True)
        opt = PreconditionedLBFGS([w], max_iter=2, max_eval=100, line_search_fn="strong_wolfe")
        if scaled:
            opt.set_scales([h.rsqrt()])

        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = 0.5 * (h * (w - c) ** 2).sum()
            loss.backward()
            return loss

        opt.step(closure)
        return w.detach()

    assert torch.allclose(run(True), c, rtol=0, atol=1e-10)
    assert (run(False) - c).abs().max() > 1e-2


def test_bad_scales_and_options_are_named() -> None:
    w = torch.zeros(3, requires_grad=True)
    opt = PreconditionedLBFGS([w])
    with pytest.raises(ValueError, match="shape"):
        opt.set_scales([torch.ones(4)])
    with pytest.raises(ValueError, match="finite and > 0"):
        opt.set_scales([torch.tensor([1.0, 0.0, 1.0])])
    with pytest.raises(ValueError, match="one per parameter"):
        opt.set_scales([])
    for bad in (0.0, -1.0, float("nan"), True, "0.1"):
        with pytest.raises(ValueError, match="lbfgs_precondition"):
            _model(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="optimizer='adam'"):
        _model(0.1, optimizer="adam")


# ------------------------------------------------------------------ the scales
def test_scales_are_the_gold_counts_formula(tmp_path: Path) -> None:
    """Counts by hand from the tokens: emission (feature, label) pairs grouped by feature row
    (empirical shares), label counts for the bias, label pairs for the transitions, first /
    last labels (uniform shares)."""
    data = _data(tmp_path)
    data.setup("fit")
    model = _model(0.5, num_labeled=len(data.splits["labeled"]))
    model.adopt_sizes(data.model_sizes())
    model = model.double()
    batch = data.collate(data.splits["labeled"])
    scales, unscaled = curvature_scales(model, [batch], 0.5)
    assert unscaled == []
    c = data.num_labels
    emission = torch.zeros(model.scorer.emission.weight.shape, dtype=torch.float64)
    bias, transition = torch.zeros(c, dtype=torch.float64), torch.zeros(c, c, dtype=torch.float64)
    start, end = torch.zeros(c, dtype=torch.float64), torch.zeros(c, dtype=torch.float64)
    for inputs, labels, n in zip(batch["inputs"], batch["labels"], batch["lengths"].tolist()):
        ys = labels[:n].tolist()
        for t, y in enumerate(ys):
            for f in inputs[t].tolist():
                if f:
                    emission[f, y] += 1
            bias[y] += 1
            if t:
                transition[ys[t - 1], y] += 1
        start[ys[0]] += 1
        end[ys[-1]] += 1

    def expected(counts: torch.Tensor, rows: bool) -> torch.Tensor:
        if rows:  # each feature's labels: their smoothed shares
            total = counts.sum(dim=1, keepdim=True)
            p = (counts + 1 / counts.shape[1]) / (total + 1)
        else:  # one group, uniform shares
            total, p = counts.sum(), torch.full_like(counts, 1 / counts.numel())
        return (1 + 0.5 * 2.0 * total * p * (1 - p)).rsqrt()  # a = 0.5, C = 2

    names = [n for n, p in model.named_parameters() if p.requires_grad]
    want = {"scorer.emission.weight": expected(emission, True),
            "scorer.emission.bias": expected(bias, False),
            "scorer.head.transition": expected(transition, False),
            "scorer.head.start": expected(start, False), "scorer.head.end": expected(end, False)}
    assert sorted(names) == sorted(want)
    for name, got in zip(names, scales):
        assert torch.allclose(got, want[name], rtol=1e-12, atol=0), name
    padding_row = scales[names.index("scorer.emission.weight")][0]
    assert emission[0].sum() == 0 and bool((padding_row == 1).all())


def test_weights_whose_gradient_is_not_a_count_keep_scale_one() -> None:
    """Dense inputs of either sign: the emission weight is left alone, and named; the
    transitions (counts) are scaled."""
    from structssl.data import SyntheticHMMDataModule

    data = SyntheticHMMDataModule(num_train=12, num_labeled=12, num_dev=2, num_test=2,
                                  num_states=3, length=5, dim=4, seed=0)
    data.setup("fit")
    model = SupervisedModule(LinearChain(3), LinearChainScorer(3, input_dim=4), num_labeled=12,
                             lbfgs_precondition=0.1)
    scales, unscaled = curvature_scales(model, [data.collate(data.splits["labeled"])], 0.1)
    assert "scorer.emission.weight" in unscaled
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert bool((scales[names.index("scorer.emission.weight")] == 1).all())
    assert bool((scales[names.index("scorer.head.transition")] < 1).all())


# ------------------------------------------------------------------ training
def test_same_minimiser_as_plain_lbfgs(tmp_path: Path) -> None:
    data = _data(tmp_path)
    plain, pre = _model(None, max_iter=200), _model(0.1, max_iter=200)
    _fit(plain, data, 1)
    _fit(pre, data, 1)
    assert isinstance(pre.optimizers().optimizer, PreconditionedLBFGS)
    assert pre.optimizers().optimizer.scale is not None
    a, b = _objective(plain, data), _objective(pre, data)
    assert math.isclose(a, b, rel_tol=1e-7), (a, b)
    for key, value in plain.scorer.state_dict().items():
        assert torch.allclose(pre.scorer.state_dict()[key], value, atol=1e-3), key


def test_a_resumed_run_ends_as_the_uninterrupted_one(tmp_path: Path) -> None:
    """The scales are computed again from the same data after a resume: the L-BFGS history
    saved in the scaled coordinates stays valid, so the weights match to rounding."""
    data = _data(tmp_path)
    whole = _model(0.1, max_iter=3)
    _fit(whole, data, 4)
    first = _model(0.1, max_iter=3)
    _fit(first, _data(tmp_path), 2, root=tmp_path / "run")
    resumed = _model(0.1, max_iter=3)
    _fit(resumed, _data(tmp_path), 4, root=tmp_path / "resumed",
         ckpt_path=tmp_path / "run" / "last.ckpt")
    for key, value in whole.scorer.state_dict().items():
        assert torch.allclose(resumed.scorer.state_dict()[key], value, rtol=0, atol=1e-10), key
    plain = _model(None, max_iter=3)
    _fit(plain, _data(tmp_path), 4)
    assert not torch.allclose(plain.scorer.emission.weight, whole.scorer.emission.weight)


def test_semi_supervised_procedures_take_it(tmp_path: Path) -> None:
    """nabla-TSVM on tagged and untagged sentences: the scales come from the tagged ones."""
    train = _write(tmp_path / "train.conll", 30, 0)
    untagged = tmp_path / "untagged.txt"
    untagged.write_text("\n".join(
        line.split()[0] if line.strip() else "" for line in
        _write(tmp_path / "u.conll", 20, 5).read_text(encoding="utf-8").split("\n")
    ), encoding="utf-8")
    data = CoNLLDataModule(train_file=str(train), unlabeled_file=str(untagged))
    torch.manual_seed(0)
    model = TransductiveModule(LinearChain(), LinearChainScorer(factored=True), Cu=0.5,
                               lbfgs_max_iter=4, lbfgs_precondition=0.1)
    _fit(model, data, 2)
    scale = model.optimizers().optimizer.scale
    assert scale is not None and bool((scale < 1).any())
    assert torch.isfinite(model.scorer.emission.weight).all()
