"""kit.scale.report.report_sweep: which results a report covers and where it goes, decided by the
library (kit scale report only prints what it returns). Real files, no Slurm needed: a report is
made from the results on disk."""
from __future__ import annotations

from pathlib import Path

import pytest

from kit.errors import KitError
from kit.scale.plan import make_plan, write_plan
from kit.scale.report import report_sweep
from tests.scale.builders import write_run

RUN = "n4-r4-t12"


@pytest.fixture
def sweep(tmp_path) -> Path:
    write_plan(make_plan("supermuc-ng", [4], [4], None, "02:00:00"), tmp_path / "sng-sweep")
    return tmp_path / "sng-sweep"


def test_a_failed_run_is_named_the_named_results_reported_into_the_sweeps_report_dir(sweep, tmp_path):
    (sweep / "results").mkdir()
    (sweep / "results" / f"{RUN}.json").write_text('{"schema": "gan3d-run/1", "status": "failed", '
                                                    '"error": "losses became NaN"}')
    named = tmp_path / "other.json"
    write_run(named, 4, 100.0)
    failed: list[str] = []
    written = report_sweep(sweep, [named], failed=failed)
    assert len(failed) == 1 and "NaN" in failed[0]
    assert {p.parent for p in written} >= {sweep / "report"} and sweep / "report" / "report.md" in written
    assert "scaling sweep sng-sweep" in (sweep / "report" / "report.md").read_text()


def test_nothing_to_report_is_one_error_and_writes_nothing(sweep, tmp_path):
    failed: list[str] = []
    with pytest.raises(KitError, match=r"no results to report: .*sng-sweep has none yet"):
        report_sweep(sweep, failed=failed)
    assert failed == [] and not (sweep / "report").exists()


def test_results_without_a_sweep_go_to_the_out_dir_untitled(tmp_path):
    named = tmp_path / "one.json"
    write_run(named, 1, 50.0)
    out = tmp_path / "out"
    written = report_sweep(None, [named], out)
    assert out / "report.md" in written and "scaling sweep" not in (out / "report.md").read_text()
