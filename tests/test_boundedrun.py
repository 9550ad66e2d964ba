"""kit.boundedrun: a child's output is read with a bound while it runs, its head and tail kept; a
child that never ends is ended with everything it started."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kit.boundedrun import MIN_LIMIT, Kept, run_bounded

HUNDRED_MB = 100 * 10**6


def test_a_child_writing_100_mb_on_each_stream_costs_a_bounded_memory_and_little_time():
    """Both streams at once (a child blocked on a full stderr pipe would stall a reader of stdout
    alone); the whole output, as capture_output held it, would be 200 MB."""
    script = (
        f"head -c {HUNDRED_MB} /dev/zero >&2 & head -c {HUNDRED_MB} /dev/zero | tr '\\0' o; "
        "printf END; wait"
    )
    tracemalloc.start()
    start = time.monotonic()
    try:
        ran = run_bounded(["sh", "-c", script], timeout=60, limit=1 << 16)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    took = time.monotonic() - start
    assert ran.returncode == 0 and took < 30
    assert peak < 4 << 20, f"{peak} bytes held at once"
    assert len(ran.stdout) <= 1 << 16 and len(ran.stderr) <= 1 << 16
    assert ran.stdout.startswith(b"o" * 1000) and ran.stdout.endswith(b"oooEND")
    dropped = int(re.search(rb"\[\.\.\. (\d+) bytes dropped \.\.\.\]", ran.stdout)[1])
    assert dropped == HUNDRED_MB + 3 - (
        len(ran.stdout) - len(re.search(rb"\n\[.*\]\n", ran.stdout)[0])
    )
    assert ran.stderr.count(b"\0") > (1 << 16) - 100


@pytest.mark.timeout(30)
def test_a_child_that_never_ends_is_ended_with_its_group_after_the_timeout(tmp_path):
    """What the child started (a grandchild holding the pipes) goes with it, and the exception
    carries what it said before."""
    pidfile = tmp_path / "grandchild"
    script = f"echo started; echo oops >&2; sleep 300 & echo $! > {pidfile}; wait"
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired, match="timed out after 1.0 seconds") as err:
        run_bounded(["sh", "-c", script], timeout=1.0)
    assert time.monotonic() - start < 10
    assert err.value.output == b"started\n" and err.value.stderr == b"oops\n"
    grandchild = int(pidfile.read_text())
    for _ in range(100):  # reaped by init once killed: gone within moments
        if not os.path.exists(f"/proc/{grandchild}") or "Z" in _state(grandchild):
            break
        time.sleep(0.05)
    else:
        pytest.fail("the child's own child outlived the timeout")


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "Z"


def test_input_is_fed_while_output_is_read_and_the_exit_code_kept():
    """More input than a pipe holds, echoed back: feeding it all before reading would deadlock."""
    data = os.urandom(1 << 20)
    ran = run_bounded(["sh", "-c", "cat; exit 3"], timeout=60, input=data, limit=2 << 20)
    assert ran.returncode == 3 and ran.stdout == data and ran.stderr == b""
    gone = run_bounded([sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"], timeout=60)
    assert gone.returncode == -9


@given(
    chunks=st.lists(st.binary(max_size=300), max_size=12),
    limit=st.integers(min_value=MIN_LIMIT, max_value=400),
)
def test_the_kept_stream_is_the_whole_stream_or_its_head_a_mark_and_its_tail(chunks, limit):
    kept = Kept(limit)
    for chunk in chunks:
        kept.add(chunk)
    data, value = b"".join(chunks), kept.value()
    assert len(value) <= limit
    if len(data) <= limit:
        assert value == data
        return
    found = re.search(rb"\n\[\.\.\. (\d+) bytes dropped \.\.\.\]\n", value)
    assert found is not None
    head, tail = value[: found.start()], value[found.end() :]
    assert data.startswith(head) and data.endswith(tail)
    assert len(head) + int(found[1]) + len(tail) == len(data)
    assert abs(len(head) - len(tail)) <= 1
