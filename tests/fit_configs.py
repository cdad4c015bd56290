"""Write the `structssl fit` YAML of a constrained procedure on CoNLL-style files (the tests
of label switching and CCCP through the command line)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import yaml

QUIET = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False,
         "enable_model_summary": False}


def constrained_fit_config(
    path: Path,
    module: str,
    constraints: list[tuple[str, dict[str, Any]]],
    data: dict[str, Any],
    trainer: Optional[dict[str, Any]] = None,
    **init_args: Any,
) -> Path:
    """A linear-chain CRF ``module`` (class path) with a ``ConstraintSet`` of ``constraints``
    (``(class name in structssl.constraints, init args)``), the other ``init_args``, on
    ``CoNLLDataModule(**data)``; ``trainer`` (default: quiet, no logger or checkpoints)."""
    config = {
        "trainer": QUIET if trainer is None else trainer,
        "model": {"class_path": module, "init_args": {
            "structure": {"class_path": "structssl.structures.LinearChain"},
            "scorer": {"class_path": "structssl.scorers.LinearChainScorer"},
            "constraints": {"class_path": "structssl.constraints.ConstraintSet", "init_args": {
                "constraints": [{"class_path": f"structssl.constraints.{name}", "init_args": args}
                                for name, args in constraints]}},
            **init_args,
        }},
        "data": {"class_path": "structssl.data.CoNLLDataModule", "init_args": data},
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
