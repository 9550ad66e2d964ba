"""Build small images from member lists in every input form the converter reads:
docker-archive (plain or gzip layers), OCI layout directory and OCI archive."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

from tests.image.builders import oci_layout

FORMS = ("docker", "docker-gzip", "oci-dir", "oci-dir-plain", "oci-archive")


def layer_tar(members: list[tuple], fmt: int = tarfile.GNU_FORMAT) -> bytes:
    """members: (name, kind, payload), kind f/d/l/h as in tests.image.refmodel."""
    buf = io.BytesIO()
    with tarfile.open(
        fileobj=buf, mode="w", format=fmt, encoding="utf-8", errors="surrogateescape"
    ) as tf:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            info.mode = 0o755 if kind == "d" else 0o644
            info.mtime = 1_700_000_000
            if kind == "d":
                info.type = tarfile.DIRTYPE
            elif kind in ("l", "h"):
                info.type = tarfile.SYMTYPE if kind == "l" else tarfile.LNKTYPE
                info.linkname = payload
            else:
                info.size = len(payload)
            tf.addfile(info, io.BytesIO(payload) if kind == "f" else None)
    return buf.getvalue()


def build(root: Path, form: str, tars: list[bytes]) -> Path:
    """The image whose uncompressed layers are TARS, in FORM, under ROOT."""
    if form.startswith("docker"):
        return docker_archive(root / "docker.tar", tars, gzip_layers=form == "docker-gzip")
    layout = oci_layout(root / "oci", tars, gzip_layers=form != "oci-dir-plain")
    if form != "oci-archive":
        return layout
    out = root / "oci.tar"
    with tarfile.open(out, "w") as tf:
        for path in sorted(layout.rglob("*")):
            tf.add(path, str(path.relative_to(layout)), recursive=False)
    return out


def docker_archive(out: Path, tars: list[bytes], gzip_layers: bool = False) -> Path:
    """What ``docker save`` writes: manifest.json, the config, one directory per layer."""
    out.parent.mkdir(parents=True, exist_ok=True)
    diff_ids = ["sha256:" + hashlib.sha256(t).hexdigest() for t in tars]
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Env": ["PATH=/bin"]},
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        }
    ).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    files = {config_name: config}
    names = []
    for n, tar in enumerate(tars):
        names.append(f"{n:03d}/layer.tar")
        files[names[-1]] = gzip.compress(tar, 1, mtime=0) if gzip_layers else tar
    files["manifest.json"] = json.dumps(
        [{"Config": config_name, "RepoTags": ["fuzz:1"], "Layers": names}]
    ).encode()
    with tarfile.open(out, "w") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1_700_000_000
            tf.addfile(info, io.BytesIO(data))
    return out
