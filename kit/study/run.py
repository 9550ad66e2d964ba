"""`kit study run DIR`: the asynchronous driver.

It keeps `parallel` evaluations in flight and asks the searcher for new configs as soon as one
finishes, until the budget is spent: `evaluations` counts evaluations that finished or failed (a
cancelled one is run again), `wall_time` is measured from the study's first `run` and stops new
proposals (evaluations in flight are waited for). Every step is in the ledger before the next, so
a driver stopped at any point resumes: evaluations proposed but not started are started, those
started are re-attached (their results collected if they ended meanwhile), none finished is run
again, and the study ends with exactly the budgeted number of evaluations.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kit.atomic import open_lock_file
from kit.errors import KitError
from kit.excerpt import shown
from kit.site import Site
from kit.slurm.spec import seconds
from kit.study import ledger
from kit.study.backends import LOST, RUNNING, LocalBackend, Outcome, SlurmBackend
from kit.study.evaluate import EvaluationFailed, StudyDirRefused, eval_run
from kit.study.studydir import Terms, open_study

DRIVER_LOCK = ".driver.lock"
# an evaluation lost this often (its node or process killed each time) counts as failed
MAX_STARTS = 3


@dataclass(frozen=True)
class Progress:
    done: int
    failed: int
    in_flight: int
    budget: int | None
    best: float | None
    best_eval: str | None


def best_of(led: ledger.Ledger, direction: str) -> tuple[str | None, float | None]:
    """The best finished evaluation (id, value) for the study's direction."""
    finished = [
        (e.eval_id, e.objective)
        for e in led.evaluations.values()
        if e.state == "finished" and e.objective is not None  # a finished one always has it
    ]
    if not finished:
        return None, None
    return (min if direction == "minimize" else max)(finished, key=lambda pair: pair[1])


def progress(led: ledger.Ledger, t: Terms) -> Progress:
    eid, value = best_of(led, t.direction)
    done = led.done()
    return Progress(
        done=len(done),
        failed=sum(e.state == "failed" for e in done),
        in_flight=len(led.in_flight()),
        budget=t.evaluations,
        best=value,
        best_eval=eid,
    )


@contextmanager
def driving(study_dir: Path) -> Iterator[None]:
    """One driver per study: a second `kit study run` on the same DIR is refused at once."""
    ledger.read(study_dir)  # a DIR that holds no study gets no lock file either
    fd = open_lock_file(study_dir / DRIVER_LOCK, "the study's lock")
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise KitError(
                f"{study_dir}: another kit study run drives this study",
                fix="wait for it, or stop it (Ctrl-C) and run again",
            ) from None
        yield
    finally:
        os.close(fd)


def check_header_fits_site(path: Path, site: Site, header: dict[str, Any]) -> None:
    """The ledger header's walltime and pilot as kit study plan chose them for this site: a header
    edited since (or a site file changed under it) would render a job with `--time=None`, or ask a
    machine without Slurm for a pilot."""
    walltime, pilot = header.get("walltime"), header.get("pilot")
    if site.scheduler.type != "slurm":
        wrong = next((k for k in ("walltime", "pilot", "pair") if header.get(k) is not None), None)
        if wrong:
            raise KitError(
                f"key {wrong} is {shown(header[wrong])}, "
                f"but site {site.name} runs evaluations on this machine (scheduler.type local)",
                fix=ledger.FIX,
                where=f"{path}:1",
            )
        return
    if walltime is None or seconds(walltime) > seconds(site.scheduler.max_walltime):
        raise KitError(
            f"key walltime is {shown(walltime)}, "
            f"but site {site.name} needs a walltime of at most {site.scheduler.max_walltime}",
            fix=ledger.FIX,
            where=f"{path}:1",
        )
    if pilot is not None and pilot > site.scheduler.max_nodes:
        raise KitError(
            f"key pilot is {pilot}, "
            f"but site {site.name} allows 1..{site.scheduler.max_nodes} nodes",
            fix=ledger.FIX,
            where=f"{path}:1",
        )


def backend_for(study_dir: Path, site: Site, header: dict[str, Any], *, t: Terms):
    check_header_fits_site(study_dir / ledger.NAME, site, header)
    if site.scheduler.type != "slurm":
        return LocalBackend(study_dir, site, t.objective)
    python = header.get("python") or "python3"
    if header.get("pilot"):
        from kit.study.pilot import PilotBackend

        return PilotBackend(
            study_dir,
            site,
            t.objective,
            header["walltime"],
            int(header["pilot"]),
            int(header["parallel"]),
            python,
            header.get("pair"),
        )
    return SlurmBackend(
        study_dir, site, t.objective, header["walltime"], header.get("pair"), python
    )


def run_study(
    study_dir: Path,
    poll_seconds: float = 2.0,
    on_progress: Callable[[Progress], None] | None = None,
) -> Progress:
    """Drive the study to its budget; returns the final progress."""
    from kit.study.search import Observation, make_searcher

    with driving(study_dir):
        spec, t, site, led = open_study(study_dir)
        header = led.header
        parallel = int(header.get("parallel") or 1)
        backend = backend_for(study_dir, site, header, t=t)
        searcher = make_searcher(spec)
        ledger.append(study_dir, "started")
        first_start = (led.started or [time.time()])[0]
        led = ledger.read(study_dir)
        for ev in list(led.in_flight()) + [
            e for e in led.evaluations.values() if e.state == "cancelled"
        ]:
            _start(study_dir, backend, ev, spec, site)  # re-attach, or start what never started
        led = ledger.read(study_dir)
        while True:
            for ev in led.in_flight():
                try:
                    state = backend.poll(ev.eval_id)
                except (
                    EvaluationFailed
                ) as exc:  # its directory or exit file is not the kit's: it, not the study, fails
                    ledger.append(study_dir, "failed", eval=ev.eval_id, error=str(exc))
                    continue
                if state == RUNNING:
                    continue
                if state == LOST:
                    if len(ev.submissions) >= MAX_STARTS:
                        ledger.append(
                            study_dir,
                            "failed",
                            eval=ev.eval_id,
                            error=f"lost {MAX_STARTS} times (killed with its node or driver)",
                        )
                    else:
                        _start(study_dir, backend, ev, spec, site)
                    continue
                _record(study_dir, ev.eval_id, state)
            led = ledger.read(study_dir)
            in_flight = led.in_flight()
            left = (
                None if t.evaluations is None else t.evaluations - len(led.done()) - len(in_flight)
            )
            timed_out = t.wall_seconds is not None and time.time() - first_start >= t.wall_seconds
            q = (
                0
                if timed_out
                else min(parallel - len(in_flight), parallel if left is None else left)
            )
            proposed = []
            if q > 0:
                history = [Observation(e.config, e.objective) for e in led.done()]
                pending = [e.config for e in in_flight]
                configs = searcher.ask(history, pending, q)[:q]
                # mbo: what its surrogate expects of each, kept
                # for the report's predicted vs observed
                guesses = searcher.predict(history, configs) if hasattr(searcher, "predict") else []
                for i, config in enumerate(configs):
                    eid = led.next_id()
                    guess = (
                        {"mean": guesses[i][0], "sd": guesses[i][1]} if i < len(guesses) else None
                    )
                    ledger.append(study_dir, "proposed", eval=eid, config=config, prediction=guess)
                    led = ledger.read(study_dir)
                    _start(study_dir, backend, led.evaluations[eid], spec, site)
                    proposed.append(eid)
                led = ledger.read(study_dir)
            if on_progress:
                on_progress(progress(led, t))
            if not led.in_flight() and not proposed:
                if hasattr(backend, "finish"):
                    backend.finish()
                return progress(led, t)
            time.sleep(poll_seconds)


def _start(study_dir: Path, backend, ev: ledger.Evaluation, spec: Any, site: Site) -> None:
    """Start (or re-attach to) one evaluation; a setting the site refuses fails it, not the
    study.
    """
    try:
        run = eval_run(ev.eval_id, ev.config, spec, site=site)
        submission = backend.start(run)
    except StudyDirRefused:  # the study's own directory, not this evaluation: stop in one line
        raise
    except KitError as exc:  # a bad setting: one line, recorded; the study goes on
        ledger.append(study_dir, "failed", eval=ev.eval_id, error=str(exc))
        return
    ledger.append(study_dir, "submitted", eval=ev.eval_id, **submission)


def _record(study_dir: Path, eval_id: str, outcome: Outcome) -> None:
    if outcome.objective is not None:
        ledger.append(
            study_dir, "finished", eval=eval_id, objective=outcome.objective, result=outcome.result
        )
    else:
        ledger.append(
            study_dir, "failed", eval=eval_id, error=(outcome.error or "no objective")[-4000:]
        )


def cancel_study(study_dir: Path, dry_run: bool = False) -> list[str]:
    """Stop the study's evaluations in flight; the ledger marks them cancelled and the next
    `kit study run` starts them again. Refused while a driver runs (it would propose
    replacements)."""
    with driving(study_dir):
        spec, t, site, led = open_study(study_dir)
        in_flight = [e.eval_id for e in led.in_flight()]
        if dry_run or not in_flight:
            return in_flight
        stopped = backend_for(study_dir, site, led.header, t=t).cancel(in_flight)
        for eid in in_flight:
            ledger.append(study_dir, "cancelled", eval=eid, stopped=eid in stopped)
        return in_flight
