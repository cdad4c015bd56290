"""Parse trees as bracketed strings, e.g. ``"(S (NP (D the) (N dog)) (V ran))"``, to and from
the labels of :class:`~structssl.structures.cky.CKY` (labelled spans ``(start, end, symbol)``
in pre-order, rows ``>= 2 * length - 1`` zero)."""

from __future__ import annotations

import re
from typing import Optional, Sequence

import torch
from torch import Tensor

__all__ = ["to_bracketed", "from_bracketed", "words_from_bracketed"]

_TOKEN = re.compile(r"\(|\)|[^\s()]+")


def to_bracketed(
    labels: Tensor,
    lengths: Optional[Tensor],
    symbols: Sequence[str],
    words: Optional[Sequence[Sequence[str]]] = None,
) -> list[str]:
    """Trees as bracketed strings, e.g. ``"(S (NP (D the) (N dog)) (V ran))"``.

    Args:
        labels: (B, 2N - 1, 3) trees in the canonical pre-order (as the decoders give).
        lengths: (B,) sentence lengths (default: from the root rows of ``labels``).
        symbols: the name of each symbol index.
        words: the words of each sentence (default: the position indices ``"0"``, ``"1"``,
            ...).
    """
    if not isinstance(labels, Tensor) or labels.dim() != 3 or labels.shape[2] != 3:
        got = tuple(labels.shape) if isinstance(labels, Tensor) else type(labels).__name__
        raise ValueError(f"labels must have shape (B, 2N - 1, 3); got {got}")
    b = labels.shape[0]
    rows_all = labels.tolist()
    lens = (
        [r[0][1] + 1 for r in rows_all]
        if lengths is None
        else [int(x) for x in lengths.tolist()]
    )
    if len(lens) != b:
        raise ValueError(f"lengths must have shape (B,) = ({b},); got ({len(lens)},)")
    if words is not None and len(words) != b:
        raise ValueError(
            f"words must have one sentence per example (B = {b}); got {len(words)}"
        )
    out = []
    for e in range(b):
        n = lens[e]
        if not 1 <= n <= (labels.shape[1] + 1) // 2:
            raise ValueError(
                f"lengths[{e}] must be in [1, {(labels.shape[1] + 1) // 2}]; got {n}"
            )
        sentence = [str(i) for i in range(n)] if words is None else list(words[e])
        if len(sentence) != n:
            raise ValueError(f"words[{e}] must have length {n}; got {len(sentence)}")
        tokens: list[str] = []
        open_ends: list[int] = []
        for start, end, sym in rows_all[e][: 2 * n - 1]:
            if not 0 <= sym < len(symbols) or not 0 <= start <= end < n:
                raise ValueError(
                    f"labels[{e}] has row {(start, end, sym)} out of range (length {n}, "
                    f"{len(symbols)} symbols)"
                )
            if start < end:
                tokens.append(f"({symbols[sym]}")
                open_ends.append(end)
            else:
                tokens.append(f"({symbols[sym]} {sentence[start]})")
                while open_ends and open_ends[-1] == end:
                    tokens[-1] += ")"
                    open_ends.pop()
        if open_ends:
            raise ValueError(f"labels[{e}] is not a tree in the canonical pre-order")
        out.append(" ".join(tokens))
    return out

def from_bracketed(strings: Sequence[str], symbols: Sequence[str]) -> tuple[Tensor, Tensor]:
    """Parse binary (CNF) bracketed trees into labels.

    Each tree is ``(A left right)`` or a leaf ``(A word)``; words are ignored here (see
    :func:`words_from_bracketed`).

    Returns:
        ``(labels (B, 2N - 1, 3), lengths (B,))`` with N the longest sentence.

    Raises:
        ValueError: naming the string index and character position of malformed,
            non-binary input or an unknown symbol.
    """
    parsed = _parse_all(strings, symbols)
    n = max(len(words) for _, words in parsed)
    labels = torch.zeros(len(parsed), 2 * n - 1, 3, dtype=torch.long)
    for e, (rows, _) in enumerate(parsed):
        labels[e, : len(rows)] = torch.tensor(rows, dtype=torch.long)
    lengths = torch.tensor([len(words) for _, words in parsed], dtype=torch.long)
    return labels, lengths

def words_from_bracketed(strings: Sequence[str], symbols: Sequence[str]) -> list[list[str]]:
    """The leaf words of bracketed trees (validated like :func:`from_bracketed`)."""
    return [words for _, words in _parse_all(strings, symbols)]


def _parse_all(
    strings: Sequence[str], symbols: Sequence[str]
) -> list[tuple[list[list[int]], list[str]]]:
    if isinstance(strings, str):
        raise TypeError("strings must be a sequence of strings, not a single string")
    if len(strings) == 0:
        raise ValueError("strings must contain at least one tree; got an empty sequence")
    index = {s: i for i, s in enumerate(symbols)}
    if len(index) != len(symbols):
        raise ValueError(f"symbols must be distinct; got {list(symbols)}")
    return [_parse_one(s, e, index) for e, s in enumerate(strings)]


def _parse_one(text: str, e: int, index: dict[str, int]) -> tuple[list[list[int]], list[str]]:
    if not isinstance(text, str):
        raise TypeError(f"strings[{e}] must be a str; got {type(text).__name__}")
    tokens = [(m.group(), m.start()) for m in _TOKEN.finditer(text)]

    def fail(message: str, pos: int) -> ValueError:
        return ValueError(f"strings[{e}]: {message} at position {pos}: {text!r}")

    if not tokens:
        raise fail("expected a tree '(SYMBOL ...)', got an empty string", 0)
    rows: list[list[int]] = []
    words: list[str] = []
    stack: list[tuple[int, list[int], int, str]] = []  # open nodes: (row, [children], pos, name)
    t = 0
    while t < len(tokens):
        tok, pos = tokens[t]
        if tok == ")":
            if not stack:
                raise fail("unbalanced ')'", pos)
            row, children, open_pos, open_name = stack.pop()
            if children[0] != 2:
                raise fail(
                    f"node {open_name!r} opened at position {open_pos} has {children[0]} "
                    "child(ren) (expected 2: CKY trees are binary, in Chomsky normal form)",
                    pos,
                )
            rows[row][1] = len(words) - 1
            t += 1
        elif tok == "(":
            if rows and not stack:
                raise fail("unexpected text after the end of the tree", pos)
            if t + 1 >= len(tokens) or tokens[t + 1][0] in "()":
                raise fail(
                    "expected a symbol after '('",
                    tokens[t + 1][1] if t + 1 < len(tokens) else len(text),
                )
            name, name_pos = tokens[t + 1]
            if name not in index:
                raise fail(f"unknown symbol {name!r} (not in symbols)", name_pos)
            if stack:
                stack[-1][1][0] += 1
                if stack[-1][1][0] > 2:
                    raise fail(
                        f"node {stack[-1][3]!r} opened at position {stack[-1][2]} has more than 2 "
                        "children (expected 2: CKY trees are binary, in Chomsky normal form)",
                        pos,
                    )
            if t + 2 < len(tokens) and tokens[t + 2][0] == "(":
                rows.append([len(words), -1, index[name]])
                stack.append((len(rows) - 1, [0], pos, name))
                t += 2
            elif t + 2 < len(tokens) and tokens[t + 2][0] != ")":
                if t + 3 >= len(tokens) or tokens[t + 3][0] != ")":
                    where = tokens[t + 3][1] if t + 3 < len(tokens) else len(text)
                    raise fail(f"expected ')' after the word of leaf {name!r}", where)
                rows.append([len(words), len(words), index[name]])
                words.append(tokens[t + 2][0])
                t += 4
            else:
                where = tokens[t + 2][1] if t + 2 < len(tokens) else len(text)
                raise fail(f"node {name!r} has no children or word", where)
        else:
            raise fail(f"expected '(' but found {tok!r}", pos)
        if not stack and rows and t < len(tokens):
            if tokens[t][0] == ")":
                raise fail("unbalanced ')'", tokens[t][1])
            raise fail("unexpected text after the end of the tree", tokens[t][1])
    if stack:
        raise fail("unbalanced '(': missing ')'", len(text))
    return rows, words
