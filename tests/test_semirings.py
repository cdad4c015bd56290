"""Semiring laws (property tests) and the behaviour of each semiring."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from structssl.semirings import LOG_ZERO, KMax, Log, Max, Semiring, SmoothMax

SEMIRINGS = [Log(), Max(), SmoothMax(0.5), KMax(1), KMax(3)]


def _value(semiring: Semiring, seed: int, shape: tuple[int, ...] = (4,)) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g, dtype=torch.float64) * 3
    if semiring.size:
        # a valid k-best cell: sorted, best first
        x = torch.randn(*shape, semiring.size, generator=g, dtype=torch.float64).sort(-1, descending=True).values
    return x


def _plus(semiring: Semiring, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return semiring.sum(torch.stack([a, b], dim=0), dim=0)


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("semiring", SEMIRINGS, ids=repr)
@given(seed=st.integers(0, 10_000))
def test_semiring_laws(semiring: Semiring, seed: int) -> None:
    a, b, c = (_value(semiring, seed + i) for i in range(3))
    # commutativity and associativity of both operations
    _close(_plus(semiring, a, b), _plus(semiring, b, a))
    _close(semiring.mul(a, b), semiring.mul(b, a))
    _close(_plus(semiring, _plus(semiring, a, b), c), _plus(semiring, a, _plus(semiring, b, c)))
    _close(semiring.mul(semiring.mul(a, b), c), semiring.mul(a, semiring.mul(b, c)))
    # distributivity
    _close(
        semiring.mul(a, _plus(semiring, b, c)),
        _plus(semiring, semiring.mul(a, b), semiring.mul(a, c)),
    )


@pytest.mark.parametrize("semiring", SEMIRINGS, ids=repr)
def test_identities(semiring: Semiring) -> None:
    a = _value(semiring, 1)
    one = semiring.lift(torch.zeros(4, dtype=torch.float64))
    _close(semiring.mul(a, one), a)
    zero = semiring.lift(torch.full((4,), float("-inf"), dtype=torch.float64))
    if not isinstance(semiring, SmoothMax):  # smoothing is exact only with a true -inf zero
        _close(_plus(semiring, a, zero), a)


def test_log_zero_is_exact_zero_in_probability() -> None:
    for dtype in (torch.float32, torch.float64):
        x = torch.tensor([LOG_ZERO, 0.0], dtype=dtype)
        assert torch.softmax(x, 0)[0].item() == 0.0
        assert math.isfinite(LOG_ZERO)


def test_kmax_keeps_k_best_and_pads_with_neg_inf() -> None:
    semiring = KMax(3)
    x = semiring.lift(torch.tensor([1.0, 5.0], dtype=torch.float64))  # (2, 3)
    total = semiring.sum(x, dim=0)
    assert total.tolist() == [5.0, 1.0, float("-inf")]
    prod = semiring.mul(torch.tensor([3.0, 1.0, 0.0]), torch.tensor([2.0, 1.0, -1.0]))
    assert prod.tolist() == [5.0, 4.0, 3.0]


def test_smooth_max_between_max_and_log() -> None:
    x = torch.randn(5, 7, dtype=torch.float64)
    for t in (0.01, 0.3, 1.0):
        s = SmoothMax(t).sum(x, 1)
        assert torch.all(s >= x.amax(1) - 1e-12)
        assert torch.all(s <= x.amax(1) + t * math.log(7) + 1e-12)
    _close(SmoothMax(1.0).sum(x, 1), Log().sum(x, 1))


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_kmax_rejects_bad_k(bad: object) -> None:
    with pytest.raises(ValueError, match="k must be an int >= 1"):
        KMax(bad)  # type: ignore[arg-type]


def test_smooth_max_rejects_bad_temperature() -> None:
    with pytest.raises(ValueError, match="temperature must be > 0; got 0"):
        SmoothMax(0.0)
