"""What a container runtime provides to the kit (kit.runtime's registry holds one per name)."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:  # no import at run time: kit.mpi.launch imports this package
    from kit.mpi.launch import Launch
    from kit.site import Site


def shell_path(path: str) -> str:
    """Quoted for a shell, but a leading ~/ left bare so that the shell still expands it."""
    return "~/" + shlex.quote(path[2:]) if path.startswith("~/") else shlex.quote(path)


def under(path: str, directory: str) -> bool:
    base = directory.rstrip("/")
    return path == base or path.startswith(base + "/")


def same_path(path: str) -> str:
    return path


class Runtime(Protocol):
    """One container runtime. ``launch`` carries the site and the pair's binds and environment."""

    name: str
    command: str  # what starts a rank, as people know it (ch-run, udocker)
    private_workdir: (
        bool  # `kit mpi check` starts its ranks in a directory of its own, removed after
    )

    def run_args(self, launch: Launch, image: str, join: list[str] | None = None) -> list[str]:
        """argv that runs a command in ``image`` now (the command follows), values expanded."""

    def script_words(self, launch: Launch, image: str, *, srun: bool, group: str) -> list[str]:
        """A batch script's words up to the command, shell-quoted (``image`` as the site sees it;
        ``srun``: Slurm starts the ranks; ``group``: a step's suffix for peer groups)."""

    def job_env(self, site: Site) -> list[str]:
        """`export` lines a batch script needs before its launch line."""

    def job_tag(self, site: Site) -> bool:
        """Whether the job draws kit.runtime.charliecloud.JOIN_TAG_LINE before its launch lines."""

    def prepare(self, site: Site) -> str | None:
        """Write what a run needs on this machine before it starts (kit-owned files only)."""

    def ready(self, site: Site, image: str, image_kind: str) -> None:
        """Raise KitError, one line naming the fix, when this machine cannot start a rank now."""

    def check_env(self, site: Site) -> dict[str, str]:
        """Variables `kit mpi check` gives the launcher (and so the ranks) for this runtime."""

    def rank_view(self, launch: Launch, image: str) -> Callable[[str], str]:
        """A path a rank reads in its /proc/self/maps -> the path as the rank sees it."""

    def install_format(self, site: Site, install_as: str, source: str) -> str:
        """How `kit transfer push --install` installs the image file ``source`` wanted as
        ``install_as`` (dir|squash) on the site: the remote installer's FMT (kit.transfer.
        remote_script: ch-convert's dir or squash, or unpack, in the installer's own Python).
        KitError, one line naming the fix, where this runtime could not run the result."""
