"""Every structure gives the same results on CUDA as on the CPU (skipped without a GPU)."""

from __future__ import annotations

import pytest
import torch

from structssl.structures import CKY, LinearChain, MultiClass, PairwiseMultiLabel
from structssl.structures.base import as_tuple, like

pytestmark = pytest.mark.gpu
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _cases():
    g = torch.Generator().manual_seed(0)
    lengths = torch.tensor([5, 3, 1, 5])
    yield MultiClass(7), torch.randn(4, 7, generator=g, dtype=torch.float64), None
    yield LinearChain(4), torch.randn(4, 5, 4, 4, generator=g, dtype=torch.float64), lengths
    yield LinearChain(4, log_kernel="expmm"), torch.randn(4, 5, 4, 4, generator=g, dtype=torch.float64), lengths
    cky = CKY(3)
    yield cky, cky.potentials_from(
        torch.randn(4, 5, 3, generator=g, dtype=torch.float64),
        torch.randn(3, 3, 3, generator=g, dtype=torch.float64),
        torch.randn(3, generator=g, dtype=torch.float64),
    ), lengths
    ml = PairwiseMultiLabel(5)
    yield ml, ml.potentials_from(
        torch.randn(4, 5, generator=g, dtype=torch.float64),
        torch.randn(4, 5, 5, generator=g, dtype=torch.float64),
    ), None


@cuda
@pytest.mark.parametrize("case", list(_cases()), ids=lambda c: repr(c[0]))
def test_cuda_matches_cpu(case) -> None:
    structure, potentials, lengths = case
    dev = torch.device("cuda")
    on_gpu = like(potentials, [x.to(dev) for x in as_tuple(potentials)])
    gpu_lengths = None if lengths is None else lengths.to(dev)
    torch.testing.assert_close(
        structure.log_partition(on_gpu, gpu_lengths).cpu(), structure.log_partition(potentials, lengths)
    )
    for a, b in zip(as_tuple(structure.marginals(on_gpu, gpu_lengths)),
                    as_tuple(structure.marginals(potentials, lengths))):
        torch.testing.assert_close(a.cpu(), b)
    with torch.inference_mode():
        labels, scores = structure.argmax(on_gpu, gpu_lengths)
        k_labels, k_scores = structure.kbest(on_gpu, 3, gpu_lengths)
    ref_labels, ref_scores = structure.argmax(potentials, lengths)
    assert torch.equal(labels.cpu(), ref_labels)
    torch.testing.assert_close(scores.cpu(), ref_scores)
    torch.testing.assert_close(k_scores.cpu(), structure.kbest(potentials, 3, lengths)[1])


@cuda
@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_factored_chain_cuda_graphs_replay_the_eager_results(shared: bool, dtype: torch.dtype) -> None:
    """log Z and its gradient on factored potentials through the step loops' CUDA graphs
    (eager the first time a shape is seen, captured the second, replayed after) equal the
    eager CUDA loops and the CPU, with another shape evaluated in between and no aliasing
    between the results of two replays."""
    from structssl.structures import ChainPotentials
    from structssl.structures import _chain_factored as fc

    dev = torch.device("cuda")
    chain = LinearChain(5)

    def factors(seed: int, b: int, n: int) -> tuple[torch.Tensor, ...]:
        g = torch.Generator().manual_seed(seed)
        emissions = torch.randn(b, n, 5, generator=g, dtype=dtype)
        transitions = torch.randn(*((5, 5) if shared else (b, 5, 5)), generator=g, dtype=dtype)
        return emissions, transitions, torch.randn(5, generator=g, dtype=dtype), torch.randn(b, 5, generator=g, dtype=dtype)

    def run(raw: tuple[torch.Tensor, ...], lengths: torch.Tensor, device: torch.device):
        leaves = [x.to(device).requires_grad_(True) for x in raw]
        pot = ChainPotentials.from_factors(*leaves)
        log_z = chain.log_partition(pot, lengths.to(device))
        grads = torch.autograd.grad(log_z.sum(), leaves)
        return [log_z.detach().cpu()] + [g.cpu() for g in grads]

    lengths = torch.tensor([7, 3, 9, 1, 9, 4])
    other = torch.tensor([2, 6, 5])
    raw, raw_other = factors(0, 6, 9), factors(1, 3, 6)
    cpu = run(raw, lengths, torch.device("cpu"))
    fc.USE_CUDA_GRAPHS = False
    try:
        eager = run(raw, lengths, dev)
    finally:
        fc.USE_CUDA_GRAPHS = True
    fc._GRAPHS.graphs.clear()
    fc._GRAPHS.seen.clear()
    results = []
    for _ in range(4):  # eager, capture, replay, replay
        results.append(run(raw, lengths, dev))
        run(raw_other, other, dev)
    assert len(fc._GRAPHS.graphs) == 4  # forward and backward loops of both shapes
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}
    for got in results:
        for a, b, c in zip(got, eager, cpu):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
            torch.testing.assert_close(a, c, **tol)
    changed = [x * 2 for x in factors(0, 6, 9)]
    again = run(changed, lengths, dev)  # a replay with other values: new results, old ones kept
    torch.testing.assert_close(again[0], run(changed, lengths, torch.device("cpu"))[0], **tol)
    for a, b in zip(results[2], eager):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@cuda
def test_factored_chain_cuda_graphs_of_inference_mode_are_kept_apart() -> None:
    """A shape evaluated under inference mode (Lightning's evaluation) gets graphs of its own:
    the same shape then trained on replays graphs with writable static tensors."""
    from structssl.structures import ChainPotentials
    from structssl.structures import _chain_factored as fc

    dev = torch.device("cuda")
    chain = LinearChain(4)
    g = torch.Generator().manual_seed(3)
    raw = [torch.randn(3, 6, 4, generator=g), torch.randn(4, 4, generator=g)]
    lengths = torch.tensor([6, 2, 5], device=dev)
    fc._GRAPHS.graphs.clear()
    fc._GRAPHS.seen.clear()
    for _ in range(3):
        with torch.inference_mode():
            chain.log_partition(ChainPotentials.from_factors(*[x.to(dev) for x in raw]), lengths)
    values = []
    for _ in range(3):
        leaves = [x.to(dev).requires_grad_(True) for x in raw]
        log_z = chain.log_partition(ChainPotentials.from_factors(*leaves), lengths)
        grads = torch.autograd.grad(log_z.sum(), leaves)
        values.append((log_z.detach().cpu(), [x.cpu() for x in grads]))
    for log_z, grads in values[1:]:
        torch.testing.assert_close(log_z, values[0][0], rtol=0, atol=0)
        for a, b in zip(grads, values[0][1]):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
