"""Regenerate the result tables of ``benchmarks/README.md`` from ``benchmarks/results/*.json``.

    python benchmarks/report.py

Only the text between ``<!-- tables:begin -->`` and ``<!-- tables:end -->`` is rewritten; the
rest of the README (targets, analysis) is written by hand. Quick-mode files are skipped. A cell
that reproduces a published number shows it in parentheses, and the first table counts, per
file, the cells with a paper value and those within 2 points of it or better; the second lists
every cell more than 2 points short.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, markdown_table, paper_value, shortfall, within_paper  # noqa: E402

README = Path(__file__).resolve().parent / "README.md"
BEGIN, END = "<!-- tables:begin -->", "<!-- tables:end -->"


def reproduction_summary(files: list[tuple[str, dict[str, Any]]]) -> str:
    """Per results file: the cells that carry a published number (``paper_value``) and how
    many are within 2 points of it or better; the issue's count of reproduced cells."""
    lines = ["| results file | protocol | cells with a paper value | within 2 points or better |",
             "|---|---|---|---|"]
    total = close = 0
    for name, data in files:
        checks = [within_paper(r) for r in data["records"]]
        cells = [c for c in checks if c is not None]
        if not cells:
            continue
        total, close = total + len(cells), close + sum(cells)
        lines.append(f"| `{name}` | {data['header'].get('mode', '')} | {len(cells)} | {sum(cells)} |")
    lines.append(f"| all | | {total} | {close} |")
    return "### Reproduced cells beside the papers\n\n" + "\n".join(lines) + "\n"


def shortfalls(files: list[tuple[str, dict[str, Any]]]) -> str:
    """Every cell more than 2 points short of its paper value, file by file, largest
    shortfall first (why each falls short: the sections above)."""
    rows = []
    for name, data in files:
        for r in data["records"]:
            if within_paper(r) is False:
                gap = shortfall(r)
                assert gap is not None
                rows.append((name, -gap, r["task"], r["method"], r["metric"], r.get("value"),
                              paper_value(r)))
    lines = ["| results file | task | method | metric | ours | paper | short by |",
             "|---|---|---|---|---|---|---|"]
    for name, neg_gap, task, method, metric, value, paper in sorted(rows):
        lines.append(f"| `{name}` | {task} | {method} | {metric} | {_number(value)} | "
                     f"{_number(paper)} | {-neg_gap:.1f} |")
    return ("### Cells more than 2 points short of the paper\n\n" + "\n".join(lines) + "\n")


def _number(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, (int, float)) else "–"


def render() -> str:
    files = []
    for path in sorted(RESULTS.glob("*.json")):
        data = json.loads(path.read_text())
        if data["header"].get("mode") != "quick":
            files.append((path.name, data))
    parts = [reproduction_summary(files), shortfalls(files)]
    for name, data in files:
        head, records = data["header"], data["records"]
        device = head.get("device_name", head["device"])
        parts.append(
            f"### `{name}`\n\n{device}, torch {head['torch']}, {head['torch_threads']} threads, "
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
