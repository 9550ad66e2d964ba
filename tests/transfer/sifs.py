"""SIF files for the transfer tests: one by the kit's writer around random bytes (a transfer never
looks past the magic), and a genuine busybox SIF that a real Apptainer runs; each with its .sha256
(and the first with a pair file) beside it."""

from __future__ import annotations

import random
from pathlib import Path

from kit.image import convert, sif
from tests.support.transfer import busybox_image, write_sha256


def random_sif(out: Path, seed: int = 5) -> Path:
    """A well-formed SIF header and objects around 200 kB of random bytes, with .sha256 and
    .pair.yaml beside it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_name(out.name + ".part")
    part.write_bytes(random.Random(seed).randbytes(200_000))
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
    part.unlink()
    write_sha256(out)
    out.with_name(out.name + ".pair.yaml").write_text("verdict: compatible\n")
    return out


def busybox_sif(out: Path, label: bytes) -> Path:
    """`kit image convert` of the busybox tarball (tests/support/transfer.py) to OUT.sif: its
    /etc/kit-version holds ``label``; .sha256 and .manifest.json beside it."""
    src = busybox_image(out.parent / "src" / "bb.tar.gz", label)
    convert(src, out)
    return out
