"""Co-training baselines on real data: perceptron vs co-perceptron, SVM vs coSVM vs nabla-coSVM.

Thesis chapters 5 (Fig. 5.2) and 6 (Fig. 6.3): CoNLL-2002 Spanish NER, few labeled and a
varying number of unlabeled sentences, token error on a holdout of 300 sentences. Two views
(:class:`~structssl.data.features.ViewSplit` ``"token_surface"``): token identity (word, lower,
prefixes, suffixes) and surface clues (shape, capitalisation, digits, special characters,
length, position, quotes); the single-view baselines train on the concatenated views, as in
the thesis.

Methods (all linear chains over :class:`~structssl.baselines.ChainFeatureMap`, Hamming cost):

* ``perceptron``: averaged structured perceptron on the concatenated views (labeled only);
* ``co_perceptron``: :class:`~structssl.baselines.CoPerceptron` (Table 5.2), ``C_u`` below;
* ``svm``: 1-slack cutting-plane structural SVM (slack rescaling, as coSVM) on the
  concatenated views, C = 1 (labeled only); its separation oracle is the k-best union
  (k = 4), which is approximate for slack rescaling and can report convergence early;
* ``svm_margin``: the same with margin rescaling (exact oracle);
* ``cosvm``: :class:`~structssl.baselines.CoSVM` (Tables 6.1, 6.2; slack rescaling, peer
  confidence min(gamma, 1)), C = 1, r_max = 10;
* ``nabla_cosvm``: :class:`~structssl.training.CoTrainingModule` (OP 7.5,
  :class:`~structssl.losses.NablaCoSVMLoss`, eps = 0.3, rho = 10) fitted by ``pl.Trainer`` on
  the draw's data module, as ``configs/tagger_ssl_cosvm.yaml`` trains it: full-batch L-BFGS,
  C_u annealed C_u / 100, C_u / 10, C_u by the module's ``cu_start`` / ``cu_factor``, its
  objective ``(||w^a||^2 + ||w^b||^2) / 2n + C mean_labeled (xi^a + xi^b) + C C_u (m / n)
  mean_unlabeled (xi^a + xi^b)`` (the thesis's, divided by n) over the same token features
  (the views' ``LinearChainScorer``s: the features of the ``ChainFeatureMap``s above).

Every prediction of a two-view method uses the joint ``f^a + f^b`` (thesis eq. 5.7).
C_u is one fixed value for the three semi-supervised methods (the thesis tunes it by
resampling; not done here). Times are CPU seconds of this process (``time.process_time``, one
thread), which is the fair measure on a shared machine.

Usage: python benchmarks/bench_cotraining_baselines.py [--labeled 20] [--unlabeled 0,100,300]
       [--seeds 0,1] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pytorch_lightning as pl
import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, header, record  # noqa: E402

from structssl.baselines import ChainFeatureMap, Clock, CoPerceptron, CoSVM, CuttingPlaneSSVM  # noqa: E402
from structssl.baselines.perceptron import StructuredPerceptron  # noqa: E402
from structssl.data.batch import pad_features  # noqa: E402
from structssl.data.formats.conll import CONLL2002_LABELS  # noqa: E402
from structssl.losses import NablaCoSVMLoss  # noqa: E402
from structssl.metrics import SpanF1, TokenAccuracy  # noqa: E402

NUM_LABELS = 9


# ----------------------------------------------------------------------------- data
class Draw:
    """One labeled / unlabeled / test draw of CoNLL-2002 esp in two views and concatenated.

    ``a``, ``b``: view tensors (B, N, F_v) of feature indices; ``ab`` the concatenation (view b's
    indices shifted behind view a's); ``y`` labels (B, N); ``n`` lengths (B,).
    """

    def __init__(self, num_labeled: int, max_unlabeled: int, num_test: int, seed: int, window: int,
                 view_scheme: str = "token_surface") -> None:
        from structssl.data import CoNLLDataModule

        # three times the unlabeled sentences are drawn, and those of 10..40 tokens kept (the
        # thesis's sentence lengths); the feature vocabulary is fitted on labeled + unlabeled
        dm = CoNLLDataModule(dev_file="conll2002/esp.testa", test_file="conll2002/esp.testb",
                             num_labeled=num_labeled, num_unlabeled=3 * max_unlabeled + 20,
                             max_test=num_test, max_dev=1, window=window, two_view=True,
                             view_scheme=view_scheme, seed=seed)
        dm.setup()
        fa, fb = dm.view_num_features
        self.num_features = (fa, fb)
        unl = [ex for ex in dm.splits["unlabeled"] if 10 <= len(ex["inputs"]) <= 40][:max_unlabeled]
        self.labeled = self._pack(dm.splits["labeled"], fa)
        self.unlabeled = self._pack(unl, fa) if unl else None
        self.test = self._pack(dm.splits["test"], fa)
        self.map_a = ChainFeatureMap(NUM_LABELS, num_features=fa)
        self.map_b = ChainFeatureMap(NUM_LABELS, num_features=fb)
        self.map_ab = ChainFeatureMap(NUM_LABELS, num_features=fa + fb - 1)
        self._dm, self._unlabeled_examples = dm, unl
        self.label_counts = torch.bincount(
            torch.cat([ex["labels"] for ex in dm.splits["labeled"]]), minlength=NUM_LABELS
        ).tolist()

    @staticmethod
    def _pack(examples: list[dict[str, Tensor]], fa: int) -> dict[str, Tensor]:
        a, n = pad_features([ex["inputs"] for ex in examples])
        b, _ = pad_features([ex["inputs_b"] for ex in examples])
        ab = torch.cat([a, torch.where(b > 0, b + fa - 1, b)], dim=-1)
        out = {"a": a, "b": b, "ab": ab, "n": n}
        if "labels" in examples[0]:
            y = torch.zeros(a.shape[:2], dtype=torch.long)
            for i, ex in enumerate(examples):
                y[i, : len(ex["labels"])] = ex["labels"]
            out["y"] = y
        return out

    def data_module(self, m: int) -> Any:
        """The draw's ``CoNLLDataModule`` with its unlabeled split cut to the first ``m`` of the
        kept (10..40-token) unlabeled sentences, as :meth:`unlabeled_part` does; no dev split
        (the thesis's protocol has none)."""
        if m > len(self._unlabeled_examples):
            raise ValueError(f"only {len(self._unlabeled_examples)} unlabeled sentences were "
                             f"drawn; asked {m}")
        self._dm.splits["unlabeled"][:] = self._unlabeled_examples[:m]
        self._dm.splits["dev"][:] = []
        return self._dm

    def unlabeled_part(self, m: int) -> Optional[dict[str, Tensor]]:
        if m == 0 or self.unlabeled is None:
            return None
        if m > self.unlabeled["n"].shape[0]:
            raise ValueError(f"only {self.unlabeled['n'].shape[0]} unlabeled sentences were drawn; asked {m}")
        u = {k: v[:m] for k, v in self.unlabeled.items()}
        width = int(u["n"].max())
        return {k: (v[:, :width] if v.dim() > 1 else v) for k, v in u.items()}


def token_error(pred: Tensor, gold: Tensor, lengths: Tensor) -> float:
    """Token error (%) at the valid positions (``structssl.metrics.TokenAccuracy``)."""
    acc = TokenAccuracy()
    acc.update(pred, gold, lengths)
    return 100.0 * (1.0 - float(acc.compute()))


def entity_f1(pred: Tensor, gold: Tensor, lengths: Tensor) -> float:
    """Exact-span entity F1 (%) of CoNLL-2002 BIO tags (``structssl.metrics.SpanF1``)."""
    f1 = SpanF1(CONLL2002_LABELS)
    f1.update(pred, gold, lengths)
    return 100.0 * float(f1.compute())


# ----------------------------------------------------------------------------- methods
def joint_predict(d: Draw, w1: np.ndarray, w2: np.ndarray) -> Tensor:
    t = d.test
    with torch.no_grad():
        pot = d.map_a.potentials(torch.from_numpy(w1), t["a"], t["n"])
        pot2 = d.map_b.potentials(torch.from_numpy(w2), t["b"], t["n"])
        joint = type(pot)(*(x + y for x, y in zip(pot, pot2))) if isinstance(pot, tuple) else pot + pot2
        return d.map_a.structure.argmax(joint, t["n"])[0]


def single_predict(d: Draw, w: np.ndarray) -> Tensor:
    t = d.test
    with torch.no_grad():
        return d.map_ab.structure.argmax(d.map_ab.potentials(torch.from_numpy(w), t["ab"], t["n"]), t["n"])[0]


class _StopAtCpuTime(pl.Callback):
    """Stop fitting after the epoch in which the process's CPU time passed ``limit`` seconds
    (the other methods' ``time_limit`` is in CPU seconds too)."""

    def __init__(self, limit: float) -> None:
        self.limit, self.start = limit, time.process_time()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if time.process_time() - self.start > self.limit:
            trainer.should_stop = True


def nabla_cosvm(d: Draw, m: int, C: float, cu: float, time_limit: float,
                iterations_per_epoch: int = 40) -> tuple[Tensor, dict[str, Any]]:
    """nabla-coSVM as ``configs/tagger_ssl_cosvm.yaml`` trains it: a
    :class:`~structssl.training.CoTrainingModule` (OP 7.5, ``NablaCoSVMLoss`` eps = 0.3,
    rho = 10 on both terms) fitted by ``pl.Trainer`` on the draw's data module with its first
    ``m`` unlabeled sentences, full-batch L-BFGS, C_u annealed C_u / 100, C_u / 10, C_u (the
    module's ``cu_start`` / ``cu_factor``, one epoch each), then at C_u until the objective
    changes by less than 1e-4 over an epoch (``tolerance``), the CPU time limit or 12 epochs.
    Returns the joint (f^a + f^b) predictions on the test sentences and the run's facts."""
    from structssl.scorers import LinearChainScorer, TwoViewScorer
    from structssl.structures import LinearChain
    from structssl.training import CoTrainingModule

    dm = d.data_module(m)
    torch.manual_seed(0)
    model = CoTrainingModule(
        structure=LinearChain(),
        scorer=TwoViewScorer(LinearChainScorer(factored=True, init_std=1e-3),
                             LinearChainScorer(factored=True, init_std=1e-3)),
        loss=NablaCoSVMLoss(epsilon=0.3, rho=10.0), C=C, Cu=C * cu if m else 0.0,
        cu_start=0.01 if m else None, cu_factor=10.0, optimizer="lbfgs",
        lbfgs_max_iter=iterations_per_epoch, tolerance=1e-4,
    )
    trainer = pl.Trainer(
        max_epochs=12, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, accelerator="cpu", num_sanity_val_steps=0,
        callbacks=[_StopAtCpuTime(time_limit)],
    )
    start = time.process_time()
    trainer.fit(model, datamodule=dm)
    fit_time = time.process_time() - start
    model.eval()
    with torch.no_grad():
        pred = model.decode(dm.collate(dm.splits["test"]))
    info = {"epochs": trainer.current_epoch, "stopped_by": (
        "tolerance" if model.converged is not None else
        "time_limit" if trainer.current_epoch < trainer.max_epochs else "max_epochs"),
        "cu_schedule": "C_u / 100, C_u / 10, C_u (one epoch each), then C_u" if m else "none",
        "lbfgs_iterations_per_epoch": iterations_per_epoch, "fit_time_s": fit_time,
        "trained_by": "CoTrainingModule + pl.Trainer"}
    return pred, info


def run_cell(d: Draw, method: str, m: int, args: argparse.Namespace) -> dict[str, Any]:
    lab, u, t = d.labeled, d.unlabeled_part(m), d.test
    kw: dict[str, Any] = {}
    if u is not None:
        kw = {"unlabeled": u["a"], "unlabeled2": u["b"], "unlabeled_lengths": u["n"]}
    clock = Clock()
    info: dict[str, Any] = {}
    if method == "perceptron":
        model = StructuredPerceptron(d.map_ab, epochs=args.epochs).fit(lab["ab"], lab["y"], lab["n"])
        pred = single_predict(d, model.w_)
        info["epochs"] = len(model.history_)
    elif method in ("svm", "svm_margin"):
        rescaling = "slack" if method == "svm" else "margin"
        model = CuttingPlaneSSVM(d.map_ab, C=args.C, formulation="one_slack", rescaling=rescaling,
                                 epsilon=1e-2, time_limit=args.time_limit)
        model.fit(lab["ab"], lab["y"], lab["n"])
        pred = single_predict(d, model.w_)
        info.update(converged=model.converged_, iterations=len(model.history_))
    elif method == "co_perceptron":
        model = CoPerceptron(d.map_a, d.map_b, cu=args.cu, epochs=args.epochs,
                             time_limit=args.time_limit)
        model.fit(lab["a"], lab["b"], lab["y"], lab["n"], **kw)
        pred = joint_predict(d, model.w1_, model.w2_)
        info.update(epochs=len(model.history_), timed_out=model.timed_out_)
    elif method == "cosvm":
        model = CoSVM(d.map_a, d.map_b, C=args.C, cu=args.cu, epsilon=1e-2, epochs=args.cosvm_epochs,
                      r_max=10, k=4, cu_warmup=3 if u is not None else 0, time_limit=args.time_limit)
        model.fit(lab["a"], lab["b"], lab["y"], lab["n"], **kw)
        pred = joint_predict(d, model.w1_, model.w2_)
        info.update(epochs=len(model.history_), timed_out=model.timed_out_,
                    disagreements_last_epoch=model.history_[-1]["disagreements"])
    elif method == "nabla_cosvm":
        pred, extra = nabla_cosvm(d, m, args.C, args.cu, args.time_limit)
        info.update(extra)
    else:  # pragma: no cover
        raise ValueError(method)
    info["fit_time_s"] = info.get("fit_time_s", clock.elapsed())
    info["token_error"] = token_error(pred, t["y"], t["n"])
    info["entity_f1"] = entity_f1(pred, t["y"], t["n"])
    return info


# ----------------------------------------------------------------------------- main
SUPERVISED = ("perceptron", "svm", "svm_margin")
TWO_VIEW = ("co_perceptron", "cosvm", "nabla_cosvm")


def summarize(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for c in cells:
        groups.setdefault((c["method"], c["num_unlabeled"]), []).append(c)
    out = []
    for (method, m), cs in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        err = np.array([c["token_error"] for c in cs])
        f1 = np.array([c["entity_f1"] for c in cs])
        tm = np.array([c["fit_time_s"] for c in cs])
        out.append({"method": method, "num_unlabeled": m, "n_runs": len(cs),
                    "token_error_mean": float(err.mean()),
                    "token_error_sem": float(err.std(ddof=1) / np.sqrt(len(cs))) if len(cs) > 1 else None,
                    "entity_f1_mean": float(f1.mean()), "cpu_time_s_mean": float(tm.mean())})
    return out


def to_schema(result: dict[str, Any]) -> dict[str, Any]:
    head = header(torch.device("cpu"), "scaled", protocol=result["protocol"],
                  clock="process (CPU s of this process, 1 thread)",
                  load_average_at_start=result["load_average_at_start"])
    records = []
    n = result["num_labeled"]
    for s in result["summary"]:
        task = f"conll2002_esp/n={n},m={s['num_unlabeled']}"
        meth = f"structssl:{s['method']}"
        records.append(record("cotraining_baselines", task, meth, "token_error", s["token_error_mean"],
                              "%", False, s["n_runs"], sem=s["token_error_sem"]))
        records.append(record("cotraining_baselines", task, meth, "entity_f1", s["entity_f1_mean"],
                              "%", True, s["n_runs"]))
        records.append(record("cotraining_baselines", task, meth, "cpu_time", s["cpu_time_s_mean"],
                              "s", False, s["n_runs"]))
    return {"header": head, "records": records, "details": result}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--labeled", type=int, default=20)
    ap.add_argument("--unlabeled", default="0,100,300", help="comma list of unlabeled counts")
    ap.add_argument("--seeds", default="0,1", help="comma list of draw seeds")
    ap.add_argument("--test", type=int, default=300, help="esp.testb holdout sentences")
    ap.add_argument("--window", type=int, default=0)
    ap.add_argument("--view-scheme", default="token_surface", choices=("token_surface", "random", "odd_even"),
                    help="the ViewSplit scheme (random: a seeded random half of the features per view)")
    ap.add_argument("--C", type=float, default=1.0)
    ap.add_argument("--cu", type=float, default=0.5)
    ap.add_argument("--epochs", type=int, default=20, help="perceptron / co-perceptron epochs")
    ap.add_argument("--cosvm-epochs", type=int, default=15)
    ap.add_argument("--time-limit", type=float, default=120.0, help="CPU seconds per fit")
    ap.add_argument("--methods", default=",".join(SUPERVISED + TWO_VIEW))
    ap.add_argument("--out", default=str(RESULTS / "cotraining_baselines.json"))
    ap.add_argument("--merge", action="store_true",
                    help="keep the cells of the existing JSON that this run does not redo")
    args = ap.parse_args()
    torch.set_num_threads(1)
    ms = [int(v) for v in args.unlabeled.split(",")]
    seeds = [int(v) for v in args.seeds.split(",")]
    methods = [v for v in args.methods.split(",") if v]
    bad = sorted(set(methods) - set(SUPERVISED + TWO_VIEW))
    if bad:
        ap.error(f"--methods must be drawn from {SUPERVISED + TWO_VIEW}; got {bad}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "benchmark": "cotraining_baselines",
        "protocol": (
            f"scaled: CoNLL-2002 esp, {args.labeled} labeled sentences (seeded draw of esp.train), "
            f"unlabeled {ms} (10..40 tokens), {len(seeds)} draws (thesis: 100), holdout first "
            f"{args.test} esp.testb sentences (thesis: 300 random), window {args.window}, views "
            f"{args.view_scheme}, C = {args.C}, C_u = {args.cu} (untuned; thesis tunes by resampling), "
            f"perceptron epochs {args.epochs}, coSVM epochs <= {args.cosvm_epochs}, "
            f"{args.time_limit:g} CPU s limit per fit"
        ),
        "num_labeled": args.labeled, "num_unlabeled": ms, "seeds": seeds,
        "machine": {"python": platform.python_version(), "torch": torch.__version__, "threads": 1},
        "load_average_at_start": os.getloadavg(), "cells": [], "draws": [],
    }

    if args.merge and out.exists():
        old = json.loads(out.read_text())["details"]
        redo = {(m_, s_) for m_ in methods for s_ in seeds}
        result["cells"] = [c for c in old["cells"] if (c["method"], c["seed"]) not in redo]
        result["protocol"] = old["protocol"]
        result["draws"] = old["draws"]
        result["merged_runs"] = old.get("merged_runs", []) + [
            {"methods": methods, "seeds": seeds, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}]

    def save() -> None:
        result["summary"] = summarize(result["cells"])
        out.write_text(json.dumps(to_schema(result), indent=1, default=float))

    with Clock.use(time.process_time):
        for seed in seeds:
            t0 = time.perf_counter()
            d = Draw(args.labeled, max(ms), args.test, seed, args.window, args.view_scheme)
            result["draws"] = [x for x in result["draws"] if x["seed"] != seed]
            result["draws"].append({"seed": seed, "view_num_features": d.num_features,
                                    "labeled_label_counts": d.label_counts,
                                    "num_unlabeled_available": 0 if d.unlabeled is None else int(d.unlabeled["n"].shape[0])})
            print(f"[draw {seed}] views {d.num_features} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
            for m in ms:
                for method in methods:
                    if method in SUPERVISED and m != ms[0]:
                        continue  # labeled only: one run per draw
                    t0 = time.perf_counter()
                    cell = run_cell(d, method, m, args)
                    cell.update(method=method, num_unlabeled=m if method in TWO_VIEW else 0, seed=seed)
                    result["cells"].append(cell)
                    save()
                    print(f"[seed {seed} m={m}] {method}: err {cell['token_error']:.2f} % F1 "
                          f"{cell['entity_f1']:.1f} cpu {cell['fit_time_s']:.1f} s "
                          f"(wall {time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
    save()
    for s in result["summary"]:
        print(s)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
