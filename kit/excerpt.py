"""Values quoted in error messages: one line, bounded, however large or hostile the value is.

An error message must stay one line naming the file, the field and the fix; a value a user (or
an attacker) wrote may be megabytes long, deeply nested, or hold newlines. reprlib bounds the
work before anything is printed (repr escapes line breaks); the result is cut to `limit`.
"""

from __future__ import annotations

import builtins
import reprlib
import unicodedata
from typing import Any

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


def control_character(text: str) -> str | None:
    """The first control character or line break in ``text``, escaped, or None: such a value would
    break a batch script, a log line or an error message into pieces."""
    for char in text:
        if unicodedata.category(char) in _BREAKS:
            return repr(char)[1:-1]
    return None


def clipped(text: str, limit: int = LIMIT) -> str:
    """Free text for a message, unquoted: line breaks escaped, cut to ``limit`` characters."""
    text = "".join(
        repr(c)[1:-1] if unicodedata.category(c) in _BREAKS else c for c in text[: limit + 1]
    )
    return text if len(text) <= limit else text[: limit - 3] + "..."


def one_line(text: object, limit: int = 300, tail: bool = False) -> str:
    """A tool's or library's message as one bounded line: whitespace runs (line breaks too) become
    one space; ``tail`` keeps the end, where a tool's stderr says why it failed."""
    text = " ".join(str(text).split())
    if len(text) > limit:
        text = "..." + text[-(limit - 3) :] if tail else text[: limit - 3] + "..."
    return "".join(repr(c)[1:-1] if unicodedata.category(c) in _BREAKS else c for c in text)
