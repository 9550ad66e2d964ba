"""`kit vcluster up|down|status`: real namespaces, bridge, munged, slurmctld and one slurmd per node.
Each test makes a cluster of its own name and subnet (seconds) and removes it, failing or not."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kit.cli import main
from kit.site import load_site
from kit.vcluster import VclusterError, down, status, up
from kit.vcluster.daemons import recorded_pid
from kit.vcluster.sites import default_intel_mpi
from kit.vcluster.state import load_state
from tests.support.vcluster import cluster_links, fresh_name


def _srun(state, *argv: str) -> list[str]:
    done = subprocess.run(
        ["srun", "-N", str(len(state.nodes)), "--ntasks-per-node=1", *argv],
        env=state.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return sorted(done.stdout.split("\n"))[1:]


def test_up_makes_nodes_with_their_own_names_and_addresses_and_down_removes_exactly_them(
    cluster_dir, capsys, impi_prefix
):
    # the command line finds the Intel MPI in the kit's cache: the fixture puts it there first (on a
    # fresh machine this test may be the run's first to need it)
    assert impi_prefix.is_dir() and default_intel_mpi() is not None
    name = fresh_name()
    assert main(["vcluster", "up", "--nodes", "2", "--dir", str(cluster_dir), "--name", name]) == 0
    out = capsys.readouterr().out
    state = load_state(cluster_dir)
    assert (
        f"started virtual cluster {name}: 2 node(s)" in out
        and f"export SLURM_CONF={state.conf}" in out
    )
    nodes = [n["name"] for n in state.nodes]
    assert nodes == [f"{name}-1", f"{name}-2"]
    assert _srun(state, "hostname") == nodes  # each slurmd in its own UTS namespace
    addresses = _srun(state, "sh", "-c", "ip -br -4 addr show dev vc0 | awk '{print $3}'")
    assert addresses == [f"{n['address']}/24" for n in state.nodes] and len(set(addresses)) == 2
    resolved = [line.split() for line in _srun(state, "getent", "hosts", f"{name}-2")]
    assert (
        resolved == [[state.nodes[1]["address"], f"{name}-2"]] * 2
    )  # the cluster's hosts file, on every node

    again = up(cluster_dir, 2, name)  # a no-op that reports the running cluster
    assert not again.started and again.state == state
    doc = status(cluster_dir)
    assert doc["running"] and {n["slurm_state"] for n in doc["nodes"]} <= {
        "idle",
        "comp",
    }  # comp: srun's end
    with pytest.raises(VclusterError, match="runs cluster .* with 2 nodes; fix: kit vcluster down"):
        up(cluster_dir, 3, name)

    for site_file in ("vcluster-hydra.yaml", "vcluster-openmpi.yaml"):
        site = load_site(str(cluster_dir / site_file))  # schema-valid, for this cluster
        assert site.scheduler.partition == name and site.scheduler.max_nodes == 2
    daemons = [m for m in state.made if m.kind == "daemon"]
    assert len(daemons) == 4 and all(recorded_pid(m) for m in daemons)
    assert sorted(cluster_links(name)) == sorted(
        [f"kvc-{name}", f"kvc-{name}-1", f"kvc-{name}-2", f"kvc-{name}-1", f"kvc-{name}-2"]
    )  # 3 links, 2 namespaces

    assert main(["vcluster", "down", str(cluster_dir)]) == 0
    assert "removed 9 thing(s)" in capsys.readouterr().out
    _gone(name, daemons)
    assert (
        not (cluster_dir / "state").exists() and (cluster_dir / "logs" / "slurmctld.log").is_file()
    )
    assert main(["vcluster", "status", str(cluster_dir), "--json"]) == 1
    gone = json.loads(capsys.readouterr().out)
    assert (
        gone["schema"] == "kit-vcluster-status/1"
        and gone["running"] is False
        and gone["nodes"] == []
    )
    assert down(cluster_dir) == []  # twice: nothing to do


def _gone(name: str, daemons) -> None:
    deadline = time.monotonic() + 10  # a veth goes with its namespace, asynchronously
    while cluster_links(name) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert cluster_links(name) == []
    assert not any(recorded_pid(m) for m in daemons)


def test_an_up_killed_half_way_is_refused_until_down_removes_what_it_made(cluster_dir, tmp_path):
    """SIGKILL `kit vcluster up` as soon as its last slurmd is recorded: daemons and namespaces
    exist, the state says incomplete."""
    name = fresh_name()
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kit",
            "vcluster",
            "up",
            "--nodes",
            "2",
            "--dir",
            str(cluster_dir),
            "--name",
            name,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            text = (cluster_dir / "state").read_text() if (cluster_dir / "state").exists() else ""
            if f"slurmd {name}-2" in text:
                break
            time.sleep(0.01)
        assert proc.poll() is None, f"up ended before it could be killed: {proc.stderr.read()}"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    state = load_state(cluster_dir)
    assert state is not None and not state.complete
    with pytest.raises(
        VclusterError, match=r"not whole \(its `up` did not finish\); fix: kit vcluster down"
    ):
        up(cluster_dir, 2, name)
    time.sleep(1)  # the killed up's last slurmd may still be starting: down must catch it too
    daemons = [m for m in load_state(cluster_dir).made if m.kind == "daemon"]
    assert recorded_pid(daemons[0]) and cluster_links(name)  # munged runs, namespaces exist
    down(cluster_dir)
    _gone(name, daemons)


def test_bad_input_is_one_line_and_makes_nothing(cluster_dir, tmp_path, capsys):
    used = json.loads(
        subprocess.run(["ip", "-4", "-j", "addr"], capture_output=True, text=True).stdout
    )
    lo = next(a["local"] for e in used for a in e["addr_info"] if a["local"].startswith("127."))
    for argv, message in (
        (
            ["--name", "Bad_Name"],
            "--name 'Bad_Name': it prefixes interface names, which Linux limits to 15 characters; "
            "fix: give 1-8 lower-case letters and digits",
        ),
        (["--subnet", "8.8.8.0/24"], "not a private IPv4 /24; fix: give one such as"),
        (["--subnet", f"{lo.rsplit('.', 1)[0]}.0/24"], "overlaps 127.0.0.0/8 on this host"),
        (["--intel-mpi", str(tmp_path)], "no lib/libmpi.so.12 there"),
    ):
        for dry in ([], ["--dry-run"]):
            assert (
                main(["vcluster", "up", "--nodes", "2", "--dir", str(cluster_dir), *argv, *dry])
                == 1
            )
            err = capsys.readouterr().err
            assert err.startswith("kit: error: ") and message in err and err.count("\n") == 1
            assert load_state(cluster_dir) is None
    for count in (
        "0",
        "17",
    ):  # a usage error: the node count is checked as the command line is read
        with pytest.raises(SystemExit) as done:
            main(["vcluster", "up", "--nodes", count, "--dir", str(cluster_dir)])
        assert done.value.code == 2 and "give a number from 1 to 16" in capsys.readouterr().err
    assert load_state(cluster_dir) is None
    cluster_dir.mkdir(exist_ok=True)
    for garbage, message in (
        ("{", "state:1: not valid JSON"),
        (json.dumps({"not": "ours"}), "not a virtual cluster state kit wrote"),
    ):
        (cluster_dir / "state").write_text(garbage)
        assert main(["vcluster", "down", str(cluster_dir)]) == 1
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1
    (cluster_dir / "state").unlink()


def test_the_script_is_the_kit_command_from_any_directory(tmp_path):
    """scripts/vcluster.sh runs `kit vcluster` with the checkout's Python, wherever it is called from:
    status of a directory without a cluster is exit 1 with the documented JSON, and nothing is made."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "vcluster.sh"
    res = subprocess.run(
        ["bash", str(script), "status", str(tmp_path / "none"), "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert res.returncode == 1, res.stderr
    doc = json.loads(res.stdout)
    assert (
        doc["schema"] == "kit-vcluster-status/1" and doc["running"] is False and doc["nodes"] == []
    )
    assert not (tmp_path / "none").exists()
