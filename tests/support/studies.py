"""Study files for the tests (the tiny preset) and what a study's ledger tells about its run."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from kit.study import ledger

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def study_yaml(
    directory: Path,
    files: list[Path],
    strategy: str,
    evaluations: int,
    parameters: dict,
    objective: str = "validation.g_loss",
    direction: str = "minimize",
    seed: int = 1,
    file: str = "study.yaml",
    **fixed,
) -> Path:
    """A study of the tiny preset: one epoch of two steps of 4 showers per evaluation."""
    doc = {
        "kit_study": 1,
        "parameters": parameters,
        "fixed": {
            "data": f"{files[0]},{files[1]}",
            "validation-data": str(files[2]),
            "preset": "tiny",
            "batch-size": 4,
            "epochs": 1,
            "steps-per-epoch": 2,
            "validation-steps": 1,
            "seed": 3,
            **fixed,
        },
        "objective": {"metric": objective, "direction": direction},
        "budget": {"evaluations": evaluations},
        "strategy": {"type": strategy},
        "seed": seed,
    }
    for name in parameters:
        doc["fixed"].pop(name, None)
    path = directory / file
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def in_flight_over_time(study_dir: Path) -> list[int]:
    """How many evaluations were in flight after each ledger line (submitted, not yet ended)."""
    now, out = set(), []
    for line in (study_dir / ledger.NAME).read_text().splitlines()[1:]:
        rec = json.loads(line)
        if rec["event"] == "submitted":
            now.add(rec["eval"])
        elif rec["event"] in ("finished", "failed", "cancelled"):
            now.discard(rec["eval"])
        out.append(len(now))
    return out
