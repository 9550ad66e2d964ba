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
from kit.excerpt import shown
from kit.ownfile import check_own_dir, open_own_regular
from kit.readfile import MAX_BYTES, read_json
from kit.schema import Bad, Field, Items, Section, check_value

PLAN = "eval.json"
EXIT = "exit.json"
LOCK = ".running"
LOG = "eval.log"
MAX_STEPS = 8  # commands of one evaluation: train, then validate


def _word(word: object) -> Bad | None:
    """An argv word: any string (a study's path may hold a line break or bytes not UTF-8)."""
    return None if isinstance(word, str) else Bad(f"expected a string, got {shown(word)}")


# EVALDIR/eval.json (written by kit.study.backends and pilot) and exit.json (written by run below)
PLAN_SCHEMA = Section(
    {
        "commands": Field(
            Items(Field(Items(Field("any", check=_word), min_len=1)), max_len=MAX_STEPS)
        )
    },
    open=True,
)
EXIT_SCHEMA = Section(
    {
        "code": Field("int", minimum=-255, maximum=255),
        "step": Field("int", nullable=True, required=False, minimum=0, maximum=MAX_STEPS - 1),
    }
)


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
    # a link swapped in: nothing is written through it
    if not eval_dir.is_dir() or eval_dir.is_symlink():
        return 1
    fd = lock_fd(eval_dir)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return 75
    fix = "kit study run writes it; move it aside and run the study again"
    plan = _own_plan(eval_dir, fix)
    commands = check_value(plan, eval_dir / PLAN, PLAN_SCHEMA, what="evaluation plan", fix=fix)[
        "commands"
    ]
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


def _own_plan(eval_dir: Path, fix: str) -> object:
    """EVALDIR/eval.json: the commands this process runs, so taken only from the kit's own file
    (kit.ownfile: not a link, the user's, writable by nobody else, in a directory of the user's
    alone), never from one someone else could have written."""
    path = eval_dir / PLAN
    check_own_dir(eval_dir, "an evaluation's commands")
    data = open_own_regular(path, MAX_BYTES, "evaluation plan")
    if data is None or len(data) > MAX_BYTES:
        why = "missing" if data is None else f"larger than {MAX_BYTES >> 20} MiB"
        raise KitError(f"{path}: {why}, not the evaluation plan kit study run writes", fix=fix)
    try:
        return json.loads(data)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise KitError(
            f"{path}: not the JSON evaluation plan kit study run writes", fix=fix
        ) from None


def exit_status(eval_dir: Path) -> dict | None:
    """EVALDIR/exit.json once the evaluation's commands ended; None before."""
    try:
        doc = read_json(eval_dir / EXIT, "evaluation exit file", "kit study run writes it")
    except FileNotFoundError:
        return None
    return check_value(
        doc,
        eval_dir / EXIT,
        EXIT_SCHEMA,
        what="evaluation exit file",
        fix="move it aside to run it again",
    )


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
