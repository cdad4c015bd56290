"""Your own multi-label ARFF files: a training file, and unlabeled, dev and test files.

:class:`ArffDataModule` reads Mulan / MEKA-style ARFF files (dense or sparse, ``.gz``
allowed), with the label attributes given by ``labels``: the number of trailing attributes
that are labels, their names, or a Mulan label XML file; left out, MEKA's ``-C N`` in the
``@relation`` line says which. The training file's rows whose labels are all ``?`` are
unlabeled training examples, and so is every row of ``unlabeled_file`` (whose label attributes
may be absent); rows with some labels known and others ``?`` are an error (file and line).
Dev and test rows carry all their labels. Every file has the training file's feature
attributes, in the same order.

Features are standardised with the mean and standard deviation of all training rows, labeled
and unlabeled (``standardize=True``; constant features are only centred); the checkpoint keeps
them with the attribute names (:meth:`ArffDataModule.saved_format`), so that ``structssl
predict`` labels new files as the training data was read.

Batches (full batch by default): ``{"inputs": (B, D) float64, "labels": (B, K) long}``; the
unlabeled batch has no ``labels``. With a dev file, ``best.ckpt`` is the best dev micro-F1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import torch
from torch import Tensor

from structssl.data.formats.arff import MultiLabelData, check_same_features, read_arff
from structssl.data.modules.base import Example, SemiSupervisedDataModule, stack_collate
from structssl.data.modules.mulan import feature_statistics, multilabel_format
from structssl.data.paths import PathLike, split_file

__all__ = ["ArffDataModule"]

_EXPECTED = "a multi-label ARFF file ({} split)"


class ArffDataModule(SemiSupervisedDataModule):
    """Multi-label ARFF files of your own (see the module docstring).

    Args:
        train_file: the training rows (labeled, and unlabeled where every label is ``?``).
        labels: which attributes are the 0/1 labels: the number of trailing attributes (an
            int), their names (the label columns then follow the order given), a Mulan label
            XML file, or ``None``: MEKA's ``-C N`` in the training file's ``@relation`` name
            (the first N attributes, or the last -N).
        unlabeled_file: more unlabeled rows (label attributes absent or ``?``).
        dev_file: rows with their labels that choose ``best.ckpt`` (dev micro-F1).
        test_file: rows with their labels, scored after training (``test_after_fit``).
        standardize: standardise features with the training rows' statistics.
        data_dir: where relative file names are also looked for (default: ``STRUCTSSL_DATA``
            or ``../shared/data``).
        **kwargs: the loader options of :class:`~structssl.data.SemiSupervisedDataModule`
            (``batch_size``, ``unlabeled_batch_size``, ``eval_batch_size``, ``shuffle``,
            ``num_workers``).
    """

    #: fixed-size examples: ``inputs`` (B, D), ``labels`` (B, K); no padding, no ``lengths``
    collate = staticmethod(stack_collate)
    #: how to give a semi-supervised procedure unlabeled examples (its warning without any)
    unlabeled_hint = ("give rows without labels with --data.unlabeled_file FILE, or rows of the "
                      "training file whose labels are all '?'")

    def __init__(
        self,
        train_file: str,
        labels: Union[int, list[str], str, None] = None,
        unlabeled_file: Optional[str] = None,
        dev_file: Optional[str] = None,
        test_file: Optional[str] = None,
        standardize: bool = True,
        data_dir: Optional[PathLike] = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("shuffle", False)
        super().__init__(**kwargs)
        if not isinstance(train_file, str) or not train_file:
            raise ValueError(f"train_file must name an ARFF file; got {train_file!r}")
        if isinstance(labels, bool) or not (
            labels is None or (isinstance(labels, int) and labels >= 1)
            or (isinstance(labels, str) and labels)
            or (isinstance(labels, list) and labels and all(isinstance(n, str) for n in labels))
        ):
            raise ValueError(
                "labels (--data.labels) must be the number of trailing label attributes (an int "
                ">= 1), the label attribute names, a Mulan label XML file, or None (MEKA's "
                f"'-C N' in the @relation name); got {labels!r}"
            )
        self.files = {"train": train_file, "unlabeled": unlabeled_file, "dev": dev_file, "test": test_file}
        self.labels = labels
        self.standardize = bool(standardize)
        self.data_dir = data_dir
        self._format: Optional[dict[str, Any]] = None

    def _read(self, split: str, train: Optional[MultiLabelData] = None) -> MultiLabelData:
        """A split's file; the training file by ``labels``, the others by the training file's
        (``train``) label names (absent label attributes and ``?`` read as -1) and its nominal
        values (a value the training file does not declare is read as none of them, with a
        warning)."""
        name = self.files[split]
        assert name is not None
        path = split_file(name, split, _EXPECTED.format(split), self.data_dir)
        if train is not None:
            return read_arff(path, labels=list(train.label_names), missing_labels=True, one_hot=True,
                             model_features=train.feature_names)
        if self.labels is None:
            return read_arff(path, label_location="meka", missing_labels=True, one_hot=True)
        if isinstance(self.labels, int):
            return read_arff(path, label_location="end", num_labels=self.labels, missing_labels=True, one_hot=True)
        if isinstance(self.labels, str) and Path(self.labels).suffix.lower() == ".xml":
            xml = split_file(self.labels, "labels", "a Mulan label XML file", self.data_dir)
            return read_arff(path, labels=xml, missing_labels=True, one_hot=True)
        labels = [self.labels] if isinstance(self.labels, str) else list(self.labels)
        return read_arff(path, labels=labels, missing_labels=True, one_hot=True)

    def build(self) -> dict[str, list[Example]]:
        train = self._read("train")
        path = self.files["train"]
        known = train.Y >= 0
        partial = known.any(1) & ~known.all(1)
        if partial.any():
            row = int(partial.argmax())
            unknown = [n for n, k in zip(train.label_names, known[row]) if not k]
            raise ValueError(
                f"{path}:{train.lines[row]}: expected every label of a row known (a labeled row) "
                f"or every label '?' (an unlabeled row); labels {unknown} are '?'"
            )
        labeled = known.all(1)
        if not labeled.any():
            raise ValueError(
                f"{path}: no row has its labels (every label '?', or no attribute named "
                f"{list(train.label_names)}); expected labeled rows (0/1 labels) to train on"
            )
        names = (train.feature_names, train.label_names)
        self.num_labels = len(train.label_names)
        unlabeled_x = [train.X[~labeled]]
        if self.files["unlabeled"]:
            extra = self._read("unlabeled", train)
            check_same_features(self.files["unlabeled"], extra.feature_names, names[0], "the training file's")
            if (extra.Y >= 0).any():
                row = int((extra.Y >= 0).any(1).argmax())
                raise ValueError(
                    f"{self.files['unlabeled']}:{extra.lines[row]}: expected the labels of an "
                    "unlabeled file '?' or absent; this row has labels (put labeled rows in the "
                    "training file)"
                )
            unlabeled_x.append(extra.X)
        evaluation: dict[str, MultiLabelData] = {}
        for split in ("dev", "test"):
            if self.files[split]:
                data = self._read(split, train)
                check_same_features(self.files[split], data.feature_names, names[0], "the training file's")
                if (data.Y < 0).any():
                    row = int((data.Y < 0).any(1).argmax())
                    raise ValueError(
                        f"{self.files[split]}:{data.lines[row]}: expected every label of a {split} "
                        "row known (0/1); some are '?' or the label attributes are absent"
                    )
                evaluation[split] = data

        # every training row once: the training file's (labeled and '?') and the unlabeled file's
        x_train = torch.as_tensor(np.concatenate([train.X, *unlabeled_x[1:]]), dtype=torch.float64)
        mean = std = None
        if self.standardize:
            mean, std = feature_statistics(x_train)
        self._format = multilabel_format(*names, mean, std, one_hot=True)

        def inputs(x: np.ndarray) -> Tensor:
            t = torch.as_tensor(x, dtype=torch.float64)
            return t if mean is None or std is None else (t - mean) / std

        def rows(data: MultiLabelData, keep: Optional[np.ndarray] = None) -> list[Example]:
            x, y = (data.X, data.Y) if keep is None else (data.X[keep], data.Y[keep])
            return [{"inputs": xi, "labels": yi} for xi, yi in zip(inputs(x), torch.as_tensor(y))]

        from pytorch_lightning.utilities.rank_zero import rank_zero_info, rank_zero_warn

        from_file = len(unlabeled_x[1]) if len(unlabeled_x) > 1 else 0
        label_list = ", ".join(train.label_names[:12]) + (" ..." if self.num_labels > 12 else "")
        notes = (["standardised"] if self.standardize else []) + (
            [f"the nominal {', '.join(repr(a) for a in train.one_hot)} one column per value"]
            if train.one_hot else [])
        note = f" ({', '.join(notes)})" if notes else ""
        rank_zero_info(
            f"{path}: {int(labeled.sum())} labeled rows, {int((~labeled).sum())} unlabeled ('?' "
            f"labels){f' + {from_file} of ' + str(self.files['unlabeled']) if self.files['unlabeled'] else ''}"
            f"; {len(names[0])} features{note}, "
            f"{self.num_labels} labels: {label_list}"
            + "".join(f"; {len(d)} {k} rows" for k, d in evaluation.items())
        )
        rates = train.Y[labeled].mean(0)
        constant = [f"{n!r} ({'never' if r == 0 else 'always'})"
                    for n, r in zip(train.label_names, rates) if r in (0.0, 1.0)]
        if constant:
            rank_zero_warn(
                f"{path}: in every labeled row, label(s) {', '.join(constant)} set: the model "
                "learns nothing else for them (and the constraints keep their rate); label more "
                "rows with other values"
            )
        return {
            "labeled": rows(train, labeled),
            "unlabeled": [{"inputs": xi} for xi in inputs(np.concatenate(unlabeled_x))],
            "dev": rows(evaluation["dev"]) if "dev" in evaluation else [],
            "test": rows(evaluation["test"]) if "test" in evaluation else [],
        }

    def saved_format(self) -> dict[str, Any]:
        """What prediction needs (:func:`~structssl.data.modules.mulan.multilabel_format`): the
        attribute names and the training rows' standardisation."""
        self.setup()
        assert self._format is not None
        return self._format
