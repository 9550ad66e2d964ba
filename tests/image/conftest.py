"""Session fixtures: real images built once (and cached across runs) with umoci/skopeo/buildah."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import require
from tests.image.builders import buildah_image, cached, rich_image
from tests.image.chtools import need


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
