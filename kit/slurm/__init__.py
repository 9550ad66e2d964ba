"""Batch scripts for training runs: check a run against the site, render it, submit it."""
from kit.slurm.jobs import ACTIVE, UNKNOWN, job_states, sbatch
from kit.slurm.script import RunFiles, render, write_run
from kit.slurm.spec import Checked, RunSpec, check_run, default_threads

__all__ = ["ACTIVE", "UNKNOWN", "Checked", "RunFiles", "RunSpec", "check_run", "default_threads", "job_states",
           "render", "sbatch", "write_run"]
