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
    write_plan(
        make_plan("supermuc-ng", [4], [4], threads=None, walltime="02:00:00"),
        tmp_path / "sng-sweep",
    )
    return tmp_path / "sng-sweep"


def test_a_failed_run_is_named_the_named_results_reported_into_the_sweeps_report_dir(
    sweep, tmp_path
):
    (sweep / "results").mkdir()
    (sweep / "results" / f"{RUN}.json").write_text(
        '{"schema": "gan3d-run/1", "status": "failed", "error": "losses became NaN"}'
    )
    named = tmp_path / "other.json"
    write_run(named, 4, 100.0)
    failed: list[str] = []
    written = report_sweep(sweep, [named], failed=failed)
    assert len(failed) == 1 and "NaN" in failed[0]
    assert {p.parent for p in written} >= {
        sweep / "report"
    } and sweep / "report" / "report.md" in written
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
    written = report_sweep(None, [named], out=out)
    assert out / "report.md" in written and "scaling sweep" not in (out / "report.md").read_text()


@pytest.mark.parametrize("theirs", ["report.md", "report.csv", "flops.png", "report.md as a link"])
def test_a_report_never_replaces_files_it_did_not_write(tmp_path, capsys, theirs):
    """--out is often a shared directory: a report.md, table or plot of the user's at the report's
    names stays, and the report says so in one line."""
    from kit.cli import main

    result, out, elsewhere = tmp_path / "r.json", tmp_path / "notes", tmp_path / "elsewhere.md"
    write_run(result, 4, 100.0)
    out.mkdir()
    elsewhere.write_text("mine\n")
    if theirs == "report.md as a link":
        (out / "report.md").symlink_to(elsewhere)
    else:
        (out / theirs).write_text("mine\n")
    before = {p.name: (p.is_symlink(), p.read_bytes()) for p in out.iterdir()}
    assert main(["scale", "report", "--results", str(result), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    name = "report.md" if theirs.startswith("report.md") else theirs
    assert err == (
        f"kit: error: {out / name}: already there, and {out} holds no report kit scale report wrote, "
        "so it is not replaced; fix: give --out a new or empty directory\n"
    )
    assert {p.name: (p.is_symlink(), p.read_bytes()) for p in out.iterdir()} == before
    assert elsewhere.read_text() == "mine\n"


def test_a_report_replaces_its_own_report(tmp_path, capsys):
    from kit.cli import main

    result, out = tmp_path / "r.json", tmp_path / "report"
    write_run(result, 4, 100.0)
    assert main(["scale", "report", "--results", str(result), "--out", str(out)]) == 0
    first = (out / "report.csv").read_text()
    write_run(result, 4, 50.0)
    assert main(["scale", "report", "--results", str(result), "--out", str(out)]) == 0
    assert (out / "report.csv").read_text() != first


@pytest.mark.parametrize("planted", ["link", "file"])
def test_a_link_or_file_at_the_sweeps_report_dir_is_refused_and_nothing_written_through_it(
    sweep, tmp_path, capsys, planted
):
    """SWEEP/report is the kit's: a link swapped in there (to an empty directory) is not written through;
    one line naming it and the fix, exit 1."""
    from kit.cli import main

    (sweep / "results").mkdir()
    write_run(sweep / "results" / f"{RUN}.json", 4, 100.0)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if planted == "link":
        (sweep / "report").symlink_to(elsewhere)
    else:
        (sweep / "report").write_text("mine\n")
    assert main(["scale", "report", str(sweep)]) == 1
    err = capsys.readouterr().err
    kind = "a symlink" if planted == "link" else "a regular file"
    assert (
        err.count("\n") == 1 and f"{sweep / 'report'}: is {kind}, not the report directory" in err
    )
    assert list(elsewhere.iterdir()) == [] and (
        planted == "link" or (sweep / "report").read_text() == "mine\n"
    )
