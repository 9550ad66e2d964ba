"""Hybrid MPI/OpenMP settings of one rank: where the ranks are, and how many threads each may use.

Thread pools are sized when TensorFlow initializes, so the order matters:
`discover_layout` (mpi4py only, no TensorFlow) -> `check_capacity` -> `apply_environment`
(before `import tensorflow`) -> `configure_tensorflow` (before the first op).
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

# HPAI's values on SuperMUC-NG (see docs/3dgan reference); an environment value wins.
KMP_DEFAULTS = {"KMP_AFFINITY": "granularity=fine,compact,1,0", "KMP_BLOCKTIME": "0"}
# Variables worth recording with a run because they change how it performs.
RECORDED_ENV = (
    "OMP_NUM_THREADS",
    "KMP_AFFINITY",
    "KMP_BLOCKTIME",
    "KMP_SETTINGS",
    "OMP_PROC_BIND",
    "OMP_PLACES",
    "TF_ENABLE_ONEDNN_OPTS",
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
    "HOROVOD_FUSION_THRESHOLD",
    "HOROVOD_CYCLE_TIME",
    "HOROVOD_TIMELINE",
    "HOROVOD_AUTOTUNE",
    "I_MPI_PIN_DOMAIN",
    "I_MPI_PIN_RESPECT_CPUSET",
    "I_MPI_JOB_RESPECT_PROCESS_PLACEMENT",
    "SLURM_CPUS_PER_TASK",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_NNODES",
)


class SettingsError(ValueError):
    """An impossible or inconsistent run setting; the message names the flag and the fix."""


@dataclass(frozen=True)
class RankLayout:
    """Where this process sits in the job, as the launcher (mpiexec/srun) set it up."""

    rank: int
    size: int
    local_rank: int
    local_size: int  # ranks on this node
    hostname: str
    nodes: int  # distinct hostnames in the job
    ranks_per_node: int  # the largest number of ranks on any node
    mpi_library_version: (
        str  # first line, e.g. "MPICH Version: 4.0.2" or "Intel(R) MPI Library 2021.x ..."
    )
    mpi_library_version_full: str


# What launchers tell each rank about the job's size (MPICH/Intel MPI/Slurm PMI, Open MPI, srun).
LAUNCHER_SIZE_ENV = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS")
NO_MPI = "none (one process, mpi4py not installed)"
# What the launcher that started this very process says about its ranks: Hydra/Intel MPI and srun's
# PMI, Open MPI, an srun step (a batch script's own SLURM_NTASKS is the job's, not a step's).
WORLD_SIZE_ENV = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS")


def discover_layout(
    environ: Mapping[str, str] | None = None, started: int | None = None
) -> RankLayout:
    """Ask MPI (through mpi4py, before TensorFlow starts) for ranks, nodes and ranks per node.

    Horovod initialized afterwards reuses this MPI instance (it checks MPI_Initialized). Without
    mpi4py the job is this one process, unless a launcher says it started more. ``started``: the
    ranks the launcher started, as its command line says (gan3d train --ranks).
    """
    try:
        from mpi4py import MPI
    except ImportError:
        alone = _one_process_layout(os.environ if environ is None else environ)
        check_world_size(alone.size, {}, started)
        return alone

    world = MPI.COMM_WORLD
    node = world.Split_type(MPI.COMM_TYPE_SHARED)
    hostname = socket.gethostname()
    per_rank = world.allgather((hostname, node.Get_size()))
    version = MPI.Get_library_version().strip()
    node_sizes = {h: n for h, n in per_rank}
    layout = RankLayout(
        rank=world.Get_rank(),
        size=world.Get_size(),
        local_rank=node.Get_rank(),
        local_size=node.Get_size(),
        hostname=hostname,
        nodes=len(node_sizes),
        ranks_per_node=max(node_sizes.values()),
        mpi_library_version=" ".join(version.splitlines()[0].split()) if version else "unknown",
        mpi_library_version_full=version,
    )
    node.Free()
    check_world_size(layout.size, os.environ if environ is None else environ, started)
    return layout


RANKS_FLAG = "--ranks"  # gan3d train's: the ranks its launcher starts, on every line the kit writes
ALONE_FIX = (
    "let the launcher's environment reach the ranks (Apptainer: no --cleanenv or --containall, "
    "nor APPTAINER_CLEANENV or APPTAINER_CONTAINALL set; udocker: run --hostenv, "
    "which the kit gives) and use the MPI the launcher belongs to (the host's, bound in; mpi4py built on it)"
)


def world_size_refusal(sizes: list[int], started: int, source: str) -> str | None:
    """The one rule, for gan3d train and kit mpi check alike: one line refusing ranks whose MPI
    worlds (``sizes``) are not the one of ``started`` ranks their launcher started (``source``
    says who said so), else None. Why: a runtime that keeps the launcher's PMI variables or
    descriptor from the ranks (Apptainer --cleanenv or --containall, udocker without --hostenv)
    leaves every rank a job of its own, each alone, and the launcher still exits 0."""
    if set(sizes) <= {started}:
        return None
    worlds = "/".join(str(s) for s in sorted(set(sizes)))
    return (
        f"MPI world of {worlds} rank(s), but the launcher started {started} ({source}): "
        "the ranks did not reach their launcher (its PMI variables or descriptor kept from them), "
        f"or the launcher and the ranks' MPI disagree on PMI; fix: {ALONE_FIX}"
    )


def check_world_size(size: int, environ: Mapping[str, str], started: int | None = None) -> None:
    """Refuse a rank whose MPI world is not the job its launcher started (world_size_refusal).
    How many it started: ``started`` (the command line's --ranks, which survives a runtime that
    cleans the environment), else the launcher's size variable (WORLD_SIZE_ENV, the first set)."""
    if started is not None:
        refusal = world_size_refusal([size], started, RANKS_FLAG)
        if refusal:
            raise SettingsError(refusal)
        return
    for key in WORLD_SIZE_ENV:
        value = environ.get(key)
        if value is None:
            continue
        if value.isascii() and value.isdigit() and len(value) <= 9:
            if refusal := world_size_refusal([size], int(value), key):
                raise SettingsError(refusal)
        return


def _one_process_layout(environ: Mapping[str, str]) -> RankLayout:
    for key in LAUNCHER_SIZE_ENV:
        value = environ.get(key, "1")
        if value != "1":
            raise SettingsError(
                f"the launcher started {value[:20]!r} ranks ({key}) but mpi4py is not installed, "
                "so this rank cannot join them; fix: "
                "install mpi4py built against the launcher's MPI (scripts/setup.sh), "
                "or run one process without a launcher"
            )
    host = socket.gethostname()
    return RankLayout(
        rank=0,
        size=1,
        local_rank=0,
        local_size=1,
        hostname=host,
        nodes=1,
        ranks_per_node=1,
        mpi_library_version=NO_MPI,
        mpi_library_version_full=NO_MPI,
    )


def default_threads(local_size: int, cores: int, environ: Mapping[str, str] | None = None) -> int:
    """Threads per rank when --threads is not given: Slurm's --cpus-per-task, else an even share."""
    environ = os.environ if environ is None else environ
    cpus = environ.get("SLURM_CPUS_PER_TASK", "")
    if cpus.isdigit() and int(cpus) > 0:
        return int(cpus)
    return max(1, cores // max(1, local_size))


def check_capacity(
    ranks_per_node: int,
    threads: int,
    inter_op: int,
    *,
    cores: int,
    where: str,
    oversubscribe: bool = False,
) -> None:
    """Refuse more compute threads on a node than it has cores (they would time-share and crawl)."""
    if threads < 1:
        raise SettingsError(f"--threads {threads}: needs at least 1 thread per rank")
    if inter_op < 1:
        raise SettingsError(f"--inter-op-threads {inter_op}: needs at least 1")
    wanted = ranks_per_node * threads
    if wanted > cores and not oversubscribe:
        fit = max(1, cores // ranks_per_node)
        raise SettingsError(
            f"{ranks_per_node} rank(s) per node x --threads {threads} = {wanted} threads, "
            f"but a {where} node has {cores} cores; fix: use --threads {fit}"
            + (f" or at most {cores} ranks per node" if ranks_per_node > cores else "")
            + ", or pass --oversubscribe to run anyway (slow; for laptops)"
        )


@dataclass(frozen=True)
class ThreadSettings:
    """The threading of one rank: TensorFlow pool sizes and the OpenMP/KMP environment."""

    intra_op: int
    inter_op: int
    env: dict[str, str] = field(default_factory=dict)


def thread_settings(
    threads: int, inter_op: int, environ: Mapping[str, str] | None = None
) -> ThreadSettings:
    """OMP_NUM_THREADS follows --threads; KMP_* take HPAI's defaults unless the environment sets
    them.
    """
    environ = os.environ if environ is None else environ
    env = {"OMP_NUM_THREADS": str(threads)}
    for key, value in KMP_DEFAULTS.items():
        env[key] = environ.get(key, value)
    return ThreadSettings(intra_op=threads, inter_op=inter_op, env=env)


def apply_environment(settings: ThreadSettings) -> list[str]:
    """Export the settings; returns warnings (TensorFlow already loaded means they may not
    apply).
    """
    os.environ.update(settings.env)
    if "tensorflow" in sys.modules:
        return [
            "tensorflow was imported before the thread environment was set; "
            "OMP/KMP values may not take effect in this process"
        ]
    return []


def configure_tensorflow(settings: ThreadSettings) -> list[str]:
    """Size TensorFlow's thread pools; must run before the first op creates the eager context."""
    import tensorflow as tf

    warnings = []
    for name, value in (
        ("intra_op_parallelism", settings.intra_op),
        ("inter_op_parallelism", settings.inter_op),
    ):
        getter = getattr(tf.config.threading, f"get_{name}_threads")
        setter = getattr(tf.config.threading, f"set_{name}_threads")
        try:
            setter(value)
        except RuntimeError:
            if getter() != value:
                warnings.append(
                    f"TensorFlow was already initialized: {name} stays {getter()} (wanted {value})"
                )
    # Grappler's remapper fails on the training step's graph (TF 2.15 fuses away a Pad or a BiasAdd
    # that the custom gradients of gan3d.conv_forms still read), logs "E ... remapper failed" and
    # discards its work for that graph: off, the step is the same graph without the alarming line.
    tf.config.optimizer.set_experimental_options({"remapping": False})
    return warnings


def settings_in_force(environ: Mapping[str, str] | None = None) -> dict:
    """The thread settings TensorFlow and the environment actually hold now (for print and
    results).
    """
    import tensorflow as tf

    environ = os.environ if environ is None else environ
    return {
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        "env": {k: environ[k] for k in RECORDED_ENV if k in environ},
    }
