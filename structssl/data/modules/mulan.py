"""Mulan multi-label data module with seed 004's protocol: random 70/30 splits, degree of labeling.

Seed 004 section 6: the Mulan train and test files of a data set are pooled; each of 10 random
splits (``split_seed``) takes 70 % of the pool for training and 30 % for testing; the training
part is split again into labeled (``labeled_fraction`` = d %, at least one example) and
unlabeled (the rest) examples. Features are standardised with the training part's mean and
standard deviation (``standardize=True``; constant features are left centred).

Batches (full batch by default): ``{"inputs": (B, D) float, "labels": (B, K) long}``; the
unlabeled training batch has no ``labels``. Seed 004 has no dev split (it fixes sigma^2 = 1
instead of tuning it): the dev split here is the unlabeled training examples with their labels
(``evaluate_unlabeled=True``), which only report the unlabeled-set Micro-F1 of the paper's
Fig. 1. :meth:`MulanDataModule.arrays` returns the split as tensors for loops without Lightning
(the benchmark).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Union

import numpy as np
import torch
from torch import Tensor

from structssl.data.formats.arff import MULAN_DATASETS, MultiLabelData, load_mulan
from structssl.data.modules.base import SemiSupervisedDataModule, seeded_parts, split_pool, stack_collate
from structssl.data.paths import PathLike

__all__ = ["MulanSplit", "MulanDataModule", "mulan_split", "load_pooled"]


class MulanSplit(NamedTuple):
    """One random split as tensors.

    Shape:
        labeled_inputs (n, D), labeled_labels (n, K), unlabeled_inputs (m, D),
        unlabeled_labels (m, K) (hidden from training; for reports), test_inputs (t, D),
        test_labels (t, K).
    """

    labeled_inputs: Tensor
    labeled_labels: Tensor
    unlabeled_inputs: Tensor
    unlabeled_labels: Tensor
    test_inputs: Tensor
    test_labels: Tensor
    #: (D,) the training part's feature means and standard deviations used to standardise
    #: (``None`` without ``standardize``); prediction applies them to new files
    feature_mean: Optional[Tensor] = None
    feature_std: Optional[Tensor] = None


def _check_fraction(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < float(value) < 1.0:
        raise ValueError(f"{name} must be a float in (0, 1); got {value!r}")
    return float(value)


def mulan_split(
    data: MultiLabelData,
    labeled_fraction: float = 0.01,
    split_seed: int = 0,
    train_fraction: float = 0.7,
    standardize: bool = True,
    dtype: torch.dtype = torch.float64,
) -> MulanSplit:
    """Seed 004's split of a pooled data set (see the module docstring).

    Args:
        data: the pooled :class:`~structssl.data.formats.arff.MultiLabelData`.
        labeled_fraction: degree of labeling d in (0, 1) (0.01 for d = 1 %).
        split_seed: the split's seed (the train/test permutation and the labeled subset).
        train_fraction: training share of the pool, in (0, 1).
        standardize: standardise features with the training part's statistics.
        dtype: floating dtype of the inputs.

    Returns:
        :class:`MulanSplit`.
    """
    labeled_fraction = _check_fraction(labeled_fraction, "labeled_fraction")
    train_fraction = _check_fraction(train_fraction, "train_fraction")
    if isinstance(split_seed, bool) or not isinstance(split_seed, int) or split_seed < 0:
        raise ValueError(f"split_seed must be an int >= 0; got {split_seed!r}")
    n = len(data)
    num_train = int(round(train_fraction * n))
    if not 1 <= num_train < n:
        raise ValueError(f"train_fraction {train_fraction} leaves an empty split of {n} examples")
    train, test = seeded_parts(n, [num_train], 10_007 * split_seed + 1)
    lab, unl = split_pool(num_train, labeled_fraction=labeled_fraction, seed=split_seed)
    x = torch.as_tensor(np.asarray(data.X), dtype=dtype)
    y = torch.as_tensor(np.asarray(data.Y), dtype=torch.long)
    mean = std = None
    if standardize:
        mean, std = feature_statistics(x[train])
        x = (x - mean) / std
    tr_x, tr_y = x[train], y[train]
    return MulanSplit(tr_x[lab], tr_y[lab], tr_x[unl], tr_y[unl], x[test], y[test], mean, std)


def feature_statistics(x: Tensor) -> tuple[Tensor, Tensor]:
    """The mean and standard deviation (D,) that standardise features ``x`` (n, D): constant
    features get a standard deviation of 1 (they are only centred)."""
    std = x.std(0)  # NaN for one row: then 1, as for a constant feature
    return x.mean(0), torch.where(std > 1e-12, std, torch.ones_like(std))


def multilabel_format(
    feature_names: tuple[str, ...], label_names: tuple[str, ...], mean: Optional[Tensor],
    std: Optional[Tensor], one_hot: bool = False,
) -> dict[str, Any]:
    """A multi-label data module's ``saved_format()``: what prediction needs, as plain data kept
    in checkpoints (``structssl predict``,
    :class:`~structssl.predict_multilabel.MultiLabelPredictor`): the feature and label
    attribute names, the standardisation statistics (``None``: not standardised), and whether
    nominal features are read one-hot (``read_arff(one_hot=True)``)."""
    return {
        "kind": "multilabel",
        "feature_names": list(feature_names),
        "label_names": list(label_names),
        "mean": None if mean is None else mean.tolist(),
        "std": None if std is None else std.tolist(),
        "one_hot": bool(one_hot),
    }


def load_pooled(name: str, data_dir: Optional[PathLike] = None) -> MultiLabelData:
    """The Mulan train and test files of ``name`` pooled into one data set."""
    train = load_mulan(name, "train", data_dir)  # type: ignore[arg-type]
    test = load_mulan(name, "test", data_dir)  # type: ignore[arg-type]
    for kind in ("feature_names", "label_names"):
        a, b = getattr(train, kind), getattr(test, kind)
        if a != b:
            i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            got = (f"attribute {i + 1} is {a[i]!r} in train and {b[i]!r} in test" if i < min(len(a), len(b))
                   else f"train has {len(a)}, test {len(b)}")
            raise ValueError(
                f"the train and test files of {name!r} must have the same {kind.split('_')[0]} "
                f"attributes; {got}"
            )
    return MultiLabelData(
        np.concatenate([train.X, test.X]), np.concatenate([train.Y, test.Y]),
        train.feature_names, train.label_names, train.relation,
    )


class MulanDataModule(SemiSupervisedDataModule):
    """Scene / yeast / emotions with seed 004's splits (see the module docstring).

    Args:
        name: ``"scene"``, ``"yeast"`` or ``"emotions"``.
        labeled_fraction: degree of labeling d in (0, 1) (seed 004: 0.01, 0.02, 0.04, 0.08).
        split_seed: which random 70/30 split (seed 004: 10 splits).
        train_fraction: training share of the pool (0.7).
        standardize: standardise features with training statistics.
        data_dir: the data directory (default: ``STRUCTSSL_DATA`` or ``../shared/data``).
        transductive: add the test inputs to the unlabeled set (seed 004 section 6.4).
        evaluate_unlabeled: the dev split is the unlabeled training examples with their labels
            (hidden from training), so ``val/micro_f1`` is seed 004 Fig. 1's unlabeled-set
            curve (reported only: ``best.ckpt`` is not chosen on it, see
            :attr:`dev_from_unlabeled`); ``False``: no dev split.
        num_unlabeled: keep only the first ``num_unlabeled`` unlabeled examples (``None``: all;
            for quick runs).
        max_test: keep only the first ``max_test`` test examples (``None``: all).
        arff_file: your own ARFF file (Mulan / MEKA style, dense or sparse, ``.gz`` allowed)
            instead of the benchmark set ``name``: its rows are split as the benchmark's
            pool (``train_fraction``, ``split_seed``, ``labeled_fraction``).
        labels: with ``arff_file``, which attributes are the 0/1 labels: the label XML file
            (Mulan), the list of label attribute names, or the number of trailing attributes
            that are labels (an int).
        shuffle: reshuffle the training loaders every epoch (off by default here: the splits are
            fixed arrays).
        **kwargs: the loader options of :class:`~structssl.data.SemiSupervisedDataModule`
            (``batch_size``, ``unlabeled_batch_size``, ``eval_batch_size``, ``num_workers``).
    """

    def __init__(
        self,
        name: str = "emotions",
        labeled_fraction: float = 0.01,
        split_seed: int = 0,
        train_fraction: float = 0.7,
        standardize: bool = True,
        data_dir: Optional[PathLike] = None,
        transductive: bool = False,
        evaluate_unlabeled: bool = True,
        num_unlabeled: Optional[int] = None,
        max_test: Optional[int] = None,
        arff_file: Optional[str] = None,
        labels: Union[int, list[str], str, None] = None,
        shuffle: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(shuffle=shuffle, **kwargs)
        if arff_file is None and name not in MULAN_DATASETS:
            raise ValueError(
                f"name must be one of {sorted(MULAN_DATASETS)} (or give your own file: "
                f"arff_file= / --data.arff_file with labels=); got {name!r}"
            )
        if arff_file is not None and (labels is None or isinstance(labels, bool)):
            raise ValueError(
                f"arff_file={arff_file!r} needs labels=: the label XML file, the label attribute "
                "names, or the number of trailing attributes that are labels"
            )
        if arff_file is None and labels is not None:
            raise ValueError(f"labels={labels!r} applies to arff_file=, which is not given")
        self.arff_file, self.labels = arff_file, labels
        self.name = name
        self.labeled_fraction = _check_fraction(labeled_fraction, "labeled_fraction")
        self.split_seed = split_seed
        self.train_fraction = _check_fraction(train_fraction, "train_fraction")
        self.standardize = bool(standardize)
        self.data_dir = data_dir
        self.transductive = bool(transductive)
        for key, value in (("num_unlabeled", num_unlabeled), ("max_test", max_test)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"{key} must be None or an int >= 0; got {value!r}")
        self.num_unlabeled = num_unlabeled
        self.evaluate_unlabeled = bool(evaluate_unlabeled)
        self.max_test = max_test
        self.num_labels = 0 if arff_file is not None else MULAN_DATASETS[name][1]
        self._arrays: Optional[MulanSplit] = None
        self._names: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # features, labels

    def _read_own(self) -> MultiLabelData:
        """``arff_file`` with its ``labels`` (see the class docstring)."""
        from structssl.data.formats.arff import read_arff

        assert self.arff_file is not None
        if isinstance(self.labels, int):
            return read_arff(self.arff_file, label_location="end", num_labels=self.labels)
        return read_arff(self.arff_file, labels=self.labels)

    def arrays(self) -> MulanSplit:
        """The split as tensors (float64 inputs), loaded once."""
        if self._arrays is None:
            data = self._read_own() if self.arff_file else load_pooled(self.name, self.data_dir)
            self.num_labels = int(np.asarray(data.Y).shape[1])
            self._names = (tuple(data.feature_names), tuple(data.label_names))
            self._arrays = mulan_split(
                data, self.labeled_fraction, self.split_seed, self.train_fraction, self.standardize
            )
        return self._arrays

    @property
    def dev_from_unlabeled(self) -> bool:
        """Whether the dev split is the unlabeled training examples with their labels: reported
        (Fig. 1), never used to choose ``best.ckpt``, which is then the last epoch's model."""
        return self.evaluate_unlabeled

    def saved_format(self) -> dict[str, Any]:
        """What prediction needs (:func:`multilabel_format`): the attribute names and the
        training part's standardisation."""
        s = self.arrays()
        return multilabel_format(*self._names, s.feature_mean, s.feature_std)

    @property
    def input_dim(self) -> int:
        """D, the number of features."""
        return int(self.arrays().labeled_inputs.shape[1])

    def build(self) -> dict[str, list[dict[str, Tensor]]]:
        s = self.arrays()
        labeled = [{"inputs": x, "labels": y} for x, y in zip(s.labeled_inputs, s.labeled_labels)]
        unl_x = s.unlabeled_inputs
        if self.transductive:
            unl_x = torch.cat([unl_x, s.test_inputs])
        unl_x = unl_x[: self.num_unlabeled]
        unlabeled = [{"inputs": x} for x in unl_x]
        dev: list[dict[str, Tensor]] = []
        if self.evaluate_unlabeled:
            keep = s.unlabeled_inputs[: self.num_unlabeled], s.unlabeled_labels[: self.num_unlabeled]
            dev = [{"inputs": x, "labels": y} for x, y in zip(*keep)]
        test_x, test_y = s.test_inputs[: self.max_test], s.test_labels[: self.max_test]
        test = [{"inputs": x, "labels": y} for x, y in zip(test_x, test_y)]
        return {"labeled": labeled, "unlabeled": unlabeled, "dev": dev, "test": test}

    #: fixed-size examples: ``inputs`` (B, D), ``labels`` (B, K); no padding, no ``lengths``
    collate = staticmethod(stack_collate)
