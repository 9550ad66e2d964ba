"""`kit image build`: the site picks the recipe and its build arguments; buildah builds for real.
The shipped recipe needs the network (apt, PyPI) and ~15 minutes, so the real build here uses a
small recipe with the same ARGs; the shipped one is checked as a plan (--dry-run)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest
import yaml

from kit.cli import main
from kit.errors import KitError
from kit.image import convert
from kit.image.build import RECIPES, plan_build, recipe_for, run_build, site_build_args
from kit.site import load_site
from tests.image.builders import RECIPE
from tests.support.parts import require


def test_the_site_decides_the_build_arguments_and_the_image_carries_them(context, tmp_path):
    require(shutil.which("buildah") is not None, "buildah not installed (scripts/setup.sh)")
    out = tmp_path / "out" / "gan3d.tar"
    plan = plan_build(
        "supermuc-ng",
        out,
        recipe=context / "Dockerfile",
        context=context,
        builder="buildah",
        storage=tmp_path / "storage",
        extra_args={"HOSTMPI_LIBDIR": "lib2"},
    )
    assert plan.build_args == {
        "HOSTMPI_TARGET": "/opt/hostmpi",
        "HOSTMPI_DIRS": "3",
        "HOSTMPI_LIBDIR": "lib2",
    }
    assert run_build(plan) == out and not plan.part.exists()
    with tarfile.open(out) as tf:
        assert "manifest.json" in tf.getnames()  # a docker-archive, as `docker save` writes it
    root = tmp_path / "root"
    convert(out, root, fmt="dir")
    assert sorted(p.name for p in (root / "opt/hostmpi").iterdir()) == ["lib0", "lib1", "lib2"]
    assert (root / "libdir").read_text() == "lib2\n"


def test_a_failing_build_names_the_builder_and_writes_nothing(context, tmp_path):
    require(shutil.which("buildah") is not None, "buildah not installed (scripts/setup.sh)")
    (context / "Dockerfile").write_text(RECIPE + "RUN echo no-such-package-here >&2; exit 3\n")
    out = tmp_path / "gan3d.tar"
    plan = plan_build(
        "laptop",
        out,
        recipe=context / "Dockerfile",
        context=context,
        builder="buildah",
        storage=tmp_path / "storage",
    )
    with pytest.raises(
        KitError, match=r"buildah failed \(exit \d+\) building Dockerfile: .*no-such-package-here"
    ):
        run_build(plan)
    assert not out.exists() and not plan.part.exists()
    mounts = Path("/proc/self/mounts").read_text()
    assert str(tmp_path / "storage") not in mounts, "the failed step's container is still mounted"


def test_the_recipe_follows_the_host_mpi_family(tmp_path):
    assert (
        recipe_for(load_site("supermuc-ng")) == RECIPES / "gan3d-mpich.Dockerfile"
    )  # Intel MPI: MPICH ABI
    assert recipe_for(load_site("openmpi-cluster")) == RECIPES / "gan3d-openmpi.Dockerfile"
    site = yaml.safe_load((RECIPES.parent / "site-configs" / "laptop.yaml").read_text())
    site.update(name="cray-site")
    site["host_mpi"]["vendor"] = "cray-mpich"
    assert recipe_for(load_site(write_yaml(tmp_path, site))) == RECIPES / "gan3d-mpich.Dockerfile"


def write_yaml(directory, site):
    path = directory / f"{site['name']}.yaml"
    path.write_text(yaml.safe_dump(site))
    return path


def test_an_open_mpi_site_gets_the_open_mpi_recipe_and_its_version_checked(tmp_path, capsys):
    require(shutil.which("buildah") is not None, "buildah not installed (scripts/setup.sh)")
    assert (
        main(
            [
                "image",
                "build",
                str(tmp_path / "g.tar"),
                "--site",
                "openmpi-cluster",
                "--builder",
                "buildah",
                "--dry-run",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "images/gan3d-openmpi.Dockerfile" in out and "--build-arg=HOSTMPI_DIRS=2" in out
    assert "HOSTMPI_LIBDIR" not in out  # the MPICH alias's argument; nothing to alias for Open MPI
    site = yaml.safe_load((RECIPES.parent / "site-configs" / "openmpi-cluster.yaml").read_text())
    site.update(name="ompi-old")
    site["host_mpi"]["version"] = (
        "4.0.7"  # older than bookworm's 4.1.4: that image would be refused
    )
    path = write_yaml(tmp_path, site)
    with pytest.raises(
        KitError,
        match=r"site ompi-old: "
        r"the recipe's default Open MPI \(Debian's 4\.1\.4\) cannot be replaced by the host's: "
        r".*older than the image's 4\.1\.4.*; fix: "
        r"--build-arg OPENMPI_VERSION=4\.0\.7 --build-arg OPENMPI_SHA256=",
    ):
        plan_build(path, tmp_path / "g.tar", builder="buildah", storage_driver="vfs")
    plan = plan_build(
        path,
        tmp_path / "g.tar",
        builder="buildah",
        storage_driver="vfs",
        extra_args={"OPENMPI_VERSION": "4.0.7", "OPENMPI_SHA256": "0" * 64},
    )
    assert "--build-arg=OPENMPI_VERSION=4.0.7" in plan.commands[0]


def test_the_open_mpi_recipe_builds_mpi4py_and_horovod_against_its_own_open_mpi():
    text = (RECIPES / "gan3d-openmpi.Dockerfile").read_text()
    build, final = text.split("\nFROM ${BASE}\n")
    assert (
        "libopenmpi-dev" in build
        and "MPICC=mpicc PIP_NO_BINARY=mpi4py" in build
        and "HOROVOD_WITH_MPI=1" in build
    )
    assert "sha256sum -c" in build and "--require-hashes" in build
    assert not re.search(
        r"-dev\b|build-essential|cmake|\bcurl\b", final
    )  # no toolchain on the site
    for mount in ("ompi-components", "ompi-help", "pmix-components"):  # kit.mpi.openmpi_launch.DIRS
        assert f'"${{HOSTMPI_TARGET}}/{mount}"' in final


def test_cli_dry_run_prints_the_commands_with_the_shipped_recipe(tmp_path, capsys):
    require(shutil.which("buildah") is not None, "buildah not installed (scripts/setup.sh)")
    assert (
        main(
            [
                "image",
                "build",
                str(tmp_path / "g.tar"),
                "--site",
                "supermuc-ng",
                "--builder",
                "buildah",
                "--build-arg",
                "BASE=debian:bookworm-slim",
                "--dry-run",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "images/gan3d-mpich.Dockerfile" in out and "--build-arg=HOSTMPI_DIRS=3" in out
    assert (
        "--build-arg=BASE=debian:bookworm-slim" in out
        and f"docker-archive:{tmp_path}/.g.tar.part:" in out
    )
    assert not list(tmp_path.iterdir())
    assert (
        main(
            [
                "image",
                "build",
                str(tmp_path / "g.tar"),
                "--site",
                "laptop",
                "--build-arg",
                "NOEQUALS",
                "--dry-run",
            ]
        )
        == 1
    )
    assert "--build-arg 'NOEQUALS': not KEY=VALUE; fix: write KEY=VALUE" in capsys.readouterr().err


@pytest.fixture
def on_overlayfs(tmp_path):
    """A directory on an overlayfs mount: the kernel's overlay cannot stack on it, so buildah's
    overlay driver refuses such a storage (as on a build host that is itself a container)."""
    require(os.geteuid() == 0, "mounting an overlayfs needs root")
    layers = tmp_path / "ovl"
    for name in ("lower", "upper", "work", "merged"):
        (layers / name).mkdir(parents=True)
    mounted = subprocess.run(
        [
            "mount",
            "-t",
            "overlay",
            "overlay",
            "-o",
            f"lowerdir={layers}/lower,upperdir={layers}/upper,workdir={layers}/work",
            str(layers / "merged"),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    require(mounted.returncode == 0, f"cannot mount an overlayfs here: {mounted.stderr.strip()}")
    yield layers / "merged"
    subprocess.run(["umount", str(layers / "merged")], check=True, timeout=30)


def test_overlay_where_it_works_else_vfs_and_the_probe_leaves_nothing(tmp_path, on_overlayfs):
    require(shutil.which("buildah") is not None, "buildah not installed (scripts/setup.sh)")
    plan = plan_build("laptop", tmp_path / "a.tar", builder="buildah", storage=tmp_path / "storage")
    assert plan.storage_driver == "overlay" and "root build host" in plan.driver_reason
    assert all(cmd[cmd.index("--storage-driver") + 1] == "overlay" for cmd in plan.commands)
    plan = plan_build(
        "laptop", tmp_path / "b.tar", builder="buildah", storage=on_overlayfs / "storage"
    )
    assert plan.storage_driver == "vfs" and "not supported over overlayfs" in plan.driver_reason
    assert all(cmd[cmd.index("--storage-driver") + 1] == "vfs" for cmd in plan.commands)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ovl"] and not list(
        on_overlayfs.iterdir()
    )
    plan = plan_build(
        "laptop", tmp_path / "c.tar", builder="buildah", storage="/proc/kit-no-such/storage"
    )
    assert (
        plan.storage_driver == "vfs"
        and "cannot probe beside /proc/kit-no-such/storage/root" in plan.driver_reason
    )


def test_storage_driver_overrides_the_choice(tmp_path, on_overlayfs, capsys):
    require(shutil.which("buildah") is not None, "buildah not installed (scripts/setup.sh)")
    plan = plan_build(
        "laptop",
        tmp_path / "a.tar",
        builder="buildah",
        storage=on_overlayfs / "s",
        storage_driver="overlay",
    )
    assert (plan.storage_driver, plan.driver_reason) == ("overlay", "--storage-driver")
    assert (
        main(
            [
                "image",
                "build",
                str(tmp_path / "g.tar"),
                "--site",
                "laptop",
                "--builder",
                "buildah",
                "--storage-driver",
                "vfs",
                "--storage",
                str(tmp_path / "st"),
                "--dry-run",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "storage driver vfs (--storage-driver)" in out
    assert (
        out.count(
            f"buildah --root {tmp_path}/st/root --runroot {tmp_path}/st/run --storage-driver vfs "
        )
        == 2
    )
    with pytest.raises(KitError, match=r"--storage-driver btrfs: .*; fix: use one of overlay, vfs"):
        plan_build("laptop", tmp_path / "a.tar", builder="buildah", storage_driver="btrfs")
    with pytest.raises(SystemExit):
        main(
            [
                "image",
                "build",
                str(tmp_path / "g.tar"),
                "--site",
                "laptop",
                "--storage-driver",
                "zfs",
                "--dry-run",
            ]
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ovl"]


def test_storage_options_are_refused_for_a_builder_that_ignores_them(tmp_path):
    require(shutil.which("docker") is not None, "docker CLI not installed")
    with pytest.raises(KitError, match=r"--storage-driver/--storage apply to buildah, not docker"):
        plan_build("laptop", tmp_path / "a.tar", builder="docker", storage_driver="vfs")


def test_a_build_host_that_is_not_root_gets_vfs():
    """As an unprivileged user the overlay driver needs a helper (fuse-overlayfs): vfs."""
    require(
        shutil.which("buildah") is not None and shutil.which("setpriv") is not None,
        "buildah, setpriv",
    )
    require(os.geteuid() == 0, "dropping to another user needs root")
    with tempfile.TemporaryDirectory() as home:  # pytest's tmp_path is root's only
        os.chmod(home, 0o777)
        code = (
            "from kit.image.build import plan_build; "
            f"p = plan_build('laptop', {home + '/a.tar'!r}, builder='buildah', storage={home + '/s'!r}); "
            "print(p.storage_driver, p.driver_reason)"
        )
        done = subprocess.run(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                sys.executable,
                "-c",
                code,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "HOME": home},
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("vfs overlay unavailable: not root") and not os.listdir(home)


def _recipe_run(marker: str) -> str:
    """The shell command of the shipped MPICH recipe's RUN step that starts with ``marker``."""
    lines = (RECIPES / "gan3d-mpich.Dockerfile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"RUN {marker}"))
    command = []
    for line in lines[start:]:
        command.append(line.removeprefix("RUN ").rstrip("\\"))
        if not line.endswith("\\"):
            return "\n".join(command)
    raise AssertionError("unterminated RUN step")


@pytest.mark.parametrize("site, alias", [("supermuc-ng", "../lib0/libmpi.so.12"), ("laptop", None)])
def test_the_mpich_recipe_makes_the_intel_alias_only_for_a_libmpi_host(site, alias, tmp_path):
    """A Debian-MPICH host (libmpich.so.12 in a system dir) gets no alias in the image: the pair links
    libmpich.so.12 to the host's own, and an alias to libmpi.so.12 would be in its way. The recipe's
    step itself runs here, in sh, with the arguments the site decides."""
    args = site_build_args(load_site(site))
    env = {"PATH": os.environ["PATH"], **args, "HOSTMPI_TARGET": str(tmp_path / "opt/hostmpi")}
    subprocess.run(["sh", "-c", _recipe_run("set -e; i=0;")], env=env, check=True, timeout=30)
    link = tmp_path / "opt/hostmpi/compat/libmpich.so.12"
    assert (os.readlink(link) if link.is_symlink() else None) == alias
    assert (tmp_path / "opt/hostmpi/lib0").is_dir()
