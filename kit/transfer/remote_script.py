"""The remote half of `kit transfer`: run on the site as `python3 -c <this> MODE ARGS...`.

It is sent over SSH (base64 inside a one-line command, so any login shell passes it
through untouched) and needs only a stock python3 >= 3.6 on the transfer node: no
f-string tricks beyond 3.6, no third-party modules. Every mode answers with JSON lines
on stdout; failures print `KIT-ERROR <code> <message>` (one line) on stderr and exit nonzero.

Modes:
  probe   DIR NAME SIZE SHA CHUNK PATH...         what is there already, and which PATHs (the
                                                  pair's host paths) are missing (no change)
  push    DIR NAME SIZE SHA CHUNK DIRECT PATH...  probe, print it as "KIT-PROBE <json>" (a
                                                  login shell may print before us), read the
                                                  sender's plan line ("KEEP i,j,..." / "SKIP"),
                                                  receive the other chunks from stdin (DIRECT 1:
                                                  O_DIRECT where possible), verify, rename; while
                                                  it re-hashes what is there it prints
                                                  "KIT-HASHED <bytes>" on stderr after each chunk
  install SRC IMGDIR NAME VERSION KEEPN DRY FMT [STALL [WAIT [WATCH]]]
                                          ch-convert to FMT (dir|squash) as NAME@VERSION, or
                                          with FMT unpack the tarball unpacked here (a
                                          directory; no Charliecloud: a udocker site; what
                                          kit image convert refuses is refused, whole), or
                                          with FMT sif a SIF copied as NAME@VERSION.sif (an
                                          Apptainer site; refused unless it has SIF's magic),
                                          switch NAME.current, prune; ch-convert is killed after
                                          STALL seconds without I/O, the lock is waited for WAIT s;
                                          WATCH 1: stop (and clean up) when stdin closes, which
                                          is how a sender that gave up ends the SSH session
  versions IMGDIR NAME                    the installed NAME@... entries, newest first, and current
  switch  IMGDIR NAME ENTRY DRY [WAIT]    point NAME.current at ENTRY (an installed version)

The directories may be shared with other users: files are created with O_EXCL|O_NOFOLLOW
under per-process names, existing ones are used only if they are regular files of this
user, and nothing is removed but the kit's own names (symlinks are never followed).
"""

import errno
import os
import signal
import sys

from kit.artifact_names import SHA256_RE
from kit.transfer.remote_common import (
    EXIT_BUG,
    EXIT_NOSPACE,
    EXIT_REFUSED,
    EXIT_STOPPED,
    EXIT_USAGE,
    FORMATS,
    INSTALL_WAIT,
    STALL,
    STOP_SIGNALS,
    STOPPING,
    Refused,
    Usage,
    check_name,
    check_version,
    fail,
    number,
    trusted_dir,
)
from kit.transfer.remote_install import (
    install,
    listing,
    stop_when_stdin_closes,
    switch,
)
from kit.transfer.remote_receive import (
    probe,
    push,
)


def on_signal(signum, frame):
    """SIGINT, SIGTERM and SIGHUP end a mode: its finally clauses clean up, then one line. Only
    the first one raises: a hang-up of the SSH session brings SIGHUP and, as stdin ends, SIGTERM
    at once, and a second KeyboardInterrupt would cut the clean-up of the first short."""
    if not STOPPING:
        STOPPING.append(signum)
        raise KeyboardInterrupt


def main(argv):
    if not argv:
        fail(EXIT_USAGE, "usage: MODE ARGS...")
    mode, args = argv[0], argv[1:]
    try:
        if mode in ("probe", "push"):
            directory, name = args[0], check_name(args[1], "NAME")
            trusted_dir(directory)
            size, sha, chunk = number(args[2], "SIZE"), args[3], number(args[4], "CHUNK", 1)
            if not SHA256_RE.fullmatch(sha):
                raise Usage("SHA %r: 64 lowercase hex digits" % sha)
            if mode == "probe":
                probe(directory, name, size, sha=sha, chunk=chunk, paths=args[5:])
            else:
                push(
                    directory,
                    name,
                    size,
                    sha=sha,
                    chunk=chunk,
                    direct=args[5] == "1",
                    paths=args[6:],
                )
        elif mode == "install":
            if args[6] not in FORMATS:
                raise Usage("install format %s: use dir, squash, unpack or sif" % args[6])
            stall = number(args[7], "STALL", 1) if len(args) > 7 else STALL
            wait = number(args[8], "WAIT") if len(args) > 8 else INSTALL_WAIT
            if len(args) > 9 and args[9] == "1":
                stop_when_stdin_closes()
            trusted_dir(os.path.dirname(args[0]) or ".")
            trusted_dir(args[1])
            install(
                args[0],
                args[1],
                check_name(args[2], "NAME"),
                version=check_version(args[3]),
                keep_n=number(args[4], "KEEPN"),
                dry=args[5] == "1",
                fmt=args[6],
                stall=stall,
                wait=wait,
            )
        elif mode == "versions":
            trusted_dir(args[0])
            listing(args[0], check_name(args[1], "NAME"))
        elif mode == "switch":
            wait = number(args[4], "WAIT") if len(args) > 4 else INSTALL_WAIT
            trusted_dir(args[0])
            switch(args[0], check_name(args[1], "NAME"), args[2], dry=args[3] == "1", wait=wait)
        else:
            raise Usage("unknown mode %s" % mode)
    except IndexError:
        fail(EXIT_USAGE, "bad arguments for %s: too few" % mode)
    except Usage as exc:
        fail(EXIT_USAGE, "bad arguments for %s: %s" % (mode, exc))
    except Refused as exc:
        fail(EXIT_REFUSED, str(exc))
    except KeyboardInterrupt:
        fail(
            EXIT_STOPPED,
            "kit transfer %s was stopped by a signal; "
            "what it had begun was removed (any NAME.current still names a complete image); fix: run it again"
            % mode,
        )
    except OSError as exc:
        fail(
            EXIT_NOSPACE if exc.errno in (errno.ENOSPC, errno.EDQUOT) else EXIT_USAGE,
            "%s failed on the remote side: %s" % (mode, exc),
        )
    except Exception as exc:  # a bug: still one line, never a traceback the sender cannot parse
        fail(
            EXIT_BUG,
            "internal error in the remote side of kit transfer %s: %s: %s"
            % (mode, type(exc).__name__, exc),
        )


if __name__ == "__main__":
    for sig in STOP_SIGNALS:
        signal.signal(sig, on_signal)
    main(sys.argv[1:])
