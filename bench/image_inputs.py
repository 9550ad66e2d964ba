"""Benchmark inputs for ``kit image convert``, built once and cached.

* ``debian_image()``: a ~250 MB docker-archive built with buildah from an mmdebstrap
  bookworm root filesystem, plus a layer that adds a 50 MB file and deletes docs
  (whiteouts) and a layer that deletes the 50 MB file again.
* ``big_image()``: a ~2 GB docker-archive of incompressible random data in 4 layers,
  written directly (generating it through buildah would take minutes), to show that memory
  does not grow with image size.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

CACHE = Path(os.environ.get("KIT_CACHE", Path.home() / ".cache/secure-site-kit")) / "bench-images"


def _run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def debian_image() -> Path:
    out = CACHE / "debian-bookworm-3layer.docker.tar"
    if out.exists():
        return out
    work = CACHE / "debian.build"
    shutil.rmtree(work, ignore_errors=True)
    (work / "ctx").mkdir(parents=True)
    _run(
        "mmdebstrap",
        "--variant=apt",
        "--include=python3,mpich",
        "bookworm",
        str(work / "ctx/rootfs.tar"),
    )
    (work / "ctx/Dockerfile").write_text(
        "FROM scratch\nADD rootfs.tar /\n"
        "RUN head -c 50000000 /dev/urandom > /big.bin && rm -rf /usr/share/doc /usr/share/man\n"
        "RUN rm /big.bin && echo converted > /etc/kit-bench\n"
        "ENV LANG=C.UTF-8\n"
    )
    store = [
        "--root",
        str(work / "storage"),
        "--runroot",
        str(work / "run"),
        "--storage-driver",
        "vfs",
    ]
    _run(
        "buildah",
        *store,
        "bud",
        "--isolation",
        "chroot",
        "--layers",
        "-t",
        "kit-bench:1",
        str(work / "ctx"),
    )
    tmp = out.with_suffix(".part")
    _run("buildah", *store, "push", "kit-bench:1", f"docker-archive:{tmp}:kit-bench:1")
    os.replace(tmp, out)
    subprocess.run(["buildah", *store, "rmi", "-a"], capture_output=True)
    shutil.rmtree(work, ignore_errors=True)
    return out


def big_image(layers: int = 4, layer_bytes: int = 512 << 20) -> Path:
    """A docker-archive of random data: uncompressed layer tars, digests in the config."""
    out = CACHE / f"random-{layers}x{layer_bytes >> 20}M.docker.tar"
    if out.exists():
        return out
    tmp = out.with_suffix(".part")
    diff_ids, names = [], []
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as outer:
        for i in range(layers):
            layer = CACHE / f"layer{i}.tar"
            with tarfile.open(layer, "w", format=tarfile.PAX_FORMAT) as tf:
                for j in range(layer_bytes // (64 << 20)):
                    info = tarfile.TarInfo(f"data/l{i}/f{j}.bin")
                    info.size = 64 << 20
                    tf.addfile(info, io.BytesIO(os.urandom(info.size)))
            h = hashlib.sha256()
            with open(layer, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    h.update(chunk)
            diff_ids.append("sha256:" + h.hexdigest())
            names.append(f"{h.hexdigest()}.tar")
            outer.add(layer, names[-1])
            layer.unlink()
        config = json.dumps(
            {
                "architecture": "amd64",
                "os": "linux",
                "config": {"Env": []},
                "rootfs": {"type": "layers", "diff_ids": diff_ids},
            }
        ).encode()
        cname = hashlib.sha256(config).hexdigest() + ".json"
        for name, data in (
            (cname, config),
            (
                "manifest.json",
                json.dumps([{"Config": cname, "RepoTags": ["random:1"], "Layers": names}]).encode(),
            ),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            outer.addfile(info, io.BytesIO(data))
    os.replace(tmp, out)
    return out
