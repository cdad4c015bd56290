"""Semi-supervised experiments of the thesis's chapter 7: nabla-SVM, nabla-TSVM, nabla-coSVM.

Experiments (seed 001 ch. 7; the thesis's numbers are in ``shared/notes/thesis-digest.md``):

* ``galaxy``: the thesis's synthetic HMM (7.4.3): 2 states, uniform start, 10% switching,
  100 sequences of length 20, each state emitting 2-D points of one arm of a two-arm spiral
  (``structssl.data.synthetic``; the original galaxy point set is not published). Token error
  of nabla-SVM vs nabla-TSVM (Hamming cost) on the sequences that are not labeled (they are
  the unlabeled set and the evaluation set, the thesis's transductive protocol), 2..20 labeled
  sequences, 20 draws. The thesis's RBF kernel (sigma 0.35) is approximated by random
  Fourier features (``GALAXY_FEATURES`` of them) feeding the linear chain scorer.
* ``conll``: CoNLL-2002 Spanish NER, the 3,144 training sentences of 10..40 tokens (the thesis's
  "3,100 sentences of 10-40 tokens"), 10 labeled sentences (every entity type present, drawn
  without replacement) plus 0..2000 unlabeled ones, tested on esp.testb: token error and
  entity span F1 of nabla-SVM, nabla-TSVM with Hamming and 0/1 cost (Fig. 7.6, window of 3
  tokens) and nabla-TSVM vs nabla-coSVM without the window (Fig. 7.7; views: token identity /
  surface clues). Plus full supervised training on esp.train (nabla-SVM and our CRF), span F1
  on esp.testb, next to sklearn-crfsuite trained on the same feature strings in the same run.
* ``coil``: the SSL-book COIL splits (12 per size), nabla-SVM and nabla-TSVM (0/1 cost,
  ``MultiClass(6)``) at 10 and 100 labeled points, transductive error on the unlabeled points,
  with a linear scorer on z-scored pixels and with random Fourier features (RBF kernel).
* ``time``: wall clock of nabla-SVM vs nabla-TSVM with 5x unlabeled examples (Fig. 7.3's
  setting) vs the number of labeled CoNLL sentences, both stopped by the same criterion.

Training: the procedures of :mod:`structssl.training.modules` (``SupervisedModule``,
``TransductiveModule``, ``CoTrainingModule``) supply the objective
(``objective_terms``: ``||w||^2/(2n) + C mean l + C_u (m/n) mean u``) and the annealing state
(``set_current``); this script drives them with full-batch ``torch.optim.LBFGS`` (strong Wolfe)
directly instead of through ``pl.Trainer``: the Trainer adds a data-loader round trip and
per-step logging to every L-BFGS step, which dominates on these small problems. The schedule
is the thesis's: a supervised start (C_u = 0), then C_u ramped geometrically 2^-K .. C_u
(``CuRamp``'s values), each stage ``ITERS_PER_STAGE`` L-BFGS iterations; ``+rho`` variants also
anneal the smax sharpness rho 1 .. 10 (``RhoContinuation``'s values).

Objective scaling: the thesis minimises ``||w||^2 + C sum xi`` (no 1/2, ch. 7.1); the modules
use ``1/2 ||w||^2 + C sum xi`` (divided by n). C = 1 here (the thesis's C = 1, eps = 0.3 and
tau = 0.4, with the regulariser's factor 2 differing).

Usage: python benchmarks/bench_ssl.py [--quick] [--only galaxy,conll,coil,time] [--out PATH]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import RESULTS, header, record, write_results  # noqa: E402

from structssl.losses import NablaCoSVMLoss, NablaSVMLoss, NablaTSVMLoss  # noqa: E402
from structssl.structures import LinearChain, MultiClass  # noqa: E402
from structssl.training.modules import (  # noqa: E402
    CoTrainingModule,
    StructuredModule,
    SupervisedModule,
    TransductiveModule,
)

BENCH = "ssl"
EPSILON, TAU, RHO, C = 0.3, 0.4, 10.0, 1.0
Batch = dict[str, Tensor]


# =============================================================================== training
def lbfgs_run(params: Sequence[nn.Parameter], objective: Callable[[], Tensor], max_iter: int,
              tol: float = 1e-4) -> int:
    """Full-batch L-BFGS on ``objective`` for up to ``max_iter`` iterations; stops early when
    the objective decreases by less than ``tol`` (relative) over 5 iterations. Returns the
    number of iterations run."""
    opt = torch.optim.LBFGS(list(params), lr=1.0, max_iter=5, history_size=10,
                            line_search_fn="strong_wolfe", tolerance_grad=1e-6,
                            tolerance_change=1e-10)

    def closure() -> Tensor:
        opt.zero_grad()
        value = objective()
        value.backward()
        return value

    done, last = 0, math.inf
    while done < max_iter:
        opt.step(closure)
        done += 5
        with torch.no_grad():
            value = float(objective())
        if last - value < tol * max(abs(last), 1e-12) and math.isfinite(last):
            break
        last = value
    return done


def module_objective(module: StructuredModule, labeled: Batch,
                     unlabeled: Optional[Batch]) -> Callable[[], Tensor]:
    batch: dict[str, Any] = {"labeled": labeled}
    if unlabeled is not None:
        batch["unlabeled"] = unlabeled
    return lambda: module.objective_terms(batch).objective


def schedule(transductive: bool, ramp_steps: int, rho_anneal: bool) -> list[dict[str, float]]:
    """The stages: supervised start, then the C_u ramp (and rho continuation)."""
    stages: list[dict[str, float]] = [{"Cu": 0.0, "rho": (1.0 if rho_anneal else RHO)}]
    if transductive:
        for k in range(ramp_steps, -1, -1):
            frac = (ramp_steps - k) / max(ramp_steps, 1)
            rho = RHO ** frac if rho_anneal else RHO  # 1 .. 10 geometric
            stages.append({"Cu": 2.0 ** -k, "rho": rho})
    elif rho_anneal:
        stages += [{"Cu": 0.0, "rho": RHO ** (k / ramp_steps)} for k in range(1, ramp_steps + 1)]
    return stages


def fit(module: StructuredModule, labeled: Batch, unlabeled: Optional[Batch], iters: int,
        ramp_steps: int = 5, rho_anneal: bool = False, first_iters: Optional[int] = None) -> int:
    """Train ``module`` by staged full-batch L-BFGS; returns the L-BFGS iterations."""
    transductive = module.uses_unlabeled and unlabeled is not None
    total = 0
    for i, stage in enumerate(schedule(transductive, ramp_steps, rho_anneal)):
        if module.uses_unlabeled:
            module.set_current("Cu", stage["Cu"] * module.Cu)
        if module._has_rho():
            module.set_current("rho", stage["rho"])
        use_u = unlabeled if (transductive and stage["Cu"] > 0) else None
        n_iter = first_iters if (i == 0 and first_iters is not None) else iters
        total += lbfgs_run(module.scorer.parameters(), module_objective(module, labeled, use_u),
                           n_iter)
    return total


def decode(module: StructuredModule, batch: Batch) -> Tensor:
    with torch.inference_mode():
        return module.decode(batch)


# =============================================================================== helpers
def mean_std(values: Sequence[float]) -> tuple[float, float]:
    if len(values) == 1:
        return float(values[0]), 0.0
    return statistics.fmean(values), statistics.stdev(values)


def pad_batch(examples: list[dict[str, Tensor]]) -> Batch:
    from structssl.data.batch import collate_sequences

    return collate_sequences(examples, sequence_keys=("inputs", "inputs_b", "labels"))


def rff(dim_in: int, num: int, sigma: float, seed: int) -> Callable[[Tensor], Tensor]:
    """Random Fourier features of the RBF kernel exp(-||x - x'||^2 / (2 sigma^2))."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(dim_in, num, generator=g, dtype=torch.float64) / sigma
    b = 2 * math.pi * torch.rand(num, generator=g, dtype=torch.float64)
    scale = math.sqrt(2.0 / num)
    return lambda x: (scale * torch.cos(x.to(torch.float64) @ w + b)).to(torch.float32)


def chain_svm(num_labels: int, scorer: nn.Module, cost: str, n: int, m: int,
              transductive: bool, task: str = "sequence", tags: Any = None) -> StructuredModule:
    chain = LinearChain(num_labels)
    svm = NablaSVMLoss(epsilon=EPSILON, rho=RHO, cost=cost)
    if transductive:
        return TransductiveModule(chain, scorer, svm, NablaTSVMLoss(tau=TAU, rho=RHO, cost=cost),
                                  C=C, Cu=1.0, num_labeled=n, num_unlabeled=m, task=task,
                                  tags=tags)
    return SupervisedModule(chain, scorer, svm, C=C, num_labeled=n, task=task, tags=tags)


# =============================================================================== galaxy
GALAXY_FEATURES = 100
GALAXY_SIGMA = 0.35


def run_galaxy(quick: bool, records: list[dict[str, Any]], plots: dict[str, Any]) -> None:
    from structssl.data.synthetic import hmm_sequences
    from structssl.data.datamodule import split_pool
    from structssl.scorers import LinearChainScorer

    sizes = [2, 5, 10] if quick else [2, 3, 5, 10, 20]
    draws = 3 if quick else 20
    iters = 20 if quick else 40
    curves: dict[str, list[tuple[float, float]]] = {"nabla-SVM": [], "nabla-TSVM": []}
    for n in sizes:
        errors: dict[str, list[float]] = {"nabla-SVM": [], "nabla-TSVM": []}
        for draw in range(draws):
            data = hmm_sequences(100, 20, 2, 0.1, "galaxy", seed=1000 + draw)
            phi = rff(2, GALAXY_FEATURES, GALAXY_SIGMA, seed=draw)
            feats = phi(data.inputs)
            lab, rest = split_pool(100, num_labeled=n, seed=draw)
            L = {"inputs": feats[lab], "labels": data.labels[lab], "lengths": data.lengths[lab]}
            U = {"inputs": feats[rest], "lengths": data.lengths[rest]}
            gold = data.labels[rest]
            for name, transductive in (("nabla-SVM", False), ("nabla-TSVM", True)):
                torch.manual_seed(draw)
                scorer = LinearChainScorer(2, input_dim=GALAXY_FEATURES)
                module = chain_svm(2, scorer, "hamming", n, len(rest), transductive)
                fit(module, L, U if transductive else None, iters)
                pred = decode(module, U)
                errors[name].append(100.0 * float((pred != gold).float().mean()))
        for name, values in errors.items():
            mean, std = mean_std(values)
            curves[name].append((mean, std / math.sqrt(len(values))))
            records.append(record(
                BENCH, f"galaxy/labeled={n}", f"structssl:{name}", "token_error", mean, "%",
                False, len(values), std=round(std, 4),
                note="transductive error on the 100 - n sequences not labeled; RFF "
                     f"({GALAXY_FEATURES}) approximation of the RBF kernel sigma 0.35",
            ))
            print(f"galaxy n={n:2d} {name:11s} error {mean:5.2f} +- {std:4.2f} ({len(values)})",
                  flush=True)
    plots["galaxy"] = (sizes, curves)


# =============================================================================== CoNLL
CONLL_TYPES = ("LOC", "MISC", "ORG", "PER")


class CoNLLPool:
    """esp.train sentences of 10..40 tokens with features (one or two views), esp.testb."""

    def __init__(self, window: int, two_view: bool, max_test: Optional[int]) -> None:
        from structssl.data.datamodule import CoNLLDataModule

        # every training sentence labeled: the feature vocabulary sees the whole file's tokens
        # (labels are never used by the extractor); the draws below pick labeled / unlabeled
        dm = CoNLLDataModule(labeled_fraction=1.0, num_unlabeled=0, window=window,
                             two_view=two_view, max_test=max_test, seed=0)
        dm.setup()
        self.tags = dm.tags
        self.num_features = dm.num_features
        self.view_num_features = dm.view_num_features
        keep = [ex for ex in dm.splits["labeled"] if 10 <= len(ex["labels"]) <= 40]
        self.pool = keep
        self.test = pad_batch(dm.splits["test"])
        self.has = [self._types(ex["labels"]) for ex in keep]

    def _types(self, labels: Tensor) -> frozenset[str]:
        return frozenset(self.tags[i][2:] for i in labels.tolist() if self.tags[i] != "O")

    def draw(self, n: int, m: int, seed: int) -> tuple[Batch, Optional[Batch], list[int]]:
        """n labeled sentences covering every entity type, m unlabeled, without replacement."""
        g = torch.Generator().manual_seed(seed)
        for _ in range(10000):
            perm = torch.randperm(len(self.pool), generator=g).tolist()
            lab = perm[:n]
            if set().union(*(self.has[i] for i in lab)) >= set(CONLL_TYPES):
                break
        else:  # pragma: no cover - with n >= 4 a cover is found quickly
            raise RuntimeError(f"no draw of {n} sentences covers every entity type")
        unl = perm[n : n + m]
        L = pad_batch([self.pool[i] for i in lab])
        U = (pad_batch([{k: v for k, v in self.pool[i].items() if k != "labels"} for i in unl])
             if unl else None)
        return L, U, lab


def conll_scores(module: StructuredModule, test: Batch, tags: Sequence[str]) -> tuple[float, float]:
    from structssl.metrics import SpanF1, TokenAccuracy

    pred = decode(module, test)
    acc, f1 = TokenAccuracy(), SpanF1(tags)
    acc.update(pred, test["labels"], lengths=test["lengths"])
    f1.update(pred, test["labels"], lengths=test["lengths"])
    return 100.0 * (1.0 - float(acc.compute())), 100.0 * float(f1.compute())


def _conll_module(pool: CoNLLPool, method: str, n: int, m: int) -> StructuredModule:
    from structssl.scorers import LinearChainScorer, TwoViewScorer

    tags = pool.tags
    if method == "nabla-coSVM":
        fa, fb = pool.view_num_features
        scorer = TwoViewScorer(LinearChainScorer(9, num_features=fa),
                               LinearChainScorer(9, num_features=fb))
        return CoTrainingModule(LinearChain(9), scorer,
                                NablaCoSVMLoss(epsilon=EPSILON, rho=RHO, cost="hamming"),
                                C=C, Cu=1.0, num_labeled=n, num_unlabeled=max(m, 1),
                                task="bio", tags=tags)
    scorer = LinearChainScorer(9, num_features=pool.num_features)
    cost = "zero_one" if method.endswith("0/1") else "hamming"
    return chain_svm(9, scorer, cost, n, max(m, 1), method.startswith("nabla-TSVM"), "bio", tags)


def run_conll(quick: bool, records: list[dict[str, Any]], plots: dict[str, Any]) -> None:
    n = 10
    unlabeled = [0, 100] if quick else [0, 250, 500, 1000, 2000]
    draws = 1 if quick else 3
    iters = 15 if quick else 30
    max_test = 300 if quick else None
    settings = [
        ("fig7.6", 1, False, ["nabla-SVM", "nabla-TSVM_H", "nabla-TSVM_0/1"]),
        ("fig7.7", 0, True, ["nabla-SVM", "nabla-TSVM_H", "nabla-coSVM"]),
    ]
    for fig, window, two_view, methods in settings:
        t0 = time.perf_counter()
        pool = CoNLLPool(window, two_view, max_test)
        print(f"conll {fig}: pool {len(pool.pool)} sentences, {pool.num_features} features, "
              f"views {pool.view_num_features}, test {pool.test['inputs'].shape[0]} "
              f"({time.perf_counter() - t0:.1f}s)", flush=True)
        curves: dict[str, list[tuple[float, float, float, float]]] = {}
        for method in methods:
            results: dict[int, dict[str, list[float]]] = {}
            for m in unlabeled:
                if method == "nabla-SVM" and m > 0:  # the supervised model ignores unlabeled
                    results[m] = results[0]
                    continue
                errs, f1s, secs = [], [], []
                for draw in range(draws):
                    L, U, _ = pool.draw(n, m, seed=draw)
                    torch.manual_seed(draw)
                    module = _conll_module(pool, method, n, m)
                    start = time.perf_counter()
                    fit(module, L, U, iters)
                    secs.append(time.perf_counter() - start)
                    err, f1 = conll_scores(module, pool.test, pool.tags)
                    errs.append(err)
                    f1s.append(f1)
                results[m] = {"err": errs, "f1": f1s, "s": secs}
                print(f"conll {fig} {method:15s} m={m:4d} error {statistics.fmean(errs):5.2f} "
                      f"F1 {statistics.fmean(f1s):5.2f} ({statistics.fmean(secs):.1f}s/run)",
                      flush=True)
            curves[method] = []
            for m in unlabeled:
                r = results[m]
                (em, es), (fm, fs) = mean_std(r["err"]), mean_std(r["f1"])
                curves[method].append((em, es / math.sqrt(len(r["err"])), fm,
                                       fs / math.sqrt(len(r["f1"]))))
                task = f"conll2002-esp/{fig}/labeled=10/unlabeled={m}"
                extra = dict(window=window, test="esp.testb" + (f"[:{max_test}]" if max_test else ""))
                records.append(record(BENCH, task, f"structssl:{method}", "token_error", em, "%",
                                      False, len(r["err"]), std=round(es, 4), **extra))
                records.append(record(BENCH, task, f"structssl:{method}", "span_f1", fm, "%",
                                      True, len(r["f1"]), std=round(fs, 4), **extra))
        plots[f"conll_{fig}"] = (unlabeled, curves)


def run_conll_supervised(quick: bool, records: list[dict[str, Any]]) -> None:
    """Full supervised training on esp.train: nabla-SVM and our CRF vs sklearn-crfsuite."""
    from structssl.data import FeatureExtractor, load_conll2002
    from structssl.data.conll import CONLL2002_LABELS
    from structssl.losses import CRFNLLLoss
    from structssl.metrics import SpanF1
    from structssl.scorers import LinearChainScorer

    train, test = load_conll2002("train"), load_conll2002("test")
    train_seqs = train.sequences[:1000] if quick else train.sequences
    test_seqs = test.sequences[:300] if quick else test.sequences
    iters = 30 if quick else 100
    extractor = FeatureExtractor(window=1).fit(train_seqs)
    vocab = train.labels
    tags = tuple(CONLL2002_LABELS)
    task = "conll2002-esp/supervised/esp.train->esp.testb" + ("[quick]" if quick else "")

    def encode(seqs: Sequence[Any]) -> list[dict[str, Tensor]]:
        return [{"inputs": extractor.encode(s), "labels": vocab.encode(s.labels)} for s in seqs]

    # length buckets keep the padding small (a few sentences are hundreds of tokens long)
    train_ex = sorted(encode(train_seqs), key=lambda e: len(e["labels"]))
    chunks = [pad_batch(train_ex[i : i + 256]) for i in range(0, len(train_ex), 256)]
    test_b = pad_batch(encode(test_seqs))
    n = len(train_ex)
    print(f"conll supervised: {n} train / {len(test_seqs)} test sentences, "
          f"{extractor.num_features} features", flush=True)

    for name, loss in (("nabla-SVM", NablaSVMLoss(epsilon=EPSILON, rho=RHO)),
                       ("CRF", CRFNLLLoss())):
        torch.manual_seed(0)
        scorer = LinearChainScorer(9, num_features=extractor.num_features)
        module = SupervisedModule(LinearChain(9), scorer, loss, C=C, num_labeled=n,
                                  task="bio", tags=tags)

        def objective() -> Tensor:
            total = module.weight_norm_squared() / (2 * n)
            for b in chunks:
                pot = module.potentials(b)
                value = module.loss(module.structure, pot, b["labels"], b["lengths"])
                total = total + C * value * (b["labels"].shape[0] / n)
            return total

        start = time.perf_counter()
        done = lbfgs_run(module.scorer.parameters(), objective, iters, tol=1e-5)
        secs = time.perf_counter() - start
        f1m = SpanF1(tags)
        f1m.update(decode(module, test_b), test_b["labels"], lengths=test_b["lengths"])
        f1 = 100.0 * float(f1m.compute())
        records.append(record(BENCH, task, f"structssl:{name}", "span_f1", f1, "%", True, 1,
                              train_seconds=round(secs, 1), lbfgs_iterations=done))
        print(f"conll supervised {name:10s} span F1 {f1:5.2f} ({secs:.0f}s, {done} it)",
              flush=True)

    try:
        import sklearn_crfsuite
    except ImportError:  # pragma: no cover
        print("sklearn-crfsuite missing: peer skipped", flush=True)
        return
    xs = [extractor.strings(s) for s in train_seqs]
    ys = [list(s.labels) for s in train_seqs]
    crf = sklearn_crfsuite.CRF(algorithm="lbfgs", c1=0.0, c2=1.0 / (2 * C),
                               max_iterations=iters)
    start = time.perf_counter()
    crf.fit(xs, ys)
    secs = time.perf_counter() - start
    pred = crf.predict([extractor.strings(s) for s in test_seqs])
    f1m = SpanF1(tags)
    index = {t: i for i, t in enumerate(tags)}
    for p, s in zip(pred, test_seqs):
        f1m.update(torch.tensor([[index[t] for t in p]]),
                   torch.tensor([[index[t] for t in s.labels]]))
    f1 = 100.0 * float(f1m.compute())
    records.append(record(BENCH, task, "sklearn-crfsuite", "span_f1", f1, "%", True, 1,
                          train_seconds=round(secs, 1), max_iterations=iters,
                          note="same feature strings, c2 matching our Gaussian prior"))
    print(f"conll supervised sklearn-crfsuite span F1 {f1:5.2f} ({secs:.0f}s)", flush=True)


# =============================================================================== COIL
PAPER_COIL = {10: (68.87, 67.50), 100: (25.42, 25.80)}


def run_coil(quick: bool, records: list[dict[str, Any]]) -> None:
    from structssl.data.coil_module import CoilDataModule
    from structssl.scorers import MultiClassScorer

    splits = 2 if quick else 12
    iters = 20 if quick else 50
    for n in (10, 100):
        for features in ("linear", "rff"):
            errors: dict[str, list[float]] = {"nabla-SVM": [], "nabla-TSVM": []}
            for split in range(splits):
                try:
                    dm = CoilDataModule(num_labeled=n, split=split)  # type: ignore[arg-type]
                    dm.setup()
                except FileNotFoundError as err:
                    print(f"coil skipped: {err}", flush=True)
                    return
                L = dm.collate(dm.splits["labeled"])
                U = dm.collate(dm.splits["unlabeled"])
                T = dm.collate(dm.splits["test"])
                if features == "rff":
                    # RBF kernel with the median pairwise distance as bandwidth
                    sigma = float(torch.cdist(U["inputs"][:300], U["inputs"][:300]).median())
                    phi = rff(241, 1000, sigma, seed=split)
                    L, U, T = ({**b, "inputs": phi(b["inputs"])} for b in (L, U, T))
                dim = int(L["inputs"].shape[1])
                m = int(U["inputs"].shape[0])
                for name in errors:
                    torch.manual_seed(split)
                    svm = NablaSVMLoss(epsilon=EPSILON, rho=RHO, cost="zero_one")
                    scorer = MultiClassScorer(6, input_dim=dim)
                    if name == "nabla-TSVM":
                        module: StructuredModule = TransductiveModule(
                            MultiClass(6), scorer, svm,
                            NablaTSVMLoss(tau=TAU, rho=RHO, cost="zero_one"), C=C, Cu=1.0,
                            num_labeled=n, num_unlabeled=m, task="multiclass")
                    else:
                        module = SupervisedModule(MultiClass(6), scorer, svm, C=C, num_labeled=n,
                                                  task="multiclass")
                    fit(module, L, U if name == "nabla-TSVM" else None, iters)
                    pred = decode(module, T)
                    errors[name].append(100.0 * float((pred != T["labels"]).float().mean()))
            for name, values in errors.items():
                mean, std = mean_std(values)
                extra: dict[str, Any] = dict(std=round(std, 4), features=features)
                if name == "nabla-TSVM":
                    extra.update(paper_value=PAPER_COIL[n][0], paper_source="seed 001 sec. 7.4.2")
                records.append(record(BENCH, f"coil/labeled={n}/{features}", f"structssl:{name}",
                                      "error", mean, "%", False, len(values), **extra))
                print(f"coil n={n:3d} {features:6s} {name:10s} error {mean:5.2f} +- {std:4.2f}",
                      flush=True)
            for method, value in (("paper:nabla-TSVM", PAPER_COIL[n][0]),
                                  ("paper:TSVM-one-vs-all", PAPER_COIL[n][1])):
                records.append(record(BENCH, f"coil/labeled={n}/{features}", method, "error",
                                      value, "%", False, 12, paper_source="seed 001 sec. 7.4.2"))


# =============================================================================== time
def run_time(quick: bool, records: list[dict[str, Any]], plots: dict[str, Any]) -> None:
    sizes = [10, 25, 50] if quick else [10, 25, 50, 100, 200]
    pool = CoNLLPool(1, False, 300)
    curves: dict[str, list[float]] = {"nabla-SVM": [], "nabla-TSVM": []}
    for n in sizes:
        L, U, _ = pool.draw(n, 5 * n, seed=0)
        for name in curves:
            torch.manual_seed(0)
            module = _conll_module(pool, "nabla-SVM" if name == "nabla-SVM" else "nabla-TSVM_H",
                                   n, 5 * n)
            start = time.perf_counter()
            its = fit(module, L, U if name == "nabla-TSVM" else None, 200)
            secs = time.perf_counter() - start
            curves[name].append(secs)
            records.append(record(
                BENCH, f"time/conll2002-esp/labeled={n}", f"structssl:{name}", "train_time",
                secs, "s", False, 1, unlabeled=5 * n if name == "nabla-TSVM" else 0,
                lbfgs_iterations=its,
                note="staged L-BFGS, each stage stopped at a relative decrease < 1e-4 over 5 "
                     "iterations (at most 200)"))
            print(f"time n={n:3d} {name:10s} {secs:6.1f}s ({its} it)", flush=True)
    plots["time"] = (sizes, curves)


# =============================================================================== plots
def save_plots(plots: dict[str, Any], out_dir: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    if "galaxy" in plots:
        sizes, curves = plots["galaxy"]
        fig, ax = plt.subplots(figsize=(5, 3.6))
        for name, pts in curves.items():
            ax.errorbar(sizes, [p[0] for p in pts], yerr=[p[1] for p in pts], marker="o",
                        capsize=3, label=name)
        ax.set_xlabel("labeled sequences")
        ax.set_ylabel("token error (%)")
        ax.set_title("galaxy HMM (RFF ~ RBF), thesis Fig. 7.5 setting")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out_dir / "ssl_galaxy.png", dpi=110)
        written.append("ssl_galaxy.png")
    for fig_name in ("fig7.6", "fig7.7"):
        key = f"conll_{fig_name}"
        if key not in plots:
            continue
        unl, curves = plots[key]
        fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
        for name, pts in curves.items():
            a.errorbar(unl, [p[0] for p in pts], yerr=[p[1] for p in pts], marker="o", capsize=3,
                       label=name)
            b.errorbar(unl, [p[2] for p in pts], yerr=[p[3] for p in pts], marker="o", capsize=3,
                       label=name)
        a.set_ylabel("token error (%)")
        b.set_ylabel("span F1 (%)")
        for ax in (a, b):
            ax.set_xlabel("unlabeled sentences (10 labeled)")
            ax.legend()
        fig.suptitle(f"CoNLL-2002 Spanish, thesis {fig_name.replace('fig', 'Fig. ')} setting")
        fig.tight_layout()
        name = f"ssl_conll_{fig_name.replace('.', '_')}.png"
        fig.savefig(out_dir / name, dpi=110)
        written.append(name)
    if "time" in plots:
        sizes, curves = plots["time"]
        fig, ax = plt.subplots(figsize=(5, 3.6))
        for name, secs in curves.items():
            label = name + (" (+5x unlabeled)" if name == "nabla-TSVM" else "")
            ax.plot(sizes, secs, marker="o", label=label)
        ax.set_xlabel("labeled sentences")
        ax.set_ylabel("training time (s)")
        ax.set_title("CoNLL-2002 Spanish, thesis Fig. 7.3 setting")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out_dir / "ssl_time.png", dpi=110)
        written.append("ssl_time.png")
    plt.close("all")
    return written


# =============================================================================== main
def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="about a minute per experiment")
    parser.add_argument("--only", default="galaxy,conll,supervised,coil,time",
                        help="comma-separated subset of galaxy,conll,supervised,coil,time")
    parser.add_argument("--out", type=Path, default=None, help="results JSON path")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    only = set(args.only.split(","))
    unknown = only - {"galaxy", "conll", "supervised", "coil", "time"}
    if unknown:
        parser.error(f"--only: unknown experiments {sorted(unknown)}")
    records: list[dict[str, Any]] = []
    plots: dict[str, Any] = {}
    start = time.perf_counter()
    runners: list[tuple[str, Callable[[], None]]] = [
        ("galaxy", lambda: run_galaxy(args.quick, records, plots)),
        ("conll", lambda: run_conll(args.quick, records, plots)),
        ("supervised", lambda: run_conll_supervised(args.quick, records)),
        ("coil", lambda: run_coil(args.quick, records)),
        ("time", lambda: run_time(args.quick, records, plots)),
    ]
    for name, run in runners:
        if name not in only:
            continue
        if name in ("conll", "supervised", "time"):
            try:
                from structssl.data.paths import data_file

                data_file("conll2002/esp.train", "CoNLL-2002 Spanish training file")
            except FileNotFoundError as err:
                print(f"{name} skipped: {err}", flush=True)
                continue
        run()
    out_dir = (args.out.parent if args.out else RESULTS)
    out_dir.mkdir(parents=True, exist_ok=True)
    pngs = save_plots(plots, out_dir) if not args.quick or args.out else []
    head = header(
        torch.device("cpu"), "quick" if args.quick else "full",
        experiments=sorted(only), wall_seconds=round(time.perf_counter() - start, 1),
        training="procedure modules' objective_terms driven by full-batch torch.optim.LBFGS "
                 "(no pl.Trainer); supervised start, then C_u ramp 2^-5..1",
        hyperparameters=dict(C=C, epsilon=EPSILON, tau=TAU, rho=RHO),
        plots=pngs,
    )
    path = write_results(BENCH, head, records, args.out)
    print(f"wrote {path} ({len(records)} records, {time.perf_counter() - start:.0f}s)")


if __name__ == "__main__":
    main()
