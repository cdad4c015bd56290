"""Batching: pad variable-length examples into batch-first tensors plus ``lengths``.

Conventions (the project's): padded label values are 0 and validity comes **only** from
``lengths`` (a (B,) long tensor); padded feature indices are 0 (the padding index of
:class:`~structssl.data.features.FeatureExtractor`); padded tree span rows are all zero.

:func:`collate_sequences` is a ``DataLoader`` ``collate_fn`` for examples that are dicts of
per-position tensors (``labels`` (n,), ``features`` (n, F_i), ``inputs`` (n, D), ``words``
(n,)); it returns
``labels`` (B, N), ``features`` (B, N, F_max), ``inputs`` (B, N, D) and ``lengths`` (B,).
:func:`collate_trees` does the same for parse trees, giving the ``CKY`` labels layout
``spans`` (B, 2N - 1, 3) of rows ``(start, end_inclusive, symbol)`` in pre-order.

This module imports only torch and the standard library.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional
from typing import Sequence as Seq

import torch
from torch import Tensor

__all__ = [
    "SEQUENCE_KEYS",
    "pad_sequences",
    "pad_features",
    "collate_sequences",
    "collate_trees",
    "batch_to_device",
]

#: Keys of per-position tensors padded by :func:`collate_sequences` (first dim = length).
SEQUENCE_KEYS = ("labels", "features", "inputs", "words")


def pad_sequences(sequences: Seq[Tensor], padding_value: float = 0) -> tuple[Tensor, Tensor]:
    """Stack tensors of shape (n_i, *rest_i) into (B, N, *rest_max), padding every dim at the end.

    Args:
        sequences: B tensors with the same number of dims and dtype (dims after the first
            may differ in size, e.g. feature slots; they are padded too).
        padding_value: fill value (0 by convention).

    Returns:
        ``(padded, lengths)``: padded (B, N, ...) with N = max n_i, lengths (B,) long.

    Shape:
        sequences[i]: (n_i, ...) -> padded (B, N, ...), lengths (B,).
    """
    if len(sequences) == 0:
        raise ValueError("sequences must hold at least one tensor; got none")
    first = sequences[0]
    for i, s in enumerate(sequences):
        if not isinstance(s, Tensor):
            raise TypeError(f"sequences[{i}] must be a tensor; got {type(s).__name__}")
        if s.dim() != first.dim() or s.dim() == 0:
            raise ValueError(
                f"sequences must all have the same number (>= 1) of dims; sequences[0] has "
                f"{first.dim()}, sequences[{i}] has {s.dim()}"
            )
        if s.dtype != first.dtype:
            raise ValueError(
                f"sequences must share a dtype; sequences[0] is {first.dtype}, "
                f"sequences[{i}] is {s.dtype}"
            )
    shape = [max(s.shape[d] for s in sequences) for d in range(first.dim())]
    out = torch.full(
        (len(sequences), *shape), padding_value, dtype=first.dtype, device=first.device
    )
    for i, s in enumerate(sequences):
        out[(i, *(slice(0, k) for k in s.shape))] = s
    lengths = torch.tensor([s.shape[0] for s in sequences], dtype=torch.long, device=first.device)
    return out, lengths


def pad_features(features: Seq[Tensor]) -> tuple[Tensor, Tensor]:
    """Pad per-sentence sparse feature indices (n_i, F_i) into (B, N, F_max) with 0.

    Args:
        features: B long tensors (n_i, F_i).

    Returns:
        ``(indices (B, N, F_max), lengths (B,))``.
    """
    for i, f in enumerate(features):
        if f.dim() != 2 or f.dtype != torch.long:
            raise ValueError(
                f"features[{i}] must be a 2-D long tensor (n, F); got {f.dim()}-D {f.dtype}"
            )
    return pad_sequences(features, 0)


def collate_sequences(
    examples: Seq[Mapping[str, Any]], sequence_keys: Seq[str] = SEQUENCE_KEYS
) -> dict[str, Any]:
    """Collate dict examples of per-position tensors into a padded batch with ``lengths``.

    Args:
        examples: dicts. Tensors under ``sequence_keys`` have the example's length as first
            dim (all such keys of an example must agree) and are padded with 0; other tensors
            are stacked; other values are gathered into lists.
        sequence_keys: keys of per-position tensors.

    Returns:
        A dict with the padded / stacked / listed values and ``lengths`` (B,) long.

    Raises:
        ValueError: an empty batch, examples with different keys, no per-position key,
            or per-position tensors of one example with different lengths.
    """
    if len(examples) == 0:
        raise ValueError("examples must hold at least one example; got none")
    keys = list(examples[0].keys())
    for i, ex in enumerate(examples):
        if list(ex.keys()) != keys:
            raise ValueError(
                f"examples must share their keys; examples[0] has {keys}, "
                f"examples[{i}] has {list(ex.keys())}"
            )
    seq_keys = [k for k in keys if k in sequence_keys and isinstance(examples[0][k], Tensor)]
    if not seq_keys:
        raise ValueError(
            f"examples must have a per-position tensor under one of {list(sequence_keys)}; "
            f"got keys {keys}"
        )
    lengths: Optional[Tensor] = None
    out: dict[str, Any] = {}
    for i, ex in enumerate(examples):
        for k in seq_keys:
            value = ex[k]
            if not isinstance(value, Tensor) or value.dim() == 0:
                raise ValueError(
                    f"examples[{i}][{k!r}] must be a per-position tensor (length first); got "
                    f"{_describe(value)} (examples of one fixed-size output each, e.g. one "
                    "class, collate with structssl.data.modules.base.stack_collate: give your "
                    "data module collate = staticmethod(stack_collate))"
                )
            first = examples[0][k]
            if value.is_floating_point() and value.shape[1:] != first.shape[1:]:
                raise ValueError(
                    f"examples[{i}][{k!r}] has shape {tuple(value.shape)} and examples[0][{k!r}] "
                    f"{tuple(first.shape)}: dense (floating-point) per-position tensors must "
                    "agree after the length dim (only index tensors, e.g. sparse feature slots, "
                    "are padded there)"
                )
        ns = {k: int(ex[k].shape[0]) for k in seq_keys}
        if len(set(ns.values())) > 1:
            raise ValueError(f"examples[{i}] has per-position tensors of different lengths: {ns}")
    for k in keys:
        values = [ex[k] for ex in examples]
        if k in seq_keys:
            out[k], lens = pad_sequences(values, 0)
            lengths = lens if lengths is None else lengths
        elif isinstance(values[0], Tensor):
            out[k] = torch.stack(values)
        else:
            out[k] = values
    assert lengths is not None
    out["lengths"] = lengths
    return out


def collate_trees(examples: Seq[Mapping[str, Any]]) -> dict[str, Any]:
    """Collate tree examples ``{"spans": (2n - 1, 3) long, ...}`` for the ``CKY`` structure.

    Args:
        examples: dicts with ``spans`` (rows ``(start, end_inclusive, symbol)`` in pre-order,
            as made by :func:`~structssl.data.formats.treebank.encode_trees`), optionally per-word
            tensors under :data:`SEQUENCE_KEYS` (e.g. ``features``, ``inputs``), other values
            (``tokens``) gathered into lists.

    Returns:
        A dict with ``spans`` (B, 2N - 1, 3) long (padding rows all 0), ``lengths`` (B,)
        number of words, the padded per-word tensors and the lists.

    Raises:
        ValueError: a ``spans`` tensor that is not (2n - 1, 3) long.
    """
    if len(examples) == 0:
        raise ValueError("examples must hold at least one example; got none")
    spans = []
    for i, ex in enumerate(examples):
        s = ex.get("spans")
        if not isinstance(s, Tensor) or s.dim() != 2 or s.shape[1] != 3 or s.dtype != torch.long:
            got = f"{tuple(s.shape)} {s.dtype}" if isinstance(s, Tensor) else type(s).__name__
            raise ValueError(f"examples[{i}]['spans'] must be a (2n - 1, 3) long tensor; got {got}")
        if s.shape[0] % 2 != 1:
            raise ValueError(
                f"examples[{i}]['spans'] must have 2n - 1 (odd) rows; got {s.shape[0]}"
            )
        spans.append(s)
    padded, rows = pad_sequences(spans, 0)
    lengths = (rows + 1) // 2
    out: dict[str, Any] = {"spans": padded}
    for k in examples[0]:
        if k == "spans":
            continue
        values = [ex[k] for ex in examples]
        if k in SEQUENCE_KEYS and isinstance(values[0], Tensor):
            out[k], lens = pad_sequences(values, 0)
            if not torch.equal(lens, lengths):
                raise ValueError(
                    f"examples' {k!r} must have one row per word ({lengths.tolist()}); "
                    f"got {lens.tolist()}"
                )
        elif isinstance(values[0], Tensor):
            out[k] = torch.stack(values)
        else:
            out[k] = values
    out["lengths"] = lengths
    return out


def _describe(value: Any) -> str:
    """A value's type, and its shape for a tensor, for error messages."""
    if isinstance(value, Tensor):
        return f"a {value.dim()}-dim tensor of shape {tuple(value.shape)}"
    return type(value).__name__


def _is_text(value: Any) -> bool:
    """A string, or a (possibly empty) sequence of strings (a sentence's tokens)."""
    return isinstance(value, str) or (
        isinstance(value, (list, tuple)) and (not value or isinstance(value[0], str))
    )


def batch_to_device(batch: Any, device: torch.device) -> Any:
    """``batch`` with every tensor moved to ``device``: dicts, lists and tuples of batches are
    walked; token lists (strings, sequences of strings, and lists of those) are kept as they
    are without a visit to each string, which Lightning's generic walk makes (8 % of a
    full-batch CRF fit on CoNLL-2002, whose batches carry every sentence's tokens for the
    constraints). Other values (numbers, None) are kept.

    Shape: any nesting of dicts / lists / tuples (named tuples keep their type) of tensors.
    """
    if isinstance(batch, Tensor):
        return batch.to(device)
    if isinstance(batch, Mapping):
        return type(batch)({k: batch_to_device(v, device) for k, v in batch.items()})
    if isinstance(batch, (list, tuple)):
        if not batch or _is_text(batch) or _is_text(batch[0]):
            return batch
        moved = [batch_to_device(item, device) for item in batch]
        if hasattr(batch, "_fields"):  # a named tuple
            return type(batch)(*moved)
        return type(batch)(moved)
    return batch
