"""`python -m kit.study.evalproc EVALDIR`: run one evaluation's commands (train, then validate if
the objective needs it) with EVALDIR/.running locked for as long as they run, then write
EVALDIR/exit.json.

Why a process of its own: the lock is the evaluation's liveness, for any process that looks. A
driver killed mid-study, started again, tells "still running" (lock held: wait for it), "done"
(exit.json) and "never started or killed" (neither) apart without pids that may be reused; a pilot
job's workers use the same lock to claim an evaluation. The lock dies with the process.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

from kit.atomic import atomic_write_text, open_lock_file, open_log
from kit.errors import KitError
from kit.readfile import read_json

PLAN = "eval.json"
EXIT = "exit.json"
LOCK = ".running"
LOG = "eval.log"


def lock_fd(eval_dir: Path) -> int:
    """EVALDIR/.running opened for locking (the kit's own file: a link planted there is refused)."""
    return open_lock_file(eval_dir / LOCK, "the evaluation's lock")


def is_running(eval_dir: Path) -> bool:
    """Whether some process holds the evaluation's lock right now."""
    if not (eval_dir / LOCK).exists():
        return False
    fd = lock_fd(eval_dir)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def run(eval_dir: Path) -> int:
    """Run the planned commands in order with the lock held; the first failing one ends it.
    Returns 0, or 75 (EX_TEMPFAIL) if another process is already running this evaluation."""
    if (
        not eval_dir.is_dir() or eval_dir.is_symlink()
    ):  # a link swapped in: nothing is written through it
        return 1
    fd = lock_fd(eval_dir)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return 75
    plan = read_json(
        eval_dir / PLAN, "evaluation plan", "fix: kit study run writes it; plan the study again"
    )
    commands = plan.get("commands") if isinstance(plan, dict) else None
    if not (
        isinstance(commands, list)
        and len(commands) <= 8
        and all(
            isinstance(argv, list) and argv and all(isinstance(w, str) for w in argv)
            for argv in commands
        )
    ):
        raise KitError(
            f"{eval_dir / PLAN}: not an evaluation plan kit study wrote", fix="move it aside"
        )
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
        KIT_RUN_ID=eval_dir.name,
    )
    code, step = 0, None
    with open_log(eval_dir / LOG, "the evaluation's log") as log:
        for step, argv in enumerate(commands):
            # a path of the study may hold bytes that are not UTF-8: written back as they were
            log.write(
                f"kit: evaluation {eval_dir.name} step {step}: {' '.join(argv)}\n".encode(
                    errors="surrogateescape"
                )
            )
            log.flush()
            code = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
            if code != 0:
                break
    atomic_write_text(eval_dir / EXIT, json.dumps({"code": code, "step": step}) + "\n")
    os.close(fd)
    return 0


def exit_status(eval_dir: Path) -> dict | None:
    """EVALDIR/exit.json once the evaluation's commands ended; None before."""
    try:
        doc = read_json(eval_dir / EXIT, "evaluation exit file", "fix: kit study run writes it")
    except FileNotFoundError:
        return None
    code = doc.get("code") if isinstance(doc, dict) else None
    if not (
        isinstance(code, int)
        and not isinstance(code, bool)
        and -256 < code < 256
        and (doc.get("step") is None or isinstance(doc.get("step"), int) and 0 <= doc["step"] < 8)
    ):
        raise KitError(
            f"{eval_dir / EXIT}: not an exit file kit study wrote",
            fix="move it aside to run it again",
        )
    return doc


def main(eval_dir: Path) -> int:
    """run(), its expected failures as one line in the evaluation's log (the driver's stdout) and
    exit 1.
    """
    try:
        return run(eval_dir)
    except KitError as exc:
        print(f"kit: evaluation {eval_dir.name}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
