"""Bracketed treebanks: parsing, normalisation, CNF, spans, collate (fixtures written here)."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from structssl.data.batch import collate_trees
from structssl.data.records import Vocabulary
from structssl.data.formats.treebank import (
    Tree,
    encode_trees,
    from_cnf,
    load_ptb_sample,
    normalize_tree,
    parse_trees,
    read_treebank,
    spans_to_tree,
    strip_function_tag,
    to_cnf,
    tree_spans,
)

MRG = """\
( (S
    (NP-SBJ-1 (NNP Pierre) (NNP Vinken) )
    (VP (MD will)
      (VP (VB join)
        (NP (DT the) (NN board) )
        (S (NP-SBJ (-NONE- *-1) ))
        (NP-TMP (NNP Nov.) (CD 29) )))
    (. .) ))
( (S (NP=2 (NN Rain)) (VP (VBZ falls))) )
"""


def test_parse_and_read(tmp_path: Path) -> None:
    path = tmp_path / "wsj_0001.mrg"
    path.write_text(MRG)
    trees = read_treebank(path)
    assert len(trees) == 2
    assert trees[0].label == "" and trees[0].source == f"{path}:1"
    assert trees[1].source == f"{path}:9"
    assert trees[0].leaves()[:3] == ["Pierre", "Vinken", "will"]
    bom = tmp_path / "bom.mrg"  # a UTF-8 byte-order mark (saved by some editors) is not a token
    bom.write_bytes(b"\xef\xbb\xbf" + MRG.encode("utf-8"))
    assert [t.leaves() for t in read_treebank(bom)] == [t.leaves() for t in trees]
    assert ("*-1", "-NONE-") in trees[0].pos()
    assert str(parse_trees("(A (B x) (C y))")[0]) == "(A (B x) (C y))"


def test_read_zip_and_directory(tmp_path: Path) -> None:
    archive = tmp_path / "treebank.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("treebank/combined/wsj_0002.mrg", MRG)
        z.writestr("treebank/combined/wsj_0001.mrg", "((S (NN a)))\n")
        z.writestr("treebank/combined/README", "not a tree")
        z.writestr("treebank/parsed/wsj_0001.prd", "((S (NN ignored)))\n")
    trees = read_treebank(archive, pattern=r"^treebank/combined/wsj_\d+\.mrg$")
    assert [len(t.leaves()) for t in trees] == [1, 10, 2]  # members sorted
    assert trees[0].source == f"{archive}:treebank/combined/wsj_0001.mrg:1"
    folder = tmp_path / "dir" / "sub"
    folder.mkdir(parents=True)
    (folder / "wsj_0003.mrg").write_text(MRG)
    assert len(read_treebank(tmp_path / "dir")) == 2
    with pytest.raises(
        ValueError, match=re.escape(f"{archive}: expected zip members matching 'nothing'")
    ):
        read_treebank(archive, pattern="nothing")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("(S (NP (DT the) (NN dog))\n", "<string>:1: expected ')' closing the tree opened here"),
        ("(S (NN a)))\n", "<string>:1: expected '(' to open a tree; got ')'"),
        ("(S (NN a))\nword\n", "<string>:2: expected '(' to open a tree; got 'word'"),
        ("(S\n ()\n)", "<string>:2: expected a label or a subtree after '('; got ')'"),
        ("(S\n (NP the (NN dog)))", "<string>:2: expected a preterminal (NP word) with one word"),
        ("(S (NP))", "<string>:1: expected children in (NP ...); got none"),
    ],
)
def test_parse_malformed(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_trees(text)


def test_malformed_zip_member_names_member_and_line(tmp_path: Path) -> None:
    archive = tmp_path / "t.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("wsj_0001.mrg", "((S (NN a)))\n\n((S (NN b))\n")
    with pytest.raises(ValueError, match=re.escape(f"{archive}:wsj_0001.mrg:3: expected ')'")):
        read_treebank(archive)


def test_normalize() -> None:
    tree = parse_trees(MRG)[0]
    norm = normalize_tree(tree)
    assert str(norm) == (
        "(S (NP (NNP Pierre) (NNP Vinken)) (VP (MD will) (VP (VB join) (NP (DT the) (NN board)) "
        "(NP (NNP Nov.) (CD 29)))) (. .))"
    )
    kept = normalize_tree(tree, remove_empty=False, remove_function_tags=False, remove_root=False)
    assert kept.label == "ROOT" and "-NONE-" in str(kept) and "NP-SBJ-1" in str(kept)
    assert tree.label == ""  # input unchanged
    assert [
        strip_function_tag(x) for x in ("NP-SBJ-1", "NP=2", "ADVP|PRT", "-NONE-", "-LRB-", "PRP$")
    ] == ["NP", "NP", "ADVP", "-NONE-", "-LRB-", "PRP$"]
    with pytest.raises(ValueError, match="expected a tree with words; only -NONE- elements"):
        normalize_tree(parse_trees("((S (-NONE- *)))")[0])


def test_cnf_schemes() -> None:
    tree = parse_trees("(S (NP (NN a)) (VP (VB b) (NP (DT c) (JJ d) (NN e))) (. f))")[0]
    right = to_cnf(tree)
    assert str(right) == ("(S (NP+NN a) (@S (VP (VB b) (NP (DT c) (@NP (JJ d) (NN e)))) (. f)))")
    left = to_cnf(tree, factor="left", unary="bottom")
    assert str(left) == "(S (@S (NN a) (VP (VB b) (NP (@NP (DT c) (JJ d)) (NN e)))) (. f))"
    assert str(to_cnf(parse_trees("(S (VP (VB go) (NP (NN home))))")[0], unary="top")) == (
        "(S (VB go) (NP home))"
    )
    assert str(from_cnf(right)) == str(tree)
    assert str(from_cnf(to_cnf(tree, factor="left"))) == str(tree)


def test_tree_spans_pre_order() -> None:
    cnf = to_cnf(parse_trees("(S (NP (DT the) (NN dog)) (VP (VBZ barks)))")[0])
    assert tree_spans(cnf) == [
        (0, 2, "S"),
        (0, 1, "NP"),
        (0, 0, "DT"),
        (1, 1, "NN"),
        (2, 2, "VP+VBZ"),
    ]
    with pytest.raises(ValueError, match="expected a CNF tree .* got a S node with 3 children"):
        tree_spans(parse_trees("(S (A a) (B b) (C c))")[0])


def test_encode_and_collate_trees() -> None:
    trees = [to_cnf(normalize_tree(t)) for t in parse_trees(MRG)]
    examples, symbols = encode_trees(trees)
    assert examples[0]["tokens"] == (
        "Pierre",
        "Vinken",
        "will",
        "join",
        "the",
        "board",
        "Nov.",
        "29",
        ".",
    )
    spans = examples[0]["spans"]
    assert isinstance(spans, torch.Tensor) and spans.shape == (17, 3) and spans.dtype == torch.long
    assert spans[0].tolist() == [0, 8, symbols.index("S")]
    batch = collate_trees(examples)
    assert batch["spans"].shape == (2, 17, 3)
    assert batch["lengths"].tolist() == [9, 2]
    assert batch["spans"][1, 3:].abs().sum() == 0  # padding rows are zero
    assert batch["tokens"][1] == ("Rain", "falls")
    rebuilt = spans_to_tree(examples[0]["tokens"], batch["spans"][0], symbols)  # type: ignore[arg-type]
    assert str(rebuilt) == str(trees[0])
    with pytest.raises(ValueError, match="symbol 'S' is not in the symbol vocabulary"):
        encode_trees(trees, Vocabulary(["NP"]))


def test_spans_to_tree_rejects_bad_spans() -> None:
    symbols = Vocabulary(["A", "B"])
    with pytest.raises(ValueError, match=re.escape("row 1 does not split (0, 2)")):
        spans_to_tree("xyz", [(0, 2, 0), (0, 2, 0), (0, 0, 1), (1, 1, 1), (2, 2, 1)], symbols)
    with pytest.raises(
        ValueError, match=re.escape("spans must have 2n - 1 = 3 rows for 2 words; got 1")
    ):
        spans_to_tree("xy", [(0, 1, 0)], symbols)


def test_collate_trees_errors() -> None:
    with pytest.raises(
        ValueError, match=re.escape("examples[0]['spans'] must have 2n - 1 (odd) rows; got 2")
    ):
        collate_trees([{"spans": torch.zeros(2, 3, dtype=torch.long)}])
    with pytest.raises(
        ValueError,
        match=re.escape("examples[0]['spans'] must be a (2n - 1, 3) long tensor; got (3, 2)"),
    ):
        collate_trees([{"spans": torch.zeros(3, 2, dtype=torch.long)}])


@st.composite
def _trees(draw: st.DrawFn, depth: int = 0) -> Tree:
    labels = ["S", "NP", "VP", "PP"]
    tags = ["DT", "NN", "VB", "IN"]
    if depth >= 3 or draw(st.booleans()):
        return Tree(draw(st.sampled_from(tags)), (draw(st.sampled_from(["a", "b", "c"])),))
    width = draw(st.integers(1, 4))
    kids = tuple(draw(_trees(depth + 1)) for _ in range(width))
    return Tree(draw(st.sampled_from(labels)), kids)


@settings(max_examples=40, deadline=None)
@given(tree=_trees(), factor=st.sampled_from(["right", "left"]))
def test_cnf_round_trip(tree: Tree, factor: str) -> None:
    cnf = to_cnf(tree, factor=factor)  # type: ignore[arg-type]
    spans = tree_spans(cnf)
    n = len(tree.leaves())
    assert len(spans) == 2 * n - 1 and spans[0][:2] == (0, n - 1)
    assert cnf.leaves() == tree.leaves()
    assert str(from_cnf(cnf)) == str(tree)
    examples, symbols = encode_trees([cnf])
    assert str(spans_to_tree(tree.leaves(), examples[0]["spans"], symbols)) == str(cnf)  # type: ignore[arg-type]


def test_load_ptb_sample_missing(tmp_path: Path) -> None:
    with pytest.raises(
        FileNotFoundError,
        match=re.escape(
            f"{tmp_path / 'penn_treebank_sample' / 'treebank.zip'}: expected NLTK's treebank.zip"
        ),
    ):
        load_ptb_sample(tmp_path)
