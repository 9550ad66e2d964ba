"""Runs on a site without a batch system (`scheduler.type: local`): one after another on this
machine under the site's MPI launcher, each in its own process group, bounded in time.

`kit scale tune` measures its layouts this way, and `kit scale submit` runs a sweep's runs this
way, so that a laptop goes through the same plan, submit, collect, report cycle as a cluster. Each
run of a sweep is recorded in the sweep's jobs.yaml as a local job (``local-<ms since 1970>``) with
the state it ended in, in Slurm's words: collect, report and the next submit read it as they read
a Slurm job's, and never ask Slurm about it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Callable

from kit import interrupt
from kit.atomic import open_log, own_dir
from kit.errors import KitError
from kit.excerpt import shown
from kit.site import Site
from kit.site.model import FILE_FIX as SITE_FILE_FIX
from kit.slurm.jobs import LOCAL_ENDS, LOCAL_JOB_RE, UNKNOWN
from kit.slurm.ledger import latest_job, locked, read_jobs, record_job
from kit.slurm.script import RunFiles, train_words
from kit.slurm.spec import Checked, RunSpec, seconds
from kit.slurm.submit import Submission, held_back, result_aside

GRACE = 10.0  # seconds a stopped run's ranks get to end after SIGTERM, before SIGKILL


def local_launcher(site: Site) -> list[str]:
    """The site's launcher; for MPICH its hydra by name (Debian's plain mpiexec may be Open
    MPI's).
    """
    names = ("mpiexec.hydra", "mpiexec.mpich") if site.host_mpi.vendor == "mpich" else ()
    for name in names:
        if path := shutil.which(name):
            return [path]
    words = shlex.split(site.host_mpi.launcher)
    if not shutil.which(words[0]):
        raise KitError(
            f"site {site.name}: host_mpi.launcher {shown(words[0])} is not on PATH",
            fix="load the site's MPI (or apt-get install mpich)",
        )
    return words


def run_bounded(cmd: list[str], log: Path, timeout: float) -> int | None:
    """Run `cmd` in its own process group with its output appended to `log`; the whole group (the
    launcher and every rank) is stopped after `timeout` s or on Ctrl-C, so nothing outlives the
    run. None: stopped after `timeout`."""
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with open_log(log, "the run's log") as out:  # a link planted there is refused, never truncated
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(proc)
            return None
        except KeyboardInterrupt:  # the group has its own session: Ctrl-C reached only the kit
            _stop(proc)
            raise


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the run's process group, SIGKILL to what is left after GRACE seconds."""
    with interrupt.held():
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=GRACE)
                break
            except subprocess.TimeoutExpired:
                continue
        interrupt.reap(proc)


def command(site: Site, run: Checked, files: RunFiles, *, python: str) -> list[str]:
    """The launcher with the run's ranks and its `gan3d train` line, as its batch job would have
    it."""
    if site.path is None:
        raise KitError(
            f"site {site.name}: no config file behind it to give the run", fix=SITE_FILE_FIX
        )
    return [
        *local_launcher(site),
        "-n",
        str(run.spec.ranks),
        *train_words(run, files, python=python, site_file=Path(site.path).resolve()),
    ]


def submit_here(
    site: Site,
    runs: Sequence[Checked],
    run_dir: Path,
    *,
    python: str,
    resubmit: bool = False,
    dry_run: bool = False,
    on_start: Callable[[RunSpec], None] | None = None,
    on_done: Callable[[Submission], None] | None = None,
) -> list[Submission]:
    """Run each run that kit.slurm.submit's rule lets through, one after another, under the run
    directory's lock; a run that fails is recorded and the next one runs. ``dry_run`` lists the
    command lines and runs nothing."""
    with nullcontext() if dry_run else locked(run_dir):
        jobs = read_jobs(run_dir)
        out = []
        for run in runs:
            files = RunFiles(run_dir.absolute(), run.spec.run_id)
            old = latest_job(jobs, files.run_id)
            # a local job is never still queued: only a result holds a run back
            held = held_back(files, old, active=[], states={}, resubmit=resubmit)
            if held:
                out.append(Submission(files.run_id, files.result, None, held, held_back=True))
                continue
            cmd = command(site, run, files, python=python)
            if dry_run:
                out.append(
                    Submission(files.run_id, files.result, None, f"dry run: {shlex.join(cmd)}")
                )
            else:
                if on_start:
                    on_start(run.spec)
                done = _run(run_dir, files, old, cmd, seconds(run.spec.walltime))
                out.append(done)
                if on_done:
                    on_done(done)
    return out


def _run(run_dir: Path, files: RunFiles, old: str | None, cmd: list[str], limit: int) -> Submission:
    """One run, its end recorded in the ledger (also when Ctrl-C stopped it)."""
    job = f"local-{time.time_ns() // 1_000_000}"
    for sub in ("logs", "results"):  # the run writes into them: never through a link
        own_dir(files.run_dir / sub, f"the run directory's {sub}/")
    result_aside(files, old)
    started, began = time.strftime("%Y-%m-%dT%H:%M:%S%z"), time.monotonic()
    try:
        code = run_bounded(cmd, files.log(job), limit)
    except KeyboardInterrupt:
        with interrupt.held():
            record_job(run_dir, files.run_id, job, submitted=started, state="CANCELLED")
        raise
    state = "TIMEOUT" if code is None else ("COMPLETED" if code == 0 else "FAILED")
    with interrupt.held():
        record_job(run_dir, files.run_id, job, submitted=started, state=state, exit=code)
    took = f"after {time.monotonic() - began:.0f} s"
    shown_state = state_of(state, code)
    return Submission(
        files.run_id, files.log(job), job, f"{shown_state} {took}", failed=state != "COMPLETED"
    )


def state_of(state: object, code: object) -> str:
    """A local job's state as collect shows it: FAILED with its exit status; UNKNOWN where the
    ledger records no end (a kit stopped by SIGKILL)."""
    if state not in LOCAL_ENDS:
        return UNKNOWN
    if state == "FAILED" and isinstance(code, int) and not isinstance(code, bool):
        return f"FAILED (exit {code})"
    return str(state)


def recorded_states(jobs: dict[str, list[dict]]) -> dict[str, str]:
    """Each local job's end state, as the ledger records it."""
    return {
        str(entry["job"]): state_of(entry.get("state"), entry.get("exit"))
        for entries in jobs.values()
        for entry in entries
        if LOCAL_JOB_RE.fullmatch(str(entry["job"]))
    }
