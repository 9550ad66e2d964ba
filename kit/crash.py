"""The last-resort handler: an unexpected exception ends a command with one line, not a traceback.

Expected failures are KitError (or a command's own error types) and are reported where they
happen. Anything else is a bug: the user gets one line naming a file that holds the traceback
to attach to a report; `--debug` (or KIT_DEBUG=1) prints the traceback instead.
"""

from __future__ import annotations

import errno
import os
import select
import sys
import tempfile
import time
import traceback
from pathlib import Path

from kit.cachedir import kit_state
from kit.errors import KitError

EXIT_ERROR = 1  # an expected failure: the message names the file, the field and the fix
EXIT_BUG = 70  # EX_SOFTWARE: an internal error, the traceback is in the named file
EXIT_READER_GONE = 128 + 13  # as a shell reports a command SIGPIPE ended (`kit docs | head`)


def debug_requested(argv: list[str]) -> tuple[bool, list[str]]:
    """`--debug` anywhere before a `--` (removed from argv) or KIT_DEBUG=1 in the environment."""
    end = argv.index("--") if "--" in argv else len(argv)
    head = [a for a in argv[:end] if a != "--debug"]
    found = len(head) != end or os.environ.get("KIT_DEBUG", "") not in ("", "0")
    return found, head + argv[end:]


def _crash_dir() -> Path:
    """$KIT_CRASH_DIR, else the kit's state directory (kit.cachedir)."""
    moved = os.environ.get("KIT_CRASH_DIR", "")
    return Path(moved) if moved else kit_state()


def write_report(prog: str, exc: BaseException) -> Path | None:
    """The traceback in a new file (never replacing one); None if no directory would take it."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for directory in (_crash_dir(), Path(tempfile.gettempdir())):
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(
                prefix=f"{prog}-crash-{stamp}-", suffix=".txt", dir=directory
            )
        except OSError:
            continue
        try:  # argv may hold bytes that are no UTF-8 (surrogate escapes): never fail here
            with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as fh:
                fh.write(f"{prog} {' '.join(sys.argv[1:])}\n\n{text}")
        except OSError:  # a full disk: try the next directory
            continue
        return Path(name)
    return None


def report_bug(prog: str, exc: BaseException, debug: bool) -> int:
    """Print one line (or the traceback with debug) for an unexpected exception; the exit code."""
    if debug:
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
        return EXIT_BUG
    where = write_report(prog, exc)
    summary = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    kept = f"the traceback is in {where}" if where else "no directory would take the traceback"
    print(
        f"{prog}: internal error ({summary}); {kept}; rerun with --debug to print it, "
        f"and please report it",
        file=sys.stderr,
        flush=True,
    )
    return EXIT_BUG


def reader_gone(exc: BaseException) -> bool:
    """Whether ``exc`` is the kit's standard output closed by its reader (a pager quit, ``| head``):
    the command's output is no longer wanted, which is no error. Standard output then goes to
    /dev/null, so that the interpreter's last flush at exit says nothing either."""
    if not isinstance(exc, BrokenPipeError):
        return False
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        gone = any(event & select.POLLERR for _, event in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no standard output at all
        return False
    if gone:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return gone


# What the machine refuses, not what the kit got wrong: a read-only or full output directory, a
# file the user may not read. Each is an expected error (one line, exit 1), not a bug.
_ENVIRONMENT_FIXES = {
    errno.EACCES: (
        "check the permissions of that path and of the directories above it, or choose another path"
    ),
    errno.EPERM: "check the permissions of that path and of the directories above it, or choose another path",
    errno.EROFS: "choose a path on a writable file system",
    errno.ENOSPC: "free space on that file system, or choose another path",
    errno.EDQUOT: "free space within your quota, or choose another path",
    errno.ENAMETOOLONG: "choose a shorter path",
    errno.ENOTDIR: "a part of that path is a file, not a directory: choose another path",
    errno.EISDIR: "that path is a directory: name a file instead",
    errno.EEXIST: "something that is not a directory is at that path: choose another path",
}


def environment_problem(exc: BaseException) -> KitError | None:
    """The one-line error of an OSError the machine raised on a path (permissions, a read-only or
    full file system), or None for anything else, which stays a bug. A rename names its target
    (the path the user gave); a name the kit was creating is shown as the directory it was to go
    in, since that directory is what to fix."""
    if not isinstance(exc, OSError) or exc.errno not in _ENVIRONMENT_FIXES or exc.filename is None:
        return None
    name = exc.filename2 if exc.filename2 is not None else exc.filename
    path = os.fsdecode(name) if isinstance(name, (str, bytes)) else str(name)
    refused = exc.strerror or os.strerror(exc.errno)
    fix = _ENVIRONMENT_FIXES[exc.errno]
    creating = errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT
    if exc.errno in creating and not os.path.lexists(path):
        return KitError(
            f"cannot create {os.path.basename(path)} in it ({refused})",
            where=os.path.dirname(path) or ".",
            fix=fix,
        )
    return KitError(refused, where=path, fix=fix)
