"""A sweep over nodes x ranks per node x threads per rank, written once as DIR/plan.yaml."""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import yaml

from kit.atomic import atomic_write_text
from kit.errors import KitError
from kit.excerpt import shown
from kit.mpi.pair_reader import PairFile, pair_file_for, read_pair_file
from kit.scale.local import command
from kit.schema import Bad, Field, Items, check_doc, record, section_of
from kit.site import Site, load_site
from kit.site.model import FILE_FIX as SITE_FILE_FIX
from kit.slurm.script import RunFiles, render, validation_data
from kit.slurm.spec import (
    RUN_ID_RE,
    RunSpec,
    check_run,
    default_threads,
    matching,
    one_machine,
    run_id,
    seconds,
)
from kit.yamlbound import load_tagged

PLAN_FORMAT = 1
PLAN_NAME = "plan.yaml"
PER_RUN_FLAGS = ("--checkpoint-dir", "--synthetic-dir")  # a directory one run writes


@dataclass(frozen=True)
class Plan:
    """Everything a sweep's jobs share, and the runs that vary."""

    site: str  # the site config file, absolute
    walltime: str
    runs: list[RunSpec]
    pair: str | None = None  # IMAGE.pair.yaml; None runs the host's Python without a container
    python: str = "python3"
    train_args: tuple[str, ...] = ()
    refused: list[dict] = field(default_factory=list)
    validate: bool = False  # each job runs gan3d validate on its final checkpoint after training

    def load_site(self) -> Site:
        return load_site(self.site)

    def pair_file(self, site: Site) -> PairFile | None:
        return read_pair_file(self.pair, site) if self.pair else None


def _run_id(value: str) -> Bad | None:
    """A run id names the run's files: never a path out of DIR."""
    if RUN_ID_RE.fullmatch(value):
        return None
    return Bad(f"{shown(value)} is not a run id (letters, digits, '.', '_', '-', at most 64)")


# A run as plan.yaml holds it: what every run shares is written once at the top.
RUN_SECTION = section_of(
    RunSpec,
    skip=("walltime", "train_args", "validate"),
    fields={
        "run_id": Field("str", check=_run_id),
        **{k: Field("int", positive=True) for k in ("nodes", "ranks_per_node", "threads_per_rank")},
    },
)
PLAN_SCHEMA = section_of(
    Plan,
    fields={
        "kit_plan": Field("int", choices=(PLAN_FORMAT,)),
        "train_args": Field(Items(Field("str"))),
        "python": Field("str"),
        "runs": Field(Items(Field(RUN_SECTION), min_len=1)),
        "refused": Field(Items(Field("any")), nullable=True, required=False, default=[]),
    },
)


def make_plan(
    site: Site | str,
    nodes: list[int],
    ranks_per_node: list[int],
    *,
    threads: list[int] | None,
    walltime: str,
    image: str | None = None,
    python: str = "python3",
    train_args: tuple[str, ...] = (),
    partition: str | None = None,
    account: str | None = None,
    repeats: int = 1,
    validate: bool = False,
) -> Plan:
    """The cartesian sweep; combinations the site cannot run are kept aside with the reason.
    ``threads`` None gives each layout one thread per physical core. ``repeats`` > 1 plans each
    run that many times (the report shows their median and spread). ``validate``: each job also
    scores its final checkpoint's physics (gan3d validate against the run's --validation-data,
    else its --data)."""
    if not 1 <= repeats <= 100:
        raise KitError(
            f"--repeats {repeats}: out of range", fix="give 1..100 runs of each combination"
        )
    if validate and validation_data(tuple(train_args)) is None:
        raise KitError(
            "--validate: the training arguments name no --data, --validation-data or --synthetic-dir, "
            "so gan3d validate would have no showers to compare the generator with",
            fix="give --data FILES after --",
        )
    site = load_site(site)
    if site.path is None:
        raise KitError(f"site {site.name}: a plan needs a site config file", fix=SITE_FILE_FIX)
    if site.scheduler.type == "local":
        _here(site, nodes, image, validate)
    pair = str(pair_file_for(image).absolute()) if image else None
    if pair:
        read_pair_file(pair, site)  # refuse a wrong pair now, not at submission
    runs: list[RunSpec] = []
    refused: list[dict[str, object]] = []
    for n, r in itertools.product(sorted(set(nodes)), sorted(set(ranks_per_node))):
        for t in sorted(set(threads)) if threads else [default_threads(site, r)]:
            spec = RunSpec(
                run_id=run_id(n, r, t),
                nodes=n,
                ranks_per_node=r,
                threads_per_rank=t,
                walltime=walltime,
                train_args=tuple(train_args),
                partition=partition,
                account=account,
                validate=validate,
            )
            try:
                check_run(site, spec, here=True)
            except KitError as exc:
                refused.append(
                    {"nodes": n, "ranks_per_node": r, "threads_per_rank": t, "reason": str(exc)}
                )
                continue
            runs += (
                [spec]
                if repeats == 1
                else [
                    replace(spec, run_id=run_id(n, r, t, repeat=i)) for i in range(1, repeats + 1)
                ]
            )
    if not runs:
        reasons = "; ".join(sorted({str(r["reason"]) for r in refused}))
        raise KitError(
            f"no run of the sweep fits site {site.name}: {reasons}",
            fix="ask for node counts and a layout the site allows (kit site show)",
        )
    shared = matching(tuple(train_args), PER_RUN_FLAGS)
    if shared and len(runs) > 1:
        raise KitError(
            f"training arguments {' '.join(shared)}: "
            "every run of the sweep would write the same directory at once",
            fix="leave them out of the sweep (or plan one run per directory)",
        )
    return Plan(
        site=str(Path(site.path).resolve()),
        walltime=walltime,
        runs=runs,
        pair=pair,
        python=python,
        train_args=tuple(train_args),
        refused=refused,
        validate=validate,
    )


def _here(site: Site, nodes: list[int], image: str | None, validate: bool) -> None:
    """What a sweep on a site without a batch system cannot do: its runs train one after another
    on this machine, with this machine's Python, and nothing else."""
    one_machine(site, nodes)
    why = (
        f"site {site.name} has no scheduler (scheduler.type local): its runs train on this machine"
    )
    if image:
        raise KitError(f"--image: {why}, with its own Python", fix="--no-container")
    if validate:
        raise KitError(
            f"--validate: {why}, without the physics step of a batch job",
            fix="drop --validate; score a run with python -m gan3d validate",
        )


# n0, 2n0, 8n0: three counts, far enough apart to tell predict's shapes apart
CALIBRATION_FACTORS = (
    1,
    2,
    8,
)
CALIBRATION_REPEATS = 3
# optimizer steps per epoch of a calibration run (the report scales to a full epoch)
CALIBRATION_STEPS = 20


def calibration_nodes(n0: int, max_nodes: int) -> list[int]:
    """The node counts kit scale predict needs: n0, 2n0 and 8n0 (4n0 where the site holds fewer)."""
    if 2 * n0 > max_nodes:
        raise KitError(
            f"--calibrate --nodes {n0}: a calibration needs {n0} and {2 * n0} nodes, "
            f"the site allows 1..{max_nodes} (scheduler.max_nodes)",
            fix="a smaller --nodes",
        )
    top = next((n0 * f for f in (8, 4) if n0 * f <= max_nodes), None)
    return [n0, 2 * n0] + ([top] if top else [])


def calibration_train_args(train_args: tuple[str, ...]) -> tuple[tuple[str, ...], list[str]]:
    """Short epochs for a calibration: --steps-per-epoch 20 and --epochs 2 unless given (the first
    epoch traces the step; the report times the later ones). Returns the arguments and what was
    added."""
    args, added = list(train_args), []
    words = {a.split("=")[0] for a in args}
    if "--epochs" in words:
        i = next(i for i, a in enumerate(args) if a.split("=")[0] == "--epochs")
        value = (
            args[i].split("=", 1)[1]
            if "=" in args[i]
            else (args[i + 1] if i + 1 < len(args) else "")
        )
        if value == "1":
            raise KitError(
                "--calibrate with --epochs 1: that epoch traces the step and is no measure of an epoch",
                fix="--epochs 2 or more",
            )
    else:
        args += ["--epochs", "2"]
        added.append("--epochs 2")
    if "--steps-per-epoch" not in words:
        args += ["--steps-per-epoch", str(CALIBRATION_STEPS)]
        added.append(f"--steps-per-epoch {CALIBRATION_STEPS}")
    return tuple(args), added


def node_hours_bound(plan: Plan) -> float:
    """What the plan's jobs can cost at most: every run's nodes for its whole walltime."""
    return sum(r.nodes for r in plan.runs) * seconds(plan.walltime) / 3600


def write_plan(plan: Plan, sweep_dir: Path) -> Path:
    """DIR/plan.yaml; an existing plan with other runs is not overwritten (its jobs may be
    queued).
    """
    path = sweep_dir / PLAN_NAME
    if path.exists() and load_plan(sweep_dir) != plan:
        raise KitError(
            f"{path} exists with another plan",
            fix="use a new directory, or remove it if none of its jobs matter",
        )
    site = plan.load_site()  # the first run rendered now: a run dir the jobs cannot use fails here
    first, files = (
        check_run(site, plan.runs[0], here=True),
        RunFiles(sweep_dir.absolute(), plan.runs[0].run_id),
    )
    if site.scheduler.type == "local":
        command(site, first, files, python=plan.python)  # the launcher is there
    else:
        render(site, first, files, pair=plan.pair_file(site), python=plan.python)
    doc = {
        "kit_plan": PLAN_FORMAT,
        "site": plan.site,
        "pair": plan.pair,
        "python": plan.python,
        "walltime": plan.walltime,
        "train_args": list(plan.train_args),
        "validate": plan.validate,
        "runs": [
            {k: v for k, v in asdict(r).items() if k not in ("walltime", "train_args", "validate")}
            for r in plan.runs
        ],
        "refused": plan.refused,
    }
    sweep_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, yaml.safe_dump(doc, sort_keys=False, width=110))
    return path


def load_plan(sweep_dir: Path) -> Plan:
    """DIR/plan.yaml as kit scale plan wrote it; anything else is one line naming the line and
    key.
    """
    path = sweep_dir / PLAN_NAME
    fix = (
        "restore the plan.yaml kit scale plan wrote, "
        f"or plan again with kit scale plan --dir {sweep_dir}"
    )
    doc = load_tagged(
        path,
        "sweep plan",
        "kit_plan",
        version=PLAN_FORMAT,
        fix=fix,
        missing="no plan here",
        missing_fix=f"kit scale plan --dir {sweep_dir} ...",
        wrote="a plan kit scale plan wrote",
    )
    data = check_doc(doc, PLAN_SCHEMA, "sweep plan", fix=fix)
    shared = {k: data[k] for k in ("walltime", "train_args", "validate")}
    runs = [record(RunSpec, run, **shared) for run in data["runs"]]
    return record(Plan, data, runs=runs, refused=list(data["refused"] or []))
