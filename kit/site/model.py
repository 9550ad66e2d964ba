"""Typed site config (docs/architecture.md, "File contracts") and the schema that guards it."""

from __future__ import annotations

import mmap
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from kit.excerpt import shown
from kit.schema import Bad, Field, Section

# Whole-value patterns (fullmatch: `$` would let a trailing newline through), ASCII digits only.
NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
MCA_NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,118}")  # OMPI_MCA_<name> stays an ENV_NAME
WALLTIME_RE = re.compile(r"(?:[0-9]{1,3}-)?[0-9]{1,3}:[0-5][0-9]:[0-5][0-9]")
SLURM_WORD_RE = re.compile(r"[A-Za-z0-9._,:+-]{1,256}")  # #SBATCH lines are read without a shell
# an in-image directory below /: no ':' (it splits ch-run's --bind=SRC:DST and LD_LIBRARY_PATH), no
# component starting with '.' (no '..' climbing), no '~' (nobody's home inside the image)
IMAGE_DIR_RE = re.compile(r"(?:/[A-Za-z0-9_+-][A-Za-z0-9._+-]{0,254}){1,32}")
# The MPI vendors a site may name, and the ABI family of each: a host MPI replaces an image's
# only within one family (kit.mpi.abi's rules; the image recipe is chosen by family).
FAMILY_OF_VENDOR = {
    "intel": "mpich",
    "mpich": "mpich",
    "mvapich2": "mpich",
    "cray-mpich": "mpich",
    "parastation": "mpich",
    "openmpi": "openmpi",
}
MPI_VENDORS = tuple(FAMILY_OF_VENDOR)
# How each vendor's library names itself, in its bytes and in MPI_Get_library_version (kit mpi
# check expects the host vendor's in every rank's). ParaStation MPI says only "MPICH".
VENDOR_BANNERS = {
    "intel": "Intel(R) MPI Library",
    "openmpi": "Open MPI",
    "mvapich2": "MVAPICH2",
    "cray-mpich": "CRAY MPICH",
    "mpich": "MPICH",
    "parastation": "MPICH",
}
# The vendor a banner names, most specific first: Intel MPI, MVAPICH2 and Cray MPICH also carry
# "MPICH"; a banner several vendors share names the first (ParaStation's is read as mpich).
# Besides the banners, what a vendor's launcher prints for --version (kit site probe reads it):
# Open MPI's mpiexec says only "mpiexec (OpenRTE) 4.1.4"; any "Intel(R) MPI" is Intel's.
LAUNCHER_MARKERS = {"intel": ("Intel(R) MPI",), "openmpi": ("OpenRTE",)}
VENDOR_MARKERS = [
    (vendor, marker.encode())
    for vendor in ("intel", "openmpi", "mvapich2", "cray-mpich", "mpich")
    for marker in (VENDOR_BANNERS[vendor], *LAUNCHER_MARKERS.get(vendor, ()))
]


def vendor_named_in(data: bytes | bytearray | mmap.mmap) -> str | None:
    """The MPI vendor whose banner ``data`` (a library's bytes or its version text) carries."""
    return next((vendor for vendor, marker in VENDOR_MARKERS if data.find(marker) >= 0), None)


def _name(value: str) -> Bad | None:
    if not NAME_RE.fullmatch(value):
        return Bad(
            f"{shown(value)} is not a valid site name",
            "use lower-case letters, digits, '.', '_', '-'",
        )
    return None


def _walltime(value: str) -> Bad | None:
    if not WALLTIME_RE.fullmatch(value):
        return Bad(f"{shown(value)} is not a walltime", "write HH:MM:SS or D-HH:MM:SS, quoted")
    return None


def _slurm_word(value: str) -> Bad | None:
    if not SLURM_WORD_RE.fullmatch(value):
        return Bad(f"{shown(value)} is not a Slurm name", "use letters, digits and ._,:+- only")
    return None


def _launcher(value: str) -> Bad | None:
    """Split now as the batch script will, so an unbalanced quote is found before a job is
    queued.
    """
    try:
        words = shlex.split(value)
    except ValueError as exc:
        return Bad(f"{shown(value)} is not shell words ({exc})", "balance its quotes")
    if words:
        return None
    return Bad("is empty", "name the command that starts ranks, e.g. srun or mpiexec")


def _command(value: str) -> Bad | None:
    """A command name on PATH or an absolute path: one word, no shell."""
    if not re.fullmatch(r"[A-Za-z0-9._+-]{1,255}", value) and (bad := _absolute(value)):
        return Bad(f"{bad.what}, or a command name on PATH")
    return None


def _absolute(value: str) -> Bad | None:
    if not value.startswith(("/", "~")):
        return Bad(f"{shown(value)} must be an absolute path (or start with ~)")
    return None


def _library_dirs(values: list[str]) -> Bad | None:
    """Each is bound with ch-run's --bind=SRC:DST, which cannot carry a ':' in SRC."""
    for value in values:
        if bad := _absolute(value):
            return bad
        if ":" in value:
            return Bad(
                f"{shown(value)} holds a ':', which ch-run's --bind=SRC:DST cannot carry",
                "name the directory by a path without one (e.g. a symlink to it)",
            )
    return None


def _image_dir(value: str) -> Bad | None:
    if not IMAGE_DIR_RE.fullmatch(value):
        return Bad(
            f"{shown(value)} is not a directory inside the image below / (components of letters, "
            "digits and ._+-, none starting with '.'; no ':', which splits --bind and "
            "LD_LIBRARY_PATH)",
            "e.g. /opt/hostmpi",
        )
    return None


def binds_problem(values: list[str]) -> Bad | None:
    """container.binds: each SRC:DST, two absolute paths (kit vcluster checks its --bind with
    this).
    """
    for value in values:
        src, sep, dst = value.partition(":")
        if not sep or not src.startswith("/") or not dst.startswith("/") or ":" in dst:
            return Bad(
                f"bind {shown(value)} must be SRC:DST with two absolute paths and no other ':' "
                "(ch-run's --bind cannot carry one)"
            )
    return None


def _env_names(env: dict) -> Bad | None:
    bad = [k for k in env if not ENV_NAME_RE.fullmatch(k)]
    return (
        Bad(f"{shown(bad)}: not environment variable names (letters, digits, _)") if bad else None
    )


def _mca_names(mca: dict) -> Bad | None:
    bad = [k for k in mca if not MCA_NAME_RE.fullmatch(k)]
    if bad:
        return Bad(
            f"{shown(bad)}: not MCA parameter names (lower-case letters, digits, _), e.g. "
            "btl_tcp_if_include"
        )
    return None


def _host_mpi_check(mpi: dict) -> list[tuple[str, Bad]]:
    if mpi["openmpi"] is not None and mpi["vendor"] != "openmpi":
        what = f"Open MPI settings for a host MPI of vendor {mpi['vendor']}"
        return [("openmpi", Bad(what, "remove them or set vendor: openmpi"))]
    return []


def _port(value: int) -> Bad | None:
    return None if 1 <= value <= 65535 else Bad(f"port {value} is outside 1..65535")


def _node_check(node: dict) -> list[tuple[str, Bad]]:
    problems = []
    if node["usable_memory_gb"] > node["memory_gb"]:
        problems.append(
            (
                "usable_memory_gb",
                Bad(
                    f"usable memory {node['usable_memory_gb']} GB is more "
                    f"than the node's memory_gb {node['memory_gb']} GB"
                ),
            )
        )
    cores = node["sockets"] * node["cores_per_socket"]
    for key in ("numa_domains", "numa_domains_snc"):
        value = node[key]
        if value is not None and value > cores:
            problems.append(
                (key, Bad(f"{value} NUMA domains cannot exceed the {cores} cores of a node"))
            )
    return problems


def _network_check(net: dict) -> list[tuple[str, Bad]]:
    if (net["islands"] is None) != (net["island_nodes"] is None):
        key = "islands" if net["islands"] is None else "island_nodes"
        return [(key, Bad("give both islands and island_nodes, or neither"))]
    return []


OPENMPI_SECTION = Section(
    {
        "components": Field(
            "str",
            nullable=True,
            required=False,
            check=_absolute,
            doc="the host's MCA component dir (ompi_info --path pkglibdir); default PREFIX/lib/openmpi",
        ),
        "help_files": Field(
            "str",
            nullable=True,
            required=False,
            check=_absolute,
            doc="the host's help-file dir (ompi_info --path pkgdatadir); default PREFIX/share/openmpi",
        ),
        "pmix_components": Field(
            "str",
            nullable=True,
            required=False,
            check=_absolute,
            doc="an external PMIx's component dir, bound too; null: PMIx inside Open MPI",
        ),
        "mca": Field(
            "map[str,str]",
            required=False,
            default={},
            check=_mca_names,
            doc="MCA parameters, exported as OMPI_MCA_<name> to mpirun and the ranks",
        ),
        "allow_run_as_root": Field(
            "bool",
            required=False,
            default=False,
            doc="mpirun --allow-run-as-root (containers and CI run as root; clusters should not)",
        ),
    }
)

# The container runtimes a site may name; each is one module in kit/runtime/ (its registry checks
# that the two agree).
RUNTIMES = ("charliecloud", "udocker")
UDOCKER_MODES = ("P1", "P2")  # proot with seccomp acceleration, and without (the fallback)


def _udocker_check(section: dict) -> list[tuple[str, Bad]]:
    if section["proot"] is None and section["tarball"] is None:
        return [
            (
                "proot",
                Bad(
                    "is null (udocker's own proot), but no tarball gives it",
                    "name a proot executable (Debian's: /usr/bin/proot, apt-get install proot) "
                    "or udocker's tools tarball",
                ),
            )
        ]
    return []


UDOCKER_SECTION = Section(
    {
        "mode": Field(
            "str",
            required=False,
            default="P1",
            choices=UDOCKER_MODES,
            doc=(
                "udocker execution mode: P1 (proot, seccomp-accelerated), "
                "P2 (proot without it: the fallback)"
            ),
        ),
        "executable": Field(
            "str",
            required=False,
            default="udocker",
            check=_command,
            doc="the udocker command: a name on PATH or an absolute path",
        ),
        "proot": Field(
            "str",
            nullable=True,
            required=False,
            default="/usr/bin/proot",
            check=_absolute,
            doc="the proot executable (Debian's: the kit runs it through a wrapper that drops udocker's -k); "
            "null: udocker's own, from the tools tarball",
        ),
        "tarball": Field(
            "str",
            nullable=True,
            required=False,
            default=None,
            check=_absolute,
            doc="udocker's tools tarball, installed from this file (never downloaded); null: none",
        ),
        "dir": Field(
            "str",
            required=False,
            default="~/.udocker",
            check=_absolute,
            doc="udocker's repository (UDOCKER_DIR), per user: on a shared filesystem or node-local",
        ),
        "allow_root": Field(
            "bool",
            required=False,
            default=False,
            doc="udocker --allow-root: let root run ranks (udocker refuses root otherwise)",
        ),
    },
    check=_udocker_check,
)


def _container_check(container: dict) -> list[tuple[str, Bad]]:
    if container["udocker"] is not None and container["runtime"] != "udocker":
        what = f"udocker settings for runtime {container['runtime']}"
        return [("udocker", Bad(what, "remove them or set runtime: udocker"))]
    return []


SCHEMA = Section(
    {
        "name": Field("str", check=_name, doc="short name used on the command line"),
        "description": Field("str", required=False, default=""),
        "scheduler": Field(
            Section(
                {
                    "type": Field("str", choices=("local", "slurm")),
                    "partition": Field("str", nullable=True, required=False, check=_slurm_word),
                    "account": Field("str", nullable=True, required=False, check=_slurm_word),
                    "max_nodes": Field("int", positive=True),
                    "max_walltime": Field("str", check=_walltime),
                    "mpi_plugin": Field(
                        "str",
                        nullable=True,
                        required=False,
                        choices=("pmi2", "pmix", "none"),
                        doc="srun --mpi=VALUE",
                    ),
                    "constraint": Field("str", nullable=True, required=False, check=_slurm_word),
                }
            )
        ),
        "node": Field(
            Section(
                {
                    "cpu_model": Field("str"),
                    "sockets": Field("int", positive=True),
                    "cores_per_socket": Field("int", positive=True),
                    "threads_per_core": Field("int", positive=True),
                    "numa_domains": Field("int", positive=True),
                    "numa_domains_snc": Field(
                        "int",
                        positive=True,
                        nullable=True,
                        required=False,
                        doc="NUMA domains with sub-NUMA clustering enabled",
                    ),
                    "memory_gb": Field("float", positive=True),
                    "usable_memory_gb": Field("float", positive=True),
                    # Peak facts: null (or absent) when unknown, e.g. a VM's clock. The kit then
                    # says the theoretical peak is unknown and divides by a measured one, never by a
                    # guess.
                    "clock_ghz_avx": Field(
                        "float",
                        positive=True,
                        nullable=True,
                        required=False,
                        doc="sustained all-core clock under AVX-512 load: the clock of the fp32/bf16/fp64 "
                        "peaks; null when unknown",
                    ),
                    "clock_ghz_max": Field(
                        "float",
                        positive=True,
                        nullable=True,
                        required=False,
                        doc="clock used for the vendor/Top500 peak (the seed paper's FP64 convention)",
                    ),
                    "fp32_flop_per_cycle_per_core": Field(
                        "int",
                        positive=True,
                        nullable=True,
                        required=False,
                        doc="e.g. 64 = 2 AVX-512 FMA units x 16 lanes x 2",
                    ),
                    "fp64_flop_per_cycle_per_core": Field(
                        "int",
                        positive=True,
                        nullable=True,
                        required=False,
                        doc="e.g. 32 = 2 AVX-512 FMA units x 8 lanes x 2",
                    ),
                    "bf16_flop_per_cycle_per_core": Field(
                        "int",
                        positive=True,
                        nullable=True,
                        required=False,
                        doc="with AVX512_BF16 or AMX; null where the CPU has no bf16 "
                        "arithmetic (TensorFlow then computes bf16 in fp32)",
                    ),
                },
                check=_node_check,
            )
        ),
        "host_mpi": Field(
            Section(
                {
                    "vendor": Field("str", choices=MPI_VENDORS),
                    "version": Field("str"),
                    "prefix": Field("str", check=_absolute),
                    "library_dirs": Field(
                        "list[str]", required=False, default=[], check=_library_dirs
                    ),
                    "launcher": Field(
                        "str",
                        check=_launcher,
                        doc="command that starts ranks, e.g. 'srun' or 'mpiexec'",
                    ),
                    "env": Field(
                        "map[str,str]",
                        required=False,
                        default={},
                        check=_env_names,
                        doc="set for the launcher and, translated into the container, for the ranks",
                    ),
                    "soname": Field(
                        "str",
                        nullable=True,
                        required=False,
                        doc="the host library's SONAME, e.g. libmpi.so.12",
                    ),
                    "library_version": Field(
                        "str",
                        nullable=True,
                        required=False,
                        doc="the host libmpi file's version suffix, e.g. 12.0.0",
                    ),
                    "openmpi": Field(
                        OPENMPI_SECTION,
                        nullable=True,
                        required=False,
                        doc="what binding and starting an Open MPI host needs (vendor openmpi only)",
                    ),
                },
                check=_host_mpi_check,
            )
        ),
        "container": Field(
            Section(
                {
                    "runtime": Field(
                        "str",
                        choices=RUNTIMES,
                        doc="what starts each rank in the image (kit/runtime/)",
                    ),
                    "image_dir": Field("str", check=_absolute),
                    "binds": Field("list[str]", required=False, default=[], check=binds_problem),
                    "join": Field("bool", required=False, default=True),
                    "mpi_target": Field(
                        "str",
                        required=False,
                        default="/opt/hostmpi",
                        check=_image_dir,
                        doc="in-image directory the host MPI library dirs are bound under",
                    ),
                    "udocker": Field(
                        UDOCKER_SECTION,
                        nullable=True,
                        required=False,
                        doc="runtime udocker only: how udocker runs (absent: the defaults)",
                    ),
                },
                check=_container_check,
            )
        ),
        "modules": Field("list[str]", required=False, default=[]),
        "transfer": Field(
            Section(
                {
                    "host": Field("str"),
                    "user": Field("str", nullable=True, required=False),
                    "port": Field("int", required=False, default=22, check=_port),
                    "image_dir": Field("str", check=_absolute),
                    "jump_host": Field("str", nullable=True, required=False),
                    "keep_versions": Field("int", required=False, default=2, positive=True),
                    "direct_io": Field(
                        "bool",
                        required=False,
                        default=True,
                        doc="write uploads with O_DIRECT where the filesystem allows it "
                        "(no page cache to fill and flush); false for buffered writes",
                    ),
                }
            )
        ),
        "network": Field(
            Section(
                {
                    "fabric": Field("str", nullable=True, required=False),
                    "latency_us": Field("float", positive=True),
                    "bandwidth_gbps": Field("float", positive=True),
                    "islands": Field("int", positive=True, nullable=True, required=False),
                    "island_nodes": Field(
                        "int",
                        positive=True,
                        nullable=True,
                        required=False,
                        doc="nodes per island (full bisection inside an island)",
                    ),
                },
                check=_network_check,
            )
        ),
    }
)


@dataclass(frozen=True)
class Scheduler:
    type: str
    max_nodes: int
    max_walltime: str
    partition: str | None = None
    account: str | None = None
    mpi_plugin: str | None = None
    constraint: str | None = None


PRECISIONS = ("fp32", "bf16", "fp64")


@dataclass(frozen=True)
class Peak:
    """A theoretical peak, or why there is none: the kit never divides by a guessed figure."""

    precision: str
    flops: float | None  # FLOP/s; None when the site config lacks a fact it needs
    # how it was computed ("48 cores x 2.3 GHz x 64 FP32 FLOP/cycle"), or the reason it is unknown
    basis: str

    def times(self, nodes: int) -> Peak:
        """The same peak for `nodes` nodes."""
        if self.flops is None or nodes == 1:
            return self
        return Peak(self.precision, nodes * self.flops, f"{nodes} nodes x {self.basis}")


@dataclass(frozen=True)
class Node:
    cpu_model: str
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    numa_domains: int
    memory_gb: float
    usable_memory_gb: float
    clock_ghz_avx: float | None = None
    fp32_flop_per_cycle_per_core: int | None = None
    fp64_flop_per_cycle_per_core: int | None = None
    bf16_flop_per_cycle_per_core: int | None = None
    numa_domains_snc: int | None = None
    clock_ghz_max: float | None = None

    @property
    def cores(self) -> int:
        """Physical cores per node."""
        return self.sockets * self.cores_per_socket

    @property
    def hardware_threads(self) -> int:
        return self.cores * self.threads_per_core

    def flop_per_cycle(self, precision: str) -> int | None:
        """FLOP per cycle per core the config states for `precision` (None: not stated)."""
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
        return getattr(self, f"{precision}_flop_per_cycle_per_core")

    def theoretical_peak(self, precision: str = "fp32", clock: str = "avx") -> Peak:
        """One node's peak: cores x clock x FLOP/cycle for `precision`, at the sustained AVX clock
        (what the vector units reach under load) or at `clock="max"` (the vendor/Top500 convention
        the seed paper divides by). Unknown when the config does not state both facts."""
        per_cycle = self.flop_per_cycle(precision)
        if clock not in ("avx", "max"):
            raise ValueError(f"clock must be avx or max, not {clock!r}")
        key = "clock_ghz_avx" if clock == "avx" else "clock_ghz_max"
        ghz = getattr(self, key)
        missing = {
            what: k
            for what, k, v in (
                ("clock", key, ghz),
                ("FLOP/cycle", f"{precision}_flop_per_cycle_per_core", per_cycle),
            )
            if v is None
        }
        if missing:
            return Peak(
                precision,
                None,
                f"unknown {' and '.join(missing)}: the site config gives no "
                f"{', no '.join(missing.values())}",
            )
        return Peak(
            precision,
            self.cores * ghz * 1e9 * per_cycle,
            f"{self.cores} cores x {ghz:g} GHz ({clock} clock) x {per_cycle} {precision.upper()} FLOP/cycle",
        )

    def theoretical_peak_flops(self, precision: str = "fp32", clock: str = "avx") -> float | None:
        """theoretical_peak(...).flops: FLOP/s of one node, None when unknown."""
        return self.theoretical_peak(precision, clock).flops


@dataclass(frozen=True)
class OpenMPI:
    """Open MPI's own needs: its dlopen'ed components and help files are found through compiled-in
    paths, so they are bound too and named by OPAL_PKGLIBDIR/OPAL_PKGDATADIR inside the image."""

    components: str | None = None
    help_files: str | None = None
    pmix_components: str | None = None
    mca: dict[str, str] = field(default_factory=dict)
    allow_run_as_root: bool = False


@dataclass(frozen=True)
class HostMPI:
    vendor: str
    version: str
    prefix: str
    launcher: str
    library_dirs: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    soname: str | None = None
    library_version: str | None = None
    openmpi: OpenMPI | None = None

    @property
    def lib_dirs(self) -> list[str]:
        """The library dirs, defaulting to PREFIX/lib."""
        return list(self.library_dirs) or [str(Path(self.prefix) / "lib")]

    @property
    def ompi(self) -> OpenMPI:
        """The Open MPI settings with their defaults filled in from the prefix."""
        given = self.openmpi or OpenMPI()
        prefix = Path(self.prefix)
        return OpenMPI(
            given.components or str(prefix / "lib" / "openmpi"),
            given.help_files or str(prefix / "share" / "openmpi"),
            given.pmix_components,
            dict(given.mca),
            given.allow_run_as_root,
        )

    @property
    def launch_env(self) -> dict[str, str]:
        """What the launcher and the ranks get: env, and an Open MPI host's MCA parameters."""
        mca = (
            {f"OMPI_MCA_{k}": v for k, v in self.ompi.mca.items()}
            if self.vendor == "openmpi"
            else {}
        )
        return {**mca, **self.env}


@dataclass(frozen=True)
class Udocker:
    """How udocker runs a rank (runtime udocker); every field has the schema's default."""

    mode: str = "P1"
    executable: str = "udocker"
    proot: str | None = "/usr/bin/proot"
    tarball: str | None = None
    dir: str = "~/.udocker"
    allow_root: bool = False


@dataclass(frozen=True)
class Container:
    runtime: str
    image_dir: str
    binds: list[str] = field(default_factory=list)
    join: bool = True
    mpi_target: str = "/opt/hostmpi"
    udocker: Udocker | None = None

    @property
    def udocker_settings(self) -> Udocker:
        """The udocker section, or its defaults where the site gives none."""
        return self.udocker or Udocker()


@dataclass(frozen=True)
class Transfer:
    host: str
    image_dir: str
    user: str | None = None
    port: int = 22
    jump_host: str | None = None
    keep_versions: int = 2
    direct_io: bool = True


@dataclass(frozen=True)
class Network:
    latency_us: float
    bandwidth_gbps: float
    fabric: str | None = None
    islands: int | None = None
    island_nodes: int | None = None


@dataclass(frozen=True)
class Site:
    name: str
    scheduler: Scheduler
    node: Node
    host_mpi: HostMPI
    container: Container
    transfer: Transfer
    network: Network
    description: str = ""
    modules: list[str] = field(default_factory=list)
    path: Path | None = None

    @classmethod
    def from_dict(cls, data: dict, path: Path | None = None) -> Site:
        """Build from a dict that already passed SCHEMA."""
        data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
        data["host_mpi"]["env"] = {k: str(v) for k, v in data["host_mpi"]["env"].items()}
        if data["host_mpi"]["openmpi"] is not None:
            ompi = dict(data["host_mpi"]["openmpi"])
            ompi["mca"] = {k: str(v) for k, v in ompi["mca"].items()}
            data["host_mpi"]["openmpi"] = OpenMPI(**ompi)
        if data["container"]["udocker"] is not None:
            data["container"]["udocker"] = Udocker(**data["container"]["udocker"])
        return cls(
            name=data["name"],
            description=data["description"],
            modules=list(data["modules"]),
            scheduler=Scheduler(**data["scheduler"]),
            node=Node(**data["node"]),
            host_mpi=HostMPI(**data["host_mpi"]),
            container=Container(**data["container"]),
            transfer=Transfer(**data["transfer"]),
            network=Network(**data["network"]),
            path=path,
        )

    def peak_per_island(self, precision: str = "fp32") -> float | None:
        """The island's peak at the AVX clock; None without islands or without the node's peak."""
        node_peak = self.node.theoretical_peak_flops(precision)
        if self.network.island_nodes is None or node_peak is None:
            return None
        return self.network.island_nodes * node_peak


def is_openmpi_mpirun(site: Site) -> bool:
    """An Open MPI host started by its own mpirun/mpiexec (not srun)."""
    return site.host_mpi.vendor == "openmpi" and shlex.split(site.host_mpi.launcher)[0] != "srun"
