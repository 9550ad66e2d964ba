"""The run-time half of a pair: how a job starts its ranks in the image.

What a batch script needs once IMAGE.pair.yaml is decided: the launcher's words (a registry,
name -> word builder), the site's container runtime with the pair's binds and environment (a
registry too: kit.runtime), and host paths translated
into the container's view (the file's name and format tag: kit.image_names). Kept apart from the
pair builder so that rendering a script does not
import the image readers (ELF, linker cache): a login node renders many.
"""

from __future__ import annotations

import re
import shlex
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kit.errors import KitError
from kit.mpi.openmpi_launch import JOB_EXPORTS, is_openmpi_mpirun, mpirun_job_words, root_words
from kit.runtime import runtime_of
from kit.runtime.base import under

# their home before the registry
from kit.runtime.charliecloud import CHARLIECLOUD, JOIN_TAG_LINE, JOIN_TAG_VAR  # noqa: F401
from kit.site import Site

DEFAULT_COMMAND = "python3 -m gan3d train"
# a step's suffix (e0001): no shell or path character
GROUP_RE = re.compile(r"[A-Za-z0-9_.-]{1,16}")
FIX_MISSING = (
    "convert the source image with `kit image convert SRC OUT --site SITE` (it creates "
    "the mount points and links), or run `kit mpi pair --prepare` on a directory image"
)


# A launcher's words in a batch script: (site, the site's launcher words, hwthreads, exports) ->
# the launch head, shell-quoted, with the rank counts left to the script's shell.
ScriptWords = Callable[[Site, list[str], bool, Sequence[str]], list[str]]
# A launcher's words to start ranks now (kit mpi check): (site, the site's launcher words, ranks,
# nodes) -> argv, the executable found; a KitError naming the site field if it is not there.
NowWords = Callable[[Site, list[str], int, int], list[str]]


@dataclass(frozen=True)
class Launcher:
    """How one launcher is spelled, for a batch script and for a check run at once. ``srun``: Slurm
    starts the ranks (in a step ch-run --join can read, inside the allocation it already has)."""

    script: ScriptWords
    now: NowWords
    srun: bool = False


def _plugin(site: Site) -> list[str]:
    return [f"--mpi={site.scheduler.mpi_plugin}"] if site.scheduler.mpi_plugin else []


def _srun_script(
    site: Site, words: list[str], hwthreads: bool, exports: Sequence[str]
) -> list[str]:
    """srun with the site's PMI plugin: Slurm starts the ranks the allocation holds."""
    return [shlex.quote(w) for w in words + _plugin(site)]


def _srun_now(site: Site, words: list[str], ranks: int, nodes: int) -> list[str]:
    """srun places the ranks evenly; a rank that fails ends the step at once (its peers would
    otherwise wait in a collective)."""
    if shutil.which(words[0]) is None:
        raise KitError(
            f"site {site.name}: launcher {words[0]!r} not found on PATH",
            fix="run the check where Slurm's clients are installed (the site's login node)",
        )
    return [
        *words,
        *_plugin(site),
        "-N",
        str(nodes),
        "-n",
        str(ranks),
        f"--ntasks-per-node={ranks // nodes}",
        "--kill-on-bad-exit=1",
    ]


def _host_exe(site: Site, word: str) -> Path:
    """The host MPI's own mpiexec/mpirun, from its prefix (not whatever is first on PATH)."""
    return Path(site.host_mpi.prefix) / "bin" / word


def _host_mpiexec_script(
    site: Site, words: list[str], hwthreads: bool, exports: Sequence[str]
) -> list[str]:
    return _ranked_script(site, [str(_host_exe(site, words[0])), *words[1:]], hwthreads, exports)


def _host_mpiexec_now(site: Site, words: list[str], ranks: int, nodes: int) -> list[str]:
    if not (exe := _host_exe(site, words[0])).is_file():
        raise KitError(
            f"site {site.name}: host_mpi.launcher {words[0]!r} is not at {exe}",
            fix="correct host_mpi.prefix in the site config",
        )
    return _ranked_now(site, [str(exe), *words[1:]], ranks, nodes)


def _ranked_script(
    site: Site, words: list[str], hwthreads: bool, exports: Sequence[str]
) -> list[str]:
    """A launcher named by path: ${NRANKS} ranks (left for the batch script's shell); Open MPI's
    mpirun also gets its mapping, binding and exports (kit.mpi.openmpi_launch)."""
    head = [shlex.quote(w) for w in words] + ["-n", "${NRANKS}"]
    if is_openmpi_mpirun(site):
        head += mpirun_job_words(site, hwthreads, [*exports, *site.host_mpi.env])
    return head


def _path_now(site: Site, words: list[str], ranks: int, nodes: int) -> list[str]:
    if (exe := shutil.which(words[0])) is None:
        raise KitError(
            f"site {site.name}: launcher {words[0]!r} not found on PATH",
            fix="load the site's MPI module, or give host_mpi.prefix in the site config",
        )
    return _ranked_now(site, [exe, *words[1:]], ranks, nodes)


def _ranked_now(site: Site, words: list[str], ranks: int, nodes: int) -> list[str]:
    """`-n RANKS`; Open MPI's mpirun also gets its root flag and, over several nodes, one
    RANKS/NODES share per node."""
    if is_openmpi_mpirun(site):
        spread = ["--map-by", f"ppr:{ranks // nodes}:node"] if nodes > 1 else []
        words = [words[0], *root_words(site), *spread, *words[1:]]
    return [*words, "-n", str(ranks)]


_HOST_MPIEXEC = Launcher(_host_mpiexec_script, _host_mpiexec_now)
# Launchers by the first word of host_mpi.launcher; any other word is a launcher named by path.
LAUNCHERS: dict[str, Launcher] = {
    "srun": Launcher(_srun_script, _srun_now, srun=True),
    "mpiexec": _HOST_MPIEXEC,
    "mpirun": _HOST_MPIEXEC,
    "mpiexec.hydra": _HOST_MPIEXEC,
}
BY_PATH = Launcher(_ranked_script, _path_now)


def _launcher(site: Site) -> tuple[Launcher, list[str]]:
    words = shlex.split(site.host_mpi.launcher)
    return LAUNCHERS.get(words[0], BY_PATH), words


def launcher_words(
    site: Site, hwthreads: bool = False, exports: Sequence[str] = JOB_EXPORTS
) -> tuple[list[str], bool]:
    """The site's launcher for a batch script, shell-quoted, and whether it is srun."""
    launcher, words = _launcher(site)
    return launcher.script(site, words, hwthreads, exports), launcher.srun


def launcher_now(site: Site, ranks: int, nodes: int) -> tuple[list[str], bool]:
    """The site's launcher as argv starting ``ranks`` ranks on ``nodes`` nodes now (nodes divides
    ranks), and whether it is srun (else it needs an allocation to reach other nodes)."""
    launcher, words = _launcher(site)
    return launcher.now(site, words, ranks, nodes), launcher.srun


@dataclass(frozen=True)
class Launch:
    """How a job starts its ranks in the image: the site's launcher, then its container runtime
    (ch-run, udocker: kit.runtime) with the pair's binds and environment."""

    site: Site
    binds: list[tuple[str, str]]
    env_set: dict[str, str]
    env_prepend: dict[str, list[str]]
    image_env: bool = True
    # the image's own, where the pair read it (None: not read)
    environment: dict[str, str] | None = None

    @property
    def runtime(self):
        """The site's container runtime (kit.runtime's registry)."""
        return runtime_of(self.site)

    def ch_run_options(self, join: list[str] | None = None) -> list[str]:
        """`ch-run` and its options, up to the image (kit.runtime.charliecloud)."""
        return CHARLIECLOUD.options(self, join)

    def run_args(self, image: str, join: list[str] | None = None) -> list[str]:
        """The site's runtime as argv that runs a command in ``image`` now (the command follows)."""
        return self.runtime.run_args(self, image, join)

    def line(
        self,
        image: str,
        command: str = DEFAULT_COMMAND,
        *,
        hwthreads: bool = False,
        exports: Sequence[str] = JOB_EXPORTS,
        step: Sequence[str] = (),
        group: str = "",
    ) -> str:
        """The line a batch script runs. ${NRANKS} and ${RANKS_PER_NODE} are left for the script's
        shell to expand; every other value is shell-quoted (``command`` is taken as shell words).
        ``hwthreads`` and ``exports`` matter to Open MPI's mpirun only (kit.mpi.openmpi_launch).
        ``step``: srun options after the launcher's (a step of a running allocation, e.g. a
        pilot's); ``group``: a suffix to the job's ch-run --join tag (JOIN_TAG_VAR, which the script
        sets with JOIN_TAG_LINE) for steps that run side by side, each in a peer group of its own (a
        pilot's)."""
        if group and not GROUP_RE.fullmatch(group):
            raise KitError(
                f"peer group {group!r}: not 1 to 16 letters, digits and ._-",
                fix="name the step so (the tag names a file in /dev/shm)",
            )
        head, srun = launcher_words(self.site, hwthreads, exports)
        head = head + [shlex.quote(w) for w in step]
        return " ".join(
            head + self.runtime.script_words(self, image, srun=srun, group=group) + [command]
        )


def translate(value: str, binds: list[tuple[str, str]]) -> str:
    """Rewrite host paths under a bound dir into their in-image path (colon lists too)."""
    out = []
    for part in value.split(":"):
        for src, dst in sorted(binds, key=lambda b: -len(b[0])):
            if under(part, src):
                part = dst.rstrip("/") + part[len(src.rstrip("/")) :]
                break
        out.append(part)
    return ":".join(out)
