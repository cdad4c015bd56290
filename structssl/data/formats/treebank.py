"""Bracketed treebanks (Penn Treebank ``.mrg``), CNF conversion, and trees as labelled spans.

Reading: :func:`read_treebank` parses s-expressions (``(S (NP (DT the) (NN dog)) ...)``) from a
file, a ``.gz`` file, a directory or a zip archive such as NLTK's ``treebank.zip``, without
nltk. A node whose children include a word must be a preterminal ``(TAG word)``; the PTB's
outer wrapper ``( (S ...) )`` has the empty label. Malformed input raises ``ValueError``
naming the file (and zip member) and the 1-based line.

Normalisation (:func:`normalize_tree`, each step optional):

* ``remove_empty``: delete ``-NONE-`` preterminals (traces, empty elements) and every node left
  without children;
* ``remove_function_tags``: ``NP-SBJ-1`` -> ``NP``, ``NP=2`` -> ``NP``, ``PP-LOC|ADVP`` ->
  ``PP``; labels starting with ``-`` (``-NONE-``, ``-LRB-``) are kept;
* ``remove_root``: drop the empty-labelled wrapper with a single child (otherwise the empty
  label becomes ``ROOT``).

CNF (:func:`to_cnf`): the result is a binary tree over the words in which every span has
exactly one symbol, which is what the ``CKY`` structure scores.

1. Unary chains are collapsed, bottom-up: a node ``X`` with a single child ``Y`` becomes one
   node. With ``unary="join"`` (default) its label is ``X+Y`` (so a one-word ``NP`` over
   ``NN`` is the preterminal ``NP+NN``, and ``S -> VP`` is ``S+VP``); ``"top"`` keeps ``X``;
   ``"bottom"`` keeps ``Y`` (so preterminals are always POS tags).
2. Nodes with k > 2 children are binarised with intermediate symbols ``@X`` (zeroth-order
   horizontal Markovisation, Klein and Manning 2003). ``factor="right"`` (default):
   ``X -> c1 @X, @X -> c2 @X, ..., @X -> c_{k-1} c_k``; ``factor="left"`` mirrors it.
   :func:`from_cnf` undoes both steps.

Spans (:func:`tree_spans`): a CNF tree over n words is the list of its ``2n - 1`` nodes in
pre-order as ``(start, end_inclusive, symbol)``: the root ``(0, n - 1, .)`` first, then the
left subtree, then the right one; width-1 spans are the preterminals. :func:`encode_trees`
turns trees into ``{"tokens", "spans"}`` examples with a symbol :class:`Vocabulary`;
:func:`~structssl.data.batch.collate_trees` pads them to the ``CKY`` labels layout
(B, 2N - 1, 3) with zero rows.

References: Marcus, Santorini and Marcinkiewicz (1993) for the Penn Treebank; Klein and
Manning (2003), Accurate unlexicalized parsing, for binarisation and ``@`` symbols.
"""

from __future__ import annotations

import functools
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Literal, Optional, Union

import torch
from torch import Tensor

from structssl.data.paths import DecodingError, PathLike, data_file, open_binary
from structssl.data.records import Vocabulary

__all__ = [
    "Tree",
    "NONE_TAG",
    "parse_trees",
    "read_treebank",
    "load_ptb_sample",
    "normalize_tree",
    "strip_function_tag",
    "to_cnf",
    "from_cnf",
    "tree_spans",
    "spans_to_tree",
    "encode_trees",
]

NONE_TAG = "-NONE-"
_TOKEN = re.compile(r"\(|\)|[^\s()]+")


@dataclass(frozen=True, slots=True)
class Tree:
    """A labelled ordered tree; leaves are words (``str``), preterminals ``(TAG word)``.

    Attributes:
        label: the node's symbol ("" for the PTB's outer wrapper).
        children: subtrees and words.
        source: where the tree starts (``file[:member]:line``), for error messages.
    """

    label: str
    children: tuple[Union["Tree", str], ...]
    source: str = ""

    @property
    def is_preterminal(self) -> bool:
        """Whether the node is ``(TAG word)``."""
        return len(self.children) == 1 and isinstance(self.children[0], str)

    def leaves(self) -> list[str]:
        """The words, left to right."""
        out: list[str] = []
        stack: list[Union[Tree, str]] = [self]
        while stack:
            node = stack.pop()
            if isinstance(node, str):
                out.append(node)
            else:
                stack.extend(reversed(node.children))
        return out

    def pos(self) -> list[tuple[str, str]]:
        """``(word, tag)`` pairs of the preterminals, left to right."""
        out: list[tuple[str, str]] = []
        stack: list[Union[Tree, str]] = [self]
        while stack:
            node = stack.pop()
            if isinstance(node, Tree):
                if node.is_preterminal:
                    out.append((str(node.children[0]), node.label))
                else:
                    stack.extend(reversed(node.children))
        return out

    def __str__(self) -> str:
        inner = " ".join(str(c) for c in self.children)
        return f"({self.label} {inner})" if self.label else f"( {inner})"


# ---------------------------------------------------------------------------------- parsing
def parse_trees(text: str, source: str = "<string>") -> list[Tree]:
    """Parse all bracketed trees in ``text``.

    Args:
        text: zero or more s-expressions.
        source: the name used in error messages and :attr:`Tree.source`.

    Returns:
        The trees, in order.

    Raises:
        ValueError: ``"<source>:<line>: expected ..."`` for unbalanced brackets, empty
            brackets, a word outside brackets, or a node mixing words and subtrees.
    """
    trees: list[Tree] = []
    # stack frames: [label, children, line, number of word children]
    stack: list[list] = []
    expect_label = False
    findall = _TOKEN.findall
    for line, text_line in enumerate(text.split("\n"), start=1):
        for tok in findall(text_line):
            if expect_label:
                expect_label = False
                if tok == ")":
                    raise ValueError(
                        f"{source}:{line}: expected a label or a subtree after '('; got ')'"
                    )
                if tok != "(":
                    stack[-1][0] = tok
                    continue
            if tok == "(":
                stack.append(["", [], line, 0])
                expect_label = True
            elif tok == ")":
                if not stack:
                    raise ValueError(f"{source}:{line}: expected '(' to open a tree; got ')'")
                label, children, start, words = stack.pop()
                if not children:
                    raise ValueError(
                        f"{source}:{line}: expected children in ({label} ...); got none"
                    )
                if words and len(children) != 1:
                    raise ValueError(
                        f"{source}:{start}: expected a preterminal ({label or '?'} word) with one "
                        f"word, or only subtrees; got {len(children)} children of which "
                        f"{words} words"
                    )
                tree = Tree(label, tuple(children), f"{source}:{start}")
                if stack:
                    stack[-1][1].append(tree)
                else:
                    trees.append(tree)
            else:
                if not stack:
                    raise ValueError(f"{source}:{line}: expected '(' to open a tree; got {tok!r}")
                frame = stack[-1]
                frame[1].append(tok)
                frame[3] += 1
    if stack:
        raise ValueError(
            f"{source}:{stack[-1][2]}: expected ')' closing the tree opened here; "
            "reached the end of the input"
        )
    return trees


def _decode(data: bytes, source: str, encoding: str) -> str:
    """The text of a file; a UTF-8 byte-order mark is dropped (as the other readers do)."""
    if encoding.replace("-", "").lower() == "utf8" and data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise DecodingError(f"{source}:{line}: expected {encoding} text; {err.reason}") from None


def read_treebank(
    path: PathLike,
    pattern: str = r"(^|/)wsj_\d+\.mrg$",
    encoding: str = "utf-8",
) -> list[Tree]:
    """Read bracketed trees from a file, a directory or a zip archive.

    Args:
        path: a ``.mrg``-style file (``.gz`` transparently), a directory (files whose
            relative path matches ``pattern``, sorted) or a ``.zip`` archive (members matching
            ``pattern``, sorted; e.g. NLTK's ``treebank.zip``: ``treebank/combined/wsj_*.mrg``).
        pattern: regular expression (``re.search``) selecting files in a directory or zip.
        encoding: the text encoding.

    Returns:
        The trees in file order, each with its :attr:`Tree.source`.

    Raises:
        ValueError: malformed trees (file, member and line named), or no matching files.
    """
    path = Path(path)
    regex = re.compile(pattern)
    if path.is_dir():
        files = sorted(
            p
            for p in path.rglob("*")
            if p.is_file() and regex.search(p.relative_to(path).as_posix())
        )
        if not files:
            raise ValueError(f"{path}: expected files matching {pattern!r}; found none")
        return [t for f in files for t in read_treebank(f, pattern, encoding)]
    if path.suffix == ".zip":
        if not path.is_file():
            raise FileNotFoundError(f"no such file: {path}")
        trees: list[Tree] = []
        with zipfile.ZipFile(path) as z:
            members = sorted(n for n in z.namelist() if not n.endswith("/") and regex.search(n))
            if not members:
                raise ValueError(f"{path}: expected zip members matching {pattern!r}; found none")
            for name in members:
                source = f"{path}:{name}"
                trees.extend(parse_trees(_decode(z.read(name), source, encoding), source))
        return trees
    with open_binary(path) as f:
        data = f.read()
    return parse_trees(_decode(data, str(path), encoding), str(path))


def load_ptb_sample(data_dir: Optional[PathLike] = None) -> list[Tree]:
    """The NLTK Penn Treebank sample (3,914 trees of WSJ 0001-0199), as read (not normalised).

    Args:
        data_dir: the data directory (see :func:`~structssl.data.paths.resolve_data_dir`).

    Returns:
        The trees from ``<data_dir>/penn_treebank_sample/treebank.zip``
        (``treebank/combined/wsj_*.mrg``).
    """
    path = data_file(
        Path("penn_treebank_sample") / "treebank.zip",
        "NLTK's treebank.zip (with treebank/combined/wsj_NNNN.mrg bracketed trees)",
        data_dir,
    )
    return read_treebank(path, pattern=r"^treebank/combined/wsj_\d+\.mrg$")


# ---------------------------------------------------------------------------- normalising
@functools.lru_cache(maxsize=4096)
def strip_function_tag(label: str) -> str:
    """``NP-SBJ-1`` -> ``NP``; ``NP=2`` -> ``NP``; ``ADVP|PRT`` -> ``ADVP``; ``-NONE-`` kept."""
    if not label or label.startswith("-"):
        return label
    cut = re.split(r"[-=|]", label, maxsplit=1)[0]
    return cut or label


def normalize_tree(
    tree: Tree,
    *,
    remove_empty: bool = True,
    remove_function_tags: bool = True,
    remove_root: bool = True,
) -> Tree:
    """Remove empty elements, function tags and the outer wrapper (see the module docstring).

    Args:
        tree: a tree as read.
        remove_empty: delete ``-NONE-`` preterminals and nodes left empty.
        remove_function_tags: strip function tags and indices from labels.
        remove_root: drop an empty-labelled root with one child (else label it ``ROOT``).

    Returns:
        A new tree (the input is not changed).

    Raises:
        ValueError: the tree has no words left after removing empty elements.
    """

    def walk(node: Tree) -> Optional[Tree]:
        if node.is_preterminal:
            if remove_empty and node.label == NONE_TAG:
                return None
            label = strip_function_tag(node.label) if remove_function_tags else node.label
            return Tree(label, node.children, node.source)
        kids = [walk(c) for c in node.children if isinstance(c, Tree)]
        kept = tuple(k for k in kids if k is not None)
        if not kept:
            return None
        label = strip_function_tag(node.label) if remove_function_tags else node.label
        return Tree(label, kept, node.source)

    out = walk(tree)
    if out is None:
        raise ValueError(f"{tree.source}: expected a tree with words; only {NONE_TAG} elements")
    if out.label == "":
        if remove_root and len(out.children) == 1 and isinstance(out.children[0], Tree):
            return out.children[0]
        return Tree("ROOT", out.children, out.source)
    return out


# ------------------------------------------------------------------------------------- CNF
def to_cnf(
    tree: Tree,
    *,
    factor: Literal["right", "left"] = "right",
    unary: Literal["join", "top", "bottom"] = "join",
    join: str = "+",
    intermediate: str = "@",
) -> Tree:
    """Binarise and collapse unary chains (see the module docstring for the scheme).

    Args:
        tree: a tree (normally after :func:`normalize_tree`).
        factor: ``"right"`` or ``"left"`` factored binarisation.
        unary: how a unary chain's labels are collapsed: ``"join"`` (``X+Y``), ``"top"``,
            ``"bottom"``.
        join: the separator of joined labels.
        intermediate: the prefix of intermediate binarisation symbols.

    Returns:
        A new tree whose internal nodes all have two children and whose leaves are
        preterminals.
    """
    if factor not in ("right", "left"):
        raise ValueError(f"factor must be 'right' or 'left'; got {factor!r}")
    if unary not in ("join", "top", "bottom"):
        raise ValueError(f"unary must be 'join', 'top' or 'bottom'; got {unary!r}")

    def merge(top: str, bottom: str) -> str:
        if unary == "join":
            return f"{top}{join}{bottom}"
        return top if unary == "top" else bottom

    def walk(node: Tree) -> Tree:
        if node.is_preterminal:
            return node
        kids = [walk(c) for c in node.children if isinstance(c, Tree)]
        if len(kids) == 1:  # unary: collapse into the (already processed) child
            child = kids[0]
            return Tree(merge(node.label, child.label), child.children, node.source)
        sym = intermediate + node.label
        if factor == "right":
            acc = Tree(sym, (kids[-2], kids[-1]), node.source)
            for k in reversed(kids[1:-2]):
                acc = Tree(sym, (k, acc), node.source)
            return Tree(node.label, (kids[0], acc) if len(kids) > 2 else tuple(kids), node.source)
        acc = Tree(sym, (kids[0], kids[1]), node.source)
        for k in kids[2:-1]:
            acc = Tree(sym, (acc, k), node.source)
        return Tree(node.label, (acc, kids[-1]) if len(kids) > 2 else tuple(kids), node.source)

    return walk(tree)


def from_cnf(tree: Tree, *, join: str = "+", intermediate: str = "@") -> Tree:
    """Undo :func:`to_cnf` with ``unary="join"``: splice out ``@X`` nodes, expand ``X+Y``.

    Args:
        tree: a CNF tree.
        join: the separator of joined labels.
        intermediate: the prefix of intermediate symbols.

    Returns:
        The n-ary tree (exactly the input of :func:`to_cnf` when it was made with
        ``unary="join"`` from labels containing neither ``join`` nor the ``intermediate``
        prefix).
    """

    def expand(label: str, children: tuple[Union[Tree, str], ...], source: str) -> Tree:
        parts = label.split(join)
        node = Tree(parts[-1], children, source)
        for p in reversed(parts[:-1]):
            node = Tree(p, (node,), source)
        return node

    def flat(node: Tree) -> list[Tree]:
        """The node's children with intermediate nodes spliced in."""
        out: list[Tree] = []
        for c in node.children:
            assert isinstance(c, Tree)
            if c.label.startswith(intermediate):
                out.extend(flat(c))
            else:
                out.append(walk(c))
        return out

    def walk(node: Tree) -> Tree:
        if node.is_preterminal:
            return expand(node.label, node.children, node.source)
        return expand(node.label, tuple(flat(node)), node.source)

    return walk(tree)


def tree_spans(tree: Tree) -> list[tuple[int, int, str]]:
    """The labelled spans ``(start, end_inclusive, label)`` of a CNF tree in pre-order.

    Args:
        tree: a binary tree whose leaves are preterminals (see :func:`to_cnf`).

    Returns:
        ``2n - 1`` spans for n words: the root first, then the left and right subtrees.

    Raises:
        ValueError: a node that is neither a preterminal nor binary.
    """
    spans: list[tuple[int, int, str]] = []

    def walk(node: Tree, start: int) -> int:
        if node.is_preterminal:
            spans.append((start, start, node.label))
            return start + 1
        if len(node.children) != 2:
            raise ValueError(
                f"{node.source}: expected a CNF tree (binary nodes over preterminals); "
                f"got a {node.label or 'root'} node with {len(node.children)} children "
                "(use to_cnf)"
            )
        index = len(spans)
        spans.append((start, -1, node.label))
        left, right = node.children
        assert isinstance(left, Tree) and isinstance(right, Tree)
        end = walk(right, walk(left, start))
        spans[index] = (start, end - 1, node.label)
        return end

    walk(tree, 0)
    return spans


def spans_to_tree(
    tokens: Iterable[str], spans: Union[Tensor, Iterable[tuple[int, int, int]]], symbols: Vocabulary
) -> Tree:
    """Rebuild a CNF tree from pre-order spans (the inverse of :func:`tree_spans`).

    Args:
        tokens: the n words.
        spans: (2n - 1, 3) rows ``(start, end_inclusive, symbol index)`` in pre-order (extra
            all-zero padding rows after the first 2n - 1 are ignored).
        symbols: the symbol vocabulary.

    Returns:
        The tree.

    Raises:
        ValueError: the spans do not form a binary tree over the words in pre-order.
    """
    words = list(tokens)
    n = len(words)
    rows = spans.tolist() if isinstance(spans, Tensor) else [tuple(r) for r in spans]
    if len(rows) < 2 * n - 1 or n == 0:
        raise ValueError(
            f"spans must have 2n - 1 = {2 * n - 1} rows for {n} words; got {len(rows)}"
        )
    rows = rows[: 2 * n - 1]
    position = 0

    def bad(detail: str) -> ValueError:
        return ValueError(f"spans must be a binary tree over {n} words in pre-order; {detail}")

    def build(start: int, end: int) -> Tree:
        nonlocal position
        s, e, sym = (int(v) for v in rows[position])
        if (s, e) != (start, end):
            raise bad(f"row {position} is ({s}, {e}), expected ({start}, {end})")
        if not 0 <= sym < len(symbols):
            raise bad(f"row {position} has symbol {sym}, expected 0..{len(symbols) - 1}")
        position += 1
        if start == end:
            return Tree(symbols[sym], (words[start],))
        mid = int(rows[position][1]) if position < len(rows) else -1
        if not start <= mid < end:
            raise bad(f"row {position} does not split ({start}, {end})")
        left = build(start, mid)
        right = build(mid + 1, end)
        return Tree(symbols[sym], (left, right))

    return build(0, n - 1)


def encode_trees(
    trees: Iterable[Tree],
    symbols: Optional[Vocabulary] = None,
) -> tuple[list[dict[str, object]], Vocabulary]:
    """CNF trees as examples ``{"tokens": tuple of words, "spans": (2n - 1, 3) long tensor}``.

    Args:
        trees: CNF trees (see :func:`to_cnf`).
        symbols: a fixed symbol vocabulary (unknown symbols raise ``ValueError``); default:
            all symbols of ``trees``, sorted.

    Returns:
        The examples and the symbol vocabulary.
    """
    listed = [(t, tree_spans(t)) for t in trees]
    if symbols is None:
        symbols = Vocabulary.build(label for _, spans in listed for _, _, label in spans)
    examples: list[dict[str, object]] = []
    for tree, spans in listed:
        rows = []
        for s, e, label in spans:
            index = symbols.get(label)
            if index is None:
                raise ValueError(f"{tree.source}: symbol {label!r} is not in the symbol vocabulary")
            rows.append((s, e, index))
        examples.append(
            {"tokens": tuple(tree.leaves()), "spans": torch.tensor(rows, dtype=torch.long)}
        )
    return examples, symbols
