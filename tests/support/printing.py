"""Hostile text for the printing tests, and the checks every command's output must pass: values
holding rich markup, terminal controls, bidi overrides and great length, printed as escaped,
bounded text by commands run in-process (no terminal, so rich adds no colour codes)."""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable
from unittest import mock

from hypothesis import strategies as st

from kit.excerpt import printable

PIECES = [
    "[/]",
    "[bold]",
    "[link=https://x.example/]",
    "[red]x[/red]",
    "\x1b[2J",
    "\x1b]8;;https://x.example/\x07",
    "\x07",
    "\r",
    "\x00",
    "\x9b",
    "\u202e",
    "\u2066",
    "\n",
    "\t",
    ":smile:",
    "[",
    "]",
    "\\",
    "a",
    "é",
    " ",
]
HOSTILE = st.lists(st.sampled_from(PIECES), min_size=1, max_size=12).map("".join)
MARK = "v4lue "  # every planted value starts with it: where the value shows, so does its start
MEGABYTE = 1 << 20
MAX_OUTPUT = 64 * 1024


def planted(text: str, long: bool = False) -> str:
    """MARK + text, and with ``long`` a megabyte-long word after them (rich's slowest case)."""
    return MARK + text + ("x" * MEGABYTE if long else "")


def run(call: Callable[[], int]) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of ``call`` (e.g. kit.cli.main(argv)), on a wide console:
    a bounded value prints on one line, so its start can be looked for."""
    out, err = io.StringIO(), io.StringIO()
    with (
        mock.patch.dict(os.environ, {"COLUMNS": "4000"}),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        code = call()
    return code, out.getvalue(), err.getvalue()


def raw_controls(text: str) -> list[str]:
    """The characters of ``text`` a terminal would act on or hide, line feeds apart."""
    return sorted({c for c in text if c != "\n" and not (c.isprintable() or c == " ")})


def assert_printed_safely(code: int, out: str, err: str, value: str, shown: bool = True) -> None:
    """Exit 0 or 1 (never a crash), no raw control in either stream, each under MAX_OUTPUT, and
    where the command succeeded and ``shown``, the value's escaped start in its output."""
    assert code in (0, 1), (code, err[-2000:])
    for stream in (out, err):
        assert not raw_controls(stream), (raw_controls(stream), stream[:2000])
        assert len(stream) < MAX_OUTPUT, len(stream)
    if code == 0 and shown:  # a table's title wraps at the table's width: spaces are not compared
        assert words(printable(value)[:24]) in words(out + err), (value[:24], out[:3000])


def words(text: str) -> str:
    """``text`` without its whitespace: what is compared where rich may wrap a line."""
    return "".join(text.split())
