"""Huber hinge, unlabeled loss and smax: printed formulas, printed derivatives, stability."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from structssl.losses import (
    margin_hinge,
    huber_hinge,
    huber_hinge_grad,
    smax,
    smax_grad,
    unlabeled_loss,
    unlabeled_loss_grad,
)

D = torch.float64


def _huber_scalar(t: float, d: float, e: float) -> float:
    if t <= d - e:
        return d - t
    if t <= d + e:
        return (d + e - t) ** 2 / (4 * e)
    return 0.0


def _u_scalar(t: float, d: float, tau: float) -> float:
    a = abs(t)
    if a <= d - tau:
        return 1.0
    if a <= d:
        return 1 - (a - d + tau) ** 2 / (2 * tau**2)
    if a <= d + tau:
        return (a - d - tau) ** 2 / (2 * tau**2)
    return 0.0


def _autograd(fn, t: torch.Tensor) -> torch.Tensor:
    t = t.clone().requires_grad_()
    (g,) = torch.autograd.grad(fn(t).sum(), t)
    return g


def test_huber_matches_printed_formula_and_derivative() -> None:
    t = torch.linspace(-2, 3, 81, dtype=D)
    for d, e in [(1.0, 0.3), (1.0, 0.5), (2.0, 0.1), (0.0, 0.3)]:
        expect = torch.tensor([_huber_scalar(x, d, e) for x in t.tolist()], dtype=D)
        torch.testing.assert_close(huber_hinge(t, d, e), expect)
        torch.testing.assert_close(_autograd(lambda x: huber_hinge(x, d, e), t), huber_hinge_grad(t, d, e))


def test_huber_knots_and_limit() -> None:
    d, e = 1.0, 0.3
    knots = torch.tensor([d - e, d, d + e], dtype=D)
    torch.testing.assert_close(huber_hinge(knots, d, e), torch.tensor([e, e / 4, 0.0], dtype=D))
    t = torch.linspace(-2, 3, 101, dtype=D)
    gap = (huber_hinge(t, d, 1e-6) - margin_hinge(t, d)).abs().max()
    assert gap <= 1e-6 / 4 + 1e-12
    assert bool((huber_hinge(t, d, e) >= margin_hinge(t, d)).all())


def test_huber_gradcheck() -> None:
    t = torch.tensor([-1.0, 0.75, 0.9, 1.2, 2.0], dtype=D, requires_grad=True)
    delta = torch.tensor([1.0, 1.0, 2.0, 1.0, 0.5], dtype=D)
    assert torch.autograd.gradcheck(lambda x: huber_hinge(x, delta, 0.3), (t,))


def test_unlabeled_loss_matches_printed_formula_and_derivative() -> None:
    t = torch.linspace(-2.5, 2.5, 101, dtype=D)
    for d, tau in [(1.0, 0.4), (1.0, 0.6), (2.0, 0.4), (0.3, 0.4)]:
        expect = torch.tensor([_u_scalar(x, d, tau) for x in t.tolist()], dtype=D)
        torch.testing.assert_close(unlabeled_loss(t, d, tau), expect)
        torch.testing.assert_close(
            _autograd(lambda x: unlabeled_loss(x, d, tau), t), unlabeled_loss_grad(t, d, tau)
        )


def test_unlabeled_loss_symmetric_flat_at_zero() -> None:
    t = torch.linspace(0, 2, 41, dtype=D)
    torch.testing.assert_close(unlabeled_loss(t, 1.0, 0.4), unlabeled_loss(-t, 1.0, 0.4))
    zero = torch.zeros(1, dtype=D)
    for d, tau in [(1.0, 0.4), (0.2, 0.4)]:  # also the degenerate Delta < tau case (X5.1)
        assert _autograd(lambda x: unlabeled_loss(x, d, tau), zero).item() == 0.0
    knots = torch.tensor([0.6, 1.0, 1.4], dtype=D)
    torch.testing.assert_close(unlabeled_loss(knots, 1.0, 0.4), torch.tensor([1.0, 0.5, 0.0], dtype=D))
    # the derivative reaches -sgn(t)/tau at |t| = Delta
    torch.testing.assert_close(unlabeled_loss_grad(torch.tensor([1.0], dtype=D), 1.0, 0.4),
                               torch.tensor([-1 / 0.4], dtype=D))


def test_unlabeled_loss_delta_plateau_variant() -> None:
    t = torch.linspace(-2, 2, 41, dtype=D)
    d = 0.5
    expect = d * unlabeled_loss(t / d, 1.0, 0.4 / d)
    torch.testing.assert_close(unlabeled_loss(t, d, 0.4, plateau="delta"), expect)
    assert unlabeled_loss(torch.zeros(1, dtype=D), d, 0.4, plateau="delta").item() == pytest.approx(d)


def test_unlabeled_loss_gradcheck() -> None:
    t = torch.tensor([-1.3, -0.8, 0.3, 0.7, 1.1, 1.5], dtype=D, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: unlabeled_loss(x, 1.0, 0.4), (t,))


def test_smax_formula_and_derivative() -> None:
    s = torch.tensor([[0.5, 0.0, 1.2, 0.3], [0.0, 0.0, 0.0, 0.0]], dtype=D)
    rho = 3.0
    expect = (1 / rho) * torch.log(1 + (torch.exp(rho * s) - 1).sum(1))
    torch.testing.assert_close(smax(s, rho), expect)
    assert smax(s, rho)[1].item() == 0.0  # exactly 0 when nothing violates
    g = _autograd(lambda x: smax(x, rho), s)
    torch.testing.assert_close(g, smax_grad(s, rho))
    torch.testing.assert_close(g[0], torch.exp(rho * s[0]) / (1 + (torch.exp(rho * s[0]) - 1).sum()))


def test_smax_mask_drops_candidates_and_zero_contributes_nothing() -> None:
    s = torch.tensor([[0.5, 9.0, 1.2, 0.0]], dtype=D)
    mask = torch.tensor([[True, False, True, True]])
    torch.testing.assert_close(smax(s, 2.0, mask), smax(s[:, [0, 2]], 2.0))
    empty = torch.zeros(1, 4, dtype=torch.bool)
    assert smax(s, 2.0, empty).item() == 0.0


@given(
    st.lists(st.floats(0.0, 5.0), min_size=1, max_size=6),
    st.floats(0.05, 50.0),
)
def test_smax_between_max_and_sum(values: list[float], rho: float) -> None:
    s = torch.tensor(values, dtype=D)
    v = smax(s, rho).item()
    assert s.max().item() - 1e-9 <= v <= s.sum().item() + 1e-9


def test_smax_limits() -> None:
    s = torch.tensor([0.2, 0.7, 0.4], dtype=D)
    assert smax(s, 1e4).item() == pytest.approx(0.7, abs=1e-3)
    assert smax(s, 1e-6).item() == pytest.approx(1.3, rel=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_smax_stable_at_large_rho_s(dtype: torch.dtype) -> None:
    s = torch.tensor([[1e4, 0.0, 2.0], [1.0, 1.0, 0.0]], dtype=dtype, requires_grad=True)
    v = smax(s, 1.0)
    assert bool(torch.isfinite(v).all())
    assert v[0].item() == pytest.approx(1e4, rel=1e-6)
    assert v[1].item() == pytest.approx(1.0 + math.log(2 - math.exp(-1.0)), rel=1e-5)
    v.sum().backward()
    assert s.grad is not None and bool(torch.isfinite(s.grad).all())
    torch.testing.assert_close(s.grad, smax_grad(s.detach(), 1.0))


def test_smax_gradcheck_both_branches() -> None:
    s = torch.tensor([[0.1, 0.4, 0.0], [30.0, 29.0, 1.0]], dtype=D, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: smax(x, 1.0), (s,))


def test_smax_chain_rule_matches_hand_gradient() -> None:
    # d smax(l(t)) / dt_i = dsmax/ds_i * dl/dt_i (thesis sec. 7.1 gradient)
    t = torch.tensor([0.2, 0.9, 1.5, -0.4], dtype=D)
    delta = torch.tensor([1.0, 1.0, 2.0, 1.0], dtype=D)
    g = _autograd(lambda x: smax(huber_hinge(x, delta, 0.3), 5.0), t)
    s = huber_hinge(t, delta, 0.3)
    torch.testing.assert_close(g, smax_grad(s, 5.0) * huber_hinge_grad(t, delta, 0.3))


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan"), "1"])
def test_bad_parameters_raise(bad: object) -> None:
    t = torch.zeros(3)
    with pytest.raises(ValueError, match="rho must be"):
        smax(t, bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="epsilon must be"):
        huber_hinge(t, 1.0, bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tau must be"):
        unlabeled_loss(t, 1.0, bad)  # type: ignore[arg-type]


def test_bad_options_raise() -> None:
    with pytest.raises(ValueError, match="plateau must be one of"):
        unlabeled_loss(torch.zeros(2), 1.0, 0.4, plateau="two")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mask must be a bool tensor"):
        smax(torch.zeros(2), 1.0, torch.ones(2))
