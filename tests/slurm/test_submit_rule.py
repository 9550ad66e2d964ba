"""kit.slurm.submit's one rule for a run that already has a result, for a single run and a sweep alike.
No job is recorded here, so Slurm is never asked (sbatch itself: tests/slurm/test_jobs.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kit.cli import main
from kit.site import load_site
from kit.slurm import RunFiles, RunSpec, check_run
from kit.slurm.submit import DRY_RUN, HAS_RESULT, WRITTEN, submit_runs
from tests.support.sites import slurm_site_dict, write_site

# What may lie at RUN's result path, and whether it counts as the run's result.
RESULTS = {
    "none": (None, False),
    "ok, no job named": ({"status": "ok"}, True),
    "ok, another job's": ({"status": "ok", "job": {"slurm_job_id": "4242"}}, False),
    "failed": ({"status": "failed", "error": "NaN loss"}, False),
    "damaged": ('{"status": "ok", "showers', False),
    "not a mapping": ([1, 2], False),
}


def _write_result(files: RunFiles, content) -> None:
    if content is None:
        return
    files.result.parent.mkdir(parents=True, exist_ok=True)
    files.result.write_text(content if isinstance(content, str) else json.dumps(content))


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(sorted(RESULTS)), resubmit=st.booleans(), dry_run=st.booleans())
def test_a_run_is_held_back_exactly_when_it_has_a_result_and_no_resubmit(
    tmp_path_factory, kind, resubmit, dry_run
):
    run_dir = tmp_path_factory.mktemp("runs")
    site = load_site(write_site(run_dir, slurm_site_dict()))
    checked = check_run(site, RunSpec("r1", 1, 1, 1, "00:10:00"))
    files = RunFiles(run_dir.absolute(), "r1")
    content, counts = RESULTS[kind]
    _write_result(files, content)
    before = files.result.read_bytes() if content is not None else None
    [done] = submit_runs(
        site, [checked], run_dir, pair=None, resubmit=resubmit, dry_run=dry_run, queue=False
    )
    held = counts and not resubmit
    assert done.held_back == held and done.job is None
    assert done.note == (HAS_RESULT if held else DRY_RUN if dry_run else WRITTEN)
    assert files.script.exists() == (not held and not dry_run)
    # nothing was queued, so the result stays where it is, unchanged
    assert (files.result.read_bytes() if files.result.exists() else None) == before


def test_render_refuses_a_run_with_a_result_in_one_line(tmp_path, capsys):
    site = write_site(tmp_path, slurm_site_dict())
    runs = tmp_path / "runs"
    _write_result(RunFiles(runs.absolute(), "n1-r1-t1"), {"status": "ok"})
    argv = [
        "slurm",
        "render",
        "--site",
        str(site),
        "--no-container",
        "--dir",
        str(runs),
        "--threads",
        "1",
    ]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"run n1-r1-t1 in {runs.absolute()}: has a result" in err
    assert not RunFiles(runs.absolute(), "n1-r1-t1").script.exists()
    assert main([*argv, "--run-id", "other"]) == 0  # another run id is another run
    assert Path(RunFiles(runs.absolute(), "other").script).is_file()


@pytest.mark.parametrize("kind", ["failed", "damaged"])
def test_render_writes_a_run_whose_result_does_not_count(tmp_path, kind):
    """One rule: a failed or damaged result is no result (for a single run as for
    a sweep)."""
    site = write_site(tmp_path, slurm_site_dict())
    runs = tmp_path / "runs"
    _write_result(RunFiles(runs.absolute(), "n1-r1-t1"), RESULTS[kind][0])
    assert (
        main(
            [
                "slurm",
                "render",
                "--site",
                str(site),
                "--no-container",
                "--dir",
                str(runs),
                "--threads",
                "1",
            ]
        )
        == 0
    )


def test_a_run_submitted_again_trains_afresh_its_earlier_checkpoints_moved_aside(
    tmp_path, monkeypatch
):
    """gan3d train refuses a fresh run into a directory holding another run's checkpoints: the kit's
    checkpoint directory of the run is renamed aside (never deleted) before sbatch queues the run."""
    import kit.slurm.submit as submit

    site = load_site(write_site(tmp_path, slurm_site_dict()))
    checked = check_run(
        site, RunSpec("r1", 1, 1, 1, "00:10:00", ("--data", "/data/showers"), validate=True)
    )
    files = RunFiles(tmp_path.absolute() / "runs", "r1")
    (files.checkpoints / "epoch-0002").mkdir(parents=True)
    (files.checkpoints / "epoch-0002" / "meta.json").write_text('{"epoch": 2}')
    seen = []
    monkeypatch.setattr(
        submit, "sbatch", lambda script: seen.append(files.checkpoints.exists()) or "4242"
    )
    [done] = submit_runs(site, [checked], tmp_path / "runs", pair=None)
    assert done.job == "4242" and seen == [False]
    aside = files.checkpoints.with_name("r1.before-job-unknown")
    assert (aside / "epoch-0002" / "meta.json").read_text() == '{"epoch": 2}'
