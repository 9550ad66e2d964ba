"""ch-run --join in batch scripts: the tags a script's lines expand to, and the stale peer group a
killed job leaves on a node."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def join_tags(script: str, job_id: str, lines: str | None = None) -> list[str]:
    """The ch-run --join-tag words of ``lines`` (default: the script's own) as bash expands them in one
    start of ``script`` with SLURM_JOB_ID=job_id: the script's lines that set KIT_JOIN_TAG run first,
    as the job's shell runs them, then the words in a child shell (as a pilot's `bash -c` steps)."""
    setup = [
        line
        for line in script.splitlines()
        if line.startswith(("KIT_JOIN_TAG=", "export KIT_JOIN_TAG"))
    ]
    words = [
        w
        for line in (script if lines is None else lines).splitlines()
        if "--join-tag=" in line
        for w in shlex.split(line)
        if w.startswith("--join-tag=")
    ]
    assert setup and words, "no KIT_JOIN_TAG line or no --join-tag word"
    child = shlex.join(["bash", "-euc", "printf '%s\\n' " + " ".join(words)])
    done = subprocess.run(
        ["bash", "-euc", "\n".join([*setup, child])],
        env={"PATH": os.environ["PATH"], "SLURM_JOB_ID": job_id},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@contextmanager
def stale_join_group(image: Path, tag: str) -> Iterator[Path]:
    """The peer group a killed job's ch-run --join leaves on a node, as /dev/shm/ch-run_shm-TAG: a real
    ch-run, the first of two peers (the segment names it the winner), SIGKILLed before the second
    came. A later ch-run with TAG finds the segment, takes itself for a peer and fails ("join: no
    PID"). Both files the group made are removed afterwards; the tag must be free before."""
    shm, sem = Path("/dev/shm", f"ch-run_shm-{tag}"), Path("/dev/shm", f"sem.ch-run_sem-{tag}")
    assert not shm.exists() and not sem.exists(), f"{shm} or {sem} is someone else's"
    proc = subprocess.Popen(
        ["ch-run", "--join-ct=2", f"--join-tag={tag}", str(image), "--", "sleep", "600"],
        env=dict(os.environ, USER=os.environ.get("USER", "root")),
        start_new_session=True,
    )
    try:
        deadline = (
            time.monotonic() + 120
        )  # the winner joined, then started the command: kill it there
        while (
            not _runs_in_session(proc.pid, "sleep")
            and proc.poll() is None
            and time.monotonic() < deadline
        ):
            time.sleep(0.1)
        assert shm.exists() and _runs_in_session(proc.pid, "sleep"), (
            f"ch-run made no {shm} (exit {proc.poll()})"
        )
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        yield shm
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shm.unlink(missing_ok=True)
        sem.unlink(missing_ok=True)


def _runs_in_session(session: int, command: str) -> bool:
    """Whether a process named ``command`` runs in the session ``session`` leads."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # ended meanwhile
            continue
        name, rest = (
            text[text.index("(") + 1 : text.rindex(")")],
            text[text.rindex(")") + 2 :].split(),
        )
        if name == command and int(rest[3]) == session:
            return True
    return False
