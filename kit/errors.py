"""One error type for what a user can fix; the CLI prints it as one line and exits 1
(EXIT_ERROR), or with --json as one JSON object on stderr.
"""

from __future__ import annotations

import json

FIX = "; fix: "  # how the one line joins what went wrong and what to do about it


def error_line(what: str, *, fix: str | None = None, where: str | None = None) -> str:
    """The one line of an error: "WHERE: WHAT; fix: FIX". Also for a problem a report lists
    rather than raises (a pair's or a check's problems), so every fix reads the same."""
    head = f"{where}: {what}" if where else what
    return f"{head}{FIX}{fix}" if fix else head


class KitError(Exception):
    """A user-facing error: ``what`` went wrong, ``where`` (a file, file:line or field) and the
    ``fix`` (an empty one is none), each given apart: a script reads them from --json."""

    def __init__(self, what: str, *, fix: str | None = None, where: str | None = None):
        self.what, self.fix, self.where = what, fix or None, where
        super().__init__(self.line())

    def line(self) -> str:
        """The one line the CLI prints after "kit: error: "."""
        return error_line(self.what, fix=self.fix, where=self.where)

    def document(self, exit_code: int) -> dict[str, dict[str, str | int | None]]:
        """What a command run with --json prints on stderr: the parts (``where`` and ``fix``
        null when the error has none), the whole line, and the command's exit code."""
        return {
            "error": {
                "what": self.what,
                "where": self.where,
                "fix": self.fix,
                "message": self.line(),
                "exit": exit_code,
            }
        }

    def json_line(self, exit_code: int) -> str:
        """document() as one line of strict JSON, ASCII only (a path's bytes that are not UTF-8
        come out as \\udcXX escapes), so any locale can print it and a script can parse it."""
        return json.dumps(self.document(exit_code), allow_nan=False, separators=(",", ":"))

    def __str__(self) -> str:
        return self.line()
