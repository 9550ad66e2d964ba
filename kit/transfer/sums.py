"""`SHA256SUMS` in the format of `sha256sum -c`: what a site checks with stock coreutils alone.

Only plain names are written or read (kit.transfer.verify.NAME): sha256sum escapes a name with a
newline or backslash (a leading `\\` on the line), and such a name is refused rather than escaped.
"""

from __future__ import annotations

import re
from pathlib import Path

from kit.errors import KitError
from kit.transfer import verify as checker

SUMS = "SHA256SUMS"
SUMS_MAX = 1 << 20  # bytes: a wheelhouse lists tens of files, a larger list is not one we made
_LINE = re.compile(r"([0-9a-f]{64}) [ *](" + checker.NAME.pattern + ")")


def format_sums(entries: list[tuple[str, str]]) -> str:
    """`<sha256>  <name>` lines for [(sha256, name)]; a name sha256sum would escape is refused."""
    for _, name in entries:
        if not checker.NAME.fullmatch(name):
            raise KitError(
                f"{name!r}: not a name for a bundle, "
                "which holds only letters, digits and . _ + - (up to four levels, none starting with a dot)",
                fix="rename the file",
            )
    return "".join(f"{sha}  {name}\n" for sha, name in entries)


def read_sums(path: Path, fix: str) -> list[tuple[str, str]]:
    """[(sha256, name)] from a SHA256SUMS file; any other line is an error naming it and `fix`."""
    try:
        found = checker.open_file(str(path))
        if found is None:
            raise ValueError("no such file")
        with open(found[0], "rb") as fh:
            data = fh.read(SUMS_MAX + 1)
    except (OSError, ValueError) as exc:
        raise KitError(
            f"{path}: cannot read it ({getattr(exc, 'strerror', None) or exc})", fix=fix
        ) from None
    if len(data) > SUMS_MAX:
        raise KitError(f"{path}: larger than {SUMS_MAX} bytes, not a list of sums", fix=fix)
    entries = []
    for number, line in enumerate(data.decode("ascii", "replace").split("\n"), 1):
        if not line and number > data.count(b"\n"):
            break  # after the last newline
        found = _LINE.fullmatch(line)
        if not found:
            raise KitError(
                f"{path} line {number}: expected '<sha256>  <name>' with a plain relative name, "
                f"got {line[:80]!r}",
                fix=fix,
            )
        entries.append((found.group(1), found.group(2)))
    names = [name for _, name in entries]
    if len(set(names)) != len(names) or SUMS in names:
        raise KitError(f"{path}: a name is listed twice or lists {SUMS} itself", fix=fix)
    return entries
