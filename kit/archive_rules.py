"""The rules a tar member must meet to enter an image, written once for both unpackers.

`kit image convert` (kit.image.layers, kit.tarsafe) imports them; the site's remote installer gets
them inlined into the script it is sent (kit.transfer.assemble), since it runs on a stock
python3 >= 3.6 with the standard library alone. Hence this module's Python 3.6 syntax, its
typing.Dict and no imports but the standard library's.
"""

from typing import Dict, Optional, Union

MAX_PATH = 4095  # bytes of a member name or link target: Linux's PATH_MAX (4096) counts the NUL
MAX_COMPONENT = 255  # bytes of one part of a name (NAME_MAX)
MAX_META = 1 << 20  # bytes of one pax header or GNU long name/link record
MAX_MTIME = 1 << 32  # SquashFS keeps 32-bit unsigned times (until 2106)
# one image's bounds (kit.image.layers.Limits' defaults): members, uncompressed bytes, and the
# decompression-bomb check (uncompressed / stored, once past the floor)
MAX_MEMBERS, MAX_SIZE, MAX_RATIO, RATIO_FLOOR = 2000000, 64 << 30, 100, 1 << 30


class RuleError(ValueError):
    """A member no image may hold. ``rule`` names the rule broken (the caller's fix depends on
    it: a name to change, a layer to rebuild); the message reads after the member's name."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule


def parse_pax(buf: bytes, offset: int) -> Dict[bytes, bytes]:
    """``LEN KEY=VALUE\\n`` records that tile BUF exactly (trailing NUL padding allowed), in one
    linear pass: CPython's own parser takes quadratic time on crafted records (CVE-2024-6232)."""
    records = {}  # type: Dict[bytes, bytes]
    pos, end = 0, len(buf)
    while pos < end:
        if buf[pos] == 0 and buf.count(b"\0", pos) == end - pos:
            break
        space = buf.find(b" ", pos, min(end, pos + 20))
        digits = buf[pos:space] if space > pos else b""
        stop = pos + int(digits) if digits.isdigit() else -1
        equals = buf.find(b"=", space + 1, stop) if stop > pos else -1
        if stop > end or equals <= space + 1 or buf[stop - 1 : stop] != b"\n":
            raise RuleError(
                "pax", "pax header at byte %d: malformed record at offset %d" % (offset, pos)
            )
        records[buf[space + 1 : equals]] = buf[equals + 1 : stop - 1]
        pos = stop
    return records


def member_path(raw: str) -> str:
    """A member's name relative to the image root ('' for the root): UTF-8, no NUL, no '..'
    part, no longer than Linux allows."""
    try:
        encoded = raw.encode("utf-8")
    except UnicodeEncodeError:
        raise RuleError("encoding", "has a name that is not UTF-8") from None
    if "\0" in raw:
        raise RuleError("nul", "has a NUL byte in its name (a forged pax header?)")
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise RuleError("traversal", "has a '..' component (path traversal): the image is unsafe")
    if len(encoded) > MAX_PATH or any(len(p.encode("utf-8")) > MAX_COMPONENT for p in parts):
        raise RuleError(
            "length",
            "has an overlong name (> %d bytes or a component > %d)" % (MAX_PATH, MAX_COMPONENT),
        )
    return "/".join(parts)


def symlink_target_problem(target: str) -> Optional[str]:
    """Why no image can hold a symlink to TARGET, or None (its meaning is the resolver's)."""
    if "\0" in target:
        return "has a target with a NUL byte"
    size = len(target.encode("utf-8", "surrogateescape"))
    if size > MAX_PATH:
        return "has a target of %d bytes (at most %d)" % (size, MAX_PATH)
    return None


def mtime_ok(mtime: Union[int, float]) -> bool:
    """A time SquashFS can keep: 1970 to 2106, a finite number (a NaN fails every comparison)."""
    return isinstance(mtime, (int, float)) and 0 <= mtime < MAX_MTIME
