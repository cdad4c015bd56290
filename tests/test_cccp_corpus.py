"""Corpus-level ratio constraints in CCCP (Gamma-SSVM, seed 000; issue 17): the two corpus
searches against brute force over every joint labeling of a tiny corpus, the Lemma-1 analogue,
chunks against one padded batch, a float64 gradient check, a fit whose predicted proportion
moves toward the target, and the refusals."""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import pytest
import torch

from fit_configs import QUIET, constrained_fit_config
from structssl.constraints import (
    ConstraintSet,
    ExpectedCount,
    LabelProportion,
    TransitionFraction,
    WordLabels,
)
from structssl.constraints.corpus_search import (
    RatioPenalty,
    ratio_convex_max,
    ratio_corpus,
    ratio_guided_max,
)
from structssl.structures import LinearChain

D = torch.float64
LABELS = ["a", "b", "c"]
C = 3


# ---------------------------------------------------------------------- searches vs brute force
def _tiny(seed: int, cls: type = LabelProportion, bound: str = "eq", target: float = 0.4):
    """3 sentences of lengths 3, 1, 2 in two chunks, random float64 potentials."""
    g = torch.Generator().manual_seed(seed)
    lengths = [torch.tensor([3, 1]), torch.tensor([2])]
    pots = [torch.randn(b, n, C, C, generator=g, dtype=D) * 2 for b, n in ((2, 3), (1, 2))]
    label = ["b", "c"] if seed % 2 else "b"
    con = cls(label=label, target=target, bound=bound).bind(LABELS)
    corpus = ratio_corpus(con, LinearChain(C), pots, lengths, [None, None])
    return con, pots, lengths, corpus


def _brute(con, pots, lengths, denominator: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean score F and ratio r of every joint labeling of the corpus."""
    structure = LinearChain(C)
    per = []
    for pot, ln in zip(pots, lengths):
        for i in range(pot.shape[0]):
            n = int(ln[i])
            ys = torch.tensor(list(itertools.product(range(C), repeat=n))).view(-1, n)
            full = torch.zeros(len(ys), pot.shape[1], dtype=torch.long)
            full[:, :n] = ys
            rows = pot[i : i + 1].expand(len(ys), -1, -1, -1)
            s = structure.score(rows, full, torch.full((len(ys),), n))
            per.append((s, torch.isin(ys, torch.tensor(con.indices)).sum(1).to(D)))
    f, r = [], []
    for combo in itertools.product(*[range(len(s)) for s, _ in per]):
        f.append(sum(per[j][0][c] for j, c in enumerate(combo)) / len(per))
        r.append(sum(per[j][1][c] for j, c in enumerate(combo)) / denominator)
    return torch.stack(f), torch.stack(r)


def _q(penalty: RatioPenalty, r: torch.Tensor) -> torch.Tensor:
    return torch.tensor([penalty(float(x)) for x in r], dtype=D)


CASES = [(seed, cls, bound, scale) for seed in range(3) for cls in (LabelProportion, ExpectedCount)
         for bound in ("eq", "le", "ge") for scale in (0.3, 3.0, 30.0)]


@pytest.mark.parametrize(("seed", "cls", "bound", "scale"), CASES)
def test_searches_match_brute_force(seed: int, cls: type, bound: str, scale: float) -> None:
    target = 0.4 if cls is LabelProportion else 1.2
    con, pots, lengths, corpus = _tiny(seed, cls, bound, target)
    penalty = RatioPenalty(target, bound, scale)
    f, r = _brute(con, pots, lengths, corpus.denominator)
    q = _q(penalty, r)
    # the convex part: exact, certified
    convex = ratio_convex_max(corpus, penalty)
    assert convex.certified
    torch.testing.assert_close(torch.tensor(convex.value, dtype=D), (f + q).max())
    assert convex.point.score + penalty(convex.point.ratio) == pytest.approx(convex.value)
    # the guided point: never above the maximum, the reported bound never below it; on these
    # cases the Lagrangian search plus the mixture of its bracketing labelings is exact
    guided = ratio_guided_max(corpus, penalty)
    exact = float((f - q).max())
    assert guided.value <= exact + 1e-9 and guided.bound >= exact - 1e-9
    assert guided.value == pytest.approx(exact, abs=1e-9)
    if guided.certified:
        assert guided.gap <= 1e-8
    # Lemma-1 analogue: B_c >= q(y_hat) for the plain argmax y_hat
    plain = corpus.decode(0.0)
    assert convex.value - guided.value >= penalty(plain.ratio) - 1e-9


def test_guided_search_keeps_a_better_candidate() -> None:
    con, pots, lengths, corpus = _tiny(4)
    penalty = RatioPenalty(0.4, "eq", 30.0)
    f, r = _brute(con, pots, lengths, corpus.denominator)
    # the best joint labeling, split back into chunks, as the candidate: it must be kept
    best = int((f - _q(penalty, r)).argmax())
    sizes = [[int(x) for x in ln] for ln in lengths]
    per_example = [list(itertools.product(range(C), repeat=n)) for ln in sizes for n in ln]
    flat = list(itertools.product(*per_example))[best]
    labels, k = [], 0
    for pot, ln in zip(pots, sizes):
        y = torch.zeros(len(ln), pot.shape[1], dtype=torch.long)
        for i, n in enumerate(ln):
            y[i, :n] = torch.tensor(flat[k])
            k += 1
        labels.append(y)
    result = ratio_guided_max(corpus, penalty, iterations=0, candidates=[labels])
    assert result.value == pytest.approx(float((f - _q(penalty, r)).max()))


def test_convex_search_budget_reports_the_bound() -> None:
    """With a budget too small to settle every interval the result is not certified and the
    bound it reports is still above the true maximum."""
    g = torch.Generator().manual_seed(0)
    lengths = [torch.full((40,), 6)]
    pots = [torch.randn(40, 6, C, C, generator=g, dtype=D)]
    con = LabelProportion("b", 0.9).bind(LABELS)
    corpus = ratio_corpus(con, LinearChain(C), pots, lengths, [None])
    penalty = RatioPenalty(0.9, "eq", 50.0)
    full = ratio_convex_max(corpus, penalty, budget=400)
    short = ratio_convex_max(corpus, penalty, budget=2, grid=2)
    assert full.certified and not short.certified
    assert short.value <= full.value + 1e-9 <= short.bound + 2e-9


def test_penalty_and_corpus_errors() -> None:
    with pytest.raises(ValueError, match="bound must be one of"):
        RatioPenalty(0.3, "lt", 1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="scale must be a finite number >= 0"):
        RatioPenalty(0.3, "eq", -1.0)
    con = TransitionFraction(0.1).bind(LABELS)
    pot = torch.randn(1, 3, C, C, dtype=D)
    with pytest.raises(ValueError, match="denominator depends on the labels"):
        ratio_corpus(con, LinearChain(C), [pot], [torch.tensor([3])], [[["x", ",", "y"]]])


# ---------------------------------------------------------------------- the module
pytest.importorskip("pytorch_lightning")

from structssl.training.cccp import CCCPModule  # noqa: E402


class _Scorer(torch.nn.Module):
    """inputs (B, N, F) -> chain potentials through a (F, C) unary weight and transitions; the
    weight can be overridden by a tensor (for gradcheck)."""

    def __init__(self, f: int, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.weight = torch.nn.Parameter(torch.randn(f, C, generator=g, dtype=D))
        self.trans = torch.nn.Parameter(torch.randn(C, C, generator=g, dtype=D) * 0.5)
        self.override: Any = None

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        w = self.weight if self.override is None else self.override
        pot = LinearChain.potentials_from(inputs @ w).clone()
        pot[:, 1:] = pot[:, 1:] + self.trans
        return pot


def _module(corpus_constraints: list, seed: int = 0, m: int = 6, mu: float = 2.0) -> CCCPModule:
    instance = WordLabels(labels=["c"], words=["ca"])
    cset = ConstraintSet([instance, *corpus_constraints], labels=LABELS)
    model = CCCPModule(LinearChain(C), _Scorer(4, seed), cset, C1=1.0, C2=3.0, mu=mu,
                       num_labeled=3, num_unlabeled=m)
    model.setup("fit")
    model.manual_backward = lambda loss: loss.backward()  # type: ignore[method-assign]
    return model


def _batch(seed: int, lengths: list[int], labels: bool = False) -> dict:
    g = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    n = max(lengths)
    batch = {"inputs": torch.randn(len(lengths), n, 4, generator=g, dtype=D),
             "lengths": torch.tensor(lengths),
             "tokens": [[rng.choice(["x", "ca", "y"]) for _ in range(k)] for k in lengths]}
    if labels:
        batch["labels"] = torch.randint(C, (len(lengths), n), generator=g)
    return batch


def _chunk(batch: dict, rows: list[int]) -> dict:
    n = int(batch["lengths"][rows].max())
    out = {"inputs": batch["inputs"][rows, :n], "lengths": batch["lengths"][rows],
           "tokens": [batch["tokens"][i] for i in rows]}
    if "labels" in batch:
        out["labels"] = batch["labels"][rows, :n]
    return out


def test_corpus_term_chunks_equal_one_batch() -> None:
    """The objective (instance and corpus terms) and its gradient on length chunks of the
    unlabeled set equal those of one padded batch (float64, fresh searches on both)."""
    model = _module([LabelProportion("b", 0.6, weight=3.0), ExpectedCount("a", 0.5, bound="le")])
    labeled = _batch(1, [4, 3, 2], labels=True)
    unlabeled = _batch(2, [5, 1, 3, 2, 5, 4])
    whole = model._evaluate({"labeled": labeled, "unlabeled": unlabeled}, 0, None)
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    chunks = [_chunk(unlabeled, rows) for rows in ([1, 3], [2, 5], [0, 4])]
    parts = model._evaluate({"labeled": [labeled], "unlabeled": chunks}, 0, None)
    torch.testing.assert_close(parts.objective, whole.objective.detach())
    torch.testing.assert_close(parts.unlabeled_loss, whole.unlabeled_loss.detach())
    for p, g in zip(model.parameters(), grads):
        torch.testing.assert_close(p.grad, g)
    # the corpus term is part of it: without the corpus constraints the unlabeled loss differs
    plain = _module([])
    without = plain._evaluate({"labeled": labeled, "unlabeled": unlabeled}, 0, None).unlabeled_loss
    assert abs(float(without.detach()) - float(whole.unlabeled_loss.detach())) > 1e-3


def test_corpus_term_gradcheck() -> None:
    """float64 gradcheck of the corpus term (linearised at fixed points, the convex maximum
    searched at every evaluation) with respect to the scorer's weight, away from ties."""
    model = _module([LabelProportion("b", 0.7, weight=4.0)], seed=3)
    unlabeled = _batch(4, [5, 1, 3, 2, 5, 4])
    points = model.corpus_guided_labels(unlabeled)

    def term(w: torch.Tensor) -> torch.Tensor:
        model.scorer.override = w
        pot = model.potentials(unlabeled)
        plan = model.corpus_terms(unlabeled, points)
        assert plan.uncertified == 0
        return model._corpus_chunk_term(plan.labels[0], pot, unlabeled["lengths"]) + plan.constant

    w = model.scorer.weight.detach().clone().requires_grad_()
    assert torch.autograd.gradcheck(term, (w,), eps=1e-6, atol=1e-6)
    model.scorer.override = None


def test_corpus_term_bounds_the_squared_violation() -> None:
    """Through the module: B_c (exact concave part) >= weight (mu/4) dev(r(y_hat))^2."""
    model = _module([LabelProportion("b", 0.7, weight=4.0)], seed=5, mu=3.0)
    unlabeled = _batch(6, [5, 1, 3, 2, 5, 4])
    with torch.no_grad():
        plan = model.corpus_terms(unlabeled)
        pot = model.potentials(unlabeled)
        b_c = float(model._corpus_chunk_term(plan.labels[0], pot, unlabeled["lengths"]))
        b_c += plan.constant
        y_hat = model.decode(unlabeled)
    con, tokens = model._corpus[0], float(unlabeled["lengths"].sum())
    ratio = float(con.counts(y_hat, unlabeled["lengths"]).sum(0)[0]) / tokens
    assert b_c >= tokens / 6 * 4.0 * 3.0 / 4 * (ratio - 0.7) ** 2 - 1e-9 > 0


def test_mini_batches_are_refused() -> None:
    model = _module([LabelProportion("b", 0.6)], m=6)
    with pytest.raises(ValueError, match=r"corpus-level constraints .* the whole unlabeled set, m = 6 examples.*; got 3$"):
        model.corpus_terms(_batch(2, [5, 1, 3]))


def test_refusals() -> None:
    cset = ConstraintSet([TransitionFraction(0.1)], labels=LABELS)
    with pytest.raises(ValueError, match=r"TransitionFraction's does .*label changes"):
        CCCPModule(LinearChain(C), torch.nn.Linear(1, 1), constraints=cset)
    cset = ConstraintSet([LabelProportion("a", 0.3, hard=True)], labels=LABELS)
    with pytest.raises(ValueError, match=r"LabelProportion\(a\) is hard"):
        CCCPModule(LinearChain(C), torch.nn.Linear(1, 1), constraints=cset)
    cset = ConstraintSet([LabelProportion("a", 0.3)], labels=LABELS)
    with pytest.raises(ValueError, match="need formulation='transductive'"):
        CCCPModule(LinearChain(C), torch.nn.Linear(1, 1), constraints=cset, formulation="labeling")
    with pytest.raises(ValueError, match="corpus_budget must be an int >= 2"):
        CCCPModule(LinearChain(C), torch.nn.Linear(1, 1), constraints=cset, corpus_budget=1)


# ---------------------------------------------------------------------- a fit
_NAMES = ["Ana", "Luis", "Madrid", "Roma", "Sol"]
_WORDS = ["el", "de", "con", "y", "casa", "vino", "por", "la"]


def _sentence(rng: random.Random) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for _ in range(rng.randint(3, 8)):
        if rng.random() < 0.25:
            out.append((rng.choice(_NAMES), "B-X"))
        else:
            out.append((rng.choice(_WORDS), "O"))
    return out


def _write(path: Path, sentences: list, tags: bool = True) -> None:
    lines = []
    for sent in sentences:
        lines += [f"{tok} {tag}" if tags else tok for tok, tag in sent] + [""]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.filterwarnings(r"ignore:.*isinstance\(treespec, LeafSpec\)` is deprecated.*:FutureWarning")
@pytest.mark.filterwarnings("ignore:.*does not have many workers.*")
@pytest.mark.filterwarnings("ignore:.*The number of training batches.*")
@pytest.mark.filterwarnings("ignore:.*Total length of `DataLoader` across ranks is zero.*")
def test_fit_moves_the_predicted_proportion_toward_the_target(tmp_path: Path) -> None:
    """A CCCP fit with an entity-proportion prior ("[!O]*" tokens are 45% of the untagged
    ones, as an equality or as "at least"; about 28% predicted without it): the CCCP objective
    never increases between outer iterations, and the predicted proportion on the untagged set
    is closer to the target than with the corpus term switched (nearly) off."""
    import pytorch_lightning as pl

    from structssl.data import CoNLLDataModule
    from structssl.scorers import LinearChainScorer

    rng = random.Random(0)
    _write(tmp_path / "t.conll", [_sentence(rng) for _ in range(10)])
    _write(tmp_path / "u.txt", [_sentence(rng) for _ in range(60)], tags=False)
    target = 0.45

    def fit(c2: float, bound: str, weight: float) -> tuple[float, list[float]]:
        torch.manual_seed(0)
        dm = CoNLLDataModule(train_file=str(tmp_path / "t.conll"), dev_file=None, test_file=None,
                             unlabeled_file=str(tmp_path / "u.txt"))
        cset = ConstraintSet([LabelProportion("[!O]*", target, bound=bound, weight=weight)])
        model = CCCPModule(LinearChain(), LinearChainScorer(), cset, C1=10.0, C2=c2, mu=1.0,
                           inner_epochs=1, supervised_epochs=1, tol=None, optimizer="lbfgs",
                           lbfgs_max_iter=10)
        trainer = pl.Trainer(max_epochs=5, logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(model, datamodule=dm)
        batch = dm.collate(dm.splits["unlabeled"])
        with torch.no_grad():
            labels = model.decode(batch)
        hits = float(model._corpus[0].counts(labels, batch["lengths"]).sum(0)[0])
        ratio = hits / float(batch["lengths"].sum())
        return ratio, model.cccp_objectives

    ratio_off, _ = fit(1e-6, "eq", 100.0)
    for bound, weight in (("eq", 100.0), ("ge", 20.0)):
        ratio_on, objectives = fit(50.0, bound, weight)
        assert len(objectives) == 4
        assert all(b <= a + 1e-6 * abs(a) for a, b in zip(objectives, objectives[1:])), objectives
        assert abs(ratio_on - target) < abs(ratio_off - target) - 0.1, (bound, ratio_on, ratio_off)


# ---------------------------------------------------------------------- target from the labeled split
def test_target_estimated_from_labeled_examples() -> None:
    """``target="labeled"``: the ratio of the labeled examples' summed counts; unresolved it
    refuses to score, and the estimate is checked like a given target."""
    labels = torch.tensor([[1, 0, 2, 0], [1, 1, 0, 0]])
    lengths = torch.tensor([4, 2])
    con = LabelProportion("b", "labeled", bound="ge").bind(LABELS)
    with pytest.raises(ValueError, match="target='labeled' has not been estimated"):
        con.violation(labels, lengths)
    est = con.with_target_from(labels, lengths)
    assert est.target == pytest.approx(3 / 6) and est.bound == "ge" and est.target_from is None
    assert float(est.violation(labels, lengths)) == 0.0
    mean = ExpectedCount(["b", "c"], "labeled").bind(LABELS).with_target_from(labels, lengths)
    assert mean.target == pytest.approx(4 / 2)
    with pytest.raises(ValueError, match="needs labeled examples"):
        con.with_target_from(labels[:0], lengths[:0])
    with pytest.raises(ValueError, match=r"target must be a proportion in \[0, 1\] \(or 'labeled'\)"):
        LabelProportion("b", "tagged")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="target must be a fraction"):
        TransitionFraction("labeled")  # type: ignore[arg-type]


def test_module_estimates_the_target_at_setup() -> None:
    """CCCPModule.setup("fit") estimates target="labeled" from the data module's labeled split
    (and refuses a data module without labeled examples)."""
    from structssl.data.modules.base import SemiSupervisedDataModule

    labeled = [{"inputs": torch.zeros(n, 1), "labels": torch.tensor(y), "lengths": torch.tensor(n)}
               for n, y in ((3, [1, 0, 1]), (1, [2]))]

    class _DM:
        num_labeled_examples, num_unlabeled_examples, label_names = 2, 4, LABELS
        collate = staticmethod(SemiSupervisedDataModule.collate)

        def __init__(self, examples: list) -> None:
            self.splits = {"labeled": examples, "unlabeled": []}

    def module(examples: list) -> CCCPModule:
        cset = ConstraintSet([LabelProportion("b", "labeled", weight=2.0)])
        model = CCCPModule(LinearChain(C), torch.nn.Linear(1, 1), cset)
        model._trainer = type("T", (), {"datamodule": _DM(examples)})()  # type: ignore[assignment]
        model.setup("fit")
        return model

    model = module(labeled)
    assert model._corpus[0].target == pytest.approx(2 / 4)
    with pytest.raises(ValueError, match="has no labeled examples"):
        module([])


@pytest.mark.filterwarnings(r"ignore:.*isinstance\(treespec, LeafSpec\)` is deprecated.*:FutureWarning")
@pytest.mark.filterwarnings("ignore:.*does not have many workers.*")
@pytest.mark.filterwarnings("ignore:.*The number of training batches.*")
@pytest.mark.filterwarnings("ignore:.*Total length of `DataLoader` across ranks is zero.*")
def test_cli_yaml_with_a_labeled_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``structssl fit`` with a corpus constraint written in YAML (``target: labeled``, a tag
    pattern) on untagged sentences given in length chunks: the target is the tagged
    sentences' entity proportion, and the corpus term is trained and logged."""
    from structssl.cli import cli_main

    monkeypatch.setattr("sys.argv", ["structssl"])
    rng = random.Random(1)
    tagged = [_sentence(rng) for _ in range(10)]
    _write(tmp_path / "t.conll", tagged)
    _write(tmp_path / "u.txt", [_sentence(rng) for _ in range(30)], tags=False)
    config = constrained_fit_config(
        tmp_path / "c.yaml", "structssl.training.cccp.CCCPModule",
        [("LabelProportion", {"label": "[!O]*", "target": "labeled", "bound": "ge",
                              "weight": 20.0})],
        {"train_file": str(tmp_path / "t.conll"), "dev_file": None, "test_file": None,
         "unlabeled_file": str(tmp_path / "u.txt"), "max_chunk_positions": 60},
        trainer={**QUIET, "max_epochs": 3, "default_root_dir": str(tmp_path / "run")},
        C2=10.0, supervised_epochs=1, inner_epochs=1, lbfgs_max_iter=5,
    )
    seen: list[int] = []
    original = CCCPModule.corpus_terms

    def spy(self: CCCPModule, unlabeled: Any, points: Any = None) -> Any:
        seen.append(len(unlabeled) if isinstance(unlabeled, list) else 1)
        return original(self, unlabeled, points)

    monkeypatch.setattr(CCCPModule, "corpus_terms", spy)
    cli = cli_main(["fit", f"--config={config}", "--test_after_fit=false"])
    model = cli.model
    entity = sum(tag != "O" for sent in tagged for _, tag in sent)
    assert model._corpus[0].target == pytest.approx(entity / sum(len(s) for s in tagged))
    assert seen and min(seen) > 1  # the whole unlabeled set, as several chunks
    assert len(model.cccp_objectives) == 2
    assert "train/corpus_guided_gap" in cli.trainer.callback_metrics
