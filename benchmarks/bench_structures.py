"""New structures side by side on CPU: the native SemiMarkov and DependencyTree vs torch-struct.

Same process, same potentials (each method gets them in its own layout, converted before the
timed region), medians over repeats: log Z forward + backward (the marginals' cost) and
argmax (labels). torch-struct 0.5's SemiMarkovCRF and DependencyCRF are called as their
documentation shows (a non-leaf input for DependencyCRF, which fails on leaves). Every case
first checks that both give the same log Z.

    python benchmarks/bench_structures.py --quick   # about a minute: results/structures_quick.json
    python benchmarks/bench_structures.py           # full mode: results/structures.json
    python benchmarks/bench_structures.py --ner     # CoNLL-2002 span F1, semi-Markov vs linear
                                                    # chain: results/structures_ner.json

``--ner`` trains ``configs/semi_markov_ner.yaml`` and the same configuration with a linear
chain (``LinearChain`` + ``LinearChainScorer``, everything else equal) through ``structssl fit``
(the CLI, a subprocess each) and reads test (esp.testb, tested on the best dev checkpoint)
and dev span F1 (the last epoch's value) from the runs' ``metrics.csv``. Needs ``$STRUCTSSL_DATA/conll2002`` (default ``../shared/data``).
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import header, markdown_table, median_ms, record, write_results  # noqa: E402

from structssl.structures import DependencyTree, SemiMarkov  # noqa: E402
from structssl.structures.torch_struct import (  # noqa: E402
    dependency_to_torch_struct,
    semi_markov_to_torch_struct,
)

BENCH = "structures"
CPU = torch.device("cpu")


# ---------------------------------------------------------------------- cases
def semi_markov_case(b: int, n: int, k: int, c: int) -> dict[str, Callable[[], Any]]:
    import torch_struct

    g = torch.Generator().manual_seed(0)
    native = torch.randn(b, n, k, c, c, generator=g)
    theirs = semi_markov_to_torch_struct(native)
    structure = SemiMarkov(k, num_segment_labels=c)

    def ts(x: torch.Tensor) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch_struct.SemiMarkovCRF(x)

    def native_fb() -> None:
        x = native.clone().requires_grad_()
        structure.log_partition(x).sum().backward()

    def ts_fb() -> None:
        x = theirs.clone().requires_grad_()
        ts(x * 1.0).partition.sum().backward()

    torch.testing.assert_close(
        structure.log_partition(native), ts(theirs.clone()).partition.detach(), rtol=1e-4, atol=1e-3
    )
    return {
        "structssl:SemiMarkov/logz_fwd_bwd": native_fb,
        "torch-struct:SemiMarkovCRF/logz_fwd_bwd": ts_fb,
        "structssl:SemiMarkov/argmax": lambda: structure.argmax(native),
        "torch-struct:SemiMarkovCRF/argmax": lambda: ts(theirs.clone()).argmax,
    }


def dependency_case(b: int, n: int) -> dict[str, Callable[[], Any]]:
    import torch_struct

    g = torch.Generator().manual_seed(0)
    native = torch.randn(b, n + 1, n + 1, generator=g)
    theirs = dependency_to_torch_struct(native)
    structure = DependencyTree()

    def ts(x: torch.Tensor) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch_struct.DependencyCRF(x)

    def native_fb() -> None:
        x = native.clone().requires_grad_()
        structure.log_partition(x).sum().backward()

    def ts_fb() -> None:
        x = theirs.clone().requires_grad_()
        ts(x * 1.0).partition.sum().backward()

    def ts_argmax() -> None:
        _ = ts(theirs.clone().requires_grad_() * 1.0).argmax

    torch.testing.assert_close(
        structure.log_partition(native),
        ts(theirs.clone().requires_grad_() * 1.0).partition.detach(),
        rtol=1e-4, atol=1e-3,
    )
    return {
        "structssl:DependencyTree/logz_fwd_bwd": native_fb,
        "torch-struct:DependencyCRF/logz_fwd_bwd": ts_fb,
        "structssl:DependencyTree/argmax": lambda: structure.argmax(native),
        "torch-struct:DependencyCRF/argmax": ts_argmax,
    }


QUICK = {
    "semi_markov": [(16, 20, 4, 5), (8, 40, 6, 5)],
    "dependency": [(16, 20), (8, 40)],
}
FULL = {
    "semi_markov": [(16, 20, 4, 5), (32, 50, 8, 5), (16, 100, 10, 5), (64, 30, 4, 9)],
    "dependency": [(32, 20), (32, 40), (16, 60), (8, 100)],
}


def run_timings(args: argparse.Namespace) -> list[dict[str, Any]]:
    sizes = QUICK if args.quick else FULL
    repeats = 3 if args.quick else 5
    records = []
    cases = [("semi_markov", s, semi_markov_case(*s)) for s in sizes["semi_markov"]]
    cases += [("dependency", s, dependency_case(*s)) for s in sizes["dependency"]]
    for family, size, methods in cases:
        names = ("B", "N", "K", "C") if family == "semi_markov" else ("B", "N")
        task = f"{family} " + " ".join(f"{k}={v}" for k, v in zip(names, size))
        for key, fn in methods.items():
            method, op = key.split("/")
            slow = method.startswith("torch-struct") and family == "semi_markov"
            reps = max(1, repeats - 2) if slow and not args.quick else repeats
            med, iqr = median_ms(fn, CPU, reps, warmup=1)
            records.append(record(BENCH, task, method, f"{op}_ms", med, "ms", False, reps,
                                  iqr_ms=round(iqr, 3)))
            print(f"{task:40s} {method:32s} {op:14s} {med:10.1f} ms (IQR {iqr:.1f})", flush=True)
    return records


# ---------------------------------------------------------------------- NER end to end
def _linear_chain_config(source: Path, target: Path) -> None:
    """The semi-Markov config with a linear chain and its scorer instead (nothing else)."""
    import yaml

    config = yaml.safe_load(source.read_text())
    config["model"]["init_args"]["structure"] = {"class_path": "structssl.structures.LinearChain"}
    config["model"]["init_args"]["scorer"] = {"class_path": "structssl.scorers.LinearChainScorer"}
    target.write_text(yaml.safe_dump(config, sort_keys=False))


def _fit(config: Path, root: Path) -> tuple[dict[str, float], float]:
    start = time.perf_counter()
    cmd = [str(Path(sys.executable).parent / "structssl"), "fit", "--config", str(config),
           "--trainer.default_root_dir", str(root)]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    (metrics,) = list(root.glob("lightning_logs/version_*/metrics.csv"))
    values: dict[str, float] = {}
    with metrics.open() as f:
        for row in csv.DictReader(f):
            for key, value in row.items():
                if value not in ("", None):
                    values[key] = float(value)  # the last logged value of each column
    return values, seconds


def run_ner() -> list[dict[str, Any]]:
    semi = ROOT / "configs" / "semi_markov_ner.yaml"
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        chain = Path(tmp) / "linear_chain_ner.yaml"
        _linear_chain_config(semi, chain)
        for method, config in (("structssl:SemiMarkov", semi), ("structssl:LinearChain", chain)):
            values, seconds = _fit(config, Path(tmp) / method.split(":")[1])
            task = "conll2002-esp ner (100 labeled + 500 unlabeled, nabla-SVM + nabla-TSVM)"
            for metric in ("test/span_f1", "test/span_precision", "test/span_recall",
                           "val/span_f1", "test/token_accuracy"):
                records.append(record(BENCH, task, method, metric, 100 * values[metric], "%",
                                      True, 1, config=str(config.name)))
            records.append(record(BENCH, task, method, "fit_and_test_seconds", seconds, "s",
                                  False, 1))
            print(f"{method:24s} test span F1 {100 * values['test/span_f1']:.2f} "
                  f"dev {100 * values['val/span_f1']:.2f} ({seconds:.0f} s)", flush=True)
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, 3 repeats (~1 min)")
    parser.add_argument("--ner", action="store_true", help="CoNLL-2002 span F1 (minutes)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    if args.ner:
        records = run_ner()
        path = write_results(f"{BENCH}_ner", header(CPU, "ner"), records)
        print(markdown_table(records, "test/span_f1"))
    else:
        records = run_timings(args)
        mode = "quick" if args.quick else "full"
        name = f"{BENCH}_quick" if args.quick else BENCH
        path = write_results(name, header(CPU, mode, note="shared machine"), records)
        for metric in ("logz_fwd_bwd_ms", "argmax_ms"):
            print(markdown_table(records, metric))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
