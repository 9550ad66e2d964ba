"""udocker: each rank is `udocker run --location=IMAGE` on the kit's Charliecloud directory image as
it is (no load, no copy), in proot (execution mode P1, or P2 without seccomp acceleration).

What udocker does not do for the kit, the kit does here: it applies neither the image's
environment (Charliecloud keeps it in IMAGE/ch/environment) nor `$VAR` in its --env values, so
the ranks get the image's environment, then the pair's settings, every value expanded here;
--hostenv always (without it the launcher's PMI variables stay outside and every rank runs as a
1-rank job of its own); UDOCKER_TARBALL set (empty: nothing is ever downloaded); and Debian's
proot started through a wrapper that drops udocker's `-k KERNEL` (with it that proot breaks glibc
2.36: nothing dynamic starts).
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from kit.atomic import atomic_write_text
from kit.cachedir import cache_base, kit_cache
from kit.errors import KitError
from kit.image_names import SQUASH
from kit.ownfile import open_own_regular, own_dirs
from kit.runtime.base import under
from kit.runtime.imageenv import image_environment

if TYPE_CHECKING:
    from kit.mpi.launch import Launch
    from kit.site import Site
    from kit.site.model import Udocker

VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]{0,127})\}|([A-Za-z_][A-Za-z0-9_]{0,127}))")
FIX_INSTALL = (
    "pip install 'secure-site-kit[udocker]' (udocker 1.3.17), "
    "or name it in container.udocker.executable"
)
FIX_PROOT = (
    "apt-get install proot (Debian's), "
    "or set container.udocker.proot to a proot executable (null with container.udocker.tarball: "
    "udocker's own)"
)
FIX_ROOT = "run as an ordinary user, or set container.udocker.allow_root: true in the site config"
# Runs PROOT with every argument udocker gives it but `-k KERNEL`; from `-r ROOT` on (the root, the
# working directory and the command) nothing is touched.
WRAPPER = """#!/bin/sh
# Written by secure-site-kit for udocker: runs {proot} without udocker's -k KERNEL (Debian's proot
# 5.1.0 with -k breaks glibc 2.36). Named by its contents; the kit writes it again when absent.
seen=
skip=
for a do
  shift
  if [ -z "$seen" ]; then
    if [ -n "$skip" ]; then skip=; continue; fi
    case $a in
      -k) skip=1; continue ;;
      -r) seen=1 ;;
    esac
  fi
  set -- "$@" "$a"
done
exec {quoted} "$@"
"""


def cache_dir() -> Path:
    """The kit's own directory for udocker's proot wrappers: udocker/ in the kit's cache."""
    return kit_cache() / "udocker"


def wrapper_text(proot: str) -> str:
    return WRAPPER.format(proot=proot, quoted=shlex.quote(proot))


def wrapper_path(proot: str) -> Path:
    """Where the wrapper for ``proot`` lives: named by its contents, so one path is one wrapper."""
    digest = hashlib.sha256(wrapper_text(proot).encode()).hexdigest()[:16]
    return cache_dir() / f"proot-no-k-{digest}"


def write_wrapper(proot: str) -> Path:
    """The wrapper for ``proot``, written atomically where absent. Every rank executes it, so one
    already there is kept only if it is the kit's own (kit.ownfile: a regular file of the user's
    that nobody else can write, in directories of the user's alone) with the kit's bytes and
    executable: anything else at that path is refused, never replaced or run."""
    path, text = wrapper_path(proot), wrapper_text(proot).encode()
    own_dirs(path.parent, cache_base(), "proot wrapper")
    for _ in range(2):
        found = open_own_regular(path, len(text), "proot wrapper", executable=True)
        if found is None:
            try:
                atomic_write_text(path, text.decode(), perm=0o755, replace=False)
                return path
            except FileExistsError:  # another rank or check wrote it meanwhile: read that one
                continue
            except OSError as exc:
                raise KitError(
                    f"cannot write the proot wrapper ({exc.strerror})",
                    where=str(path),
                    fix=f"make {path.parent} writable",
                ) from None
        if found == text:
            return path
        raise KitError(
            "not the proot wrapper the kit writes",
            where=str(path),
            fix="remove it (the kit writes it again)",
        )
    raise KitError(f"{path}: cannot write the proot wrapper", fix=f"make {path.parent} writable")


def expand(value: str, env: dict[str, str]) -> str:
    """$NAME and ${NAME} from ``env`` (unset: empty), as ch-run expands its --set-env values."""
    return VAR.sub(lambda m: env.get(m[1] or m[2], ""), value)


def rank_environment(launch: Launch, image: str) -> dict[str, str]:
    """What each rank is given with --env: the image's environment, then the pair's settings (each
    expanded against what is set before it), then the pair's directories put in front (the image's
    value after them; none: no empty entry, which the loader would read as the working
    directory)."""
    if not launch.image_env:
        env = {}
    else:  # as the pair read it, else from the image now
        env = (
            dict(launch.environment) if launch.environment is not None else image_environment(image)
        )
    for key, value in launch.env_set.items():
        env[key] = expand(value, env)
    for key, dirs in launch.env_prepend.items():
        env[key] = ":".join(
            [*(expand(d, env) for d in dirs), *([env[key]] if env.get(key) else [])]
        )
    return env


class UdockerRuntime:
    name = "udocker"
    command = "udocker"  # what starts a rank, as people know it
    private_workdir = True  # udocker --location makes .mountpoints in the directory it starts in

    def settings(self, site: Site) -> Udocker:
        return site.container.udocker_settings

    def _head(self, site: Site) -> list[str]:
        s = self.settings(site)
        return [
            s.executable,
            *(["--allow-root"] if s.allow_root else []),
            "run",
            "--nobanner",
            "--pull=never",
            "--hostenv",
        ]

    def _options(self, launch: Launch, image: str) -> list[str]:
        volumes = [f"--volume={src}:{dst}" for src, dst in launch.binds]
        return volumes + [f"--env={k}={v}" for k, v in rank_environment(launch, image).items()]

    def run_args(self, launch: Launch, image: str, join: list[str] | None = None) -> list[str]:
        """``join`` is Charliecloud's and ignored."""
        return [*self._head(launch.site), f"--location={image}", *self._options(launch, image), "-"]

    def script_words(self, launch: Launch, image: str, *, srun: bool, group: str) -> list[str]:
        """``image`` is the image as the site sees it (a ~/ path is the job's $HOME); its
        environment is read now, from this machine's copy at that path."""
        location = (
            '"--location=${HOME}"/' + shlex.quote(image[2:])
            if image.startswith("~/")
            else shlex.quote(f"--location={image}")
        )
        return (
            [shlex.quote(w) for w in self._head(launch.site)]
            + [location]
            + [shlex.quote(w) for w in self._options(launch, image)]
            + ["-"]
        )

    def environment(self, site: Site, proot: str | None) -> dict[str, str]:
        """udocker's settings as the variables it reads (``proot``: the executable to give it)."""
        s = self.settings(site)
        env = {
            "UDOCKER_TARBALL": s.tarball or "",
            "UDOCKER_DIR": os.path.expanduser(s.dir),
            "UDOCKER_DEFAULT_EXECUTION_MODE": s.mode,
        }
        if proot is not None:
            env["UDOCKER_USE_PROOT_EXECUTABLE"] = proot
        return env

    def job_env(self, site: Site) -> list[str]:
        """udocker's variables for a job; the proot wrapper as this machine names it (the kit writes
        it with the run: `prepare`). A ~/ repository is the job's $HOME's."""
        s = self.settings(site)
        env = self.environment(site, str(wrapper_path(s.proot)) if s.proot else None)
        lines = [f"export {k}={shlex.quote(v)}" for k, v in env.items() if k != "UDOCKER_DIR"]
        repo = (
            '"${HOME}"/' + shlex.quote(s.dir[2:])
            if s.dir.startswith("~/")
            else shlex.quote(env["UDOCKER_DIR"])
        )
        return [*lines, f"export UDOCKER_DIR={repo}"]

    def job_tag(self, site: Site) -> bool:
        return False

    def prepare(self, site: Site) -> str | None:
        """The proot udocker is to run, with its wrapper written (None: udocker's own)."""
        s = self.settings(site)
        return str(write_wrapper(s.proot)) if s.proot else None

    def ready(self, site: Site, image: str, image_kind: str) -> None:
        s = self.settings(site)
        if os.geteuid() == 0 and not s.allow_root:
            raise KitError(f"site {site.name}: udocker refuses to run as root", fix=f"{FIX_ROOT}")
        if shutil.which(s.executable) is None:
            raise KitError(
                f"site {site.name}: "
                f"udocker not found (container.udocker.executable {s.executable!r})",
                fix=f"{FIX_INSTALL}",
            )
        if s.proot is not None and not (os.path.isfile(s.proot) and os.access(s.proot, os.X_OK)):
            raise KitError(
                f"site {site.name}: proot not found at {s.proot} (container.udocker.proot)",
                fix=f"{FIX_PROOT}",
            )
        if s.tarball is not None and not os.path.isfile(os.path.expanduser(s.tarball)):
            raise KitError(
                f"site {site.name}: "
                f"udocker's tools tarball {s.tarball} (container.udocker.tarball) is not a file",
                fix="copy the tarball there, or set tarball: null with a proot executable",
            )
        if image_kind != "dir":
            raise KitError(
                f"{image}: udocker runs a directory image (--location)",
                fix="convert it to one (kit image convert SRC OUT --site SITE, "
                "OUT without a suffix)",
            )

    def check_env(self, site: Site) -> dict[str, str]:
        return self.environment(site, self.prepare(site))

    def install_format(self, site: Site, install_as: str, source: str) -> str:
        """A directory, unpacked by the installer itself (a udocker site has no ch-convert):
        udocker runs no SquashFS image."""
        if install_as != "dir" or source.endswith(SQUASH):
            raise KitError(
                f"site {site.name}: udocker runs a directory image; "
                f"{source} cannot be installed as {install_as} there",
                fix="push the image as a tarball (kit image convert SRC OUT.tar.gz) "
                "with --install-as dir",
            )
        return "unpack"

    def rank_view(self, launch: Launch, image: str) -> Callable[[str], str]:
        """proot translates the paths a rank asks for, not the kernel's own texts: /proc/self/maps
        names each file by its host path. A host path is read through the deepest of the binds
        and the image root that holds it (a bind may hold the image directory itself: a path in the
        image is the image's); any other stays as the host names it."""
        root = os.path.realpath(os.path.expanduser(image))
        mounts = [(os.path.realpath(src), dst) for src, dst in launch.binds]
        if root != "/":
            mounts.append((root, "/"))
        mounts.sort(key=lambda m: -len(m[0].rstrip("/")))

        def view(path: str) -> str:
            for src, dst in mounts:
                if under(path, src):
                    rest = path[len(src.rstrip("/")) :]
                    return dst.rstrip("/") + rest if dst != "/" else rest or "/"
            return path

        return view


UDOCKER = UdockerRuntime()
