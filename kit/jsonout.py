"""`--json` output: one JSON document on stdout, tagged with its schema, for scripts.

Commands build the whole document before printing it, so a command that fails prints nothing on
stdout (its one-line error goes to stderr) and a script never parses half an answer.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def emit(schema: str, document: dict[str, Any]) -> None:
    """Print ``{"schema": schema, **document}``; allow_nan=False keeps it strict JSON."""
    text = json.dumps({"schema": schema, **document}, indent=2, allow_nan=False, default=str)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


class JsonFlag(argparse._StoreTrueAction):
    """--json, knowing the schema of the document its command prints (for the docs and tests)."""

    def __init__(self, *args: Any, schema: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.schema = schema


def add_json(parser: argparse.ArgumentParser, schema: str) -> None:
    """The one way a command takes --json: the flag, and the schema name its document carries."""
    parser.add_argument(
        "--json",
        action=JsonFlag,
        schema=schema,
        help=f"print one JSON document (schema {schema}) on stdout instead of text",
    )
