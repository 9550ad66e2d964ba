"""The remote half of `kit transfer`: run on the site as `python3 -c <this> MODE ARGS...`.

It is sent over SSH (base64 inside a one-line command, so any login shell passes it
through untouched) and needs only a stock python3 >= 3.6 on the transfer node: no
f-string tricks beyond 3.6, no third-party modules. Every mode answers with JSON lines
on stdout; failures print `KIT-ERROR <code> <message>` on stderr and exit nonzero.

Modes:
  probe   DIR NAME SIZE SHA CHUNK PATH...         what is there already, and which PATHs (the
                                                  pair's host paths) are missing (no change)
  push    DIR NAME SIZE SHA CHUNK DIRECT PATH...  probe, print it as "KIT-PROBE <json>" (a
                                                  login shell may print before us), read the
                                                  sender's plan line ("KEEP i,j,..." / "SKIP"),
                                                  receive the other chunks from stdin (DIRECT 1:
                                                  O_DIRECT where possible), verify, rename
  install SRC IMGDIR NAME VERSION KEEPN DRY FMT   ch-convert to FMT (dir|squash) as NAME@VERSION,
                                          switch NAME.current, prune
  versions IMGDIR NAME                    the installed NAME@... entries, newest first, and current
  switch  IMGDIR NAME ENTRY DRY           point NAME.current at ENTRY (an installed version)
"""
import errno
import fcntl
import hashlib
import json
import mmap
import os
import queue
import shutil
import subprocess
import sys
import threading
import time

BUF = 1 << 20
ALIGN = 4096            # O_DIRECT: buffer address, length and offset
BLOCK, NBUF = 4 << 20, 4  # write buffers in flight between the pipe and the disk
PROBE_MARK = "KIT-PROBE "
EXIT_NOSPACE, EXIT_SHORT, EXIT_MISMATCH, EXIT_USAGE, EXIT_INSTALL, EXIT_BUSY = 28, 3, 4, 5, 6, 7


def widen_pipe(fd):
    """Ask for a 1 MiB pipe (Linux F_SETPIPE_SZ): fewer wake-ups between sshd and us."""
    try:
        fcntl.fcntl(fd, 1031, 1 << 20)
    except OSError:
        pass


def fail(code, message):
    sys.stderr.write("KIT-ERROR %d %s\n" % (code, message))
    sys.stderr.flush()
    sys.exit(code)


def free_bytes(path):
    """Free bytes for unprivileged writers on the filesystem holding path (or its nearest parent)."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def names(directory, name):
    return (os.path.join(directory, name), os.path.join(directory, "." + name + ".part"),
            os.path.join(directory, "." + name + ".part.state"))


def read_state(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def hash_range(fh, offset, length, *hashers):
    fh.seek(offset)
    left = length
    while left:
        data = fh.read(min(BUF, left))
        if not data:
            return False
        for h in hashers:
            h.update(data)
        left -= len(data)
    return True


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        hash_range(fh, 0, os.path.getsize(path), h)
    return h.hexdigest()


def probe(directory, name, size, sha, chunk, paths):
    print(json.dumps(inspect(directory, name, size, sha, chunk, paths)))


def inspect(directory, name, size, sha, chunk, paths):
    final, part, state_path = names(directory, name)
    out = {"dir": os.path.abspath(directory), "dir_exists": os.path.isdir(directory),
           "free": free_bytes(directory), "final_matches": False, "part_size": 0,
           "chunk_hashes": [], "python": sys.version.split()[0],
           "missing": [p for p in paths if not os.path.exists(p)]}
    if os.path.isfile(final) and os.path.getsize(final) == size:
        out["final_matches"] = file_sha256(final) == sha
    state = read_state(state_path)
    if (os.path.isfile(part) and state and state.get("sha256") == sha
            and state.get("size") == size and state.get("chunk") == chunk):
        out["part_size"] = os.path.getsize(part)
        with open(part, "rb") as fh:
            for index in range(min(out["part_size"], size) // chunk):
                h = hashlib.sha256()
                hash_range(fh, index * chunk, chunk, h)
                out["chunk_hashes"].append(h.hexdigest())
    return out


def lock_dir(directory):
    """One push at a time writes into a directory (held until this process exits)."""
    try:
        os.makedirs(directory, exist_ok=True)
        fd = os.open(directory, os.O_RDONLY)
    except OSError as exc:
        fail(EXIT_NOSPACE if exc.errno in (errno.ENOSPC, errno.EDQUOT) else EXIT_USAGE,
             "cannot create or open %s: %s" % (directory, exc))
    for _ in range(50):  # a push whose connection just dropped may take a moment to exit
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError:
            time.sleep(0.1)
    fail(EXIT_BUSY, "another kit transfer push is writing into %s right now; wait for it to end "
         "(or stop it: its upload resumes later)" % os.path.abspath(directory))


def push(directory, name, size, sha, chunk, direct, paths):
    widen_pipe(sys.stdin.fileno())
    lock_dir(directory)
    sys.stdout.write(PROBE_MARK + json.dumps(inspect(directory, name, size, sha, chunk, paths)) + "\n")
    sys.stdout.flush()
    plan = sys.stdin.buffer.readline().decode("ascii", "replace").split()
    if plan[:1] == ["KEEP"]:
        keep = set(int(i) for i in "".join(plan[1:]).split(",") if i)
        receive(directory, name, size, sha, chunk, keep, direct)
    elif plan[:1] == ["SKIP"]:
        print(json.dumps({"path": os.path.abspath(names(directory, name)[0]), "sha256": sha}))
    else:
        fail(EXIT_USAGE, "the sender stopped before sending (%s)" % " ".join(plan or ["nothing"]))


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
        flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if fresh else 0)
        self.direct, self.fd = False, None  # direct: the bulk went O_DIRECT (for the report)
        if direct and chunk % ALIGN == 0 and hasattr(os, "O_DIRECT"):
            try:
                self.fd, self.direct = os.open(path, flags | os.O_DIRECT, 0o644), True
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
        if self.fd is None:
            self.fd = os.open(path, flags, 0o644)
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
                fcntl.fcntl(self.fd, fcntl.F_SETFL, fcntl.fcntl(self.fd, fcntl.F_GETFL) & ~os.O_DIRECT)
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
            fail(EXIT_NOSPACE, "no space left on the remote filesystem at offset %d of the upload" % offset)
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


def receive(directory, name, size, sha, chunk, keep, direct):
    """Walk the file chunk by chunk: kept chunks are read back from disk, the others come
    from stdin; the full sha256 is computed over the bytes in file order, as they are written."""
    final, part, state_path = names(directory, name)
    try:  # the directory exists: lock_dir made it
        state = read_state(state_path)
        if not (state and state.get("sha256") == sha and state.get("size") == size
                and state.get("chunk") == chunk):
            keep = set()
            tmp = state_path + ".tmp"
            with open(tmp, "w") as fh:
                json.dump({"sha256": sha, "size": size, "chunk": chunk}, fh)
            os.replace(tmp, state_path)
        writer = Writer(part, not (keep and os.path.exists(part)), chunk, direct)
        kept = open(part, "rb") if keep else None
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            fail(EXIT_NOSPACE, "no space left on the remote filesystem in %s" % directory)
        fail(EXIT_USAGE, "cannot write in %s: %s" % (directory, exc))
    full = hashlib.sha256()
    stdin = sys.stdin.buffer
    for index in range((size + chunk - 1) // chunk):
        offset, end = index * chunk, min(size, (index + 1) * chunk)
        if index in keep:
            if not hash_range(kept, offset, end - offset, full):
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
    commit = stdin.readline().decode("ascii", "replace").split()
    got = full.hexdigest()
    if got != sha or commit != ["COMMIT", sha]:
        os.unlink(part)
        os.unlink(state_path)
        fail(EXIT_MISMATCH, "sha256 of the received file is %s, expected %s (sender said %s); "
             "the partial upload was removed" % (got, sha, " ".join(commit) or "nothing"))
    os.replace(part, final)
    os.unlink(state_path)
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    print(json.dumps({"path": os.path.abspath(final), "sha256": got, "direct_io": writer.direct}))


def versions(imgdir, name):
    prefix = name + "@"
    return [e for e in os.listdir(imgdir) if e.startswith(prefix)] if os.path.isdir(imgdir) else []


def newest_first(imgdir, entries):
    return sorted(entries, key=lambda v: os.lstat(os.path.join(imgdir, v)).st_mtime, reverse=True)


def current_entry(imgdir, name):
    current = os.path.join(imgdir, name + ".current")
    return os.readlink(current) if os.path.islink(current) else None


def point_current(imgdir, name, entry):
    """NAME.current -> ENTRY: a new link made aside, then renamed over the old one (atomic)."""
    link_tmp = os.path.join(imgdir, "." + name + ".current.tmp")
    remove(link_tmp)
    os.symlink(entry, link_tmp)
    os.replace(link_tmp, os.path.join(imgdir, name + ".current"))


def listing(imgdir, name):
    current = current_entry(imgdir, name)
    out = []
    for entry in newest_first(imgdir, versions(imgdir, name)):
        path = os.path.join(imgdir, entry)
        out.append({"entry": entry, "current": entry == current,
                    "format": "dir" if os.path.isdir(path) else "squash",
                    "installed": os.lstat(path).st_mtime})
    print(json.dumps({"dir": os.path.abspath(imgdir), "current": current, "versions": out}))


def switch(imgdir, name, entry, dry):
    installed = versions(imgdir, name)
    if entry not in installed:
        fail(EXIT_USAGE, "%s is not installed in %s (installed: %s)"
             % (entry, os.path.abspath(imgdir), ", ".join(newest_first(imgdir, installed)) or "none"))
    previous = current_entry(imgdir, name)
    if not dry:
        point_current(imgdir, name, entry)
    print(json.dumps({"current": os.path.join(os.path.abspath(imgdir), name + ".current"),
                      "previous": previous, "target": entry, "dry_run": dry}))


def remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def install(src, imgdir, name, version, keep_n, dry, fmt):
    """Unpack SRC as IMGDIR/NAME@VERSION (a directory, or with FMT squash a .sqfs; a .sqfs
    SRC is copied), point NAME.current at it (symlink made aside then renamed over the old
    one), prune to KEEPN previous versions."""
    is_sqfs = src.endswith((".sqfs", ".squashfs", ".squash"))  # kit.image_names.SQUASH
    entry = name + "@" + version + (".sqfs" if is_sqfs or fmt == "squash" else "")
    target = os.path.join(imgdir, entry)
    current = os.path.join(imgdir, name + ".current")
    previous = current_entry(imgdir, name)
    # the version current until now is kept first (after a rollback it is not the newest)
    others = newest_first(imgdir, [v for v in versions(imgdir, name) if v != entry])
    others.sort(key=lambda v: v != previous)
    prune = others[keep_n:]
    out = {"target": os.path.abspath(target), "current": os.path.abspath(current),
           "previous": previous, "exists": os.path.exists(target), "prune": prune,
           "free": free_bytes(imgdir), "dry_run": dry}
    if dry:
        print(json.dumps(out))
        return
    os.makedirs(imgdir, exist_ok=True)
    if not out["exists"]:
        tmp = os.path.join(imgdir, "." + entry + ".tmp")
        remove(tmp)
        try:
            if is_sqfs:
                shutil.copyfile(src, tmp)
            else:
                proc = subprocess.Popen(["ch-convert", "-i", "tar", "-o", fmt, src, tmp],
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                log = proc.communicate()[0].decode("utf-8", "replace")
                if proc.returncode:
                    raise RuntimeError(log.strip()[-800:])
        except (OSError, RuntimeError) as exc:
            text = str(exc)
            nospace = (getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT)
                       or "No space left" in text or "Disk quota" in text
                       or free_bytes(imgdir) < (1 << 20))  # tar may only say "Wrote only N bytes"
            remove(tmp)
            if nospace:
                fail(EXIT_NOSPACE, "no space left in %s while installing %s; nothing changed, %s is "
                     "still current" % (imgdir, entry, previous or "no version"))
            if getattr(exc, "errno", None) == errno.ENOENT and not is_sqfs:
                fail(EXIT_INSTALL, "ch-convert is not on the PATH of a non-interactive login on this "
                     "host; install Charliecloud there (or put it on PATH in the login files); "
                     "the image itself was uploaded and verified")
            fail(EXIT_INSTALL, "ch-convert of %s failed; nothing changed: %s" % (src, text))
        os.rename(tmp, target)
    point_current(imgdir, name, entry)
    for old in prune:
        remove(os.path.join(imgdir, old))
    print(json.dumps(out))


def main(argv):
    if not argv:
        fail(EXIT_USAGE, "usage: MODE ARGS...")
    mode, args = argv[0], argv[1:]
    try:
        if mode == "probe":
            probe(args[0], args[1], int(args[2]), args[3], int(args[4]), args[5:])
        elif mode == "push":
            push(args[0], args[1], int(args[2]), args[3], int(args[4]), args[5] == "1", args[6:])
        elif mode == "install":
            if args[6] not in ("dir", "squash"):
                fail(EXIT_USAGE, "install format %s: use dir or squash" % args[6])
            install(args[0], args[1], args[2], args[3], int(args[4]), args[5] == "1", args[6])
        elif mode == "versions":
            listing(args[0], args[1])
        elif mode == "switch":
            switch(args[0], args[1], args[2], args[3] == "1")
        else:
            fail(EXIT_USAGE, "unknown mode %s" % mode)
    except (IndexError, ValueError) as exc:
        fail(EXIT_USAGE, "bad arguments for %s: %s" % (mode, exc))


if __name__ == "__main__":
    main(sys.argv[1:])
