"""Site configs for the tests: the laptop site behind this machine's one-node Slurm, written to
files, and that site with the MPICH test image paired and installed."""

from __future__ import annotations

import copy
import shutil
import sys
from pathlib import Path

import yaml

from tests.support.parts import require
from tests.support.paths import REPO


def slurm_site_dict(name: str = "localslurm") -> dict:
    """The laptop site, behind this machine's one-node Slurm: srun --mpi=pmi2 starts MPICH ranks."""
    site = yaml.safe_load((REPO / "site-configs" / "laptop.yaml").read_text())
    site["name"] = name
    site["scheduler"] = {
        "type": "slurm",
        "partition": "debug",
        "max_nodes": 1,
        "max_walltime": "00:20:00",
        "mpi_plugin": "pmi2",
    }
    site["host_mpi"]["launcher"] = "srun"
    # One node: MPICH's UCX needs shared memory only. Its network transports list the host's interfaces
    # at MPI_Init, and the virtual cluster's tests add and remove interfaces meanwhile ("No such device").
    site["host_mpi"]["env"] = {"UCX_TLS": "self,sm"}
    return site


def write_site(directory: Path, site: dict) -> Path:
    path = directory / f"{site['name']}.yaml"
    path.write_text(yaml.safe_dump(copy.deepcopy(site), sort_keys=False))
    return path


def paired_container_site(
    tmp_path: Path, oci: Path, showers: list[Path]
) -> tuple[Path, Path, list[Path]]:
    """(site, installed image, showers in a bound work dir): the MPICH test image ``oci`` with the
    host's MPICH bound in (the pair), srun --mpi=pmi2 ch-run --join, and the venv's Python and this
    checkout bound in (the caller sets PYTHONPATH=REPO, which sbatch and ch-run pass on)."""
    from kit.mpi import convert_paired

    require(
        shutil.which("ch-run") is not None, "ch-run not installed (Debian package charliecloud)"
    )
    base, venv = Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()
    require(
        base not in (Path("/usr"), Path("/usr/local")), "venv on the system Python: cannot bind it"
    )
    work = tmp_path / "work"
    work.mkdir()
    doc = slurm_site_dict("localslurm-ct")
    doc["container"]["image_dir"] = str(tmp_path / "images")
    doc["container"]["binds"] = [
        f"{p}:{p}" for p in sorted({str(REPO), str(base), str(venv), str(work)})
    ]
    site = write_site(tmp_path, doc)
    image = tmp_path / "images" / "gan3d.sqfs"
    assert not convert_paired(oci, image, site).pair.missing
    (tmp_path / "images" / "gan3d.current").symlink_to(
        "gan3d.sqfs"
    )  # what `kit transfer push --install` leaves
    return site, image, [Path(shutil.copy(f, work / f.name)) for f in showers]
