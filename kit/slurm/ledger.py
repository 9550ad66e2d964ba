"""jobs.yaml in a run dir: which Slurm jobs ran which run, newest last (a resubmit keeps
history).
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from kit.atomic import atomic_write_text, open_lock_file
from kit.excerpt import shown
from kit.schema import Bad, Field, Items, Names, Section, check_doc
from kit.slurm.jobs import JOB_ID_RE, LOCAL_ENDS, LOCAL_JOB_RE
from kit.yamlbound import load_file

NAME = "jobs.yaml"
LOCK = ".jobs.lock"


def _job_id(value: Any) -> Bad | None:
    """A job id goes to squeue and scancel: Slurm's digits (or array/het form), nothing else."""
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        if JOB_ID_RE.fullmatch(str(value)) or LOCAL_JOB_RE.fullmatch(str(value)):
            return None
    return Bad(f"{shown(value)} is not a Slurm job id")


ENTRY = Section(
    {
        "job": Field("any", check=_job_id),
        "submitted": Field("str", required=False),
        "state": Field(
            "str",
            required=False,
            choices=LOCAL_ENDS,
            doc="how a run on a site without a scheduler ended (kit scale submit ran it here)",
        ),
        "exit": Field(
            "int",
            nullable=True,
            required=False,
            doc="that run's exit status (none: stopped at its walltime or by Ctrl-C)",
        ),
    },
    open=True,
)
LEDGER = Field(Names(Field(Items(Field(ENTRY)))))


def read_jobs(run_dir: Path) -> dict[str, list[dict]]:
    """The ledger; a file kit did not write this way is one line naming its line, not a guess: job
    ids from it go to squeue and scancel."""
    path = run_dir / NAME
    fix = (
        "restore the jobs.yaml kit wrote, "
        "or move it aside to start afresh (queued jobs are then forgotten)"
    )
    try:
        doc = load_file(path, "job ledger", fix)
    except FileNotFoundError:
        return {}
    if doc.value is None:
        return {}
    return check_doc(doc, LEDGER, "job ledger", fix=fix)


def record_job(run_dir: Path, run_id: str, job_id: str, **fields: object) -> None:
    jobs = read_jobs(run_dir)
    jobs.setdefault(run_id, []).append(
        {"job": job_id, "submitted": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **fields}
    )
    kept = {
        run: [{k: v for k, v in e.items() if v is not None} for e in es] for run, es in jobs.items()
    }
    atomic_write_text(run_dir / NAME, yaml.safe_dump(kept, sort_keys=True))


def latest_job(jobs: dict[str, list[dict]], run_id: str) -> str | None:
    history = jobs.get(run_id) or []
    return str(history[-1]["job"]) if history else None


def all_jobs(jobs: dict[str, list[dict]], run_id: str) -> list[str]:
    return [str(e["job"]) for e in jobs.get(run_id) or []]


@contextmanager
def locked(run_dir: Path) -> Iterator[None]:
    """One submitter at a time per run dir: check, sbatch and record must not interleave, or a run
    is queued twice."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with os.fdopen(open_lock_file(run_dir / LOCK, "the sweep's lock file"), "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield
