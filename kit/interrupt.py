"""Ctrl-C that never leaves a lock held.

Python raises KeyboardInterrupt in the main thread at whatever bytecode it is running. Inside the
standard library's locking code that can be between a lock's acquire and the ``try``/``with``
that releases it (``threading.Condition.__enter__`` is Python code around a C acquire): the lock
stays held, and the next user waits forever. Seen: an interrupted ``kit image convert`` printed
its message and then hung at exit, closing ISA-L's threaded gzip reader on its leaked queue lock.
Here the interrupt is raised at the first moment the main thread is outside that code, retried
every few milliseconds; a second Ctrl-C, or a main thread stuck there for ``PATIENCE`` seconds,
gets it where it is.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from types import FrameType

RETRY = 0.005  # seconds between attempts
PATIENCE = 2.0  # seconds after which a deferred interrupt is raised wherever the main thread is

# Standard modules whose frames may hold a lock between an acquire and the statement that
# releases it (named, not imported: the kit's start-up time is what every command pays).
_STDLIB = os.path.dirname(threading.Condition.__enter__.__code__.co_filename)
_LOCKING = frozenset(os.path.join(_STDLIB, *name.split("/")) for name in (
    "threading.py", "queue.py", "logging/__init__.py", "concurrent/futures/_base.py",
    "concurrent/futures/thread.py"))
_deferred_since: float | None = None


def _in_locking_code(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_filename in _LOCKING:
            return True
        frame = frame.f_back
    return False


def _interrupt(signum: int, frame: FrameType | None) -> None:
    global _deferred_since
    now = time.monotonic()
    insisted = signum == signal.SIGINT and _deferred_since is not None
    patience_over = _deferred_since is not None and now - _deferred_since > PATIENCE
    if _in_locking_code(frame) and not insisted and not patience_over:
        _deferred_since = _deferred_since if _deferred_since is not None else now
        signal.signal(signal.SIGALRM, _interrupt)
        signal.setitimer(signal.ITIMER_REAL, RETRY)
        return
    if _deferred_since is not None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _deferred_since = None
    raise KeyboardInterrupt


def install() -> None:
    """Make Ctrl-C (SIGINT) lock-safe in this process (only the main thread can)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _interrupt)
