"""kit site probe names the host MPI's vendor with kit.site.model.vendor_named_in, the one reader
of vendor banners (the ELF reader and the report's series use it too), from the real launchers'
--version output: MPICH's Hydra with and without mpichversion, Open MPI's mpiexec (which says only
"OpenRTE") and the Intel MPI runtime's (impi-rt wheel)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from kit.site.probe import probe_mpi
from tests.support.parts import require

SYSTEM_PATH = "/usr/sbin:/sbin"  # ldconfig, and nothing that names an MPI


def _only(monkeypatch, bin_dir: Path, **tools: str) -> None:
    """PATH with just these tools (name -> the real program) and ldconfig."""
    bin_dir.mkdir()
    for name, program in tools.items():
        require(Path(program).is_file(), f"{program} not installed (scripts/setup.sh installs it)")
        (bin_dir / name).symlink_to(program)
    monkeypatch.setenv("PATH", f"{bin_dir}:{SYSTEM_PATH}")


def _version(cmd: list[str], pattern: str) -> str:
    """The version a vendor's own tool reports, read here independently of the probe."""
    return re.search(
        pattern, subprocess.run(cmd, capture_output=True, text=True, check=True).stdout, re.M
    ).group(1)


def test_open_mpis_mpiexec_is_openmpi_with_its_version_even_beside_mpichversion(
    tmp_path, monkeypatch
):
    _only(
        monkeypatch,
        tmp_path / "bin",
        mpiexec="/usr/bin/mpiexec.openmpi",
        mpichversion="/usr/bin/mpichversion",
    )
    mpi = probe_mpi()
    assert mpi["vendor"] == "openmpi"
    assert mpi["version"] == _version(
        ["/usr/bin/ompi_info", "--parsable"], r"^ompi:version:full:(\S+)$"
    )


@pytest.mark.parametrize("with_mpichversion", [True, False])
def test_mpichs_hydra_is_mpich_with_or_without_mpichversion(
    tmp_path, monkeypatch, with_mpichversion
):
    tools = {"mpiexec": "/usr/bin/mpiexec.mpich"}
    if with_mpichversion:
        tools["mpichversion"] = "/usr/bin/mpichversion"
    _only(monkeypatch, tmp_path / "bin", **tools)
    mpi = probe_mpi()
    assert mpi["vendor"] == "mpich"
    assert mpi["version"] == _version(["/usr/bin/mpichversion"], r"^MPICH Version:\s*(\S+)$")


def test_the_intel_mpi_runtimes_mpiexec_is_intel_with_its_version(
    impi_prefix, tmp_path, monkeypatch
):
    _only(monkeypatch, tmp_path / "bin", mpiexec=str(impi_prefix / "bin" / "mpiexec"))
    mpi = probe_mpi()
    assert mpi["vendor"] == "intel" and mpi["prefix"] == str(impi_prefix.resolve())
    assert mpi["version"].startswith(
        impi_prefix.name.rsplit(".", 1)[0]
    )  # 2021.18 of impi-rt 2021.18.1
