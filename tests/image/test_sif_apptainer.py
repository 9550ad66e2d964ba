"""The kit's SIF under a real Apptainer (scripts/apptainer.sh; skipped naming why without one):
run as root, and through the launch words kit.runtime.apptainer gives a rank."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from kit.image import convert
from kit.mpi.launch import Launch
from kit.site import load_site
from tests.support import apptainer
from tests.support.parts import require
from tests.support.paths import REPO
from tests.support.sites import write_site


@pytest.fixture(scope="module")
def image(rich, tmp_path_factory) -> Path:
    require(os.geteuid() == 0, "a SIF is mounted from a loop device here: needs root")
    apptainer.apptainer()  # skip before converting when there is none
    out = tmp_path_factory.mktemp("apptainer") / "rich.sif"
    convert(rich / "docker.tar", out)
    return out


def test_apptainer_runs_the_kits_sif_as_root(image):
    """The loop-mounted partition holds the image's files and the pair's mount points; the
    command's exit status comes back; the definition is the kit's."""
    proc = apptainer.run(
        "exec", image, "/bin/sh", "-c", "cat /data/keep.txt; ls -d /mnt/9 /scratch; exit 7"
    )
    assert (proc.returncode, proc.stdout) == (7, "keep\n/mnt/9\n/scratch\n"), proc.stderr
    deffile = apptainer.run("inspect", "--deffile", image)
    assert deffile.returncode == 0 and "Bootstrap: scratch" in deffile.stdout, deffile.stderr


def test_a_ranks_words_reach_it_and_the_hosts_library_path_does_not(image, tmp_path):
    """kit.runtime.apptainer's argv: the bind is there, each --env value arrives (the image's
    own environment read from the SIF, a value with spaces and ';' intact), and the host's
    LD_LIBRARY_PATH stays outside."""
    doc = yaml.safe_load((REPO / "site-configs" / "laptop.yaml").read_text())
    doc["container"]["runtime"] = "apptainer"
    doc["container"]["apptainer"] = {"executable": str(apptainer.apptainer())}
    site = load_site(write_site(tmp_path, doc))
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "note").write_text("bound\n")
    launch = Launch(
        site, [(str(shared), "/mnt/0")], {"MSG": "a b;c $FOO"}, {"LD_LIBRARY_PATH": ["/opt/x"]}
    )
    argv = launch.run_args(str(image)) + [
        "/bin/sh",
        "-c",
        'cat /mnt/0/note; echo "$MSG|$FOO|$LD_LIBRARY_PATH"',
    ]
    env = {**os.environ, "LD_LIBRARY_PATH": "/host/lib", "FOO": "host"}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["bound", "a b;c bar|bar|/opt/x:/.singularity.d/libs"]
