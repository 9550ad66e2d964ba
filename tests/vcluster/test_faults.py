"""Faults across the virtual nodes, seen through `kit scale` as a scientist sees them: a rank killed
on one node mid-run ends the job (no hang), collect names the node, --resubmit runs it again and
nothing of the failed job is counted; a node drained before submission shows as pending with the
admin's reason."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kit.cli import main
from kit.errors import KitError
from kit.scale import sweep_jobs
from kit.slurm.ledger import read_jobs
from kit.vcluster.net import netns_pids
from tests.support.training import tiny_train_args

pytestmark = pytest.mark.slow
EPOCHS = "6"  # after rank 0 reports epoch 1 (tracing done), 5 more: time to kill a rank mid-run


def _plan(vc, sweep: Path, image: Path, data: list[Path], capsys) -> None:
    assert (
        main(
            [
                "scale",
                "plan",
                "--site",
                str(Path(vc.directory) / "vcluster.yaml"),
                "--image",
                str(image),
                "--nodes",
                "2",
                "--ranks-per-node",
                "1",
                "--python",
                sys.executable,
                "--walltime",
                "00:15:00",
                "--dir",
                str(sweep),
                "--",
                *tiny_train_args(data),
                "--epochs",
                EPOCHS,
            ]
        )
        == 0
    )
    capsys.readouterr()


def _collect(sweep: Path, capsys, *flags: str) -> tuple[int, dict]:
    capsys.readouterr()  # what earlier commands printed
    code = main(["scale", "collect", str(sweep), "--json", *flags])
    out, err = capsys.readouterr()
    assert out, err
    return code, json.loads(out)["runs"][0]


def _rank_on(netns: str) -> int:
    """The training process on one node (its namespace holds only the cluster's processes): Python
    itself, not the `ch-run --join` that started it and waits for it (its argv names gan3d too)."""
    for pid in netns_pids(netns):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[1:4] == [b"-m", b"gan3d", b"train"]:
            return pid
    raise AssertionError(f"no gan3d train process in {netns}: {netns_pids(netns)}")


@pytest.mark.timeout(2400)  # two trainings; bounded waits inside
def test_a_rank_killed_mid_run_ends_the_job_and_resubmit_runs_it_again(
    on_vcluster, vc_image, vc_data, vcluster_work, capsys
):
    vc = on_vcluster
    sweep = vcluster_work / "sweep-fault"
    _plan(vc, sweep, vc_image("vcluster.yaml"), vc_data, capsys)
    assert main(["scale", "submit", str(sweep)]) == 0
    [job] = [e["job"] for e in read_jobs(sweep)["n2-r1-t2"]]
    log = sweep / "logs" / f"n2-r1-t2-{job}.out"
    deadline = time.monotonic() + 900  # start-up and tracing on a loaded machine
    checked = time.monotonic()
    while f"epoch 1/{EPOCHS}" not in (
        log.read_text() if log.exists() else ""
    ):  # rank 0 flushes each line
        assert time.monotonic() < deadline, f"no epoch after 900 s: {log.read_text()}"
        if (
            time.monotonic() - checked > 15
        ):  # a job that ended early fails here, not at the deadline
            assert sweep_jobs.collect(sweep)[0].active, log.read_text()
            checked = time.monotonic()
        time.sleep(0.2)
    victim = vc.nodes[1]
    os.kill(_rank_on(victim["netns"]), signal.SIGKILL)

    code, run = _collect(
        sweep, capsys, "--wait", "--poll", "2", "--timeout", "300"
    )  # bounded: no hang
    assert code == 1 and run["state"] == "FAILED" and run["result"] is None
    # the node, in the log's end: "Killed", or ch-run's exit status for its killed child
    assert re.search(
        rf"srun: error: {victim['name']}: task 1: (Killed|Exited with exit code)", run["problem"]
    ), run["problem"]
    assert f"epoch {EPOCHS}/{EPOCHS}" not in run["problem"]  # killed mid-run, not at the end
    capsys.readouterr()
    assert main(["scale", "collect", str(sweep)]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert (
        f"n2-r1-t2 (job {job}, FAILED) has no result; its log ends:" in out
        and victim["name"] in out
    )
    assert sweep_jobs.results(sweep) == []  # nothing of the failed job is counted
    assert main(["scale", "report", str(sweep)]) == 1
    assert "no results to report" in capsys.readouterr().err

    assert main(["scale", "submit", str(sweep), "--resubmit"]) == 0
    [first, again] = [e["job"] for e in read_jobs(sweep)["n2-r1-t2"]]
    assert first == job and again != job
    code, run = _collect(sweep, capsys, "--wait", "--poll", "3", "--timeout", "1500")
    assert code == 0 and run["state"] == "COMPLETED" and run["job"] == again, run["problem"]
    result = json.loads(Path(run["result"]).read_text())
    assert result["job"]["slurm_job_id"] == again and result["epochs"] == int(EPOCHS)
    assert sorted(result["hostname_per_rank"]) == [n["name"] for n in vc.nodes]
    assert sweep_jobs.results(sweep) == [Path(run["result"])]


def test_a_node_drained_before_submission_shows_as_pending_with_the_reason(
    on_vcluster, vc_image, vc_data, vcluster_work, capsys
):
    vc = on_vcluster
    node = vc.nodes[1]["name"]
    sweep = vcluster_work / "sweep-drained"

    def scontrol(*args: str) -> None:
        subprocess.run(["scontrol", *args], check=True, capture_output=True, timeout=30, env=vc.env)

    scontrol("update", f"NodeName={node}", "State=DRAIN", "Reason=kit-test: fan failure")
    try:
        _plan(vc, sweep, vc_image("vcluster.yaml"), vc_data, capsys)
        assert main(["scale", "submit", str(sweep)]) == 0
        deadline = time.monotonic() + 60  # until the scheduler's first pass has given a reason
        while True:
            code, run = _collect(sweep, capsys)
            if "DRAINED" in run["state"] or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert code == 0 and run["problem"] is None  # nothing failed: it waits
        assert run["state"].startswith("PENDING (Nodes required for job are DOWN, DRAINED"), run[
            "state"
        ]
        assert f"{node} drained: kit-test: fan failure" in run["state"]
        with pytest.raises(
            KitError, match=r"still queued or running after 3 s: n2-r1-t2 \(PENDING"
        ):
            sweep_jobs.wait(sweep, poll_seconds=1, timeout=3)
    finally:
        main(["scale", "cancel", str(sweep)])
        scontrol("update", f"NodeName={node}", "State=RESUME")
    capsys.readouterr()
    assert sweep_jobs.collect(sweep)[0].state.startswith("CANCELLED")
