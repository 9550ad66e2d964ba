"""Submit runs to Slurm: the one place that decides whether a run may be queued, and queues it.

This is the library entry point for anything that submits (`kit slurm submit`, `kit scale
submit`, `kit scale tune` on a Slurm site): give it the site, the checked runs, their run
directory and the pair, and it returns one Submission per run.

The rule for a run that already has a job or a result (one rule, for one run and for a sweep):

* a result written by the run's latest job: the run is not submitted unless ``resubmit``;
* a job of the run still queued or running: the run is not submitted (not even with
  ``resubmit``: a run never runs beside a job of its own, which would write the same files);
* otherwise (no result, or one that is damaged, says the run failed, or is another job's) the
  run is submitted, and once its job is queued the old result file, if any, is moved aside to
  ``results/RUN.before-job-OLDJOB.json`` (never deleted, never taken for the new job's).
  The kit's checkpoint directory of the run (``checkpoints/RUN``, a validated run's) is moved
  aside to ``checkpoints/RUN.before-job-OLDJOB`` before sbatch: a run submitted again trains
  afresh, and `gan3d train` refuses a fresh run into a directory holding another run's checkpoints.

Each submission runs under the run directory's lock, in this order: read the job ledger, apply
the rule, write the run (script and site copy), sbatch, record the job (Ctrl-C and SIGTERM wait
for the record of a queued job), move an old result aside.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from kit import interrupt
from kit.atomic import rename_noreplace
from kit.errors import KitError
from kit.mpi.pair_reader import PairFile
from kit.site import Site
from kit.slurm.jobs import is_active, job_states, sbatch
from kit.slurm.ledger import all_jobs, latest_job, locked, read_jobs, record_job
from kit.slurm.result import usable_result
from kit.slurm.script import RunFiles, render, write_run
from kit.slurm.spec import Checked

SUBMITTED, WRITTEN, DRY_RUN = "submitted", "written (not submitted)", "dry run: would sbatch"
NOT_SUBMITTED = "not submitted: "  # a note that starts so: sbatch refused the run
HAS_RESULT = "has a result (--resubmit to run again)"


@dataclass(frozen=True)
class Submission:
    """What became of one run: its job id if it was queued (or ran here), else why not
    (``note``)."""

    run_id: str
    script: Path  # the batch script; for a run on this machine, its log
    # None: not submitted (dry run, held back by the rule, written only, or refused)
    job: str | None
    note: str = ""
    # the rule kept the run back (a job still there, or a result): ``note`` says which
    held_back: bool = False
    failed: bool = False  # it ran on this machine and ended without success: ``note`` says how


def submit_runs(
    site: Site,
    runs: Sequence[Checked],
    run_dir: Path,
    *,
    pair: PairFile | None,
    python: str = "python3",
    resubmit: bool = False,
    dry_run: bool = False,
    queue: bool = True,
) -> list[Submission]:
    """Write and sbatch each run the rule lets through (module docstring). ``dry_run`` renders
    (every check) and writes nothing; ``queue`` False writes the runs without sbatch (`kit slurm
    render`: a run whose job is queued keeps its script). A refused sbatch is a note on its run, not
    an error: the runs queued before it stay recorded."""
    with nullcontext() if dry_run else locked(run_dir):
        jobs = read_jobs(run_dir)
        history = {c.spec.run_id: all_jobs(jobs, c.spec.run_id) for c in runs}
        states = job_states([j for ids in history.values() for j in ids])
        out = []
        for checked in runs:
            files = RunFiles(run_dir.absolute(), checked.spec.run_id)
            old = latest_job(jobs, files.run_id)
            held = held_back(
                files,
                old,
                active=[j for j in history[files.run_id] if is_active(states[j])],
                states=states,
                resubmit=resubmit,
            )
            if held:
                out.append(Submission(files.run_id, files.script, None, held, held_back=True))
            elif dry_run:
                # every check, nothing written
                render(site, checked, files, pair=pair, python=python)
                out.append(Submission(files.run_id, files.script, None, DRY_RUN))
            elif not queue:
                write_run(site, checked, run_dir, pair=pair, python=python)
                out.append(Submission(files.run_id, files.script, None, WRITTEN))
            else:
                out.append(_submit(site, checked, run_dir, pair, python, files, old))
    return out


def held_back(
    files: RunFiles, old: str | None, *, active: list[str], states: dict[str, str], resubmit: bool
) -> str:
    """Why the rule keeps the run from being submitted now; empty if it may go."""
    if not resubmit and usable_result(files, old):
        return HAS_RESULT
    if active:
        return f"job {active[-1]} is {states[active[-1]]}" + (
            ": cancel it first" if resubmit else ""
        )
    return ""


def _checkpoints_aside(files: RunFiles, old: str | None) -> None:
    """The earlier job's checkpoints of the run (the kit's directory for them, if any) under a name
    of their own, never deleted: the new job starts a fresh run there."""
    ckpt = files.checkpoints
    if not (ckpt.is_dir() and not ckpt.is_symlink() and any(ckpt.iterdir())):
        return
    aside = f"{files.run_id}.before-job-{old or 'unknown'}"
    fd = os.open(ckpt.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        rename_noreplace(fd, ckpt.name, aside)
    except FileExistsError:
        raise KitError(
            f"{ckpt}: the earlier job's checkpoints cannot be moved aside, "
            f"{ckpt.parent / aside} exists",
            fix="move one of them away, then submit again",
        ) from None
    finally:
        os.close(fd)


def _submit(
    site: Site,
    checked: Checked,
    run_dir: Path,
    pair: PairFile | None,
    python: str,
    files: RunFiles,
    old: str | None,
) -> Submission:
    write_run(site, checked, run_dir, pair=pair, python=python)
    _checkpoints_aside(files, old)
    with interrupt.held():  # a job queued but not recorded would be queued again by the next submit
        try:
            job = sbatch(files.script)  # bounded: sbatch answers within its timeout
        except KitError as exc:
            return Submission(files.run_id, files.script, None, f"{NOT_SUBMITTED}{exc}")
        record_job(run_dir, files.run_id, job)
    result_aside(files, old)
    return Submission(files.run_id, files.script, job, SUBMITTED)


def result_aside(files: RunFiles, old: str | None) -> None:
    """The old numbers must not pass for the new job's: kept as RUN.before-job-OLDJOB.json."""
    if files.result.exists():
        files.result.rename(files.result.with_name(f"{files.run_id}.before-job-{old}.json"))
