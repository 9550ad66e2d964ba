"""Files the kit executes, or has others execute, are its own, and so are the directories they are
kept in.

A script found at the kit's path with the right bytes is not therefore the kit's: a symlink to
another user's file, a file another user can rewrite, or one in a directory another user can
rename entries of, runs that user's code the next time a rank starts. The kit's own is a regular
file, not a link, owned by the user running the kit and writable by nobody else, in directories
that are the user's and writable by nobody else. A file is opened without following a link and
without blocking (a FIFO there must not hang the kit), judged by fstat of what was opened, and read
up to a bound. Anything else is refused in one line naming the path and the fix.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from kit.errors import KitError
from kit.readfile import kind_name

OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def _owner_problem(st: os.stat_result) -> str | None:
    """Why a file or directory with this stat is not the user's to trust, or None."""
    if st.st_uid != os.geteuid():
        return f"belongs to uid {st.st_uid}, not to you (uid {os.geteuid()})"
    if st.st_mode & OTHERS_WRITE:
        return f"is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def check_own_dir(path: Path, what: str) -> None:
    """PATH is a directory (not a link) of the user's that nobody else can write to;
    FileNotFoundError passes through."""
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise KitError(
            f"is {kind_name(st.st_mode)}, not the directory the kit keeps {what} in",
            where=str(path),
            fix="move it aside (the kit makes the directory again)",
        )
    problem = _owner_problem(st)
    if problem:
        raise KitError(
            f"{problem}; the kit keeps {what} only in a directory that is yours alone",
            where=str(path),
            fix=f"chmod go-w {path} if it is yours, else move it aside",
        )


def check_above(path: Path, what: str) -> None:
    """PATH and every directory above it, as written and as links resolve it, belong to root or
    the user and are writable by nobody else unless sticky (/tmp): else someone else could rename
    what is under them and put their own files at the kit's names."""
    path = Path(os.path.abspath(path))
    real = Path(os.path.realpath(path))
    for parent in (path, *path.parents, real, *real.parents):
        try:
            st = os.stat(parent)
        except FileNotFoundError:
            continue
        if st.st_uid not in (0, os.geteuid()):
            why = f"belongs to uid {st.st_uid}, neither root nor you"
        elif st.st_mode & OTHERS_WRITE and not st.st_mode & stat.S_ISVTX:
            why = f"is writable by others (mode {stat.S_IMODE(st.st_mode):04o}) and not sticky"
        else:
            continue
        raise KitError(
            f"{why}, so others could replace the kit's {what} under it",
            where=str(parent),
            fix=f"chmod go-w {parent}, or keep the kit's files elsewhere (XDG_CACHE_HOME)",
        )


def own_dirs(path: Path, base: Path, what: str) -> Path:
    """PATH, a directory under BASE: BASE made where absent and checked with everything above it
    (check_above), every directory below it down to PATH made (mode 0700) where absent and checked
    to be the user's alone (check_own_dir)."""
    base = Path(os.path.abspath(base))
    os.makedirs(base, 0o700, exist_ok=True)
    check_above(base, what)
    here = base
    for part in Path(os.path.abspath(path)).relative_to(base).parts:
        here = here / part
        with contextlib.suppress(FileExistsError):
            os.mkdir(here, 0o700)  # never through a link: mkdir does not follow one at its name
        check_own_dir(here, what)
    return here


def open_own_regular(
    path: Path, limit: int, what: str, *, executable: bool = False
) -> bytes | None:
    """At most ``limit`` + 1 bytes of PATH if it is the kit's own (a regular file, not a link, the
    user's, writable by nobody else; ``executable``: by the user); None if nothing is there;
    KitError naming what is there instead. A device is never opened (lstat first); a FIFO
    swapped in meanwhile does not block the open (O_NONBLOCK) and is refused by fstat.
    The caller compares the bytes with its own."""
    fix = "move it aside (the kit writes its own there)"
    try:
        mode = os.lstat(path).st_mode
        if not stat.S_ISREG(mode):
            raise KitError(f"is {kind_name(mode)}, not the kit's {what}", where=str(path), fix=fix)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        kind = "a symlink" if exc.errno == errno.ELOOP else f"unreadable ({exc.strerror})"
        raise KitError(f"is {kind}, not the kit's {what}", where=str(path), fix=fix) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise KitError(
                f"is {kind_name(st.st_mode)}, not the kit's {what}", where=str(path), fix=fix
            )
        problem = _owner_problem(st)
        if problem:
            raise KitError(f"{problem}: not the kit's {what}", where=str(path), fix=fix)
        if executable and not st.st_mode & stat.S_IXUSR:
            raise KitError(f"is not executable: not the kit's {what}", where=str(path), fix=fix)
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
