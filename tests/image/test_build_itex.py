"""`kit image build --itex`: the image variant whose Python stack comes from constraints-itex.txt
(full tensorflow and Intel Extension for TensorFlow). The shipped recipes take the pin list as
their LOCK build argument; a small recipe with the same COPY is built for real with buildah."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from kit.cli import main
from kit.errors import KitError
from kit.image import convert
from kit.image.build import ITEX_LOCK, RECIPES, plan_build, stage_context
from tests.image.builders import busybox_rootfs
from tests.support.parts import require

RECIPE = """FROM scratch
ADD rootfs.tar /
ARG LOCK=constraints.txt
COPY ${LOCK} /lock.txt
"""


@pytest.mark.parametrize("recipe", ["gan3d-mpich.Dockerfile", "gan3d-openmpi.Dockerfile"])
def test_the_shipped_recipes_install_the_stack_from_the_lock_argument(recipe):
    build = (RECIPES / recipe).read_text().split("\nFROM ${BASE}\n")[0]
    assert "\nARG LOCK=constraints.txt\nCOPY ${LOCK} /opt/gan3d/constraints.txt\n" in build
    # the stack and Horovod are both read from the copied list, whichever it was
    assert len(re.findall(r"pins\.py requirements /opt/gan3d/constraints\.txt", build)) == 2


def test_the_staged_context_carries_both_pin_lists(tmp_path):
    ctx = stage_context(tmp_path / "ctx")
    itex = (ctx / ITEX_LOCK).read_text()
    assert "\ntensorflow==2.15.1 " in itex and "\ntensorflow-cpu==" not in itex
    assert "\ntensorflow-cpu==2.15.1 " in (ctx / "constraints.txt").read_text()


def test_itex_sets_the_lock_and_the_tag_and_refuses_another_lock(tmp_path):
    require(shutil.which("buildah") is not None, "buildah not installed (scripts/setup.sh)")
    plan = plan_build(
        "laptop", tmp_path / "g.tar", builder="buildah", storage_driver="vfs", itex=True
    )
    assert plan.build_args["LOCK"] == ITEX_LOCK
    bud, push = plan.commands
    assert f"--build-arg=LOCK={ITEX_LOCK}" in bud and "gan3d-itex:latest" in bud
    assert push[-1].endswith(":gan3d-itex:latest")
    plain = plan_build("laptop", tmp_path / "g.tar", builder="buildah", storage_driver="vfs")
    assert "LOCK" not in plain.build_args and "gan3d:latest" in plain.commands[0]
    with pytest.raises(KitError, match="--itex builds from constraints-itex.txt"):
        plan_build(
            "laptop",
            tmp_path / "g.tar",
            builder="buildah",
            storage_driver="vfs",
            itex=True,
            extra_args={"LOCK": "constraints.txt"},
        )


def test_cli_dry_run_with_itex_names_the_lock(tmp_path, capsys):
    require(shutil.which("buildah") is not None, "buildah not installed (scripts/setup.sh)")
    argv = ["image", "build", str(tmp_path / "g.tar"), "--site", "laptop", "--builder", "buildah"]
    assert main([*argv, "--storage-driver", "vfs", "--itex", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "LOCK=constraints-itex.txt" in out and "gan3d-itex:latest" in out
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_a_build_with_itex_copies_the_itex_pin_list_into_the_image(tmp_path):
    require(shutil.which("buildah") is not None, "buildah not installed (scripts/setup.sh)")
    ctx = stage_context(tmp_path / "ctx")
    busybox_rootfs(tmp_path / "rootfs")
    subprocess.run(
        ["tar", "-C", str(tmp_path / "rootfs"), "-cf", str(ctx / "rootfs.tar"), "."], check=True
    )
    (ctx / "Dockerfile").write_text(RECIPE)
    out = tmp_path / "out" / "itex.tar"
    plan = plan_build(
        "laptop",
        out,
        recipe=ctx / "Dockerfile",
        context=ctx,
        builder="buildah",
        storage=tmp_path / "storage",
        storage_driver="vfs",
        itex=True,
    )
    from kit.image.build import run_build

    assert run_build(plan) == out
    root = tmp_path / "root"
    convert(out, root, fmt="dir")
    assert (root / "lock.txt").read_bytes() == (ctx / ITEX_LOCK).read_bytes()
