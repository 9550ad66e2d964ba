"""Two unpacked trees compared: the remote installer's unpack and `kit image convert`'s directory,
as tests/transfer/unpack_driver.py describes them (path -> kind, mode, link text or bytes' hash,
first name of a hard-linked group)."""

from __future__ import annotations

import posixpath


def expected_mode(mode: int, kind: str, umask: int) -> int:
    """What the unpack gives an entry convert gives MODE: tar's for a user (umask), owner rwx/rw,
    and o+w only on a sticky directory."""
    keep, own = (0o1777, 0o700) if kind == "d" else (0o777, 0o600)
    mode = (mode & keep & ~umask) | own
    if mode & 0o002 and not (kind == "d" and mode & 0o1000):
        mode &= ~0o002
    return mode


def as_converted(rel: str, target: str) -> str:
    """The unpack keeps a symlink's text; convert makes an absolute one relative."""
    if not target.startswith("/"):
        return target
    absolute = posixpath.normpath("/" + target.lstrip("/"))
    return posixpath.relpath(absolute, "/" + posixpath.dirname(rel))


def assert_same_tree(unpacked: dict, converted: dict, made: set[str], umask: int) -> None:
    """UNPACKED has what CONVERTED has, but for what convert adds (mount points, /ch files)."""
    added = set(converted) - set(unpacked)
    assert added <= made | {"ch", "ch/environment", "ch/metadata.json"}, sorted(added - made)
    for rel, (kind, mode, what, first) in sorted(unpacked.items()):
        ckind, cmode, cwhat, cfirst = converted[rel]
        assert kind == ckind, (rel, kind, ckind)
        if kind == "l":
            assert as_converted(rel, what) == cwhat, (rel, what, cwhat)
            continue
        assert oct(mode) == oct(expected_mode(cmode, kind, umask)), (rel, kind, oct(cmode))
        assert (what, first) == (cwhat, cfirst), rel  # bytes, and which names share them
