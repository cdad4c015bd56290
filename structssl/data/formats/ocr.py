"""Taskar's OCR handwritten letters (``letter.data``), grouped into words, with the 10 folds.

Format: one letter per line, TAB-separated, 134 fields and no header::

    id  letter  next_id  word_id  position  fold  p_0_0 ... p_15_7

``next_id`` is the id of the next letter of the same word (-1 for a word's last letter),
``position`` is the 1-based position in the word, ``fold`` is 0..9 and the 128 pixels are
binary, row-major 16 rows x 8 columns. Letters are grouped into words by following the
``next_id`` chain from each word's first letter (the letter no other letter points to); the
``word_id``, ``position`` and ``fold`` columns are checked against the chains. Any
inconsistency (duplicate ids, a next_id out of range or pointed to twice, a letter outside
a-z, a pixel other than 0 / 1, a wrong field count) raises ``ValueError`` naming the file and
line. A CR or spaces at the end of a line are dropped (CRLF files).

The usual protocol (Taskar et al. 2004) is 10-fold: train on one fold and test on the other
nine (or the reverse); see :func:`ocr_fold_split`.

References: Taskar, Guestrin and Koller (2004), Max-margin Markov networks.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

import numpy as np
import torch
from torch import Tensor

from structssl.data.paths import PathLike, data_file, iter_lines

__all__ = ["OCR_LETTERS", "OcrWords", "read_ocr", "load_ocr", "ocr_fold_split"]

#: The 26 letter classes in label-index order.
OCR_LETTERS = tuple(string.ascii_lowercase)
_NUM_PIXELS = 128
_NUM_FIELDS = 6 + _NUM_PIXELS


@dataclass(frozen=True)
class OcrWords:
    """OCR words: per word, the letter images and labels.

    Attributes:
        pixels: per word, a (n_i, 128) uint8 array of 0/1 pixels (row-major 16 x 8).
        labels: per word, a (n_i,) int64 array of letters 0..25 (a..z).
        folds: (W,) int64 fold of each word (0..9).
        word_ids: (W,) int64 ``word_id`` of each word as in the file.
    """

    pixels: list[np.ndarray]
    labels: list[np.ndarray]
    folds: np.ndarray
    word_ids: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def words(self) -> list[str]:
        """The words as strings."""
        return ["".join(OCR_LETTERS[i] for i in lab) for lab in self.labels]

    @property
    def num_letters(self) -> int:
        """Total number of letters."""
        return int(sum(len(lab) for lab in self.labels))

    def examples(
        self, indices: Optional[np.ndarray | list[int]] = None, dtype: Optional[torch.dtype] = None
    ) -> list[dict[str, Tensor]]:
        """Words as ``{"inputs": (n, 128) float, "labels": (n,) long}`` for collate_sequences.

        Args:
            indices: which words (default all).
            dtype: the inputs' dtype (default: the default float dtype).
        """
        dtype = torch.get_default_dtype() if dtype is None else dtype
        chosen = range(len(self)) if indices is None else [int(i) for i in indices]
        return [
            {
                "inputs": torch.as_tensor(self.pixels[i], dtype=dtype),
                "labels": torch.as_tensor(self.labels[i], dtype=torch.long),
            }
            for i in chosen
        ]


def read_ocr(path: PathLike) -> OcrWords:
    """Read ``letter.data`` (``.gz`` transparently) and group the letters into words.

    Args:
        path: the file.

    Returns:
        The words (in the order of their first letters in the file).

    Raises:
        ValueError: a line without 134 TAB-separated fields, a bad letter / pixel / integer,
            a broken ``next_id`` chain, or ``word_id`` / ``position`` / ``fold`` disagreeing
            along a word (file and 1-based line named).
    """
    ids: list[int] = []
    letters: list[int] = []
    nexts: list[int] = []
    word_ids: list[int] = []
    positions: list[int] = []
    folds: list[int] = []
    lines: list[int] = []
    pixel_rows: list[bytes] = []
    letter_index = {c: i for i, c in enumerate(OCR_LETTERS)}
    for number, line in iter_lines(path):
        if not line.strip():
            raise ValueError(
                f"{path}:{number}: expected a letter line with {_NUM_FIELDS} fields; "
                "got an empty line"
            )
        # documented normalisation: a CR (CRLF files) or spaces at the end of a line are dropped
        fields = line.rstrip("\r ").split("\t", 6)
        if len(fields) != 7:
            raise ValueError(
                f"{path}:{number}: expected {_NUM_FIELDS} TAB-separated fields; got {len(fields)}"
            )
        try:
            i, nxt, wid, pos, fold = (int(fields[k]) for k in (0, 2, 3, 4, 5))
        except ValueError:
            raise ValueError(
                f"{path}:{number}: expected integers in the id, next_id, word_id, position and "
                f"fold fields; got {fields[0]!r}, {fields[2]!r}, {fields[3]!r}, {fields[4]!r}, "
                f"{fields[5]!r}"
            ) from None
        letter = letter_index.get(fields[1])
        if letter is None:
            raise ValueError(f"{path}:{number}: expected a letter a-z; got {fields[1]!r}")
        pix = fields[6]
        # fast path: exactly "d\td\t...\td" with 128 binary digits
        if len(pix) != 2 * _NUM_PIXELS - 1 or pix.count("\t") != _NUM_PIXELS - 1:
            count = len(pix.split("\t")) + 6
            raise ValueError(
                f"{path}:{number}: expected {_NUM_FIELDS} TAB-separated fields with 128 pixels "
                f"0 or 1; got {count} fields"
            )
        ids.append(i)
        letters.append(letter)
        nexts.append(nxt)
        word_ids.append(wid)
        positions.append(pos)
        folds.append(fold)
        lines.append(number)
        pixel_rows.append(pix.encode("ascii", "replace"))
    if not ids:
        raise ValueError(f"{path}: expected letter lines; the file is empty")

    raw = np.frombuffer(b"".join(pixel_rows), dtype=np.uint8).reshape(len(ids), 2 * _NUM_PIXELS - 1)
    digits = raw[:, 0::2]
    seps = raw[:, 1::2]
    bad = ((digits != ord("0")) & (digits != ord("1"))).any(1) | (seps != ord("\t")).any(1)
    if bad.any():
        k = int(bad.argmax())
        row = pixel_rows[k].decode("ascii")
        j = next(j for j in range(_NUM_PIXELS) if row[2 * j] not in "01" or (j < _NUM_PIXELS - 1 and row[2 * j + 1] != "\t"))
        found = row[2 * j : 2 * j + 2]
        raise ValueError(
            f"{path}:{lines[k]}: expected 128 pixels 0 or 1 separated by TABs; pixel {j + 1} reads "
            f"{found!r}"
        )
    pixels = (digits - ord("0")).astype(np.uint8)

    row_of: dict[int, int] = {}
    for r, i in enumerate(ids):
        if i in row_of:
            raise ValueError(
                f"{path}:{lines[r]}: expected distinct ids; id {i} also on line {lines[row_of[i]]}"
            )
        row_of[i] = r
    pointed = set()
    for r, nxt in enumerate(nexts):
        if nxt == -1:
            continue
        if nxt not in row_of:
            raise ValueError(
                f"{path}:{lines[r]}: expected next_id -1 or the id of a letter; got {nxt}"
            )
        if nxt in pointed:
            raise ValueError(f"{path}:{lines[r]}: next_id {nxt} is the next letter of two letters")
        pointed.add(nxt)

    word_pixels: list[np.ndarray] = []
    word_labels: list[np.ndarray] = []
    word_folds: list[int] = []
    word_id_list: list[int] = []
    visited = np.zeros(len(ids), dtype=bool)
    for r, i in enumerate(ids):
        if i in pointed:
            continue
        chain = [r]
        visited[r] = True
        while nexts[chain[-1]] != -1:
            nr = row_of[nexts[chain[-1]]]
            if visited[nr]:
                raise ValueError(f"{path}:{lines[nr]}: next_id chain loops back to this letter")
            visited[nr] = True
            chain.append(nr)
        for p, cr in enumerate(chain, start=1):
            if word_ids[cr] != word_ids[r] or folds[cr] != folds[r] or positions[cr] != p:
                raise ValueError(
                    f"{path}:{lines[cr]}: expected word_id {word_ids[r]}, fold {folds[r]} and "
                    f"position {p} along the word starting on line {lines[r]}; got word_id "
                    f"{word_ids[cr]}, fold {folds[cr]}, position {positions[cr]}"
                )
        word_pixels.append(pixels[chain])
        word_labels.append(np.asarray([letters[c] for c in chain], dtype=np.int64))
        word_folds.append(folds[r])
        word_id_list.append(word_ids[r])
    if not visited.all():
        k = int((~visited).argmax())
        raise ValueError(f"{path}:{lines[k]}: letter is on a next_id cycle without a first letter")
    return OcrWords(
        pixels=word_pixels,
        labels=word_labels,
        folds=np.asarray(word_folds, dtype=np.int64),
        word_ids=np.asarray(word_id_list, dtype=np.int64),
    )


def load_ocr(data_dir: Optional[PathLike] = None) -> OcrWords:
    """Load ``<data_dir>/ocr_letters_taskar/letter.data.gz`` (6,877 words, 52,152 letters)."""
    path = data_file(
        Path("ocr_letters_taskar") / "letter.data.gz",
        "Taskar's OCR letter.data (gzip; TAB-separated id letter next_id word_id position "
        "fold p_0_0..p_15_7)",
        data_dir,
    )
    return read_ocr(path)


def ocr_fold_split(
    folds: np.ndarray,
    fold: int,
    protocol: Literal["train_on_fold", "test_on_fold"] = "train_on_fold",
) -> tuple[np.ndarray, np.ndarray]:
    """Word indices ``(train, test)`` of one fold of the 10-fold protocol.

    Args:
        folds: (W,) fold of each word (:attr:`OcrWords.folds`).
        fold: the fold, 0..9.
        protocol: ``"train_on_fold"`` (Taskar et al.: train on the fold, test on the rest)
            or ``"test_on_fold"`` (train on the other nine folds).

    Returns:
        Two int64 arrays of word indices.
    """
    folds = np.asarray(folds)
    present = np.unique(folds)
    if fold not in present:
        raise ValueError(f"fold must be one of {present.tolist()}; got {fold}")
    if protocol not in ("train_on_fold", "test_on_fold"):
        raise ValueError(f"protocol must be 'train_on_fold' or 'test_on_fold'; got {protocol!r}")
    inside = np.flatnonzero(folds == fold)
    outside = np.flatnonzero(folds != fold)
    return (inside, outside) if protocol == "train_on_fold" else (outside, inside)
