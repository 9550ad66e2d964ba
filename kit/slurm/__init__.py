"""Batch scripts for training runs: check a run against the site, render it, submit it."""

from kit.slurm.jobs import UNKNOWN, is_active, is_stuck, job_states, sbatch, scancel
from kit.slurm.script import RunFiles, render, write_run
from kit.slurm.spec import Checked, RunSpec, check_run, default_threads

__all__ = [
    "UNKNOWN",
    "Checked",
    "RunFiles",
    "RunSpec",
    "check_run",
    "default_threads",
    "is_active",
    "is_stuck",
    "job_states",
    "render",
    "sbatch",
    "scancel",
    "write_run",
]
