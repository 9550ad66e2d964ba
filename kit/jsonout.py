"""`--json` output: one JSON document on stdout, tagged with its schema, for scripts.

Commands build the whole document before printing it, so a command that fails prints nothing on
stdout (its one-line error goes to stderr) and a script never parses half an answer.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def emit(schema: str, document: dict[str, Any]) -> None:
    """Print ``{"schema": schema, **document}``; allow_nan=False keeps it strict JSON."""
    text = json.dumps({"schema": schema, **document}, indent=2, allow_nan=False, default=str)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def add_json_flag(parser, schema: str) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help=f"print one JSON document (schema {schema}) on stdout instead of text",
    )
