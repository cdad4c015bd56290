"""LinearChain's fused forward-backward, the exact expmm kernel, tensor-backtracking decoders and
the infinity policy (-inf forbids, +inf / NaN rejected, no valid structure raises), against
brute-force enumeration, a plain autograd loop and ``gradcheck`` in float64."""

from __future__ import annotations

import itertools

import pytest
import torch

from oracle import check_structure
from structssl.structures import LinearChain
from structssl.structures.linear_chain import _ChainLogPartition

KERNELS = ["logsumexp", "expmm"]


def _enumerate(num_labels: int, lengths: torch.Tensor, max_length: int):
    def labels_of(b: int):
        n = int(lengths[b])
        for y in itertools.product(range(num_labels), repeat=n):
            yield torch.tensor(list(y) + [0] * (max_length - n))

    return labels_of


def _brute_log_z(potentials: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """log Z per example by enumeration, from raw potentials (no structssl code)."""
    b, n, c, _ = potentials.shape
    out = []
    for i in range(b):
        m = int(lengths[i])
        scores = []
        for y in itertools.product(range(c), repeat=m):
            s = potentials[i, 0, 0, y[0]]
            for t in range(1, m):
                s = s + potentials[i, t, y[t - 1], y[t]]
            scores.append(s)
        out.append(torch.logsumexp(torch.stack(scores), 0))
    return torch.stack(out)


def _brute_marginals(potentials: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Edge marginals per example by enumeration: sum over labellings of p(y) * parts(y)."""
    b, n, c, _ = potentials.shape
    out = torch.zeros_like(potentials)
    log_z = _brute_log_z(potentials, lengths)
    for i in range(b):
        m = int(lengths[i])
        for y in itertools.product(range(c), repeat=m):
            s = potentials[i, 0, 0, y[0]]
            for t in range(1, m):
                s = s + potentials[i, t, y[t - 1], y[t]]
            prob = torch.exp(s - log_z[i])
            out[i, 0, 0, y[0]] += prob
            for t in range(1, m):
                out[i, t, y[t - 1], y[t]] += prob
    return out


def _reference_log_z(potentials: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The previous implementation: autograd through a masked Python loop of logsumexp."""
    b, n, c, _ = potentials.shape
    alpha = potentials[:, 0, 0, :]
    for t in range(1, n):
        step = torch.logsumexp(alpha.unsqueeze(2) + potentials[:, t], dim=1)
        alpha = torch.where((t < lengths).view(b, 1), step, alpha)
    return torch.logsumexp(alpha, dim=1)


def _random_case(seed: int, b: int = 3, n: int = 4, c: int = 3, forbid: float = 0.0):
    g = torch.Generator().manual_seed(seed)
    pot = torch.randn(b, n, c, c, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, n + 1, (b,), generator=g)
    lengths[0] = n
    if forbid:
        mask = torch.rand(b, n, c, c, generator=g) < forbid
        mask[:, :, :, 0] = False  # label 0 always reachable from anything: a valid structure
        pot = pot.masked_fill(mask, float("-inf"))
    return pot, lengths


# ---------------------------------------------------------------------- fused log Z / marginals
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("forbid", [0.0, 0.4])
def test_fused_log_z_and_marginals_match_brute_force_and_autograd(
    kernel: str, seed: int, forbid: float
) -> None:
    pot, lengths = _random_case(seed, forbid=forbid)
    chain = LinearChain(3, log_kernel=kernel)
    log_z = chain.log_partition(pot, lengths)
    torch.testing.assert_close(log_z, _brute_log_z(pot, lengths), rtol=1e-12, atol=1e-12)
    marg = chain.marginals(pot, lengths)
    assert torch.isfinite(marg).all()
    torch.testing.assert_close(marg, _brute_marginals(pot, lengths), rtol=1e-10, atol=1e-12)
    if not forbid:  # the previous path (autograd through a masked loop) gives NaN with -inf
        leaf = pot.clone().requires_grad_()
        _reference_log_z(leaf, lengths).sum().backward()
        valid = LinearChain.valid_mask(lengths, pot.shape[1]).view(3, -1, 1, 1)
        torch.testing.assert_close(marg, torch.where(valid, leaf.grad, 0.0), rtol=1e-10, atol=1e-12)
    assert (marg[torch.isneginf(pot)] == 0).all()  # forbidden parts: exactly zero
    assert (marg[:, 0, 1:] == 0).all()  # rows 1.. at t = 0 are not parts


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("forbid", [0.0, 0.4])
def test_fused_gradcheck_ragged_with_minus_inf(kernel: str, forbid: float) -> None:
    pot, lengths = _random_case(11, b=3, n=5, c=3, forbid=forbid)
    pot[1, int(lengths[1]):] = float("-inf")  # -inf padding
    chain = LinearChain(3, log_kernel=kernel)
    x = pot.clone().requires_grad_()
    up = torch.randn(3, dtype=torch.float64)

    def f(p: torch.Tensor) -> torch.Tensor:
        return chain.log_partition(p, lengths) * up

    assert torch.autograd.gradcheck(f, (x,))
    if forbid == 0.0:
        # double backward (create_graph, e.g. the Gamma penalty of the marginals)
        assert torch.autograd.gradgradcheck(f, (x,))


def test_marginals_create_graph_are_differentiable() -> None:
    pot, lengths = _random_case(3, b=2, n=4, c=3)
    chain = LinearChain(3)
    x = pot.clone().requires_grad_()
    marg = chain.marginals(x, lengths, create_graph=True)
    w = torch.randn_like(marg)
    (got,) = torch.autograd.grad((marg * w).sum(), x)
    leaf = pot.clone().requires_grad_()
    (m2,) = torch.autograd.grad(_reference_log_z(leaf, lengths).sum(), leaf, create_graph=True)
    (ref,) = torch.autograd.grad((m2 * w).sum(), leaf)
    valid = LinearChain.valid_mask(lengths, 4).view(2, -1, 1, 1)
    torch.testing.assert_close(got, torch.where(valid, ref, 0.0))


def test_padding_is_irrelevant() -> None:
    pot, lengths = _random_case(5, b=4, n=6, c=4)
    lengths = torch.tensor([6, 3, 1, 5])
    chain = LinearChain(4)
    ref_z = chain.log_partition(pot, lengths)
    ref_m = chain.marginals(pot, lengths)
    ref_y, ref_s = chain.argmax(pot, lengths)
    ref_ky, ref_ks = chain.kbest(pot, 4, lengths)
    for fill in (float("-inf"), float("inf"), float("nan"), 1e30):
        padded = pot.clone()
        for i, m in enumerate(lengths.tolist()):
            padded[i, m:] = fill
        torch.testing.assert_close(chain.log_partition(padded, lengths), ref_z)
        torch.testing.assert_close(chain.marginals(padded, lengths), ref_m)
        y, s = chain.argmax(padded, lengths)
        assert torch.equal(y, ref_y)
        torch.testing.assert_close(s, ref_s)
        ky, ks = chain.kbest(padded, 4, lengths)
        torch.testing.assert_close(ks, ref_ks)
        torch.testing.assert_close(chain.score(padded, ky[:, 0], lengths), ks[:, 0])


# ---------------------------------------------------------------------- the expmm kernel
def test_expmm_underflowing_columns_are_exact_float64() -> None:
    # the mass of column 0 is carried by a row whose alpha is 1000 nats below the max while the
    # column's max entry sits in the low row: exp(alpha - m) exp(p - M) underflows to 0
    pot = torch.zeros(1, 3, 2, 2, dtype=torch.float64)
    pot[0, 0, 0] = torch.tensor([0.0, -1000.0])
    pot[0, 1] = torch.tensor([[0.0, -900.0], [800.0, 0.0]])
    pot[0, 2] = torch.tensor([[200.0, 0.0], [0.0, 0.0]])
    lengths = torch.tensor([3])
    expected = _brute_log_z(pot, lengths)
    for kernel in KERNELS:
        chain = LinearChain(2, log_kernel=kernel)
        torch.testing.assert_close(chain.log_partition(pot), expected, rtol=1e-14, atol=1e-12)
        marg = chain.marginals(pot)
        assert torch.isfinite(marg).all()
        torch.testing.assert_close(marg.sum((2, 3)), torch.ones(1, 3, dtype=torch.float64))


@pytest.mark.parametrize("std", [1.0, 45.0, 200.0, 1e4])
def test_expmm_equals_logsumexp_at_every_scale_float32(std: float) -> None:
    g = torch.Generator().manual_seed(int(std))
    pot64 = torch.randn(16, 30, 5, 5, generator=g, dtype=torch.float64) * std
    lengths = torch.randint(1, 31, (16,), generator=g)
    ref = LinearChain(5).log_partition(pot64, lengths)
    got = LinearChain(5, log_kernel="expmm").log_partition(pot64.float(), lengths)
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-3 * max(1.0, std / 100))
    got64 = LinearChain(5, log_kernel="expmm").log_partition(pot64, lengths)
    torch.testing.assert_close(got64, ref, rtol=1e-12, atol=1e-9)


def test_expmm_zero_mass_columns_give_zero_not_nan() -> None:
    chain = LinearChain(3, log_kernel="expmm")
    g = torch.Generator().manual_seed(2)
    pot = torch.randn(2, 5, 3, 3, generator=g, dtype=torch.float64)
    observed = torch.tensor([[-1, 2, -1, -1, 0], [1, -1, -1, 0, -1]])
    allowed = torch.tensor([[True, True, False], [True, True, True], [False, True, True]])
    masked = chain.constrain(pot, observed=observed, allowed_transitions=allowed)
    marg = chain.marginals(masked)
    assert torch.isfinite(marg).all()
    torch.testing.assert_close(marg, LinearChain(3).marginals(masked), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(
        chain.log_partition(masked), _brute_log_z(masked, torch.tensor([5, 5])), rtol=1e-12, atol=1e-12
    )


# ---------------------------------------------------------------------- decoders and oracle
@pytest.mark.parametrize("seed", range(4))
def test_oracle_with_minus_inf_parts(seed: int) -> None:
    """Every operation against enumeration with forbidden parts (at least k + 1 structures)."""
    g = torch.Generator().manual_seed(100 + seed)
    b, n, c = 3, 4, 3
    pot = torch.randn(b, n, c, c, generator=g, dtype=torch.float64)
    lengths = torch.tensor([4, 3, 2])
    forbid = torch.rand(b, n, c, c, generator=g) < 0.3
    forbid[:, :, :, :2] = False  # labels 0 and 1 always allowed: >= 4 structures everywhere
    pot = pot.masked_fill(forbid, float("-inf"))
    for i, m in enumerate(lengths.tolist()):
        pot[i, m:] = float("-inf")
    check_structure(LinearChain(c), pot, lengths, _enumerate(c, lengths, n), k=3)


def test_kbest_and_argmax_long_ragged_against_reference() -> None:
    """Tensor backtracking on longer chains: scores equal the labels' scores, ranks sorted and
    distinct, rank 0 equals argmax, max equals the Max-semiring value."""
    g = torch.Generator().manual_seed(0)
    b, n, c, k = 5, 40, 6, 5
    pot = torch.randn(b, n, c, c, generator=g, dtype=torch.float64)
    lengths = torch.tensor([40, 17, 1, 2, 39])
    chain = LinearChain(c)
    labels, scores = chain.argmax(pot, lengths)
    torch.testing.assert_close(scores, chain.max(pot, lengths))
    kl, ks = chain.kbest(pot, k, lengths)
    torch.testing.assert_close(ks[:, 0], scores)
    assert torch.equal(kl[:, 0], labels) or torch.allclose(chain.score(pot, kl[:, 0], lengths), scores)
    assert (ks[:, :-1] >= ks[:, 1:]).all()
    for r in range(k):
        torch.testing.assert_close(chain.score(pot, kl[:, r], lengths), ks[:, r])
    torch.testing.assert_close(ks, chain.kmax(pot, k, lengths))
    for i in range(b):
        assert len({tuple(y.tolist()) for y in kl[i]}) == (1 if lengths[i] == 1 and c < k else k) or lengths[i] == 1
        assert (kl[i, :, int(lengths[i]):] == 0).all()


# ---------------------------------------------------------------------- the infinity policy
@pytest.mark.parametrize("value, kind", [(float("inf"), r"\+inf"), (float("nan"), "NaN")])
def test_plus_inf_and_nan_at_valid_positions_are_rejected(value: float, kind: str) -> None:
    chain = LinearChain(3)
    pot = torch.randn(3, 4, 3, 3)
    lengths = torch.tensor([4, 3, 2])
    pot[2, 1, 0, 2] = value
    for op in (
        lambda: chain.log_partition(pot, lengths),
        lambda: chain.marginals(pot, lengths),
        lambda: chain.argmax(pot, lengths),
        lambda: chain.kbest(pot, 2, lengths),
    ):
        with pytest.raises(ValueError, match=rf"potentials contain {kind}.*example 2"):
            op()
    pot[2, 1, 0, 2] = 0.0
    pot[2, 3] = value  # padding: anything goes
    assert torch.isfinite(chain.log_partition(pot, lengths)).all()


def test_no_valid_structure_raises_naming_the_example() -> None:
    chain = LinearChain(3)
    pot = torch.randn(3, 4, 3, 3, dtype=torch.float64)
    lengths = torch.tensor([4, 3, 2])
    pot[1, 2] = float("-inf")  # example 1: every edge into position 2 is forbidden
    for op in (
        lambda: chain.log_partition(pot, lengths),
        lambda: chain.marginals(pot, lengths),
        lambda: chain.argmax(pot, lengths),
        lambda: chain.kbest(pot, 2, lengths),
        lambda: chain.max(pot, lengths),
    ):
        with pytest.raises(ValueError, match="example 1 has no valid structure"):
            op()
    # the same example with the forbidden position in its padding is fine
    assert torch.isfinite(chain.log_partition(pot, torch.tensor([4, 2, 2]))).all()
    # validate=False: -inf log Z and zero marginals for that example, others exact
    quiet = LinearChain(3, validate=False)
    log_z = quiet.log_partition(pot, lengths)
    assert torch.isneginf(log_z[1]) and torch.isfinite(log_z[[0, 2]]).all()
    marg = quiet.marginals(pot, lengths)
    assert (marg[1] == 0).all() and torch.isfinite(marg).all()
    torch.testing.assert_close(marg[[0, 2]], chain.marginals(pot[[0, 2]], lengths[[0, 2]]))


def test_constrain_excludes_forbidden_parts_at_any_scale() -> None:
    """Masks are exact exclusions: potentials of 1e6 over 600 positions cannot buy a forbidden
    transition (a finite mask value such as -1e9 could be beaten)."""
    c, n = 3, 600
    chain = LinearChain(c)
    g = torch.Generator().manual_seed(0)
    pot = torch.randn(2, n, c, c, generator=g, dtype=torch.float64) * 1e6
    pot[:, :, :, 2] += 1e7  # label 2 is hugely attractive everywhere
    allowed = torch.ones(c, c, dtype=torch.bool)
    allowed[2, 2] = False  # ... but may not follow itself
    masked = chain.constrain(pot, allowed_transitions=allowed)
    labels, scores = chain.argmax(masked)
    assert torch.isfinite(scores).all()
    assert not ((labels[:, 1:] == 2) & (labels[:, :-1] == 2)).any()
    kl, ks = chain.kbest(masked, 3)
    assert torch.isfinite(ks).all() and not ((kl[:, :, 1:] == 2) & (kl[:, :, :-1] == 2)).any()
    marg = chain.marginals(masked)
    assert torch.isfinite(marg).all() and (marg[:, 1:, 2, 2] == 0).all()
    f32 = chain.marginals(masked.float())
    assert torch.isfinite(f32).all() and (f32[:, 1:, 2, 2] == 0).all()


def test_constrain_detects_impossible_constraint_sets() -> None:
    chain = LinearChain(3)
    pot = torch.zeros(2, 4, 3, 3)
    with pytest.raises(ValueError, match="no valid labelling for example 0"):
        chain.constrain(pot, allowed_transitions=torch.zeros(3, 3, dtype=torch.bool))
    # example 1 of length 1 needs no transition; example 0 observes 0 then 2, and 0 -> 2 is
    # forbidden
    allowed = torch.ones(3, 3, dtype=torch.bool)
    allowed[0, 2] = False
    observed = torch.tensor([[0, 2, -1, -1], [0, 2, -1, -1]])
    with pytest.raises(ValueError, match=r"no valid labelling for example 0 \(examples: \[0\]\)"):
        chain.constrain(pot, torch.tensor([4, 1]), allowed_transitions=allowed, observed=observed)
    # the same with example 0 cut to length 1 is satisfiable
    out = chain.constrain(pot, torch.tensor([1, 1]), allowed_transitions=allowed, observed=observed)
    assert torch.isfinite(chain.log_partition(out, torch.tensor([1, 1]))).all()


def test_fused_function_direct_gradcheck_full_length() -> None:
    pot, _ = _random_case(7, b=2, n=6, c=4, forbid=0.3)
    x = pot.clone().requires_grad_()
    for kernel in KERNELS:
        assert torch.autograd.gradcheck(lambda p: _ChainLogPartition.apply(p, torch.tensor([6, 6]), kernel), (x,))
