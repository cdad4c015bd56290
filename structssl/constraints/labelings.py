"""Helpers on batched labelings shared by every constraint: label runs, label changes, the
checks of ``labels`` / ``lengths`` / ``tokens`` and the masks built from them.

Shapes: ``labels`` (B, N) long, ``lengths`` (B,), ``tokens`` a list of B token lists; positions
at or past a length are padding and never counted.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Union

import torch
from torch import Tensor

__all__ = ["runs_per_label", "transitions_mask", "LabelSpec", "Tokens"]

LabelSpec = Union[str, int]
Tokens = Sequence[Sequence[str]]


def _valid(lengths: Tensor, n: int) -> Tensor:
    return torch.arange(n, device=lengths.device).view(1, n) < lengths.view(-1, 1)  # (B, N)


def runs_per_label(labels: Tensor, lengths: Tensor, num_labels: int) -> Tensor:
    """Number of maximal runs of each label per example.

    Shape:
        labels: (B, N) long; lengths: (B,). Returns (B, C) long.
    """
    _check_batch(labels, lengths, None, False, num_labels)
    b, n = labels.shape
    valid = _valid(lengths, n)
    prev = torch.cat([torch.full_like(labels[:, :1], -1), labels[:, :-1]], dim=1)
    start = valid & (labels != prev)  # (B, N)
    out = torch.zeros(b, num_labels, dtype=torch.long, device=labels.device)
    return out.scatter_add_(1, labels.clamp(0, num_labels - 1), start.long())


def transitions_mask(labels: Tensor, lengths: Tensor) -> Tensor:
    """``[t >= 1, t < length, y_t != y_{t-1}]``: a label change between positions t-1 and t.

    Shape:
        labels: (B, N) long; lengths: (B,). Returns (B, N) bool (column 0 is False).
    """
    valid = _valid(lengths, labels.shape[1])
    change = torch.zeros_like(valid)
    change[:, 1:] = labels[:, 1:] != labels[:, :-1]
    return change & valid


def _check_batch(
    labels: Tensor,
    lengths: Tensor,
    tokens: Optional[Tokens],
    needs_tokens: bool,
    num_labels: Optional[int] = None,
    owner: str = "this constraint",
) -> None:
    if not isinstance(labels, Tensor) or labels.dim() != 2 or labels.dtype != torch.long:
        got = (tuple(labels.shape), labels.dtype) if isinstance(labels, Tensor) else type(labels).__name__
        raise ValueError(f"labels must be a long tensor of shape (B, N); got {got}")
    b, n = labels.shape
    if not isinstance(lengths, Tensor) or lengths.shape != (b,):
        got = tuple(lengths.shape) if isinstance(lengths, Tensor) else type(lengths).__name__
        raise ValueError(f"lengths must have shape (B,) = ({b},); got {got}")
    if labels.is_meta or lengths.is_meta:
        raise ValueError("labels and lengths must hold data on a real device; got a meta tensor")
    if lengths.device != labels.device:
        raise ValueError(
            f"lengths must be on the device of labels ({labels.device}); got {lengths.device}"
        )
    if lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise ValueError(f"lengths must have an integer dtype; got {lengths.dtype}")
    if bool((lengths < 0).any()) or bool((lengths > n).any()):
        raise ValueError(f"lengths must lie in [0, N] = [0, {n}]; got {lengths.tolist()}")
    if num_labels is not None:
        # out-of-range ids are an error, never clamped into another label's count
        bad = _valid(lengths, n) & ((labels < 0) | (labels >= num_labels))
        if bool(bad.any()):
            e, t = bad.nonzero()[0].tolist()
            raise ValueError(
                f"labels must be label ids in [0, {num_labels}) at positions < length; example "
                f"{e}, position {t} has {int(labels[e, t])}"
            )
    if needs_tokens:
        _check_tokens(tokens, lengths, owner)


def _check_tokens(tokens: Optional[Tokens], lengths: Tensor, owner: str = "this constraint") -> None:
    if tokens is None:
        raise ValueError(
            f"tokens are required by {owner} (a list of B token lists: a batch's 'tokens', which "
            "the data module's examples must carry); got None"
        )
    if len(tokens) != lengths.shape[0]:
        raise ValueError(f"tokens must hold B = {lengths.shape[0]} token lists; got {len(tokens)}")
    for i, (toks, length) in enumerate(zip(tokens, lengths.tolist())):
        if len(toks) < length:
            raise ValueError(f"tokens[{i}] has {len(toks)} tokens, fewer than its length {length}")


def _token_mask(tokens: Tokens, n: int, predicate: Callable[[str], bool], device: torch.device) -> Tensor:
    """(B, N) bool ``predicate(token)`` (False beyond each token list)."""
    rows = [[predicate(tok) for tok in toks[:n]] + [False] * (n - min(len(toks), n)) for toks in tokens]
    return torch.tensor(rows, dtype=torch.bool, device=device).view(len(tokens), n)


def _label_mask(indices: Sequence[int], num_labels: int, device: torch.device) -> Tensor:
    mask = torch.zeros(num_labels, dtype=torch.bool, device=device)
    mask[list(indices)] = True
    return mask


def _check_weight(weight: float) -> float:
    if not isinstance(weight, (int, float)) or isinstance(weight, bool) or not weight >= 0:
        raise ValueError(f"weight must be a number >= 0; got {weight!r}")
    return float(weight)


def _check_label_list(labels: object, name: str) -> list[LabelSpec]:
    if isinstance(labels, (str, int)):
        return [labels]
    if not isinstance(labels, (list, tuple)) or len(labels) == 0:
        raise ValueError(f"{name} must be a non-empty list of label names; got {labels!r}")
    return list(labels)



def _hinge(x: Tensor) -> Tensor:
    return x.clamp(min=0)
