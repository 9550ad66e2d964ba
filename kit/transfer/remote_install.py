"""Installing an uploaded image on the site as NAME@VERSION (ch-convert, the script's own unpack, or
a SquashFS or SIF file as it is), the switch of NAME.current, pruning, and the versions listing.

Part of the script the site runs (remote_script.py): Python 3.6 and the standard library only;
kit.transfer.assemble puts this text in place of its import.
"""

import errno
import hashlib
import json
import os
import re
import signal
import stat
import subprocess
import threading
import time

from kit.artifact_names import CURRENT, SIF, SIF_MAGIC, SIF_MAGIC_AT, SQUASH, TAR, TAR_GZ
from kit.transfer.remote_common import (
    BUF,
    EXIT_INSTALL,
    EXIT_MISMATCH,
    EXIT_NOSPACE,
    EXIT_USAGE,
    FILE_ENTRY,
    STOP_SIGNALS,
    Refused,
    Usage,
    create_new,
    describe,
    entry_re,
    fail,
    free_bytes,
    hash_range,
    lock_dir,
    open_regular,
)
from kit.transfer.remote_unpack import (
    unpack,
)
from kit.tree_removal import remove_dir

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
    """Is ENTRY a complete install (a directory, or a .sqfs or .sif file, of this user)? Anything
    else under that name is refused: current never points at what the kit did not make."""
    path = os.path.join(imgdir, entry)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    want = stat.S_ISREG if entry.endswith((".sqfs", ".sif")) else stat.S_ISDIR
    if not want(st.st_mode) or st.st_uid != os.geteuid():
        raise Refused(
            "%s is %s, not a version kit transfer installed; it is left alone; fix: remove it"
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
        remove_dir(path)
    else:
        os.unlink(path)


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
        r"\.%s(@[0-9a-f]{12,64}%s|%s)(\.[0-9]+)?\.tmp"
        % (re.escape(name), FILE_ENTRY, re.escape(CURRENT))
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
            "%s is %s, not the link kit transfer makes; it is left alone; fix: remove it"
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


def entry_format(entry):
    """An installed version's form, by its name: dir, squash or sif."""
    return "squash" if entry.endswith(".sqfs") else "sif" if entry.endswith(".sif") else "dir"


def listing(imgdir, name):
    current = current_entry(imgdir, name)
    out = []
    for entry in newest_first(imgdir, versions(imgdir, name)):
        path = os.path.join(imgdir, entry)
        out.append(
            {
                "entry": entry,
                "current": entry == current,
                "format": entry_format(entry),
                "installed": os.lstat(path).st_mtime,
            }
        )
    print(json.dumps({"dir": os.path.abspath(imgdir), "current": current, "versions": out}))


def switch(imgdir, name, entry, *, dry, wait):
    if not entry_re(name).fullmatch(entry):
        raise Usage("ENTRY %r is not a version of %s (NAME@<hex>[.sqfs|.sif])" % (entry, name))
    lock = (
        None
        if dry
        else lock_dir(
            imgdir,
            wait,
            "another kit transfer install or rollback is running in %s; fix: try again when it ends",
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


def source_suffix(src):
    known = TAR_GZ + TAR + SQUASH + SIF
    for suffix in known:
        if src.endswith(suffix):
            return suffix
    raise Usage("SRC %r: not an image file (%s)" % (src, ", ".join(known)))


def entry_suffix(suffix, fmt):
    """What follows NAME@VERSION for SRC's suffix installed as FMT; Usage where FMT cannot make an
    image of that source (the sender's runtime chose FMT: kit.runtime's install_format)."""
    if suffix in SIF or fmt == "sif":
        if suffix not in SIF or fmt != "sif":
            raise Usage(
                "a SIF is installed only as a SIF (FMT sif, an Apptainer site), "
                "and FMT sif installs only a .sif; got SRC suffix %s with FMT %s" % (suffix, fmt)
            )
        return ".sif"
    if suffix in SQUASH and fmt == "unpack":
        raise Usage(
            "a SquashFS image is not unpacked without Charliecloud; fix: "
            "push the image as a tarball (kit image convert SRC OUT.tar.gz)"
        )
    return ".sqfs" if suffix in SQUASH or fmt == "squash" else ""


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
    SRC is copied, a .sif SRC too, as NAME@VERSION.sif), point NAME.current at it (symlink made
    aside then renamed over the old one), prune to KEEPN previous versions. All under the imgdir
    lock; SRC must still be the image whose sha256 starts with VERSION."""
    suffix = source_suffix(src)
    entry = name + "@" + version + entry_suffix(suffix, fmt)
    if dry:
        plan(imgdir, name, entry, keep_n=keep_n, dry=True)
        return
    lock = lock_dir(
        imgdir,
        wait,
        "another kit transfer install is running in %s (or the ch-convert it started); fix: "
        "push again when it ends, nothing is sent twice",
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


def check_sif(fd, src):
    """A SIF upload is a SIF: its magic after the launch line (as kit.image.sif reads it), or it
    is refused before anything is installed (a file named .sif Apptainer would not run)."""
    if os.pread(fd, len(SIF_MAGIC), SIF_MAGIC_AT) != SIF_MAGIC:
        fail(
            EXIT_INSTALL,
            "%s is not a SIF file (no SIF_MAGIC at byte %d); nothing was installed; fix: "
            "push a SIF written by kit image convert SRC OUT.sif" % (src, SIF_MAGIC_AT),
        )


def check_source(fd, src, version):
    """SRC is the image pushed as VERSION (not replaced since by another push of the name)."""
    h = hashlib.sha256()
    size = os.fstat(fd).st_size
    with os.fdopen(os.dup(fd), "rb") as fh:
        hash_range(fh, 0, size, h)
    if not h.hexdigest().startswith(version):
        fail(
            EXIT_MISMATCH,
            "%s is no longer the image uploaded as %s (sha256 %s): another push replaced it, "
            "nothing was installed; fix: push again" % (src, version, h.hexdigest()[:16]),
        )


def build(src, suffix, imgdir, *, entry, version, fmt, stall, lock, previous):
    """Make IMGDIR/ENTRY in a private directory (mkdir: nobody else's files in it), then rename it
    into place: the entry exists only once complete. The work dir goes on any failure."""
    fd = open_regular(src)
    work = ".%s.%d.tmp" % (entry, os.getpid())
    made = False
    try:
        check_source(fd, src, version)
        if suffix in SIF:
            check_sif(fd, src)
        # the stop signals wait until `made` says whether the mkdir made it: one arriving between
        # the two neither leaves the work dir behind nor has a directory this run did not make
        # removed (a failed mkdir leaves `made` False)
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            os.mkdir(os.path.join(imgdir, work), 0o700)
            made = True
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        out = os.path.join(imgdir, work, "image" + entry_suffix(suffix, fmt))
        if suffix in SQUASH + SIF:
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
        # tar may only say "Wrote only N bytes"
        nospace = (
            getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT)
            or "No space left" in text
            or "Disk quota" in text
            or free_bytes(imgdir) < (1 << 20)
        )
        if made:
            remove_ours(imgdir, work)
            made = False
        if nospace:
            fail(
                EXIT_NOSPACE,
                "no space left in %s while installing %s; nothing changed, %s is still current"
                % (imgdir, entry, previous or "no version"),
            )
        if (
            getattr(exc, "errno", None) == errno.ENOENT
            and getattr(exc, "filename", None) == "ch-convert"
        ):
            fail(
                EXIT_INSTALL,
                "ch-convert is not on the PATH of a non-interactive login on this host; "
                "the image itself was uploaded and verified; fix: install Charliecloud there, "
                "or put it on PATH in the login files",
            )
        tool = "the unpack" if fmt == "unpack" else "ch-convert"
        fail(EXIT_INSTALL, "%s of %s failed; nothing changed: %s" % (tool, src, text))
    finally:
        os.close(fd)
        if made:
            remove_ours(imgdir, work)


def copy_fd(fd, out):
    """A SquashFS or SIF upload is installed as a copy (a new file: O_EXCL, no link followed)."""
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
