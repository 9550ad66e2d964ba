"""Rendering a batch script reads the pair's run-time half (kit.mpi.launch, kit.mpi.pair_reader)
only: the image readers (ELF, linker cache) stay unimported on a login node that renders many."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kit.mpi import convert_paired
from kit.site import load_site

IMAGE_READERS = (
    "kit.mpi.elf",
    "kit.mpi.discover",
    "kit.mpi.ldcache",
    "kit.mpi.pair_builder",
    "elftools",
)

RENDER = """
import json, sys
from pathlib import Path
from kit.mpi.pair_reader import read_pair_file
from kit.site import load_site
from kit.slurm import RunFiles, RunSpec, check_run, render
site = load_site("supermuc-ng")
pair = read_pair_file(sys.argv[1], site)
run = check_run(site, RunSpec("n2", 2, 4, 12, "01:00:00"))
script = render(site, run, RunFiles(Path("/hppfs/work/r"), "n2"), pair=pair)
print(json.dumps({"last": script.rstrip().splitlines()[-1], "modules": sorted(sys.modules)}))
"""


@pytest.fixture(scope="module")
def sng_pair(mpich_oci, tmp_path_factory) -> Path:
    """A real pair file: the test MPICH image converted for SuperMUC-NG."""
    return convert_paired(
        mpich_oci, tmp_path_factory.mktemp("pair") / "gan3d.tar", load_site("supermuc-ng")
    ).pair_file


def test_rendering_a_script_does_not_import_the_image_readers(sng_pair):
    done = subprocess.run(
        [sys.executable, "-c", RENDER, str(sng_pair)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert (
        " ch-run " in out["last"] and "~/images/gan3d.current" in out["last"]
    )  # the pair was rendered
    loaded = [m for m in out["modules"] if m.startswith(IMAGE_READERS)]
    assert loaded == [], f"rendering imported {loaded}"
