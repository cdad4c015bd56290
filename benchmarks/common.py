"""Shared benchmark harness: timing medians, peak memory, the results schema and JSON output.

Every benchmark writes ``benchmarks/results/<name>.json``::

    {"header": {"machine": ..., "torch": ..., "device": ..., "git_commit": ..., ...},
     "records": [{"benchmark", "task", "method", "metric", "value", "unit",
                  "higher_is_better", "n_runs", ...}, ...]}

(the schema of ``DESIGN.md`` section 5; methods of our own start with ``structssl:``).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import torch

RESULTS = Path(__file__).resolve().parent / "results"


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_ms(
    fn: Callable[[], Any], device: torch.device, repeats: int, warmup: int = 2
) -> tuple[float, float]:
    """Median and interquartile range of ``fn``'s wall time in milliseconds."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append((time.perf_counter() - start) * 1000.0)
    q = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
    return statistics.median(times), q[2] - q[0]


def peak_memory_mb(fn: Callable[[], Any], device: torch.device) -> float:
    """Peak memory allocated by ``fn`` above what was allocated before it, in MB.

    CUDA: ``torch.cuda.max_memory_allocated``. CPU: the running sum of the allocations and
    frees recorded by the PyTorch profiler (``profile_memory=True``), in time order.
    """
    if device.type == "cuda":
        synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        synchronize(device)
        return (torch.cuda.max_memory_allocated(device) - base) / 1e6
    from torch.profiler import ProfilerActivity, profile

    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted(
        (e.time_range.start, e.self_cpu_memory_usage)
        for e in prof.events()
        if e.self_cpu_memory_usage
    )
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    return peak / 1e6


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence the profiler's start/stop lines, which its C++ side writes to fd 2."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=True, cwd=Path(__file__).parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def config_rounds(name: str) -> int:
    """Epochs after the supervised start in the shipped ``configs/<name>``: the trainer's
    ``max_epochs`` minus the model's ``supervised_epochs``."""
    import yaml

    config = yaml.safe_load((CONFIGS / name).read_text())
    return int(config["trainer"]["max_epochs"]) - int(config["model"]["init_args"]["supervised_epochs"])


def config_model_args(name: str) -> dict[str, Any]:
    """The model's ``init_args`` of the shipped ``configs/<name>``, its ``constraints`` (if
    any) instantiated as an unbound :class:`~structssl.constraints.ConstraintSet`: a benchmark
    reads a procedure's settings from the config a user runs, so the two cannot drift apart."""
    import yaml
    from jsonargparse import ArgumentParser

    from structssl.constraints import ConstraintSet

    args = dict(yaml.safe_load((CONFIGS / name).read_text())["model"]["init_args"])
    if "constraints" in args:
        parser = ArgumentParser(exit_on_error=False)
        parser.add_argument("--constraints", type=ConstraintSet)
        spec = {"constraints": args["constraints"]}
        args["constraints"] = parser.instantiate(parser.parse_object(spec)).constraints
    return args


def header(device: torch.device, mode: str, **extra: Any) -> dict[str, Any]:
    info: dict[str, Any] = {
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": str(device),
        "git_commit": git_commit(),
        "mode": mode,
        "date": time.strftime("%Y-%m-%d"),
    }
    if device.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(device)
    info.update(extra)
    return info


def record(
    benchmark: str,
    task: str,
    method: str,
    metric: str,
    value: float,
    unit: str,
    higher_is_better: bool,
    n_runs: int,
    **extra: Any,
) -> dict[str, Any]:
    out = {
        "benchmark": benchmark, "task": task, "method": method, "metric": metric,
        "value": round(float(value), 4), "unit": unit, "higher_is_better": higher_is_better,
        "n_runs": n_runs,
    }
    out.update(extra)
    return out


def write_results(
    name: str, head: dict[str, Any], records: list[dict[str, Any]], path: Optional[Path] = None
) -> Path:
    path = path or RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"header": head, "records": records}, indent=1) + "\n")
    return path


def _fmt(value: Any) -> str:
    """A table cell: two decimals for numbers, "–" for a missing or undefined value."""
    if isinstance(value, (int, float)) and value == value:
        return f"{value:.2f}"
    return "–" if value is None else str(value)


def mean_std(values: Any) -> tuple[float, float]:
    """Mean and sample standard deviation of the repeats (0 for a single value)."""
    values = [float(v) for v in values]
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def paper_value(rec: dict[str, Any]) -> Optional[float]:
    """The published number a record reproduces (``paper_value``), or None."""
    value = rec.get("paper_value")
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
    return float(value) if ok else None


def shortfall(rec: dict[str, Any]) -> Optional[float]:
    """How far a reproduced cell falls short of its paper value, in the record's
    ``higher_is_better`` direction (negative: better than the paper); NaN without a value of
    ours, None for a record without a paper value."""
    paper, value = paper_value(rec), rec.get("value")
    if paper is None:
        return None
    if not isinstance(value, (int, float)) or value != value:
        return float("nan")
    return paper - value if rec.get("higher_is_better", True) is not False else value - paper


def within_paper(rec: dict[str, Any], points: float = 2.0) -> Optional[bool]:
    """Whether a reproduced cell is within ``points`` of its paper value or better (in the
    record's ``higher_is_better`` direction); None for a record without a paper value."""
    gap = shortfall(rec)
    return None if gap is None else gap <= points  # NaN (no value of ours): False


def markdown_table(records: list[dict[str, Any]], metric: str) -> str:
    """A task x method table of one metric (median time or memory); a cell that reproduces a
    published number shows it beside ours: ``ours (paper)``."""
    rows = [r for r in records if r["metric"] == metric]
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    cell = {(r["task"], r["method"]): r for r in rows}
    unit = rows[0]["unit"] if rows else ""
    papers = any(paper_value(r) is not None for r in rows)
    lines = [f"| task ({metric}, {unit}{'; paper in parentheses' if papers else ''}) | "
             + " | ".join(methods) + " |", "|---" * (len(methods) + 1) + "|"]
    for t in tasks:
        vals = []
        for m in methods:
            rec = cell.get((t, m))
            text = _fmt(None if rec is None else rec["value"])
            if rec is not None and paper_value(rec) is not None:
                text += f" ({_fmt(paper_value(rec))})"
            vals.append(text)
        lines.append(f"| {t} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def crfsuite_tagger(fmt: Any, sentences: list[Any], c2: float = 1.0,
                    max_iterations: int = 100) -> Any:
    """sklearn-crfsuite (L-BFGS, ``c1 = 0``, ``c2``) trained on the feature strings a fitted
    :class:`~structssl.data.tagging.TaggingFormat` gives ``sentences``: the peer CRF on exactly
    structssl's features. L-BFGS stops on crfsuite's own tolerance or ``max_iterations``."""
    import sklearn_crfsuite

    crf = sklearn_crfsuite.CRF(algorithm="lbfgs", c1=0.0, c2=c2, max_iterations=max_iterations)
    crf.fit([crfsuite_features(fmt, s) for s in sentences], [list(s.labels) for s in sentences])
    return crf


def crfsuite_features(fmt: Any, sentence: Any) -> list[dict[str, float]]:
    """One sentence's feature strings (``fmt.extractor``) as crfsuite's feature dicts."""
    return [{f: 1.0 for f in row} for row in fmt.extractor.strings(sentence)]


def crfsuite_scores(crf: Any, fmt: Any, sentences: list[Any]) -> dict[str, float]:
    """Span F1, precision and recall (structssl's :class:`~structssl.metrics.SpanF1`) of a
    crfsuite tagger on tagged sentences."""
    from structssl.metrics import SpanF1

    index = {t: i for i, t in enumerate(fmt.tags)}
    metric = SpanF1(fmt.tags, output="all")
    predicted = crf.predict([crfsuite_features(fmt, s) for s in sentences])
    for p, s in zip(predicted, sentences):
        metric.update(torch.tensor([[index[t] for t in p]]),
                      torch.tensor([[index[t] for t in s.labels]]))
    return {k: float(v) for k, v in metric.compute().items()}
