"""Checkpoints of a run: ``last.ckpt`` always, ``best.ckpt`` on the dev metric when there is a dev set.

:class:`RunCheckpoint` is the ``ModelCheckpoint`` the ``structssl`` CLI adds to every ``fit``
(unless the config turns checkpointing off or names its own ``ModelCheckpoint``). Its files
have fixed names in ``<default_root_dir>/checkpoints/`` (no version counter), so a script can
name them: ``structssl predict --model RUN_DIR`` reads ``best.ckpt``, else ``last.ckpt``.

The dev metric is the procedure's :meth:`~structssl.training.modules.StructuredModule.monitor`
(``val/span_f1`` for BIO tagging, ``val/token_accuracy`` for other sequences, ...), higher is
better; it is chosen at setup, when the data module's dev split is known. Without dev
examples only ``last.ckpt`` is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Union

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint

__all__ = ["RunCheckpoint", "checkpoint_file"]

BEST, LAST = "best", "last"


class RunCheckpoint(ModelCheckpoint):
    """``last.ckpt`` every epoch and ``best.ckpt`` on the dev metric (see the module docstring).

    Args:
        dirpath: where the files go (the CLI passes ``<default_root_dir>/checkpoints``).
    """

    def __init__(self, dirpath: Union[str, Path]) -> None:
        super().__init__(
            dirpath=dirpath, filename=BEST, monitor=None, mode="max", save_last=True,
            save_top_k=1, enable_version_counter=False,
        )

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        dm = getattr(trainer, "datamodule", None)
        splits = getattr(dm, "splits", None) if dm is not None else None
        has_dev = bool(splits and splits.get("dev"))
        monitor = getattr(pl_module, "monitor", None)
        if has_dev and callable(monitor):
            self.monitor = monitor()
        else:  # no dev metric to select on: only last.ckpt
            self.monitor = None
            self.save_top_k = 0
        super().setup(trainer, pl_module, stage)


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
