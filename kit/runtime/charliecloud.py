"""Charliecloud: each rank is `ch-run` with the pair's binds and environment (values expanded by
ch-run), in a directory or SquashFS image; ranks of a node share memory through --join."""

from __future__ import annotations

import shlex
import shutil
from typing import TYPE_CHECKING, Callable

from kit.errors import KitError
from kit.runtime.base import same_path, shell_path
from kit.site.model import is_openmpi_mpirun

if TYPE_CHECKING:
    from kit.mpi.launch import Launch
    from kit.site import Site

# ch-run --join's peer group on a node is named by a tag: a shared-memory segment
# /dev/shm/ch-run_shm-TAG and a semaphore /dev/shm/sem.ch-run_sem-TAG. A job killed at the wrong
# moment leaves them behind, and a later job with the same tag would join the dead group ("join: no
# PID"); Slurm repeats job ids (a controller state reset, MaxJobId, every fresh cluster), so the tag
# is one per job start: the batch script draws it once (job id + a random UUID from the kernel) into
# JOIN_TAG_VAR, which every launch line of the job expands; exported for the child shells that
# expand a pilot's step lines. At most 68 characters with a step's suffix, of [A-Za-z0-9_.-]: far
# inside the 240 the semaphore's name leaves (NAME_MAX 255 less "sem.ch-run_sem-"). Assigned apart
# from `export`, whose own status would hide a failed read.
JOIN_TAG_VAR = "KIT_JOIN_TAG"
JOIN_TAG_LINE = (
    f'{JOIN_TAG_VAR}="kit-${{SLURM_JOB_ID}}-$(< /proc/sys/kernel/random/uuid)" || exit 1\n'
    f'export {JOIN_TAG_VAR}'
)


class Charliecloud:
    name = "charliecloud"
    command = "ch-run"  # what starts a rank, as people know it
    private_workdir = False  # ch-run starts in the caller's directory, as it finds it in the image

    def options(self, launch: Launch, join: list[str] | None = None) -> list[str]:
        """`ch-run` and its options, up to the image (values expanded by ch-run). ch-run passes the
        host environment on; a bare --set-env first adds the image's own (the recipe's PATH and
        PYTHONPATH), then the pair's settings win."""
        if join is None:
            join = ["--join"] if launch.site.container.join else []
        args = ["ch-run", *join] + (["--set-env"] if launch.image_env else [])
        args += [f"--bind={src}:{dst}" for src, dst in launch.binds]
        args += [f"--set-env={key}={value}" for key, value in launch.env_set.items()]
        args += [
            f"--set-env={key}={':'.join(dirs)}:${key}" for key, dirs in launch.env_prepend.items()
        ]
        return args

    def run_args(self, launch: Launch, image: str, join: list[str] | None = None) -> list[str]:
        return self.options(launch, join) + [image, "--"]

    def script_words(self, launch: Launch, image: str, *, srun: bool, group: str) -> list[str]:
        site = launch.site
        # Open MPI's mpirun sets OMPI_COMM_WORLD_LOCAL_SIZE, which ch-run --join reads
        join = ["--join"] if (srun or is_openmpi_mpirun(site)) and site.container.join else []
        body = [shlex.quote(a) for a in self.options(launch, join)]
        if not join and site.container.join:
            # Hydra sets no variable ch-run --join reads
            body.insert(1, "--join-ct=${RANKS_PER_NODE}")
        if site.container.join:
            # ch-run's default tag is SLURM_STEP_ID, the same "0" for every job's first step, and a
            # job id repeats too: one tag per job start (JOIN_TAG_LINE), left for the shell to
            # expand.
            body.insert(2, f"--join-tag=${{{JOIN_TAG_VAR}}}" + (f"-{group}" if group else ""))
        return body + [shell_path(image), "--"]

    def job_env(self, site: Site) -> list[str]:
        return []

    def job_tag(self, site: Site) -> bool:
        return site.container.join

    def prepare(self, site: Site) -> None:
        """Nothing to write before a run."""

    def ready(self, site: Site, image: str, image_kind: str) -> None:
        if image_kind in ("tar", "source", "sif"):
            raise KitError(
                f"{image}: ch-run needs a directory or SquashFS image",
                fix="convert it first (kit image convert IMAGE OUT.sqfs --site SITE)",
            )
        if shutil.which("ch-run") is None:
            raise KitError(
                "ch-run not found", fix="install Charliecloud (Debian package charliecloud)"
            )

    def check_env(self, site: Site) -> dict[str, str]:
        return {}

    def install_format(self, site: Site, install_as: str, source: str) -> str:
        """The site's ch-convert makes either form."""
        return install_as

    def rank_view(self, launch: Launch, image: str) -> Callable[[str], str]:
        """ch-run's mounts: the kernel names every mapped file by its path in the container."""
        return same_path


CHARLIECLOUD = Charliecloud()
