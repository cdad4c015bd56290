"""CoNLL-style column files (CoNLL-2002 NER and similar).

Format: one token per line, columns separated by whitespace (or a given separator), a blank
line between sentences. By default the first column is the token, the last the label, and the
columns in between (the POS tag in CoNLL-2002) become the token's provided ``features``.

``-DOCSTART-`` lines (a first column equal to ``-DOCSTART-``, as in CoNLL-2003 and the Dutch
CoNLL-2002 files) are handled explicitly, never dropped silently: with
``docstart="boundary"`` (the default) such a line ends the current sentence, is not a token,
and starts a new document (counted in :attr:`TaggedCorpus.num_documents` and recorded in each
:attr:`Sequence.document`); with ``docstart="token"`` it is read as an ordinary token line; with
``docstart="error"`` it raises ``ValueError``. The Spanish CoNLL-2002 files have none.

CoNLL-U (Universal Dependencies) and CoNLL-X files are read with ``conllu=True``: ten
tab-separated columns (ID, FORM, LEMMA, UPOS, XPOS, FEATS, HEAD, DEPREL, DEPS, MISC), comment
lines starting with ``#`` skipped, and the lines of multiword tokens (ID ``1-2``) and empty
nodes (ID ``8.1``) skipped, so that a sentence is its syntactic words; :func:`looks_conllu`
tells such a file from the first token line.

Columns are split on runs of ASCII blanks (space, tab; a non-breaking or other Unicode space
inside a token stays in the token), or on a given ``separator``, each column then stripped of
the spaces around it (trailing blanks are not part of a tag). Lines starting with
``comment_prefix`` (``#`` with ``--data.comments true``; none by default, since ``#`` is also a
token) are comments and skipped; without it, a sentence that begins with a lone ``#`` token
(``# sent_id = 1``) gets a warning that names the option.

Every malformed line raises ``ValueError`` naming the file, the 1-based line number and what was
expected. Files ending in ``.gz`` are decompressed transparently. Reading the 265k-token
Spanish training file takes about a second.

References: Tjong Kim Sang (2002), Introduction to the CoNLL-2002 shared task.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Callable, Literal, Optional, Union
from typing import Sequence as Seq

from structssl.data.paths import PathLike, data_file, iter_lines
from structssl.data.records import Sequence, TaggedCorpus, Vocabulary

__all__ = [
    "DOCSTART",
    "CONLL2002_LABELS",
    "CONLL2002_SPLITS",
    "NoTagColumnError",
    "first_token_line",
    "looks_conllu",
    "read_columns",
    "read_conll",
    "load_conll2002",
    "split_columns",
    "check_comment_prefix",
]

DOCSTART = "-DOCSTART-"

#: The 9 CoNLL-2002 tags in label-index order (``O`` is label 0).
CONLL2002_LABELS = (
    "O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"
)  # fmt: skip

#: Split name -> file suffix (``esp.train`` etc.); ``dev`` is ``testa``, ``test`` is ``testb``.
CONLL2002_SPLITS = {
    "train": "train",
    "dev": "testa",
    "testa": "testa",
    "test": "testb",
    "testb": "testb",
}


#: the blanks a whitespace separator splits on (ASCII: a non-breaking space stays in its token)
_BLANKS = " \t\f\v\r\n"
_BLANK_RUN = re.compile("[" + re.escape(_BLANKS) + "]+")


def split_columns(line: str, separator: Optional[str] = None, strip: bool = True) -> list[str]:
    """The columns of a line: split on runs of ASCII blanks (``separator=None``; no empty
    columns) or on ``separator``, each column stripped of the spaces around it (``strip``).

    Example: ``split_columns("San\u00a0José  B-LOC ")`` is ``["San\u00a0José", "B-LOC"]``;
    ``split_columns("San José\tB-LOC  ", "\t")`` is ``["San José", "B-LOC"]``.
    """
    if separator is None:
        stripped = line.strip(_BLANKS)
        return _BLANK_RUN.split(stripped) if stripped else [""]
    columns = line.split(separator)
    return [column.strip(" ") for column in columns] if strip else columns


def check_comment_prefix(comment_prefix: Optional[str]) -> Optional[str]:
    """``comment_prefix`` if it is a non-blank string or ``None``.

    Raises:
        ValueError: anything else.
    """
    if comment_prefix is not None and (not isinstance(comment_prefix, str) or not comment_prefix.strip()):
        raise ValueError(f"comment_prefix must be a non-blank string or None; got {comment_prefix!r}")
    return comment_prefix


def _check_bio(tag: str) -> bool:
    return tag == "O" or (len(tag) > 2 and tag[:2] in ("B-", "I-"))


def _short(line: str, limit: int = 60) -> str:
    return repr(line if len(line) <= limit else line[:limit] + "...")


class NoTagColumnError(ValueError):
    """A file read for its tags has no tag column: its first line has too few columns (e.g. an
    untagged file, the token alone per line)."""


def read_columns(
    path: PathLike,
    *,
    separator: Optional[str] = None,
    token_column: int = 0,
    tag_column: Optional[int] = -1,
    num_columns: Optional[int] = None,
    labels: Union[Vocabulary, Seq[str], None] = None,
    tag_format: Literal["any", "bio"] = "any",
    docstart: Literal["boundary", "token", "error"] = "boundary",
    feature_separator: Optional[str] = None,
    first_labels: Seq[str] = ("O",),
    feature_columns: Optional[Seq[int]] = None,
    encoding: str = "utf-8",
    conllu: bool = False,
    check_columns: Optional[Callable[[int, int], None]] = None,
    comment_prefix: Optional[str] = None,
    strip: bool = True,
) -> TaggedCorpus:
    """Read a blank-line separated column file (the engine behind the CoNLL and citation readers).

    Args:
        path: the file (``.gz`` transparently).
        separator: column separator; ``None`` splits on runs of ASCII blanks
            (:func:`split_columns`).
        token_column: index of the token column.
        tag_column: index of the label column, or ``None`` for unlabeled files.
        num_columns: the number of columns every line must have; ``None`` takes the number
            on the first token line.
        labels: a fixed label vocabulary (labels outside it are an error); default: built
            from the file (``first_labels`` first, the rest sorted).
        tag_format: ``"bio"`` checks every label is ``O``, ``B-X`` or ``I-X``.
        docstart: how ``-DOCSTART-`` lines are handled (see the module docstring).
        feature_separator: if given, each remaining column is further split on it.
        first_labels: labels placed first in a vocabulary built from the file.
        feature_columns: the columns that become each token's provided ``features``, in this
            order (default: every column other than the token and the label column).
        encoding: the file's text encoding.
        conllu: read CoNLL-U / CoNLL-X (module docstring): ``#`` comment lines and the lines of
            multiword tokens and empty nodes are skipped; give ``separator="\t"``.
        check_columns: called with the line number and the column count of the first token
            line (when ``num_columns`` is ``None``), before any later line is read; it raises
            when the file's layout is not the one expected (a file read after another one).
        comment_prefix: lines starting with it are comments, skipped (``None``: no comment
            lines; a sentence that begins with a lone ``#`` token gets a warning).
        strip: strip each column of the spaces around it (:func:`split_columns`; a format
            that refuses them, the citations', reads them unstripped).

    Returns:
        The sequences and their label vocabulary.

    Raises:
        ValueError: a malformed line (file, line number, expectation), or bad arguments.
    """
    if docstart not in ("boundary", "token", "error"):
        raise ValueError(f"docstart must be 'boundary', 'token' or 'error'; got {docstart!r}")
    if tag_format not in ("any", "bio"):
        raise ValueError(f"tag_format must be 'any' or 'bio'; got {tag_format!r}")
    if num_columns is not None and num_columns < 1:
        raise ValueError(f"num_columns must be >= 1; got {num_columns}")
    check_comment_prefix(comment_prefix)
    vocab: Optional[Vocabulary]
    if labels is None or isinstance(labels, Vocabulary):
        vocab = labels
    else:
        vocab = Vocabulary(labels)
    sep_name = "whitespace" if separator is None else repr(separator)
    path_s = str(path)

    sequences: list[Sequence] = []
    tokens: list[str] = []
    tags: list[str] = []
    feats: list[tuple[str, ...]] = []
    start_line = 0
    document = 0
    seen_docstart = False
    expected = num_columns
    first_line = ""  # the first token line (an ARFF header is named in errors)
    first_number = 0
    hashed: list[tuple[int, str]] = []  # sentence-initial lines of a lone '#' token

    numbers: list[int] = []  # every token's line (CoNLL-U skips lines inside a sentence)

    def flush() -> None:
        nonlocal tokens, tags, feats, numbers
        if tokens:
            consecutive = numbers[-1] - numbers[0] == len(numbers) - 1
            sequences.append(
                Sequence(
                    tokens=tuple(tokens),
                    labels=tuple(tags) if tag_column is not None else None,
                    features=tuple(feats),
                    line=start_line,
                    document=document,
                    lines=None if consecutive else tuple(numbers),
                )
            )
        tokens, tags, feats, numbers = [], [], [], []

    for number, line in iter_lines(path, encoding):
        if not line.strip():
            flush()
            continue
        if (conllu and line.startswith("#")) or (comment_prefix is not None and line.startswith(comment_prefix)):
            continue
        cols = split_columns(line, separator, strip)
        if conllu and ("-" in cols[0] or "." in cols[0]):
            continue  # a multiword token (its words follow) or an empty node
        if docstart != "token" and cols[0] == DOCSTART:
            if docstart == "error":
                raise ValueError(
                    f"{path_s}:{number}: expected a token line; got a {DOCSTART} line "
                    "(pass docstart='boundary' to read documents)"
                )
            flush()
            if seen_docstart or sequences:
                document += 1
            seen_docstart = True
            continue
        if not first_line:
            first_line, first_number = line, number
        if not tokens and not conllu and comment_prefix is None and cols[0] == "#":
            hashed.append((number, line))
        if expected is None:
            expected = len(cols)
            if check_columns is not None:
                check_columns(number, expected)
            if tag_column is not None and token_column % expected == tag_column % expected:
                untagged = "is this file untagged?"
                if separator is not None and separator not in line:
                    untagged = (f"the line holds no {separator!r}: is the file separated by spaces? "
                                "leave the separator out to split on blanks")
                raise NoTagColumnError(
                    f"{path_s}:{number}: expected a token and a label column; got {expected} "
                    f"column(s), where token_column={token_column} and tag_column="
                    f"{tag_column} are the same column ({untagged})"
                )
            named = [("token_column", token_column), ("tag_column", tag_column)]
            named += [("feature_columns", c) for c in feature_columns or ()]
            for name, col in named:
                if col is not None and not -expected <= col < expected:
                    error = NoTagColumnError if name == "tag_column" else ValueError
                    raise error(
                        f"{path_s}:{number}: {name}={col} is out of range for the {expected} "
                        f"column(s) of this line: {_short(line)}"
                    )
            for col in feature_columns or ():
                if tag_column is not None and col % expected == tag_column % expected:
                    raise ValueError(
                        f"{path_s}:{number}: feature_columns={col} is the label column "
                        f"(tag_column={tag_column} of this line's {expected} columns): the "
                        "gold tags would be features; expected other columns"
                    )
        if len(cols) != expected:
            hint = "" if conllu else format_hint(first_line, line)  # ARFF or CoNLL-U
            if not hint and num_columns is None and first_line.startswith("#") and comment_prefix is None:
                hint = (f" (line {first_number}, {_short(first_line)}, set the column count: if lines "
                        "starting with '#' are comments, pass --data.comments true to fit, --comments true to "
                        "predict)")
            if not hint and separator is None and "\t" in line:
                hint = (" (the line holds tabs: if a token may hold a space, separate the columns by "
                        "tabs alone: separator='\\t', --data.separator '\\t')")
            elif not hint and num_columns is None and max(expected, len(cols)) > 4:
                hint = (" (files hold one token per line with the same columns on every line and "
                        "a blank line between sentences; is this a sentence per line?)")
            raise ValueError(
                f"{path_s}:{number}: expected {expected} columns separated by {sep_name}; "
                f"got {len(cols)}: {_short(line)}{hint}"
            )
        token = cols[token_column]
        if not token:
            raise ValueError(f"{path_s}:{number}: expected a non-empty token; got {_short(line)}")
        tok_i = token_column % expected
        lab_i = None if tag_column is None else tag_column % expected
        if lab_i is not None:
            tag = cols[lab_i]
            if not tag:
                raise ValueError(
                    f"{path_s}:{number}: expected a non-empty label; got {_short(line)}"
                )
            if tag_format == "bio" and not _check_bio(tag):
                raise ValueError(
                    f"{path_s}:{number}: expected a BIO tag (O, B-X or I-X); got {tag!r}"
                )
            if vocab is not None and tag not in vocab:
                raise ValueError(
                    f"{path_s}:{number}: expected a label in {list(vocab.items)}; got {tag!r}"
                )
            tags.append(tag)
        if feature_columns is None:
            rest = [c for i, c in enumerate(cols) if i != tok_i and i != lab_i]
        else:
            rest = [cols[i] for i in feature_columns]
        if feature_separator is not None:
            rest = [p for c in rest for p in c.split(feature_separator)]
        if not tokens:
            start_line = number
        tokens.append(token)
        numbers.append(number)
        feats.append(tuple(rest))
    flush()
    if hashed:
        number, line = hashed[0]
        warnings.warn(
            f"{path_s}:{number}: {len(hashed)} sentence(s) begin with a line whose first column "
            f"is '#' ({_short(line)}), read as tokens{'' if tag_column is None else ' and tags'}; "
            "if such lines are comments, pass --data.comments true to fit, --comments true to "
            "predict",
            stacklevel=2,
        )

    if vocab is None:
        if tag_column is None:
            vocab = Vocabulary(())
        else:
            vocab = Vocabulary.build(
                (t for s in sequences for t in (s.labels or ())), first=first_labels
            )
    return TaggedCorpus(sequences=sequences, labels=vocab, path=path_s, num_documents=document + 1,
                        num_columns=expected)


def first_token_line(path: PathLike, encoding: str = "utf-8") -> Optional[tuple[int, str]]:
    """``(line number, line)`` of the first line that is neither blank nor a ``#`` comment, or
    ``None`` when the file has none."""
    for number, line in iter_lines(path, encoding):
        if line.strip() and not line.startswith("#"):
            return number, line
    return None


def looks_conllu(path: PathLike, encoding: str = "utf-8") -> bool:
    """Whether ``path`` is a CoNLL-U / CoNLL-X file: its :func:`first_token_line` has ten
    tab-separated columns and a word index (``1``, or a multiword range ``1-2``) first."""
    first = first_token_line(path, encoding)
    if first is None:
        return False
    return _conllu_line(first[1])


def format_hint(first_line: str, line: str) -> str:
    """A hint for a file read as plain columns that is another format (``''`` if none): an ARFF
    file (``first_line``, its first token line, is ``@relation``, or ``line`` is an ARFF header
    line) or CoNLL-U (``line``)."""
    heads = [text.split(None, 1)[0].lower() for text in (first_line, line) if text.split()]
    if "@relation" in heads[:1] or (heads[1:] and heads[1] in ("@relation", "@attribute", "@data")):
        return (" (this is an ARFF file: multi-label data is read by structssl.data.ArffDataModule, "
                "configs/multilabel.yaml)")
    if _conllu_line(line):
        return (" (this is CoNLL-U: ten tab-separated columns, a word index first; the "
                "other files are plain columns: give every file in one format)")
    return ""


def _conllu_line(line: str) -> bool:
    """A CoNLL-U token line: ten tab-separated columns, a word index (``1``, ``1-2``) first."""
    cols = line.split("\t")
    return len(cols) == 10 and cols[0].replace("-", "", 1).isdigit()


def read_conll(
    path: PathLike,
    *,
    token_column: int = 0,
    tag_column: Optional[int] = -1,
    num_columns: Optional[int] = None,
    labels: Union[Vocabulary, Seq[str], None] = None,
    tag_format: Literal["any", "bio"] = "bio",
    docstart: Literal["boundary", "token", "error"] = "boundary",
) -> TaggedCorpus:
    """Read a CoNLL column file (``word [columns...] tag`` per line, blank line between sentences).

    Columns are separated by whitespace. Columns other than the token and the label (the POS tag
    of CoNLL-2002) become each token's ``features``.

    Args:
        path: the file (``.gz`` transparently).
        token_column: index of the token column.
        tag_column: index of the label column (default: last), or ``None`` for unlabeled files.
        num_columns: the number of columns every line must have (default: as on the first line).
        labels: a fixed label vocabulary (e.g. :data:`CONLL2002_LABELS`); default: built from
            the file with ``O`` first and the rest sorted.
        tag_format: ``"bio"`` (default) checks each label is ``O``, ``B-X`` or ``I-X``;
            ``"any"`` accepts any label.
        docstart: ``"boundary"`` (default), ``"token"`` or ``"error"``: see the module docstring.

    Returns:
        A :class:`TaggedCorpus`.

    Raises:
        ValueError: naming the file and line of a malformed line.

    Example:
        >>> corpus = read_conll("esp.train")  # doctest: +SKIP
        >>> corpus[0].tokens[:3], corpus[0].labels[:3]  # doctest: +SKIP
        (('Melbourne', '(', 'Australia'), ('B-LOC', 'O', 'B-LOC'))
    """
    return read_columns(
        path,
        separator=None,
        token_column=token_column,
        tag_column=tag_column,
        num_columns=num_columns,
        labels=labels,
        tag_format=tag_format,
        docstart=docstart,
    )


def load_conll2002(
    split: Literal["train", "dev", "test", "testa", "testb"] = "train",
    language: Literal["esp"] = "esp",
    data_dir: Optional[PathLike] = None,
) -> TaggedCorpus:
    """Load a CoNLL-2002 split from ``<data_dir>/conll2002/<language>.<train|testa|testb>``.

    Args:
        split: ``train``, ``dev`` (= ``testa``) or ``test`` (= ``testb``).
        language: ``esp`` (Spanish; the Dutch files are not in the shared data).
        data_dir: the data directory (see :func:`~structssl.data.paths.resolve_data_dir`).

    Returns:
        A :class:`TaggedCorpus` with the label vocabulary :data:`CONLL2002_LABELS`.
    """
    if split not in CONLL2002_SPLITS:
        raise ValueError(f"split must be one of {sorted(CONLL2002_SPLITS)}; got {split!r}")
    if language not in ("esp", "ned"):
        raise ValueError(f"language must be 'esp' or 'ned'; got {language!r}")
    name = f"{language}.{CONLL2002_SPLITS[split]}"
    path = data_file(
        Path("conll2002") / name,
        f"the CoNLL-2002 file {name} (UTF-8, 'word POS tag' per line, blank line between "
        "sentences)",
        data_dir,
    )
    return read_conll(path, labels=CONLL2002_LABELS, num_columns=3)
