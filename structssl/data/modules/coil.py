"""Lightning data module for the SSL-book COIL benchmark (multi-class as a structure).

Import it as ``structssl.data.CoilDataModule`` (it imports Lightning). :class:`CoilDataModule`
serves one of the book's 12 fixed splits (:func:`~structssl.data.formats.coil.load_coil`) for 10 or
100 labeled points: the labeled points of the split are the labeled training set, its other
1500 - L points are the unlabeled training set **and** the evaluation set (the book's
transductive protocol, which the thesis's COIL numbers follow: the error is measured on the
unlabeled points). The validation and test splits are therefore the same points, with labels.

Batches (:meth:`CoilDataModule.collate`): ``inputs`` (B, 241) float, ``labels`` (B,) long
(labeled / evaluation batches only), for ``MultiClass(6)`` with
``MultiClassScorer(6, input_dim=241)`` and ``task="multiclass"``. With ``random_features=R``
the inputs are R random Fourier features of an RBF kernel instead (``input_dim = R``): a
kernel machine's features for the linear scorer (the thesis's COIL numbers are of kernel
machines).
"""

from __future__ import annotations

from typing import Any, Literal, Optional

import numpy as np
import torch
from torch import Tensor

from structssl.data.modules.base import (
    SemiSupervisedDataModule,
    _check_bandwidth,
    _check_count,
    _random_fourier_features,
    stack_collate,
)

__all__ = ["CoilDataModule", "COIL_NUM_CLASSES"]

#: classes of the SSL-book COIL set
COIL_NUM_CLASSES = 6

Example = dict[str, Tensor]


class CoilDataModule(SemiSupervisedDataModule):
    """The SSL-book COIL set, one fixed split (see the module docstring).

    Args:
        num_labeled: 10 or 100 labeled points (the book's two split files).
        split: which of the 12 splits, 0 .. 11.
        num_unlabeled: keep only the first ``num_unlabeled`` unlabeled points of the split for
            training (default: all ``1500 - num_labeled``); evaluation always uses all of them.
        standardize: z-score every feature with the mean and standard deviation over all 1500
            points (no labels are used).
        random_features: replace the (standardized) pixels by this many random Fourier
            features of the RBF kernel ``exp(-||x - x'||^2 / (2 sigma^2))``, centred by their
            mean over all 1500 points (the raw features share a large common component; no
            labels are used); ``None``: the pixels.
        kernel_sigma: the kernel's bandwidth sigma; ``None``: ``bandwidth_factor`` times the
            median distance between the split's first 300 unlabeled points (distinct pairs).
        bandwidth_factor: the factor of the median distance when ``kernel_sigma`` is ``None``
            (> 0; on the book's splits with 100 labels, cross-validation on the labeled points
            picks 0.5 on 11 of 12 splits: ``benchmarks/README.md``, COIL).
        feature_seed: the seed of the random features.
        data_dir: the data directory (default: ``$STRUCTSSL_DATA``, else ``../shared/data``).
        **kwargs: the loader options of :class:`~structssl.data.SemiSupervisedDataModule`
            (``batch_size``, ``unlabeled_batch_size``, ``eval_batch_size``, ``shuffle``,
            ``num_workers``).

    Raises:
        ValueError: ``num_labeled`` not 10 or 100, ``split`` outside 0 .. 11, or a negative
            ``num_unlabeled``.
    """

    def __init__(
        self,
        num_labeled: Literal[10, 100] = 10,
        split: int = 0,
        num_unlabeled: Optional[int] = None,
        standardize: bool = True,
        random_features: Optional[int] = None,
        kernel_sigma: Optional[float] = None,
        bandwidth_factor: float = 1.0,
        feature_seed: int = 0,
        data_dir: Optional[str] = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if isinstance(num_labeled, bool) or num_labeled not in (10, 100):
            raise ValueError(f"num_labeled must be 10 or 100; got {num_labeled!r}")
        if isinstance(split, bool) or not isinstance(split, int) or not 0 <= split <= 11:
            raise ValueError(f"split must be an int in 0 .. 11; got {split!r}")
        self.num_labeled = int(num_labeled)
        self.split = split
        self.num_unlabeled = _check_count(num_unlabeled, "num_unlabeled", 0)
        self.standardize = bool(standardize)
        self.random_features = _check_count(random_features, "random_features", 1)
        self.kernel_sigma = _check_bandwidth(kernel_sigma, allow_none=True)
        self.bandwidth_factor = _check_bandwidth(bandwidth_factor, name="bandwidth_factor")
        self.feature_seed = int(feature_seed)
        self.data_dir = data_dir
        self.num_labels = COIL_NUM_CLASSES
        self.input_dim = 241 if self.random_features is None else self.random_features
        #: the bandwidth used for ``random_features`` (known after setup)
        self.sigma: Optional[float] = self.kernel_sigma

    #: fixed-size points: ``inputs`` (B, D) and, when present, ``labels`` (B,)
    collate = staticmethod(stack_collate)

    def build(self) -> dict[str, list[Example]]:
        from structssl.data.formats.coil import load_coil

        data = load_coil(self.num_labeled, self.data_dir)  # type: ignore[arg-type]
        if self.split >= data.num_splits:
            raise ValueError(
                f"split must be < the number of splits {data.num_splits}; got {self.split}"
            )
        X = data.X.astype(np.float64)
        if self.standardize:
            X = (X - X.mean(0)) / np.maximum(X.std(0), 1e-12)
        inputs = torch.as_tensor(X, dtype=torch.float32)
        labels = torch.as_tensor(data.y, dtype=torch.long)
        lab = data.labeled[self.split].tolist()
        unl = data.unlabeled[self.split].tolist()
        if self.num_unlabeled is not None and self.num_unlabeled > len(unl):
            raise ValueError(
                f"num_unlabeled must be <= {len(unl)} for {self.num_labeled} labeled points; "
                f"got {self.num_unlabeled}"
            )
        train_unl = unl if self.num_unlabeled is None else unl[: self.num_unlabeled]
        if self.random_features is not None:
            if self.sigma is None:
                first = inputs[unl[:300]].to(torch.float64)
                dist = torch.cdist(first, first)
                upper = torch.triu_indices(len(first), len(first), offset=1)
                self.sigma = self.bandwidth_factor * float(dist[upper[0], upper[1]].median())
            inputs = _random_fourier_features(
                inputs, self.random_features, self.sigma, self.feature_seed
            )
            inputs = inputs - inputs.mean(0)
        evaluation = [{"inputs": inputs[i], "labels": labels[i]} for i in unl]
        return {
            "labeled": [{"inputs": inputs[i], "labels": labels[i]} for i in lab],
            "unlabeled": [{"inputs": inputs[i]} for i in train_unl],
            "dev": evaluation,
            "test": evaluation,
        }
