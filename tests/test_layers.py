"""The core imports only torch and the standard library (DESIGN.md section 1)."""

from __future__ import annotations

import subprocess
import sys

CORE = ["structssl.semirings", "structssl.structures", "structssl.losses", "structssl.scorers",
        "structssl.data"]


def test_core_imports_with_lightning_and_torchmetrics_blocked() -> None:
    code = (
        "import sys\n"
        "for name in ('lightning', 'pytorch_lightning', 'torchmetrics', 'jsonargparse'):\n"
        "    sys.modules[name] = None\n"
        + "".join(f"import {m}\n" for m in CORE)
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
