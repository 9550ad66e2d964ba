"""A process's own temporary directory, gone however the process ends.

TensorFlow's AutoGraph writes every function it converts as a `__autograph_generated_file*.py` in
the temporary directory and removes it at exit: a rank that ends by os._exit (kit.interrupt's
watcher, when a stop is never heard because the main thread is stuck in a collective) left dozens
of them in /tmp per run. Pointed at a directory of its own, the process leaves none. A SIGKILLed
one (an MPI peer's abort, the out-of-memory killer, Slurm at the time limit) leaves its directory,
named for the program and its pid; the next process of the same program and user removes it.

Whether a directory's process is gone is told by a lock, not by its pid: the process holds an
exclusive flock on `LOCK_NAME` inside its directory for its whole life, and the kernel releases it
however the process ends. A pid may be reused, or belong to another pid namespace sharing /tmp
(a container); a lock that can be taken belongs to no living process.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import re
import stat
import tempfile

from kit import interrupt
from kit.atomic import remove_tree

LOCK_NAME = ".owner.lock"
MAX_SWEPT = 64  # directories of dead processes removed per start, to bound the start's work
_held: list[int] = []  # the lock's descriptor: open for the life of the process


def use_private_tempdir(program: str) -> str:
    """Make a directory of this process's own under the temporary directory, the default of every
    ``tempfile`` call from now on; removed at exit and before kit.interrupt ends a stuck process.
    First removes the directories of this program's processes of this user that are gone."""
    parent = tempfile.gettempdir()
    sweep_dead(parent, program)
    path = tempfile.mkdtemp(prefix=f"{program}-{os.getpid()}-", dir=parent)
    fd = os.open(os.path.join(path, LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a directory only this process has seen: never waits
    _held.append(fd)
    tempfile.tempdir = path
    atexit.register(remove_tree, path)
    interrupt.before_abandoning(lambda: remove_tree(path))
    return path


def sweep_dead(parent: str, program: str) -> list[str]:
    """Remove ``program``'s private directories in ``parent`` whose process is gone: named as
    use_private_tempdir names them, real directories (no link followed) of this user, holding a
    lock file no process holds. The names removed, at most MAX_SWEPT."""
    pattern = re.compile(re.escape(program) + r"-[0-9]+-[a-z0-9_]{8}")
    removed: list[str] = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in names:
        if len(removed) >= MAX_SWEPT:
            break
        if pattern.fullmatch(name) and _remove_if_dead(os.path.join(parent, name)):
            removed.append(name)
    return removed


def _remove_if_dead(path: str) -> bool:
    try:
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            return False
        dir_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        if os.fstat(dir_fd).st_ino != st.st_ino:  # swapped since the lstat
            return False
        lock = os.open(LOCK_NAME, os.O_RDWR | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError:  # no lock file: not a directory this module made (or made before locks)
        return False
    finally:
        os.close(dir_fd)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held: its process lives
        os.close(lock)
        return False
    try:
        remove_tree(path)  # still locked by us: a second sweeper skips it
    except OSError:
        return False
    finally:
        os.close(lock)
    return True
