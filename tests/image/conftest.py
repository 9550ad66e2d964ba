"""Fixtures of the image tests: real images built once (session; cached across runs) with
umoci/skopeo/buildah, and a build context for a recipe."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.image.builders import RECIPE, buildah_image, busybox_rootfs, cached, rich_image
from tests.image.chtools import need
from tests.support.parts import require


@pytest.fixture(scope="session")
def rich() -> Path:
    """OCI layout, oci.tar, docker.tar, oci-zstd and the umoci reference unpack."""
    need("umoci", "skopeo")
    require(os.geteuid() == 0, "building the test image makes device nodes: needs root")
    return cached(rich_image)


@pytest.fixture(scope="session")
def built() -> Path:
    """A buildah bud --layers image as docker.tar, oci.tar, oci/ and its reference unpack."""
    need("buildah", "skopeo", "umoci")
    return cached(buildah_image)


@pytest.fixture
def context(tmp_path):
    ctx = tmp_path / "ctx"
    busybox_rootfs(ctx / "rootfs")
    subprocess.run(
        ["tar", "-C", str(ctx / "rootfs"), "-cf", str(ctx / "rootfs.tar"), "."], check=True
    )
    (ctx / "Dockerfile").write_text(RECIPE)
    return ctx
