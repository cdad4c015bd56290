"""Structured perceptron (averaged) and the co-perceptron (thesis chapter 5, Tables 5.1, 5.2).

* :class:`StructuredPerceptron` (Collins 2002; thesis Table 5.1 in primal form, eq. 5.2): for
  each example in turn, decode ``yhat = argmax_y <w, Psi(x_i, y)>`` and on a mistake update
  ``w += Psi(x_i, y_i) - Psi(x_i, yhat)``. ``averaged=True`` returns the average of the
  iterates over all steps (Collins' averaging, by the lazy ``w - u / c`` trick).
* :class:`CoPerceptron` (Table 5.2): two views with their own feature maps over one
  structure. Labeled example: an ordinary perceptron step per view (5.11). Unlabeled example
  on which the views disagree (``yhat^1 != yhat^2``): view 1 treats ``yhat^2`` as the truth and
  view 2 ``yhat^1`` (5.12), steps scaled by ``C_u`` in [0, 1]. Prediction uses
  ``f = f^1 + f^2`` (5.7).

The perceptron is online: examples are visited one at a time in a fixed random order per
epoch (a Python loop over examples is inherent to the algorithm); decoding is the structure's
argmax on one example.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import torch
from torch import Tensor

from structssl.baselines.base import Baseline, Clock, TwoViewBaseline, check_time_limit
from structssl.baselines.feature_maps import JointFeatureMap
from structssl.baselines.oracle import _f64, _lengths
from structssl.structures.base import positive_int

__all__ = ["StructuredPerceptron", "CoPerceptron"]

Callback = Callable[[int, np.ndarray], None]


def _epochs(value: int) -> int:
    return positive_int(value, "epochs")


class _Averager:
    """Lazy averaging of the iterates: ``avg = w - u / c`` (Daume's trick)."""

    def __init__(self, dim: int) -> None:
        self.w = np.zeros(dim)
        self.u = np.zeros(dim)
        self.c = 1

    def update(self, delta: np.ndarray, scale: float = 1.0) -> None:
        self.w += scale * delta
        self.u += self.c * scale * delta

    def step(self) -> None:
        self.c += 1

    def average(self) -> np.ndarray:
        return self.w - self.u / self.c


class StructuredPerceptron(Baseline):
    """Averaged structured perceptron (see the module docstring).

    Args:
        feature_map: the joint feature map.
        epochs: passes over the data.
        averaged: return the averaged weights.
        shuffle: visit the examples in a new random order every epoch.
        seed: the numpy seed of the order.

    Attributes (after ``fit``): ``w_`` (d,), ``mistakes_`` per epoch, ``history_`` per epoch
    ``{"epoch", "time", "mistakes"}``.
    """

    def __init__(
        self,
        feature_map: JointFeatureMap,
        epochs: int = 50,
        averaged: bool = True,
        shuffle: bool = True,
        seed: int = 0,
    ) -> None:
        super().__init__(feature_map)
        self.epochs = _epochs(epochs)
        self.averaged = bool(averaged)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)

    def fit(
        self,
        inputs: Tensor,
        labels: Tensor,
        lengths: Optional[Tensor] = None,
        callback: Optional[Callback] = None,
    ) -> "StructuredPerceptron":
        """Train online on labeled examples; stops early after an epoch without mistakes.

        Args:
            inputs, labels, lengths: the training set (B, ...).
            callback: ``callback(epoch, w)`` after every epoch (not timed).

        Shape:
            inputs: (B, *input_shape); labels: (B, *label_shape); lengths: (B,).
        """
        inputs, labels, lengths = self._prepare(inputs, labels, lengths)
        assert labels is not None
        fmap, st, n = self.feature_map, self.feature_map.structure, labels.shape[0]
        rng = np.random.default_rng(self.seed)
        avg = _Averager(fmap.dim)
        clock = Clock()
        self.history_: list[dict[str, float]] = []
        self.mistakes_: list[int] = []
        for epoch in range(self.epochs):
            order = rng.permutation(n) if self.shuffle else np.arange(n)
            mistakes = 0
            for i in order:
                sl = slice(int(i), int(i) + 1)
                x, y, ln = inputs[sl], labels[sl], lengths[sl]
                with torch.no_grad():
                    pot = fmap.potentials(torch.from_numpy(avg.w), x, ln)
                    yhat = st.argmax(pot, ln)[0]
                if not bool(st.same(yhat.unsqueeze(1), y.unsqueeze(1)).all()):
                    mistakes += 1
                    delta = (fmap.psi(x, y, ln) - fmap.psi(x, yhat, ln)).toarray().ravel()
                    avg.update(delta)
                avg.step()
            self.mistakes_.append(mistakes)
            self.w_ = avg.average() if self.averaged else avg.w.copy()
            self.history_.append({"epoch": epoch, "time": clock.elapsed(), "mistakes": mistakes})
            if callback is not None:
                with clock.paused():
                    callback(epoch, self.w_.copy())
            if mistakes == 0:
                break
        return self


class CoPerceptron(TwoViewBaseline):
    """Two-view co-perceptron (thesis Table 5.2; see the module docstring).

    Args:
        feature_map: view 1's joint feature map (its structure is used for both views).
        feature_map2: view 2's joint feature map (same structure class and sizes).
        cu: weight of the unlabeled (disagreement) steps, in [0, 1].
        epochs: t_max.
        averaged: average the iterates of each view.
        seed: the numpy seed of the visiting order.
        time_limit: stop (after the current example) once this many seconds of
            :class:`~structssl.baselines.base.Clock` time have passed (None: no limit).

    Attributes (after ``fit``): ``w1_``, ``w2_`` and ``w_`` (= ``w1_``, for the common
    interface); ``history_`` per epoch; ``timed_out_``.
    """

    def __init__(
        self,
        feature_map: JointFeatureMap,
        feature_map2: JointFeatureMap,
        cu: float = 1.0,
        epochs: int = 20,
        averaged: bool = True,
        seed: int = 0,
        time_limit: Optional[float] = None,
    ) -> None:
        super().__init__(feature_map, feature_map2)
        self.time_limit = check_time_limit(time_limit)
        if isinstance(cu, bool) or not isinstance(cu, (int, float)) or not 0.0 <= cu <= 1.0:
            raise ValueError(f"cu must be a number in [0, 1]; got {cu!r}")
        self.cu = float(cu)
        self.epochs = _epochs(epochs)
        self.averaged = bool(averaged)
        self.seed = int(seed)

    def fit(
        self,
        inputs: Tensor,
        inputs2: Tensor,
        labels: Tensor,
        lengths: Optional[Tensor] = None,
        unlabeled: Optional[Tensor] = None,
        unlabeled2: Optional[Tensor] = None,
        unlabeled_lengths: Optional[Tensor] = None,
    ) -> "CoPerceptron":
        """Train on labeled examples (both views) and optional unlabeled examples.

        Args:
            inputs, inputs2: the two views of the labeled examples (B, ...).
            labels, lengths: gold labels and lengths of the labeled examples.
            unlabeled, unlabeled2, unlabeled_lengths: the two views of the unlabeled examples
                (U, ...) and their lengths (None: no unlabeled data).

        Shape:
            inputs: (B, *in1); inputs2: (B, *in2); labels: (B, *label_shape); lengths: (B,);
            unlabeled: (U, *in1); unlabeled2: (U, *in2); unlabeled_lengths: (U,).
        """
        inputs, labels, lengths = self._prepare(inputs, labels, lengths)
        assert labels is not None
        inputs2 = _f64(inputs2)
        if inputs2.shape[0] != inputs.shape[0]:
            raise ValueError(
                f"inputs2 must have B = {inputs.shape[0]} rows; got {tuple(inputs2.shape)}"
            )
        maps = (self.feature_map, self.feature_map2)
        st = self.feature_map.structure
        n = labels.shape[0]
        m = 0
        if unlabeled is not None:
            if unlabeled2 is None or unlabeled2.shape[0] != unlabeled.shape[0]:
                raise ValueError("unlabeled2 must be given with as many rows as unlabeled")
            unlabeled, unlabeled2 = _f64(unlabeled), _f64(unlabeled2)
            unlabeled_lengths = _lengths(self.feature_map, unlabeled, unlabeled_lengths)
            m = unlabeled.shape[0]
        views = ((inputs, unlabeled), (inputs2, unlabeled2))
        avgs = (_Averager(maps[0].dim), _Averager(maps[1].dim))
        rng = np.random.default_rng(self.seed)
        clock = Clock()
        self.history_: list[dict[str, float]] = []
        self.timed_out_ = False
        for epoch in range(self.epochs):
            updates = 0
            for j in rng.permutation(n + m):
                labeled = j < n
                i = int(j if labeled else j - n)
                sl = slice(i, i + 1)
                ln = lengths[sl] if labeled else unlabeled_lengths[sl]  # type: ignore[index]
                xs = [v[0][sl] if labeled else v[1][sl] for v in views]  # type: ignore[index]
                with torch.no_grad():
                    yhat = [
                        st.argmax(mp.potentials(torch.from_numpy(a.w), x, ln), ln)[0]
                        for mp, a, x in zip(maps, avgs, xs)
                    ]
                if labeled:
                    y = labels[sl]
                    for v in range(2):
                        if not bool(st.same(yhat[v].unsqueeze(1), y.unsqueeze(1)).all()):
                            d = maps[v].psi(xs[v], y, ln) - maps[v].psi(xs[v], yhat[v], ln)
                            avgs[v].update(d.toarray().ravel())
                            updates += 1
                elif self.cu > 0 and not bool(st.same(yhat[0].unsqueeze(1), yhat[1].unsqueeze(1)).all()):
                    for v in range(2):
                        peer = yhat[1 - v]
                        d = maps[v].psi(xs[v], peer, ln) - maps[v].psi(xs[v], yhat[v], ln)
                        avgs[v].update(d.toarray().ravel(), self.cu)
                        updates += 1
                for a in avgs:
                    a.step()
                if self.time_limit is not None and clock.elapsed() > self.time_limit:
                    self.timed_out_ = True
                    break
            ws = [a.average() if self.averaged else a.w.copy() for a in avgs]
            self.w1_, self.w2_ = ws
            self.w_ = self.w1_
            self.history_.append({"epoch": epoch, "time": clock.elapsed(), "updates": updates})
            if updates == 0 or self.timed_out_:
                break
        return self
