"""``structssl baselines``: train a QP / perceptron baseline on any of structssl's data modules.

The baselines run on the same data modules, structures and scorers as the Lightning
procedures, so a config of ``structssl fit`` carries over: give the ``data`` module, the
``structure`` and a *linear* ``scorer`` (its parameters become the weight vector ``w`` of a
:class:`~structssl.baselines.ScorerFeatureMap`), then a ``method``::

    structssl baselines --config configs/baselines/cutting_plane.yaml
    structssl baselines --config configs/baselines/cutting_plane.yaml --method perceptron
    structssl baselines --print_config            # every option

The baseline trains on the labeled training split (unlabeled data are not used by these
supervised baselines), is evaluated with the task's metrics (:func:`~structssl.metrics.task_metrics`)
on the dev and test splits, and prints one JSON object (also written to ``--output``): the
primal objective ``1/2 ||w||^2 + C sum_i hinge_i`` on the training split, the fit time, the
iterations and the metrics.
"""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from typing import Any, Literal, Optional, Sequence

import torch
from jsonargparse import ArgumentParser, ActionConfigFile
from torch import nn

from structssl.baselines.base import Baseline
from structssl.baselines.cutting_plane import CuttingPlaneSSVM
from structssl.baselines.feature_maps import ScorerFeatureMap
from structssl.baselines.perceptron import StructuredPerceptron
from structssl.data import SemiSupervisedDataModule
from structssl.data.modules.base import user_error
from structssl.metrics import Task, metric_scheme, task_metrics
from structssl.structures.base import Structure, resolve_sizes

__all__ = ["Method", "build_parser", "run", "main"]

Method = Literal["one_slack", "n_slack", "perceptron"]


def build_parser() -> ArgumentParser:
    """The parser of ``structssl baselines`` (``--config`` YAML, dotted overrides)."""
    parser = ArgumentParser(prog="structssl baselines", description=__doc__.split("\n")[0])
    parser.add_argument("--config", action=ActionConfigFile, help="YAML config file")
    parser.add_subclass_arguments(SemiSupervisedDataModule, "data", required=True)
    parser.add_subclass_arguments(Structure, "structure", required=True)
    parser.add_subclass_arguments(nn.Module, "scorer", required=True)
    parser.add_argument("--method", type=Method, default="one_slack")
    parser.add_argument("--C", type=float, default=0.1, help="loss weight (QP methods)")
    parser.add_argument("--rescaling", type=Literal["margin", "slack"], default="margin")
    parser.add_argument("--epsilon", type=float, default=1e-3, help="cutting-plane tolerance")
    parser.add_argument("--time_limit", type=Optional[float], default=None, help="seconds")
    parser.add_argument("--epochs", type=int, default=50, help="perceptron epochs")
    parser.add_argument(
        "--task", type=Optional[Task], default=None,
        help="metrics family (default: the data module's, as structssl fit takes it; else "
        "sequence)",
    )
    parser.add_argument(
        "--tags", type=Optional[list[str]], default=None,
        help="BIO tags (task bio; default: the data module's)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--num_threads", type=Optional[int], default=None,
        help="torch.set_num_threads(num_threads) before running (default: torch's); as "
        "structssl fit's option, so that fit_time_s compares with fit runs",
    )
    parser.add_argument("--output", type=Optional[str], default=None, help="JSON file to write")
    return parser


def _batch(data: SemiSupervisedDataModule, split: str) -> Optional[dict[str, Any]]:
    examples = data.splits[split]
    return data.collate(examples) if examples else None


def _evaluate(
    model: Baseline, batch: dict[str, Any], task: Task, tags: Optional[Sequence[str]], scheme: str
) -> dict[str, float]:
    metrics = task_metrics(task, tags=tags, scheme=scheme)
    pred = model.predict(batch["inputs"], batch.get("lengths"))
    metrics.update(pred, batch["labels"], lengths=batch.get("lengths"))
    return {name: float(value) for name, value in metrics.compute().items()}


def run(
    data: SemiSupervisedDataModule,
    structure: Structure,
    scorer: nn.Module,
    method: Method = "one_slack",
    C: float = 0.1,
    rescaling: str = "margin",
    epsilon: float = 1e-3,
    time_limit: Optional[float] = None,
    epochs: int = 50,
    task: Optional[Task] = None,
    tags: Optional[Sequence[str]] = None,
) -> dict[str, Any]:
    """Fit a baseline on ``data``'s labeled split and evaluate it on dev and test.

    The metrics are :func:`~structssl.metrics.task_metrics` of ``task`` and ``tags``, by default
    the data module's (``model_sizes()``; else ``sequence``), read in the tag scheme of its
    saved format (an IO or BIOES file is scored as ``structssl fit`` and ``predict`` score it).

    Returns:
        ``{"method", "num_labeled", "dim", "fit_time_s", "primal", "iterations", "dev",
        "test", ...}`` (``dev`` / ``test``: metric name -> value; absent for empty splits).

    Raises:
        ValueError: if the labeled split is empty or ``method`` is unknown.
    """
    train = _batch(data, "labeled")
    if train is None:
        raise ValueError("the data module's labeled split must not be empty; got 0 examples")
    sizes = data.model_sizes()
    resolve_sizes(sizes, structure, scorer)  # as a fit's setup takes them
    task = task or sizes.get("task") or "sequence"
    if task == "bio" and tags is None:
        tags = sizes.get("tags")
    saved_format = getattr(data, "saved_format", None)
    scheme = metric_scheme(saved_format()) if task == "bio" and saved_format else "bio"
    fmap = ScorerFeatureMap(scorer.double(), structure)
    x, y, lengths = train["inputs"], train["labels"], train.get("lengths")
    fmap.check_linear(x[:4], None if lengths is None else lengths[:4])
    start = time.perf_counter()
    out: dict[str, Any] = {"method": method}
    if method not in ("one_slack", "n_slack", "perceptron"):
        raise ValueError(f"method must be one of one_slack, n_slack, perceptron; got {method!r}")
    try:  # the options' values: refused on one line, named as the command line names them
        learner: Baseline = (
            StructuredPerceptron(fmap, epochs=epochs) if method == "perceptron"
            else CuttingPlaneSSVM(fmap, C=C, formulation=method, rescaling=rescaling,
                                  epsilon=epsilon, time_limit=time_limit)
        )
    except ValueError as err:
        raise user_error(f"--{err}") from None
    model = learner.fit(x, y, lengths)
    out["iterations"] = len(model.history_)
    if isinstance(model, CuttingPlaneSSVM):
        out.update(dual=model.dual_, converged=model.converged_)
    out.update(
        fit_time_s=time.perf_counter() - start,
        num_labeled=int(y.shape[0]),
        dim=fmap.dim,
        primal=model.objective(x, y, lengths, C=C),
    )
    if isinstance(model, CuttingPlaneSSVM) and not model.converged_:
        history = model.history_
        timed_out = time_limit is not None and bool(history) and history[-1]["time"] > time_limit
        stop = f"--time_limit {time_limit:g} s" if timed_out else f"its {model.max_iter} iterations"
        warnings.warn(
            f"structssl baselines: the cutting-plane QP stopped at {stop} before meeting "
            f"--epsilon {epsilon:g} (primal {out['primal']:.6g} at the weights returned, dual "
            f"{out['dual']:.6g}): the weights are not the QP's optimum, and the JSON says "
            "\"converged\": false (raise --time_limit, or --epsilon)",
            stacklevel=2,
        )
    for split in ("dev", "test"):
        batch = _batch(data, split)
        if batch is not None:
            out[split] = _evaluate(model, batch, task, tags, scheme)
    return out


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    """Parse ``argv`` (a config and overrides), run, print and return the JSON result."""
    parser = build_parser()
    cfg = parser.parse_args(argv)
    if cfg.num_threads is not None:
        if cfg.num_threads < 1:
            parser.error(f"--num_threads must be an int >= 1; got {cfg.num_threads}")
        torch.set_num_threads(cfg.num_threads)
    torch.manual_seed(cfg.seed)
    init = parser.instantiate(cfg)
    result = run(
        init.data, init.structure, init.scorer, cfg.method, cfg.C, cfg.rescaling, cfg.epsilon,
        cfg.time_limit, cfg.epochs, cfg.task, cfg.tags,
    )
    text = json.dumps(result, default=float)
    print(text)
    if cfg.output:
        Path(cfg.output).parent.mkdir(parents=True, exist_ok=True)
        Path(cfg.output).write_text(text + "\n")
    return result


if __name__ == "__main__":
    main()
