"""A study directory: DIR/study.yaml (the spec, as given), DIR/ledger.jsonl, DIR/evals/eNNNN/.

`kit study plan` checks the spec and the site and writes the first two; it never writes into a
directory that holds anything else (the kit does not overwrite what it did not make).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit import interrupt
from kit.atomic import atomic_open
from kit.errors import KitError
from kit.mpi.pair_reader import pair_file_for, read_pair_file
from kit.readfile import read_bytes
from kit.site import Site, load_site
from kit.site.model import FILE_FIX as SITE_FILE_FIX
from kit.slurm.spec import RunSpec, check_run
from kit.study import ledger
from kit.study.evaluate import eval_run

SPEC_NAME = "study.yaml"
MAX_SPEC_BYTES = 1 * 2**20
OURS = {SPEC_NAME, ledger.NAME}


@dataclass(frozen=True)
class Terms:
    """What the runner and the report need of a study spec (kit.study.spec.StudySpec)."""

    objective: str  # physics_score, showers_per_second, validation.<loss>
    direction: str  # minimize | maximize
    evaluations: int | None
    wall_seconds: float | None
    strategy: str


def terms(spec: Any) -> Terms:
    return Terms(
        objective=spec.objective.metric,
        direction=spec.objective.direction,
        evaluations=spec.budget.evaluations,
        wall_seconds=spec.budget.wall_time_s,
        strategy=spec.strategy.kind,
    )


def load_spec(path: Path, data_files: bool = False, train_rules: bool = True):
    from kit.study.spec import load_study

    return load_study(path, data_files, train_rules)


def plan_study(
    spec_path: Path,
    site_name: str,
    study_dir: Path,
    *,
    parallel: int = 2,
    pilot: int | None = None,
    walltime: str | None = None,
    image: str | None = None,
    python: str | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Check everything a run needs now, not after a queue wait; write DIR unless ``dry_run``.
    Returns the ledger header."""
    spec = load_spec(spec_path, data_files=True)  # its data files' headers read once, here
    t = terms(spec)
    site = load_site(site_name)
    if site.path is None:
        raise KitError(
            f"site {site.name}: a study needs a site config file (its runs read it)",
            fix=SITE_FILE_FIX,
        )
    if not 1 <= parallel <= 1000:
        raise KitError(
            f"--parallel {parallel}: out of range", fix="give 1..1000 evaluations in flight"
        )
    slurm = site.scheduler.type == "slurm"
    if pilot is not None and not slurm:
        raise KitError(
            f"--pilot {pilot}: site {site.name} has no Slurm (scheduler.type local): "
            "a pilot job needs one",
            fix="drop --pilot",
        )
    if pilot is not None and not 1 <= pilot <= site.scheduler.max_nodes:
        raise KitError(
            f"--pilot {pilot}: site {site.name} allows 1..{site.scheduler.max_nodes} nodes",
            fix=f"give --pilot 1..{site.scheduler.max_nodes}",
        )
    if not slurm and (image or walltime):
        raise KitError(
            f"site {site.name} runs evaluations on this machine without a container",
            fix="drop --image/--walltime",
        )
    walltime = walltime or (site.scheduler.max_walltime if slurm else None)
    pair = str(pair_file_for(image).absolute()) if image else None
    paired = read_pair_file(pair, site) if pair else None
    if slurm:  # a first config through the site's checks: a wrong fixed argument fails now
        from kit.study.search import make_searcher

        [first] = make_searcher(spec).ask([], [], 1) or [{}]
        run = eval_run("e0001", first, spec, site=site)
        check_run(
            site,
            RunSpec(
                run_id="e0001",
                nodes=1,
                ranks_per_node=run.ranks_per_node,
                threads_per_rank=run.threads,
                walltime=walltime or site.scheduler.max_walltime,
                train_args=run.train_args,
            ),
        )
        # its paths as the container sees them: bound, or refused
        if pilot is not None and paired is not None:
            from kit.study.pilot import inside_commands

            inside_commands(
                run, study_dir.absolute(), site, python=python or "python3", pair=paired
            )
    header = {
        "site": str(Path(site.path).resolve()),
        "site_name": site.name,
        "parallel": parallel,
        "pilot": pilot,
        "walltime": walltime,
        "pair": pair,
        "python": python,
        "objective": t.objective,
        "direction": t.direction,
        "strategy": t.strategy,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if dry_run:
        return header
    spec_bytes = read_bytes(spec_path, "study spec", MAX_SPEC_BYTES)
    _check_empty(study_dir)
    study_dir.mkdir(parents=True, exist_ok=True)
    # The spec and the ledger go in together: a DIR holding the spec alone is refused by the next
    # plan (the kit cannot tell it from the user's file), so Ctrl-C and SIGTERM wait for both.
    spec = study_dir / SPEC_NAME
    with interrupt.held():
        with atomic_open(spec, "wb", replace=False) as fh:
            fh.write(spec_bytes)
        try:
            ledger.create(study_dir, header)
        except BaseException:
            spec.unlink()  # just made by this call (the rename refuses to replace one)
            raise
    return header


def _check_empty(study_dir: Path) -> None:
    if study_dir.is_symlink() or (study_dir.exists() and not study_dir.is_dir()):
        raise KitError(f"{study_dir}: not a directory", fix="give kit study plan a new directory")
    if not study_dir.exists():
        return
    if (study_dir / ledger.NAME).exists():
        raise KitError(
            f"{study_dir / ledger.NAME} exists: a study is planned there already",
            fix=f"kit study run {study_dir} to continue it, or plan into a new directory",
        )
    others = sorted(p.name for p in study_dir.iterdir())
    if others:
        raise KitError(
            f"{study_dir}: holds {', '.join(others[:3])}{' ...' if len(others) > 3 else ''}, "
            "which kit study did not make",
            fix="plan into a new or empty directory",
        )


def open_study(study_dir: Path) -> tuple[Any, Terms, Site, ledger.Ledger]:
    """The spec copy, its terms, the site and the ledger of a planned study; every config in the
    ledger checked against the spec's space."""
    led = ledger.read(study_dir)
    # checked at plan; its ledger stays readable
    spec = load_spec(study_dir / SPEC_NAME, train_rules=False)
    site_path = led.header.get("site")
    if not isinstance(site_path, str):
        raise KitError("key site is missing", fix=ledger.FIX, where=f"{led.path}:1")
    # a config that is no point of the space never reaches a command line
    for ev in led.evaluations.values():
        try:
            spec.space.validate(ev.config)
        except KitError as exc:
            raise KitError(
                f"{ev.eval_id}'s config is not a point of the study's space in "
                f"{study_dir / SPEC_NAME} ({exc.what})",
                fix=f"restore {SPEC_NAME} and ledger.jsonl as kit "
                "study wrote them (an edited study belongs in a new study: kit study plan)",
                where=f"{led.path}:{ev.line}",
            ) from None
    return spec, terms(spec), load_site(site_path), led
