"""Checkpoints of a run: ``last.ckpt`` always, ``best.ckpt`` on the dev metric when there is a dev set.

:func:`run_checkpoints` are the ``ModelCheckpoint`` callbacks the ``structssl`` CLI adds to
every run (unless the config turns checkpointing off or names its own ``ModelCheckpoint``). Its files
have fixed names in ``<default_root_dir>/checkpoints/`` (no version counter), so a script can
name them: ``structssl predict --model RUN_DIR`` reads ``best.ckpt``, else ``last.ckpt``.

The dev metric is the procedure's :meth:`~structssl.training.modules.StructuredModule.monitor`
(``val/span_f1`` for BIO tagging, ``val/token_accuracy`` for other sequences, ...), higher is
better; it is chosen at setup, when the data module's dev split is known. Without dev
examples ``best.ckpt`` is the model of the last epoch, so that it always belongs to the run
that wrote the folder (a run without dev into the folder of an earlier run with dev replaces
that run's ``best.ckpt`` too, instead of leaving it to ``structssl predict``).

``last.ckpt`` holds everything a resumed run needs (optimizer state, callbacks, RNG state);
``best.ckpt`` is the model alone (weights, configuration, data format: what ``structssl
predict``, ``structssl test --ckpt_path`` and ``load_from_checkpoint`` read), without the
optimizer state (a CRF on CoNLL-2002's training file: 6.7 MB instead of 90, the rest being the
L-BFGS history). Resume from ``last.ckpt``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Union

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint

__all__ = ["LastCheckpoint", "BestCheckpoint", "run_checkpoints", "checkpoint_file"]

BEST, LAST = "best", "last"


class LastCheckpoint(ModelCheckpoint):
    """``last.ckpt``: the model after every epoch, overwritten (no version counter).

    Args:
        dirpath: where the file goes (the CLI passes ``<default_root_dir>/checkpoints``).
    """

    def __init__(self, dirpath: Union[str, Path]) -> None:
        # after every training epoch, also where the dev set is checked less often
        # (check_val_every_n_epoch) or not at all
        super().__init__(
            dirpath=dirpath, filename=LAST, monitor=None, save_top_k=1,
            enable_version_counter=False, save_on_train_epoch_end=True,
        )


class BestCheckpoint(ModelCheckpoint):
    """``best.ckpt``: the model of the best dev metric so far, weights only (see the module
    docstring); without dev examples, or with a dev split of unlabeled training examples
    (``dev_from_unlabeled``, :class:`~structssl.data.MulanDataModule`), the model of the
    last epoch.

    Args:
        dirpath: where the file goes (the CLI passes ``<default_root_dir>/checkpoints``).
    """

    def __init__(self, dirpath: Union[str, Path]) -> None:
        super().__init__(
            dirpath=dirpath, filename=BEST, monitor="val/unset", mode="max", save_top_k=1,
            enable_version_counter=False, save_weights_only=True,
        )

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        dm = getattr(trainer, "datamodule", None)
        splits = getattr(dm, "splits", None) if dm is not None else None
        monitor = getattr(pl_module, "monitor", None)
        # a dev split made of the unlabeled training examples with their labels (seed 004's
        # transductive report) must not choose the model: those labels are not the user's
        transductive = bool(getattr(dm, "dev_from_unlabeled", False))
        if splits and splits.get("dev") and callable(monitor) and not transductive:
            self.monitor = monitor()
        else:  # no dev metric to select on: the last epoch's model, after every epoch (at
            # the end of validation, which may never run, it would not be written)
            self.monitor = None
            self._save_on_train_epoch_end = True
        super().setup(trainer, pl_module, stage)


def run_checkpoints(dirpath: Union[str, Path]) -> list[ModelCheckpoint]:
    """The checkpoint callbacks of a run: :class:`BestCheckpoint`, then :class:`LastCheckpoint`.

    In this order (Lightning runs them in list order at the end of an epoch), ``last.ckpt``
    holds the best-checkpoint state of its own epoch: a run resumed from it knows the best dev
    score so far and never replaces ``best.ckpt`` with a worse epoch (the other way round it
    held the state of the epoch before, and a resumed run could overwrite a better
    ``best.ckpt``, so that ``test_after_fit`` tested another model than the uninterrupted run).
    """
    return [BestCheckpoint(dirpath), LastCheckpoint(dirpath)]


def checkpoint_file(path: Union[str, Path]) -> Path:
    """The checkpoint a path names: a ``.ckpt`` file, or a run directory (``best.ckpt``, else
    ``last.ckpt``, in its ``checkpoints/``).

    Raises:
        FileNotFoundError: naming what was looked for.
    """
    path = Path(path)
    if path.is_file():
        return path
    if path.is_dir():
        folder = path / "checkpoints" if (path / "checkpoints").is_dir() else path
        for name in (BEST, LAST):
            candidate = folder / f"{name}.ckpt"
            if candidate.is_file():
                return candidate
        raise FileNotFoundError(
            f"no checkpoint in {path}: expected {folder / 'best.ckpt'} or {folder / 'last.ckpt'} "
            "(written by `structssl fit --trainer.default_root_dir RUN_DIR`)"
        )
    raise FileNotFoundError(f"no such checkpoint file or run directory: {path}")
