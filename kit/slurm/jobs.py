"""Talk to Slurm: submit a script, ask what became of jobs (squeue, then sacct), cancel them."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

from kit.boundedrun import run_bounded
from kit.errors import KitError
from kit.excerpt import one_line, shown

# States after which a job is gone for good; every other state Slurm reports means "still there".
TERMINAL = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "REVOKED",
}
# 123, an array's 123_4, a het job's 123+0
JOB_ID_RE = re.compile(r"[0-9]{1,12}(?:[_+][0-9]{1,12})?")
# A run kit scale submit ran on a site without a batch system (kit.scale.local): never queued, its end
# state is in the job ledger, and no Slurm command is asked about it.
LOCAL_JOB_RE = re.compile(r"local-[0-9]{1,20}")
LOCAL_ENDS = ("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED")  # how a local job can end
# Pending reasons that mean nodes are out of service
# (drained, down): the nodes are named beside them.
NODES_UNAVAILABLE = ("Nodes required for job are DOWN", "ReqNodeNotAvail")
SLURM_OUTPUT = 16 << 20  # bytes kept of a Slurm command's stdout and of its stderr: sacct of
# thousands of jobs is a few MB
UNKNOWN = "UNKNOWN"  # Slurm no longer remembers the job (no accounting, MinJobAge passed)
# Why a job may pend that no waiting will clear: shown,
# and `kit scale collect --wait` stops on them.
STUCK = {
    "PartitionNodeLimit",
    "PartitionTimeLimit",
    "BadConstraints",
    "InvalidAccount",
    "InvalidQOS",
    "JobHeldUser",
    "JobHeldAdmin",
    "DependencyNeverSatisfied",
    "launch failed requeued held",  # the node could not start the job (slurmd's log says why)
}


def is_active(state: str) -> bool:
    return state.split(" ")[0] not in TERMINAL and state != UNKNOWN


def is_stuck(state: str) -> bool:
    """PENDING (Reason) with a reason only a person can clear, or a held state of its own."""
    return (
        (state.startswith("PENDING (") and state[9:-1] in STUCK)
        or state.endswith("_HOLD")
        or state in ("SPECIAL_EXIT", "STOPPED")
    )


def _run(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    if shutil.which(argv[0]) is None:
        raise KitError(
            f"{argv[0]} not found",
            fix="run this on the site's login node (or load the slurm module)",
        )
    try:
        ran = run_bounded(argv, timeout=timeout, limit=SLURM_OUTPUT)
    except subprocess.TimeoutExpired:
        raise KitError(
            f"{argv[0]} did not answer in {timeout:.0f} s (slurmctld busy?); nothing was recorded",
            fix="check `squeue --me` before running this again",
        ) from None
    if ran.stdout_cut:  # a cut answer would lose jobs' states without a word
        raise KitError(
            f"{argv[0]} answered more than {SLURM_OUTPUT >> 20} MiB",
            fix="ask about fewer jobs at a time",
        )
    return subprocess.CompletedProcess(argv, ran.returncode, ran.out, ran.err)


def sbatch(script: Path) -> str:
    """Submit; the job id. A refusal is passed on in Slurm's words, with the script named."""
    done = _run(["sbatch", "--parsable", str(script)])
    if done.returncode != 0:
        raise KitError(
            f"sbatch refused {script}: {one_line(done.stderr or done.stdout, 400)}",
            fix="clear what sbatch names (the site's limits: kit site show), then submit again",
        )
    job = done.stdout.strip().split(";")[0]
    if not JOB_ID_RE.fullmatch(job):  # recorded, it would go to squeue -j and scancel later
        raise KitError(
            f"sbatch accepted {script} but answered {shown(done.stdout)}, not a job id",
            fix="check `squeue --me` before submitting again",
        )
    return job


def job_states(job_ids: list[str]) -> dict[str, str]:
    """Each job's state. A failing query is an error, never a guess: taking a queued job for a
    forgotten one would queue its run twice."""
    states = {j: UNKNOWN for j in job_ids}
    queued = [j for j in job_ids if JOB_ID_RE.fullmatch(j)]  # a local job: the ledger's state
    if not queued:
        return states
    done = _run(["squeue", "-h", "-t", "all", "-j", ",".join(queued), "-o", "%i|%T|%r"])
    if done.returncode != 0 and "Invalid job id" not in done.stderr:  # all forgotten: not an error
        raise KitError(
            f"squeue failed: {one_line(done.stderr, 400)}",
            fix="try again when slurmctld answers",
        )
    unavailable = None
    for line in done.stdout.splitlines() if done.returncode == 0 else []:
        job, state, reason = (line.split("|") + ["", ""])[:3]
        if job in states:
            if state == "PENDING" and reason.startswith(NODES_UNAVAILABLE):
                unavailable = _unavailable_nodes() if unavailable is None else unavailable
                reason = f"{reason}; {unavailable}" if unavailable else reason
            states[job] = (
                f"PENDING ({reason})"
                if state == "PENDING" and reason not in ("", "None")
                else state
            )
    left = [j for j, s in states.items() if s == UNKNOWN]
    if left and shutil.which("sacct"):
        acct = _run(["sacct", "-n", "-P", "-X", "-j", ",".join(left), "-o", "JobID,State"])
        # no accounting: stay UNKNOWN
        for line in acct.stdout.splitlines() if acct.returncode == 0 else []:
            job, _, state = line.partition("|")
            if job in states and state:
                states[job] = state.split()[0]
    return states


def _unavailable_nodes() -> str:
    """Which nodes are drained or down and the reason an admin gave: Slurm's pending reason names
    neither, and the reason is what tells a user whether to wait."""
    done = _run(["sinfo", "-h", "-N", "-t", "drain,down,fail", "-o", "%N|%T|%E"])
    rows = dict.fromkeys(
        line for line in done.stdout.splitlines() if done.returncode == 0 and line.count("|") >= 2
    )
    listed = [
        f"{n} {s}: {one_line(r, 120)}" for n, s, r in (row.split("|", 2) for row in list(rows)[:8])
    ]
    return ", ".join(listed)


def scancel(job_ids: list[str]) -> None:
    done = _run(["scancel", *job_ids])
    if done.returncode != 0:
        raise KitError(
            f"scancel {' '.join(job_ids)} failed: {one_line(done.stderr, 400)}",
            fix="check `squeue --me`, then cancel again when slurmctld answers",
        )


def wait_gone(jobs: list[str], timeout: float = 300.0, poll: float = 1.0) -> None:
    """Until none of ``jobs`` is queued, running or completing; a KitError naming them after
    ``timeout``.
    """
    deadline = time.monotonic() + timeout
    while jobs:
        states = job_states(jobs)
        jobs = [j for j in jobs if is_active(states[j])]
        if jobs and time.monotonic() > deadline:
            raise KitError(
                f"jobs {', '.join(jobs)} still {', '.join(states[j] for j in jobs)} {timeout:.0f} s after "
                "scancel",
                fix="check squeue, then cancel again",
            )
        if jobs:
            time.sleep(poll)
