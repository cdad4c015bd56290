"""Command line of chapter 8: ``structssl clustering`` (email batch detection).

Trains the similarity measure ``<w, psi(x_j, x_k)>`` with one of the four training strategies
and evaluates every chosen decoder with the cross-validation of section 8.4.1: each test window
holds one batch filled up with other messages to ``--window`` messages, its ``--num-train``
training windows are drawn from the other messages; the score is the average normalised loss
``Delta_total / T`` per message (Figure 8.1) over ``--folds`` test windows.

Data: ``--data synthetic`` (:func:`synthetic_stream`, the thesis corpus is not public) or
``--data mail --mail PATH`` with a folder of ``.eml`` files or an mbox file and a batch-id file
``--batches FILE`` (lines ``<message> <batch>``, ``-`` for a singleton; see :func:`read_mail`).
``--cluster-out FILE`` additionally trains on windows of the whole stream and clusters it in
consecutive windows of ``--window`` messages, writing ``<message name> <window>:<cluster>``
lines (for your own mail).

Options come from the flags or a YAML file (``--config configs/clustering/synthetic.yaml``;
keys are the long flag names with ``_`` for ``-``), parsed by jsonargparse like every
``structssl`` subcommand; flags after ``--config`` override the file, ``--print_config`` shows
the resolved options. ``python -m structssl.clustering`` is an alias.

Example::

    structssl clustering --strategy sequential --decoders sequential lp greedy
    structssl clustering --data mail --mail ~/spam.mbox --batches batches.txt \\
        --cluster-out clusters.txt
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any, Literal, Optional, Sequence

import torch
from jsonargparse import ActionConfigFile, ArgumentParser, Namespace
from torch import Tensor

from structssl.clustering.decoders import greedy_agglomerative, lp_decode
from structssl.clustering.features import PairwiseFeatures
from structssl.clustering.stream import (
    Message,
    cluster_labels,
    cross_validation_windows,
    read_mail,
    synthetic_stream,
)
from structssl.clustering.structure import SequentialClustering
from structssl.clustering.training import (
    CompactLPSVM,
    NablaSequentialSVM,
    PairwiseSVM,
    SequentialSVM,
    collate_windows,
)

__all__ = ["DECODERS", "STRATEGIES", "build_parser", "decode", "evaluate", "main", "parse_args",
           "train"]

#: training strategies: OP 8.2 (QP), OP 8.2 as a differentiable loss, OP 8.1, pairwise SVM
STRATEGIES = ("sequential", "nabla", "compact", "pairwise")
#: decoders: Table 8.2 / Decoding Strategy 8.1, LP relaxation (HiGHS), greedy agglomerative
DECODERS = ("sequential", "lp", "greedy")
#: DAQP proximal weights for the compact OP 8.1, tried in turn (no solution on some at 1e-2)
COMPACT_EPS_PROX = (1e-2, 1e-1, 1.0)


def build_parser() -> ArgumentParser:
    """The argument parser of ``structssl clustering`` (jsonargparse; ``--config`` YAML)."""
    p = ArgumentParser(
        prog="structssl clustering",
        description="Supervised clustering of message streams (thesis chapter 8).",
    )
    p.add_argument("--config", action=ActionConfigFile,
                   help="YAML file of options (keys: the long flag names, '_' for '-')")
    p.add_argument("--data", type=Literal["synthetic", "mail"], default="synthetic",
                   help="the synthetic stream or your own mail (--mail, --batches)")
    p.add_argument("--num-messages", type=int, default=600, help="synthetic stream length")
    p.add_argument("--mail", type=Optional[Path], default=None,
                   help="folder of .eml files or an mbox")
    p.add_argument("--batches", type=Optional[Path], default=None, help="batch-id file of --mail")
    p.add_argument("--unlisted", type=Literal["error", "singleton"], default="singleton",
                   help="messages the batch file does not list")
    p.add_argument("--window", type=int, default=30, help="window size T (thesis: 100)")
    p.add_argument("--num-train", type=int, default=3, help="training windows (thesis: 9)")
    p.add_argument("--folds", type=int, default=2, help="test windows (thesis: 153); 0: none")
    p.add_argument("--strategy", type=Literal[STRATEGIES], default="sequential",
                   help="training strategy")
    p.add_argument("--decoders", nargs="+", type=Literal[DECODERS], default=list(DECODERS),
                   help="decoders to evaluate (the first clusters --cluster-out)")
    p.add_argument("--C", type=float, default=1.0, help="loss weight of the SVMs")
    p.add_argument("--compact-window", type=int, default=10,
                   help="compact (OP 8.1, cubic): train on chunks of this many messages")
    p.add_argument("--cluster-out", type=Optional[Path], default=None,
                   help="cluster the whole stream with the first decoder and write it here "
                   "(an existing file is kept unless --overwrite)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing --cluster-out file")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--out", type=Optional[Path], default=None,
                   help="write the results as JSON here")
    return p


def parse_args(argv: Optional[Sequence[str]] = None) -> Namespace:
    """Parse ``argv`` (default: ``sys.argv``); a ``--config`` YAML supplies options that later
    flags override. Bad options exit with the parser's usage error (status 2)."""
    return build_parser().parse_args(None if argv is None else list(argv))


def load_stream(args: Namespace) -> tuple[list[Message], str]:
    """The message stream in arrival order and a description."""
    if args.data == "synthetic":
        given = [f"--{name}" for name in ("mail", "batches") if getattr(args, name) is not None]
        if given:  # options of the mail stream would be ignored
            raise ValueError(f"{' and '.join(given)} read a mail stream: add --data mail")
        if args.num_messages < 2:
            raise ValueError(f"--num-messages must be >= 2; got {args.num_messages}")
        return synthetic_stream(args.num_messages, seed=args.seed), \
            f"synthetic_stream({args.num_messages}, seed={args.seed})"
    if args.mail is None:
        raise ValueError("--data mail needs --mail PATH (a folder of .eml files or an mbox)")
    stream = read_mail(args.mail, args.batches, unlisted=args.unlisted)
    return stream, f"{args.mail} ({len(stream)} messages, batches from {args.batches})"


def train(strategy: str, features: Sequence[Tensor], labels: Sequence[Tensor], C: float = 1.0,
          compact_window: int = 10) -> Any:
    """Fit one training strategy on windows; returns the fitted trainer (``.w_``,
    ``.similarities``). ``compact`` (OP 8.1 is cubic in T) trains on chunks of
    ``compact_window`` consecutive messages, at most as many chunks as windows, solved by
    DAQP with proximal weight 1e-2, then 1e-1 and 1 where DAQP reports no solution.

    Shape:
        features: per window (T_i, T_i, d); labels: per window (T_i,).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}; got {strategy!r}")
    if strategy == "compact":
        chunks_f, chunks_l = [], []
        for f, y in zip(features, labels):
            for s in range(0, f.shape[0] - compact_window + 1, compact_window):
                chunks_f.append(f[s:s + compact_window, s:s + compact_window])
                chunks_l.append(y[s:s + compact_window])
        if not chunks_f:
            raise ValueError(f"compact: every training window is shorter than {compact_window}")
        step = max(1, len(chunks_f) // len(features))
        chunks_f, chunks_l = chunks_f[::step][:len(features)], chunks_l[::step][:len(features)]
        x, y, n = collate_windows(chunks_f, chunks_l)
        first, *fallbacks = COMPACT_EPS_PROX
        return CompactLPSVM(C=C, max_window=compact_window, eps_prox=first,
                            eps_prox_fallbacks=fallbacks).fit(x, y, n)
    x, y, n = collate_windows(list(features), list(labels))
    model = {"sequential": SequentialSVM(C=C), "nabla": NablaSequentialSVM(C=C),
             "pairwise": PairwiseSVM(C=C)}[strategy]
    return model.fit(x, y, n)


def decode(decoder: str, sim: Tensor) -> Tensor:
    """Cluster windows with one decoder. Shape: sim (B, T, T) -> labels (B, T)."""
    if decoder == "sequential":
        return SequentialClustering().decode(sim)[0]
    if decoder == "lp":
        return lp_decode(sim).labels
    if decoder == "greedy":
        return greedy_agglomerative(sim)
    raise ValueError(f"decoder must be one of {DECODERS}; got {decoder!r}")


def evaluate(stream: Sequence[Message], strategy: str, decoders: Sequence[str], window: int,
             num_train: int, folds: int, C: float = 1.0, compact_window: int = 10,
             seed: int = 0) -> dict[str, list[float]]:
    """Section 8.4.1's cross-validation: per decoder the loss ``Delta_total / T`` of each of
    ``folds`` randomly chosen test windows."""
    cv = cross_validation_windows(stream, size=window, num_train=num_train,
                                  max_batch_share=max(1, window // 2), seed=seed)
    if not cv:
        raise ValueError("no test window: the stream has no batch of at least 2 messages that "
                         f"fits a window of {window}")
    rng = random.Random(seed)
    cv = [cv[i] for i in sorted(rng.sample(range(len(cv)), min(folds, len(cv))))]
    structure = SequentialClustering()
    out: dict[str, list[float]] = {d: [] for d in decoders}
    for trains, test in cv:
        featurize = PairwiseFeatures().fit([m for w in trains for m in w])
        model = train(strategy, [featurize(w) for w in trains],
                      [cluster_labels(w) for w in trains], C, compact_window)
        sim = model.similarities(featurize(test).unsqueeze(0))
        truth = cluster_labels(test).unsqueeze(0)
        for d in decoders:
            pred = decode(d, sim)
            out[d].append(float(structure.delta_total(truth, pred)) / len(test))
    return out


def cluster_stream(stream: Sequence[Message], strategy: str, decoder: str, window: int,
                   num_train: int, C: float = 1.0, compact_window: int = 10,
                   seed: int = 0) -> list[tuple[str, int, int]]:
    """Train on ``num_train`` random windows of the stream, then cluster the stream in
    consecutive windows of ``window`` messages: (message name, window index, cluster id)."""
    starts = list(range(0, max(1, len(stream) - window + 1), window))
    rng = random.Random(seed)
    picked = sorted(rng.sample(starts, min(num_train, len(starts))))
    trains = [list(stream[s:s + window]) for s in picked]
    featurize = PairwiseFeatures().fit(list(stream))
    model = train(strategy, [featurize(w) for w in trains], [cluster_labels(w) for w in trains],
                  C, compact_window)
    out = []
    for k, s in enumerate(range(0, len(stream), window)):
        part = list(stream[s:s + window])
        if len(part) == 1:
            out.append((part[0].name, k, 0))
            continue
        labels = decode(decoder, model.similarities(featurize(part).unsqueeze(0)))[0]
        out.extend((m.name, k, int(c)) for m, c in zip(part, labels.tolist()))
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``structssl clustering`` (and ``python -m structssl.clustering``);
    returns the exit status."""
    args = parse_args(argv)
    torch.set_num_threads(1)
    start = time.perf_counter()
    summary: dict[str, Any] = {}
    try:
        for name in ("window", "num_train", "compact_window"):
            if getattr(args, name) < (2 if name != "num_train" else 1):
                raise ValueError(f"--{name.replace('_', '-')} is too small: {getattr(args, name)}")
        if args.cluster_out is not None and args.cluster_out.exists() and not args.overwrite:
            raise ValueError(
                f"--cluster-out {args.cluster_out} exists; not replacing it (pass --overwrite "
                "to replace it, or name another file)"
            )
        stream, what = load_stream(args)
        print(f"{what}: {len(stream)} messages, {len({m.batch for m in stream if m.batch})} "
              f"batches; strategy {args.strategy}, window T={args.window}")
        if args.folds > 0:
            res = evaluate(stream, args.strategy, args.decoders, args.window, args.num_train,
                           args.folds, args.C, args.compact_window, args.seed)
            for d, vals in res.items():
                mean = sum(vals) / len(vals)
                se = (math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1) / len(vals))
                      if len(vals) > 1 else 0.0)
                summary[d] = {"delta_total_per_message": mean, "stderr": se, "folds": vals}
                print(f"  {args.strategy}+{d:10s} Delta_total / T = {mean:.4f} ± {se:.4f} "
                      f"({len(vals)} test windows)")
        if args.cluster_out is not None:
            rows = cluster_stream(stream, args.strategy, args.decoders[0], args.window,
                                  args.num_train, args.C, args.compact_window, args.seed)
            args.cluster_out.parent.mkdir(parents=True, exist_ok=True)
            args.cluster_out.write_text("".join(f"{n} {k}:{c}\n" for n, k, c in rows))
            print(f"  clustered {len(rows)} messages with the {args.decoders[0]} decoder -> "
                  f"{args.cluster_out}")
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"({time.perf_counter() - start:.1f}s)")
    if args.out is not None:
        opts = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                if k != "config"}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"options": opts, "data": what, "results": summary},
                                       indent=1) + "\n")
    return 0
