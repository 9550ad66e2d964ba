"""The site configs `up` writes beside the cluster: the same nodes with Intel MPI (srun --mpi=pmi2,
or Intel MPI's own mpiexec over Slurm as on SuperMUC-NG) or with Debian's Open MPI as host MPI."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

from kit.atomic import atomic_write_text
from kit.boundedrun import run_bounded
from kit.cachedir import kit_cache
from kit.site.model import SCHEMA, binds_problem
from kit.site.probe import probe_host
from kit.site.schema import check_document
from kit.vcluster.net import NODE_IFACE
from kit.vcluster.state import ClusterState, VclusterError

SITE_FILES = ("vcluster.yaml", "vcluster-hydra.yaml", "vcluster-openmpi.yaml")  # the srun one first
PMI2 = Path("/usr/lib/x86_64-linux-gnu/libpmi2.so.0")  # Slurm's PMI-2 client (Debian libpmi2-0)
HEADER = """\
# Written by `kit vcluster up` for the virtual cluster {name} ({count} nodes on {subnet}): {what}.
# The nodes are namespaces of one machine: they share its {cores} cores and its memory (each node
# gets its share as usable memory), so timings here test the kit's paths, not the scaling of a site.
# network: a veth pair through a Linux bridge, i.e. memory copies; its figures are placeholders.
"""


def default_intel_mpi() -> Path | None:
    """The newest impi-rt prefix in the kit's cache (impi/VERSION, where the tests install it)."""
    cache = kit_cache() / "impi"
    found = sorted(
        (p for p in cache.glob("*") if (p / "bin" / "mpiexec.hydra").is_file()),
        key=lambda p: [int(x) if x.isdigit() else 0 for x in p.name.split(".")],
    )
    return found[-1] if found else None


def check_intel_mpi(prefix: Path | None) -> None:
    if prefix is not None and not (prefix / "lib" / "libmpi.so.12").is_file():
        raise VclusterError(
            f"--intel-mpi {prefix}: no lib/libmpi.so.12 there",
            fix="the prefix of an Intel MPI runtime (pip install --prefix DIR impi-rt)",
        )


def _version(argv: list[str], pattern: str) -> str | None:
    try:
        done = run_bounded(argv, timeout=20, limit=64 << 10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(pattern, done.out + done.err)
    return match.group(1) if match else None


def _base(state: ClusterState, binds: list[str], name: str) -> dict:
    """The nodes and the container set-up; each config its own image_dir, as an image is paired
    with one host MPI (its IMAGE.pair.yaml) and jobs run IMAGE_DIR/NAME.current."""
    probed = probe_host(state.name)
    node = probed["node"]
    node["usable_memory_gb"] = round(node["usable_memory_gb"] / len(state.nodes), 1)
    d = Path(state.directory)
    return {
        "name": name,
        "description": "",
        "scheduler": {
            "type": "slurm",
            "partition": state.partition,
            "account": None,
            "max_nodes": len(state.nodes),
            "max_walltime": "01:00:00",
        },
        "node": node,
        "container": {
            "runtime": "charliecloud",
            "image_dir": str(d / "images" / name),
            "binds": [f"{d}:{d}", *binds],
            "join": True,
            "mpi_target": "/opt/hostmpi",
        },
        "modules": [],
        "transfer": {
            "host": "localhost",
            "user": None,
            "port": 22,
            "image_dir": str(d / "images" / name),
            "jump_host": None,
            "keep_versions": 2,
            "direct_io": True,
        },
        "network": {
            "fabric": f"veth ({NODE_IFACE}) through bridge {state.bridge}",
            "latency_us": 10.0,
            "bandwidth_gbps": 10.0,
        },
    }


def intel_sites(state: ClusterState, prefix: Path, binds: list[str]) -> dict[str, dict]:
    """Intel MPI over libfabric's tcp provider on the nodes' veth; I_MPI_DEBUG=5 makes rank 0 print
    the provider and each rank's node and NIC in the job log (proof of the path taken)."""
    version = (
        _version([str(prefix / "bin" / "mpiexec.hydra"), "--version"], r"Version (\d[\w.]*)")
        or "unknown"
    )
    lib = str(prefix / "lib")
    env = {
        "I_MPI_FABRICS": "shm:ofi",
        "FI_PROVIDER": "tcp",
        "FI_PROVIDER_PATH": lib,
        "FI_TCP_IFACE": NODE_IFACE,
        "I_MPI_DEBUG": "5",
    }
    host_mpi = {
        "vendor": "intel",
        "version": version,
        "prefix": str(prefix),
        "library_dirs": [lib],
        "soname": "libmpi.so.12",
        "library_version": "12.0.0",
    }
    out = {}
    if PMI2.exists():  # a copy, not a link: a link would dangle inside ch-run
        pmi = Path(state.directory) / "hostpmi"
        pmi.mkdir(exist_ok=True)
        shutil.copyfile(PMI2, pmi / PMI2.name)
        srun = _base(state, binds, state.name)
        srun["description"] = (
            f"virtual cluster {state.name}, Intel MPI {version} started by srun --mpi=pmi2"
        )
        srun["scheduler"]["mpi_plugin"] = "pmi2"
        srun["host_mpi"] = host_mpi | {
            "library_dirs": [lib, str(pmi)],
            "launcher": "srun",
            "env": env | {"I_MPI_PMI_LIBRARY": str(pmi / PMI2.name)},
        }
        out["vcluster.yaml"] = srun
    hydra = _base(state, binds, f"{state.name}-hydra")
    hydra["description"] = (
        f"virtual cluster {state.name}, Intel MPI {version} started by its own mpiexec (Hydra, "
        "proxies started with srun)"
    )
    hydra["scheduler"]["mpi_plugin"] = None
    hydra["host_mpi"] = host_mpi | {
        "launcher": "mpiexec.hydra",
        "env": env | {"I_MPI_HYDRA_BOOTSTRAP": "slurm", "I_MPI_HYDRA_IFACE": NODE_IFACE},
    }
    out["vcluster-hydra.yaml"] = hydra
    return out


def openmpi_site(state: ClusterState, binds: list[str]) -> dict | None:
    """Debian's Open MPI 4.1 under srun --mpi=pmix. All of it is bound into the image: its MCA
    components and help files (found with ompi_info, as Debian moves them) and its external PMIx's
    components. Its TCP transport is pinned to the nodes' veth (vc0); its runtime channel (oob) to
    the cluster's subnet, which an mpirun on the login node also reaches, by its bridge, not a vc0,
    and without which it may pick the host's other interfaces. ob1 + tcp, as UCX would pick its own
    transport. mpirun as root: the cluster is root's own (kit vcluster needs root)."""
    version = _version(["mpirun.openmpi", "--version"], r"\((?:Open MPI|OpenRTE)\) (\d[\w.]*)")
    libs = sorted(Path("/usr/lib/x86_64-linux-gnu").glob("libmpi.so.40.*"))
    components = _version(["ompi_info", "--path", "pkglibdir"], r"Pkglibdir: (/\S+)")
    help_files = _version(["ompi_info", "--path", "pkgdatadir"], r"Pkgdatadir: (/\S+)")
    if version is None or not libs or components is None or help_files is None:
        return None
    pmix = libs[-1].parent / "pmix2" / "lib" / "pmix"  # Debian's external PMIx (libpmix2)
    site = _base(state, binds, f"{state.name}-openmpi")
    site["description"] = (
        f"virtual cluster {state.name}, Debian's Open MPI {version} started by srun --mpi=pmix"
    )
    site["scheduler"]["mpi_plugin"] = "pmix"
    site["host_mpi"] = {
        "vendor": "openmpi",
        "version": version,
        "prefix": "/usr",
        "library_dirs": [str(libs[-1].parent)],
        "launcher": "srun",
        "soname": "libmpi.so.40",
        "library_version": libs[-1].name.split(".so.")[1],
        "openmpi": {
            "components": components,
            "help_files": help_files,
            "pmix_components": str(pmix) if pmix.is_dir() else None,
            "mca": {
                "pml": "ob1",
                "btl": "self,vader,tcp",
                "btl_tcp_if_include": NODE_IFACE,
                "oob_tcp_if_include": state.subnet,
            },
            "allow_run_as_root": True,
        },
    }
    return site


def check_binds(directory: Path, binds: list[str]) -> None:
    """The binds every config gets (the cluster directory, and --bind), checked by the site schema's
    rule before anything is made: a config refused after the cluster is up would leave it
    useless."""
    if problem := binds_problem([f"{directory}:{directory}", *binds]):
        raise VclusterError(
            f"--bind/--dir: {problem.what}",
            fix="name directories without ':' as absolute paths SRC:DST",
        )


def write_sites(state: ClusterState, intel_prefix: Path | None, binds: list[str]) -> list[Path]:
    """Each config checked against the schema before it is written (atomically)."""
    docs: dict[str, tuple[dict, str]] = {}
    if intel_prefix is not None:  # checked by up() before anything was made
        for file, doc in intel_sites(state, intel_prefix, binds).items():
            docs[file] = (doc, "Intel MPI as the host MPI")
    if (ompi := openmpi_site(state, binds)) is not None:
        docs["vcluster-openmpi.yaml"] = (ompi, "Debian's Open MPI as the host MPI")
    written = []
    for file, (doc, what) in docs.items():
        text = HEADER.format(
            name=state.name,
            count=len(state.nodes),
            subnet=state.subnet,
            what=what,
            cores=doc["node"]["sockets"] * doc["node"]["cores_per_socket"],
        ) + yaml.safe_dump(doc, sort_keys=False)
        path = Path(state.directory) / file
        check_document(text, path, SCHEMA)
        atomic_write_text(path, text)
        written.append(path)
    return written
