"""docs/example-report/paper/ is what bench/example_report.py makes with the current code: regenerated
here and compared (the markdown and CSV byte for byte, the PNGs pixel for pixel), so the example in
the docs cannot drift from the report's code. The laptop part is measured and is not compared."""

from __future__ import annotations

import importlib.util
import io
import json
from pathlib import Path

import numpy as np
from matplotlib.image import imread

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "docs" / "example-report" / "paper"


def _example_module():
    spec = importlib.util.spec_from_file_location(
        "example_report", REPO / "bench" / "example_report.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_paper_report_is_what_the_current_code_makes(tmp_path):
    written = _example_module().write_paper_report(tmp_path)
    fresh = tmp_path / "paper"
    names = {p.name for p in written}
    assert names == {p.name for p in COMMITTED.iterdir() if p.is_file()}, (
        "regenerate: bench/example_report.py"
    )
    for name in ("report.md", "report.csv"):
        assert (fresh / name).read_text() == (COMMITTED / name).read_text(), (
            f"{name} drifted; regenerate: .venv/bin/python bench/example_report.py"
        )
    for name in sorted(n for n in names if n.endswith(".png")):
        new, old = (imread(io.BytesIO((d / name).read_bytes())) for d in (fresh, COMMITTED))
        assert new.shape == old.shape and np.array_equal(new, old), f"{name} drifted"
    assert (
        str(tmp_path) not in (fresh / "report.csv").read_text()
    )  # paths relative: no checkout path


def test_the_paper_results_carry_the_papers_numbers(tmp_path):
    example = _example_module()
    from kit.scale.paper import TABLES

    paths = example.paper_results(tmp_path)
    records = [json.loads(p.read_text()) for p in paths]
    assert [r["nodes"] for r in records] == list(TABLES["table4"].nodes)
    for r, seconds, pflops in zip(
        records, TABLES["table4"].seconds_per_epoch, TABLES["table7"].pflop_per_second
    ):
        assert r["epoch_wall_times"] == [seconds, seconds] and r["flop_per_second"] == pflops * 1e15
        assert (
            r["showers_per_second"] == 180_000 / seconds
            and r["full_epoch_seconds_estimate"] is None
        )
