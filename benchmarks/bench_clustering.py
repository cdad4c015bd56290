"""Supervised clustering of email streams (thesis chapter 8): Figures 8.1, 8.2 and 8.4.

Data: the thesis's email corpus is not public; this uses :func:`structssl.clustering.synthetic_stream`
(3,000 messages shaped like section 8.4.1: about 20% singletons, template spam batches with
word obfuscation, newsletter batches, bursty interleaved arrival) and the 18 pairwise features of
:class:`structssl.clustering.PairwiseFeatures` (the thesis: 47 features of the same kinds).

Figure 8.1 (average normalised loss ``Delta_total / T`` per message) and Figure 8.2 (wrong edges
of the similarity signs before decoding and of the clustering after decoding): 4 training
strategies x 3 decoders. Protocol of section 8.4.1, scaled down: each test window holds one
test batch filled up to T messages (batches larger than T/2 split), its training windows come
from the other messages; C = 1 for every strategy (the thesis does not state C).

- ``sequential``: OP 8.2 on the training windows (working-set QP, DAQP);
- ``nabla``: the differentiable OP 8.2 (Huber eps = 0.1, smax rho = 10, L-BFGS);
- ``compact``: OP 8.1 (one QP with 3 C(T, 3) multipliers per window), which is cubic: trained
  on chunks of ``COMPACT_T`` consecutive messages of the training windows;
- ``pairwise``: linear SVM on the training pairs (PCC of Finley and Joachims 2005).

Decoders: sequential (Table 8.2), LP relaxation (HiGHS; rounded by connected components of
z > 0.5), greedy agglomerative.

Figure 8.4: time to add one message versus window size. LP: re-solve the LP over the window
(the LP decoder cannot place one message without re-solving); sequential:
:meth:`SequentialClustering.assign`, the new message's similarity row against the window's
clustering. Feature computation is excluded for both. Medians over repeats; log-log slopes
fitted over the sizes >= 20 (LP) and >= 10,000 (sequential; below that the fixed per-call
overhead of about 20 torch ops dominates). Sequential windows beyond the 3,000 generated
messages get random cluster ids with the stream's cluster density.

Usage: python benchmarks/bench_clustering.py [--quick] [--folds N] [--out PATH] [--skip-timing]
       [--obfuscation P] [--family-rate P] [--tag NAME]

Partial results are written after every fold (header ``partial``).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, header, mean_std, median_ms, record, write_results  # noqa: E402

from structssl.clustering import (  # noqa: E402
    PairwiseFeatures,
    SequentialClustering,
    SequentialSVM,
    batch_windows,
    cluster_labels,
    collate_windows,
    cross_validation_windows,
    lp_decode,
    synthetic_stream,
)
from structssl.clustering.cli import COMPACT_EPS_PROX, DECODERS, STRATEGIES, decode, train  # noqa: E402

BENCH = "clustering"
COMPACT_T = 10
S = SequentialClustering()
COMPACT_FALLBACKS: list = []  # eps_prox values at which DAQP failed (then the next is tried)


def _accuracy_records(T: int, loss: dict, wrong_after: dict, raw_wrong: dict, train_time: dict,
                      decode_time: dict) -> list:
    """The Figure 8.1 / 8.2 records of the folds done so far."""
    out: list = []
    n = len(next(iter(loss.values())))
    if n == 0:
        return out
    task = f"synthetic_email/T={T}"
    for (s, d), vals in loss.items():
        mean, std = mean_std(vals)
        out.append(record(
            BENCH, task, f"structssl:{s}+{d}", "delta_total_per_message", mean, "messages",
            False, n, std=std, stderr=std / math.sqrt(n),
            training=s, decoder=d,
            paper_source="seed 001 Figure 8.1 (figure only, no numbers; claim: no significant "
            "differences between training strategies or decoders)",
        ))
        wrong, wrong_std = mean_std(wrong_after[s, d])
        out.append(record(BENCH, task, f"structssl:{s}+{d}", "wrong_edges_after_decoding",
                          wrong, "edges", False, n, std=wrong_std,
                          training=s, decoder=d, paper_source="seed 001 Figure 8.2 (figure only)"))
    for s in STRATEGIES:
        out.append(record(BENCH, task, f"structssl:{s}", "wrong_edges_before_decoding",
                          statistics.mean(raw_wrong[s]), "edges", False, n, training=s,
                          paper_source="seed 001 Figure 8.2 (figure only)"))
        out.append(record(BENCH, task, f"structssl:{s}", "training_time",
                          statistics.median(train_time[s]), "s", False, n, training=s))
    for d in DECODERS:
        out.append(record(BENCH, task, f"structssl:{d}", "decoding_time_per_window",
                          statistics.median(decode_time[d]), "s", False, len(decode_time[d]), decoder=d))
    return out


def accuracy_experiment(quick: bool, seed: int, records: list, raw: dict, folds: Optional[int] = None,
                        checkpoint: Optional[Callable[[list], None]] = None,
                        stream_args: Optional[dict] = None) -> dict:
    """Figures 8.1 / 8.2; ``checkpoint(records_so_far)`` is called after every fold."""
    T = 30 if quick else 100
    num_train = 3 if quick else 9
    folds = folds or (2 if quick else 6)
    stream = synthetic_stream(800 if quick else 3000, seed=seed, **(stream_args or {}))
    cv = cross_validation_windows(stream, size=T, num_train=num_train, max_batch_share=T // 2,
                                  num_tests=None, seed=seed)
    rng = np.random.default_rng(seed)
    pick = sorted(rng.choice(len(cv), size=min(folds, len(cv)), replace=False).tolist())
    cv = [cv[i] for i in pick]
    featurize = PairwiseFeatures()
    loss = {(s, d): [] for s in STRATEGIES for d in DECODERS}
    raw_wrong = {s: [] for s in STRATEGIES}
    wrong_after = {(s, d): [] for s in STRATEGIES for d in DECODERS}
    train_time = {s: [] for s in STRATEGIES}
    decode_time = {d: [] for d in DECODERS}
    for fold, (trains, test) in enumerate(cv):
        fit_f = featurize.fit([m for w in trains for m in w])
        tf = [fit_f(w) for w in trains]
        tl = [cluster_labels(w) for w in trains]
        x_test = fit_f(test).unsqueeze(0)
        y_test = cluster_labels(test).unsqueeze(0)
        for strategy in STRATEGIES:
            t0 = time.perf_counter()
            model = train(strategy, tf, tl, C=1.0, compact_window=COMPACT_T)
            train_time[strategy].append(time.perf_counter() - t0)
            for eps_prox in getattr(model, "eps_prox_failed_", []):
                print(f"  compact: DAQP found no solution at eps_prox={eps_prox}; retried", flush=True)
                COMPACT_FALLBACKS.append(eps_prox)
            sim = model.similarities(x_test)
            pm = torch.tril(torch.ones(T, T, dtype=torch.bool), -1)
            truth = S.to_parts(y_test)[0].bool()
            raw_wrong[strategy].append(float((truth != (sim[0] > 0))[pm].sum()))
            for decoder in DECODERS:
                t0 = time.perf_counter()
                pred = decode(decoder, sim)
                decode_time[decoder].append(time.perf_counter() - t0)
                loss[strategy, decoder].append(float(S.delta_total(y_test, pred)) / T)
                wrong_after[strategy, decoder].append(float(S.hamming(y_test, pred)))
        print(f"  fold {fold + 1}/{len(cv)}: " + ", ".join(
            f"{s}/{d}={loss[s, d][-1]:.3f}" for s in STRATEGIES for d in DECODERS), flush=True)
        raw["fig81"] = {"T": T, "folds": fold + 1, "loss": {f"{s}+{d}": v for (s, d), v in loss.items()}}
        if checkpoint is not None:
            checkpoint(_accuracy_records(T, loss, wrong_after, raw_wrong, train_time, decode_time))
    records.extend(_accuracy_records(T, loss, wrong_after, raw_wrong, train_time, decode_time))
    same_msgs = sum(len(w) for w in cv[0][0])
    return {"T": T, "num_train_windows": num_train, "folds": len(cv), "stream_messages": len(stream),
            "compact_window": COMPACT_T, "train_messages_per_fold": same_msgs}


def timing_experiment(quick: bool, seed: int, records: list, raw: dict) -> dict:
    lp_sizes = [10, 20, 30] if quick else [10, 20, 40, 60, 80, 100]
    seq_sizes = [10, 100, 1000, 10000, 100000] if quick else [10, 30, 100, 300, 1000, 3000, 10000, 30000,
                                                               100000, 300000, 1000000]
    stream = synthetic_stream(3000, seed=seed + 1)
    labels_all = cluster_labels(stream)
    # similarities from a sequential SVM trained on a few windows of another stream
    other = synthetic_stream(400, seed=seed + 2)
    featurize = PairwiseFeatures()
    wins = batch_windows(other, 30)[:4]
    x, y, n = collate_windows([featurize(w) for w in wins], [cluster_labels(w) for w in wins])
    w = SequentialSVM(C=1.0).fit(x, y, n).w_
    lp_ms, seq_ms = {}, {}
    device = torch.device("cpu")
    for T in lp_sizes:
        sim = (featurize(stream[:T]) @ w).unsqueeze(0)
        repeats = 5 if T <= 40 else 3
        ms, iqr = median_ms(lambda: lp_decode(sim), device, repeats, warmup=1)
        lp_ms[T] = ms
        records.append(record(BENCH, f"add_one_message/T={T}", "structssl:lp", "time_per_message", ms, "ms",
                              False, repeats, iqr=iqr, paper_source="seed 001 Figure 8.4 (figure only: "
                              "LP at least cubic, seconds; sequential linear, microseconds)"))
        print(f"  LP T={T}: {ms:.1f} ms", flush=True)
    g = torch.Generator().manual_seed(seed)
    fast = SequentialClustering(validate=False)  # value checks off in the hot loop
    for T in seq_sizes:
        if T <= len(labels_all):
            window = labels_all[: T - 1]  # the synthetic stream's true clusters
        else:  # beyond the generated stream: random ids with a similar cluster count
            window = torch.randint(0, max(1, int(T * labels_all.max() / len(labels_all))), (T - 1,), generator=g)
        labels = torch.cat([window, torch.zeros(1, dtype=torch.long)]).unsqueeze(0)
        row = torch.randn(1, T, generator=g, dtype=torch.float64)
        lengths = torch.tensor([T - 1])
        repeats = 50
        ms, iqr = median_ms(lambda: fast.assign(row, labels, lengths), device, repeats, warmup=5)
        seq_ms[T] = ms
        records.append(record(BENCH, f"add_one_message/T={T}", "structssl:sequential", "time_per_message", ms,
                              "ms", False, repeats, iqr=iqr, paper_source="seed 001 Figure 8.4 (figure only)"))
        print(f"  sequential T={T}: {ms * 1000:.1f} us", flush=True)

    def slope(d: dict, lo: int) -> float:
        xs = [math.log(k) for k in d if k >= lo]
        ys = [math.log(d[k]) for k in d if k >= lo]
        return float(np.polyfit(xs, ys, 1)[0]) if len(xs) >= 2 else float("nan")

    lp_slope, seq_slope = slope(lp_ms, 20), slope(seq_ms, 10000)
    records.append(record(BENCH, "add_one_message/growth", "structssl:lp", "loglog_slope", lp_slope, "1", False,
                          len(lp_ms), paper_source="seed 001 section 8.4.4: 'grows at least cubically'"))
    records.append(record(BENCH, "add_one_message/growth", "structssl:sequential", "loglog_slope", seq_slope, "1",
                          False, len(seq_ms), paper_source="seed 001 section 8.4.4: 'grows only linearly'"))
    raw["fig84"] = {"lp_ms": lp_ms, "seq_ms": seq_ms, "lp_slope": lp_slope, "seq_slope": seq_slope}
    return {"lp_sizes": lp_sizes, "sequential_sizes": seq_sizes}


def plots(raw: dict, suffix: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    if "fig81" in raw:
        fig, ax = plt.subplots(figsize=(7, 4))
        width = 0.25
        for i, d in enumerate(DECODERS):
            means = [np.mean(raw["fig81"]["loss"][f"{s}+{d}"]) for s in STRATEGIES]
            errs = [np.std(raw["fig81"]["loss"][f"{s}+{d}"], ddof=1) / math.sqrt(raw["fig81"]["folds"])
                    if raw["fig81"]["folds"] > 1 else 0.0 for s in STRATEGIES]
            ax.bar(np.arange(len(STRATEGIES)) + (i - 1) * width, means, width, yerr=errs, capsize=3,
                   label=f"{d} decoder")
        ax.set_xticks(np.arange(len(STRATEGIES)), STRATEGIES)
        ax.set_ylabel("average Delta_total per message")
        ax.set_title(f"Fig. 8.1 analogue: synthetic stream, T = {raw['fig81']['T']}, "
                     f"{raw['fig81']['folds']} test windows (± s.e.)")
        ax.legend()
        fig.tight_layout()
        path = RESULTS / f"clustering_loss{suffix}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        out.append(str(path))
    if "fig84" in raw:
        fig, ax = plt.subplots(figsize=(6, 4))
        lp, sq = raw["fig84"]["lp_ms"], raw["fig84"]["seq_ms"]
        ax.loglog(list(lp), [v / 1000 for v in lp.values()], "o-",
                  label=f"LP decoder (slope {raw['fig84']['lp_slope']:.2f})")
        ax.loglog(list(sq), [v / 1000 for v in sq.values()], "s-",
                  label=f"sequential (slope {raw['fig84']['seq_slope']:.2f})")
        ax.set_xlabel("window size T")
        ax.set_ylabel("seconds to add one message")
        ax.set_title("Fig. 8.4 analogue (CPU, 1 thread)")
        ax.legend()
        fig.tight_layout()
        path = RESULTS / f"clustering_time{suffix}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        out.append(str(path))
    return out


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small settings (about a minute)")
    ap.add_argument("--folds", type=int, default=None,
                    help="test windows of Figure 8.1 (default 6; quick: 2; the thesis: 153)")
    ap.add_argument("--out", default=None, help="JSON path (default results/clustering.json)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--obfuscation", type=float, default=None,
                    help="synthetic_stream's word obfuscation rate of spam (default 0.05)")
    ap.add_argument("--family-rate", type=float, default=None,
                    help="synthetic_stream's share of sibling spam templates (default 0.5)")
    ap.add_argument("--tag", default="",
                    help="suffix of the output names (clustering_<tag>.json, *_<tag>.png)")
    ap.add_argument("--skip-timing", action="store_true", help="Figure 8.1 / 8.2 only")
    args = ap.parse_args(argv)
    stream_args = {k: v for k, v in (("obfuscation", args.obfuscation),
                                     ("family_rate", args.family_rate)) if v is not None}
    torch.set_num_threads(1)
    records: list = []
    raw: dict = {}
    t0 = time.perf_counter()
    suffix = ("_quick" if args.quick else "") + (f"_{args.tag}" if args.tag else "")
    default = RESULTS / f"clustering{suffix}.json"
    out_path = Path(args.out) if args.out else default
    mode = "quick" if args.quick else "full"

    def checkpoint(extra: list, stage: str) -> None:  # partial results after every fold / size
        head = header(torch.device("cpu"), mode, partial=stage, data="synthetic_stream (the thesis "
                      "corpus is not public)", wall_s=round(time.perf_counter() - t0, 1))
        write_results(BENCH, head, records + extra, out_path)

    print("Figure 8.1 / 8.2: training strategies x decoders", flush=True)
    acc = accuracy_experiment(args.quick, args.seed, records, raw, folds=args.folds,
                              checkpoint=lambda r: checkpoint(r, "figure 8.1 folds so far"),
                              stream_args=stream_args)
    checkpoint([], "figure 8.1 done, figure 8.4 running")
    tim = None
    if not args.skip_timing:
        print("Figure 8.4: time to add one message", flush=True)
        tim = timing_experiment(args.quick, args.seed, records, raw)
    pngs = plots(raw, suffix)
    head = header(torch.device("cpu"), mode,
                  data="synthetic_stream (the thesis corpus is not public)",
                  stream_args=stream_args or "defaults (obfuscation 0.05, family_rate 0.5)", accuracy=acc, timing=tim,
                  C=1.0, nabla={"epsilon": 0.1, "rho": 10.0},
                  scaled_down="thesis: 153 test windows of 100 with 9 training windows each, 47 features, "
                  "CPLEX; here: " + f"{acc['folds']} test windows of {acc['T']}, {acc['num_train_windows']} "
                  f"training windows each, 18 features, DAQP/HiGHS; compact OP 8.1 on windows of {COMPACT_T}",
                  compact_daqp_failures=COMPACT_FALLBACKS, compact_eps_prox_tried=list(COMPACT_EPS_PROX),
                  plots=[Path(p).name for p in pngs], wall_s=round(time.perf_counter() - t0, 1))
    path = write_results(BENCH, head, records, out_path)
    print(f"wrote {path} and {', '.join(pngs)} in {head['wall_s']} s")


if __name__ == "__main__":
    main()
