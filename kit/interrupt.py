"""Ctrl-C that never leaves a lock held.

Python raises KeyboardInterrupt in the main thread at whatever bytecode it is running. Inside the
standard library's locking code that can be between a lock's acquire and the ``try``/``with``
that releases it (``threading.Condition.__enter__`` is Python code around a C acquire): the lock
stays held, and the next user waits forever. Seen: an interrupted ``kit image convert`` printed
its message and then hung at exit, closing ISA-L's threaded gzip reader on its leaked queue lock.
Here the interrupt is raised at the first moment the main thread is outside that code, retried
every few milliseconds; a second Ctrl-C, or a main thread stuck there for ``PATIENCE`` seconds,
gets it where it is.

SIGTERM (what ``kill``, Slurm's ``scancel`` and its time limit send) takes the same path as
Ctrl-C, raised as ``Terminated`` (a KeyboardInterrupt, so every cleanup that handles Ctrl-C
handles it): Python's default action would end the process at once, leaving temporary files and
children behind. The command lines end with 128 + the signal's number (130, 143).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import subprocess

RETRY = 0.005  # seconds between attempts
PATIENCE = 2.0  # seconds after which a deferred interrupt is raised wherever the main thread is
# seconds after which a stop the main thread never ran its handler for ends the process
UNHEARD = 10.0

# Standard modules whose frames may hold a lock between an acquire and the statement that
# releases it (named, not imported: the kit's start-up time is what every command pays).
_STDLIB = os.path.dirname(threading.Condition.__enter__.__code__.co_filename)
_LOCKING = frozenset(
    os.path.join(_STDLIB, *name.split("/"))
    for name in (
        "threading.py",
        "queue.py",
        "logging/__init__.py",
        "concurrent/futures/_base.py",
        "concurrent/futures/thread.py",
    )
)
STOPPING = (signal.SIGINT, signal.SIGTERM)
_deferred_since: float | None = None
_deferred_signal: int = signal.SIGINT  # the stopping signal a deferred interrupt raises
_held = 0  # depth of held() blocks
_owed = False  # a stop arrived while held: raised when the outermost block ends
_heard: set[int] = set()  # stopping signals whose handler has run in the main thread
_watching = False  # the watcher thread runs
# quick clean-ups run before the watcher ends a stuck process
_last_words: list[Callable[[], None]] = []


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: the command stops as on Ctrl-C (a KeyboardInterrupt), exit 143."""


def exit_status(exc: KeyboardInterrupt) -> int:
    """128 + the signal's number, as a shell reports a command the signal ended."""
    return 128 + (signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT)


def signal_name(exc: KeyboardInterrupt) -> str:
    """The word a command's one line uses for how it was stopped."""
    return "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"


def reap(proc: subprocess.Popen) -> int:
    """Wait for ``proc`` after a stop: ``Popen.wait`` is interrupted inside its ``_waitpid_lock``
    section now and then (between the acquire and the ``try``), and the next ``wait`` then hangs
    on the lock forever; ``os.waitpid`` takes no lock."""
    while proc.returncode is None:
        try:
            _, status = os.waitpid(proc.pid, 0)
        except ChildProcessError:  # reaped meanwhile: its status is lost, as Popen then says too
            if proc.returncode is None:
                proc.returncode = 0
            break
        except InterruptedError:
            continue
        proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode


def _in_locking_code(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_filename in _LOCKING:
            return True
        frame = frame.f_back
    return False


def _interrupt(signum: int, frame: FrameType | None) -> None:
    global _deferred_since, _deferred_signal, _owed
    if signum == signal.SIGALRM and _deferred_since is None:
        # a retry whose stop was raised meanwhile (a second Ctrl-C): re-arming it would end the
        # process with SIGALRM's default action once Python restores it at exit
        return
    now = time.monotonic()
    _heard.add(signum)
    if signum in STOPPING and (_deferred_since is None or signum == signal.SIGTERM):
        # SIGTERM wins over an earlier Ctrl-C: its exit status is the one owed
        _deferred_signal = signum
    if _held:
        _owed = True
        return
    insisted = signum == signal.SIGINT and _deferred_since is not None
    patience_over = _deferred_since is not None and now - _deferred_since > PATIENCE
    if _in_locking_code(frame) and not insisted and not patience_over:
        _deferred_since = _deferred_since if _deferred_since is not None else now
        signal.signal(signal.SIGALRM, _interrupt)
        signal.setitimer(signal.ITIMER_REAL, RETRY)
        return
    _raise()


def _raise() -> None:
    global _deferred_since
    if _deferred_since is not None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _deferred_since = None
    raise Terminated if _deferred_signal == signal.SIGTERM else KeyboardInterrupt


def install() -> None:
    """Make Ctrl-C (SIGINT) and SIGTERM lock-safe stops in this process (only the main thread can).

    A Python handler runs only when the main thread comes back to Python: one stuck in native code
    (a collective whose peer died, in TensorFlow/Horovod) would never hear the stop that Python's
    default action would end it with. A watcher thread reads each signal from the wakeup fd and
    ends the process with 128 + the signal's number if its handler has not run within UNHEARD s."""
    global _watching
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in STOPPING:
        signal.signal(signum, _interrupt)
    if _watching:  # once per process (a test calls the command lines' main() many times)
        return
    _watching = True
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    # a forked child's signals are its own
    os.register_at_fork(after_in_child=lambda: signal.set_wakeup_fd(-1))
    # started with the stops blocked, which it keeps: the kernel hands them to the main thread,
    # whose blocking calls they must interrupt (a signal taken by another thread wakes nothing
    # there)
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {*STOPPING, signal.SIGALRM})
    try:
        threading.Thread(
            target=_watch, args=(read_end,), name="kit-stop-watcher", daemon=True
        ).start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _watch(fd: int) -> None:
    while True:
        for signum in os.read(fd, 64):
            if signum in STOPPING:
                time.sleep(UNHEARD)
                if signum not in _heard:
                    name = signal.Signals(signum).name
                    os.write(
                        2,
                        f"kit: {name} not heard in {UNHEARD:g} s (the program is stuck in native code); "
                        "ending it now\n".encode(),
                    )
                    for clean_up in _last_words:
                        try:
                            clean_up()
                        except Exception:  # noqa: BLE001 - the process ends anyway: the next one runs
                            pass
                    os._exit(128 + signum)


def before_abandoning(clean_up: Callable[[], None]) -> None:
    """Run ``clean_up`` (quick, never blocking on a peer) before the watcher ends a process whose
    main thread never heard its stop: os._exit runs no atexit handler, which may hang there
    (MPI_Finalize)."""
    _last_words.append(clean_up)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Hold SIGINT/SIGTERM for a few steps that must happen all or not at all (renames, two small
    files that only mean something together); a held stop is raised right after. Blocked in this
    thread, and, where install() ran, recorded by the handler: a signal the kernel hands to
    another thread (a BLAS or reader thread does not block it) still runs the handler here."""
    global _held, _owed
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {*STOPPING, signal.SIGALRM})
    _held += 1
    try:
        yield
    finally:
        _held -= 1
        signal.pthread_sigmask(signal.SIG_SETMASK, old)  # a blocked signal's handler runs here
        if not _held and _owed:
            _owed = False
            _raise()
