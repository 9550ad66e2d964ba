"""`kit site validate|show|probe` through the real command line entry point."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kit.atomic import atomic_open
from kit.cli import main
from kit.site import load_site
from tests.support.parts import require

REPO = Path(__file__).resolve().parents[2]


def test_validate_reports_each_file_and_fails_on_a_bad_one(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (REPO / "site-configs/laptop.yaml").read_text().replace("join: true", "join: maybe")
    )
    shipped = sorted(str(p) for p in (REPO / "site-configs").glob("*.yaml"))
    assert main(["site", "validate", *shipped]) == 0
    assert capsys.readouterr().out.count(": ok (") == len(shipped)
    assert main(["site", "validate", shipped[0], str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:" in err and "container.join: expected true or false" in err


def test_show_prints_peak_per_node_and_per_island(capsys):
    assert main(["site", "show", "supermuc-ng"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "48 cores" in out and "77 GB usable" in out
    assert (
        "FP32 peak per node 7.07 TFLOP/s (48 cores x 2.3 GHz (avx clock) x 64 FP32 FLOP/cycle)"
        in out
    )
    assert (
        "FP64 peak per node 3.53 TFLOP/s" in out and "BF16 peak per node unknown FLOP/cycle" in out
    )
    assert "FP64 4.15 TFLOP/s (vendor/Top500" in out  # the paper's 4.15 TFLOP/s per node
    assert "peak per island FP32 5.60 PFLOP/s" in out and "792 nodes" in out


def test_show_unknown_site_is_a_clean_error(capsys):
    assert main(["site", "show", "atlantis"]) == 1
    assert "unknown site 'atlantis'; known sites: " in capsys.readouterr().err


def test_probe_writes_a_valid_config_matching_this_host(tmp_path, capsys):
    require(shutil.which("lscpu") and shutil.which("mpiexec"), "lscpu/mpiexec missing")
    out = tmp_path / "here.yaml"
    assert main(["site", "probe", "--out", str(out), "--name", "ci-host"]) == 0
    site = load_site(out)
    assert site.name == "ci-host"
    nproc = int(
        subprocess.run(["nproc", "--all"], capture_output=True, text=True, check=True).stdout
    )
    assert site.node.cores * site.node.threads_per_core == nproc
    assert site.host_mpi.vendor == "mpich" and site.host_mpi.soname == "libmpich.so.12"
    assert site.node.usable_memory_gb <= site.node.memory_gb
    assert not list(tmp_path.glob(".*.part"))


@pytest.mark.parametrize(
    "kind", ["hand-written", "probed then edited", "symlink", "dangling symlink"]
)
def test_probe_never_replaces_a_file_at_out(tmp_path, capsys, kind):
    require(shutil.which("lscpu") and shutil.which("mpiexec"), "lscpu/mpiexec missing")
    out, mine = tmp_path / "mysite.yaml", tmp_path / "elsewhere.yaml"
    if kind == "hand-written":
        out.write_text((REPO / "site-configs/supermuc-ng.yaml").read_text())
    elif kind == "probed then edited":
        assert main(["site", "probe", "--out", str(out)]) == 0
        out.write_text(out.read_text().replace("clock_ghz_avx: null", "clock_ghz_avx: 2.3"))
    else:
        out.symlink_to(mine)
        if kind == "symlink":
            mine.write_text("mine\n")
    before = {
        p.name: (p.is_symlink(), p.read_bytes() if p.exists() else None) for p in tmp_path.iterdir()
    }
    capsys.readouterr()
    assert main(["site", "probe", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert (
        err == f"kit: error: {out}: already exists; kit site probe writes a new file only; fix: "
        "remove it first if it is to go, or give another --out\n"
    )
    assert {
        p.name: (p.is_symlink(), p.read_bytes() if p.exists() else None) for p in tmp_path.iterdir()
    } == before


def test_a_file_made_at_the_name_during_a_no_replace_write_is_kept(tmp_path):
    out = tmp_path / "out.yaml"
    with pytest.raises(FileExistsError):
        with atomic_open(out, "w", replace=False) as fh:
            fh.write("kit's\n")
            out.write_text("theirs\n")
    assert out.read_text() == "theirs\n" and os.listdir(tmp_path) == ["out.yaml"]


def test_probe_to_stdout_is_the_same_yaml(capsys):
    assert main(["site", "probe", "--name", "x"]) == 0
    assert "name: x" in capsys.readouterr().out


def test_a_command_imports_only_its_group():
    # start-up time: `kit site ...` must not pull in Fabric/paramiko or the MPI probes
    code = (
        "import sys; from kit.cli import build_parser; build_parser(['site', 'show', 'laptop']); "
        "print(sorted(m for m in ('fabric', 'kit.mpi', 'kit.image', 'kit.transfer') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout
    assert out.strip() == "[]"
    full = subprocess.run(
        [sys.executable, "-m", "kit", "--help"], capture_output=True, text=True, cwd=REPO
    ).stdout
    assert all(group in full for group in ("site", "mpi", "image", "transfer"))
    from kit.cli import GROUPS, build_parser

    groups = next(a for a in build_parser([])._actions if a.dest == "group").choices
    assert sorted(groups) == sorted(GROUPS)  # no argv: every group registered, each by itself
    assert sorted(next(a for a in build_parser(["mpi"])._actions if a.dest == "group").choices) == [
        "mpi"
    ]
