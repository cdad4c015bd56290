"""Semi-supervised experiments of the thesis's chapter 7: nabla-SVM, nabla-TSVM, nabla-coSVM.

Experiments (seed 001 ch. 7; the thesis's numbers are in ``shared/notes/thesis-digest.md``):

* ``galaxy``: the thesis's synthetic HMM (7.4.3): 2 states, uniform start, 10% switching,
  100 sequences of length 20, each state emitting 2-D points of one arm of a two-arm spiral
  (``structssl.data.synthetic``; the original galaxy point set is not published). Token error
  of nabla-SVM vs nabla-TSVM (Hamming cost) on the sequences that are not labeled (they are
  the unlabeled set and the evaluation set, the thesis's transductive protocol), 2..20 labeled
  sequences, ``GALAXY_DRAWS`` draws (thesis: 20). The thesis's RBF kernel (sigma 0.35) is
  approximated by random Fourier features (``GALAXY_FEATURES`` of them) feeding the linear
  chain scorer. nabla-TSVM is run with C_u = 1 and C_u = 0.1 (the thesis tunes C_u by
  resampling; with C_u = 1 the unlabeled term weighs C_u m / n = 49 times the labeled one at
  n = 2).
* ``conll``: CoNLL-2002 Spanish NER, the 3,144 training sentences of 10..40 tokens (the thesis's
  "3,100 sentences of 10-40 tokens"), 10 labeled sentences (every entity type present, drawn
  without replacement) plus 0..2000 unlabeled ones, tested on esp.testb: token error and
  entity span F1 of nabla-SVM, nabla-TSVM with Hamming and 0/1 cost (Fig. 7.6, window of 3
  tokens) and nabla-TSVM vs nabla-coSVM without the window (Fig. 7.7; views: token identity /
  surface clues). Plus full supervised training on esp.train (nabla-SVM and our CRF), span F1
  on esp.testb, next to sklearn-crfsuite trained on the same feature strings in the same run.
* ``coil``: the SSL-book COIL splits (``COIL_SPLITS`` of the 12 per size), nabla-SVM and
  nabla-TSVM (0/1 cost, ``MultiClass(6)``, smax over all 5 competitors) at 10 and 100 labeled
  points, transductive error on the unlabeled points, with a linear scorer on z-scored pixels
  and with centred random Fourier features (RBF kernel, median-distance bandwidth).
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

Every scorer starts from N(0, 0.01^2) weights (``init_scorer``): at w = 0 all outputs tie and
the objective is not differentiable, which stalls L-BFGS with 0/1 cost. The protocol is scaled
for a shared 2-core CPU (``PROTOCOL``, written to the JSON header); the results JSON is
rewritten after every record, so a cut-off run keeps its finished cells.

Usage: python benchmarks/bench_ssl.py [--quick] [--only galaxy,coil,conll,supervised,time]
       [--out PATH]
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
from structssl.training import (  # noqa: E402
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


INIT_STD = 0.01


def init_scorer(module: StructuredModule, seed: int, std: float = INIT_STD) -> None:
    """Scorer weights ~ N(0, std^2) (seeded). At w = 0 every output ties, the single
    cost-augmented runner-up (k = 1) is an arbitrary one and the objective is not
    differentiable there: with 0/1 cost L-BFGS's first step then increases the objective and
    training stalls at w = 0 (seen on CoNLL with 0/1 cost and on COIL with RFF features)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.scorer.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * std)


def fit(module: StructuredModule, labeled: Batch, unlabeled: Optional[Batch], iters: int,
        ramp_steps: int = 5, rho_anneal: bool = False, first_iters: Optional[int] = None,
        seed: int = 0) -> int:
    """Train ``module`` by staged full-batch L-BFGS from a small random start; returns the
    L-BFGS iterations."""
    init_scorer(module, seed)
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
              transductive: bool, task: str = "sequence", tags: Any = None,
              Cu: float = 1.0) -> StructuredModule:
    chain = LinearChain(num_labels)
    svm = NablaSVMLoss(epsilon=EPSILON, rho=RHO, cost=cost)
    if transductive:
        return TransductiveModule(chain, scorer, svm, NablaTSVMLoss(tau=TAU, rho=RHO, cost=cost),
                                  C=C, Cu=Cu, num_labeled=n, num_unlabeled=m, task=task,
                                  tags=tags)
    return SupervisedModule(chain, scorer, svm, C=C, num_labeled=n, task=task, tags=tags)


# =============================================================================== galaxy
GALAXY_FEATURES = 100
GALAXY_SIGMA = 0.35
GALAXY_SIZES = [2, 5, 10, 20]  # scaled: the thesis's x-axis is not stated
GALAXY_DRAWS = 5  # scaled: the thesis averages 20 draws


GALAXY_METHODS = (("nabla-SVM", 0.0), ("nabla-TSVM", 1.0), ("nabla-TSVM(Cu=0.1)", 0.1))


def run_galaxy(quick: bool, records: list[dict[str, Any]], plots: dict[str, Any]) -> None:
    from structssl.data.synthetic import hmm_sequences
    from structssl.data import split_pool
    from structssl.scorers import LinearChainScorer

    sizes = [2, 5, 10] if quick else GALAXY_SIZES
    draws = 3 if quick else GALAXY_DRAWS
    iters = 20 if quick else 30
    curves: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in GALAXY_METHODS}
    for n in sizes:
        errors: dict[str, list[float]] = {name: [] for name, _ in GALAXY_METHODS}
        for draw in range(draws):
            data = hmm_sequences(100, 20, 2, 0.1, "galaxy", seed=1000 + draw)
            phi = rff(2, GALAXY_FEATURES, GALAXY_SIGMA, seed=draw)
            feats = phi(data.inputs)
            lab, rest = split_pool(100, num_labeled=n, seed=draw)
            L = {"inputs": feats[lab], "labels": data.labels[lab], "lengths": data.lengths[lab]}
            U = {"inputs": feats[rest], "lengths": data.lengths[rest]}
            gold = data.labels[rest]
            for name, cu in GALAXY_METHODS:
                transductive = cu > 0
                scorer = LinearChainScorer(2, input_dim=GALAXY_FEATURES)
                module = chain_svm(2, scorer, "hamming", n, len(rest), transductive,
                                   Cu=cu if transductive else 1.0)
                fit(module, L, U if transductive else None, iters, seed=draw)
                pred = decode(module, U)
                errors[name].append(100.0 * float((pred != gold).float().mean()))
        base = errors["nabla-SVM"]
        for name, values in errors.items():
            mean, std = mean_std(values)
            curves[name].append((mean, std / math.sqrt(len(values))))
            extra: dict[str, Any] = {}
            if name != "nabla-SVM":
                diffs = [v - b for v, b in zip(values, base)]
                extra.update(wins=sum(d < 0 for d in diffs), losses=sum(d > 0 for d in diffs),
                             paired_diff_mean=round(statistics.fmean(diffs), 4))
            records.append(record(
                BENCH, f"galaxy/labeled={n}", f"structssl:{name}", "token_error", mean, "%",
                False, len(values), std=round(std, 4), per_draw=[round(v, 2) for v in values],
                note="transductive error on the 100 - n sequences not labeled; RFF "
                     f"({GALAXY_FEATURES}) approximation of the RBF kernel sigma 0.35",
                **extra,
            ))
            print(f"galaxy n={n:2d} {name:18s} error {mean:5.2f} +- {std:4.2f} ({len(values)})",
                  flush=True)
        plots["galaxy"] = (sizes[: len(curves["nabla-SVM"])], curves)


# =============================================================================== CoNLL
CONLL_TYPES = ("LOC", "MISC", "ORG", "PER")


class CoNLLPool:
    """esp.train sentences of 10..40 tokens with features (one or two views), esp.testb."""

    def __init__(self, window: int, two_view: bool, max_test: Optional[int]) -> None:
        from structssl.data import CoNLLDataModule

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


def _conll_module(pool: CoNLLPool, method: str, n: int, m: int,
                  Cu: float = 1.0) -> StructuredModule:
    from structssl.scorers import LinearChainScorer, TwoViewScorer

    tags = pool.tags
    if method == "nabla-coSVM":
        fa, fb = pool.view_num_features
        scorer = TwoViewScorer(LinearChainScorer(9, num_features=fa),
                               LinearChainScorer(9, num_features=fb))
        return CoTrainingModule(LinearChain(9), scorer,
                                NablaCoSVMLoss(epsilon=EPSILON, rho=RHO, cost="hamming"),
                                C=C, Cu=Cu, num_labeled=n, num_unlabeled=max(m, 1),
                                task="bio", tags=tags)
    scorer = LinearChainScorer(9, num_features=pool.num_features)
    cost = "zero_one" if method.endswith("0/1") else "hamming"
    return chain_svm(9, scorer, cost, n, max(m, 1), method.startswith("nabla-TSVM"), "bio", tags,
                     Cu=Cu)


CONLL_UNLABELED = [0, 500]  # scaled: the thesis goes to 2000 (Figs. 7.6 / 7.7)
CONLL_DRAWS = 2  # scaled: the thesis averages 100 draws
CONLL_ITERS = (100, 10, 3)  # L-BFGS iterations: supervised start / per C_u stage; K


def run_conll(quick: bool, records: list[dict[str, Any]], plots: dict[str, Any],
              Cu: float = 1.0, figures: Sequence[str] = ("fig7.6", "fig7.7")) -> None:
    """CoNLL-2002 Spanish with 10 labeled sentences (Figs. 7.6 / 7.7); ``Cu`` is the final C_u
    of the semi-supervised methods (method names get a ``(Cu=...)`` suffix when it is not 1)."""
    n = 10
    unlabeled = [0, 100] if quick else CONLL_UNLABELED
    draws = 1 if quick else CONLL_DRAWS
    first, iters, ramp = (15, 5, 2) if quick else CONLL_ITERS
    max_test = 300 if quick else None
    settings = [
        ("fig7.6", 1, False, ["nabla-SVM", "nabla-TSVM_H", "nabla-TSVM_0/1"]),
        ("fig7.7", 0, True, ["nabla-SVM", "nabla-TSVM_H", "nabla-coSVM"]),
    ]
    suffix = "" if Cu == 1.0 else f"(Cu={Cu:g})"
    for fig, window, two_view, methods in settings:
        if fig not in figures:
            continue
        t0 = time.perf_counter()
        pool = CoNLLPool(window, two_view, max_test)
        print(f"conll {fig}: pool {len(pool.pool)} sentences, {pool.num_features} features, "
              f"views {pool.view_num_features}, test {pool.test['inputs'].shape[0]} "
              f"({time.perf_counter() - t0:.1f}s)", flush=True)
        results: dict[tuple[str, int], dict[str, list[float]]] = {}
        for m in unlabeled:
            for method in methods:
                if method == "nabla-SVM" and m > 0:  # the supervised model ignores unlabeled
                    results[method, m] = results[method, 0]
                    continue
                errs, f1s, secs = [], [], []
                for draw in range(draws):
                    L, U, _ = pool.draw(n, m, seed=draw)
                    module = _conll_module(pool, method, n, m, Cu=Cu)
                    start = time.perf_counter()
                    fit(module, L, U, iters, ramp_steps=ramp, first_iters=first, seed=draw)
                    secs.append(time.perf_counter() - start)
                    err, f1 = conll_scores(module, pool.test, pool.tags)
                    errs.append(err)
                    f1s.append(f1)
                results[method, m] = r = {"err": errs, "f1": f1s, "s": secs}
                print(f"conll {fig} {method:15s} m={m:4d} error {statistics.fmean(errs):5.2f} "
                      f"F1 {statistics.fmean(f1s):5.2f} ({statistics.fmean(secs):.1f}s/run)",
                      flush=True)
                (em, es), (fm, fs) = mean_std(r["err"]), mean_std(r["f1"])
                task = f"conll2002-esp/{fig}/labeled=10/unlabeled={m}"
                extra = dict(window=window,
                             test="esp.testb" + (f"[:{max_test}]" if max_test else ""),
                             train_seconds=round(statistics.fmean(secs), 1),
                             per_draw_f1=[round(v, 2) for v in f1s])
                label = f"structssl:{method}" + ("" if method == "nabla-SVM" else suffix)
                records.append(record(BENCH, task, label, "token_error", em, "%",
                                      False, len(r["err"]), std=round(es, 4), **extra))
                records.append(record(BENCH, task, label, "span_f1", fm, "%",
                                      True, len(r["f1"]), std=round(fs, 4), **extra))
                done = [mm for mm in unlabeled if (method, mm) in results]
                plots[f"conll_{fig}"] = (done, {
                    meth: [_curve_point(results[meth, mm]) for mm in done]
                    for meth in methods if all((meth, mm) in results for mm in done)})


def _curve_point(r: dict[str, list[float]]) -> tuple[float, float, float, float]:
    (em, es), (fm, fs) = mean_std(r["err"]), mean_std(r["f1"])
    k = math.sqrt(len(r["err"]))
    return em, es / k, fm, fs / k


SUPERVISED_ITERS = 25  # scaled: L-BFGS capped at 25 iterations (not converged)


def run_conll_supervised(quick: bool, records: list[dict[str, Any]]) -> None:
    """Full supervised training on esp.train: nabla-SVM and our CRF vs sklearn-crfsuite."""
    from structssl.data import FeatureExtractor, load_conll2002
    from structssl.data.formats.conll import CONLL2002_LABELS
    from structssl.losses import CRFNLLLoss
    from structssl.metrics import SpanF1
    from structssl.scorers import LinearChainScorer

    train, test = load_conll2002("train"), load_conll2002("test")
    train_seqs = train.sequences[:1000] if quick else train.sequences
    test_seqs = test.sequences[:300] if quick else test.sequences
    iters = 30 if quick else SUPERVISED_ITERS
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

    # the peer first (fast): a cut-off run still has the reference
    try:
        import sklearn_crfsuite
    except ImportError:  # pragma: no cover
        sklearn_crfsuite = None
        print("sklearn-crfsuite missing: peer skipped", flush=True)
    xs = [extractor.strings(s) for s in train_seqs]
    ys = [list(s.labels) for s in train_seqs]
    test_xs = [extractor.strings(s) for s in test_seqs]
    index = {t: i for i, t in enumerate(tags)}
    for cap in (iters, 100) if sklearn_crfsuite is not None else ():
        crf = sklearn_crfsuite.CRF(algorithm="lbfgs", c1=0.0, c2=1.0 / (2 * C),
                                   max_iterations=cap)
        start = time.perf_counter()
        crf.fit(xs, ys)
        secs = time.perf_counter() - start
        f1m = SpanF1(tags)
        for p, s in zip(crf.predict(test_xs), test_seqs):
            f1m.update(torch.tensor([[index[t] for t in p]]),
                       torch.tensor([[index[t] for t in s.labels]]))
        f1 = 100.0 * float(f1m.compute())
        name = f"sklearn-crfsuite(max_iterations={cap})"
        records.append(record(BENCH, task, name, "span_f1", f1, "%", True, 1,
                              train_seconds=round(secs, 1), max_iterations=cap,
                              note="same feature strings, c2 matching our Gaussian prior"))
        print(f"conll supervised {name} span F1 {f1:5.2f} ({secs:.0f}s)", flush=True)

    for name, loss in (("nabla-SVM", NablaSVMLoss(epsilon=EPSILON, rho=RHO)),
                       ("CRF", CRFNLLLoss())):
        scorer = LinearChainScorer(9, num_features=extractor.num_features)
        module = SupervisedModule(LinearChain(9), scorer, loss, C=C, num_labeled=n,
                                  task="bio", tags=tags)
        init_scorer(module, 0)

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


# =============================================================================== COIL
PAPER_COIL = {10: (68.87, 67.50), 100: (25.42, 25.80)}
COIL_SPLITS = 3  # scaled: splits 0..2 of the SSL book's 12 per size
COIL_METHODS = {"nabla-SVM": 0.0, "nabla-TSVM": 1.0, "nabla-TSVM(Cu=0.1)": 0.1}  # name: C_u


def run_coil(quick: bool, records: list[dict[str, Any]]) -> None:
    from structssl.data import CoilDataModule
    from structssl.scorers import MultiClassScorer

    splits = 2 if quick else COIL_SPLITS
    iters = 20 if quick else 30
    for n in (10, 100):
        for features in ("linear", "rff"):
            errors: dict[str, list[float]] = {name: [] for name in COIL_METHODS}
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
                    # centred (mean over the labeled and unlabeled points): the raw features
                    # share a large common component
                    mu = phi(torch.cat([L["inputs"], U["inputs"]])).mean(0)
                    L, U, T = ({**b, "inputs": phi(b["inputs"]) - mu} for b in (L, U, T))
                dim = int(L["inputs"].shape[1])
                m = int(U["inputs"].shape[0])
                for name in errors:
                    # k = 5: the smax runs over all five competing classes (the thesis's
                    # smax over every ybar != y), not only the runner-up
                    svm = NablaSVMLoss(epsilon=EPSILON, rho=RHO, cost="zero_one", k=5)
                    scorer = MultiClassScorer(6, input_dim=dim)
                    cu = COIL_METHODS[name]
                    if cu > 0:
                        module: StructuredModule = TransductiveModule(
                            MultiClass(6), scorer, svm,
                            NablaTSVMLoss(tau=TAU, rho=RHO, cost="zero_one", k=5), C=C, Cu=cu,
                            num_labeled=n, num_unlabeled=m, task="multiclass")
                    else:
                        module = SupervisedModule(MultiClass(6), scorer, svm, C=C, num_labeled=n,
                                                  task="multiclass")
                    fit(module, L, U if cu > 0 else None, iters, seed=split)
                    pred = decode(module, T)
                    errors[name].append(100.0 * float((pred != T["labels"]).float().mean()))
            for name, values in errors.items():
                mean, std = mean_std(values)
                extra: dict[str, Any] = dict(std=round(std, 4), features=features,
                                             per_split=[round(v, 2) for v in values])
                if name == "nabla-TSVM":
                    extra.update(paper_value=PAPER_COIL[n][0], paper_source="seed 001 sec. 7.4.2")
                records.append(record(BENCH, f"coil/labeled={n}/{features}", f"structssl:{name}",
                                      "error", mean, "%", False, len(values), **extra))
                print(f"coil n={n:3d} {features:6s} {name:18s} error {mean:5.2f} +- {std:4.2f}",
                      flush=True)
            for method, value in (("paper:nabla-TSVM", PAPER_COIL[n][0]),
                                  ("paper:TSVM-one-vs-all", PAPER_COIL[n][1])):
                records.append(record(BENCH, f"coil/labeled={n}/{features}", method, "error",
                                      value, "%", False, 12, paper_source="seed 001 sec. 7.4.2",
                                      note="the thesis's number, 12 splits"))


# =============================================================================== time
TIME_SIZES = [10, 25, 50, 100, 200]
TIME_TSVM_SIZES = [10, 25, 50]  # scaled: nabla-TSVM (+5x unlabeled) only up to 50 labeled
TIME_MAX_ITERS = 60  # per stage


def run_time(quick: bool, records: list[dict[str, Any]], plots: dict[str, Any]) -> None:
    sizes = [10, 25] if quick else TIME_SIZES
    tsvm_sizes = [10] if quick else TIME_TSVM_SIZES
    pool = CoNLLPool(1, False, 300)
    curves: dict[str, list[tuple[int, float]]] = {"nabla-SVM": [], "nabla-TSVM": []}
    for n in sizes:
        L, U, _ = pool.draw(n, 5 * n, seed=0)
        for name in curves:
            if name == "nabla-TSVM" and n not in tsvm_sizes:
                continue
            module = _conll_module(pool, "nabla-SVM" if name == "nabla-SVM" else "nabla-TSVM_H",
                                   n, 5 * n)
            start = time.perf_counter()
            its = fit(module, L, U if name == "nabla-TSVM" else None, TIME_MAX_ITERS,
                      ramp_steps=CONLL_ITERS[2])
            secs = time.perf_counter() - start
            curves[name].append((n, secs))
            plots["time"] = curves
            records.append(record(
                BENCH, f"time/conll2002-esp/labeled={n}", f"structssl:{name}", "train_time",
                secs, "s", False, 1, unlabeled=5 * n if name == "nabla-TSVM" else 0,
                lbfgs_iterations=its,
                note="staged L-BFGS, each stage stopped at a relative decrease < 1e-4 over 5 "
                     f"iterations (at most {TIME_MAX_ITERS}); wall clock on a shared 2-core CPU"))
            print(f"time n={n:3d} {name:10s} {secs:6.1f}s ({its} it)", flush=True)


# =============================================================================== plots
def save_plots(plots: dict[str, Any], out_dir: Path, stem: str = "ssl") -> list[str]:
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
        fig.savefig(out_dir / f"{stem}_galaxy.png", dpi=110)
        written.append(f"{stem}_galaxy.png")
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
        name = f"{stem}_conll_{fig_name.replace('.', '_')}.png"
        fig.savefig(out_dir / name, dpi=110)
        written.append(name)
    if "time" in plots:
        curves = plots["time"]
        fig, ax = plt.subplots(figsize=(5, 3.6))
        for name, pts in curves.items():
            label = name + (" (+5x unlabeled)" if name == "nabla-TSVM" else "")
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.set_xlabel("labeled sentences")
        ax.set_ylabel("training time (s)")
        ax.set_title("CoNLL-2002 Spanish, thesis Fig. 7.3 setting")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out_dir / f"{stem}_time.png", dpi=110)
        written.append(f"{stem}_time.png")
    plt.close("all")
    return written


# =============================================================================== main
PROTOCOL = (
    "scaled for a shared 2-core CPU: galaxy {gd} draws (thesis 20), labeled {gs}; CoNLL "
    "10 labeled + {cu} unlabeled (thesis up to 2000), {cd} draws (thesis 100), L-BFGS "
    "{ci[0]} iterations supervised start + {ci[1]} per C_u stage (C_u 2^-{ci[2]}..1); "
    "full supervised esp.train L-BFGS capped at {si} iterations; COIL splits 0..{cs1} of 12; "
    "time: labeled {ts} (nabla-TSVM {tt}), at most {tm} L-BFGS iterations per stage"
).format(gd=GALAXY_DRAWS, gs=GALAXY_SIZES, cu=CONLL_UNLABELED, cd=CONLL_DRAWS, ci=CONLL_ITERS,
         si=SUPERVISED_ITERS, cs1=COIL_SPLITS - 1, ts=TIME_SIZES, tt=TIME_TSVM_SIZES, tm=TIME_MAX_ITERS)


class IncrementalRecords(list):  # type: ignore[type-arg]
    """The result records; every ``append`` rewrites the JSON file (a cut-off run keeps what
    it has measured)."""

    def __init__(self, write: Callable[[list[dict[str, Any]]], None]) -> None:
        super().__init__()
        self._write = write

    def append(self, item: dict[str, Any]) -> None:
        super().append(item)
        self._write(self)


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="about a minute per experiment")
    parser.add_argument("--only", default="galaxy,coil,conll,supervised,time",
                        help="comma-separated subset of galaxy,coil,conll,supervised,time")
    parser.add_argument("--out", type=Path, default=None, help="results JSON path")
    parser.add_argument("--cu", type=float, default=1.0,
                        help="final C_u of the CoNLL semi-supervised methods (default 1)")
    parser.add_argument("--conll-figures", default="fig7.6,fig7.7",
                        help="CoNLL settings to run: fig7.6 and/or fig7.7")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    only = set(args.only.split(","))
    unknown = only - {"galaxy", "conll", "supervised", "coil", "time"}
    if unknown:
        parser.error(f"--only: unknown experiments {sorted(unknown)}")
    plots: dict[str, Any] = {}
    start = time.perf_counter()
    out_dir = (args.out.parent if args.out else RESULTS)
    out_dir.mkdir(parents=True, exist_ok=True)
    finished: list[str] = []
    pngs: list[str] = []

    def write(records: list[dict[str, Any]]) -> Path:
        head = header(
            torch.device("cpu"), "quick" if args.quick else "full",
            protocol="quick smoke run" if args.quick else PROTOCOL,
            conll_Cu=args.cu, conll_figures=args.conll_figures,
            experiments=sorted(only), finished=list(finished),
            complete=len(finished) == len(only),
            wall_seconds=round(time.perf_counter() - start, 1),
            training="procedure modules' objective_terms driven by full-batch torch.optim.LBFGS "
                     "(no pl.Trainer) from N(0, 0.01^2) weights; supervised start, then C_u "
                     "ramp 2^-K..1 (galaxy, COIL: K = 5)",
            hyperparameters=dict(C=C, epsilon=EPSILON, tau=TAU, rho=RHO, init_std=INIT_STD),
            plots=pngs,
        )
        return write_results(BENCH, head, records, args.out)

    records = IncrementalRecords(write)
    runners: list[tuple[str, Callable[[], None]]] = [
        ("galaxy", lambda: run_galaxy(args.quick, records, plots)),
        ("coil", lambda: run_coil(args.quick, records)),
        ("conll", lambda: run_conll(args.quick, records, plots, args.cu,
                                    args.conll_figures.split(","))),
        ("time", lambda: run_time(args.quick, records, plots)),
        ("supervised", lambda: run_conll_supervised(args.quick, records)),
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
                finished.append(name)
                continue
        try:
            run()
        except Exception:  # keep the other experiments' results; the log has the traceback
            import traceback

            traceback.print_exc()
            print(f"{name} FAILED", flush=True)
        else:
            finished.append(name)
        if not args.quick or args.out:
            pngs[:] = save_plots(plots, out_dir, args.out.stem if args.out else BENCH)
        write(records)
    path = write(records)
    print(f"wrote {path} ({len(records)} records, {time.perf_counter() - start:.0f}s)")


if __name__ == "__main__":
    main()
