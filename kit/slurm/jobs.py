"""Talk to Slurm: submit a script, ask what became of jobs (squeue, then scontrol, then sacct)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from kit.errors import KitError

ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING"}
UNKNOWN = "UNKNOWN"


def _run(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    if shutil.which(argv[0]) is None:
        raise KitError(f"{argv[0]} not found: run this on the site's login node (or load the slurm module)")
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def sbatch(script: Path) -> str:
    """Submit; the job id. A refusal is passed on in Slurm's words, with the script named."""
    done = _run(["sbatch", "--parsable", str(script)])
    if done.returncode != 0:
        raise KitError(f"sbatch refused {script}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip().split(";")[0]


def job_states(job_ids: list[str]) -> dict[str, str]:
    """Each job's state; UNKNOWN when Slurm no longer remembers it (no accounting, MinJobAge over)."""
    states = {j: UNKNOWN for j in job_ids}
    if not job_ids:
        return states
    done = _run(["squeue", "-h", "-j", ",".join(job_ids), "-o", "%i|%T"])
    for line in done.stdout.splitlines() if done.returncode == 0 else []:
        job, _, state = line.partition("|")
        if job in states:
            states[job] = state
    for job in [j for j, s in states.items() if s == UNKNOWN]:
        shown = _run(["scontrol", "show", "job", "-o", job])
        for word in shown.stdout.split() if shown.returncode == 0 else []:
            if word.startswith("JobState="):
                states[job] = word.split("=", 1)[1]
    left = [j for j, s in states.items() if s == UNKNOWN]
    if left and shutil.which("sacct"):
        acct = _run(["sacct", "-n", "-P", "-X", "-j", ",".join(left), "-o", "JobID,State"])
        for line in acct.stdout.splitlines() if acct.returncode == 0 else []:
            job, _, state = line.partition("|")
            if job in states and state:
                states[job] = state.split()[0]
    return states
