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
                                          kit image convert refuses is refused, whole),
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
import fcntl
import hashlib
import json
import mmap
import os
import queue
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import zlib

BUF = 1 << 20
ALIGN = 4096  # O_DIRECT: buffer address, length and offset
BLOCK, NBUF = 4 << 20, 4  # write buffers in flight between the pipe and the disk
PROBE_MARK = "KIT-PROBE "
HASHED_MARK = (
    "KIT-HASHED "  # push: the re-hash of what is already there moves (the sender's watchdog)
)
EXIT_NOSPACE, EXIT_SHORT, EXIT_MISMATCH, EXIT_USAGE, EXIT_INSTALL, EXIT_BUSY = 28, 3, 4, 5, 6, 7
EXIT_REFUSED, EXIT_BUG, EXIT_STOPPED = 8, 9, 10
STALL, INSTALL_WAIT, PUSH_WAIT = 900, 300, 5  # seconds (install's defaults; push.py passes its own)
STATE_MAX, LINE_MAX = 4096, 1 << 20  # bytes a state file / a control line may have
FORMATS = ("dir", "squash", "unpack")  # install's FMT: ch-convert's two, or unpacked here
# unpack's bounds (kit.image.layers' for a layer): members, a name, a name's part, a pax record;
# a name of 4095 bytes at most: Linux's PATH_MAX (4096) counts the final NUL
MAX_MEMBERS, MAX_PATH, MAX_COMPONENT, MAX_META = 2000000, 4095, 255, 1 << 20
NOFOLLOW, CLOEXEC = os.O_NOFOLLOW, getattr(os, "O_CLOEXEC", 0)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # each ends a mode like Ctrl-C
STOPPING = []  # type: list[int]  # the stop signal received (on_signal): later ones are ignored

# Names the kit makes: an upload's file name is an image file name (kit.image_names.NAME_RE);
# versions are NAME@<hex sha prefix>, with .sqfs for SquashFS installs.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")
VERSION_RE = re.compile(r"[0-9a-f]{12,64}")
SHA_RE = re.compile(r"[0-9a-f]{64}")
TAR_SUFFIXES = (".tar.gz", ".tgz", ".tar")
SQUASH_SUFFIXES = (".sqfs", ".squashfs", ".squash")  # kit.image_names.SQUASH
CURRENT = (
    ".current"  # kit.image_names.CURRENT (tests/transfer/test_layout_copy.py: the copies agree)
)


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
    if not NAME_RE.fullmatch(text) or ".." in text:
        raise Usage(
            "%s %r: letters, digits and . _ + - only, not starting with a dot, no '..', at "
            "most 200" % (what, text)
        )
    return text


def check_version(text):
    if not VERSION_RE.fullmatch(text):
        raise Usage("VERSION %r: 12 to 64 lowercase hex digits (a sha256 prefix)" % text)
    return text


def entry_re(name):
    """The installed versions of NAME: the only entries listing, switch and prune ever touch."""
    return re.compile(re.escape(name) + r"@[0-9a-f]{12,64}(\.sqfs)?")


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
            "%s is %s, which kit transfer did not make; it is neither followed nor replaced: "
            "remove it (or use another directory)" % (path, describe(st))
        )
    if st.st_uid != os.geteuid():
        raise Refused(
            "%s belongs to uid %d, not to this user; it is left alone: remove it (or use "
            "another directory)" % (path, st.st_uid)
        )
    return st


def open_regular(path):
    """A read fd on a regular file, never through a symlink and never blocking on a FIFO."""
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW | os.O_NONBLOCK | CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(
                "%s is a symlink; kit transfer does not follow links here: replace it by "
                "the file itself" % path
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
                "%s is a symlink of uid %d, neither this user's nor root's, on the way to %s; kit "
                "transfer does not follow it: remove it (or use another directory)"
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


def probe(directory, name, size, *, sha, chunk, paths):
    print(json.dumps(inspect(directory, name, size, sha=sha, chunk=chunk, paths=paths)))


def inspect(directory, name, size, *, sha, chunk, paths, progress=None):
    final, part, state_path = names(directory, name)
    final_st, part_st = own_file(final), own_file(part)
    own_file(state_path)
    out = {
        "dir": os.path.abspath(directory),
        "dir_exists": os.path.isdir(directory),
        "free": free_bytes(directory),
        "final_matches": False,
        "part_size": 0,
        "chunk_hashes": [],
        "python": sys.version.split()[0],
        "missing": [p for p in paths if not os.path.exists(p)],
    }
    if final_st and final_st.st_size == size:
        out["final_matches"] = file_sha256(open_regular(final), size, progress) == sha
    state = read_state(state_path)
    if (
        part_st
        and state
        and state.get("sha256") == sha
        and state.get("size") == size
        and state.get("chunk") == chunk
    ):
        fd = open_regular(part)
        out["part_size"] = os.fstat(fd).st_size
        with os.fdopen(fd, "rb") as fh:
            for index in range(min(out["part_size"], size) // chunk):
                h = hashlib.sha256()
                hash_range(fh, index * chunk, chunk, h, progress=progress)
                out["chunk_hashes"].append(h.hexdigest())
    return out


def clean_receiver_leftovers(directory, name):
    """State temp files of receivers that were killed (ours only; the directory lock is held)."""
    pattern = re.compile(re.escape("." + name + ".part.state") + r"\.[0-9]+\.tmp")
    for entry in os.listdir(directory):
        path = os.path.join(directory, entry)
        if pattern.fullmatch(entry):
            try:
                own_file(path)
            except Refused:
                continue
            os.unlink(path)


def parse_keep(plan, count):
    try:
        keep = set(int(i) for i in "".join(plan[1:]).split(",") if i)
    except ValueError:
        keep = None
    if keep is None or any(i < 0 or i >= count for i in keep):
        raise Usage("the sender's plan line is malformed: %r" % " ".join(plan)[:200])
    return keep


def push(directory, name, size, *, sha, chunk, direct, paths):
    widen_pipe(sys.stdin.fileno())
    lock_dir(
        directory,
        PUSH_WAIT,
        "another kit transfer push is writing into %s right now; wait for "
        "it to end (or stop it: its upload resumes later)",
    )
    clean_receiver_leftovers(directory, name)
    beat = Heartbeat(sys.stderr, chunk)
    sys.stdout.write(
        PROBE_MARK
        + json.dumps(
            inspect(directory, name, size, sha=sha, chunk=chunk, paths=paths, progress=beat)
        )
        + "\n"
    )
    sys.stdout.flush()
    plan = sys.stdin.buffer.readline(LINE_MAX).decode("ascii", "replace").split()
    if plan[:1] == ["KEEP"]:
        keep = parse_keep(plan, (size + chunk - 1) // chunk)
        receive(
            directory, name, size, sha=sha, chunk=chunk, keep=keep, direct=direct, progress=beat
        )
    elif plan[:1] == ["SKIP"]:
        print(json.dumps({"path": os.path.abspath(names(directory, name)[0]), "sha256": sha}))
    else:
        fail(
            EXIT_USAGE,
            "the sender stopped before sending (%s)" % " ".join(plan or ["nothing"])[:200],
        )


def open_part(path, fresh, extra):
    """The part file for writing: a new one (O_EXCL), or the existing one if it is ours."""
    flags = os.O_WRONLY | NOFOLLOW | CLOEXEC | extra
    if fresh:
        try:
            return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError as exc:  # a refused O_DIRECT open may have made it an instant ago
            if exc.errno != errno.EEXIST:
                raise
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(
                "%s is a symlink; kit transfer does not follow links here: remove it" % path
            ) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise Refused("%s is not a regular file of this user; it is left alone: remove it" % path)
    return fd


class Writer(threading.Thread):
    """Writes received blocks at their offsets while the next ones arrive and are hashed.

    The file is opened with O_DIRECT where the filesystem allows it: the bytes go from these
    buffers straight to the device, so there is no page cache to fill (on a shared transfer
    node, evicting others' files) and to flush again before the rename; fdatasync then only
    has metadata and the device cache left. Elsewhere (tmpfs, odd alignments) the writes are
    buffered and fdatasync'ed every chunk, so the final flush stays short either way.
    """

    def __init__(self, path, fresh, chunk, direct):
        threading.Thread.__init__(self, daemon=True)
        self.direct, self.fd = False, None  # direct: the bulk went O_DIRECT (for the report)
        if direct and chunk % ALIGN == 0 and hasattr(os, "O_DIRECT"):
            try:
                self.fd, self.direct = open_part(path, fresh, os.O_DIRECT), True
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
        if self.fd is None:
            self.fd = open_part(path, fresh, 0)
        self.chunk, self.unsynced, self.error, self.fd_direct = chunk, 0, None, self.direct
        self.todo, self.free = queue.Queue(), queue.Queue()
        for _ in range(NBUF):
            self.free.put(mmap.mmap(-1, BLOCK))  # page-aligned, as O_DIRECT needs
        self.start()

    def take(self):
        """A free buffer (waits while all are being written); a write failure ends the upload."""
        buf = self.free.get()
        if self.error:
            self.fail()
        return buf

    def put(self, buf, length, offset):
        self.todo.put((buf, length, offset))

    def run(self):
        while True:
            item = self.todo.get()
            if item is None:
                return
            buf, length, offset = item
            if self.error is None:
                try:
                    self.write(memoryview(buf), length, offset)
                except OSError as exc:
                    self.error = (exc, offset)
            self.free.put(buf)

    def write(self, view, length, offset):
        done = 0
        if self.fd_direct:
            done = length - length % ALIGN
            try:
                self.write_all(view[:done], offset)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self.direct = self.fd_direct = False  # the filesystem took the open, not the I/O
                done = 0
            if done < length:  # an unaligned tail (the file's end, or a cut stream's): no padding,
                self.fd_direct = False  # which would leave bytes that never arrived in the part
            if not self.fd_direct:
                fcntl.fcntl(
                    self.fd, fcntl.F_SETFL, fcntl.fcntl(self.fd, fcntl.F_GETFL) & ~os.O_DIRECT
                )
        if done < length:
            self.write_all(view[done:length], offset + done)
            self.unsynced += length - done
            if self.unsynced >= self.chunk:
                os.fdatasync(self.fd)
                self.unsynced = 0

    def write_all(self, view, offset):
        while len(view):
            n = os.pwrite(self.fd, view, offset)
            view, offset = view[n:], offset + n

    def finish(self, size=None):
        """Wait for the queued writes; with `size`, cut to it and make the file durable."""
        self.todo.put(None)
        self.join()
        try:
            if self.error:
                self.fail()
            if size is not None:
                os.ftruncate(self.fd, size)
                os.fdatasync(self.fd)
        except OSError as exc:
            self.error = (exc, size)
            self.fail()
        finally:
            os.close(self.fd)

    def fail(self):
        exc, offset = self.error
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            fail(
                EXIT_NOSPACE,
                "no space left on the remote filesystem at offset %d of the upload" % offset,
            )
        fail(EXIT_USAGE, "cannot write the upload at offset %d: %s" % (offset, exc))


def fill(stream, view):
    """Read from the pipe until `view` is full or the stream ends; returns the count."""
    got = 0
    while got < len(view):
        n = stream.readinto(view[got:])
        if not n:
            break
        got += n
    return got


def receive(directory, name, size, *, sha, chunk, keep, direct, progress=None):
    """Walk the file chunk by chunk: kept chunks are read back from disk, the others come
    from stdin; the full sha256 is computed over the bytes in file order, as they are written."""
    final, part, state_path = names(directory, name)
    try:  # the directory exists: lock_dir made it; inspect() checked the three names
        state = read_state(state_path)
        if not (
            state
            and state.get("sha256") == sha
            and state.get("size") == size
            and state.get("chunk") == chunk
        ):
            keep = set()
            write_state(state_path, {"sha256": sha, "size": size, "chunk": chunk})
        fresh = not (keep and own_file(part))
        if fresh and own_file(part):
            os.unlink(part)  # our own stale part: it is started anew
        writer = Writer(part, fresh, chunk, direct)
        kept = os.fdopen(open_regular(part), "rb") if keep else None
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            fail(EXIT_NOSPACE, "no space left on the remote filesystem in %s" % directory)
        fail(EXIT_USAGE, "cannot write in %s: %s" % (directory, exc))
    full = hashlib.sha256()
    stdin = sys.stdin.buffer
    for index in range((size + chunk - 1) // chunk):
        offset, end = index * chunk, min(size, (index + 1) * chunk)
        if index in keep:
            if not hash_range(kept, offset, end - offset, full, progress=progress):
                writer.finish()
                fail(EXIT_SHORT, "kept chunk %d of %s is short" % (index, part))
            continue
        while offset < end:
            buf, want = writer.take(), min(BLOCK, end - offset)
            n = fill(stdin, memoryview(buf)[:want])
            full.update(memoryview(buf)[:n])
            writer.put(buf, n, offset)
            offset += n
            if n < want:
                writer.finish()  # what did arrive is on disk: the next push keeps its chunks
                fail(EXIT_SHORT, "upload stream ended at offset %d of %d" % (offset, size))
    writer.finish(size)
    commit = stdin.readline(200).decode("ascii", "replace").split()
    got = full.hexdigest()
    if got != sha or commit != ["COMMIT", sha]:
        os.unlink(part)
        os.unlink(state_path)
        fail(
            EXIT_MISMATCH,
            "sha256 of the received file is %s, expected %s (sender said %s); "
            "the partial upload was removed" % (got, sha, " ".join(commit)[:80] or "nothing"),
        )
    own_file(final)  # an image of ours is replaced; anything else there is refused
    os.replace(part, final)
    os.unlink(state_path)
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    print(json.dumps({"path": os.path.abspath(final), "sha256": got, "direct_io": writer.direct}))


# ------------------------------------------------------- the installer (install, versions, switch)


def versions(imgdir, name):
    if not os.path.isdir(imgdir):
        return []
    ours = entry_re(name)
    return [e for e in os.listdir(imgdir) if ours.fullmatch(e)]


def newest_first(imgdir, entries):
    """Installed entries by install time (mtime); one pruned meanwhile is left out."""
    found = []
    for entry in entries:
        try:
            found.append((os.lstat(os.path.join(imgdir, entry)).st_mtime, entry))
        except FileNotFoundError:
            pass
    return [entry for _, entry in sorted(found, reverse=True)]


def current_path(imgdir, name):
    """IMGDIR/NAME.current (kit.image_names.current_link; this copy: the site has a bare
    python3).
    """
    return os.path.join(imgdir, name + CURRENT)


def current_entry(imgdir, name):
    current = current_path(imgdir, name)
    return os.readlink(current) if os.path.islink(current) else None


def installed(imgdir, entry):
    """Is ENTRY a complete install (a directory, or a .sqfs file, of this user)? Anything else
    under that name is refused: current never points at what the kit did not make."""
    path = os.path.join(imgdir, entry)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    want = stat.S_ISREG if entry.endswith(".sqfs") else stat.S_ISDIR
    if not want(st.st_mode) or st.st_uid != os.geteuid():
        raise Refused(
            "%s is %s, not a version kit transfer installed; it is left alone: remove it"
            % (path, describe(st) if not want(st.st_mode) else "another user's")
        )
    return True


def remove_ours(imgdir, entry):
    """Remove a kit-named entry of this user without following links (a link is unlinked)."""
    path = os.path.join(imgdir, entry)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if st.st_uid != os.geteuid():
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(
            path, onerror=_open_up
        )  # the fd-based rmtree: it never descends through a symlink
    else:
        os.unlink(path)


def _open_up(func, name, exc_info):
    """rmtree's retry for an image directory without w or x bits (ch-convert keeps the image's
    modes; only root ignores them): give the owner rwx on it and its parent, then remove again.
    The same rule as kit.atomic.remove_tree, which this standard-library script cannot import."""
    exc, parent = exc_info[1], os.path.dirname(name)
    if isinstance(exc, FileNotFoundError):
        return
    if not isinstance(exc, PermissionError) or not parent:
        raise exc
    _chmod_dir_nofollow(parent)
    if os.path.isdir(name) and not os.path.islink(name):
        _chmod_dir_nofollow(name)
        shutil.rmtree(name, onerror=_open_up)
    else:
        os.unlink(name)


def _chmod_dir_nofollow(path):
    """chmod 700 the directory at PATH through an O_PATH|O_NOFOLLOW fd: a name swapped for a link
    after the check (an image's /tmp is world-writable) fails here instead of opening up its
    target."""
    fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.chmod("/proc/self/fd/%d" % fd, 0o700)
    finally:
        os.close(fd)


def retire(imgdir, entry):
    """Prune an installed version: renamed to a temp name first (one step), then removed. A prune
    cut short leaves a temp name the next install removes, never a half version under a version
    name that listing, rollback or a re-push of that version would take for complete."""
    try:
        if os.lstat(os.path.join(imgdir, entry)).st_uid != os.geteuid():
            return
    except FileNotFoundError:
        return
    gone = ".%s.%d.tmp" % (entry, os.getpid())
    os.rename(os.path.join(imgdir, entry), os.path.join(imgdir, gone))
    dfd = os.open(imgdir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    remove_ours(imgdir, gone)


def clean_install_leftovers(imgdir, name):
    """Temp names of installs that were killed (the imgdir lock is held: none is running)."""
    stale = re.compile(
        r"\.%s(@[0-9a-f]{12,64}(\.sqfs)?|%s)(\.[0-9]+)?\.tmp"
        % (re.escape(name), re.escape(CURRENT))
    )
    for entry in os.listdir(imgdir):
        if stale.fullmatch(entry):
            remove_ours(imgdir, entry)


def check_current(imgdir, name):
    """NAME.current is the kit's symlink or absent: anything else there is not replaced."""
    current = current_path(imgdir, name)
    try:
        st = os.lstat(current)
    except FileNotFoundError:
        return
    if not stat.S_ISLNK(st.st_mode):
        raise Refused(
            "%s is %s, not the link kit transfer makes; it is left alone: remove it"
            % (current, describe(st))
        )


def point_current(imgdir, name, entry):
    """NAME.current -> ENTRY: a new link made aside, then renamed over the old one (atomic)."""
    current = current_path(imgdir, name)
    check_current(imgdir, name)
    link_tmp = os.path.join(imgdir, ".%s%s.%d.tmp" % (name, CURRENT, os.getpid()))
    os.symlink(entry, link_tmp)
    os.replace(link_tmp, current)
    dfd = os.open(imgdir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def listing(imgdir, name):
    current = current_entry(imgdir, name)
    out = []
    for entry in newest_first(imgdir, versions(imgdir, name)):
        path = os.path.join(imgdir, entry)
        out.append(
            {
                "entry": entry,
                "current": entry == current,
                "format": "squash" if entry.endswith(".sqfs") else "dir",
                "installed": os.lstat(path).st_mtime,
            }
        )
    print(json.dumps({"dir": os.path.abspath(imgdir), "current": current, "versions": out}))


def switch(imgdir, name, entry, *, dry, wait):
    if not entry_re(name).fullmatch(entry):
        raise Usage("ENTRY %r is not a version of %s (NAME@<hex>[.sqfs])" % (entry, name))
    lock = (
        None
        if dry
        else lock_dir(
            imgdir,
            wait,
            "another kit transfer install or rollback is running in %s; try again when it ends",
        )
    )
    try:
        if not installed(imgdir, entry):
            fail(
                EXIT_USAGE,
                "%s is not installed in %s (installed: %s)"
                % (
                    entry,
                    os.path.abspath(imgdir),
                    ", ".join(newest_first(imgdir, versions(imgdir, name))) or "none",
                ),
            )
        previous = current_entry(imgdir, name)
        if not dry:
            point_current(imgdir, name, entry)
    finally:
        if lock is not None:
            os.close(lock)
    print(
        json.dumps(
            {
                "current": current_path(os.path.abspath(imgdir), name),
                "previous": previous,
                "target": entry,
                "dry_run": dry,
            }
        )
    )


def source_suffix(src, is_sqfs):
    for suffix in SQUASH_SUFFIXES if is_sqfs else TAR_SUFFIXES:
        if src.endswith(suffix):
            return suffix
    raise Usage("SRC %r: not an image file (%s)" % (src, ", ".join(TAR_SUFFIXES + SQUASH_SUFFIXES)))


def stop_when_stdin_closes():
    """The sender holds our stdin open for as long as it waits for the answer; when it gives up
    (its own timeout) the SSH session closes, stdin ends, and this installer stops like on
    SIGTERM: ch-convert's group is killed and the work dir removed, NAME.current untouched."""

    def watch():
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True).start()


def install(src, imgdir, name, *, version, keep_n, dry, fmt, stall, wait):
    """Unpack SRC as IMGDIR/NAME@VERSION (a directory, or with FMT squash a .sqfs; a .sqfs
    SRC is copied), point NAME.current at it (symlink made aside then renamed over the old
    one), prune to KEEPN previous versions. All under the imgdir lock; SRC must still be
    the image whose sha256 starts with VERSION."""
    is_sqfs = src.endswith(SQUASH_SUFFIXES)
    suffix = source_suffix(src, is_sqfs)
    if is_sqfs and fmt == "unpack":
        raise Usage(
            "SRC %r: a SquashFS image is not unpacked without Charliecloud; push the image as "
            "a tarball (kit image convert SRC OUT.tar.gz)" % src
        )
    entry = name + "@" + version + (".sqfs" if is_sqfs or fmt == "squash" else "")
    if dry:
        plan(imgdir, name, entry, keep_n=keep_n, dry=True)
        return
    lock = lock_dir(
        imgdir,
        wait,
        "another kit transfer install is running in %s (or the ch-convert it "
        "started); push again when it ends: nothing is sent twice",
    )
    try:
        clean_install_leftovers(imgdir, name)
        check_current(imgdir, name)
        out = plan(imgdir, name, entry, keep_n=keep_n, dry=False)
        if not out["exists"]:
            build(
                src,
                suffix,
                imgdir,
                entry=entry,
                version=version,
                fmt=fmt,
                stall=stall,
                lock=lock,
                previous=out["previous"],
            )
        point_current(imgdir, name, entry)
        for old in out["prune"]:
            retire(imgdir, old)
    finally:
        os.close(lock)
    print(json.dumps(out))


def plan(imgdir, name, entry, *, keep_n, dry):
    """What an install does: the entry, the version current until now, what is pruned."""
    previous = current_entry(imgdir, name)
    # the version current until now is kept first (after a rollback it is not the newest)
    others = newest_first(imgdir, [v for v in versions(imgdir, name) if v != entry])
    others.sort(key=lambda v: v != previous)
    prune = others[keep_n:]
    out = {
        "target": os.path.abspath(os.path.join(imgdir, entry)),
        "current": os.path.abspath(current_path(imgdir, name)),
        "previous": previous,
        "exists": installed(imgdir, entry),
        "prune": prune,
        "free": free_bytes(imgdir),
        "dry_run": dry,
    }
    if dry:
        print(json.dumps(out))
    return out


def check_source(fd, src, version):
    """SRC is the image pushed as VERSION (not replaced since by another push of the name)."""
    h = hashlib.sha256()
    size = os.fstat(fd).st_size
    with os.fdopen(os.dup(fd), "rb") as fh:
        hash_range(fh, 0, size, h)
    if not h.hexdigest().startswith(version):
        fail(
            EXIT_MISMATCH,
            "%s is no longer the image uploaded as %s (sha256 %s): another push "
            "replaced it; push again (nothing was installed)" % (src, version, h.hexdigest()[:16]),
        )


def build(src, suffix, imgdir, *, entry, version, fmt, stall, lock, previous):
    """Make IMGDIR/ENTRY in a private directory (mkdir: nobody else's files in it), then rename it
    into place: the entry exists only once complete. The work dir goes on any failure."""
    fd = open_regular(src)
    work = ".%s.%d.tmp" % (entry, os.getpid())
    made = False
    try:
        check_source(fd, src, version)
        # the stop signals wait until `made` says whether the mkdir made it: one arriving between
        # the two neither leaves the work dir behind nor has a directory this run did not make
        # removed (a failed mkdir leaves `made` False)
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            os.mkdir(os.path.join(imgdir, work), 0o700)
            made = True
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        out = os.path.join(imgdir, work, "image" + (".sqfs" if entry.endswith(".sqfs") else ""))
        if suffix in SQUASH_SUFFIXES:
            copy_fd(fd, out)
        elif fmt == "unpack":
            unpack(fd, out, free_bytes(imgdir))
        else:
            # ch-convert reads the very file checked above, through this process's fd
            link = os.path.join(imgdir, work, "source" + suffix)
            os.symlink(
                "/proc/%d/fd/%d" % (os.getpid(), fd)
                if os.path.isdir("/proc/self/fd")
                else os.path.abspath(src),
                link,
            )
            convert(link, out, fmt, work=os.path.join(imgdir, work), stall=stall, lock=lock)
        os.rename(out, os.path.join(imgdir, entry))
    except (OSError, RuntimeError) as exc:
        text = str(exc)
        nospace = (
            getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT)
            or "No space left" in text
            or "Disk quota" in text
            or free_bytes(imgdir) < (1 << 20)
        )  # tar may only say "Wrote only N bytes"
        if made:
            remove_ours(imgdir, work)
            made = False
        if nospace:
            fail(
                EXIT_NOSPACE,
                "no space left in %s while installing %s; nothing changed, %s is "
                "still current" % (imgdir, entry, previous or "no version"),
            )
        if (
            getattr(exc, "errno", None) == errno.ENOENT
            and getattr(exc, "filename", None) == "ch-convert"
        ):
            fail(
                EXIT_INSTALL,
                "ch-convert is not on the PATH of a non-interactive login on this "
                "host; install Charliecloud there (or put it on PATH in the login files); "
                "the image itself was uploaded and verified",
            )
        tool = "the unpack" if fmt == "unpack" else "ch-convert"
        fail(EXIT_INSTALL, "%s of %s failed; nothing changed: %s" % (tool, src, text))
    finally:
        os.close(fd)
        if made:
            remove_ours(imgdir, work)


# ----------------------------------------------------- the unpack (install FMT unpack: udocker)
#
# The same member rules as `kit image convert` (kit.tarsafe, kit.image.layers, kit.image.flatten
# for a one-layer image): what one refuses the other refuses (tests/transfer/
# test_installer_unpack.py feeds both the same hostile archives).

TAR_BLOCK = 512
ZERO_BLOCK = bytes(TAR_BLOCK)
MAX_SIZE = 64 << 30  # uncompressed bytes of the stream (kit.image.layers.Limits.max_size) ...
MAX_RATIO, RATIO_FLOOR = 100, 1 << 30  # ... and its decompression-bomb check (max_ratio)
MAX_MTIME = 1 << 32  # kit.image.layers.MAX_MTIME: SquashFS keeps 32-bit times
MAX_CHAIN = 100  # extended headers (pax, GNU long name/link) before one member; tar writes <= 3
MAX_DIGITS = 4300  # a longer pax number reads as 0, as on Python >= 3.11 (int_max_str_digits)
REGULAR = (b"0", b"\0", b"7")  # tarfile.REGULAR_TYPES but GNU sparse (refused)
BUILTIN = REGULAR + (b"1", b"2", b"3", b"4", b"5", b"6", b"S")  # tarfile.SUPPORTED_TYPES
LONG_TYPES, PAX_TYPES = (b"L", b"K"), (b"x", b"X", b"g")
PAX_FIELDS = {"path": "name", "linkpath": "linkname", "size": "size", "mtime": "mtime"}
KINDS = {b"5": "directory", b"2": "symlink", b"1": "hard link"}  # others: REGULAR, or dropped
HIGH = bytes(range(128, 256))  # the bytes a signed checksum counts negative
GZ_IN = 1 << 16  # compressed bytes inflated at a time: what stays unconsumed is copied per read
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW | CLOEXEC


class Gunzip(object):
    """The gzip members of a stream one after another, with CPython's and ISA-L's rules (the
    kit's reader): zero bytes may follow the last one, anything else must be another member;
    each member's header CRC (if flagged), CRC-32 and length are checked."""

    def __init__(self, raw):
        self.raw, self.buf, self.inflate, self.crc, self.length = raw, b"", None, 0, 0

    def more(self):
        data = self.raw(GZ_IN)
        if not data:
            raise RuntimeError("the gzip stream ends early (a truncated upload?)")
        self.buf += data

    def take(self, n):
        while len(self.buf) < n:
            self.more()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def start(self):
        """Read the next member's header; False when only zero bytes are left."""
        self.buf = self.buf.lstrip(b"\0")
        while not self.buf:
            data = self.raw(GZ_IN)
            if not data:
                return False
            self.buf = data.lstrip(b"\0")
        header = self.take(10)
        if header[:2] != b"\x1f\x8b" or header[2] != 8:
            raise RuntimeError("a gzip member of the upload does not start as one (magic, method)")
        flags, crc = header[3], zlib.crc32(header)
        if flags & 4:
            size = self.take(2)
            crc = zlib.crc32(size + self.take(size[0] | size[1] << 8), crc)
        for flag in (8, 16):  # a name, a comment: up to a NUL, read once (any length)
            while flags & flag:
                end = self.buf.find(b"\0")
                if end >= 0:
                    crc = zlib.crc32(self.take(end + 1), crc)
                    break
                crc, self.buf = zlib.crc32(self.buf, crc), b""
                self.more()
        if flags & 2 and self.take(2) != (crc & 0xFFFF).to_bytes(2, "little"):
            raise RuntimeError("the gzip header's checksum does not match")
        self.inflate, self.crc, self.length = zlib.decompressobj(-zlib.MAX_WBITS), 0, 0
        return True

    def read(self, n):
        """Up to N uncompressed bytes; b"" at the end of the last member."""
        while True:
            if self.inflate is None and not self.start():
                return b""
            if not self.buf:
                self.more()
            data = self.inflate.decompress(self.buf, n)
            ended = self.inflate.eof
            self.buf = self.inflate.unused_data if ended else self.inflate.unconsumed_tail
            self.crc, self.length = zlib.crc32(data, self.crc), self.length + len(data)
            if ended:
                trailer = self.take(8)
                if int.from_bytes(trailer[:4], "little") != self.crc:
                    raise RuntimeError("gzip CRC check failed (a damaged upload)")
                if int.from_bytes(trailer[4:], "little") != self.length & 0xFFFFFFFF:
                    raise RuntimeError("gzip length check failed (a damaged upload)")
                self.inflate = None
            if data:
                return data


class TarStream(object):
    """The upload's tar bytes, read once front to back (pread: the fd's offset is not used):
    gunzipped when it starts with gzip's magic (kit image convert sniffs it the same way),
    counted against MAX_SIZE and the decompression-bomb ratio."""

    def __init__(self, fd):
        self.fd, self.at, self.pos = fd, 0, 0
        self.stored = max(os.fstat(fd).st_size, 1)
        self.gzip = os.pread(fd, 2, 0) == b"\x1f\x8b"
        self.source = Gunzip(self.raw).read if self.gzip else self.raw
        self.pending, self.used = b"", 0  # the latest piece, and how much of it is read
        self.produced = 0  # bytes of the (uncompressed) stream so far

    def raw(self, n):
        data = os.pread(self.fd, n, self.at)
        self.at += len(data)
        return data

    def fill(self):
        """The next piece of the stream into `pending`, counted against the limits; False at
        the end."""
        self.pending, self.used = self.source(BUF), 0
        self.produced += len(self.pending)
        if self.produced > MAX_SIZE:
            raise RuntimeError("the image unpacks to more than %d bytes: refused" % MAX_SIZE)
        if self.produced > RATIO_FLOOR and self.produced > MAX_RATIO * self.stored:
            raise RuntimeError(
                "the image expands more than %dx (%d stored bytes): a decompression bomb?"
                % (MAX_RATIO, self.stored)
            )
        return bool(self.pending)

    def read(self, n):
        """N bytes, fewer only at the end of the stream."""
        parts, left = [], n
        while left and (self.used < len(self.pending) or self.fill()):
            parts.append(self.pending[self.used : self.used + left])
            self.used += len(parts[-1])
            left -= len(parts[-1])
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        self.pos += len(data)
        return data

    def skip(self, n, what):
        """Pass N bytes without keeping them."""
        while n:
            if self.used == len(self.pending) and not self.fill():
                raise RuntimeError("the archive ends inside %s (a truncated upload?)" % what)
            step = min(n, len(self.pending) - self.used)
            self.used, self.pos, n = self.used + step, self.pos + step, n - step


class Header(object):
    """One tar header's fields, as tarfile reads them (names decoded as UTF-8, surrogateescape)."""

    __slots__ = ("offset", "type", "name", "linkname", "mode", "size", "mtime", "consumed")


def nts(field):
    end = field.find(b"\0")
    return field if end < 0 else field[:end]


def text(field):
    return nts(field).decode("utf-8", "surrogateescape")


def nti(field, offset):
    """A header number: GNU base-256, or octal text read exactly as tarfile reads it."""
    if field[0] in (0o200, 0o377):
        n = int.from_bytes(field[1:], "big")
        return n - 256 ** (len(field) - 1) if field[0] == 0o377 else n
    try:
        return int(nts(field).decode("ascii").strip() or "0", 8)
    except ValueError:
        raise RuntimeError("tar header at byte %d: a malformed number" % offset) from None


def read_header(block, offset):
    """A 512-byte header block (checksum, numbers, ustar prefix) or RuntimeError."""
    chksum = nti(block[148:156], offset)
    rest = block[:148] + block[156:]
    unsigned = 256 + sum(rest)
    if chksum not in (unsigned, unsigned - 256 * (len(rest) - len(rest.translate(None, HIGH)))):
        raise RuntimeError("tar header at byte %d: bad checksum (a damaged archive)" % offset)
    head = Header()
    head.offset, head.type, head.consumed = offset, block[156:157], 0
    head.name, head.linkname = text(block[0:100]), text(block[157:257])
    head.mode, head.size = nti(block[100:108], offset), nti(block[124:136], offset)
    head.mtime = nti(block[136:148], offset)
    for start, end in ((108, 116), (116, 124), (329, 337), (337, 345)):  # ids, device numbers
        nti(block[start:end], offset)
    if head.type == b"\0" and head.name.endswith("/"):
        head.type = b"5"
    prefix = text(block[345:500])
    if prefix and head.type not in (b"L", b"K", b"S"):
        head.name = prefix + "/" + head.name
    return head


def parse_pax(buf, offset):
    """kit.tarsafe.parse_pax: `LEN KEY=VALUE\\n` records that tile BUF exactly (trailing NULs
    allowed), in one linear pass (CPython's own parser is quadratic, CVE-2024-6232)."""
    records, pos, end = {}, 0, len(buf)
    while pos < end:
        if buf[pos] == 0 and buf.count(b"\0", pos) == end - pos:
            break
        space = buf.find(b" ", pos, min(end, pos + 20))
        digits = buf[pos:space] if space > pos else b""
        if not digits.isdigit():
            raise RuntimeError("pax header at byte %d: malformed record at %d" % (offset, pos))
        stop = pos + int(digits)
        equals = buf.find(b"=", space + 1, stop)
        if stop > end or equals <= space + 1 or buf[stop - 1 : stop] != b"\n":
            raise RuntimeError("pax header at byte %d: malformed record at %d" % (offset, pos))
        records[buf[space + 1 : equals]] = buf[equals + 1 : stop - 1]
        pos = stop
    return records


def pax_value(key, value):
    """A pax field as tarfile applies it: a malformed number is 0 (so is an overlong one)."""
    if key == "path":
        return value.rstrip("/")
    if key == "linkpath":
        return value
    if key == "size" and len(value.strip().lstrip("+-").replace("_", "")) > MAX_DIGITS:
        return 0
    try:
        return (int if key == "size" else float)(value)
    except ValueError:
        return 0


def block_up(size):
    return -(-size // TAR_BLOCK) * TAR_BLOCK


def members(stream):
    """The archive's members as kit.tarsafe lets tarfile read them, in one pass with memory
    bounded by MAX_META, whatever the member count.

    Why a reader of our own rather than tarfile: tarfile keeps every header it read (memory
    grows with the member count), parses pax records in quadratic time on the Pythons a site may
    have (CVE-2024-6232), ends quietly at a damaged header (the members after it lost) and changes
    its private hooks between 3.6 and 3.13. Here every field is read as tarfile 3.11 reads it,
    extended headers apply as tarfile nests them (the outermost wins), and the stream is checked
    to its end. Each member is yielded with `consumed` set to the data bytes the caller read."""
    glob, fields, sized, chain = {}, {}, False, 0
    while True:
        offset = stream.pos
        block = stream.read(TAR_BLOCK)
        if len(block) < TAR_BLOCK or block == ZERO_BLOCK:
            if chain:
                raise RuntimeError("tar header at byte %d: missing after an extended one" % offset)
            if offset == 0 and len(block) != TAR_BLOCK and (block or not stream.gzip):
                raise RuntimeError("not a tar archive (%d bytes)" % len(block))
            zero_rest(stream, block, offset)
            return
        head = read_header(block, offset)
        meta = head.type in LONG_TYPES + PAX_TYPES
        if head.size < 0 or (meta and head.size > MAX_META):
            raise RuntimeError("tar header at byte %d: size %d refused" % (offset, head.size))
        if head.type == b"S":
            raise RuntimeError("tar header at byte %d: a GNU sparse file" % offset)
        if meta:
            chain += 1
            if chain > MAX_CHAIN:
                raise RuntimeError(
                    "tar header at byte %d: over %d extended headers" % (offset, MAX_CHAIN)
                )
            data = stream.read(block_up(head.size))
            if len(data) < head.size:
                raise RuntimeError("the archive ends inside the header at byte %d" % offset)
            if head.type in LONG_TYPES:
                fields.setdefault("name" if head.type == b"L" else "linkname", text(data))
                continue
            new = {}
            for key, value in parse_pax(data[: head.size], offset).items():
                if key.startswith(b"GNU.sparse."):
                    raise RuntimeError("pax header at byte %d: a GNU sparse file" % offset)
                key = key.decode("utf-8", "surrogateescape")
                if key in PAX_FIELDS:
                    new[key] = value.decode("utf-8", "surrogateescape")
            if head.type == b"g":
                glob.update(new)
                continue
            headers = dict(glob, **new)
            for key, value in headers.items():
                value = pax_value(key, value)
                if key == "size" and value < 0:
                    raise RuntimeError("pax header at byte %d: size %d" % (offset, value))
                fields.setdefault(PAX_FIELDS[key], value)
            sized = sized or "size" in headers
            continue
        skips_data = head.type in REGULAR or head.type not in BUILTIN  # tarfile skips their data
        span = block_up(head.size) if skips_data else 0
        for key, value in glob.items():
            setattr(head, PAX_FIELDS[key], pax_value(key, value))
        for key, value in fields.items():
            setattr(head, key, value)
        if head.size < 0:
            raise RuntimeError("tar header at byte %d: size %d refused" % (offset, head.size))
        if sized and skips_data:
            span = block_up(head.size)
        fields, sized, chain = {}, False, 0
        yield head
        if head.consumed > span:  # tarfile would seek back: kit image convert refuses it
            raise RuntimeError("member %r: its data runs past the next header" % head.name[:80])
        stream.skip(span - head.consumed, "member %r" % head.name[:80])


def zero_rest(stream, block, offset):
    """Past tar's end only zero bytes may follow: anything else is a header tar could not read,
    and the members from there on would be lost without a word (kit.tarsafe.first_nonzero)."""
    while block:
        if block.count(0) != len(block):
            raise RuntimeError(
                "corrupt tar header at byte %d (non-zero data after the archive's end): the "
                "members from there on would be lost" % offset
            )
        block = stream.read(BUF)


def safe_name(raw, what):
    """A member's path relative to the image root (b'' for the root), as UTF-8 bytes:
    kit.image.layers.safe_name's rules (UTF-8, no NUL, no '..', not overlong)."""
    try:
        encoded = raw.encode("utf-8")
    except UnicodeEncodeError:
        raise RuntimeError("%s %r: a name that is not UTF-8" % (what, raw[:80])) from None
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if "\0" in raw or ".." in parts:
        raise RuntimeError(
            "%s %r: a '..' or NUL in its name; the image is unsafe" % (what, raw[:80])
        )
    if len(encoded) > MAX_PATH or any(len(p.encode("utf-8")) > MAX_COMPONENT for p in parts):
        raise RuntimeError("%s %r...: an overlong name" % (what, raw[:80]))
    return "/".join(parts).encode("utf-8")


def check_member(head):
    """kit.image.layers._check_member: the names, a link's target, the mtime, the size."""
    rel = safe_name(head.name, "member")
    if head.type == b"1":
        head.linkname = safe_name(head.linkname, "hard link %r target" % rel.decode())
    elif head.type == b"2":
        size = len(head.linkname.encode("utf-8", "surrogateescape"))
        if "\0" in head.linkname or size > MAX_PATH:
            raise RuntimeError("symlink %r: a NUL or overlong target" % rel.decode())
    mtime = head.mtime
    if not (isinstance(mtime, (int, float)) and mtime == mtime and 0 <= mtime < MAX_MTIME):
        raise RuntimeError(
            "member %r: mtime %.40s, not between 1970 and 2106" % (rel.decode(), mtime)
        )
    if head.size > MAX_SIZE:
        raise RuntimeError(
            "member %r: %d bytes, more than %d" % (rel.decode(), head.size, MAX_SIZE)
        )
    return rel


def contained(link_dir, target):
    """Does a relative symlink target stay inside the image, read lexically (kit.image.flatten)?"""
    depth = len(link_dir)
    for part in target.split(b"/"):
        if part == b"..":
            depth -= 1
            if depth < 0:
                return False
        elif part not in (b"", b"."):
            depth += 1
    return True


class Tree(object):
    """The image being unpacked, reached through directory fds only (no path longer than one
    name is passed to the kernel, no symlink followed). What is already there is the record of
    what earlier members made, so memory does not grow with the member count."""

    def __init__(self, root, umask, budget):
        self.fd = os.open(root, DIR_FLAGS)
        self.umask, self.budget, self.total = umask, budget, 0
        self.cached, self.cached_fd = None, None  # the last parent directory reached

    def close(self):
        for fd in (self.cached_fd, self.fd):
            if fd is not None:
                os.close(fd)
        self.cached_fd = self.fd = None

    def mode(self, mode, is_dir):
        """tar's mode for a user (the umask applied, no setuid/setgid), owner rwx on directories
        and rw on files (kit image convert's rule), and nothing world-writable but a sticky
        directory: other users of a shared file system never add to or replace an image's files
        (o+w is dropped rather than the sticky bit added, which would still let them add)."""
        mode = (mode & (0o1777 if is_dir else 0o777) & ~self.umask) | (0o700 if is_dir else 0o600)
        if mode & 0o002 and not (is_dir and mode & 0o1000):
            mode &= ~0o002
        return mode

    def kind(self, dirfd, name):
        try:
            st = os.lstat(name, dir_fd=dirfd)
        except FileNotFoundError:
            return None
        if stat.S_ISDIR(st.st_mode):
            return "directory"
        return "symlink" if stat.S_ISLNK(st.st_mode) else "file"

    def parent(self, parts, create, strict=True):
        """An fd (the caller closes it) of the directory holding PARTS. create: missing
        directories are made (0755, as kit image convert makes them), a symlink or file on the
        way refused (strict) or None; without create None where it is missing."""
        key = b"/".join(parts[:-1])
        if key == self.cached:
            return os.dup(self.cached_fd)
        start, fd = 0, self.fd
        if self.cached and key.startswith(self.cached + b"/"):  # from there (in tar order: often)
            start, fd = self.cached.count(b"/") + 1, self.cached_fd
        fd = os.dup(fd)
        try:
            for n in range(start, len(parts) - 1):
                nxt = self.step(fd, parts, n, create=create, strict=strict)
                os.close(fd)
                fd = nxt
                if fd is None:
                    return None
        except BaseException:
            if fd is not None:
                os.close(fd)
            raise
        if self.cached_fd is not None:
            os.close(self.cached_fd)
        self.cached, self.cached_fd = key, os.dup(fd)
        return fd

    def step(self, fd, parts, n, *, create, strict):
        """An fd of PARTS[n] in the directory FD (made if missing and `create`), or None."""
        try:
            return os.open(parts[n], DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                raise
        kind, where = self.kind(fd, parts[n]), b"/".join(parts[: n + 1]).decode()
        if kind is None and create and (strict or not where.startswith("dev/")):
            os.mkdir(parts[n], 0o700, dir_fd=fd)
            made = os.open(parts[n], DIR_FLAGS, dir_fd=fd)
            os.fchmod(made, self.mode(0o755, True))
            return made
        if kind is None or not (create and strict):
            return None
        raise RuntimeError(
            "member %r would be written through the %s %r; the image is unsafe"
            % (b"/".join(parts).decode(), kind, where)
        )

    def add(self, head, rel, stream):
        """Make member HEAD at REL as kit.image.flatten emits a one-layer image's member: the
        root's own header, whiteouts, /dev and devices, FIFOs and unknown types are dropped; a
        name is made once (a directory may repeat); a hard link to a symlink is a symlink."""
        parts = rel.split(b"/")
        if not rel:
            return
        if parts[-1].startswith(b".wh."):
            fd = self.parent(parts, create=True, strict=False)
            if fd is not None:
                os.close(fd)
            return
        kind = "file" if head.type in REGULAR else KINDS.get(head.type)
        if kind is None or rel.startswith(b"dev/"):
            return
        fd = self.parent(parts, create=True)
        try:
            had = self.kind(fd, parts[-1])
            if had == "directory" and kind == "directory":
                return
            if had:
                raise RuntimeError(
                    "member %r (%s) clashes with the %s already there (a name that appears "
                    "twice, or the parent of an earlier member)" % (rel.decode(), kind, had)
                )
            if kind == "directory":
                os.mkdir(parts[-1], 0o700, dir_fd=fd)
                made = os.open(parts[-1], DIR_FLAGS, dir_fd=fd)
                try:
                    os.fchmod(made, self.mode(head.mode, True))
                finally:
                    os.close(made)
            elif kind == "file":
                self.write(fd, parts[-1], head=head, stream=stream)
            elif kind == "symlink":
                self.symlink(fd, parts, head.linkname)
            else:
                self.hardlink(fd, parts, head.linkname)
        finally:
            os.close(fd)

    def write(self, dirfd, name, *, head, stream):
        self.total += head.size
        if self.total > self.budget:
            raise OSError(errno.ENOSPC, "the image unpacks to more than the free space")
        out = os.open(
            name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC, 0o600, dir_fd=dirfd
        )
        try:
            left = head.size
            while left:
                data = stream.read(min(BUF, left))
                if len(data) < min(BUF, left):
                    raise RuntimeError("member %r: the archive ends inside it" % head.name[:80])
                view = memoryview(data)
                while len(view):
                    view = view[os.write(out, view) :]
                left -= len(data)
            head.consumed = head.size
            os.fchmod(out, self.mode(head.mode, False))
        finally:
            os.close(out)

    def symlink(self, dirfd, parts, target):
        """Its target as the image has it (read inside the image; never followed here), unless
        it is empty, not UTF-8, or relative and climbing out of the image (refused)."""
        try:
            raw = target.encode("utf-8")
        except UnicodeEncodeError:
            raw = None
        rel = b"/".join(parts).decode()
        if not raw or not (raw.startswith(b"/") or contained(parts[:-1], raw)):
            raise RuntimeError(
                "symlink %r -> %r: empty, not UTF-8 or out of the image" % (rel, target[:80])
            )
        os.symlink(raw, parts[-1], dir_fd=dirfd)

    def hardlink(self, dirfd, parts, target):
        """A second name for a file made before, or for a symlink made before (a symlink of its
        own, with the same target); anything else is refused."""
        tparts = target.split(b"/")
        tfd = self.parent(tparts, create=False) if target else None
        try:
            kind = self.kind(tfd, tparts[-1]) if tfd is not None else None
            if kind == "file":
                os.link(
                    tparts[-1], parts[-1], src_dir_fd=tfd, dst_dir_fd=dirfd, follow_symlinks=False
                )
            elif kind == "symlink":
                self.symlink(dirfd, parts, os.readlink(tparts[-1], dir_fd=tfd).decode("utf-8"))
            else:
                raise RuntimeError(
                    "hard link %r points to %r, which is %s in the image before it"
                    % (b"/".join(parts).decode(), target.decode(), "a " + kind if kind else "not")
                )
        finally:
            if tfd is not None:
                os.close(tfd)

    def finish(self):
        """kit image convert refuses an image whose /ch is no directory (Charliecloud keeps its
        metadata there); the root gets 0755 as convert's own (umask applied)."""
        kind = self.kind(self.fd, b"ch")
        if kind not in (None, "directory"):
            raise RuntimeError(
                "/ch is a %s in the image; Charliecloud needs a directory there" % kind
            )
        os.fchmod(self.fd, self.mode(0o755, True))


def current_umask():
    mask = os.umask(0o077)
    os.umask(mask)
    return mask & 0o777


def unpack(fd, out, budget):
    """Unpack the tarball FD (gzip or not) as the new directory OUT, in Python alone, or raise
    RuntimeError (one line) having checked the whole stream: no member outside OUT, none written
    through a symlink, hard links only to what was unpacked before, no devices or FIFOs (dropped,
    as kit image convert drops them), no setuid or setgid bits, the umask applied, at most
    MAX_MEMBERS members and `budget` bytes of files. The caller removes OUT on failure."""
    os.mkdir(out, 0o700)
    tree = Tree(out, current_umask(), budget)
    try:
        count, stream = 0, TarStream(fd)
        for head in members(stream):
            count += 1
            if count > MAX_MEMBERS:
                raise RuntimeError("more than %d members: refused" % MAX_MEMBERS)
            tree.add(head, check_member(head), stream)
        tree.finish()
    except zlib.error as exc:
        raise RuntimeError("not a readable image tarball: %s" % exc) from None
    finally:
        tree.close()


def copy_fd(fd, out):
    """A SquashFS upload is installed as a copy (a new file: O_EXCL, no link followed)."""
    dst = create_new(out, 0o644)
    try:
        offset, size = 0, os.fstat(fd).st_size
        while offset < size:
            data = os.pread(fd, BUF, offset)
            if not data:
                raise RuntimeError("the source shrank while being copied")
            view = memoryview(data)
            while len(view):
                view = view[os.write(dst, view) :]
            offset += len(data)
        os.fsync(dst)
    finally:
        os.close(dst)


def session_members(sid):
    """(pid, state) of the processes of session `sid`, from /proc ([] where there is none)."""
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    found = []
    for pid in pids:
        try:
            with open("/proc/%s/stat" % pid, "rb") as fh:
                fields = fh.read(4096).rsplit(b")", 1)[1].split()
            if int(fields[3]) == sid:
                found.append((pid, fields[0]))
        except (OSError, IndexError, ValueError):
            continue
    return found


def session_io(sid):
    """Bytes read + written so far by the processes of session `sid` (None: /proc cannot tell)."""
    total, seen = 0, False
    for pid, _ in session_members(sid):
        try:
            with open("/proc/%s/io" % pid, "rb") as fh:
                for line in fh.read(4096).splitlines():
                    key, _, value = line.partition(b":")
                    if key in (b"rchar", b"wchar"):
                        total += int(value)
                        seen = True
        except (OSError, IndexError, ValueError):
            continue
    return total if seen else None


def reap(proc, block):
    """Has PROC ended (its returncode then set)? os.waitpid, not Popen.wait: a stop signal that
    interrupted a Popen.wait inside its lock leaves the lock held, and the next Popen.wait then
    blocks forever."""
    if proc.returncode is not None:
        return True
    try:
        pid, status = os.waitpid(proc.pid, 0 if block else os.WNOHANG)
    except ChildProcessError:  # reaped elsewhere: its status is lost (Popen says 0 then too)
        pid, status = proc.pid, 0
    if pid == 0:
        return False
    proc.returncode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    return True


def stop_group(proc):
    """SIGKILL ch-convert and its children (its session), reap it and wait (bounded) until they
    are gone; a stop signal meanwhile is held back until then."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        reap(proc, True)
        for _ in range(100):
            if all(state in (b"Z", b"X") for _, state in session_members(proc.pid)):
                return
            time.sleep(0.05)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def convert(src, out, fmt, *, work, stall, lock):
    """ch-convert SRC to OUT under a watchdog: killed (with its children) after `stall` seconds
    in which its process group read and wrote nothing, or when this installer is stopped."""
    log_path = os.path.join(work, "ch-convert.log")
    log = create_new(log_path)
    # The stop signals are held back until `proc` is known, so that one arriving while the
    # child starts is raised inside the try below, which stops it (the child unblocks them).
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        proc = subprocess.Popen(
            ["ch-convert", "-i", "tar", "-o", fmt, src, out],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            pass_fds=(lock,),  # it holds the imgdir lock while it runs
            preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS),
        )
    except BaseException:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        raise
    finally:
        os.close(log)
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        last, idle, looked = None, 0.0, time.monotonic()
        while not reap(proc, False):
            time.sleep(0.05)
            if time.monotonic() - looked < 1.0:
                continue
            looked = time.monotonic()
            done = session_io(proc.pid)
            if done is None or done == last:
                idle += 1.0
            else:
                last, idle = done, 0.0
            if idle >= stall:
                stop_group(proc)
                raise RuntimeError(
                    "ch-convert read and wrote nothing for %d s; it was stopped" % stall
                )
    except BaseException:
        stop_group(proc)
        raise
    if proc.returncode:
        with open(log_path, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - 800))
            raise RuntimeError(fh.read().decode("utf-8", "replace").strip())


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
            if not SHA_RE.fullmatch(sha):
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
                raise Usage("install format %s: use dir, squash or unpack" % args[6])
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
            "kit transfer %s was stopped by a signal; what it had begun was removed (any "
            "NAME.current still names a complete image); run it again" % mode,
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
