"""Taskar's OCR letter.data and the SSL-book .mat files, on fixtures written here."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import torch

from structssl.data.batch import collate_sequences
from structssl.data.formats.coil import load_coil, read_coil
from structssl.data.formats.ocr import load_ocr, ocr_fold_split, read_ocr


def _letter_line(i: int, letter: str, nxt: int, word: int, pos: int, fold: int, seed: int) -> str:
    pixels = np.random.default_rng(seed).integers(0, 2, 128)
    return "\t".join([str(i), letter, str(nxt), str(word), str(pos), str(fold), *map(str, pixels)])


def _ocr_lines() -> list[str]:
    # word 1 "ab" (fold 0), word 2 "cat" (fold 1), word 3 "z" (fold 1); word 2's letters out of order
    return [
        _letter_line(1, "a", 2, 1, 1, 0, 1),
        _letter_line(2, "b", -1, 1, 2, 0, 2),
        _letter_line(3, "c", 5, 2, 1, 1, 3),
        _letter_line(4, "t", -1, 2, 3, 1, 4),
        _letter_line(5, "a", 4, 2, 2, 1, 5),
        _letter_line(6, "z", -1, 3, 1, 1, 6),
    ]


def test_read_ocr_groups_words(tmp_path: Path) -> None:
    path = tmp_path / "letter.data.gz"
    path.write_bytes(gzip.compress(("\n".join(_ocr_lines()) + "\n").encode()))
    data = read_ocr(path)
    assert data.words == ["ab", "cat", "z"] and data.num_letters == 6 and len(data) == 3
    assert data.folds.tolist() == [0, 1, 1] and data.word_ids.tolist() == [1, 2, 3]
    expected_t = np.random.default_rng(4).integers(0, 2, 128)
    np.testing.assert_array_equal(data.pixels[1][2], expected_t)
    assert data.pixels[1].dtype == np.uint8 and data.labels[1].tolist() == [2, 0, 19]
    train, test = ocr_fold_split(data.folds, 0)
    assert train.tolist() == [0] and test.tolist() == [1, 2]
    train, test = ocr_fold_split(data.folds, 0, protocol="test_on_fold")
    assert train.tolist() == [1, 2] and test.tolist() == [0]
    batch = collate_sequences(data.examples([1, 2], dtype=torch.float64))
    assert batch["inputs"].shape == (2, 3, 128) and batch["lengths"].tolist() == [3, 1]
    assert batch["labels"].tolist() == [[2, 0, 19], [25, 0, 0]]
    with pytest.raises(ValueError, match=re.escape("fold must be one of [0, 1]; got 5")):
        ocr_fold_split(data.folds, 5)


@pytest.mark.parametrize(
    ("line_index", "replacement", "message"),
    [
        (1, "2\tb\t-1\t1\t2\t0", "expected 134 TAB-separated fields; got 6"),
        (1, _letter_line(2, "B", -1, 1, 2, 0, 2), "expected a letter a-z; got 'B'"),
        (
            1,
            _letter_line(2, "b", -1, 1, 2, 0, 2).replace("\t0", "\t2", 3),
            "expected 128 pixels 0 or 1",
        ),
        (
            1,
            "\t".join(f if k != 10 else "x" for k, f in enumerate(_letter_line(2, "b", -1, 1, 2, 0, 2).split("\t"))),
            "expected 128 pixels 0 or 1 separated by TABs; pixel 5 reads 'x\\t'",
        ),
        (
            1,
            _letter_line(2, "b", -1, 1, 2, 0, 2) + "\t1",
            "expected 134 TAB-separated fields with 128 pixels 0 or 1; got 135 fields",
        ),
        (
            1,
            _letter_line(2, "b", 9, 1, 2, 0, 2),
            "expected next_id -1 or the id of a letter; got 9",
        ),
        (
            1,
            _letter_line(2, "b", -1, 1, 3, 0, 2),
            "expected word_id 1, fold 0 and position 2 along the word starting on line 1; got word_id 1, fold 0, position 3",
        ),
        (1, _letter_line(2, "b", -1, 7, 2, 0, 2), "expected word_id 1, fold 0 and position 2"),
        (
            1,
            _letter_line(2, "b", -1, 1, 2, 0, 2).replace("2", "x", 1),
            "expected integers in the id, next_id",
        ),
    ],
)
def test_read_ocr_malformed(
    tmp_path: Path, line_index: int, replacement: str, message: str
) -> None:
    lines = _ocr_lines()
    lines[line_index] = replacement
    path = tmp_path / "letter.data"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}:{line_index + 1}: {message}")):
        read_ocr(path)


def test_load_ocr_missing(tmp_path: Path) -> None:
    with pytest.raises(
        FileNotFoundError, match=re.escape("letter.data.gz: expected Taskar's OCR letter.data")
    ):
        load_ocr(tmp_path)


def _write_coil(folder: Path, num_labeled: int = 2, n: int = 6) -> None:
    rng = np.random.default_rng(0)
    scipy.io.savemat(
        folder / "coil_data.mat",
        {"X": rng.normal(size=(n, 3)), "y": np.arange(n).reshape(n, 1) % 3},
    )
    lab, unl = [], []
    for _ in range(3):
        perm = rng.permutation(n) + 1
        lab.append(perm[:num_labeled])
        unl.append(perm[num_labeled:])
    scipy.io.savemat(
        folder / f"coil_splits_labeled{num_labeled}.mat",
        {"idxLabs": np.array(lab, dtype=np.uint16), "idxUnls": np.array(unl, dtype=np.uint16)},
    )


def test_read_coil(tmp_path: Path) -> None:
    _write_coil(tmp_path)
    data = read_coil(tmp_path / "coil_data.mat", tmp_path / "coil_splits_labeled2.mat")
    assert data.X.shape == (6, 3) and data.y.tolist() == [0, 1, 2, 0, 1, 2]
    assert data.num_splits == 3 and data.labeled.shape == (3, 2) and data.unlabeled.shape == (3, 4)
    for k in range(3):  # 0-based partition
        assert sorted(data.labeled[k].tolist() + data.unlabeled[k].tolist()) == list(range(6))


def test_read_coil_errors(tmp_path: Path) -> None:
    _write_coil(tmp_path)
    scipy.io.savemat(
        tmp_path / "bad_split.mat",
        {"idxLabs": np.array([[1, 1]]), "idxUnls": np.array([[2, 3, 4, 5]])},
    )
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"{tmp_path / 'bad_split.mat'}: expected split 0 to partition the 1-based indices 1..6"
        ),
    ):
        read_coil(tmp_path / "coil_data.mat", tmp_path / "bad_split.mat")
    scipy.io.savemat(tmp_path / "no_y.mat", {"X": np.zeros((2, 2))})
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"{tmp_path / 'no_y.mat'}: expected variables ['X', 'y']; missing ['y'] (has ['X'])"
        ),
    ):
        read_coil(tmp_path / "no_y.mat", tmp_path / "bad_split.mat")
    (tmp_path / "junk.mat").write_bytes(b"junk")
    with pytest.raises(
        ValueError, match=re.escape(f"{tmp_path / 'junk.mat'}: expected a MATLAB 5 .mat file")
    ):
        read_coil(tmp_path / "junk.mat", tmp_path / "bad_split.mat")


def test_load_coil(tmp_path: Path) -> None:
    with pytest.raises(
        FileNotFoundError,
        match=re.escape(
            f"{tmp_path / 'ssl_coil' / 'coil_data.mat'}: expected the SSL-book COIL data"
        ),
    ):
        load_coil(10, data_dir=tmp_path)
    with pytest.raises(ValueError, match="num_labeled must be 10 or 100; got 5"):
        load_coil(5, data_dir=tmp_path)  # type: ignore[arg-type]
