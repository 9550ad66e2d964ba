"""Running remote_script.py on the site: command lines, remote paths, and its answers."""

from __future__ import annotations

import base64
import functools
import json
import re
import shlex
import time

import fabric
import paramiko
from invoke.exceptions import CommandTimedOut

from kit.errors import FIX, KitError
from kit.excerpt import one_line
from kit.transfer.assemble import script
from kit.transfer.remote_common import (
    EXIT_BUG,
    EXIT_BUSY,
    EXIT_INSTALL,
    EXIT_MISMATCH,
    EXIT_NOSPACE,
    EXIT_REFUSED,
    EXIT_SHORT,
    EXIT_STOPPED,
    EXIT_USAGE,
)

_ERROR = re.compile(r"KIT-ERROR (\d+) ([^\n]*)")
Schema = dict  # key -> the type (or tuple of types) the answer's value must have


class RemoteError(KitError):
    """The remote script refused or failed; `code` is its exit status (28 = out of space)."""

    def __init__(self, code: int, what: str, *, fix: str, where: str):
        super().__init__(what, fix=fix, where=where)
        self.code = code


# The user's next step after each exit status of the site's script (kit.transfer.remote_common),
# where its line gives none of its own ("WHAT; fix: FIX") and the caller knows no better one.
FIXES = {
    127: "install python3 >= 3.6 on that host, on the PATH of a non-interactive login: "
    "ssh HOST python3 -V shows which one runs",
    EXIT_NOSPACE: "free space there (df -h on that host), then run the same command again",
    EXIT_SHORT: "run the same command again: it resumes from the last verified chunk",
    EXIT_MISMATCH: "run the same command again, and leave the image unchanged until it ends",
    EXIT_USAGE: "check that the login user can write there (ls -ld on that host), "
    "then run the same command again",
    EXIT_INSTALL: "do what the line says on that host, "
    "then run the same command again (the verified upload is kept)",
    EXIT_BUSY: "let the other kit transfer there end, then run the same command again",
    EXIT_REFUSED: "move what the line names aside on that host (the kit leaves it alone), "
    "then run the same command again",
    EXIT_BUG: "report this line with the output of kit --version; run the same command again",
    EXIT_STOPPED: "run the same command again",
}
ODD_ANSWER_FIX = (
    "check that ssh HOST python3 -V runs a standard CPython >= 3.6, then run the same command again"
)
UNKNOWN_FIX = "check that ssh HOST true runs a command there, then run the same command again"


def remote_path(path: str) -> str:
    """A site path for remote commands: '~/x' becomes 'x' (SSH sessions start in $HOME)
    so it survives shlex.quote, which would otherwise stop the shell expanding '~'."""
    if path in ("~", "~/"):
        return "."
    if path.startswith("~/"):
        return path[2:] or "."
    if path.startswith("~"):
        raise KitError(
            f"remote path {path!r}: '~user' paths are not supported",
            fix="write it in full (/home/USER/...), or as ~/... for the login user's home",
        )
    return path


# The system python3 first (stable, quick to start; a login PATH may put a slow shim first).
_PICK = (
    'for p in /usr/bin/python3 python3; do command -v "$p" >/dev/null 2>&1 && exec "$p" -c "$0" "$@"; '
    'done; echo "KIT-ERROR 127 python3 is not installed on the remote side" >&2; exit 127'
)


@functools.cache
def boot() -> str:
    """python3 -c's program: the assembled remote script (kit.transfer.assemble), in base64."""
    return f"import base64;exec(base64.b64decode('{base64.b64encode(script()).decode()}'))"


def command(mode: str, *args: object) -> str:
    """One shell-safe line running remote_script MODE ARGS under python3 (fine under sh and csh)."""
    return " ".join(shlex.quote(str(a)) for a in ("sh", "-c", _PICK, boot(), mode, *args))


def fits(value: object, types: type | tuple) -> bool:
    """isinstance, except that JSON's true/false is no number."""
    types = types if isinstance(types, tuple) else (types,)
    return bool in types if isinstance(value, bool) else isinstance(value, types)


def parse(
    stdout: str,
    stderr: str,
    exited: int,
    *,
    what: str,
    where: str,
    schema: Schema | None = None,
    fixes: dict[int, str] | None = None,
) -> dict:
    """The script's JSON answer (a dict whose keys have the types in `schema`), or a
    RemoteError naming what failed (`what`, at `where`: HOST:DIR), why, and the fix: the
    script's own, else the caller's for its exit status (`fixes`), else FIXES'."""
    if exited == 0:
        try:
            answer = json.loads(stdout.strip().splitlines()[-1])
        except (ValueError, IndexError, RecursionError):  # not JSON, nothing, or nested too deep
            answer = None
        if not (
            isinstance(answer, dict)
            and all(fits(answer.get(k), t) for k, t in (schema or {}).items())
        ):
            raise KitError(
                f"{what}: unexpected answer from the remote side: {one_line(stdout, tail=True)!r}",
                fix=ODD_ANSWER_FIX,
                where=where,
            )
        return answer
    found = _ERROR.search(stderr)
    if found:
        code = int(found.group(1))
        said, _, own = one_line(found.group(2), 2000, tail=True).partition(FIX)
        fix = own or (fixes or {}).get(code) or FIXES.get(code, UNKNOWN_FIX)
        raise RemoteError(code, f"{what}: {said}", fix=fix, where=where)
    raise RemoteError(
        exited,
        f"{what}: remote command failed (exit {exited}): {one_line(stderr, 500, tail=True)}",
        fix=UNKNOWN_FIX,
        where=where,
    )


def run(
    conn: fabric.Connection,
    mode: str,
    *args: object,
    what: str,
    where: str,
    schema: Schema | None = None,
    timeout: float | None = None,
    on_timeout: str = "the remote side was stopped",
    timeout_fix: str = "check that host (load, a hung filesystem), then run the same command again",
    fixes: dict[int, str] | None = None,
) -> dict:
    """Run a mode over the control connection; a dropped connection or no answer within
    `timeout` seconds is a KitError (``on_timeout``: what that left, ``timeout_fix``: its fix),
    never a hang or a traceback. The session's stdin stays open until the answer or the timeout:
    a mode may watch it to stop when the sender gives up."""

    def timed_out() -> KitError:
        return KitError(
            f"{what}: no answer within {timeout:g} s; {on_timeout}", fix=timeout_fix, where=where
        )

    start = time.monotonic()
    try:
        result = conn.run(
            command(mode, *args), hide=True, warn=True, in_stream=False, timeout=timeout
        )
    except CommandTimedOut as exc:
        raise timed_out() from exc
    except (OSError, EOFError, paramiko.SSHException) as exc:
        raise KitError(
            f"{what}: the SSH connection failed ({one_line(exc, tail=True) or type(exc).__name__})",
            fix="run the same command again",
            where=where,
        ) from exc
    # The session closed without an exit status once the timeout was due: Fabric stopped it (the
    # timeout and the remote side's end can race, and then no CommandTimedOut is raised).
    if timeout is not None and result.exited == -1 and time.monotonic() - start >= timeout:
        raise timed_out()
    return parse(
        result.stdout,
        result.stderr,
        result.exited,
        what=what,
        where=where,
        schema=schema,
        fixes=fixes,
    )
