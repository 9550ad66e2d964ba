"""Sites and data for the batch-script tests; the Intel MPI host and the MPICH image come from tests/mpi."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from tests.mpi.conftest import (impi_prefix, impi_srun_site, mpich_image, mpich_oci,  # noqa: F401  (fixtures)
                                mpich_system_oci)

REPO = Path(__file__).resolve().parents[2]


def slurm_site_dict(name: str = "localslurm") -> dict:
    """The laptop site, behind this machine's one-node Slurm: srun --mpi=pmi2 starts MPICH ranks."""
    site = yaml.safe_load((REPO / "site-configs" / "laptop.yaml").read_text())
    site["name"] = name
    site["scheduler"] = {"type": "slurm", "partition": "debug", "max_nodes": 1, "max_walltime": "00:20:00",
                         "mpi_plugin": "pmi2"}
    site["host_mpi"]["launcher"] = "srun"
    return site


def write_site(directory: Path, site: dict) -> Path:
    path = directory / f"{site['name']}.yaml"
    path.write_text(yaml.safe_dump(copy.deepcopy(site), sort_keys=False))
    return path


@pytest.fixture
def slurm_site(tmp_path) -> Path:
    return write_site(tmp_path, slurm_site_dict())


@pytest.fixture(scope="session")
def showers(tmp_path_factory) -> list[Path]:
    from gan3d.simulate import write_files

    return write_files(tmp_path_factory.mktemp("showers"), 3, 64, seed=5)


def tiny_train_args(files: list[Path]) -> tuple[str, ...]:
    """Two epochs of three steps of the tiny preset: a real training run in seconds."""
    return ("--data", f"{files[0]},{files[1]}", "--validation-data", str(files[2]), "--preset", "tiny",
            "--batch-size", "4", "--epochs", "2", "--steps-per-epoch", "3", "--validation-steps", "2",
            "--seed", "3")
