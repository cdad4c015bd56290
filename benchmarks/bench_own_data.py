"""The README's supervised own-data command on CoNLL-2002 Spanish, beside sklearn-crfsuite.

structssl runs exactly what a user runs: ``structssl fit --config configs/tagger.yaml
--data.train_file esp.train --data.dev_file esp.testa --trainer.default_root_dir RUN_DIR``
(in-process through :func:`structssl.cli.main`), then ``structssl predict --model RUN_DIR
--input esp.testb`` (tags ignored, tokens only) and conlleval span F1 of the written file
against the gold tags. The peer, sklearn-crfsuite, gets the same token features (the strings
of the :class:`~structssl.data.features.FeatureExtractor` that ``configs/tagger.yaml`` uses,
fitted on the same training sentences) and its defaults (L-BFGS, ``c2 = 1``, 100 iterations).
Both are timed for the whole fit (reading and features included), one after the other in one
process, by wall clock and by the process's CPU time (steadier on a shared machine; both run
one thread: structssl ``--num_threads=1``, CRFsuite is single threaded).

    python benchmarks/bench_own_data.py --quick    # 1,000 training sentences, 300 test, 2 epochs
    python benchmarks/bench_own_data.py            # the full files (265k training tokens)
    python benchmarks/bench_own_data.py --repeats 3  # medians of 3 alternating runs each
    python benchmarks/bench_own_data.py --edges    # also the command with edge potentials
    python benchmarks/bench_own_data.py --evaluation  # only the time per objective+gradient
    python benchmarks/bench_own_data.py --converge 1e-5:20 1e-3:10 none --repeats 3

``--converge TOL [TOL ...]`` runs the same command to convergence: with
``--model.init_args.tolerance=TOL``, ``--model.init_args.lbfgs_max_iter=K`` (``TOL:K``; K
defaults to ``--lbfgs-max-iter``, 10: TOL is then CRFsuite's ``delta`` over a ``period`` of 10
iterations; ``none`` runs the config as shipped) and a high epoch cap (``--cap``, default 100
epochs; ``--precision 64-true`` for float64; ``--lbfgs-history H`` for another L-BFGS history,
``--lbfgs-precondition A`` for another preconditioning weight, 0 for plain L-BFGS; method
names carry ``+lbfgs_precondition=A``, or ``+plain-lbfgs`` against a preconditioned config),
and reports the epochs and L-BFGS iterations and
evaluations it ran (the optimiser state in ``last.ckpt``), fit CPU and wall time and test span
F1, beside sklearn-crfsuite with 100 iterations and to its own convergence
(``max_iterations=None``: its defaults ``delta = 1e-5`` over ``period = 10`` iterations and
``epsilon = 1e-5``; its iterations from its training log). The imports of the fit path (torch,
Lightning: about 5 CPU s, paid once by a ``structssl fit`` process) are outside every timed fit
since 2026-11-29 (before, the first structssl run of a process carried them).

``--evaluation`` times one evaluation of the CRF objective and its gradient on the whole
training file, the way the full-batch L-BFGS closure of ``configs/tagger.yaml`` evaluates it
(length-sorted chunks of at most 20k padded positions, backward per chunk), one thread, median
CPU time: at the initial weights over repeats, with the (B, N, C, C) edge potentials and with
factored ones (``LinearChainScorer(factored=True)``, the config's), and over every evaluation
of a 100-iteration L-BFGS run from zero weights with factored potentials (where the weights,
and with them the ranges the chain's dynamic program sees, grow as in a real fit); next to
sklearn-crfsuite's time per L-BFGS iteration (the fit time of 1 + K iterations minus that of 1,
divided by K; CRFsuite is single threaded). The structssl fit runs with one torch thread
(``--threads``), as CRFsuite.

JSON: ``benchmarks/results/own_data[_quick].json``, ``own_data_evaluation[_quick].json``,
``own_data_convergence[_quick].json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    RESULTS,
    crfsuite_features,
    crfsuite_scores,
    crfsuite_tagger,
    git_commit,
    header,
    record,
    write_results,
)

from structssl.data.paths import resolve_data_dir  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _subset(src: Path, dst: Path, count: int) -> Path:
    """The first ``count`` sentences of a column file."""
    out, seen = [], 0
    for line in src.read_text(encoding="utf-8").split("\n"):
        out.append(line)
        if not line.strip():
            seen += 1
            if seen >= count:
                break
    dst.write_text("\n".join(out) + "\n", encoding="utf-8")
    return dst


def _structssl(
    train: Path, dev: Path, test: Path, work: Path, epochs: int | None, threads: int,
    edges: bool = False, extra: tuple[str, ...] = (),
) -> dict[str, Any]:
    from structssl.cli import main
    from structssl.data.tagging import TaggingFormat
    from structssl.predict import Tagger

    work.mkdir(parents=True, exist_ok=True)
    run = work / "RUN_DIR"
    _import_fit_path()
    start, cpu = time.perf_counter(), time.process_time()
    with mock.patch("sys.argv", ["structssl"]):
        main([
            "fit", f"--config={ROOT / 'configs' / 'tagger.yaml'}", f"--data.train_file={train}",
            f"--data.dev_file={dev}", f"--trainer.default_root_dir={run}",
            *([f"--trainer.max_epochs={epochs}"] if epochs else []),
            f"--num_threads={threads}",
            *(["--model.scorer.init_args.factored=false"] if edges else []), *extra,
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false", "--test_after_fit=false",
        ])
    fit_s, fit_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    tokens_only = work / "NEW.txt"
    tokens_only.write_text(
        "\n".join(line.split()[0] if line.strip() else "" for line in
                  test.read_text(encoding="utf-8").split("\n")),
        encoding="utf-8",
    )
    start = time.perf_counter()
    tagger = Tagger.load(run)
    tagger.tag_file(tokens_only, work / "PREDICTIONS.conll")
    predict_s = time.perf_counter() - start
    gold = TaggingFormat.from_state_dict(tagger.format.state_dict()).read_labeled(test)
    return {
        "span_f1": _span_f1(work / "PREDICTIONS.conll", gold, tagger.tags),
        "fit_s": fit_s, "fit_cpu_s": fit_cpu_s, "predict_s": predict_s, **_run_counts(run),
    }


def _import_fit_path() -> None:
    """Import what ``structssl fit`` imports (torch, Lightning, the data modules) before the
    timed fit, so that no run is charged for them (the first structssl run of a process was,
    about 5 CPU s; CRFsuite's import is outside its timing too). A ``structssl fit`` process
    pays them once."""
    import pytorch_lightning.cli  # noqa: F401

    import structssl.data.modules  # noqa: F401


def _config_precondition() -> float | None:
    """``configs/tagger.yaml``'s ``lbfgs_precondition`` (None: plain L-BFGS)."""
    import yaml

    config = yaml.safe_load((ROOT / "configs" / "tagger.yaml").read_text(encoding="utf-8"))
    return config["model"]["init_args"].get("lbfgs_precondition")


def _run_counts(run: Path) -> dict[str, Any]:
    """Epochs, L-BFGS iterations and evaluations of a finished run (``last.ckpt``), and the
    last ``train/relative_decrease`` its CSV log holds."""
    import csv

    ckpt = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    state = ckpt["optimizer_states"][0]["state"].get(0, {})
    out: dict[str, Any] = {
        "epochs": int(ckpt["epoch"]) + 1, "iterations": int(state.get("n_iter", 0)),
        "evaluations": int(state.get("func_evals", 0)),
        "objective": (ckpt.get("structssl") or {}).get("previous_objective"),
    }
    for log in sorted(run.glob("lightning_logs/*/metrics.csv")):
        with log.open() as f:
            rows = [r for r in csv.DictReader(f) if r.get("train/relative_decrease")]
        if rows:
            out["relative_decrease"] = float(rows[-1]["train/relative_decrease"])
            # the test's value at every epoch with a previous one (epochs 1, 2, ...)
            out["relative_decreases"] = [float(f"{float(r['train/relative_decrease']):.3g}")
                                         for r in rows]
    return out


def _span_f1(predictions: Path, gold: list[Any], tags: tuple[str, ...]) -> float:
    """conlleval span F1 of a ``token<TAB>tag`` file against gold BIO sentences."""
    from structssl.metrics import SpanF1

    blocks = [b for b in predictions.read_text(encoding="utf-8").split("\n\n") if b.strip()]
    index = {t: i for i, t in enumerate(tags)}
    metric = SpanF1(tags)
    for block, sent in zip(blocks, gold, strict=True):
        pred = [index[line.split("\t")[1]] for line in block.split("\n")]
        true = [index[t] for t in sent.labels]
        metric.update(torch.tensor([pred]), torch.tensor([true]))
    return float(metric.compute())


def _per_evaluation(
    train: Path, repeats: int, iterations: int, crf_iterations: int
) -> list[dict[str, Any]]:
    """Median CPU seconds of one objective+gradient evaluation (structssl, edge and factored
    potentials at the initial weights, equal values checked, and factored along an L-BFGS run
    of ``iterations`` iterations, where the weights grow) and of one sklearn-crfsuite L-BFGS
    iteration."""
    import sklearn_crfsuite

    from structssl.data.modules.conll import CoNLLDataModule, length_chunks
    from structssl.losses import CRFNLLLoss
    from structssl.scorers import LinearChainScorer
    from structssl.structures import LinearChain
    from structssl.training import SupervisedModule

    torch.set_num_threads(1)
    data = CoNLLDataModule(train_file=str(train))  # configs/tagger.yaml's data, no dev / test
    data.setup("fit")
    sizes = data.model_sizes()
    chunks = [data.collate(c)
              for c in length_chunks(data.splits["labeled"], data.chunk_positions())]
    total = sum(int(c["inputs"].shape[0]) for c in chunks)

    def build(factored: bool, init_std: float = 0.01) -> SupervisedModule:
        torch.manual_seed(0)
        model = SupervisedModule(
            structure=LinearChain(), scorer=LinearChainScorer(factored=factored, init_std=init_std),
            loss=CRFNLLLoss(), C=1.0, optimizer="lbfgs", lbfgs_max_iter=iterations,
        )
        model.adopt_sizes(sizes)
        return model

    def evaluate(model: SupervisedModule) -> float:
        # what SupervisedModule.backward_objective does per closure call, without Lightning
        model.zero_grad(set_to_none=True)
        norm = model.weight_norm_squared() / (2 * total)
        norm.backward()
        value = float(norm.detach())
        for chunk in chunks:
            share = int(chunk["inputs"].shape[0]) / total
            term = model.labeled_term(chunk)
            (share * term).backward()
            value += share * float(term.detach())
        return value

    records, values = [], {}
    task = f"conll2002-esp/{total}-sentences"
    for factored in (False, True):
        model = build(factored)
        values[factored] = evaluate(model)
        times = []
        for _ in range(repeats):
            start = time.process_time()
            evaluate(model)
            times.append(time.process_time() - start)
        method = "structssl:crf-factored" if factored else "structssl:crf-edges"
        records.append(record("own_data_evaluation", task, method, "evaluation_time",
                              statistics.median(times), "s", False, repeats,
                              chunks=len(chunks), objective=round(values[factored], 6),
                              weights="initial, N(0, 0.01^2)"))
    if abs(values[True] - values[False]) > 1e-4 * abs(values[False]):
        raise AssertionError(f"factored and edge objectives differ: {values}")
    # along the L-BFGS run of configs/tagger.yaml's optimiser (from zero weights, as it starts)
    model = build(True, init_std=0.0)
    optimizer = model.configure_optimizers()
    run_times: list[float] = []
    last = [0.0]

    def closure() -> torch.Tensor:
        start = time.process_time()
        last[0] = evaluate(model)
        run_times.append(time.process_time() - start)
        return torch.tensor(last[0])

    optimizer.step(closure)
    done = int(optimizer.state[optimizer.param_groups[0]["params"][0]]["n_iter"])
    records.append(record("own_data_evaluation", task, "structssl:crf-factored",
                          "evaluation_time_lbfgs", statistics.median(run_times), "s", False,
                          len(run_times), chunks=len(chunks), iterations=done,
                          per_iteration=round(sum(run_times) / done, 4),
                          objective=round(last[0], 6),
                          note=f"median over every evaluation of {done} L-BFGS iterations"))
    from structssl.data.tagging import TaggingFormat

    fmt = TaggingFormat()
    sents = fmt.read_labeled(train)
    fmt.fit(sents, sents)
    xs = [crfsuite_features(fmt, s) for s in sents]
    ys = [list(s.labels) for s in sents]

    def fit_cpu(iterations: int) -> float:
        crf = sklearn_crfsuite.CRF(algorithm="lbfgs", c1=0.0, c2=1.0, max_iterations=iterations)
        start = time.process_time()
        crf.fit(xs, ys)
        return time.process_time() - start

    per_iteration = statistics.median(
        (fit_cpu(1 + crf_iterations) - fit_cpu(1)) / crf_iterations for _ in range(3)
    )
    records.append(record("own_data_evaluation", task, "sklearn-crfsuite", "evaluation_time",
                          per_iteration, "s", False, 3, note="per L-BFGS iteration"))
    return records


def _crfsuite(train: Path, test: Path, iterations: int | None) -> dict[str, Any]:
    """sklearn-crfsuite's fit (``iterations=None``: to its own convergence test)."""
    from structssl.data.tagging import TaggingFormat

    start, cpu = time.perf_counter(), time.process_time()
    fmt = TaggingFormat()  # the feature templates of configs/tagger.yaml
    train_s = fmt.read_labeled(train)
    fmt.fit(train_s, train_s)
    crf = crfsuite_tagger(fmt, train_s, c2=1.0, max_iterations=iterations)
    fit_s, fit_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    span_f1 = crfsuite_scores(crf, fmt, fmt.read_labeled(test))["f1"]
    log = crf.training_log_
    return {
        "span_f1": span_f1, "fit_s": fit_s, "fit_cpu_s": fit_cpu_s,
        "iterations": int(log.last_iteration["num"]),
        "evaluations": sum(int(i.get("linesearch_trials", 1)) for i in log.iterations),
        "loss": float(log.last_iteration.get("loss", float("nan"))),
    }


def _convergence(
    train: Path, dev: Path, test: Path, work: Path, specs: list[str], lbfgs_max_iter: int,
    cap: int, repeats: int, threads: int, quick: bool, precision: str | None = None,
    peers: bool = True, lbfgs_history: int | None = None,
    lbfgs_precondition: float | None = None,
) -> list[dict[str, Any]]:
    """``configs/tagger.yaml`` trained to each tolerance (``specs``: ``TOL`` or ``TOL:K``, K
    L-BFGS iterations per epoch, default ``lbfgs_max_iter``; ``none``: the config as shipped),
    beside sklearn-crfsuite at 100 iterations and to its own convergence; medians of
    ``repeats`` alternating runs."""
    peer_iterations = 30 if quick else 100
    runs: dict[str, list[dict[str, Any]]] = {}
    # method names say when L-BFGS is preconditioned (the config's value or the option's)
    # (0: plain L-BFGS whatever the config says)
    shipped = _config_precondition()
    precondition = shipped if lbfgs_precondition is None else lbfgs_precondition
    suffix = (f"+lbfgs_precondition={precondition:g}" if precondition else
              "+plain-lbfgs" if shipped else "")
    override = () if lbfgs_precondition is None else (
        f"--model.init_args.lbfgs_precondition={lbfgs_precondition or 'null'}",)
    settings: dict[str, dict[str, Any]] = {}
    for r in range(repeats):
        for spec in specs:
            if spec == "none":  # the config as shipped, beside them
                method = "structssl:tagger.yaml" + suffix
                settings[method] = {"tolerance": None, "lbfgs_max_iter": "config (20)",
                                    "epochs": "config (5)",
                                    "lbfgs_precondition": precondition or None}
                runs.setdefault(method, []).append(_structssl(
                    train, dev, test, work / f"config-{r}", None, threads, extra=override))
                print(method, runs[method][-1], flush=True)
                continue
            tol_text, _, k_text = spec.partition(":")
            tol, k = float(tol_text), int(k_text) if k_text else lbfgs_max_iter
            method = (f"structssl:tagger.yaml+tolerance={tol:g}+lbfgs_max_iter={k}"
                      + (f"+precision={precision}" if precision else "")
                      + (f"+lbfgs_history={lbfgs_history}" if lbfgs_history else "") + suffix)
            settings[method] = {"tolerance": tol, "lbfgs_max_iter": k, "epoch_cap": cap,
                                "precision": precision or "config (32-true)",
                                "lbfgs_history": lbfgs_history or "config (10)",
                                "lbfgs_precondition": precondition or None}
            extra = (f"--model.init_args.tolerance={tol}", f"--model.init_args.lbfgs_max_iter={k}",
                     *([f"--trainer.precision={precision}"] if precision else []),
                     *([f"--model.init_args.lbfgs_history={lbfgs_history}"] if lbfgs_history else []),
                     *override)
            runs.setdefault(method, []).append(_structssl(
                train, dev, test, work / f"tol{tol:g}-{k}-{r}", cap, threads, extra=extra))
            print(method, runs[method][-1], flush=True)
        peer_runs = ((f"sklearn-crfsuite:{peer_iterations}-iterations", peer_iterations),
                     ("sklearn-crfsuite:converged", None))
        for name, iterations in peer_runs:
            if not peers:
                break
            settings[name] = {"max_iterations": iterations, "c2": 1.0,
                              **({} if iterations else {"delta": 1e-5, "period": 10,
                                                        "epsilon": 1e-5})}
            runs.setdefault(name, []).append(_crfsuite(train, test, iterations))
            print(name, runs[name][-1], flush=True)
    task = "conll2002-esp/" + ("1000-sentences" if quick else "full")
    name = "own_data_convergence" + ("_quick" if quick else "")
    metrics = [("span_f1", "span_f1", "%", True), ("fit_cpu_time", "fit_cpu_s", "s", False),
               ("fit_time", "fit_s", "s", False), ("iterations", "iterations", "count", False),
               ("evaluations", "evaluations", "count", False), ("epochs", "epochs", "count", False)]
    records = []
    for method, results in runs.items():
        for metric, key, unit, higher in metrics:
            values = [x[key] * (100 if metric == "span_f1" else 1) for x in results if key in x]
            if not values:
                continue
            extra_fields: dict[str, Any] = {"runs": [round(v, 3) for v in values],
                                            **settings[method]}
            if metric == "iterations":
                extra_fields.update({k: [x.get(k) for x in results] for k in
                                     ("objective", "relative_decrease", "relative_decreases",
                                      "loss") if k in results[0]})
            extra_fields["commit"] = git_commit()
            records.append(record(name, task, method, metric, statistics.median(values), unit,
                                  higher, len(values), **extra_fields))
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000 training sentences")
    parser.add_argument("--epochs", type=int, default=None, help="structssl epochs (default: "
                        "the config's)")
    parser.add_argument("--edges", action="store_true", help="also run the command with "
                        "--model.scorer.init_args.factored=false (the (B, N, C, C) layout)")
    parser.add_argument("--repeats", type=int, default=1, help="fits of each (medians)")
    parser.add_argument("--threads", type=int, default=1, help="structssl's torch threads "
                        "(--num_threads; default 1, as CRFsuite)")
    parser.add_argument("--evaluation", action="store_true", help="only the time per "
                        "objective+gradient evaluation (one thread)")
    parser.add_argument("--converge", nargs="+", default=None, metavar="TOL[:K]",
                        help="train configs/tagger.yaml to convergence with each tolerance "
                        "(K: L-BFGS iterations per epoch, default --lbfgs-max-iter; 'none': "
                        "the config as shipped), beside sklearn-crfsuite at 100 iterations "
                        "and converged")
    parser.add_argument("--lbfgs-history", type=int, default=None, help="--converge: the "
                        "structssl runs' --model.init_args.lbfgs_history (default the config's)")
    parser.add_argument("--lbfgs-precondition", type=float, default=None, help="--converge: "
                        "the structssl runs' --model.init_args.lbfgs_precondition (default the "
                        "config's; 0: plain L-BFGS)")
    parser.add_argument("--precision", default=None, help="--converge: the structssl runs' "
                        "--trainer.precision (e.g. 64-true; default the config's)")
    parser.add_argument("--no-peers", action="store_true", help="--converge: skip "
                        "sklearn-crfsuite")
    parser.add_argument("--append", action="store_true", help="--converge: add the records "
                        "to the JSON file's (replacing those of the same method)")
    parser.add_argument("--lbfgs-max-iter", type=int, default=10, help="--converge: L-BFGS "
                        "iterations per epoch (the period of the tolerance test)")
    parser.add_argument("--cap", type=int, default=100, help="--converge: epoch cap")
    args = parser.parse_args()
    try:
        folder = resolve_data_dir() / "conll2002"
    except FileNotFoundError as err:
        raise SystemExit(f"bench_own_data needs the CoNLL-2002 files: {err}") from None
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        train, dev, test = folder / "esp.train", folder / "esp.testa", folder / "esp.testb"
        if args.quick:
            train = _subset(train, work / "train.conll", 1000)
            dev = _subset(dev, work / "dev.conll", 300)
            test = _subset(test, work / "test.conll", 300)
        if args.converge:
            records = _convergence(train, dev, test, work, args.converge, args.lbfgs_max_iter,
                                   args.cap, args.repeats, args.threads, args.quick,
                                   args.precision, not args.no_peers, args.lbfgs_history,
                                   args.lbfgs_precondition)
            name = "own_data_convergence" + ("_quick" if args.quick else "")
            old = RESULTS / f"{name}.json"
            if args.append and old.is_file():
                new = {r["method"] for r in records}
                records = [r for r in json.loads(old.read_text())["records"]
                           if r["method"] not in new] + records
            path = write_results(name, header(
                torch.device("cpu"), "quick" if args.quick else "full",
                note="configs/tagger.yaml to convergence (--model.init_args.tolerance; each "
                "record carries its tolerance, lbfgs_max_iter, epoch cap and precision) and as "
                "shipped vs sklearn-crfsuite (c2 = 1) at 100 iterations and to its own "
                "convergence; medians of n_runs alternating runs (each record's commit is its "
                "own: --append merges runs); fit wall clock and process CPU time, structssl "
                f"{args.threads} thread(s), CRFsuite 1; shared machine (2 cores, other jobs "
                "running): CPU times are the steadier numbers"), records)
            for r in records:
                print(f"{r['method']:<40} {r['metric']:<13} {r['value']:>9.2f} {r['unit']}")
            print(f"wrote {path}")
            return
        if args.evaluation:
            records = _per_evaluation(train, 3 if args.quick else 7, 20 if args.quick else 100,
                                      5 if args.quick else 20)
            name = "own_data_evaluation" + ("_quick" if args.quick else "")
            mode = "quick" if args.quick else "full"
            path = write_results(name, header(torch.device("cpu"), mode, note="CPU time, one "
                                              "thread, machine shared with other jobs"), records)
            for r in records:
                print(f"{r['method']:<24} {r['metric']:<22} {r['value']:>9.3f} {r['unit']}")
            print(f"wrote {path}")
            return
        epochs = args.epochs or (2 if args.quick else None)  # None: the config's (5)
        runs: dict[str, list[dict[str, Any]]] = {"structssl:tagger.yaml": [],
                                                 "structssl:tagger.yaml+edges": [],
                                                 "sklearn-crfsuite": []}
        for r in range(args.repeats):  # alternating, so that both see the same load
            runs["structssl:tagger.yaml"].append(
                _structssl(train, dev, test, work / f"run{r}", epochs, args.threads))
            if args.edges:
                runs["structssl:tagger.yaml+edges"].append(_structssl(
                    train, dev, test, work / f"edges{r}", epochs, args.threads, edges=True))
            runs["sklearn-crfsuite"].append(_crfsuite(train, test, 30 if args.quick else 100))
    task = "conll2002-esp/" + ("1000-sentences" if args.quick else "full")
    name = "own_data" + ("_quick" if args.quick else "")
    metrics = [("span_f1", "%", True), ("fit_time", "s", False), ("fit_cpu_time", "s", False),
               ("predict_time", "s", False)]
    keys = {"span_f1": "span_f1", "fit_time": "fit_s", "fit_cpu_time": "fit_cpu_s",
            "predict_time": "predict_s"}
    records = []
    for method, results in runs.items():
        for metric, unit, higher in metrics:
            values = [x[keys[metric]] * (100 if metric == "span_f1" else 1) for x in results
                      if keys[metric] in x]
            if not values:
                continue
            extra: dict[str, Any] = {"runs": [round(v, 3) for v in values]}
            if metric == "span_f1":
                extra.update({"max_iterations": 30 if args.quick else 100}
                             if method == "sklearn-crfsuite" else {"epochs": epochs or "config"})
            records.append(record(name, task, method, metric, statistics.median(values), unit,
                                  higher, len(values), **extra))
    path = write_results(name, header(torch.device("cpu"), "quick" if args.quick else "full",
                                      note=f"medians of {args.repeats} alternating runs, wall "
                                      f"clock and process CPU time, structssl {args.threads} "
                                      "thread(s), CRFsuite 1, machine shared with other jobs"),
                           records)
    for r in records:
        print(f"{r['method']:<24} {r['metric']:<13} {r['value']:>9.2f} {r['unit']}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
