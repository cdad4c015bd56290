"""Semi-supervised NER on CoNLL-2002 Spanish: does unlabeled data beat the supervised model?

Issue 17: with 10 / 100 labeled sentences the nabla-TSVM and nabla-coSVM collapsed to all-O.
This script sweeps procedures and safeguard settings through the library's own training path
(``CoNLLDataModule`` + ``LinearChain`` + ``LinearChainScorer`` + the losses and callbacks, run
by ``pytorch_lightning.Trainer.fit`` / ``.test`` exactly as the CLI does; no training loop of
its own), chooses settings on dev (esp.testa) and reports span F1 on esp.testb next to the
supervised model of the same labeled draw.

    python benchmarks/bench_ner_ssl.py --quick      # 100 labeled + 2000 unlabeled, 1 seed, 500 test
    python benchmarks/bench_ner_ssl.py --labeled 10 --seeds 0 1

Records (DESIGN.md section 5) go to ``benchmarks/results/ner_ssl.json`` (``--quick``:
``ner_ssl_quick.json``): per method and task ``span_f1`` on dev and test, precision, recall,
the predicted entity fraction on test (0 = all-O collapse), the paired gain over supervised,
and the wall time. Needs ``$STRUCTSSL_DATA/conll2002`` (default ``../shared/data``).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pytorch_lightning as pl  # noqa: E402
import torch  # noqa: E402

from benchmarks.common import header, record, write_results  # noqa: E402
from structssl.data import CoNLLDataModule  # noqa: E402
from structssl.losses import NablaCoSVMLoss, NablaSVMLoss, NablaTSVMLoss  # noqa: E402
from structssl.scorers import LinearChainScorer, TwoViewScorer  # noqa: E402
from structssl.structures import LinearChain  # noqa: E402
from structssl.training import (  # noqa: E402
    CoTrainingModule,
    SupervisedModule,
    TransductiveModule,
)

BENCH = "ner_ssl"
TAGS = ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]


def data(args: argparse.Namespace, seed: int, two_view: bool = False) -> CoNLLDataModule:
    kwargs: dict[str, Any] = dict(
        num_labeled=args.labeled, num_unlabeled=args.unlabeled, seed=seed,
        max_dev=args.max_dev, max_test=args.max_test, eval_batch_size=256,
        unlabeled_batch_size=args.unlabeled_batch_size,
    )
    if two_view:
        kwargs.update(two_view=True, view_scheme="token_surface")
    dm = CoNLLDataModule(**kwargs)
    dm.setup()
    return dm


def _scorer(dm: CoNLLDataModule, two_view: bool) -> torch.nn.Module:
    c = dm.num_labels
    if two_view:
        a, b = dm.view_num_features
        return TwoViewScorer(
            LinearChainScorer(c, num_features=a), LinearChainScorer(c, num_features=b)
        )
    return LinearChainScorer(c, num_features=dm.num_features)


def build(method: dict[str, Any], dm: CoNLLDataModule) -> pl.LightningModule:
    """A procedure from a method spec: ``kind`` plus the procedure's keyword arguments."""
    spec = dict(method)
    kind = spec.pop("kind")
    spec.pop("name")
    spec.pop("epochs", None)
    chain = LinearChain(dm.num_labels)
    common = dict(task="bio", tags=TAGS)
    if kind == "supervised":
        return SupervisedModule(chain, _scorer(dm, False), NablaSVMLoss(), **common, **spec)
    if kind == "tsvm":
        u = NablaTSVMLoss(tau=0.4, cost=spec.pop("cost", "hamming"))
        return TransductiveModule(chain, _scorer(dm, False), NablaSVMLoss(), u, **common, **spec)
    if kind == "cosvm":
        loss = NablaCoSVMLoss(pseudo_labels=spec.pop("pseudo_labels", "peer"))
        return CoTrainingModule(chain, _scorer(dm, True), loss, **common, **spec)
    raise ValueError(f"unknown kind {kind!r}")


def fit_and_test(method: dict[str, Any], args: argparse.Namespace, seed: int) -> dict[str, float]:
    pl.seed_everything(seed, verbose=False)
    dm = data(args, seed, two_view=method["kind"] == "cosvm")
    model = build(method, dm)
    trainer = pl.Trainer(
        accelerator="cpu", max_epochs=method.get("epochs", args.epochs), logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0, check_val_every_n_epoch=10_000,
    )
    start = time.process_time()
    trainer.fit(model, datamodule=dm)
    seconds = time.process_time() - start
    (dev,) = trainer.validate(model, datamodule=dm, verbose=False)
    (test,) = trainer.test(model, datamodule=dm, verbose=False)
    return {
        "dev_f1": 100 * dev["val/span_f1"], "test_f1": 100 * test["test/span_f1"],
        "test_precision": 100 * test["test/span_precision"],
        "test_recall": 100 * test["test/span_recall"],
        "test_entity_fraction": 100 * test["test/pred_fraction/entity"],
        "cpu_s": seconds,
    }


def methods(args: argparse.Namespace) -> list[dict[str, Any]]:
    opt = dict(optimizer="lbfgs", lbfgs_max_iter=args.lbfgs_iters)
    # the epochs the supervised part gets alone first; every SSL method trains the labeled
    # part to the same point as the supervised baseline before any unlabeled term
    w = args.warm
    out: list[dict[str, Any]] = [
        dict(name="supervised", kind="supervised", C=1.0, **opt, epochs=w),
        dict(name="supervised-long", kind="supervised", C=1.0, **opt, epochs=args.epochs),
    ]
    for cu in args.cu:
        for bal in args.balance:
            tag = f"Cu={cu:g},bal={bal:g}"
            out.append(dict(
                name=f"tsvm[{tag}]", kind="tsvm", C=1.0, Cu=cu, warm_start_epochs=w,
                cu_start=args.cu_start, cu_factor=2.0, balance_weight=bal, **opt,
            ))
    if args.cosvm:
        for cu in args.cu:
            out.append(dict(
                name=f"cosvm-joint[Cu={cu:g}]", kind="cosvm", C=1.0, Cu=cu, warm_start_epochs=w,
                cu_start=args.cu_start, cu_factor=2.0, pseudo_labels="joint", **opt,
            ))
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--labeled", type=int, default=100)
    p.add_argument("--unlabeled", type=int, default=2000)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--max-dev", type=int, default=None)
    p.add_argument("--max-test", type=int, default=None)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--warm", type=int, default=3, help="supervised warm-start epochs")
    p.add_argument("--lbfgs-iters", type=int, default=30)
    p.add_argument("--unlabeled-batch-size", type=int, default=None)
    p.add_argument("--cu", type=float, nargs="+", default=[0.01, 0.1])
    p.add_argument("--cu-start", type=float, default=0.125)
    p.add_argument("--balance", type=float, nargs="+", default=[0.0, 10.0])
    p.add_argument("--cosvm", action="store_true")
    p.add_argument("--only", nargs="*", default=None, help="method names to run")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if args.quick:
        args.seeds = args.seeds[:1] if args.seeds != [0, 1, 2, 3, 4] else [0]
        args.max_dev = args.max_dev or 300
        args.max_test = args.max_test or 500
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    for name in ("pytorch_lightning", "lightning", "lightning.pytorch"):
        logging.getLogger(name).setLevel(logging.ERROR)
    task = f"conll2002-esp/labeled={args.labeled},unlabeled={args.unlabeled}"
    rows: dict[str, list[dict[str, float]]] = {}
    for method in methods(args):
        if args.only and method["name"] not in args.only:
            continue
        for seed in args.seeds:
            res = fit_and_test(method, args, seed)
            rows.setdefault(method["name"], []).append(res)
            print(f"{method['name']:28s} seed {seed}  " + "  ".join(
                f"{k} {v:6.2f}" for k, v in res.items()), flush=True)
    records: list[dict[str, Any]] = []
    base = rows.get("supervised")
    for name, runs in rows.items():
        spec = next(m for m in methods(args) if m["name"] == name)
        for key, unit, better in (
            ("dev_f1", "%", True), ("test_f1", "%", True), ("test_precision", "%", True),
            ("test_recall", "%", True), ("test_entity_fraction", "%", None), ("cpu_s", "s", False),
        ):
            vals = [r[key] for r in runs]
            extra = {"std": round(statistics.stdev(vals), 4)} if len(vals) > 1 else {}
            records.append(record(
                BENCH, task, f"structssl:{name}", key.replace("test_", "test/").replace(
                    "dev_", "dev/"), statistics.mean(vals), unit, better, len(vals),
                seeds=args.seeds, config={k: v for k, v in spec.items() if k != "name"}, **extra,
            ))
        if base is not None and name != "supervised":
            gains = [r["test_f1"] - b["test_f1"] for r, b in zip(runs, base)]
            extra = {"std": round(statistics.stdev(gains), 4)} if len(gains) > 1 else {}
            records.append(record(
                BENCH, task, f"structssl:{name}", "test/span_f1_gain_over_supervised",
                statistics.mean(gains), "points", True, len(gains), seeds=args.seeds, **extra,
            ))
    head = header(torch.device("cpu"), "quick" if args.quick else "full", protocol=(
        f"CoNLL-2002 Spanish, {args.labeled} labeled + {args.unlabeled} unlabeled sentences of "
        f"esp.train (seeded draws {args.seeds}), dev esp.testa (max {args.max_dev}), test "
        f"esp.testb (max {args.max_test}); scaled run" if args.quick or args.max_test else ""
    ))
    out = args.out or (Path(__file__).resolve().parent / "results" /
                       (f"{BENCH}_quick.json" if args.quick else f"{BENCH}.json"))
    print("wrote", write_results(BENCH, head, records, out))


if __name__ == "__main__":
    main()
