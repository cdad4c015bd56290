"""Mulan ARFF files (dense and sparse) and the label XML, on fixtures written here."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from structssl.data.formats.arff import load_mulan, read_arff, read_mulan_labels

XML = """<?xml version="1.0" encoding="utf-8"?>
<labels xmlns="http://mulan.sourceforge.net/labels">
<label name="B"></label>
<label name="A"></label>
</labels>
"""

DENSE = """% a comment
@relation 'Toy data'

@attribute f1 numeric
@attribute 'f 2' REAL
@attribute colour {red,green,blue}
@attribute A {0,1}
@attribute B {1,0}

@data
0.5,1e-3,green,1,0
-2,3,'blue',0,1
"""

SPARSE = """@relation sparse
@attribute w0 numeric
@attribute w1 numeric
@attribute w2 numeric
@attribute A {0,1}
@attribute B {0,1}
@data
{0 1.5,3 1}
{}
{1 2, 2 -1, 4 1}
"""


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_read_mulan_labels(tmp_path: Path) -> None:
    assert read_mulan_labels(_write(tmp_path / "t.xml", XML)) == ("B", "A")
    nested = '<labels xmlns="x"><label name="top"><label name="sub"/></label></labels>'
    assert read_mulan_labels(_write(tmp_path / "n.xml", nested)) == ("top", "sub")


def test_read_arff_dense(tmp_path: Path) -> None:
    xml = _write(tmp_path / "t.xml", XML)
    data = read_arff(_write(tmp_path / "t.arff", DENSE), labels=xml)
    assert data.relation == "Toy data"
    assert data.feature_names == ("f1", "f 2", "colour")
    assert data.label_names == ("A", "B")  # ARFF attribute order
    np.testing.assert_array_equal(data.X, [[0.5, 1e-3, 1.0], [-2.0, 3.0, 2.0]])
    np.testing.assert_array_equal(data.Y, [[1, 0], [0, 1]])  # {1,0} read by value
    assert data.X.dtype == np.float64 and data.Y.dtype == np.int64 and len(data) == 2
    X, Y = data.tensors(torch.float64)
    assert X.shape == (2, 3) and Y.dtype == torch.long


def test_read_arff_sparse_and_gz(tmp_path: Path) -> None:
    path = tmp_path / "s.arff.gz"
    path.write_bytes(gzip.compress(SPARSE.encode()))
    data = read_arff(path, labels=("A", "B"))
    np.testing.assert_array_equal(data.X, [[1.5, 0, 0], [0, 0, 0], [0, 2, -1]])
    np.testing.assert_array_equal(data.Y, [[1, 0], [0, 0], [0, 1]])
    same = read_arff(path, label_location="end", num_labels=2)
    np.testing.assert_array_equal(same.Y, data.Y)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("1,2,red,1", "expected 5 comma-separated values; got 4"),
        ("1,x,red,1,0", "expected a number for attribute 'f 2'; got 'x'"),
        ("1,2,pink,1,0", "expected one of {red,green,blue} for attribute 'colour'; got 'pink'"),
        ("1,?,red,1,0", "missing value '?' for attribute 'f 2' (not supported)"),
        ("1,2,red,2,0", "expected one of {0,1} for attribute 'A'; got '2'"),
        ("{7 1}", "expected an attribute index in 0..4; got 7"),
        ("{1}", "expected 'index value' in a sparse row; got '1'"),
    ],
)
def test_read_arff_malformed_rows(tmp_path: Path, row: str, message: str) -> None:
    path = _write(tmp_path / "bad.arff", DENSE + row + "\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}:13: {message}")):
        read_arff(path, labels=("A", "B"))


def test_read_arff_header_and_label_errors(tmp_path: Path) -> None:
    path = _write(tmp_path / "h.arff", "@relation r\n@attribute s string\n@data\n")
    with pytest.raises(
        ValueError,
        match=re.escape(f"{path}:2: expected a numeric or nominal attribute type; got 'string'"),
    ):
        read_arff(path, labels=("s",))
    path = _write(tmp_path / "h2.arff", "@relation r\nhello\n")
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"{path}:2: expected @relation, @attribute or @data in the header; got 'hello'"
        ),
    ):
        read_arff(path, labels=("s",))
    path = _write(tmp_path / "h3.arff", "@relation r\n@attribute a numeric\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}: expected an @data section")):
        read_arff(path, labels=("a",))
    xml = _write(tmp_path / "t.xml", XML.replace('name="A"', 'name="C"'))
    dense = _write(tmp_path / "t.arff", DENSE)
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"{dense}: expected the label attribute 'C' (from {xml}) among the file's attributes; "
            "not found; of the labels given, the file has 'B'; the file's attributes: ['f1', "
            "'f 2', 'colour', 'A', 'B']"
        ),
    ):
        read_arff(dense, labels=xml)
    numeric_label = _write(
        tmp_path / "n.arff",
        "@relation r\n@attribute x numeric\n@attribute A numeric\n@data\n1,0\n2,3\n",
    )
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"{numeric_label}:6: expected 0 or 1 for label 'A'; got 3 ('A' is read as a label "
            "because labels=['A'] names it; if 'A' is a feature, leave it out of the labels)"
        ),
    ):
        read_arff(numeric_label, labels=("A",))
    nominal_label = _write(
        tmp_path / "m.arff", "@relation r\n@attribute x numeric\n@attribute A {a,b}\n@data\n1,a\n"
    )
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"{nominal_label}:3: expected label attribute 'A' to be {{0,1}}; got {{a,b}}"
        ),
    ):
        read_arff(nominal_label, labels=("A",))
    with pytest.raises(ValueError, match="labels must name the label XML file"):
        read_arff(dense)


def test_read_mulan_labels_errors(tmp_path: Path) -> None:
    bad = _write(tmp_path / "bad.xml", "<labels>\n<label name='a'>\n</labels>")
    with pytest.raises(
        ValueError, match=re.escape(f"{bad}:3: expected well-formed Mulan label XML")
    ):
        read_mulan_labels(bad)
    empty = _write(tmp_path / "empty.xml", "<labels></labels>")
    with pytest.raises(ValueError, match="expected at least one <label name=...> element"):
        read_mulan_labels(empty)


def test_load_mulan(tmp_path: Path) -> None:
    with pytest.raises(
        FileNotFoundError,
        match=re.escape(
            f"{tmp_path / 'mulan_scene' / 'scene.xml'}: expected the Mulan label XML of scene"
        ),
    ):
        load_mulan("scene", "train", data_dir=tmp_path)
    folder = tmp_path / "mulan_emotions"
    folder.mkdir()
    _write(folder / "emotions.xml", XML)
    (folder / "emotions-test.arff.gz").write_bytes(gzip.compress(DENSE.encode()))
    assert load_mulan("emotions", "test", data_dir=tmp_path).Y.shape == (2, 2)
    with pytest.raises(ValueError, match="name must be one of"):
        load_mulan("rcv1", data_dir=tmp_path)  # type: ignore[arg-type]


def test_read_arff_header_errors_from_the_parser(tmp_path: Path) -> None:
    """liac-arff's header errors come back with file, line and the line's text."""
    date = _write(tmp_path / "d.arff", "@relation r\n@attribute when date\n@data\n")
    message = f"{date}:2: expected a numeric or nominal attribute type"
    with pytest.raises(ValueError, match=re.escape(message)):
        read_arff(date, labels=("when",))
    twice = _write(tmp_path / "t.arff", "@relation r\n@attribute a numeric\n@attribute a numeric\n@data\n")
    with pytest.raises(ValueError, match=re.escape(f"{twice}:3: expected distinct attribute names")):
        read_arff(twice, labels=("a",))
    early = _write(tmp_path / "e.arff", "@relation r\n@data\n1\n")
    with pytest.raises(ValueError, match=re.escape(f"{early}:2: expected @attribute lines before @data")):
        read_arff(early, labels=("a",))


def test_read_arff_sparse_values_checked(tmp_path: Path) -> None:
    """Sparse rows: quoted values, missing and unknown nominal values, omitted nominal values
    (the first declared value, as in Weka)."""
    head = "@relation r\n@attribute w numeric\n@attribute c {x,'y z'}\n@attribute A {1,0}\n@data\n"
    ok = _write(tmp_path / "ok.arff", head + "{0 2, 1 'y z', 2 0}\n{}\n")
    data = read_arff(ok, labels=("A",))
    np.testing.assert_array_equal(data.X, [[2.0, 1.0], [0.0, 0.0]])
    np.testing.assert_array_equal(data.Y, [[0], [1]])  # omitted {1,0} value: its first value, 1
    missing = _write(tmp_path / "m.arff", head + "{0 ?}\n")
    with pytest.raises(ValueError, match=re.escape(f"{missing}:6: missing value '?' for attribute 'w'")):
        read_arff(missing, labels=("A",))
    unknown = _write(tmp_path / "u.arff", head + "{1 q}\n")
    message = f"{unknown}:6: expected one of {{x,y z}} for attribute 'c'; got 'q'"
    with pytest.raises(ValueError, match=re.escape(message)):
        read_arff(unknown, labels=("A",))


def test_mulan_module_reads_your_own_arff_file(tmp_path: Path) -> None:
    """MulanDataModule(arff_file=..., labels=...): a user's Mulan / MEKA-style file in place of
    the benchmark sets (their label count came from the set's name, and no path was taken)."""
    pytest.importorskip("pytorch_lightning")
    from structssl.data import MulanDataModule

    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 4)).round(3)
    y = np.stack([x[:, 0] > 0, x[:, 1] + x[:, 2] > 0, x[:, 3] > 1], 1).astype(int)
    header = ["@relation 'mine'"] + [f"@attribute f{i} numeric" for i in range(4)] + [
        f"@attribute {name} {{0,1}}" for name in ("sports", "news", "rare")] + ["@data"]
    rows = [",".join([*map(str, xi), *map(str, yi)]) for xi, yi in zip(x, y)]
    path = tmp_path / "mine.arff"
    path.write_text("\n".join(header + rows) + "\n")
    for labels in (3, ["sports", "news", "rare"]):
        dm = MulanDataModule(arff_file=str(path), labels=labels, labeled_fraction=0.2)
        dm.setup()
        assert dm.num_labels == 3 and dm.model_sizes() == {"num_labels": 3, "input_dim": 4}
        splits = dm.splits
        assert len(splits["labeled"]) + len(splits["unlabeled"]) == 42 and len(splits["test"]) == 18
        assert splits["labeled"][0]["labels"].shape == (3,)
    with pytest.raises(ValueError, match=r"arff_file='x.arff' needs labels="):
        MulanDataModule(arff_file="x.arff")
    with pytest.raises(ValueError, match=r"name must be one of .* \(or give your own file: arff_file="):
        MulanDataModule(name="mine")
