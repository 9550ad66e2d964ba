"""One error type for what a user can fix; the CLI prints it as one line and exits 1
(EXIT_ERROR).
"""

from __future__ import annotations

FIX = "; fix: "  # how the one line joins what went wrong and what to do about it


class KitError(Exception):
    """A user-facing error: ``what`` went wrong, ``where`` (a file, file:line or field) and the
    ``fix``. A message given as one string "WHAT; fix: FIX" is read into the same parts."""

    def __init__(self, what: str, *, fix: str | None = None, where: str | None = None):
        if fix is None and FIX in what:
            what, fix = what.split(FIX, 1)
        self.what, self.fix, self.where = what, fix, where
        super().__init__(self.line())

    def line(self) -> str:
        """The one line the CLI prints after "kit: error: "."""
        head = f"{self.where}: {self.what}" if self.where else self.what
        return f"{head}{FIX}{self.fix}" if self.fix else head

    def __str__(self) -> str:
        return self.line()
