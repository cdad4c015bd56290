"""Run a test script in a child process group (the 2-process DDP tests): one torch thread per
process, the repository on ``PYTHONPATH``, killed with its children when it hangs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


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
