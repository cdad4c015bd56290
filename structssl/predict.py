"""Apply a trained model to new text: the Python API and the ``structssl predict`` command.

A checkpoint written by ``structssl fit`` is a whole model: the procedure's configuration
(structure, scorer, losses), the weights, and the data format it was trained on (columns, tag
scheme and tag set, feature extractor with its vocabulary). :class:`Tagger` loads one and tags
token lists or files::

    from structssl.predict import Tagger

    tagger = Tagger.load("RUN_DIR")            # RUN_DIR/checkpoints/best.ckpt (else last.ckpt)
    tagger.tag([["El", "Grupo", "Magenta", "vive", "en", "Madrid"]])
    # [['O', 'B-ORG', 'I-ORG', 'O', 'O', 'B-LOC']]

Output files (``structssl predict`` / :meth:`Tagger.tag_file`): one ``token<TAB>tag`` line per
token, a blank line after each sentence, in the input's order, tags in the training file's
scheme; ``confidence`` adds the marginal probability of each predicted tag, ``kbest`` adds the
tags of the 2nd .. k-th best tag sequences (``-`` where a short sentence has fewer). The output
follows the input line for line: blank lines (runs of them too) and comment lines
(``comment_prefix``) come back as they were, and each ``-DOCSTART-`` line (a document boundary,
CoNLL-2003 style) as ``-DOCSTART-<TAB>O`` (``-`` in the confidence and k-best columns), so that
a well-formed input and its predictions have the same number of lines (``paste``, conlleval);
a blank line is added where a sentence or a ``-DOCSTART-`` line lacks one.
A CoNLL-U input (for a model trained on CoNLL-U files) comes back as CoNLL-U instead, line
for line, each word's tag column (UPOS, or the column trained on) holding its predicted tag,
the confidence and k-best tags in MISC (``Confidence=0.9876|KBest=NOUN,VERB``). The output is a
file (UTF-8) or a text stream (``structssl predict --output -``: standard output). When the input file carries tags in the training layout (the training file's column
count; a CoNLL-U file for a CoNLL-U model) they are ignored for tagging, and the span F1 /
token accuracy against them is reported; tags the model never saw count as errors (and are
listed), and tags that cannot be read (e.g. another scheme) are named instead of a score. An
input with fewer columns (the token alone, or the training layout without its tag column) is
only tagged.

Sequence taggers (trained on :class:`~structssl.data.CoNLLDataModule`) predict this way;
multi-label classifiers (trained on :class:`~structssl.data.ArffDataModule` or
:class:`~structssl.data.MulanDataModule`) predict ARFF
files through :mod:`structssl.predict_multilabel`, and :func:`load_predictor` returns whichever
applies; other checkpoints get a clear error.
"""

from __future__ import annotations

import importlib
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, TextIO, Union
from typing import Sequence as Seq

import torch

from structssl.data.batch import collate_sequences, pad_sequences
from structssl.data.formats.conll import DOCSTART, split_columns
from structssl.data.paths import DecodingError, iter_lines
from structssl.data.records import Sequence
from structssl.data.tag_schemes import to_bio
from structssl.data.tagging import TagColumnError, TaggingFormat

__all__ = ["Tagger", "TaggedSentence", "load_model", "load_predictor"]

PathLike = Union[str, Path]


def _label_marginals(structure: Any, potentials: Any, lengths: torch.Tensor) -> torch.Tensor:
    """Per-position label marginals (B, N, C) of a tagging structure's potentials: the node
    marginals of factored chain potentials (:class:`~structssl.structures.ChainPotentials`),
    else ``structure.node_parts`` of the part marginals (edge-layout chains, semi-Markov
    chains)."""
    from structssl.structures import ChainPotentials

    parts = structure.marginals(potentials, lengths)  # detached inputs, no graph kept
    if isinstance(parts, ChainPotentials):
        return parts.emissions
    return structure.node_parts(parts)


def _looks_utf8(path: Path) -> bool:
    """Whether the file decodes as UTF-8 and holds non-ASCII characters."""
    data = path.read_bytes()
    if data.isascii():
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _first_column_count(reader: TaggingFormat, path: Path) -> Optional[int]:
    """The column count of the first token line of a column file (blank and ``-DOCSTART-``
    lines skipped, as the reader does), split as ``reader`` splits it; ``None``: no token line."""
    for _, line in iter_lines(path, reader.encoding):
        if not line.strip() or (reader.comment_prefix is not None and line.startswith(reader.comment_prefix)):
            continue
        cols = split_columns(line, reader.separator)
        if cols[0] != DOCSTART:
            return len(cols)
    return None


def _has_tag_column(reader: TaggingFormat, path: Path) -> bool:
    """Whether ``path`` has the training layout's tag column, so that its tags can be scored:
    a CoNLL-U file for a CoNLL-U model, else the training file's column count on its first
    token line. Other files (the token alone, the training layout without its tag column, a
    CoNLL-U model's token-per-line file) are never read for tags: they are tagged (or refused
    by :meth:`TaggingFormat.read_tokens`), without the confusing "not scored" note they used to
    get. Checkpoints that do not know the training file's column count (before 2026-11-25)
    try to read the tags, as before."""
    if reader.reads_conllu(path):
        return True
    if reader.layout == "conllu":
        return False  # a CoNLL-U model's file in another layout holds the token alone
    if reader.num_columns is None:
        return True
    return _first_column_count(reader, path) == reader.num_columns


def _conllu_unannotated(reader: TaggingFormat, path: Path) -> Optional[str]:
    """Whether the words of a CoNLL-U file have ``_`` (not annotated) in the model's tag column:
    ``"all"`` (a file to tag), ``"some"``, or ``None``."""
    from structssl.data.tagging import CONLLU_UPOS

    column = CONLLU_UPOS if reader.tag_column == -1 else reader.tag_column
    blank = words = 0
    for _, line in iter_lines(path, reader.encoding):
        cols = line.split("\t")
        if len(cols) == 10 and cols[0].isdigit():  # a word (not a range, empty node or comment)
            words += 1
            blank += cols[column] == "_"
    return None if blank == 0 else "all" if blank == words else "some"


def _length_batches(lengths: Seq[int], size: int) -> Iterable[list[int]]:
    """The indices of ``lengths`` in batches of at most ``size``, shortest first (little
    padding)."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    return (order[start : start + size] for start in range(0, len(order), size))


def _missing_class(err: BaseException) -> Optional[tuple[str, str]]:
    """``(class path, import error)`` when ``err`` (jsonargparse's instantiation of a saved
    config) comes from a class that cannot be imported; else None."""
    import re

    named, seen = None, set()
    current: Optional[BaseException] = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        found = re.findall(r"class_path '([^']+)'", str(current))
        if found:
            named = found[-1]
        if isinstance(current, ImportError):
            return (repr(named) if named else "a class", f"{type(current).__name__}: {current}")
        current = current.__cause__ or current.__context__
    return None


def load_model(path: PathLike, map_location: str = "cpu") -> Any:
    """The trained procedure (a ``LightningModule``) of a checkpoint or a run directory.

    Args:
        path: a ``.ckpt`` file, or a run directory (``--trainer.default_root_dir`` of
            ``structssl fit``): its ``checkpoints/best.ckpt``, else ``checkpoints/last.ckpt``.
        map_location: device for the weights.

    Raises:
        FileNotFoundError: no checkpoint there.
        ValueError: the file is not a readable checkpoint, or not one of a structssl CLI run.
    """
    from structssl.training.checkpointing import checkpoint_file

    file = checkpoint_file(path)
    try:
        ckpt = torch.load(file, map_location=map_location, weights_only=True)
    except Exception as err:  # truncated, empty or foreign files
        # torch's first sentence says what failed; the rest is advice about torch.load itself
        first = (str(err).strip().splitlines() or [""])[0].split(". ")[0]
        first = first if len(first) <= 160 else first[:157] + "..."
        raise ValueError(
            f"{file}: not a readable checkpoint ({file.stat().st_size} bytes; "
            f"{type(err).__name__}: {first}); expected a checkpoint written by `structssl fit` "
            "(RUN_DIR/checkpoints/best.ckpt), or its RUN_DIR"
        ) from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise ValueError(f"{file}: not a Lightning checkpoint (no state_dict)")
    class_path = (ckpt.get("hyper_parameters") or {}).get("_class_path")
    if not isinstance(class_path, str):
        raise ValueError(
            f"{file}: the checkpoint holds no model configuration (it was not written by "
            "`structssl fit`); load it with Procedure.load_from_checkpoint(path, structure=..., "
            "scorer=...) instead"
        )
    if not class_path.startswith("structssl."):
        raise ValueError(
            f"{file}: the model class {class_path!r} is not a structssl procedure; import it and "
            "use its load_from_checkpoint"
        )
    module_name, _, name = class_path.rpartition(".")
    cls = getattr(importlib.import_module(module_name), name)
    try:
        model = cls.load_from_checkpoint(file, map_location=map_location)
    except Exception as err:  # a class of the user's own in the saved config, not importable
        missing = _missing_class(err)
        if missing is None:
            raise
        raise ValueError(
            f"{file}: the model's configuration names {missing[0]}, which cannot be imported "
            f"({missing[1]}); put its module on PYTHONPATH, as for the fit"
        ) from None
    # weights trained in float64 (--trainer.precision 64-true) stay float64: the model is built
    # in float32, which load_from_checkpoint copied them into
    params = dict(model.named_parameters())
    state = ckpt["state_dict"]
    if any(isinstance(v, torch.Tensor) and v.dtype == torch.float64 for k, v in state.items() if k in params):
        model = model.double()
        model.load_state_dict(state)
    model.eval()
    return model


def load_predictor(path: PathLike, batch_size: int = 256) -> Any:
    """What ``structssl predict`` applies: the :class:`Tagger` of a sequence tagger (trained on
    :class:`~structssl.data.CoNLLDataModule`) or the
    :class:`~structssl.predict_multilabel.MultiLabelPredictor` of a multi-label classifier
    (trained on :class:`~structssl.data.ArffDataModule` or
    :class:`~structssl.data.MulanDataModule`), from a checkpoint or a run
    directory (see :func:`load_model`).

    Raises:
        ValueError: the checkpoint's model was trained on another data module (no saved format
            to read new files with).
    """
    model = load_model(path)
    state = getattr(model, "data_format", None)
    kind = state.get("kind") if isinstance(state, dict) else None
    if kind == "tagging":
        # what a Trainer does before predicting: the procedure binds its constraints (given
        # by pattern in the config) to the saved tag set, for a decoding that uses them
        model.setup("predict")
        return Tagger(model, TaggingFormat.from_state_dict(state), batch_size)
    if kind == "multilabel":
        from structssl.predict_multilabel import MultiLabelPredictor

        return MultiLabelPredictor(model, state)
    raise ValueError(
        f"{path}: a checkpoint of a {type(model).__name__} trained on "
        f"{'data of kind ' + repr(kind) if kind else 'a data module without a saved format'}"
        "; structssl predict applies sequence taggers (models trained on CoNLLDataModule) and "
        "multi-label classifiers (ArffDataModule, MulanDataModule)"
    )


@dataclass(frozen=True)
class TaggedSentence:
    """The prediction of one sentence.

    Attributes:
        tokens: the tokens.
        tags: the predicted tags (training file's scheme).
        confidence: per token, the marginal probability of its predicted tag, or ``None``.
        alternatives: the 2nd .. k-th best tag sequences (``None`` entries where a sentence
            has fewer distinct taggings), or ``()``.
    """

    tokens: tuple[str, ...]
    tags: tuple[str, ...]
    confidence: Optional[tuple[float, ...]] = None
    alternatives: tuple[Optional[tuple[str, ...]], ...] = ()


class Tagger:
    """A trained sequence tagger: a procedure plus its :class:`TaggingFormat`.

    Args:
        model: the trained procedure (``StructuredModule``).
        data_format: the format it was trained on.
        batch_size: sentences decoded at once.
    """

    def __init__(self, model: Any, data_format: TaggingFormat, batch_size: int = 256) -> None:
        if not data_format.fitted:
            raise ValueError("data_format must be fitted (its tags and features learned)")
        self.model = model
        self.format = data_format
        self.batch_size = batch_size

    @classmethod
    def load(cls, path: PathLike, batch_size: int = 256) -> "Tagger":
        """The tagger of a checkpoint or a run directory (see :func:`load_model`).

        Raises:
            ValueError: the checkpoint is not a sequence tagger's.
        """
        predictor = load_predictor(path, batch_size)
        if not isinstance(predictor, Tagger):
            raise ValueError(f"{path}: a multi-label classifier, not a sequence tagger; load it "
                             "with load_predictor or MultiLabelPredictor.load")
        return predictor

    @property
    def tags(self) -> tuple[str, ...]:
        """The tag set (BIO for span schemes; predictions use the training file's scheme)."""
        return self.format.tags

    # ------------------------------------------------------------------ tagging
    def tag(self, sentences: Iterable[Seq[str]]) -> list[list[str]]:
        """Tag lists of tokens: one list of tags per sentence.

        Raises:
            TypeError: a sentence is a string, not a list of tokens.
            ValueError: an empty sentence or token, or a model that needs feature columns.
        """
        return [list(s.tags) for s in self.predict(list(sentences))]

    def _records(self, sentences: Iterable[Union[Sequence, Seq[str]]]) -> list[Sequence]:
        """Sentence records; token lists become records without feature columns."""
        records = []
        for i, tokens in enumerate(sentences):
            if isinstance(tokens, Sequence):
                records.append(tokens)
                continue
            if isinstance(tokens, str):
                raise TypeError(f"sentences[{i}] must be a list of tokens; got a str")
            tokens = tuple(tokens)
            if not tokens or not all(isinstance(t, str) and t for t in tokens):
                raise ValueError(f"sentences[{i}] must be a non-empty list of non-empty strings")
            if self.format.feature_columns:
                raise ValueError(
                    f"this model uses the feature columns {self.format.feature_columns} of its "
                    "files; tag files with them (tag_file) instead of bare tokens"
                )
            records.append(Sequence(tokens=tokens, features=tuple(() for _ in tokens)))
        return records

    def predict(
        self, sentences: Seq[Union[Sequence, Seq[str]]], confidence: bool = False, kbest: int = 1
    ) -> list[TaggedSentence]:
        """Decode sentences, in their order: token lists, or records (from
        :meth:`TaggingFormat.read_tokens`, which carry the feature columns a model may use).

        Args:
            sentences: the sentences.
            confidence: also compute each predicted tag's marginal probability.
            kbest: also find the 2nd .. k-th best tag sequences (1: none).

        The tags are the procedure's decoding (``model.decode``: the Viterbi path, or for a
        :class:`~structssl.training.CoDLModule` or
        :class:`~structssl.training.LabelSwitchingModule` with ``constrained_decoding`` the
        constraint-guided one); confidences and alternatives are the model's marginals and
        k-best list without constraints.
        """
        if isinstance(kbest, bool) or not isinstance(kbest, int) or kbest < 1:
            raise ValueError(f"kbest must be an int >= 1; got {kbest!r}")
        sentences = self._records(sentences)
        model, structure = self.model, self.model.structure
        out: list[Optional[TaggedSentence]] = [None] * len(sentences)
        for ids in _length_batches([len(s) for s in sentences], self.batch_size):
            batch = collate_sequences(
                [{**self.format.encode(sentences[i], with_labels=False),
                  "tokens": sentences[i].tokens} for i in ids],
                sequence_keys=("inputs", "inputs_b"),
            )
            lengths = batch["lengths"]
            with torch.no_grad():
                # the procedure's own decoding (e.g. CoDL's constraint-guided search with
                # constrained_decoding=True), as in its validation and test steps
                labels = model.decode(batch)
                if confidence or kbest > 1:
                    potentials = model.decode_potentials(batch)
                alternatives = None
                if kbest > 1:
                    alt_labels, alt_scores = structure.kbest(potentials, kbest, lengths)
                    alternatives = (alt_labels[:, 1:], torch.isfinite(alt_scores[:, 1:]))
            probs = None
            if confidence:
                probs = _label_marginals(structure, potentials, lengths)
                probs = probs.gather(2, labels.unsqueeze(2)).squeeze(2)
            for row, i in enumerate(ids):
                n = int(lengths[row])
                tags = self.format.decode(labels[row, :n].tolist())
                conf = None if probs is None else tuple(float(p) for p in probs[row, :n])
                alts: tuple[Optional[tuple[str, ...]], ...] = ()
                if alternatives is not None:
                    alt, ok = alternatives
                    alts = tuple(
                        tuple(self.format.decode(alt[row, r, :n].tolist())) if ok[row, r] else None
                        for r in range(alt.shape[1])
                    )
                out[i] = TaggedSentence(sentences[i].tokens, tuple(tags), conf, alts)
        return [s for s in out if s is not None]

    def tag_file(
        self,
        input: PathLike,
        output: Union[PathLike, TextIO],
        confidence: bool = False,
        kbest: int = 1,
        encoding: Optional[str] = None,
        comments: Optional[bool] = None,
    ) -> dict[str, Any]:
        """Tag a file and write the predictions (format in the module docstring).

        Args:
            input: the file to tag (the training files' columns; the token alone per line, or
                with its tag in the training layout).
            output: where the predictions go: a path (written in UTF-8, its folder created), or
                a writable text stream such as ``sys.stdout`` (``structssl predict --output -``).
            confidence: add each tag's marginal probability.
            kbest: add the 2nd .. k-th best taggings.
            encoding: the input's text encoding (default: the training files').
            comments: lines of the input that start with ``#`` are comments, written back as
                they are (``None``: as in the training files, ``--data.comments``).

        Returns:
            ``{"sentences": ..., "tokens": ...}``, plus ``span_f1`` / ``token_accuracy``
            against the input's tags when it carries tags in the training layout (with
            ``unseen_tags``, those outside the model's tag set, counted as errors), or
            ``not_scored``, why the tags it carries could not be scored. An input without the
            training layout's column count (e.g. the token alone) gets neither.

        Raises:
            FileNotFoundError: ``input`` does not exist.
            ValueError: a malformed input (file and line).

        ``-DOCSTART-`` lines of the input are written back at their place (module docstring);
        they used to be dropped, so the output had fewer lines than the input.
        """
        input = Path(input)
        if not input.is_file():
            raise FileNotFoundError(f"no such input file: {input}")
        reader = self.format.with_reading(encoding, comments)
        if encoding is None and _looks_utf8(input) and reader.encoding.replace("_", "-").lower() not in ("utf-8", "utf8", "utf-8-sig"):
            warnings.warn(
                f"{input}: the file is valid UTF-8 with non-ASCII characters, but is read as "
                f"{reader.encoding} (the training files' encoding); pass --encoding utf-8 / "
                "encoding='utf-8' if it is UTF-8",
                stacklevel=2,
            )
        from structssl.data.formats.conll import looks_conllu

        if reader.layout == "columns" and reader.num_columns != 10 and looks_conllu(input, reader.encoding):
            raise ValueError(
                f"{input}: a CoNLL-U file (ten tab-separated columns, '#' comment lines); the model "
                f"was trained on files of {reader.num_columns or 'other'} columns: give the input "
                "in that layout, or the token alone per line"
            )
        try:
            gold, not_scored = self._gold(reader, input)  # the sentences with their tags
            sentences = gold if gold is not None else reader.read_tokens(input)
        except DecodingError as err:
            raise DecodingError(f"{err} (pass the input's encoding: --encoding / encoding=)") from None
        predictions = self.predict(sentences, confidence=confidence, kbest=kbest)
        # a -DOCSTART- line: the token, "O", and "-" in the confidence and k-best columns
        docstart = "\t".join([DOCSTART, "O"] + ["-"] * (int(confidence) + kbest - 1)) + "\n"

        def write(f: TextIO) -> None:
            if reader.reads_conllu(input):  # CoNLL-U back, its tag column filled
                self._write_conllu(f, predictions, sentences, input, reader)
            else:
                self._write(f, predictions, sentences, input, reader, docstart)

        if isinstance(output, (str, os.PathLike)):
            path = Path(output)
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                write(f)
        else:  # a text stream (sys.stdout for `--output -`)
            write(output)
            output.flush()
        summary: dict[str, Any] = {
            "sentences": len(predictions),
            "tokens": sum(len(s.tokens) for s in predictions),
        }
        if gold is not None:
            summary.update(self._score(predictions, gold))
        elif not_scored is not None:
            summary["not_scored"] = not_scored
        return summary

    @staticmethod
    def _write(
        f: TextIO, predictions: list[TaggedSentence], sentences: list[Sequence], path: Path,
        reader: TaggingFormat, docstart: str,
    ) -> None:
        """Write the predictions of a column file line for line with its input: each token's
        line at its place, blank lines and ``comment_prefix`` lines as they were, each
        ``-DOCSTART-`` line as ``docstart``; a blank line is added where a sentence or a
        ``-DOCSTART-`` line is not followed by one (before the next sentence or ``-DOCSTART-``
        line, or at the end)."""
        at: dict[int, tuple[TaggedSentence, int]] = {}  # line number -> (sentence, position)
        for sent, pred in zip(sentences, predictions):
            for t in range(len(pred.tokens)):
                at[sent.line_of(t)] = (pred, t)
        pending = False  # a sentence or -DOCSTART- line written, its blank line not yet
        for number, line in iter_lines(path, reader.encoding):
            if not line.strip():
                f.write("\n")
                pending = False
            elif number in at:
                pred, t = at[number]
                if pending and t == 0:
                    f.write("\n")
                cols = [pred.tokens[t], pred.tags[t]]
                if pred.confidence is not None:
                    cols.append(f"{pred.confidence[t]:.4f}")
                cols += [alt[t] if alt is not None else "-" for alt in pred.alternatives]
                f.write("\t".join(cols) + "\n")
                pending = t == len(pred.tokens) - 1
            elif split_columns(line, reader.separator)[0] == DOCSTART:
                f.write(("\n" if pending else "") + docstart)
                pending = True
            else:  # a comment line
                f.write(line + "\n")
        if pending:
            f.write("\n")

    @staticmethod
    def _write_conllu(
        f: TextIO, predictions: list[TaggedSentence], sentences: list[Sequence], path: Path,
        reader: TaggingFormat,
    ) -> None:
        """A CoNLL-U input written back line for line (comments, multiword-token ranges and
        empty nodes as they were), each word's tag column (UPOS, or the column the model was
        trained on) holding its predicted tag; the confidence and the 2nd .. k-th best tags
        go to MISC as ``Confidence=0.9876`` and ``KBest=NOUN,VERB`` (``_`` where a short
        sentence has fewer)."""
        from structssl.data.tagging import CONLLU_UPOS

        column = CONLLU_UPOS if reader.tag_column == -1 else reader.tag_column
        new: dict[int, tuple[str, list[str]]] = {}  # line number -> (tag, MISC additions)
        for sent, pred in zip(sentences, predictions):
            for t, tag in enumerate(pred.tags):
                misc = [] if pred.confidence is None else [f"Confidence={pred.confidence[t]:.4f}"]
                if pred.alternatives:
                    misc.append("KBest=" + ",".join(alt[t] if alt is not None else "_"
                                                    for alt in pred.alternatives))
                new[sent.line_of(t)] = (tag, misc)
        for number, line in iter_lines(path, reader.encoding):
            if number in new:
                cols = line.split("\t")
                tag, misc = new[number]
                cols[column] = tag
                if misc:
                    cols[9] = "|".join(([] if cols[9] == "_" else [cols[9]]) + misc)
                line = "\t".join(cols)
            f.write(line + "\n")

    @staticmethod
    def _gold(
        reader: TaggingFormat, path: Path
    ) -> tuple[Optional[list[Sequence]], Optional[str]]:
        """The input's sentences with their (BIO) tags when it has the training layout's tag
        column; else ``None`` and, for a tag column that cannot be read, the reason. A file
        that cannot be decoded, or whose tag column holds no tags of the model (a sentence per
        line read as columns), raises. Files without the training layout's column count
        (:func:`_has_tag_column`) are not read for tags: ``(None, None)``, no reason (they used
        to get one, e.g. "expected a CoNLL-U file" for the token alone per line)."""
        from structssl.data.formats.conll import NoTagColumnError

        if not _has_tag_column(reader, path):
            return None, None  # untagged input: nothing to score against
        if reader.reads_conllu(path):
            blank = _conllu_unannotated(reader, path)
            if blank == "all":
                return None, None  # a CoNLL-U file to tag: its tag column is '_'
            if blank == "some":
                return None, "some words have '_' (not annotated) in the tag column"
        try:
            return reader.read_labeled(path, unknown_tags=True, keep_tags=True), None
        except NoTagColumnError:
            return None, None  # untagged input: nothing to score against
        except (DecodingError, TagColumnError):
            raise
        except ValueError as err:
            return None, str(err)

    def _score(self, predictions: list[TaggedSentence], gold: list[Sequence]) -> dict[str, Any]:
        """Token accuracy of the written tags against the file's own (as conlleval counts it:
        in BIOES / BILOU files ``S-X`` for ``B-X`` is an error), and span F1 of their spans
        (``gold``: the sentences with the file's own tags)."""
        from structssl.metrics import SpanF1

        scheme = self.format.scheme or "bio"
        pairs = [(p, g) for pred, s in zip(predictions, gold) for p, g in zip(pred.tags, s.labels or ())]
        out: dict[str, Any] = {"token_accuracy": sum(p == g for p, g in pairs) / max(len(pairs), 1)}
        tags = list(self.tags)
        gold_bio = [to_bio(s.labels or (), scheme) for s in gold]
        unseen = list(dict.fromkeys(t for labels in gold_bio for t in labels if t not in tags))
        index = {t: i for i, t in enumerate(tags + unseen)}
        if unseen:
            out["unseen_tags"] = unseen
        if self.format.task == "bio":
            pred = [torch.tensor([index[t] for t in to_bio(p.tags, scheme)]) for p in predictions]
            true = [torch.tensor([index[t] for t in labels]) for labels in gold_bio]
            f1 = SpanF1(tags + unseen)
            # length-sorted batches: one padded batch of a whole corpus is mostly padding
            for ids in _length_batches([len(p) for p in pred], self.batch_size):
                preds, lengths = pad_sequences([pred[i] for i in ids])
                target, _ = pad_sequences([true[i] for i in ids])
                f1.update(preds, target, lengths=lengths)
            out["span_f1"] = float(f1.compute())
        return out
