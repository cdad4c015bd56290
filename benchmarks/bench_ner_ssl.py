"""Semi-supervised NER on CoNLL-2002 Spanish: does unlabeled data beat the supervised model?

Every method is a shipped config run exactly as a user runs it (``structssl fit --config
configs/tagger.yaml`` / ``configs/tagger_ssl.yaml`` with the files and the labeled draw given on
the command line, through ``structssl.cli.cli_main``); this script only sweeps the labeled draws
and collects metrics. Each run keeps its best dev (esp.testa) checkpoint and is scored on
esp.testb next to the supervised CRF of the same labeled draw; the labeled weight ``C`` of every
method (and the peer's ``c2``) is chosen on dev per draw from ``--c-grid``, except the
semi-supervised procedures', which keep the ``C`` their base CRF chose in the same draw
(:data:`BASE_OF`; the base run before them or already in the JSON with ``--merge``):

- ``supervised``: ``configs/tagger.yaml`` on the labeled sentences alone;
- ``clusters``: the same CRF with the features learned from the unlabeled sentences (word
  clusters and case profiles, ``--data.word_clusters``), no unlabeled term;
- ``tsvm+clusters``: ``configs/tagger_ssl.yaml`` as shipped: nabla-TSVM on top of those;
- ``tsvm``: the same without the learned features;
- ``ls+clusters`` / ``cccp+clusters`` / ``cosvm+clusters`` / ``codl+clusters``: label switching,
  Gamma-SSVM (CCCP), nabla-coSVM and CoDL on those features
  (``configs/tagger_ssl_{label_switching,cccp,cosvm,codl}.yaml``),
  keeping the C of ``clusters`` (``--merge`` adds them to an existing JSON);
- ``supervised-converged`` / ``clusters-converged``: those two to convergence (:data:`CONVERGED`)
  instead of the configs' 5 epochs of 20 L-BFGS iterations;
- ``crfsuite``: sklearn-crfsuite on the labeled sentences with tagger.yaml's features.

With ``--unlabeled-block`` the untagged sentences are one run of consecutive sentences of
esp.train (a few documents, as a user's untagged file often is; its start drawn by the seed,
the tagged draw's sentences skipped) instead of a random draw over the whole file: the script
writes the tagged draw and the block as files and passes them as ``--data.train_file`` and
``--data.unlabeled_file``, the README's own-data commands exactly. ``--labeled-block`` (with
it) draws the tagged sentences as consecutive sentences too, from another start.

    python benchmarks/bench_ner_ssl.py --quick      # 100 labeled + 2000 unlabeled, 1 seed, 500 test
    python benchmarks/bench_ner_ssl.py --labeled 10 --seeds 0 1 2 3 4 --only supervised clusters

Records (DESIGN.md section 5) go to ``benchmarks/results/ner_ssl.json``
(``ner_ssl_labeled<N>.json`` with ``--labeled N`` other than 100; ``--quick``: ``..._quick.json``): per method and task ``span_f1`` on dev and test, precision, recall,
the predicted entity fraction on test (0 = all-O collapse), the paired gain over supervised,
and the wall time. Needs ``$STRUCTSSL_DATA/conll2002`` (default ``../shared/data``).
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Optional

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks.common import header, mean_std, record, write_results  # noqa: E402

BENCH = "ner_ssl"
CONFIGS = Path(__file__).resolve().parents[1] / "configs"

#: the overrides that train a config to convergence: stop after the first epoch (20 L-BFGS
#: iterations) whose objective fell by a relative 1e-4 or less, or in which L-BFGS stopped by its
#: own tests (``StructuredModule(tolerance=...)``), at most 100 epochs
CONVERGED = ["--model.init_args.tolerance=1e-4", "--trainer.max_epochs=100"]

#: name -> (config, extra CLI overrides). Every method is a shipped config run as a user runs
#: it (``structssl fit --config ...``); this script only sweeps the labeled draw and C.
METHODS: dict[str, tuple[str, list[str]]] = {
    # the supervised CRF of the README, on the labeled sentences alone
    "supervised": ("tagger.yaml", ["--data.num_unlabeled=0"]),
    # the same CRF with the features learned from the unlabeled sentences (clusters, case
    # profiles), no unlabeled term
    "clusters": ("tagger.yaml", ["--data.word_clusters=[32, 128, 512]"]),
    # the two baselines trained to convergence (issue 17: a tolerance on the objective, not an
    # iteration cap): the same configs with the tolerance stop and a 100-epoch cap
    "supervised-converged": ("tagger.yaml", ["--data.num_unlabeled=0", *CONVERGED]),
    "clusters-converged": ("tagger.yaml", ["--data.word_clusters=[32, 128, 512]", *CONVERGED]),
    # the README's semi-supervised recipe as shipped: nabla-TSVM on top of those features
    "tsvm+clusters": ("tagger_ssl.yaml", []),
    # nabla-TSVM without the learned features
    "tsvm": ("tagger_ssl.yaml", ["--data.word_clusters=null"]),
    # the other semi-supervised procedures on the same features, CRF likelihood on the labeled
    # sentences: label switching with NER constraints (seed 003), Gamma-SSVM by CCCP with NER
    # constraints (seed 000), nabla-coSVM over two views (thesis OP 7.5)
    # (their configs name an UNLABELED.txt placeholder: here the untagged sentences are drawn
    # from esp.train, --data.num_unlabeled)
    "ls+clusters": ("tagger_ssl_label_switching.yaml", ["--data.unlabeled_file=null"]),
    "cccp+clusters": ("tagger_ssl_cccp.yaml", ["--data.unlabeled_file=null"]),
    "cosvm+clusters": ("tagger_ssl_cosvm.yaml", ["--data.unlabeled_file=null"]),
    # constraint-driven learning (Chang et al. 2007) with the same NER constraints
    "codl+clusters": ("tagger_ssl_codl.yaml", ["--data.unlabeled_file=null"]),
}


def method_name(name: str) -> str:
    """The JSON method name: ``structssl:<name>``, or the peer's own name."""
    return "sklearn-crfsuite" if name == "crfsuite" else f"structssl:{name}"


#: the labeled weight C of every structssl method is chosen on dev per draw from this grid
#: (``--c-grid``), as the peer's c2 from the same values (:func:`crfsuite_on_draw`)
C_GRID = (1.0, 10.0, 100.0)


#: a semi-supervised method keeps the C its base CRF chose on dev in the same draw (C_u is the
#: config's)
BASE_OF = {"tsvm+clusters": "clusters", "tsvm": "supervised", "ls+clusters": "clusters",
           "cccp+clusters": "clusters", "cosvm+clusters": "clusters", "codl+clusters": "clusters"}


def c_argument(name: str, c: float, args: argparse.Namespace) -> str:
    """The CLI override that sets a method's labeled weight to ``c`` in the convention of
    :class:`~structssl.training.modules.StructuredModule` (``C mean_i l_i``); CCCPModule
    weighs ``(C1 / n) mean_i l_i`` (seed 000's unnormalised sum), so ``C1 = C n``."""
    if METHODS[name][0] == "tagger_ssl_cccp.yaml":
        return f"--model.init_args.C1={c * args.labeled}"
    return f"--model.init_args.C={c}"


#: the init argument that weighs a semi-supervised method's unlabeled term (chosen on dev from
#: ``--cu-grid`` when given, else the config's): C_u, or CCCPModule's C2
UNLABELED_WEIGHT = {"tsvm+clusters": "Cu", "tsvm": "Cu", "ls+clusters": "Cu",
                    "cccp+clusters": "C2", "cosvm+clusters": "Cu", "codl+clusters": "Cu"}


def select_on_dev(name: str, args: argparse.Namespace, seed: int,
                  grid: Optional[list[float]] = None) -> dict[str, float]:
    """One method on one labeled draw: a run per ``C`` of ``grid`` (default ``args.c_grid``)
    and, for a semi-supervised method with ``args.cu_grid``, per unlabeled weight of that grid;
    the metrics of the run with the best dev span F1, with its ``C`` (and ``unlabeled_weight``)."""
    cu_grid: list[Optional[float]] = (
        list(args.cu_grid) if args.cu_grid and name in UNLABELED_WEIGHT else [None])
    best: dict[str, float] = {}
    for c in grid or args.c_grid:
        for cu in cu_grid:
            res = {**fit_and_test(name, args, seed, c, cu), "C": c}
            if cu is not None:
                res["unlabeled_weight"] = cu
            if not best or res["dev_f1"] > best["dev_f1"]:
                best = res
    return best


def fit_and_test(name: str, args: argparse.Namespace, seed: int, c: float,
                 cu: Optional[float] = None) -> dict[str, float]:
    """Run one method's config with labeled weight ``c`` (and unlabeled weight ``cu``, the
    config's when None) on one labeled draw through ``structssl fit``; dev and test metrics of
    its best dev checkpoint."""
    from structssl.cli import cli_main
    from structssl.training.checkpointing import BestCheckpoint

    config, extra = METHODS[name]
    extra = [*extra, c_argument(name, c, args)]
    if cu is not None:
        extra.append(f"--model.init_args.{UNLABELED_WEIGHT[name]}={cu}")
    data = args.data / "conll2002"
    with tempfile.TemporaryDirectory() as run_dir:
        if args.unlabeled_block:  # the tagged draw and the block as the user's own files
            tagged, untagged = write_block_draw(args, seed, Path(run_dir))
            draw = [f"--data.train_file={tagged}"]
            last = [f"--data.unlabeled_file={untagged}"]  # after the configs' own value
        else:
            draw = [f"--data.train_file={data / 'esp.train'}",
                    f"--data.num_labeled={args.labeled}", f"--data.num_unlabeled={args.unlabeled}"]
            last = []
        argv = [
            "fit", "--config", str(CONFIGS / config), *draw,
            f"--data.dev_file={data / 'esp.testa'}", f"--data.test_file={data / 'esp.testb'}",
            f"--data.seed={seed}", f"--seed_everything={seed}",
            f"--trainer.default_root_dir={run_dir}",
            "--trainer.enable_progress_bar=false", "--trainer.logger=false",
            "--trainer.enable_model_summary=false",
        ]
        if args.threads:
            argv.append(f"--num_threads={args.threads}")
        if args.max_dev:
            argv.append(f"--data.max_dev={args.max_dev}")
        if args.max_test:
            argv.append(f"--data.max_test={args.max_test}")
        start = time.perf_counter()
        cli = cli_main([*argv, *extra, *last])
        seconds = time.perf_counter() - start
        # test_after_fit scored the best dev checkpoint; its dev score next to it
        test = {k: float(v) for k, v in cli.trainer.callback_metrics.items()
                if k.startswith("test/")}
        best = next(cb.best_model_path for cb in cli.trainer.checkpoint_callbacks
                    if isinstance(cb, BestCheckpoint))
        (dev,) = cli.trainer.validate(cli.model, datamodule=cli.datamodule, ckpt_path=best,
                                      verbose=False)
    return {
        "dev_f1": 100 * dev["val/span_f1"], "test_f1": 100 * test["test/span_f1"],
        "test_precision": 100 * test["test/span_precision"],
        "test_recall": 100 * test["test/span_recall"],
        "test_entity_fraction": 100 * test["test/pred_fraction/entity"],
        "wall_s": seconds,
    }


@functools.lru_cache(maxsize=1)
def _train_sentences(path: Path) -> tuple[list[str], list[Any]]:
    """esp.train's lines per sentence (its POS column kept: dev and test have it too) and its
    sentences as the data module reads them (the pool ``split_pool`` indexes), read once for
    every fit of a run."""
    from structssl.data.tagging import TaggingFormat

    train = TaggingFormat().read_labeled(path)
    lines = [block.strip("\n") for block in path.read_text(encoding="utf-8").split("\n\n")]
    lines = [block for block in lines if block]
    if len(lines) != len(train):
        raise ValueError(f"{path}: {len(lines)} blank-line separated blocks, {len(train)} sentences")
    return lines, train


def write_block_draw(args: argparse.Namespace, seed: int, folder: Path) -> tuple[Path, Path]:
    """``--unlabeled-block``: the labeled draw of ``seed`` (the sentences ``split_pool`` gives
    the data module, so the draws pair with the random layout's; with ``--labeled-block``
    ``args.labeled`` consecutive sentences from a start drawn by the seed) as
    ``folder/tagged.conll``, and ``args.unlabeled`` consecutive other sentences of esp.train
    from a start drawn by the seed as ``folder/untagged.txt``."""
    from structssl.data.modules.base import split_pool

    lines, train = _train_sentences(args.data / "conll2002" / "esp.train")
    span = args.unlabeled + args.labeled
    if span > len(train):
        raise ValueError(f"--unlabeled {args.unlabeled} + --labeled {args.labeled} exceed the "
                         f"{len(train)} sentences of esp.train")
    gen = torch.Generator().manual_seed(seed)
    start = int(torch.randint(len(train) - span + 1, (1,), generator=gen))
    if args.labeled_block:
        first = int(torch.randint(len(train) - args.labeled + 1, (1,), generator=gen))
        labeled_ids = torch.arange(first, first + args.labeled)
    else:
        labeled_ids, _ = split_pool(len(train), num_labeled=args.labeled, seed=seed)
    labeled = set(labeled_ids.tolist())
    block = [i for i in range(start, len(train)) if i not in labeled][: args.unlabeled]
    tagged, untagged = folder / "tagged.conll", folder / "untagged.txt"
    tagged.write_text("".join(lines[i] + "\n\n" for i in labeled_ids.tolist()), encoding="utf-8")
    untagged.write_text("".join(
        "".join(f"{w}\n" for w in train[i].tokens) + "\n" for i in block), encoding="utf-8")
    return tagged, untagged


def crfsuite_on_draw(args: argparse.Namespace, seed: int) -> dict[str, float]:
    """The peer: sklearn-crfsuite on the same labeled draw (``split_pool`` with the data
    module's seed) and the same features as ``configs/tagger.yaml``, L-BFGS to its own
    convergence (at most 1,000 iterations), ``c2`` chosen on dev from the values equal to
    ``args.c_grid`` (crfsuite minimises ``sum_i l_i + c2 ||w||^2``, structssl
    ``||w||^2 / (2n) + C mean_i l_i``: the same minimiser at ``c2 = 1 / (2 C)``)."""
    from benchmarks.common import crfsuite_scores, crfsuite_tagger
    from structssl.data.modules.base import split_pool
    from structssl.data.tagging import TaggingFormat

    data = args.data / "conll2002"
    start = time.perf_counter()
    fmt = TaggingFormat()  # the features of configs/tagger.yaml
    train = fmt.read_labeled(data / "esp.train")
    labeled_ids, _ = split_pool(len(train), num_labeled=args.labeled, seed=seed)
    labeled = [train[i] for i in labeled_ids.tolist()]
    fmt.fit(train, labeled)
    dev = fmt.read_labeled(data / "esp.testa")[: args.max_dev]
    test = fmt.read_labeled(data / "esp.testb")[: args.max_test]
    best: tuple[float, Any, float] = (-1.0, None, 0.0)
    for c in args.c_grid:
        crf = crfsuite_tagger(fmt, labeled, c2=1 / (2 * c), max_iterations=1000)
        f1 = crfsuite_scores(crf, fmt, dev)["f1"]
        if f1 > best[0]:
            best = (f1, crf, c)
    scores = crfsuite_scores(best[1], fmt, test)
    return {
        "dev_f1": 100 * best[0], "test_f1": 100 * scores["f1"],
        "test_precision": 100 * scores["precision"], "test_recall": 100 * scores["recall"],
        "test_entity_fraction": float("nan"), "wall_s": time.perf_counter() - start,
        "C": best[2],
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--labeled", type=int, default=100)
    p.add_argument("--unlabeled", type=int, default=2000)
    p.add_argument("--unlabeled-block", action="store_true",
                   help="the untagged sentences are consecutive sentences of esp.train (a few "
                        "documents), not a random draw; the draws as files (module docstring)")
    p.add_argument("--labeled-block", action="store_true",
                   help="with --unlabeled-block: the tagged sentences consecutive too")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--c-grid", type=float, nargs="+", default=list(C_GRID),
                   help="labeled weights C chosen from on dev, per method and draw")
    p.add_argument("--cu-grid", type=float, nargs="+", default=None,
                   help="unlabeled weights (C_u; CCCP's C2) of the semi-supervised methods chosen "
                        "on dev per draw, their C fixed to their base CRF's (default: the config's)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads of every structssl fit (default: the config's)")
    p.add_argument("--max-dev", type=int, default=None)
    p.add_argument("--max-test", type=int, default=None)
    p.add_argument("--only", nargs="*", default=None, choices=[*METHODS, "crfsuite"],
                   help="method names to run (default: all)")
    p.add_argument("--data", type=Path, default=Path(
        os.environ.get("STRUCTSSL_DATA", Path(__file__).resolve().parents[2] / "shared" / "data")))
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--merge", action="store_true",
                   help="keep the other methods' draws already in the output JSON (a method "
                        "run now replaces its own)")
    args = p.parse_args(argv)
    if args.labeled_block and not args.unlabeled_block:
        p.error("--labeled-block needs --unlabeled-block (the draws written as files)")
    if args.labeled_block and "crfsuite" in (args.only or ["crfsuite"]):
        p.error("--labeled-block: the crfsuite peer trains on split_pool's draw; leave it out "
                "with --only")
    if args.quick:
        args.seeds = args.seeds[:1] if args.seeds != [0, 1, 2, 3, 4] else [0]
        args.max_dev = args.max_dev or 300
        args.max_test = args.max_test or 500
    warnings.filterwarnings("ignore")
    for name in ("pytorch_lightning", "lightning", "lightning.pytorch"):
        logging.getLogger(name).setLevel(logging.ERROR)
    stem = BENCH if args.labeled == 100 else f"{BENCH}_labeled{args.labeled}"
    out = args.out or (Path(__file__).resolve().parent / "results" /
                       (f"{stem}_quick.json" if args.quick else f"{stem}.json"))
    rows = load_rows(out) if args.merge and out.exists() else {}
    for name in args.only or [*METHODS, "crfsuite"]:
        rows.pop(name, None)
        for seed in args.seeds:
            base = {r["seed"]: r["C"] for r in rows.get(BASE_OF.get(name, ""), [])}
            grid = [base[seed]] if seed in base else None
            res = crfsuite_on_draw(args, seed) if name == "crfsuite" else select_on_dev(
                name, args, seed, grid)
            rows.setdefault(name, []).append({**res, "seed": seed})
            print(f"{name:22s} seed {seed}  " + "  ".join(
                f"{k} {v:6.2f}" for k, v in res.items()), flush=True)
            # after every draw: a stopped run leaves the draws it finished
            write_results(BENCH, *collect(rows, args), out)
    print("wrote", out)


#: the per-draw keys of a method's results, as named in the JSON records by :func:`collect`
_KEYS = ("dev_f1", "test_f1", "test_precision", "test_recall", "test_entity_fraction", "wall_s", "C",
         "unlabeled_weight")


def _metric(key: str) -> str:
    return key.replace("test_", "test/").replace("dev_", "dev/")


def load_rows(path: Path) -> dict[str, list[dict[str, float]]]:
    """The per-draw results of every method in a JSON written by :func:`collect` (the
    inverse of its per-draw records), to merge a run of some methods into it."""
    import json

    names = {method_name(name): name for name in [*METHODS, "crfsuite"]}
    rows: dict[str, dict[int, dict[str, float]]] = {}
    for rec in json.loads(path.read_text())["records"]:
        name = names.get(rec["method"])
        key = next((k for k in _KEYS if _metric(k) == rec["metric"]), None)
        if name is None or key is None:
            continue
        for seed, value in zip(rec["seeds"], rec["per_seed"]):
            rows.setdefault(name, {}).setdefault(int(seed), {"seed": int(seed)})[key] = value
    return {name: [{"test_entity_fraction": float("nan"), **r} for r in by_seed.values()]
            for name, by_seed in rows.items()}


def collect(rows: dict[str, list[dict[str, float]]],
            args: argparse.Namespace) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The JSON header and records of the draws in ``rows`` (method -> per-draw results with
    their ``seed``, in draw order): means, sd and per-draw values of every metric, and the gain
    over ``supervised`` on the draws both ran."""
    task = (f"conll2002-esp/labeled={args.labeled},unlabeled={args.unlabeled}"
            + (",block" if args.unlabeled_block else "")
            + (",labeled-block" if args.labeled_block else ""))
    records: list[dict[str, Any]] = []
    base = {r["seed"]: r for r in rows.get("supervised", [])}
    for name, runs in rows.items():
        seeds = [int(r["seed"]) for r in runs]
        config, extra_args = METHODS.get(name, ("", []))
        how = (f"configs/{config} {' '.join(extra_args)}".strip() if config else
               "sklearn-crfsuite, tagger.yaml's features, c2 = 1 / (2 C) with C on dev from "
               f"{args.c_grid}")
        for key, unit, better in zip(_KEYS, ("%", "%", "%", "%", "%", "s", "", ""),
                                     (True, True, True, True, None, False, None, None)):
            vals = [r.get(key, float("nan")) for r in runs]
            if any(v != v for v in vals):  # not measured (the peer's entity fraction, a
                # config's own unlabeled weight)
                continue
            mean, std = mean_std(vals)
            extra = {"std": round(std, 4)} if len(vals) > 1 else {}
            records.append(record(
                BENCH, task, method_name(name), _metric(key), mean, unit,
                better, len(vals),
                seeds=seeds, per_seed=[round(v, 4) for v in vals], config=how, **extra,
            ))
        paired = [(r, base[r["seed"]]) for r in runs if r["seed"] in base]
        if paired and name != "supervised":
            gains = [r["test_f1"] - b["test_f1"] for r, b in paired]
            mean, std = mean_std(gains)
            extra = {"std": round(std, 4)} if len(gains) > 1 else {}
            records.append(record(
                BENCH, task, method_name(name), "test/span_f1_gain_over_supervised",
                mean, "points", True, len(gains),
                seeds=[int(r["seed"]) for r, _ in paired], per_seed=[round(g, 4) for g in gains],
                **extra,
            ))
    head = header(torch.device("cpu"), "quick" if args.quick else "full", protocol=(
        f"CoNLL-2002 Spanish, {args.labeled} labeled + {args.unlabeled} unlabeled sentences of "
        f"esp.train (seeded draws {args.seeds}"
        + ("; the unlabeled ones consecutive, from a start drawn by the seed, the draws "
           "written as files: --data.train_file / --data.unlabeled_file" if args.unlabeled_block
           else "")
        + ("; the labeled ones consecutive too, from another start" if args.labeled_block else "")
        + f"), dev esp.testa (max {args.max_dev}), test "
        f"esp.testb (max {args.max_test}); each method's config run through structssl fit, "
        f"best dev checkpoint; the labeled weight C of every method chosen on dev from {args.c_grid} "
        "per draw (the semi-supervised procedures: their base CRF's C of the same draw"
        + (f"; the unlabeled weight C_u / C2 on dev from {args.cu_grid} for the methods run with "
           "--cu-grid (their unlabeled_weight records)" if args.cu_grid else "")
        + ")" + (
            "; scaled run" if args.quick or args.max_test or args.max_dev else "")
    ))
    return head, records


if __name__ == "__main__":
    main()
