"""Taskar's OCR words as a Lightning data module (seed 000 section 5.2: 10-fold protocol).

Fold ``fold`` of :func:`~structssl.data.formats.ocr.ocr_fold_split`: with ``protocol="train_on_fold"``
(Taskar et al. 2004) the model trains on the words of one fold (about 690) and is tested on
the other nine; ``"test_on_fold"`` is the reverse. ``num_dev`` words of the test part (the
first ones, in file order) form the dev split and are removed from the test split. There is
no unlabeled data (section 4's formulation uses the labeled words only).

Examples: ``inputs`` (n, 128) float pixels, ``labels`` (n,) long letters 0..25, ``index``.
After :meth:`setup`: ``num_labels`` (26), ``label_names``, ``max_length``.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

import numpy as np

from structssl.data.modules.base import Example, SemiSupervisedDataModule, _check_count, with_index

__all__ = ["OcrDataModule"]


class OcrDataModule(SemiSupervisedDataModule):
    """OCR words, one fold of the 10-fold protocol.

    Args:
        data_dir: the data directory (default ``$STRUCTSSL_DATA``, else ``../shared/data``).
        fold: 0..9.
        protocol: ``"train_on_fold"`` or ``"test_on_fold"``.
        num_dev: words of the held-out part used as dev split (>= 1).
        num_train: keep only the first ``num_train`` training words (quick runs).
        num_test: keep only the first ``num_test`` test words (quick runs).
        num_labeled: accepted for a uniform interface: keep only the first ``num_labeled``
            training words (same as ``num_train``; the smaller wins).
        **kwargs: the loader options of :class:`~structssl.data.SemiSupervisedDataModule`
            (``batch_size``, ``unlabeled_batch_size``, ``eval_batch_size``, ``shuffle``,
            ``num_workers``).
    """

    def __init__(
        self,
        data_dir: Optional[str] = None,
        fold: int = 0,
        protocol: Literal["train_on_fold", "test_on_fold"] = "train_on_fold",
        num_dev: int = 200,
        num_train: Optional[int] = None,
        num_test: Optional[int] = None,
        num_labeled: Optional[int] = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        from structssl.data.formats.ocr import OCR_LETTERS

        if isinstance(fold, bool) or not isinstance(fold, int) or not 0 <= fold <= 9:
            raise ValueError(f"fold must be an int in [0, 9]; got {fold!r}")
        if protocol not in ("train_on_fold", "test_on_fold"):
            raise ValueError(f"protocol must be 'train_on_fold' or 'test_on_fold'; got {protocol!r}")
        self.data_dir = data_dir
        self.fold = fold
        self.protocol = protocol
        self.num_dev = _check_count(num_dev, "num_dev", 1)
        self.num_train = _check_count(num_train, "num_train", 1)
        self.num_test = _check_count(num_test, "num_test", 1)
        self.num_labeled = _check_count(num_labeled, "num_labeled", 1)
        self.label_names: tuple[str, ...] = tuple(OCR_LETTERS)
        self.num_labels = len(self.label_names)
        self.max_length = 0

    def build(self) -> dict[str, list[Example]]:
        from structssl.data.formats.ocr import load_ocr, ocr_fold_split

        words = load_ocr(self.data_dir)
        train, held_out = ocr_fold_split(words.folds, self.fold, self.protocol)
        caps = [x for x in (self.num_train, self.num_labeled) if x is not None]
        if caps:
            train = train[: min(caps)]
        assert self.num_dev is not None
        dev, test = held_out[: self.num_dev], held_out[self.num_dev :]
        if self.num_test is not None:
            test = test[: self.num_test]

        def examples(indices: np.ndarray) -> list[Example]:
            return with_index(words.examples(indices))

        splits = {"labeled": examples(train), "unlabeled": [], "dev": examples(dev), "test": examples(test)}
        self.max_length = max(int(ex["labels"].shape[0]) for exs in splits.values() for ex in exs)
        return splits
