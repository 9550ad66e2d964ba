"""A run's result file as a later step sees it: written by the job the ledger names last, or not
the run's (yet); a file that says the run failed is never counted."""

from __future__ import annotations

from pathlib import Path

from kit.errors import KitError
from kit.excerpt import shown
from kit.readfile import read_json_object
from kit.slurm.script import RunFiles


class RunFailed(KitError):
    """The run's job wrote a result that says it failed: no figures of it may be counted."""


def run_result(files: RunFiles, job: str | None) -> Path | None:
    """The run's results JSON if it was written by ``job`` (when it says which); None if there is
    none. A file there that is no results JSON is a KitError naming it; one that says the run
    failed, RunFailed."""
    fix = "fix: move it aside and kit scale submit --resubmit --only " + files.run_id
    try:
        record = read_json_object(files.result, "gan3d results file", fix)
    except FileNotFoundError:
        return None
    written = record.get("job") or {}
    if not isinstance(written, dict):
        raise KitError(
            f"{files.result}: key 'job' is {shown(written)}, expected a mapping with slurm_job_id; {fix}"
        )
    written_by = written.get("slurm_job_id")
    if written_by is not None and str(written_by) != job:
        return None
    if record.get("status") == "failed":  # gan3d train records why a run stopped (NaN losses, ...)
        raise RunFailed(
            f"{files.result}: the run failed: {shown(record.get('error'))}",
            fix=f"kit scale submit --resubmit --only {files.run_id} (e.g. with a lower --lr)",
        )
    return files.result


def usable_result(files: RunFiles, job: str | None) -> Path | None:
    """For submission a damaged or failed result is no result: the new job's replaces it (the old
    one is kept aside)."""
    try:
        return run_result(files, job)
    except KitError:
        return None
