"""Seed 003: semi-supervised structural SVM by label switching and deterministic annealing.

    python benchmarks/bench_label_switching.py --quick            # a few minutes, JSON to the temp dir
    python benchmarks/bench_label_switching.py                    # the scaled protocol (below)
    python benchmarks/bench_label_switching.py --tasks parsing    # one task, merged into results/
    python benchmarks/bench_label_switching.py --full-protocol    # the paper's protocol
    python benchmarks/bench_label_switching.py --tasks crf        # the paper's CRF baseline row (citations)
    python benchmarks/bench_label_switching.py --tasks codl       # its CODL (I) column (CoDLModule)
    python benchmarks/bench_label_switching.py --tasks diagnostic # what the constraints can fix (side experiment)

Citations (seed 003 section 4.1.2, Table 2), inductive setting: N = 5, 20, 300 labeled
citations (a seeded sample of citation_train.300 per partition), 1,000 unlabeled citations of
the unlabeled file, dev 100 (per-Cu model selection), test 100 (never seen in training).
Features: the extractor's default templates (``CitationsDataModule(features="rich")``: token,
affixes, shape, window) plus the chain's transitions; weights start at N(0, 0.01^2). Constraints of section 4.1.1: AUTHOR at most once, the word CA is LOCATION, each
label one consecutive run (instance level, weight ``r``); 30% of the tokens AUTHOR and a
fraction 0.01 of the label changes on non-punctuation boundaries (corpus level, weight
``--corpus-weight`` on the proportion). One run of :class:`LabelSwitchingModule` per partition:
``supervised_epochs`` epochs of full-batch L-BFGS on the structural SVM (Hamming cost; SDM
in the paper) give the baseline ("sup"), then Cu = C * start * 2^k up to C, at most
``--max-alternations`` alternations (label switching with ``--max-passes`` passes, then one
L-BFGS step of ``--lbfgs-iter`` iterations) per Cu. Reported: test token accuracy of the
supervised model, of the model at the Cu with the best dev accuracy (``ssvm-ls``, our
selection: the test accuracy at the end of that Cu step), of the paper's reading (the best test
accuracy within that Cu step, ``ssvm-ls-paper-selection``) and of the last Cu
(``ssvm-ls-final``); mean and std over the partitions.

Parsing (section 4.2) on the NLTK Penn Treebank sample with the paper's CESS-CAT protocol
(``TreebankDataModule``: 92 sentences of 4..8 words, 5 labeled / 65 unlabeled / 22 test, one
run per permutation, rule features only, the grammar of all 92 trees known, C = 1; the
training hinge uses the Hamming cost on labelled spans, as the 0/1-cost hinge needs CKY's
dense 2-best, and :class:`GrammarCKY` parses with the grammar's rules only):
exact-match accuracy (1 - 0/1 loss) and bracket F1 on the unlabeled and the test sentences of
the supervised model and after annealing (final Cu; dev = the labeled set, so no selection).
Corpus constraint: the share of binary rules starting with S or @S, target = its share in the
5 labeled trees (the paper: "more than 50% of grammar rules start with S"); leaf-rule
switching with ``--num-trials`` trials per alternation.

Diagnostic (``--tasks diagnostic``, a side experiment in ``results/label_switching_diagnostic.json``):
what the citation constraints can correct in the supervised model's own test labelings, with
the gold labels to score the result. Per partition the supervised model (the same first
epoch as SSVM-LS) labels the test citations; then (a) :func:`label_switching` with the
constraints above rewrites those labels at each ``--diagnostic-cu`` (the unlabeled hinge's
weight relative to the constraint penalties: the annealing's range) and (b) an exact Viterbi
decoding penalises every label change off punctuation by each ``--diagnostic-penalties``
value (``LabelSwitchingModule.start_labels`` with ``guide=PunctuationTransitions(weight=...)``,
the guided start's own decoding; the corpus rule "a fraction 0.01 of the changes off punctuation" enforced exactly at
the largest values). Recorded: test token accuracy of each, and the constraint statistics
(AUTHOR share, share of label changes off punctuation) of the model's labels and of the gold
ones. If neither (a) nor (b) raises the accuracy, pseudo-labels from these constraints carry
little for the supervised step to learn.

Timing: seconds of the supervised phase (the baseline's training time), per annealing step
(one Cu value: its alternations, switching + L-BFGS) and of the whole run. Figures 2-4 of the
paper (objective, test accuracy, switches per iteration) are written as
``results/label_switching_<task>_{objective,test_accuracy,switches}.png``.
Results are merged into ``benchmarks/results/label_switching.json`` (records of the same task,
method and metric are replaced) after every run, so a cut-off invocation leaves its finished
runs.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Optional

import pytorch_lightning as pl
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, config_model_args, config_rounds, header, mean_std, record  # noqa: E402

from structssl.constraints import (  # noqa: E402
    AtMostOnce,
    ConsecutiveFields,
    ConstraintSet,
    LabelProportion,
    PunctuationTransitions,
    TransitionFraction,
    WordLabels,
)
from structssl.inference.label_switching import SymbolProportion, label_switching  # noqa: E402
from structssl.losses.hinge import StructuredHingeLoss  # noqa: E402
from structssl.metrics import task_metrics  # noqa: E402
from structssl.scorers.chain import LinearChainScorer  # noqa: E402
from structssl.structures.linear_chain import LinearChain  # noqa: E402
from structssl.training.label_switching import (  # noqa: E402
    LabelSwitchingAnnealing,
    LabelSwitchingModule,
    plot_label_switching,
)

BENCH = "label_switching"

#: seed 003 Table 2 (citations, test token accuracy %, inductive): method -> N -> value
PAPER_CITATIONS = {
    "baseline-sdm": {5: 66.82, 20: 78.25, 300: 91.54},
    "ssvm-sdm": {5: 74.74, 20: 86.2, 300: 92.92},
    "daso": {5: 75.2, 20: 84.9, 300: 91.1},
    "codl": {5: 71.0, 20: 79.4, 300: 88.8},
    "pr": {5: 62.7, 20: 76.0, 300: 87.29},
    "baseline-crf": {5: 63.1, 20: 79.1, 300: 89.9},
}
#: ours -> the paper's column it is compared with
OURS_VS_PAPER = {"sup": "baseline-sdm", "ssvm-ls": "ssvm-sdm", "ssvm-ls-paper-selection": "ssvm-sdm",
                 "crf": "baseline-crf"}
#: seed 003 section 4.2 (CESS-CAT, accuracy = 1 - 0/1 loss, %): split -> (supervised, semi)
PAPER_PARSING = {"unlabeled": (76.0, 82.46), "test": (79.1, 81.8)}

QUICK = dict(labeled=[5], partitions=1, num_unlabeled=100, start=0.25, max_alternations=2,
             max_passes=1, permutations=1, num_trials=8)
SCALED = dict(labeled=[5, 20, 300], partitions=2, num_unlabeled=300, start=0.125,
              max_alternations=2, max_passes=1, permutations=5, num_trials=16)
FULL = dict(labeled=[5, 20, 300], partitions=5, num_unlabeled=1000, start=1 / 16,
            max_alternations=5, max_passes=3, permutations=5, num_trials=32)


# ---------------------------------------------------------------------------------- helpers
class _Tracker(pl.Callback):
    """Adds the evaluation sets' metrics of the model after each alternation to its record."""

    def __init__(self, sets: dict[str, dict[str, Any]], task: str) -> None:
        self.sets = sets
        self.task = task

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        assert isinstance(pl_module, LabelSwitchingModule)
        rec = pl_module.history[-1]
        rec.update(evaluate(pl_module, self.sets, self.task))
        if "test_token_accuracy" in rec:
            rec["test_accuracy"] = rec["test_token_accuracy"]
        elif "test_exact_match" in rec:
            rec["test_accuracy"] = rec["test_exact_match"]


def evaluate(module: LabelSwitchingModule, sets: dict[str, dict[str, Any]], task: str) -> dict[str, float]:
    """``{<set>_<metric>: value in %}`` of the module's argmax on each batch of ``sets``."""
    out = {}
    was_training = module.training
    module.eval()
    with torch.no_grad():
        for name, batch in sets.items():
            metrics = task_metrics(task)
            metrics.update(module.decode(batch), batch["labels"], lengths=batch.get("lengths"))
            for key, value in metrics.compute().items():
                out[f"{name}_{key}"] = 100.0 * float(value)
    module.train(was_training)
    return out


def _trainer(callbacks: list[pl.Callback], max_epochs: int) -> pl.Trainer:
    return pl.Trainer(
        max_epochs=max_epochs, callbacks=callbacks, logger=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, num_sanity_val_steps=0,
        accelerator="cpu",
    )


def _steps(history: list[dict[str, Any]], supervised_epochs: int) -> list[list[dict[str, Any]]]:
    """The annealing epochs grouped by Cu step (consecutive epochs with the same Cu)."""
    steps: list[list[dict[str, Any]]] = []
    for r in history[supervised_epochs:]:
        if steps and steps[-1][-1]["Cu"] == r["Cu"]:
            steps[-1].append(r)
        else:
            steps.append([r])
    return steps


def run_module(
    module: LabelSwitchingModule, dm: Any, sets: dict[str, dict[str, Any]], task: str,
    annealing: LabelSwitchingAnnealing, max_epochs: int,
) -> tuple[list[dict[str, Any]], float]:
    """Fit; returns the module's history (with evaluations) and the fit's wall time (s)."""
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _trainer([annealing, _Tracker(sets, task)], max_epochs).fit(module, datamodule=dm)
    return module.history, time.perf_counter() - start


# ---------------------------------------------------------------------------------- citations
def citations_constraints(args: argparse.Namespace) -> ConstraintSet:
    return ConstraintSet([
        AtMostOnce("author", weight=args.instance_weight),
        WordLabels(words=["ca"], labels=["location"], weight=args.instance_weight),
        ConsecutiveFields(weight=args.instance_weight),
        LabelProportion("author", 0.3, weight=args.corpus_weight),
        TransitionFraction(0.01, weight=args.corpus_weight),
    ])


def citations_data(n_labeled: int, partition: int, num_unlabeled: int,
                   args: argparse.Namespace) -> tuple[Any, dict[str, dict[str, Any]]]:
    """The seeded inductive citations of one partition (rich features) and their test / dev
    batches."""
    from structssl.data import CitationsDataModule

    pl.seed_everything(partition, verbose=False)
    dm = CitationsDataModule(
        data_dir=args.data_dir, protocol="inductive", num_labeled=n_labeled, subset=partition,
        num_unlabeled=num_unlabeled, features="rich", shuffle=False,
    )
    dm.setup("fit")
    return dm, {"test": dm.collate(dm.splits["test"]), "dev": dm.collate(dm.splits["dev"])}


def run_citations(n_labeled: int, partition: int, args: argparse.Namespace) -> dict[str, Any]:
    dm, sets = citations_data(n_labeled, partition, args.num_unlabeled, args)
    module = LabelSwitchingModule(
        LinearChain(dm.num_labels),
        LinearChainScorer(dm.num_labels, num_features=dm.num_features, init_std=args.init_std),
        constraints=citations_constraints(args), C=args.C, supervised_epochs=args.supervised_epochs,
        max_passes=args.max_passes, lbfgs_max_iter=args.lbfgs_iter, seed=partition,
        guide=None if args.guide_penalty is None else ConstraintSet([PunctuationTransitions(weight=args.guide_penalty)]),
    )
    annealing = LabelSwitchingAnnealing(
        start=args.start, factor=2.0, max_alternations=args.max_alternations,
        monitor="val/token_accuracy", restore_best=False,
    )
    epochs = args.supervised_epochs + args.max_alternations * (round(math.log2(1 / args.start)) + 1)
    history, wall = run_module(module, dm, sets, "sequence", annealing, epochs)
    sup = history[args.supervised_epochs - 1]
    steps = _steps(history, args.supervised_epochs)
    best = annealing.best
    chosen = next((s for s in steps if best is not None and s[-1]["epoch"] == best["epoch"]), steps[-1])
    chosen[-1]["selected"] = True
    return {
        "n_labeled": n_labeled, "partition": partition, "history": history, "wall_s": wall,
        "sup": sup["test_token_accuracy"],
        "ssvm-ls": chosen[-1]["test_token_accuracy"],
        "ssvm-ls-paper-selection": max(r["test_token_accuracy"] for r in chosen),
        "ssvm-ls-final": history[-1]["test_token_accuracy"],
        "selected_Cu": chosen[-1]["Cu"],
        "sup_time": sum(r["seconds"] for r in history[: args.supervised_epochs]),
        "step_times": [sum(r["seconds"] for r in s) for s in steps],
        "alternations": len(history) - args.supervised_epochs,
        "switches": sum(r["switches"] for r in history),
    }


def run_citations_crf(n_labeled: int, partition: int, args: argparse.Namespace) -> dict[str, Any]:
    """The paper's supervised CRF baseline row on the same labeled citations and features: a
    ``SupervisedModule`` with ``CRFNLLLoss`` fitted by ``pl.Trainer`` to convergence
    (``tolerance`` 1e-4, at most 50 epochs of 20 L-BFGS iterations) for each C of
    ``--crf-c-grid``; the C with the best dev token accuracy is kept."""
    from structssl.losses import CRFNLLLoss
    from structssl.training import SupervisedModule

    dm, sets = citations_data(n_labeled, partition, 0, args)
    best: dict[str, Any] = {}
    for c in args.crf_c_grid:  # one read of the data; each C from the same seeded start
        pl.seed_everything(partition, verbose=False)
        module = SupervisedModule(
            LinearChain(dm.num_labels),
            LinearChainScorer(dm.num_labels, num_features=dm.num_features, init_std=args.init_std),
            CRFNLLLoss(), C=c, optimizer="lbfgs", lbfgs_max_iter=20, tolerance=1e-4,
        )
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _trainer([], 50).fit(module, datamodule=dm)
        wall = time.perf_counter() - start
        scores = evaluate(module, sets, "sequence")  # type: ignore[arg-type]
        if not best or scores["dev_token_accuracy"] > best["dev"]:
            best = {"crf": scores["test_token_accuracy"], "dev": scores["dev_token_accuracy"], "C": c,
                    "wall_s": wall, "epochs": int(module.current_epoch) + 1}
    return best


def run_citations_codl(n_labeled: int, partition: int, args: argparse.Namespace) -> dict[str, Any]:
    """The paper's CODL (I) column (quoted there from Dhillon et al. 2012) run here: a
    :class:`~structssl.training.codl.CoDLModule` with the settings and constraints of
    ``configs/codl_citations.yaml`` (its supervised epoch, then its rounds) on the same labeled
    and unlabeled citations and features as SSVM-LS, fitted by ``pl.Trainer``; test token
    accuracy decoded with the constraint-guided search ("I") and with the plain argmax."""
    from structssl.training.codl import CoDLModule

    dm, sets = citations_data(n_labeled, partition, args.num_unlabeled, args)
    settings = config_model_args("codl_citations.yaml")
    rounds = config_rounds("codl_citations.yaml")
    module = CoDLModule(
        LinearChain(dm.num_labels),
        LinearChainScorer(dm.num_labels, num_features=dm.num_features, init_std=args.init_std),
        settings["constraints"], C=settings["C"], gamma=settings["gamma"],
        penalty_scale=settings["penalty_scale"], search_k=settings["search_k"],
        supervised_epochs=settings["supervised_epochs"], lbfgs_max_iter=settings["lbfgs_max_iter"],
    )
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _trainer([], settings["supervised_epochs"] + rounds).fit(module, datamodule=dm)
    wall = time.perf_counter() - start
    out = {"wall_s": wall, "rounds": rounds,
           "switches": [h["switches"] for h in module.history]}
    for decoded, name in ((True, "codl"), (False, "codl-no-inference-constraints")):
        module.constrained_decoding = decoded
        out[name] = evaluate(module, sets, "sequence")["test_token_accuracy"]  # type: ignore[arg-type]
    return out


def run_citations_diagnostic(n_labeled: int, partition: int, args: argparse.Namespace) -> dict[str, Any]:
    """The diagnostic of the module docstring on one partition: the supervised model's test
    labels rewritten by label switching (per Cu) and by an exact Viterbi decoding with a penalty
    on label changes off punctuation (per penalty), scored against the gold labels."""
    dm, sets = citations_data(n_labeled, partition, args.num_unlabeled, args)
    module = LabelSwitchingModule(
        LinearChain(dm.num_labels),
        LinearChainScorer(dm.num_labels, num_features=dm.num_features, init_std=args.init_std),
        constraints=citations_constraints(args), C=args.C, supervised_epochs=args.supervised_epochs,
        lbfgs_max_iter=args.lbfgs_iter, seed=partition,
    )
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _trainer([], args.supervised_epochs).fit(module, datamodule=dm)
    module.eval()
    batch, constraints = sets["test"], citations_constraints(args).bind(dm.label_names)
    lengths, tokens, gold = batch["lengths"], batch["tokens"], batch["labels"]
    with torch.no_grad():
        potentials = module.decode_potentials(batch)
        labels = module.structure.argmax(potentials, lengths)[0]  # the module's decoding
    mask = torch.arange(gold.shape[1], device=gold.device)[None] < lengths[:, None]

    def accuracy(y: torch.Tensor) -> float:
        return 100.0 * float(((y == gold) & mask).sum() / mask.sum())

    def shares(y: torch.Tensor) -> dict[str, float]:  # the corpus constraints' proportions
        out = {}
        for con in constraints.select(level="corpus"):
            total = con.counts(y, lengths, tokens=tokens).sum(0)
            out[con.name] = round(float(total[0] / total[1].clamp_min(1)), 4)
        return out

    out: dict[str, Any] = {"sup": accuracy(labels), "shares_model": shares(labels), "shares_gold": shares(gold)}
    for cu in args.diagnostic_cu:
        res = label_switching(module.structure, potentials, labels, lengths, constraints, tokens=tokens,
                              cu=cu, max_passes=args.diagnostic_passes,
                              generator=torch.Generator().manual_seed(partition))
        out[f"switching/Cu={cu:g}"] = accuracy(res.labels)
        out[f"switches/Cu={cu:g}"] = int(res.switches)
    for penalty in args.diagnostic_penalties:  # the guided start's decoding (guide=...)
        module.guide = ConstraintSet([PunctuationTransitions(weight=penalty)]).bind(dm.label_names)
        with torch.no_grad():
            out[f"penalised-viterbi/penalty={penalty:g}"] = accuracy(module.start_labels(potentials, batch))
    out["wall_s"] = time.perf_counter() - start
    return out


def diagnostic_records(n_labeled: int, runs: list[dict[str, Any]], extra: dict[str, Any]) -> list[dict[str, Any]]:
    task, out = f"citations/N={n_labeled}", []
    keys = ["sup"] + [k for k in runs[0] if k.startswith(("switching/", "penalised-viterbi/"))]
    for key in keys:
        vals = [r[key] for r in runs]
        gains = [v - r["sup"] for v, r in zip(vals, runs)]
        mean, std = mean_std(vals)
        more = {} if key == "sup" else {
            "gain_over_sup": round(statistics.fmean(gains), 4),
            **({"switches": [r["switches/" + key.split("/")[1]] for r in runs]} if key.startswith("switching/") else {}),
        }
        out.append(record(
            BENCH, task, f"structssl:{key}", "test_token_accuracy", mean, "%", True, len(runs),
            std=round(std, 4), per_partition=[round(v, 2) for v in vals], side_experiment=True,
            shares_model=[r["shares_model"] for r in runs], shares_gold=[r["shares_gold"] for r in runs],
            **more, **extra,
        ))
    return out


def codl_records(n_labeled: int, runs: list[dict[str, Any]], extra: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for method in ("codl", "codl-no-inference-constraints"):
        vals = [r[method] for r in runs]
        mean, std = mean_std(vals)
        paper = ({"paper_value": PAPER_CITATIONS["codl"][n_labeled],
                  "paper_source": "seed 003 Table 2 (CODL (I), from Dhillon et al. 2012)"}
                 if method == "codl" else {})
        out.append(record(
            BENCH, f"citations/N={n_labeled}", f"structssl:{method}", "test_token_accuracy", mean, "%",
            True, len(runs), std=round(std, 4), per_partition=[round(v, 2) for v in vals],
            fit_wall_s=[round(r["wall_s"], 1) for r in runs], rounds=runs[0]["rounds"],
            switches_per_round=[r["switches"] for r in runs], **paper, **extra,
        ))
    return out


def crf_records(n_labeled: int, runs: list[dict[str, Any]], extra: dict[str, Any]) -> list[dict[str, Any]]:
    vals = [r["crf"] for r in runs]
    mean, std = mean_std(vals)
    return [record(
        BENCH, f"citations/N={n_labeled}", "structssl:crf", "test_token_accuracy", mean, "%", True,
        len(runs), std=round(std, 4), per_partition=[round(v, 2) for v in vals],
        chosen_C=[r["C"] for r in runs], fit_wall_s=[round(r["wall_s"], 1) for r in runs],
        paper_value=PAPER_CITATIONS["baseline-crf"][n_labeled],
        paper_source="seed 003 Table 2 (baseline-crf)", **extra,
    )]


def guided_records(n_labeled: int, runs: list[dict[str, Any]], extra: dict[str, Any]) -> list[dict[str, Any]]:
    """Records of SSVM-LS runs with a guided start (``--guide-penalty``): a side experiment,
    methods ``ssvm-ls-guided...`` without a paper value, and no ``sup`` row (the same
    supervised models as the main rows); each with its gain over them."""
    out = []
    for method in ("ssvm-ls", "ssvm-ls-paper-selection", "ssvm-ls-final"):
        vals = [r[method] for r in runs]
        mean, std = mean_std(vals)
        out.append(record(
            BENCH, f"citations/N={n_labeled}", "structssl:" + method.replace("ssvm-ls", "ssvm-ls-guided"),
            "test_token_accuracy", mean, "%", True, len(runs), std=round(std, 4),
            per_partition=[round(v, 2) for v in vals], sup_per_partition=[round(r["sup"], 2) for r in runs],
            gain_over_sup=round(statistics.fmean(v - r["sup"] for v, r in zip(vals, runs)), 4),
            side_experiment=True, **extra,
        ))
    return out


def citations_records(n_labeled: int, runs: list[dict[str, Any]], extra: dict[str, Any]) -> list[dict[str, Any]]:
    if extra.get("guide_penalty") is not None:
        return guided_records(n_labeled, runs, extra)
    task = f"citations/N={n_labeled}"
    out = []
    for method in ("sup", "ssvm-ls", "ssvm-ls-paper-selection", "ssvm-ls-final"):
        vals = [r[method] for r in runs]
        mean, std = mean_std(vals)
        paper = PAPER_CITATIONS.get(OURS_VS_PAPER.get(method, ""), {}).get(n_labeled)
        out.append(record(
            BENCH, task, f"structssl:{method}", "test_token_accuracy", mean, "%", True, len(runs),
            std=round(std, 4), per_partition=[round(v, 2) for v in vals],
            **({"paper_value": paper, "paper_source": f"seed 003 Table 2 ({OURS_VS_PAPER[method]})"} if paper else {}),
            **extra,
        ))
    for name, col in PAPER_CITATIONS.items():
        out.append(record(BENCH, task, f"paper:{name}", "test_token_accuracy", col[n_labeled], "%", True, 5,
                          source="seed 003 Table 2 (quoted, not run here)"))
    out.append(record(BENCH, task, "structssl:ssvm-ls", "selected_Cu_over_C",
                      statistics.fmean(r["selected_Cu"] for r in runs) / extra["C"], "", True, len(runs),
                      per_partition=[r["selected_Cu"] / extra["C"] for r in runs]))
    out += _time_records(task, runs, extra)
    return out


def _time_records(task: str, runs: list[dict[str, Any]], extra: dict[str, Any]) -> list[dict[str, Any]]:
    step_times = [t for r in runs for t in r["step_times"]]
    alt_times = [h["seconds"] for r in runs for h in r["history"][extra["supervised_epochs"]:]]
    rows = [
        ("structssl:sup", "train_time", [r["sup_time"] for r in runs]),
        ("structssl:ssvm-ls", "time_per_annealing_step", step_times),
        ("structssl:ssvm-ls", "time_per_alternation", alt_times),
        ("structssl:ssvm-ls", "train_time", [r["sup_time"] + sum(r["step_times"]) for r in runs]),
        ("structssl:ssvm-ls", "fit_wall_time", [r["wall_s"] for r in runs]),
    ]
    out = []
    for method, metric, vals in rows:
        if vals:
            mean, std = mean_std(vals)
            out.append(record(BENCH, task, method, metric, mean, "s", False, len(vals), std=round(std, 4), **extra))
    out.append(record(BENCH, task, "structssl:ssvm-ls", "alternations",
                      statistics.fmean(r["alternations"] for r in runs), "", False, len(runs),
                      per_run=[r["alternations"] for r in runs]))
    out.append(record(BENCH, task, "structssl:ssvm-ls", "label_switches",
                      statistics.fmean(r["switches"] for r in runs), "", False, len(runs),
                      per_run=[r["switches"] for r in runs]))
    return out


# ---------------------------------------------------------------------------------- parsing
def run_parsing(permutation: int, args: argparse.Namespace) -> dict[str, Any]:
    from structssl.data import GrammarScorer, TreebankDataModule
    from structssl.structures import GrammarCKY

    pl.seed_everything(permutation, verbose=False)
    dm = TreebankDataModule(data_dir=args.data_dir, permutation=permutation, shuffle=False)
    dm.setup("fit")
    unl = [dict(ex, labels=y) for ex, y in zip(dm.splits["unlabeled"], dm.unlabeled_labels)]
    sets = {"test": dm.collate(dm.splits["test"]), "unlabeled": dm.collate(unl)}
    s_ids = [i for i, s in enumerate(dm.symbols) if s in ("S", "@S")]
    lab = dm.collate(dm.splits["labeled"])
    counts = SymbolProportion(s_ids, 0.0).counts(lab["labels"], lab["lengths"]).sum(0)
    target = float(counts[0] / counts[1].clamp_min(1))
    nt = dm.num_symbols
    scorer = GrammarScorer(
        nt, dm.num_words, lexicon=dm.lexicon, allowed_terms=dm.allowed_terms,
        allowed_rules=dm.allowed_rules, allowed_roots=dm.allowed_roots, init_std=args.init_std,
    )
    module = LabelSwitchingModule(
        GrammarCKY(nt), scorer, loss=StructuredHingeLoss(cost="hamming"),
        constraints=[SymbolProportion(s_ids, target, "eq", "internal", args.tree_weight, "S share")],
        C=1.0, supervised_epochs=args.supervised_epochs, num_trials=args.num_trials,
        lbfgs_max_iter=args.tree_lbfgs_iter, seed=permutation, task="tree",
    )
    annealing = LabelSwitchingAnnealing(
        start=args.start, factor=2.0, max_alternations=args.max_alternations, monitor=None,
        restore_best=False,
    )
    epochs = args.supervised_epochs + args.max_alternations * (round(math.log2(1 / args.start)) + 1)
    history, wall = run_module(module, dm, sets, "tree", annealing, epochs)
    sup, last = history[args.supervised_epochs - 1], history[-1]
    out = {"permutation": permutation, "history": history, "wall_s": wall, "S_target": target,
           "sup_time": sum(r["seconds"] for r in history[: args.supervised_epochs]),
           "step_times": [sum(r["seconds"] for r in s) for s in _steps(history, args.supervised_epochs)],
           "alternations": len(history) - args.supervised_epochs,
           "switches": sum(r["switches"] for r in history)}
    for split in ("unlabeled", "test"):
        for metric in ("exact_match", "bracket_f1"):
            out[f"sup/{split}_{metric}"] = sup[f"{split}_{metric}"]
            out[f"ssvm-ls/{split}_{metric}"] = last[f"{split}_{metric}"]
    return out


def parsing_records(runs: list[dict[str, Any]], extra: dict[str, Any]) -> list[dict[str, Any]]:
    task = "parsing/ptb-sample"
    out = []
    for method in ("sup", "ssvm-ls"):
        for split in ("unlabeled", "test"):
            for metric in ("exact_match", "bracket_f1"):
                vals = [r[f"{method}/{split}_{metric}"] for r in runs]
                mean, std = mean_std(vals)
                more: dict[str, Any] = {}
                if metric == "exact_match":
                    more = {"paper_value": PAPER_PARSING[split][0 if method == "sup" else 1],
                            "paper_source": "seed 003 section 4.2 (CESS-CAT, its own data)"}
                out.append(record(BENCH, task, f"structssl:{method}", f"{split}_{metric}", mean, "%", True,
                                  len(runs), std=round(std, 4), per_permutation=[round(v, 2) for v in vals],
                                  **more, **extra))
    out += _time_records(task, runs, extra)
    return out


# ---------------------------------------------------------------------------------- output
def merge(path: Path, head: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """Replace records of the same (task, method, metric) in ``path`` and add the rest."""
    old: dict[str, Any] = {"header": {}, "records": []}
    if path.exists():
        old = json.loads(path.read_text())
    keys = {(r["task"], r["method"], r["metric"]) for r in records}
    kept = [r for r in old["records"] if (r["task"], r["method"], r["metric"]) not in keys]
    merged_head = dict(old.get("header", {}))
    invocations = merged_head.get("invocations", [])
    merged_head.update({k: v for k, v in head.items() if k != "invocations"})
    if not invocations or invocations[-1] != head["invocations"][0]:
        invocations.append(head["invocations"][0])
    merged_head["invocations"] = invocations
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"header": merged_head, "records": kept + records}, indent=1) + "\n")


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="N = 5, 1 partition, 100 unlabeled, 1 permutation")
    parser.add_argument("--full-protocol", action="store_true", help="the paper's sizes (hours on a CPU)")
    parser.add_argument("--tasks", nargs="+", default=["citations", "parsing"],
                        choices=["citations", "parsing", "crf", "codl", "diagnostic"],
                        help="crf: the paper's supervised CRF baseline row on the citations; codl: its "
                             "CODL (I) column, run with configs/codl_citations.yaml; diagnostic: what the "
                             "constraints correct in the supervised model's test labels (none by default)")
    parser.add_argument("--diagnostic-cu", type=float, nargs="+", default=[0.0, 0.125, 1.0],
                        help="unlabeled hinge weights of the diagnostic's label switching")
    parser.add_argument("--diagnostic-penalties", type=float, nargs="+", default=[0.5, 1.0, 2.0, 1e4],
                        help="penalties per label change off punctuation of the diagnostic's Viterbi")
    parser.add_argument("--diagnostic-passes", type=int, default=10,
                        help="label-switching passes of the diagnostic")
    parser.add_argument("--crf-c-grid", type=float, nargs="+", default=[0.1, 1.0, 10.0, 100.0, 1000.0],
                        help="C values of the CRF baseline, chosen on dev")
    parser.add_argument("--labeled", type=int, nargs="+", help="N labeled citations (default 5 20 300)")
    parser.add_argument("--partitions", type=int, help="partitions per N (subset seeds 0..)")
    parser.add_argument("--num-unlabeled", type=int, help="unlabeled citations")
    parser.add_argument("--permutations", type=int, help="treebank permutations (0..)")
    parser.add_argument("--start", type=float, help="first Cu / C of the annealing (doubled up to 1)")
    parser.add_argument("--max-alternations", type=int, help="alternations per Cu at most")
    parser.add_argument("--max-passes", type=int, help="label-switching passes per alternation")
    parser.add_argument("--num-trials", type=int, help="leaf-rule trials per alternation (parsing)")
    parser.add_argument("--C", type=float, default=1.0, help="labeled loss weight (citations)")
    parser.add_argument("--supervised-epochs", type=int, default=1)
    parser.add_argument("--lbfgs-iter", type=int, default=40, help="L-BFGS iterations per supervised step")
    parser.add_argument("--instance-weight", type=float, default=1.0, help="r of the instance constraints")
    parser.add_argument("--corpus-weight", type=float, default=1000.0,
                        help="weight of the corpus proportions (per unit of proportion)")
    parser.add_argument("--guide-penalty", type=float, default=None,
                        help="start Y at the argmax with this penalty per label change off punctuation "
                             "(LabelSwitchingModule(guide=...); a side experiment, not the paper's step 4)")
    parser.add_argument("--tree-weight", type=float, default=200.0, help="weight of the S-share constraint")
    parser.add_argument("--tree-lbfgs-iter", type=int, default=15, help="L-BFGS iterations per step (parsing)")
    parser.add_argument("--init-std", type=float, default=0.01,
                        help="initial weights ~ N(0, std^2) (L-BFGS stalls at the hinge's kink at w = 0)")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--no-plots", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    preset = QUICK if args.quick else (FULL if args.full_protocol else SCALED)
    for key, value in preset.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    mode = "quick" if args.quick else ("full-protocol" if args.full_protocol else "scaled")
    if mode == "full-protocol" and "citations" in args.tasks and args.partitions < 5:
        mode += f", {args.partitions} of 5 partitions"  # the paper's settings on fewer draws
    out = args.out or (Path(tempfile.gettempdir()) / f"{BENCH}_quick.json" if args.quick else RESULTS / f"{BENCH}.json")
    plot_dir = out.parent
    diagnostic_out = args.out or (out.parent / f"{BENCH}_diagnostic{'_quick' if args.quick else ''}.json")
    protocol = (
        f"{mode}: citations inductive, N in {args.labeled}, {args.partitions} of 5 partitions "
        f"(seeded samples of citation_train.300), {args.num_unlabeled} of 1,000 unlabeled, dev 100, "
        f"test 100; rich features; Cu = C * {args.start:g} * 2^k up to C, <= {args.max_alternations} "
        f"alternations per Cu, {args.max_passes} switching pass(es) per alternation, {args.lbfgs_iter} "
        f"L-BFGS iterations per supervised step (SDM in the paper); parsing: PTB sample, "
        f"{args.permutations} of 5 permutations, 92 sentences 5/65/22, {args.num_trials} leaf-rule trials "
        f"per alternation, {args.tree_lbfgs_iter} L-BFGS iterations per step, Hamming-cost hinge (0/1 for "
        "the reported accuracy)"
    )
    head = header(torch.device("cpu"), mode, protocol=protocol,
                  invocations=[{"argv": sys.argv[1:] if argv is None else argv, "started": time.strftime("%H:%M:%S")}])
    extra_common = {"C": args.C, "supervised_epochs": args.supervised_epochs, "start": args.start,
                    "max_alternations": args.max_alternations, "mode": mode}
    if "parsing" in args.tasks:
        runs = []
        for p in range(args.permutations):
            t0 = time.perf_counter()
            runs.append(run_parsing(p, args))
            r = runs[-1]
            print(f"parsing permutation {p}: unlabeled {r['sup/unlabeled_exact_match']:.1f} -> "
                  f"{r['ssvm-ls/unlabeled_exact_match']:.1f}, test {r['sup/test_exact_match']:.1f} -> "
                  f"{r['ssvm-ls/test_exact_match']:.1f} {time.perf_counter() - t0:.0f}s", flush=True)
            extra = dict(extra_common, num_trials=args.num_trials, tree_weight=args.tree_weight,
                         lbfgs_iter=args.tree_lbfgs_iter)
            merge(out, head, parsing_records(runs, extra))
            if not args.no_plots and p == 0:
                _plot("parsing", {"PTB sample, permutation 0": r["history"]}, plot_dir, args.quick)
    if "citations" in args.tasks:
        all_runs: dict[int, list[dict[str, Any]]] = {n: [] for n in args.labeled}
        for p in range(args.partitions):  # partitions outermost: a cut-off run has every N
            for n in args.labeled:
                runs = all_runs[n]
                t0 = time.perf_counter()
                runs.append(run_citations(n, p, args))
                r = runs[-1]
                print(f"citations N={n} partition {p}: sup {r['sup']:.2f} ssvm-ls {r['ssvm-ls']:.2f} "
                      f"(paper-sel {r['ssvm-ls-paper-selection']:.2f}, final {r['ssvm-ls-final']:.2f}, "
                      f"Cu {r['selected_Cu']:g}) {time.perf_counter() - t0:.0f}s", flush=True)
                extra = dict(extra_common, num_unlabeled=args.num_unlabeled, max_passes=args.max_passes,
                             corpus_weight=args.corpus_weight, instance_weight=args.instance_weight,
                             lbfgs_iter=args.lbfgs_iter,
                             **({} if args.guide_penalty is None else {"guide_penalty": args.guide_penalty}))
                merge(out, head, citations_records(n, runs, extra))
                if not args.no_plots and p == 0:
                    guided = "" if args.guide_penalty is None else "_guided"
                    _plot(f"citations_N{n}{guided}", {f"citations N={n}, partition 0{guided.replace('_', ', ')}": r["history"]},
                          plot_dir, args.quick)
    # the paper's baseline columns run here: per task its runner, records and a summary line
    baselines = {
        "crf": (run_citations_crf, crf_records, {"mode": mode, "crf_c_grid": args.crf_c_grid},
                lambda r: f"crf {r['crf']:.2f} (C {r['C']:g}, dev {r['dev']:.2f}, {r['epochs']} epochs)"),
        "codl": (run_citations_codl, codl_records, {"mode": mode, "num_unlabeled": args.num_unlabeled},
                 lambda r: f"codl {r['codl']:.2f} (no I {r['codl-no-inference-constraints']:.2f}, "
                           f"switches {r['switches']})"),
        "diagnostic": (run_citations_diagnostic, diagnostic_records,
                       {"mode": mode, "num_unlabeled": args.num_unlabeled, "C": args.C,
                        "instance_weight": args.instance_weight, "corpus_weight": args.corpus_weight,
                        "passes": args.diagnostic_passes},
                       lambda r: f"sup {r['sup']:.2f}, " + ", ".join(
                           f"{k} {v:.2f}" for k, v in r.items() if k.startswith(("switching/", "penalised")))),
    }
    for task in [t for t in baselines if t in args.tasks]:
        run, records, extra, summary = baselines[task]
        task_runs: dict[int, list[dict[str, Any]]] = {n: [] for n in args.labeled}
        for p in range(args.partitions):
            for n in args.labeled:
                task_runs[n].append(run(n, p, args))
                r = task_runs[n][-1]
                print(f"citations N={n} partition {p}: {summary(r)} {r['wall_s']:.0f}s", flush=True)
                merge(diagnostic_out if task == "diagnostic" else out, head, records(n, task_runs[n], extra))
    print(f"results: {out}")


def _plot(name: str, histories: dict[str, list[dict[str, Any]]], plot_dir: Path, quick: bool) -> None:
    suffix = "_quick" if quick else ""
    paths = plot_label_switching(histories, str(plot_dir / f"{BENCH}_{name}{suffix}"), title=name)
    print("plots:", ", ".join(paths), flush=True)


if __name__ == "__main__":
    main()
