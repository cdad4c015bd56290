"""CoNLL column files and the citation segmentation files, on fixtures written here."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest
import torch

from structssl.data.formats.citations import CITATION_LABELS, load_citations, read_citations
from structssl.data.formats.conll import CONLL2002_LABELS, load_conll2002, read_conll
from structssl.data.records import Sequence, Vocabulary

CONLL = """\
Melbourne NP B-LOC
( Fpa O
Australia NP B-LOC
) Fpt O


El DA O
Grupo NC B-ORG
Magenta NC I-ORG
"""


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_read_conll_well_formed(tmp_path: Path) -> None:
    corpus = read_conll(_write(tmp_path / "esp.train", CONLL))
    assert len(corpus) == 2 and corpus.num_tokens == 7 and corpus.num_documents == 1
    first, second = corpus
    assert first.tokens == ("Melbourne", "(", "Australia", ")")
    assert first.labels == ("B-LOC", "O", "B-LOC", "O")
    assert first.features == (("NP",), ("Fpa",), ("NP",), ("Fpt",))
    assert (first.line, second.line) == (1, 7)
    assert corpus.labels.items == ("O", "B-LOC", "B-ORG", "I-ORG")
    assert corpus.encode_labels()[1].tolist() == [0, 2, 3]
    fixed = read_conll(tmp_path / "esp.train", labels=CONLL2002_LABELS)
    assert fixed.labels == Vocabulary(CONLL2002_LABELS)
    assert fixed.encode_labels()[1].tolist() == [0, 5, 6]


def test_read_conll_gz_same(tmp_path: Path) -> None:
    plain = read_conll(_write(tmp_path / "a.txt", CONLL))
    gz = tmp_path / "a.txt.gz"
    gz.write_bytes(gzip.compress(CONLL.encode()))
    assert read_conll(gz).sequences == plain.sequences


def test_docstart_is_handled_explicitly(tmp_path: Path) -> None:
    text = "-DOCSTART- -X- O\n\nA NP B-PER\n\n-DOCSTART- -X- O\n\nB NP O\nC NP O\n"
    path = _write(tmp_path / "d.txt", text)
    corpus = read_conll(path)
    assert corpus.num_documents == 2
    assert [s.tokens for s in corpus] == [("A",), ("B", "C")]
    assert [s.document for s in corpus] == [0, 1]
    as_tokens = read_conll(path, docstart="token", tag_format="any")
    assert [s.tokens for s in as_tokens][0] == ("-DOCSTART-",)
    assert as_tokens.num_tokens == 5
    with pytest.raises(
        ValueError, match=re.escape(f"{path}:1: expected a token line; got a -DOCSTART- line")
    ):
        read_conll(path, docstart="error")


def test_read_conll_unlabeled(tmp_path: Path) -> None:
    corpus = read_conll(_write(tmp_path / "u.txt", "a X\nb Y\n"), tag_column=None)
    assert corpus[0].labels is None and corpus[0].features == (("X",), ("Y",))
    assert len(corpus.labels) == 0
    with pytest.raises(ValueError, match="sequence has no labels"):
        corpus.encode_labels()


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("a NP O\nb B-PER\n", 2, "expected 3 columns separated by whitespace; got 2: 'b B-PER'"),
        ("a NP O\n\nb NP PER\n", 3, "expected a BIO tag (O, B-X or I-X); got 'PER'"),
        ("a NP O\nb NP B-\n", 2, "expected a BIO tag (O, B-X or I-X); got 'B-'"),
    ],
)
def test_read_conll_malformed(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = _write(tmp_path / "bad.txt", text)
    with pytest.raises(ValueError, match=re.escape(f"{path}:{line}: {message}")):
        read_conll(path)


def test_read_conll_unknown_label_and_num_columns(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.txt", "a NP O\nb NP B-FOO\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}:2: expected a label in ['O', 'B-LOC'")):
        read_conll(path, labels=CONLL2002_LABELS)
    with pytest.raises(ValueError, match=re.escape(f"{path}:1: expected 4 columns")):
        read_conll(path, num_columns=4)
    with pytest.raises(ValueError, match="docstart must be"):
        read_conll(path, docstart="skip")  # type: ignore[arg-type]


def test_load_conll2002_missing_file(tmp_path: Path) -> None:
    expected = re.escape(
        f"missing data file {tmp_path / 'conll2002' / 'esp.testa'}: expected the CoNLL-2002"
    )
    with pytest.raises(FileNotFoundError, match=expected):
        load_conll2002("dev", data_dir=tmp_path)
    with pytest.raises(ValueError, match="split must be one of"):
        load_conll2002("valid", data_dir=tmp_path)  # type: ignore[arg-type]


def test_load_conll2002_from_data_dir(tmp_path: Path) -> None:
    (tmp_path / "conll2002").mkdir()
    _write(tmp_path / "conll2002" / "esp.testb", CONLL)
    assert len(load_conll2002("test", data_dir=tmp_path)) == 2


# ------------------------------------------------------------------------------ citations
CITATIONS = (
    "M\tauthor\tm|_start_|.|true|false|false|NN\n"
    ".\tauthor\t.|m|turn|false|false|false|.\n"
    "Turning\ttitle\tturn|.|||true|false|false|NNP\n"
    "|\ttitle\t||turn|link|a|false|false|false|NN\n"
    "link|A\ttitle\tlink|a|||_end_|false|false|false|NN\n"
    "\n"
    "1994\tdate\t1994|_start_|_end_|false|false|false|CD\n"
)


def test_read_citations(tmp_path: Path) -> None:
    path = _write(tmp_path / "citation_dev.txt", CITATIONS)
    corpus = read_citations(path)
    assert len(corpus) == 2 and corpus.num_tokens == 6
    assert corpus.labels.items == CITATION_LABELS
    first = corpus[0]
    assert first.labels == ("author", "author", "title", "title", "title")
    assert first.features is not None
    assert first.features[0] == ("m", "_start_", ".", "true", "false", "false", "NN")
    # stems equal to or containing '|' are split using the tokens' '|' counts
    assert first.features[2] == ("turn", ".", "|", "true", "false", "false", "NNP")
    assert first.features[3] == ("|", "turn", "link|a", "false", "false", "false", "NN")
    assert first.features[4] == ("link|a", "|", "_end_", "false", "false", "false", "NN")
    assert corpus.encode_labels()[1].tolist() == [CITATION_LABELS.index("date")]


def test_read_citations_unlabeled(tmp_path: Path) -> None:
    path = tmp_path / "citation_unlabeled.txt.gz"
    path.write_bytes(gzip.compress(CITATIONS.encode()))
    corpus = read_citations(path, labeled=False)
    assert all(s.labels is None for s in corpus) and len(corpus.labels) == 0
    assert isinstance(corpus[0], Sequence) and corpus.num_tokens == 6


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a\tauthor\n", "expected 3 columns separated by '\\t'; got 2: 'a\\tauthor'"),
        ("a\tauthor\ta|b|c|x|y|z\n", "expected 7 '|'-separated features (stem, prev_stem"),
        ("a\twriter\ta|b|c|x|y|z|w\n", "expected a label in ['author'"),
    ],
)
def test_read_citations_malformed(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path / "bad.txt", "b\tauthor\tb|x|a|true|false|false|NN\n" + text)
    with pytest.raises(ValueError, match=re.escape(f"{path}:2: {message}")):
        read_citations(path)


def test_load_citations(tmp_path: Path) -> None:
    with pytest.raises(
        FileNotFoundError, match=re.escape("citation_train.25.3.txt: expected the citation file")
    ):
        load_citations("train.25.3", data_dir=tmp_path)
    (tmp_path / "citations_cora").mkdir()
    _write(tmp_path / "citations_cora" / "citation_train.300.txt", CITATIONS)
    assert len(load_citations("train", data_dir=tmp_path)) == 2
    with pytest.raises(ValueError, match="split must be one of"):
        load_citations("train.25.9", data_dir=tmp_path)


def test_vocabulary() -> None:
    v = Vocabulary.build(["b", "O", "a", "b", "c"], min_count=1, first=("O", "Z"))
    assert v.items == ("O", "a", "b", "c")
    assert Vocabulary.build(["b", "a", "b"], min_count=2).items == ("b",)
    assert v.encode(["c", "O"]).tolist() == [3, 0] and v.decode(torch.tensor([1, 2])) == ["a", "b"]
    with pytest.raises(ValueError, match="'zz' is not in the vocabulary"):
        v.index("zz")
    with pytest.raises(ValueError, match="items must be distinct; 'a' occurs twice"):
        Vocabulary(["a", "a"])
    with pytest.raises(ValueError, match="labels must have 2 entries"):
        Sequence(tokens=("a", "b"), labels=("O",))
