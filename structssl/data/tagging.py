"""Sequence tagging on your own column files: reading, the learned tag set, encoding, decoding.

:class:`TaggingFormat` is everything a trained tagger needs to know about its data, and all a
checkpoint needs to tag new text: how the files are laid out (token, tag and feature columns,
separator, encoding), the tag scheme and the tag set learned from the training file, and the
fitted :class:`~structssl.data.features.FeatureExtractor` (with the two-view split for
co-training). :class:`~structssl.data.CoNLLDataModule` builds one from the training
file; :mod:`structssl.predict` restores it from a checkpoint (:meth:`TaggingFormat.state_dict`).

Files: one token per line, columns separated by whitespace (or ``separator``), a blank line
between sentences, ``-DOCSTART-`` lines as document boundaries. Labeled files carry the tag in
``tag_column`` (default: the last); unlabeled and prediction files may hold the token alone
(one column), or the labeled layout, whose tags are then ignored. ``feature_columns`` (e.g.
``[1]`` for the POS column of CoNLL-2002) become features of the token and of its neighbours;
every file must then have them.

CoNLL-U (Universal Dependencies) and CoNLL-X files are read as such (``layout="auto"`` detects
them from the training file; ``"conllu"`` forces it): ``#`` comment lines, multiword-token and
empty-node lines are skipped, the token is FORM and the tag UPOS (``tag_column=4``: XPOS);
their files to tag may also hold the token alone per line.

Tags: any tag set. The scheme (BIO, IOB1, BIOES, BILOU or plain, see
:mod:`structssl.data.tag_schemes`) is detected from the training file unless given. Span
schemes are trained as BIO (``O``, then ``B-X``, ``I-X`` per type ``X`` in sorted order) and
written back in the file's scheme; the task is then ``"bio"`` (span F1); plain tags give the
task ``"sequence"`` (token accuracy).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import warnings
from typing import Any, Iterable, Optional
from typing import Sequence as Seq

from torch import Tensor

from structssl.data.formats.conll import (
    NoTagColumnError,
    check_comment_prefix,
    first_token_line,
    format_hint,
    looks_conllu,
    read_columns,
)
from structssl.data.features import FeatureExtractor, ViewSplit
from structssl.data.paths import PathLike
from structssl.data.records import Sequence, TaggedCorpus, Vocabulary
from structssl.data.tag_schemes import (
    SCHEMES,
    bio_tag_set,
    check_tag,
    detect_scheme,
    entity_types,
    from_bio,
    ill_formed,
    stray_tags,
    to_bio,
)

__all__ = ["TaggingFormat", "TAG_SCHEME_OPTIONS", "LAYOUTS", "TagColumnError"]

#: the ``layout`` options: ``auto`` (CoNLL-U if the training file looks like it, see
#: :func:`~structssl.data.formats.conll.looks_conllu`), ``columns``, ``conllu``
LAYOUTS = ("auto", "columns", "conllu")
#: the CoNLL-U columns of the token (FORM) and of the default tag (UPOS)
CONLLU_FORM, CONLLU_UPOS = 1, 3


class TagColumnError(ValueError):
    """A file read in the training layout whose tag column mostly holds values that are no
    tags of the model: a sentence per line read as columns (see
    :meth:`TaggingFormat.read_labeled`)."""

#: the values of the ``tag_scheme`` option (``auto`` detects it from the training file)
TAG_SCHEME_OPTIONS = ("auto", *SCHEMES)

Example = dict[str, Tensor]


def _check_encoding(encoding: Any) -> None:
    """``encoding`` must name a text encoding (e.g. ``"utf-8"``, ``"latin-1"``)."""
    try:
        "".encode(encoding)
    except (LookupError, TypeError):
        raise ValueError(f"encoding must name a text encoding (e.g. 'utf-8'); got {encoding!r}") from None


class TaggingFormat:
    """The layout of a tagging corpus, its tag set and its features (see the module docstring).

    Args:
        token_column: index of the token column.
        tag_column: index of the tag column in labeled files (negative counts from the end).
        feature_columns: columns used as features (default: none).
        separator: column separator (``None``: runs of ASCII blanks). The two characters ``\\t``
            (``--data.separator '\\t'`` on a command line) mean a tab.
        encoding: text encoding of the files.
        comment_prefix: lines of plain column files that start with it are comments, skipped
            (``None``: none are; CoNLL-U comments are always skipped), also when predicting.
        tag_scheme: ``"auto"`` or one of :data:`~structssl.data.tag_schemes.SCHEMES`.
        min_count: features seen fewer times in the training sentences are dropped.
        window: neighbours at offsets ``-window .. window`` contribute features.
        word_clusters: numbers of distributional word clusters, coarse to fine (e.g.
            ``[32, 128, 512]``), learned from the sentences trained on, untagged ones included
            (:class:`~structssl.data.clusters.WordClusters`); ``None``: no cluster features.
        two_view: also split the features into two views (co-training).
        view_scheme: the :class:`~structssl.data.features.ViewSplit` scheme.
        view_seed: the seed of the ``random`` view split.
        layout: ``"auto"`` (CoNLL-U when the training file looks like one), ``"columns"`` or
            ``"conllu"``. In CoNLL-U files the token is FORM, the separator a tab, and
            ``tag_column`` -1 (the default) means UPOS (column 3).

    Raises:
        ValueError: an option out of range (an unknown tag scheme, a column that is both the
            token and the tag column, ...).
    """

    def __init__(
        self,
        token_column: int = 0,
        tag_column: int = -1,
        feature_columns: Optional[Seq[int]] = None,
        separator: Optional[str] = None,
        encoding: str = "utf-8",
        tag_scheme: str = "auto",
        min_count: int = 1,
        window: int = 1,
        word_clusters: Optional[Seq[int]] = None,
        two_view: bool = False,
        view_scheme: str = "token_surface",
        view_seed: int = 0,
        layout: str = "auto",
        comment_prefix: Optional[str] = None,
    ) -> None:
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {list(LAYOUTS)}; got {layout!r}")
        if tag_scheme not in TAG_SCHEME_OPTIONS:
            raise ValueError(f"tag_scheme must be one of {list(TAG_SCHEME_OPTIONS)}; got {tag_scheme!r}")
        for name, value in (("token_column", token_column), ("tag_column", tag_column)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be an int column index; got {value!r}")
        columns = list(feature_columns or ())
        if any(isinstance(c, bool) or not isinstance(c, int) for c in columns):
            raise ValueError(f"feature_columns must be a list of int column indices; got {columns!r}")
        if len(set(columns)) != len(columns):
            raise ValueError(f"feature_columns must not repeat a column; got {columns}")
        if token_column in columns:
            raise ValueError(
                f"feature_columns must not hold the token column {token_column}; got {columns}"
            )
        if separator is not None and (not isinstance(separator, str) or separator == ""):
            raise ValueError(f"separator must be a non-empty string or None; got {separator!r}")
        if separator == "\\t":  # a shell's '\t' (jsonargparse keeps it as backslash, t)
            separator = "\t"
        _check_encoding(encoding)
        self.comment_prefix = check_comment_prefix(comment_prefix)
        self.token_column = token_column
        self.tag_column = tag_column
        self.feature_columns = columns
        self.separator = separator
        self.encoding = encoding
        self.tag_scheme = tag_scheme
        #: ``auto`` until the training file (the first file read) decides
        self.layout = layout
        self.scheme: Optional[str] = None if tag_scheme == "auto" else tag_scheme
        self.tags: tuple[str, ...] = ()
        #: tags of the dev / test files that the training file lacks (:meth:`admit_tags`)
        self.untrained_tags: tuple[str, ...] = ()
        #: the column count of the training file (learned by the first read_labeled before fit)
        self.num_columns: Optional[int] = None
        given = ("given",) if columns else ()
        self.extractor = FeatureExtractor(
            templates=(
                "bias", "word", "lower", "prefix", "suffix", "shape", "short_shape", "cap",
                "digits", "special", "length", "position", "quoted", *given,
            ),
            window=window,
            window_templates=("lower", "short_shape", *given),
            min_count=min_count,
            cluster_sizes=tuple(word_clusters or ()),
        )
        self.two_view = bool(two_view)
        self.view_scheme = view_scheme
        self.view_seed = view_seed
        self.view_split: Optional[ViewSplit] = None
        self._label_vocabulary: Optional[Vocabulary] = None

    # ------------------------------------------------------------------ derived facts
    @property
    def fitted(self) -> bool:
        """Whether :meth:`fit` (or :meth:`from_state_dict`) gave the tag set and features."""
        return bool(self.tags) and self.extractor.vocabulary is not None

    @property
    def task(self) -> str:
        """``"bio"`` for span schemes (span F1), ``"sequence"`` for plain tags."""
        return "sequence" if self.scheme == "plain" else "bio"

    @property
    def num_labels(self) -> int:
        return len(self.tags)

    @property
    def num_features(self) -> int:
        return self.extractor.num_features

    def sizes(self) -> dict[str, Any]:
        """What a model takes from this data: ``num_labels``, ``num_features`` (and
        ``view_num_features`` with two views), ``task`` and ``tags`` (for ``bio``)."""
        out: dict[str, Any] = {
            "num_labels": self.num_labels,
            "num_features": self.num_features,
            "task": self.task,
            "tags": list(self.tags) if self.task == "bio" else None,
        }
        if self.view_split is not None:
            out["view_num_features"] = tuple(self.view_split.num_features)
        return out

    # ------------------------------------------------------------------ reading
    def with_reading(self, encoding: Optional[str] = None, comments: Optional[bool] = None) -> "TaggingFormat":
        """The same format (tag set, features and all) reading files in ``encoding``, with
        ``#`` lines as comments (``comments=True``) or not (``False``; each ``None``: as the
        format does).

        Raises:
            ValueError: ``encoding`` names no text encoding.
        """
        out = copy.copy(self)
        if encoding is not None:
            _check_encoding(encoding)
            out.encoding = encoding
        if comments is not None:
            out.comment_prefix = "#" if comments else None
        return out

    def reads_conllu(self, path: PathLike) -> bool:
        """Whether ``path`` is read as CoNLL-U: a format not fixed to plain columns, and a file
        that :func:`~structssl.data.formats.conll.looks_conllu`."""
        return self.layout != "columns" and looks_conllu(path, self.encoding)

    def _read(self, path: PathLike, labeled: bool) -> TaggedCorpus:
        conllu = self.reads_conllu(path)
        if self.layout == "auto":  # the first file read, the training file, decides
            self.layout = "conllu" if conllu else "columns"
        if self.layout == "conllu" and labeled and not conllu:
            # a file to tag of a CoNLL-U model may hold the token alone; a tagged one may not
            first = first_token_line(path, self.encoding)
            where = f"{path}:{first[0]}" if first else str(path)
            got = repr(first[1][:60]) if first else "no token line"
            raise ValueError(
                f"{where}: expected a CoNLL-U file like the training file (ten tab-separated "
                f"columns, a word index first); got {got}"
            )
        if conllu:
            tag_column = CONLLU_UPOS if self.tag_column == -1 else self.tag_column
            columns: dict[str, Any] = dict(separator="\t", token_column=CONLLU_FORM)
        else:
            tag_column = self.tag_column
            columns = dict(separator=self.separator, token_column=self.token_column,
                           comment_prefix=self.comment_prefix)
        corpus = read_columns(
            path,
            **columns,
            tag_column=tag_column if labeled else None,
            labels=None,
            tag_format="any",
            feature_columns=self.feature_columns,
            encoding=self.encoding,
            conllu=conllu,
            check_columns=functools.partial(self._check_layout, path, labeled),
        )
        if not corpus.sequences:
            what = "tagged sentences" if labeled else "sentences"
            raise ValueError(f"{path}: expected {what} (one token per line); the file has none")
        return corpus

    def read_labeled(
        self, path: PathLike, unknown_tags: bool = False, keep_tags: bool = False
    ) -> list[Sequence]:
        """Read a tagged file (training, dev or test), tags converted to BIO (``keep_tags``: the
        file's own tags, checked as the others).

        Before :meth:`fit` the tags are only checked against the scheme (if given); after it,
        a tag outside the learned tag set is an error unless ``unknown_tags`` (scoring
        predictions against a file whose tags the model never saw: they count as errors), where
        a tag column that mostly holds no tags of the model raises :class:`TagColumnError`.

        Raises:
            ValueError: naming the file and line of a malformed line, a line without a tag
                column, a tag outside the scheme or the tag set.
        """
        corpus = self._read(path, labeled=True)
        sequences = corpus.sequences
        if self.num_columns is None and not self.fitted:  # the training file's layout
            self.num_columns = corpus.num_columns
        if unknown_tags and self.fitted:
            self._check_tag_column(sequences, path)
        scheme = self.scheme or detect_scheme(s.labels or () for s in sequences)
        if self.scheme is None and scheme == "plain":
            self._check_stray_tags(sequences, path)
        known = set(self.tags)
        out = []
        malformed: list[tuple[int, str, str]] = []  # (line, tag, previous tag) per sentence
        for seq in sequences:
            assert seq.labels is not None
            for t, tag in enumerate(seq.labels):
                problem = check_tag(tag, scheme)
                if problem is not None:
                    origin = "given" if self.tag_scheme != "auto" else "detected"
                    raise ValueError(f"{path}:{seq.line_of(t)}: {problem} (tag_scheme {scheme!r}, "
                                     f"{origin})")
            bio = to_bio(seq.labels, scheme)
            bad = ill_formed(seq.labels, scheme)
            if bad is not None:
                malformed.append((seq.line_of(bad), seq.labels[bad], from_bio(bio, scheme)[bad]))
            if known and not unknown_tags:
                for t, tag in enumerate(bio):
                    if tag not in known:
                        raise ValueError(
                            f"{path}:{seq.line_of(t)}: expected a tag of the training file's tag "
                            f"set {list(self.tags)}{' (in BIO)' if scheme not in ('bio', 'plain') else ''}"
                            f"; got {seq.labels[t]!r}{f' ({tag} in BIO)' if tag != seq.labels[t] else ''}"
                        )
            out.append(seq if keep_tags else dataclasses.replace(seq, labels=tuple(bio)))
        if malformed:
            line, tag, expected = malformed[0]
            own = detect_scheme(seq.labels or () for seq in sequences)
            other = (f"; the file's own tags read as {own.upper()}: is it in another scheme than "
                     f"the model's {scheme.upper()}?" if self.scheme is not None and own != scheme
                     and own != "plain" else "")
            warnings.warn(
                f"{path}: {len(malformed)} sentence(s) with ill-formed {scheme.upper()} tags, the "
                f"first at line {line} ({tag!r} where a well-formed sequence of the same spans has "
                f"{expected!r}); read as conlleval reads them (spans by their B- and I- prefixes; "
                f"a tag that does not continue a span of its type starts one){other}",
                stacklevel=2,
            )
        if self.scheme is None:
            self.scheme = scheme
        return out

    @staticmethod
    def _check_stray_tags(sequences: Seq[Sequence], path: PathLike) -> None:
        """Refuse to detect ``plain`` tags because of a few typos in a span-tagged file
        (:func:`~structssl.data.tag_schemes.stray_tags`), naming the first at its line."""
        stray = stray_tags([s.labels or () for s in sequences])
        if stray:
            i, t = stray[0]
            seq = sequences[i]
            assert seq.labels is not None
            raise ValueError(
                f"{path}:{seq.line_of(t)}: expected a span tag (O, B-X, I-X, E-X, S-X, L-X or U-X) "
                f"like the file's other tags; got {seq.labels[t]!r}, one of {len(stray)} such tag(s) "
                "in the file: correct them, or pass tag_scheme='plain' (--data.tag_scheme plain) "
                "to train on every tag as a plain label"
            )

    def _check_tag_column(self, sequences: Seq[Sequence], path: PathLike) -> None:
        """Raise :class:`TagColumnError` when most tag-column values of a file in the training
        layout are no tags of the model (neither in its tag set, in the training scheme or in
        BIO, nor ``O`` / a tag of one of its span types in another scheme): a sentence per line
        read as columns, named at its first such line instead of tagged as a fraction of its
        words."""
        tags = set(self.tags)
        types = set(entity_types(tags))
        scheme = self.scheme or "bio"

        def tag_like(value: str) -> bool:
            return (
                value in tags or (value == "O" and self.task == "bio")
                or to_bio([value], scheme)[0] in tags or bool(types & set(entity_types([value])))
            )

        values = [
            (seq.line_of(t), tag) for seq in sequences for t, tag in enumerate(seq.labels or ())
        ]
        strange = [(line, tag) for line, tag in values if not tag_like(tag)]
        if 2 * len(strange) > len(values):
            line, tag = strange[0]
            raise TagColumnError(
                f"{path}:{line}: read in the training file's layout ({self.num_columns} columns, "
                f"the tag last), but {len(strange)} of its {len(values)} tag-column values are no "
                f"tags of the model (here {tag!r}; tags: {sorted(tags)}): a file to tag holds one "
                "token per line, alone or in the training layout (is this a sentence per line?)"
            )

    def read_tokens(self, path: PathLike) -> list[Sequence]:
        """Read an unlabeled or prediction file: the token alone per line, or the labeled
        layout (its tags are ignored).

        Raises:
            ValueError: naming the file and line of a malformed line (mixed column counts, a
                feature column the line lacks, a column count that is neither 1 nor the
                training files' layout with or without its last tag column).
        """
        return list(self._read(path, labeled=False).sequences)

    def _check_layout(self, path: PathLike, labeled: bool, line: int, m: int) -> None:
        """Files read after the training file (the first :meth:`read_labeled`) must have its
        column count (tagged files), or also the token alone or that layout without its last
        tag column (untagged files, also the unlabeled file read before :meth:`fit`): a
        sentence per line must not be read as one token plus "other columns". Checked on the
        first token line (``line``, ``m`` columns), before the rest of the file is read."""
        k = self.num_columns
        if k is None:
            return
        allowed = {k}
        without_tag = not labeled and self.tag_column in (-1, k - 1) and k > 2
        if not labeled:
            allowed.add(1)
            if without_tag:
                allowed.add(k - 1)  # the training layout without its (last) tag column
        if m in allowed:
            return
        if labeled and (m == 1 or (m == k - 1 and self.tag_column in (-1, k - 1))):
            raise NoTagColumnError(
                f"{path}:{line}: expected the training file's {k} columns "
                f"with the tag last; got {m}: no tag column"
            )
        what = (f"the training file's {k} columns" if labeled else
                f"1 (the token alone) or the training file's {k}"
                + (f" (or {k - 1} without its tag column)" if without_tag else "") + " columns")
        # a sentence read as columns has many; one or two more are another layout
        hint = " (files hold one token per line; is this a sentence per line?)" if m >= 2 * k and m > 4 else ""
        first = first_token_line(path, self.encoding)
        hint = (format_hint(first[1], first[1]) if first is not None else "") or hint  # ARFF, CoNLL-U
        raise ValueError(f"{path}:{line}: expected {what}; got {m}{hint}")

    # ------------------------------------------------------------------ fitting
    def fit(self, tagged: Seq[Sequence], sentences: Iterable[Sequence]) -> "TaggingFormat":
        """Learn the tag set and the feature vocabulary.

        Args:
            tagged: sentences read by :meth:`read_labeled` (the training file): the tag set.
            sentences: the sentences trained on (labeled and unlabeled): the features.

        Raises:
            ValueError: fewer than two tags in ``tagged``.
        """
        vocab = self._tag_set([t for s in tagged for t in (s.labels or ())])
        if len(vocab) < 2:
            raise ValueError(
                f"the training sentences must hold at least two different tags; got {list(vocab)}"
            )
        self.tags = vocab
        self.untrained_tags = ()
        self.extractor.fit(sentences)
        if self.two_view:
            self.view_split = ViewSplit(
                self.extractor.feature_names, self.view_scheme, seed=self.view_seed  # type: ignore[arg-type]
            )
        return self

    def admit_tags(self, sequences: Seq[Sequence], path: PathLike) -> list[str]:
        """Let the tags of a dev or test file (read by :meth:`read_labeled` before :meth:`fit`)
        that the training file lacks join the tag set, as :attr:`untrained_tags`: no training
        sentence holds them, so the model learns not to predict them and each gold one counts
        as an error (instead of a file that cannot be scored).

        Returns:
            Where each new tag first occurs, in the file's own scheme (``"'S-EVENT' at
            dev.conll:12"``), for the warning that names them.

        Raises:
            TagColumnError: most of the file's tag column holds no tags of the training file
                (a sentence per line, or another layout, read as columns).
        """
        if not self.fitted:
            raise RuntimeError("TaggingFormat.admit_tags needs fit() first")
        self._check_tag_column(sequences, path)
        vocab = self._tag_set([*self.tags, *(t for s in sequences for t in (s.labels or ()))])
        known = set(self.tags)
        first: dict[str, str] = {}  # a new BIO tag -> where it first occurs, as the file writes it
        for seq in sequences:
            labels = list(seq.labels or ())
            if all(tag in known for tag in labels):
                continue
            written = from_bio(labels, self.scheme or "bio")
            for t, tag in enumerate(labels):
                if tag not in known and tag not in first:
                    first[tag] = f"{written[t]!r} at {path}:{seq.line_of(t)}"
        self.untrained_tags += tuple(t for t in vocab if t not in known)
        self.tags = vocab
        return list(dict.fromkeys(first.values()))

    def _tag_set(self, tags: list[str]) -> tuple[str, ...]:
        if self.scheme == "plain":
            return Vocabulary.build(tags, first=("O",)).items
        return bio_tag_set(entity_types(tags))

    # ------------------------------------------------------------------ encoding
    def encode(self, sentence: Sequence, with_labels: bool) -> Example:
        """One sentence as an example dict: ``inputs`` (n, F) long feature indices (with two
        views also ``inputs_b``) and, ``with_labels``, ``labels`` (n,) long."""
        features = self.extractor.encode(sentence)
        example: Example = {}
        if self.view_split is not None:
            example["inputs"], example["inputs_b"] = self.view_split(features)
        else:
            example["inputs"] = features
        if with_labels:
            assert sentence.labels is not None
            if self._label_vocabulary is None or self._label_vocabulary.items != self.tags:
                self._label_vocabulary = Vocabulary(self.tags)
            example["labels"] = self._label_vocabulary.encode(sentence.labels)
        return example

    def decode(self, label_ids: Iterable[int]) -> list[str]:
        """Label ids of one sentence -> its tags in the training file's scheme."""
        bio = [self.tags[int(i)] for i in label_ids]
        return from_bio(bio, self.scheme or "bio")

    # ------------------------------------------------------------------ saving
    def state_dict(self) -> dict[str, Any]:
        """Plain data (lists, strings, ints) that :meth:`from_state_dict` restores."""
        if not self.fitted:
            raise RuntimeError("TaggingFormat.state_dict needs fit() first")
        return {
            "kind": "tagging",
            "token_column": self.token_column,
            "tag_column": self.tag_column,
            "feature_columns": list(self.feature_columns),
            "separator": self.separator,
            "comment_prefix": self.comment_prefix,
            "encoding": self.encoding,
            "tag_scheme": self.tag_scheme,
            "layout": self.layout,
            "scheme": self.scheme,
            "tags": list(self.tags),
            "num_columns": self.num_columns,
            "extractor": self.extractor.state_dict(),
            "two_view": self.two_view,
            "view_scheme": self.view_scheme,
            "view_seed": self.view_seed,
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> "TaggingFormat":
        """The fitted format saved by :meth:`state_dict`.

        Raises:
            ValueError: ``state`` is not a tagging format's.
        """
        if not isinstance(state, dict) or state.get("kind") != "tagging":
            raise ValueError(
                "expected the saved state of a TaggingFormat (kind 'tagging'); got "
                f"{state.get('kind') if isinstance(state, dict) else type(state).__name__!r}"
            )
        out = cls(
            token_column=state["token_column"], tag_column=state["tag_column"],
            feature_columns=state["feature_columns"], separator=state["separator"],
            encoding=state["encoding"], tag_scheme=state["tag_scheme"],
            two_view=state["two_view"], view_scheme=state["view_scheme"],
            view_seed=state["view_seed"],
            layout=state.get("layout", "columns"),  # absent in checkpoints before 2026-11-28
            comment_prefix=state.get("comment_prefix"),  # absent before 2026-12-05
        )
        out.scheme = state["scheme"]
        out.tags = tuple(state["tags"])
        out.num_columns = state.get("num_columns")  # absent in checkpoints before 2026-11-25
        out.extractor = FeatureExtractor.from_state_dict(state["extractor"])
        if out.two_view:
            out.view_split = ViewSplit(
                out.extractor.feature_names, out.view_scheme, seed=out.view_seed  # type: ignore[arg-type]
            )
        return out
