"""Run a child and keep a bounded part of what it writes, read while it runs.

subprocess.run(capture_output=True) holds everything a child writes until it ends, and the kit
cut it only afterwards: a tool that loops, or one that prints a gigabyte, fills memory first. Here
each stream keeps its first and last bytes (at most ``limit`` in all, the middle dropped and
marked), read from the pipes as the child writes them. The child runs in a session of its own; a
timeout or a stop (Ctrl-C, SIGTERM) ends its whole process group, so nothing it started outlives
it, and a timeout is raised as subprocess.TimeoutExpired carrying what was kept.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from kit import interrupt

LIMIT = 1 << 20  # bytes kept of each stream: far more than any answer or error the kit reads
MIN_LIMIT = 64  # room for the mark and a few bytes on each side of it
CHUNK = 1 << 16  # bytes read from a pipe at a time
DRAIN = 2.0  # seconds the pipes may stay open after the child ended (a process it left holds them)
TICK = 0.25  # seconds between looks at whether the child ended while its pipes stay open


def mark(dropped: int) -> bytes:
    """What stands where the middle of a long stream was dropped."""
    return f"\n[... {dropped} bytes dropped ...]\n".encode()


class Kept:
    """A stream's first and last bytes: at most ``limit`` in all, the mark included."""

    def __init__(self, limit: int = LIMIT):
        if limit < MIN_LIMIT:
            raise ValueError(f"limit {limit} < {MIN_LIMIT}: no room for the mark")
        self.limit, self.seen = limit, 0
        self.head, self.tail = bytearray(), bytearray()

    def add(self, data: bytes) -> None:
        """Keep ``data``'s part of the head and the tail; memory stays below three limits."""
        self.seen += len(data)
        room = self.limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > 2 * self.limit:  # trimmed now and then, not at every chunk
                del self.tail[: -self.limit]

    def value(self) -> bytes:
        """The whole stream if it fits; else its head, the mark and its tail."""
        if self.seen <= self.limit:
            return bytes(self.head)
        keep = self.limit - len(mark(self.seen))  # the mark of fewer dropped bytes is no longer
        head, tail = keep // 2, keep - keep // 2
        rest = bytes(self.head[head:] + self.tail)  # contiguous from byte `head` on, or trimmed
        return bytes(self.head[:head]) + mark(self.seen - keep) + rest[len(rest) - tail :]


class Ran(NamedTuple):
    """How a child ended and what it wrote (bounded; b"" for a stream not piped); ``stdout_cut``:
    its middle was dropped (a reader that needs the whole of it refuses then)."""

    returncode: int
    stdout: bytes
    stderr: bytes
    stdout_cut: bool = False

    @property
    def out(self) -> str:
        return self.stdout.decode(errors="replace")

    @property
    def err(self) -> str:
        return self.stderr.decode(errors="replace")


def run_bounded(
    cmd: Sequence[str],
    *,
    timeout: float | None,
    limit: int = LIMIT,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    input: bytes | None = None,
    stdout: int | None = subprocess.PIPE,
    grace: float = 0.0,
) -> Ran:
    """Run ``cmd`` with its stdin ``input`` (none: /dev/null), keeping at most ``limit`` bytes of
    stderr and of stdout (``stdout`` DEVNULL or None: not piped). After ``timeout`` s (None:
    never) or on a stop, the child is sent SIGTERM and ``grace`` s later its process group SIGKILL
    (grace 0: SIGKILL at once). OSError (no such program) passes through."""
    kept = {"out": Kept(limit), "err": Kept(limit)}
    deadline = None if timeout is None else time.monotonic() + timeout
    proc = subprocess.Popen(
        list(cmd),
        stdin=subprocess.DEVNULL if input is None else subprocess.PIPE,
        stdout=stdout,
        stderr=subprocess.PIPE,
        env=None if env is None else dict(env),
        cwd=cwd,
        start_new_session=True,
    )
    try:
        ended = _collect(proc, kept, input, deadline)
        if ended and deadline is not None:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        elif ended:
            interrupt.reap(proc)
        else:
            raise subprocess.TimeoutExpired(proc.args, timeout or 0.0)
    except subprocess.TimeoutExpired:
        _end(proc, grace)
        raise subprocess.TimeoutExpired(
            proc.args, timeout or 0.0, output=kept["out"].value(), stderr=kept["err"].value()
        ) from None
    except BaseException:
        _end(proc, grace)
        raise
    finally:
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    assert proc.returncode is not None
    out = kept["out"]
    return Ran(proc.returncode, out.value(), kept["err"].value(), out.seen > out.limit)


def _collect(
    proc: subprocess.Popen, kept: dict[str, Kept], data: bytes | None, deadline: float | None
) -> bool:
    """Read the child's pipes into ``kept`` (and feed it ``data``) until both are closed, or DRAIN
    s after it ended; False when ``deadline`` came first."""
    with selectors.DefaultSelector() as sel:
        for name, pipe in (("out", proc.stdout), ("err", proc.stderr)):
            if pipe is not None:
                sel.register(pipe.fileno(), selectors.EVENT_READ, name)
        view = memoryview(data or b"")
        if proc.stdin is not None:
            os.set_blocking(proc.stdin.fileno(), False)
            if view:
                sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE, "in")
            else:
                proc.stdin.close()
        ended_at: float | None = None
        while sel.get_map():
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return False
            if ended_at is None and proc.poll() is not None:
                ended_at = now
            if ended_at is not None and now - ended_at > DRAIN:
                break
            wait = TICK if deadline is None else min(TICK, deadline - now)
            for key, _ in sel.select(wait):
                fd = key.fd
                if key.data == "in":
                    try:
                        view = view[os.write(fd, view[:CHUNK]) :]
                    except BrokenPipeError:  # the child stopped reading: what it read is enough
                        view = view[:0]
                    if not view:
                        sel.unregister(fd)
                        assert proc.stdin is not None
                        proc.stdin.close()
                    continue
                chunk = os.read(fd, CHUNK)
                if chunk:
                    kept[key.data].add(chunk)
                else:
                    sel.unregister(fd)
    return True


def _end(proc: subprocess.Popen, grace: float) -> None:
    """With a ``grace``: SIGTERM the child itself (a builder unmounts its storage, a shell stops
    its own children) and give it ``grace`` s; then SIGKILL what is left of its process group and
    reap the child. A second stop during the grace goes straight to SIGKILL."""
    try:
        if grace > 0 and proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
    finally:
        with interrupt.held():
            try:  # its own session: the group's id is its pid (not reused while the group lives)
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            interrupt.reap(proc)
