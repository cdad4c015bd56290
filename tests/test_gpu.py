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
