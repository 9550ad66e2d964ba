"""Submit a plan's runs and find out what became of them."""
from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kit.errors import KitError
from kit.excerpt import shown
from kit.readfile import read_json, read_tail
from kit.scale.plan import Plan, load_plan
from kit.slurm import UNKNOWN, RunFiles, check_run, is_active, is_stuck, job_states, render, sbatch, scancel, write_run
from kit.slurm.ledger import all_jobs, latest_job, locked, read_jobs, record_job

LOG_TAIL_LINES = 12
LOG_TAIL_BYTES = 64 * 1024


@dataclass(frozen=True)
class Submission:
    run_id: str
    script: Path
    job: str | None  # None: not submitted (dry run, or skipped)
    note: str = ""


@dataclass(frozen=True)
class RunStatus:
    run_id: str
    job: str | None
    state: str  # Slurm's state, or NOT SUBMITTED
    result: Path | None  # the run's results JSON, once it is there and readable
    problem: str = ""  # why a finished run has no result, with the log's last lines
    physics: str | None = None  # plan --validate: scored, no scale, pending or failed; None: not asked
    physics_problem: str = ""  # why a finished run has no physics: its validation log's last lines

    @property
    def done(self) -> bool:
        return self.result is not None

    @property
    def active(self) -> bool:
        return self.job is not None and is_active(self.state)


def submit(sweep_dir: Path, dry_run: bool = False, only: list[str] | None = None,
           resubmit: bool = False) -> list[Submission]:
    """Render and sbatch each run. A run that has a result or a job still queued is skipped
    unless ``resubmit`` (which never runs beside a job of the same run), so submitting twice
    queues nothing twice."""
    plan = load_plan(sweep_dir)
    site = plan.load_site()
    pair = plan.pair_file(site)
    runs = _select(plan, only)
    with nullcontext() if dry_run else locked(sweep_dir):
        jobs = read_jobs(sweep_dir)
        states = job_states([j for r in runs for j in all_jobs(jobs, r.run_id)])  # none yet: Slurm not asked
        out = []
        for spec in runs:
            checked = check_run(site, spec)
            files = RunFiles(sweep_dir.absolute(), spec.run_id)
            job = latest_job(jobs, spec.run_id)
            running = [j for j in all_jobs(jobs, spec.run_id) if is_active(states[j])]
            if not resubmit and _usable_result(files, job):
                out.append(Submission(spec.run_id, files.script, None, "has a result (--resubmit to run again)"))
            elif running:
                out.append(Submission(spec.run_id, files.script, None, f"job {running[-1]} is "
                                      f"{states[running[-1]]}" + (": cancel it first" if resubmit else "")))
            elif dry_run:
                render(site, checked, files, pair, plan.python)  # every check, nothing written
                out.append(Submission(spec.run_id, files.script, None, "dry run: would sbatch"))
            else:
                out.append(_submit_one(site, checked, sweep_dir, pair, plan.python, files, job))
    return out


def _submit_one(site, checked, sweep_dir: Path, pair, python: str, files: RunFiles, old: str | None) -> Submission:
    write_run(site, checked, sweep_dir, pair, python)
    try:
        job = sbatch(files.script)
    except KitError as exc:  # the runs queued so far stay recorded; say which failed and go on
        return Submission(files.run_id, files.script, None, f"not submitted: {exc}")
    record_job(sweep_dir, files.run_id, job)
    if files.results.exists():  # the old numbers must not pass for the new job's
        files.results.rename(files.results.with_name(f"{files.run_id}.before-job-{old}.json"))
    return Submission(files.run_id, files.script, job, "submitted")


def collect(sweep_dir: Path) -> list[RunStatus]:
    """Each run's state; a finished run without a result is a problem, shown with its log."""
    plan = load_plan(sweep_dir)
    jobs = read_jobs(sweep_dir)
    latest = {r.run_id: latest_job(jobs, r.run_id) for r in plan.runs}
    states = job_states([j for j in latest.values() if j])
    out = []
    for spec in plan.runs:
        files = RunFiles(sweep_dir.absolute(), spec.run_id)
        job = latest[spec.run_id]
        state = states.get(job, UNKNOWN) if job else "NOT SUBMITTED"
        try:
            result, problem = _result(files, job), ""
        except KitError as exc:  # shown with the run, not fatal to the others' status
            result, problem = None, str(exc)
        if result is None and not problem and job and not is_active(state):
            problem = _log_tail(files.log(job)) or f"no log at {files.log(job)}"
        physics, physics_problem = _physics(files, job, state, result) if spec.validate else (None, "")
        out.append(RunStatus(spec.run_id, job, state, result, problem, physics, physics_problem))
    return out


def _physics(files: RunFiles, job: str | None, state: str, result: Path | None) -> tuple[str | None, str]:
    """What became of a validated run's physics: gan3d validate adds its score to the results JSON,
    so a run that ended with a result but without that key failed its validation (its log says why)."""
    if result is None or job is None:
        return None, ""
    physics = (read_json(result, "gan3d results file", "fix: kit scale submit --resubmit --only "
                         + files.run_id) or {}).get("physics")
    if isinstance(physics, dict):
        return ("scored" if physics.get("score") is not None else "no scale"), ""
    if job and is_active(state):
        return "pending", ""
    log = files.validate_log(job)
    return "failed", _log_tail(log) or f"no validation log at {log}"


def cancel(sweep_dir: Path, only: list[str] | None = None, dry_run: bool = False) -> list[tuple[str, str]]:
    """scancel the plan's queued and running jobs: (run id, job id) of each one cancelled."""
    plan = load_plan(sweep_dir)
    jobs = read_jobs(sweep_dir)
    history = [(r.run_id, j) for r in _select(plan, only) for j in all_jobs(jobs, r.run_id)]
    states = job_states([j for _, j in history])
    active = [(run, job) for run, job in history if is_active(states[job])]
    if active and not dry_run:
        scancel([job for _, job in active])
    return active


def wait(sweep_dir: Path, poll_seconds: float = 5.0, timeout: float | None = None,
         on_poll: Callable[[list[RunStatus]], None] | None = None) -> list[RunStatus]:
    """Collect until no submitted run is queued or running."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        status = collect(sweep_dir)
        if on_poll:
            on_poll(status)
        active = [s for s in status if s.active]
        if not active:
            return status
        if all(is_stuck(s.state) for s in active):
            raise KitError(f"{sweep_dir}: every run still queued pends for a reason only a person can clear: "
                           + ", ".join(f"{s.run_id} (job {s.job}, {s.state})" for s in active)
                           + "; fix the cause (scontrol release, partition limits) or kit scale cancel")
        if deadline is not None and time.monotonic() > deadline:
            raise KitError(f"{sweep_dir}: runs still queued or running after {timeout:.0f} s: "
                           + ", ".join(f"{s.run_id} ({s.state})" for s in active))
        time.sleep(poll_seconds)


def results(sweep_dir: Path, failed: list[str] | None = None) -> list[Path]:
    """The results JSONs of the plan's runs that have one (no Slurm needed: reports are made anywhere);
    a damaged one is a KitError naming it, not a run silently left out of the report. Runs whose
    result says they failed are left out and named in ``failed``."""
    jobs = read_jobs(sweep_dir)
    found = []
    for run in load_plan(sweep_dir).runs:
        try:
            found.append(_result(RunFiles(sweep_dir.absolute(), run.run_id), latest_job(jobs, run.run_id)))
        except RunFailed as exc:
            if failed is not None:
                failed.append(str(exc))
    return [p for p in found if p is not None]


def _select(plan: Plan, only: list[str] | None) -> list:
    if not only:
        return plan.runs
    known = {r.run_id for r in plan.runs}
    unknown = [o for o in only if o not in known]
    if unknown:
        raise KitError(f"--only {', '.join(unknown)}: not in the plan (runs: {', '.join(sorted(known))})")
    return [r for r in plan.runs if r.run_id in only]


def _result(files: RunFiles, job: str | None) -> Path | None:
    """The run's results JSON if it was written by ``job`` (when it says which); None if there is none.
    A file there that is no results JSON is a KitError naming it."""
    fix = "fix: move it aside and kit scale submit --resubmit --only " + files.run_id
    try:
        record = read_json(files.results, "gan3d results file", fix)
    except FileNotFoundError:
        return None
    if not isinstance(record, dict):
        raise KitError(f"{files.results}: a {type(record).__name__}, not a gan3d results file; {fix}")
    written = record.get("job") or {}
    if not isinstance(written, dict):
        raise KitError(f"{files.results}: key 'job' is {shown(written)}, expected a mapping with slurm_job_id; {fix}")
    written_by = written.get("slurm_job_id")
    if written_by is not None and str(written_by) != job:
        return None
    if record.get("status") == "failed":  # gan3d train records why a run stopped (NaN losses, ...)
        raise RunFailed(f"{files.results}: the run failed: {shown(record.get('error'))}; "
                        f"fix: kit scale submit --resubmit --only {files.run_id} (e.g. with a lower --lr)")
    return files.results


class RunFailed(KitError):
    """The run's job wrote a result that says it failed: no figures of it may be counted."""


def _usable_result(files: RunFiles, job: str | None) -> Path | None:
    """For submission a damaged result is no result: the new job's replaces it (the old one is kept aside)."""
    try:
        return _result(files, job)
    except KitError:
        return None


def _log_tail(log: Path) -> str:
    """The last lines of a job's log; only its end is read, and nothing but a regular file."""
    try:
        data = read_tail(log, LOG_TAIL_BYTES)
    except (OSError, KitError):
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-LOG_TAIL_LINES:])
