"""The common interface of the baselines: ``fit``, ``predict``, ``objective``.

Every baseline holds a :class:`~structssl.baselines.feature_maps.JointFeatureMap` and, after
``fit``, a flat float64 weight vector ``w_`` (two, ``w1_`` and ``w2_``, for the two-view
learners, whose prediction uses the joint ``f = f^1 + f^2``). ``predict`` decodes with the
structure's argmax; ``objective`` evaluates the n-slack structured hinge primal of
:func:`~structssl.baselines.oracle.hinge_objective` (the same function for every learner, so
values are comparable).
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterator, Optional

import numpy as np
import torch
from torch import Tensor

from structssl.baselines.feature_maps import JointFeatureMap
from structssl.baselines.oracle import _f64, _lengths, hinge_objective

__all__ = ["Baseline", "TwoViewBaseline", "Clock", "check_time_limit"]


def check_time_limit(value: Optional[float]) -> Optional[float]:
    """A time limit in seconds: a number > 0, or None for no limit (raises ``ValueError``)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"time_limit must be a number > 0 or None; got {value!r}")
    return float(value)


class Clock:
    """Wall clock that can be paused (callbacks and evaluations are not counted).

    Args:
        timer: the time source (default :attr:`Clock.default_timer`, ``time.perf_counter``).
            ``time.process_time`` counts the CPU time of this process instead, which is the
            fairer measure on a machine shared with other jobs (see :meth:`use`).
    """

    #: The time source of clocks created without one (see :meth:`use`).
    default_timer: Callable[[], float] = staticmethod(time.perf_counter)  # type: ignore[assignment]

    def __init__(self, timer: Optional[Callable[[], float]] = None) -> None:
        self._timer = timer if timer is not None else Clock.default_timer
        self._start = self._timer()
        self._paused = 0.0

    @staticmethod
    @contextlib.contextmanager
    def use(timer: Callable[[], float]) -> Iterator[None]:
        """Make ``timer`` the default time source of every clock created inside the block.

        Example:
            >>> with Clock.use(time.process_time):  # CPU seconds of this process
            ...     clock = Clock()
        """
        if not callable(timer):
            raise TypeError(f"timer must be callable; got {type(timer).__name__}")
        previous = Clock.default_timer
        Clock.default_timer = timer  # type: ignore[assignment]
        try:
            yield
        finally:
            Clock.default_timer = previous  # type: ignore[assignment]

    def elapsed(self) -> float:
        """Seconds since creation, minus paused time."""
        return self._timer() - self._start - self._paused

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        t0 = self._timer()
        try:
            yield
        finally:
            self._paused += self._timer() - t0


class Baseline:
    """Base class: a linear structured learner over a joint feature map.

    Args:
        feature_map: the joint feature map.
    """

    w_: np.ndarray

    def __init__(self, feature_map: JointFeatureMap) -> None:
        if not isinstance(feature_map, JointFeatureMap):
            raise TypeError(
                f"feature_map must be a JointFeatureMap; got {type(feature_map).__name__}"
            )
        self.feature_map = feature_map

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.feature_map!r})"

    def _prepare(
        self, inputs: Tensor, labels: Optional[Tensor], lengths: Optional[Tensor]
    ) -> tuple[Tensor, Optional[Tensor], Tensor]:
        if not isinstance(inputs, Tensor):
            raise TypeError(f"inputs must be a torch.Tensor; got {type(inputs).__name__}")
        inputs = _f64(inputs)
        lengths = _lengths(self.feature_map, inputs, lengths)
        if labels is not None:
            if not isinstance(labels, Tensor):
                raise TypeError(f"labels must be a torch.Tensor; got {type(labels).__name__}")
            if labels.shape[0] != inputs.shape[0]:
                raise ValueError(
                    f"labels must have B = {inputs.shape[0]} rows (B from inputs); got "
                    f"{tuple(labels.shape)}"
                )
            labels = self.feature_map.structure.check_labels(labels, lengths)
        return inputs, labels, lengths

    def _weights(self) -> np.ndarray:
        if not hasattr(self, "w_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit() first")
        return self.w_

    def potentials(self, inputs: Tensor, lengths: Optional[Tensor] = None) -> object:
        """Potentials of the fitted model (float64)."""
        inputs, _, lengths = self._prepare(inputs, None, lengths)
        return self.feature_map.potentials(torch.from_numpy(self._weights()), inputs, lengths)

    @torch.no_grad()
    def predict(self, inputs: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
        """Decode the best structure of every input (the structure's argmax).

        Shape:
            inputs: (B, *input_shape); lengths: (B,) -> labels (B, *label_shape).
        """
        inputs, _, lengths = self._prepare(inputs, None, lengths)
        pot = self.potentials(inputs, lengths)
        return self.feature_map.structure.argmax(pot, lengths)[0]

    def _objective(
        self,
        inputs: Tensor,
        labels: Tensor,
        lengths: Optional[Tensor],
        C: float,
        rescaling: str = "margin",
        cost: str = "hamming",
        k: int = 4,
    ) -> float:
        inputs, labels, lengths = self._prepare(inputs, labels, lengths)
        assert labels is not None
        return hinge_objective(
            self.feature_map, self._weights(), inputs, labels, lengths, C, rescaling, cost, k
        )

    def objective(
        self, inputs: Tensor, labels: Tensor, lengths: Optional[Tensor] = None, C: float = 1.0
    ) -> float:
        """The structured hinge primal ``1/2||w||^2 + C sum_i hinge_i`` of the fitted weights."""
        return self._objective(inputs, labels, lengths, C)


class TwoViewBaseline(Baseline):
    """Base class of the two-view learners: ``w1_``, ``w2_``; prediction by ``f^1 + f^2``.

    Args:
        feature_map: view 1's joint feature map (its structure is used for both views).
        feature_map2: view 2's joint feature map over the same structure.
    """

    w1_: np.ndarray
    w2_: np.ndarray

    def __init__(self, feature_map: JointFeatureMap, feature_map2: JointFeatureMap) -> None:
        super().__init__(feature_map)
        if not isinstance(feature_map2, JointFeatureMap):
            raise TypeError(
                f"feature_map2 must be a JointFeatureMap; got {type(feature_map2).__name__}"
            )
        self.feature_map2 = feature_map2

    def _views(self) -> tuple[np.ndarray, np.ndarray]:
        if not hasattr(self, "w2_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit() first")
        return self.w1_, self.w2_

    def joint_potentials(
        self, inputs: Tensor, inputs2: Tensor, lengths: Optional[Tensor] = None
    ) -> object:
        """Potentials of ``f = f^1 + f^2`` (float64).

        Shape:
            inputs: (B, *in1); inputs2: (B, *in2); lengths: (B,).
        """
        inputs, _, lengths = self._prepare(inputs, None, lengths)
        w1, w2 = self._views()
        p1 = self.feature_map.potentials(torch.from_numpy(w1), inputs, lengths)
        p2 = self.feature_map2.potentials(torch.from_numpy(w2), _f64(inputs2), lengths)
        if isinstance(p1, Tensor):
            return p1 + p2
        return type(p1)(*(a + b for a, b in zip(p1, p2)))  # type: ignore[call-arg]

    @torch.no_grad()
    def predict(  # type: ignore[override]
        self, inputs: Tensor, inputs2: Tensor, lengths: Optional[Tensor] = None
    ) -> Tensor:
        """Decode with the joint ``f = f^1 + f^2`` (thesis eq. 5.7)."""
        inputs, _, lengths = self._prepare(inputs, None, lengths)
        return self.feature_map.structure.argmax(
            self.joint_potentials(inputs, inputs2, lengths), lengths
        )[0]

    def objective_view(
        self,
        view: int,
        inputs: Tensor,
        labels: Tensor,
        lengths: Optional[Tensor] = None,
        C: float = 1.0,
        rescaling: str = "margin",
        k: int = 4,
    ) -> float:
        """The hinge primal of one view (0 or 1) on labeled data (``inputs`` of that view)."""
        if view not in (0, 1):
            raise ValueError(f"view must be 0 or 1; got {view!r}")
        fmap = self.feature_map if view == 0 else self.feature_map2
        inputs = _f64(inputs)
        lengths = _lengths(fmap, inputs, lengths)
        labels = fmap.structure.check_labels(labels, lengths)
        return hinge_objective(fmap, self._views()[view], inputs, labels, lengths, C, rescaling, "hamming", k)

    def objective(  # type: ignore[override]
        self,
        inputs: Tensor,
        inputs2: Tensor,
        labels: Tensor,
        lengths: Optional[Tensor] = None,
        C: float = 1.0,
    ) -> float:
        """Sum over the two views of each view's margin-rescaled hinge primal (labeled data)."""
        return self.objective_view(0, inputs, labels, lengths, C) + self.objective_view(
            1, inputs2, labels, lengths, C
        )
