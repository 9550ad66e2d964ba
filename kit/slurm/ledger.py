"""jobs.yaml in a run dir: which Slurm jobs ran which run, newest last (a resubmit keeps history)."""
from __future__ import annotations

import fcntl
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import yaml

from kit.atomic import atomic_write_text
from kit.errors import KitError

NAME = "jobs.yaml"
LOCK = ".jobs.lock"


def read_jobs(run_dir: Path) -> dict[str, list[dict]]:
    path = run_dir / NAME
    if not path.exists():
        return {}
    try:
        data = yaml.safe_load(path.read_text()) or {}
        if not isinstance(data, dict) or not all(
                isinstance(v, list) and all(isinstance(e, dict) and "job" in e for e in v) for v in data.values()):
            raise ValueError("expected run id -> list of {job: ID, submitted: TIME}")
    except (yaml.YAMLError, ValueError) as exc:
        raise KitError(f"{path}: not a job ledger kit wrote ({exc}); move it aside to start afresh") from None
    return data


def record_job(run_dir: Path, run_id: str, job_id: str) -> None:
    jobs = read_jobs(run_dir)
    jobs.setdefault(run_id, []).append({"job": job_id, "submitted": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    atomic_write_text(run_dir / NAME, yaml.safe_dump(jobs, sort_keys=True))


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
    with open(run_dir / LOCK, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield
