"""Brute-force oracle: every operation of a structure checked against enumeration.

``check_structure(structure, potentials, lengths, enumerate_labels)`` scores every structure of
every example with ``structure.score`` on a single example and compares log-partition,
marginals, max, argmax, k-best, kmax, smoothed max and cost-augmented decoding (Hamming and 0/1)
with what the enumeration gives. Use float64 and tiny sizes.
"""

from __future__ import annotations

from typing import Callable, Iterable, Optional

import torch
from torch import Tensor

from structssl.structures.base import Structure, as_tuple, like


def _example(potentials, b: int):
    return like(potentials, [x[b : b + 1] for x in as_tuple(potentials)])


def _close(a: Tensor, b: Tensor, msg: str) -> None:
    torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-7, msg=msg)


def check_structure(
    structure: Structure,
    potentials,
    lengths: Optional[Tensor],
    enumerate_labels: Callable[[int], Iterable[Tensor]],
    k: int = 4,
) -> None:
    """Compare every operation with enumeration. ``enumerate_labels(b)`` yields the labels of
    every structure of example ``b`` (shaped like one example's labels, without batch dim)."""
    tensors = as_tuple(potentials)
    batch = tensors[0].shape[0]
    log_z = structure.log_partition(potentials, lengths)
    marg = as_tuple(structure.marginals(potentials, lengths))
    best_labels, best_scores = structure.argmax(potentials, lengths)
    kb_labels, kb_scores = structure.kbest(potentials, k, lengths)
    kmax = structure.kmax(potentials, k, lengths)
    smooth = structure.smoothed_max(potentials, 0.5, lengths)
    for b in range(batch):
        pot_b = _example(potentials, b)
        len_b = None if lengths is None else lengths[b : b + 1]
        all_labels = [y.unsqueeze(0) for y in enumerate_labels(b)]
        scores = torch.cat([structure.score(pot_b, y, len_b) for y in all_labels])
        parts = [as_tuple(structure.to_parts(y, len_b)) for y in all_labels]
        n = len(all_labels)
        where = f"example {b}"
        _close(log_z[b], torch.logsumexp(scores, 0), f"log_partition, {where}")
        _close(smooth[b], 0.5 * torch.logsumexp(scores / 0.5, 0), f"smoothed_max, {where}")
        probs = torch.softmax(scores, 0)
        for i, m in enumerate(marg):
            expected = sum(probs[s] * parts[s][i][0].to(m.dtype) for s in range(n))
            _close(m[b], expected, f"marginals[{i}], {where}")
        order = scores.sort(descending=True).values
        _close(best_scores[b], order[0], f"argmax score, {where}")
        _close(structure.score(pot_b, best_labels[b : b + 1], len_b)[0], order[0], f"argmax labels, {where}")
        top = torch.full((k,), float("-inf"), dtype=scores.dtype)
        top[: min(k, n)] = order[:k]
        _close(kb_scores[b], top, f"kbest scores, {where}")
        _close(kmax[b], top, f"kmax, {where}")
        real = [kb_labels[b, r] for r in range(min(k, n))]
        for r, y in enumerate(real):
            _close(structure.score(pot_b, y.unsqueeze(0), len_b)[0], top[r], f"kbest rank {r}, {where}")
        keys = {tuple(y.flatten().tolist()) for y in real}
        assert len(keys) == len(real), f"kbest structures not distinct, {where}"
        # round trip labels -> parts -> labels
        for y in all_labels[:: max(1, n // 7)]:
            back = structure.from_parts(structure.to_parts(y, len_b), len_b)
            assert torch.equal(back, y), f"from_parts(to_parts(y)) != y, {where}"
        # cost-augmented decoding against enumeration
        # a target drawn from this example's own structures (valid for its length)
        tgt = all_labels[(7 * b + 3) % n]
        ham = torch.stack([structure.hamming(tgt, y, len_b)[0] for y in all_labels]).to(scores.dtype)
        _, aug = structure.cost_augmented_argmax(pot_b, tgt, len_b, cost="hamming")
        _close(aug[0], (scores + ham).max(), f"hamming cost-augmented argmax, {where}")
        zero_one = (ham > 0).to(scores.dtype)
        lab01, aug01 = structure.cost_augmented_argmax(pot_b, tgt, len_b, cost="zero_one")
        _close(aug01[0], (scores + zero_one).max(), f"0/1 cost-augmented argmax, {where}")
        _, augk = structure.cost_augmented_kbest(pot_b, tgt, 2, len_b, cost="zero_one")
        others = (scores[zero_one > 0] + 1).sort(descending=True).values
        expect = torch.full((2,), float("-inf"), dtype=scores.dtype)
        expect[: min(2, len(others))] = others[:2]
        _close(augk[0], expect, f"0/1 cost-augmented kbest, {where}")
