"""A stand-in for gan3d train in a local study: each evaluation's one command writes a results JSON the
test chose, so the real driver, ledger, evaluation processes (kit.study.evalproc), locks and logs run
as in a study, in a fraction of a second each and without TensorFlow."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Callable

import yaml

from kit.study import backends

WRITE = "import sys; open(sys.argv[1], 'w').write(sys.argv[2])"


def results_text(objective: object = 2.5) -> str:
    """An ok results file whose showers_per_second is ``objective`` (any JSON text for it)."""
    text = objective if isinstance(objective, str) else json.dumps(objective)
    return '{"status": "ok", "showers_per_second": ' + text + "}"


def fake_training(
    monkeypatch, results: Callable[[str], str] = lambda eval_id: results_text()
) -> None:
    """Every evaluation started from now on writes ``results(eval_id)`` as its results file."""

    def commands(run, study_dir, site, *, launcher, python=sys.executable):
        return [
            [sys.executable, "-c", WRITE, str(run.files(study_dir).result), results(run.eval_id)]
        ]

    monkeypatch.setattr(backends, "local_commands", commands)


def spec_file(directory: Path, evaluations: int = 2, name: str = "s.yaml", **top) -> Path:
    """A random study of one float parameter on generated showers, maximising showers/s."""
    doc = {
        "kit_study": 1,
        "parameters": {"lr": {"type": "float", "low": 0.0001, "high": 0.01}},
        "fixed": {"synthetic": 64, "preset": "tiny", "batch-size": 4, "epochs": 1},
        "objective": {"metric": "showers_per_second"},
        "budget": {"evaluations": evaluations},
        "strategy": "random",
        **top,
    }
    path = directory / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
