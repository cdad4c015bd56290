"""The SSL-book COIL benchmark (Chapelle, Schölkopf and Zien 2006) from MATLAB ``.mat`` files.

``coil_data.mat`` holds ``X`` (1500, 241) float64 and ``y`` (1500, 1) class labels 0..5; each
splits file holds ``idxLabs`` (12, L) and ``idxUnls`` (12, 1500 - L), the book's 12 fixed splits
for L = 10 and L = 100 labeled points, as 1-based MATLAB indices. :func:`read_coil` converts
them to 0-based indices and checks that each split partitions the points.

References: Chapelle, Schölkopf and Zien (eds.), Semi-Supervised Learning, MIT Press 2006,
benchmark chapter.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

import numpy as np
import scipy.io

from structssl.data.paths import PathLike, data_file

__all__ = ["SslSplits", "read_coil", "load_coil"]


@dataclass(frozen=True)
class SslSplits:
    """An SSL-book data set with its fixed splits.

    Attributes:
        X: (n, d) float64 features.
        y: (n,) int64 class labels.
        labeled: (S, L) int64 0-based indices of the labeled points of each split.
        unlabeled: (S, n - L) int64 0-based indices of the unlabeled points of each split.
    """

    X: np.ndarray
    y: np.ndarray
    labeled: np.ndarray
    unlabeled: np.ndarray

    @property
    def num_splits(self) -> int:
        """The number of splits S."""
        return int(self.labeled.shape[0])


def _loadmat(path: Path, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    try:
        content = scipy.io.loadmat(str(path))
    except (ValueError, TypeError, OSError, scipy.io.matlab.MatReadError) as err:
        raise ValueError(f"{path}: expected a MATLAB 5 .mat file; {err}") from None
    missing = [k for k in keys if k not in content]
    if missing:
        present = sorted(k for k in content if not k.startswith("__"))
        raise ValueError(
            f"{path}: expected variables {list(keys)}; missing {missing} (has {present})"
        )
    return {k: np.asarray(content[k]) for k in keys}


def read_coil(data_path: PathLike, splits_path: PathLike) -> SslSplits:
    """Read an SSL-book data file and one of its splits files.

    Args:
        data_path: the ``.mat`` file with ``X`` and ``y``.
        splits_path: the ``.mat`` file with ``idxLabs`` and ``idxUnls`` (1-based).

    Returns:
        :class:`SslSplits` with 0-based indices.

    Raises:
        ValueError: a missing variable, wrong shapes, non-integer labels, or a split that
            does not partition the points (file named).
    """
    data_path, splits_path = Path(data_path), Path(splits_path)
    d = _loadmat(data_path, ("X", "y"))
    s = _loadmat(splits_path, ("idxLabs", "idxUnls"))
    X = d["X"].astype(np.float64)
    if X.ndim != 2:
        raise ValueError(f"{data_path}: expected X to be 2-D; got shape {X.shape}")
    n = X.shape[0]
    y_raw = d["y"].reshape(-1)
    if y_raw.shape[0] != n:
        raise ValueError(
            f"{data_path}: expected y to have {n} entries (rows of X); got {y_raw.shape[0]}"
        )
    if not np.all(np.equal(np.mod(y_raw, 1), 0)):
        raise ValueError(f"{data_path}: expected integer class labels in y")
    y = y_raw.astype(np.int64)
    lab = s["idxLabs"].astype(np.int64)
    unl = s["idxUnls"].astype(np.int64)
    if lab.ndim != 2 or unl.ndim != 2 or lab.shape[0] != unl.shape[0]:
        raise ValueError(
            f"{splits_path}: expected idxLabs (S, L) and idxUnls (S, n - L); got "
            f"{lab.shape} and {unl.shape}"
        )
    if lab.shape[1] + unl.shape[1] != n:
        raise ValueError(
            f"{splits_path}: expected L + (n - L) = {n} indices per split; got "
            f"{lab.shape[1]} + {unl.shape[1]}"
        )
    everything = np.arange(1, n + 1)
    for k in range(lab.shape[0]):
        if not np.array_equal(np.sort(np.concatenate([lab[k], unl[k]])), everything):
            raise ValueError(
                f"{splits_path}: expected split {k} to partition the 1-based indices 1..{n}"
            )
    return SslSplits(X=X, y=y, labeled=lab - 1, unlabeled=unl - 1)


def load_coil(num_labeled: Literal[10, 100] = 10, data_dir: Optional[PathLike] = None) -> SslSplits:
    """Load COIL (1500 x 241, 6 classes) with its 12 splits for 10 or 100 labeled points.

    Args:
        num_labeled: 10 or 100.
        data_dir: the data directory (see :func:`~structssl.data.paths.resolve_data_dir`).
    """
    if num_labeled not in (10, 100):
        raise ValueError(f"num_labeled must be 10 or 100; got {num_labeled!r}")
    data = data_file(
        Path("ssl_coil") / "coil_data.mat",
        "the SSL-book COIL data (MAT-file with X and y)",
        data_dir,
    )
    splits = data_file(
        Path("ssl_coil") / f"coil_splits_labeled{num_labeled}.mat",
        f"the SSL-book COIL splits for {num_labeled} labeled points (idxLabs, idxUnls)",
        data_dir,
    )
    return read_coil(data, splits)
