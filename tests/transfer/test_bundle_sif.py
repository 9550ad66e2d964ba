"""A SIF travels in a bundle like the other images: its .sha256 checked as it is copied, every
checker of the bundle verifying it on the medium (how they name a damaged file: test_bundle.py)."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from kit.errors import KitError
from kit.image import sif
from kit.transfer import bundle
from tests.support.transfer import checkers, write_sha256


def _sif(tmp_path, name: str = "gan3d.sif"):
    """A SIF by the kit's writer around random bytes (a bundle never looks inside), with its
    .sha256 and a pair file beside it."""
    part = tmp_path / "part"
    part.write_bytes(random.Random(5).randbytes(200_000))
    out = tmp_path / "src" / name
    out.parent.mkdir(exist_ok=True)
    with open(out, "wb") as fh:
        sif.write(
            fh,
            part,
            "0" * 64,
            definition=sif.definition_text(None),
            labels=b"{}",
            arch=sif.arch_code("amd64"),
            mtime=0,
        )
    write_sha256(out)
    (tmp_path / "src" / f"{name}.pair.yaml").write_text("verdict: compatible\n")
    return out


def test_a_sif_and_its_sidecars_are_bundled_and_verified(tmp_path, repo):
    image = _sif(tmp_path)
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
    image = _sif(tmp_path)
    with open(image, "ab") as fh:
        fh.write(b"x")
    with pytest.raises(KitError, match=r"gan3d\.sif does not match .*gan3d\.sif\.sha256"):
        bundle([image], tmp_path / "usb" / "b")
    assert not (tmp_path / "usb" / "b").exists()
