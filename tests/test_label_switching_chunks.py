"""LabelSwitchingModule over length chunks of the untagged set: the same fit as one padded batch.

Every test writes its own small CoNLL-style files; nothing here needs ``../shared``.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import pytorch_lightning as pl
import torch

from structssl.constraints import ConstraintSet, LabelProportion, WordLabels
from structssl.data import CoNLLDataModule
from structssl.losses import StructuredHingeLoss
from structssl.scorers import LinearChainScorer
from structssl.structures import LinearChain
from structssl.training.label_switching import LabelSwitchingAnnealing, LabelSwitchingModule

from test_own_data import _assert_chunks_equal_one_batch, _sentence, _tagged_and_untagged, _write

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings(r"ignore:.*LeafSpec.*:FutureWarning"),
    pytest.mark.usefixtures("one_thread"),
]

#: padded positions per chunk of the chunked runs (the sentences have 1 to ~20 tokens, one 60+)
_CHUNKS = (60, 25)


def _files(root: Path) -> tuple[Path, Path, int]:
    """16 tagged sentences, 40 untagged ones of which one is long (several joined)."""
    rng = random.Random(7)
    tagged = [_sentence(rng) for _ in range(16)]
    untagged = [_sentence(rng) for _ in range(39)]
    untagged.append([pair for _ in range(8) for pair in _sentence(rng)])
    _write(root / "t.conll", tagged)
    _write(root / "u.txt", untagged, tags=False)
    return root / "t.conll", root / "u.txt", max(len(s) for s in untagged)


def _module(**kwargs: Any) -> LabelSwitchingModule:
    constraints = ConstraintSet([
        # instance level: function words are O
        WordLabels(words=["el", "y", "no", "con"], labels=["O"]),
        # corpus level: a third of the untagged tokens begin a drug (more than the model tags:
        # many switches, in an order and under a budget that the random choices decide)
        LabelProportion("B-DRUG", 0.35, weight=300.0),
    ])
    torch.manual_seed(0)
    return LabelSwitchingModule(
        LinearChain(), LinearChainScorer(factored=True, init_std=0.3), constraints,
        loss=StructuredHingeLoss(), C=1.0, Cu=1.0, supervised_epochs=1, max_passes=3,
        block_size=4, max_switches=12, lbfgs_max_iter=4, seed=3, **kwargs,
    )


def _fit(
    root: Path, chunked: bool, max_epochs: int = 5, ckpt: Any = None, save: bool = False,
    chunk: int = _CHUNKS[0],
) -> tuple[LabelSwitchingModule, list[dict[str, Any]]]:
    """A float64 fit (1 supervised epoch, then alternations under the annealing schedule);
    the shapes of the unlabeled potentials the switching computed."""
    train, untagged, _ = _files(root)
    dm = CoNLLDataModule(train_file=str(train), dev_file=None, test_file=None,
                         unlabeled_file=str(untagged), max_chunk_positions=chunk)
    model = _module()
    seen: list[dict[str, Any]] = []
    potentials = model.potentials

    def record(batch: dict[str, Any]) -> Any:
        pot = potentials(batch)
        if "labels" not in batch and not torch.is_grad_enabled():  # the switching's
            seen.append({"shape": tuple(pot.emissions.shape), "lengths": batch["lengths"].clone()})
        return pot

    model.potentials = record  # type: ignore[method-assign]
    callbacks: list[pl.Callback] = [
        LabelSwitchingAnnealing(start=0.25, factor=2.0, max_alternations=2, monitor=None)
    ]
    if save:
        callbacks.append(pl.callbacks.ModelCheckpoint(dirpath=root, save_last=True, save_top_k=0))
    trainer = pl.Trainer(
        max_epochs=max_epochs, callbacks=callbacks, logger=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=save, num_sanity_val_steps=0,
        accelerator="cpu", precision="64-true",
    )
    if chunked:
        trainer.fit(model, datamodule=dm, ckpt_path=ckpt)
    else:  # the procedure as if it could not take chunks: one padded batch per split
        with mock.patch.object(LabelSwitchingModule, "supports_chunks", False):
            trainer.fit(model, datamodule=dm)
    return model, seen


def test_chunked_fit_equals_one_padded_batch(tmp_path: Path) -> None:
    """A label-switching fit (a corpus constraint and an instance one, C_u annealed over
    several alternations) with the untagged set as length chunks gives, in float64, the pseudo
    labels, switches per alternation and pass, objective history and final weights of the
    fit on one padded batch, for two chunk sizes; and no chunk of short sentences is padded to
    the longest one."""
    (tmp_path / "one").mkdir()
    one, seen_one = _fit(tmp_path / "one", chunked=False)
    _, _, longest = _files(tmp_path)
    # the runs switched over several alternations, with the unlabeled term in the objective
    switching = [h for h in one.history if h["switches_per_pass"]]
    assert len(switching) >= 3 and sum(h["switches"] for h in switching) > 0
    assert any(h["unlabeled_loss"] > 0 for h in one.history)
    # one padded batch: every switching step pads all 40 sentences to the longest
    assert {s["shape"][:2] for s in seen_one} == {(40, longest)}
    for chunk in _CHUNKS:
        (tmp_path / str(chunk)).mkdir()
        chunked, seen = _fit(tmp_path / str(chunk), chunked=True, chunk=chunk)
        _assert_same_fit(chunked, one)
        # chunks: each padded to its own longest sentence, at most `chunk` positions (a longer
        # sentence alone), all 40 sentences in each switching step
        sweeps = sum(s["shape"][0] for s in seen) / 40  # (the switching's and the record's)
        assert sweeps == int(sweeps) >= len(switching) and len(seen) > 3 * sweeps
        for s in seen:
            b, n = s["shape"][:2]
            assert n == int(s["lengths"].max()) and (b * n <= chunk or b == 1)
        assert longest > chunk // 2  # alone in its chunk: the only one padded to it per sweep
        assert sum(1 for s in seen if s["shape"][1] == longest) == sweeps


def _assert_same_fit(chunked: LabelSwitchingModule, one: LabelSwitchingModule) -> None:
    """Pseudo labels, switches, history and weights of two fits agree (float64)."""
    assert torch.equal(chunked.pseudo_labels, one.pseudo_labels)
    assert len(chunked.history) == len(one.history)
    for a, b in zip(chunked.history, one.history):
        assert a["switches"] == b["switches"] and a["switches_per_pass"] == b["switches_per_pass"]
        for key in ("Cu", "objective", "labeled_loss", "unlabeled_loss", "penalty",
                    "switch_objective", "switch_objective_before", "hard_violations"):
            if key in b:
                assert a[key] == pytest.approx(b[key], rel=1e-9, abs=1e-12), key
    for p, q in zip(chunked.parameters(), one.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-9, atol=1e-12)


def test_chunked_fit_resumes_like_an_uninterrupted_one(tmp_path: Path) -> None:
    """Stopped after two alternations and resumed from the last checkpoint, the chunked fit
    repeats the uninterrupted one (pseudo labels, switches, C_u, weights)."""
    for name in ("full", "part"):
        (tmp_path / name).mkdir()
    full, _ = _fit(tmp_path / "full", chunked=True)
    _fit(tmp_path / "part", chunked=True, max_epochs=3, save=True)
    resumed, _ = _fit(tmp_path / "part", chunked=True, ckpt=str(tmp_path / "part" / "last.ckpt"))
    assert torch.equal(resumed.pseudo_labels, full.pseudo_labels)
    assert [h["switches_per_pass"] for h in resumed.history] == [h["switches_per_pass"] for h in full.history]
    assert [h["Cu"] for h in resumed.history] == [h["Cu"] for h in full.history]
    for p, q in zip(resumed.parameters(), full.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-9, atol=1e-12)


def test_chunked_objective_equals_one_batch(tmp_path: Path) -> None:
    """The hinge objective on labeled + pseudo-labeled sentences (an annealing epoch) chunk by
    chunk: the value, unlabeled loss and gradient of the padded batches (the helper nabla-TSVM,
    nabla-coSVM and CCCP are held to)."""
    dm = _tagged_and_untagged(tmp_path, 8)
    model = _module(num_labeled=20, num_unlabeled=30)
    model.adopt_sizes(dm.model_sizes())
    model.setup("validate")  # binds the constraints to the data's tags
    model.double()
    model.set_current("Cu", 0.7)
    trainer = mock.Mock(current_epoch=2, datamodule=None)
    model._trainer = trainer  # an annealing epoch
    assert model.switching and model.supports_chunks
    model.switch(dm.collate(dm.splits["unlabeled"]))  # Y: argmax, then switched
    assert model.pseudo_labels.shape[0] == 30
    _assert_chunks_equal_one_batch(model, dm)


def test_setup_accepts_chunks_and_refuses_part_of_the_unlabeled_set(tmp_path: Path) -> None:
    """The chunks of the whole unlabeled set pass the checks; a step with part of it, chunks
    that miss 'index', and trees given chunks are refused with what was expected."""
    dm = _tagged_and_untagged(tmp_path, 9)
    model = _module(num_labeled=20, num_unlabeled=30)
    model.adopt_sizes(dm.model_sizes())
    from structssl.data import length_chunks

    chunks = [dm.collate(c) for c in length_chunks(dm.splits["unlabeled"], 40)]
    assert len(model._check_unlabeled(chunks)) == len(chunks) > 3
    with pytest.raises(ValueError, match=r"label switching .* the whole unlabeled set, m = 30 "
                       r"examples, in one batch or as length chunks .*; got 2\d$"):
        model._check_unlabeled(chunks[1:])
    with pytest.raises(ValueError, match="must carry 'index'"):
        model._check_unlabeled([{k: v for k, v in c.items() if k != "index"} for c in chunks])
    dm.unlabeled_batch_size = 8
    with pytest.raises(ValueError, match=r"needs the whole unlabeled set in one batch \(or as length "
                       r"chunks.*got 8 for 30 unlabeled examples"):
        model._check_data_module(dm)
    from structssl.structures import CKY

    tree = LabelSwitchingModule(CKY(3), LinearChainScorer(3, input_dim=3), num_unlabeled=30,
                                num_labeled=1)
    assert not tree.supports_chunks
    with pytest.raises(NotImplementedError, match="leaf-rule switching .* one batch; got 2 chunks"):
        tree._check_unlabeled(chunks[:2])


def test_shipped_config_switches_over_length_chunks(tmp_path: Path) -> None:
    """configs/tagger_ssl_label_switching.yaml on CoNLL-style files with an untagged file (one
    long sentence among short ones): every switching step gets the whole untagged set as
    several length chunks (the long sentence in a chunk of its own), and the model trains on
    the pseudo-labeled sentences."""
    from structssl.cli import cli_main

    rng = random.Random(1)
    _write(tmp_path / "TRAIN.conll", [_sentence(rng) for _ in range(30)])
    _write(tmp_path / "DEV.conll", [_sentence(rng) for _ in range(10)])
    untagged = [_sentence(rng) for _ in range(40)] + [[p for _ in range(8) for p in _sentence(rng)]]
    _write(tmp_path / "UNLABELED.txt", untagged, tags=False)
    steps: list[list[int]] = []
    switch = LabelSwitchingModule.switch

    def spy(self: LabelSwitchingModule, unlabeled: Any) -> dict[str, Any]:
        assert isinstance(unlabeled, list)
        steps.append([int(c["inputs"].shape[0]) for c in unlabeled])
        return switch(self, unlabeled)

    config = Path(__file__).resolve().parents[1] / "configs" / "tagger_ssl_label_switching.yaml"
    with mock.patch.object(LabelSwitchingModule, "switch", spy), mock.patch("sys.argv", ["structssl"]):
        cli = cli_main([
            "fit", f"--config={config}", f"--data.train_file={tmp_path / 'TRAIN.conll'}",
            f"--data.dev_file={tmp_path / 'DEV.conll'}",
            f"--data.unlabeled_file={tmp_path / 'UNLABELED.txt'}",
            f"--trainer.default_root_dir={tmp_path / 'run'}", "--trainer.max_epochs=3",
            "--model.init_args.supervised_epochs=1", "--model.init_args.lbfgs_max_iter=5",
            "--data.word_clusters=[2, 4]", "--data.max_chunk_positions=60",
            "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false",
            "--num_threads=1",
        ])
    assert len(steps) == 2
    assert all(sum(s) == len(untagged) and len(s) > 3 and 1 in s for s in steps), steps
    assert float(cli.trainer.callback_metrics["train/unlabeled_loss"]) > 0
