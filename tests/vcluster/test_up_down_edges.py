"""`kit vcluster up` that fails half-way, after its bridge, namespaces and veths exist: a file of the
user's where the cluster keeps its logs, or a directory where munged's key goes (munged then does
not start). The up removes what it made, and nothing else (a bystander interface, the user's
file), then says why in one line; its directory records no cluster, so the next up just works.
And `down` (or `down --dry-run`) where no cluster was ever made makes nothing there either."""

from __future__ import annotations

import subprocess
import time

import pytest

from kit.cli import main
from kit.vcluster.slurmconf import SOCKET_PATH_MAX, longest_socket
from kit.vcluster.state import load_state
from tests.support.vcluster import cluster_links, fresh_name


@pytest.fixture
def bystander():
    """A bridge named like a cluster's, that no cluster made."""
    name = f"kvc-{fresh_name()}"
    subprocess.run(["ip", "link", "add", name, "type", "bridge"], check=True, timeout=30)
    yield name
    subprocess.run(["ip", "link", "del", name], timeout=30)


@pytest.mark.parametrize("planted", ["logs", "munge/munge.key"])
def test_an_up_that_fails_half_way_removes_what_it_made_and_nothing_else(
    cluster_dir, bystander, capsys, planted
):
    name = fresh_name()
    at = cluster_dir / planted
    at.parent.mkdir(parents=True)
    if planted == "logs":
        at.write_text("the user's own log\n")
    else:
        at.mkdir()
    assert main(["vcluster", "up", "--nodes", "2", "--dir", str(cluster_dir), "--name", name]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kit: error: "), err
    assert "(this up removed what it had made)" in err
    assert (f"{at}: " in err) if planted == "logs" else ("munged did not start" in err), err
    assert load_state(cluster_dir) is None
    deadline = time.monotonic() + 10  # a veth goes with its namespace, asynchronously
    while cluster_links(name) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert cluster_links(name) == []
    assert (
        subprocess.run(
            ["ip", "link", "show", "dev", bystander], capture_output=True, timeout=30
        ).returncode
        == 0
    )
    assert at.read_text() == "the user's own log\n" if planted == "logs" else at.is_dir()
    assert not subprocess.run(
        ["pgrep", "-f", f"{cluster_dir}/"], capture_output=True, text=True
    ).stdout


@pytest.mark.parametrize("dry", [[], ["--dry-run"]])
def test_a_directory_too_long_for_slurms_sockets_is_refused_before_anything_is_made(
    tmp_path, capsys, dry
):
    """Under a long directory, slurmstepd cannot bind its socket and Slurm holds every job: `up`
    says so first, with the length that would do."""
    where = tmp_path / ("d" * 80)
    assert main(["vcluster", "up", "--nodes", "2", "--dir", str(where), *dry]) == 1
    err = capsys.readouterr().err
    path = longest_socket(where, ["vc-1", "vc-2"])
    room = len(str(where)) - (len(path) - SOCKET_PATH_MAX)
    assert err == (
        f"kit: error: {where}: the cluster's directory is too long for Slurm: "
        f"its socket {path} would take {len(path)} bytes, and a socket's path holds {SOCKET_PATH_MAX}; "
        f"fix: give a --dir at most {room} bytes long (e.g. /tmp/vc)\n"
    ), err
    assert path == f"{where}/spool/vc-1/stepd.slurm.pmix.99999999.9999999999"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("dry", [[], ["--dry-run"]])
def test_down_where_no_cluster_was_made_makes_nothing(tmp_path, capsys, dry):
    where = tmp_path / "never" / "up"
    assert main(["vcluster", "down", str(where), *dry]) == 0
    out = capsys.readouterr().out
    assert out == (
        "dry run: nothing recorded\n"
        if dry
        else f"no virtual cluster recorded in {where}: nothing to do\n"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("bind", ["relative:/data", "/data:/in:/image", "/data"])
def test_a_bind_the_site_configs_would_refuse_is_refused_before_anything_is_made(
    cluster_dir, capsys, bind
):
    """A bind the site configs would refuse is refused before `up` starts anything (the configs are
    written last, so a later refusal would leave a running cluster with no site config)."""
    name = fresh_name()
    for dry in ([], ["--dry-run"]):
        assert (
            main(
                [
                    "vcluster",
                    "up",
                    "--nodes",
                    "2",
                    "--dir",
                    str(cluster_dir),
                    "--name",
                    name,
                    "--bind",
                    bind,
                    *dry,
                ]
            )
            == 1
        )
        err = capsys.readouterr().err
        assert (
            err.count("\n") == 1
            and err.startswith("kit: error: --bind/--dir: bind ")
            and bind in err
        ), err
        assert load_state(cluster_dir) is None and cluster_links(name) == []
