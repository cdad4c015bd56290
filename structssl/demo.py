"""The quick-start job: a linear-chain CRF trained on built-in synthetic HMM data.

No download, a few seconds on a CPU. It samples a Gaussian-emission HMM, trains a linear
chain (unary potentials linear in the emissions, a transition matrix, start and end
potentials) by minimising the CRF negative log-likelihood ``log Z - score(y)`` with L-BFGS
through structssl's batched forward algorithm, decodes the test set with its Viterbi decoder,
and compares the token accuracy with Viterbi under the true HMM (the Bayes-optimal decoder).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from structssl.data.synthetic import SyntheticSequences, hmm_sequences
from structssl.structures import LinearChain


@dataclass(frozen=True)
class DemoResult:
    train_accuracy: float
    test_accuracy: float
    oracle_test_accuracy: float
    final_loss: float
    seconds: float


def _accuracy(chain: LinearChain, potentials: torch.Tensor, data: SyntheticSequences) -> float:
    with torch.inference_mode():
        labels, _ = chain.argmax(potentials, data.lengths)
    valid = LinearChain.valid_mask(data.lengths, labels.shape[1])
    return float(((labels == data.labels) & valid).sum() / valid.sum())


def _oracle_potentials(chain: LinearChain, data: SyntheticSequences, noise: float) -> torch.Tensor:
    """Log-potentials of the true HMM: log start, log transition, Gaussian log-likelihoods."""
    diff = data.inputs.double().unsqueeze(2) - data.means.double()  # (B, N, K, D)
    unary = -0.5 * (diff**2).sum(-1) / noise**2  # (B, N, K)
    return chain.potentials_from(unary, data.transition.log(), data.start.log())


def run_demo(
    num_states: int = 5,
    dim: int = 20,
    length: int = 20,
    num_train: int = 200,
    num_test: int = 200,
    separation: float = 5.0,
    noise: float = 2.0,
    l2: float = 1e-2,
    iterations: int = 60,
    seed: int = 0,
    verbose: bool = True,
) -> DemoResult:
    """Train and evaluate; print a short report when ``verbose``."""
    common = dict(num_states=num_states, length=length, switch_prob=0.4, emission="gaussian",
                  dim=dim, separation=separation, noise=noise)
    # one sample, split: train and test share the HMM's means
    both = hmm_sequences(num_train + num_test, seed=seed, **common)  # type: ignore[arg-type]
    train = SyntheticSequences(both.inputs[:num_train], both.labels[:num_train],
                               both.lengths[:num_train], both.start, both.transition, both.means)
    test = SyntheticSequences(both.inputs[num_train:], both.labels[num_train:],
                              both.lengths[num_train:], both.start, both.transition, both.means)
    chain = LinearChain(num_states)
    weights = torch.zeros(dim + 1, num_states, requires_grad=True)  # emissions + bias
    transition = torch.zeros(num_states, num_states, requires_grad=True)
    start = torch.zeros(num_states, requires_grad=True)
    end = torch.zeros(num_states, requires_grad=True)
    params = [weights, transition, start, end]

    def potentials(data: SyntheticSequences) -> torch.Tensor:
        feats = torch.cat([data.inputs, torch.ones_like(data.inputs[..., :1])], dim=-1)
        return chain.potentials_from(feats @ weights, transition, start, end, data.lengths)

    def loss_fn() -> torch.Tensor:
        pot = potentials(train)
        nll = chain.log_partition(pot, train.lengths) - chain.score(pot, train.labels, train.lengths)
        return nll.mean() + 0.5 * l2 * sum((p**2).sum() for p in params)

    optimizer = torch.optim.LBFGS(params, max_iter=iterations, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = loss_fn()
        loss.backward()
        return loss

    began = time.perf_counter()
    optimizer.step(closure)
    seconds = time.perf_counter() - began
    with torch.no_grad():
        final = float(loss_fn())
        result = DemoResult(
            train_accuracy=_accuracy(chain, potentials(train), train),
            test_accuracy=_accuracy(chain, potentials(test), test),
            oracle_test_accuracy=_accuracy(chain, _oracle_potentials(chain, test, noise), test),
            final_loss=final,
            seconds=seconds,
        )
    if verbose:
        print(f"HMM: {num_states} states, {dim}-d Gaussian emissions (noise {noise}), "
              f"{num_train} train / {num_test} test sequences of length {length}")
        print(f"CRF trained by L-BFGS in {seconds:.2f} s: mean NLL {final:.4f}")
        print(f"token accuracy: train {result.train_accuracy:.4f}, test {result.test_accuracy:.4f} "
              f"(true-HMM Viterbi on test: {result.oracle_test_accuracy:.4f})")
        if not math.isfinite(final):
            raise RuntimeError("training diverged")
    return result
