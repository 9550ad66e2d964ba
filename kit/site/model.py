"""Typed site config: each key declared once, in its dataclass field (type, default, doc, checks),
and the schema that guards it derived from them (`kit docs reference/site-config` lists it)."""

from __future__ import annotations

import mmap
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from kit.excerpt import shown
from kit.schema import Bad, about, record, section_of

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
            "digits and ._+-, none starting with '.'; no ':', which splits --bind and LD_LIBRARY_PATH)",
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
            f"{shown(bad)}: not MCA parameter names (lower-case letters, digits, _), "
            "e.g. btl_tcp_if_include"
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


# The container runtimes a site may name; each is one module in kit/runtime/ (its registry checks
# that the two agree).
RUNTIMES = ("charliecloud", "udocker", "apptainer", "singularity")  # singularity: apptainer
APPTAINER_RUNTIMES = ("apptainer", "singularity")
# Apptainer options that drop the launcher's PMI variables (every rank a job of one, exit 0) or
# give each rank a private /dev/shm (MPICH aborts): never on an MPI run's line.
APPTAINER_REFUSED = ("--cleanenv", "-e", "--containall", "-C", "--contain", "-c", "--compat")
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


def _container_check(container: dict) -> list[tuple[str, Bad]]:
    if container["udocker"] is not None and container["runtime"] != "udocker":
        what = f"udocker settings for runtime {container['runtime']}"
        return [("udocker", Bad(what, "remove them or set runtime: udocker"))]
    if container["apptainer"] is not None and container["runtime"] not in APPTAINER_RUNTIMES:
        what = f"apptainer settings for runtime {container['runtime']}"
        return [("apptainer", Bad(what, "remove them or set runtime: apptainer"))]
    return []


def _apptainer_options(values: list[str]) -> Bad | None:
    """Options for every `apptainer exec`: none that breaks an MPI run (APPTAINER_REFUSED)."""
    for value in values:
        if value.split("=", 1)[0] in APPTAINER_REFUSED:
            return Bad(
                f"{shown(value)} would start every rank as a one-rank job or without a shared "
                "/dev/shm",
                "remove it (kit docs apptainer)",
            )
        if not value.startswith("-"):
            return Bad(f"{shown(value)} is not an option", "give options such as --sharens")
    return None


# Each key is declared once, in its dataclass field: the type and default there, the doc, checks
# and bounds in its `about` metadata. SCHEMA, the key tree every reader checks against (and the
# reference `kit docs reference/site-config` lists), is derived from them below.


@dataclass(frozen=True)
class Scheduler:
    type: str = field(
        metadata=about(
            "local: ranks start on this machine, no queue; slurm: jobs go through sbatch",
            choices=("local", "slurm"),
        )
    )
    max_nodes: int = field(
        metadata=about("the most nodes one job may ask for (the partition's limit)", positive=True)
    )
    max_walltime: str = field(
        metadata=about(
            "the longest walltime one job may ask for: HH:MM:SS or D-HH:MM:SS, quoted",
            check=_walltime,
        )
    )
    partition: str | None = field(
        default=None,
        metadata=about(
            "Slurm partition (#SBATCH --partition); null: the cluster's default", check=_slurm_word
        ),
    )
    account: str | None = field(
        default=None,
        metadata=about(
            "Slurm account charged (#SBATCH --account; --account overrides it); null: none",
            check=_slurm_word,
        ),
    )
    mpi_plugin: str | None = field(
        default=None,
        metadata=about(
            "srun --mpi=VALUE, when the launcher is srun; null: Slurm's default",
            choices=("pmi2", "pmix", "none"),
        ),
    )
    constraint: str | None = field(
        default=None,
        metadata=about(
            "Slurm node features (#SBATCH --constraint); null: any node", check=_slurm_word
        ),
    )


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
    """One compute node (all of a site's nodes are alike). Peak facts are null when unknown, e.g. a
    VM's clock: the kit then says the theoretical peak is unknown and divides by a measured one,
    never by a guess."""

    cpu_model: str = field(metadata=about("the CPU as its vendor names it (shown, not parsed)"))
    sockets: int = field(metadata=about("CPU sockets per node", positive=True))
    cores_per_socket: int = field(metadata=about("physical cores per socket", positive=True))
    threads_per_core: int = field(
        metadata=about("hardware threads per core (2 with hyper-threading)", positive=True)
    )
    numa_domains: int = field(
        metadata=about("NUMA domains per node, as the nodes are normally booted", positive=True)
    )
    memory_gb: float = field(metadata=about("memory per node, GB", positive=True))
    usable_memory_gb: float = field(
        metadata=about("memory per node a job may use, GB (at most memory_gb)", positive=True)
    )
    clock_ghz_avx: float | None = field(
        default=None,
        metadata=about(
            "sustained all-core clock under AVX-512 load, GHz: "
            "the clock of the fp32/bf16/fp64 peaks; null when unknown",
            positive=True,
        ),
    )
    fp32_flop_per_cycle_per_core: int | None = field(
        default=None,
        metadata=about(
            "FP32 FLOP per cycle per core, e.g. 64 = 2 AVX-512 FMA units x 16 lanes x 2; "
            "null when unknown",
            positive=True,
        ),
    )
    fp64_flop_per_cycle_per_core: int | None = field(
        default=None,
        metadata=about(
            "FP64 FLOP per cycle per core, e.g. 32 = 2 AVX-512 FMA units x 8 lanes x 2; "
            "null when unknown",
            positive=True,
        ),
    )
    bf16_flop_per_cycle_per_core: int | None = field(
        default=None,
        metadata=about(
            "BF16 FLOP per cycle per core, with AVX512_BF16 or AMX; "
            "null where the CPU has no bf16 arithmetic (TensorFlow then computes bf16 in fp32)",
            positive=True,
        ),
    )
    numa_domains_snc: int | None = field(
        default=None,
        metadata=about(
            "NUMA domains per node with sub-NUMA clustering enabled; null: no such mode",
            positive=True,
        ),
    )
    clock_ghz_max: float | None = field(
        default=None,
        metadata=about(
            "clock of the vendor/Top500 peak (the seed paper's FP64 convention), GHz; "
            "null when unknown",
            positive=True,
        ),
    )

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
                f"unknown {' and '.join(missing)}: "
                f"the site config gives no {', no '.join(missing.values())}",
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

    components: str | None = field(
        default=None,
        metadata=about(
            "the host's MCA component dir (ompi_info --path pkglibdir); null: PREFIX/lib/openmpi",
            check=_absolute,
        ),
    )
    help_files: str | None = field(
        default=None,
        metadata=about(
            "the host's help-file dir (ompi_info --path pkgdatadir); null: PREFIX/share/openmpi",
            check=_absolute,
        ),
    )
    pmix_components: str | None = field(
        default=None,
        metadata=about(
            "an external PMIx's component dir, bound too; null: PMIx inside Open MPI",
            check=_absolute,
        ),
    )
    mca: dict[str, str] = field(
        default_factory=dict,
        metadata=about(
            "MCA parameters, exported as OMPI_MCA_<name> to mpirun and the ranks",
            check=_mca_names,
            kind="map[str,str]",
        ),
    )
    allow_run_as_root: bool = field(
        default=False,
        metadata=about(
            "mpirun --allow-run-as-root (containers and CI run as root; clusters should not)"
        ),
    )


@dataclass(frozen=True)
class HostMPI:
    """The host's MPI, bound into the image in place of the image's own (same ABI family)."""

    vendor: str = field(
        metadata=about(
            "who made the host MPI; its ABI family is the one the image's MPI must share",
            choices=MPI_VENDORS,
        )
    )
    version: str = field(metadata=about("the host MPI's version, e.g. \"2019\" (quoted)"))
    prefix: str = field(
        metadata=about(
            "the host MPI's install directory (PREFIX/bin/mpiexec, PREFIX/lib)", check=_absolute
        )
    )
    launcher: str = field(
        metadata=about("command that starts ranks, e.g. 'srun' or 'mpiexec'", check=_launcher)
    )
    library_dirs: list[str] = field(
        default_factory=list,
        metadata=about(
            "host dirs of the MPI's libraries (and its fabric's), "
            "bound under container.mpi_target; empty: PREFIX/lib",
            check=_library_dirs,
            kind="list[str]",
        ),
    )
    env: dict[str, str] = field(
        default_factory=dict,
        metadata=about(
            "set for the launcher and, translated into the container, for the ranks",
            check=_env_names,
            kind="map[str,str]",
        ),
    )
    soname: str | None = field(
        default=None,
        metadata=about(
            "the host library's SONAME, e.g. libmpich.so.12 (Debian's MPICH); null: libmpi.so.12"
        ),
    )
    library_version: str | None = field(
        default=None,
        metadata=about("the host libmpi file's version suffix, e.g. 12.0.0; null: unknown"),
    )
    openmpi: OpenMPI | None = field(
        default=None,
        metadata=about(
            "what binding and starting an Open MPI host needs (vendor openmpi only; "
            "absent: the defaults)",
        ),
    )

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
            components=given.components or str(prefix / "lib" / "openmpi"),
            help_files=given.help_files or str(prefix / "share" / "openmpi"),
            pmix_components=given.pmix_components,
            mca=dict(given.mca),
            allow_run_as_root=given.allow_run_as_root,
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
    """How udocker runs a rank (runtime udocker); every field has a default."""

    mode: str = field(
        default="P1",
        metadata=about(
            "udocker execution mode: P1 (proot, seccomp-accelerated), P2 (proot without it: "
            "the fallback)",
            choices=UDOCKER_MODES,
        ),
    )
    executable: str = field(
        default="udocker",
        metadata=about("the udocker command: a name on PATH or an absolute path", check=_command),
    )
    proot: str | None = field(
        default="/usr/bin/proot",
        metadata=about(
            "the proot executable (Debian's: the kit runs it through a wrapper that drops udocker's -k); "
            "null: udocker's own, from the tools tarball",
            check=_absolute,
        ),
    )
    tarball: str | None = field(
        default=None,
        metadata=about(
            "udocker's tools tarball, installed from this file (never downloaded); null: none",
            check=_absolute,
        ),
    )
    dir: str = field(
        default="~/.udocker",
        metadata=about(
            "udocker's repository (UDOCKER_DIR), per user: on a shared filesystem or node-local",
            check=_absolute,
        ),
    )
    allow_root: bool = field(
        default=False,
        metadata=about("udocker --allow-root: let root run ranks (udocker refuses root otherwise)"),
    )


@dataclass(frozen=True)
class Apptainer:
    """How Apptainer (or Singularity) runs a rank (runtime apptainer); every field has a default."""

    executable: str | None = field(
        default=None,
        metadata=about(
            "the apptainer command: a name on PATH or an absolute path; null: "
            "the runtime's name (apptainer or singularity)",
            check=_command,
        ),
    )
    options: list[str] = field(
        default_factory=list,
        metadata=about(
            "more options for every `apptainer exec`, e.g. --sharens (never --cleanenv, "
            "--contain or --containall)",
            check=_apptainer_options,
            kind="list[str]",
        ),
    )
    userns: bool = field(
        default=False,
        metadata=about(
            "apptainer exec --userns: "
            "an unprivileged user namespace (a site without setuid Apptainer; sandbox directories)"
        ),
    )


@dataclass(frozen=True)
class Container:
    """The runtime that starts each rank in its image, and what it binds."""

    runtime: str = field(
        metadata=about(
            "what starts each rank in its image: charliecloud (ch-run), udocker, "
            "or apptainer (singularity: the same)",
            choices=RUNTIMES,
        )
    )
    image_dir: str = field(
        metadata=about(
            "where images are installed on the site (IMAGE_DIR/NAME.current); ~: your home",
            check=_absolute,
        )
    )
    binds: list[str] = field(
        default_factory=list,
        metadata=about(
            "more host dirs bound into every rank's container, each SRC:DST (two absolute paths)",
            check=binds_problem,
            kind="list[str]",
        ),
    )
    join: bool = field(
        default=True,
        metadata=about("ch-run --join: the ranks on one node share one container (Charliecloud)"),
    )
    mpi_target: str = field(
        default="/opt/hostmpi",
        metadata=about(
            "in-image directory the host MPI library dirs are bound under", check=_image_dir
        ),
    )
    udocker: Udocker | None = field(
        default=None,
        metadata=about(
            "runtime udocker only: how udocker runs (absent: the defaults)",
            section_check=_udocker_check,
        ),
    )

    apptainer: Apptainer | None = field(
        default=None,
        metadata=about("runtime apptainer only: how Apptainer runs (absent: the defaults)"),
    )

    @property
    def udocker_settings(self) -> Udocker:
        """The udocker section, or its defaults where the site gives none."""
        return self.udocker or Udocker()

    @property
    def apptainer_settings(self) -> Apptainer:
        """The apptainer section, or its defaults where the site gives none."""
        return self.apptainer or Apptainer()


@dataclass(frozen=True)
class Transfer:
    """Where `kit transfer` uploads images: the site's login host, over SSH."""

    host: str = field(metadata=about("the login host images are uploaded to over SSH"))
    image_dir: str = field(
        metadata=about(
            "where uploads land on that host (kit transfer push --remote-dir overrides it); "
            "~: your home there",
            check=_absolute,
        )
    )
    user: str | None = field(
        default=None, metadata=about("SSH user on the host; null: as your SSH config says")
    )
    port: int = field(default=22, metadata=about("SSH port of the host, 1..65535", check=_port))
    jump_host: str | None = field(
        default=None,
        metadata=about(
            "[user@]host[:port] to reach the host through (SSH ProxyJump); null: direct"
        ),
    )
    keep_versions: int = field(
        default=2,
        metadata=about(
            "installed versions of an image kept besides the current one (kit transfer push --keep)",
            positive=True,
        ),
    )
    direct_io: bool = field(
        default=True,
        metadata=about(
            "write uploads with O_DIRECT where the filesystem allows it (no page cache to fill and flush); "
            "false for buffered writes"
        ),
    )


@dataclass(frozen=True)
class Network:
    """The interconnect between nodes."""

    latency_us: float = field(
        metadata=about("node-to-node latency of the fabric, microseconds", positive=True)
    )
    bandwidth_gbps: float = field(
        metadata=about("node-to-node bandwidth of the fabric, Gbit/s", positive=True)
    )
    fabric: str | None = field(
        default=None,
        metadata=about("the fabric's name, e.g. omni-path or infiniband-hdr; null: unnamed"),
    )
    islands: int | None = field(
        default=None,
        metadata=about(
            "islands of nodes (full bisection inside one, less between); null: one network, no islands",
            positive=True,
        ),
    )
    island_nodes: int | None = field(
        default=None,
        metadata=about(
            "nodes per island (full bisection inside an island); null: no islands", positive=True
        ),
    )


# what a command that hands the site config to its jobs asks for a Site made in code, not read
FILE_FIX = "give --site a site config file, or a name kit site list shows"


@dataclass(frozen=True)
class Site:
    """A machine as the kit deploys to it: one site config file, checked against SCHEMA."""

    name: str = field(
        metadata=about(
            "short name used on the command line (--site NAME) and as the file's name",
            check=_name,
        )
    )
    scheduler: Scheduler = field(metadata=about("how jobs are queued and their limits"))
    node: Node = field(
        metadata=about(
            "one compute node: CPU, NUMA, memory and the facts of its peak FLOP/s",
            section_check=_node_check,
        )
    )
    host_mpi: HostMPI = field(
        metadata=about(
            "the host's MPI, which every rank uses in place of the image's",
            section_check=_host_mpi_check,
        )
    )
    container: Container = field(
        metadata=about(
            "the container runtime, where images live and what is bound into them",
            section_check=_container_check,
        )
    )
    transfer: Transfer = field(metadata=about("where kit transfer uploads images, over SSH"))
    network: Network = field(
        metadata=about("the interconnect between nodes", section_check=_network_check)
    )
    description: str = field(
        default="", metadata=about("one line on the machine, shown by kit site show")
    )
    modules: list[str] = field(
        default_factory=list,
        metadata=about(
            "environment modules a job loads (module load NAME...) before it starts ranks",
            kind="list[str]",
        ),
    )
    path: Path | None = None  # the file it was loaded from; not a key

    @classmethod
    def from_dict(cls, data: dict, path: Path | None = None) -> Site:
        """Build from a dict that already passed SCHEMA."""
        site: Site = record(cls, data, path=path)
        return site

    def peak_per_island(self, precision: str = "fp32") -> float | None:
        """The island's peak at the AVX clock; None without islands or without the node's peak."""
        node_peak = self.node.theoretical_peak_flops(precision)
        if self.network.island_nodes is None or node_peak is None:
            return None
        return self.network.island_nodes * node_peak


# The key tree, derived: `path` is where a Site came from, not a key of the file.
SCHEMA = section_of(Site, skip=("path",), first=("name", "description"))


def is_openmpi_mpirun(site: Site) -> bool:
    """An Open MPI host started by its own mpirun/mpiexec (not srun)."""
    return site.host_mpi.vendor == "openmpi" and shlex.split(site.host_mpi.launcher)[0] != "srun"
