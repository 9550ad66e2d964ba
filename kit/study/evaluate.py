"""One evaluation of a study: a config turned into an ordinary kit run, and its objective read back.

The evaluation's arguments are the study's (its fixed `gan3d train` arguments, then the config's:
kit.study.spec), without the layout (`ranks-per-node`, `threads`), which the runner passes itself.
Each evaluation has its own directory DIR/evals/eNNNN, which is, through Slurm, a
one-run `kit scale` sweep directory (plan.yaml, scripts/, logs/, results/, jobs.yaml): its
submission, one-job-per-run lock, resubmission rules and log tails are `kit scale`'s own code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.errors import KitError
from kit.excerpt import one_line
from kit.readfile import kind_name, read_json_object
from kit.scale.runs import MAX_EPOCHS
from kit.scale.runs import PHYSICS as RESULT_PHYSICS
from kit.schema import Field, Items, Section, check_value
from kit.site import Site
from kit.slurm.script import RunFiles
from kit.study.ledger import MAX_OBJECTIVE

PHYSICS = "physics_score"
THROUGHPUT = "showers_per_second"
VALIDATION_PREFIX = "validation."  # validation.g_loss: the last epoch's validation g_loss
# EVALDIR/synthetic: an evaluation's generated showers, kept to validate against
SYNTHETIC = "synthetic"


@dataclass(frozen=True)
class EvalRun:
    """What one evaluation runs: its layout and its `gan3d train` arguments."""

    eval_id: str
    ranks_per_node: int
    threads: int
    train_args: tuple[str, ...]
    validate: bool  # the objective is the physics score: `gan3d validate` runs after training

    def files(self, study_dir: Path) -> RunFiles:
        return RunFiles(eval_dir(study_dir, self.eval_id).absolute(), self.eval_id)


EVALS = "evals"
# What the kit makes inside an evaluation's directory (here, through kit scale's submission, or
# gan3d): a link at one of these names was not made by the kit and is never written through.
EVAL_ENTRIES = (
    "results",
    "logs",
    "scripts",
    "checkpoints",
    "validation",
    SYNTHETIC,
    "eval.json",
    "eval.log",
    "exit.json",
    ".running",
    "plan.yaml",
    "jobs.yaml",
)


def eval_dir(study_dir: Path, eval_id: str) -> Path:
    return study_dir / EVALS / eval_id


class EvaluationFailed(KitError):
    """The evaluation ran but gave no objective value: recorded as failed, the study goes on."""


class StudyDirRefused(KitError):
    """A directory of the study itself (evals/, queue/) is not the one the kit made: the study
    stops, in one line, until it is moved aside (every evaluation would fail on it)."""


class LinkedEvalDir(EvaluationFailed):
    """An evaluation's directory, or an entry the kit makes in it, is not what the kit made
    there.
    """


def checked_eval_dir(study_dir: Path, eval_id: str, create: bool = True) -> Path:
    """DIR/evals/eNNNN (absolute), made if ``create`` and missing, once DIR/evals, it and every
    entry the kit makes in it are found to be what the kit makes (directories and files, never
    links): one swapped for a link between two runs would send an evaluation's writes out of the
    study. LinkedEvalDir names it; the driver records the evaluation as failed and the study goes
    on."""
    d = eval_dir(study_dir, eval_id).absolute()
    for path in (d.parent, d):
        if create:
            # never follows a link (EEXIST)
            make_subdir(path, "kit study run" if path == d.parent else "")
            continue
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return d  # nothing there yet (not created): nothing to write through
        if not stat.S_ISDIR(mode):
            if path == d.parent:
                raise StudyDirRefused(
                    f"{path}: is {kind_name(mode)}, not the directory kit study makes there: "
                    "it never writes through what it did not make",
                    fix="move it aside, then kit study run again",
                )
            raise _refused(path, kind_name(mode), "the directory")
    for name in EVAL_ENTRIES:
        with contextlib.suppress(FileNotFoundError):
            mode = os.lstat(d / name).st_mode
            if stat.S_ISLNK(mode):
                raise _refused(d / name, "a symlink", "what kit study makes there")
    return d


def _refused(path: Path, kind: str, what: str) -> LinkedEvalDir:
    return LinkedEvalDir(
        f"is {kind}, not {what}: kit study never writes through what it did not make",
        where=str(path),
        fix="move it aside (this evaluation is counted as failed; the study goes on)",
    )


def make_subdir(path: Path, then: str = "") -> Path:
    """A directory the kit makes (in a checked evaluation directory, or a study's own: queue/); a
    link found there is refused. ``then``: the command to run again once it is moved aside (an entry
    of the study, not of one evaluation)."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path)
    mode = os.lstat(path).st_mode
    if not stat.S_ISDIR(mode):
        if then:
            raise StudyDirRefused(
                f"{path}: is {kind_name(mode)}, not the directory kit study makes there: "
                "it never writes through what it did not make",
                fix=f"move it aside, then {then} again",
            )
        raise _refused(path, kind_name(mode), "the directory kit study makes there")
    return path


CHECKPOINTS = "checkpoints"
MAX_ATTEMPTS = 1000


def checkpoints_aside(run_dir: Path) -> Path | None:
    """An earlier, lost attempt's checkpoints moved to ``checkpoints.before-attempt-N`` before the
    evaluation starts again: `gan3d train` refuses a fresh run into another run's checkpoints, and
    the kit never deletes them. Returns where they went (None: there were none)."""
    ckpt = run_dir / CHECKPOINTS
    if not os.path.lexists(ckpt):
        return None
    for n in range(1, MAX_ATTEMPTS + 1):
        aside = run_dir / f"{CHECKPOINTS}.before-attempt-{n}"
        if not os.path.lexists(aside):
            os.rename(ckpt, aside)  # a link is moved, never followed
            return aside
    raise EvaluationFailed(
        f"{run_dir}: {MAX_ATTEMPTS} earlier attempts' checkpoints are kept there",
        fix="remove the checkpoints.before-attempt-* directories you do not need",
    )


def eval_run(eval_id: str, config: dict[str, Any], spec: Any, *, site: Site) -> EvalRun:
    """The run of ``config``: the study's `gan3d train` arguments
    (kit.study.spec.StudySpec.train_args, the layout left out) and its layout, which defaults to one
    rank using every core."""
    ranks, threads = spec.layout(config)
    ranks = int(ranks or 1)
    threads = int(threads or max(1, site.node.cores // ranks))
    return EvalRun(
        eval_id=eval_id,
        ranks_per_node=ranks,
        threads=threads,
        train_args=tuple(spec.train_args(config)),
        validate=spec.objective.metric == PHYSICS,
    )


def layout_args(run: EvalRun, site: Site) -> list[str]:
    """gan3d train's layout words for a run on this machine or in a pilot: its threads per rank,
    its ranks (gan3d train refuses a world of another size), and --oversubscribe where ranks x
    threads exceed a node's cores (a batch script decides the same from kit.slurm.spec.check_run)."""
    return [
        "--threads",
        str(run.threads),
        "--ranks",
        str(run.ranks_per_node),  # one node: the step's ranks, refused if a rank is left alone
        *(["--oversubscribe"] if run.ranks_per_node * run.threads > site.node.cores else []),
    ]


def local_commands(
    run: EvalRun, study_dir: Path, site: Site, *, launcher: list[str], python: str = sys.executable
) -> list[list[str]]:
    """Training under the site's MPI launcher on this machine, then validation if the objective
    needs it.
    """
    files = run.files(study_dir)
    train = [
        *launcher,
        "-n",
        str(run.ranks_per_node),
        python,
        "-m",
        "gan3d",
        "train",
        "--site",
        str(site.path),
        *layout_args(run, site),
        "--results",
        str(files.result),
        *run.train_args,
    ]
    return with_validation(run, files, python=python, train=train)


def with_validation(
    run: EvalRun, files: RunFiles, *, python: str, train: list[str]
) -> list[list[str]]:
    """``train``, and for the physics score `gan3d validate` of its last checkpoint after it (one
    process: validation is not distributed), adding its score to the evaluation's results."""
    if not run.validate:
        return [train]
    checkpoints = files.run_dir / CHECKPOINTS
    train = [*train, "--checkpoint-dir", str(checkpoints)]
    data = validation_data(run.train_args)
    if data is None:  # generated showers: kept in the evaluation's directory to validate against
        synthetic = files.run_dir / SYNTHETIC
        train += ["--synthetic-dir", str(synthetic)]
        data = str(synthetic)
    return [
        train,
        [
            python,
            "-m",
            "gan3d",
            "validate",
            "--checkpoint",
            str(checkpoints),
            "--data",
            data,
            "--out",
            str(files.run_dir / "validation"),
            "--results",
            str(files.result),
        ],
    ]


def validation_data(train_args: tuple[str, ...]) -> str | None:
    """The showers the physics score compares with: --validation-data, else --data (None:
    --synthetic).
    """
    for flag in ("--validation-data", "--data"):
        for i, arg in enumerate(train_args):
            if arg == flag and i + 1 < len(train_args):
                return train_args[i + 1]
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
    return None


def _objective_section(objective: str) -> Section:
    """The keys of a results file an objective is read from, each bounded as an objective is."""
    number = Field("float", minimum=-MAX_OBJECTIVE, maximum=MAX_OBJECTIVE)
    if objective == PHYSICS:
        score = dataclasses.replace(number, nullable=True, required=False)
        physics = dataclasses.replace(
            RESULT_PHYSICS, fields={**RESULT_PHYSICS.fields, "score": score}
        )
        where = {"physics": Field(physics)}
    elif objective.startswith(VALIDATION_PREFIX):
        name = objective[len(VALIDATION_PREFIX) :]
        loss = Section({name: dataclasses.replace(number, required=False)}, open=True)
        epoch = Section({"validation": Field(loss, nullable=True, required=False)}, open=True)
        where = {"losses": Field(Items(Field(epoch), min_len=1, max_len=MAX_EPOCHS))}
    else:
        where = {objective: number}
    return Section({**_STATUS, **where}, open=True)


_STATUS = {
    "status": Field("str", required=False, choices=("ok", "failed")),
    "error": Field("any", nullable=True, required=False),
}


def read_objective(results: Path, objective: str) -> float:
    """The objective's value in a run's results JSON (after validation for the physics score)."""
    fix = "the evaluation is recorded as failed"
    try:
        record = read_json_object(results, "gan3d results file", fix)
    except FileNotFoundError:
        raise EvaluationFailed("no results file", where=str(results)) from None
    except KitError as exc:
        raise EvaluationFailed(exc.what, fix=exc.fix, where=exc.where) from None
    if record.get("status") == "failed":
        raise EvaluationFailed(
            f"the run failed: {one_line(record.get('error'), 300)}",
            where=str(results),
        )
    section = _objective_section(objective)
    read = check_value(
        record, results, section, what="gan3d results file", fix=fix, error=EvaluationFailed
    )
    if objective == PHYSICS:
        physics = read["physics"]
        if physics["score"] is None:
            reason = one_line(physics["score_null_reason"] or "gan3d validate gave none", 200)
            raise EvaluationFailed(
                f"no physics score ({reason})",
                where=str(results),
            )
        return physics["score"]
    if objective.startswith(VALIDATION_PREFIX):
        name = objective[len(VALIDATION_PREFIX) :]
        value = (read["losses"][-1]["validation"] or {}).get(name)
        if value is None:
            raise EvaluationFailed(f"{results}: losses[-1].validation holds no {name}", fix=fix)
        return value
    return read[objective]
