"""The notebooks run: their code cells execute in order, in one namespace, in smoke mode.

No jupyter dependency: the ``.ipynb`` JSON is read directly, ``STRUCTSSL_SMOKE=1`` makes each
notebook tiny and matplotlib uses the non-interactive Agg backend (``plt.show`` is a no-op).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")
matplotlib = pytest.importorskip("matplotlib")

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def _source(cell: dict[str, Any]) -> str:
    source = cell["source"]
    return source if isinstance(source, str) else "".join(source)


def test_the_quickstart_notebook_is_there() -> None:
    assert NOTEBOOK_DIR / "01_quickstart.ipynb" in NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_valid_nbformat4(path: Path) -> None:
    nb = _load(path)
    assert nb["nbformat"] == 4 and isinstance(nb["metadata"], dict)
    assert nb["cells"], "a notebook needs cells"
    for cell in nb["cells"]:
        assert cell["cell_type"] in ("markdown", "code", "raw")
        assert isinstance(cell["metadata"], dict)
        assert isinstance(cell["source"], (str, list))
        if cell["cell_type"] == "code":
            assert isinstance(cell["outputs"], list) and "execution_count" in cell


@pytest.mark.filterwarnings(
    r"ignore:.*isinstance\(treespec, LeafSpec\)` is deprecated.*:FutureWarning"
)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_in_smoke_mode(
    path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import warnings

    import torch

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.setenv("STRUCTSSL_SMOKE", "1")
    monkeypatch.chdir(tmp_path)  # anything a notebook writes lands here
    threads = torch.get_num_threads()
    namespace: dict[str, Any] = {"__name__": "__main__"}
    try:
        with warnings.catch_warnings():  # a notebook's own warning filters stay inside it
            for i, cell in enumerate(_load(path)["cells"]):
                if cell["cell_type"] != "code":
                    continue
                code = compile(_source(cell), f"{path.name}[cell {i}]", "exec")
                exec(code, namespace)  # noqa: S102 - executing our own notebook
    finally:
        plt.close("all")
        torch.set_num_threads(threads)
    if path.stem == "01_quickstart":
        assert namespace["SMOKE"] is True
        errors = namespace["errors"]
        assert set(errors) == {"supervised", "transductive", "cotraining"}
        for runs in errors.values():
            assert len(runs) == len(namespace["LABELED"])
            assert all(0.0 <= e <= 1.0 for r in runs for e in r)
