"""Run a test script in a child process group (the 2-process DDP tests): one torch thread per
process, the repository on ``PYTHONPATH``, killed with its children when it hangs."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: how a script's DDP ranks start: forked from the script, which has imported everything
#: already (a spawned rank imports torch, Lightning and the script again: 4x the time of the
#: test_ddp runs); "spawn" where the platform cannot fork
DDP_START_METHOD = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"


def cpu_ddp_strategy() -> Any:
    """The DDP strategy of the 2-process test scripts: ranks started by
    :data:`DDP_START_METHOD`, gloo, a 120 s collective timeout (a hang fails, not blocks)."""
    from datetime import timedelta

    from pytorch_lightning.strategies import DDPStrategy

    return DDPStrategy(
        start_method=DDP_START_METHOD, process_group_backend="gloo",
        timeout=timedelta(seconds=120),
    )


def run_script(script: Path, *args: str, timeout_s: float) -> subprocess.CompletedProcess:
    """``python script args...``; stdout and stderr together in ``stdout``. A run past
    ``timeout_s`` is killed (its whole process group) and fails the test with its log's tail."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, str(script), *args], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    try:
        stdout, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, _ = proc.communicate()
        pytest.fail(f"{script.name} {' '.join(args)} hung (> {timeout_s} s):\n{stdout[-4000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, "")
