"""What every mode of the site's script shares: limits, exit codes, the kit's names, one-line
errors, and the careful file primitives (files and directories of this user only, locks, state
files, sha256).

Part of the script the site runs (remote_script.py): Python 3.6 and the standard library only;
kit.transfer.assemble puts this text in place of its import.
"""

import errno
import fcntl
import hashlib
import json
import os
import re
import signal
import stat
import sys
import time

from kit.artifact_names import NAME_MAX, is_name

BUF = 1 << 20
ALIGN = 4096  # O_DIRECT: buffer address, length and offset
BLOCK, NBUF = 4 << 20, 4  # write buffers in flight between the pipe and the disk
PROBE_MARK = "KIT-PROBE "
# push: the re-hash of what is already there moves (the sender's watchdog)
HASHED_MARK = "KIT-HASHED "
EXIT_NOSPACE, EXIT_SHORT, EXIT_MISMATCH, EXIT_USAGE, EXIT_INSTALL, EXIT_BUSY = 28, 3, 4, 5, 6, 7
EXIT_REFUSED, EXIT_BUG, EXIT_STOPPED = 8, 9, 10
STALL, INSTALL_WAIT, PUSH_WAIT = 900, 300, 5  # seconds (install's defaults; push.py passes its own)
STATE_MAX, LINE_MAX = 4096, 1 << 20  # bytes a state file / a control line may have
# install's FMT: ch-convert's two, unpacked here, or a SIF copied as it is
FORMATS = ("dir", "squash", "unpack", "sif")
NOFOLLOW, CLOEXEC = os.O_NOFOLLOW, getattr(os, "O_CLOEXEC", 0)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # each ends a mode like Ctrl-C
# The stop signal received (on_signal): later ones are ignored
STOPPING = []  # type: list[int]

# Versions are NAME@<hex sha prefix>, with .sqfs for SquashFS and .sif for SIF installs.
VERSION_RE = re.compile(r"[0-9a-f]{12,64}")
FILE_ENTRY = r"(\.sqfs|\.sif)?"  # after NAME@VERSION: a SquashFS or SIF file; none: a directory


class Refused(Exception):
    """Something is in a place the kit writes to that it did not make: left alone, not followed."""


class Usage(Exception):
    """A malformed argument or control line."""


def widen_pipe(fd):
    """Ask for a 1 MiB pipe (Linux F_SETPIPE_SZ): fewer wake-ups between sshd and us."""
    try:
        fcntl.fcntl(fd, 1031, 1 << 20)
    except OSError:
        pass


def fail(code, message):
    sys.stderr.write("KIT-ERROR %d %s\n" % (code, " ".join(str(message).split())))
    sys.stderr.flush()
    sys.exit(code)


def check_name(text, what):
    if not is_name(text):
        raise Usage(
            "%s %r: letters, digits and . _ + - only, not starting with a dot, no '..', at most %d"
            % (what, text, NAME_MAX)
        )
    return text


def check_version(text):
    if not VERSION_RE.fullmatch(text):
        raise Usage("VERSION %r: 12 to 64 lowercase hex digits (a sha256 prefix)" % text)
    return text


def entry_re(name):
    """The installed versions of NAME: the only entries listing, switch and prune ever touch."""
    return re.compile(re.escape(name) + r"@[0-9a-f]{12,64}" + FILE_ENTRY)


def number(text, what, low=0):
    if not re.fullmatch(r"[0-9]{1,19}", text) or int(text) < low:
        raise Usage("%s %r: a whole number >= %d" % (what, text, low))
    return int(text)


def describe(st):
    for test, kind in (
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(st.st_mode):
            return kind
    return "not a regular file"


def own_file(path):
    """lstat of `path` if it is a regular file of this user, None if nothing is there;
    anything else (a planted link, FIFO, someone else's file) is refused."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        raise
    if not stat.S_ISREG(st.st_mode):
        raise Refused(
            "%s is %s, which kit transfer did not make; it is neither followed nor replaced; "
            "fix: remove it (or use another directory)" % (path, describe(st))
        )
    if st.st_uid != os.geteuid():
        raise Refused(
            "%s belongs to uid %d, not to this user; it is left alone; fix: "
            "remove it (or use another directory)" % (path, st.st_uid)
        )
    return st


def open_regular(path):
    """A read fd on a regular file, never through a symlink and never blocking on a FIFO."""
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW | os.O_NONBLOCK | CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(
                "%s is a symlink; kit transfer does not follow links here; fix: "
                "replace it by the file itself" % path
            ) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise Refused("%s is %s, not a regular file: refused" % (path, describe(st)))
    return fd


def create_new(path, mode=0o600):
    """A new file for writing: fails if anything (even a dangling link) has the name."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC, mode)


def free_bytes(path):
    """Free bytes for unprivileged writers on the filesystem holding path (or its nearest
    parent).
    """
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def hash_range(fh, offset, length, *hashers, progress=None):
    """Feed LENGTH bytes at OFFSET to the hashers (False if the file is shorter), telling
    progress(n).
    """
    fh.seek(offset)
    left = length
    while left:
        data = fh.read(min(BUF, left))
        if not data:
            return False
        for h in hashers:
            h.update(data)
        left -= len(data)
        if progress:
            progress(len(data))
    return True


class Heartbeat(object):
    """Says on stderr, after each STEP bytes re-hashed, how far a re-hash of the kept part has
    come: nothing else crosses the connection meanwhile, and the sender's watchdog would take a
    long honest re-hash of many GB for a hang (a stuck read says nothing, and is stopped)."""

    def __init__(self, stream, step):
        self.stream, self.step, self.done, self.told = stream, step, 0, 0

    def __call__(self, n):
        self.done += n
        if self.done - self.told >= self.step:
            self.told = self.done
            self.stream.write("%s%d\n" % (HASHED_MARK, self.done))
            self.stream.flush()


def trusted_dir(directory):
    """Refuse a symlink on the way to DIRECTORY that neither this user nor root made (one planted
    in a shared tree, or swapped in for the directory since the last push): the kit writes,
    lists and installs only where the user or the site's admin pointed it. Links of this user or
    root (a home on another filesystem) are followed as the kernel would; what does not exist yet
    is made by this user."""
    todo = [c for c in os.path.join(os.getcwd(), directory).split("/") if c]
    done, hops = "/", 0
    while todo:
        part = todo.pop(0)
        if part == ".":
            continue
        if part == "..":
            done = os.path.dirname(done)
            continue
        path = os.path.join(done, part)
        try:
            st = os.lstat(path)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                return
            raise
        if not stat.S_ISLNK(st.st_mode):
            done = path
            continue
        if st.st_uid not in (0, os.geteuid()):
            raise Refused(
                "%s is a symlink of uid %d, neither this user's nor root's, on the way to %s; "
                "kit transfer does not follow it; fix: remove it (or use another directory)"
                % (path, st.st_uid, directory)
            )
        hops += 1
        if hops > 40:
            raise Refused("%s: too many levels of symlinks on the way to %s" % (path, directory))
        target = os.readlink(path)
        if target.startswith("/"):
            done = "/"
        todo = [c for c in target.split("/") if c] + todo


def lock_dir(directory, wait, what):
    """An exclusive flock on `directory` (made if needed), waited for up to `wait` seconds.

    The lock belongs to the open directory, so children that inherit the fd (ch-convert)
    keep holding it if this process is killed: a re-run waits for them, not beside them."""
    try:
        os.makedirs(directory, exist_ok=True)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | CLOEXEC)
    except OSError as exc:
        fail(
            EXIT_NOSPACE if exc.errno in (errno.ENOSPC, errno.EDQUOT) else EXIT_USAGE,
            "cannot create or open %s: %s" % (directory, exc),
        )
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError:
            if time.monotonic() >= deadline:
                fail(EXIT_BUSY, what % os.path.abspath(directory))
            time.sleep(0.1)


# ------------------------------------------------------------------ the receiver (probe, push)


def names(directory, name):
    return (
        os.path.join(directory, name),
        os.path.join(directory, "." + name + ".part"),
        os.path.join(directory, "." + name + ".part.state"),
    )


def read_state(path):
    """The part's state {sha256, size, chunk}, or None if absent or not one the kit wrote."""
    try:
        fd = open_regular(path)
    except (OSError, Refused):
        return None
    try:
        data = os.read(fd, STATE_MAX + 1)
    finally:
        os.close(fd)
    try:
        state = json.loads(data.decode("ascii")) if len(data) <= STATE_MAX else None
    except ValueError:
        return None
    if (
        isinstance(state, dict)
        and isinstance(state.get("sha256"), str)
        and all(type(state.get(k)) is int for k in ("size", "chunk"))
    ):
        return state
    return None


def write_state(path, state):
    """Written under a per-process name, then renamed over the (checked) old one."""
    tmp = "%s.%d.tmp" % (path, os.getpid())
    fd = create_new(tmp, 0o644)
    try:
        os.write(fd, json.dumps(state).encode("ascii"))
    finally:
        os.close(fd)
    own_file(path)
    os.replace(tmp, path)


def file_sha256(fd, size, progress=None):
    h = hashlib.sha256()
    with os.fdopen(fd, "rb") as fh:
        hash_range(fh, 0, size, h, progress=progress)
    return h.hexdigest()
