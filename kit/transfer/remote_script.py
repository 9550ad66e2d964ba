"""The remote half of `kit transfer`: run on the site as `python3 -c <this> MODE ARGS...`.

It is sent over SSH (base64 inside a one-line command, so any login shell passes it
through untouched) and needs only a stock python3 >= 3.6 on the transfer node: no
f-string tricks beyond 3.6, no third-party modules. Every mode answers with JSON lines
on stdout; failures print `KIT-ERROR <code> <message>` on stderr and exit nonzero.

Modes:
  probe   DIR NAME SIZE SHA CHUNK        what is there already (no change)
  push    DIR NAME SIZE SHA CHUNK        probe, print it, read the sender's plan line from stdin
                                         ("KEEP i,j,..." / "SKIP" / "ABORT"), then receive the
                                         other chunks from stdin, verify and rename: one session
  install SRC IMGDIR NAME VERSION KEEPN DRY FMT   ch-convert to FMT (dir|squash) as NAME@VERSION,
                                         switch NAME.current, prune
"""
import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time

BUF = 1 << 20
EXIT_NOSPACE, EXIT_SHORT, EXIT_MISMATCH, EXIT_USAGE, EXIT_INSTALL, EXIT_BUSY = 28, 3, 4, 5, 6, 7


def widen_pipe(fd):
    """Ask for a 1 MiB pipe (Linux F_SETPIPE_SZ): fewer wake-ups between sshd and us."""
    try:
        import fcntl
        fcntl.fcntl(fd, 1031, 1 << 20)
    except (ImportError, OSError):
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


def probe(directory, name, size, sha, chunk):
    print(json.dumps(inspect(directory, name, size, sha, chunk)))


def inspect(directory, name, size, sha, chunk):
    final, part, state_path = names(directory, name)
    out = {"dir": os.path.abspath(directory), "dir_exists": os.path.isdir(directory),
           "free": free_bytes(directory), "final_matches": False, "part_size": 0,
           "chunk_hashes": [], "python": sys.version.split()[0]}
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
    import fcntl
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


def push(directory, name, size, sha, chunk):
    widen_pipe(sys.stdin.fileno())
    lock_dir(directory)
    sys.stdout.write(json.dumps(inspect(directory, name, size, sha, chunk)) + "\n")
    sys.stdout.flush()
    plan = sys.stdin.buffer.readline().decode("ascii", "replace").split()
    if plan[:1] == ["KEEP"]:
        receive(directory, name, size, sha, chunk, set(int(i) for i in "".join(plan[1:]).split(",") if i))
    elif plan[:1] == ["SKIP"]:
        print(json.dumps({"path": os.path.abspath(names(directory, name)[0]), "sha256": sha}))
    else:
        fail(EXIT_USAGE, "the sender stopped before sending (%s)" % " ".join(plan or ["nothing"]))


def write_all(fh, data, offset):
    try:
        fh.write(data)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            fail(EXIT_NOSPACE, "no space left on the remote filesystem at offset %d of the upload" % offset)
        raise


class Flusher(threading.Thread):
    """fdatasync in the background once per chunk, so the final fsync before the rename
    has little left to write: the disk works while the network does."""

    def __init__(self, fd):
        threading.Thread.__init__(self, daemon=True)
        self.fd, self.wake, self.done, self.error = fd, threading.Event(), False, None
        self.start()

    def run(self):
        while not self.done:
            self.wake.wait()
            self.wake.clear()
            try:
                os.fdatasync(self.fd)
            except OSError as exc:
                self.error = exc

    def kick(self):
        self.wake.set()

    def finish(self):
        self.done = True
        self.wake.set()
        self.join()
        if self.error:
            raise self.error


def receive(directory, name, size, sha, chunk, keep):
    """Walk the file chunk by chunk: kept chunks are read back from disk, the others come
    from stdin; the full sha256 is computed over the bytes as they end up on disk/in place."""
    final, part, state_path = names(directory, name)
    try:
        os.makedirs(directory, exist_ok=True)
        state = read_state(state_path)
        if not (state and state.get("sha256") == sha and state.get("size") == size
                and state.get("chunk") == chunk):
            keep = set()
            tmp = state_path + ".tmp"
            with open(tmp, "w") as fh:
                json.dump({"sha256": sha, "size": size, "chunk": chunk}, fh)
            os.replace(tmp, state_path)
        fh = open(part, "r+b" if os.path.exists(part) and keep else "wb")
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            fail(EXIT_NOSPACE, "no space left on the remote filesystem in %s" % directory)
        fail(EXIT_USAGE, "cannot write in %s: %s" % (directory, exc))
    full = hashlib.sha256()
    stdin = sys.stdin.buffer
    buf = bytearray(BUF)
    flusher = Flusher(fh.fileno())
    with fh:
        for index in range((size + chunk - 1) // chunk):
            offset, length = index * chunk, min(chunk, size - index * chunk)
            flusher.kick()
            if index in keep:
                if not hash_range(fh, offset, length, full):
                    fail(EXIT_SHORT, "kept chunk %d of %s is short" % (index, part))
                continue
            fh.seek(offset)
            left = length
            while left:
                view = memoryview(buf)[:min(BUF, left)]
                n = stdin.readinto(view)
                if not n:
                    fh.flush()
                    fail(EXIT_SHORT, "upload stream ended at offset %d of %d" % (offset + length - left, size))
                full.update(view[:n])
                write_all(fh, view[:n], offset + length - left)
                left -= n
        fh.truncate(size)
        try:
            fh.flush()
            flusher.finish()
            os.fsync(fh.fileno())
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                fail(EXIT_NOSPACE, "no space left on the remote filesystem while flushing %s" % part)
            raise
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
    print(json.dumps({"path": os.path.abspath(final), "sha256": got}))


def versions(imgdir, name):
    prefix = name + "@"
    return [e for e in os.listdir(imgdir) if e.startswith(prefix)] if os.path.isdir(imgdir) else []


def remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def install(src, imgdir, name, version, keep_n, dry, fmt):
    """Unpack SRC as IMGDIR/NAME@VERSION (a directory, or with FMT squash a .sqfs; a .sqfs
    SRC is copied), point NAME.current at it (symlink made aside then renamed over the old
    one), prune to KEEPN previous versions."""
    is_sqfs = src.endswith(".sqfs")
    entry = name + "@" + version + (".sqfs" if is_sqfs or fmt == "squash" else "")
    target = os.path.join(imgdir, entry)
    current = os.path.join(imgdir, name + ".current")
    previous = os.readlink(current) if os.path.islink(current) else None
    others = [v for v in versions(imgdir, name) if v != entry]
    others.sort(key=lambda v: os.lstat(os.path.join(imgdir, v)).st_mtime, reverse=True)
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
    link_tmp = os.path.join(imgdir, "." + name + ".current.tmp")
    remove(link_tmp)
    os.symlink(entry, link_tmp)
    os.replace(link_tmp, current)
    for old in prune:
        remove(os.path.join(imgdir, old))
    print(json.dumps(out))


def main(argv):
    if not argv:
        fail(EXIT_USAGE, "usage: MODE ARGS...")
    mode, args = argv[0], argv[1:]
    try:
        if mode == "probe":
            probe(args[0], args[1], int(args[2]), args[3], int(args[4]))
        elif mode == "push":
            push(args[0], args[1], int(args[2]), args[3], int(args[4]))
        elif mode == "install":
            if args[6] not in ("dir", "squash"):
                fail(EXIT_USAGE, "install format %s: use dir or squash" % args[6])
            install(args[0], args[1], args[2], args[3], int(args[4]), args[5] == "1", args[6])
        else:
            fail(EXIT_USAGE, "unknown mode %s" % mode)
    except (IndexError, ValueError) as exc:
        fail(EXIT_USAGE, "bad arguments for %s: %s" % (mode, exc))


if __name__ == "__main__":
    main(sys.argv[1:])
