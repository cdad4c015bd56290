"""CoDLModule (constraint-driven learning, Chang et al. 2007): the guided search against brute
force, the round (assignment, learn(T) from w0, interpolation), resume and errors."""

from __future__ import annotations

import itertools
import warnings

import pytest
import pytorch_lightning as pl
import torch

from structssl.constraints import (
    AllowedFirst,
    AtMostOnce,
    ConstraintSet,
    LabelProportion,
    WordLabels,
)
from structssl.data import SemiSupervisedDataModule
from structssl.scorers.chain import LinearChainScorer
from structssl.structures import CKY
from structssl.structures.linear_chain import LinearChain
from structssl.training.codl import CoDLModule

NAMES = ("a", "b", "c")
WORDS = ["x", "y", ",", "z"]


def _constraints(hard: bool = False) -> ConstraintSet:
    cons = [AtMostOnce("a", weight=2.0), WordLabels(words=["x"], labels=["b"], weight=1.5)]
    if hard:
        cons.append(AllowedFirst(["a", "b"], hard=True))
    return ConstraintSet(cons, labels=list(NAMES))


class _Fixed(torch.nn.Module):
    """A scorer returning given edge potentials (B, N, C, C), for the search tests."""

    def __init__(self, pot: torch.Tensor) -> None:
        super().__init__()
        self.pot = torch.nn.Parameter(pot)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.pot


def _guided(pot: torch.Tensor, cons: ConstraintSet, lengths: torch.Tensor, tokens: list, **options) -> torch.Tensor:
    """CoDL's guided argmax of the given edge potentials (B, N, C, C) under ``cons``."""
    module = CoDLModule(LinearChain(pot.shape[-1]), _Fixed(pot), cons, **options)
    module.constraints = cons
    batch = {"inputs": torch.zeros(pot.shape[0], pot.shape[1], 1), "lengths": lengths, "tokens": tokens}
    return module.guided_argmax(batch)


def _labelings(pot: torch.Tensor, cons: ConstraintSet, lengths: torch.Tensor, tokens: list, i: int):
    """Every labeling of example ``i`` by brute force, in enumeration order: (labels, score,
    instance penalty, whether it breaks a hard constraint)."""
    n, c = pot.shape[1], pot.shape[-1]
    li, ln = int(lengths[i]), lengths[i : i + 1]
    chain = LinearChain(c)
    for ys in itertools.product(range(c), repeat=li):
        y = torch.tensor([list(ys) + [0] * (n - li)])
        yield (ys, float(chain.score(pot[i : i + 1], y, ln)),
               float(cons.instance_penalty(y, ln, [tokens[i]])[0]),
               bool(cons.hard_violated(y, ln, [tokens[i]])[0]))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("hard", [False, True])
@pytest.mark.parametrize("scale", [0.0, 1.0, 4.0])
def test_guided_argmax_matches_brute_force(seed, hard, scale):
    g = torch.Generator().manual_seed(seed)
    b, n, c = 4, 4, 3
    pot = torch.randn(b, n, c, c, generator=g, dtype=torch.float64)
    lengths = torch.tensor([4, 3, 1, 4])
    tokens = [[WORDS[int(i)] for i in torch.randint(0, 4, (n,), generator=g)] for _ in range(b)]
    cons = _constraints(hard)
    got = _guided(pot, cons, lengths, tokens, penalty_scale=scale, search_k=c**n)
    for i in range(b):
        best = None
        for ys, score, penalty, broken in _labelings(pot, cons, lengths, tokens, i):
            if hard and broken:
                continue
            value = score - scale * penalty
            if best is None or value > best[0] + 1e-12:
                best = (value, ys)
        assert best is not None
        assert tuple(got[i, : len(best[1])].tolist()) == best[1], (i, got[i], best)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_linear_penalties_are_exact_without_a_kbest_list(seed):
    """Word and first-label rules are folded into the potentials: with search_k = 1 (no list
    to rerank) the guided argmax is still the brute-force optimum. Reranking the model's own
    k-best list missed it whenever the penalised labeling was far down that list."""
    g = torch.Generator().manual_seed(seed)
    b, n, c = 6, 5, 3
    pot = torch.randn(b, n, c, c, generator=g, dtype=torch.float64)
    lengths = torch.tensor([5, 4, 1, 5, 3, 5])
    tokens = [[WORDS[int(i)] for i in torch.randint(0, 4, (n,), generator=g)] for _ in range(b)]
    cons = ConstraintSet(
        [WordLabels(words=["x", "y"], labels=["b"], weight=3.0), AllowedFirst(["c"], weight=5.0)],
        labels=list(NAMES),
    )
    got = _guided(pot, cons, lengths, tokens, penalty_scale=2.0, search_k=1)
    for i in range(b):
        values = {ys: score - 2.0 * penalty for ys, score, penalty, _ in _labelings(pot, cons, lengths, tokens, i)}
        best = max(values, key=values.get)
        assert tuple(got[i, : len(best)].tolist()) == best, (i, got[i], best)


def test_fold_penalties_scores_minus_the_linear_penalties_and_returns_the_rest():
    g = torch.Generator().manual_seed(5)
    b, n, c = 3, 4, 3
    pot = torch.randn(b, n, c, c, generator=g, dtype=torch.float64)
    lengths = torch.tensor([4, 2, 3])
    tokens = [["x", ",", "y", "x"], ["z", "x"], ["y", "y", ","]]
    cons = _constraints(hard=True)  # AtMostOnce (non-linear), WordLabels (linear), hard AllowedFirst
    folded, rest = cons.fold_penalties(pot, lengths, tokens, scale=3.0)
    assert [type(x).__name__ for x in rest] == ["AtMostOnce"]  # the hard rule is masked
    assert torch.isinf(folded[:, 0, :, 2]).all() and torch.isfinite(folded[:, 0, 0, :2]).all()
    word = ConstraintSet([cons.constraints[1]])
    chain = LinearChain(c)
    y = torch.randint(0, c, (50, b, n), generator=g)
    y[:, :, 0] %= 2  # labelings that keep the hard rule (the first label a or b)
    diffs = torch.stack([
        chain.score(folded, y[s], lengths) - chain.score(pot, y[s], lengths)
        + 3.0 * word.instance_penalty(y[s], lengths, tokens)
        for s in range(50)
    ])
    assert torch.allclose(diffs, diffs[:1].expand_as(diffs), atol=1e-12)  # a constant per example
    masked, left = cons.fold_penalties(pot, lengths, tokens, scale=0.0)  # the hard rule still holds
    assert torch.equal(masked.isinf(), folded.isinf()) and len(left) == 1


def test_fold_penalties_keeps_masks_dtype_and_obeys_the_rules_at_extreme_scales():
    """-inf parts stay -inf, float32 stays float32, and at a huge scale the guided argmax is
    the best labeling that breaks no folded rule (brute force), or the fewest breaks."""
    g = torch.Generator().manual_seed(11)
    b, n, c = 4, 4, 3
    pot = torch.randn(b, n, c, c, generator=g, dtype=torch.float64)
    pot[:, 1:, 0, 2] = float("-inf")  # a forbidden transition a -> c
    lengths = torch.tensor([4, 3, 2, 4])
    tokens = [["x", "z", "y", "x"], ["y", "y", "z"], ["z", "x"], ["z", "z", "z", "z"]]
    cons = ConstraintSet(
        [WordLabels(words=["x"], labels=["b"], weight=1.0), AllowedFirst(["a", "c"], weight=1.0)],
        labels=list(NAMES),
    )
    folded, rest = cons.fold_penalties(pot.float(), lengths, tokens, scale=1e6)
    assert folded.dtype == torch.float32 and len(rest) == 0
    assert torch.isinf(folded[:, 1:, 0, 2]).all()
    got = _guided(pot, cons, lengths, tokens, penalty_scale=1e6, search_k=1)
    for i in range(b):
        best = None
        for ys, score, penalty, _ in _labelings(pot, cons, lengths, tokens, i):
            if score == float("-inf"):
                continue
            if best is None or (-penalty, score) > best[0]:
                best = ((-penalty, score), ys)
        assert best is not None
        assert tuple(got[i, : len(best[1])].tolist()) == best[1], (i, got[i], best)


def test_hard_rules_hold_and_an_unmet_one_is_said():
    """A hard word rule is masked in the potentials, so even search_k = 1 keeps it; a hard
    global rule (AtMostOnce) that none of the search_k candidates meets leaves the plain
    argmax, with one warning that says so."""
    b, n, c = 2, 4, 3
    pot = torch.zeros(b, n, c, c, dtype=torch.float64)
    pot[..., 0] = 5.0  # every position prefers label a
    lengths = torch.tensor([4, 4])
    tokens = [["x", "y", "x", "z"], ["y", "y", "y", "y"]]
    word = ConstraintSet([WordLabels(words=["x"], labels=["b"], hard=True)], labels=list(NAMES))
    module = CoDLModule(LinearChain(c), _Fixed(pot), word, search_k=1)
    module.constraints = word
    batch = {"inputs": torch.zeros(b, n, 1), "lengths": lengths, "tokens": tokens}
    got = module.guided_argmax(batch)
    assert got.tolist() == [[1, 0, 1, 0], [0, 0, 0, 0]]
    # a b a b a b is best by far; every labeling within one change of it has two runs of a
    alternating = torch.zeros(b, 6, c, c, dtype=torch.float64)
    alternating[:, 0::2, :, 0] = alternating[:, 1::2, :, 1] = 5.0
    once = ConstraintSet([AtMostOnce("a", hard=True)], labels=list(NAMES))
    module = CoDLModule(LinearChain(c), _Fixed(alternating), once, search_k=2)
    module.constraints = once
    batch = {"inputs": torch.zeros(b, 6, 1), "lengths": torch.tensor([6, 6]), "tokens": None}
    with pytest.warns(UserWarning, match=r"2 of 2 examples of a batch have no labeling among the "
                                         r"search_k=2 best that meets the hard constraints \['AtMostOnce\(a\)'\]"):
        got = module.guided_argmax(batch)
    assert got.tolist() == [[0, 1, 0, 1, 0, 1]] * 2  # the plain argmax
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        module.guided_argmax(batch)  # said once

    def runs_of_a(row: torch.Tensor) -> int:
        return int(((row[1:] == 0) & (row[:-1] != 0)).sum() + (row[0] == 0))

    module.search_k = c ** 6  # every labeling: the best one with one run of a
    assert [runs_of_a(row) for row in module.guided_argmax(batch)] == [1, 1]


# ---------------------------------------------------------------------------------- module
class _TinyData(SemiSupervisedDataModule):
    label_names = NAMES
    num_labels = 3

    def build(self):
        g = torch.Generator().manual_seed(0)

        def ex(i: int, labeled: bool, index: int):
            n = 4 + i % 3
            y = torch.randint(0, 3, (n,), generator=g)
            x = torch.nn.functional.one_hot(y, 3).double() * 1.5 + torch.randn(n, 3, generator=g, dtype=torch.float64)
            words = tuple("x" if int(t) == 1 and k % 2 == 0 else "y" for k, t in enumerate(y))
            out = {"inputs": x.float(), "index": torch.tensor(index), "tokens": words}
            if labeled:
                out["labels"] = y
            return out

        return {
            "labeled": [ex(i, True, i) for i in range(3)],
            "unlabeled": [ex(i, False, i - 3) for i in range(3, 15)],
            "dev": [ex(i, True, i - 15) for i in range(15, 19)],
            "test": [ex(i, True, i - 19) for i in range(19, 23)],
        }


def _module(**kwargs) -> CoDLModule:
    pl.seed_everything(0)
    options = dict(C=1.0, supervised_epochs=1, lbfgs_max_iter=4, gamma=0.5, penalty_scale=2.0,
                   search_k=8)
    options.update(kwargs)
    return CoDLModule(
        LinearChain(3), LinearChainScorer(3, input_dim=3, init_std=0.01),
        ConstraintSet([AtMostOnce("a"), WordLabels(words=["x"], labels=["b"])]), **options,
    )


def _trainer(max_epochs: int, tmp_path=None, save: bool = False) -> pl.Trainer:
    callbacks = []
    if save:
        callbacks.append(pl.callbacks.ModelCheckpoint(dirpath=tmp_path, save_last=True, save_top_k=0))
    return pl.Trainer(
        max_epochs=max_epochs, callbacks=callbacks, logger=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0, enable_checkpointing=save,
        accelerator="cpu",
    )


def _weights(module: CoDLModule) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.scorer.parameters()]


@pytest.mark.filterwarnings("ignore")
def test_gamma_one_keeps_the_supervised_weights_and_labels_by_the_guided_search():
    sup = _module()
    _trainer(1).fit(sup, datamodule=_TinyData())
    w0 = _weights(sup)
    module = _module(gamma=1.0, penalty_scale=50.0, search_k=3**6)  # exact search
    _trainer(3).fit(module, datamodule=_TinyData())
    # w = 1 * w0 + 0 * learn(T): the supervised epoch's weights after every round
    for a, b in zip(_weights(module), w0):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert module.history[0]["switches"] == 0 and module.history[1]["switches"] == 12
    assert module.history[2]["switches"] == 0  # the same w, the same labels
    assert all(h["labeled_loss"] == 0.0 for h in module.history[1:])  # learn(T) alone
    dm = _TinyData()
    dm.setup("fit")
    unl = dm.collate(dm.splits["unlabeled"])
    expected = module.guided_argmax(unl)
    for j, n in enumerate(unl["lengths"].tolist()):
        assert torch.equal(module.pseudo_labels[j, :n], expected[j, :n])
        # the word rule holds on every token "x" (rho = 50 outweighs the scores)
        assert all(int(module.pseudo_labels[j, k]) == 1 for k, w in enumerate(unl["tokens"][j]) if w == "x")


@pytest.mark.filterwarnings("ignore")
def test_round_interpolates_between_w0_and_the_pseudo_labeled_fit():
    module = _module(gamma=0.25)
    _trainer(2).fit(module, datamodule=_TinyData())
    w_end = _weights(module)
    assert module._w0 is not None
    # learn(T) from w0 by hand: the same objective, the same optimiser, the same iterations
    ref = _module(gamma=0.25)
    ref.scorer.load_state_dict({k: w for k, w in zip(dict(ref.scorer.named_parameters()), module._w0)})
    dm = _TinyData()
    dm.setup("fit")
    unl = dm.collate(dm.splits["unlabeled"])
    ref.pseudo_labels = module.pseudo_labels.clone()
    n, m = 3, 12
    opt = torch.optim.LBFGS(list(ref.scorer.parameters()), lr=1.0, max_iter=4, history_size=10,
                            line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        norm = sum((p**2).sum() for p in ref.scorer.parameters())
        value = norm / (2 * n) + 1.0 * (m / n) * ref.loss(
            ref.structure, ref.potentials(unl), ref.pseudo_labels[:, : unl["inputs"].shape[1]], unl["lengths"])
        value.backward()
        return value

    opt.step(closure)
    for got, w0, w1 in zip(w_end, module._w0, ref.scorer.parameters()):
        torch.testing.assert_close(got, 0.25 * w0 + 0.75 * w1.detach(), rtol=1e-4, atol=1e-5)


@pytest.mark.filterwarnings("ignore")
def test_resume_repeats_an_uninterrupted_run(tmp_path):
    full = _module()
    _trainer(4).fit(full, datamodule=_TinyData())
    part = _module()
    _trainer(2, tmp_path, save=True).fit(part, datamodule=_TinyData())
    resumed = _module()
    _trainer(4).fit(resumed, datamodule=_TinyData(), ckpt_path=str(tmp_path / "last.ckpt"))
    for a, b in zip(_weights(resumed), _weights(full)):
        torch.testing.assert_close(a, b)
    assert torch.equal(resumed.pseudo_labels, full.pseudo_labels)
    for a, b in zip(resumed._w0, full._w0):
        torch.testing.assert_close(a, b)


@pytest.mark.filterwarnings("ignore")
def test_constrained_decoding_decodes_with_the_search():
    module = _module(constrained_decoding=True)
    _trainer(2).fit(module, datamodule=_TinyData())
    dm = _TinyData()
    dm.setup("fit")
    test = dm.collate(dm.splits["test"])
    assert torch.equal(module.decode(test), module.guided_argmax(test))
    module.constrained_decoding = False
    plain, _ = module.structure.argmax(module.potentials(test), test["lengths"])
    assert torch.equal(module.decode(test), plain)


def test_errors():
    scorer = LinearChainScorer(3, input_dim=3)
    cons = ConstraintSet([AtMostOnce("a")])
    with pytest.raises(NotImplementedError, match="supports LinearChain"):
        CoDLModule(CKY(3), scorer, cons)
    with pytest.raises(TypeError, match="constraints must be a ConstraintSet"):
        CoDLModule(LinearChain(3), scorer, None)
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'constraints'"):
        CoDLModule(LinearChain(3), scorer)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="instance-level constraints.*corpus-level"):
        CoDLModule(LinearChain(3), scorer, ConstraintSet([LabelProportion("a", 0.3)]))
    with pytest.raises(ValueError, match=r"gamma must be a number in \[0.0, 1.0\]"):
        CoDLModule(LinearChain(3), scorer, cons, gamma=1.5)
    with pytest.raises(ValueError, match="penalty_scale must be a number"):
        CoDLModule(LinearChain(3), scorer, cons, penalty_scale=-1.0)
    with pytest.raises(ValueError, match="search_k must be an int >= 1"):
        CoDLModule(LinearChain(3), scorer, cons, search_k=0)


def test_refuses_several_processes(monkeypatch):
    from structssl.training import distributed

    module = _module()
    distributed.check_sharding(module)  # one process: fine
    monkeypatch.setattr(distributed, "world_size", lambda: 2)
    with pytest.raises(RuntimeError, match=r"CoDLModule cannot train on 2 processes.*per example.*devices=1"):
        distributed.check_sharding(module)


class _NoDevTokens(_TinyData):
    def build(self):
        splits = super().build()
        splits["dev"] = [{k: v for k, v in ex.items() if k != "tokens"} for ex in splits["dev"]]
        return splits


@pytest.mark.filterwarnings("ignore")
def test_constrained_decoding_without_evaluation_tokens_fails_at_setup():
    module = _module(constrained_decoding=True)
    with pytest.raises(ValueError, match=r"needs dev examples that carry 'tokens'.*carry \['index', 'inputs', 'labels'\]"):
        _trainer(2).fit(module, datamodule=_NoDevTokens())
    assert module.history == []  # nothing trained
    _trainer(1).fit(_module(constrained_decoding=False), datamodule=_NoDevTokens())  # plain decoding: fine


def test_constraints_bound_to_labels_in_another_order_fail_at_setup():
    """A ConstraintSet given ``labels`` in another order than the data's would point its
    rules at the wrong tags: fit stops at setup and names both lists."""
    pl.seed_everything(0)
    cons = ConstraintSet([AtMostOnce("a"), WordLabels(words=["x"], labels=["b"])], labels=["c", "b", "a"])
    module = CoDLModule(LinearChain(3), LinearChainScorer(3, input_dim=3, init_std=0.01), cons,
                        supervised_epochs=1, lbfgs_max_iter=2)
    with pytest.raises(ValueError, match=r"the constraints are bound to the labels \['c', 'b', 'a'\], "
                                         r"the data's labels are \['a', 'b', 'c'\] \(label index order\)"):
        _trainer(1).fit(module, datamodule=_TinyData())


# ---------------------------------------------------------------------- label switching decodes so too
def _switching(**kwargs):
    from structssl.training.label_switching import LabelSwitchingModule

    pl.seed_everything(0)
    options = dict(C=1.0, supervised_epochs=1, lbfgs_max_iter=4, penalty_scale=2.0, search_k=8)
    options.update(kwargs)
    return LabelSwitchingModule(
        LinearChain(3), LinearChainScorer(3, input_dim=3, init_std=0.01),
        ConstraintSet([AtMostOnce("a"), WordLabels(words=["x"], labels=["b"]),
                       LabelProportion("a", 0.3)]), **options,
    )


@pytest.mark.filterwarnings("ignore")
def test_label_switching_decodes_with_the_instance_constraints():
    """The search moved from CoDL to LabelSwitchingModule, which CoDL extends: a label
    switching model with ``constrained_decoding`` decodes with its instance-level constraints
    (the corpus-level LabelProportion is not per example), and exactly: with every labeling
    as a candidate it is the brute-force best of ``s(y) - penalty_scale P(y)``."""
    module = _switching(constrained_decoding=True, search_k=27)
    _trainer(2).fit(module, datamodule=_TinyData())
    dm = _TinyData()
    dm.setup("fit")
    test = dm.collate(dm.splits["test"][:6])
    got = module.decode(test)
    assert torch.equal(got, module.guided_argmax(test))
    instance = module.constraints.select(level="instance")
    with torch.no_grad():
        pot = module.structure.edge_potentials(module.potentials(test), test["lengths"])
    for i in range(got.shape[0]):
        n = int(test["lengths"][i])
        best, best_y = -float("inf"), None
        for y in itertools.product(range(3), repeat=n):
            labels = torch.tensor([y])
            score = float(module.structure.score(pot[i : i + 1, :n], labels, test["lengths"][i : i + 1]))
            score -= 2.0 * float(instance.instance_penalty(labels, test["lengths"][i : i + 1], [test["tokens"][i]]))
            if score > best + 1e-9:
                best, best_y = score, y
        assert tuple(got[i, :n].tolist()) == best_y
    module.constrained_decoding = False
    plain, _ = module.structure.argmax(module.potentials(test), test["lengths"])
    assert torch.equal(module.decode(test), plain)


def test_label_switching_constrained_decoding_needs_instance_constraints():
    from structssl.training.label_switching import LabelSwitchingModule

    scorer = LinearChainScorer(3, input_dim=3)
    with pytest.raises(ValueError, match="constrained_decoding needs a LinearChain and a ConstraintSet with instance-level constraints"):
        LabelSwitchingModule(LinearChain(3), scorer, ConstraintSet([LabelProportion("a", 0.3)]),
                             constrained_decoding=True)
    with pytest.raises(ValueError, match="got LinearChain and no constraints"):
        LabelSwitchingModule(LinearChain(3), scorer, None, constrained_decoding=True)
    with pytest.raises(ValueError, match="search_k must be an int >= 1"):
        LabelSwitchingModule(LinearChain(3), scorer, None, search_k=0)
