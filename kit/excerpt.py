"""Values quoted in messages and printed by commands: one line, bounded, however large or hostile.

An error message must stay one line naming the file, the field and the fix; a value a user (or
an attacker) wrote may be megabytes long, deeply nested, or hold newlines, terminal escapes
(ESC[2J), bidi overrides or rich markup (`[/]`). reprlib bounds the work before anything is
printed (repr escapes line breaks); the result is cut to `limit`. `printable` is the one form
for any value a command prints that the kit did not write, `plain_console` the one console.
"""

from __future__ import annotations

import builtins
import os
import reprlib
import unicodedata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # rich is imported when something is printed, not with every error message
    from rich.console import Console
    from rich.text import Text

LIMIT = 80
_BREAKS = {"Cc", "Zl", "Zp"}  # control characters and the line/paragraph separators


class _Repr(reprlib.Repr):
    def repr_int(self, x: int, level: int) -> str:
        # repr() of an int over 4300 digits raises; the magnitude is all a message needs
        return builtins.repr(x) if x.bit_length() <= 128 else f"<{x.bit_length()}-bit integer>"


_REPR = _Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, LIMIT, LIMIT, 40
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = _REPR.maxfrozenset = 6


def shown(value: Any, limit: int = LIMIT) -> str:
    """repr(value) in one line of at most ``limit`` characters."""
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _escaped(char: str) -> str:
    """``char`` as a terminal shows it harmlessly: itself, or its escape when it is a control,
    a line break, a bidi override or any other character a terminal would act on or hide."""
    return char if char.isprintable() or char == " " else repr(char)[1:-1]


def control_character(text: str) -> str | None:
    """The first control character or line break in ``text``, escaped, or None: such a value would
    break a batch script, a log line or an error message into pieces."""
    for char in text:
        if unicodedata.category(char) in _BREAKS:
            return repr(char)[1:-1]
    return None


def clipped(text: str, limit: int = LIMIT) -> str:
    """Free text for an error message, unquoted: ``printable`` at a message's length."""
    return printable(text, limit)


def one_line(text: object, limit: int = 300, tail: bool = False) -> str:
    """A tool's or library's message as one bounded line: whitespace runs (line breaks too) become
    one space; ``tail`` keeps the end, where a tool's stderr says why it failed."""
    text = " ".join(str(text).split())
    if len(text) > limit:
        text = "..." + text[-(limit - 3) :] if tail else text[: limit - 3] + "..."
    return "".join(_escaped(c) for c in text)


def printable(text: object, limit: int = 200) -> str:
    """A value read from a file, made safe to print: controls (ESC, BEL, CR, NUL), line breaks
    and bidi overrides escaped, cut to ``limit`` characters; the work is bounded by ``limit``,
    not by the value. Not markup-safe: print it with ``markup=False`` or as ``printable_text``."""
    if isinstance(text, str):
        value = text
    elif isinstance(text, os.PathLike):
        value = os.fsdecode(text)
    else:  # a number, list or mapping from a document: reprlib bounds its size
        value = _REPR.repr(text)
    value = "".join(_escaped(c) for c in value[: limit + 1])
    if len(value) <= limit:
        return value
    return value[: limit - 3] + "..." if limit > 3 else value[:limit]


def printable_lines(text: str, lines: int = 40, limit: int = 400) -> str:
    """A log's or a tool's output to print: its last ``lines`` lines (where it says why it
    failed), each ``printable`` and cut to ``limit``; the work is bounded by the two."""
    tail = text[-lines * (limit + 1) :].splitlines()[-lines:]
    return "\n".join(printable(line, limit) for line in tail)


def printable_text(text: object, limit: int = 200, style: str = "") -> Text:
    """``printable`` as rich Text: a table cell or console.print argument that rich never reads
    as markup (a plain str cell would be parsed, and `[/]` crashes it)."""
    from rich.text import Text

    return Text(printable(text, limit), style=style)


def plain_console(stderr: bool = False) -> Console:
    """A rich console that prints every str as the text it is: no markup (a value's `[/]` would
    end the command), no highlighting, no :emoji: codes; colour comes only from Text styles."""
    from rich.console import Console

    return Console(stderr=stderr, markup=False, highlight=False, emoji=False)
