"""Gamma-SSVM by CCCP: DC terms against brute force, Lemma 1, monotone outer steps, the module
end to end through the CLI on a small citation fixture, and argument errors."""

from __future__ import annotations

import gzip
import itertools
import random
from pathlib import Path
from typing import Iterator

import pytest
import torch

from structssl.constraints import (
    AllowedFirst,
    ConsecutiveFields,
    ConstraintSet,
    PunctuationTransitions,
    WordLabels,
)
from structssl.losses import StructuredHingeLoss
from structssl.losses.gamma import NodeFeatures
from structssl.structures import LinearChain
from structssl.training.cccp import CCCPModule, gamma_dc_terms, lemma1_gap

D = torch.float64
LABELS = ["a", "b", "c"]
C = 3
VOCAB = ["x", "y", ",", "ca", "."]


def constraint_set() -> ConstraintSet:
    return ConstraintSet(
        [
            PunctuationTransitions(punctuation=[",", "."]),
            WordLabels(labels=["c"], words=["ca"]),
            AllowedFirst(["a"]),
            ConsecutiveFields(),
        ],
        labels=LABELS,
    )


def tokens_for(b: int, n: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    return [[rng.choice(VOCAB) for _ in range(n)] for _ in range(b)]


def all_labelings(n: int) -> torch.Tensor:
    return torch.tensor(list(itertools.product(range(C), repeat=n)), dtype=torch.long).view(-1, n)


def setup_case(seed: int, b: int = 3, n: int = 4):
    torch.manual_seed(seed)
    cset = constraint_set()
    tokens = tokens_for(b, n, seed)
    lengths = torch.tensor([n] + [max(1, n - i) for i in range(1, b)])
    features = cset.indicator_features(tokens, lengths, C, dtype=D)
    nonlinear = cset.nonlinear_indicators()
    d = features.num_constraints + len(nonlinear)
    pot = torch.randn(b, n, C, C, dtype=D)
    v = torch.rand(b, d, dtype=D) * 2 - 0.5
    return cset, tokens, lengths, features, nonlinear, pot, v


def brute(cset, structure, pot, lengths, tokens, i):
    n = pot.shape[1]
    ln = int(lengths[i])
    ys = all_labelings(ln)
    full = torch.zeros(len(ys), n, dtype=torch.long)
    full[:, :ln] = ys
    lens = torch.full((len(ys),), ln)
    scores = structure.score(pot[i : i + 1].expand(len(ys), -1, -1, -1), full, lens)
    phi = cset.indicators(full, lens, [tokens[i]] * len(ys)).to(D)
    return full, scores, phi


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dc_terms_match_brute_force(seed):
    cset, tokens, lengths, features, nonlinear, pot, v = setup_case(seed)
    structure = LinearChain(C)
    mu = 1.3
    terms = gamma_dc_terms(structure, pot, lengths, v, mu, features, nonlinear, tokens, search_k=C**4)
    assert not bool(terms.uncertified.any())
    n = pot.shape[1]
    for i in range(pot.shape[0]):
        full, scores, phi = brute(cset, structure, pot, lengths, tokens, i)
        # pad phi to the batch layout (per-position dims of padded positions are 1)
        ln = int(lengths[i])
        vi = v[i]
        # batch layout: [punct N | words N | first 1 | consecutive 1]; brute phi has the same
        # layout because indicators() pads positions with 1
        assert phi.shape[1] == vi.shape[0], (phi.shape, vi.shape, ln, n)
        sq = (phi * phi).sum(1)
        convex = (scores - mu / 2 * (phi * vi).sum(1) + mu / 4 * sq).max()
        concave = (scores + mu / 2 * (phi * vi).sum(1) - mu / 4 * sq).max()
        torch.testing.assert_close(terms.convex[i], convex)
        torch.testing.assert_close(terms.concave[i], -concave)


@pytest.mark.parametrize("seed", range(5))
def test_lemma1_bound_holds(seed):
    cset, tokens, lengths, features, nonlinear, pot, v = setup_case(seed, b=4, n=4)
    gap = lemma1_gap(LinearChain(C), pot, lengths, v, 0.7 + seed, features, nonlinear, tokens, search_k=C**4)
    assert bool((gap >= -1e-9).all()), gap


def test_lemma1_bound_holds_labeling_formulation():
    torch.manual_seed(4)
    pot = torch.randn(5, 4, C, C, dtype=D)
    lengths = torch.tensor([4, 3, 2, 4, 1])
    v = torch.rand(5, 4 * C, dtype=D) * 3 - 1
    gap = lemma1_gap(LinearChain(C), pot, lengths, v, 2.0, NodeFeatures())
    assert bool((gap >= -1e-9).all()), gap


def _objective(structure, w, x, labels_l, x_u, lengths_u, tokens_u, features, nonlinear, v, mu, c1, c2, at=None):
    """J (paper eq. 13 / n, v = 1 fixed) of a tiny linear model: unary = x @ w."""
    pot_l = LinearChain.potentials_from(x @ w)
    hinge = StructuredHingeLoss()(structure, pot_l, labels_l)
    pot_u = LinearChain.potentials_from(x_u @ w)
    terms = gamma_dc_terms(structure, pot_u, lengths_u, v, mu, features, nonlinear, tokens_u, at, search_k=C**3)
    n = x.shape[0]
    return (w * w).sum() / (2 * n) + c1 / n * hinge + c2 / n * terms.bracket().mean(), terms


@pytest.mark.parametrize("seed", range(2))
def test_cccp_outer_step_never_increases_objective(seed):
    torch.manual_seed(seed)
    structure = LinearChain(C)
    n, f = 3, 5
    x = torch.randn(3, n, f, dtype=D)
    labels_l = torch.randint(C, (3, n))
    x_u = torch.randn(4, n, f, dtype=D)
    lengths_u = torch.full((4,), n)
    tokens_u = tokens_for(4, n, seed + 10)
    cset = constraint_set()
    features = cset.indicator_features(tokens_u, lengths_u, C, dtype=D)
    nonlinear = cset.nonlinear_indicators()
    v = torch.ones(4, features.num_constraints + len(nonlinear), dtype=D)
    w = (torch.randn(f, C, dtype=D) * 0.5).requires_grad_()
    mu, c1, c2 = 2.0, 1.0, 3.0
    for _ in range(2):  # two outer iterations
        with torch.no_grad():
            j0, terms0 = _objective(structure, w, x, labels_l, x_u, lengths_u, tokens_u, features, nonlinear, v, mu, c1, c2)
        guided = terms0.guided
        bound0, _ = _objective(structure, w, x, labels_l, x_u, lengths_u, tokens_u, features, nonlinear, v, mu, c1, c2, at=guided)
        torch.testing.assert_close(bound0.detach(), j0)  # the bound is tight at w_t
        opt = torch.optim.SGD([w], lr=0.05)
        best, best_w = float(bound0.detach()), w.detach().clone()
        for _ in range(25):
            opt.zero_grad()
            bound, _ = _objective(structure, w, x, labels_l, x_u, lengths_u, tokens_u, features, nonlinear, v, mu, c1, c2, at=guided)
            if float(bound.detach()) < best:
                best, best_w = float(bound.detach()), w.detach().clone()
            bound.backward()
            opt.step()
        with torch.no_grad():
            w.copy_(best_w)
            j1, _ = _objective(structure, w, x, labels_l, x_u, lengths_u, tokens_u, features, nonlinear, v, mu, c1, c2)
        assert float(j1) <= best + 1e-9 <= float(j0) + 1e-9


# ---------------------------------------------------------------------- the module end to end
FIELDS = {
    "author": ["smith", "jones", "lee"],
    "title": ["learning", "structured", "models"],
    "journal": ["journal", "machine", "research"],
    "date": ["1999", "2003"],
}


def _citation(rng: random.Random) -> list[tuple[str, str]]:
    out = []
    for field in ("author", "title", "journal", "date"):
        for _ in range(rng.randint(1, 3)):
            out.append((rng.choice(FIELDS[field]), field))
        out.append((".", field) if field != "date" else (".", "date"))
    return out


def _write(path: Path, cites: list[list[tuple[str, str]]], gz: bool = False) -> None:
    lines = []
    for cite in cites:
        for tok, lab in cite:
            lines.append(f"{tok}\t{lab}\t{tok}|p|n|false|false|false|NN")
        lines.append("")
    text = "\n".join(lines) + "\n"
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        path.write_text(text, encoding="utf-8")


@pytest.fixture()
def citation_dir(tmp_path: Path) -> Path:
    rng = random.Random(0)
    root = tmp_path / "citations_cora"
    root.mkdir()
    for k in range(5):
        _write(root / f"citation_train.25.{k}.txt", [_citation(rng) for _ in range(8)])
    _write(root / "citation_train.300.txt", [_citation(rng) for _ in range(12)])
    _write(root / "citation_dev.txt", [_citation(rng) for _ in range(4)])
    _write(root / "citation_test.txt", [_citation(rng) for _ in range(4)])
    _write(root / "citation_unlabeled.txt.gz", [_citation(rng) for _ in range(10)], gz=True)
    return tmp_path


@pytest.fixture()
def _isolate(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr("sys.argv", ["structssl"])
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


CONFIG = Path(__file__).resolve().parents[1] / "configs" / "gamma_ssvm_citations.yaml"


@pytest.mark.filterwarnings(r"ignore:.*isinstance\(treespec, LeafSpec\)` is deprecated.*:FutureWarning")
@pytest.mark.filterwarnings("ignore:.*does not have many workers.*")
@pytest.mark.filterwarnings("ignore:.*The number of training batches.*")
@pytest.mark.parametrize("extra", [False, True])
def test_cli_fit_on_citation_fixture(citation_dir: Path, tmp_path: Path, _isolate, extra: bool):
    from structssl.cli import cli_main

    args = [
        "fit", f"--config={CONFIG}", f"--data.init_args.data_dir={citation_dir}",
        "--trainer.max_epochs=4", f"--trainer.default_root_dir={tmp_path / 'run'}",
        "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false",
        "--model.init_args.supervised_epochs=1", "--model.init_args.inner_epochs=1",
        "--model.init_args.steps_per_batch=3", "--model.init_args.tol=null",
        f"--model.init_args.extra_features={str(extra).lower()}",
    ]
    cli = cli_main(args)
    model = cli.model
    assert isinstance(model, CCCPModule)
    assert cli.trainer.state.finished
    assert len(model.cccp_objectives) == 3  # epochs 1, 2, 3 each start an outer iteration
    assert "test/token_accuracy" in cli.trainer.callback_metrics


@pytest.mark.filterwarnings(r"ignore:.*isinstance\(treespec, LeafSpec\)` is deprecated.*:FutureWarning")
@pytest.mark.filterwarnings("ignore:.*does not have many workers.*")
@pytest.mark.filterwarnings("ignore:.*The number of training batches.*")
def test_labeling_formulation_parameter_mode_trains(tmp_path: Path):
    import pytorch_lightning as pl

    from structssl.data import SyntheticHMMDataModule
    from structssl.scorers import LinearChainScorer

    class Indexed(SyntheticHMMDataModule):
        def build(self):
            splits = super().build()
            for name, examples in splits.items():
                for i, ex in enumerate(examples):
                    ex["index"] = torch.tensor(i)
            return splits

    pl.seed_everything(0)
    dm = Indexed(num_train=20, num_labeled=10, num_dev=5, num_test=5, num_states=3, length=5, dim=4)
    model = CCCPModule(
        LinearChain(3), LinearChainScorer(3, input_dim=4), formulation="labeling", C1=0.0, C2=5.0,
        mu=1.0, v_mode="parameter", v_init="prediction", max_length=5, inner_epochs=2,
        optimizer="adam", lr=0.05, steps_per_batch=5, tol=None,
    )
    trainer = pl.Trainer(
        max_epochs=4, accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(tmp_path),
    )
    trainer.fit(model, datamodule=dm)
    assert len(model.cccp_objectives) == 2
    assert model.v_store["node"].shape == (10, 15)


def test_factored_scorer_gives_the_edge_potentials():
    """A LinearChainScorer(factored=True) (configs/tagger.yaml, tagger_ssl.yaml) works in CCCP:
    its potentials are expanded to the edge layout the constraint features fold into."""
    from structssl.scorers import LinearChainScorer

    torch.manual_seed(0)
    factored = LinearChainScorer(C, input_dim=4, factored=True, init_std=0.5).double()
    edges = LinearChainScorer(C, input_dim=4, init_std=0.5).double()
    edges.load_state_dict(factored.state_dict())
    batch = _batch(1)
    got = [CCCPModule(LinearChain(C), scorer, constraint_set(), num_labeled=3,
                      num_unlabeled=4).potentials(batch) for scorer in (factored, edges)]
    assert isinstance(got[0], torch.Tensor) and got[0].shape == (4, 4, C, C)
    valid = LinearChain.valid_mask(batch["lengths"], 4)  # padded positions are never read
    torch.testing.assert_close(got[0][valid], got[1][valid])


def test_closed_form_condition_checked():
    model = CCCPModule(LinearChain(3), torch.nn.Linear(1, 1), constraints=constraint_set(), mu=50.0, num_labeled=2, num_unlabeled=10)

    class _T:
        datamodule = None

    with pytest.raises(ValueError, match="exact only for mu <= gamma_weight"):
        model._trainer = type("T", (), {"datamodule": type("DM", (), {"num_labeled_examples": 2, "num_unlabeled_examples": 10, "label_names": LABELS, "num_labels": 3})()})()
        model.setup("fit")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(constraints=None), ValueError, "constraints must be given"),
        (dict(formulation="other"), ValueError, "formulation must be"),
        (dict(C2=0.0), ValueError, "C2 must be a number > 0"),
        (dict(mu=-1.0), ValueError, "mu must be a number > 0"),
        (dict(C1=-1.0), ValueError, "C1 must be a number >= 0"),
        (dict(inner_epochs=0), ValueError, "inner_epochs must be an int >= 1"),
        (dict(v_mode="x"), ValueError, "v_mode must be"),
        (dict(v_init="prediction"), ValueError, "v_init='prediction' needs v_mode='parameter'"),
        (dict(constraints="x"), TypeError, "constraints must be a ConstraintSet"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    base = dict(constraints=constraint_set())
    base.update(kwargs)
    with pytest.raises(error, match=match):
        CCCPModule(LinearChain(3), torch.nn.Linear(1, 1), **base)


def test_corpus_constraints_with_label_dependent_denominator_rejected():
    """Corpus-level ratios over a label-free denominator are taken (tests/test_cccp_corpus.py);
    a ratio whose denominator depends on the labels is refused by name."""
    from structssl.constraints import LabelProportion, TransitionFraction

    CCCPModule(LinearChain(3), torch.nn.Linear(1, 1), constraints=ConstraintSet([LabelProportion("a", 0.3)], labels=LABELS))
    cset = ConstraintSet([TransitionFraction(0.1)], labels=LABELS)
    with pytest.raises(ValueError, match="TransitionFraction's does"):
        CCCPModule(LinearChain(3), torch.nn.Linear(1, 1), constraints=cset)


def test_gamma_dc_terms_errors():
    cset, tokens, lengths, features, nonlinear, pot, v = setup_case(0)
    with pytest.raises(ValueError, match="mu must be > 0"):
        gamma_dc_terms(LinearChain(C), pot, lengths, v, 0.0, features, nonlinear, tokens)
    with pytest.raises(ValueError, match="v must have shape"):
        gamma_dc_terms(LinearChain(C), pot, lengths, v[:, :-1], 1.0, features, nonlinear, tokens)


# ---------------------------------------------------------------------- the public pieces
class _PotScorer(torch.nn.Module):
    """inputs (B, N, F) float -> chain potentials through a (F, C) unary weight."""

    def __init__(self, f: int, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.weight = torch.nn.Parameter(torch.randn(f, C, generator=g, dtype=D))
        self.trans = torch.nn.Parameter(torch.randn(C, C, generator=g, dtype=D) * 0.5)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        pot = LinearChain.potentials_from(inputs @ self.weight).clone()
        pot[:, 1:] = pot[:, 1:] + self.trans
        return pot


def _module(seed: int, formulation: str = "transductive", mu: float = 1.5, f: int = 4, n: int = 4) -> CCCPModule:
    cset = constraint_set() if formulation == "transductive" else None
    model = CCCPModule(
        LinearChain(C), _PotScorer(f, seed), cset, formulation=formulation, C1=1.0, C2=3.0, mu=mu,
        search_k=C**n, num_labeled=3, num_unlabeled=4,
    )
    model.setup("fit")
    return model


def _batch(seed: int, b: int = 4, n: int = 4, f: int = 4, labels: bool = False) -> dict:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([n] + [max(1, n - i) for i in range(1, b)])
    batch = {"inputs": torch.randn(b, n, f, generator=g, dtype=D), "lengths": lengths,
             "tokens": tokens_for(b, n, seed)}
    if labels:
        batch["labels"] = torch.randint(C, (b, n), generator=g)
    return batch


@pytest.mark.parametrize("seed", range(3))
def test_module_constraint_guided_labels_brute_force(seed):
    """eq. (15) with v = 1 through the module: argmax s(y) + (mu/4) 1.phi(y), the global
    consecutive-fields indicator included (exhaustive k)."""
    model = _module(seed)
    batch = _batch(seed)
    guided = model.constraint_guided_labels(batch)
    pot = model.potentials(batch).detach()
    cset = model._bound
    for i in range(batch["lengths"].shape[0]):
        full, scores, phi = brute(cset, model.structure, pot, batch["lengths"], batch["tokens"], i)
        value = scores + model.mu / 4 * phi.sum(1)
        ln = int(batch["lengths"][i])
        got = (full[:, :ln] == guided[i, :ln]).all(1).nonzero().view(-1)
        assert got.numel() == 1
        torch.testing.assert_close(value[got[0]], value.max())


def test_module_constraint_guided_labels_labeling_brute_force():
    """Section 4: with v = phi(y_i) the guided labels maximise s(y) + (mu/2)(L - Hamming)."""
    model = _module(1, formulation="labeling", mu=2.0)
    batch = _batch(1, labels=True)
    guided = model.constraint_guided_labels(batch)
    pot = model.potentials(batch).detach()
    for i in range(batch["lengths"].shape[0]):
        ln = int(batch["lengths"][i])
        ys = all_labelings(ln)
        full = torch.zeros(len(ys), pot.shape[1], dtype=torch.long)
        full[:, :ln] = ys
        lens = torch.full((len(ys),), ln)
        s = model.structure.score(pot[i : i + 1].expand(len(ys), -1, -1, -1), full, lens)
        agree = (ys == batch["labels"][i, :ln]).sum(1).to(D)
        value = s + model.mu / 2 * agree - model.mu / 4 * ln
        torch.testing.assert_close(model.structure.score(pot[i : i + 1], guided[i : i + 1], lengths=batch["lengths"][i : i + 1])[0]
                                   + model.mu / 2 * (guided[i, :ln] == batch["labels"][i, :ln]).sum().to(D)
                                   - model.mu / 4 * ln, value.max())


@pytest.mark.parametrize("formulation", ["transductive", "labeling"])
def test_module_outer_step_never_increases_objective(formulation):
    """One CCCP outer step through the module's public pieces (``constraint_guided_labels``,
    ``constraint_term``): the bound is tight at w_t and J(w_{t+1}) <= bound(w_{t+1}) <= J(w_t)."""
    model = _module(2, formulation=formulation, n=3)
    labeled, unlabeled = _batch(5, b=3, n=3, labels=True), _batch(6, n=3)
    cons = labeled if formulation == "labeling" else unlabeled

    def objective(guided=None):
        pot = model.potentials(labeled)
        hinge = model.loss(model.structure, pot, labeled["labels"], labeled["lengths"]) if model.C1 > 0 else 0.0
        term, _ = model.constraint_term(cons, guided)
        return model.weight_norm_squared() / 6 + model.C1 / 3 * hinge + model.C2 / 3 * term

    if formulation == "labeling":
        model.C1 = 0.0
    with torch.no_grad():
        j0 = objective()
    guided = model.constraint_guided_labels(cons)
    bound0 = objective(guided)
    torch.testing.assert_close(bound0.detach(), j0)
    opt = torch.optim.SGD(model.parameters(), lr=0.02)
    best, best_state = float(j0), [p.detach().clone() for p in model.parameters()]
    for _ in range(20):
        opt.zero_grad()
        bound = objective(guided)
        if float(bound.detach()) < best:
            best, best_state = float(bound.detach()), [p.detach().clone() for p in model.parameters()]
        bound.backward()
        opt.step()
    with torch.no_grad():
        for p, s in zip(model.parameters(), best_state):
            p.copy_(s)
        j1 = objective()
    assert float(j1) <= best + 1e-9 <= float(j0) + 1e-9
    # and the module's own objective_terms agrees with the pieces at w_{t+1}
    terms = model.objective_terms({"labeled": labeled, "unlabeled": unlabeled})
    torch.testing.assert_close(terms.objective.detach(), j1)


@pytest.mark.filterwarnings(r"ignore:.*isinstance\(treespec, LeafSpec\)` is deprecated.*:FutureWarning")
@pytest.mark.parametrize("keep_best", [True, False])
def test_keep_best_iterate_makes_cccp_monotone_under_an_overshooting_optimiser(
    tmp_path: Path, keep_best: bool
):
    """Adam with a large step overshoots the piecewise-linear bound, so J rises between outer
    iterations; keep_best_iterate ends every outer iteration at its best inner iterate, and J
    never rises (the case without it shows the test can fail)."""
    import pytorch_lightning as pl

    from structssl.data import SyntheticHMMDataModule
    from structssl.scorers import LinearChainScorer

    pl.seed_everything(0)
    dm = SyntheticHMMDataModule(num_train=40, num_labeled=30, num_dev=5, num_test=5,
                                num_states=4, length=6, dim=5)
    model = CCCPModule(
        LinearChain(4), LinearChainScorer(4, input_dim=5), formulation="labeling", C1=0.0,
        C2=50.0, mu=1.0, inner_epochs=2, optimizer="adam", lr=1.0, steps_per_batch=5, tol=None,
        keep_best_iterate=keep_best,
    )
    bounds: list[list[float]] = []  # every inner iterate's bound, per outer iteration
    logged: list[float] = []  # train/objective at the end of each epoch
    note = model._note_iterate

    def noting(terms):  # type: ignore[no-untyped-def]
        if (model.current_epoch - model.supervised_epochs) % 2 == 0 and model._inner_best is None:
            bounds.append([])
        bounds[-1].append(float(terms.objective.detach()))
        note(terms)

    class Logged(pl.Callback):
        def on_train_epoch_end(self, trainer, module):  # type: ignore[no-untyped-def]
            logged.append(float(trainer.callback_metrics["train/objective"]))

    if keep_best:
        model._note_iterate = noting  # type: ignore[method-assign]
    pl.Trainer(
        max_epochs=12, accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(tmp_path),
        callbacks=[Logged()],
    ).fit(model, datamodule=dm)
    values = model.cccp_objectives
    assert len(values) == 6
    rises = [b - a for a, b in zip(values, values[1:]) if b > a + 1e-6]
    if keep_best:
        assert not rises, values
        # the objective logged when an outer iteration ends is the iterate it ends at (the best)
        assert len(bounds) == 6
        for outer, seen in enumerate(bounds):
            assert logged[2 * outer + 1] == pytest.approx(min(seen), rel=1e-6), (outer, seen, logged)
    else:
        assert rises, values


def test_binding_count_compares_guided_and_own_taggings_within_lengths() -> None:
    """``train/cccp_guided_changed`` counts the examples whose constraint-guided tagging
    differs from the model's argmax; a difference at a padded position does not count."""
    model = CCCPModule(LinearChain(2), torch.nn.Linear(1, 1), constraints=constraint_set(),
                       num_labeled=2, num_unlabeled=10)
    unary = torch.tensor([[[2.0, 0.0], [0.0, 2.0], [0.0, 0.0]],
                          [[2.0, 0.0], [2.0, 0.0], [0.0, 2.0]]])
    potentials = LinearChain(2).potentials_from(unary, torch.zeros(2, 2))
    lengths = torch.tensor([2, 3])
    own, _ = LinearChain(2).argmax(potentials, lengths)
    guided = own.clone()
    guided[0, 2] = 1 - guided[0, 2]  # padding of the first example
    model._count_binding(potentials, lengths, guided)
    assert model._binding == [0, 2]
    guided[1, 1] = 1 - guided[1, 1]
    model._count_binding(potentials, lengths, guided)
    assert model._binding == [1, 4]


def test_token_constraints_on_data_without_tokens_stop_at_setup(tmp_path: Path) -> None:
    """A constraint that reads the tokens (WordLabels) on a data module whose examples carry
    none: one error at setup naming both, not a traceback after the supervised epochs."""
    import pytorch_lightning as pl

    from structssl.data import SyntheticHMMDataModule
    from structssl.scorers import LinearChainScorer

    class Named(SyntheticHMMDataModule):  # label names, no tokens
        label_names = ("s0", "s1", "s2", "s3")

    dm = Named(num_train=40, num_labeled=30, num_dev=5, num_test=5, num_states=4, length=6, dim=5)
    model = CCCPModule(
        LinearChain(4), LinearChainScorer(4, input_dim=5),
        constraints=ConstraintSet([WordLabels(labels=["s0"], words=["x"])]), supervised_epochs=1,
    )
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"CCCPModule: the constraints \['WordLabels.*'\] read the "
                       r"tokens of each example, but the examples of Named carry no"):
        trainer.fit(model, datamodule=dm)
    assert trainer.current_epoch == 0
