"""One evaluation of a study: a config turned into an ordinary kit run, and its objective read back.

The evaluation's arguments are the study's (its fixed `gan3d train` arguments, then the config's:
kit.study.spec), without the layout (`ranks-per-node`, `threads`), which the runner passes itself. Each evaluation has its own directory DIR/evals/eNNNN, which is, through Slurm, a
one-run `kit scale` sweep directory (plan.yaml, scripts/, logs/, results/, jobs.yaml): its
submission, one-job-per-run lock, resubmission rules and log tails are `kit scale`'s own code.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.errors import KitError
from kit.excerpt import one_line, shown
from kit.readfile import read_json
from kit.site import Site
from kit.slurm.script import RunFiles

PHYSICS = "physics_score"
THROUGHPUT = "showers_per_second"
VALIDATION_PREFIX = "validation."  # validation.g_loss: the last epoch's validation g_loss
SYNTHETIC = "synthetic"  # EVALDIR/synthetic: an evaluation's generated showers, kept to validate against


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


def eval_dir(study_dir: Path, eval_id: str) -> Path:
    return study_dir / "evals" / eval_id


def eval_run(eval_id: str, config: dict[str, Any], spec: Any, site: Site) -> EvalRun:
    """The run of ``config``: the study's `gan3d train` arguments (kit.study.spec.StudySpec.train_args,
    the layout left out) and its layout, which defaults to one rank using every core."""
    ranks, threads = spec.layout(config)
    ranks = int(ranks or 1)
    threads = int(threads or max(1, site.node.cores // ranks))
    return EvalRun(eval_id, ranks, threads, tuple(spec.train_args(config)), spec.objective.metric == PHYSICS)


def layout_args(run: EvalRun, site: Site) -> list[str]:
    """gan3d train's layout words for a run on this machine or in a pilot: its threads per rank, and
    --oversubscribe where ranks x threads exceed a node's cores (a batch script decides the same from
    kit.slurm.spec.check_run)."""
    return ["--threads", str(run.threads), *(["--oversubscribe"] if run.ranks_per_node * run.threads >
                                              site.node.cores else [])]


def local_commands(run: EvalRun, study_dir: Path, site: Site, launcher: list[str],
                   python: str = sys.executable) -> list[list[str]]:
    """Training under the site's MPI launcher on this machine, then validation if the objective needs it."""
    files = run.files(study_dir)
    train = [*launcher, "-n", str(run.ranks_per_node), python, "-m", "gan3d", "train", "--site", str(site.path),
             *layout_args(run, site), "--results", str(files.result), *run.train_args]
    return with_validation(run, files, python, train)


def with_validation(run: EvalRun, files: RunFiles, python: str, train: list[str]) -> list[list[str]]:
    """``train``, and for the physics score `gan3d validate` of its last checkpoint after it (one
    process: validation is not distributed), adding its score to the evaluation's results."""
    if not run.validate:
        return [train]
    checkpoints = files.run_dir / "checkpoints"
    train = [*train, "--checkpoint-dir", str(checkpoints)]
    data = validation_data(run.train_args)
    if data is None:  # generated showers: kept in the evaluation's directory to validate against
        synthetic = files.run_dir / SYNTHETIC
        train += ["--synthetic-dir", str(synthetic)]
        data = str(synthetic)
    return [train, [python, "-m", "gan3d", "validate", "--checkpoint", str(checkpoints), "--data", data,
                    "--out", str(files.run_dir / "validation"), "--results", str(files.result)]]


def validation_data(train_args: tuple[str, ...]) -> str | None:
    """The showers the physics score compares with: --validation-data, else --data (None: --synthetic)."""
    for flag in ("--validation-data", "--data"):
        for i, arg in enumerate(train_args):
            if arg == flag and i + 1 < len(train_args):
                return train_args[i + 1]
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
    return None


class EvaluationFailed(KitError):
    """The evaluation ran but gave no objective value: recorded as failed, the study goes on."""


def read_objective(results: Path, objective: str) -> float:
    """The objective's value in a run's results JSON (after validation for the physics score)."""
    fix = "the evaluation is recorded as failed"
    try:
        record = read_json(results, "gan3d results file", fix)
    except FileNotFoundError:
        raise EvaluationFailed(f"{results}: no results file") from None
    except KitError as exc:
        raise EvaluationFailed(str(exc)) from None
    if not isinstance(record, dict):
        raise EvaluationFailed(f"{results}: not a gan3d results file")
    if record.get("status") != "ok":
        raise EvaluationFailed(f"{results}: the run failed: {one_line(record.get('error'), 300)}")
    if objective == PHYSICS:
        physics = record.get("physics")
        value = physics.get("score") if isinstance(physics, dict) else None
        if value is None and isinstance(physics, dict):
            raise EvaluationFailed(f"{results}: no physics score ({one_line(physics.get('score_reason'), 200)})")
    elif objective.startswith(VALIDATION_PREFIX):
        losses = record.get("losses")
        last = losses[-1].get("validation") if isinstance(losses, list) and losses and isinstance(losses[-1], dict) \
            else None
        value = last.get(objective[len(VALIDATION_PREFIX):]) if isinstance(last, dict) else None
    else:
        value = record.get(objective)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise EvaluationFailed(f"{results}: objective {objective} is {shown(value)}, not a finite number")
    return float(value)
