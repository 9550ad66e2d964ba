"""docs/reference/files.md: the files the kit writes and reads, and the documents --json prints.

FILES is kept here, one entry a file: who writes it, who reads it, and, where the kit declares
one, the schema object its reader checks, whose keys are rendered from the code. A file without
one is listed with its writer and readers only. The --json documents are walked from the parser
(each --json flag names its schema).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable, Union

from kit.reference import keys
from kit.reference.markdown import GENERATED, paragraph, table
from kit.schema import Field, Section

Schema = Union[Section, Field]


def _declared(module: str, name: str) -> Callable[[], Schema]:
    """The schema object ``name`` of ``module``, imported when the page is rendered."""
    return lambda: getattr(importlib.import_module(module), name)


def _study_file() -> Schema:
    from kit.study.spec import schema

    return schema({})  # parameter names are checked against gan3d train's options; keys alike


@dataclass(frozen=True)
class File:
    path: str
    writer: str
    readers: str
    schema: Callable[[], Schema] | None = None
    note: str = ""  # what the keys listed are (a reader may check only some), or why none are


FILES = (
    File(
        "`NAME.yaml` (a site config)",
        "you; `kit site probe --out FILE` drafts one",
        "every command given `--site`",
        note="its keys: `kit docs reference/site-config`",
    ),
    File(
        "`IMAGE.sha256`, `IMAGE.manifest.json`",
        "`kit image convert`",
        "`kit transfer push`, `kit transfer bundle`, `kit transfer verify`",
        note="`sha256sum` format; the manifest describes the source image and its layers",
    ),
    File(
        path="`IMAGE.pair.yaml`",
        writer="`kit mpi pair`, `kit image convert --site`",
        readers="`kit mpi check`, `kit slurm`, `kit scale`, `kit study --image`, `kit transfer push`",
        schema=_declared("kit.mpi.pair_reader", "PAIR_SCHEMA"),
        note="the keys a job's container launch reads; the other keys (both MPIs, the launch line) "
        "are for people and `kit mpi check`",
    ),
    File(
        "`DIR/plan.yaml`",
        "`kit scale plan`",
        "`kit scale submit`, `collect`, `cancel`, `report`, `predict`",
        _declared("kit.scale.plan", "PLAN_SCHEMA"),
    ),
    File(
        path="`DIR/tune.yaml`, `DIR/tune.png`",
        writer="`kit scale tune`",
        readers="`kit scale plan --layout best`",
        schema=_declared("kit.scale.tune", "TUNE_SCHEMA"),
        note="the keys `--layout best` reads; the layouts' figures are for people and the plot",
    ),
    File(
        "`DIR/scripts/RUN.sbatch`",
        "`kit slurm render`, `kit scale plan`",
        "`sbatch` (`kit slurm submit`, `kit scale submit`)",
        note="a batch script filled from the shipped template",
    ),
    File(
        path="`DIR/jobs.yaml`",
        writer="`kit slurm submit`, `kit scale submit`",
        readers="`kit scale collect`, `kit scale cancel`, `kit slurm submit` (a resubmit)",
        schema=_declared("kit.slurm.ledger", "LEDGER"),
        note="which Slurm jobs ran which run (`NAME` is the run id), newest last",
    ),
    File(
        "`DIR/logs/RUN-JOBID.out`",
        "the Slurm job",
        "`kit scale collect` (a failed run's last lines)",
    ),
    File(
        path="`DIR/results/RUN.json`",
        writer="`python -m gan3d train` (gan3d.results)",
        readers="`kit scale collect`, `report`, `predict`, `tune`; `kit study`",
        schema=_declared("kit.scale.runs", "RESULTS"),
        note="the figures the report reads; gan3d writes more (provenance, settings, per-epoch times)",
    ),
    File(
        "`OUT/report.md`, `OUT/report.csv`, `OUT/*.png`",
        "`kit scale report`",
        "people (`kit docs scale-report` says how to read them)",
    ),
    File(
        "`DIR/predict.json`, `DIR/predict.png`",
        "`kit scale predict`",
        "scripts (the same document as `kit scale predict --json`)",
        note="`kit docs predict`",
    ),
    File(
        path="`SPEC.yaml` (a study file), `DIR/study.yaml`",
        writer="you (an example ships as `tiny-mbo.yaml`); `kit study plan` copies it into DIR",
        readers="`kit study plan`, `kit study run`",
        schema=_study_file,
        note="`NAME` is an option of `python -m gan3d train`; `kit docs study`",
    ),
    File(
        path="`DIR/ledger.jsonl`",
        writer="`kit study plan` (line 1, the header), `kit study run` (a record a line)",
        readers="`kit study run`, `status`, `report`, `cancel`",
        schema=_declared("kit.study.ledger", "HEADER"),
        note="the header's keys; each later line is one event (`kit docs study-runner`)",
    ),
    File(
        "`DIR/evals/ID/eval.json`",
        "`kit study run` (its backends and pilot)",
        "`python -m kit.study.evalproc`",
        _declared("kit.study.evalproc", "PLAN_SCHEMA"),
    ),
    File(
        "`DIR/evals/ID/exit.json`",
        "`python -m kit.study.evalproc`",
        "`kit study run`, `kit study status`",
        _declared("kit.study.evalproc", "EXIT_SCHEMA"),
    ),
    File(
        "`CHECKPOINTS/epoch-NNNN/meta.json`",
        "`python -m gan3d train`",
        "`python -m gan3d train --resume`",
        note="checked by gan3d.checkpoint, which the kit does not import (gan3d's TensorFlow side)",
    ),
    File(
        "`BUNDLE/MANIFEST`, `MANIFEST.json`, `SHA256SUMS`, `verify.sh`, `verify.py`",
        "`kit transfer bundle`",
        "`kit transfer verify`, `sh verify.sh`, `sha256sum -c SHA256SUMS`",
        note="one line `<sha256> <size> <name>` per file",
    ),
    File(
        "`$KIT_CRASH_DIR/kit-crash-*.txt`",
        "any command that hits an internal error",
        "you, for a bug report",
    ),
)


def render() -> str:
    parts = [
        "# Files and --json documents\n",
        paragraph(GENERATED),
        paragraph(
            "The files the kit writes and reads. Where the kit declares the schema a reader checks, "
            "its keys follow (a mapping marked open lets other keys pass). "
            "`DIR` is the directory a command makes or reads (`--dir DIR` or the positional `DIR`)."
        ),
        "## Files",
        table(
            ["file", "written by", "read by", "notes"],
            [[f.path, f.writer, f.readers, f.note] for f in FILES],
            (34, 40, 50, 60),
        ),
    ]
    for f in FILES:
        if f.schema is not None:
            parts += [f"### {f.path}", table(keys.HEADERS, keys.rows_of(f.schema()), keys.WIDTHS)]
    parts += [
        "## --json documents",
        paragraph(
            "A command given `--json` prints one JSON document on stdout, "
            "its `schema` key naming the format below; an error is one JSON object on stderr (`{\"error\": "
            '{"what", "where", "fix", "message", "exit"}}`) with the exit status.'
        ),
        table(["command", "schema"], json_documents(), (60, 40)),
    ]
    return "\n\n".join(p.rstrip("\n") for p in parts) + "\n"


def json_documents() -> list[list[str]]:
    """(command, schema name) of every command with --json, from the parser."""
    from kit.cli import build_parser, leaves

    rows = []
    for leaf in leaves(build_parser()):
        for action in leaf._actions:
            schema = getattr(action, "schema", None)
            if "--json" in action.option_strings and isinstance(schema, str):
                rows.append([f"`{leaf.prog} --json`", f"`{schema}`"])
    return rows
