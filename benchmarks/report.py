"""Regenerate the result tables of ``benchmarks/README.md`` from ``benchmarks/results/*.json``.

    python benchmarks/report.py

Only the text between ``<!-- tables:begin -->`` and ``<!-- tables:end -->`` is rewritten; the
rest of the README (targets, analysis) is written by hand. Quick-mode files are skipped.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, markdown_table  # noqa: E402

README = Path(__file__).resolve().parent / "README.md"
BEGIN, END = "<!-- tables:begin -->", "<!-- tables:end -->"


def render() -> str:
    parts = []
    for path in sorted(RESULTS.glob("*.json")):
        data = json.loads(path.read_text())
        head, records = data["header"], data["records"]
        if head.get("mode") == "quick":
            continue
        device = head.get("device_name", head["device"])
        parts.append(
            f"### `{path.name}`\n\n{device}, torch {head['torch']}, {head['torch_threads']} threads, "
            f"commit {head['git_commit']}, {head['date']}\n"
        )
        for metric in dict.fromkeys(r["metric"] for r in records):
            parts.append(markdown_table(records, metric) + "\n")
    return "\n".join(parts)


def main() -> None:
    text = README.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{README} lacks the {BEGIN} / {END} markers")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    README.write_text(f"{head}{BEGIN}\n{render()}\n{END}{tail}")
    print(f"wrote {README}")


if __name__ == "__main__":
    main()
