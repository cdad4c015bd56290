"""docs/own_model.md: every python block runs as written, in order, in one namespace; the
config of its command-line section trains through ``structssl fit``."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path
from unittest import mock

import pytest
import torch

pytest.importorskip("pytorch_lightning")

pytestmark = [  # raised inside Lightning under recent torch, as in tests/test_own_data.py
    pytest.mark.filterwarnings(
        r"ignore:.*isinstance\(treespec, LeafSpec\)` is deprecated.*:FutureWarning"
    ),
]

DOC = Path(__file__).resolve().parents[1] / "docs" / "own_model.md"


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL)


def test_own_model_doc_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    before = torch.get_num_threads()
    namespace: dict = {"__name__": "own_model"}
    exec(compile("\n".join(_blocks("python")), str(DOC), "exec"), namespace)  # noqa: S102
    torch.set_num_threads(before)
    assert namespace["accuracy"] > 0.8, namespace["accuracy"]  # Gaussian HMM, 20 labeled
    assert namespace["micro_f1"] > 0.8, namespace["micro_f1"]  # the ARFF file's two labels
    assert namespace["codl_accuracy"] > 0.8, namespace["codl_accuracy"]  # CoDL, own constraint
    again, model = namespace["again"], namespace["model"]
    for name, value in model.state_dict().items():
        torch.testing.assert_close(again.state_dict()[name], value, equal_nan=True)


def test_own_model_doc_config_trains_from_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The YAML of the doc, with the doc's classes in ``mymodel.py`` on the path."""
    from structssl.cli import main
    from structssl.predict import load_model

    python = _blocks("python")
    (tmp_path / "mymodel.py").write_text("\n".join(python[:2]), encoding="utf-8")
    (yaml,) = _blocks("yaml")
    (tmp_path / "my.yaml").write_text(textwrap.dedent(yaml), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "mymodel", raising=False)
    with mock.patch("sys.argv", ["structssl"]):
        status = main(["fit", "--config", "my.yaml", "--trainer.max_epochs", "3",
                       "--trainer.default_root_dir", "RUN_DIR",
                       "--trainer.enable_progress_bar", "false"])
    assert status == 0
    model = load_model(tmp_path / "RUN_DIR")
    assert type(model.scorer).__name__ == "MLPChainScorer"
