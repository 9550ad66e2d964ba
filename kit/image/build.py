"""Build a site's training image from its recipe in images/ (outside the perimeter, where the
network is): the recipe is the one whose MPI the site's host MPI can replace, and its build
arguments come from the site config (where the host MPI's library dirs will be bound; the
site's other binds are made by `kit image convert --site`)."""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kit.data import shipped
from kit.errors import KitError
from kit.mpi.abi import FAMILY_OF_VENDOR
from kit.site import Site, load_site

RECIPES = shipped("images")
# What the recipes COPY, staged from the installed kit when no --context is given.
CONTEXT_PACKAGES = ("kit", "gan3d")
BUILDERS = ("buildah", "podman", "docker")
FORMATS = ("docker-archive", "oci-archive")


@dataclass(frozen=True)
class BuildPlan:
    """The commands a build runs, in order; the last one writes ``part``, renamed to ``out``."""

    recipe: Path
    build_args: dict[str, str]
    commands: list[list[str]]
    out: Path
    part: Path
    staged: Path | None = None  # the context run_build assembles first (and removes after)

    def shell(self) -> str:
        return "\n".join(" ".join(shlex.quote(w) for w in cmd) for cmd in self.commands)


def recipe_for(site: Site) -> Path:
    """images/gan3d-<ABI family>.Dockerfile: an image MPI of the host's ABI family."""
    family = FAMILY_OF_VENDOR[site.host_mpi.vendor]
    recipe = RECIPES / f"gan3d-{family}.Dockerfile"
    if not recipe.is_file():
        known = ", ".join(p.name for p in sorted(RECIPES.glob("*.Dockerfile"))) or "none"
        raise KitError(f"site {site.name}: host MPI {site.host_mpi.vendor} is of the {family} ABI family and "
                       f"images/ has no {recipe.name} (recipes: {known}); fix: write one whose MPI is of that "
                       "family, or pass --recipe FILE")
    return recipe


def site_build_args(site: Site) -> dict[str, str]:
    """The recipe's ARGs the site decides: where the host MPI's library dirs are bound."""
    return {"HOSTMPI_TARGET": site.container.mpi_target.rstrip("/"),
            "HOSTMPI_DIRS": str(len(site.host_mpi.lib_dirs)), "HOSTMPI_LIBDIR": "lib0"}


def which_builder(preferred: str | None = None) -> str:
    names = [preferred] if preferred else list(BUILDERS)
    for name in names:
        if shutil.which(name):
            return name
    raise KitError(f"no image builder found ({', '.join(names)}); fix: install buildah (no daemon, no root "
                   "needed) or name another with --builder")


def plan_build(site: Site | str, out: str | os.PathLike, *, recipe: str | os.PathLike | None = None,
               context: str | os.PathLike | None = None, builder: str | None = None, fmt: str = "docker-archive",
               tag: str = "gan3d:latest", extra_args: dict[str, str] | None = None,
               storage: str | os.PathLike | None = None) -> BuildPlan:
    """The builder's commands for ``site``; user ``extra_args`` override the site's."""
    site = load_site(site)
    recipe = Path(recipe) if recipe else recipe_for(site)
    if not recipe.is_file():
        raise KitError(f"--recipe {recipe}: no such file")
    if fmt not in FORMATS:
        raise KitError(f"--format {fmt}: use one of {', '.join(FORMATS)}")
    args = {**site_build_args(site), **(extra_args or {})}
    out = Path(out).resolve()
    part = out.with_name(f".{out.name}.part")
    staged = None if context else out.with_name(f".{out.name}.context")
    context = context or staged
    builder = which_builder(builder)
    flags = [f"--build-arg={k}={v}" for k, v in args.items()]
    if builder == "buildah":
        store = ["--root", f"{storage}/root", "--runroot", f"{storage}/run"] if storage else []
        store += ["--storage-driver", "vfs"]
        commands = [["buildah", *store, "bud", "--isolation", "chroot", "--layers", "-f", str(recipe), "-t", tag,
                     *flags, str(context)],
                    ["buildah", *store, "push", tag, f"{fmt}:{part}:{tag}"]]
    else:  # podman and docker share the CLI
        save = ["--format", fmt] if builder == "podman" else []
        if builder == "docker" and fmt != "docker-archive":
            raise KitError("docker save writes docker-archive only; fix: --format docker-archive or --builder buildah")
        commands = [[builder, "build", "-f", str(recipe), "-t", tag, *flags, str(context)],
                    [builder, "save", *save, "-o", str(part), tag]]
    return BuildPlan(recipe, args, commands, out, part, staged)


def stage_context(dest: Path) -> Path:
    """The build context the recipes expect (kit/, gan3d/, site-configs/, constraints.txt), copied
    from the installed kit: a wheel installed anywhere builds the same image as a checkout."""
    from importlib import resources

    dest.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in CONTEXT_PACKAGES:
        shutil.copytree(Path(str(resources.files(package))), dest / package, ignore=ignore)
    shutil.copytree(shipped("site-configs"), dest / "site-configs", ignore=ignore)
    shutil.copyfile(shipped("constraints.txt"), dest / "constraints.txt")
    return dest


def run_build(plan: BuildPlan, echo: Callable[[str], None] | None = None) -> Path:
    """Run the plan; OUT appears only when the archive is complete (temp + rename)."""
    plan.out.parent.mkdir(parents=True, exist_ok=True)
    plan.part.unlink(missing_ok=True)  # a killed build's leftover: `buildah push` will not overwrite it
    if plan.staged:
        shutil.rmtree(plan.staged, ignore_errors=True)  # ours, from a killed build
        stage_context(plan.staged)
    try:
        for cmd in plan.commands:
            if echo:
                echo(" ".join(shlex.quote(w) for w in cmd))
            done = subprocess.run(cmd, stdout=None if echo else subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True)
            if done.returncode:
                raise KitError(f"{cmd[0]} failed (exit {done.returncode}) building {plan.recipe.name}: "
                               f"{done.stderr.strip()[-1500:]}")
        with open(plan.part, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(plan.part, plan.out)
    finally:
        plan.part.unlink(missing_ok=True)
        if plan.staged:
            shutil.rmtree(plan.staged, ignore_errors=True)
    return plan.out

