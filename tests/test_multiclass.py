"""MultiClass against enumeration; error messages."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from oracle import check_structure
from structssl.structures import MultiClass


@given(batch=st.integers(1, 4), num_labels=st.integers(1, 5), seed=st.integers(0, 1000))
def test_multiclass_matches_enumeration(batch: int, num_labels: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    potentials = torch.randn(batch, num_labels, generator=g, dtype=torch.float64)
    structure = MultiClass(num_labels)
    check_structure(structure, potentials, None, lambda b: iter(torch.arange(num_labels)), k=6)
    ones = torch.ones(batch, dtype=torch.long)
    torch.testing.assert_close(structure.log_partition(potentials, ones), potentials.logsumexp(1))


def test_multiclass_errors() -> None:
    s = MultiClass(3)
    with pytest.raises(ValueError, match=r"potentials must have shape \(B, C\) with C = num_labels = 3; got \(2, 4\)"):
        s.log_partition(torch.zeros(2, 4))
    with pytest.raises(ValueError, match=r"labels must be in \[0, C\) = \[0, 3\); got values in \[0, 3\]"):
        s.score(torch.zeros(2, 3), torch.tensor([0, 3]))
    with pytest.raises(ValueError, match=r"labels must have shape \(B,\) = \(2,\); got \(2, 1\)"):
        s.score(torch.zeros(2, 3), torch.tensor([[0], [1]]))
    with pytest.raises(ValueError, match="lengths of a MultiClass structure must all be 1"):
        s.argmax(torch.zeros(2, 3), torch.tensor([1, 2]))
