"""TorchStructAdapter: agreement with brute force and with torch-struct (float64, tiny sizes),
one test per torch-struct fault the adapter hides, and every applicable loss of
``structssl.losses`` on the wrapped and the native new structures."""

from __future__ import annotations

import itertools
import warnings
from typing import Iterator

import pytest
import torch

from oracle import check_structure

torch_struct = pytest.importorskip("torch_struct", reason="torch-struct is a test dependency")

from structssl.losses import (  # noqa: E402
    CompositeLikelihoodLoss,
    ConstraintPenalty,
    CRFNLLLoss,
    L1Penalty,
    NablaCoSVMLoss,
    NablaSVMLoss,
    NablaTSVMLoss,
    PartsFeatures,
    QuadraticPenaltyGammaLoss,
    StructuredHingeLoss,
)
from structssl.structures import DependencyTree, SemiMarkov, TorchStructAdapter  # noqa: E402
from structssl.structures.torch_struct import (  # noqa: E402
    dependency_to_torch_struct,
    semi_markov_to_torch_struct,
)
from test_cky import _bracketings  # noqa: E402
from test_dependency import projective_trees  # noqa: E402

F64 = torch.float64


# ---------------------------------------------------------------------- brute force, torch-struct layout
def chains(n: int, c: int, shape: tuple[int, ...]) -> Iterator[torch.Tensor]:
    """LinearChainCRF: N labels, parts [t, z_{t+1}, z_t]."""
    for z in itertools.product(range(c), repeat=n):
        parts = torch.zeros(shape, dtype=torch.long)
        for t in range(n - 1):
            parts[t, z[t + 1], z[t]] = 1
        yield parts


def semi_markov(n: int, k: int, c: int, shape: tuple[int, ...]) -> Iterator[torch.Tensor]:
    """SemiMarkovCRF over N boundaries: a first label, then segments of width 1 .. K - 1."""

    def rec(p: int, prev: int) -> Iterator[list[tuple[int, int, int, int]]]:
        if p == n - 1:
            yield []
            return
        for w in range(1, min(k - 1, n - 1 - p) + 1):
            for lab in range(c):
                for rest in rec(p + w, lab):
                    yield [(p, w, lab, prev)] + rest

    for first in range(c):
        for segs in rec(0, first):
            parts = torch.zeros(shape, dtype=torch.long)
            for seg in segs:
                parts[seg] = 1
            yield parts


def dependency(n: int, multiroot: bool, shape: tuple[int, ...]) -> Iterator[torch.Tensor]:
    """DependencyCRF: projective trees, root arcs on the diagonal."""
    for heads in projective_trees(n, multiroot):
        parts = torch.zeros(shape, dtype=torch.long)
        for m, h in enumerate(heads):
            parts[m if h == 0 else h - 1, m] = 1
        yield parts


def trees(n: int, nt: int, shape: tuple[int, ...]) -> Iterator[torch.Tensor]:
    """TreeCRF: binary bracketings with a label per span (leaves included)."""
    for spans in _bracketings(0, n - 1):
        for labels in itertools.product(range(nt), repeat=len(spans)):
            parts = torch.zeros(shape, dtype=torch.long)
            for (i, j), a in zip(spans, labels):
                parts[i, j, a] = 1
            yield parts


# name -> (potentials shape without batch, lengths, enumerator(n, event shape), options)
CASES = {
    "LinearChainCRF": ((3, 3, 3), [4, 2, 3], lambda n, s, o: chains(n, 3, s), {}),
    "SemiMarkovCRF": ((4, 3, 2, 2), [5, 3, 2], lambda n, s, o: semi_markov(n, 3, 2, s), {}),
    "DependencyCRF": ((4, 4), [4, 2, 3], lambda n, s, o: dependency(n, True, s), {}),
    "DependencyCRF-one-root": (
        (4, 4), [4, 1, 3], lambda n, s, o: dependency(n, False, s), {"multiroot": False}
    ),
    "TreeCRF": ((3, 3, 2), [3, 1, 2], lambda n, s, o: trees(n, 2, s), {}),
}


def _adapter(case: str) -> TorchStructAdapter:
    return TorchStructAdapter(case.split("-")[0], **CASES[case][3])


def _case(case: str, seed: int = 0, scale: float = 1.0):
    shape, lengths, enum, options = CASES[case]
    g = torch.Generator().manual_seed(seed)
    pot = scale * torch.randn(len(lengths), *shape, generator=g, dtype=F64)
    lengths_t = torch.tensor(lengths)

    def labels_of(b: int) -> Iterator[torch.Tensor]:
        yield from enum(lengths[b], shape, options)

    return pot, lengths_t, labels_of


def _close(a: torch.Tensor, b: torch.Tensor, msg: str = "") -> None:
    torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-7, msg=msg)


def _raw(name: str, x: torch.Tensor, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return getattr(torch_struct, name)(x, **kw)


# ---------------------------------------------------------------------- agreement
@pytest.mark.parametrize("case", sorted(CASES))
def test_adapter_matches_enumeration(case: str) -> None:
    """Ragged batches, every operation (log Z, marginals, argmax, k-best, kmax, smoothed max,
    Hamming and 0/1 cost-augmented decoding) against enumeration."""
    adapter = _adapter(case)
    pot, lengths, labels_of = _case(case)
    check_structure(adapter, pot, lengths, labels_of, k=4)


@pytest.mark.parametrize("case", sorted(CASES))
def test_adapter_matches_torch_struct(case: str) -> None:
    adapter = _adapter(case)
    name, options = case.split("-")[0], CASES[case][3]
    pot, _, _ = _case(case, seed=1)
    dist = _raw(name, pot.clone().requires_grad_() * 1.0, **options)  # non-leaf: see the faults
    _close(adapter.log_partition(pot), dist.partition.detach())
    _close(adapter.max(pot), dist.max.detach())
    _close(adapter.marginals(pot), dist.marginals.detach())
    labels, _ = adapter.argmax(pot)
    assert torch.equal(labels, dist.argmax.detach().long())
    _close(adapter.kmax(pot, 3), dist.kmax(3).detach().T)


def test_masks_with_minus_inf_agree_with_enumeration() -> None:
    adapter = TorchStructAdapter("LinearChainCRF")
    pot, lengths, labels_of = _case("LinearChainCRF", seed=2)
    allowed = torch.ones_like(pot, dtype=torch.bool)
    allowed[:, :, 0, 1] = False  # label 1 is never followed by label 0
    masked = adapter.mask_potentials(pot, allowed)

    def finite(b: int) -> Iterator[torch.Tensor]:
        for y in labels_of(b):
            if bool((y.bool() & ~allowed[b]).sum() == 0):
                yield y

    check_structure(adapter, masked, lengths, finite, k=4)
    marg = adapter.marginals(masked, lengths)
    assert (marg[~allowed] == 0).all() and torch.isfinite(marg).all()


def test_native_structures_agree_with_the_adapter_on_ragged_batches() -> None:
    """The layout converters: native SemiMarkov / DependencyTree vs the adapter."""
    g = torch.Generator().manual_seed(10)
    pot = torch.randn(3, 5, 3, 2, 2, generator=g, dtype=F64)
    lengths = torch.tensor([5, 3, 1])
    native, adapter = SemiMarkov(3, num_segment_labels=2), TorchStructAdapter("SemiMarkovCRF")
    theirs = semi_markov_to_torch_struct(pot)
    _close(adapter.log_partition(theirs, lengths + 1), native.log_partition(pot, lengths))
    _close(adapter.max(theirs, lengths + 1), native.max(pot, lengths))
    back = adapter.marginals(theirs, lengths + 1)[:, :, 1:].transpose(-1, -2)
    _close(back, native.marginals(pot, lengths))
    arcs = torch.randn(3, 6, 6, generator=g, dtype=F64)
    lengths = torch.tensor([5, 2, 4])
    for multiroot in (True, False):
        native_tree = DependencyTree(multiroot=multiroot)
        adapter = TorchStructAdapter("DependencyCRF", multiroot=multiroot)
        theirs = dependency_to_torch_struct(arcs)
        _close(adapter.log_partition(theirs, lengths), native_tree.log_partition(arcs, lengths))
        _close(
            adapter.marginals(theirs, lengths),
            dependency_to_torch_struct(native_tree.marginals(arcs, lengths)),
        )
        heads, _ = native_tree.argmax(arcs, lengths)
        parts = dependency_to_torch_struct(native_tree.to_parts(heads, lengths))
        assert torch.equal(adapter.argmax(theirs, lengths)[0], parts.long())


# ---------------------------------------------------------------------- one test per fault
@pytest.mark.parametrize("case", sorted(CASES))
def test_fault_autograd_needed_under_inference_mode(case: str) -> None:
    """torch-struct's argmax / marginals / topk fail under inference_mode; the adapter's work."""
    name, options = case.split("-")[0], CASES[case][3]
    adapter = _adapter(case)
    pot, lengths, _ = _case(case, seed=3)
    expected = adapter.argmax(pot, lengths)[0], adapter.marginals(pot, lengths)
    with torch.inference_mode():
        with pytest.raises(RuntimeError):
            _ = _raw(name, pot.clone(), **options).argmax
        labels, _ = adapter.argmax(pot, lengths)
        marg = adapter.marginals(pot, lengths)
        kb, _ = adapter.kbest(pot, 2, lengths)
        inference_pot = pot.clone()  # an inference tensor
    assert torch.equal(labels, expected[0]) and torch.equal(kb[:, 0], expected[0])
    _close(marg, expected[1])
    with torch.no_grad():
        assert torch.equal(adapter.argmax(inference_pot, lengths)[0], expected[0])


@pytest.mark.parametrize("case", sorted(CASES))
def test_fault_inputs_are_not_mutated(case: str) -> None:
    """torch-struct sets requires_grad on the caller's tensor; the adapter hands it a copy."""
    adapter = _adapter(case)
    pot, lengths, _ = _case(case, seed=4)
    before = pot.clone()
    adapter.log_partition(pot, lengths)
    adapter.argmax(pot, lengths)
    adapter.kbest(pot, 3, lengths)
    adapter.marginals(pot, lengths)
    assert not pot.requires_grad and pot.is_leaf and torch.equal(pot, before)
    if case == "LinearChainCRF":
        raw = pot.clone()
        _ = _raw("LinearChainCRF", raw).partition
        assert raw.requires_grad  # the fault itself


def test_fault_dependency_crf_on_leaf_tensors() -> None:
    """torch-struct 0.5's DependencyCRF raises on leaf tensors; the adapter does not."""
    adapter = TorchStructAdapter("DependencyCRF")
    pot, lengths, _ = _case("DependencyCRF", seed=5)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        _ = _raw("DependencyCRF", pot.clone()).partition
    leaf = pot.clone().requires_grad_()
    log_z = adapter.log_partition(leaf, lengths)
    (grad,) = torch.autograd.grad(log_z.sum(), leaf)
    _close(grad, adapter.marginals(pot, lengths))
    assert leaf.is_leaf and leaf.grad is None


def test_fault_semi_markov_ragged_batches() -> None:
    """torch-struct 0.5's SemiMarkovCRF masks a ragged batch with its shortest length; the
    adapter runs each length on its own and matches enumeration."""
    pot, lengths, labels_of = _case("SemiMarkovCRF", seed=6)
    adapter = TorchStructAdapter("SemiMarkovCRF")
    brute = torch.stack(
        [torch.logsumexp(torch.stack([(pot[b] * y).sum() for y in labels_of(b)]), 0) for b in range(3)]
    )
    _close(adapter.log_partition(pot, lengths), brute)
    raw = _raw("SemiMarkovCRF", pot.clone(), lengths=lengths).partition.detach()
    assert not torch.allclose(raw, brute)  # the fault: the longest example is wrong


def test_fault_finite_semiring_zeros() -> None:
    """torch-struct's KMax zero is -1e5: missing ranks have finite scores; the adapter -inf."""
    adapter = TorchStructAdapter("LinearChainCRF")
    pot = torch.zeros(2, 1, 2, 2, dtype=F64)  # 2 positions, 2 labels: 4 structures
    raw = _raw("LinearChainCRF", pot.clone()).kmax(6).detach()
    assert torch.isfinite(raw).all()  # the fault
    labels, scores = adapter.kbest(pot, 6)
    assert (scores[:, :4] == 0).all() and torch.isneginf(scores[:, 4:]).all()
    assert len({tuple(y.flatten().tolist()) for y in labels[0, :4]}) == 4
    # no structure at all: torch-struct gives a finite log Z, the adapter names the example
    empty = pot.clone()
    empty[1] = float("-inf")
    assert torch.isfinite(_raw("LinearChainCRF", empty.clone()).partition.detach()).all()
    with pytest.raises(ValueError, match="example 1 has no valid structure"):
        adapter.log_partition(empty)


def test_fault_alignment_needs_genbmm() -> None:
    try:
        import genbmm  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="AlignmentCRF needs the genbmm package"):
            TorchStructAdapter("AlignmentCRF")
        with pytest.raises(NameError, match="genbmm"):  # the fault itself
            _ = _raw("AlignmentCRF", torch.zeros(1, 2, 3, 3)).partition
    else:  # pragma: no cover - only with CUDA kernels installed
        pytest.skip("genbmm is installed: AlignmentCRF runs")


# ---------------------------------------------------------------------- errors
def test_errors_name_the_layout() -> None:
    with pytest.raises(ValueError, match=r"distribution must be one of"):
        TorchStructAdapter("CRF")
    with pytest.raises(ValueError, match=r"DependencyCRF takes the options \['multiroot'\]"):
        TorchStructAdapter("DependencyCRF", local=True)
    chain = TorchStructAdapter(torch_struct.LinearChainCRF)
    with pytest.raises(ValueError, match=r"\(B, \*\(N - 1, C, C\)\).*got \(2, 3, 3, 4\)"):
        chain.log_partition(torch.zeros(2, 3, 3, 4))
    with pytest.raises(ValueError, match=r"lengths must be in \[1, N\] = \[1, 4\]"):
        chain.log_partition(torch.zeros(2, 3, 2, 2), torch.tensor([5, 2]))
    with pytest.raises(ValueError, match=r"lengths must be >= 2"):
        chain.log_partition(torch.zeros(2, 3, 2, 2), torch.tensor([1, 2]))
    semi = TorchStructAdapter("SemiMarkovCRF")
    with pytest.raises(ValueError, match=r"\(B, \*\(N - 1, K, C, C\)\).*got \(2, 3, 2, 2\)"):
        semi.log_partition(torch.zeros(2, 3, 2, 2))
    with pytest.raises(ValueError, match=r"\(B, \*\(N, N\)\).*got \(2, 3, 4\)"):
        TorchStructAdapter("DependencyCRF").log_partition(torch.zeros(2, 3, 4))
    bad = torch.zeros(1, 2, 2, 2, dtype=torch.long)
    bad[0, 1, 0, 0] = 2
    with pytest.raises(ValueError, match=r"0/1 parts; got values in \[0, 2\]"):
        chain.score(torch.zeros(1, 2, 2, 2), bad)
    with pytest.raises(ValueError, match=r"labels must be 0/1 parts of shape \(B, \*\(N - 1, C, C\)\)"):
        chain.score(torch.zeros(1, 2, 2, 2), torch.zeros(1, 2, 2, dtype=torch.long))


# ---------------------------------------------------------------------- every loss
def _structures():
    """(id, structure, potentials, lengths, a target) for the new structures."""
    out = []
    for case in sorted(CASES):
        pot, lengths, labels_of = _case(case, seed=8)
        target = torch.stack([list(labels_of(b))[-1] for b in range(len(lengths))])
        out.append((case, _adapter(case), pot, lengths, target))
    g = torch.Generator().manual_seed(9)
    semi = SemiMarkov(3, tags=["O", "B-X", "I-X"])
    out.append(("SemiMarkov", semi, torch.randn(2, 5, 3, 2, 2, generator=g, dtype=F64),
                torch.tensor([5, 3]), torch.tensor([[1, 2, 0, 1, 0], [0, 1, 2, 0, 0]])))
    tree = DependencyTree()
    out.append(("DependencyTree", tree, torch.randn(2, 5, 5, generator=g, dtype=F64),
                torch.tensor([4, 3]), torch.tensor([[2, 0, 2, 3], [0, 1, 1, 0]])))
    return out


LOSSES = {
    "CRFNLLLoss": lambda: CRFNLLLoss(),
    "CompositeLikelihoodLoss-whole": lambda: CompositeLikelihoodLoss("whole"),
    "StructuredHingeLoss-margin-hamming": lambda: StructuredHingeLoss(),
    "StructuredHingeLoss-margin-zero_one": lambda: StructuredHingeLoss(cost="zero_one"),
    "StructuredHingeLoss-slack": lambda: StructuredHingeLoss(rescaling="slack", k=2),
    "NablaSVMLoss": lambda: NablaSVMLoss(),
    "NablaSVMLoss-k3-zero_one": lambda: NablaSVMLoss(k=3, cost="zero_one"),
    "NablaTSVMLoss": lambda: NablaTSVMLoss(),
}


@pytest.mark.parametrize("loss_name", sorted(LOSSES))
@pytest.mark.parametrize("item", _structures(), ids=lambda item: item[0])
def test_every_loss_runs(item, loss_name: str) -> None:
    _, structure, pot, lengths, target = item
    loss = LOSSES[loss_name]()
    x = pot.clone().requires_grad_()
    if loss_name.startswith("NablaTSVM"):
        value = loss(structure, x, None, lengths)
    else:
        value = loss(structure, x, target, lengths)
    (grad,) = torch.autograd.grad(value, x)
    assert torch.isfinite(value) and torch.isfinite(grad).all()
    # the gradient lives on the parts within each length only
    mask = structure.valid_masks(pot, lengths)[0]
    if mask is not None:
        assert (grad[~mask.expand_as(grad)] == 0).all()
    if loss_name == "CRFNLLLoss":  # exact: mean over examples of log Z - score
        expected = (structure.log_partition(pot, lengths) - structure.score(pot, target, lengths)).mean()
        _close(value.detach(), expected)


@pytest.mark.parametrize("item", _structures(), ids=lambda item: item[0])
def test_co_training_and_gamma_losses_run(item) -> None:
    _, structure, pot, lengths, target = item
    x, peer = pot.clone().requires_grad_(), (0.5 * pot).clone().requires_grad_()
    value = NablaCoSVMLoss()(structure, x, peer, None, lengths) + NablaCoSVMLoss()(
        structure, x, peer, target, lengths
    )
    gamma = QuadraticPenaltyGammaLoss(1.0, L1Penalty(scale=0.5))
    v = structure.to_parts(target, lengths).to(F64).flatten(1)
    value = value + gamma(structure, x, v, PartsFeatures(), lengths, penalty_target=v)
    # expectation constraints: the penalty of the marginals (differentiated twice)
    penalty = ConstraintPenalty(L1Penalty(scale=0.5))
    value = value + penalty(structure, x, PartsFeatures(), lengths, penalty_target=v)
    value = value + penalty(structure, x, PartsFeatures(), lengths, labels=target, penalty_target=v)
    grads = torch.autograd.grad(value, (x, peer))
    assert torch.isfinite(value) and all(torch.isfinite(g).all() for g in grads)
