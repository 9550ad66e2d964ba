"""A SIF travels in a bundle like the other images: its .sha256 checked as it is copied, every
checker of the bundle verifying it on the medium (how they name a damaged file: test_bundle.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kit.errors import KitError
from kit.transfer import bundle
from tests.support.transfer import checkers
from tests.transfer.sifs import random_sif


def test_a_sif_and_its_sidecars_are_bundled_and_verified(tmp_path, repo):
    image = random_sif(tmp_path / "src" / "gan3d.sif")
    out = tmp_path / "usb" / "b"
    done = subprocess.run(
        [sys.executable, "-m", "kit", "transfer", "bundle", str(image), "--dir", str(out)],
        capture_output=True,
        text=True,
        cwd=repo,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("gan3d")) == [
        "gan3d.sif",
        "gan3d.sif.pair.yaml",
        "gan3d.sif.sha256",
    ]
    assert (out / "gan3d.sif").read_bytes() == image.read_bytes()
    assert all(code == 0 for code, _ in checkers(out, repo).values())


def test_a_sif_that_disagrees_with_its_recorded_sha256_is_refused(tmp_path):
    image = random_sif(tmp_path / "src" / "gan3d.sif")
    with open(image, "ab") as fh:
        fh.write(b"x")
    with pytest.raises(KitError, match=r"gan3d\.sif: does not match .*gan3d\.sif\.sha256"):
        bundle([image], tmp_path / "usb" / "b")
    assert not (tmp_path / "usb" / "b").exists()
