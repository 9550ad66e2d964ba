"""A sweep's jobs: submit the plan's runs, collect their states and results, cancel them."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kit.errors import KitError
from kit.excerpt import one_line
from kit.readfile import read_json_object, read_tail
from kit.scale import local
from kit.scale.plan import Plan, load_plan
from kit.scale.runs import PHYSICS, Validation
from kit.schema import Field, Section, check_value
from kit.site import Site
from kit.slurm import (
    UNKNOWN,
    RunFiles,
    RunSpec,
    check_run,
    is_active,
    is_stuck,
    job_states,
    scancel,
)
from kit.slurm.jobs import wait_gone
from kit.slurm.ledger import all_jobs, latest_job, read_jobs
from kit.slurm.result import RunFailed, run_result
from kit.slurm.submit import Submission, submit_runs

LOG_TAIL_LINES = 12
LOG_TAIL_BYTES = 64 * 1024


@dataclass(frozen=True)
class RunStatus:
    run_id: str
    job: str | None
    state: str  # Slurm's state, or NOT SUBMITTED
    result: Path | None  # the run's results JSON, once it is there and readable
    problem: str = ""  # why a finished run has no result, with the log's last lines
    # plan --validate: scored, no scale, pending or failed; None: not asked
    physics: str | None = None
    physics_problem: str = ""  # why a finished run has no physics: its validation log's last lines
    # the problem is the job log's last lines, not a result file refused
    problem_in_log: bool = False

    @property
    def done(self) -> bool:
        return self.result is not None

    @property
    def active(self) -> bool:
        return self.job is not None and is_active(self.state)


def submit(
    sweep_dir: Path,
    *,
    dry_run: bool = False,
    only: list[str] | None = None,
    resubmit: bool = False,
    on_start: Callable[[RunSpec], None] | None = None,
    on_done: Callable[[Submission], None] | None = None,
) -> list[Submission]:
    """Render and sbatch each of the plan's runs (or ``only`` these) under kit.slurm.submit's rule:
    a run with a result or a job still queued is skipped unless ``resubmit`` (which never runs
    beside a job of the same run), so submitting twice queues nothing twice. On a site without a
    batch system the runs train here, one after another (kit.scale.local; ``on_start`` and
    ``on_done`` hear of each)."""
    plan = load_plan(sweep_dir)
    site = plan.load_site()
    runs = [check_run(site, spec, here=True) for spec in _select(plan, only)]
    if runs_here(site):
        return local.submit_here(
            site,
            runs,
            sweep_dir,
            python=plan.python,
            resubmit=resubmit,
            dry_run=dry_run,
            on_start=on_start,
            on_done=on_done,
        )
    return submit_runs(
        site,
        runs,
        sweep_dir,
        pair=plan.pair_file(site),
        python=plan.python,
        resubmit=resubmit,
        dry_run=dry_run,
    )


def collect(sweep_dir: Path) -> list[RunStatus]:
    """Each run's state; a finished run without a result is a problem, shown with its log."""
    plan = load_plan(sweep_dir)
    jobs = read_jobs(sweep_dir)
    latest = {r.run_id: latest_job(jobs, r.run_id) for r in plan.runs}
    states = {**job_states([j for j in latest.values() if j]), **local.recorded_states(jobs)}
    out = []
    for spec in plan.runs:
        files = RunFiles(sweep_dir.absolute(), spec.run_id)
        job = latest[spec.run_id]
        state = states.get(job, UNKNOWN) if job else "NOT SUBMITTED"
        try:
            result, problem = run_result(files, job), ""
        except KitError as exc:  # shown with the run, not fatal to the others' status
            result, problem = None, str(exc)
        in_log = False
        if result is None and not problem and job is not None and not is_active(state):
            in_log = True
            problem = _log_tail(files.log(job)) or f"no log at {files.log(job)}"
        try:
            physics, physics_problem = (
                _physics(files, job, state, result) if spec.validate else (None, "")
            )
        except KitError as exc:  # the result replaced since it was read: shown with the run
            physics, physics_problem = "failed", str(exc)
        out.append(
            RunStatus(
                run_id=spec.run_id,
                job=job,
                state=state,
                result=result,
                problem=problem,
                physics=physics,
                physics_problem=physics_problem,
                problem_in_log=in_log,
            )
        )
    return out


def _physics(
    files: RunFiles, job: str | None, state: str, result: Path | None
) -> tuple[str | None, str]:
    """What became of a validated run's physics: gan3d validate adds its score to the results JSON,
    so a run that ended with a result but without that key failed its validation (its log says
    why)."""
    if result is None or job is None:
        return None, ""
    physics = _recorded_physics(result, files.run_id)
    if physics is not None:
        return ("scored" if physics.get("score") is not None else "no scale"), ""
    if job and is_active(state):
        return "pending", ""
    log = files.validate_log(job)
    return "failed", _log_tail(log) or f"no validation log at {log}"


_PHYSICS = Section({"physics": Field(PHYSICS, nullable=True, required=False)}, open=True)


def _recorded_physics(result: Path, run_id: str) -> dict | None:
    """The `physics` key of a run's results file, read again (a file replaced since run_result read
    it is named in one line, whatever it holds)."""
    fix = f"kit scale submit --resubmit --only {run_id}"
    record = read_json_object(result, "gan3d results file", fix)
    return check_value(record, result, _PHYSICS, what="gan3d results file", fix=fix)["physics"]


def collect_document(sweep_dir: Path, status: list[RunStatus]) -> dict:
    """What `kit scale collect --json` prints (its schema: kit-scale-collect/1)."""
    runs = [
        {
            "run": s.run_id,
            "job": s.job,
            "state": s.state,
            "result": str(s.result) if s.result else None,
            "problem": s.problem or None,
            "physics": s.physics,
            "physics_problem": s.physics_problem or None,
        }
        for s in status
    ]
    return {
        "dir": str(sweep_dir.absolute()),
        "runs": runs,
        "done": sum(s.done for s in status),
        "total": len(status),
        "problems": sum(bool(s.problem) for s in status),
    }


def cancel(
    sweep_dir: Path, *, only: list[str] | None = None, dry_run: bool = False, wait: bool = True
) -> list[tuple[str, str]]:
    """scancel the plan's queued and running jobs: (run id, job id) of each one cancelled. With
    ``wait``, returns once Slurm has let them go: a job still COMPLETING would otherwise pass for
    running (and be cancelled again, or not resubmitted) by the next command."""
    plan = load_plan(sweep_dir)
    jobs = read_jobs(sweep_dir)
    history = [(r.run_id, j) for r in _select(plan, only) for j in all_jobs(jobs, r.run_id)]
    states = job_states([j for _, j in history])
    active = [(run, job) for run, job in history if is_active(states[job])]
    if active and not dry_run:
        scancel([job for _, job in active])
        if wait:
            wait_gone([job for _, job in active])
    return active


def wait(
    sweep_dir: Path,
    *,
    poll_seconds: float = 5.0,
    timeout: float | None = None,
    on_poll: Callable[[list[RunStatus]], None] | None = None,
) -> list[RunStatus]:
    """Collect until no submitted run is queued or running (bounded: a NaN, infinite or negative
    poll or timeout would never end, or crash in time.sleep)."""
    import math

    for name, value in (("poll", poll_seconds), ("timeout", timeout)):
        if value is not None and not (
            isinstance(value, (int, float)) and math.isfinite(value) and value >= 0
        ):
            raise KitError(
                f"--{name} {value!r}: not a number of seconds", fix="give a finite number >= 0"
            )
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        status = collect(sweep_dir)
        if on_poll:
            on_poll(status)
        active = [s for s in status if s.active]
        if not active:
            return status
        if all(is_stuck(s.state) for s in active):
            raise KitError(
                "every run still queued pends for a reason only a person can clear: "
                + ", ".join(f"{s.run_id} (job {s.job}, {s.state})" for s in active),
                fix="clear the cause (a failed launch: the node's slurmd log, "
                "then scontrol release; partition limits) or kit scale cancel",
                where=str(sweep_dir),
            )
        if deadline is not None and time.monotonic() > deadline:
            raise KitError(
                f"runs still queued or running after {timeout:.0f} s: "
                + ", ".join(f"{s.run_id} ({s.state})" for s in active),
                fix="wait longer (--timeout), or see them with kit scale status",
                where=str(sweep_dir),
            )
        time.sleep(poll_seconds)


def results(sweep_dir: Path, failed: list[str] | None = None) -> list[Path]:
    """The results JSONs of the plan's runs that have one (no Slurm needed: reports are made
    anywhere); a damaged one is a KitError naming it, not a run silently left out of the report.
    Runs whose result says they failed are left out and named in ``failed``."""
    jobs = read_jobs(sweep_dir)
    found = []
    for run in load_plan(sweep_dir).runs:
        try:
            found.append(
                run_result(RunFiles(sweep_dir.absolute(), run.run_id), latest_job(jobs, run.run_id))
            )
        except RunFailed as exc:
            if failed is not None:
                failed.append(str(exc))
    return [p for p in found if p is not None]


def unscored(sweep_dir: Path) -> dict[Path, Validation]:
    """The results of the plan's validated runs that hold no physics score, with why (no Slurm
    needed): the job's log says when its validation failed (the batch script writes that line),
    the validation log says why; without that line the validation has not finished."""
    plan = load_plan(sweep_dir)
    jobs = read_jobs(sweep_dir)
    out = {}
    for run in plan.runs:
        files, job = RunFiles(sweep_dir.absolute(), run.run_id), latest_job(jobs, run.run_id)
        if not run.validate or job is None:
            continue
        try:
            result = run_result(files, job)
        except RunFailed:
            continue
        if result is None or isinstance(_recorded_physics(result, run.run_id), dict):
            continue
        if f"kit: run {run.run_id}: physics validation failed" in _log_tail(files.log(job)):
            log = files.validate_log(job)
            out[result] = Validation("failed", _validation_error(log))
        else:
            out[result] = Validation(
                "not finished", f"job {job}'s log does not say the validation ended"
            )
    return out


def _validation_error(log: Path) -> str:
    """gan3d validate's own error line from the end of its log (the launcher's lines about ending
    the step come after it), else the log's last line."""
    lines = [line for line in _log_tail(log).splitlines() if line.strip()]
    if not lines:
        return f"no validation log at {log}"
    return one_line(
        next((line for line in reversed(lines) if "gan3d validate: error:" in line), lines[-1])
    )


def runs_here(site: Site) -> bool:
    """Whether the site's runs train on this machine (no batch system): nothing is ever queued."""
    return site.scheduler.type == "local"


def _select(plan: Plan, only: list[str] | None) -> list:
    if not only:
        return plan.runs
    known = {r.run_id for r in plan.runs}
    unknown = [o for o in only if o not in known]
    if unknown:
        raise KitError(
            f"--only {', '.join(unknown)}: not in the plan",
            fix=f"give runs of the plan: {', '.join(sorted(known))}",
        )
    return [r for r in plan.runs if r.run_id in only]


def _log_tail(log: Path) -> str:
    """The last lines of a job's log; only its end is read, and nothing but a regular file."""
    try:
        data = read_tail(log, LOG_TAIL_BYTES)
    except (OSError, KitError):
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-LOG_TAIL_LINES:])
