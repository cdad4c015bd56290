"""How column files are split and what counts as a comment (user test round 9): a whitespace
separator splits on ASCII blanks only (a non-breaking space stays in its token), an explicit
separator's columns lose the spaces around them (trailing blanks are not part of a tag), and
``comment_prefix`` lines are skipped; without it, a sentence that begins with a lone ``#`` gets
a warning, and a column-count error caused by such a first line says so.

Every test writes its own small files; nothing here needs ``../shared``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from structssl.data.formats.conll import read_columns, split_columns
from structssl.data.tagging import TaggingFormat


def test_split_columns_keeps_unicode_spaces_in_tokens() -> None:
    assert split_columns("San\u00a0José  B-LOC ") == ["San\u00a0José", "B-LOC"]
    assert split_columns("a\tb   c") == ["a", "b", "c"]
    # an explicit separator: the spaces around each column go, the ones inside stay
    assert split_columns("San José\tB-LOC  ", "\t") == ["San José", "B-LOC"]
    assert split_columns(" tok \t O ", "\t") == ["tok", "O"]
    assert split_columns("a\tb\t", "\t") == ["a", "b", ""]  # an empty last column stays one


def test_nbsp_token_is_one_column(tmp_path: Path) -> None:
    (tmp_path / "f.conll").write_text("San\u00a0José B-LOC\nvive O\n\n", encoding="utf-8")
    corpus = read_columns(tmp_path / "f.conll")
    assert corpus.sequences[0].tokens == ("San\u00a0José", "vive")
    assert corpus.sequences[0].labels == ("B-LOC", "O")


def test_tab_separator_with_trailing_spaces_keeps_the_scheme(tmp_path: Path) -> None:
    """With ``separator='\\t'`` the tags used to keep the trailing blanks ('O  '), and BIOES
    was silently read as plain tags."""
    lines = ["Juan\tS-PER  ", "vive\tO  ", "en\tO  ", "Nueva York\tB-LOC ", "City\tE-LOC ", ""]
    (tmp_path / "t.bioes").write_text("\n".join(lines * 3) + "\n", encoding="utf-8")
    fmt = TaggingFormat(separator="\\t")
    sequences = fmt.read_labeled(tmp_path / "t.bioes")
    fmt.fit(sequences, sequences)
    assert fmt.scheme == "bioes"
    assert {"O", "B-PER", "B-LOC", "I-LOC"} <= set(fmt.tags)
    assert all(tag == tag.strip() for tag in fmt.tags)
    assert sequences[0].tokens[3] == "Nueva York"


def test_tab_separator_on_a_space_separated_file_says_so(tmp_path: Path) -> None:
    (tmp_path / "s.conll").write_text("Juan B-PER\nvive O\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"s.conll:1: .*holds no '\\t': is the file separated by spaces"):
        read_columns(tmp_path / "s.conll", separator="\t")


_COMMENTED = "# newdoc\nThe DET\ndog NOUN\n\n# comment\nA DET\ncat NOUN\n\n"


def test_comment_lines_are_skipped_with_comment_prefix(tmp_path: Path) -> None:
    (tmp_path / "c.tsv").write_text(_COMMENTED, encoding="utf-8")
    corpus = read_columns(tmp_path / "c.tsv", comment_prefix="#")
    assert [s.tokens for s in corpus.sequences] == [("The", "dog"), ("A", "cat")]
    assert set(corpus.labels.items) == {"DET", "NOUN"}
    assert corpus.sequences[1].line == 6


def test_a_lone_hash_beginning_a_sentence_is_warned_about(tmp_path: Path) -> None:
    """They used to become tokens and tags ('newdoc', 'comment') without a word."""
    (tmp_path / "c.tsv").write_text(_COMMENTED, encoding="utf-8")
    with pytest.warns(UserWarning, match=r"c.tsv:1: 2 sentence\(s\) begin with a line whose first column is '#'.*--data.comments true to fit"):
        corpus = read_columns(tmp_path / "c.tsv")
    assert "newdoc" in corpus.labels.items  # read as asked, but not silently


def test_a_hashtag_token_is_not_warned_about(tmp_path: Path) -> None:
    (tmp_path / "h.conll").write_text("#love O\nit O\n\n# SYM\n5 CD\n\n", encoding="utf-8")
    with pytest.warns(UserWarning, match=r"1 sentence\(s\)"):  # only the lone '#'
        read_columns(tmp_path / "h.conll")


def test_a_comment_first_line_in_the_error_hint(tmp_path: Path) -> None:
    (tmp_path / "c.conll").write_text("# newdoc id = d1\nJuan NP B-PER\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"c.conll:2: expected 5 columns.*line 1, '# newdoc id = d1', set the column count: if lines starting with '#' are comments, pass --data.comments true"):
        read_columns(tmp_path / "c.conll")


def test_comment_prefix_is_checked() -> None:
    with pytest.raises(ValueError, match="comment_prefix must be a non-blank string or None; got ' '"):
        TaggingFormat(comment_prefix=" ")


def test_comment_prefix_is_saved_with_the_format(tmp_path: Path) -> None:
    (tmp_path / "c.tsv").write_text(_COMMENTED * 2, encoding="utf-8")
    fmt = TaggingFormat(comment_prefix="#")
    tagged = fmt.read_labeled(tmp_path / "c.tsv")
    fmt.fit(tagged, tagged)
    again = TaggingFormat.from_state_dict(fmt.state_dict())
    assert again.comment_prefix == "#"
    assert [s.tokens for s in again.read_tokens(tmp_path / "c.tsv")][:2] == [("The", "dog"), ("A", "cat")]
