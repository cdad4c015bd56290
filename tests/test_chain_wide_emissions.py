"""Factored chains whose emissions span far more than float32's exponent range (a trained CRF:
30-60 nats between a position's labels on CoNLL-2002, hundreds here) stay on the exp-space path
(``exp_space_exact`` bounds only the transition and end ranges) and equal the float64
log-space reference: log Z to rounding, marginals to far below rounding."""

from __future__ import annotations

import math

import pytest
import torch

from structssl.structures import ChainPotentials, LinearChain
from structssl.structures._chain_factored import Plan, exp_space_exact

F64 = torch.float64


def _factors(dtype: torch.dtype, emission_scale: float, transition_scale: float, seed: int):
    g = torch.Generator().manual_seed(seed)
    b, n, c = 6, 40, 9
    emissions = torch.randn(b, n, c, generator=g, dtype=F64) * emission_scale
    transitions = torch.randn(c, c, generator=g, dtype=F64) * transition_scale
    start = torch.randn(c, generator=g, dtype=F64) * transition_scale
    end = torch.randn(c, generator=g, dtype=F64)
    return [x.to(dtype) for x in (emissions, transitions, start, end)]


@pytest.mark.parametrize(
    "dtype, emission_scale", [(torch.float32, 40.0), (torch.float32, 1e3), (F64, 400.0)]
)
def test_wide_emissions_take_the_exp_path_and_match_the_float64_log_space_path(
    dtype: torch.dtype, emission_scale: float
) -> None:
    lengths = torch.tensor([40, 17, 1, 39, 2, 40])
    factors = _factors(dtype, emission_scale, 2.0, seed=3)
    chain = LinearChain(9)
    pot = ChainPotentials.from_factors(*factors)
    plan = Plan(lengths)
    emissions_range = float((pot.emissions.amax(2) - pot.emissions.amin(2)).max())
    assert emissions_range > -math.log(torch.finfo(dtype).tiny)  # beyond exp's reach
    assert exp_space_exact(pot, plan, plan.label_major(pot.emissions))
    # reference: float64, the edge layout's log-space loop
    ref_factors = [x.double().requires_grad_() for x in factors]
    ref_edges = chain.edge_potentials(ChainPotentials.from_factors(*ref_factors), lengths)
    ref_log_z = chain.log_partition(ref_edges, lengths)
    ref_grads = torch.autograd.grad(ref_log_z.sum(), ref_factors)
    leaves = [x.clone().requires_grad_() for x in factors]
    log_z = chain.log_partition(ChainPotentials.from_factors(*leaves), lengths)
    grads = torch.autograd.grad(log_z.sum(), leaves)
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(log_z.double(), ref_log_z.detach(), rtol=8 * eps, atol=0)
    # marginals (node, transition counts, start, end): rounding of u - max u is eps |u| nats
    atol = 16 * eps * (40 + float(factors[0].detach().abs().max()))
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got.double(), want, rtol=atol, atol=atol)  # counts add up
    node = grads[0]
    valid = chain.valid_mask(lengths, 40)
    assert bool((node[~valid] == 0).all())
    torch.testing.assert_close(
        node.sum(2)[valid].double(), torch.ones(int(valid.sum()), dtype=F64), rtol=0,
        atol=16 * eps,
    )


def test_wide_transitions_still_take_the_log_space_path() -> None:
    lengths = torch.tensor([40, 17, 1, 39, 2, 40])
    pot = ChainPotentials.from_factors(*_factors(torch.float32, 1.0, 20.0, seed=4))
    plan = Plan(lengths)
    assert not exp_space_exact(pot, plan, plan.label_major(pot.emissions))
    reference = ChainPotentials.from_factors(*_factors(F64, 1.0, 20.0, seed=4))
    chain = LinearChain(9)
    torch.testing.assert_close(
        chain.log_partition(pot, lengths).double(), chain.log_partition(reference, lengths),
        rtol=1e-6, atol=0,
    )
