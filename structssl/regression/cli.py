"""Command line of chapter 4: ``structssl regression`` (coRLSR vs RLSR).

Runs the thesis's protocol (section 4.4.1) on one data set: inverse ``folds``-fold
cross-validation (one fold labeled, the other folds are the unlabeled data *and* the holdout
set), a random split of the attributes into ``views`` disjoint views redrawn per run, ``lam``
= 1/10, the Gaussian kernel and eta heuristics per view from the labeled fold, scaled RMSE.
Prints one line per method and optionally writes JSON.

Data (``--data``): ``diabetes`` or ``linnerud`` (bundled with scikit-learn, nothing is
downloaded), ``synthetic`` (:func:`make_multiview_regression`, natural views) or a CSV file
with a header row (``--target`` names the target column; every other column must be numeric).

Options come from the flags or a YAML file (``--config configs/corlsr/diabetes.yaml``; its
keys are the long flag names with ``_`` for ``-``), parsed by jsonargparse like every
``structssl`` subcommand; flags after ``--config`` override the file, ``--print_config`` shows
the resolved options. ``python -m structssl.regression`` is an alias. With
``--solver distributed`` the coRLSR methods run Algorithm 4.1 in one process per view
(``torch.distributed``, gloo on localhost) instead of the central closed form.

Example::

    structssl regression --data diabetes --runs 5
    structssl regression --config configs/corlsr/synthetic_distributed.yaml --solver direct
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Literal, Optional, Sequence

import torch
from jsonargparse import ActionConfigFile, ArgumentParser, Namespace
from torch import Tensor

from structssl.regression.corlsr import RLSR, CoRLSR
from structssl.regression.protocol import make_multiview_regression, random_views, scaled_rmse
from structssl.regression.kernels import check_finite, eta_heuristic

__all__ = ["METHODS", "build_parser", "inverse_cv", "load_data", "main", "parse_args"]

#: the methods of section 4.4 (``view-average`` is coRLSR with lam = 0)
METHODS = ("rlsr", "view-average", "corlsr-exact", "corlsr-semiparametric")
DATASETS = ("diabetes", "linnerud", "synthetic")


def build_parser() -> ArgumentParser:
    """The argument parser of ``structssl regression`` (jsonargparse; ``--config`` YAML)."""
    p = ArgumentParser(
        prog="structssl regression",
        description="coRLSR vs RLSR with the thesis's inverse cross-validation (chapter 4).",
    )
    p.add_argument("--config", action=ActionConfigFile,
                   help="YAML file of options (keys: the long flag names, '_' for '-')")
    p.add_argument("--data", type=str, default="diabetes",
                   help=f"one of {', '.join(DATASETS)}, or a CSV path (needs --target)")
    p.add_argument("--target", type=Optional[str], default=None,
                   help="target column of a CSV file")
    p.add_argument("--scaling", type=Literal["raw", "zscored"], default="raw",
                   help="attributes in their units, or z-scored over all rows (no targets used)")
    p.add_argument("--num-samples", type=int, default=400, help="synthetic data: examples")
    p.add_argument("--noise", type=float, default=0.5, help="synthetic data: view noise")
    p.add_argument("--methods", nargs="+", type=Literal[METHODS], default=list(METHODS),
                   help="methods to compare")
    p.add_argument("--views", type=int, default=2, help="random disjoint attribute views")
    p.add_argument("--lam", type=float, default=0.1, help="co-regularization weight")
    p.add_argument("--folds", type=int, default=10, help="inverse CV folds (1 labeled)")
    p.add_argument("--runs", type=int, default=1, help="runs (fresh folds and views each)")
    p.add_argument("--solver", type=Literal["direct", "bcd", "distributed"], default="direct",
                   help="coRLSR solver: closed form, Algorithm 4.1 in one process, or one "
                        "process per view over torch.distributed")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--out", type=Optional[Path], default=None,
                   help="write the results as JSON here")
    return p


def parse_args(argv: Optional[Sequence[str]] = None) -> Namespace:
    """Parse ``argv`` (default: ``sys.argv``); a ``--config`` YAML supplies options that later
    flags override. Bad options exit with the parser's usage error (status 2)."""
    return build_parser().parse_args(None if argv is None else list(argv))


def load_data(args: Namespace) -> tuple[Tensor, Tensor, Optional[list[list[int]]], str]:
    """(attributes (N, d), targets (N,), natural views or ``None``, description)."""
    if args.data == "synthetic":
        if args.views < 1:
            raise ValueError(f"--views must be >= 1; got {args.views}")
        x, y, views = make_multiview_regression(
            args.num_samples, view_dims=[5] * args.views, noise=args.noise, seed=args.seed
        )
        what = f"synthetic {args.num_samples} x {5 * args.views}, +3 target shift"
        return x, y + 3.0, views, what
    if args.data == "diabetes" and args.target is not None:  # diabetes has one target
        raise ValueError(f"--target {args.target!r} names a column of a CSV file (--data FILE.csv) "
                         "or a linnerud target; diabetes has one target")
    if args.data in ("diabetes", "linnerud"):
        try:
            from sklearn import datasets
        except ImportError:
            raise ValueError(f"--data {args.data} needs scikit-learn (pip install scikit-learn); "
                             "or use --data synthetic or a CSV file") from None
        if args.data == "diabetes":
            d = datasets.load_diabetes(scaled=False)
            x, y, what = d.data, d.target, "sklearn load_diabetes(scaled=False)"
        else:
            d = datasets.load_linnerud()
            names = list(d.target_names)
            target = args.target or names[0]
            if target not in names:
                raise ValueError(f"--target for linnerud must be one of {names}; got {target!r}")
            x, y, what = d.data, d.target[:, names.index(target)], f"sklearn load_linnerud/{target}"
        x = torch.tensor(x, dtype=torch.float64)
        y = torch.tensor(y, dtype=torch.float64)
    else:
        x, y, what = _read_csv(Path(args.data), args.target)
    check_finite(x, "attributes x")
    check_finite(y, "targets y")
    if args.scaling == "zscored":
        std = x.std(0)
        std[std == 0] = 1.0
        x = (x - x.mean(0)) / std
    return x, y, None, f"{what}, {args.scaling} attributes"


def _read_csv(path: Path, target: Optional[str]) -> tuple[Tensor, Tensor, str]:
    import csv

    if not path.is_file():
        raise FileNotFoundError(f"--data: no such data set or CSV file: {path}")
    if target is None:
        raise ValueError("--target is required with a CSV file")
    with path.open(newline="") as fh:
        reader = csv.reader(fh)
        rows = [(reader.line_num, r) for r in reader]
    rows = [(n, r) for n, r in rows if r and any(v.strip() for v in r)]  # blank lines skipped
    if len(rows) < 2:
        raise ValueError(f"{path}: needs a header row and at least one data row")
    head_line, header = rows[0]
    head = [h.strip() for h in header]  # documented: spaces around column names are dropped
    for c, h in enumerate(head):
        if not h:
            raise ValueError(f"{path}:{head_line}: column {c + 1} of the header has no name")
        if h in head[:c]:
            raise ValueError(
                f"{path}:{head_line}: expected distinct column names; {h!r} is both column "
                f"{head.index(h) + 1} and column {c + 1}"
            )
    if target not in head:
        raise ValueError(f"--target {target!r} is not a column of {path}: {head}")
    values = []
    for line, r in rows[1:]:
        if len(r) != len(head):
            raise ValueError(
                f"{path}:{line}: expected {len(head)} comma-separated values (as the header); "
                f"got {len(r)}"
            )
        out = []
        for c, v in enumerate(r):
            try:
                number = float(v)
            except ValueError:
                raise ValueError(
                    f"{path}:{line}: column {head[c]!r} must be numeric; got {v!r}"
                ) from None
            if not math.isfinite(number):
                what = "target" if head[c] == target else "attribute"
                raise ValueError(
                    f"{path}:{line}: {what} column {head[c]!r} must be a finite number; got {v!r} "
                    "(missing values are not supported: drop or impute the row)"
                )
            out.append(number)
        values.append(out)
    table = torch.tensor(values, dtype=torch.float64)
    col = head.index(target)
    keep = [c for c in range(len(head)) if c != col]
    return table[:, keep], table[:, col], f"{path.name} ({len(keep)} attributes, target {target})"


def _fit_predict(method: str, views: list[list[int]], xl: Tensor, yl: Tensor, xu: Tensor,
                 lam: float, solver: str) -> Tensor:
    if method == "rlsr":
        return RLSR(eta=eta_heuristic(xl)).fit(xl, yl).predict(xu)
    etas = [eta_heuristic(xl[:, c]) for c in views]
    if method == "view-average":
        return CoRLSR(views, lam=0.0, eta=etas, mode="semiparametric").fit(xl, yl).predict(xu)
    mode = "exact" if method == "corlsr-exact" else "semiparametric"
    if solver == "distributed":
        from structssl.regression.distributed import Site, spawn_local

        sites = [Site(xl[:, c], yl, xu[:, c]) for c in views]
        start = "fork" if sys.platform.startswith("linux") else "spawn"
        models = spawn_local(sites, lam=lam, mode=mode, etas=etas, start_method=start)
        return torch.stack([m.predict(xu[:, c]) for m, c in zip(models, views)]).mean(0)
    return CoRLSR(views, lam=lam, eta=etas, mode=mode,
                  solver="bcd" if solver == "bcd" else "direct").fit(xl, yl, xu).predict(xu)


def inverse_cv(x: Tensor, y: Tensor, natural_views: Optional[list[list[int]]],
               methods: Sequence[str], num_views: int = 2, lam: float = 0.1, folds: int = 10,
               runs: int = 1, seed: int = 0, solver: str = "direct") -> dict[str, list[float]]:
    """The thesis's protocol: per method the mean scaled RMSE over the folds of each run.

    Every run draws a fresh fold partition and (unless ``natural_views``) a fresh random
    split of the attributes into ``num_views`` views; fold ``k`` is labeled and the other
    folds are the unlabeled data and the holdout set (transductive).

    Shape:
        x: (N, d); y: (N,). Returns {method: [runs floats]}.
    """
    if not isinstance(x, Tensor) or x.dim() != 2 or not isinstance(y, Tensor) or y.shape != x.shape[:1]:
        got = (
            (tuple(x.shape), tuple(y.shape))
            if isinstance(x, Tensor) and isinstance(y, Tensor)
            else (type(x).__name__, type(y).__name__)
        )
        raise ValueError(f"x must be (N, d) and y (N,) tensors; got {got[0]} and {got[1]}")
    check_finite(x, "x")
    check_finite(y, "y")
    n, d = x.shape
    if not 2 <= folds <= n:
        raise ValueError(f"folds must be in [2, {n}] for {n} examples; got {folds}")
    if runs < 1:
        raise ValueError(f"runs must be >= 1; got {runs}")
    if natural_views is None and not 1 <= num_views <= d:
        raise ValueError(f"views must be in [1, {d}] for {d} attributes; got {num_views}")
    out: dict[str, list[float]] = {m: [] for m in methods}
    for r in range(runs):
        g = torch.Generator().manual_seed(seed + 7919 * r)
        perm = torch.randperm(n, generator=g)
        views = natural_views if natural_views is not None else random_views(d, num_views, g)
        parts = torch.tensor_split(perm, folds)
        scores: dict[str, list[float]] = {m: [] for m in methods}
        for k in range(folds):
            rest = torch.cat([parts[j] for j in range(folds) if j != k])
            xl, yl, xu, yu = x[parts[k]], y[parts[k]], x[rest], y[rest]
            for m in methods:
                scores[m].append(scaled_rmse(_fit_predict(m, views, xl, yl, xu, lam, solver), yu))
        for m in methods:
            out[m].append(sum(scores[m]) / len(scores[m]))
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``structssl regression`` (and ``python -m structssl.regression``);
    returns the exit status."""
    args = parse_args(argv)
    torch.set_num_threads(1)
    try:
        x, y, views, what = load_data(args)
        start = time.perf_counter()
        res = inverse_cv(x, y, views, args.methods, args.views, args.lam, args.folds, args.runs,
                         args.seed, args.solver)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{what}: {x.shape[0]} examples, inverse {args.folds}-fold CV, {args.runs} run(s), "
          f"lam={args.lam}, solver={args.solver}")
    summary: dict[str, Any] = {}
    for m, vals in res.items():
        mean = sum(vals) / len(vals)
        var = sum((v - mean) ** 2 for v in vals) / (len(vals) - 1) if len(vals) > 1 else 0.0
        std = math.sqrt(var)
        summary[m] = {"scaled_rmse": mean, "std": std, "runs": vals}
        print(f"  {m:24s} scaled RMSE {mean:.4f} ± {std:.4f}")
    print(f"({time.perf_counter() - start:.1f}s)")
    if args.out is not None:
        opts = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                if k != "config"}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"options": opts, "data": what, "results": summary},
                                       indent=1) + "\n")
    return 0
