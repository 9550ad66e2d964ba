"""Ctrl-C lands outside the standard library's locking code (kit.interrupt), in real processes
sent real SIGINTs. An interrupt raised between a lock's acquire and its release leaves the lock
held: an interrupted `kit image convert` hung at exit on ISA-L's threaded reader that way."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from kit.scratch import LOCK_NAME

ROOT = Path(__file__).parents[1]

# Busy in threading and queue code (where the old default handler raised the interrupt most of
# the time); on each interrupt, report the file of the innermost frame it was raised in. SIGINT is
# blocked while it reports: the next one (sent once the report is read) waits for the loop, however
# late a loaded machine lets the child get back there.
BUSY = r"""
import queue, signal, sys, threading
if sys.argv[1] == "kit":
    from kit import interrupt
    interrupt.install()
cond, q = threading.Condition(), queue.Queue(1)
print("ready", flush=True)
while True:
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        while True:
            with cond:
                q.put(1)
                q.get()
    except KeyboardInterrupt as exc:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        tb = exc.__traceback__
        while tb.tb_next:
            tb = tb.tb_next
        free = cond._lock.acquire(blocking=False) and q.mutex.acquire(blocking=False)
        cond, q = threading.Condition(), queue.Queue(1)
        print(tb.tb_frame.f_code.co_filename, free, flush=True)  # last: the next signal finds the loop
"""


def _interrupt_many(mode: str, count: int) -> list[tuple[str, bool]]:
    child = subprocess.Popen(
        [sys.executable, "-c", BUSY, mode],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    try:
        assert child.stdout.readline() == "ready\n"
        landed = []
        rng = random.Random(7)
        for _ in range(count):
            time.sleep(
                rng.uniform(0.001, 0.004)
            )  # the child is back in its loop within microseconds
            child.send_signal(signal.SIGINT)
            where, free = child.stdout.readline().rsplit(" ", 1)
            landed.append((where, free.strip() == "True"))
        return landed
    finally:
        child.kill()
        child.wait()


def test_interrupts_land_outside_threading_and_queue_code():
    landed = _interrupt_many("kit", 40)
    stdlib = Path(os.__file__).parent
    inside = [
        w
        for w, _ in landed
        if Path(w).name in ("threading.py", "queue.py") and Path(w).parent == stdlib
    ]
    assert not inside, f"{len(inside)} of 40 interrupts raised inside locking code"
    assert all(free for _, free in landed), "an interrupt left a lock held"


def test_the_control_python_default_lands_inside_locking_code():
    """Shows the test above can fail: Python's own handler raises where the thread is."""
    landed = _interrupt_many("default", 40)
    assert any(Path(w).name in ("threading.py", "queue.py") for w, _ in landed)


@pytest.mark.parametrize("signals", [1, 2])
def test_a_main_thread_waiting_in_locking_code_is_still_interrupted(signals):
    """Deferred, never lost: one Ctrl-C lands after kit.interrupt.PATIENCE, a second at once."""
    code = (
        "import sys, threading\nfrom kit import interrupt\ninterrupt.install()\n"
        "print('waiting', flush=True)\n"
        "try:\n    threading.Event().wait()\nexcept KeyboardInterrupt:\n    print('interrupted')\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert child.stdout.readline() == "waiting\n"
    for _ in range(signals):
        time.sleep(0.2)
        child.send_signal(signal.SIGINT)
    out, _ = child.communicate(timeout=60)  # a bound only a lost interrupt reaches
    assert out == "interrupted\n" and child.returncode == 0


HELD = r"""
import os, signal, sys, threading
from kit import interrupt
interrupt.install()
threading.Thread(target=threading.Event().wait, daemon=True).start()  # blocks no signal
steps = []
try:
    with interrupt.held():
        os.kill(os.getpid(), getattr(signal, sys.argv[1]))  # the kernel hands it to the other thread
        for i in range(200000):  # bytecodes enough for a pending handler to run
            pass
        steps.append("held body done")
    steps.append("after the block")
except KeyboardInterrupt as exc:
    steps.append(f"{type(exc).__name__} {interrupt.exit_status(exc)}")
print(" / ".join(steps))
"""


@pytest.mark.parametrize(
    "sig,raised,status", [("SIGINT", "KeyboardInterrupt", 130), ("SIGTERM", "Terminated", 143)]
)
def test_a_stop_during_held_steps_is_raised_right_after_them(sig, raised, status):
    """Blocking the signal in the main thread is not enough: the kernel delivers it to another
    thread, and Python then runs the handler in the main thread, inside the held steps."""
    run = subprocess.run(
        [sys.executable, "-c", HELD, sig],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert run.stdout == f"held body done / {raised} {status}\n", run.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_the_main_thread_cannot_hear_still_ends_the_process(sig):
    """A main thread stuck in native code (here relocking a pthread mutex it holds, which no signal
    interrupts, as a rank waits in a collective whose peer died) runs no Python handler: the watcher
    ends the process with 128 + the signal after kit.interrupt.UNHEARD seconds (Python's handler
    alone never did). Its private temporary directory (kit.scratch), where TensorFlow's AutoGraph
    writes a file per converted function, goes with it: os._exit runs no atexit handler."""
    code = (
        "import ctypes, tempfile\nfrom kit import interrupt\nfrom kit.scratch import use_private_tempdir\n"
        "interrupt.install()\nmine = use_private_tempdir('stuck')\n"
        "tempfile.NamedTemporaryFile(prefix='__autograph_generated_file', suffix='.py', delete=False)\n"
        "libc, mutex = ctypes.CDLL(None), ctypes.create_string_buffer(64)\n"
        "libc.pthread_mutex_lock(mutex)\nprint(mine, flush=True)\nlibc.pthread_mutex_lock(mutex)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=tempfile.gettempdir()),
    )
    mine = Path(child.stdout.readline().strip())
    assert mine.parent == Path(tempfile.gettempdir()) and mine.name.startswith(
        f"stuck-{child.pid}-"
    )
    assert sorted(p.name[:26] for p in mine.iterdir()) == [
        LOCK_NAME,  # held while the process lives (kit.scratch.sweep_dead)
        "__autograph_generated_file",
    ]
    time.sleep(0.2)
    child.send_signal(sig)
    try:
        _, err = child.communicate(timeout=120)  # a bound only a stop never heard reaches
    finally:
        child.kill()
    assert child.returncode == 128 + sig
    assert (
        err.strip().splitlines()[-1] == f"kit: {signal.Signals(sig).name} not heard in 10 s "
        "(the program is stuck in native code); ending it now"
    )
    assert not mine.exists()


def test_installing_again_starts_no_second_watcher():
    """The command lines' main() installs on every call (tests call it hundreds of times in one
    process).
    """
    code = (
        "import os, threading\nfrom kit import interrupt\ninterrupt.install()\n"
        "fds, threads = len(os.listdir('/proc/self/fd')), threading.active_count()\n"
        "for _ in range(20):\n    interrupt.install()\n"
        "print(len(os.listdir('/proc/self/fd')) - fds, threading.active_count() - threads)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert done.stdout.split() == ["0", "0"], done.stderr


def test_a_retry_that_comes_after_its_stop_was_raised_is_ignored():
    """A retry (SIGALRM) already on its way when a second Ctrl-C raised the stop: it neither raises a
    second stop nor arms the timer again (at exit Python restores SIGALRM's default action, which
    would end the process by signal 14)."""
    from kit import interrupt

    assert interrupt._deferred_since is None
    before = signal.getitimer(signal.ITIMER_REAL)  # pytest-timeout's, if it uses the timer
    try:
        interrupt._interrupt(signal.SIGALRM, sys._getframe())
    except KeyboardInterrupt:
        pytest.fail("the stale retry raised a second stop")
    after = signal.getitimer(signal.ITIMER_REAL)
    assert after[0] <= before[0] and (after[0] == 0.0 or after[0] > 10 * interrupt.RETRY)
