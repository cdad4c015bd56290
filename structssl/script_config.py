"""``--config`` YAML files for the argparse scripts (``python -m structssl.regression`` and
``python -m structssl.clustering``): the file's values become the parser's defaults, and flags
given on the command line override them."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Optional, Sequence

__all__ = ["config_parser", "parse_with_config", "write_summary"]


def config_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """An argument parser with the ``--config`` option that :func:`parse_with_config` reads."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--config", type=Path, default=None,
                        help="YAML file of defaults (keys: the long flag names, '_' for '-')")
    return parser


def write_summary(path: Path, args: argparse.Namespace, data: str, results: dict[str, Any]) -> None:
    """Write ``{"options": args, "data": data, "results": results}`` as JSON to ``path`` (paths
    in the options as strings), creating its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    opts = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    content = {"options": opts, "data": data, "results": results}
    path.write_text(json.dumps(content, indent=1) + "\n")


def parse_with_config(parser: argparse.ArgumentParser,
                       argv: Optional[Sequence[str]]) -> argparse.Namespace:
    """Parse ``argv`` with a ``--config`` YAML's values as defaults, each converted by its
    flag's ``type`` and checked against its ``choices`` like a flag value.

    The parser must have a ``--config`` option of type :class:`pathlib.Path`. A missing file,
    a file that is not a mapping, an unknown option, a bad value or a value outside the
    choices exit with the parser's usage error naming the file and the option.
    """
    first, _ = parser.parse_known_args(argv)
    if first.config is not None:
        import yaml

        if not first.config.is_file():
            parser.error(f"--config: no such file: {first.config}")
        content = yaml.safe_load(first.config.read_text()) or {}
        if not isinstance(content, dict):
            parser.error(f"--config: {first.config} must hold a mapping of options")
        actions = {a.dest: a for a in parser._actions if a.dest not in ("help", "config")}
        unknown = sorted(k for k in content if k.replace("-", "_") not in actions)
        if unknown:
            parser.error(f"--config: unknown option(s) {unknown} in {first.config}")
        defaults = {}
        for key, value in content.items():
            action = actions[key.replace("-", "_")]
            many = action.nargs in ("+", "*")
            values = value if many and isinstance(value, list) else [value]
            if many and not isinstance(value, list):
                parser.error(f"--config: {key} must be a list in {first.config}")
            try:
                values = [v if v is None or action.type is None else action.type(v) for v in values]
            except (TypeError, ValueError):
                parser.error(f"--config: bad value for {key} in {first.config}: {value!r}")
            for v in values:
                if action.choices is not None and v not in action.choices:
                    parser.error(f"--config: {key} must be one of {list(action.choices)}; "
                                 f"got {v!r} in {first.config}")
            defaults[action.dest] = values if many else values[0]
        parser.set_defaults(**defaults)
    return parser.parse_args(argv)
