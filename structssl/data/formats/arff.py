"""Mulan multi-label ARFF files (dense and sparse) with their label XML.

A Mulan data set is a Weka ARFF file plus an XML file naming the label attributes::

    <labels xmlns="http://mulan.sourceforge.net/labels">
      <label name="Beach"></label> ...
    </labels>

The label attributes are binary (nominal ``{0,1}`` or numeric 0/1); every other attribute is a
feature (``numeric`` / ``real`` / ``integer``, or nominal, encoded as the 0-based index of its
value; a ``{0,1}`` attribute is read by value whatever the order of its values). Data rows
are dense (``v1,v2,...``) or sparse (``{index value, ...}``, 0-based attribute indices,
omitted values 0, as in Weka). Label columns of ``Y`` follow the order of
the attributes in the ARFF file (as Mulan's label indices do), and ``label_names`` gives that
order; the XML decides only *which* attributes are labels (nested ``<label>`` elements of
hierarchical Mulan files included).

Not supported (``ValueError`` naming file and line): missing values ``?``, ``string``,
``date`` and ``relational`` attributes, instance weights ``{...}`` after a row.

References: Tsoumakas et al. (2011), MULAN: a Java library for multi-label learning; the
ARFF format of Weka (Witten et al.).
"""

from __future__ import annotations

import math

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional, Union
from typing import Sequence as Seq

import numpy as np
import torch
from torch import Tensor

from structssl.data.paths import PathLike, data_file, iter_lines, open_binary

__all__ = [
    "MultiLabelData",
    "MULAN_DATASETS",
    "read_mulan_labels",
    "read_arff",
    "load_mulan",
]

#: Mulan data sets in the shared data: name -> (folder, number of labels).
MULAN_DATASETS = {
    "scene": ("mulan_scene", 6),
    "yeast": ("mulan_yeast", 14),
    "emotions": ("mulan_emotions", 6),
}

_NUMERIC = ("numeric", "real", "integer")


@dataclass(frozen=True)
class MultiLabelData:
    """Features and binary labels of a multi-label data set.

    Attributes:
        X: (n, d) float64 features.
        Y: (n, K) int64 labels in {0, 1}.
        feature_names: the d feature attribute names.
        label_names: the K label attribute names, in column order.
        relation: the ARFF ``@relation`` name.
    """

    X: np.ndarray
    Y: np.ndarray
    feature_names: tuple[str, ...]
    label_names: tuple[str, ...]
    relation: str = ""

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


def _unquote(token: str) -> str:
    if len(token) >= 2 and token[0] == token[-1] and token[0] in "'\"":
        return token[1:-1].replace("\\" + token[0], token[0])
    return token


def _split_name(rest: str) -> tuple[str, str]:
    """Split ``name type`` where the name may be quoted."""
    rest = rest.strip()
    if rest and rest[0] in "'\"":
        q = rest[0]
        i = 1
        while i < len(rest):
            if rest[i] == "\\":
                i += 2
                continue
            if rest[i] == q:
                break
            i += 1
        if i >= len(rest):
            raise ValueError("unterminated quoted name")
        return rest[1:i].replace("\\" + q, q), rest[i + 1 :].strip()
    parts = rest.split(None, 1)
    if len(parts) != 2:
        raise ValueError("expected '@attribute <name> <type>'")
    return parts[0], parts[1].strip()


def _split_values(text: str) -> list[str]:
    """Comma-separated values with optional quotes (quotes removed)."""
    if "'" not in text and '"' not in text:
        return [v.strip() for v in text.split(",")]
    out, cur, quote = [], [], ""
    for ch in text:
        if quote:
            if ch == quote:
                quote = ""
            else:
                cur.append(ch)
        elif ch in "'\"":
            quote = ch
        elif ch == ",":
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if quote:
        raise ValueError("unterminated quote")
    out.append("".join(cur).strip())
    return out


def read_arff(
    path: PathLike,
    labels: Union[PathLike, Seq[str], None] = None,
    label_location: Literal["xml", "end"] = "xml",
    num_labels: Optional[int] = None,
) -> MultiLabelData:
    """Read a (Mulan) ARFF file, dense or sparse.

    Args:
        path: the ARFF file (``.gz`` transparently).
        labels: the label XML file, or the label attribute names; with ``None``,
            ``num_labels`` and ``label_location="end"`` say that the last ``num_labels``
            attributes are the labels.
        label_location: ``"xml"`` (labels named by ``labels``) or ``"end"``.
        num_labels: the number of trailing label attributes (only with ``"end"``).

    Returns:
        A :class:`MultiLabelData` with X (n, d) float64 and Y (n, K) int64.

    Raises:
        ValueError: a malformed header or row (file and 1-based line named), a label attribute
            missing from the file or not binary.
    """
    if label_location not in ("xml", "end"):
        raise ValueError(f"label_location must be 'xml' or 'end'; got {label_location!r}")
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
    elif num_labels is None or num_labels < 1:
        raise ValueError(f"num_labels must be >= 1 with label_location='end'; got {num_labels}")

    relation = ""
    names: list[str] = []
    kinds: list[Optional[tuple[str, ...]]] = []  # None = numeric, else nominal values
    rows: list[np.ndarray] = []
    row_lines: list[int] = []
    in_data = False
    num_attr = 0
    for number, line in iter_lines(path):
        text = line.strip()
        if not text or text.startswith("%"):
            continue
        where = f"{path}:{number}"
        if not in_data:
            low = text.lower()
            if low.startswith("@relation"):
                relation = _unquote(text[len("@relation") :].strip())
            elif low.startswith("@attribute"):
                try:
                    name, kind = _split_name(text[len("@attribute") :])
                except ValueError as err:
                    raise ValueError(f"{where}: {err}; got {text!r}") from None
                if kind.startswith("{"):
                    if not kind.endswith("}"):
                        raise ValueError(
                            f"{where}: expected a nominal type {{a,b,...}}; got {kind!r}"
                        )
                    kinds.append(tuple(_split_values(kind[1:-1])))
                elif kind.lower() in _NUMERIC:
                    kinds.append(None)
                else:
                    raise ValueError(
                        f"{where}: expected a numeric or nominal attribute type; got {kind!r} "
                        "(string, date and relational attributes are not supported)"
                    )
                names.append(name)
            elif low.startswith("@data"):
                if not names:
                    raise ValueError(f"{where}: expected @attribute lines before @data")
                in_data = True
                num_attr = len(names)
                lookup = [_nominal_lookup(k) for k in kinds]
            else:
                raise ValueError(
                    f"{where}: expected @relation, @attribute or @data in the header; got {text!r}"
                )
            continue
        row = np.zeros(num_attr)
        try:
            if text.startswith("{"):
                if not text.endswith("}"):
                    raise ValueError("expected a sparse row '{index value, ...}'")
                body = text[1:-1].strip()
                seen: set[int] = set()
                for entry in _split_values(body) if body else []:
                    parts = entry.split(None, 1)
                    if len(parts) != 2:
                        raise ValueError(f"expected 'index value' in a sparse row; got {entry!r}")
                    try:
                        idx = int(parts[0])
                    except ValueError:
                        raise ValueError(
                            f"expected an integer attribute index in a sparse row; got {parts[0]!r}"
                        ) from None
                    if not 0 <= idx < num_attr:
                        raise ValueError(
                            f"expected an attribute index in 0..{num_attr - 1}; got {idx}"
                        )
                    if idx in seen:
                        raise ValueError(
                            f"expected each attribute index at most once in a sparse row; index "
                            f"{idx} ({names[idx]!r}) appears twice"
                        )
                    seen.add(idx)
                    row[idx] = _value(parts[1].strip(), lookup[idx], names[idx])
            else:
                values = _split_values(text)
                if len(values) != num_attr:
                    raise ValueError(
                        f"expected {num_attr} comma-separated values; got {len(values)}"
                    )
                if all(k is None for k in lookup):
                    row = np.array([_number(v, names[i]) for i, v in enumerate(values)])
                else:
                    row = np.array([_value(v, lookup[i], names[i]) for i, v in enumerate(values)])
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
        rows.append(row)
        row_lines.append(number)
    if not in_data:
        raise ValueError(f"{path}: expected an @data section; found none")

    if label_location == "end":
        assert num_labels is not None
        if num_labels >= len(names):
            raise ValueError(
                f"num_labels must be < the {len(names)} attributes of {path}; got {num_labels}"
            )
        label_idx = list(range(len(names) - num_labels, len(names)))
    else:
        assert label_set is not None
        missing = [n for n in label_set if n not in names]
        if missing:
            raise ValueError(f"{path}: expected label attributes {missing}{xml_name}; not found")
        wanted = set(label_set)
        label_idx = [i for i, n in enumerate(names) if n in wanted]
    feature_idx = [i for i in range(len(names)) if i not in set(label_idx)]
    data = np.stack(rows) if rows else np.zeros((0, len(names)))
    Y = data[:, label_idx]
    for j, i in enumerate(label_idx):
        if kinds[i] is not None and set(kinds[i] or ()) != {"0", "1"}:
            raise ValueError(
                f"{path}: expected label attribute {names[i]!r} to be {{0,1}}; "
                f"got {{{','.join(kinds[i] or ())}}}"
            )
        bad = ~np.isin(Y[:, j], (0.0, 1.0))
        if bad.any():
            k = int(bad.argmax())
            raise ValueError(
                f"{path}:{row_lines[k]}: expected 0 or 1 for label {names[i]!r}; got {Y[k, j]:g}"
            )
    return MultiLabelData(
        X=np.ascontiguousarray(data[:, feature_idx], dtype=np.float64),
        Y=Y.astype(np.int64),
        feature_names=tuple(names[i] for i in feature_idx),
        label_names=tuple(names[i] for i in label_idx),
        relation=relation,
    )


def _nominal_lookup(values: Optional[tuple[str, ...]]) -> Optional[dict[str, float]]:
    """Value -> number of a nominal attribute: its 0-based index, except ``{0,1}`` by value."""
    if values is None:
        return None
    if set(values) == {"0", "1"} and len(values) == 2:
        return {"0": 0.0, "1": 1.0}
    return {v: float(i) for i, v in enumerate(values)}


def _number(text: str, name: str) -> float:
    if text == "?":
        raise ValueError(f"missing value '?' for attribute {name!r} (not supported)")
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a number for attribute {name!r}; got {text!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"expected a finite number for attribute {name!r}; got {text!r}")
    return value


def _value(text: str, lookup: Optional[dict[str, float]], name: str) -> float:
    if lookup is None:
        return _number(text, name)
    if text == "?":
        raise ValueError(f"missing value '?' for attribute {name!r} (not supported)")
    try:
        return lookup[text]
    except KeyError:
        raise ValueError(
            f"expected one of {{{','.join(lookup)}}} for attribute {name!r}; got {text!r}"
        ) from None


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
