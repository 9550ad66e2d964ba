"""`kit mpi check` stopped by Ctrl-C or SIGTERM while its ranks run: the launcher runs in a
session of its own (a terminal's Ctrl-C never reaches it), so the kit must stop it and its ranks
itself; one line, 130/143, no process of the check left, and the next check passes."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.support.interrupts import signalled_env, tagged
from tests.support.paths import REPO

LIMIT = 120  # seconds: a bound only a hung check reaches


def _ranks_started(tag: str) -> bool:
    """A rank of the check (rank_report run by python inside ch-run) is alive."""
    for pid in tagged(tag):
        try:
            if (
                b"MPI_Init" in Path(f"/proc/{pid}/cmdline").read_bytes()
                or Path(f"/proc/{pid}/comm").read_text().strip() == "ch-run"
            ):
                return True
        except OSError:
            continue
    return False


@pytest.mark.parametrize(
    "sig,status,words", [("SIGTERM", 143, "terminated (SIGTERM)"), ("SIGINT", 130, "interrupted")]
)
def test_a_stopped_check_leaves_no_launcher_or_rank(impi_site, mpich_image, sig, status, words):
    tag = f"KIT_TEST_RUN_{uuid.uuid4().hex}"
    argv = [sys.executable, "-m", "kit", "mpi", "check", "--site", str(impi_site), str(mpich_image)]
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        env=signalled_env(**{tag: "1"}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + LIMIT
    while proc.poll() is None and not _ranks_started(tag):
        assert time.monotonic() < deadline, "the check's ranks never started"
        time.sleep(0.02)
    assert proc.poll() is None, "the check ended before its ranks were seen"
    proc.send_signal(getattr(signal, sig))
    _, err = proc.communicate(timeout=LIMIT)
    assert proc.returncode == status and err.splitlines() == [
        f"kit: {words}; outputs are replaced only when complete"
    ], err
    # at once: the kit waits for what it stops (left alone, the ranks would end soon after, unseen)
    assert not tagged(tag), "processes of the check outlived it"

    again = subprocess.run(
        argv, cwd=REPO, env=signalled_env(), capture_output=True, text=True, timeout=LIMIT
    )
    assert again.returncode == 0, again.stderr


def test_a_process_that_left_the_launchers_tree_and_session_is_stopped_by_its_mark():
    """A rank forked just before its parent ends is reparented, in a session of its own, before the
    next look: only the environment it inherited says it is the check's."""
    from kit.mpi.check import _run_bounded

    tag = f"KIT_TEST_RUN_{uuid.uuid4().hex}"
    escapee = "sleep 0.3; (setsid sleep 300 >/dev/null 2>&1 &); echo started"
    status, output, timed_out = _run_bounded(
        ["sh", "-c", escapee], signalled_env(**{tag: "1"}), timeout=30
    )
    assert (status, output, timed_out) == (0, "started\n", False)
    assert not tagged(tag), "the reparented process outlived the check"
