"""The QP baseline's time through ``structssl baselines`` (the user's command), by how its
joint feature map ``Psi`` is computed.

    python benchmarks/bench_baselines.py --quick      # about a minute: results to the temp dir
    python benchmarks/bench_baselines.py              # full: writes results/baselines.json

Every run is ``structssl.baselines.__main__.main(["--config", CONFIG, ...])`` on a shipped
config (``configs/baselines/cutting_plane_ocr.yaml``: 100 OCR words, 4,082 weights;
``cutting_plane_conll.yaml``: 100 CoNLL-2002 sentences, 61,713 weights), one torch thread, with
``Psi`` of the scorer (``ScorerFeatureMap``):

* ``closed-form``: the default for ``LinearChainScorer`` (``ChainFeatureMap``'s counts);
* ``autograd-blocks-4``: the per-example gradients, batched backward passes over blocks of at
  most 4 examples (``MAX_BLOCK``; what any other linear scorer gets);
* ``autograd-one-block``: the same in blocks as large as ``BLOCK_ELEMENTS`` allows (the code
  before 2026-12-05), stopped at ``--time-limit`` seconds.

Records: fit seconds (median over ``--repeats``), iterations, seconds per iteration, whether the
QP converged, and its primal and dual (the same QP, so equal where both converge). Needs
``../shared/data``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Iterator

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import header, record, write_results  # noqa: E402

from structssl.baselines.__main__ import main as baselines_main  # noqa: E402
from structssl.baselines.feature_maps import ScorerFeatureMap  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "baselines"
TASKS = {"ocr": "cutting_plane_ocr.yaml", "conll": "cutting_plane_conll.yaml"}
MODES = ("closed-form", "autograd-blocks-4", "autograd-one-block")


@contextlib.contextmanager
def psi_mode(mode: str) -> Iterator[None]:
    """``ScorerFeatureMap`` computing ``Psi`` the way ``mode`` names."""
    closed, block = ScorerFeatureMap.__dict__["_closed_form"], ScorerFeatureMap.MAX_BLOCK
    if mode != "closed-form":
        no_closed_form = staticmethod(lambda scorer, structure: None)
        ScorerFeatureMap._closed_form = no_closed_form  # type: ignore[method-assign]
    if mode == "autograd-one-block":
        ScorerFeatureMap.MAX_BLOCK = 2**31
    try:
        yield
    finally:
        ScorerFeatureMap._closed_form = closed  # the staticmethod itself
        ScorerFeatureMap.MAX_BLOCK = block


def run(config: Path, mode: str, time_limit: float, extra: list[str]) -> dict[str, Any]:
    """One ``structssl baselines`` run (its printed JSON swallowed, its result returned)."""
    with psi_mode(mode), contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return baselines_main(["--config", str(config), "--time_limit", str(time_limit), *extra])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small runs, JSON to the temp dir")
    parser.add_argument("--repeats", type=int, default=3, help="runs per setting (median)")
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds per run")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    repeats, limit = (1, 10.0) if args.quick else (args.repeats, args.time_limit)
    extra = ["--data.init_args.num_labeled", "30"] if args.quick else []
    records = []
    for task, name in TASKS.items():
        for mode in MODES:
            runs = [run(CONFIGS / name, mode, limit, extra)
                    for _ in range(1 if mode == "autograd-one-block" else repeats)]
            fit = statistics.median(r["fit_time_s"] for r in runs)
            last = runs[-1]
            common = dict(config=f"configs/baselines/{name}", psi=mode, dim=last["dim"],
                          num_labeled=last["num_labeled"], iterations=last["iterations"],
                          converged=last["converged"], primal=last["primal"], dual=last["dual"],
                          seconds_per_iteration=fit / max(last["iterations"], 1),
                          time_limit_s=limit, fit_time_s_runs=[r["fit_time_s"] for r in runs])
            records.append(record("baselines", task, f"structssl:one-slack-qp:{mode}", "fit_time",
                                  fit, "s", False, len(runs), **common))
            print(f"{task:6s} {mode:20s} fit {fit:7.2f} s  {last['iterations']:4d} iterations "
                  f"({fit / max(last['iterations'], 1):.3f} s each)  converged {last['converged']}",
                  flush=True)
    command = "python benchmarks/bench_baselines.py" + (" --quick" if args.quick else "")
    head = header(torch.device("cpu"), "quick" if args.quick else "full",
                  protocol="structssl baselines on the shipped configs, one torch thread; "
                  f"{repeats} run(s) per setting (one for autograd-one-block), "
                  f"--time_limit {limit} s", invocations=[command])
    out = args.out or (Path(tempfile.gettempdir()) / "baselines_quick.json" if args.quick else None)
    print(write_results("baselines", head, records, out))


if __name__ == "__main__":
    main()
