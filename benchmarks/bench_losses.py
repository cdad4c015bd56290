"""Forward + backward time of every loss, at the decoder benchmark's chain sizes.

    python benchmarks/bench_losses.py --quick          # about a minute on 2 CPU cores
    python benchmarks/bench_losses.py                  # full: writes results/losses.json
    python benchmarks/bench_losses.py --device cuda    # writes results/losses_cuda.json

Chains: B x T x C = 64 x 50 x 13 (quick and full) and 256 x 120 x 12 (full), the sizes of
``bench_decoders.py``. Each timing is one forward and one backward pass of the loss w.r.t. the
potentials (median over repeats). The CRF NLL is compared in the same process, on the same
inputs, with pytorch-crf's ``CRF`` (unary + transition form; its forward returns the
log-likelihood, negated here). Multi-label: the composite likelihood over the K star trees
against the full likelihood by enumeration (PairwiseMultiLabel, 2^K configurations) at
K = 6 (scene, emotions) and K = 14 (yeast). Gamma: node-indicator features (seed 000 section 4)
and, at the small size, 2T dense binary constraint features (section 5.1's encoding size).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import header, markdown_table, median_ms, record, write_results  # noqa: E402

from structssl.losses import (  # noqa: E402
    CompositeLikelihoodLoss,
    CRFNLLLoss,
    L1Penalty,
    LinearConstraintFeatures,
    NodeFeatures,
    NablaCoSVMLoss,
    NablaSVMLoss,
    NablaTSVMLoss,
    QuadraticPenaltyGammaLoss,
    StructuredHingeLoss,
    constraint_guided_argmax,
)
from structssl.structures import LinearChain  # noqa: E402

BENCH = "losses"


def _time(fn: Callable[[], torch.Tensor], leaves: list[torch.Tensor], device: torch.device,
          repeats: int) -> tuple[float, float]:
    def step() -> None:
        for x in leaves:
            x.grad = None
        fn().backward()

    return median_ms(step, device, repeats)


def _emit(records: list[dict[str, Any]], task: str, method: str, ms: float, iqr: float,
          repeats: int, device: torch.device) -> None:
    records.append(record(BENCH, task, method, "forward_backward_time", ms, "ms", False, repeats,
                          iqr=round(iqr, 3), device=str(device)))
    print(f"{task:32s} {method:42s} {ms:9.2f} ms", flush=True)


def bench_chain(b: int, n: int, c: int, device: torch.device, repeats: int,
                records: list[dict[str, Any]]) -> None:
    torch.manual_seed(0)
    structure = LinearChain(c, validate=False)
    unary = torch.randn(b, n, c, device=device, requires_grad=True)
    trans = torch.randn(c, c, device=device, requires_grad=True)
    lengths = torch.randint(n // 2, n + 1, (b,), device=device)
    lengths[0] = n
    target = torch.randint(0, c, (b, n), device=device)
    peer_unary = torch.randn(b, n, c, device=device, requires_grad=True)
    leaves = [unary, trans, peer_unary]

    def pot() -> torch.Tensor:
        return LinearChain.potentials_from(unary, trans)

    task = f"chain B={b},T={n},C={c}"
    losses: list[tuple[str, Callable[[], torch.Tensor]]] = [
        ("structssl:crf-nll", lambda: CRFNLLLoss()(structure, pot(), target, lengths)),
        ("structssl:composite-piecewise", lambda: CompositeLikelihoodLoss("factors")(structure, pot(), target, lengths)),
        ("structssl:hinge-margin-hamming", lambda: StructuredHingeLoss()(structure, pot(), target, lengths)),
        ("structssl:hinge-margin-zero_one", lambda: StructuredHingeLoss(cost="zero_one")(structure, pot(), target, lengths)),
        ("structssl:hinge-slack-hamming-k4", lambda: StructuredHingeLoss("slack", k=4)(structure, pot(), target, lengths)),
        ("structssl:nabla-svm-k1", lambda: NablaSVMLoss(k=1)(structure, pot(), target, lengths)),
        ("structssl:nabla-svm-k4", lambda: NablaSVMLoss(k=4)(structure, pot(), target, lengths)),
        ("structssl:nabla-tsvm-k1", lambda: NablaTSVMLoss(k=1)(structure, pot(), lengths=lengths)),
        ("structssl:nabla-cosvm-k1", lambda: NablaCoSVMLoss(k=1)(
            structure, pot(), LinearChain.potentials_from(peer_unary, trans), lengths=lengths)),
    ]
    # Gamma, seed 000 section 4 labeling formulation: phi = node indicators (d = T C, cheap
    # adjoint); at the small size also section 5.1's 2T dense binary features (O(B d T C^2))
    gamma = QuadraticPenaltyGammaLoss(1.0, L1Penalty(scale=0.5))
    feature_sets = [("node", NodeFeatures())]
    if b * n * c * c * 2 * n <= 2e8:
        weights = torch.zeros(b, 2 * n, n, c, c, device=device)
        allowed = torch.rand(b, n, c, device=device) < 0.5
        for t in range(n):
            weights[:, t, t] = allowed[:, t].unsqueeze(1).float()
            weights[:, n + t, t] = torch.eye(c, device=device)
        feature_sets.append(("dense2T", LinearConstraintFeatures(weights)))
    for name, features in feature_sets:
        with torch.no_grad():
            d = features.phi(structure.to_parts(target, lengths)).shape[1]
        v = torch.rand(b, d, device=device, requires_grad=True)
        a = torch.ones(b, d, device=device)
        leaves.append(v)
        with torch.no_grad():
            guided = constraint_guided_argmax(structure, pot(), v, features, 1.0, lengths)
        losses += [
            (f"structssl:gamma-dc-{name}",
             lambda f=features, v=v, a=a: gamma(structure, pot(), v, f, lengths, penalty_target=a)),
            (f"structssl:gamma-cccp-{name}",
             lambda f=features, v=v, a=a, g=guided: gamma(structure, pot(), v, f, lengths, linearize_at=g,
                                                         penalty_target=a)),
        ]
    for method, fn in losses:
        ms, iqr = _time(fn, leaves, device, repeats)
        _emit(records, task, method, ms, iqr, repeats, device)
    try:
        from torchcrf import CRF
    except ImportError:
        print("pytorch-crf not installed: peer skipped")
        return
    crf = CRF(c, batch_first=True).to(device)
    mask = torch.arange(n, device=device).unsqueeze(0) < lengths.unsqueeze(1)
    ms, iqr = _time(lambda: -crf(unary, target, mask, reduction="mean"), leaves + list(crf.parameters()),
                    device, repeats)
    _emit(records, task, "pytorch-crf", ms, iqr, repeats, device)


def bench_multilabel(b: int, k: int, device: torch.device, repeats: int,
                     records: list[dict[str, Any]]) -> None:
    try:
        from structssl.structures.multilabel import MultiLabelPotentials, PairwiseMultiLabel
    except ImportError:
        print("multilabel structure not available: skipped")
        return
    torch.manual_seed(0)
    structure = PairwiseMultiLabel(k, validate=False)
    unary = torch.randn(b, k, 2, device=device, requires_grad=True)
    pairwise = torch.randn(b, k, k, 2, 2, device=device, requires_grad=True)
    target = torch.randint(0, 2, (b, k), device=device)
    task = f"multilabel B={b},K={k}"
    for method, fn in [
        ("structssl:composite-star-trees",
         lambda: CompositeLikelihoodLoss("star_trees")(structure, MultiLabelPotentials(unary, pairwise), target)),
        ("structssl:composite-piecewise",
         lambda: CompositeLikelihoodLoss("factors")(structure, MultiLabelPotentials(unary, pairwise), target)),
        ("structssl:crf-nll-enumeration",
         lambda: CRFNLLLoss()(structure, MultiLabelPotentials(unary, pairwise), target)),
        ("structssl:nabla-svm-k1",
         lambda: NablaSVMLoss(k=1)(structure, MultiLabelPotentials(unary, pairwise), target)),
    ]:
        ms, iqr = _time(fn, [unary, pairwise], device, repeats)
        _emit(records, task, method, ms, iqr, repeats, device)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes and few repeats (~1 min on CPU)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per cell")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--output", type=Path, default=None, help="JSON path")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    repeats = args.repeats or (5 if args.quick else 11)
    chain_sizes = [(64, 50, 13)] if args.quick else [(64, 50, 13), (256, 120, 12)]
    label_sizes = [(256, 6)] if args.quick else [(256, 6), (256, 14)]
    records: list[dict[str, Any]] = []
    warnings.filterwarnings("ignore", category=UserWarning)
    for b, n, c in chain_sizes:
        bench_chain(b, n, c, device, repeats, records)
    for b, k in label_sizes:
        bench_multilabel(b, k, device, repeats, records)
    mode = "quick" if args.quick else "full"
    default = f"{BENCH}_quick" if args.quick else (BENCH if device.type == "cpu" else f"{BENCH}_{device.type}")
    path = write_results(default, header(device, mode), records, args.output)
    print(f"\nwrote {path}\n")
    print(markdown_table(records, "forward_backward_time"))


if __name__ == "__main__":
    main()
