"""Apply a trained multi-label classifier to a new ARFF file (``structssl predict``).

A checkpoint of a model trained on your own ARFF files (:class:`~structssl.data.ArffDataModule`)
or a Mulan set (:class:`~structssl.data.MulanDataModule`) keeps what prediction needs: the feature and label attribute names, and the
training part's standardisation statistics. :class:`MultiLabelPredictor` loads one, reads a new
ARFF file with the same feature attributes (the label attributes may be absent, or hold ``?``),
standardises it as the training data was (a nominal attribute may declare values the model was
not trained on: a row holding one is read as none of the model's values, with a warning), and
decodes it with the procedure's own decoding::

    from structssl.predict_multilabel import MultiLabelPredictor

    predictor = MultiLabelPredictor.load("RUN_DIR")
    predictor.predict_file("NEW.arff", "PREDICTIONS.tsv")

The procedures of seed 004 (composite likelihood, TSVM+, CoDL+) decode collectively with their
corpus constraints (the label rates and co-occurrences of the labeled data, with
``test_constraints``): the whole file is one corpus, as a test set is in ``structssl test``, so
it should be a sample of the same distribution (``constraints=False`` / ``--constraints false``
decodes each example alone).

Output (:meth:`MultiLabelPredictor.predict_file`): a tab-separated file with a header line of
the label names and one line of 0/1 per input row, in the input's order; ``confidence`` adds a
column ``p(NAME)`` per label, the model's marginal probability of the label (without
constraints; exact marginals, so for up to ``max_exact_labels`` labels). When every row of the
input carries its labels, the micro-F1 against them is reported.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any, Optional, TextIO, Union

import numpy as np
import torch
from torch import Tensor

from structssl.predict import PathLike, load_predictor

__all__ = ["MultiLabelPredictor"]

#: files of fewer rows get a warning when decoded as one corpus under the constraints
SMALL_CORPUS = 50


class MultiLabelPredictor:
    """A trained multi-label classifier: a procedure plus its saved data format.

    Args:
        model: the trained procedure (``StructuredModule``).
        data_format: the format it was trained on (a multi-label data module's ``saved_format()``).
    """

    def __init__(self, model: Any, data_format: dict[str, Any]) -> None:
        if not isinstance(data_format, dict) or data_format.get("kind") != "multilabel":
            raise ValueError(f"data_format must be a multi-label format; got {data_format!r}")
        self.model = model
        self.feature_names: tuple[str, ...] = tuple(data_format["feature_names"])
        self.label_names: tuple[str, ...] = tuple(data_format["label_names"])
        self.one_hot = bool(data_format.get("one_hot", False))
        mean, std = data_format.get("mean"), data_format.get("std")
        self._mean = None if mean is None else torch.tensor(mean, dtype=torch.float64)
        self._std = None if std is None else torch.tensor(std, dtype=torch.float64)

    @classmethod
    def load(cls, path: PathLike) -> "MultiLabelPredictor":
        """The predictor of a checkpoint or a run directory (see
        :func:`~structssl.predict.load_predictor`).

        Raises:
            ValueError: the checkpoint is not a multi-label model's.
        """
        predictor = load_predictor(path)
        if not isinstance(predictor, MultiLabelPredictor):
            raise ValueError(f"{path}: a sequence tagger, not a multi-label classifier; load it "
                             "with load_predictor or Tagger.load")
        return predictor

    def _dtype(self) -> torch.dtype:
        return next((p.dtype for p in self.model.parameters() if p.is_floating_point()), torch.float32)

    def predict(
        self, features: Union[Tensor, np.ndarray], confidence: bool = False, constraints: bool = True
    ) -> tuple[Tensor, Optional[Tensor]]:
        """Decode examples given by their raw features (standardised here as the training data).

        Args:
            features: (n, D) raw feature values, columns in :attr:`feature_names` order.
            confidence: also return each label's marginal probability.
            constraints: decode with the procedure's corpus constraints, ``features`` as one
                corpus (the procedure's own evaluation decoding); ``False``: each example alone.

        Returns:
            labels (n, K) long in {0, 1}, and the probabilities (n, K) or ``None``.

        Raises:
            ValueError: ``features`` has another shape, or non-finite values.
        """
        x = torch.as_tensor(features, dtype=torch.float64)
        if x.ndim != 2 or x.shape[1] != len(self.feature_names):
            raise ValueError(
                f"features must be (n, {len(self.feature_names)}), the model's feature count; got "
                f"{tuple(x.shape)}"
            )
        if not bool(torch.isfinite(x).all()):
            raise ValueError("features must be finite")
        if self._mean is not None and self._std is not None:
            x = (x - self._mean) / self._std
        batch = {"inputs": x.to(self._dtype())}
        model = self.model
        collective = getattr(model, "test_constraints", None)
        if collective is not None and not constraints:
            model.test_constraints = False
        try:
            with torch.no_grad():
                labels = model.decode(batch) if len(x) else torch.zeros(0, len(self.label_names), dtype=torch.long)
                probs = None
                if confidence and len(x):
                    marginals = model.structure.marginals(model.decode_potentials(batch))
                    probs = marginals.unary[..., 1].to(torch.float64)
                elif confidence:
                    probs = torch.zeros(0, len(self.label_names), dtype=torch.float64)
        finally:
            if collective is not None:
                model.test_constraints = collective
        return labels.long(), probs

    def predict_file(
        self,
        input: PathLike,
        output: Union[PathLike, TextIO],
        confidence: bool = False,
        constraints: bool = True,
    ) -> dict[str, Any]:
        """Predict the labels of an ARFF file and write them (format in the module docstring).

        Args:
            input: an ARFF file (dense or sparse, ``.gz`` allowed) with the model's feature
                attributes, by name; the label attributes may be absent or hold ``?``.
            output: a path (written in UTF-8, its folder created) or a text stream.
            confidence: add each label's marginal probability.
            constraints: see :meth:`predict`.

        Returns:
            ``{"examples": n}``, plus ``micro_f1`` against the labels of the rows that carry
            them all, and ``scored``, their count, when other rows do not.

        Raises:
            FileNotFoundError: ``input`` does not exist.
            ValueError: a malformed file (file and line), or feature attributes that differ
                from the model's, by name or order (the first differing one named).

        Warns:
            UserWarning: rows holding a value of a nominal attribute that the model was not
                trained on (the file declares it in addition to the model's values): they are
                read as none of the model's values (all 0 in the attribute's one-hot columns).
        """
        from structssl.data.formats.arff import check_same_features, read_arff
        from structssl.metrics import MicroF1

        input = Path(input)
        if not input.is_file():
            what = "a directory, not a file" if input.is_dir() else "no such input file"
            raise FileNotFoundError(f"{what}: {input}")
        data = read_arff(input, labels=list(self.label_names), missing_labels=True, one_hot=self.one_hot,
                         model_features=self.feature_names)
        check_same_features(input, data.feature_names, self.feature_names, "the model's")
        collective = constraints and getattr(self.model, "test_constraints", False) and (
            getattr(self.model, "constraints", None) is not None)
        if collective and len(data.X) < SMALL_CORPUS:
            warnings.warn(
                f"{input}: {len(data.X)} rows decoded as one corpus under the label rates of the "
                "training data (the procedure's constraints): in so small a file the rates force "
                "labels (a row alone gets the labels the rates leave); --constraints false / "
                "constraints=False decodes each row by itself",
                stacklevel=2,
            )
        labels, probs = self.predict(data.X, confidence=confidence, constraints=constraints)
        header = list(self.label_names) + ([f"p({n})" for n in self.label_names] if confidence else [])
        lines = ["\t".join(header)]
        for i in range(len(labels)):
            cols = [str(int(v)) for v in labels[i]]
            if probs is not None:
                cols += [f"{float(p):.4f}" for p in probs[i]]
            lines.append("\t".join(cols))
        text = "\n".join(lines) + "\n"
        if isinstance(output, (str, os.PathLike)):
            path = Path(output)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        else:
            output.write(text)
            output.flush()
        summary: dict[str, Any] = {"examples": len(labels)}
        gold = torch.as_tensor(data.Y)
        known = (gold >= 0).all(1) if len(gold) else torch.zeros(0, dtype=torch.bool)
        if bool(known.any()):  # the rows that carry their labels
            metric = MicroF1()
            metric.update(labels[known], gold[known])
            summary["micro_f1"] = float(metric.compute())
            if not bool(known.all()):
                summary["scored"] = int(known.sum())
        return summary
