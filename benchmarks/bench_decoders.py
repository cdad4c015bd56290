"""Decoder benchmark: structssl vs torch-struct vs pytorch-crf vs plain batched loops.

Same process, same inputs, medians over repeats of wall time and of CPU time (the CPU time is
the steadier measure on a shared machine), and profiler peak memory. Chains: log-partition
forward, forward+backward (marginals), Viterbi with labels, 5-best, at the target sizes and on
a scaling grid (T 30..480, C 5..50, B 1..256, the other two at B=256, T=120, C=12). CKY: inside
(forward, forward+backward) and argmax. Multi-label: exact enumeration vs dual decomposition.

    python benchmarks/bench_decoders.py --quick          # about a minute on 2 CPU cores
    python benchmarks/bench_decoders.py                  # full mode, writes results/decoders.json
    python benchmarks/bench_decoders.py --device cuda    # adds B=1024, T=128, C=32 chains

Each method starts from the same factored inputs (unary, transition, start, end); building a
method's own potentials layout is inside its timed region. ``structssl`` is LinearChain on
factored potentials (``ChainPotentials.from_factors``), ``structssl:edges`` the same
operations on the (B, N, C, C) layout (``LinearChain.potentials_from``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import header, markdown_table, peak_memory_mb, record, synchronize, write_results  # noqa: E402

from structssl.structures import ChainPotentials, LinearChain  # noqa: E402

BENCH = "decoders"


# ---------------------------------------------------------------------- plain batched loop
def loop_log_partition(unary: torch.Tensor, transition: torch.Tensor, start: torch.Tensor,
                       end: torch.Tensor) -> torch.Tensor:
    """The textbook forward algorithm on factored potentials (the reference loop)."""
    alpha = start + unary[:, 0]  # (B, C)
    for t in range(1, unary.shape[1]):
        alpha = torch.logsumexp(alpha.unsqueeze(2) + transition + unary[:, t].unsqueeze(1), dim=1)
    return torch.logsumexp(alpha + end, dim=1)


def loop_expmm_log_partition(unary: torch.Tensor, transition: torch.Tensor, start: torch.Tensor,
                             end: torch.Tensor) -> torch.Tensor:
    """The exp-matmul forward loop: one matrix product with the shared exp(transitions) per
    step, rescaled by the running max (not exact at extreme scales; a speed reference)."""
    weights = transition.exp()
    alpha = start + unary[:, 0]
    for t in range(1, unary.shape[1]):
        shift = alpha.amax(dim=1, keepdim=True)
        alpha = torch.log(torch.exp(alpha - shift) @ weights) + shift + unary[:, t]
    return torch.logsumexp(alpha + end, dim=1)


def loop_viterbi(unary: torch.Tensor, transition: torch.Tensor, start: torch.Tensor,
                 end: torch.Tensor) -> torch.Tensor:
    """Max-product loop with tensor backtracking (the reference Viterbi)."""
    b, n, _ = unary.shape
    alpha = start + unary[:, 0]
    pointers = []
    for t in range(1, n):
        alpha, arg = (alpha.unsqueeze(2) + transition + unary[:, t].unsqueeze(1)).max(dim=1)
        pointers.append(arg)
    labels = torch.empty(b, n, dtype=torch.long, device=unary.device)
    labels[:, -1] = (alpha + end).argmax(dim=1)
    for t in range(n - 2, -1, -1):
        labels[:, t] = pointers[t].gather(1, labels[:, t + 1 : t + 2]).squeeze(1)
    return labels


# ---------------------------------------------------------------------- chain methods
#: methods timed once, without warm-up (each call takes many seconds)
SLOW = {("kbest5", "torch-struct")}


def chain_methods(c: int, device: torch.device, quick: bool, grid: bool = False
                  ) -> dict[str, dict[str, Callable[..., Any]]]:
    """task -> method -> fn(unary, transition, start, end). ``grid``: the scaling grid's set
    (no edge-layout variants of our own, no torch-struct: 13-45x slower than a loop)."""
    ours = LinearChain(c, validate=False)
    ours_mm = LinearChain(c, validate=False, log_kernel="expmm")

    def fac(u: torch.Tensor, a: torch.Tensor, s: torch.Tensor, e: torch.Tensor) -> ChainPotentials:
        return ChainPotentials.from_factors(u, a, s, e)

    methods: dict[str, dict[str, Callable[..., Any]]] = {
        "logZ": {
            "structssl": lambda u, a, s, e: ours.log_partition(fac(u, a, s, e)),
            "plain-loop": loop_log_partition,
            "exp-matmul-loop": loop_expmm_log_partition,
        },
        "viterbi": {
            "structssl": lambda u, a, s, e: ours.argmax(fac(u, a, s, e))[0],
            "plain-loop": loop_viterbi,
        },
        "kbest5": {
            "structssl": lambda u, a, s, e: ours.kbest(fac(u, a, s, e), 5)[0],
        },
    }
    if not grid:
        methods["logZ"]["structssl:edges"] = lambda u, a, s, e: ours.log_partition(ours.potentials_from(u, a, s, e))
        methods["logZ"]["structssl:edges-expmm"] = lambda u, a, s, e: ours_mm.log_partition(ours_mm.potentials_from(u, a, s, e))
        methods["viterbi"]["structssl:edges"] = lambda u, a, s, e: ours.argmax(ours.potentials_from(u, a, s, e))[0]
        methods["kbest5"]["structssl:edges"] = lambda u, a, s, e: ours.kbest(ours.potentials_from(u, a, s, e), 5)[0]
    try:
        if grid:
            raise ImportError
        import torch_struct

        torch_struct.LinearChainCRF.arg_constraints = {}  # silences harvardnlp/pytorch-struct#120

        def ts_edges(u: torch.Tensor, a: torch.Tensor, s: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
            edges = u[:, 1:, :, None] + a.T  # (B, N - 1, C_next, C_prev)
            first = (u[:, 0] + s)[:, None, None, :]
            last = e[None, None, :, None]
            pad = torch.zeros_like(edges[:, :1])
            return edges + torch.cat([first + pad, torch.zeros_like(edges[:, 1:])], 1) + torch.cat(
                [torch.zeros_like(edges[:, :-1]), last + pad], 1)

        def ts_argmax(u: torch.Tensor, a: torch.Tensor, s: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
            parts = torch_struct.LinearChainCRF(ts_edges(u, a, s, e)).argmax  # (B, N-1, C, C)
            first = parts[:, 0].sum(1).argmax(-1, keepdim=True)  # C_prev of the first edge
            return torch.cat([first, parts.sum(-1).argmax(-1)], dim=1)

        methods["logZ"]["torch-struct"] = lambda u, a, s, e: torch_struct.LinearChainCRF(ts_edges(u, a, s, e)).partition
        methods["viterbi"]["torch-struct"] = ts_argmax
        if not quick:  # seconds per call: full mode only, few repeats (SLOW)
            methods["kbest5"]["torch-struct"] = lambda u, a, s, e: torch_struct.LinearChainCRF(ts_edges(u, a, s, e)).topk(5)
    except ImportError:
        if not grid:
            print("torch-struct not installed: skipped", file=sys.stderr)
    try:
        import torchcrf

        crf = torchcrf.CRF(c, batch_first=True).to(device)

        def crf_set(a: torch.Tensor, s: torch.Tensor, e: torch.Tensor) -> None:
            with torch.no_grad():
                crf.transitions.copy_(a)
                crf.start_transitions.copy_(s)
                crf.end_transitions.copy_(e)

        def crf_logz(u: torch.Tensor, a: torch.Tensor, s: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
            crf_set(a, s, e)
            mask = torch.ones(u.shape[:2], dtype=torch.bool, device=u.device)
            return crf._compute_normalizer(u.transpose(0, 1), mask.transpose(0, 1))

        def crf_decode(u: torch.Tensor, a: torch.Tensor, s: torch.Tensor, e: torch.Tensor) -> list[list[int]]:
            crf_set(a, s, e)
            return crf.decode(u, mask=torch.ones(u.shape[:2], dtype=torch.bool, device=u.device))

        methods["logZ"]["pytorch-crf"] = crf_logz
        methods["viterbi"]["pytorch-crf"] = crf_decode
    except ImportError:
        print("pytorch-crf not installed: skipped", file=sys.stderr)
    return methods


def bench_chains(sizes: list[tuple[int, int, int]], device: torch.device, repeats: int,
                 records: list[dict[str, Any]], quick: bool, grid: bool = False) -> None:
    """Time every chain method on random N(0, 1) factors of each size (``grid``: the scaling
    grid's methods, no memory profile, the forward-only log Z skipped)."""
    for b, n, c in sizes:
        g = torch.Generator().manual_seed(0)
        inputs = [torch.randn(*shape, generator=g).to(device)
                  for shape in ((b, n, c), (c, c), (c,), (c,))]
        task_size = f"B={b},T={n},C={c}"
        methods = chain_methods(c, device, quick, grid)
        reference = loop_log_partition(*[x.double() for x in inputs])
        ref_labels = loop_viterbi(*inputs)
        for task, fns in methods.items():
            for method, fn in fns.items():
                if task in ("logZ", "viterbi") or (task == "kbest5" and method.startswith("structssl")):
                    _check(task, method, fn, inputs, reference, ref_labels)
                slow = (task, method) in SLOW
                try:
                    if not (grid and task == "logZ"):
                        name = "logZ fwd" if task == "logZ" else task
                        _measure(f"chain {name}/{task_size}", method, lambda: fn(*inputs), device,
                                 1 if slow else repeats, records, warmup=0 if slow else 2,
                                 memory=not grid)
                    if task == "logZ":
                        leaf = inputs[0].clone().requires_grad_()

                        def fwd_bwd(fn: Callable[..., Any] = fn, leaf: torch.Tensor = leaf) -> Any:
                            return torch.autograd.grad(fn(leaf, *inputs[1:]).sum(), leaf)

                        _measure(f"chain logZ fwd+bwd/{task_size}", method, fwd_bwd, device,
                                 repeats, records, memory=not grid)
                except torch.OutOfMemoryError as err:  # a peer's dense chart (torch-struct k-best)
                    torch.cuda.empty_cache()
                    print(f"chain {task}/{task_size} {method}: out of memory, not timed "
                          f"({str(err).splitlines()[0]})", flush=True)
                    records.append(record(BENCH, f"chain {task}/{task_size}", method,
                                          "out_of_memory", 1, "flag", False, 0, device=str(device)))


def _check(task: str, method: str, fn: Callable[..., Any], inputs: list[torch.Tensor],
           reference: torch.Tensor, ref_labels: torch.Tensor) -> None:
    """Every method must agree with the float64 reference before it is timed."""
    with torch.no_grad():
        out = fn(*inputs)
    if task == "logZ":
        err = (out.double() - reference).abs().max().item()
        if err > 1e-2:
            raise AssertionError(f"{method} logZ differs from the float64 loop by {err}")
    elif task == "viterbi":
        # the same path, or (a float32 near-tie: different summation orders round differently)
        # a path whose float64 score equals the reference path's to rounding
        labels = torch.as_tensor(out, device=ref_labels.device)
        if not torch.equal(labels, ref_labels):
            double = [x.double() for x in inputs]
            got, want = _path_score(double, labels), _path_score(double, ref_labels)
            n = labels.shape[1]
            tol = 4 * n * torch.finfo(inputs[0].dtype).eps * want.abs().clamp(min=1.0)
            if bool((got < want - tol).any()):
                raise AssertionError(f"{method} Viterbi paths score below the reference loop's")
    elif task == "kbest5":
        # distinct paths, rank 0 as good as the reference Viterbi path, float64 scores sorted
        # (up to float32 near-ties)
        labels = torch.as_tensor(out, device=ref_labels.device)  # (B, k, T)
        b, k, n = labels.shape
        double = [x.double() for x in inputs]
        scores = _path_score([double[0].repeat_interleave(k, 0), *double[1:]], labels.flatten(0, 1)).view(b, k)
        want = _path_score(double, ref_labels)
        tol = 4 * n * torch.finfo(inputs[0].dtype).eps * want.abs().clamp(min=1.0)
        same = (labels.unsqueeze(1) == labels.unsqueeze(2)).all(-1) & ~torch.eye(k, dtype=torch.bool, device=labels.device)
        if bool(same.any()):
            raise AssertionError(f"{method} k-best paths are not distinct")
        if bool((scores[:, 0] < want - tol).any()) or bool((scores[:, 1:] > scores[:, :-1] + tol.unsqueeze(1)).any()):
            raise AssertionError(f"{method} k-best scores are not the best, or not sorted")


def median_wall_cpu_ms(fn: Callable[[], Any], device: torch.device, repeats: int, warmup: int = 2
                       ) -> tuple[float, float, float]:
    """Medians of wall time and of CPU time (this process, all threads) in ms, and the wall
    time's interquartile range. On a CPU shared with other jobs the CPU time leaves out the
    time this process waited for a core."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    wall, cpu = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        synchronize(device)
        wall.append((time.perf_counter() - w0) * 1000.0)
        cpu.append((time.process_time() - c0) * 1000.0)
    q = statistics.quantiles(wall, n=4) if len(wall) > 1 else [wall[0]] * 3
    return statistics.median(wall), statistics.median(cpu), q[2] - q[0]


def _path_score(inputs: list[torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
    """Score (B,) of label paths under (unary, transition, start, end)."""
    unary, transition, start, end = inputs
    emit = unary.gather(2, labels.unsqueeze(2)).squeeze(2).sum(1)
    trans = transition[labels[:, :-1], labels[:, 1:]].sum(1)
    return emit + trans + start[labels[:, 0]] + end[labels[:, -1]]


def _measure(task: str, method: str, fn: Callable[[], Any], device: torch.device, repeats: int,
             records: list[dict[str, Any]], warmup: int = 2, memory: bool = True) -> None:
    ms, cpu_ms, iqr = median_wall_cpu_ms(fn, device, repeats, warmup)
    records.append(record(BENCH, task, method, "time", ms, "ms", False, repeats, iqr=round(iqr, 3),
                          device=str(device)))
    if device.type == "cpu":
        records.append(record(BENCH, task, method, "cpu_time", cpu_ms, "ms", False, repeats,
                              device=str(device)))
    line = f"{task:45s} {method:22s} {ms:9.2f} ms  cpu {cpu_ms:9.2f} ms"
    if memory:
        mem = peak_memory_mb(fn, device)
        records.append(record(BENCH, task, method, "peak_memory", mem, "MB", False, 1, device=str(device)))
        line += f"  {mem:8.1f} MB"
    print(line, flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes and few repeats (~1 min on CPU)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per cell")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--no-grid", action="store_true", help="skip the chain scaling grid")
    parser.add_argument("--output", type=Path, default=None, help="JSON path (default results/decoders.json, "
                        "results/decoders_quick.json with --quick)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    repeats = args.repeats or (5 if args.quick else 21)
    if args.quick:
        chain_sizes = [(64, 50, 13)]
    else:
        chain_sizes = [(64, 50, 13), (256, 120, 12)]
        if device.type == "cuda":
            chain_sizes.append((1024, 128, 32))
    records: list[dict[str, Any]] = []
    warnings.filterwarnings("ignore", category=UserWarning, module="torch_struct")
    bench_chains(chain_sizes, device, repeats, records, args.quick)
    if not args.no_grid:
        bench_chains(grid_sizes(args.quick), device, max(3, repeats // 4), records, args.quick, grid=True)
    for extra in EXTRA_SECTIONS:
        extra(args.quick, device, repeats, records)
    mode = "quick" if args.quick else "full"
    default = f"{BENCH}_quick" if args.quick else (BENCH if device.type == "cpu" else f"{BENCH}_{device.type}")
    path = write_results(default, header(device, mode), records, args.output)
    print(f"\nwrote {path}\n")
    print(markdown_table(records, "time"))
    print()
    if any(r["metric"] == "cpu_time" for r in records):
        print(markdown_table(records, "cpu_time"))
        print()
    print(markdown_table(records, "peak_memory"))


def bench_cky(quick: bool, device: torch.device, repeats: int, records: list[dict[str, Any]]) -> None:
    """CKY inside and argmax vs torch-struct's SentCFG on the same grammar.

    Our CKY(NT) lets every symbol be a leaf or an inner node; SentCFG(NT, T = NT) with
    ``rules[A, B', C'] = rules[A, B' mod NT, C' mod NT]`` is exactly the same model for N >= 2.
    """
    from structssl.structures import CKY

    b, n, nt = (8, 15, 10) if quick else (32, 30, 10)
    g = torch.Generator().manual_seed(0)
    terms = torch.randn(b, n, nt, generator=g).to(device)
    rules = torch.randn(nt, nt, nt, generator=g).to(device)
    roots = torch.randn(nt, generator=g).to(device)
    lengths = torch.full((b,), n, dtype=torch.long, device=device)
    ours = CKY(nt, validate=False)
    size = f"B={b},N={n},NT={nt}"

    def ours_logz(t: torch.Tensor) -> torch.Tensor:
        return ours.log_partition(ours.potentials_from(t, rules, roots), lengths)

    methods: dict[str, dict[str, Callable[[torch.Tensor], Any]]] = {
        "logZ": {"structssl": ours_logz},
        "argmax": {"structssl": lambda t: ours.argmax(ours.potentials_from(t, rules, roots), lengths)[0]},
    }
    try:
        import torch_struct

        torch_struct.SentCFG.arg_constraints = {}
        index = torch.arange(2 * nt, device=device) % nt

        def sent_cfg(t: torch.Tensor) -> Any:
            full = rules[:, index][:, :, index].expand(b, nt, 2 * nt, 2 * nt)
            return torch_struct.SentCFG((t, full, roots.expand(b, nt)), lengths=lengths)

        methods["logZ"]["torch-struct"] = lambda t: sent_cfg(t).partition
        methods["argmax"]["torch-struct"] = lambda t: sent_cfg(t).argmax
        err = (sent_cfg(terms).partition - ours_logz(terms)).abs().max().item()
        if err > 1e-2:
            raise AssertionError(f"torch-struct SentCFG and structssl CKY disagree by {err}")
    except ImportError:
        print("torch-struct not installed: skipped", file=sys.stderr)
    for task, fns in methods.items():
        for method, fn in fns.items():
            _measure(f"cky {task} fwd/{size}", method, lambda fn=fn: fn(terms), device, repeats, records)
            if task == "logZ":
                leaf = terms.clone().requires_grad_()

                def fwd_bwd(fn: Callable[[torch.Tensor], Any] = fn) -> Any:
                    return torch.autograd.grad(fn(leaf).sum(), leaf)

                _measure(f"cky logZ fwd+bwd/{size}", method, fwd_bwd, device, repeats, records)


def bench_multilabel(quick: bool, device: torch.device, repeats: int,
                     records: list[dict[str, Any]]) -> None:
    """Exact argmax by enumeration vs dual decomposition over star trees (seed 004 sec. 4.1)."""
    from structssl.structures import PairwiseMultiLabel

    for k in (6,) if quick else (6, 14):
        b = 256
        g = torch.Generator().manual_seed(0)
        unary = torch.randn(b, k, generator=g).to(device)
        pairwise = (0.5 * torch.randn(b, k, k, generator=g)).to(device)
        structure = PairwiseMultiLabel(k, validate=False)
        potentials = structure.potentials_from(unary, pairwise)
        task = f"multilabel argmax/B={b},K={k}"
        _measure(task, "structssl:exact", lambda: structure.argmax(potentials), device, repeats, records)
        _measure(task, "structssl:dual-decomposition",
                 lambda: structure.dual_decomposition_argmax(potentials), device, max(3, repeats // 4), records)
        _measure(f"multilabel logZ fwd/B={b},K={k}", "structssl:exact",
                 lambda: structure.log_partition(potentials), device, repeats, records)
        exact, exact_score = structure.argmax(potentials)
        result = structure.dual_decomposition_argmax(potentials)
        same = (result.labels == exact).all(dim=1).float().mean().item() * 100
        records.append(record(BENCH, task, "structssl:dual-decomposition", "exact_argmax_agreement",
                              same, "%", True, 1, device=str(device)))
        records.append(record(BENCH, task, "structssl:dual-decomposition", "mean_duality_gap",
                              result.gap.mean().item(), "score", False, 1, device=str(device),
                              iterations=result.iterations))
        print(f"{task:45s} dual decomposition agrees with exact on {same:.1f}% "
              f"(mean gap {result.gap.mean().item():.4f}, {result.iterations} iterations)")


def grid_sizes(quick: bool) -> list[tuple[int, int, int]]:
    """(B, T, C): T, C and B varied one at a time around B=256, T=120, C=12 (B=1 is the
    latency); quick mode a smaller grid."""
    if quick:
        return [(1, 50, 13), (64, 200, 13), (64, 50, 40)]
    sizes = [(256, t, 12) for t in (30, 60, 240, 480)]
    sizes += [(256, 120, c) for c in (5, 25, 50)]
    sizes += [(bsz, 120, 12) for bsz in (1, 16, 64)]
    return sizes


EXTRA_SECTIONS: list[Callable[[bool, torch.device, int, list[dict[str, Any]]], None]] = [
    bench_cky,
    bench_multilabel,
]

if __name__ == "__main__":
    main()
