"""kit.slurm.result: what a later step reads of a run's results file (which job wrote it, whether
the run failed) is checked by kit.schema's WRITTEN section, every bad key named in one line."""

from __future__ import annotations

import json

import pytest

from kit.errors import KitError
from kit.slurm import RunFiles
from kit.slurm.result import RunFailed, run_result, usable_result


def _files(tmp_path, record) -> RunFiles:
    files = RunFiles(tmp_path.absolute(), "r1")
    files.result.parent.mkdir(parents=True, exist_ok=True)
    files.result.write_text(json.dumps(record))
    return files


@pytest.mark.parametrize(
    "record, job, counts",
    [
        ({"status": "ok", "job": {"slurm_job_id": "12", "run_id": "r1"}}, "12", True),
        ({"status": "ok", "job": {"slurm_job_id": "12"}}, "13", False),  # an older job's
        ({"status": "ok", "job": {"slurm_job_id": None}}, "13", True),  # run outside Slurm
        ({"status": "ok", "job": None}, None, True),
        ({"nodes": 2}, "13", True),  # gan3d-run/1: no status, no job
    ],
)
def test_a_result_counts_when_its_job_wrote_it(tmp_path, record, job, counts):
    files = _files(tmp_path, record)
    assert run_result(files, job) == (files.result if counts else None)


def test_a_failed_run_is_run_failed_with_its_error(tmp_path):
    files = _files(tmp_path, {"status": "failed", "error": "losses became NaN", "job": {}})
    with pytest.raises(RunFailed, match="the run failed: 'losses became NaN'; fix: kit scale"):
        run_result(files, "12")
    assert usable_result(files, "12") is None


def test_every_bad_key_is_named_in_one_line_with_the_fix(tmp_path):
    files = _files(tmp_path, {"status": "done", "job": {"slurm_job_id": 12}})
    with pytest.raises(KitError) as exc:
        run_result(files, "12")
    line = str(exc.value)
    assert line.startswith(f"{files.result}: invalid gan3d results file (2 problem(s)): ")
    assert f"{files.result}: job.slurm_job_id: expected a string or null, got int 12" in line
    assert f"{files.result}: status: 'done' is not allowed" in line
    assert line.endswith("; fix: move it aside and kit scale submit --resubmit --only r1")
    assert "\n" not in line and usable_result(files, "12") is None
