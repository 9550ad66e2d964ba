"""A run's result file as a later step sees it: written by the job the ledger names last, or not
the run's (yet); a file that says the run failed is never counted."""

from __future__ import annotations

from pathlib import Path

from kit.errors import KitError
from kit.excerpt import shown
from kit.readfile import read_json_object
from kit.schema import Field, Section, check_value
from kit.slurm.script import RunFiles

# What a later step reads of a results file: the job that wrote it, and whether the run failed
# (gan3d.results writes much more: passed over).
WRITTEN = Section(
    {
        "job": Field(
            Section({"slurm_job_id": Field("str", nullable=True, required=False)}, open=True),
            nullable=True,
            required=False,
        ),
        "status": Field("str", required=False, choices=("ok", "failed")),
        "error": Field("any", nullable=True, required=False),
    },
    open=True,
)


class RunFailed(KitError):
    """The run's job wrote a result that says it failed: no figures of it may be counted."""


def run_result(files: RunFiles, job: str | None) -> Path | None:
    """The run's results JSON if it was written by ``job`` (when it says which); None if there is
    none. A file there that is no results JSON is a KitError naming it; one that says the run
    failed, RunFailed."""
    fix = "move it aside and kit scale submit --resubmit --only " + files.run_id
    try:
        record = read_json_object(files.result, "gan3d results file", fix)
    except FileNotFoundError:
        return None
    written = check_value(record, files.result, WRITTEN, what="gan3d results file", fix=fix)
    written_by = (written["job"] or {}).get("slurm_job_id")
    if written_by is not None and written_by != job:
        return None
    if written["status"] == "failed":  # gan3d train records why a run stopped (NaN losses, ...)
        raise RunFailed(
            f"{files.result}: the run failed: {shown(written['error'])}",
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
