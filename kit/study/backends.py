"""Where evaluations run: on this machine (a `local` site), as Slurm jobs, or inside a pilot job.

Each backend starts an evaluation, says whether it is still running or what became of it, and
cancels it. All three are safe to call again after the driver was killed: `start` on an evaluation
already running or done attaches to it instead of running it twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from kit.atomic import atomic_write_text, open_log
from kit.errors import KitError
from kit.readfile import read_tail
from kit.scale import sweep_jobs
from kit.scale.plan import Plan, write_plan
from kit.scale.tune import local_launcher
from kit.site import Site
from kit.site.model import FILE_FIX as SITE_FILE_FIX
from kit.slurm.jobs import wait_gone
from kit.slurm.ledger import latest_job, read_jobs
from kit.slurm.script import RunFiles
from kit.slurm.spec import RunSpec
from kit.study import evalproc
from kit.study.evaluate import (
    SYNTHETIC,
    EvalRun,
    EvaluationFailed,
    checked_eval_dir,
    checkpoints_aside,
    eval_dir,
    local_commands,
    make_subdir,
    read_objective,
    validation_data,
)

LOG_TAIL_LINES = 12
LOG_TAIL_BYTES = 16 * 1024
RUNNING = "running"
LOST = "lost"  # neither running nor ended with an exit status: killed with its node or its driver


@dataclass(frozen=True)
class Outcome:
    """An evaluation that ended: its objective value, or why it has none (with the log's last
    lines).
    """

    objective: float | None
    result: str | None = None
    error: str | None = None


def log_tail(path: Path) -> str:
    try:
        text = read_tail(path, LOG_TAIL_BYTES).decode(errors="replace")
    except (OSError, KitError):
        return "(no log)"
    return "\n".join(text.splitlines()[-LOG_TAIL_LINES:]) or "(empty log)"


def _outcome(run_results: Path, objective: str, problem: str | None, log: Path) -> Outcome:
    if problem is None:
        try:
            return Outcome(read_objective(run_results, objective), str(run_results))
        except EvaluationFailed as exc:
            problem = str(exc)
    return Outcome(None, None, f"{problem}; log {log} ends:\n{log_tail(log)}")


class LocalBackend:
    """Each evaluation is `python -m kit.study.evalproc EVALDIR` in a session of its own: it
    outlives a killed driver, and its lock tells the next driver it still runs."""

    how = "local"

    def __init__(self, study_dir: Path, site: Site, objective: str, python: str = sys.executable):
        self.study_dir, self.site, self.objective, self.python = study_dir, site, objective, python
        self.launcher = local_launcher(site)
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, run: EvalRun) -> dict:
        d = checked_eval_dir(self.study_dir, run.eval_id)
        if evalproc.is_running(d) or evalproc.exit_status(d) is not None:
            return {"how": self.how, "attached": True}
        checkpoints_aside(d)  # a lost attempt's (gan3d train refuses a fresh run into them)
        make_subdir(d / "results")
        commands = local_commands(
            run, self.study_dir, self.site, launcher=self.launcher, python=self.python
        )
        atomic_write_text(d / evalproc.PLAN, json.dumps({"commands": commands}, indent=1) + "\n")
        with open_log(d / evalproc.LOG, "the evaluation's log") as log:
            proc = subprocess.Popen(
                [self.python, "-m", "kit.study.evalproc", str(d)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs[run.eval_id] = proc
        return {"how": self.how, "pid": proc.pid}

    def poll(self, eval_id: str) -> Outcome | str:
        proc = self.procs.get(eval_id)
        if proc is not None and proc.poll() is None:
            return RUNNING
        d = checked_eval_dir(self.study_dir, eval_id, create=False)
        status = ended(d)
        if isinstance(status, str):  # RUNNING, the one text ended() returns
            return RUNNING
        self.procs.pop(eval_id, None)
        if status is None:
            return LOST
        problem = (
            None
            if status["code"] == 0
            else f"step {status.get('step')} ({'training' if status.get('step') == 0 else 'validation'}) "
            f"exited {status['code']}"
        )
        return _outcome(RunFiles(d, d.name).result, self.objective, problem, d / evalproc.LOG)

    def cancel(self, eval_ids: list[str]) -> list[str]:
        """SIGTERM each running evaluation's process group (its launcher and ranks with it)."""
        done = []
        for eval_id in eval_ids:
            try:
                d = checked_eval_dir(self.study_dir, eval_id, create=False)
            except EvaluationFailed:  # a link: no process group found through it is signalled
                continue
            pgid = _holder_group(d)
            if pgid is not None:
                os.killpg(pgid, signal.SIGTERM)
                done.append(eval_id)
        return done


def site_config(site: Site) -> Path:
    """The site's config file, which an evaluation's job reads (kit study plan refuses a site
    without one)."""
    if site.path is None:
        raise KitError(
            f"site {site.name}: a study needs a site config file (its runs read it)",
            fix=SITE_FILE_FIX,
        )
    return site.path


def ended(d: Path) -> dict | str | None:
    """RUNNING while an evaluation's process holds its lock, else its exit.json (None: none, it was
    lost); an exit file or lock that is not what the kit writes fails the evaluation, not the
    study."""
    try:
        return RUNNING if evalproc.is_running(d) else evalproc.exit_status(d)
    except EvaluationFailed:
        raise
    except KitError as exc:
        raise EvaluationFailed(exc.what, fix=exc.fix, where=exc.where) from None


def _holder_group(d: Path) -> int | None:
    """The process group of the evalproc holding EVALDIR's lock (found through /proc's lock
    table).
    """
    if not evalproc.is_running(d):
        return None
    inode = os.stat(d / evalproc.LOCK).st_ino
    with open("/proc/locks") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) > 5 and parts[1] == "FLOCK" and parts[5].rsplit(":", 1)[-1] == str(inode):
                try:
                    return os.getpgid(int(parts[4]))
                except (ProcessLookupError, ValueError):
                    return None
    return None


class SlurmBackend:
    """Each evaluation a one-run `kit scale` sweep in its evaluation directory, submitted and
    collected with kit scale's own code (one job per run, never a second beside a queued one)."""

    how = "slurm"

    def __init__(
        self,
        study_dir: Path,
        site: Site,
        objective: str,
        walltime: str,
        pair: str | None,
        python: str,
        partition: str | None = None,
        account: str | None = None,
    ):
        self.study_dir, self.site, self.objective = study_dir, site, objective
        self.walltime, self.pair, self.python = walltime, pair, python
        self.partition, self.account = partition, account

    def start(self, run: EvalRun) -> dict:
        d = checked_eval_dir(self.study_dir, run.eval_id)
        args = slurm_train_args(run, d)
        spec = RunSpec(
            run_id=run.eval_id,
            nodes=1,
            ranks_per_node=run.ranks_per_node,
            threads_per_rank=run.threads,
            walltime=self.walltime,
            train_args=args,
            partition=self.partition,
            account=self.account,
            validate=run.validate,
        )
        write_plan(
            Plan(
                site=str(site_config(self.site).resolve()),
                walltime=self.walltime,
                runs=[spec],
                pair=self.pair,
                python=self.python,
                train_args=args,
                validate=run.validate,
            ),
            d,
        )
        [sub] = sweep_jobs.submit(d)
        if sub.job:
            return {"how": self.how, "job": sub.job}
        if sub.note.startswith("not submitted"):
            raise EvaluationFailed(
                f"{run.eval_id}: {sub.note}", fix="clear what the note names; the study goes on"
            )
        return {"how": self.how, "job": latest_job(read_jobs(d), run.eval_id), "attached": True}

    def poll(self, eval_id: str) -> Outcome | str:
        d = checked_eval_dir(self.study_dir, eval_id, create=False)
        [status] = sweep_jobs.collect(d)
        if status.physics == "pending":  # trained; the job's validation is still to add the score
            return RUNNING
        if status.physics == "failed":
            return Outcome(
                None,
                None,
                f"job {status.job}: the physics validation failed; its log ends:\n"
                f"{status.physics_problem}",
            )
        if status.result is not None:
            return _outcome(
                status.result, self.objective, None, RunFiles(d, d.name).log(status.job or "0")
            )
        if status.active:
            return RUNNING
        if status.job is None:
            return LOST
        log = RunFiles(d, d.name).log(status.job)
        return Outcome(
            None,
            None,
            f"job {status.job} ended {status.state} without a result: {status.problem}"
            if status.problem
            else f"job {status.job} ended {status.state} without a result; log {log}",
        )

    def cancel(self, eval_ids: list[str]) -> list[str]:
        """scancel each evaluation's job and wait until Slurm has let them go: a job still
        COMPLETING would otherwise pass for running when the study resumes (and not be replaced)."""
        cancelled = {
            e: sweep_jobs.cancel(eval_dir(self.study_dir, e).absolute(), wait=False)
            for e in eval_ids
        }
        wait_gone([job for jobs in cancelled.values() for _, job in jobs])
        return [e for e, jobs in cancelled.items() if jobs]


def slurm_train_args(run: EvalRun, d: Path) -> tuple[str, ...]:
    """The evaluation's training arguments as its batch script gets them. For the physics score
    the job validates after training (kit scale plan --validate); generated showers are then kept
    in EVALDIR/synthetic, which the validation compares the generator with."""
    if run.validate and validation_data(run.train_args) is None:
        return (*run.train_args, "--synthetic-dir", str(d / SYNTHETIC))
    return run.train_args
