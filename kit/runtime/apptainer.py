"""Apptainer (and Singularity, its former name): each rank is `apptainer exec` of a SIF, SquashFS
or sandbox-directory image, the host MPI bound in by the pair (Apptainer's "bind model").

What Apptainer does not do for the kit, the kit does here. It never passes the host's
LD_LIBRARY_PATH into the container, and it applies no Charliecloud image environment
(IMAGE/ch/environment): so every value a rank needs goes on its line as `--env KEY=VALUE`, the
image's environment first, then the pair's settings, each expanded here (as for udocker).
Never --cleanenv, --containall or --contain: the first two drop the launcher's PMI variables
(every rank starts as a job of one, and the launcher still exits 0); the third gives each rank
a private /dev/shm, where MPICH's shared memory fails. The site config refuses them; set in the
environment (APPTAINER_CLEANENV), they are caught at run time by gan3d.runtime.world_size_refusal.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from kit.boundedrun import run_bounded
from kit.errors import KitError
from kit.excerpt import one_line, shown
from kit.image_names import SIF, SQUASH
from kit.runtime.base import same_path, shell_path
from kit.runtime.imageenv import ENV_MAX, ENVIRONMENT, parse_environment
from kit.runtime.udocker import rank_environment

if TYPE_CHECKING:
    from kit.mpi.launch import Launch
    from kit.site import Site

ENV_TIMEOUT = 120  # seconds for unsquashfs to find one small file in a large image


def executable(site: Site) -> str:
    """The command: container.apptainer.executable, else the runtime's name."""
    return site.container.apptainer_settings.executable or site.container.runtime


def env_words(env: dict[str, str]) -> list[str]:
    """``--env=KEY=VALUE`` for each variable. Apptainer reads --env as comma-separated KEY=VALUE
    pairs, CSV-quoted, once a value holds an '=': a value it would split or unquote is refused
    rather than passed changed."""
    words = []
    for key, value in env.items():
        if '"' in value or ("=" in value and "," in value):
            raise KitError(
                f"the value of {key}, {shown(value)}, holds a '\"', or both ',' and '=': "
                "apptainer exec --env would split or unquote it",
                fix="set it without those characters, in container.binds, host_mpi.env or the image's ENV",
            )
        words.append(f"--env={key}={value}")
    return words


def bind_words(binds: list[tuple[str, str]]) -> list[str]:
    """``--bind=SRC:DST`` for each bind; Apptainer splits a --bind at ',' (several binds)."""
    for src, dst in binds:
        if "," in src or "," in dst:
            raise KitError(
                f"bind {shown(src)}:{shown(dst)} holds a ',', "
                "which apptainer --bind reads as two binds",
                fix="bind a directory whose path has no ','",
            )
    return [f"--bind={src}:{dst}" for src, dst in binds]


def file_environment(image: str) -> dict[str, str]:
    """The image's own environment (ch/environment) in a SIF or SquashFS image file, read with
    unsquashfs -cat from the SIF's primary partition or the SquashFS; {} when it has none. A SIF
    is told by its header, not its name: the image a job runs is NAME.current, a link to the
    installed NAME@SHA.sif."""
    path = os.path.expanduser(image)
    # kit.image: only for an image file, not for --help
    from kit.image.sif import HEADER, looks_like_sif, squashfs_at

    with open(path, "rb") as fh:
        head = fh.read(HEADER.size)
    offset = squashfs_at(path) if looks_like_sif(head) else 0
    cmd = ["unsquashfs", "-o", str(offset), "-cat", path, ENVIRONMENT]
    try:
        ran = run_bounded(cmd, timeout=ENV_TIMEOUT, limit=ENV_MAX)
    except FileNotFoundError:
        raise KitError("unsquashfs not found", fix="apt-get install squashfs-tools") from None
    except subprocess.TimeoutExpired:
        raise KitError(
            f"unsquashfs took more than {ENV_TIMEOUT} s to read {ENVIRONMENT}",
            fix="check that the filesystem holding the image answers (a hung mount?), "
            "then run the same command again",
            where=path,
        ) from None
    if ran.returncode != 0 and "no matches" in ran.err:
        return {}  # the image keeps no environment
    if ran.returncode != 0:
        raise KitError(
            f"unsquashfs cannot read {ENVIRONMENT}: {one_line(ran.err, tail=True)}",
            fix="give a SIF or SquashFS image written by kit image convert",
            where=path,
        )
    if ran.stdout_cut:
        raise KitError(
            f"{ENVIRONMENT} is larger than {ENV_MAX} bytes",
            fix="give the image a smaller environment (its recipe's ENV), "
            "then convert it again (kit image convert)",
            where=path,
        )
    return parse_environment(ran.stdout, Path(path) / ENVIRONMENT)


def _with_environment(launch: Launch, image: str) -> Launch:
    """``launch`` with the image's environment read now from an image file, which the pair did
    not record (a directory's is read by rank_environment itself)."""
    if (
        launch.image_env
        and launch.environment is None
        and os.path.isfile(os.path.expanduser(image))
    ):
        return replace(launch, environment=file_environment(image))
    return launch


class ApptainerRuntime:
    name = "apptainer"
    command = "apptainer"  # what starts a rank, as people know it
    private_workdir = False  # a rank starts in the caller's directory, bound in by Apptainer

    def _options(self, launch: Launch, image: str) -> list[str]:
        s = launch.site.container.apptainer_settings
        return [
            executable(launch.site),
            "exec",
            *(["--userns"] if s.userns else []),
            *s.options,
            *bind_words(launch.binds),
            *env_words(rank_environment(_with_environment(launch, image), image)),
        ]

    def run_args(self, launch: Launch, image: str, join: list[str] | None = None) -> list[str]:
        """``join`` is Charliecloud's and ignored; the command follows the image."""
        return [*self._options(launch, image), image]

    def script_words(self, launch: Launch, image: str, *, srun: bool, group: str) -> list[str]:
        """``image`` as the site sees it (a ~/ path is the job's $HOME); its environment is read
        now, from this machine's copy at that path, where the pair did not record it."""
        return [shlex.quote(w) for w in self._options(launch, image)] + [shell_path(image)]

    def job_env(self, site: Site) -> list[str]:
        return []

    def job_tag(self, site: Site) -> bool:
        return False

    def prepare(self, site: Site) -> None:
        """Nothing to write before a run."""

    def ready(self, site: Site, image: str, image_kind: str) -> None:
        if image_kind in ("tar", "source"):
            raise KitError(
                f"{image}: Apptainer runs a SIF, SquashFS or directory image",
                fix="convert it first (kit image convert IMAGE OUT.sif --site SITE)",
            )
        command = executable(site)
        if shutil.which(command) is None:
            raise KitError(
                f"site {site.name}: {command} not found (container.apptainer.executable)",
                fix="install Apptainer (kit docs apptainer), "
                "or name it in container.apptainer.executable",
            )

    def check_env(self, site: Site) -> dict[str, str]:
        return {}

    def install_format(self, site: Site, install_as: str, source: str) -> str:
        """A SIF copied as it is (Apptainer's own form, whatever ``install_as`` says), a directory
        unpacked by the installer itself, or a SquashFS file copied as it is: an Apptainer site
        need not have Charliecloud's ch-convert."""
        if source.endswith(SIF):
            return "sif"
        if install_as == "dir" and not source.endswith(SQUASH):
            return "unpack"
        if install_as == "squash" and source.endswith(SQUASH):
            return "squash"
        raise KitError(
            f"site {site.name}: {source} cannot be installed as {install_as} without ch-convert",
            fix="push a .sif (kit image convert SRC OUT.sif), a tarball with --install-as dir, "
            "or a .sqfs with --install-as squash",
        )

    def rank_view(self, launch: Launch, image: str) -> Callable[[str], str]:
        """Apptainer mounts: the kernel names every mapped file by its path in the container."""
        return same_path


APPTAINER = ApptainerRuntime()
