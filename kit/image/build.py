"""Build a site's training image from its recipe in images/ (outside the perimeter, where the
network is): the recipe is the one whose MPI the site's host MPI can replace, and its build
arguments come from the site config (where the host MPI's library dirs will be bound; the
site's other binds are made by `kit image convert --site`)."""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kit.atomic import remove_tree
from kit.boundedrun import run_bounded
from kit.code_commit import record_commit
from kit.data import shipped
from kit.errors import KitError
from kit.openmpi_abi import openmpi_rule
from kit.site import Site, load_site
from kit.site.model import FAMILY_OF_VENDOR

RECIPES = shipped("images")
# What the recipes COPY, staged from the installed kit when no --context is given.
CONTEXT_PACKAGES = ("kit", "gan3d")
SHIPPED_FOLDERS = ("site-configs", "slurm", "images")
# the wheel's build needs the last two
SHIPPED_FILES = (
    "constraints.txt",
    "constraints-itex.txt",  # the ITEX variant's pin list (--itex: the recipes' LOCK)
    "pyproject.toml",
    "README.md",
)
BUILDERS = ("buildah", "podman", "docker")
FORMATS = ("docker-archive", "oci-archive")
STORAGE_DRIVERS = ("overlay", "vfs")
# buildah's graph root for root when no --storage is given (containers-storage's default).
DEFAULT_GRAPH_ROOT = Path("/var/lib/containers/storage")
PROBE_TIMEOUT = 60  # seconds: `buildah info` answers in well under one
STOP_GRACE = 30  # seconds a builder has, after SIGTERM, to stop its step and unmount its storage
BUILD_ERRORS = 64 << 10  # bytes kept of a builder's stderr (a RUN step's pip log may be megabytes)
# the recipes' LOCK for the ITEX variant (scripts/lock.sh --itex)
ITEX_LOCK = "constraints-itex.txt"
DEFAULT_TAG = "gan3d:latest"
ITEX_TAG = "gan3d-itex:latest"  # the variant's own name in the builder's store
DEBIAN_OPENMPI = "4.1.4"  # gan3d-openmpi.Dockerfile's Open MPI without OPENMPI_VERSION (bookworm's)


@dataclass(frozen=True)
class BuildPlan:
    """The commands a build runs, in order; the last one writes ``part``, renamed to ``out``."""

    recipe: Path
    build_args: dict[str, str]
    commands: list[list[str]]
    out: Path
    part: Path
    staged: Path | None = None  # the context run_build assembles first (and removes after)
    storage_driver: str | None = None  # buildah's; None: the builder's own choice
    driver_reason: str = ""

    def shell(self) -> str:
        return "\n".join(" ".join(shlex.quote(w) for w in cmd) for cmd in self.commands)


def recipe_for(site: Site) -> Path:
    """images/gan3d-<ABI family>.Dockerfile: an image MPI of the host's ABI family."""
    family = FAMILY_OF_VENDOR[site.host_mpi.vendor]
    recipe = RECIPES / f"gan3d-{family}.Dockerfile"
    if not recipe.is_file():
        known = ", ".join(p.name for p in sorted(RECIPES.glob("*.Dockerfile"))) or "none"
        raise KitError(
            f"site {site.name}: host MPI {site.host_mpi.vendor} is of the {family} ABI family and "
            f"images/ has no {recipe.name} (recipes: {known})",
            fix="write one whose MPI is of that family, or pass --recipe FILE",
        )
    return recipe


def site_build_args(site: Site) -> dict[str, str]:
    """The recipe's ARGs the site decides: where the host MPI's library dirs are bound."""
    args = {
        "HOSTMPI_TARGET": site.container.mpi_target.rstrip("/"),
        "HOSTMPI_DIRS": str(len(site.host_mpi.lib_dirs)),
    }
    if (
        FAMILY_OF_VENDOR[site.host_mpi.vendor] == "mpich"
    ):  # the libmpich.so.12 alias's target dir, if any:
        # a host that names its library libmpich itself
        # (Debian's MPICH) gets its own from the pair's links
        host_soname = site.host_mpi.soname or "libmpi.so.12"
        args["HOSTMPI_LIBDIR"] = "none" if host_soname.startswith("libmpich.") else "lib0"
    return args


def check_image_mpi(site: Site, args: dict[str, str]) -> None:
    """Refuse, before a 20-minute build, an Open MPI recipe default the site's host cannot
    replace.
    """
    if args.get("OPENMPI_VERSION"):
        return
    refused: list[str] = []
    openmpi_rule(
        site.host_mpi.version,
        DEBIAN_OPENMPI,
        "full",
        reason=lambda _r: None,
        warn=lambda _w: None,
        refuse=refused.append,
    )
    if refused:
        raise KitError(
            f"site {site.name}: the recipe's default Open MPI (Debian's {DEBIAN_OPENMPI}) "
            f"cannot be replaced by the host's: {refused[0]}",
            fix=f"--build-arg OPENMPI_VERSION={site.host_mpi.version} --build-arg "
            "OPENMPI_SHA256=<that release tarball's sha256>",
        )


def which_builder(preferred: str | None = None) -> str:
    names = [preferred] if preferred else list(BUILDERS)
    for name in names:
        if shutil.which(name):
            return name
    raise KitError(
        f"no image builder found ({', '.join(names)})",
        fix="install buildah (no daemon, no root needed) or name another with --builder",
    )


def _probe_parent(graph_root: Path) -> Path:
    """The nearest existing directory beside graph_root: outside the store, on its filesystem."""
    path = graph_root.parent
    while not path.is_dir():
        path = path.parent
    return path


def overlay_works(graph_root: Path) -> tuple[bool, str]:
    """Whether buildah can use the kernel's overlay on graph_root's filesystem, and why not.
    Asked of buildah itself in a throwaway root beside graph_root (same filesystem): only the
    storage library knows every case it refuses (not root, no overlay module, overlay over
    overlayfs, no d_type), and a probe in the real root would touch a store we did not make."""
    if os.geteuid() != 0:
        return False, "not root (rootless overlay needs fuse-overlayfs)"
    try:
        probe = Path(tempfile.mkdtemp(prefix=".kit-overlay-probe.", dir=_probe_parent(graph_root)))
    except OSError as err:
        return False, f"cannot probe beside {graph_root}: {err.strerror}"
    try:
        done = run_bounded(
            [
                "buildah",
                "--root",
                str(probe / "root"),
                "--runroot",
                str(probe / "run"),
                "--storage-driver",
                "overlay",
                "info",
            ],
            timeout=PROBE_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        return False, f"`buildah info` with overlay did not answer in {PROBE_TIMEOUT} s"
    finally:
        remove_tree(probe)  # mkdtemp: ours
    if done.returncode:
        why = next((line for line in done.err.splitlines() if line.startswith("Error:")), "")
        return False, why.removeprefix("Error: ")[:200] or f"`buildah info` exit {done.returncode}"
    return True, "root build host, kernel overlay works on the storage's filesystem"


def choose_storage_driver(requested: str | None, graph_root: Path) -> tuple[str, str]:
    """overlay where it works (layers are shared, not copied: far faster and smaller than vfs),
    else vfs, which works everywhere; an explicit --storage-driver is taken as given."""
    if requested:
        if requested not in STORAGE_DRIVERS:
            raise KitError(
                f"--storage-driver {requested}: not a driver the build takes",
                fix=f"use one of {', '.join(STORAGE_DRIVERS)}",
            )
        return requested, "--storage-driver"
    works, why = overlay_works(graph_root)
    return ("overlay", why) if works else ("vfs", f"overlay unavailable: {why}")


def parse_build_args(items: list[str]) -> dict[str, str]:
    """--build-arg KEY=VALUE words as a mapping (a later KEY wins)."""
    extra = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise KitError(f"--build-arg {item!r}: not KEY=VALUE", fix="write KEY=VALUE")
        extra[key] = value
    return extra


def plan_build(
    site: Site | str,
    out: str | os.PathLike,
    *,
    recipe: str | os.PathLike | None = None,
    context: str | os.PathLike | None = None,
    builder: str | None = None,
    fmt: str = "docker-archive",
    tag: str = DEFAULT_TAG,
    extra_args: dict[str, str] | None = None,
    storage: str | os.PathLike | None = None,
    storage_driver: str | None = None,
    itex: bool = False,
) -> BuildPlan:
    """The builder's commands for ``site``; user ``extra_args`` override the site's. ``itex``: the
    variant whose stack comes from constraints-itex.txt (full tensorflow and Intel Extension for
    TensorFlow in place of tensorflow-cpu), tagged gan3d-itex unless a tag is given."""
    site = load_site(site)
    recipe = Path(recipe) if recipe else recipe_for(site)
    if not recipe.is_file():
        raise KitError(f"--recipe {recipe}: no such file", fix="check the path")
    if fmt not in FORMATS:
        raise KitError(
            f"--format {fmt}: not a format the build writes", fix=f"use one of {', '.join(FORMATS)}"
        )
    args = {**site_build_args(site), **({"LOCK": ITEX_LOCK} if itex else {}), **(extra_args or {})}
    if itex and args["LOCK"] != ITEX_LOCK:
        raise KitError(
            f"--itex with --build-arg LOCK={args['LOCK']}: --itex builds from {ITEX_LOCK}",
            fix="drop one of them",
        )
    if itex and tag == DEFAULT_TAG:
        tag = ITEX_TAG
    # its default MPI is known
    if recipe.resolve() == (RECIPES / "gan3d-openmpi.Dockerfile").resolve():
        check_image_mpi(site, args)
    out = Path(out).resolve()
    part = out.with_name(f".{out.name}.part")
    staged = None if context else out.with_name(f".{out.name}.context")
    context = context or staged
    builder = which_builder(builder)
    flags = [f"--build-arg={k}={v}" for k, v in args.items()]
    driver, why = None, ""
    if builder != "buildah" and (storage_driver or storage):
        raise KitError(
            "--storage-driver/--storage apply to buildah, "
            f"not {builder} (its own configuration decides)",
            fix="drop them or use --builder buildah",
        )
    if builder == "buildah":
        storage = Path(storage).resolve() if storage else None
        driver, why = choose_storage_driver(
            storage_driver, storage / "root" if storage else DEFAULT_GRAPH_ROOT
        )
        store = ["--root", f"{storage}/root", "--runroot", f"{storage}/run"] if storage else []
        store += ["--storage-driver", driver]
        # --force-rm: a failed step's container (and its
        # overlay mount) goes too, not only a good one's
        commands = [
            [
                "buildah",
                *store,
                "bud",
                "--isolation",
                "chroot",
                "--layers",
                "--force-rm",
                "-f",
                str(recipe),
                "-t",
                tag,
                *flags,
                str(context),
            ],
            ["buildah", *store, "push", tag, f"{fmt}:{part}:{tag}"],
        ]
    else:  # podman and docker share the CLI
        save = ["--format", fmt] if builder == "podman" else []
        if builder == "docker" and fmt != "docker-archive":
            raise KitError(
                "docker save writes docker-archive only",
                fix="--format docker-archive or --builder buildah",
            )
        commands = [
            [builder, "build", "--force-rm", "-f", str(recipe), "-t", tag, *flags, str(context)],
            [builder, "save", *save, "-o", str(part), tag],
        ]
    return BuildPlan(
        recipe=recipe,
        build_args=args,
        commands=commands,
        out=out,
        part=part,
        staged=staged,
        storage_driver=driver,
        driver_reason=why,
    )


def stage_context(dest: Path) -> Path:
    """The build context the recipes expect: a source tree `pip wheel` builds the kit's wheel from
    (pyproject.toml, README.md, kit/ with kit/_data as copies, gan3d/, the shipped folders and the
    pin list), copied from the installed kit: a wheel installed anywhere builds the same image as a
    checkout, and no venv, build dir or other checkout file reaches the builder."""
    from importlib import resources

    dest.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in CONTEXT_PACKAGES:  # copytree follows kit/_data's links: the context holds copies
        shutil.copytree(Path(str(resources.files(package))), dest / package, ignore=ignore)
    for folder in SHIPPED_FOLDERS:
        shutil.copytree(shipped(folder), dest / folder, ignore=ignore)
    for name in SHIPPED_FILES:
        shutil.copyfile(shipped(name), dest / name)
    # the image has no .git: its results name the commit from this record
    record_commit(dest / "kit")
    return dest


def run_build(plan: BuildPlan, echo: Callable[[str], None] | None = None) -> Path:
    """Run the plan; OUT appears only when the archive is complete (temp + rename)."""
    plan.out.parent.mkdir(parents=True, exist_ok=True)
    for leftover, kind in ((plan.part, stat.S_ISREG), (plan.staged, stat.S_ISDIR)):
        if leftover and os.path.lexists(leftover) and not kind(os.lstat(leftover).st_mode):
            raise KitError(
                f"{leftover}: the kit builds here, "
                "and this is not the file or directory a killed build of it leaves (a link, or another kind)",
                fix="move it away",
            )
    # a killed build's leftover: `buildah push` will not overwrite it
    plan.part.unlink(missing_ok=True)
    if plan.staged:
        remove_tree(plan.staged)  # a killed build's context: the name is the kit's own, beside OUT
        stage_context(plan.staged)
    try:
        for cmd in plan.commands:
            if echo:
                echo(" ".join(shlex.quote(w) for w in cmd))
            # A stop (Ctrl-C, kill, scancel) sends the builder SIGTERM, so that it stops its RUN
            # step and unmounts its storage (SIGKILL at once left both behind); SIGKILL after
            # STOP_GRACE s or a second Ctrl-C.
            done = run_bounded(
                cmd,
                timeout=None,
                stdout=None if echo else subprocess.DEVNULL,
                grace=STOP_GRACE,
                limit=BUILD_ERRORS,
            )
            if done.returncode:
                raise KitError(
                    f"{cmd[0]} failed (exit {done.returncode}) building {plan.recipe.name}: "
                    f"{done.err.strip()[-1500:]}",
                    fix=f"correct what {cmd[0]} names, then build again",
                )
        with open(plan.part, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(plan.part, plan.out)
    finally:
        plan.part.unlink(missing_ok=True)
        if plan.staged:
            remove_tree(plan.staged)
    return plan.out
