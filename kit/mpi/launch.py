"""The run-time half of a pair: how a job starts its ranks in the image.

What a batch script needs once IMAGE.pair.yaml is decided: the launcher's words (a registry,
name -> word builder), ch-run with the pair's binds and environment, and host paths translated
into the container's view (the file's name and format tag: kit.image_names). Kept apart from the pair builder so that rendering a script does not
import the image readers (ELF, linker cache): a login node renders many.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from kit.mpi.openmpi_launch import JOB_EXPORTS, is_openmpi_mpirun, mpirun_job_words
from kit.site import Site

DEFAULT_COMMAND = "python3 -m gan3d train"
FIX_MISSING = ("convert the source image with `kit image convert SRC OUT --site SITE` (it creates "
               "the mount points and links), or run `kit mpi pair --prepare` on a directory image")


def _shell_path(path: str) -> str:
    """Quoted for a shell, but a leading ~/ left bare so that the shell still expands it."""
    return "~/" + shlex.quote(path[2:]) if path.startswith("~/") else shlex.quote(path)


# A launcher's word builder: (site, the site's launcher words, hwthreads, exports) -> the
# launch head, shell-quoted, and whether it is srun (whose steps ch-run --join can read).
WordBuilder = Callable[[Site, list[str], bool, Sequence[str]], tuple[list[str], bool]]


def _srun(site: Site, words: list[str], hwthreads: bool, exports: Sequence[str]) -> tuple[list[str], bool]:
    """srun with the site's PMI plugin: Slurm starts the ranks."""
    plugin = [f"--mpi={site.scheduler.mpi_plugin}"] if site.scheduler.mpi_plugin else []
    return [shlex.quote(w) for w in words + plugin], True


def _host_mpiexec(site: Site, words: list[str], hwthreads: bool, exports: Sequence[str]) -> tuple[list[str], bool]:
    """The host MPI's own mpiexec/mpirun, from its prefix (not whatever is first on PATH)."""
    return _ranked(site, [str(Path(site.host_mpi.prefix) / "bin" / words[0]), *words[1:]], hwthreads, exports)


def _ranked(site: Site, words: list[str], hwthreads: bool, exports: Sequence[str]) -> tuple[list[str], bool]:
    """A launcher named by path: ${NRANKS} ranks (left for the batch script's shell); Open MPI's
    mpirun also gets its mapping, binding and exports (kit.mpi.openmpi_launch)."""
    head = [shlex.quote(w) for w in words] + ["-n", "${NRANKS}"]
    if is_openmpi_mpirun(site):
        head += mpirun_job_words(site, hwthreads, [*exports, *site.host_mpi.env])
    return head, False


# Launchers by the first word of host_mpi.launcher; any other word is a launcher named by path.
LAUNCHERS: dict[str, WordBuilder] = {"srun": _srun, "mpiexec": _host_mpiexec, "mpirun": _host_mpiexec,
                                     "mpiexec.hydra": _host_mpiexec}


def launcher_words(site: Site, hwthreads: bool = False,
                   exports: Sequence[str] = JOB_EXPORTS) -> tuple[list[str], bool]:
    """The site's launcher, shell-quoted, and whether it is srun."""
    words = shlex.split(site.host_mpi.launcher)
    return LAUNCHERS.get(words[0], _ranked)(site, words, hwthreads, exports)


@dataclass(frozen=True)
class Launch:
    """How a job starts its ranks in the image: the site's launcher, then ch-run with the pair's
    binds and environment."""

    site: Site
    binds: list[tuple[str, str]]
    env_set: dict[str, str]
    env_prepend: dict[str, list[str]]
    image_env: bool = True

    def ch_run_options(self, join: list[str] | None = None) -> list[str]:
        """`ch-run` and its options, up to the image (values expanded by ch-run). ch-run passes the
        host environment on; a bare --set-env first adds the image's own (the recipe's PATH and
        PYTHONPATH), then the pair's settings win."""
        if join is None:
            join = ["--join"] if self.site.container.join else []
        args = ["ch-run", *join] + (["--set-env"] if self.image_env else [])
        args += [f"--bind={src}:{dst}" for src, dst in self.binds]
        args += [f"--set-env={key}={value}" for key, value in self.env_set.items()]
        args += [f"--set-env={key}={':'.join(dirs)}:${key}" for key, dirs in self.env_prepend.items()]
        return args

    def line(self, image: str, command: str = DEFAULT_COMMAND, hwthreads: bool = False,
             exports: Sequence[str] = JOB_EXPORTS, step: Sequence[str] = (), tag: str = "${SLURM_JOB_ID}") -> str:
        """The line a batch script runs. ${NRANKS} and ${RANKS_PER_NODE} are left for the script's
        shell to expand; every other value is shell-quoted (``command`` is taken as shell words).
        ``hwthreads`` and ``exports`` matter to Open MPI's mpirun only (kit.mpi.openmpi_launch).
        ``step``: srun options after the launcher's (a step of a running allocation, e.g. a pilot's);
        ``tag``: ch-run --join's peer group, one per job (a pilot's steps that run side by side each
        need their own)."""
        head, srun = launcher_words(self.site, hwthreads, exports)
        head = head + [shlex.quote(w) for w in step]
        # Open MPI's mpirun sets OMPI_COMM_WORLD_LOCAL_SIZE, which ch-run --join reads
        join = ["--join"] if (srun or is_openmpi_mpirun(self.site)) and self.site.container.join else []
        body = [shlex.quote(a) for a in self.ch_run_options(join)]
        if not join and self.site.container.join:
            body.insert(1, "--join-ct=${RANKS_PER_NODE}")  # Hydra sets no variable ch-run --join reads
        if self.site.container.join:
            # ch-run's default peer-group tag is SLURM_STEP_ID, the same "0" for every job's first
            # step: the shared-memory segment a killed job leaves on a node would then stop every
            # later job there ("join: no PID 0"). One tag per job, left for the shell to expand.
            body.insert(2, f"--join-tag=kit-{tag}")
        return " ".join(head + body + [_shell_path(image), "--", command])


def under(path: str, directory: str) -> bool:
    base = directory.rstrip("/")
    return path == base or path.startswith(base + "/")


def translate(value: str, binds: list[tuple[str, str]]) -> str:
    """Rewrite host paths under a bound dir into their in-image path (colon lists too)."""
    out = []
    for part in value.split(":"):
        for src, dst in sorted(binds, key=lambda b: -len(b[0])):
            if under(part, src):
                part = dst.rstrip("/") + part[len(src.rstrip("/")):]
                break
        out.append(part)
    return ":".join(out)
