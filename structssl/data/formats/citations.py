"""Citation field segmentation files (Cora / McCallum references, CoDL splits).

Format (the CPF release of Zheng & Chang 2016): UTF-8, one token per line, three TAB-separated
columns ``token  label  features``, a blank line after each citation. The features column
holds 7 ``|``-separated fields: the lower-cased stem, the previous stem, the next stem, a
capitalisation flag, two other boolean flags and a POS tag. They are used as given: each
token's :attr:`Sequence.features` is the tuple of these 7 strings.

Tokens containing ``|`` (the token ``|``, ``link|A``) make the features column ambiguous
(``"||mainten|turn|false|..."``). A stem keeps the ``|`` characters of its token, so this
reader splits the column using the ``|`` counts of the token and its two neighbours (the stem,
previous-stem and next-stem fields); a column that does not fit raises ``ValueError`` naming
the file and line.

Whitespace: spaces at the end of a line (after the features column, e.g. ``...|NNP ``) are
dropped (a documented normalisation: editors and exports add them); whitespace around a token
or inside a feature field is an error naming the file and line (it would silently become a
different token or feature, e.g. ``'NNP '``).

The 13 labels (:data:`CITATION_LABELS`): author, booktitle, date, editor, institution,
journal, location, note, pages, publisher, tech, title, volume. The unlabeled file's label
column is a dummy (``author`` everywhere); read it with ``labeled=False``.

References: McCallum et al. (2000); Peng and McCallum (2004); Chang, Ratinov and Roth (2007).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Union
from typing import Sequence as Seq

from structssl.data.formats.conll import read_columns
from structssl.data.paths import PathLike, data_file
from structssl.data.records import Sequence, TaggedCorpus, Vocabulary

__all__ = [
    "CITATION_LABELS",
    "CITATION_FEATURE_NAMES",
    "CITATION_SPLITS",
    "read_citations",
    "load_citations",
]

#: The 13 citation fields in label-index order (sorted).
CITATION_LABELS = (
    "author", "booktitle", "date", "editor", "institution", "journal", "location", "note",
    "pages", "publisher", "tech", "title", "volume",
)  # fmt: skip

#: Names of the 7 provided feature fields, in column order.
CITATION_FEATURE_NAMES = ("stem", "prev_stem", "next_stem", "cap", "flag1", "flag2", "pos")

#: Split name -> file name under ``citations_cora/``.
CITATION_SPLITS = {
    "train": "citation_train.300.txt",
    "train.300": "citation_train.300.txt",
    "dev": "citation_dev.txt",
    "test": "citation_test.txt",
    "unlabeled": "citation_unlabeled.txt.gz",
    **{f"train.25.{k}": f"citation_train.25.{k}.txt" for k in range(5)},
}

_NUM_FIELDS = len(CITATION_FEATURE_NAMES)
_NUM_TAIL = 4  # cap, flag1, flag2, pos never contain '|'


def _split_features(column: str, bars: tuple[int, int, int]) -> Optional[tuple[str, ...]]:
    """Split the ``|``-separated features column; ``None`` when it cannot be parsed.

    ``bars`` is the number of ``|`` characters in the token, the previous and the next token:
    a stem keeps the ``|`` characters of its token (``link|A`` -> ``link|a``, ``|`` -> ``|``).
    """
    pieces = column.split("|")
    head, tail = pieces[:-_NUM_TAIL], pieces[-_NUM_TAIL:]
    if len(tail) != _NUM_TAIL:
        return None
    stem_bars, prev_bars, next_bars = bars
    if len(head) != 3 + stem_bars + prev_bars + next_bars:
        return None
    stem = "|".join(head[: stem_bars + 1])
    prev = "|".join(head[stem_bars + 1 : stem_bars + prev_bars + 2])
    nxt = "|".join(head[stem_bars + prev_bars + 2 :])
    return (stem, prev, nxt) + tuple(tail)


def read_citations(
    path: PathLike,
    *,
    labeled: bool = True,
    labels: Union[Vocabulary, Seq[str], None] = CITATION_LABELS,
) -> TaggedCorpus:
    """Read a citation file (``token<TAB>label<TAB>f1|...|f7`` per line, blank line between).

    Args:
        path: the file (``.gz`` transparently).
        labeled: ``False`` ignores the label column (the unlabeled file's dummy labels): the
            sequences get ``labels=None`` and the corpus an empty label vocabulary.
        labels: the label vocabulary (default :data:`CITATION_LABELS`; labels outside it are an
            error); ``None`` builds it from the file.

    Returns:
        A :class:`TaggedCorpus` whose sequences carry the 7 provided features per token.

    Raises:
        ValueError: a line without exactly 3 TAB-separated columns, an unknown label, a token
            with surrounding whitespace, a feature field with whitespace, or a features column
            that does not split into 7 fields (file and line named). Trailing whitespace at the
            end of a line is dropped.
    """
    corpus = read_columns(
        path,
        separator="\t",
        token_column=0,
        tag_column=1,
        num_columns=3,
        labels=labels if labeled else None,
        first_labels=(),
        strip=False,  # whitespace around a token is an error here (module docstring)
    )
    sequences = []
    for seq in corpus.sequences:
        feats = []
        bars = [token.count("|") for token in seq.tokens]
        n = len(bars)
        for offset, cols in enumerate(seq.features or ()):
            (column,) = cols
            column = column.rstrip()  # trailing whitespace at the end of the line
            token = seq.tokens[offset]
            if token != token.strip() or not token:
                raise ValueError(
                    f"{path}:{seq.line + offset}: expected a token without surrounding "
                    f"whitespace; got {token!r}"
                )
            context = (
                bars[offset],
                bars[offset - 1] if offset > 0 else 0,
                bars[offset + 1] if offset + 1 < n else 0,
            )
            split = _split_features(column, context)
            if split is None:
                raise ValueError(
                    f"{path}:{seq.line + offset}: expected {_NUM_FIELDS} '|'-separated "
                    f"features ({', '.join(CITATION_FEATURE_NAMES)}); got {column!r}"
                )
            spaced = [f for f in split if f != "".join(f.split())]
            if spaced:
                raise ValueError(
                    f"{path}:{seq.line + offset}: expected feature fields without whitespace; got "
                    f"{spaced[0]!r} in {column!r}"
                )
            feats.append(split)
        sequences.append(
            Sequence(
                tokens=seq.tokens,
                labels=seq.labels if labeled else None,
                features=tuple(feats),
                line=seq.line,
                document=seq.document,
            )
        )
    return TaggedCorpus(
        sequences=sequences,
        labels=corpus.labels if labeled else Vocabulary(()),
        path=corpus.path,
        num_documents=corpus.num_documents,
    )


def load_citations(
    split: str = "train",
    data_dir: Optional[PathLike] = None,
) -> TaggedCorpus:
    """Load a citation split from ``<data_dir>/citations_cora/``.

    Args:
        split: ``train`` (= ``train.300``), ``dev``, ``test``, ``unlabeled`` or
            ``train.25.k`` for k in 0..4 (see :data:`CITATION_SPLITS`).
        data_dir: the data directory (see :func:`~structssl.data.paths.resolve_data_dir`).

    Returns:
        A :class:`TaggedCorpus` (unlabeled for ``unlabeled``).
    """
    if split not in CITATION_SPLITS:
        raise ValueError(f"split must be one of {sorted(CITATION_SPLITS)}; got {split!r}")
    name = CITATION_SPLITS[split]
    path = data_file(
        Path("citations_cora") / name,
        f"the citation file {name} (TAB-separated 'token label features', blank line "
        "between citations)",
        data_dir,
    )
    return read_citations(path, labeled=split != "unlabeled")
