"""Mulan multi-label ARFF files (dense and sparse) with their label XML, read with liac-arff.

A Mulan data set is a Weka ARFF file plus an XML file naming the label attributes::

    <labels xmlns="http://mulan.sourceforge.net/labels">
      <label name="Beach"></label> ...
    </labels>

The label attributes are binary (nominal ``{0,1}`` or numeric 0/1); every other attribute is a
feature (``numeric`` / ``real`` / ``integer``, or nominal, encoded as the 0-based index of its
value; a ``{0,1}`` attribute is read by value whatever the order of its values). Data rows
are dense (``v1,v2,...``) or sparse (``{index value, ...}``, 0-based attribute indices; an
omitted value is 0, for a nominal attribute its first declared value, as in Weka). Label
columns of ``Y`` follow the order of the attributes in the ARFF file (as Mulan's label indices
do), and ``label_names`` gives that order; the XML decides only *which* attributes are labels
(nested ``<label>`` elements of hierarchical Mulan files included).

The parsing is liac-arff's (``arff.ArffDecoder``, dense and sparse rows alike); this module
adds what it does not do: the file and 1-based line in every error, with the attribute and the
value at fault; a header checked line by line (liac-arff skips unknown header lines); repeated
indices of a sparse row (liac-arff keeps the last); missing and non-finite values.

Not supported (``ValueError`` naming file and line): missing values ``?``, ``string``,
``date`` and ``relational`` attributes, instance weights ``{...}`` after a row.

References: Tsoumakas et al. (2011), MULAN: a Java library for multi-label learning; the
ARFF format of Weka (Witten et al.).
"""

from __future__ import annotations

import difflib
import re
import warnings
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Literal, Optional, Union
from typing import Sequence as Seq

import arff as liac_arff  # liac-arff
import numpy as np
import torch
from torch import Tensor

from structssl.data.paths import PathLike, data_file, iter_lines, open_binary

__all__ = [
    "MultiLabelData",
    "MULAN_DATASETS",
    "read_mulan_labels",
    "read_arff",
    "check_same_features",
    "load_mulan",
]

#: Mulan data sets in the shared data: name -> (folder, number of labels).
MULAN_DATASETS = {
    "scene": ("mulan_scene", 6),
    "yeast": ("mulan_yeast", 14),
    "emotions": ("mulan_emotions", 6),
}

@dataclass(frozen=True)
class MultiLabelData:
    """Features and binary labels of a multi-label data set.

    Attributes:
        X: (n, d) float64 features.
        Y: (n, K) int64 labels in {0, 1}.
        feature_names: the d feature attribute names.
        label_names: the K label attribute names, in column order.
        relation: the ARFF ``@relation`` name.
        lines: the 1-based line number of each row in its file (``()`` where not read from one).
        one_hot: the nominal attributes read as one 0/1 column per value (``read_arff(one_hot=True)``).
    """

    X: np.ndarray
    Y: np.ndarray
    feature_names: tuple[str, ...]
    label_names: tuple[str, ...]
    relation: str = ""
    lines: tuple[int, ...] = ()
    one_hot: tuple[str, ...] = ()

    def __len__(self) -> int:
        return int(self.X.shape[0])

    def tensors(self, dtype: Optional[torch.dtype] = None) -> tuple[Tensor, Tensor]:
        """``(X, Y)`` as tensors: X of ``dtype`` (default: the default float dtype), Y long.

        Shape:
            X: (n, d); Y: (n, K).
        """
        dtype = torch.get_default_dtype() if dtype is None else dtype
        return torch.as_tensor(self.X, dtype=dtype), torch.as_tensor(self.Y, dtype=torch.long)


def read_mulan_labels(path: PathLike) -> tuple[str, ...]:
    """Label names from a Mulan XML file (all ``<label name=...>`` elements, document order).

    Raises:
        ValueError: the file is not well-formed XML, or has no labels / a nameless label.
    """
    with open_binary(path) as f:
        try:
            root = ET.parse(f).getroot()
        except ET.ParseError as err:
            line = err.position[0]
            raise ValueError(
                f"{path}:{line}: expected well-formed Mulan label XML; {err}"
            ) from None
    names = []
    for el in root.iter():
        if el.tag.rsplit("}", 1)[-1] != "label":
            continue
        name = el.get("name")
        if not name:
            raise ValueError(f"{path}: expected a name attribute on every <label> element")
        names.append(name)
    if not names:
        raise ValueError(f"{path}: expected at least one <label name=...> element; found none")
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: expected distinct label names; got {names}")
    return tuple(names)


class _Lines:
    """The file's lines for liac-arff, remembering where it is (``number``, ``text``) and
    checking the header's layout, which liac-arff does not (it skips unknown header lines)."""

    def __init__(self, path: PathLike) -> None:
        self.path = path
        self.number = 0
        self.text = ""
        self.attribute_lines: list[int] = []
        self.saw_data = False
        self.ended = False

    def __iter__(self) -> Iterator[str]:
        for number, line in iter_lines(self.path):
            self.number, self.text = number, line
            text = line.strip()
            if not self.saw_data and text and not text.startswith("%"):
                low = text.lower()
                if low.startswith("@attribute"):
                    self.attribute_lines.append(number)
                elif low.startswith("@data"):
                    if not self.attribute_lines:
                        raise ValueError(f"{self.path}:{number}: expected @attribute lines before @data")
                    self.saw_data = True
                elif not low.startswith("@relation"):
                    raise ValueError(
                        f"{self.path}:{number}: expected @relation, @attribute or @data in the "
                        f"header; got {text!r}"
                    )
            yield line
        self.ended = True


#: what a header error of liac-arff means, by its exception class
_HEADER_ERRORS = {
    "BadAttributeType": "expected a numeric or nominal attribute type (string, date and relational "
    "attributes are not supported)",
    "BadAttributeFormat": "expected '@attribute <name> <type>'",
    "BadRelationFormat": "expected '@relation <name>'",
    "BadAttributeName": "expected distinct attribute names",
    "BadNominalFormatting": "expected a nominal type {a,b,...}",
    "BadLayout": "expected @relation, then @attribute lines, then @data",
}


def _shorten(items: Seq[str], head: int = 3, tail: int = 3) -> list[str]:
    """``items``, or its first ``head`` and last ``tail`` around ``'...'`` when much longer."""
    items = list(items)
    return items if len(items) <= head + tail + 2 else items[:head] + ["..."] + items[-tail:]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _close_match(name: str, candidates: Seq[str]) -> str:
    """The candidate closest to a misspelt ``name`` (difflib), else one holding it
    (``'happy'`` -> ``'happy-pleased'``); ``""`` if none is close."""
    close = difflib.get_close_matches(name, candidates, n=1)
    if close:
        return close[0]
    low = name.lower()
    return next((c for c in candidates if len(low) >= 3 and low in c.lower()), "")


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _check_value(text: Optional[str], name: str, kind: object) -> Optional[str]:
    """What is wrong with one value of attribute ``name`` (None if nothing)."""
    if text is None or text == "?":
        return f"missing value '?' for attribute {name!r} (not supported)"
    if isinstance(kind, list):
        if text not in kind:
            return f"expected one of {{{','.join(kind)}}} for attribute {name!r}; got {text!r}"
        return None
    try:
        float(text)
    except ValueError:
        return f"expected a number for attribute {name!r}; got {text!r}"
    return None


def _diagnose(row: str, attributes: list[tuple[str, object]]) -> str:
    """Why liac-arff refused a data row, naming the attribute: the row is split again with
    liac-arff's own tokenizer (``_parse_values``, ``_RE_SPARSE_KEY_VALUES``), so that quoting
    is read as it reads it."""
    n = len(attributes)
    row = row.strip()
    if row.startswith("{"):
        if not row.endswith("}"):
            return "expected a sparse row '{index value, ...}'"
        for key, value in liac_arff._RE_SPARSE_KEY_VALUES.findall(row):
            if not key:
                return f"expected 'index value' in a sparse row; got {row[1:-1].strip()!r}"
            if not 0 <= int(key) < n:
                return f"expected an attribute index in 0..{n - 1}; got {int(key)}"
            problem = _check_value(_unquote(value), *attributes[int(key)])
            if problem:
                return problem
        return f"expected a sparse row '{{index value, ...}}'; got {row!r}"
    try:
        values = liac_arff._parse_values(row)
    except liac_arff.ArffException:
        return f"expected comma-separated values (quote values with spaces); got {row!r}"
    if len(values) != n:
        return f"expected {n} comma-separated values; got {len(values)}"
    for value, (name, kind) in zip(values, attributes):
        problem = _check_value(value, name, kind)
        if problem:
            return problem
    return f"expected a valid data row; got {row!r}"


def read_arff(
    path: PathLike,
    labels: Union[PathLike, Seq[str], None] = None,
    label_location: Literal["xml", "end", "meka"] = "xml",
    num_labels: Optional[int] = None,
    missing_labels: bool = False,
    one_hot: bool = False,
    model_features: Seq[str] = (),
) -> MultiLabelData:
    """Read a (Mulan) ARFF file, dense or sparse, with liac-arff.

    Args:
        path: the ARFF file (``.gz`` transparently).
        labels: the label XML file, or the label attribute names; with ``None``,
            ``num_labels`` and ``label_location="end"`` say that the last ``num_labels``
            attributes are the labels.
        label_location: ``"xml"`` (labels named by ``labels``), ``"end"``, or ``"meka"``:
            MEKA's ``-C N`` in the ``@relation`` name (``@relation 'music: -C 6'``): the first
            ``N`` attributes are the labels, or the last ``-N`` for a negative ``N``.
        num_labels: the number of trailing label attributes (only with ``"end"``).
        missing_labels: unlabeled rows allowed: label values may be ``?``, and label attributes
            named by ``labels`` may be absent from the file; both are read as -1 in Y, whose
            columns then follow the order of ``labels`` (of every label it names). A file holds
            all the label attributes or none of them.
        one_hot: a nominal feature attribute (other than ``{0,1}``) becomes one 0/1 column per
            value, named ``attribute=value``, the values sorted (so that files listing them in
            another order read alike); without it, the 0-based position of its value in the
            header's list.
        model_features: with ``one_hot``, the feature names of a trained model: a nominal
            attribute the model has ``attribute=value`` columns for is read into those columns
            (in their order); a value the file declares in addition is one the model was not
            trained on, and a row holding it is all 0 in them (as an unknown word in a tagger),
            with one warning per attribute (file, attribute line, the values, the rows). A
            value of the model's that the file does not declare is an error.

    Returns:
        A :class:`MultiLabelData` with X (n, d) float64 and Y (n, K) int64 (-1: unknown, with
        ``missing_labels`` only).

    Raises:
        ValueError: a malformed header or row (file and 1-based line named), a label attribute
            missing from the file or not binary.

    Warns:
        UserWarning: with ``model_features``, rows holding nominal values the model lacks.
    """
    if label_location not in ("xml", "end", "meka"):
        raise ValueError(f"label_location must be 'xml', 'end' or 'meka'; got {label_location!r}")
    label_set: Optional[tuple[str, ...]] = None
    xml_name = ""
    if label_location == "xml":
        if labels is None:
            raise ValueError("labels must name the label XML file or the label names; got None")
        if isinstance(labels, (str, Path)):
            label_set = read_mulan_labels(labels)
            xml_name = f" (from {labels})"
        else:
            label_set = tuple(labels)
    elif label_location == "end" and (num_labels is None or num_labels < 1):
        raise ValueError(f"num_labels must be >= 1 with label_location='end'; got {num_labels}")

    lines = _Lines(path)
    try:
        arff = liac_arff.ArffDecoder().decode(lines, encode_nominal=True, return_type=liac_arff.DENSE_GEN)
    except liac_arff.ArffException as err:
        if lines.ended and not lines.saw_data:
            raise ValueError(f"{path}: expected an @data section; found none") from None
        reason = _HEADER_ERRORS.get(type(err).__name__, str(err))
        raise ValueError(f"{path}:{lines.number}: {reason}; got {lines.text.strip()!r}") from None
    attributes: list[tuple[str, object]] = [(str(a), t) for a, t in arff["attributes"]]
    names = [a for a, _ in attributes]
    for (name, kind), number in zip(attributes, lines.attribute_lines):
        if kind == "STRING":
            raise ValueError(
                f"{path}:{number}: expected a numeric or nominal attribute type; got 'string'"
            )
    rows: list[list[object]] = []
    row_lines: list[int] = []
    data_rows = iter(arff["data"])
    while True:
        try:
            values = next(data_rows)
        except StopIteration:
            break
        except liac_arff.ArffException:
            raise ValueError(f"{path}:{lines.number}: {_diagnose(lines.text, attributes)}") from None
        if lines.text.lstrip().startswith("{"):  # liac-arff keeps the last of repeated indices
            keys = [int(k) for k, _ in liac_arff._RE_SPARSE_KEY_VALUES.findall(lines.text) if k]
            if len(set(keys)) != len(keys):
                twice = next(k for i, k in enumerate(keys) if k in keys[:i])
                raise ValueError(
                    f"{path}:{lines.number}: expected each attribute index at most once in a "
                    f"sparse row; index {twice} ({names[twice]!r}) appears twice"
                )
        rows.append(values)
        row_lines.append(lines.number)

    if label_location == "meka":
        relation = str(arff["relation"])
        found = re.search(r"(?:^|\s|:)-C\s+(-?\d+)", relation)
        count = int(found.group(1)) if found else 0
        if not found or count == 0 or abs(count) >= len(names):
            raise ValueError(
                f"{path}: expected MEKA's label count '-C N' (N of the {len(names)} attributes, "
                f"the first N, or the last -N) in the @relation name; got {relation!r}; or give "
                "the labels with --data.labels N (labels=N: the last N attributes are the 0/1 "
                "labels) or their names (--data.labels '[a, b]')"
            )
        label_idx = list(range(count)) if count > 0 else list(range(len(names) + count, len(names)))
    elif label_location == "end":
        assert num_labels is not None
        if num_labels >= len(names):
            raise ValueError(
                f"{path}: {num_labels} trailing label attributes asked for (labels=, "
                f"--data.labels); the file has {len(names)} attributes, features included"
            )
        label_idx = list(range(len(names) - num_labels, len(names)))
    else:
        assert label_set is not None
        missing = [n for n in label_set if n not in names]
        wanted = set(label_set)
        if missing and (not missing_labels or len(missing) < len(label_set)):
            others = [n for n in names if n not in wanted]
            guesses = [(n, _close_match(n, others)) for n in missing]
            guesses = [(n, g) for n, g in guesses if g]
            if len(missing) == 1 and guesses:
                guess = f" (did you mean {guesses[0][1]!r}?)"
            else:
                guess = (f" (did you mean {', '.join(f'{g!r} for {n!r}' for n, g in guesses)}?)"
                         if guesses else "")
            found = [n for n in label_set if n in names]
            has = (f"; of the labels given, the file has {', '.join(repr(n) for n in found)}"
                   if found else "")
            if found and missing_labels:
                has += ", and a file holds all the label attributes or none"
            shown = _shorten(names, 6, 6)
            raise ValueError(
                f"{path}: expected the label attribute{'s' if len(missing) > 1 else ''} "
                f"{', '.join(repr(n) for n in missing)}{xml_name} among the file's attributes; not "
                f"found{guess}{has}; the file's attributes: {shown}"
                f"{f' ({len(names)} in all)' if len(shown) < len(names) else ''}"
            )
        label_idx = [i for i, n in enumerate(names) if n in wanted]

    data = np.array(rows, dtype=np.float64).reshape(len(rows), len(names))  # None -> nan
    bad_value = ~np.isfinite(data)
    if missing_labels:  # '?' labels are unknown, not errors
        bad_value[:, label_idx] = False
    if bad_value.any():
        r, c = (int(i) for i in np.argwhere(bad_value)[0])
        problem = _check_value(None, names[c], attributes[c][1]) if rows[r][c] is None else (
            f"expected a finite number for attribute {names[c]!r}; got {str(rows[r][c])!r}"
        )
        if missing_labels and rows[r][c] is None:  # '?' in a feature: are the labels right?
            read = [names[i] for i in label_idx]
            shown = _shorten(read)
            problem += (f"; {names[c]!r} is read as a feature, and only label attributes may be "
                        f"'?' (the labels read: {shown}; if {names[c]!r} is a label, name the "
                        f"labels again: labels=, --data.labels)")
        raise ValueError(f"{path}:{row_lines[r]}: {problem}")
    for c, (_, kind) in enumerate(attributes):  # {0,1} is read by value, other nominals by index
        if isinstance(kind, list) and sorted(kind) == ["0", "1"]:
            known = np.isfinite(data[:, c])  # '?' (nan) stays unknown
            data[known, c] = np.array([float(v) for v in kind])[data[known, c].astype(np.int64)]

    feature_idx = [i for i in range(len(names)) if i not in set(label_idx)]
    Y = data[:, label_idx]
    meka = re.search(r"(?:^|\s|:)-C\s+(-?\d+)", str(arff["relation"]))
    hint = (f"; the @relation line declares MEKA's '-C {meka.group(1)}': leave the labels out "
            "to read the labels it names" if meka and label_location != "meka" else "")

    def why_label(name: str) -> str:
        """Why ``name`` is read as a label (the labels option), for a value that is not 0/1."""
        read = _shorten([names[i] for i in label_idx])
        if label_location == "end":
            because = (f"labels={num_labels} reads the last {_plural(len(label_idx), 'attribute')} "
                       f"as labels: {read}; if {name!r} is a feature, give the number of label "
                       "attributes (--data.labels N) or their names")
        elif label_location == "meka":
            because = (f"the @relation name's '-C {count}' reads the "
                       f"{'first' if count > 0 else 'last'} {_plural(abs(count), 'attribute')} as "
                       f"labels: {read}; if {name!r} is a feature, give the labels with "
                       "--data.labels N (the last N attributes) or their names")
        else:
            given = f"the label XML file {labels}" if xml_name else f"labels={_shorten(label_set or ())}"
            because = f"{given} names it; if {name!r} is a feature, leave it out of the labels"
        return f" ({name!r} is read as a label because {because}{hint})"

    for j, i in enumerate(label_idx):
        kind = attributes[i][1]
        if isinstance(kind, list) and sorted(kind) != ["0", "1"]:
            raise ValueError(
                f"{path}:{lines.attribute_lines[i]}: expected label attribute {names[i]!r} to be "
                f"{{0,1}}; got {{{','.join(kind)}}}{why_label(names[i])}"
            )
        bad = ~(np.isin(Y[:, j], (0.0, 1.0)) | (np.isnan(Y[:, j]) if missing_labels else False))
        if bad.any():
            k = int(bad.argmax())
            raise ValueError(
                f"{path}:{row_lines[k]}: expected 0 or 1 for label {names[i]!r}; got {Y[k, j]:g}"
                f"{why_label(names[i])}"
            )
    Y = np.where(np.isnan(Y), -1.0, Y)  # '?' labels (missing_labels): unknown
    label_names = tuple(names[i] for i in label_idx)
    if missing_labels and label_set is not None:  # every named label, absent ones unknown
        Y = np.stack([Y[:, label_names.index(n)] if n in label_names else np.full(len(rows), -1.0)
                      for n in label_set], axis=1) if label_set else Y
        label_names = tuple(label_set)
    columns, feature_names, expanded = [], [], []
    for i in feature_idx:
        kind = attributes[i][1]
        if one_hot and isinstance(kind, list) and sorted(kind) != ["0", "1"]:
            expanded.append(names[i])
            values = sorted(kind)
            if model_features:
                values = _model_values(path, lines.attribute_lines[i], names[i], kind, data[:, i],
                                       row_lines, model_features, set(names)) or values
            for value in values:  # data holds the value's position in the header's list
                if value not in kind:  # a model's value the file does not declare: no row has it
                    columns.append(np.zeros(len(rows)))
                else:
                    columns.append((data[:, i] == kind.index(value)).astype(np.float64))
                feature_names.append(f"{names[i]}={value}")
        else:
            columns.append(data[:, i])
            feature_names.append(names[i])
    return MultiLabelData(
        X=np.ascontiguousarray(np.stack(columns, 1) if columns else np.zeros((len(rows), 0))),
        Y=Y.astype(np.int64),
        feature_names=tuple(feature_names),
        label_names=label_names,
        relation=str(arff["relation"]),
        lines=tuple(row_lines),
        one_hot=tuple(expanded),
    )


def _model_values(
    path: PathLike,
    line: int,
    name: str,
    kind: list[str],
    column: np.ndarray,
    row_lines: Seq[int],
    model_features: Seq[str],
    attribute_names: set[str],
) -> list[str]:
    """The values of nominal attribute ``name`` a model has ``name=value`` columns for, in the
    model's order ([] if none: the file's own values are read); a row holding a value the model
    lacks is read as none of them, with a warning; a value of the model's the file does not
    declare is held by no row (its column all 0). ``column`` holds each row's position of its
    value in ``kind``."""
    prefix = f"{name}="
    trained = [f[len(prefix):] for f in model_features
               if f.startswith(prefix) and f not in attribute_names]
    if not trained:
        return []
    unknown = [v for v in kind if v not in trained]
    held = np.isin(column, [float(kind.index(v)) for v in unknown])
    if held.any():
        n = int(held.sum())
        warnings.warn(
            f"{path}:{line}: attribute {name!r} declares the value{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(repr(v) for v in _shorten(unknown))} which the model was not trained "
            f"on (the model's values: {', '.join(_shorten(trained, 6, 6))}); {_plural(n, 'row')} holding "
            f"{'them' if len(unknown) > 1 else 'it'} (the first at line "
            f"{row_lines[int(held.argmax())]}) {'is' if n == 1 else 'are'} read as none of the "
            f"model's values (all 0 in the {prefix}... columns, as an unknown word)",
            UserWarning,
            stacklevel=4,
        )
    return trained


def check_same_features(path: PathLike, names: Seq[str], expected: Seq[str], what: str) -> None:
    """A file's feature attributes must be ``expected``, in order.

    Raises:
        ValueError: naming ``path``, ``what`` the expected ones are (e.g. "the model's") and
            the first attribute that differs, or the counts.
    """
    names, expected = tuple(names), tuple(expected)
    if names == expected:
        return
    i = next((i for i, (a, b) in enumerate(zip(names, expected)) if a != b), min(len(names), len(expected)))
    if i < min(len(names), len(expected)):
        got = f"feature attribute {i + 1} is {names[i]!r}, {what} is {expected[i]!r}"
    elif len(names) > len(expected):
        got = f"the file has {len(names)} feature attributes, {what} {len(expected)}: {names[i]!r} is extra"
    else:
        got = f"the file has {len(names)} feature attributes, {what} {len(expected)}: {expected[i]!r} is missing"
    raise ValueError(f"{path}: expected {what} {len(expected)} feature attributes, in order; {got}")


def load_mulan(
    name: Literal["scene", "yeast", "emotions"],
    split: Literal["train", "test"] = "train",
    data_dir: Optional[PathLike] = None,
) -> MultiLabelData:
    """Load a Mulan data set split from ``<data_dir>/mulan_<name>/<name>-<split>.arff.gz``.

    Args:
        name: ``scene``, ``yeast`` or ``emotions``.
        split: ``train`` or ``test``.
        data_dir: the data directory (see :func:`~structssl.data.paths.resolve_data_dir`).

    Returns:
        A :class:`MultiLabelData` (labels identified by ``<name>.xml``).
    """
    if name not in MULAN_DATASETS:
        raise ValueError(f"name must be one of {sorted(MULAN_DATASETS)}; got {name!r}")
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test'; got {split!r}")
    folder = MULAN_DATASETS[name][0]
    xml = data_file(Path(folder) / f"{name}.xml", f"the Mulan label XML of {name}", data_dir)
    arff = data_file(
        Path(folder) / f"{name}-{split}.arff.gz",
        f"the Mulan ARFF file of the {name} {split} split (gzip-compressed)",
        data_dir,
    )
    return read_arff(arff, labels=xml)
