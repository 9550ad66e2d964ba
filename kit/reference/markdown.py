"""Markdown the reference pages share: the note that a page is generated, and tables whose long
cells wrap onto continuation rows, so that no line of a page passes MAX_LINE characters."""

from __future__ import annotations

import itertools
import re
import textwrap
from collections.abc import Sequence

MAX_LINE = 200
COMMAND = "python -m kit.reference"
GENERATED = (
    f"Generated from the code by `{COMMAND}` (run it after changing what this page lists); "
    "do not edit by hand."
)
_NBSP = "\u00a0"  # holds a code span's words together while a cell is wrapped


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], widths: Sequence[int] = ()) -> str:
    """A markdown table; a cell longer than its column's width (``widths``, else an even share of
    MAX_LINE) goes on over the rows below, the other cells of those rows empty."""
    share = (MAX_LINE - 4 * len(headers)) // len(headers)
    limits = list(widths) or [share] * len(headers)
    lines = [_row(headers), _row(["---"] * len(headers))]
    for row in rows:
        cells = [_wrap(cell, limit) for cell, limit in zip(row, limits)]
        for parts in itertools.zip_longest(*cells, fillvalue=""):
            lines.append(_row(parts))
    return "\n".join(lines) + "\n"


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def paragraph(text: str, width: int = 100) -> str:
    """Prose wrapped at ``width``."""
    return "\n".join(_wrap(text, width, cell=False))


def _wrap(text: str, width: int, cell: bool = True) -> list[str]:
    """The lines of a cell (pipes escaped) or paragraph: newlines as spaces, never broken inside a
    `code span`."""
    flat = " ".join(text.split())
    flat = flat.replace("|", "\\|") if cell else flat
    held = re.sub(r"`[^`]*`", lambda m: m.group(0).replace(" ", _NBSP), flat)
    lines = textwrap.wrap(held, width, break_long_words=False, break_on_hyphens=False) or [""]
    return [line.replace(_NBSP, " ") for line in lines]
