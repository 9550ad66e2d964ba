"""The receiving end of `kit transfer push` on the site: what is there already (probe), then the
upload's chunks from stdin, written, verified and renamed into place (push).

Part of the script the site runs (remote_script.py): Python 3.6 and the standard library only;
kit.transfer.assemble puts this text in place of its import.
"""

import errno
import fcntl
import hashlib
import json
import mmap
import os
import queue
import re
import stat
import sys
import threading

from kit.transfer.remote_common import (
    ALIGN,
    BLOCK,
    CLOEXEC,
    EXIT_MISMATCH,
    EXIT_NOSPACE,
    EXIT_SHORT,
    EXIT_USAGE,
    LINE_MAX,
    NBUF,
    NOFOLLOW,
    PROBE_MARK,
    PUSH_WAIT,
    Heartbeat,
    Refused,
    Usage,
    fail,
    file_sha256,
    free_bytes,
    hash_range,
    lock_dir,
    names,
    open_regular,
    own_file,
    read_state,
    widen_pipe,
    write_state,
)


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
        "another kit transfer push is writing into %s right now; fix: "
        "wait for it to end (or stop it: its upload resumes later)",
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
                "%s is a symlink; kit transfer does not follow links here; fix: remove it" % path
            ) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise Refused(
            "%s is not a regular file of this user; it is left alone; fix: remove it" % path
        )
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
