"""Safeguards of the semi-supervised procedures (issue 17): supervised warm start, C_u annealed
from small, label-balance constraint; and the co-training pseudo-label choice."""

from __future__ import annotations

import itertools
import logging
import warnings

import pytest
import torch

pl = pytest.importorskip("pytorch_lightning")

from structssl.data import SyntheticHMMDataModule  # noqa: E402
from structssl.losses import NablaCoSVMLoss, NablaSVMLoss, NablaTSVMLoss  # noqa: E402
from structssl.losses.nabla import LabelBalanceLoss, label_proportions  # noqa: E402
from structssl.scorers import LinearChainScorer, TwoViewScorer  # noqa: E402
from structssl.structures import LinearChain  # noqa: E402
from structssl.training import CoTrainingModule, CuRamp, TransductiveModule  # noqa: E402
from structssl.training.callbacks import SupervisedWarmStart, safeguard_callbacks  # noqa: E402


# ---------------------------------------------------------------------- the balance penalty
def _brute_proportions(chain: LinearChain, pot: torch.Tensor, lengths: torch.Tensor, t: float):
    """Expected label proportions by enumerating every labeling (float64)."""
    c, big_n = pot.shape[-1], pot.shape[1]
    total = torch.zeros(c, dtype=pot.dtype)
    for b in range(pot.shape[0]):
        n = int(lengths[b])
        ys = torch.tensor(list(itertools.product(range(c), repeat=n)))  # (C^n, n)
        padded = torch.cat([ys, ys.new_zeros(ys.shape[0], big_n - n)], 1)
        scores = chain.score(
            (pot[b : b + 1] / t).expand(ys.shape[0], *pot.shape[1:]), padded,
            lengths[b : b + 1].expand(ys.shape[0]),
        )
        p = torch.softmax(scores, 0)  # (C^n,)
        counts = torch.nn.functional.one_hot(ys, c).to(pot.dtype).sum(1)  # (C^n, C)
        total = total + (p.unsqueeze(1) * counts).sum(0)
    return total / lengths.sum()


def test_balance_penalty_matches_its_formula_by_enumeration_and_gradcheck() -> None:
    torch.manual_seed(0)
    chain = LinearChain(3)
    pot = torch.randn(2, 3, 3, 3, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([3, 2])
    q = torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64)
    loss = LabelBalanceLoss(temperature=0.7)
    pbar = _brute_proportions(chain, pot, lengths, 0.7)
    expected = ((pbar - q) ** 2).sum()
    value = loss(chain, pot, q, lengths)
    assert torch.allclose(value, expected, atol=1e-10)
    (g_value,) = torch.autograd.grad(value, pot)
    (g_brute,) = torch.autograd.grad(expected, pot)
    assert torch.allclose(g_value, g_brute, atol=1e-9)
    assert torch.autograd.gradcheck(lambda x: loss(chain, x, q, lengths), (pot,))


def test_label_proportions_counts_valid_positions() -> None:
    labels = torch.tensor([[0, 1, 2], [2, 2, 0]])
    q = label_proportions(labels, 4, torch.tensor([3, 1]))
    assert q.tolist() == [0.25, 0.25, 0.5, 0.0]


def test_balance_penalty_pulls_an_all_o_tagger_back_to_the_labeled_proportions() -> None:
    # a tagger biased to label 0 ("O") on every token (tokens differ in their evidence);
    # minimising the penalty alone over a per-label bias brings the expected proportions to q
    # and the decoded labels from 0 % to about q's 30 % entity tokens
    torch.manual_seed(0)
    chain = LinearChain(3)
    unary = torch.randn(8, 6, 3) * 2.0
    unary[..., 0] += 8.0
    bias = torch.zeros(3, requires_grad=True)
    q = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64)
    lengths = torch.full((8,), 6)
    trans = torch.zeros(3, 3)
    loss = LabelBalanceLoss()

    def entity_fraction() -> float:
        labels, _ = chain.argmax(chain.potentials_from(unary + bias.detach(), trans), lengths)
        return float((labels != 0).double().mean())

    assert entity_fraction() == 0.0
    opt = torch.optim.Adam([bias], lr=0.1)
    for _ in range(200):
        opt.zero_grad()
        loss(chain, chain.potentials_from(unary + bias, trans), q, lengths).backward()
        opt.step()
    pbar = loss.proportions(chain, chain.potentials_from(unary + bias, trans), lengths)
    assert torch.allclose(pbar.double(), q, atol=1e-2)
    assert 0.15 < entity_fraction() < 0.45


def test_balance_penalty_errors() -> None:
    chain = LinearChain(3)
    pot = torch.zeros(1, 2, 3, 3)
    with pytest.raises(ValueError, match=r"target_proportions must be a \(3,\) tensor"):
        LabelBalanceLoss()(chain, pot, torch.ones(2) / 2)
    with pytest.raises(ValueError, match="temperature"):
        LabelBalanceLoss(temperature=0.0)


# ---------------------------------------------------------------------- procedures
def _data(two_view: bool = False) -> SyntheticHMMDataModule:
    return SyntheticHMMDataModule(
        num_train=100, num_labeled=10, num_dev=50, num_test=100, num_states=5, dim=10,
        length=20, two_view=two_view, seed=0,
    )


class _CuLog(pl.Callback):
    def __init__(self) -> None:
        self.cu: list[float] = []
        self.unlabeled: list[float] = []

    def on_train_epoch_end(self, trainer, module) -> None:  # type: ignore[no-untyped-def]
        self.cu.append(module.current("Cu"))
        self.unlabeled.append(float(trainer.callback_metrics["train/unlabeled_loss"]))


def _fit(module, dm, epochs: int, callbacks=()) -> float:  # type: ignore[no-untyped-def]
    pl.seed_everything(0, verbose=False)
    trainer = pl.Trainer(
        accelerator="cpu", max_epochs=epochs, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        callbacks=list(callbacks),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, datamodule=dm)
        (result,) = trainer.test(module, datamodule=dm, verbose=False)
    return float(result["test/token_accuracy"])


def _tsvm(**kwargs) -> TransductiveModule:  # type: ignore[no-untyped-def]
    return TransductiveModule(
        LinearChain(5), LinearChainScorer(5, input_dim=10), NablaSVMLoss(), NablaTSVMLoss(),
        lbfgs_max_iter=5, **kwargs,
    )


def test_warm_start_trains_the_labeled_part_alone_then_restores_cu() -> None:
    log = _CuLog()
    _fit(_tsvm(Cu=0.5, warm_start_epochs=2), _data(), 4, [log])
    assert log.cu == [0.0, 0.0, 0.5, 0.5]
    assert log.unlabeled[:2] == [0.0, 0.0] and log.unlabeled[2] > 0  # not even scored before


def test_cu_ramp_delay_alone_is_not_a_warm_start_and_the_option_wins_over_it() -> None:
    ramp = CuRamp(steps=2, delay_epochs=2)
    assert ramp.multiplier_at(0) == 0.25  # C_u > 0 during the delay
    log = _CuLog()
    _fit(_tsvm(Cu=1.0, warm_start_epochs=2), _data(), 4, [ramp, log])
    assert log.cu == [0.0, 0.0, 0.25, 0.5]


def test_cu_start_anneals_from_small_after_the_warm_start() -> None:
    log = _CuLog()
    _fit(_tsvm(Cu=1.0, warm_start_epochs=1, cu_start=0.25, cu_factor=2.0), _data(), 5, [log])
    assert log.cu == [0.0, 0.25, 0.5, 1.0, 1.0]
    assert [type(c).__name__ for c in safeguard_callbacks(1, 0.25)] == [
        "GeometricAnnealing", "SupervisedWarmStart"
    ]


def test_safeguard_callbacks_join_fit_only(caplog: pytest.LogCaptureFixture) -> None:
    """``test`` after ``fit`` attaches no C_u schedule: before, Lightning announced that the
    module's callbacks "will override existing callbacks passed to Trainer" (the fit's own)."""
    module, dm = _tsvm(Cu=0.5, warm_start_epochs=1, cu_start=0.5), _data()
    trainer = pl.Trainer(
        accelerator="cpu", max_epochs=2, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
    )
    with warnings.catch_warnings(), caplog.at_level(logging.INFO):
        warnings.simplefilter("ignore")
        trainer.fit(module, datamodule=dm)
        assert {"GeometricAnnealing", "SupervisedWarmStart"} <= {
            type(c).__name__ for c in trainer.callbacks}
        trainer.test(module, datamodule=dm, verbose=False)
    assert module.configure_callbacks() == []
    assert "will override existing callbacks" not in caplog.text


def test_safeguard_argument_errors() -> None:
    with pytest.raises(ValueError, match="cu_start must be in"):
        _tsvm(cu_start=2.0)
    with pytest.raises(ValueError, match="cu_factor must be > 1"):
        _tsvm(cu_start=0.5, cu_factor=1.0)
    with pytest.raises(ValueError, match="label_proportions must sum to 1"):
        _tsvm(balance_weight=1.0, label_proportions=[0.5, 0.1, 0.1, 0.1, 0.1])
    with pytest.raises(ValueError, match="epochs must be an int >= 1"):
        SupervisedWarmStart(0)


def test_balance_proportions_come_from_the_labeled_split() -> None:
    dm = _data()
    module = _tsvm(Cu=0.1, balance_weight=1.0)
    _fit(module, dm, 1)
    dm.setup()
    labels = torch.cat([ex["labels"] for ex in dm.splits["labeled"]])
    assert torch.allclose(module.label_proportions, label_proportions(labels, 5))


def _cotraining(pseudo: str, **kwargs) -> CoTrainingModule:  # type: ignore[no-untyped-def]
    views = TwoViewScorer(LinearChainScorer(5, input_dim=5), LinearChainScorer(5, input_dim=5))
    return CoTrainingModule(
        LinearChain(5), views, NablaCoSVMLoss(pseudo_labels=pseudo), lbfgs_max_iter=20, **kwargs
    )


def test_warm_start_prevents_the_collapse_of_pseudo_labels_from_the_initial_weights() -> None:
    # from w = 0 every pseudo-label is label 0; with C_u in from the first step the
    # co-trained tagger stays near one label, after a supervised warm start it does not
    cold = _fit(_cotraining("joint", Cu=0.1), _data(two_view=True), 6)
    warm = _fit(_cotraining("joint", Cu=0.1, warm_start_epochs=3), _data(two_view=True), 6)
    assert warm > cold + 0.15, (cold, warm)


def test_joint_pseudo_labels_are_the_argmax_of_the_summed_views() -> None:
    torch.manual_seed(0)
    chain = LinearChain(3)
    a, b = torch.randn(2, 4, 3, 3), torch.randn(2, 4, 3, 3)
    joint_target, _ = chain.argmax(a + b)
    loss = NablaCoSVMLoss(pseudo_labels="joint", reduction="none")
    view = NablaSVMLoss(reduction="none")
    expected = view(chain, a, joint_target) + view(chain, b, joint_target)
    assert torch.allclose(loss(chain, a, b), expected)
    with pytest.raises(ValueError, match="pseudo_labels must be one of"):
        NablaCoSVMLoss(pseudo_labels="mine")  # type: ignore[arg-type]
