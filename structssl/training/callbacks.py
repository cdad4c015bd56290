"""Annealing callbacks: geometric schedules for ``C``, ``C_u`` and the smax ``rho``.

Every schedule is a :class:`GeometricAnnealing`: at the start of training epoch ``e`` it sets
the procedure's current value of a hyper-parameter to

    value(e) = final * min(1, start * factor ** floor(max(0, e - delay_epochs) / every_n_epochs))

where ``final`` is the value configured on the procedure (``C``, ``Cu`` or the losses' ``rho``)
and ``start`` is the first *multiplier*. The clock is ``trainer.current_epoch``, which Lightning
restores on resume, and the callback's state (its configuration, the epoch and multiplier it
last applied) is saved in checkpoints; the procedure's current values are buffers of the
module, saved too. A resumed run therefore applies exactly the values an uninterrupted run
would have applied; resuming with a different schedule configuration raises ``ValueError``.

The schedules of the papers:

=========================  ============================================================
callback                   schedule
=========================  ============================================================
:class:`CBarrier`          thesis ch. 7 ("increase C in a barrier fashion"): C from
                           ``C 2^-steps``, doubled every ``every_n_epochs`` up to C
                           (thesis-digest reconstruction, K_C = 10)
:class:`CuRamp`            thesis ch. 7 ("exponentially approaches C_u after a fixed
                           number of epochs"): C_u from ``C_u 2^-steps``, doubled up to
                           C_u; ``delay_epochs`` lets it start after the C barrier
:class:`GeometricCuSchedule`  seed 004 sec. 3.4: C_m (our C_u) from 1e-4, tripled every
                           ``every_n_epochs`` (the paper's five inner rounds) up to 1
                           (times the configured C_u, 1 in the paper)
:class:`RhoContinuation`   smax sharpness rho from ``rho * start`` multiplied by
                           ``factor`` up to rho (continuation towards the hard max)
=========================  ============================================================

With the data modules' full-batch default one epoch is one L-BFGS run of
``lbfgs_max_iter`` iterations, i.e. one inner optimisation per annealing step.
"""

from __future__ import annotations

import math
from typing import Any, Literal, Optional

import pytorch_lightning as pl

__all__ = [
    "SupervisedWarmStart",
    "safeguard_callbacks",
    "GeometricAnnealing",
    "CBarrier",
    "CuRamp",
    "GeometricCuSchedule",
    "RhoContinuation",
]

Hyperparameter = Literal["C", "Cu", "rho"]


def _check(value: float, name: str, low: float, high: Optional[float] = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite float; got {value!r}")
    if value <= low or (high is not None and value > high):
        bound = f"in ({low}, {high}]" if high is not None else f"> {low}"
        raise ValueError(f"{name} must be {bound}; got {value!r}")
    return float(value)


def _count(value: int, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}; got {value!r}")
    return value


class GeometricAnnealing(pl.Callback):
    """Geometric schedule of a procedure's hyper-parameter (see the module docstring).

    Args:
        hyperparameter: ``"C"``, ``"Cu"`` or ``"rho"``.
        start: the first multiplier of the final value, in (0, 1].
        factor: the growth factor per step, > 1.
        every_n_epochs: epochs per step.
        delay_epochs: epochs at the first multiplier before the schedule starts growing.
    """

    def __init__(
        self,
        hyperparameter: Hyperparameter,
        start: float,
        factor: float = 2.0,
        every_n_epochs: int = 1,
        delay_epochs: int = 0,
    ) -> None:
        super().__init__()
        if hyperparameter not in ("C", "Cu", "rho"):
            raise ValueError(f"hyperparameter must be 'C', 'Cu' or 'rho'; got {hyperparameter!r}")
        self.hyperparameter = hyperparameter
        self.start = _check(start, "start", 0.0, 1.0)
        self.factor = _check(factor, "factor", 1.0)
        self.every_n_epochs = _count(every_n_epochs, "every_n_epochs", 1)
        self.delay_epochs = _count(delay_epochs, "delay_epochs", 0)
        #: the epoch and multiplier last applied (-1 and nan before the first epoch)
        self.epoch = -1
        self.multiplier = float("nan")

    @property
    def state_key(self) -> str:
        return f"{type(self).__name__}[{self.hyperparameter}]"

    def _config(self) -> dict[str, Any]:
        return {
            "hyperparameter": self.hyperparameter,
            "start": self.start,
            "factor": self.factor,
            "every_n_epochs": self.every_n_epochs,
            "delay_epochs": self.delay_epochs,
        }

    def multiplier_at(self, epoch: int) -> float:
        """The multiplier of the final value at training epoch ``epoch`` (0-based)."""
        steps = max(0, epoch - self.delay_epochs) // self.every_n_epochs
        if steps * math.log(self.factor) + math.log(self.start) > 1.0:  # no overflow
            return 1.0
        return min(1.0, self.start * self.factor**steps)

    def apply(self, pl_module: pl.LightningModule, epoch: int) -> float:
        """Set the module's current value for ``epoch``; return it."""
        self.epoch = epoch
        self.multiplier = self.multiplier_at(epoch)
        value = pl_module.final_value(self.hyperparameter) * self.multiplier
        pl_module.set_current(self.hyperparameter, value)
        return value

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not hasattr(pl_module, "set_current"):
            raise TypeError(
                f"{type(self).__name__} needs a structssl procedure (with set_current); got "
                f"{type(pl_module).__name__}"
            )
        pl_module.final_value(self.hyperparameter)  # NotImplementedError for rho without smax

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.apply(pl_module, trainer.current_epoch)

    def state_dict(self) -> dict[str, Any]:
        return {**self._config(), "epoch": self.epoch, "multiplier": self.multiplier}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved = {k: state_dict[k] for k in self._config()}
        if saved != self._config():
            raise ValueError(
                f"the checkpoint's {type(self).__name__} schedule must match this one to resume "
                f"exactly; checkpoint {saved}, configured {self._config()}"
            )
        self.epoch = int(state_dict["epoch"])
        self.multiplier = float(state_dict["multiplier"])


class CBarrier(GeometricAnnealing):
    """The thesis's C barrier: C from ``C 2^-steps``, doubled every ``every_n_epochs`` up to C.

    Args:
        steps: doublings to reach C (K_C; the thesis-digest suggests 10).
        every_n_epochs: epochs per doubling.
    """

    def __init__(self, steps: int = 10, every_n_epochs: int = 1) -> None:
        super().__init__("C", 2.0 ** -_count(steps, "steps", 0), 2.0, every_n_epochs, 0)
        self.steps = steps


class CuRamp(GeometricAnnealing):
    """The thesis's C_u ramp: C_u from ``C_u 2^-steps``, doubled up to C_u.

    Args:
        steps: doublings to reach C_u (K_u; default 10).
        every_n_epochs: epochs per doubling.
        delay_epochs: epochs before the ramp starts (e.g. the C barrier's
            ``steps * every_n_epochs``, so that C_u grows once C is final).

    The delay is *not* a supervised warm start: during it C_u stays at its first value
    ``C_u 2^-steps`` (> 0), so the unlabeled term, with pseudo-labels of a model that has seen
    no data yet, is in the objective from the first step. For labeled-only epochs first, add
    :class:`SupervisedWarmStart` (or the procedures' ``warm_start_epochs``).
    """

    def __init__(self, steps: int = 10, every_n_epochs: int = 1, delay_epochs: int = 0) -> None:
        super().__init__("Cu", 2.0 ** -_count(steps, "steps", 0), 2.0, every_n_epochs, delay_epochs)
        self.steps = steps


class GeometricCuSchedule(GeometricAnnealing):
    """Seed 004's annealing of C_m (our C_u): ``start`` (1e-4), times ``factor`` (3), up to 1.

    The values are multipliers of the configured ``Cu`` (seed 004 uses ``Cu = 1``).

    Args:
        start: the first value, in (0, 1].
        factor: growth factor, > 1.
        every_n_epochs: epochs per value (seed 004: five inner rounds).
        delay_epochs: epochs before the schedule starts growing.
    """

    def __init__(
        self,
        start: float = 1e-4,
        factor: float = 3.0,
        every_n_epochs: int = 5,
        delay_epochs: int = 0,
    ) -> None:
        super().__init__("Cu", start, factor, every_n_epochs, delay_epochs)


class RhoContinuation(GeometricAnnealing):
    """Continuation in the smax sharpness: rho from ``rho * start``, times ``factor``, up to rho.

    ``rho`` is the losses' configured value (e.g. ``NablaSVMLoss(rho=...)``).

    Args:
        start: the first multiplier, in (0, 1].
        factor: growth factor, > 1.
        every_n_epochs: epochs per step.
        delay_epochs: epochs before the schedule starts growing.
    """

    def __init__(
        self,
        start: float = 0.1,
        factor: float = 2.0,
        every_n_epochs: int = 1,
        delay_epochs: int = 0,
    ) -> None:
        super().__init__("rho", start, factor, every_n_epochs, delay_epochs)


class SupervisedWarmStart(pl.Callback):
    """Supervised warm start: C_u = 0 for the first ``epochs`` training epochs.

    During the warm start the procedures skip the unlabeled batches entirely (their objective
    is the supervised one), so the first pseudo-labels come from a model trained on the labeled
    data rather than from the initial weights. It overrides any C_u schedule during those epochs
    (it runs after the trainer's callbacks when the procedure returns it from
    ``configure_callbacks``; give it last when passing it to the trainer yourself). When the
    warm start ends, the L-BFGS history (curvature pairs of the supervised objective) is
    cleared.

    Args:
        epochs: labeled-only epochs, >= 1.
    """

    def __init__(self, epochs: int) -> None:
        super().__init__()
        self.epochs = _count(epochs, "epochs", 1)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not hasattr(pl_module, "set_current"):
            raise TypeError(
                f"SupervisedWarmStart needs a structssl procedure (with set_current); got "
                f"{type(pl_module).__name__}"
            )

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        import torch

        epoch = trainer.current_epoch
        if epoch < self.epochs:
            pl_module.set_current("Cu", 0.0)
            return
        if pl_module.current("Cu") == 0:  # no C_u schedule of its own: back to the final C_u
            pl_module.set_current("Cu", pl_module.final_value("Cu"))
        if epoch == self.epochs:
            for opt in trainer.optimizers:
                if isinstance(opt, torch.optim.LBFGS):
                    opt.state.clear()


def safeguard_callbacks(
    warm_start_epochs: int = 0, cu_start: Optional[float] = None, cu_factor: float = 2.0
) -> list[pl.Callback]:
    """The C_u callbacks of the semi-supervised procedures' safeguard options.

    ``cu_start`` given: C_u from ``C_u * cu_start``, times ``cu_factor`` every epoch up to C_u,
    starting after the warm start (a :class:`GeometricAnnealing` of ``"Cu"``); then
    :class:`SupervisedWarmStart` for ``warm_start_epochs > 0`` (last, so it wins).
    """
    out: list[pl.Callback] = []
    if cu_start is not None:
        out.append(GeometricAnnealing("Cu", cu_start, cu_factor, 1, warm_start_epochs))
    if warm_start_epochs:
        out.append(SupervisedWarmStart(warm_start_epochs))
    return out
